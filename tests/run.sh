#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the test suite against one or more build directories (build/release, build/asan, ...):
# every test binary in <build>/tests/ and every script in tests/cli/ (given VERITY=<build>/verity).
# Each prints PASS/FAIL/SKIP lines; this script prefixes them with the build name, counts them,
# prints the failures again at the end, and ends with exactly one line "N passed, N failed".
# A binary that crashes or times out counts as one failure. Skips are counted but not failures.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 1 ] || set -- build/release
pass=0 fail=0 skip=0
failures=()
timeout_s=${VERITY_TEST_TIMEOUT:-1200}

run_one() { # build label command...
    local build=$1 label=$2; shift 2
    local out rc
    out=$(timeout "$timeout_s" "$@" 2>"$tmp_err")
    rc=$?
    local saw=0
    while IFS= read -r line; do
        case "$line" in
            PASS\ *) pass=$((pass+1)); saw=1; echo "[$build] $line" ;;
            FAIL\ *) fail=$((fail+1)); saw=1; echo "[$build] $line"; failures+=("[$build] $line") ;;
            SKIP\ *) skip=$((skip+1)); saw=1; echo "[$build] $line" ;;
            *) [ -n "$line" ] && echo "[$build] $label: $line" ;;
        esac
    done <<<"$out"
    if [ $rc -ne 0 ]; then
        # a crash or timeout, or a nonzero exit after FAIL lines (already counted)
        if [ $rc -ge 124 ] || ! grep -q '^FAIL ' <<<"$out"; then
            fail=$((fail+1))
            local why="exit code $rc"; [ $rc -eq 124 ] && why="timed out after ${timeout_s}s"
            failures+=("[$build] FAIL $label: $why: $(tail -n 5 "$tmp_err" | tr '\n' ' ')")
            echo "[$build] FAIL $label: $why"; tail -n 20 "$tmp_err" | sed "s/^/[$build]   /"
        fi
    elif [ $saw -eq 0 ]; then
        fail=$((fail+1)); failures+=("[$build] FAIL $label: printed no results")
        echo "[$build] FAIL $label: printed no results"
    fi
}

tmp_err=$(mktemp)
trap 'rm -f "$tmp_err"' EXIT
for build in "$@"; do
    name=$(basename "$build")
    if [ ! -x "$build/verity" ]; then
        echo "[$name] FAIL build: $build/verity missing (run make tests TYPE=$name)"
        fail=$((fail+1)); continue
    fi
    export VERITY="$PWD/$build/verity" VERITY_BUILD="$PWD/$build"
    if [ "$name" = asan ] || [ "$name" = tsan ] || [ "$name" = ubsan ] || [ "$name" = debug ]; then
        export VERITY_TEST_SCALE=${VERITY_TEST_SCALE_SAN:-0.25}
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
        export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66}
    else
        unset VERITY_TEST_SCALE
    fi
    # the TSan build runs the concurrency tests only (thread pool, threaded forward pass, engine
    # loop, the HTTP server under concurrent load); VERITY_TSAN_ONLY overrides the selection
    only=""
    [ "$name" = tsan ] && only=${VERITY_TSAN_ONLY:-'^(test_base|test_model|test_grammar_engine|serve\.sh)$'}
    for t in "$build"/tests/*; do
        [ -x "$t" ] && [ -f "$t" ] || continue
        case "$t" in *.o|*.d) continue ;; esac
        b=$(basename "$t")
        if [ -n "$only" ] && ! [[ "$b" =~ $only ]]; then continue; fi
        if [[ "$b" == replay_* ]]; then
            run_one "$name" "$b" "$t" "fuzz/corpus/${b#replay_}"
        else
            run_one "$name" "$b" "$t"
        fi
    done
    for s in tests/cli/*.sh; do
        [ -f "$s" ] || continue
        if [ -n "$only" ] && ! [[ "$(basename "$s")" =~ $only ]]; then continue; fi
        run_one "$name" "$(basename "$s")" bash "$s"
    done
done

if [ ${#failures[@]} -gt 0 ]; then
    echo "--- failures ---"
    printf '%s\n' "${failures[@]}"
fi
echo "($skip skipped)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
