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
#
# Lanes: the areas of all the builds run VERITY_TEST_JOBS at a time (default: the number of
# CPUs), each with its build's environment and its output kept apart until it ends; an area's
# lines are printed together when it ends. The suite spends about half its time waiting (servers
# starting, clients and engines handing off), so two lanes on two CPUs finish sooner than one.
# No test may depend on timing (README, "No test depends on the machine's speed"), so another
# lane's load changes no result. VERITY_TEST_JOBS=1 runs them one after another, in order, as
# before. Sanitizer builds' areas start first: they are the longest, and a long area started
# last would end the run alone.
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 1 ] || set -- build/release
pass=0 fail=0 skip=0
failures=()
declare -A a_pass a_fail a_skip a_secs
areas=()
timeout_s=${VERITY_TEST_TIMEOUT:-1200}
lanes=${VERITY_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $lanes in '' | *[!0-9]* | 0) echo "VERITY_TEST_JOBS must be a positive integer, got '$lanes'" >&2; exit 2 ;; esac

# (disagg_workers.sh is not among them: disagg.sh covers the flow under TSan, router_workers.sh the
# worker path)
# (test_spec is not among them: its only threads are the forward pass's pool, which test_model and
# test_kv_prefix run under TSan, and under TSan it takes 3.5 minutes of CPU)
TSAN_AREAS='^(test_base|test_srv_http|test_router|test_model|test_kv_prefix|test_kv_xfer|test_kv_xfer_inflight|test_kv_xfer_overlap|test_grammar_engine|test_engine_loop|test_kv_tier|test_tokenizer|test_chat_api|test_hunt_.*|serve\.sh|router\.sh|router_workers\.sh|serve_tools\.sh|hunt\.sh|hunt_bisect\.sh|hunt_scale\.sh|kv_cache\.sh|disagg\.sh)$'
# scripts that drive other builds themselves (the fault build) and run once, with the release suite
RELEASE_ONLY='^(faults\.sh|disagg_faults\.sh|hunt_faults\.sh|kv_faults\.sh|abuse\.sh)$'
expected=()
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the jobs: J_build[i] (directory), J_label[i] (area), J_cmd[i] (command, words without spaces)
J_build=() J_label=() J_cmd=()
add_job() { J_build+=("$1"); J_label+=("$2"); J_cmd+=("$3"); }

builds=()
for build in "$@"; do
    name=$(basename "$build")
    if [ ! -x "$build/verity" ]; then
        echo "[$name] FAIL build: $build/verity missing (run make tests TYPE=$name)"
        fail=$((fail+1)); continue
    fi
    builds+=("$build")
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
done

