# SPDX-License-Identifier: MIT
# verity router over real processes on loopback: two `verity serve` replicas behind one router.
#   - usage: no replica, a bad or repeated URL, --prefill without --decode: exit 2, one line on
#     stderr (the disaggregated flow itself: disagg.sh)
#   - no replica up: /health and requests get 503 (code no_backend, Retry-After), counted
#   - P1 through the router: the p1.mjs workload (64 requests) gives the same normalized bytes as
#     one server, each request alone and all 64 at once (half of them streamed); one streamed
#     request alone carries the same text as one server's stream; both replicas served
#   - cache-aware: a prompt sent twice goes to the replica that holds it (a cache decision, and
#     that replica's prefix cache reused positions)
#   - verity hunt against the router finds nothing (concurrency 1 and 8, --tie-threshold 0)
#   - verity_router_overhead_seconds: a request sample per attempt, event samples once a stream
#     was passed on, cumulative buckets monotone and ending in +Inf = _count
#   - auth: the router's --api-key is required (401 without it, 200 with it)
#   - --router-direct-write 0 (the event thread sends every byte) streams the same bytes
#   - behind tests/tools/mock_stream, two batches of 16 concurrent streams open at most 16
#     backend connections: the workers' shared pool keeps them alive
#   - a replica's GET /v1/status shows a waiting request
#   - kill -9 of a replica holding a request that has streamed nothing: the request is retried on
#     the other replica and its answer is complete and identical to one server's
#   - a replica put back (a new process on its port) is found by the health poll and used again
#   - kill -9 of a replica in the middle of a stream: the client gets what was streamed (a prefix
#     of one server's answer), then an error event and the end of the stream, no [DONE], never a
#     hang and never a token twice (the other replica is free, so a retry would show)
#   - drain: SIGTERM lets a request in flight finish, answers 503 meanwhile, exits 0
#   - contrib/router/local.sh starts a router and two replicas, serves, and stops them all on SIGTERM
#   - a client that stops reading a long stream: the router stops reading its backend (bounded
#     memory), serves another stream meanwhile, then passes every event once; such a client
#     closing ends its transfer
# router_workers.sh runs this file again with --router-loop 0 (VERITY_ROUTER_LOOP=0), the worker
# path; this file runs the default (one proxy loop).
# Nothing depends on timing: replicas are held with --admin-api (pause, step), and every wait
# polls for a state (a metric, a line in a file) with a backstop only for a hung process.
. "$(dirname "$0")/lib.bash"

nodedir="$(dirname "$0")/../node"
MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail router.synth "synth failed"; exit 0; }
command -v node >/dev/null || { fail router.node "node not found (scripts/setup.sh installs nodejs)"; exit 0; }

PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 -- -"$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

expect_exit2 router.usage_no_replica "$VERITY" router
expect_exit2 router.usage_bad_url "$VERITY" router --replica http://127.0.0.1
expect_exit2 router.usage_bad_scheme "$VERITY" router --replica https://127.0.0.1:8080
expect_exit2 router.usage_path "$VERITY" router --replica http://127.0.0.1:8080/v1
expect_exit2 router.usage_port "$VERITY" router --replica http://127.0.0.1:70000
expect_exit2 router.usage_twice "$VERITY" router --replica http://127.0.0.1:8080,http://127.0.0.1:8080/
expect_exit2 router.usage_empty "$VERITY" router --replica ,
expect_exit2 router.usage_unknown "$VERITY" router --replica http://127.0.0.1:8080 --frobnicate 1
expect_exit2 router.usage_disagg_half "$VERITY" router --prefill http://127.0.0.1:8080
expect_exit2 router.cpus_malformed "$VERITY" router --replica http://127.0.0.1:8080 --router-cpus 1-0
expect_exit2 router.cpus_unavailable "$VERITY" router --replica http://127.0.0.1:8080 --router-cpus 1023

