# SPDX-License-Identifier: MIT
# P1 at the engine level: 64 prompts (greedy and sampled, random lengths) through
# `generate --prompts`, over batch sizes {1,2,7,32,64}, prefill chunks {1,16,512} and threads
# {1,2}: the output (tokens, text and a digest of every logits row a token was drawn from) must be
# byte-identical to the batch-1/chunk-512/1-thread run, the reference, which is not itself among
# the compared configurations (comparing it with itself proves nothing).
# Configurations: the f32 and q8_0 llama models run a pairwise design, every (batch, chunk) pair
# once with the thread count alternating so that every batch size and every chunk also meets both
# thread counts (15 runs; the full 5 x 3 x 2 product adds no pair it does not already cover).
# Every other model runs 6 configurations that still meet each batch size, chunk and thread count:
# what differs there is the architecture, not the scheduler. Under the sanitizer builds a reduced
# set of 3 runs on the synthetic models only (VERITY_TEST_SCALE < 1).
. "$(dirname "$0")/lib.bash"

# f32 and q8_0 llama models, a Qwen3 Q4_K_M-style file made the way users make them (synth (F32)
# then quantize), mixture-of-experts models: synthetic qwen3moe, deepseek2 (MLA) and deepseek32
# (MLA with the DSA indexer) of Q8_0 weights and the reference qwen3moe, deepseek2 and deepseek32
# files of ../shared/models/arch (skipped without them). deepseek32 also runs each index-kv-dtype.
"$VERITY" synth --shape small --arch qwen3 --type f32 --seed 11 -o "$TMP/qwen3-f32.gguf" 2>"$TMP/err" &&
    "$VERITY" quantize "$TMP/qwen3-f32.gguf" "$TMP/tiny-qwen3_q4_k_m.gguf" q4_k_m 2>>"$TMP/err" ||
    fail invariance.qwen3_q4_k_m "synth/quantize failed: $(cat "$TMP/err")"
types="f32 q8_0 qwen3_q4_k_m"
for arch in qwen3moe deepseek2 deepseek32; do
    if "$VERITY" synth --shape tiny --arch $arch --type q8_0 --seed 11 -o "$TMP/tiny-${arch}_q8_0.gguf" 2>"$TMP/err"; then
        types="$types ${arch}_q8_0"
    else
        fail "invariance.${arch}_q8_0" "synth failed: $(cat "$TMP/err")"
    fi
    # the reference files run in the release build only: under a sanitizer the synthetic model of
    # the same architecture goes through the same code
    awk -v s="${VERITY_TEST_SCALE:-1}" 'BEGIN { exit !(s < 1) }' && continue
    if need_shared "invariance.${arch}_reference" "models/arch/$arch.gguf"; then
        ln -s "$(cd "$SHARED/models/arch" && pwd)/$arch.gguf" "$TMP/tiny-${arch}_reference.gguf"
        types="$types ${arch}_reference"
    fi
