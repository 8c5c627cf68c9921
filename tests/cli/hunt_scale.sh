# SPDX-License-Identifier: MIT
# verity hunt drives 1,000 concurrent streaming sessions from one core (250 under sanitizers):
# the harness is pinned to one CPU (when taskset and a second CPU exist, the mock servers get the
# other), the reference is a second mock server asked 100 at a time, and the figures (peak in
# flight, harness CPU per request) are printed with the result.
. "$(dirname "$0")/hunt_lib.bash"
need_mock hunt_scale.mock || exit 0
command -v python3 >/dev/null || { skip hunt_scale.python3 "python3 needed"; exit 0; }
N=$(scaled 1000 50)
PIN_H=() PIN_M=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    PIN_H=(taskset -c 0) PIN_M=(taskset -c 1)
fi
MOCK_PREFIX=("${PIN_M[@]}")
start_mock T --step-ms 5
start_mock R --step-ms 1
if [ -z "$T" ] || [ -z "$R" ]; then fail hunt_scale.start "mock servers did not start"; exit 0; fi
"${PIN_H[@]}" "$VERITY" hunt --quiet --url "$T" --reference "$R" --reference-concurrency 100 \
    --concurrency "$N" --sessions "$N" --turns 2 --max-tokens 16 --stream --scrape-ms 100 \
    --timeout 60 --out "$TMP/scale" >/dev/null 2>"$TMP/scale.err"
rc=$?
if [ $rc -ne 0 ]; then fail hunt_scale.concurrent_streams "exit $rc: $(tail -n 3 "$TMP/scale.err")"; exit 0; fi
r=$(json "$TMP/scale/results.json" "d['client']['peak_in_flight']>=$N and d['summary']['n']==$N and d['summary']['corrupt']==0")
fig=$(json "$TMP/scale/results.json" "'peak %d in flight, %.3f ms harness CPU per request, %.0f requests/s, %.1f s' % (d['client']['peak_in_flight'], d['client']['cpu_ms_per_request'], d['client']['requests_per_s'], d['client']['wall_s'])")
if [ "$r" = True ]; then pass "hunt_scale.concurrent_streams_$N: $fig"
else fail hunt_scale.concurrent_streams_$N "$fig"; fi
