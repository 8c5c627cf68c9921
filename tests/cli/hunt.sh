# SPDX-License-Identifier: MIT
# verity hunt end to end against the mock OpenAI-compatible server: usage and target errors, a
# clean target reports 0 corruption at every concurrency, a fault that needs concurrency is found
# at high concurrency (Wilson interval excluding 0) and not at concurrency 1, benign near-tie
# divergence is not corruption, each structural and degeneration oracle fires on its fault, the
# confound split tells a context-length bug from a concurrency bug, /metrics is scraped (verity
# and vLLM names), 503s are retried, --json, servers that reject logprobs or skip_special_tokens
# get requests without them (with a warning), and SIGINT still reports. The mock's faults are
# reproducible (a fixed seed).
#
# Nothing here depends on timing: the /metrics checks compare hunt's last sample (taken after the
# run) with the peak the mock reports (--metrics-peak), however many scrapes landed under load;
# SIGINT is sent once the mock has seen the hunt's requests, to a hunt that could not finish
# anyway; --duration is judged by the sessions run, not by a clock.
. "$(dirname "$0")/hunt_lib.bash"
need_mock hunt.mock || exit 0
command -v python3 >/dev/null || { skip hunt.python3 "python3 needed to read results.json"; exit 0; }
H() { "$VERITY" hunt --quiet "$@"; }

"$VERITY" hunt --help | grep -q -- '--concurrency' && "$VERITY" bisect --help | grep -q -- '--toggle' &&
    pass hunt.help || fail hunt.help "no usage on --help"
expect_exit2 hunt.usage_no_url "$VERITY" hunt --sessions 3
expect_exit2 hunt.usage_bad_concurrency "$VERITY" hunt --url http://127.0.0.1:1 --concurrency 1,x
expect_exit2 hunt.usage_bad_url "$VERITY" hunt --url ftp://example.com
expect_exit2 hunt.usage_unknown_option "$VERITY" hunt --url http://127.0.0.1:1 --frobnicate
closed=$("$MOCK" --free-port)
expect_exit2 hunt.target_unreachable "$VERITY" hunt --quiet --url "http://127.0.0.1:$closed" --sessions 2

# --- a clean target: 0 corruption at every concurrency, reports written -----------------------
N=$(scaled 24 8)
start_mock URL --step-ms 1 --metrics-peak
if H --url "$URL" --concurrency 1,8,24 --sessions "$N" --turns 3 --max-tokens 24 \
     --context-pad 0,1500 --scrape-ms 20 --out "$TMP/clean" >"$TMP/clean.out" 2>"$TMP/clean.err"; then
    r=$(json "$TMP/clean/results.json" "all(c['corrupt']==0 and c['n']>0 for c in d['per_concurrency']) and d['summary']['n']==3*$N and d['summary']['errors']==0")
    if [ "$r" = True ]; then pass hunt.clean_target_zero_at_every_concurrency
    else fail hunt.clean_target_zero_at_every_concurrency "$(json "$TMP/clean/results.json" "d['per_concurrency']")"; fi
    if [ -s "$TMP/clean/report.md" ] && grep -q 'Verdict: clean' "$TMP/clean/report.md" &&
       grep -q '<svg' "$TMP/clean/report.html" && ! grep -qiE '<script|<link|src=|href=' "$TMP/clean/report.html"; then
        pass hunt.clean_reports_self_contained
    else fail hunt.clean_reports_self_contained "report.md/report.html missing or not self-contained"; fi
    # the last sample is the mock's peak (running, batch) as /metrics shows it now
    curl -s "$URL/metrics" >"$TMP/clean.metrics"
    pr=$(awk '$1 == "verity_requests_running" { print $2 }' "$TMP/clean.metrics")
    pb=$(awk '$1 == "verity_batch_size" { print $2 }' "$TMP/clean.metrics")
    r=$(json "$TMP/clean/results.json" "d['metrics']['flavor']=='verity' and d['metrics']['samples'][-1][1]==${pr:-None} and d['metrics']['samples'][-1][3]==${pb:-None} and ${pb:-0}>=8" 2>/dev/null)
    [ "$r" = True ] && pass hunt.metrics_timeline_verity || fail hunt.metrics_timeline_verity "mock peak running ${pr:-?} batch ${pb:-?}; $(json "$TMP/clean/results.json" "d['metrics']['flavor'], len(d['metrics']['samples']), d['metrics']['samples'][-1:]" 2>&1 | tail -n 1)"
    r=$(json "$TMP/clean/results.json" "len(d['per_context_pad'])==2 and d['per_context_pad'][1]['mean_prompt_tokens']>d['per_context_pad'][0]['mean_prompt_tokens']+1000")
    [ "$r" = True ] && pass hunt.context_padding_grows_prompts || fail hunt.context_padding_grows_prompts "$(json "$TMP/clean/results.json" "d['per_context_pad']")"
