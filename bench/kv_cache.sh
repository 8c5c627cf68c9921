#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# KV cache benchmark: the prefix cache (--prefix-cache 1 against 0) and the disk and Redis tiers'
# reload bandwidth, on one model and thread count, in one run (bench/kv_client.mjs drives it):
#   1. agentic sessions (AGENT_SESSIONS x TURNS, round-robin, one request in flight, streaming chat
#      with tools, every turn resending the whole history): time to first token per turn, median
#      over sessions, cache on then cache off (two servers one after the other); llama-server on the
#      same GGUF and workload if it is on PATH;
#   2. SHARED_N requests submitted at once that share a SHARED_CHARS system prompt (distinct short
#      user parts, SHARED_GEN tokens each): tokens/s with the cache on and off;
#   3. DISTINCT_N requests at once with distinct random prompts: the two servers up side by side,
#      used in turn for ROUNDS rounds (fresh prompts each round, the order alternating), median of
#      the rounds' throughput ratios;
#   4. disk tier: a server with a KV_POOL-block pool fills --kv-disk-dir with FILL_N prompts of
#      FILL_CHARS; the files are dropped from the page cache (dd iflag=nocache), a fresh server
#      replays the prompts and its blocks come back from disk: bytes restored / the tier's load
#      seconds (verity_kv_tier_load_seconds), against dd's sequential read of a DD_MB file in the
#      same directory (O_DIRECT, and buffered after dropping it from the page cache) and cat of the
#      tier's files; a second fresh server replays again with the files in the page cache; the
#      dd figures again beside a computing engine (`verity bench`), as the tier reads beside one;
#   5. Redis tier: the filling server of 4 also writes to a redis-server this script starts on a
#      unix socket; REDIS_ROUNDS times, a fresh server replays from Redis alone, then
#      redis-benchmark GETs the same value size on the same socket with one connection (as
#      verity's one I/O thread): per round the tier's bandwidth over redis-benchmark's, by the
#      I/O thread's load time and end to end (first lookup to blocks verified in the pool), and
#      the median of the rounds; redis-benchmark also with 4 connections and beside a computing
#      engine.
# Usage: bench/kv_cache.sh [MODEL.gguf]; without MODEL the synthetic 0.5b Q8_0 model `verity
# bench` caches in ~/.cache/verity/. Sizes from the environment (defaults in brackets):
#   THREADS [2]  PARTS [1,2,3,4,5]
#   AGENT_SESSIONS [16]  OFF_SESSIONS [4]: sessions run on the cache-off server and llama-server
#     (the first ones of the same set: without a cache every session's turn t is the same length
#     of prompt computed from scratch, and all 16 would take most of the script's time)  TURNS [8]
#     AGENT_GEN [8]; OFF_TURNS [all]: e.g. 1,4,8, the only turns sent to the cache-off server and
#     llama-server (every other turn's history is still built); AGENT_TOOLS [2] tools offered, AGENT_SYSTEM [200] characters of system-prompt
#     filler, AGENT_RESULT [120] per tool result (turn 8: about 3,700 tokens)
#   SHARED_N [32]  SHARED_CHARS [2000]  SHARED_GEN [64]
#   DISTINCT_N [16]  DISTINCT_CHARS [256]  DISTINCT_GEN [16]  ROUNDS [3]
#   FILL_N [12]  FILL_CHARS [1024]  KV_POOL [80]  DD_MB [512]  REDIS_N [2000]  REDIS_ROUNDS [5]
#   SRV_ARGS []: more arguments for every verity server (e.g. "--kv-prefault 1")
# One token per character on the synthetic models' byte-level vocabulary. Exit 2 if a server does
# not start, a request fails or a tier restores nothing.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/lib.bash
V=build/release/verity
[ -x "$V" ] || { echo "bench/kv_cache.sh: $V not built (make)" >&2; exit 2; }
MODEL=${1:-}
THREADS=${THREADS:-2} PARTS=${PARTS:-1,2,3,4,5}
AGENT_SESSIONS=${AGENT_SESSIONS:-16} TURNS=${TURNS:-8} AGENT_GEN=${AGENT_GEN:-8}
OFF_SESSIONS=${OFF_SESSIONS:-4} OFF_TURNS=${OFF_TURNS:-}
SHARED_N=${SHARED_N:-32} SHARED_CHARS=${SHARED_CHARS:-2000} SHARED_GEN=${SHARED_GEN:-64}
DISTINCT_N=${DISTINCT_N:-16} DISTINCT_CHARS=${DISTINCT_CHARS:-256} DISTINCT_GEN=${DISTINCT_GEN:-16}
ROUNDS=${ROUNDS:-3}
FILL_N=${FILL_N:-12} FILL_CHARS=${FILL_CHARS:-1024} KV_POOL=${KV_POOL:-80} DD_MB=${DD_MB:-512}
REDIS_N=${REDIS_N:-2000} REDIS_ROUNDS=${REDIS_ROUNDS:-5}
export AGENT_TOOLS=${AGENT_TOOLS:-2} AGENT_RESULT=${AGENT_RESULT:-120} AGENT_SYSTEM=${AGENT_SYSTEM:-200}
if [ -z "$MODEL" ]; then # the model `verity bench --type q8_0` makes once and caches
    MODEL=$($V bench --type q8_0 --batch 1 --prompt 1 --gen 1 --reps 1 --json |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).model.path))') ||
        exit 2
