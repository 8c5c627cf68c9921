#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hunt benchmark: `verity hunt` against `verity serve` on the synthetic 0.5b Q8_0 model, at a
# bounded size, in one run; prints sessions per minute and the harness's CPU per request (user +
# system, from results.json). The server, not the harness, is the limit on a CPU-only machine:
# the figure to watch on the harness side is its CPU per request.
# Usage: bench/hunt.sh [MODEL.gguf]; sizes from the environment (defaults in brackets):
#   CONC [1,4]  SESSIONS [4] per level  TURNS [2]  TOOLS [2]  MAX_TOKENS [32]
#   DURATION [60]: per level, no new session after that many seconds (0 = no limit)
#   THREADS [0]: the server's compute threads (0 = one per CPU)
#   SCRAPE_MS [250]: hunt's /metrics period (0 = off); against a slow server the scrapes, not the
#   requests, are most of the harness's CPU
# Without MODEL it uses the synthetic 0.5b Q8_0 model `verity bench` caches in ~/.cache/verity/. The model's
# byte-level vocabulary makes prompts long: 2 built-in tools fit its 4096-token context, 10 do not.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/lib.bash
V=build/release/verity
[ -x "$V" ] || { echo "bench/hunt.sh: $V not built (make)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench/hunt.sh: python3 needed to read results.json" >&2; exit 2; }
MODEL=${1:-}
CONC=${CONC:-1,4} SESSIONS=${SESSIONS:-4} TURNS=${TURNS:-2} TOOLS=${TOOLS:-2}
MAX_TOKENS=${MAX_TOKENS:-32} DURATION=${DURATION:-60} THREADS=${THREADS:-0}
SCRAPE_MS=${SCRAPE_MS:-250}
if [ -z "$MODEL" ]; then # the model `verity bench --type q8_0` makes once and caches
    MODEL=$($V bench --type q8_0 --batch 1 --prompt 1 --gen 1 --reps 1 --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["model"]["path"])') || exit 2
fi
maxc=$(tr , '\n' <<<"$CONC" | sort -n | tail -n 1)
tmp=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
bench_serve "$tmp/server.log" -m "$MODEL" --max-batch "$maxc" --threads "$THREADS" || exit 2
pid=$BENCH_PID port=$BENCH_PORT
$V hunt --url "http://127.0.0.1:$port" --concurrency "$CONC" --sessions "$SESSIONS" \
    --turns "$TURNS" --tools "$TOOLS" --max-tokens "$MAX_TOKENS" --duration "$DURATION" \
    --scrape-ms "$SCRAPE_MS" --out "$tmp/out" >/dev/null
rc=$?
[ -s "$tmp/out/results.json" ] || { echo "bench/hunt.sh: hunt exited $rc without results" >&2; exit 2; }
python3 - "$tmp/out/results.json" "$MODEL" "$(sed -n 's/.*listening on .*(\(.*\))/\1/p' "$tmp/server.log")" \
    "$SCRAPE_MS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c, cfg, s = d['client'], d['config'], d['summary']
n = len(d['sessions'])
turns = sum(x['turns'] for x in d['sessions'])
print(f"model: {sys.argv[2]} ({sys.argv[3]})")
print(f"workload: concurrency {cfg['concurrency']}, {cfg['turns']} turns, {cfg['tools']} tools, "
      f"max_tokens {cfg['max_tokens']}, temperature {cfg['temperature']}")
for lv in d['per_concurrency']:
    print(f"  concurrency {lv['concurrency']}: {lv['n']} sessions, {lv['corrupt']} corrupt, "
          f"{lv['errors']} errors")
reqs = c['requests'] + c['reference_requests']
print(f"{n} sessions tested ({turns} turns) in {c['wall_s']:.1f} s: "
      f"{60 * n / c['wall_s']:.2f} sessions/min (reference walks included in the time)")
print(f"{reqs} requests ({c['reference_requests']} reference), {c['requests_per_s']:.2f} requests/s, "
      f"peak {c['peak_in_flight']} in flight")
print(f"harness CPU: {c['cpu_s']:.3f} s, {c['cpu_ms_per_request']:.3f} ms/request (user + system; "
      f"/metrics every {sys.argv[4]} ms, {len(d['metrics']['samples'])} scrapes)"
      if sys.argv[4] != '0' else
      f"harness CPU: {c['cpu_s']:.3f} s, {c['cpu_ms_per_request']:.3f} ms/request (user + system; "
      f"no /metrics scraping)")
print(f"harness CPU over the run: {100 * c['cpu_s'] / c['wall_s']:.2f}% of one core (against a slow "
      f"server mostly the event loop's 20 ms ticks, not the requests)")
print(f"verdict: {s['verdict']} ({s['corrupt']} corrupt of {s['n']})")
PY
