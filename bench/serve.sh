#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Serving benchmark: `verity bench` decode at batch C, then `verity serve` with C concurrent
# streaming clients (bench/serve_client.mjs) on the same model and threads, in one run, and the
# ratio of HTTP tokens/s to the engine's. Usage: bench/serve.sh [MODEL.gguf] [C=32] [R=2] [G=64]
# Without MODEL it uses the synthetic 0.5b F16 model `verity bench` caches.
set -u
cd "$(dirname "$0")/.." || exit 2
V=build/release/verity
MODEL=${1:-} C=${2:-32} R=${3:-2} G=${4:-64}
if [ -z "$MODEL" ]; then
    MODEL="${XDG_CACHE_HOME:-$HOME/.cache}/verity/synth-0.5b-f16-seed1.gguf"
    [ -e "$MODEL" ] || $V bench --type f16 --batch 1 --gen 1 --prompt 8 --reps 1 >/dev/null
fi
eng=$($V bench -m "$MODEL" --batch "$C" --prompt 32 --gen "$G" --reps 1 --json)
eng_tok=$(node -e "console.log(JSON.parse(process.argv[1]).results[0].decode_tok_s)" "$eng")
log=$(mktemp)
$V serve -m "$MODEL" --port 0 --max-batch "$C" --queue-max 1024 >"$log" 2>&1 &
pid=$!
for i in $(seq 1 600); do port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log"); [ -n "$port" ] && break; sleep 0.1; done
cl=$(VERITY_URL="http://127.0.0.1:$port" node bench/serve_client.mjs "$C" "$R" "$G")
kill -TERM $pid; wait $pid 2>/dev/null; rm -f "$log"
node -e '
const e = JSON.parse(process.argv[1]), c = JSON.parse(process.argv[2]);
const d = e.results[0];
console.log(`model: ${e.model.arch} ${e.model.type}, ${e.machine.threads} threads, ${e.machine.cpu}`);
console.log(`engine decode at batch ${d.batch}: ${d.decode_tok_s.toFixed(1)} tok/s`);
console.log(`HTTP, ${c.concurrency} streaming clients x ${c.requests / c.concurrency} requests x ${c.gen} tokens: ${c.tok_s.toFixed(1)} tok/s = ${(100 * c.tok_s / d.decode_tok_s).toFixed(1)}% of the engine`);
console.log(`time to first token ms: p50 ${c.ttft_ms.p50}, p90 ${c.ttft_ms.p90}, p99 ${c.ttft_ms.p99}`);
console.log(`inter-token latency ms: p50 ${c.itl_ms.p50}, p90 ${c.itl_ms.p90}, p99 ${c.itl_ms.p99}`);
' "$eng" "$cl"
