# SPDX-License-Identifier: MIT
# Prefill/decode disaggregation over real processes on loopback: `verity router --prefill
# P1,P2 --decode D1,D2` with `verity serve --role prefill` and `--role decode` servers.
#   - usage: an unknown --kv-transport, a bad --role, a bad --kv-listen, --prefill without
#     --decode, --replica mixed with them: exit 2, one line on stderr
#   - /v1/status of a decode server reports its role and its KV address
#   - P1 across processes: p1.mjs's "spec" workload (64 requests: greedy and seeded sampling at
#     0.7 and 1.0, tools, json_schema, stop strings, n > 1, logprobs) through the router gives the
#     same normalized bytes as one monolithic server, each request alone and all 64 at once (every
#     other one streamed) on a synthetic model; the default workload likewise on the embedded
#     default model (one prefill, one decode server; release only)
#   - the transfer really happened: the decode servers restored received, verified blocks
#     (verity_kv_xfer_blocks_total{event="restored"}), the prefill servers' transfers completed,
#     and a prompt never seen before reports usage cached_tokens > 0 from the decode server; the
#     test fails if the decode servers silently compute everything
#   - kill -9 of the prefill server holding a request (its engine held, so the request is in its
#     queue): the client still gets the complete answer (the decode server computes the prompt),
#     the transfer is counted aborted (or cancelled, if the prefill died before it connected),
#     the router told the decode server at once (verity_router_disagg_cancels_total{result="ok"})
#     and no decode wait expired; the other prefill server keeps serving
#   - kill -9 of the decode server in the middle of a stream: the client gets a prefix, an error
#     event and the end (no [DONE], never a hang); the other decode server keeps serving
#   - the client disconnects while the decode server waits for the KV (the prefill server held):
#     the decode side cuts the transfer, the prefill side finds it aborted when it runs again,
#     and both give every block back
#   - afterwards every live server's KV is idle (kv_used 0 in /v1/status: no block leaked by a
#     transfer, on either side) and no transfer is left open
#   - the same P1 comparisons (alone and 64 at once) with --kv-transport ucx, and the transfers
#     counted, on one prefill and one decode server
#   - kill -9 of the router in the middle of a stream: the client's stream ends, the prefill and
#     decode servers go back to idle (no block held, no transfer open) and keep serving
#   - verity hunt against the router finds nothing (concurrency 1 and 16, then 64, --tie-threshold 0)
#   - drain: SIGTERM on the decode server while its request waits for the KV (the prefill server
#     held): new requests get 503, the request is answered whole once the KV arrives, exit 0
#   - a decode server that refuses (429, full) the request a transfer is for: the router tells it
#     the transfer will not come, so the prefill server's transfer is refused at once and its
#     blocks given back (not held for the decode server's --kv-xfer-timeout), and the client gets
#     the 429
#   - contrib/router/disagg_local.sh starts a router, two prefill and two decode servers, serves,
#     and stops them all on SIGTERM
# Checked to fail on a planted defect: a decode server that never uses what it received (its
# poll answering "nothing") fails transfers_happened, fresh_prompt_cached_tokens and
# default_transfers_happened while every P1 comparison still passes.
# Nothing depends on timing: servers are held with --admin-api (pause, step) and every wait polls
# for a state (a metric, a line in a file) with a backstop only for a hung process.
. "$(dirname "$0")/lib.bash"

nodedir="$(dirname "$0")/../node"
MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail disagg.synth "synth failed"; exit 0; }
command -v node >/dev/null || { fail disagg.node "node not found (scripts/setup.sh installs nodejs)"; exit 0; }
scale=${VERITY_TEST_SCALE:-1}

PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 -- -"$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

# --- usage --------------------------------------------------------------------------------------
expect_exit2 disagg.usage_transport "$VERITY" serve --kv-transport nosuch
"$VERITY" serve --kv-transport nosuch 2>&1 | grep -q "known: tcp" &&
    pass disagg.usage_transport_names_known || fail disagg.usage_transport_names_known "$("$VERITY" serve --kv-transport nosuch 2>&1)"
