# SPDX-License-Identifier: MIT
# Helpers for the benchmark scripts.

# bench_start LOG CMD ARGS...: starts `build/release/verity CMD --port 0 ARGS...` (serve or router)
# in the background with its output in LOG, waits up to 120 s for its "listening" line; sets
# BENCH_PID and BENCH_PORT. Returns 1, with one line on stderr, if it does not come up.
bench_start() {
    local log=$1 cmd=$2; shift 2
    : >"$log" # the background child opens it; the loop below may read first
    build/release/verity "$cmd" --port 0 "$@" >"$log" 2>&1 &
    BENCH_PID=$!
    BENCH_PORT=""
    local i
    for i in $(seq 1 1200); do
        BENCH_PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$BENCH_PORT" ] && return 0
        kill -0 "$BENCH_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "$0: verity $cmd did not start: $(tail -c 300 "$log")" >&2
    kill -TERM "$BENCH_PID" 2>/dev/null
    return 1
}

# bench_serve LOG ARGS...: bench_start LOG serve ARGS...
bench_serve() {
    local log=$1; shift
    bench_start "$log" serve "$@"
}