fi
tmp=$(mktemp -d)
pids=""
cleanup() {
    local p
    for p in $pids; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
die() { echo "bench/kv_cache.sh: $*" >&2; exit 2; }
part() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }

# srv NAME ARGS...: a `verity serve` on MODEL with THREADS; sets PORT (and PID)
srv() {
    local name=$1; shift
    # shellcheck disable=SC2086 # SRV_ARGS: words
    bench_serve "$tmp/$name.log" -m "$MODEL" -t "$THREADS" ${SRV_ARGS:-} "$@" || exit 2
    PID=$BENCH_PID PORT=$BENCH_PORT
    pids="$pids $PID"
}
stop() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# client PORT OUT ARGS...: bench/kv_client.mjs against the server on PORT, its JSON into OUT
client() {
    local port=$1 out=$2; shift 2
    VERITY_URL="http://127.0.0.1:$port" node bench/kv_client.mjs "$@" >"$out" ||
        die "kv_client.mjs $* against port $port failed"
}
# metric PORT NAME: the value of the sample NAME (with its labels) on /metrics, 0 if absent
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { print $2; f = 1 } END { if (!f) print 0 }'
}
echo "model: $MODEL; $THREADS threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"

if part 1; then
    echo "== 1. agentic sessions: $AGENT_SESSIONS sessions (cache off: $OFF_SESSIONS) x $TURNS turns, round-robin, one request in flight, $AGENT_TOOLS tools, tool results of $AGENT_RESULT characters, $AGENT_GEN generated tokens per turn"
    srv p1on --prefix-cache 1
    client "$PORT" "$tmp/p1on.json" agent "$AGENT_SESSIONS" "$TURNS" "$AGENT_GEN"
    stop "$PID"
    srv p1off --prefix-cache 0
    AGENT_ONLY_TURNS=$OFF_TURNS client "$PORT" "$tmp/p1off.json" agent "$OFF_SESSIONS" "$TURNS" "$AGENT_GEN"
    stop "$PID"
    if command -v llama-server >/dev/null; then
        lport=$((20000 + RANDOM % 20000))
        llama-server -m "$MODEL" -t "$THREADS" --port "$lport" >"$tmp/llama.log" 2>&1 &
        lpid=$!
        pids="$pids $lpid"
        for i in $(seq 1 600); do
            curl -sf "http://127.0.0.1:$lport/health" >/dev/null && break
            kill -0 "$lpid" 2>/dev/null || die "llama-server did not start: $(tail -c 300 "$tmp/llama.log")"
            sleep 0.2
        done
        AGENT_ONLY_TURNS=$OFF_TURNS client "$lport" "$tmp/p1llama.json" agent "$OFF_SESSIONS" "$TURNS" "$AGENT_GEN"
        stop "$lpid"
    else
        echo "llama-server: not on PATH, skipped"
    fi
    node - "$tmp" <<'JS'
