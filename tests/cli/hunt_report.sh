#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The hunt report: rate-axis tick labels are the exact values the ticks sit at (12.5%, not 12%);
# against a server without a batch-size metric (the mock with vLLM names) the batch is shown as
# not measured (no line, a legend saying so, "not measured" in report.md, null in results.json);
# report.html renders in headless Chromium without console errors (skipped without chromium);
# and --context-pad N adds about N prompt tokens (within 15%) to verity serve's own
# usage.prompt_tokens although its tiny vocabulary takes about 1 byte per token, not 4.
. "$(dirname "$0")/hunt_lib.bash"
need_mock hunt_report.not_measured || exit 0
H() { "$VERITY" hunt --quiet --seed 7 "$@"; }

start_mock URL --step-ms 1 --metrics-style vllm
H --url "$URL" --concurrency 1,8 --sessions 8 --turns 2 --max-tokens 16 --scrape-ms 20 \
  --out "$TMP/vllm" >"$TMP/vllm.out" 2>"$TMP/vllm.err"
rc=$?
stop_mock "$MOCK_PID"
html="$TMP/vllm/report.html"
if [ $rc -ne 0 ] || [ ! -s "$html" ]; then
    fail hunt_report.not_measured "hunt exit $rc: $(tail -n 3 "$TMP/vllm.err")"; exit 0
fi
r=$(json "$TMP/vllm/results.json" "d['metrics']['flavor']=='vllm' and len(d['metrics']['samples'])>0 and all(s[3] is None for s in d['metrics']['samples']) and any(s[1] is not None for s in d['metrics']['samples'])" 2>/dev/null)
if [ "$r" = True ] && grep -q 'largest batch seen: not measured' "$TMP/vllm/report.md" &&
   grep -q 'batch size: not measured' "$html" && ! grep -q 'polyline class="batch"' "$html" &&
   grep -q 'polyline class="running"' "$html"; then
    pass hunt_report.not_measured
else
    fail hunt_report.not_measured "results $r; md: $(grep -i 'batch' "$TMP/vllm/report.md" | head -n 2)"
fi

# every rate axis: ticks at 0, v, 2v, 3v, 4v, each label exactly that value
r=$(python3 - "$html" <<'PY'
import re, sys
svgs = re.findall(r'<svg.*?</svg>', open(sys.argv[1]).read(), re.S)
bad, n = [], 0
for s in svgs:
    ticks = re.findall(r'class="tick">([0-9.]+)%</text>', s)
    if not ticks:
        continue
    n += 1
    v = [float(t) for t in ticks]
    if len(v) != 5 or any(abs(v[k] - k * v[1]) > 1e-9 for k in range(5)):
        bad.append(ticks)
print("ok" if n >= 2 and not bad else f"{n} axes, bad {bad}")
PY
)
[ "$r" = ok ] && pass hunt_report.rate_ticks_exact || fail hunt_report.rate_ticks_exact "$r"

# headless Chromium: renders, no console errors
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$CHROME" ]; then
    skip hunt_report.renders_in_chromium "no chromium (scripts/setup.sh installs it)"
else
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$TMP/chrome" --window-size=1200,2600 --enable-logging=stderr --v=0 \
        --screenshot="$TMP/report.png" "file://$html" >"$TMP/chrome.out" 2>"$TMP/chrome.err"
    crc=$?
    cerr=$(grep -E 'CONSOLE|Uncaught|ERR_FILE_NOT_FOUND|Failed to load' "$TMP/chrome.err" | head -n 3)
    size=$(stat -c %s "$TMP/report.png" 2>/dev/null || echo 0)
    if [ $crc -eq 0 ] && [ -z "$cerr" ] && [ "$size" -gt 20000 ]; then
        pass hunt_report.renders_in_chromium
    else
        fail hunt_report.renders_in_chromium "exit $crc, png $size bytes, console: $cerr"
    fi
    [ -n "${VERITY_KEEP_SCREENSHOT:-}" ] && cp "$TMP/report.png" "$VERITY_KEEP_SCREENSHOT"
fi

# --context-pad N adds about N tokens by the server's own count
"$VERITY" synth --shape tiny --type q8_0 --seed 11 -o "$TMP/m.gguf" >/dev/null 2>&1 ||
    { fail hunt_report.context_pad_calibrated "synth failed"; exit 0; }
start_server hunt_report.context_pad_calibrated -m "$TMP/m.gguf" --threads 1 || exit 0
H --url "$SRV_URL" --concurrency 1 --sessions 4 --turns 1 --max-tokens 2 --tools 0 \
  --context-pad 0,400 --out "$TMP/pad" >"$TMP/pad.out" 2>"$TMP/pad.err"
rc=$?
stop_server
r=$(json "$TMP/pad/results.json" "abs(d['per_context_pad'][1]['mean_prompt_tokens']-d['per_context_pad'][0]['mean_prompt_tokens']-400)<=0.15*400" 2>/dev/null)
[ $rc -eq 0 ] && [ "$r" = True ] && pass hunt_report.context_pad_calibrated ||
    fail hunt_report.context_pad_calibrated "exit $rc; $(json "$TMP/pad/results.json" "[p['mean_prompt_tokens'] for p in d['per_context_pad']], d['config']['context_pad_bytes_per_token']" 2>&1 | tail -n 1) $(tail -n 2 "$TMP/pad.err")"
