# SPDX-License-Identifier: MIT
# Helpers for the CLI test scripts: each script sources this, runs cases, and prints one line per
# case (PASS name / FAIL name: why / SKIP name: reason) as tests/run.sh expects.
# $VERITY is the binary under test; $SHARED the shared data directory.
set -u
SHARED=${VERITY_SHARED:-../shared}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/verity-cli-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }
# need_shared NAME FILE: returns 1 (after printing SKIP) if FILE is missing
need_shared() {
    if [ ! -e "$SHARED/$2" ]; then skip "$1" "$SHARED/$2 not found (shared data missing)"; return 1; fi
    return 0
}
# expect_exit2 NAME CMD...: the command must exit 2 with exactly one line on stderr
expect_exit2() {
    local name=$1; shift
    local err rc
    err=$("$@" 2>&1 >"$TMP/stdout.$$")
    rc=$?
    local lines; lines=$(printf '%s' "$err" | grep -c '' || true)
    if [ $rc -ne 2 ]; then fail "$name" "exit code $rc, expected 2 (stderr: $err)"
    elif [ "$lines" -ne 1 ]; then fail "$name" "expected one line on stderr, got $lines: $err"
    else pass "$name"; fi
}

# start_server NAME ARGS...: starts `verity serve --port 0 ARGS...` in its own process group,
# waits up to 60 s for its "listening" line; sets SRV_PID, SRV_PORT, SRV_URL, SRV_LOG.
# Returns 1 (after printing FAIL NAME) if it does not come up.
start_server() {
    local name=$1; shift
    SRV_LOG="$TMP/server.$RANDOM.log"
    setsid "$VERITY" serve --port 0 "$@" >"$SRV_LOG" 2>&1 &
    SRV_PID=$!
    local i
    for i in $(seq 1 600); do
        SRV_PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$SRV_LOG" | head -1)
        [ -n "$SRV_PORT" ] && break
        if ! kill -0 "$SRV_PID" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if [ -z "$SRV_PORT" ]; then
        fail "$name" "server did not start: $(tail -c 400 "$SRV_LOG")"
        kill -9 -- -"$SRV_PID" 2>/dev/null
        return 1
    fi
    SRV_URL="http://127.0.0.1:$SRV_PORT"
    return 0
}

# stop_server: SIGTERM, wait up to 30 s, then SIGKILL the group; sets SRV_STATUS to the exit
# status (call it directly, not in $(...): only this shell can wait for the server).
stop_server() {
    kill -TERM "$SRV_PID" 2>/dev/null
    local i
    for i in $(seq 1 300); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 -- -"$SRV_PID" 2>/dev/null
    wait "$SRV_PID" 2>/dev/null
    SRV_STATUS=$?
}