# job order: with one lane, the builds in the order given, binaries then scripts (as before);
# with more, the sanitizer builds first (scripts, then binaries), the rest after
sanitized() { case $(basename "$1") in asan | tsan | ubsan | debug) return 0 ;; esac; return 1; }
add_build_jobs() { # build what(bin|cli)
    local build=$1 name only="" t b s
    name=$(basename "$build")
    [ "$name" = tsan ] && only=${VERITY_TSAN_ONLY:-$TSAN_AREAS}
    if [ "$2" = bin ]; then
        for t in "$build"/tests/*; do
            [ -x "$t" ] && [ -f "$t" ] || continue
            case "$t" in *.o|*.d) continue ;; esac
            b=$(basename "$t")
            if [ -n "$only" ] && ! [[ "$b" =~ $only ]]; then continue; fi
            if [[ "$b" == replay_* ]]; then add_job "$build" "$b" "$t fuzz/corpus/${b#replay_}"
            else add_job "$build" "$b" "$t"; fi
        done
    else
        for s in tests/cli/*.sh; do
            [ -f "$s" ] || continue
            b=$(basename "$s")
            if [ -n "$only" ] && ! [[ "$b" =~ $only ]]; then continue; fi
            if [ "$name" != release ] && [[ "$b" =~ $RELEASE_ONLY ]]; then continue; fi
            add_job "$build" "$b" "bash $s"
        done
    fi
}
if [ "$lanes" -eq 1 ]; then
    for build in "${builds[@]}"; do add_build_jobs "$build" bin; add_build_jobs "$build" cli; done
else
    for build in "${builds[@]}"; do sanitized "$build" && add_build_jobs "$build" cli; done
    for build in "${builds[@]}"; do sanitized "$build" && add_build_jobs "$build" bin; done
    for build in "${builds[@]}"; do sanitized "$build" || { add_build_jobs "$build" cli; add_build_jobs "$build" bin; }; done
fi

# start_job I: runs job I in the background with its build's environment; its stdout, stderr,
# exit code and seconds go to $work/I.{out,err,rc,secs}
start_job() {
    local i=$1 build=${J_build[$1]} name
    name=$(basename "$build")
    (
        export VERITY="$PWD/$build/verity" VERITY_BUILD="$PWD/$build"
        if sanitized "$build"; then
            export VERITY_TEST_SCALE=${VERITY_TEST_SCALE_SAN:-0.25}
            export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
            export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66}
            # libucx's memory hooks (libucm, loaded by a binary that uses the KV transfer) crash
            # inside TSan's interceptors when a thread exits; no transport used here needs them
            if [ "$name" = tsan ]; then export UCX_MEM_EVENTS=${UCX_MEM_EVENTS:-no}; fi
        else
            unset VERITY_TEST_SCALE
        fi
        t0=$SECONDS
        # shellcheck disable=SC2086 # the command's words hold no spaces
        timeout "$timeout_s" ${J_cmd[$i]} >"$work/$i.out" 2>"$work/$i.err" </dev/null
        rc=$?
        echo $((SECONDS - t0)) >"$work/$i.secs"
        echo $rc >"$work/$i.rc.tmp" && mv "$work/$i.rc.tmp" "$work/$i.rc"
    ) &
}

# report_job I: counts and prints job I's results (its exit code and output are in $work)
report_job() {
    local i=$1 build name label key rc line saw=0 why
    build=${J_build[$i]} label=${J_label[$i]}; name=$(basename "$build"); key="$name $label"
    areas+=("$key")
    a_pass[$key]=0 a_fail[$key]=0 a_skip[$key]=0
    rc=$(cat "$work/$i.rc"); a_secs[$key]=$(cat "$work/$i.secs")
    while IFS= read -r line; do
        case "$line" in
            PASS\ *) pass=$((pass+1)); a_pass[$key]=$((a_pass[$key]+1)); saw=1; echo "[$name] $line" ;;
            FAIL\ *) fail=$((fail+1)); a_fail[$key]=$((a_fail[$key]+1)); saw=1; echo "[$name] $line"; failures+=("[$name] $line") ;;
            SKIP\ *) skip=$((skip+1)); a_skip[$key]=$((a_skip[$key]+1)); saw=1; echo "[$name] $line" ;;
            *) [ -n "$line" ] && echo "[$name] $label: $line" ;;
        esac
    done <"$work/$i.out"
    if [ "$rc" -ne 0 ]; then
        # a crash or timeout, or a nonzero exit after FAIL lines (already counted)
        if [ "$rc" -ge 124 ] || ! grep -q '^FAIL ' "$work/$i.out"; then
            fail=$((fail+1)); a_fail[$key]=$((a_fail[$key]+1))
            why="exit code $rc"; [ "$rc" -eq 124 ] && why="timed out after ${timeout_s}s"
            failures+=("[$name] FAIL $label: $why: $(tail -n 5 "$work/$i.err" | tr '\n' ' ')")
            echo "[$name] FAIL $label: $why"; tail -n 20 "$work/$i.err" | sed "s/^/[$name]   /"
        fi
    elif [ $saw -eq 0 ]; then
        fail=$((fail+1)); a_fail[$key]=$((a_fail[$key]+1)); failures+=("[$name] FAIL $label: printed no results")
        echo "[$name] FAIL $label: printed no results"
    fi
}

# the lanes: keep up to $lanes jobs running; report each as it ends
next=0 running=0 total=${#J_cmd[@]}
declare -A reported
while [ $next -lt "$total" ] || [ $running -gt 0 ]; do
    while [ $running -lt "$lanes" ] && [ $next -lt "$total" ]; do
        start_job $next; next=$((next+1)); running=$((running+1))
    done
    wait -n 2>/dev/null
    for ((i = 0; i < next; i++)); do
        if [ -z "${reported[$i]:-}" ] && [ -e "$work/$i.rc" ]; then
            reported[$i]=1; running=$((running-1)); report_job $i
        fi
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