else
    fail hunt.clean_target_zero_at_every_concurrency "exit $?: $(tail -n 3 "$TMP/clean.err")"
fi
stop_mock "$MOCK_PID"

# --- a fault that needs concurrency ------------------------------------------------------------
N=$(scaled 24 8)
start_mock URL --step-ms 1 --fault salad --fault-min-batch 4 --fault-rate 0.5 --metrics-style vllm --metrics-peak
H --url "$URL" --concurrency 1,16 --sessions "$N" --turns 3 --max-tokens 24 --stream --scrape-ms 20 \
  --out "$TMP/salad" >"$TMP/salad.out" 2>"$TMP/salad.err"
rc=$?
if [ $rc -eq 1 ]; then
    r=$(json "$TMP/salad/results.json" "d['per_concurrency'][0]['corrupt']==0 and d['per_concurrency'][1]['corrupt']>0 and d['per_concurrency'][1]['wilson95'][0]>0")
    [ "$r" = True ] && pass hunt.concurrency_fault_found_only_under_load || fail hunt.concurrency_fault_found_only_under_load "$(json "$TMP/salad/results.json" "d['per_concurrency']")"
    r=$(json "$TMP/salad/results.json" "d['oracles']['degeneration']['salad']>0 and len(d['events'])>0 and all(s['evidence']['test'] and s['evidence']['reference'] for s in d['sessions'] if s['verdict']=='corrupt')")
    [ "$r" = True ] && pass hunt.evidence_and_events || fail hunt.evidence_and_events "$(json "$TMP/salad/results.json" "d['oracles']")"
    grep -q '<mark>' "$TMP/salad/report.html" && grep -q 'first divergent turn' "$TMP/salad/report.md" &&
        pass hunt.side_by_side_report || fail hunt.side_by_side_report "no side-by-side turn in the reports"
    pr=$(curl -s "$URL/metrics" | awk '$1 ~ /^vllm:num_requests_running/ { print $2 }')
    r=$(json "$TMP/salad/results.json" "d['metrics']['flavor']=='vllm' and d['metrics']['samples'][-1][1]==${pr:-None} and ${pr:-0}>=8" 2>/dev/null)
    [ "$r" = True ] && pass hunt.metrics_timeline_vllm_names || fail hunt.metrics_timeline_vllm_names "mock peak running ${pr:-?}; $(json "$TMP/salad/results.json" "d['metrics']['flavor'], d['metrics']['samples'][-1:]" 2>&1 | tail -n 1)"
else
    fail hunt.concurrency_fault_found_only_under_load "exit $rc (expected 1): $(tail -n 3 "$TMP/salad.err")"
fi
stop_mock "$MOCK_PID"

# --- benign near-tie divergence is not corruption ---------------------------------------------
start_mock URL --step-ms 1 --fault neartie --fault-min-batch 4 --fault-rate 0.8
H --url "$URL" --concurrency 16 --sessions "$(scaled 24 8)" --turns 3 --max-tokens 24 \
  --out "$TMP/tie" >"$TMP/tie.out" 2>"$TMP/tie.err"
rc=$?
r=$(json "$TMP/tie/results.json" "d['summary']['corrupt']==0 and d['summary']['benign']>0 and d['oracles']['exact']['diverged_sessions']>0" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ]; then pass hunt.near_tie_divergence_is_benign
else fail hunt.near_tie_divergence_is_benign "exit $rc: $(json "$TMP/tie/results.json" "d['summary']" 2>&1 | tail -n 1)"; fi
stop_mock "$MOCK_PID"