done
for type in $types; do
    model="$TMP/tiny-$type.gguf"
    if [ ! -e "$model" ] && ! "$VERITY" synth --shape tiny --type "$type" --seed 11 -o "$model" 2>"$TMP/err"; then
        fail "invariance.$type" "synth failed: $(cat "$TMP/err")"; continue
    fi
    # 64 prompts from a fixed generator: lengths 1..60 words, every fourth greedy
    awk -v n=64 'BEGIN { srand(1234); split("the a little girl dog ran over hill sky blue green Zürich 東京 😀 said and then it was happy sad big small red ball tree", w, " ");
        for (i = 0; i < n; i++) { len = 1 + int(rand() * 60); p = "";
            for (j = 0; j < len; j++) p = p (j ? " " : "") w[1 + int(rand() * 27)];
            t = (i % 4 == 0) ? 0 : 0.9;
            printf("{\"prompt\":\"%s\",\"n\":%d,\"seed\":%d,\"temperature\":%s,\"top_k\":%d}\n", p, 4 + int(rand() * 20), i, t, (i % 3) * 5) } }' > "$TMP/prompts.jsonl"
    scale=${VERITY_TEST_SCALE:-1}
    if awk -v s="$scale" 'BEGIN { exit !(s < 1) }'; then
        combos="1:16:2 7:16:2 64:1:2"
    elif [ "$type" = f32 ] || [ "$type" = q8_0 ]; then
        # pairwise: thread count 1 + (batch index + chunk index + 1) mod 2, so (1, 512) gets 2
        # threads and is never the reference configuration
        combos="" bi=0
        for b in 1 2 7 32 64; do
            ci=0
            for c in 1 16 512; do combos="$combos $b:$c:$((1 + (bi + ci + 1) % 2))"; ci=$((ci + 1)); done
            bi=$((bi + 1))
        done
    else
        combos="1:16:2 2:1:1 7:16:2 32:512:1 64:1:2 64:16:1"
    fi
    "$VERITY" generate -m "$model" --prompts "$TMP/prompts.jsonl" --max-batch 1 --chunk 512 -t 1 --logits-digest >"$TMP/gold" 2>"$TMP/err"
    if [ $? -ne 0 ] || [ "$(grep -c '' "$TMP/gold")" -ne 64 ]; then
        fail "invariance.$type" "reference run failed: $(head -c 300 "$TMP/err")"; continue
    fi
    bad=""
    for combo in $combos; do
        IFS=: read -r b c t <<<"$combo"
        "$VERITY" generate -m "$model" --prompts "$TMP/prompts.jsonl" --max-batch "$b" --chunk "$c" -t "$t" --logits-digest >"$TMP/out" 2>"$TMP/err"
        if ! cmp -s "$TMP/gold" "$TMP/out"; then bad="$bad batch=$b,chunk=$c,threads=$t"; fi
    done
    case $type in # mixture of experts: each slot's experts one row at a time (moe-group 0)
        qwen3moe* | deepseek2* | deepseek32*)
            "$VERITY" generate -m "$model" --prompts "$TMP/prompts.jsonl" --max-batch 64 --chunk 16 -t 2 --moe-group 0 --logits-digest >"$TMP/out" 2>"$TMP/err"
            cmp -s "$TMP/gold" "$TMP/out" || bad="$bad batch=64,chunk=16,threads=2,moe-group=0" ;;
    esac
    case $type in # the indexer's key types: each its own batch-1 reference, then batched/chunked
        deepseek32*)
            iks="f32 f16 bf16 fp8" ik_combos="64:16:2"
            if awk -v s="$scale" 'BEGIN { exit !(s < 1) }'; then iks="bf16 fp8" ik_combos="64:16:2"; fi
            for ik in $iks; do
                "$VERITY" generate -m "$model" --prompts "$TMP/prompts.jsonl" --max-batch 1 --chunk 512 -t 1 --index-kv-dtype $ik --logits-digest >"$TMP/gold-ik" 2>"$TMP/err"
                for combo in $ik_combos; do
                    IFS=: read -r b c t <<<"$combo"
                    "$VERITY" generate -m "$model" --prompts "$TMP/prompts.jsonl" --max-batch "$b" --chunk "$c" -t "$t" --index-kv-dtype $ik --logits-digest >"$TMP/out" 2>"$TMP/err"
                    cmp -s "$TMP/gold-ik" "$TMP/out" || bad="$bad index-kv-dtype=$ik,batch=$b,chunk=$c,threads=$t"
                done
                [ "$(grep -c '' "$TMP/gold-ik")" -eq 64 ] || bad="$bad index-kv-dtype=$ik(reference run failed)"
            done ;;
    esac
    if [ -z "$bad" ]; then pass "invariance.$type($(echo $combos | wc -w) configurations)"
    else fail "invariance.$type" "output differs for:$bad"; fi
    # a 1 MiB KV pool (256 blocks of this model) cannot hold 64 sequences: the engine must preempt
    # and recompute (with the prefix cache, a preempted sequence may find its blocks still cached;
    # without it, it recomputes them all), and the bytes must not change
    for pc in 1 0; do
        "$VERITY" generate -m "$model" --prompts "$TMP/prompts.jsonl" --max-batch 64 --chunk 512 -t 2 --kv-mem 1 --prefix-cache $pc --logits-digest >"$TMP/out" 2>"$TMP/err"
        pre=$(sed -n 's/.* \([0-9]*\) preemptions.*/\1/p' "$TMP/err")
        name=invariance.$type.preemption; [ $pc = 0 ] && name=$name.no_prefix_cache
        if ! cmp -s "$TMP/gold" "$TMP/out"; then fail "$name" "output differs under preemption"
        elif [ "${pre:-0}" -eq 0 ]; then fail "$name" "no preemption happened: $(tail -1 "$TMP/err")"
        else pass "$name($pre preemptions)"; fi
    done
done
# deepseek4 (compressed attention at ratios 0/4/128/4 with its indexer, sliding window, sinks,
# hyper-connections, hash routing; the compressor state and index keys live in the KV blocks):
# one synthetic Q8_0 model against its batch-1 run: batched, chunked and threaded, moe-group 0,
# bf16 index keys, and preemption through a 2 MiB pool (26 blocks of this model) with the prefix
# cache
if "$VERITY" synth --shape tiny --arch deepseek4 --type q8_0 --seed 11 -o "$TMP/ds4.gguf" 2>"$TMP/err"; then
    ds4() { "$VERITY" generate -m "$TMP/ds4.gguf" --prompts "$TMP/prompts.jsonl" --logits-digest "$@" 2>"$TMP/err"; }
    ds4 --max-batch 1 --chunk 512 -t 1 >"$TMP/gold"
    ds4 --max-batch 1 --chunk 512 -t 1 --index-kv-dtype bf16 >"$TMP/gold-ik"
    bad=""
    [ "$(grep -c '' "$TMP/gold")" -eq 64 ] || bad=" (reference run failed: $(head -c 200 "$TMP/err"))"
    for combo in 64:16:2 7:1:2 32:512:2 64:16:2:--moe-group:0 64:16:2:--index-kv-dtype:bf16; do
        IFS=: read -r b c t o v <<<"$combo"
        ds4 --max-batch "$b" --chunk "$c" -t "$t" ${o:+"$o" "$v"} >"$TMP/out"
        want="$TMP/gold"; [ "${o:-}" = --index-kv-dtype ] && want="$TMP/gold-ik"
        cmp -s "$want" "$TMP/out" || bad="$bad $combo"
    done
    ds4 --max-batch 64 --chunk 512 -t 2 --kv-mem 2 --prefix-cache 1 >"$TMP/out"
    pre=$(sed -n 's/.* \([0-9]*\) preemptions.*/\1/p' "$TMP/err")
    cmp -s "$TMP/gold" "$TMP/out" || bad="$bad preemption"
    [ "${pre:-0}" -gt 0 ] || bad="$bad (no preemption happened)"
    if [ -z "$bad" ]; then pass "invariance.deepseek4_q8_0(6 configurations, $pre preemptions)"
    else fail invariance.deepseek4_q8_0 "output differs for:$bad"; fi
else
    fail invariance.deepseek4_q8_0 "synth failed: $(cat "$TMP/err")"
fi