SOPTS=(-m "$MODEL" -t 1 --admin-api 1)
# replica VAR [PORT]: starts a server (on PORT when given); VAR_URL, VAR_PID, VAR_PORT
replica() {
    local v=$1 port=${2:-0}
    if [ "$port" = 0 ]; then start_server "router.replica_$v" "${SOPTS[@]}" || return 1
    else start_server "router.replica_$v" "${SOPTS[@]}" --port "$port" || return 1; fi
    PIDS+=("$SRV_PID")
    printf -v "${v}_URL" %s "$SRV_URL"; printf -v "${v}_PID" %s "$SRV_PID"; printf -v "${v}_PORT" %s "$SRV_PORT"
}
up_is() { [ "$(metric_at "$RT_URL" "verity_router_backend_up{backend=\"$1\"}")" = "$2" ]; }
waiting_is() { [ "$(metric_at "$1" verity_requests_waiting)" = "$2" ]; }
inflight_at() { # prints the backend URL that has N requests in flight at the router
    curl -s "$RT_URL/metrics" | awk -v n="$1" '$1 ~ /^verity_router_backend_inflight/ && $2 == n {
        sub(/.*backend="/, "", $1); sub(/".*/, "", $1); print $1; exit }'
}
has_inflight() { [ -n "$(inflight_at 1)" ]; }
adm() { curl -s -o /dev/null -w '%{http_code}' -X POST -d "${3:-}" "$1/admin/$2" | grep -q 200; }
# sse_text FILE: the text of a completions stream, concatenated (python3)
sse_text() {
    python3 -c '
import json, sys
t = ""
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        d = json.loads(line[6:])
        for c in d.get("choices", []):
            t += c.get("text") or ""
print(t, end="")' "$1"
}
# same_stream FILE: FILE's text and finish reason equal the reference stream's, and it ends with
# [DONE] (how tokens are grouped into events depends on timing, the bytes they carry do not)
same_stream() {
    [ "$(sse_text "$1")" = "$(sse_text "$TMP/ref.stream")" ] && grep -q '"finish_reason":"length"' "$1" &&
        grep -q '\[DONE\]' "$1"
}
p1() { VERITY_URL=$1 run_node "$2" -o "$TMP/p1.$2" "$nodedir/p1.mjs" "$3"; }
same() {
    if cmp -s "$TMP/p1.ref" "$TMP/p1.$1"; then pass "router.$1"
    else fail "router.$1" "responses differ from one server's: $(diff "$TMP/p1.ref" "$TMP/p1.$1" | head -c 400)"; fi
}
STREAM_BODY='{"prompt":"Once upon a time there was","max_tokens":48,"temperature":0,"stream":true}'
LONG_BODY='{"prompt":"Once upon a time","max_tokens":200,"temperature":0,"ignore_eos":true,"stream":true}'

# --- no backend up: /health 503, a request 503 no_backend with Retry-After, never a hang ------
FREE=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if start_router router.no_backend --replica "http://127.0.0.1:$FREE"; then
    h=$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/health")
    c=$(curl -s -D "$TMP/nb.h" -o "$TMP/nb.body" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"a","max_tokens":2}')
    n=$(metric_at "$RT_URL" verity_router_no_backend_total)
    if [ "$h" = 503 ] && [ "$c" = 503 ] && grep -q '"code":"no_backend"' "$TMP/nb.body" &&
       grep -qi '^retry-after: 1' "$TMP/nb.h" && [ "$n" = 1 ]; then pass router.no_backend_503
    else fail router.no_backend_503 "health $h, request $c: $(head -c 200 "$TMP/nb.body"), counted ${n:-?}"; fi
    kill -9 -- -"$RT_PID" 2>/dev/null
fi

# --- the reference: one server ------------------------------------------------------------------
replica REF || exit 0
p1 "$REF_URL" ref record
curl -sN "$REF_URL/v1/completions" -d "$STREAM_BODY" >"$TMP/ref.stream"
curl -sN "$REF_URL/v1/completions" -d "$LONG_BODY" >"$TMP/ref.long"
stop_server
if [ "$(grep -c '' "$TMP/p1.ref")" -ne 64 ] || grep -q '"error"' "$TMP/p1.ref" || ! grep -q '\[DONE\]' "$TMP/ref.long"; then
    fail router.reference "the reference run is incomplete"; exit 0
fi

replica A || exit 0
replica B || exit 0
start_router router.start --replica "$A_URL,$B_URL" --router-health-ms 100 || exit 0
code=$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/health")
[ "$code" = 200 ] && pass router.health_up || fail router.health_up "GET /health: $code"

# --- P1 through the router ----------------------------------------------------------------------
p1 "$RT_URL" alone record && same alone
p1 "$RT_URL" concurrent replay && same concurrent
curl -sN "$RT_URL/v1/completions" -d "$STREAM_BODY" >"$TMP/rt.stream"
if same_stream "$TMP/rt.stream"; then pass router.stream_alone
else fail router.stream_alone "$(sse_text "$TMP/rt.stream" | head -c 200) vs $(sse_text "$TMP/ref.stream" | head -c 200)"; fi
oka=$(metric_at "$RT_URL" "verity_router_requests_total{backend=\"$A_URL\",outcome=\"ok\"}")
okb=$(metric_at "$RT_URL" "verity_router_requests_total{backend=\"$B_URL\",outcome=\"ok\"}")
[ "${oka:-0}" -gt 0 ] && [ "${okb:-0}" -gt 0 ] && pass "router.both_replicas_served($oka+$okb)" ||
    fail router.both_replicas_served "ok: ${oka:-?} at A, ${okb:-?} at B"

# --- the router's own time: verity_router_overhead_seconds -----------------------------------
# one request sample per proxied request (no retry so far: one per attempt counted ok), an event
# sample per write of streamed events, cumulative buckets never decreasing, +Inf equal to _count;
# read once no request is in flight (a request's sample comes at its send, its count at its end)
wait_for sh -c "! curl -s '$RT_URL/metrics' | grep -q '^verity_router_backend_inflight{.*} [1-9]'"
curl -s "$RT_URL/metrics" >"$TMP/ovh.metrics"
ovh=$(python3 - "$TMP/ovh.metrics" <<'PY'
import re, sys
b, cnt, attempts = {}, {}, 0
for line in open(sys.argv[1]):
    m = re.match(r'verity_router_overhead_seconds_bucket\{part="(\w+)",le="([^"]+)"\} (\d+)$', line)
    if m:
        b.setdefault(m[1], []).append((m[2], int(m[3])))
    m = re.match(r'verity_router_overhead_seconds_count\{part="(\w+)"\} (\d+)$', line)
    if m:
        cnt[m[1]] = int(m[2])
    m = re.match(r'verity_router_requests_total\{.*\} (\d+)$', line)
    if m:
        attempts += int(m[1])
bad = []
for part in ("request", "event"):
    v = [c for _, c in b.get(part, [])]
    if len(v) < 20 or b[part][-1][0] != "+Inf":
        bad.append(f"{part}: {len(v)} buckets")
    elif any(x > y for x, y in zip(v, v[1:])):
        bad.append(f"{part}: buckets decrease {v}")
    elif v[-1] != cnt.get(part):
        bad.append(f"{part}: +Inf {v[-1]} != count {cnt.get(part)}")
if not bad and cnt["request"] != attempts:
    bad.append(f"request samples {cnt['request']} != attempts {attempts}")
if not bad and cnt["event"] < 1:
    bad.append("no event sample after a streamed request")
if not any(re.match(r'verity_http_send_full_total \d+$', l) for l in open(sys.argv[1])):
    bad.append("no verity_http_send_full_total")
print("; ".join(bad) or f"ok {cnt['request']} {cnt['event']}")
PY
)
case "$ovh" in
ok*) pass "router.overhead_metric(${ovh#ok })" ;;
*) fail router.overhead_metric "$ovh" ;;
esac

