#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Router benchmark: what `verity router` adds to a request. One backend, and C concurrent streaming
# clients (bench/serve_client.mjs: R requests each, G tokens each) sent alternately straight to the
# backend and through a router in front of it, ROUNDS times (this machine's speed drifts between
# minutes, so the pairs are interleaved). Prints per round and for the median round: time to first
# token, inter-token latency and whole-request latency percentiles direct and through the router,
# their differences (the router's added latency), and the router's CPU time (user + system, from
# /proc) per streamed token.
# BACKEND=serve (the default): a `verity serve` replica (the embedded stories260K model unless
# MODEL is given, --max-batch C); on a small machine the engine holds the cores the router needs,
# so the difference is mostly waiting for a core. BACKEND=mock: tests/tools/mock_stream (build it
# with `make tests`), a backend that costs almost nothing: every stream gets G tokens GAP_US
# microseconds apart [5000] from one epoll thread, so what the router adds is the router's own.
# In mock mode the router's verity_router_overhead_seconds histogram is read before and after
# each routed run and its p50/p99 (the upper bound of the bucket holding the quantile) printed
# per part (request: body complete -> backend request about to be written; event: backend
# bytes -> written to the client). AB=1 adds a second router with --router-direct-write 0, run
# after the first in every round, so the two paths are compared in one run. Before the rounds one
# unmeasured warm-up run (C streams x 1 request x 4 tokens) goes to each target.
# STAGGER_MS (default 0: all C streams start together, and with equal streams they stay in step,
# so every request arrives in a burst of C): the streams' starts spread over that many ms; in
# mock mode G * GAP_US / 1000 spreads the arrivals evenly over a request's length, the steady
# state of C concurrent streams.
# CLIENT_CPUS (default: unset, anywhere): a CPU list (taskset -c) for the load generator and the
# mock backend, so the router, given other CPUs with VERITY_ROUTER_CPUS (--router-cpus), has a
# core of its own: on a small machine that is what separates the router's own time from waiting
# for a core the clients hold, e.g. CLIENT_CPUS=0 VERITY_ROUTER_CPUS=1 on two CPUs.
# The node client opens more connections than it has streams (one per request at times), so every
# process takes --max-conns-per-addr 4096.
# Usage: [BACKEND=serve|mock] [GAP_US=5000] [AB=0|1] [ROUNDS=3] [STAGGER_MS=0] [CLIENT_CPUS=LIST] bench/router.sh [MODEL.gguf] [C=64]
# [R=4] [G=64]. Exit 2 if a request fails or a process does not start.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/lib.bash
MODEL=${1:-} C=${2:-64} R=${3:-4} G=${4:-64} ROUNDS=${ROUNDS:-3}
BACKEND=${BACKEND:-serve} GAP_US=${GAP_US:-5000} AB=${AB:-0}
export STAGGER_MS=${STAGGER_MS:-0}
pin=()
[ -n "${CLIENT_CPUS:-}" ] && pin=(taskset -c "$CLIENT_CPUS")
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; rm -rf "$out"' EXIT
if [ "$BACKEND" = mock ]; then
    [ -x build/release/tools/mock_stream ] || { echo "$0: build/release/tools/mock_stream missing (make tests)" >&2; exit 2; }
    "${pin[@]}" build/release/tools/mock_stream --port 0 --tokens "$G" --gap-us "$GAP_US" >"$out/mock.log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 1 100); do
        BENCH_PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out/mock.log")
        [ -n "$BENCH_PORT" ] && break
        sleep 0.1
    done
    [ -n "$BENCH_PORT" ] || { echo "$0: mock_stream did not start: $(cat "$out/mock.log")" >&2; exit 2; }
else
    bench_serve "$out/server.log" ${MODEL:+-m "$MODEL"} --max-batch "$C" --queue-max 1024 \
        --max-conns-per-addr 4096 || exit 2
    pids+=("$BENCH_PID")
fi
direct="http://127.0.0.1:$BENCH_PORT"
# routers: "1" (as configured: router-direct-write on by default) and, with AB=1, "0"
variants=(1)
[ "$AB" = 1 ] && variants=(1 0)
declare -A url rpid
for v in "${variants[@]}"; do
    extra=()
    [ "$AB" = 1 ] && extra=(--router-direct-write "$v")
    bench_start "$out/router$v.log" router --replica "$direct" --max-conns-per-addr 4096 "${extra[@]}" || exit 2
    rpid[$v]=$BENCH_PID
    pids+=("$BENCH_PID")
    url[$v]="http://127.0.0.1:$BENCH_PORT"
done
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# a warm-up (not measured): the routers start their workers and connections, node its JIT
for u in "$direct" "${url[@]}"; do
    VERITY_URL=$u "${pin[@]}" node bench/serve_client.mjs "$C" 1 4 >/dev/null || exit 2