expect_exit2 disagg.usage_role "$VERITY" serve --role middle
expect_exit2 disagg.usage_kv_listen "$VERITY" serve --role decode --kv-listen nonsense
expect_exit2 disagg.usage_kv_listen_port "$VERITY" serve --role decode --kv-listen 127.0.0.1:70000
expect_exit2 disagg.usage_prefill_alone "$VERITY" router --prefill http://127.0.0.1:8080
expect_exit2 disagg.usage_decode_alone "$VERITY" router --decode http://127.0.0.1:8080
expect_exit2 disagg.usage_mixed "$VERITY" router --replica http://127.0.0.1:8080 --prefill http://127.0.0.1:8081 --decode http://127.0.0.1:8082

SOPTS=(-t 1 --admin-api 1)
# srv VAR ARGS...: starts a server; VAR_URL, VAR_PID, VAR_PORT
srv() {
    local v=$1; shift
    start_server "disagg.server_$v" "${SOPTS[@]}" "$@" || return 1
    PIDS+=("$SRV_PID")
    printf -v "${v}_URL" %s "$SRV_URL"; printf -v "${v}_PID" %s "$SRV_PID"; printf -v "${v}_PORT" %s "$SRV_PORT"
}
adm() { curl -s -o /dev/null -w '%{http_code}' -X POST -d "${3:-}" "$1/admin/$2" | grep -q 200; }
waiting_is() { [ "$(metric_at "$1" verity_requests_waiting)" = "$2" ]; }
kv_used() { curl -s "$1/v1/status" | sed -n 's/.*"kv_used":\([0-9]*\).*/\1/p'; }
idle() { local u; for u in "$@"; do [ "$(kv_used "$u")" = 0 ] || return 1; done; }
restored() { local s=0 u; for u in "$@"; do s=$((s + $(metric_at "$u" 'verity_kv_xfer_blocks_total{event="restored"}'))); done; echo $s; }
# p1 NAME URL MODE [WORKLOAD]
p1() { VERITY_P1_WORKLOAD=${4:-} VERITY_URL=$2 run_node "$1" -o "$TMP/p1.$1" "$nodedir/p1.mjs" "$3"; }
same() {
    if cmp -s "$TMP/p1.$1" "$TMP/p1.$2"; then pass "disagg.$2${3:+($3)}"
    else fail "disagg.$2" "responses differ from one server's: $(diff "$TMP/p1.$1" "$TMP/p1.$2" | head -c 600)"; fi
}
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
LONG_BODY='{"prompt":"Once upon a time there was a cat who sat on the mat while it rained and then","max_tokens":120,"temperature":0,"ignore_eos":true,"stream":true}'

# --- the reference: one monolithic server -------------------------------------------------------
srv REF -m "$MODEL" || exit 0
p1 ref "$REF_URL" record spec
curl -sN "$REF_URL/v1/completions" -d "$LONG_BODY" >"$TMP/ref.long"
KILL_BODY='{"prompt":"the quick brown fox jumps over the lazy dog again and again until the sun goes down","max_tokens":24,"temperature":0.9,"seed":3}'
curl -s "$REF_URL/v1/completions" -d "$KILL_BODY" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' >"$TMP/ref.kill"
stop_server
if [ "$(grep -c '' "$TMP/p1.ref")" -ne 64 ] || grep -q '"error"' "$TMP/p1.ref" || ! grep -q '\[DONE\]' "$TMP/ref.long"; then
    fail disagg.reference "the reference run is incomplete"; exit 0
fi

# --- two prefill and two decode servers behind one router ---------------------------------------
srv P1 -m "$MODEL" --role prefill || exit 0
srv P2 -m "$MODEL" --role prefill || exit 0
srv D1 -m "$MODEL" --role decode --kv-listen 127.0.0.1:0 || exit 0
srv D2 -m "$MODEL" --role decode || exit 0
st=$(curl -s "$D1_URL/v1/status")
grep -q '"role":"decode","kv_addr":"127.0.0.1:[1-9][0-9]*"' <<<"$st" && grep -q '"role":"prefill","kv_addr":""' <<<"$(curl -s "$P1_URL/v1/status")" &&
    pass disagg.status_role_kv_addr || fail disagg.status_role_kv_addr "$st"