# --- cache-aware: the same long prompt twice goes where it was --------------------------------
CB='{"prompt":"the cat sat on the mat while it rained and then the cat sat on the mat again and again and the dog","max_tokens":2,"temperature":0}'
c0=$(metric_at "$RT_URL" 'verity_router_decisions_total{decision="cache"}')
h0=$(( $(metric_at "$A_URL" verity_cached_prompt_tokens_total) + $(metric_at "$B_URL" verity_cached_prompt_tokens_total) ))
curl -s "$RT_URL/v1/completions" -d "$CB" >/dev/null
curl -s "$RT_URL/v1/completions" -d "$CB" >/dev/null
c1=$(metric_at "$RT_URL" 'verity_router_decisions_total{decision="cache"}')
h1=$(( $(metric_at "$A_URL" verity_cached_prompt_tokens_total) + $(metric_at "$B_URL" verity_cached_prompt_tokens_total) ))
[ "$c1" -gt "$c0" ] && [ "$h1" -gt "$h0" ] && pass "router.cache_aware($((h1 - h0)) positions reused)" ||
    fail router.cache_aware "cache decisions $c0 -> $c1, cached positions $h0 -> $h1"

# --- verity hunt against the router ------------------------------------------------------------
"$VERITY" hunt --quiet --json --url "$RT_URL" --tools 0 --temperature 1 --tie-threshold 0 --scrape-ms 0 \
    --concurrency 1,8 --sessions 8 --turns 2 --max-tokens 32 >"$TMP/hunt.json" 2>"$TMP/hunt.err"
