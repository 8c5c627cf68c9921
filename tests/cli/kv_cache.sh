# SPDX-License-Identifier: MIT
# The KV cache hierarchy over real HTTP (P1 and P2): the prefix cache in memory (L1), the disk
# tier (L2) and a real redis-server (L3) shared by two verity processes.
#
# P1: 64 requests that share prefixes (system prompts, multi-turn histories, long shared prompts:
# p1.mjs's "cache" workload) give byte-identical responses on a reference server with the cache
# off, alone (--prefix-cache 0 --max-batch 1), and, held and released together (48 and more at
# once), with the cache cold, warm in memory, evicted to disk and restored by the next process,
# written to Redis by one process and restored by another, with Redis killed mid-run, written
# from memory to disk at shutdown and restored by the next process, and after the disk files and
# Redis values were corrupted (bit flips, truncation, blocks swapped).
# P2: every corruption is refused (counted per tier in verity_kv_checksum_failures_total), never
# used; a foreign or corrupt disk directory is cleared at start-up; an unreachable Redis is a
# warning and a server without L3; a malformed Redis URL is exit code 2 with one line.
#
# Nothing races: writes to a tier are flushed when its server stops (SIGTERM), before the next
# process reads them; the held replay enters the queue in a fixed order (p1.mjs).
. "$(dirname "$0")/lib.bash"

MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail kv_cache.synth "synth failed"; exit 0; }
nodedir="$(dirname "$0")/../node"
if ! command -v node >/dev/null; then fail kv_cache.node "node not found (scripts/setup.sh installs nodejs)"; exit 0; fi

# p1 NAME MODE [HOLD]: the cache workload against $SRV_URL into $TMP/p1.NAME
p1() {
    VERITY_P1_WORKLOAD=cache VERITY_P1_HOLD=${3:-0} VERITY_URL=$SRV_URL run_node "$1" -o "$TMP/p1.$1" "$nodedir/p1.mjs" "$2"
}
# same NAME [NOTE]: passes if $TMP/p1.NAME equals the reference byte for byte
same() {
    if cmp -s "$TMP/p1.ref" "$TMP/p1.$1"; then pass "$1${2:+($2)}"
    else fail "$1" "responses differ from the reference: $(diff "$TMP/p1.ref" "$TMP/p1.$1" | head -c 400)"; fi
}
m() { metric "$1"; }
# stop_checked NAME: stop_server, then the server must have exited 0 with no sanitizer report in
# its log (ASan and UBSan print and go on or abort, TSan exits 66 at the end); counted for the
# one pass line at the end
n_stopped=0 n_bad_exit=0
stop_checked() {
    stop_server
    n_stopped=$((n_stopped + 1))
    local rep
    rep=$(grep -A12 -m1 'WARNING: ThreadSanitizer\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error' "$SRV_LOG" | tr '\n' ' ' | head -c 1500)
    if [ "$SRV_STATUS" != 0 ] || [ -n "$rep" ]; then
        n_bad_exit=$((n_bad_exit + 1))
        fail "$1.exit" "exit status $SRV_STATUS: ${rep:-$(tail -c 300 "$SRV_LOG")}"
    fi
}
tier_metric() { metric "$1{tier=\"$2\"}"; }

# the reference: cache off, one sequence per step, each request alone
if start_server kv_cache.reference -m "$MODEL" --prefix-cache 0 --max-batch 1 --chunk 512 -t 1; then
    p1 kv_cache.record record
    if [ "$(grep -c '' "$TMP/p1.kv_cache.record")" -eq 64 ] && ! grep -q '"error"' "$TMP/p1.kv_cache.record"; then
        cp "$TMP/p1.kv_cache.record" "$TMP/p1.ref"
        [ "$(m verity_cached_prompt_tokens_total)" = 0 ] && pass kv_cache.reference_uncached ||
            fail kv_cache.reference_uncached "the cache-off server reused $(m verity_cached_prompt_tokens_total) positions"
    else
        fail kv_cache.record "the reference run is incomplete: $(grep -m1 '"error"' "$TMP/p1.kv_cache.record" | head -c 300)"
    fi
    stop_checked kv_cache.reference
