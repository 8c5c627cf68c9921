# SPDX-License-Identifier: MIT
# Helpers for the hunt/bisect CLI tests: start the mock OpenAI-compatible server
# ($VERITY_BUILD/tools/mock_openai) on a free loopback port, stop it, read results.json.
# Every server started here is stopped by pid on exit; each has --max-lifetime as a backstop.
. "$(dirname "$0")/lib.bash"
MOCK=${VERITY_BUILD:-$(dirname "$VERITY")}/tools/mock_openai
SCALE=${VERITY_TEST_SCALE:-1}
MOCK_PIDS=()
MOCK_PREFIX=() # e.g. (taskset -c 1) to pin the servers
hunt_cleanup() {
    local p
    for p in "${MOCK_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${MOCK_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap hunt_cleanup EXIT
# scaled N: at least MIN
scaled() { awk -v n="$1" -v s="$SCALE" -v m="${2:-1}" 'BEGIN{v=int(n*s+0.5); if(v<m)v=m; print v}'; }
# need_mock NAME: prints SKIP and returns 1 when the mock server was not built
need_mock() {
    if [ ! -x "$MOCK" ]; then skip "$1" "$MOCK not built (make tests)"; return 1; fi
    return 0
}
# start_mock VAR ARGS...: starts a mock server, sets VAR to its base URL and MOCK_PID
start_mock() {
    local var=$1; shift
    local pf="$TMP/port.$RANDOM$RANDOM"
    "${MOCK_PREFIX[@]}" "$MOCK" --port 0 --port-file "$pf" --max-lifetime 600 "$@" 2>>"$TMP/mock.log" &
    MOCK_PID=$!
    MOCK_PIDS+=("$MOCK_PID")
    local i
    # polled until the port file appears (it is written once the socket listens), up to 60 s
    for i in $(seq 1 1200); do
        [ -s "$pf" ] && break
        kill -0 "$MOCK_PID" 2>/dev/null || break
        sleep 0.05
    done
    if [ ! -s "$pf" ]; then printf -v "$var" '%s' ""; return 1; fi
    printf -v "$var" 'http://127.0.0.1:%s' "$(cat "$pf")"
}
stop_mock() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# jq-less JSON queries: json FILE PYTHON-EXPRESSION-ON-d
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
