# SPDX-License-Identifier: MIT
# P3 at the command line: bad input gives exit code 2, one line on stderr, no partial output.
. "$(dirname "$0")/lib.bash"

expect_exit2 bad.unknown_command "$VERITY" frobnicate
expect_exit2 bad.unknown_option "$VERITY" generate --frobnicate 1
expect_exit2 bad.unknown_flag_value "$VERITY" flags --kv-dtype q9
expect_exit2 bad.missing_model_file "$VERITY" generate -m "$TMP/nope.gguf" -p hi
printf 'GGUF\3\0\0\0' >"$TMP/trunc.gguf"
expect_exit2 bad.truncated_gguf "$VERITY" generate -m "$TMP/trunc.gguf" -p hi
expect_exit2 bad.truncated_gguf_inspect "$VERITY" inspect "$TMP/trunc.gguf"
head -c 1000 /dev/urandom >"$TMP/garbage.gguf"
expect_exit2 bad.garbage_file "$VERITY" inspect "$TMP/garbage.gguf"
if need_shared bad.truncated_real_model models/stories260K.gguf; then
    head -c 500000 "$SHARED/models/stories260K.gguf" >"$TMP/cut.gguf"
    expect_exit2 bad.truncated_real_model "$VERITY" generate -m "$TMP/cut.gguf" -p hi
    # prompt longer than the shipped model's 128-token context
    long=$(printf 'and the dog ran %.0s' $(seq 1 100))
    expect_exit2 bad.prompt_longer_than_context "$VERITY" generate -m "$SHARED/models/stories260K.gguf" -p "$long" -n 4
fi
"$VERITY" synth --shape tiny --type f32 --seed 1 -o "$TMP/t.gguf" 2>/dev/null
expect_exit2 bad.unsupported_type_synth "$VERITY" synth --shape tiny --type q2_K -o "$TMP/x.gguf"
expect_exit2 bad.unknown_shape "$VERITY" synth --shape huge -o "$TMP/y.gguf"
# the command's name once, then the message: "verity synth: unknown shape 'huge' ..."
err=$("$VERITY" synth --shape huge -o "$TMP/y.gguf" 2>&1)
case "$err" in "verity synth: unknown shape 'huge'"*) pass bad.synth_message_prefix_once ;;
    *) fail bad.synth_message_prefix_once "stderr: $err" ;; esac
# serve on a file that is not a model: one line (the error), exit 2, nothing left listening
printf 'not a model at all' >"$TMP/notgguf.gguf"
expect_exit2 bad.serve_not_a_model timeout 60 "$VERITY" serve --port 0 -m "$TMP/notgguf.gguf"
if [ -e "$TMP/x.gguf" ] || [ -e "$TMP/y.gguf" ] || ls "$TMP" | grep -q '\.tmp\.'; then fail bad.no_partial_output "an output file was left behind"
else pass bad.no_partial_output; fi
printf '{"prompt":"ok","n":2}\n{"prompt":3}\n' >"$TMP/bad.jsonl"
expect_exit2 bad.jsonl_wrong_type "$VERITY" generate -m "$TMP/t.gguf" --prompts "$TMP/bad.jsonl"
printf '{"prompt":"ok","n":2}\n{"prompt":"x",\n' >"$TMP/bad2.jsonl"
expect_exit2 bad.jsonl_malformed "$VERITY" generate -m "$TMP/t.gguf" --prompts "$TMP/bad2.jsonl"
expect_exit2 bad.convert_bad_model "$VERITY" convert llama2c --model "$TMP/garbage.gguf" --tokenizer "$TMP/garbage.gguf" -o "$TMP/z.gguf"
[ -e "$TMP/z.gguf" ] && fail bad.convert_no_output "output written" || pass bad.convert_no_output
# every command answers --help with its usage on stdout and exit 0
bad_help=""
for c in serve generate tokenize bench synth convert quantize chat-template inspect flags hunt bisect; do
    out=$("$VERITY" "$c" --help 2>/dev/null) && grep -q "usage: verity $c" <<<"$out" || bad_help="$bad_help $c"