rc=$?
r=$(python3 -c "import json; d=json.load(open('$TMP/hunt.json')); print(d['summary']['n']==16 and d['summary']['errors']==0 and d['summary']['corrupt']==0 and d['oracles']['exact']['diverged_sessions']==0)" 2>/dev/null)
[ $rc -eq 0 ] && [ "$r" = True ] && pass router.hunt_finds_nothing ||
    fail router.hunt_finds_nothing "exit $rc, $r: $(tail -n 2 "$TMP/hunt.err")"

# --- auth: a second router with --api-key -------------------------------------------------------
R1=$RT_URL R1_PID=$RT_PID
if start_router router.auth --replica "$A_URL,$B_URL" --api-key sesame; then
    c1=$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/v1/models")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sesame' "$RT_URL/v1/models")
    c3=$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/health")
    [ "$c1" = 401 ] && [ "$c2" = 200 ] && [ "$c3" = 200 ] && pass router.api_key ||
        fail router.api_key "without key $c1, with key $c2, /health $c3"
    kill -9 -- -"$RT_PID" 2>/dev/null
fi
# router-direct-write 0: the event thread sends every byte; the same stream
if start_router router.no_direct_write --replica "$A_URL,$B_URL" --router-direct-write 0; then
    curl -sN "$RT_URL/v1/completions" -d "$STREAM_BODY" >"$TMP/nodw.stream"
    if same_stream "$TMP/nodw.stream"; then pass router.stream_without_direct_write
    else fail router.stream_without_direct_write "$(sse_text "$TMP/nodw.stream" | head -c 200) vs $(sse_text "$TMP/ref.stream" | head -c 200)"; fi
    kill -9 -- -"$RT_PID" 2>/dev/null