done
HZ=$(getconf CLK_TCK)
for round in $(seq 1 "$ROUNDS"); do
    VERITY_URL=$direct "${pin[@]}" node bench/serve_client.mjs "$C" "$R" "$G" >"$out/direct$round.json" || exit 2
    for v in "${variants[@]}"; do
        curl -s "${url[$v]}/metrics" | grep '^verity_router_overhead_seconds_bucket' >"$out/m0_$v.$round"
        t0=$(ticks "${rpid[$v]}")
        VERITY_URL=${url[$v]} "${pin[@]}" node bench/serve_client.mjs "$C" "$R" "$G" >"$out/routed$v.$round.json" || exit 2
        t1=$(ticks "${rpid[$v]}")
        curl -s "${url[$v]}/metrics" | grep '^verity_router_overhead_seconds_bucket' >"$out/m1_$v.$round"
        echo "$(( t1 - t0 ))" >"$out/ticks$v.$round"
    done
done
node - "$out" "$ROUNDS" "$HZ" "$C" "$R" "$G" "${variants[*]}" "$BACKEND" <<'JS'
const fs = require('fs');
const [dir, rounds, hz, C, R, G] = process.argv.slice(2, 8).map((x, i) => (i ? +x : x));
const variants = process.argv[8].split(' '), backend = process.argv[9];
// the overhead histogram's delta over a run: per part, [bound, count] cumulative
const hist = (file) => {
  const h = {};
  for (const l of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = l.match(/part="(\w+)",le="([^"]+)"\} (\d+)/);
    if (m) (h[m[1]] = h[m[1]] || []).push([m[2], +m[3]]);
  }
  return h;
};
const quant = (a, b, part, q) => {
  const x = (a[part] || []).map((e, i) => [e[0], b[part][i][1] - e[1]]);
  const n = x.length ? x[x.length - 1][1] : 0;
  if (!n) return 'n/a';
  const e = x.find((e) => e[1] >= q * n);
  return e[0] === '+Inf' ? '>100 ms' : `<=${+(1e3 * +e[0]).toPrecision(2)} ms`;
};
const f = (x) => x.toFixed(1);
const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
for (const v of variants) {
  const rows = [];
  for (let r = 1; r <= rounds; r++) {
    const d = JSON.parse(fs.readFileSync(`${dir}/direct${r}.json`));
    const t = JSON.parse(fs.readFileSync(`${dir}/routed${v}.${r}.json`));
    const cpu = +fs.readFileSync(`${dir}/ticks${v}.${r}`, 'utf8') / hz;
    const h0 = hist(`${dir}/m0_${v}.${r}`), h1 = hist(`${dir}/m1_${v}.${r}`);
    const ovh = ['request', 'event'].map((p) => `${p} p50 ${quant(h0, h1, p, 0.5)} p99 ${quant(h0, h1, p, 0.99)}`).join(', ');
    rows.push({ d, t, cpu, ovh, add50: t.e2e_ms.p50 - d.e2e_ms.p50, add99: t.e2e_ms.p99 - d.e2e_ms.p99,
                tadd50: t.ttft_ms.p50 - d.ttft_ms.p50, tadd99: t.ttft_ms.p99 - d.ttft_ms.p99,
                us_tok: (1e6 * cpu) / (C * R * G) });
  }
  const tag = variants.length > 1 ? ` [router-direct-write ${v}]` : '';
  for (const [i, x] of rows.entries())
    console.log(`round ${i + 1}${tag}: ${C} streams x ${R} requests x ${G} tokens (${backend}); e2e ms p50/p99 direct ${x.d.e2e_ms.p50}/${x.d.e2e_ms.p99}, ` +
                `routed ${x.t.e2e_ms.p50}/${x.t.e2e_ms.p99} (added ${f(x.add50)}/${f(x.add99)}); ttft ms p50/p99 direct ${x.d.ttft_ms.p50}/${x.d.ttft_ms.p99}, ` +
                `routed ${x.t.ttft_ms.p50}/${x.t.ttft_ms.p99} (added ${f(x.tadd50)}/${f(x.tadd99)}); itl p50 ${x.d.itl_ms.p50} vs ${x.t.itl_ms.p50}; ` +
                `tok/s ${x.d.tok_s} vs ${x.t.tok_s}; router CPU ${f(x.us_tok)} us/token; router's own time: ${x.ovh}`);
  const m = [...rows].sort((a, b) => a.add50 - b.add50)[Math.floor(rows.length / 2)];
  console.log(`median round${tag}: router adds ${f(m.add50)} ms p50, ${f(m.add99)} ms p99 per request ` +
              `(e2e direct ${m.d.e2e_ms.p50}/${m.d.e2e_ms.p99} ms); router CPU ${f(m.us_tok)} us per streamed token; ${m.ovh}`);
  console.log(`medians over rounds${tag}: added e2e ${f(med(rows.map((x) => x.add50)))} ms p50, ${f(med(rows.map((x) => x.add99)))} ms p99; ` +
              `added ttft ${f(med(rows.map((x) => x.tadd50)))} ms p50, ${f(med(rows.map((x) => x.tadd99)))} ms p99; ` +
              `router CPU ${f(med(rows.map((x) => x.us_tok)))} us per streamed token`);
}
JS