done
[ -z "$bad_help" ] && pass bad.help_every_command || fail bad.help_every_command "no usage from:$bad_help"
# expect_bad NAME MODEL WHAT: generate on MODEL exits 2 with one line on stderr naming WHAT
expect_bad() {
    local err rc
    err=$("$VERITY" generate -m "$2" -p hi -n 1 2>&1 >/dev/null)
    rc=$?
    if [ $rc -ne 2 ]; then fail "$1" "exit code $rc, expected 2: $err"
    elif [ "$(printf '%s' "$err" | grep -c '')" -ne 1 ]; then fail "$1" "not one line: $err"
    elif ! grep -qF "$3" <<<"$err"; then fail "$1" "does not name $3: $err"
    else pass "$1"; fi
}
# a mixture-of-experts file with a missing expert tensor (its name changed in the header) or a
# misshapen one (4 experts where the file says 8): one line naming the tensor, exit 2
if "$VERITY" synth --shape tiny --arch qwen3moe --type q8_0 --seed 1 -o "$TMP/moe.gguf" 2>"$TMP/err"; then
    perl -0777 -pe 's/blk\.1\.ffn_up_exps\.weight/blk.1.ffn_up_exps.weighx/' "$TMP/moe.gguf" >"$TMP/moe-missing.gguf"
    python3 - "$TMP/moe.gguf" "$TMP/moe-shape.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