const fs = require('fs'), dir = process.argv[2];
const rd = (n) => fs.existsSync(`${dir}/${n}.json`) ? JSON.parse(fs.readFileSync(`${dir}/${n}.json`)) : null;
const on = rd('p1on'), off = rd('p1off'), ll = rd('p1llama');
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
console.log(`turn | prompt tokens | cached (on) | TTFT ms, cache on | TTFT ms, cache off | off / on${ll ? ' | llama-server ms' : ''}`);
const fmt = (r) => r && r.ttft_ms.length ? med(r.ttft_ms).toFixed(1) : '-';
for (const [i, r] of on.turns.entries()) {
  const a = med(r.ttft_ms), o = off.turns[i];
  console.log(`${r.turn} | ${med(r.prompt_tokens)} | ${med(r.cached_tokens)} | ${a.toFixed(1)} | ${fmt(o)} | ` +
              (o.ttft_ms.length ? `${(med(o.ttft_ms) / a).toFixed(2)}x` : '-') + (ll ? ` | ${fmt(ll.turns[i])}` : ''));
}
const last = on.turns.length - 1;
console.log(`turn ${last + 1}: time to first token ${(med(off.turns[last].ttft_ms) / med(on.turns[last].ttft_ms)).toFixed(2)}x lower with the prefix cache (goal: >= 10x)`);
JS
fi

if part 2; then
    echo "== 2. $SHARED_N requests at once sharing a $SHARED_CHARS-character system prompt, $SHARED_GEN tokens each"
    for c in 1 0; do
        srv "p2_$c" --prefix-cache "$c" --max-batch "$SHARED_N"
        client "$PORT" "$tmp/p2_$c.json" shared "$SHARED_N" "$SHARED_CHARS" "$SHARED_GEN"
        stop "$PID"
    done
    node - "$tmp" <<'JS'
const fs = require('fs'), dir = process.argv[2];
const r = [1, 0].map((c) => JSON.parse(fs.readFileSync(`${dir}/p2_${c}.json`)));
const tot = (x) => (x.prompt_tokens + x.gen_tokens) / x.seconds, gen = (x) => x.gen_tokens / x.seconds;
for (const [i, x] of r.entries())
  console.log(`cache ${i ? 'off' : 'on '}: ${x.seconds} s, ${x.prompt_tokens} prompt tokens (${x.cached_tokens} from the cache) + ${x.gen_tokens} generated: ` +
              `${tot(x).toFixed(1)} tok/s prompt+gen, ${gen(x).toFixed(1)} generated tok/s; median TTFT ${x.ttft_p50_ms} ms`);
console.log(`throughput with the cache: ${(tot(r[0]) / tot(r[1])).toFixed(2)}x (prompt+gen), ${(gen(r[0]) / gen(r[1])).toFixed(2)}x (generated) (goal: >= 3x)`);
JS
fi

if part 3; then
    echo "== 3. no shared prefix: $DISTINCT_N requests at once, distinct prompts of $DISTINCT_CHARS characters, $DISTINCT_GEN tokens each; $ROUNDS rounds, both servers up, used in turn"
    srv p3on --prefix-cache 1 --max-batch "$DISTINCT_N"
    pon=$PID port_on=$PORT
    srv p3off --prefix-cache 0 --max-batch "$DISTINCT_N"
    poff=$PID port_off=$PORT
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then order="on off"; else order="off on"; fi
        for c in $order; do
            if [ "$c" = on ]; then p=$port_on; else p=$port_off; fi
            client "$p" "$tmp/p3_${c}_$r.json" distinct "$DISTINCT_N" "$DISTINCT_CHARS" "$DISTINCT_GEN" "$r"
        done
    done
    cached=$(metric "$port_on" verity_cached_prompt_tokens_total)
    stop "$pon"
    stop "$poff"
    node - "$tmp" "$ROUNDS" "$cached" <<'JS'