# http_code METHOD PATH [DATA] [CURL ARGS...]: prints the status code; body in $TMP/body
http_code() {
    local m=$1 p=$2; shift 2
    local d=""
    if [ $# -gt 0 ] && [ "${1:0:1}" != "-" ]; then d=$1; shift; fi
    if [ -n "$d" ]; then
        curl -s -o "$TMP/body" -w '%{http_code}' -X "$m" -H 'content-type: application/json' --data-binary "$d" "$@" "$SRV_URL$p"
    else
        curl -s -o "$TMP/body" -w '%{http_code}' -X "$m" "$@" "$SRV_URL$p"
    fi
}

# metric NAME: the value of an unlabelled metric from /metrics
metric() {
    curl -s "$SRV_URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# metric_at URL SERIES: the value of one series of URL's /metrics (exact name with labels)
metric_at() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }

# wait_for CMD...: polls until CMD succeeds; 1 after 300 s (a backstop for a hung process only)
wait_for() {
    local i
    for i in $(seq 1 3000); do "$@" && return 0; sleep 0.1; done
    return 1
}

# start_router NAME ARGS...: `verity router --port 0 ARGS...` in its own process group (its pid
# also appended to PIDS); sets RT_PID, RT_URL, RT_LOG; FAIL NAME and 1 if it does not start
start_router() {
    local name=$1 port="" i; shift
    RT_LOG="$TMP/router.$RANDOM.log"
    : >"$RT_LOG" # exists before the child opens it, so the first read does not race its creation
    setsid "$VERITY" router --port 0 "$@" >"$RT_LOG" 2>&1 &
    RT_PID=$!
    PIDS+=("$RT_PID")
    for i in $(seq 1 600); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$RT_LOG" | head -1)
        [ -n "$port" ] && break
        kill -0 "$RT_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then fail "$name" "router did not start: $(tail -c 400 "$RT_LOG")"; return 1; fi
    RT_URL="http://127.0.0.1:$port"
}

# contrib_check NAME SCRIPT UP_PATTERN PROMPT ARGS...: starts contrib/router/SCRIPT (ROUTER_PORT=0,
# ARGS passed on) in its own process group, waits for its router's "listening" line to match
# UP_PATTERN, sends one completion, then SIGTERM: PASS NAME when it answered 200, exited 0 and
# left none of its servers running
contrib_check() {
    local name=$1 script=$2 up=$3 prompt=$4 clog="$TMP/contrib.$RANDOM.log" cpid url kids code st left k
    shift 4
    : >"$clog"
    VERITY=$VERITY ROUTER_PORT=0 setsid bash "$(dirname "${BASH_SOURCE[0]}")/../../contrib/router/$script" "$@" >"$clog" 2>&1 &
    cpid=$!
    PIDS+=("$cpid")
    if ! wait_for grep -q "verity router: listening on .*$up" "$clog"; then
        fail "$name" "did not come up: $(tail -n 3 "$clog")"; return
    fi
    url=$(sed -n 's/.*verity router: listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$clog")
    kids=$(pgrep -g "$cpid" | grep -vx "$cpid" | tr '\n' ' ')
    code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/completions" -d "{\"prompt\":\"$prompt\",\"max_tokens\":2}")
    kill -TERM "$cpid"
    wait "$cpid"; st=$?
    left=""
    for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
    if [ "$code" = 200 ] && [ $st -eq 0 ] && [ -z "$left" ]; then pass "$name"
    else fail "$name" "HTTP $code, exit $st, left running:${left:- none}"; fi
}

# metric_sum NAME: the sum of every series of NAME (labels ignored), 0 when absent
metric_sum() {
    curl -s "$SRV_URL/metrics" | awk -v n="$1" '{ k = $1; sub(/\{.*/, "", k) } k == n { s += $2 } END { print s + 0 }'
}

# wait_metric NAME OP VALUE: polls /metrics until `NAME OP VALUE` holds (OP: -eq -ge -le -gt
# -lt, integers; or = for the text of a value); returns 1 if it still does not after 300 s. The
# limit is only a backstop for a hung server: the loop ends as soon as the state exists, so the
# test does not depend on the machine's speed.
wait_metric() {
    local n=$1 op=$2 want=$3 v i
    for i in $(seq 1 3000); do
        v=$(metric "$n")
        if [ "$op" = = ]; then [ "$v" = "$want" ] && return 0
        else [ -n "$v" ] && [ "${v%.*}" "$op" "$want" ] && return 0; fi
        sleep 0.1
    done
    return 1
}

# admin pause|resume|step [N]: the server's admin API (needs --admin-api 1); prints the body,
# returns 1 on a status other than 200
admin() {
    local code
    if [ "$1" = step ]; then code=$(http_code POST /admin/step "{\"steps\":${2:-1}}")
    else code=$(http_code POST "/admin/$1"); fi
    cat "$TMP/body"
    [ "$code" = 200 ]
}

# batch_hist: "STEPS STEPS_OVER_1 STEPS_OVER_8" from the verity_batch_size histogram (steps
# since start, steps with more than one sequence, steps with more than eight)
batch_hist() {
    curl -s "$SRV_URL/metrics" | awk '
        $1 == "verity_batch_size_count" { c = $2 }
        $1 == "verity_batch_size_bucket{le=\"1\"}" { b1 = $2 }
        $1 == "verity_batch_size_bucket{le=\"8\"}" { b8 = $2 }
        END { print c + 0, c - b1, c - b8 }'
}

# run_node NAME [-o FILE] SCRIPT ARGS...: runs a node test script; its output passes through
# (PASS/FAIL lines), or with -o goes to FILE (data for the caller). A missing node binary, or a
# nonzero exit without a FAIL line of the script's own, prints FAIL NAME: a test client that
# cannot run is a failure, never silence or a skip. Returns node's exit status (127: no node).
run_node() {
    local name=$1 out_file=""; shift
    if [ "$1" = -o ]; then out_file=$2; shift 2; fi
    if ! command -v node >/dev/null; then
        fail "$name" "node not found (scripts/setup.sh installs nodejs)"; return 127
    fi
    local out rc
    out=$(timeout 600 node "$@" 2>"$TMP/node.err"); rc=$?
    if [ -n "$out_file" ]; then printf '%s\n' "$out" >"$out_file"
    elif [ -n "$out" ]; then printf '%s\n' "$out"; fi
    if [ $rc -ne 0 ] && { [ -n "$out_file" ] || ! grep -q '^FAIL ' <<<"$out"; }; then
        fail "$name" "node $(basename "$1") exited $rc: $(tail -c 300 "$TMP/node.err" | tr '\n' ' ')"
    fi
    return $rc
}

# procs_matching TEXT: prints the pids of live processes whose command line contains TEXT, read
# from /proc (no pgrep needed; a zombie's command line is empty, so the dead are not listed).
# Returns 2, printing nothing, when /proc cannot be read: a check built on it then fails.
procs_matching() {
    [ -r /proc/self/cmdline ] || return 2
    local d args
    for d in /proc/[0-9]*; do
        mapfile -d '' args 2>/dev/null <"$d/cmdline" || continue
        [ ${#args[@]} -gt 0 ] && [[ "${args[*]}" == *"$1"* ]] && echo "${d#/proc/}"
    done
    return 0
}

# procs_gone TEXT: returns 0 as soon as no live process's command line contains TEXT, 1 if some
# still do after 30 s (one killed a moment ago may take that moment to die; a leaked server never
# goes), 2 if /proc cannot be read. LEFT_PIDS holds what was left.
procs_gone() {
    local i
    for i in $(seq 1 300); do
        LEFT_PIDS=$(procs_matching "$1") || return 2
        [ -z "$LEFT_PIDS" ] && return 0
        sleep 0.1
    done
    return 1
}

# expect_procs_gone NAME TEXT: PASS NAME if procs_gone TEXT, else FAIL NAME naming what was left
expect_procs_gone() {
    procs_gone "$2"
    case $? in
        0) pass "$1" ;;
        1) fail "$1" "still running after 30 s: pids $(echo $LEFT_PIDS) (command line contains '$2')" ;;
        *) fail "$1" "cannot read /proc to look for processes" ;;
    esac
}