name = b'blk.0.ffn_down_exps.weight'
i = b.index(struct.pack('<Q', len(name)) + name) + 8 + len(name)
assert struct.unpack_from('<I', b, i)[0] == 3
struct.pack_into('<Q', b, i + 4 + 16, 4)  # ne[2]: 8 experts -> 4
open(sys.argv[2], 'wb').write(b)
PY
    for c in missing:blk.1.ffn_up_exps.weight shape:blk.0.ffn_down_exps.weight; do
        kind=${c%%:*} tensor=${c#*:}
        expect_bad "bad.moe_${kind}_expert_tensor" "$TMP/moe-$kind.gguf" "'$tensor'"
    done
else
    fail bad.moe_expert_tensor "synth failed: $(cat "$TMP/err")"
fi
# a deepseek2 file naming an unknown expert gating function (7): one line naming it, exit 2
if "$VERITY" synth --shape tiny --arch deepseek2 --type q8_0 --seed 1 -o "$TMP/ds2.gguf" 2>"$TMP/err"; then
    python3 - "$TMP/ds2.gguf" "$TMP/ds2-gating.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
key = b'deepseek2.expert_gating_func'
i = b.index(struct.pack('<Q', len(key)) + key) + 8 + len(key)
assert struct.unpack_from('<I', b, i)[0] == 4  # GGUF uint32
struct.pack_into('<I', b, i + 4, 7)
open(sys.argv[2], 'wb').write(b)
PY
    expect_bad bad.unknown_gating_function "$TMP/ds2-gating.gguf" "expert_gating_func 7"
else
    fail bad.unknown_gating_function "synth failed: $(cat "$TMP/err")"
fi
# a deepseek32 file whose indexer head size the kernel does not take (40: not a multiple of 16),
# one with an indexer tensor missing (its name changed in the header), one with an indexer
# tensor misshapen (8 heads of weights where the file says 4): one line naming it, exit 2
if "$VERITY" synth --shape tiny --arch deepseek32 --type q8_0 --seed 1 -o "$TMP/ds32.gguf" 2>"$TMP/err"; then
    perl -0777 -pe 's/blk\.1\.indexer\.attn_k\.weight/blk.1.indexer.attn_k.weighx/' "$TMP/ds32.gguf" >"$TMP/ds32-missing.gguf"
    python3 - "$TMP/ds32.gguf" "$TMP/ds32-headsize.gguf" "$TMP/ds32-shape.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
key = b'deepseek32.attention.indexer.key_length'
i = b.index(struct.pack('<Q', len(key)) + key) + 8 + len(key)
assert struct.unpack_from('<I', b, i)[0] == 4  # GGUF uint32
c = bytearray(b)
struct.pack_into('<I', c, i + 4, 40)
open(sys.argv[2], 'wb').write(c)
name = b'blk.0.indexer.proj.weight'
i = b.index(struct.pack('<Q', len(name)) + name) + 8 + len(name)
assert struct.unpack_from('<I', b, i)[0] == 2
struct.pack_into('<Q', b, i + 4 + 8, 8)  # ne[1]: 4 heads -> 8
open(sys.argv[3], 'wb').write(b)
PY
    for c in headsize:indexer.key_length missing:blk.1.indexer.attn_k.weight shape:blk.0.indexer.proj.weight; do
        kind=${c%%:*} what=${c#*:}
        expect_bad "bad.dsa_indexer_$kind" "$TMP/ds32-$kind.gguf" "$what"
    done
else
    fail bad.dsa_indexer "synth failed: $(cat "$TMP/err")"
fi
# deepseek4 files: a compressor tensor missing, the sinks misshapen (8 heads where the file says
# 4), a hash table naming an expert the layer lacks, an unknown gating function (7), a
# compression ratio the architecture lacks (5), an odd indexer head size: one line naming it,
# exit 2
if "$VERITY" synth --shape tiny --arch deepseek4 --type q8_0 --seed 1 -o "$TMP/ds4.gguf" 2>"$TMP/err"; then
    perl -0777 -pe 's/blk\.1\.attn_compressor_kv\.weight/blk.1.attn_compressor_kv.weighx/' "$TMP/ds4.gguf" >"$TMP/ds4-missing.gguf"
    python3 - "$TMP/ds4.gguf" "$TMP" <<'PY'
import struct, sys
src, tmp = sys.argv[1], sys.argv[2]
b = bytes(open(src, 'rb').read())
def key_at(b, key):
    return b.index(struct.pack('<Q', len(key)) + key) + 8 + len(key)
def put(name, edit):
    c = bytearray(b); edit(c); open(f'{tmp}/ds4-{name}.gguf', 'wb').write(c)
def u32(key, v):
    def e(c):
        i = key_at(c, key)
        assert struct.unpack_from('<I', c, i)[0] == 4  # GGUF uint32
        struct.pack_into('<I', c, i + 4, v)
    return e
def sinks(c):
    i = key_at(c, b'blk.0.attn_sinks.weight')
    assert struct.unpack_from('<I', c, i)[0] == 1
    struct.pack_into('<Q', c, i + 4, 8)
def ratio(c):
    i = key_at(c, b'deepseek4.attention.compress_ratios')
    assert struct.unpack_from('<IIQ', c, i) == (9, 5, 4)  # an array of 4 int32
    struct.pack_into('<i', c, i + 16 + 4, 5)  # layer 1: 4 -> 5
def hashtab(c):
    # the tid2eid table's first entry becomes expert 99: its offset from the tensor info, the
    # data section after the infos (alignment 32)
    i = key_at(c, b'blk.0.ffn_gate_tid2eid.weight')
    nd = struct.unpack_from('<I', c, i)[0]
    off = struct.unpack_from('<Q', c, i + 4 + 8 * nd + 4)[0]
    align = 32
    j = 24
    n_t, n_kv = struct.unpack_from('<QQ', c, 8)
    def skip_val(j, t):
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if t == 8:
            n = struct.unpack_from('<Q', c, j)[0]; return j + 8 + n
        if t == 9:
            at, n = struct.unpack_from('<IQ', c, j); j += 12
            for _ in range(n): j = skip_val(j, at)
            return j
        return j + sizes[t]
    for _ in range(n_kv):
        n = struct.unpack_from('<Q', c, j)[0]; j += 8 + n
        t = struct.unpack_from('<I', c, j)[0]; j = skip_val(j + 4, t)
    for _ in range(n_t):
        n = struct.unpack_from('<Q', c, j)[0]; j += 8 + n
        nd2 = struct.unpack_from('<I', c, j)[0]; j += 4 + 8 * nd2 + 4 + 8
    base = (j + align - 1) // align * align
    struct.pack_into('<i', c, base + off, 99)
put('gating', u32(b'deepseek4.expert_gating_func', 7))
put('headsize', u32(b'deepseek4.attention.indexer.key_length', 33))
put('shape', sinks)
put('ratio', ratio)
put('hash', hashtab)
PY
    for c in missing:"blk.1.attn_compressor_kv.weight" shape:"blk.0.attn_sinks.weight" \
        hash:"blk.0.ffn_gate_tid2eid.weight" gating:"expert_gating_func 7" \
        ratio:"compress_ratios[1] = 5" headsize:"indexer.key_length 33"; do
        kind=${c%%:*} what=${c#*:}
        expect_bad "bad.deepseek4_$kind" "$TMP/ds4-$kind.gguf" "$what"
    done
else
    fail bad.deepseek4 "synth failed: $(cat "$TMP/err")"
fi