const fs = require('fs'), [dir, rounds, cached] = [process.argv[2], +process.argv[3], process.argv[4]];
const rd = (c, r) => JSON.parse(fs.readFileSync(`${dir}/p3_${c}_${r}.json`));
const tps = (x) => (x.prompt_tokens + x.gen_tokens) / x.seconds;
const ratios = [];
for (let r = 1; r <= rounds; r++) {
  const on = rd('on', r), off = rd('off', r);
  ratios.push(tps(on) / tps(off));
  console.log(`round ${r} (${r % 2 ? 'on first' : 'off first'}): cache on ${tps(on).toFixed(1)} tok/s (${on.seconds} s), off ${tps(off).toFixed(1)} tok/s (${off.seconds} s): on/off ${ratios.at(-1).toFixed(3)}`);
}
const s = [...ratios].sort((a, b) => a - b);
const med = s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
console.log(`median on/off throughput: ${med.toFixed(3)} (goal: within 2%); the cache-on server reused ${cached} positions`);
JS
fi

if part 4 || part 5; then
    echo "== 4/5. tier reload: $FILL_N distinct prompts of $FILL_CHARS characters, one at a time, through a $KV_POOL-block pool (evictions to disk, every sealed block to Redis)"
    kvd="$tmp/kvd"
    mkdir -p "$kvd"
    rsock="$tmp/redis.sock"
    redis-server --port 0 --unixsocket "$rsock" --unixsocketperm 700 --save '' --appendonly no \
        >"$tmp/redis.log" 2>&1 &
    rpid=$!
    pids="$pids $rpid"
    for i in $(seq 1 100); do
        [ "$(redis-cli -s "$rsock" ping 2>/dev/null)" = PONG ] && break
        kill -0 "$rpid" 2>/dev/null || die "redis-server did not start: $(tail -c 300 "$tmp/redis.log")"
        sleep 0.1
    done
    srv fill --kv-blocks "$KV_POOL" --kv-disk-dir "$kvd" --kv-redis "unix://$rsock" --max-batch 1
    client "$PORT" "$tmp/fill.json" fill "$FILL_N" "$FILL_CHARS" 1
    for t in disk redis; do
        eval "sb_$t=\$(metric \$PORT 'verity_kv_cache_stored_blocks_total{tier=\"$t\"}')"
        eval "sz_$t=\$(metric \$PORT 'verity_kv_cache_stored_bytes_total{tier=\"$t\"}')"
    done
    stop "$PID" # flushes the tiers' queued writes
    # the restoring servers hold every prompt's blocks: no eviction (and no disk write) while reading
    big=$((FILL_N * (FILL_CHARS / 16 + 4)))
    # replay NAME TIER ARGS...: a fresh server replays the fill prompts; writes "restored load_s
    # count reload_s" to NAME.tier (load_s: the I/O thread's time in the tier's reads; reload_s:
    # each request's wall time from its first lookup to its blocks verified in the pool)
    replay() {
        local name=$1 tier=$2; shift 2
        srv "$name" --kv-blocks "$big" --max-batch 1 "$@"
        client "$PORT" "$tmp/$name.json" fill "$FILL_N" "$FILL_CHARS" 1
        echo "$(metric "$PORT" "verity_kv_cache_restored_blocks_total{tier=\"$tier\"}")" \
            "$(metric "$PORT" "verity_kv_tier_load_seconds_sum{tier=\"$tier\"}")" \
            "$(metric "$PORT" "verity_kv_tier_load_seconds_count{tier=\"$tier\"}")" \
            "$(metric "$PORT" "verity_kv_tier_reload_seconds_total{tier=\"$tier\"}")" >"$tmp/$name.tier"
        stop "$PID"
    }
    # rate BYTES SECONDS: MB/s (10^6)
    rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? b / s / 1e6 : 0) }'; }
    # dd_rate ARGS...: dd's bytes / seconds in MB/s
    dd_rate() {
        LC_ALL=C dd "$@" 2>&1 | awk '/bytes/ && /copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) s = $(i - 1); printf "%.1f", $1 / s / 1e6 }'
    }
    # busy_start / busy_stop: an engine computing beside a baseline (`verity bench` decoding on
    # THREADS), as one computes beside the tier's I/O thread while a server restores blocks
    busy_start() {
        $V bench -m "$MODEL" -t "$THREADS" --batch 1 --prompt 16 --gen 4000 --reps 1 >/dev/null 2>&1 &
        busy=$!
        pids="$pids $busy"
        sleep 3
    }
    busy_stop() { stop "$busy"; }
    # cached_pct FILES...: the share of the files' bytes in the page cache (fincore)
    cached_pct() {
        command -v fincore >/dev/null || { echo "?"; return; }
        fincore -b -n -o RES,SIZE "$@" 2>/dev/null | awk '{ r += $1; s += $2 } END { printf "%.0f", s ? 100 * r / s : 0 }'
    }
