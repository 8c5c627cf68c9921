# SPDX-License-Identifier: MIT
# The KV pool's two layouts (flag kv-pool-block-major): layer-major (a region per layer and
# buffer) and block-major (a block's buffers for all layers in one region). Both must hold the same
# bytes, so:
# 1. the pool, block, prefix-cache, tier and transfer unit tests (test_kv_prefix, test_kv_tier,
#    test_kv_xfer, test_kv_xfer_inflight) run in each layout (VERITY_KV_POOL_BLOCK_MAJOR=1, then 0;
#    test_kv_xfer also moves blocks between pools of different layouts), every case passing in both;
# 2. P1: `generate --logits-digest` of the same 64 prompts is byte-identical in both layouts, for
#    a dense llama model (K and V), deepseek2 (MLA's K-only latent cache), deepseek32 (that and
#    the DSA indexer's companion buffer) and deepseek4 (compressor state and index keys in the
#    blocks), batched and chunked, and under preemption through a small pool with the prefix cache
#    (blocks dropped, matched and recomputed). Under the sanitizer builds (VERITY_TEST_SCALE < 1) the llama model
#    and deepseek32 only, and the unit tests of 1. in the layer-major layout only.
. "$(dirname "$0")/lib.bash"

BUILD=${VERITY_BUILD:-$(dirname "$VERITY")}
# under the sanitizer builds the unit tests in the layer-major layout only: each binary's own area
# of the suite runs them in the default (block-major) one
layouts="1 0"
awk -v s="${VERITY_TEST_SCALE:-1}" 'BEGIN { exit !(s < 1) }' && layouts="0"
for t in test_kv_prefix test_kv_tier test_kv_xfer test_kv_xfer_inflight; do
    for bm in $layouts; do
        name=kv_layout.$t.$([ $bm = 1 ] && echo block_major || echo layer_major)
        if [ ! -x "$BUILD/tests/$t" ]; then fail "$name" "$BUILD/tests/$t not built"; continue; fi
        VERITY_KV_POOL_BLOCK_MAJOR=$bm "$BUILD/tests/$t" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        n_pass=$(grep -c '^PASS ' "$TMP/out")
        bad=$(grep '^FAIL ' "$TMP/out" | head -3 | tr '\n' ' ')
        if [ $rc -eq 0 ] && [ -z "$bad" ] && [ "$n_pass" -gt 0 ]; then pass "$name($n_pass cases)"
        else fail "$name" "exit $rc, $n_pass passed; ${bad:-$(tail -3 "$TMP/err" | tr '\n' ' ')}"; fi
    done
done

# invariance.sh's 64 prompts (lengths 1..60 words, every fourth greedy): they preempt in these pools
awk -v n=64 'BEGIN { srand(1234); split("the a little girl dog ran over hill sky blue green Zürich 東京 😀 said and then it was happy sad big small red ball tree", w, " ");
    for (i = 0; i < n; i++) { len = 1 + int(rand() * 60); p = "";
        for (j = 0; j < len; j++) p = p (j ? " " : "") w[1 + int(rand() * 27)];
        t = (i % 4 == 0) ? 0 : 0.9;
        printf("{\"prompt\":\"%s\",\"n\":%d,\"seed\":%d,\"temperature\":%s,\"top_k\":%d}\n", p, 4 + int(rand() * 20), i, t, (i % 3) * 5) } }' >"$TMP/prompts.jsonl"
models="f32:llama:1 q8_0:deepseek2:1 q8_0:deepseek32:1 q8_0:deepseek4:2" # type:arch:MiB that preempts
awk -v s="${VERITY_TEST_SCALE:-1}" 'BEGIN { exit !(s < 1) }' && models="f32:llama:1 q8_0:deepseek32:1"
for m in $models; do
    IFS=: read -r type arch mib <<<"$m"
    name=kv_layout.p1_$arch
    if ! "$VERITY" synth --shape tiny --arch "$arch" --type "$type" --seed 11 -o "$TMP/$arch.gguf" 2>"$TMP/err"; then
        fail "$name" "synth failed: $(head -c 300 "$TMP/err")"; continue
    fi
    bad=""
    # batched and chunked; then a pool too small for the batch (preemption, prefix-cache hits)
    for run in "--max-batch 64 --chunk 16 -t 2" "--max-batch 64 --chunk 512 -t 2 --kv-mem $mib --prefix-cache 1"; do
        for bm in 1 0; do
            # shellcheck disable=SC2086
            "$VERITY" generate -m "$TMP/$arch.gguf" --prompts "$TMP/prompts.jsonl" $run --logits-digest \
                --kv-pool-block-major $bm >"$TMP/out.$bm" 2>"$TMP/err.$bm"
            [ "$(grep -c '' "$TMP/out.$bm")" -eq 64 ] || bad="$bad [$run, block-major $bm: run failed: $(head -c 200 "$TMP/err.$bm")]"
        done
        cmp -s "$TMP/out.1" "$TMP/out.0" || bad="$bad [$run: output differs between the layouts]"
    done
    pre=$(sed -n 's/.* \([0-9]*\) preemptions.*/\1/p' "$TMP/err.0")
    [ "${pre:-0}" -gt 0 ] || bad="$bad (no preemption happened: $(tail -1 "$TMP/err.0"))"
    if [ -z "$bad" ]; then pass "$name(2 configurations, $pre preemptions)"
    else fail "$name" "$bad"; fi
done
