#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A/B of two revisions' forward pass on this machine: builds each revision's release library in a
# temporary git worktree, links bench/bench_step.c (this checkout's) against each, and runs the
# two alternately ROUNDS times, so both see the same moments of a noisy shared machine; prints
# every run, then each side's median over the rounds and the ratio B/A.
# Usage: bench/ab.sh REV_A REV_B [prefill|decode] [BATCH] [PROMPT] [REPS] [ROUNDS] [MODEL.gguf]
#   defaults: prefill, batch 1, prompt 256, 7 repetitions per run, 4 rounds; without MODEL the
#   synthetic 0.5b F16 model `verity bench` caches. REV "." is the working tree as it stands.
# BS_CPU=1 times by the processes' CPU time (bench/bench_step.c): what a busy neighbour takes
# away from a thread is not counted, so the ratio moves far less from run to run.
# AB_ENV_A / AB_ENV_B: environment assignments (VAR=value, space-separated) for side A / B's runs
# only: with REV_A = REV_B = "." this is an A/B of a toggle in one build, e.g.
#   AB_ENV_A=VERITY_MM_DIRECT_ROWS=32 AB_ENV_B=VERITY_MM_DIRECT_ROWS=12 bench/ab.sh . . decode 32
# Example: bench/ab.sh HEAD~1 . decode 32
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 2 ] || { sed -n 's/^# Usage: /usage: /p' "$0" >&2; exit 2; }
A=$1 B=$2 MODE=${3:-prefill} BATCH=${4:-1} PROMPT=${5:-256} REPS=${6:-7} ROUNDS=${7:-4}
MODEL=${8:-}
case $MODE in prefill | decode) ;; *) echo "bench/ab.sh: mode must be prefill or decode" >&2; exit 2 ;; esac
V=build/release/verity
[ -x "$V" ] || { echo "bench/ab.sh: $V not built (make)" >&2; exit 2; }
if [ -z "$MODEL" ]; then
    MODEL=$($V bench --type f16 --batch 1 --prompt 1 --gen 1 --reps 1 --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["model"]["path"])') || exit 2
fi
tmp=$(mktemp -d)
trees=()
cleanup() {
    local t
    for t in "${trees[@]}"; do git worktree remove --force "$t" >/dev/null 2>&1; done
    rm -rf "$tmp"
}
trap cleanup EXIT
# build SIDE REV: the library of REV (a worktree, or this tree for "."), and $tmp/step-SIDE
build() {
    local side=$1 rev=$2 dir
    if [ "$rev" = . ]; then
        dir=$PWD
    else
        dir=$tmp/tree-$side
        git worktree add --detach -q "$dir" "$rev" || { echo "bench/ab.sh: no revision $rev" >&2; return 1; }
        trees+=("$dir")
    fi
    make -C "$dir" -j"$(nproc)" TYPE=release build/release/libverity.a >"$tmp/make-$side.log" 2>&1 ||
        { echo "bench/ab.sh: building $rev failed: $(tail -c 300 "$tmp/make-$side.log")" >&2; return 1; }
    # the Makefile's LDLIBS (xxhash since the KV checksums, curl, hiredis, ucx): all --as-needed,
    # so a revision that uses fewer of them links too
    cc -O2 -I"$dir/src" bench/bench_step.c "$dir/build/release/libverity.a" -Wl,--as-needed \
        -lm -pthread -lpcre2-8 -lcurl -lxxhash -lhiredis -lucp -lucs -Wl,--no-as-needed \
        -o "$tmp/step-$side" || return 1
}
build a "$A" && build b "$B" || exit 2
echo "A = $A ($(git rev-parse --short "$( [ "$A" = . ] && echo HEAD || echo "$A")")), B = $B; $MODE, batch $BATCH, prompt $PROMPT, $REPS repetitions x $ROUNDS rounds"
[ -n "${AB_ENV_A:-}${AB_ENV_B:-}" ] &&
    echo "A runs with: ${AB_ENV_A:-(nothing)}; B runs with: ${AB_ENV_B:-(nothing)}"
for r in $(seq 1 "$ROUNDS"); do
    for side in a b; do
        envs=${AB_ENV_A:-}
        [ $side = b ] && envs=${AB_ENV_B:-}
        # shellcheck disable=SC2086 # the assignments are split on spaces on purpose
        out=$(env $envs "$tmp/step-$side" "$MODEL" "$MODE" "$BATCH" "$PROMPT" "$REPS") || exit 1
        echo "round $r $side: $out"
        sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<<"$out" >>"$tmp/med-$side"
    done
done
ma=$(sort -n "$tmp/med-a" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
mb=$(sort -n "$tmp/med-b" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
awk -v a="$ma" -v b="$mb" 'BEGIN { printf "median step: A %.2f ms, B %.2f ms: B is %.2fx as fast as A\n", a, b, a / b }'
