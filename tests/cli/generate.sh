# SPDX-License-Identifier: MIT
# generate: the stories260K reference text, from the shipped GGUF and from our own conversion.
. "$(dirname "$0")/lib.bash"

REF=$', there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily\'s mom said'

if need_shared generate.stories260K_reference models/stories260K.gguf; then
    out=$("$VERITY" generate -m "$SHARED/models/stories260K.gguf" -p "Once upon a time" -n 64 --temp 0 2>"$TMP/err")
    if [ "$out" == "$REF" ]; then pass generate.stories260K_reference
    else fail generate.stories260K_reference "got: $(printf '%q' "$out") $(head -c 300 "$TMP/err")"; fi
fi

if need_shared generate.stories260K_converted models/stories260K.bin && need_shared generate.stories260K_converted models/tok512.bin; then
    if "$VERITY" convert llama2c --model "$SHARED/models/stories260K.bin" --tokenizer "$SHARED/models/tok512.bin" -o "$TMP/conv.gguf" 2>"$TMP/err"; then
        out=$("$VERITY" generate -m "$TMP/conv.gguf" -p "Once upon a time" -n 64 --temp 0 2>>"$TMP/err")
        if [ "$out" == "$REF" ]; then pass generate.stories260K_converted
        else fail generate.stories260K_converted "got: $(printf '%q' "$out")"; fi
    else
        fail generate.stories260K_converted "convert failed: $(cat "$TMP/err")"
    fi
fi

# the embedded default model runs end to end (noise text, but every mechanism)
if "$VERITY" generate -p "Hello" -n 8 --seed 3 >"$TMP/a" 2>"$TMP/err" && "$VERITY" generate -p "Hello" -n 8 --seed 3 >"$TMP/b" 2>>"$TMP/err" && cmp -s "$TMP/a" "$TMP/b"; then
    pass generate.default_model_deterministic
else
    fail generate.default_model_deterministic "$(head -c 300 "$TMP/err")"
fi