fi
[ -s "$TMP/p1.ref" ] || exit 0

# The TSan pass runs the paths where the tiers' I/O thread works beside the engine (disk and
# Redis); the memory-only and corruption cases are the engine thread's alone (serve.sh covers its
# threads under TSan) and run in the release and ASan passes.
full=1
case "${VERITY_BUILD:-}" in *tsan*) full=0 ;; esac

# L1: cold, then warm; batched (64 sequences, chunks of 8, 2 threads)
if [ $full = 0 ]; then skip kv_cache.l1 "run in the release and ASan passes"
elif start_server kv_cache.l1 -m "$MODEL" --admin-api 1 --max-batch 64 --chunk 8 -t 2; then
    p1 kv_cache.l1_cold replay 1
    c1=$(m verity_cached_prompt_tokens_total)
    [ "${c1:-0}" -gt 0 ] && same kv_cache.l1_cold "$c1 positions from the cache" ||
        fail kv_cache.l1_cold "no prefix was reused ($c1)"
    h0=$(batch_hist)
    p1 kv_cache.l1_warm replay 1
    h1=$(batch_hist)
    c2=$(m verity_cached_prompt_tokens_total)
    read -r _ m0 _ <<<"$h0"; read -r _ m1 _ <<<"$h1"
    if [ $((c2 - c1)) -le "$c1" ]; then fail kv_cache.l1_warm "the warm run took $((c2 - c1)) positions from the cache, the cold one $c1"
    elif [ $((m1 - m0)) -le 0 ]; then fail kv_cache.l1_warm "no step ran more than one sequence"
    else same kv_cache.l1_warm "$((c2 - c1)) positions from the cache, $((m1 - m0)) batched steps"; fi
    # usage.prompt_tokens_details.cached_tokens: 0 the first time, all full blocks but the last
    # token's the second
    body='{"prompt":"a prompt of its own that nothing else in this test shares, long enough to fill three blocks of sixteen tokens each and a bit","max_tokens":2}'
    http_code POST /v1/completions "$body" >/dev/null; u1=$(grep -o '"cached_tokens":[0-9]*' "$TMP/body")
    http_code POST /v1/completions "$body" >/dev/null; u2=$(grep -o '"cached_tokens":[0-9]*' "$TMP/body")
    [ "$u1" = '"cached_tokens":0' ] && [ "${u2#*:}" -ge 32 ] 2>/dev/null && pass "kv_cache.usage_cached_tokens(${u2#*:})" ||
        fail kv_cache.usage_cached_tokens "first $u1, second $u2"
    fails=$(tier_metric verity_kv_checksum_failures_total l1)
    [ "$fails" = 0 ] && pass kv_cache.l1_no_checksum_failures || fail kv_cache.l1_no_checksum_failures "$fails"
    stop_checked kv_cache.l1
fi

# L2: a pool of 48 blocks evicts to disk; the next process (cold memory) restores from disk
KVD="$TMP/kvd"
if start_server kv_cache.disk_write -m "$MODEL" --kv-blocks 48 --kv-disk-dir "$KVD" --max-batch 16 --chunk 8; then
    p1 kv_cache.disk_write record
    ev=$(tier_metric verity_kv_cache_evictions_total l1)
    [ "${ev:-0}" -gt 0 ] && same kv_cache.disk_write "$ev blocks evicted to disk" || fail kv_cache.disk_write "nothing was evicted ($ev)"
    stop_checked kv_cache.disk_write
