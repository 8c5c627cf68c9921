# SPDX-License-Identifier: MIT
# verity bisect end to end: the mock server is launched per configuration with 8 toggles, one of
# which (detok-batch) gates a fault that needs concurrency; bisect must name it within
# 2*log2(8)+2 = 8 restarts, resume from its ledger after a budget stop and after SIGTERM (leaving
# no server behind), pass environment-variable toggles, and reject bad usage with exit 2.
. "$(dirname "$0")/hunt_lib.bash"
need_mock bisect.mock || exit 0
command -v python3 >/dev/null || { skip bisect.python3 "python3 needed to read the ledger"; exit 0; }

TAG="vtest$$"
TOGGLES=()
for t in cuda-graph prefix-cache overlap-schedule kv-fp8 chunked-prefill detok-batch host-kv-tier spec-decode; do
    TOGGLES+=(--toggle "$t=0:1")
done
LAUNCH="$MOCK --port {port} --step-ms 1 --max-lifetime 300 --tag $TAG --fault salad --fault-min-batch 4 --fault-rate 0.6 --fault-when detok-batch {flags}"
HEALTH='http://127.0.0.1:{port}/health'
HUNT='--url http://127.0.0.1:{port} --concurrency 12 --turns 2 --max-tokens 24 --scrape-ms 0'
B() { "$VERITY" bisect --quiet --launch "$LAUNCH" --health "$HEALTH" "${TOGGLES[@]}" --hunt "$HUNT" "$@"; }

# --- names the culprit within 8 restarts -------------------------------------------------------
B --budget 8 --ledger "$TMP/l1.json" >"$TMP/l1.out" 2>"$TMP/l1.err"
rc=$?
r=$(json "$TMP/l1.json" "d['summary']['culprit']==['detok-batch'] and d['summary']['restarts']<=8 and d['summary']['state']=='culprit'" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ]; then
    pass "bisect.names_culprit_among_8_in_$(json "$TMP/l1.json" "d['summary']['restarts']")_restarts"
else fail bisect.names_culprit_among_8 "exit $rc: $(json "$TMP/l1.json" "d['summary']" 2>&1 | tail -n 1) $(tail -n 2 "$TMP/l1.err")"; fi
[ -s "$TMP/l1.md" ] && grep -q 'culprit: detok-batch' "$TMP/l1.md" && grep -q 'culprit: detok-batch' "$TMP/l1.out" &&
    pass bisect.ledger_markdown || fail bisect.ledger_markdown "l1.md or stdout lacks the culprit"
expect_procs_gone bisect.no_server_left "--tag $TAG"

# --- resume after running out of budget --------------------------------------------------------
B --budget 3 --ledger "$TMP/l2.json" >/dev/null 2>"$TMP/l2.err"
rc1=$?
s1=$(json "$TMP/l2.json" "d['summary']['state'], d['summary']['restarts']" 2>/dev/null)
"$VERITY" bisect --launch "$LAUNCH" --health "$HEALTH" "${TOGGLES[@]}" --hunt "$HUNT" --budget 8 \
    --ledger "$TMP/l2.json" >/dev/null 2>"$TMP/l2b.err"
rc2=$?
r=$(json "$TMP/l2.json" "d['summary']['culprit']==['detok-batch'] and d['summary']['restarts']<=8 and all(e['restarts']==1 for e in d['entries'])" 2>/dev/null)
if [ $rc1 -eq 1 ] && [ "$s1" = "budget 3" ] && [ $rc2 -eq 0 ] && [ "$r" = True ] && grep -q resuming "$TMP/l2b.err"; then
    pass bisect.resumes_after_budget
else fail bisect.resumes_after_budget "first exit $rc1 ($s1), second exit $rc2: $(tail -n 2 "$TMP/l2b.err")"; fi

# --- resume after SIGTERM mid-run --------------------------------------------------------------
"$VERITY" bisect --quiet --launch "$LAUNCH" --health "$HEALTH" "${TOGGLES[@]}" --hunt "$HUNT" --budget 8 \
    --ledger "$TMP/l3.json" >/dev/null 2>"$TMP/l3.err" &
bp=$!
# mid-run: once the ledger holds two entries (polled, up to 120 s, while bisect runs)
n=0
for i in $(seq 1 1200); do
    n=$(json "$TMP/l3.json" "len(d['entries'])" 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 2 ] && break
    kill -0 "$bp" 2>/dev/null || break
    sleep 0.1
done
kill -TERM "$bp"
wait "$bp"
rc1=$?
left=no; procs_gone "--tag $TAG" || left="yes: pids $(echo $LEFT_PIDS)"
B --budget 9 --ledger "$TMP/l3.json" >/dev/null 2>"$TMP/l3b.err"
rc2=$?
r=$(json "$TMP/l3.json" "d['summary']['culprit']==['detok-batch'] and d['summary']['restarts']<=9" 2>/dev/null)
if [ "${n:-0}" -ge 2 ] && [ $rc1 -eq 2 ] && [ "$left" = no ] && [ $rc2 -eq 0 ] && [ "$r" = True ]; then pass bisect.resumes_after_sigterm
else fail bisect.resumes_after_sigterm "signalled at ${n:-0} ledger entries, first exit $rc1 (server left: $left), second exit $rc2: $(json "$TMP/l3.json" "d['summary']" 2>&1 | tail -n 1)"; fi

# --- environment-variable toggles --------------------------------------------------------------
"$VERITY" bisect --quiet --launch "$MOCK --port {port} --step-ms 1 --max-lifetime 300 --tag $TAG --fault-min-batch 4 --fault-rate 0.6 {flags}" \
    --health "$HEALTH" --toggle MOCK_FAULT=none:markup --toggle spec-decode=0:1 --hunt "$HUNT" \
    --ledger "$TMP/l4.json" >/dev/null 2>"$TMP/l4.err"
rc=$?
r=$(json "$TMP/l4.json" "d['summary']['culprit']==['MOCK_FAULT']" 2>/dev/null)
[ $rc -eq 0 ] && [ "$r" = True ] && pass bisect.environment_toggle || fail bisect.environment_toggle "exit $rc: $(tail -n 2 "$TMP/l4.err")"

# --- usage and launch errors -------------------------------------------------------------------
expect_exit2 bisect.usage_no_launch "$VERITY" bisect --health "$HEALTH" --toggle a=0:1
expect_exit2 bisect.usage_bad_toggle "$VERITY" bisect --launch x --health "$HEALTH" --toggle a=0
expect_exit2 bisect.usage_bad_placeholder "$VERITY" bisect --launch 'x {nope}' --health "$HEALTH" --toggle a=0:1 --hunt "$HUNT"
expect_exit2 bisect.usage_hunt_args "$VERITY" bisect --launch x --health "$HEALTH" --toggle a=0:1 --hunt '--concurrency x'
expect_exit2 bisect.ledger_of_another_bisection "$VERITY" bisect --launch "$LAUNCH" --health "$HEALTH" --toggle other=0:1 --hunt "$HUNT" --ledger "$TMP/l1.json"
expect_exit2 bisect.launch_fails "$VERITY" bisect --quiet --launch 'exit 3' --health "$HEALTH" --toggle a=0:1 --hunt "$HUNT" --ledger "$TMP/l5.json" --health-timeout 5
expect_procs_gone bisect.no_server_left_at_end "--tag $TAG"
