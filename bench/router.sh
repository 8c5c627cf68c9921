#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Router benchmark: what `verity router` adds to a request. One `verity serve` replica (the
# embedded stories260K model unless MODEL is given, --max-batch C), and C concurrent streaming
# clients (bench/serve_client.mjs: R requests each, G tokens each) sent alternately straight to the
# replica and through a router in front of it, ROUNDS times (this machine's speed drifts between
# minutes, so the pairs are interleaved). Prints per round and for the median round: time to first
# token, inter-token latency and whole-request latency percentiles direct and through the router,
# their differences (the router's added latency), and the router's CPU time (user + system, from
# /proc) per streamed token.
# The node client opens more connections than it has streams (one per request at times), so both
# take --max-conns-per-addr 4096.
# Usage: bench/router.sh [MODEL.gguf] [C=64] [R=4] [G=64]; ROUNDS [3] from the environment. Exit 2
# if a request fails or a process does not start.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/lib.bash
MODEL=${1:-} C=${2:-64} R=${3:-4} G=${4:-64} ROUNDS=${ROUNDS:-3}
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; rm -rf "$out"' EXIT
bench_serve "$out/server.log" ${MODEL:+-m "$MODEL"} --max-batch "$C" --queue-max 1024 \
    --max-conns-per-addr 4096 || exit 2
pids+=("$BENCH_PID")
direct="http://127.0.0.1:$BENCH_PORT"
bench_start "$out/router.log" router --replica "$direct" --max-conns-per-addr 4096 || exit 2
rpid=$BENCH_PID
pids+=("$rpid")
routed="http://127.0.0.1:$BENCH_PORT"
ticks() { awk '{ print $14 + $15 }' "/proc/$rpid/stat"; }
HZ=$(getconf CLK_TCK)
for round in $(seq 1 "$ROUNDS"); do
    VERITY_URL=$direct node bench/serve_client.mjs "$C" "$R" "$G" >"$out/direct$round.json" || exit 2
    t0=$(ticks)
    VERITY_URL=$routed node bench/serve_client.mjs "$C" "$R" "$G" >"$out/routed$round.json" || exit 2
    t1=$(ticks)
    echo "$(( t1 - t0 ))" >"$out/ticks$round"
done
node - "$out" "$ROUNDS" "$HZ" "$C" "$R" "$G" <<'JS'
const fs = require('fs');
const [dir, rounds, hz, C, R, G] = process.argv.slice(2).map((x, i) => (i ? +x : x));
const rows = [];
for (let r = 1; r <= rounds; r++) {
  const d = JSON.parse(fs.readFileSync(`${dir}/direct${r}.json`));
  const t = JSON.parse(fs.readFileSync(`${dir}/routed${r}.json`));
  const cpu = +fs.readFileSync(`${dir}/ticks${r}`, 'utf8') / hz;
  rows.push({ d, t, cpu, add50: t.e2e_ms.p50 - d.e2e_ms.p50, add99: t.e2e_ms.p99 - d.e2e_ms.p99,
              us_tok: (1e6 * cpu) / (C * R * G) });
}
const f = (x) => x.toFixed(1);
for (const [i, x] of rows.entries())
  console.log(`round ${i + 1}: ${C} streams x ${R} requests x ${G} tokens; e2e ms p50/p99 direct ${x.d.e2e_ms.p50}/${x.d.e2e_ms.p99}, ` +
              `routed ${x.t.e2e_ms.p50}/${x.t.e2e_ms.p99} (added ${f(x.add50)}/${f(x.add99)}); ttft p50 ${x.d.ttft_ms.p50} vs ${x.t.ttft_ms.p50}; ` +
              `itl p50 ${x.d.itl_ms.p50} vs ${x.t.itl_ms.p50}; tok/s ${x.d.tok_s} vs ${x.t.tok_s}; router CPU ${f(x.us_tok)} us/token`);
const med = [...rows].sort((a, b) => a.add50 - b.add50)[Math.floor(rows.length / 2)];
console.log(`median round: router adds ${f(med.add50)} ms p50, ${f(med.add99)} ms p99 per request ` +
            `(e2e direct ${med.d.e2e_ms.p50}/${med.d.e2e_ms.p99} ms); router CPU ${f(med.us_tok)} us per streamed token`);
JS