fi
# router-cpus: every thread (the event thread, the health thread, the workers it started) runs on
# the CPU given, the last one this script may use; the same stream
CPU=$(awk '/^Cpus_allowed_list/ { n = split($2, f, /[,-]/); print f[n] }' /proc/self/status)
if start_router router.cpus --replica "$A_URL,$B_URL" --router-cpus "$CPU"; then
    curl -sN "$RT_URL/v1/completions" -d "$STREAM_BODY" >"$TMP/cpus.stream"
    # one read of every thread's list (a thread counted apart could come or go in between)
    lists=$(cat /proc/"$RT_PID"/task/*/status 2>/dev/null | awk '/^Cpus_allowed_list/ { print $2 }')
    nt=$(grep -c '' <<<"$lists")
    if same_stream "$TMP/cpus.stream" && [ "$nt" -ge 3 ] && ! grep -qvx "$CPU" <<<"$lists"; then pass router.cpus_pinned
    else fail router.cpus_pinned "$nt threads, CPU lists: $(sort <<<"$lists" | uniq -c | tr -s ' \n' '  '); stream $(sse_text "$TMP/cpus.stream" | head -c 100)"; fi
    kill -9 -- -"$RT_PID" 2>/dev/null
fi
RT_URL=$R1 RT_PID=$R1_PID

# --- kill -9 of a replica before anything streamed: retried on the other ----------------------
adm "$A_URL" pause && adm "$B_URL" pause
curl -sN "$RT_URL/v1/completions" -d "$STREAM_BODY" >"$TMP/retry.stream" &
CURL1=$!
if wait_for has_inflight; then
    X=$(inflight_at 1)
    if [ "$X" = "$A_URL" ]; then XP=$A_PID XPORT=$A_PORT Y=$B_URL; else XP=$B_PID XPORT=$B_PORT Y=$A_URL; fi
    wait_for waiting_is "$X" 1
    # the status a router polls says so too
    st=$(curl -s "$X/v1/status")
    grep -q '"waiting":1,' <<<"$st" && grep -q '"kv_total":[1-9]' <<<"$st" && grep -q '"draining":false}' <<<"$st" &&
        pass router.status_endpoint || fail router.status_endpoint "GET /v1/status: $st"
    kill -9 -- -"$XP"
    wait "$XP" 2>/dev/null
    if wait_for waiting_is "$Y" 1 && adm "$Y" resume && wait "$CURL1"; then
        if same_stream "$TMP/retry.stream"; then pass router.retry_before_first_byte
        else fail router.retry_before_first_byte "the retried stream differs: $(sse_text "$TMP/retry.stream" | head -c 200)"; fi
    else fail router.retry_before_first_byte "the request did not reach the other replica"; fi
    rt=$(metric_at "$RT_URL" "verity_router_requests_total{backend=\"$X\",outcome=\"retried\"}")
    [ "${rt:-0}" -ge 1 ] && up_is "$X" 0 && pass router.dead_replica_out || fail router.dead_replica_out "retried ${rt:-?}, up $(metric_at "$RT_URL" "verity_router_backend_up{backend=\"$X\"}")"
    # a request now goes to the live replica
    code=$(curl -s -o "$TMP/one" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"a","max_tokens":2}')
    [ "$code" = 200 ] && pass router.serves_with_one_down || fail router.serves_with_one_down "HTTP $code: $(head -c 200 "$TMP/one")"

    # --- put back: a new process on the dead replica's port is used again --------------------
    if replica X2 "$XPORT" && wait_for up_is "$X" 1; then
        o0=$(metric_at "$RT_URL" "verity_router_requests_total{backend=\"$X\",outcome=\"ok\"}")
        for i in 1 2 3 4 5 6; do curl -s "$RT_URL/v1/completions" -d "{\"prompt\":\"x$i\",\"max_tokens\":2}" >/dev/null; done
        o1=$(metric_at "$RT_URL" "verity_router_requests_total{backend=\"$X\",outcome=\"ok\"}")
        [ "$o1" -gt "$o0" ] && pass "router.put_back_used_again($((o1 - o0)) of 6)" || fail router.put_back_used_again "ok at $X: $o0 -> $o1"
    else fail router.put_back_used_again "the replica put back on $X was not seen up"; fi

    # --- kill -9 in the middle of a stream: an error event, no retry, no hang ----------------
    adm "$X" pause && adm "$Y" pause
    curl -sN "$RT_URL/v1/completions" -d "$LONG_BODY" >"$TMP/cut.stream" &
    CURL2=$!
    if wait_for has_inflight; then
        Z=$(inflight_at 1)
        if [ "$Z" = "$X" ]; then ZP=$X2_PID W=$Y; else ZP=$([ "$Y" = "$A_URL" ] && echo "$A_PID" || echo "$B_PID"); W=$X; fi
        adm "$W" resume   # the other replica is free: a retry would run there and show twice
        wait_for waiting_is "$Z" 1
        streamed() { adm "$Z" step '{"steps":1}'; grep -q '"text":"[^"]' "$TMP/cut.stream"; }
        if wait_for streamed; then
            kill -9 -- -"$ZP"
            t=0; while kill -0 "$CURL2" 2>/dev/null && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
            if kill -0 "$CURL2" 2>/dev/null; then kill "$CURL2"; fail router.cut_stream_error "the client hangs"
            else
                got=$(sse_text "$TMP/cut.stream"); want=$(sse_text "$TMP/ref.long")
                if ! grep -q '"code":"backend_failed"' "$TMP/cut.stream"; then fail router.cut_stream_error "no error event: $(tail -c 300 "$TMP/cut.stream")"
                elif grep -q '\[DONE\]' "$TMP/cut.stream"; then fail router.cut_stream_error "the cut stream ends with [DONE]"
                elif [ -z "$got" ] || [ "${want#"$got"}" = "$want" ] || [ ${#got} -ge ${#want} ]; then
                    fail router.cut_stream_error "the text streamed is not a proper prefix of one server's (${#got} vs ${#want} bytes)"
                else pass "router.cut_stream_error(${#got} of ${#want} bytes, then the error)"; fi
            fi
            er=$(metric_at "$RT_URL" "verity_router_requests_total{backend=\"$Z\",outcome=\"error\"}")
            [ "${er:-0}" = 1 ] && pass router.cut_counted || fail router.cut_counted "error count ${er:-?} at $Z"
        else fail router.cut_stream_error "nothing was streamed"; fi
    else fail router.cut_stream_error "the request did not reach a replica"; fi
    # the router still serves
    code=$(curl -s -o "$TMP/one" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"b","max_tokens":2}')
    [ "$code" = 200 ] && pass router.serves_after_cut || fail router.serves_after_cut "HTTP $code: $(head -c 200 "$TMP/one")"
else fail router.retry_before_first_byte "the request did not reach a replica"; fi

# --- drain: SIGTERM lets the request in flight finish -------------------------------------------
LIVE=$(curl -s "$RT_URL/metrics" | awk '$1 ~ /^verity_router_backend_up/ && $2 == 1 { sub(/.*backend="/, "", $1); sub(/".*/, "", $1); print $1; exit }')
if [ -n "$LIVE" ] && adm "$LIVE" pause; then
    curl -s -o "$TMP/drain.body" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"c","max_tokens":3}' >"$TMP/drain.code" &
    CURL3=$!
    wait_for has_inflight
    kill -TERM "$RT_PID"
    draining() { curl -s "$RT_URL/health" | grep -q draining; }
    wait_for draining
    c503=$(curl -s -o /dev/null -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"d","max_tokens":3}')
    adm "$LIVE" resume
    wait "$CURL3"
    t=0; while kill -0 "$RT_PID" 2>/dev/null && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
    wait "$RT_PID" 2>/dev/null; st=$?
    if [ "$(cat "$TMP/drain.code")" = 200 ] && grep -q '"finish_reason"' "$TMP/drain.body" && [ "$c503" = 503 ] && [ $st -eq 0 ]; then
        pass router.drain
    else fail router.drain "in flight: $(cat "$TMP/drain.code"), new: $c503, exit $st"; fi