# --- each oracle on its fault -----------------------------------------------------------------
# fault : field in results.json that must count it : extra hunt options
for spec in "markup:structural.markup:" "special:structural.markup:" "badjson:structural.tool_json:" \
            "schema:structural.tool_schema:" "unknowntool:structural.tool_unknown:" \
            "finish:structural.finish_reason:" "identity:structural.stream_identity:--stream" \
            "repeat:degeneration.repeat:" "tags:degeneration.closing_tags:" \
            "flip:near_tie.corrupt_sessions:" "garble:structural.protocol:--stream" \
            "garble:structural.protocol:"; do
    IFS=: read -r fault field extra <<<"$spec"
    start_mock URL --step-ms 1 --fault "$fault" --fault-min-batch 2 --fault-rate 0.9
    name=$fault${extra:+_stream}
    # shellcheck disable=SC2086
    H --url "$URL" --concurrency 12 --sessions "$(scaled 12 6)" --turns 3 --max-tokens 32 \
      --scrape-ms 0 $extra --out "$TMP/o_$name" >/dev/null 2>"$TMP/o_$name.err"
    rc=$?
    grp=${field%%.*} key=${field#*.}
    r=$(json "$TMP/o_$name/results.json" "d['oracles']['$grp']['$key']>0 and d['summary']['corrupt']>0" 2>/dev/null)
    if [ $rc -eq 1 ] && [ "$r" = True ]; then pass "hunt.oracle_$name"
    else fail "hunt.oracle_$name" "exit $rc, $field: $(json "$TMP/o_$name/results.json" "d['oracles']" 2>&1 | tail -n 1)"; fi
    stop_mock "$MOCK_PID"
done

# --- the confound split ------------------------------------------------------------------------
N=$(scaled 16 8)
start_mock URL --step-ms 1 --fault salad --fault-min-batch 0 --fault-min-prompt 2500 --fault-rate 0.9
H --url "$URL" --concurrency 1,12 --context-pad 0,3000 --sessions "$N" --turns 2 --max-tokens 24 \
  --scrape-ms 0 --out "$TMP/ctx" >/dev/null 2>"$TMP/ctx.err"
c=$(json "$TMP/ctx/results.json" "d['confound']" 2>/dev/null)
case "$c" in context-length*) pass hunt.confound_context_bug ;; *) fail hunt.confound_context_bug "$c" ;; esac
stop_mock "$MOCK_PID"
start_mock URL --step-ms 1 --fault salad --fault-min-batch 4 --fault-rate 0.9
H --url "$URL" --concurrency 1,12 --context-pad 0,3000 --sessions "$N" --turns 2 --max-tokens 24 \
  --scrape-ms 0 --out "$TMP/cc" >/dev/null 2>"$TMP/cc.err"
c=$(json "$TMP/cc/results.json" "d['confound']" 2>/dev/null)
case "$c" in concurrency-dependent*) pass hunt.confound_concurrency_bug ;; *) fail hunt.confound_concurrency_bug "$c" ;; esac
stop_mock "$MOCK_PID"

# --- 503s are retried, not counted; --json -----------------------------------------------------
start_mock URL --step-ms 1 --error-rate 0.2
H --url "$URL" --concurrency 8 --sessions "$(scaled 12 6)" --turns 2 --max-tokens 16 --json \
  --retries 8 >"$TMP/retry.json" 2>"$TMP/retry.err"
rc=$?
r=$(json "$TMP/retry.json" "d['client']['retries']>0 and d['summary']['errors']==0 and d['summary']['corrupt']==0" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ]; then pass hunt.retries_and_json_stdout
else fail hunt.retries_and_json_stdout "exit $rc: $(tail -n 2 "$TMP/retry.err")"; fi
stop_mock "$MOCK_PID"

# --- --duration bounds a level however many sessions are asked for ------------------------------
# (the sessions started before the deadline finish, so n > 0; 100,000 would take hours)
start_mock URL --step-ms 2
H --url "$URL" --concurrency 8 --sessions 100000 --turns 2 --max-tokens 16 --duration 1 --json \
  >"$TMP/dur.json" 2>"$TMP/dur.err"
rc=$?
r=$(json "$TMP/dur.json" "0 < d['summary']['n'] < 100000" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ]; then pass hunt.duration_bounds_a_level
else fail hunt.duration_bounds_a_level "exit $rc, $(json "$TMP/dur.json" "d['summary']['n']" 2>/dev/null) sessions: $(tail -n 2 "$TMP/dur.err")"; fi
stop_mock "$MOCK_PID"

# --- a server that rejects logprobs: hunt runs without them, and says so ------------------------
start_mock URL --step-ms 1 --reject-logprobs --random-ids
H --url "$URL" --concurrency 4 --sessions 4 --turns 2 --max-tokens 16 --json >"$TMP/nolp.json" 2>"$TMP/nolp.err"
rc=$?
r=$(json "$TMP/nolp.json" "d['config']['logprobs']==False and d['summary']['corrupt']==0 and d['summary']['errors']==0" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ] && grep -q "rejects logprobs" "$TMP/nolp.err"; then pass hunt.logprobs_fallback_and_random_ids
else fail hunt.logprobs_fallback_and_random_ids "exit $rc: $(tail -n 2 "$TMP/nolp.err")"; fi
stop_mock "$MOCK_PID"

# --- a server that rejects skip_special_tokens (and logprobs): hunt drops each, says so ---------
start_mock URL --step-ms 1 --reject-skip-special
H --url "$URL" --concurrency 4 --sessions 4 --turns 2 --max-tokens 16 --json >"$TMP/noss.json" 2>"$TMP/noss.err"
rc=$?
r=$(json "$TMP/noss.json" "d['config']['skip_special_tokens']==False and d['config']['logprobs']==True and d['summary']['n']==4 and d['summary']['errors']==0" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ] && grep -q "rejects skip_special_tokens" "$TMP/noss.err" && ! grep -q "rejects logprobs" "$TMP/noss.err"; then
    pass hunt.skip_special_tokens_fallback
