#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the test suite against one or more build directories (build/release, build/asan, ...):
# every test binary in <build>/tests/ and every script in tests/cli/ (given VERITY=<build>/verity).
# Each prints PASS/FAIL/SKIP lines; this script prefixes them with the build name, counts them,
# prints the failures again at the end, and ends with exactly one line "N passed, N failed".
# A binary that crashes or times out counts as one failure. Skips are counted but not failures.
#
# Areas: every test binary (one per tests/test_*.c, one replay_* per fuzz/fuzz_*.c) and every
# tests/cli/*.sh script is an area, expected in every build (the TSan build: those its selection
# names). The end prints each area's counts; an expected area that did not run, or in which no
# case passed (nothing printed, or only skips), is one more failure: a whole binary or script
# that stops testing is caught, not counted as a pass.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 1 ] || set -- build/release
pass=0 fail=0 skip=0
failures=()
declare -A a_pass a_fail a_skip a_secs
areas=()
timeout_s=${VERITY_TEST_TIMEOUT:-1200}

run_one() { # build label command...
    local build=$1 label=$2; shift 2
    local out rc key="$build $label"
    areas+=("$key")
    a_pass[$key]=0 a_fail[$key]=0 a_skip[$key]=0
    local t0=$SECONDS
    out=$(timeout "$timeout_s" "$@" 2>"$tmp_err")
    rc=$?
    a_secs[$key]=$((SECONDS - t0))
    local saw=0
    while IFS= read -r line; do
        case "$line" in
            PASS\ *) pass=$((pass+1)); a_pass[$key]=$((a_pass[$key]+1)); saw=1; echo "[$build] $line" ;;
            FAIL\ *) fail=$((fail+1)); a_fail[$key]=$((a_fail[$key]+1)); saw=1; echo "[$build] $line"; failures+=("[$build] $line") ;;
            SKIP\ *) skip=$((skip+1)); a_skip[$key]=$((a_skip[$key]+1)); saw=1; echo "[$build] $line" ;;
            *) [ -n "$line" ] && echo "[$build] $label: $line" ;;
        esac
    done <<<"$out"
    if [ $rc -ne 0 ]; then
        # a crash or timeout, or a nonzero exit after FAIL lines (already counted)
        if [ $rc -ge 124 ] || ! grep -q '^FAIL ' <<<"$out"; then
            fail=$((fail+1)); a_fail[$key]=$((a_fail[$key]+1))
            local why="exit code $rc"; [ $rc -eq 124 ] && why="timed out after ${timeout_s}s"
            failures+=("[$build] FAIL $label: $why: $(tail -n 5 "$tmp_err" | tr '\n' ' ')")
            echo "[$build] FAIL $label: $why"; tail -n 20 "$tmp_err" | sed "s/^/[$build]   /"
        fi
    elif [ $saw -eq 0 ]; then
        fail=$((fail+1)); a_fail[$key]=$((a_fail[$key]+1)); failures+=("[$build] FAIL $label: printed no results")
        echo "[$build] FAIL $label: printed no results"
    fi
}

# (test_spec is not among them: its only threads are the forward pass's pool, which test_model and
# test_kv_prefix run under TSan, and under TSan it takes 3.5 minutes of CPU)
TSAN_AREAS='^(test_base|test_srv_http|test_router|test_model|test_kv_prefix|test_kv_xfer|test_grammar_engine|test_engine_loop|test_kv_tier|test_tokenizer|test_chat_api|test_hunt_.*|serve\.sh|router\.sh|serve_tools\.sh|hunt\.sh|hunt_bisect\.sh|hunt_scale\.sh|kv_cache\.sh|disagg\.sh)$'
# scripts that drive other builds themselves (the fault build) and run once, with the release suite
RELEASE_ONLY='^(faults\.sh|disagg_faults\.sh|hunt_faults\.sh|kv_faults\.sh|abuse\.sh)$'
expected=()
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
        # libucx's memory hooks (libucm, loaded by a binary that uses the KV transfer) crash inside
        # TSan's interceptors when a thread exits; no transport used here needs them
        if [ "$name" = tsan ]; then export UCX_MEM_EVENTS=${UCX_MEM_EVENTS:-no}; fi
    else
        unset VERITY_TEST_SCALE
    fi
    # the TSan build runs the concurrency tests only (thread pool, threaded forward pass, engine
    # loop, tokenizer and template rendering from many threads, the HTTP server under concurrent
    # load, the hunt harness's client threads); VERITY_TSAN_ONLY overrides the selection
    only=""
    [ "$name" = tsan ] && only=${VERITY_TSAN_ONLY:-$TSAN_AREAS}
    # the areas expected in this build
    for src in tests/test_*.c fuzz/fuzz_*.c tests/cli/*.sh; do
        case "$src" in tests/test_util.c) continue ;; esac
        a=$(basename "$src"); a=${a%.c}; [[ "$src" == fuzz/* ]] && a=replay_${a#fuzz_}
        if [ -n "$only" ] && ! [[ "$a" =~ $only ]]; then continue; fi
        if [ "$name" != release ] && [[ "$a" =~ $RELEASE_ONLY ]]; then continue; fi
        expected+=("$name $a")
    done
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
        if [ "$name" != release ] && [[ "$(basename "$s")" =~ $RELEASE_ONLY ]]; then continue; fi
        run_one "$name" "$(basename "$s")" bash "$s"
    done
done

echo "--- areas (passed/failed/skipped, seconds) ---"
declare -A ran
for k in "${areas[@]}"; do
    ran[$k]=1
    printf '[%s] %s: %d/%d/%d, %ds\n' "${k%% *}" "${k#* }" "${a_pass[$k]}" "${a_fail[$k]}" "${a_skip[$k]}" "${a_secs[$k]}"
    if [ "${a_pass[$k]}" -eq 0 ] && [ "${a_fail[$k]}" -eq 0 ]; then
        fail=$((fail+1)); failures+=("[${k%% *}] FAIL ${k#* }: no case passed (${a_skip[$k]} skipped)")
    fi
done
for k in "${expected[@]}"; do
    if [ -z "${ran[$k]:-}" ]; then
        fail=$((fail+1)); failures+=("[${k%% *}] FAIL ${k#* }: did not run (not built?)")
    fi
done

if [ ${#failures[@]} -gt 0 ]; then
    echo "--- failures ---"
    printf '%s\n' "${failures[@]}"
fi
echo "($skip skipped)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
