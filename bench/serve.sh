#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Serving benchmark: `verity bench` decode at batch C, then `verity serve` with C concurrent
# streaming clients (bench/serve_client.mjs) on the same model and threads, alternated ROUNDS
# times in one run (this machine's speed drifts by tens of percent between minutes, so one pair
# proves little); prints each round and the median ratio of HTTP tokens/s to the engine's, the
# share of the server's wall time spent in engine steps (from its /metrics), and TTFT and
# inter-token latency percentiles of the median round.
# Usage: bench/serve.sh [MODEL.gguf] [C=32] [R=2] [G=128]; ROUNDS [3] from the environment.
# Without MODEL it uses the synthetic 0.5b F16 model `verity bench` caches. Exit 2 if a request
# fails or the server does not start.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/lib.bash
V=build/release/verity
MODEL=${1:-} C=${2:-32} R=${3:-2} G=${4:-128} ROUNDS=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    # Without MODEL, `verity bench` makes (once) and names the cached synthetic model.
    $V bench ${MODEL:+-m "$MODEL"} --batch "$C" --prompt 10 --gen "$G" --reps 1 --json \
        >"$out/eng$round.json" || exit 2
    [ -n "$MODEL" ] ||
        MODEL=$(node -e "console.log(JSON.parse(require('fs').readFileSync(process.argv[1])).model.path)" "$out/eng$round.json")
    bench_serve "$out/server.log" -m "$MODEL" --max-batch "$C" --queue-max 1024 || exit 2
    pid=$BENCH_PID port=$BENCH_PORT
    VERITY_URL="http://127.0.0.1:$port" node bench/serve_client.mjs "$C" "$R" "$G" >"$out/http$round.json" ||
        { kill -TERM $pid; exit 2; }
    curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics$round.txt"
    kill -TERM $pid
    wait $pid 2>/dev/null
done
node - "$out" "$ROUNDS" <<'JS'
const fs = require('fs');
const [dir, rounds] = [process.argv[2], +process.argv[3]];
const rows = [];
for (let r = 1; r <= rounds; r++) {
  const e = JSON.parse(fs.readFileSync(`${dir}/eng${r}.json`));
  const c = JSON.parse(fs.readFileSync(`${dir}/http${r}.json`));
  const m = fs.readFileSync(`${dir}/metrics${r}.txt`, 'utf8');
  const steps = +(m.match(/^verity_engine_step_seconds_sum (\S+)/m) || [0, 0])[1];
  rows.push({ e, c, ratio: c.tok_s / e.results[0].decode_tok_s, busy: steps / c.seconds });
}
const e0 = rows[0].e;
console.log(`model: ${e0.model.arch} ${e0.model.type}, ${e0.machine.threads} threads, ${e0.machine.cpu}`);
for (const [i, x] of rows.entries())
  console.log(`round ${i + 1}: engine decode at batch ${x.e.results[0].batch}: ${x.e.results[0].decode_tok_s.toFixed(1)} tok/s; ` +
              `HTTP, ${x.c.concurrency} streaming clients x ${x.c.requests / x.c.concurrency} requests x ${x.c.gen} tokens: ` +
              `${x.c.tok_s.toFixed(1)} tok/s = ${(100 * x.ratio).toFixed(1)}%; engine stepping ${(100 * x.busy).toFixed(1)}% of the wall time`);
const med = [...rows].sort((a, b) => a.ratio - b.ratio)[Math.floor(rows.length / 2)];
console.log(`median: HTTP at ${(100 * med.ratio).toFixed(1)}% of the engine`);
console.log(`time to first token ms: p50 ${med.c.ttft_ms.p50}, p90 ${med.c.ttft_ms.p90}, p99 ${med.c.ttft_ms.p99}`);
console.log(`inter-token latency ms: p50 ${med.c.itl_ms.p50}, p90 ${med.c.itl_ms.p90}, p99 ${med.c.itl_ms.p99}`);
JS
