# SPDX-License-Identifier: MIT
# verity hunt and verity bisect against the real thing: `build/faults/verity serve` on a tiny
# synthetic model. With no fault, hunt finds no divergence at all at concurrency 1, 16 and 48 (a
# batch above 32 with --max-batch 64). Each FAULT toggle of the fault build (docs/hunt.md,
# "Against verity"), switched on by its environment variable with the server options that trigger it,
# is found: corrupt sessions with a Wilson interval that excludes 0 at a concurrency that triggers
# it, none at concurrency 1. Fault (a) is found only because hunt varies skip_special_tokens across
# sessions. bisect names the fault's variable among 8 toggles (7 real, harmless ones) within
# 2*log2(8)+2 = 8 restarts and leaves no server behind. About a minute on a loaded 2-core VM.
#
# Why temperature 1 and --tie-threshold 0: the synthetic model has random weights. Its greedy
# choice barely depends on the context (it mostly repeats one token, the leader about 0.6 nats
# ahead whatever came before), so faults that damage attention or the KV cache seldom change a
# greedy token; seeded sampling makes every output depend on the exact logits. Its sampling
# distribution is nearly uniform (every candidate within about 0.3 nats of the next), so every
# position is a near tie at the default 0.5-nat threshold and a corrupted token would usually pass
# as benign. verity is batch-invariant (P1: the same bytes at every batch), so the threshold that
# fits it is 0: any divergence is corruption, and the fault-free runs must not diverge at all.
#
# Triggers: (a) needs special tokens (<s>, <unk>: about 1 in 180 sampled tokens), hence long
# replies and many sessions; (b), (c) need a batch; (c) shows most in second turns, admitted into
# blocks freed by others; (d) needs more than 32 sequences in a step and a session among the later
# rows (its second turn is admitted after the fillers); (e) hits the newest sequence, which at
# concurrency 2 every session is for half its life; (f) needs preemption, which a pool of 90
# blocks forces for 16-token blocks and ~450-token first-turn prompts, with the prefix cache off
# (the sessions' shared system prompt would otherwise be held once and the pool last). Servers
# run one compute thread: the tiny model gains nothing from more, and on a loaded machine thread
# wake-ups cost more than the arithmetic.
. "$(dirname "$0")/lib.bash"

FB=${VERITY_FAULTS_BIN:-$(dirname "$0")/../../build/faults/verity}
if [ ! -x "$FB" ]; then skip hunt_faults "no fault build at $FB (make faults)"; exit 0; fi
case "$VERITY" in *"/build/release/"*) ;; *) skip hunt_faults "runs once, with the release suite"; exit 0 ;; esac
command -v python3 >/dev/null || { skip hunt_faults "python3 needed to read results.json"; exit 0; }

SRV_PID=""
cleanup() {
    [ -n "$SRV_PID" ] && kill -0 "$SRV_PID" 2>/dev/null && stop_server
    rm -rf "$TMP"
}
trap cleanup EXIT
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# serve NAME ARGS...: starts the fault build's server (start_server from lib.bash)
serve() { VERITY=$FB start_server "$@"; }
# H ARGS...: hunt against the running server with the settings explained above
H() {
    "$VERITY" hunt --quiet --json --url "$SRV_URL" --tools 0 --temperature 1 --tie-threshold 0 \
        --scrape-ms 0 "$@"
}

"$FB" synth --shape tiny --type q8_0 --seed 11 -o "$TMP/m.gguf" 2>/dev/null ||
    { fail hunt_faults.model "verity synth failed"; exit 1; }

