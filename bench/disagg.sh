#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Disaggregation benchmark: what the prefill/decode split costs one request. One monolithic
# `verity serve` (M), and `verity router --prefill P --decode D` over a prefill and a decode server
# (each -t T; the embedded stories260K model unless MODEL is given). N requests, one at a time,
# each a fresh prompt of W words (so no server's prefix cache helps, and the decode server's
# cached tokens can only come from the transfer), max_tokens G, greedy, sent alternately to M and
# through the router, ROUNDS times (this machine's speed drifts between minutes, so the pairs are
# interleaved). Prints per round and for the median round: the median and p90 whole-request
# latency direct and disaggregated, their difference (the transfer, the router and the second
# server's admission: the per-request overhead of the split), the prompt positions the decode
# server took from the transfer per request, and the KV bytes moved per request.
# Usage: bench/disagg.sh [MODEL.gguf] [N=20] [W=120] [G=8]; ROUNDS [3], T [1] from the
# environment. Exit 2 if a request fails or a process does not start.
set -u
cd "$(dirname "$0")/.." || exit 2
. bench/lib.bash
MODEL=${1:-} N=${2:-20} W=${3:-120} G=${4:-8} ROUNDS=${ROUNDS:-3} T=${T:-1}
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; rm -rf "$out"' EXIT
bench_serve "$out/m.log" ${MODEL:+-m "$MODEL"} -t "$T" || exit 2
pids+=("$BENCH_PID"); M="http://127.0.0.1:$BENCH_PORT"
bench_serve "$out/p.log" ${MODEL:+-m "$MODEL"} -t "$T" --role prefill || exit 2
pids+=("$BENCH_PID"); P="http://127.0.0.1:$BENCH_PORT"
bench_serve "$out/d.log" ${MODEL:+-m "$MODEL"} -t "$T" --role decode || exit 2
pids+=("$BENCH_PID"); D="http://127.0.0.1:$BENCH_PORT"
bench_start "$out/r.log" router --prefill "$P" --decode "$D" --router-health-ms 200 || exit 2
pids+=("$BENCH_PID"); R="http://127.0.0.1:$BENCH_PORT"
sleep 0.5 # the router's first poll learns the decode server's kv_addr
words=(the cat sat on a mat while it rained and then dog ran to park with ball under tree sun)
# body ROUND I SIDE: a prompt no server has seen
body() {
    local s=$(( ($1 * 1000 + $2) * 2 + $3 )) k txt=""
    for k in $(seq 1 "$W"); do s=$(( (s * 1103515245 + 12345) % 2147483648 )); txt="$txt ${words[s % 19]}"; done
    printf '{"prompt":"%s","max_tokens":%d,"temperature":0}' "$txt" "$G"
}
one() { # URL BODY -> seconds
    curl -s -o "$out/resp" -w '%{time_total}\n' "$1/v1/completions" -d "$2" || exit 2
    grep -q '"finish_reason"' "$out/resp" || { echo "$0: a request failed: $(head -c 200 "$out/resp")" >&2; exit 2; }
}
mv() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
for round in $(seq 1 "$ROUNDS"); do
    : >"$out/direct$round"; : >"$out/split$round"
    c0=$(mv "$D" verity_cached_prompt_tokens_total)
    for i in $(seq 1 "$N"); do
        one "$M" "$(body "$round" "$i" 0)" >>"$out/direct$round"
        one "$R" "$(body "$round" "$i" 1)" >>"$out/split$round"
    done
    c1=$(mv "$D" verity_cached_prompt_tokens_total)
    echo $(( (c1 - c0) / N )) >"$out/cached$round"
done
python3 - "$out" "$ROUNDS" "$N" <<'PY'
import os, statistics, sys
out, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
rows = []
for r in range(1, rounds + 1):
    d = [float(x) for x in open(f"{out}/direct{r}")]
    s = [float(x) for x in open(f"{out}/split{r}")]
    c = int(open(f"{out}/cached{r}").read())
    rows.append((statistics.median(d), q(d, .9), statistics.median(s), q(s, .9), c))
    print(f"round {r}: direct median {rows[-1][0]*1e3:.1f} ms p90 {rows[-1][1]*1e3:.1f} ms | "
          f"disaggregated median {rows[-1][2]*1e3:.1f} ms p90 {rows[-1][3]*1e3:.1f} ms | "
          f"overhead {(rows[-1][2]-rows[-1][0])*1e3:+.1f} ms | {c} prompt positions transferred/request")
rows.sort(key=lambda x: x[2] - x[0])
m = rows[len(rows) // 2]
print(f"median round: direct {m[0]*1e3:.1f} ms, disaggregated {m[2]*1e3:.1f} ms, "
      f"per-request overhead {(m[2]-m[0])*1e3:+.1f} ms ({m[2]/m[0]:.2f}x), "
      f"{m[4]} prompt positions from the transfer per request")
PY