# POST /v1/kv_transfer/cancel: bad input gets a 4xx with an OpenAI-style error body (bad JSON, no
# or a malformed id, a server that receives no KV, a GET), a good id 200 naming what happened
cancel_bad=""
for c in "$D1_URL|POST|{not json|400" "$D1_URL|POST|{}|400" "$D1_URL|POST|{\"id\":\"xyz\"}|400" \
    "$P1_URL|POST|{\"id\":\"00000000000000ab\"}|404" "$D1_URL|GET||405"; do
    IFS='|' read -r url meth body want <<<"$c"
    got=$(curl -s -o "$TMP/cancel.out" -w '%{http_code}' -X "$meth" ${body:+-d "$body"} "$url/v1/kv_transfer/cancel")
    if [ "$got" != "$want" ] || { [ "$want" != 405 ] && ! grep -q '"error":{.*"message":"' "$TMP/cancel.out"; }; then
        cancel_bad="$cancel_bad [$meth $body -> $got: $(head -c 200 "$TMP/cancel.out")]"
    fi
done
got=$(curl -s -d '{"id":"00000000000000ab"}' "$D1_URL/v1/kv_transfer/cancel")
grep -q '"id":"00000000000000ab","result":"' <<<"$got" || cancel_bad="$cancel_bad [good id: $got]"
[ -z "$cancel_bad" ] && pass disagg.cancel_route_bad_input || fail disagg.cancel_route_bad_input "$cancel_bad"
start_router disagg.router --router-health-ms 100 --prefill "$P1_URL,$P2_URL" --decode "$D1_URL,$D2_URL" || exit 0
grep -q '2 prefill and 2 decode servers, 4 up' "$RT_LOG" && pass disagg.router_up || fail disagg.router_up "$(cat "$RT_LOG")"

p1 alone "$RT_URL" record spec && same ref alone "64 requests one by one"
p1 concurrent "$RT_URL" replay spec && same ref concurrent "64 at once"
r0=$(restored "$D1_URL" "$D2_URL")
tx=$(( $(metric_at "$P1_URL" 'verity_kv_xfer_transfers_total{dir="send",result="ok"}') + $(metric_at "$P2_URL" 'verity_kv_xfer_transfers_total{dir="send",result="ok"}') ))
rtx=$(metric_at "$RT_URL" 'verity_router_disagg_requests_total{path="transfer"}')
[ "$r0" -gt 0 ] && [ "$tx" -gt 0 ] && [ "${rtx:-0}" -ge 128 ] && pass "disagg.transfers_happened($tx transfers, $r0 blocks restored)" ||
    fail disagg.transfers_happened "restored $r0, transfers ok $tx, router transfers ${rtx:-?}"
# a prompt no server has seen: its cached tokens can only come from the transfer
NEW='{"prompt":"zebra quartz violin meadow copper lantern orbit pebble walnut harbor cinder maple","max_tokens":4,"temperature":0}'
curl -s "$RT_URL/v1/completions" -d "$NEW" >"$TMP/new.json"
ct=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens_details"]["cached_tokens"])' "$TMP/new.json" 2>/dev/null)
r1=$(restored "$D1_URL" "$D2_URL")
[ "${ct:-0}" -gt 0 ] && [ "$r1" -gt "$r0" ] && pass "disagg.fresh_prompt_cached_tokens($ct)" ||
    fail disagg.fresh_prompt_cached_tokens "cached_tokens ${ct:-?}, restored $r0 -> $r1: $(head -c 300 "$TMP/new.json")"