else fail hunt.skip_special_tokens_fallback "exit $rc: $(tail -n 2 "$TMP/noss.err")"; fi
stop_mock "$MOCK_PID"
start_mock URL --step-ms 1 --reject-skip-special --reject-logprobs
H --url "$URL" --concurrency 4 --sessions 4 --turns 2 --max-tokens 16 --json >"$TMP/none.json" 2>"$TMP/none.err"
rc=$?
r=$(json "$TMP/none.json" "d['config']['skip_special_tokens']==False and d['config']['logprobs']==False and d['summary']['n']==4 and d['summary']['errors']==0" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ] && grep -q "rejects skip_special_tokens" "$TMP/none.err" && grep -q "rejects logprobs" "$TMP/none.err"; then
    pass hunt.both_extensions_fallback
else fail hunt.both_extensions_fallback "exit $rc: $(tail -n 2 "$TMP/none.err")"; fi
stop_mock "$MOCK_PID"
start_mock URL --step-ms 1 --reject-skip-special
H --url "$URL" --concurrency 4 --sessions 2 --turns 1 --max-tokens 8 --no-skip-special-tokens --json \
  >"$TMP/ssoff.json" 2>"$TMP/ssoff.err"
rc=$?
r=$(json "$TMP/ssoff.json" "d['config']['skip_special_tokens']==False and all(s['skip_special_tokens'] is None for s in d['sessions'])" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ] && ! grep -q "rejects" "$TMP/ssoff.err"; then pass hunt.no_skip_special_tokens_option
else fail hunt.no_skip_special_tokens_option "exit $rc: $(tail -n 2 "$TMP/ssoff.err")"; fi
stop_mock "$MOCK_PID"

# --- SIGINT stops early and still reports ------------------------------------------------------
# 100,000 sessions could not finish in hours; SIGINT goes once the mock has seen 12 of the hunt's
# chat requests (polled, up to 120 s), and the hunt must then exit by itself (polled, up to 60 s).
start_mock URL --step-ms 5
"$VERITY" hunt --quiet --url "$URL" --concurrency 4 --sessions 100000 --turns 4 --max-tokens 32 \
  --out "$TMP/int" >/dev/null 2>"$TMP/int.err" &
hp=$!
seen=0
for i in $(seq 1 1200); do
    seen=$(curl -s "$URL/metrics" | awk '$1 == "verity_requests_total" { print $2 }')
    [ "${seen:-0}" -ge 12 ] && break
    kill -0 "$hp" 2>/dev/null || break
    sleep 0.1
done
kill -INT "$hp" 2>/dev/null
for i in $(seq 1 600); do kill -0 "$hp" 2>/dev/null || break; sleep 0.1; done
stopped=yes
kill -0 "$hp" 2>/dev/null && { stopped="no (killed 60 s after SIGINT)"; kill -9 "$hp"; }
wait "$hp"
rc=$?
r=$(json "$TMP/int/results.json" "d['summary']['interrupted']" 2>/dev/null)
if [ "${seen:-0}" -ge 12 ] && [ "$stopped" = yes ] && [ $rc -eq 2 ] && [ "$r" = True ] && grep -q interrupted "$TMP/int.err"; then
    pass hunt.sigint_reports_partial
else fail hunt.sigint_reports_partial "signalled after ${seen:-0} requests, stopped: $stopped, exit $rc, interrupted=$r: $(tail -n 2 "$TMP/int.err")"; fi
stop_mock "$MOCK_PID"

# --- the mock's faults are reproducible: two servers, the same requests, the same bytes ---------
for k in 1 2; do
    start_mock URL --step-ms 1 --fault salad --fault-min-batch 0 --fault-rate 0.5
    for s in 1 2 3 4 5 6 7 8; do
        curl -s -H 'content-type: application/json' "$URL/v1/chat/completions" --data-binary \
            "{\"messages\":[{\"role\":\"user\",\"content\":\"tell me $s\"}],\"max_tokens\":24,\"seed\":$s}"
        echo
    done >"$TMP/repro.$k"
    nf=$(curl -s "$URL/metrics" | awk '$1 == "mock_faults_injected_total" { print $2 }')
    stop_mock "$MOCK_PID"
done
if [ "$(grep -c '"choices"' "$TMP/repro.1")" -eq 8 ] && [ "${nf:-0}" -gt 0 ] && cmp -s "$TMP/repro.1" "$TMP/repro.2"; then
    pass "hunt.mock_faults_reproducible($nf of 8 faulted)"
else fail hunt.mock_faults_reproducible "$(grep -c '"choices"' "$TMP/repro.1") replies, $nf faults, the two servers' replies $(cmp -s "$TMP/repro.1" "$TMP/repro.2" && echo agree || echo differ)"; fi