fi
nfiles=$(ls "$KVD"/*.kvb 2>/dev/null | wc -l)
[ "$nfiles" -gt 0 ] && pass "kv_cache.disk_files($nfiles)" || fail kv_cache.disk_files "no block files in $KVD"
if start_server kv_cache.disk_read -m "$MODEL" --admin-api 1 --kv-blocks 48 --kv-disk-dir "$KVD" --max-batch 64 --chunk 8 -t 2; then
    p1 kv_cache.disk_read replay 1
    r=$(tier_metric verity_kv_cache_restored_blocks_total disk)
    f=$(tier_metric verity_kv_checksum_failures_total disk)
    if [ "${r:-0}" -le 0 ]; then fail kv_cache.disk_read "no block restored from disk"
    elif [ "$f" != 0 ]; then fail kv_cache.disk_read "$f blocks refused from an intact disk tier"
    else same kv_cache.disk_read "$r blocks restored from disk"; fi
    stop_checked kv_cache.disk_read
fi

# L1 written to disk at shutdown (kv-disk-flush): a pool that never evicts, so only the flush can
# put blocks on disk; the restart on the same directory restores them. With the flush off the
# restart has nothing to restore (the check can fail).
for fl in 1 0; do
    KVF="$TMP/kvf$fl"
    if start_server kv_cache.flush_write$fl -m "$MODEL" --kv-disk-dir "$KVF" --kv-disk-flush $fl --max-batch 16 --chunk 8; then
        p1 kv_cache.flush_write$fl record
        ev=$(tier_metric verity_kv_cache_evictions_total l1)
        [ "${ev:-0}" = 0 ] && same kv_cache.flush_write$fl "no eviction" || fail kv_cache.flush_write$fl "$ev blocks evicted: the pool is too small for this check"
        stop_checked kv_cache.flush_write$fl
    fi
    if start_server kv_cache.flush_read$fl -m "$MODEL" --admin-api 1 --kv-disk-dir "$KVF" --max-batch 64 --chunk 8 -t 2; then
        p1 kv_cache.flush_read$fl replay 1
        r=$(tier_metric verity_kv_cache_restored_blocks_total disk)
        f=$(tier_metric verity_kv_checksum_failures_total disk)
        if [ "$f" != 0 ]; then fail kv_cache.flush_read$fl "$f blocks refused from an intact disk tier"
        elif [ $fl = 1 ] && [ "${r:-0}" -le 0 ]; then fail kv_cache.flush_read1 "no block restored after a flush at shutdown"
        elif [ $fl = 0 ] && [ "${r:-0}" != 0 ]; then fail kv_cache.flush_read0 "$r blocks restored without a flush: the check cannot tell"
        else same kv_cache.flush_read$fl "$r blocks restored from disk"; fi
        stop_checked kv_cache.flush_read$fl
    fi
done

if [ $full = 1 ]; then
# L2 integrity: a flipped bit in every third file, every fifth truncated, two files swapped
i=0
for fpath in "$KVD"/*.kvb; do
    i=$((i + 1))
    sz=$(stat -c %s "$fpath")
    if [ $((i % 5)) -eq 0 ]; then truncate -s $((sz / 2)) "$fpath"
    elif [ $((i % 3)) -eq 0 ]; then
        off=$((sz - 1 - (i * 37) % 1000))
        b=$(od -An -tu1 -j "$off" -N1 "$fpath" | tr -d ' ')
        printf "$(printf '\\%03o' $((b ^ 4)))" | dd of="$fpath" bs=1 seek="$off" conv=notrunc status=none
    fi
done
set -- "$KVD"/*.kvb
if [ $# -ge 4 ]; then mv "$2" "$TMP/swap"; mv "$4" "$2"; mv "$TMP/swap" "$4"; fi
if start_server kv_cache.disk_corrupt -m "$MODEL" --admin-api 1 --kv-blocks 48 --kv-disk-dir "$KVD" --max-batch 64 --chunk 8 -t 2; then
    p1 kv_cache.disk_corrupt replay 1
    f=$(tier_metric verity_kv_checksum_failures_total disk)
    if [ "${f:-0}" -le 0 ]; then fail kv_cache.disk_corrupt "no corrupt block was detected"
    elif ! grep -q 'from the disk tier refused' "$SRV_LOG"; then fail kv_cache.disk_corrupt "the log does not name a refused block"
    else same kv_cache.disk_corrupt "$f corrupt blocks refused and recomputed"; fi
    stop_checked kv_cache.disk_corrupt
fi

# a disk directory of another model is cleared at start-up, and so is a corrupt MANIFEST
OTHER="$TMP/other.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 6 -o "$OTHER" 2>/dev/null
if start_server kv_cache.disk_foreign -m "$OTHER" --kv-disk-dir "$KVD"; then
    left=$(ls "$KVD"/*.kvb 2>/dev/null | wc -l)
    [ "$left" -eq 0 ] && grep -qi 'clear' "$SRV_LOG" && pass kv_cache.disk_foreign_cleared ||
        fail kv_cache.disk_foreign_cleared "$left block files left; log: $(grep -i 'disk' "$SRV_LOG" | head -c 300)"
    stop_checked kv_cache.disk_foreign
fi
echo "garbage" >"$KVD/MANIFEST"; : >"$KVD/0123456789abcdef.kvb"
if start_server kv_cache.disk_bad_manifest -m "$MODEL" --kv-disk-dir "$KVD"; then
    [ ! -e "$KVD/0123456789abcdef.kvb" ] && pass kv_cache.disk_bad_manifest_cleared ||
        fail kv_cache.disk_bad_manifest_cleared "a block file survived a corrupt MANIFEST"
    stop_checked kv_cache.disk_bad_manifest
fi
else
    skip kv_cache.disk_corrupt "run in the release and ASan passes (no I/O thread involved)"
fi

# L3: a real redis-server on a unix socket, two verity processes sharing it
if ! command -v redis-server >/dev/null; then
    skip kv_cache.redis "redis-server not installed (scripts/setup.sh installs it)"
else
    RSOCK="$TMP/redis.sock"
    start_redis() {
        redis-server --port 0 --unixsocket "$RSOCK" --save '' --appendonly no --daemonize no >"$TMP/redis.log" 2>&1 &
        REDIS_PID=$!
        for _ in $(seq 1 300); do redis-cli -s "$RSOCK" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done
        fail kv_cache.redis_start "redis-server did not start: $(tail -c 300 "$TMP/redis.log")"; return 1
    }
    stop_redis() { kill -9 "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null; }
    trap 'stop_redis' EXIT
    if start_redis; then
        if start_server kv_cache.redis_write -m "$MODEL" --admin-api 1 --kv-redis "unix://$RSOCK" --max-batch 64 --chunk 8 -t 2; then
            p1 kv_cache.redis_write replay 1
            s=$(tier_metric verity_kv_cache_stored_blocks_total redis)
            [ "${s:-0}" -gt 0 ] && same kv_cache.redis_write "$s blocks written to Redis" || fail kv_cache.redis_write "nothing written to Redis"
            stop_checked kv_cache.redis_write
        fi
        keys=$(redis-cli -s "$RSOCK" dbsize)
        if start_server kv_cache.redis_read -m "$MODEL" --admin-api 1 --kv-blocks 48 --kv-redis "unix://$RSOCK" --max-batch 64 --chunk 8 -t 2; then
            p1 kv_cache.redis_read replay 1
            r=$(tier_metric verity_kv_cache_restored_blocks_total redis)
            [ "${r:-0}" -gt 0 ] && same kv_cache.redis_read "$r blocks restored from the $keys another process wrote to Redis" ||
                fail kv_cache.redis_read "nothing restored from Redis ($keys keys there)"
            # the Grafana dashboard's tier series exist on a server with a tier
            curl -s "$SRV_URL/metrics" >"$TMP/metrics.txt"
            absent=""
            for mn in $(grep -o 'verity_kv_[a-z0-9_]*' "$(dirname "$0")/../../contrib/grafana/verity.json" | sort -u); do
                grep -q "^$mn[ {]" "$TMP/metrics.txt" || absent="$absent $mn"
            done
            [ -z "$absent" ] && pass kv_cache.grafana_tier_metrics_exist || fail kv_cache.grafana_tier_metrics_exist "not exported:$absent"
            # Redis goes away mid-run: misses, never an error to a client
            stop_redis
            p1 kv_cache.redis_gone replay 1
            e=$(tier_metric verity_kv_cache_errors_total redis)
            [ "${e:-0}" -gt 0 ] && same kv_cache.redis_gone "$e failed Redis operations, served as misses" ||
                fail kv_cache.redis_gone "no Redis operation failed after it was killed"
            stop_checked kv_cache.redis_read
        fi
    fi
    # L3 integrity: values overwritten in the payload, truncated, and one block's value under another's key
    if [ $full = 0 ]; then skip kv_cache.redis_corrupt "run in the release and ASan passes"
    elif start_redis && start_server kv_cache.redis_write2 -m "$MODEL" --kv-redis "unix://$RSOCK"; then
        p1 kv_cache.redis_write2 record
        stop_checked kv_cache.redis_write2
        i=0 first=""
        for k in $(redis-cli -s "$RSOCK" --scan --pattern 'verity:kv:*'); do
            i=$((i + 1))
            if [ $((i % 5)) -eq 0 ]; then redis-cli -s "$RSOCK" set "$k" short >/dev/null
            elif [ $((i % 3)) -eq 0 ]; then redis-cli -s "$RSOCK" setrange "$k" 300 "XYZW" >/dev/null
            elif [ -z "$first" ]; then first=$k
            elif [ $((i % 7)) -eq 1 ]; then redis-cli -s "$RSOCK" copy "$first" "$k" replace >/dev/null; fi
        done
        if start_server kv_cache.redis_corrupt -m "$MODEL" --admin-api 1 --kv-blocks 48 --kv-redis "unix://$RSOCK" --max-batch 64 --chunk 8 -t 2; then
            p1 kv_cache.redis_corrupt replay 1
            f=$(tier_metric verity_kv_checksum_failures_total redis)
            [ "${f:-0}" -gt 0 ] && same kv_cache.redis_corrupt "$f corrupt blocks refused and recomputed" ||
                fail kv_cache.redis_corrupt "no corrupt Redis value was detected"
            stop_checked kv_cache.redis_corrupt
        fi
        stop_redis
    fi
fi

# an unreachable Redis: a warning and a server without L3; a malformed URL: exit 2, one line
if start_server kv_cache.redis_unreachable -m "$MODEL" --kv-redis redis://127.0.0.1:1; then
    c=$(http_code POST /v1/completions '{"prompt":"hello","max_tokens":2}')
    if [ "$c" = 200 ] && grep -qi 'redis' "$SRV_LOG" && ! curl -s "$SRV_URL/metrics" | grep -q 'tier="redis"'; then
        pass kv_cache.redis_unreachable_warns
    else fail kv_cache.redis_unreachable_warns "status $c; log: $(grep -i redis "$SRV_LOG" | head -c 300)"; fi
    stop_checked kv_cache.redis_unreachable
fi
out=$("$VERITY" serve -m "$MODEL" --port 0 --kv-redis 'ftp://x' 2>&1 >/dev/null); st=$?
[ $st -eq 2 ] && [ "$(grep -c '' <<<"$out")" -eq 1 ] && grep -qi 'redis' <<<"$out" && pass kv_cache.redis_bad_url ||
    fail kv_cache.redis_bad_url "exit $st: $out"
[ "$n_bad_exit" = 0 ] && pass "kv_cache.servers_exit_clean($n_stopped servers)"
