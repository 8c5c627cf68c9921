# SPDX-License-Identifier: MIT
# The KV transfer's faults in the fault build (make faults), FAULT (j) fault-xfer: each plants a
# real fault on the real path between a prefill and a decode server behind the router, and the
# transfer's checks must catch it: every response stays byte-identical to a monolithic server's
# (the decode server computes what it could not take: slower, never wrong) and the fault is
# counted in the decode server's /metrics.
#   corrupt: a bit of a sent block's payload flips: the receiver's verification refuses it, the
#     transfer aborts (verity_kv_xfer_transfers_total{dir="recv",result="aborted"})
#   drop: a block is lost: the next one's sequence number shows the gap, the transfer aborts
#   delay: a block is held past --kv-xfer-timeout: the receiver times out, the transfer aborts
#   dup: a block is sent twice: the copy is dropped (verity_kv_xfer_blocks_total{event="dropped"})
#     and the transfer still completes and is used
#   late: the decode side stops waiting at once; the blocks arrive after its request gave up and
#     are never used (verity_kv_xfer_waits_expired_total)
#   reuse: a received block is written over while the transfer still holds it (the ownership rule
#     bypassed); the checksum recorded when it was verified no longer matches, so the restore
#     refuses it (verity_kv_xfer_blocks_total{event="refused"})
#   noconnect: the prefill server's connect to the decode server is refused: its answer says
#     "kv_transfer":{"status":"failed"}, the router cancels the decode side's wait (POST
#     /v1/kv_transfer/cancel) and the decode server computes at once
#     (verity_kv_xfer_cancelled_total, the router's verity_router_disagg_cancels_total{result="ok"};
#     verity_kv_xfer_waits_expired_total unchanged). Both servers run --kv-xfer-timeout 120000 and
#     every request has curl --max-time 60, so a decode server that waited it out fails the case.
# After each, both servers' KV is idle (no block leaked by an aborted transfer) and no transfer
# is left open. Checked to fail on a planted defect: a receiver that hands on the checksum of the
# block as it holds it at the end (not as verified) lets the reuse fault through, and
# disagg_faults.reuse fails on differing responses; a router that never sends the cancel fails
# disagg_faults.noconnect (curl's --max-time trips, the responses differ). Runs once, with the release suite (like faults.sh).
. "$(dirname "$0")/lib.bash"

FB=${VERITY_FAULTS_BIN:-$(dirname "$0")/../../build/faults/verity}
if [ ! -x "$FB" ]; then skip disagg_faults "no fault build at $FB (make faults)"; exit 0; fi
case "$VERITY" in *"/build/release/"*) ;; *) skip disagg_faults "runs once, with the release suite"; exit 0 ;; esac
VERITY=$FB
MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail disagg_faults.synth "synth failed"; exit 0; }

PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 -- -"$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

kv_used() { curl -s "$1/v1/status" | sed -n 's/.*"kv_used":\([0-9]*\).*/\1/p'; }
idle() { local u; for u in "$@"; do [ "$(kv_used "$u")" = 0 ] || return 1; [ "$(metric_at "$u" 'verity_kv_xfer_open{dir="send"}')" = 0 ] || return 1; [ "$(metric_at "$u" 'verity_kv_xfer_open{dir="recv"}')" = 0 ] || return 1; done; }
# run URL NAME: 8 requests (greedy and seeded sampling, prompts of several blocks), each alone;
# the bodies normalized (no id, created, cached-token count) into $TMP/NAME
run() {
    local i t
    : >"$TMP/$2"
    for i in 0 1 2 3 4 5 6 7; do
        t=$([ $((i % 2)) = 0 ] && echo 0 || echo 0.9)
        curl -s --max-time 60 "$1/v1/completions" -d "{\"prompt\":\"story $i: once upon a time there was a cat who sat on the mat while it rained and then the dog ran to the park with a ball\",\"max_tokens\":12,\"temperature\":$t,\"seed\":$i}" |
            python3 -c 'import json,sys; d=json.load(sys.stdin); [d.pop(k, None) for k in ("id","created")]; d.get("usage",{}).pop("prompt_tokens_details", None); print(json.dumps(d, sort_keys=True))' >>"$TMP/$2" 2>&1
    done
}