fi

if part 4; then
    nf=$(ls "$kvd" | grep -c '\.kvb$')
    [ "$nf" -gt 0 ] || die "no block file in the disk tier after the fill ($sb_disk blocks stored)"
    blob=$((sz_disk / sb_disk))
    sync # written back, so that the page cache can drop them
    for f in "$kvd"/*.kvb; do dd if="$f" iflag=nocache count=0 status=none; done
    pct=$(cached_pct "$kvd"/*.kvb)
    replay rd_cold disk --kv-disk-dir "$kvd"
    pct_after=$(cached_pct "$kvd"/*.kvb)
    replay rd_warm disk --kv-disk-dir "$kvd"
    read -r n_c s_c k_c _ <"$tmp/rd_cold.tier"
    read -r n_w s_w k_w _ <"$tmp/rd_warm.tier"
    [ "${k_c:-0}" -gt 0 ] || die "the disk tier restored nothing (restored blocks $n_c)"
    dd if=/dev/urandom of="$kvd/dd.bin" bs=1M count="$DD_MB" conv=fsync status=none || die "dd: cannot write $kvd/dd.bin"
    # the tier's own files, read cold with cat: many small files, as the tier reads them
    sync
    for f in "$kvd"/*.kvb; do dd if="$f" iflag=nocache count=0 status=none; done
    t0=$(date +%s.%N)
    cat "$kvd"/*.kvb >/dev/null
    t1=$(date +%s.%N)
    bw_files=$(rate "$(cat "$kvd"/*.kvb | wc -c)" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
    bw_direct=$(dd_rate if="$kvd/dd.bin" of=/dev/null bs=1M iflag=direct)
    dd if="$kvd/dd.bin" iflag=nocache count=0 status=none
    bw_cold=$(dd_rate if="$kvd/dd.bin" of=/dev/null bs="$blob")
    bw_warm=$(dd_rate if="$kvd/dd.bin" of=/dev/null bs="$blob")
    busy_start
    bw_direct_b=$(dd_rate if="$kvd/dd.bin" of=/dev/null bs=1M iflag=direct)
    bw_warm_b=$(dd_rate if="$kvd/dd.bin" of=/dev/null bs="$blob")
    busy_stop
    rm -f "$kvd/dd.bin"
    cold=$(rate $((k_c * blob)) "$s_c") warm=$(rate $((k_w * blob)) "$s_w")
    echo "filled: $sb_disk blocks of $blob bytes written to disk ($nf files); ${pct}% of their bytes in the page cache after sync and dd iflag=nocache, ${pct_after}% after the cold replay"
    echo "disk reload, files dropped from the page cache: $k_c loads ($n_c blocks restored) in $s_c s of tier load time: $cold MB/s"
    echo "disk reload, files in the page cache (a second fresh server): $k_w loads ($n_w restored) in $s_w s: $warm MB/s"
    echo "dd of a $DD_MB MiB file in the same directory: O_DIRECT bs=1M $bw_direct MB/s; buffered bs=$blob after dropping it from the page cache $bw_cold MB/s; again, cached, $bw_warm MB/s; the tier's $nf files, dropped from the page cache, by cat: $bw_files MB/s"
    echo "the same beside a computing engine (verity bench on $THREADS threads): dd O_DIRECT $bw_direct_b MB/s, cached $bw_warm_b MB/s"
    echo "disk reload at $(awk -v a="$cold" -v b="$bw_direct" 'BEGIN { printf "%.0f", 100 * a / b }')% of dd O_DIRECT (goal: >= 50%), $(awk -v a="$cold" -v b="$bw_files" 'BEGIN { printf "%.0f", 100 * a / b }')% of cat of its files; cached: $(awk -v a="$warm" -v b="$bw_warm" 'BEGIN { printf "%.0f", 100 * a / b }')% of cached dd; beside a computing engine: $(awk -v a="$cold" -v b="$bw_direct_b" 'BEGIN { printf "%.0f", 100 * a / b }')% of dd O_DIRECT, cached $(awk -v a="$warm" -v b="$bw_warm_b" 'BEGIN { printf "%.0f", 100 * a / b }')%"
fi

if part 5; then
    [ "${sb_redis:-0}" -gt 0 ] || die "nothing was written to Redis during the fill"
    blob=$((sz_redis / sb_redis))
    # rb_get ARGS...: redis-benchmark's GET requests/s on the socket (SET first: the key exists)
    rb_get() {
        redis-benchmark -s "$rsock" -t set,get -d "$blob" -n "$REDIS_N" "$@" --csv 2>/dev/null |
            awk -F'"' '$2 == "GET" { print $4 }'
    }
    # REDIS_ROUNDS rounds, each a fresh server's replay then redis-benchmark -c 1 right after it:
    # the ratio of each round, then the median of the rounds (the machine's load moves between
    # minutes; a ratio within one round compares like with like)
    : >"$tmp/rr.rounds"
    for r in $(seq 1 "$REDIS_ROUNDS"); do
        replay "rr$r" redis --kv-redis "unix://$rsock"
        read -r n_r s_r k_r w_r <"$tmp/rr$r.tier"
        [ "${k_r:-0}" -gt 0 ] || die "the Redis tier restored nothing (restored blocks $n_r)"
        rb=$(rb_get -c 1)
        [ -n "$rb" ] || die "redis-benchmark gave no GET figure"
        red=$(rate $((k_r * blob)) "$s_r") redw=$(rate $((n_r * blob)) "$w_r")
        rbw=$(awk -v r="$rb" -v b="$blob" 'BEGIN { printf "%.1f", r * b / 1e6 }')
        echo "round $r: restored $n_r blocks ($k_r loads) in $s_r s of tier load time, $red MB/s; end to end $w_r s, $redw MB/s; redis-benchmark GET -c 1 $rb requests/s = $rbw MB/s: load $(awk -v a="$red" -v b="$rbw" 'BEGIN { printf "%.0f", 100 * a / b }')%, end to end $(awk -v a="$redw" -v b="$rbw" 'BEGIN { printf "%.0f", 100 * a / b }')%"
        echo "$red $redw $rbw" >>"$tmp/rr.rounds"
    done
    rb4=$(rb_get -c 4)
    busy_start
    rbb=$(rb_get -c 1)
    busy_stop
    rbw4=$(awk -v r="$rb4" -v b="$blob" 'BEGIN { printf "%.1f", r * b / 1e6 }')
    rbwb=$(awk -v r="$rbb" -v b="$blob" 'BEGIN { printf "%.1f", r * b / 1e6 }')
    echo "redis: $sb_redis blocks of $blob bytes written during the fill; tier load time: the I/O thread's time in the tier's reads (a pipelined batch's time shared by its keys); end to end: each request's wall time from its first lookup to its blocks verified in the pool"
    echo "redis-benchmark GET -d $blob on the same socket: 4 connections $rb4/s = $rbw4 MB/s; 1 connection beside a computing engine (verity bench on $THREADS threads) $rbb/s = $rbwb MB/s"
    awk '{ l[NR] = 100 * $1 / $3; e[NR] = 100 * $2 / $3 }
         function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
         END { n = NR; printf "redis reload at %.0f%% of redis-benchmark with one connection, median of %d rounds (goal: >= 50%%); end to end %.0f%%\n", med(l, n), n, med(e, n) }' "$tmp/rr.rounds"
fi
