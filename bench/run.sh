#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make bench`: every benchmark of BENCHMARKS.md in one run, in its order: engine roofline
# fractions for F16, Q8_0, Q4_K_M and Q6_K at batch 1 and 32 (prefill 256, 64 decode steps),
# the matmul micro-benchmark, the serving benchmark, the router benchmark, the KV cache benchmark,
# the speculative decoding benchmark and the hunt benchmark.
# About 70 minutes on a 2-core machine (40 of them bench/spec.sh); the synthetic models are made
# once into ~/.cache/verity/
# (1.8 GB).
set -u
cd "$(dirname "$0")/.." || exit 2
V=build/release/verity
[ -x "$V" ] || { echo "bench/run.sh: $V not built (make)" >&2; exit 2; }
for t in f16 q8_0 q4_k_m q6_k; do
    echo "== verity bench --type $t --batch 1,32 --prompt 256 --gen 64"
    $V bench --type "$t" --batch 1,32 --prompt 256 --gen 64 || exit 2
done
echo "== bench/bench_matmul.c (matrices beyond the L3: BM_MATS=60 BM_M1=1)"
cc -O2 -Isrc bench/bench_matmul.c build/release/libverity.a -lm -pthread -o build/release/bench_matmul ||
    exit 2
build/release/bench_matmul 2 f16 && BM_05B=1 build/release/bench_matmul 2 f16 &&
    BM_MATS=60 BM_M1=1 build/release/bench_matmul 2 f16 &&
    BM_MATS=60 BM_M1=1 build/release/bench_matmul 2 q8_0 || exit 2
echo "== bench/serve.sh"
bench/serve.sh || exit 2
echo "== bench/router.sh"
bench/router.sh || exit 2
echo "== bench/kv_cache.sh"
bench/kv_cache.sh || exit 2
echo "== bench/spec.sh"
bench/spec.sh || exit 2
echo "== bench/hunt.sh"
bench/hunt.sh