else fail router.drain "no live replica to hold"; fi

# --- contrib/router/local.sh: a router and two replicas on one machine, stopped by SIGTERM -------
contrib_check router.contrib_local local.sh "2 replicas, 2 up" e -m "$MODEL" -t 1

# --- connection reuse: 16 concurrent streams twice over tests/tools/mock_stream ---------------
# The workers share their kept-alive backend connections: the second batch reuses the first's, so
# the backend accepts at most 16 connections for the streams (plus the health polls' own two).
MOCK=${VERITY_BUILD:-$(dirname "$VERITY")}/tools/mock_stream
if [ -x "$MOCK" ]; then
    setsid "$MOCK" --port 0 --tokens 3 --gap-us 300000 >"$TMP/mock.log" 2>&1 &
    PIDS+=("$!")
    mock_port() { sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/mock.log"; }
    wait_for grep -q "listening on" "$TMP/mock.log" # (not `test -n "$(mock_port)"`: evaluated once)
    MOCK_URL="http://127.0.0.1:$(mock_port)"
    if start_router router.reuse --replica "$MOCK_URL" --router-health-ms 600000; then
        ok=0
        for batch in 1 2; do
            cpids=()
            for i in $(seq 1 16); do
                curl -sN "$RT_URL/v1/completions" -d '{"prompt":"x","stream":true}' >"$TMP/reuse.$batch.$i" &
                cpids+=("$!")
            done
            wait "${cpids[@]}"
            # a worker gives its connection back before it counts the request done: wait for none
            # in flight, so the next batch finds every connection in the pool whatever the timing
            wait_for sh -c "curl -s '$RT_URL/metrics' | grep -q '^verity_router_backend_inflight{.*} 0\$'"
            for i in $(seq 1 16); do grep -q '\[DONE\]' "$TMP/reuse.$batch.$i" && ok=$((ok + 1)); done
        done
        acc=$(curl -s "$MOCK_URL/v1/status" | python3 -c 'import json, sys; print(json.load(sys.stdin)["connections_accepted"])')
        # 32 streams, 16 at most at once; +2: the first poll's fetcher and the health thread's;
        # +1: this status request
        if [ "$ok" = 32 ] && [ "${acc:-99}" -le 19 ]; then pass "router.backend_connections_reused($acc accepted)"
        else fail router.backend_connections_reused "$ok of 32 streams complete, $acc connections accepted (at most 19)"; fi
        kill -9 -- -"$RT_PID" 2>/dev/null
    fi
else fail router.backend_connections_reused "$MOCK missing (make tests)"; fi

# --- a client that stops reading: backpressure, others served, then the whole stream ----------
# A stream of 120000 events (about 18 MB) to a client that reads nothing until told: the router
# must stop reading the backend (a blocked worker, or the loop's paused transfer) and so hold
# far less than the stream (its RSS grows by under 10 MB) while another stream through the same
# router completes; told to read, the client gets every event once and [DONE]. A second such
# client closes instead: the router ends that transfer (nothing left in flight).
SLOW_N=120000
# slow_client PORT GOFILE OUTFILE: a request on a socket with a small receive buffer; waits for
# GOFILE, then reads the whole answer ("read": OUTFILE gets "events dones errors") or closes
slow_client() {
    python3 - "$1" "$2" "$3" "$SLOW_N" <<'PY'
import os, socket, sys, time
port, go, out, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
body = b'{"prompt":"x","max_tokens":%s,"stream":true}' % n.encode()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # before connect: a small window
s.settimeout(300)
s.connect(("127.0.0.1", port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
for _ in range(6000):
    if os.path.exists(go) and open(go).read().strip():
        break
    time.sleep(0.05)
if open(go).read().strip() == "drop":
    s.close()
    sys.exit(0)
data = bytearray()
while True:
    b = s.recv(1 << 20)
    if not b:
        break
    data += b
open(out, "w").write("%d %d %d" % (data.count(b'"text":" tok"'), data.count(b"data: [DONE]"),
                                   data.count(b"backend_failed")))
PY
}
if [ -x "$MOCK" ]; then
    setsid "$MOCK" --port 0 --tokens 1 --gap-us 1 >"$TMP/mock2.log" 2>&1 &
    PIDS+=("$!")
    wait_for grep -q "listening on" "$TMP/mock2.log"
    M2_URL="http://127.0.0.1:$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/mock2.log")"
    m2_idle() { curl -s "$M2_URL/v1/status" | grep -q '"running":0,'; }
    rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$RT_PID/status"; }
    rt_inflight_is() { [ "$(metric_at "$RT_URL" "verity_router_backend_inflight{backend=\"$M2_URL\"}")" = "$1" ]; }
    if start_router router.slow --replica "$M2_URL" --router-health-ms 600000; then
        port=${RT_URL##*:}
        curl -sN "$RT_URL/v1/completions" -d '{"prompt":"x","max_tokens":50,"stream":true}' >/dev/null
        rss0=$(rss_kb)
        : >"$TMP/slow.go"
        slow_client "$port" "$TMP/slow.go" "$TMP/slow.out" &
        CL=$!
        wait_for rt_inflight_is 1 && wait_for m2_idle # every event made: the router took its share
        grow=0
        for i in $(seq 1 20); do # a router that does not stop reading grows within this
            grow=$(( $(rss_kb) - rss0 )); [ "$grow" -gt 10240 ] && break; sleep 0.1
        done
        curl -sN --max-time 60 "$RT_URL/v1/completions" -d '{"prompt":"y","max_tokens":5,"stream":true}' >"$TMP/slow.other"
        others=$(grep -c '"text":" tok"' "$TMP/slow.other")
        echo read >"$TMP/slow.go"
        wait "$CL"
        got=$(cat "$TMP/slow.out" 2>/dev/null)
        if [ "$grow" -le 10240 ] && [ "$others" = 5 ] && grep -q '\[DONE\]' "$TMP/slow.other" && [ "$got" = "$SLOW_N 1 0" ]; then
            pass "router.slow_client_backpressure(+$((grow / 1024)) MB)"
        else fail router.slow_client_backpressure "RSS +${grow} kB (at most 10240), the other stream ${others} events, the slow one: '${got}' (want '$SLOW_N 1 0')"; fi
        # the same, and the client closes: the transfer ends
        : >"$TMP/slow2.go"
        slow_client "$port" "$TMP/slow2.go" "$TMP/slow2.out" &
        CL=$!
        wait_for rt_inflight_is 1 && wait_for m2_idle
        echo drop >"$TMP/slow2.go"
        wait "$CL"
        ended=0
        for i in $(seq 1 300); do rt_inflight_is 0 && { ended=1; break; }; sleep 0.1; done
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 60 "$RT_URL/v1/completions" -d '{"prompt":"z","max_tokens":2}')
        if [ "$ended" = 1 ] && [ "$code" = 200 ]; then pass router.slow_client_gone
        else fail router.slow_client_gone "in flight after the client closed: $(metric_at "$RT_URL" "verity_router_backend_inflight{backend=\"$M2_URL\"}"), then HTTP $code"; fi
        kill -9 -- -"$RT_PID" 2>/dev/null
    fi
else fail router.slow_client_backpressure "$MOCK missing (make tests)"; fi

# --- no sanitizer report in any router's log (a sanitizer build; nothing to find in release) ----
rep=$(grep -h -A12 -m1 'WARNING: ThreadSanitizer\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error' "$TMP"/router.*.log 2>/dev/null | tr '\n' ' ' | head -c 1500)
[ -z "$rep" ] && pass router.no_sanitizer_report || fail router.no_sanitizer_report "$rep"
