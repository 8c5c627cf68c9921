# SPDX-License-Identifier: MIT
# verity bench on a tiny synthetic model (the command, not the machine's speed: no figure is
# compared with a threshold): the table and the JSON report every requested batch with positive
# tokens/s and fractions that are the figures over the roofline it measured (the medians of the
# samples it took before the first phase and after every phase: 3 read and 2 FMA samples at each
# of 1 + 2 x batches points), the model path it ran; --cold's read pass before every decode step
# (counted, not taken as a sample); bad options exit 2 with one line.
. "$(dirname "$0")/lib.bash"

V="$VERITY"
if ! "$V" synth --shape tiny --type f16 --seed 3 -o "$TMP/tiny.gguf" 2>"$TMP/err"; then
    fail bench.setup "synth failed: $(cat "$TMP/err")"; exit 0
fi
if ! command -v python3 >/dev/null; then skip bench "python3 needed to read the JSON"; exit 0; fi

if "$V" bench -m "$TMP/tiny.gguf" --batch 1,3 --prompt 8 --gen 4 --reps 1 -t 1 --json \
    >"$TMP/b.json" 2>"$TMP/err"; then
    r=$(python3 - "$TMP/b.json" "$TMP/tiny.gguf" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
m, mod, res = d["machine"], d["model"], d["results"]
bad = []
if mod["path"] != sys.argv[2]: bad.append("path %r" % mod["path"])
if m["threads"] != 1: bad.append("threads %r" % m["threads"])
bw, fma = m["read_gbs"], m["fma_gflops"]
if not (bw > 0 and fma > 0): bad.append("roofline %r %r" % (bw, fma))
rs, fs = m["read_samples"], m["fma_samples"]
if m["roof_points"] != 5 or len(rs) != 15 or len(fs) != 10:
    bad.append("samples: %r points, %d read, %d fma" % (m["roof_points"], len(rs), len(fs)))
if abs(bw - statistics.median(rs)) > 1e-3: bad.append("bw %r not the median of %r" % (bw, rs))
if abs(fma - statistics.median(fs)) > 1e-3: bad.append("fma %r not the median of %r" % (fma, fs))
if [r["batch"] for r in res] != [1, 3]: bad.append("batches %r" % [r["batch"] for r in res])
if d["cold"] is not False or d["flush_passes"] != 0:
    bad.append("cold %r, %r passes" % (d["cold"], d["flush_passes"]))
for r in res:
    if not (r["prefill_tok_s"] > 0 and r["decode_tok_s"] > 0): bad.append("tok/s %r" % r)
    want_bw = mod["weight_bytes"] * r["decode_tok_s"] / r["batch"] / (bw * 1e9)
    want_fma = mod["gflop_per_token"] * r["decode_tok_s"] / fma
    if abs(r["decode_bw_frac"] - want_bw) > 1e-3 * want_bw + 1e-4: bad.append("bw frac %r" % r)
    if abs(r["decode_fma_frac"] - want_fma) > 1e-2 * want_fma + 1e-4: bad.append("fma frac %r" % r)
print("ok" if not bad else "; ".join(bad))
PY
)
    [ "$r" = ok ] && pass bench.json || fail bench.json "$r"
else
    fail bench.json "exit $?: $(cat "$TMP/err")"
fi

if "$V" bench -m "$TMP/tiny.gguf" --batch 2 --prompt 4 --gen 2 --reps 1 -t 1 >"$TMP/b.txt" 2>"$TMP/err" &&
    grep -q '^roofline: read .* medians of 9 and 6 samples taken before the first phase and after every phase (3 points); read [0-9.]*-[0-9.]* GB/s' "$TMP/b.txt" &&
    grep -Eq '^ +2 +[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9.]+% +[0-9.]+%$' "$TMP/b.txt"; then
    pass bench.table
else
    fail bench.table "$(cat "$TMP/b.txt" "$TMP/err")"
fi

# --cold: one read pass over the probe's buffer before every decode step (2 batches x 3 steps),
# not counted as roofline samples
if "$V" bench -m "$TMP/tiny.gguf" --batch 1,2 --prompt 4 --gen 3 --reps 1 -t 1 --cold --json \
    >"$TMP/c.json" 2>"$TMP/err" &&
    "$V" bench -m "$TMP/tiny.gguf" --batch 2 --prompt 4 --gen 2 --reps 1 -t 1 --cold >"$TMP/c.txt" 2>"$TMP/err"; then
    r=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
m = d["machine"]
ok = d["cold"] is True and d["flush_passes"] == 6 and m["roof_points"] == 5 and \
    len(m["read_samples"]) == 15 and all(r["decode_tok_s"] > 0 for r in d["results"])
print("ok" if ok else "cold %r, %r passes, %r points" % (d["cold"], d["flush_passes"], m["roof_points"]))
' "$TMP/c.json")
    if [ "$r" = ok ] && grep -q '^decode: every step after a read pass over the buffer (--cold, 2 passes)' "$TMP/c.txt"; then
        pass bench.cold
    else
        fail bench.cold "$r; $(cat "$TMP/c.txt")"
    fi
else
    fail bench.cold "exit $?: $(cat "$TMP/err")"
fi

for bad in "--batch 0" "--batch x" "--prompt 0" "--gen -1" "--frobnicate 1" "--shape 2b" "--type q9_k"; do
    # shellcheck disable=SC2086
    "$V" bench -m "$TMP/tiny.gguf" $bad >"$TMP/o" 2>"$TMP/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ ! -s "$TMP/o" ]; then
        pass "bench.bad_option($bad)"
    else
        fail "bench.bad_option($bad)" "exit $rc, stderr: $(cat "$TMP/err"), stdout: $(head -c 200 "$TMP/o")"
    fi
done