start_server disagg_faults.reference -m "$MODEL" -t 1 || exit 0
PIDS+=("$SRV_PID")
run "$SRV_URL" ref
stop_server
if [ "$(grep -c '"finish_reason"' "$TMP/ref")" -ne 8 ]; then fail disagg_faults.reference "the reference run is incomplete"; exit 0; fi

# fault NAME SERIES [TIMEOUT_MS]: runs the workload with VERITY_FAULT_XFER=NAME (both servers'
# --kv-xfer-timeout TIMEOUT_MS, default 500); SERIES of the decode server must have grown
fault() {
    local f=$1 series=$2 to=${3:-500} P D
    export VERITY_FAULT_XFER=$f
    start_server "disagg_faults.$f.prefill" -m "$MODEL" -t 1 --role prefill --kv-xfer-timeout "$to" || return
    PIDS+=("$SRV_PID"); P=$SRV_URL; local PP=$SRV_PID
    start_server "disagg_faults.$f.decode" -m "$MODEL" -t 1 --role decode --kv-xfer-timeout "$to" || return
    PIDS+=("$SRV_PID"); D=$SRV_URL; local DP=$SRV_PID
    unset VERITY_FAULT_XFER
    start_router "disagg_faults.$f" --router-health-ms 100 --prefill "$P" --decode "$D" || return
    local v0 x0 c0; v0=$(metric_at "$D" "$series")
    x0=$(metric_at "$D" verity_kv_xfer_waits_expired_total)
    c0=$(metric_at "$RT_URL" 'verity_router_disagg_cancels_total{result="ok"}')
    run "$RT_URL" "$f"
    local v1; v1=$(metric_at "$D" "$series")
    if [ "$f" = noconnect ]; then
        local x1 c1; x1=$(metric_at "$D" verity_kv_xfer_waits_expired_total)
        c1=$(metric_at "$RT_URL" 'verity_router_disagg_cancels_total{result="ok"}')
        [ "$x1" = "$x0" ] && [ "${c1:-0}" -ge $((${c0:-0} + 8)) ] && pass "disagg_faults.noconnect.cancelled_not_expired($((c1 - c0)) cancels)" ||
            fail disagg_faults.noconnect.cancelled_not_expired "waits expired ${x0:-?} -> ${x1:-?}, router cancels ${c0:-?} -> ${c1:-?}"
    fi
    if ! cmp -s "$TMP/ref" "$TMP/$f"; then fail "disagg_faults.$f" "responses differ from one server's: $(diff "$TMP/ref" "$TMP/$f" | head -c 400)"
    elif [ "${v1:-0}" -le "${v0:-0}" ]; then fail "disagg_faults.$f" "the planted fault was not counted ($series: ${v0:-?} -> ${v1:-?})"
    else pass "disagg_faults.$f($((v1 - v0)) counted, responses identical)"; fi
    if wait_for idle "$P" "$D"; then pass "disagg_faults.$f.kv_idle"
    else fail "disagg_faults.$f.kv_idle" "kv_used prefill $(kv_used "$P"), decode $(kv_used "$D")"; fi
    kill -9 -- -"$RT_PID" -"$PP" -"$DP" 2>/dev/null
}

fault corrupt 'verity_kv_xfer_transfers_total{dir="recv",result="aborted"}'
fault drop 'verity_kv_xfer_transfers_total{dir="recv",result="aborted"}'
fault delay 'verity_kv_xfer_transfers_total{dir="recv",result="aborted"}'
fault dup 'verity_kv_xfer_blocks_total{event="dropped"}'
fault late 'verity_kv_xfer_waits_expired_total'
fault reuse 'verity_kv_xfer_blocks_total{event="refused"}'
fault noconnect 'verity_kv_xfer_cancelled_total' 120000
