# SPDX-License-Identifier: MIT
# The KV hierarchy's fault toggles in the fault build (make faults): each plants a real corruption
# on a real path, and the checksums must catch it: the responses stay byte-identical to a clean
# reference and the failure is counted for the tier it came from.
#   FAULT (h) fault-kv-corrupt=l1: a bit flips in a cached block's memory while no request holds
#     it; with kv-verify=1 it is refused before reuse, and with kv-verify=0 it is served (the
#     responses differ: what kv-verify buys, and what hunt sees without it);
#   FAULT (h) fault-kv-corrupt=disk|redis: a bit flips in blobs written to the tier; the process
#     that reads them refuses them;
#   FAULT (g) fault-tier-konly: a block restored from a tier gets its K but not its V; the check
#     of the pool block after the load refuses it.
# Runs once, with the release suite (like faults.sh).
. "$(dirname "$0")/lib.bash"

FB=${VERITY_FAULTS_BIN:-$(dirname "$0")/../../build/faults/verity}
if [ ! -x "$FB" ]; then skip kv_faults "no fault build at $FB (make faults)"; exit 0; fi
case "$VERITY" in *"/build/release/"*) ;; *) skip kv_faults "runs once, with the release suite"; exit 0 ;; esac
if ! command -v node >/dev/null; then fail kv_faults.node "node not found (scripts/setup.sh installs nodejs)"; exit 0; fi
VERITY=$FB
MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail kv_faults.synth "synth failed"; exit 0; }
nodedir="$(dirname "$0")/../node"

# p1 NAME: the cache workload (p1.mjs), each request alone, into $TMP/p1.NAME
p1() { VERITY_P1_WORKLOAD=cache VERITY_URL=$SRV_URL run_node "$1" -o "$TMP/p1.$1" "$nodedir/p1.mjs" record; }
tier_metric() { metric "$1{tier=\"$2\"}"; }
# judge NAME RUN TIER: run RUN must equal the reference and failures be counted for TIER
judge() {
    local f; f=$(tier_metric verity_kv_checksum_failures_total "$3")
    if [ "${f:-0}" -le 0 ]; then fail "$1" "the planted corruption was not detected on $3"
    elif ! cmp -s "$TMP/p1.ref" "$TMP/p1.$2"; then fail "$1" "a corrupt block was used: $(diff "$TMP/p1.ref" "$TMP/p1.$2" | head -c 300)"
    else pass "$1($f blocks refused on $3, responses identical)"; fi
}

if start_server kv_faults.reference -m "$MODEL" --prefix-cache 0; then
    p1 ref
    stop_server
fi
if [ "$(grep -c '' "$TMP/p1.ref" 2>/dev/null)" -ne 64 ] || grep -q '"error"' "$TMP/p1.ref"; then
    fail kv_faults.reference "the reference run is incomplete"; exit 0
fi

# L1: run the workload twice on one server, so the second run reuses what the first cached
for verify in 1 0; do
    if VERITY_FAULT_KV_CORRUPT=l1 start_server kv_faults.l1 -m "$MODEL" --kv-verify $verify; then
        p1 l1_first && p1 "l1_verify$verify"
        if [ $verify = 1 ]; then judge kv_faults.KV_CORRUPT_l1 l1_verify1 l1
        elif cmp -s "$TMP/p1.ref" "$TMP/p1.l1_verify0"; then
            fail kv_faults.KV_CORRUPT_l1_unverified "with kv-verify=0 the flipped bits changed no response: the fault did not fire"
        else pass "kv_faults.KV_CORRUPT_l1_unverified($(diff "$TMP/p1.ref" "$TMP/p1.l1_verify0" | grep -c '^<') of 64 responses corrupted without verification)"; fi
        stop_server
    fi
done

# disk: one process writes (a pool of 48 blocks evicts to disk), the next reads
while read -r name fault; do
    rm -rf "$TMP/kvd"
    export "${fault?}"
    if start_server "$name.write" -m "$MODEL" --kv-blocks 48 --kv-disk-dir "$TMP/kvd"; then
        p1 "${name}_write"
        stop_server
    fi
    if start_server "$name.read" -m "$MODEL" --kv-blocks 48 --kv-disk-dir "$TMP/kvd"; then
        p1 "${name}_read"
        judge "kv_faults.$name" "${name}_read" disk
        stop_server
    fi
    unset "${fault%%=*}"
done <<'LIST'
KV_CORRUPT_disk VERITY_FAULT_KV_CORRUPT=disk
TIER_KONLY VERITY_FAULT_TIER_KONLY=1
LIST

# Redis: one process writes every block it computes, a second reads them
if ! command -v redis-server >/dev/null; then
    skip kv_faults.KV_CORRUPT_redis "redis-server not installed (scripts/setup.sh installs it)"
else
    RSOCK="$TMP/redis.sock"
    redis-server --port 0 --unixsocket "$RSOCK" --save '' --appendonly no --daemonize no >"$TMP/redis.log" 2>&1 &
    rpid=$!
    trap 'kill -9 $rpid 2>/dev/null' EXIT
    for _ in $(seq 1 300); do redis-cli -s "$RSOCK" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
    if VERITY_FAULT_KV_CORRUPT=redis start_server kv_faults.redis_write -m "$MODEL" --kv-redis "unix://$RSOCK"; then
        p1 redis_write
        stop_server
    fi
    if start_server kv_faults.redis_read -m "$MODEL" --kv-blocks 48 --kv-redis "unix://$RSOCK"; then
        p1 redis_read
        judge kv_faults.KV_CORRUPT_redis redis_read redis
        stop_server
    fi
    kill -9 $rpid 2>/dev/null
fi