# --- no fault: no divergence at 1, 16 and 48 concurrent sessions -------------------------------
if serve hunt_faults.clean -m "$TMP/m.gguf" --threads 1 --max-batch 64; then
    H --concurrency 1,16,48 --sessions 16 --turns 2 --max-tokens 64 --scrape-ms 100 \
        >"$TMP/clean.json" 2>"$TMP/clean.err"
    rc=$?
    # engine steps with more than 32 sequences, from the server's own histogram (every step counted,
    # not just those a scrape happened to land on)
    big=$(curl -s "$SRV_URL/metrics" | awk '$1 == "verity_batch_size_bucket{le=\"32\"}" { le32 = $2 }
        $1 == "verity_batch_size_bucket{le=\"+Inf\"}" { all = $2 } END { if (all != "" && le32 != "") print all - le32 }')
    stop_server
    r=$(json "$TMP/clean.json" "d['summary']['n']==48 and d['summary']['errors']==0 and d['summary']['corrupt']==0 and d['oracles']['exact']['diverged_sessions']==0 and [c['n'] for c in d['per_concurrency']]==[16,16,16]" 2>/dev/null)
    if [ $rc -eq 0 ] && [ "$r" = True ]; then pass hunt_faults.no_fault_no_divergence_at_1_16_48
    else fail hunt_faults.no_fault_no_divergence_at_1_16_48 "exit $rc: $(json "$TMP/clean.json" "d['per_concurrency'], d['oracles']['exact']" 2>&1 | tail -n 1) $(tail -n 2 "$TMP/clean.err")"; fi
    # the top level really ran more than 32 sequences in a step (the server's batch histogram) with
    # 48 requests in flight, hunt read the server's /metrics (its last sample is taken after the
    # run, so there is one however the scrapes fell), and the sessions sent both values of
    # skip_special_tokens
    r=$(json "$TMP/clean.json" "d['client']['peak_in_flight']>=48 and ${big:-0}>0 and d['metrics']['flavor']=='verity' and len(d['metrics']['samples'])>0 and d['config']['skip_special_tokens'] and {s['skip_special_tokens'] for s in d['sessions']}=={True,False}" 2>/dev/null)
    [ "$r" = True ] && pass "hunt_faults.batch_above_32_reached($big steps)" ||
        fail hunt_faults.batch_above_32_reached "${big:-no} steps above 32 in verity_batch_size; $(json "$TMP/clean.json" "d['client']['peak_in_flight'], d['metrics']['flavor'], len(d['metrics']['samples'])" 2>&1 | tail -n 1)"
fi

# --- each fault: found where it triggers, never at concurrency 1 -------------------------------
# FAULT  server options  concurrency  hunt options
while read -r f sopts conc hopts; do
    sopts=${sopts//,/ } hopts=${hopts//,/ }
    export "VERITY_FAULT_$f=1"
    # shellcheck disable=SC2086
    serve "hunt_faults.$f" -m "$TMP/m.gguf" $sopts
    up=$?
    unset "VERITY_FAULT_$f"
    [ $up -eq 0 ] || continue
    # shellcheck disable=SC2086
    H --concurrency "1,$conc" $hopts >"$TMP/$f.json" 2>"$TMP/$f.err"
    rc=$?
    r=$(json "$TMP/$f.json" "(lambda a, b: a['n']>0 and a['corrupt']==0 and b['corrupt']>0 and b['wilson95'][0]>0 and a['errors']+b['errors']==0)(*d['per_concurrency'])" 2>/dev/null)
    counts=$(json "$TMP/$f.json" "'%d of %d corrupt at c=%d, %d of %d at c=1' % (d['per_concurrency'][1]['corrupt'], d['per_concurrency'][1]['n'], $conc, d['per_concurrency'][0]['corrupt'], d['per_concurrency'][0]['n'])" 2>/dev/null)
    if [ $rc -eq 1 ] && [ "$r" = True ]; then pass "hunt_faults.$f($counts)"
    else fail "hunt_faults.$f" "exit $rc: ${counts:-no results} $(tail -n 2 "$TMP/$f.err")"; fi
    if [ "$f" = DETOK_SHARED ]; then
        # without varying skip_special_tokens every request has the server's default, the flag
        # the fault spreads is everyone's own, and hunt cannot see the fault
        # shellcheck disable=SC2086
        H --concurrency "$conc" $hopts --no-skip-special-tokens >"$TMP/$f.off.json" 2>"$TMP/$f.off.err"
        rc=$?
        r=$(json "$TMP/$f.off.json" "d['summary']['n']>0 and d['summary']['errors']==0 and d['oracles']['exact']['diverged_sessions']==0 and not d['config']['skip_special_tokens']" 2>/dev/null)
        if [ $rc -eq 0 ] && [ "$r" = True ]; then pass hunt_faults.DETOK_SHARED_needs_varied_skip_special_tokens
        else fail hunt_faults.DETOK_SHARED_needs_varied_skip_special_tokens "exit $rc: $(json "$TMP/$f.off.json" "d['summary']" 2>&1 | tail -n 1) $(tail -n 2 "$TMP/$f.off.err")"; fi
    fi
    stop_server
done <<'LIST'
DETOK_SHARED --threads,1,--max-batch,64 16 --sessions,64,--turns,1,--max-tokens,256
ATTN_OFFSETS --threads,1,--max-batch,64 16 --sessions,16,--turns,1,--max-tokens,64
KV_REUSE --threads,1,--max-batch,64 16 --sessions,16,--turns,2,--max-tokens,64
BIG_BATCH --threads,1,--max-batch,64 48 --sessions,16,--turns,2,--max-tokens,64
TABLE_RACE --threads,1,--max-batch,64 2 --sessions,32,--turns,1,--max-tokens,64
TIER_RELOAD --threads,1,--max-batch,64,--kv-blocks,90,--prefix-cache,0 8 --sessions,32,--turns,1,--max-tokens,64
LIST

# --- bisect names the fault among 8 toggles ---------------------------------------------------
LAUNCH="$FB serve -m $TMP/m.gguf --port {port} --threads 1 --max-batch 64 {flags}"
HEALTH='http://127.0.0.1:{port}/health'
HUNT='--url http://127.0.0.1:{port} --concurrency 16 --turns 1 --tools 0 --max-tokens 64 --temperature 1 --tie-threshold 0 --scrape-ms 0'
"$VERITY" bisect --quiet --launch "$LAUNCH" --health "$HEALTH" --hunt "$HUNT" --budget 8 \
    --toggle isa=scalar:auto --toggle mm-prefetch=0:1 --toggle pool-spin=0:1 \
    --toggle kv-block=32:16 --toggle attn-chunk=32:64 --toggle chunk=256:512 \
    --toggle VERITY_FAULT_ATTN_OFFSETS=0:1 --toggle kv-dtype=f32:f16 \
    --ledger "$TMP/bisect.json" >"$TMP/bisect.out" 2>"$TMP/bisect.err"
rc=$?
r=$(json "$TMP/bisect.json" "d['summary']['culprit']==['VERITY_FAULT_ATTN_OFFSETS'] and d['summary']['restarts']<=8 and d['summary']['state']=='culprit'" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$r" = True ]; then
    pass "hunt_faults.bisect_names_fault_among_8_in_$(json "$TMP/bisect.json" "d['summary']['restarts']")_restarts"
else fail hunt_faults.bisect_names_fault_among_8 "exit $rc: $(json "$TMP/bisect.json" "d['summary']" 2>&1 | tail -n 1) $(tail -n 2 "$TMP/bisect.err")"; fi
expect_procs_gone hunt_faults.bisect_no_server_left "-m $TMP/m.gguf"
