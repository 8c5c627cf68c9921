# SPDX-License-Identifier: MIT
# generate: the stories260K reference text, from the shipped GGUF, from our own conversion and
# from the embedded default model; generate's stdout is valid UTF-8 even when the model emits
# broken byte sequences.
. "$(dirname "$0")/lib.bash"

# The reference continuation, read from ../shared/models/README.md: the fenced block after
# "Reference output" (the text ends without a newline; command substitution drops it).
REF=""
if need_shared generate.reference_text models/README.md; then
    REF=$(awk '/^Reference output/ {f=1; next} f && /^```/ {if (in_block) exit; in_block=1; next} in_block {print}' "$SHARED/models/README.md")
    case "$REF" in
        ", there was a little girl"*) pass generate.reference_text ;;
        *) fail generate.reference_text "could not read the reference from $SHARED/models/README.md: $(printf '%q' "$REF")" ;;
    esac
fi

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

# the embedded default model (stories260K, no -m) continues the reference prompt with the
# reference text
if [ -n "$REF" ]; then
    out=$(env -u MODEL "$VERITY" generate -p "Once upon a time" -n 64 --temp 0 2>"$TMP/err")
    if [ "$out" == "$REF" ]; then pass generate.default_model_reference
    else fail generate.default_model_reference "got: $(printf '%q' "$out") $(head -c 300 "$TMP/err")"; fi
fi

# the embedded default model samples deterministically for a seed
if env -u MODEL "$VERITY" generate -p "Hello" -n 8 --seed 3 >"$TMP/a" 2>"$TMP/err" && env -u MODEL "$VERITY" generate -p "Hello" -n 8 --seed 3 >"$TMP/b" 2>>"$TMP/err" && cmp -s "$TMP/a" "$TMP/b"; then
    pass generate.default_model_deterministic
else
    fail generate.default_model_deterministic "$(head -c 300 "$TMP/err")"
fi

# stdout is valid UTF-8 although the synthetic model's random tokens include lone bytes of
# multi-byte characters: the output must show U+FFFD (so the case is reached) and decode strictly
if "$VERITY" synth --shape tiny --type f32 --seed 1 -o "$TMP/tiny.gguf" 2>"$TMP/err"; then
    "$VERITY" generate -m "$TMP/tiny.gguf" -p "Hello" -n 200 --seed 1 >"$TMP/u8" 2>"$TMP/err"
    rc=$?
    if [ $rc -ne 0 ]; then fail generate.utf8_stdout "exit $rc: $(head -c 300 "$TMP/err")"
    elif ! python3 -c 'import sys; sys.stdin.buffer.read().decode("utf-8", "strict")' <"$TMP/u8" 2>"$TMP/py"; then
        fail generate.utf8_stdout "stdout is not valid UTF-8: $(tail -n 1 "$TMP/py")"
    elif ! grep -q $'\xef\xbf\xbd' "$TMP/u8"; then
        fail generate.utf8_stdout "no U+FFFD in the output: the prompt no longer reaches broken byte sequences"
    else
        pass generate.utf8_stdout
    fi
else
    fail generate.utf8_stdout "synth failed: $(head -c 300 "$TMP/err")"
fi
# deepseek32 (DSA): inspect shows the indexer, and generate runs it (30 tokens from a 20-word
# prompt: the indexer's top 8 selects from the ninth position on), the same text with 1 and 2
# threads
if "$VERITY" synth --shape tiny --arch deepseek32 --type f32 --seed 4 -o "$TMP/ds32.gguf" 2>"$TMP/err"; then
    want="sparse attention (DSA indexer): 4 heads of 32 (rope 16, neox pairs), top 8 keys per query"
    if "$VERITY" inspect "$TMP/ds32.gguf" | grep -qF "$want"; then pass generate.deepseek32_inspect
    else fail generate.deepseek32_inspect "no line '$want' in: $("$VERITY" inspect "$TMP/ds32.gguf" | grep -v '^  blk' | tail -6)"; fi
    p="the little dog ran over the hill and the sky was blue and green and then it was happy and sad"
    "$VERITY" generate -m "$TMP/ds32.gguf" -p "$p" -n 30 --temp 0 -t 1 >"$TMP/ds1" 2>"$TMP/err" &&
        "$VERITY" generate -m "$TMP/ds32.gguf" -p "$p" -n 30 --temp 0 -t 2 >"$TMP/ds2" 2>>"$TMP/err"
    rc=$?
    if [ $rc -ne 0 ]; then fail generate.deepseek32 "exit $rc: $(head -c 300 "$TMP/err")"
    elif [ ! -s "$TMP/ds1" ] || ! cmp -s "$TMP/ds1" "$TMP/ds2"; then fail generate.deepseek32 "empty, or 1 and 2 threads differ"
    else pass generate.deepseek32; fi
else
    fail generate.deepseek32 "synth failed: $(head -c 300 "$TMP/err")"
fi