# --- kill -9 of the prefill server holding a request ---------------------------------------------
adm "$P1_URL" pause && adm "$P2_URL" pause
curl -s "$RT_URL/v1/completions" -d "$KILL_BODY" >"$TMP/kill.json" &
CURL1=$!
held() { waiting_is "$P1_URL" 1 || waiting_is "$P2_URL" 1; }
if wait_for held; then
    if waiting_is "$P1_URL" 1; then XP=$P1_PID X=$P1_URL Y=$P2_URL; else XP=$P2_PID X=$P2_URL Y=$P1_URL; fi
    dsum() { echo $(( $(metric_at "$D1_URL" "$1") + $(metric_at "$D2_URL" "$1") )); }
    AB='verity_kv_xfer_transfers_total{dir="recv",result="aborted"}' CN=verity_kv_xfer_cancelled_total EX=verity_kv_xfer_waits_expired_total
    a0=$(( $(dsum "$AB") + $(dsum "$CN") )); x0=$(dsum "$EX")
    rc0=$(metric_at "$RT_URL" 'verity_router_disagg_cancels_total{result="ok"}')
    kill -9 -- -"$XP"
    t=0; while kill -0 "$CURL1" 2>/dev/null && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
    if kill -0 "$CURL1" 2>/dev/null; then kill "$CURL1"; fail disagg.prefill_killed "the client hangs"
    else
        got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$TMP/kill.json" 2>/dev/null)
        a1=$(( $(dsum "$AB") + $(dsum "$CN") )); x1=$(dsum "$EX")
        rc1=$(metric_at "$RT_URL" 'verity_router_disagg_cancels_total{result="ok"}')
        [ "$got" = "$(cat "$TMP/ref.kill")" ] && [ "$a1" -gt "$a0" ] && pass "disagg.prefill_killed_complete_answer" ||
            fail disagg.prefill_killed_complete_answer "answer '$got' vs '$(cat "$TMP/ref.kill")', aborted or cancelled transfers $a0 -> $a1"
        [ "${rc1:-0}" -gt "${rc0:-0}" ] && [ "$x1" = "$x0" ] && pass disagg.prefill_killed_decode_told ||
            fail disagg.prefill_killed_decode_told "router cancels ${rc0:-?} -> ${rc1:-?}, decode waits expired $x0 -> $x1"
    fi
    adm "$Y" resume
    code=$(curl -s -o "$TMP/one" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"one more story about the cat and the dog and the mat","max_tokens":3}')
    [ "$code" = 200 ] && pass disagg.serves_with_a_prefill_down || fail disagg.serves_with_a_prefill_down "HTTP $code: $(head -c 200 "$TMP/one")"
else fail disagg.prefill_killed_complete_answer "the request did not reach a prefill server"; adm "$P1_URL" resume; adm "$P2_URL" resume; Y=$P2_URL; fi
LIVE_P=$Y

# --- kill -9 of a decode server in the middle of a stream ---------------------------------------
adm "$D1_URL" pause && adm "$D2_URL" pause
curl -sN "$RT_URL/v1/completions" -d "$LONG_BODY" >"$TMP/cut.stream" &
CURL2=$!
heldd() { waiting_is "$D1_URL" 1 || waiting_is "$D2_URL" 1; }
if wait_for heldd; then
    if waiting_is "$D1_URL" 1; then ZP=$D1_PID Z=$D1_URL W=$D2_URL; else ZP=$D2_PID Z=$D2_URL W=$D1_URL; fi
    adm "$W" resume
    streamed() { adm "$Z" step '{"steps":1}'; grep -q '"text":"[^"]' "$TMP/cut.stream"; }
    if wait_for streamed; then
        kill -9 -- -"$ZP"
        t=0; while kill -0 "$CURL2" 2>/dev/null && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
        if kill -0 "$CURL2" 2>/dev/null; then kill "$CURL2"; fail disagg.decode_killed_mid_stream "the client hangs"
        else
            got=$(sse_text "$TMP/cut.stream"); want=$(sse_text "$TMP/ref.long")
            if ! grep -q '"code":"backend_failed"' "$TMP/cut.stream"; then fail disagg.decode_killed_mid_stream "no error event: $(tail -c 300 "$TMP/cut.stream")"
            elif grep -q '\[DONE\]' "$TMP/cut.stream"; then fail disagg.decode_killed_mid_stream "the cut stream ends with [DONE]"
            elif [ -z "$got" ] || [ "${want#"$got"}" = "$want" ] || [ ${#got} -ge ${#want} ]; then
                fail disagg.decode_killed_mid_stream "the text streamed is not a proper prefix of one server's (${#got} vs ${#want} bytes)"
            else pass "disagg.decode_killed_mid_stream(${#got} of ${#want} bytes, then the error)"; fi
        fi
    else fail disagg.decode_killed_mid_stream "nothing was streamed"; fi
    code=$(curl -s -o "$TMP/one" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"yet another story about a dog who ran to the park","max_tokens":3}')
    [ "$code" = 200 ] && pass disagg.serves_with_a_decode_down || fail disagg.serves_with_a_decode_down "HTTP $code: $(head -c 200 "$TMP/one")"
    LIVE_D=$W
else fail disagg.decode_killed_mid_stream "the request did not reach a decode server"; adm "$D1_URL" resume; adm "$D2_URL" resume; LIVE_D=$D2_URL; fi

# --- the client goes away while its decode server waits for the KV -----------------------------
# the prefill server is held (the request sits in its queue), the decode server waits for the
# transfer; the client disconnects: the decode side cuts the transfer, and when the prefill server
# runs again its sender finds the transfer aborted and gives every block back
adm "$LIVE_P" pause
sa0=$(metric_at "$LIVE_P" 'verity_kv_xfer_transfers_total{dir="send",result="aborted"}')
ra0=$(metric_at "$LIVE_D" 'verity_kv_xfer_transfers_total{dir="recv",result="aborted"}')
curl -s "$RT_URL/v1/completions" -d '{"prompt":"a client who leaves early: once upon a time there was a cat who sat on the mat","max_tokens":8}' >/dev/null &
CURL3=$!
both_hold() { waiting_is "$LIVE_P" 1 && waiting_is "$LIVE_D" 1; }
if wait_for both_hold; then
    kill "$CURL3"; wait "$CURL3" 2>/dev/null
    d_free() { waiting_is "$LIVE_D" 0 && [ "$(metric_at "$LIVE_D" 'verity_kv_xfer_transfers_total{dir="recv",result="aborted"}')" -gt "$ra0" ]; }
    wait_for d_free
    adm "$LIVE_P" resume
    p_free() { [ "$(metric_at "$LIVE_P" 'verity_kv_xfer_transfers_total{dir="send",result="aborted"}')" -gt "$sa0" ]; }
    if wait_for p_free && wait_for idle "$LIVE_P" "$LIVE_D"; then pass disagg.client_gone_both_sides_released
    else fail disagg.client_gone_both_sides_released "send aborted $sa0 -> $(metric_at "$LIVE_P" 'verity_kv_xfer_transfers_total{dir="send",result="aborted"}'), kv_used $(kv_used "$LIVE_P") / $(kv_used "$LIVE_D")"; fi
else fail disagg.client_gone_both_sides_released "the request was not held on both sides"; adm "$LIVE_P" resume; kill "$CURL3" 2>/dev/null; fi

# --- no block leaked, no transfer left open -------------------------------------------------------
opened() { [ "$(metric_at "$1" 'verity_kv_xfer_open{dir="send"}')" = 0 ] && [ "$(metric_at "$1" 'verity_kv_xfer_open{dir="recv"}')" = 0 ]; }
if wait_for idle "$LIVE_P" "$LIVE_D" && opened "$LIVE_P" && opened "$LIVE_D"; then pass disagg.kv_idle_after
else fail disagg.kv_idle_after "kv_used prefill $(kv_used "$LIVE_P"), decode $(kv_used "$LIVE_D")"; fi

# --- verity hunt against the router -------------------------------------------------------------
sess=$(python3 -c "print(max(4, int(16 * $scale)))")
"$VERITY" hunt --quiet --json --url "$RT_URL" --tools 0 --temperature 1 --tie-threshold 0 --scrape-ms 0 \
    --concurrency 1,16 --sessions "$sess" --turns 2 --max-tokens 24 >"$TMP/hunt.json" 2>"$TMP/hunt.err"
rc=$?
r=$(python3 -c "import json; d=json.load(open('$TMP/hunt.json')); print(d['summary']['errors']==0 and d['summary']['corrupt']==0 and d['oracles']['exact']['diverged_sessions']==0)" 2>/dev/null)
[ $rc -eq 0 ] && [ "$r" = True ] && pass disagg.hunt_finds_nothing ||
    fail disagg.hunt_finds_nothing "exit $rc, $r: $(tail -n 2 "$TMP/hunt.err")"
# and at concurrency 64 (64 sessions at once: 6 s in release on this model, 2026-12-02)
sess64=$(python3 -c "print(max(16, int(64 * $scale)))")
"$VERITY" hunt --quiet --json --url "$RT_URL" --tools 0 --temperature 1 --tie-threshold 0 --scrape-ms 0 \
    --concurrency 64 --sessions "$sess64" --turns 2 --max-tokens 24 >"$TMP/hunt64.json" 2>"$TMP/hunt64.err"
rc=$?
r=$(python3 -c "import json; d=json.load(open('$TMP/hunt64.json')); print(d['summary']['n']==$sess64 and d['summary']['errors']==0 and d['summary']['corrupt']==0 and d['oracles']['exact']['diverged_sessions']==0)" 2>/dev/null)
[ $rc -eq 0 ] && [ "$r" = True ] && pass "disagg.hunt_finds_nothing_64($sess64 sessions)" ||
    fail disagg.hunt_finds_nothing_64 "exit $rc, $r: $(tail -n 2 "$TMP/hunt64.err")"

# --- drain: SIGTERM on the decode server while its request waits for the KV --------------------
# the prefill server is held, so the request is in flight on both; the decode server drains
# (new requests 503), the prefill server runs again, the transfer completes and the request is
# answered whole; the decode server exits 0 and the prefill server is idle
if [ "$LIVE_D" = "$D1_URL" ]; then LIVE_D_PID=$D1_PID; else LIVE_D_PID=$D2_PID; fi
adm "$LIVE_P" pause
curl -s -o "$TMP/drain.body" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"a story told during a drain: once upon a time there was a cat who sat on the mat","max_tokens":6}' >"$TMP/drain.code" &
CURL4=$!
if wait_for both_hold; then
    kill -TERM "$LIVE_D_PID"
    draining() { curl -s "$LIVE_D/v1/status" | grep -q '"draining":true'; }
    wait_for draining
    c503=$(curl -s -o /dev/null -w '%{http_code}' "$LIVE_D/v1/completions" -d '{"prompt":"late","max_tokens":2}')
    adm "$LIVE_P" resume
    wait "$CURL4"
    t=0; while kill -0 "$LIVE_D_PID" 2>/dev/null && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
    wait "$LIVE_D_PID" 2>/dev/null; st=$?
    if [ "$(cat "$TMP/drain.code")" = 200 ] && grep -q '"finish_reason"' "$TMP/drain.body" && [ "$c503" = 503 ] &&
        [ $st -eq 0 ] && wait_for idle "$LIVE_P"; then pass disagg.decode_drain
    else fail disagg.decode_drain "in flight: $(cat "$TMP/drain.code"), new: $c503, exit $st, prefill kv_used $(kv_used "$LIVE_P")"; fi
else fail disagg.decode_drain "the request was not held on both sides"; adm "$LIVE_P" resume; fi
kill -9 -- -"$RT_PID" 2>/dev/null
for p in "$P1_PID" "$P2_PID" "$D1_PID" "$D2_PID"; do kill -9 -- -"$p" 2>/dev/null; done

# --- a decode server that refuses the request its transfer is for: the router cancels there -------
# one prefill server (RP) and one decode server (RD: room for one sequence, --max-batch 1
# --queue-max 0), both with --kv-xfer-timeout 600000, so RD's wait for a transfer no request
# expects, and RP's for the ACKs that do not come meanwhile, would outlast the backstop; RD holds a request of its own (its engine paused), so it answers the
# router's request 429 before expecting the transfer; the router gives up on RD and tells it the
# transfer will not come (a tombstone), so RP's connection for it is refused at once and RP gives
# its blocks back, instead of holding them for RD's 600 s; the client gets the 429. With no health
# poll after the first (--router-health-ms 600000) the router goes by what it saw at the start.
srv RP -m "$MODEL" --role prefill --kv-xfer-timeout 600000 || exit 0
srv RD -m "$MODEL" --role decode --max-batch 1 --queue-max 0 --kv-xfer-timeout 600000 || exit 0
start_router disagg.router_refused --router-health-ms 600000 --prefill "$RP_URL" --decode "$RD_URL" || exit 0
rd_up() { grep -q '2 up' "$RT_LOG"; }
rp_aborted() { [ "$(metric_at "$RP_URL" 'verity_kv_xfer_transfers_total{dir="send",result="aborted"}')" -gt "${ab0:-0}" ]; }
if wait_for rd_up; then
    adm "$RD_URL" pause
    curl -s -o /dev/null "$RD_URL/v1/completions" -d '{"prompt":"held","max_tokens":2}' &
    CURLR=$!
    if wait_for waiting_is "$RD_URL" 1; then
        rc0=$(metric_at "$RT_URL" 'verity_router_disagg_cancels_total{result="ok"}')
        ab0=$(metric_at "$RP_URL" 'verity_kv_xfer_transfers_total{dir="send",result="aborted"}')
        code=$(curl -s -o "$TMP/refused.body" -w '%{http_code}' "$RT_URL/v1/completions" -d '{"prompt":"a story for a server with no room: once upon a time there was a cat who sat on the mat","max_tokens":4}')
        if [ "$code" = 429 ] && wait_for rp_aborted && wait_for idle "$RP_URL"; then
            rc1=$(metric_at "$RT_URL" 'verity_router_disagg_cancels_total{result="ok"}')
            [ "${rc1:-0}" -gt "${rc0:-0}" ] && pass disagg.decode_refused_transfer_cancelled ||
                fail disagg.decode_refused_transfer_cancelled "router cancels ok ${rc0:-?} -> ${rc1:-?}"
        else
            fail disagg.decode_refused_transfer_cancelled "HTTP $code ($(head -c 200 "$TMP/refused.body")), prefill transfers aborted ${ab0:-?} -> $(metric_at "$RP_URL" 'verity_kv_xfer_transfers_total{dir="send",result="aborted"}'), kv_used $(kv_used "$RP_URL")"
        fi
    else fail disagg.decode_refused_transfer_cancelled "RD did not hold its own request"; fi
    adm "$RD_URL" resume
    wait "$CURLR" 2>/dev/null
else fail disagg.decode_refused_transfer_cancelled "the router did not see its backends up: $(tail -c 300 "$RT_LOG")"; fi
kill -9 -- -"$RT_PID" 2>/dev/null
for p in "$RP_PID" "$RD_PID"; do kill -9 -- -"$p" 2>/dev/null; done

# --- the ucx transport: one prefill, one decode server ------------------------------------------
# the same workload with the KV carried by libucx (shared memory and cma on one machine); where
# UCX is not available (one SKIP line) the block runs over tcp, for the router kill below
XT=ucx
if "$VERITY" serve --role decode --kv-transport ucx --kv-listen 127.0.0.1:0 --port 0 -m /nonexistent.gguf 2>&1 | grep -q "transport"; then
    skip disagg.ucx "the ucx transport is not available here"; XT=tcp
fi
srv UP -m "$MODEL" --role prefill --kv-transport $XT || exit 0
srv UD -m "$MODEL" --role decode --kv-transport $XT || exit 0
start_router disagg.router_ucx --router-health-ms 100 --prefill "$UP_URL" --decode "$UD_URL" || exit 0
if [ $XT = ucx ]; then
    p1 ualone "$RT_URL" record spec && same ref ualone "ucx, 64 requests one by one"
    p1 uconc "$RT_URL" replay spec && same ref uconc "ucx, 64 at once"
    ur=$(restored "$UD_URL")
    utx=$(metric_at "$UP_URL" 'verity_kv_xfer_transfers_total{dir="send",result="ok"}')
    [ "$ur" -gt 0 ] && [ "${utx:-0}" -gt 0 ] && pass "disagg.ucx_transfers_happened($utx transfers, $ur blocks restored)" ||
        fail disagg.ucx_transfers_happened "restored $ur, transfers ok ${utx:-?}"
fi
# kill -9 of the router in the middle of a stream (the decode server held after the first token):
# the client's stream ends (never a hang), both servers give every block back and keep serving
adm "$UD_URL" pause
curl -sN "$RT_URL/v1/completions" -d "$LONG_BODY" >"$TMP/rcut.stream" &
CURL5=$!
if wait_for waiting_is "$UD_URL" 1; then
    rstreamed() { adm "$UD_URL" step '{"steps":1}'; grep -q '"text":"[^"]' "$TMP/rcut.stream"; }
    wait_for rstreamed
    kill -9 -- -"$RT_PID"
    adm "$UD_URL" resume
    t=0; while kill -0 "$CURL5" 2>/dev/null && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
    if kill -0 "$CURL5" 2>/dev/null; then kill "$CURL5"; fail disagg.router_killed "the client hangs"
    elif grep -q '\[DONE\]' "$TMP/rcut.stream"; then fail disagg.router_killed "the stream was not cut"
    else
        code=$(curl -s -o /dev/null -w '%{http_code}' "$UD_URL/v1/completions" -d '{"prompt":"after the router died","max_tokens":2}')
        if wait_for idle "$UP_URL" "$UD_URL" && opened "$UP_URL" && opened "$UD_URL" && [ "$code" = 200 ]; then
            pass disagg.router_killed_servers_idle_and_serving
        else fail disagg.router_killed_servers_idle_and_serving "HTTP $code, kv_used $(kv_used "$UP_URL") / $(kv_used "$UD_URL")"; fi
    fi
else fail disagg.router_killed "the request did not reach the decode server"; adm "$UD_URL" resume; fi
wait_for idle "$UP_URL" "$UD_URL" && pass disagg.${XT}_kv_idle_after || fail disagg.${XT}_kv_idle_after "kv_used $(kv_used "$UP_URL") / $(kv_used "$UD_URL")"
kill -9 -- -"$RT_PID" -"$UP_PID" -"$UD_PID" 2>/dev/null

# --- the embedded default model: one prefill, one decode server ---------------------------------
# (release only: under the sanitizers, VERITY_TEST_SCALE < 1, the synthetic model's runs above
# already drive every path of the split)
if python3 -c "import sys; sys.exit(0 if $scale >= 1 else 1)"; then
srv DREF || exit 0
p1 dref "$DREF_URL" record
stop_server
srv DP --role prefill || exit 0
srv DD --role decode || exit 0
start_router disagg.router_default --router-health-ms 100 --prefill "$DP_URL" --decode "$DD_URL" || exit 0
p1 dalone "$RT_URL" record && same dref dalone "default model, one by one"
p1 dconc "$RT_URL" replay && same dref dconc "default model, 64 at once"
[ "$(restored "$DD_URL")" -gt 0 ] && pass disagg.default_transfers_happened || fail disagg.default_transfers_happened "nothing restored"
wait_for idle "$DP_URL" "$DD_URL" && pass disagg.default_kv_idle_after || fail disagg.default_kv_idle_after "kv_used $(kv_used "$DP_URL") / $(kv_used "$DD_URL")"
kill -9 -- -"$RT_PID" -"$DP_PID" -"$DD_PID" 2>/dev/null
fi

# --- contrib/router/disagg_local.sh: a router, two prefill and two decode servers, SIGTERM -------
contrib_check disagg.contrib_local disagg_local.sh "2 prefill and 2 decode servers, 4 up" "once upon a time there was a cat who sat on the mat" -m "$MODEL" -t 1
