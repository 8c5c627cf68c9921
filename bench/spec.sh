#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Speculative decoding benchmark (BENCHMARKS.md, "Speculative decoding"), in one run, through
# bench/bench_spec.c (the engine of the release build):
#   1. the cost of verification: one sequence feeding r rows at once (r = 1 .. 17), median step
#      time over REPS steps, on the synthetic 0.5b model in F16 and Q8_0;
#   2. acceptance on real text: the embedded stories260K (real weights, a 512-token vocabulary)
#      on a copying workload (a story, then its beginning again: the model tends to copy it) and a
#      chat workload (a short opening, a new story: nothing to copy), with ngram and with a draft
#      model (stories260K quantized to Q8_0: the same model, slightly off), fixed k = 1, 2, 4, 8
#      (--spec-adapt 0) and the adaptive controller; its step is a fraction of a millisecond, so
#      its speed says nothing, only its acceptance is reported, and what that acceptance would give
#      on the 0.5b model with the costs of 1. (tokens per step / the cost of the mean rows);
#   3. the 0.5b model (random weights) at batch 1: a code-editing workload (a text of 60 words, then
#      its beginning) and a chat workload (12 random words, sampled at temperature 1), spec off
#      against ngram (adaptive), and against a draft model (the synthetic "small" shape, the same
#      vocabulary); a random model's greedy output repeats one token, which flatters any drafter:
#      its acceptance is not that of a real model;
#   4. the 0.5b model at batch 32: 32 requests at once (8 to 70 tokens each, so the batch
#      thins out at the end), spec off against ngram (default --spec-rows 16: a full batch drafts
#      nothing).
# Each figure is REPS_RUN runs of spec off and on, interleaved; the ratio reported is the median
# of the ratios of each pair (adjacent in time, so a slow minute of the shared machine hits both).
# Every pair must produce the same tokens (the hash printed by bench_spec): the script stops if not.
# Usage: bench/spec.sh; environment: THREADS [2] REPS [9] REPS_RUN [5] PARTS [1,2,3,4]
# SKIP [none]: an extended regular expression of the figures of parts 3 and 4 to leave out (e.g.
# 'k16|fixed4': a shorter run on a busy machine).
# CLOCK [wall]: cpu times everything by the benchmark thread's CPU time (needs THREADS=1: the
# forward pass then runs on that thread), so a busy shared machine's preemptions do not count.
set -u
cd "$(dirname "$0")/.." || exit 2
V=build/release/verity
[ -x "$V" ] || { echo "bench/spec.sh: $V not built (make)" >&2; exit 2; }
THREADS=${THREADS:-2} REPS=${REPS:-9} REPS_RUN=${REPS_RUN:-5} PARTS=${PARTS:-1,2,3,4} SKIP=${SKIP:-}
CLOCK=${CLOCK:-wall}
case $CLOCK in
    wall) ;;
    cpu) [ "$THREADS" = 1 ] || { echo "bench/spec.sh: CLOCK=cpu needs THREADS=1" >&2; exit 2; }
         export BSP_CLOCK=cpu ;;
    *) echo "bench/spec.sh: CLOCK must be wall or cpu" >&2; exit 2 ;;
esac
part() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
B=$tmp/bench_spec # this run's own build: a second run beside it does not replace it
cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/bench_spec.c build/release/libverity.a -lm -pthread \
    -lpcre2-8 -lcurl -lxxhash -lhiredis -o "$B" || exit 2
die() { echo "bench/spec.sh: $*" >&2; exit 2; }
model_of() { # TYPE: the synthetic 0.5b model `verity bench` makes once and caches
    $V bench --type "$1" --batch 1 --prompt 1 --gen 1 --reps 1 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["model"]["path"])'
}
F16=$(model_of f16) && Q8=$(model_of q8_0) || die "cannot make the 0.5b models"
STORIES=models/stories260K.gguf
$V quantize "$STORIES" "$tmp/stories-q8_0.gguf" q8_0 >/dev/null 2>&1 || die "quantize failed"
$V synth --shape small --type f16 --seed 2 -o "$tmp/small.gguf" 2>/dev/null || die "synth failed"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $THREADS threads," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg), REPS $REPS, REPS_RUN $REPS_RUN, clock $CLOCK${SKIP:+, SKIP '$SKIP'}"

# the workloads
python3 - "$tmp" <<'PY'
import json, random, sys
d = sys.argv[1]
r = random.Random(7)
stories = [
 "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big, red ball under a tree. She ran to the ball and picked it up. Her mom smiled and said, \"That is a nice ball, Lily.\"",
 "Tom had a small dog named Max. Max liked to run and jump in the garden. One day, Max found a big bone near the fence. Tom laughed and gave Max a hug. They played together until the sun went down.",
 "There was a happy bird who lived in a tall tree. Every morning the bird sang a song to the sun. One day, a little boy came to the tree and listened. The boy smiled and sang with the bird.",
 "Sam and Mia went to the beach with their dad. They built a big sand castle and looked for shells by the sea. Mia found a pretty pink shell. Sam found a small crab. They were very happy.",
 "Ben wanted to bake a cake for his mom. He took flour, eggs and milk from the kitchen. He mixed them in a big bowl. The cake was yellow and soft. His mom said it was the best cake ever.",
 "A little cat named Kitty lived in a big house. Kitty liked to sleep in the sun by the window. One day, Kitty saw a mouse. The mouse ran away, and Kitty went back to sleep.",
]
words = "the a little girl dog ran over hill sky blue green said and then it was happy sad big small red ball tree bird sun moon star".split()
def dump(name, rows):
    open(f"{d}/{name}.jsonl", "w").write("".join(json.dumps(x) + "\n" for x in rows))
dump("s_edit", [{"prompt": s + "\n\n" + s[:20 + r.randrange(len(s) // 3)], "n": 96, "temperature": 0, "seed": i}
                for i, s in enumerate(stories * 2)])
dump("s_chat", [{"prompt": ["Once upon a time,", "One day,", "There was a", "Tom and", "A little", "Lily"][i % 6],
                 "n": 96, "temperature": [0, 0.8][i % 2], "seed": i} for i in range(12)])
files = [" ".join(r.choice(words) for _ in range(60)) for _ in range(4)]
dump("b_edit", [{"prompt": f + "\nRewrite it:\n" + f[:30], "n": 64, "temperature": 0, "seed": i} for i, f in enumerate(files)])
dump("b_chat", [{"prompt": " ".join(r.choice(words) for _ in range(12)), "n": 64, "temperature": 1.0, "seed": i} for i in range(4)])
b32 = []
for i in range(32):
    f = " ".join(r.choice(words) for _ in range(10))
    b32.append({"prompt": f + "\n" + f[:20], "n": 8 + 2 * i, "temperature": [0, 1.0][i % 2], "seed": i})
dump("b32", b32)
PY

# pair NAME MODEL FILE BATCH SPEC [DRAFT] [K] [ADAPT]: REPS_RUN interleaved runs of spec off and
# SPEC; prints one summary line and keeps every JSON line in $tmp/NAME.json
pair() {
    local name=$1 m=$2 f=$3 batch=$4 sp=$5 draft=${6:-} k=${7:-8} adapt=${8:-1} rep
    if [ -n "$SKIP" ] && [[ $name =~ $SKIP ]]; then return 0; fi
    : >"$tmp/$name.json"
    for rep in $(seq 1 "$REPS_RUN"); do
        $B run "$m" "$THREADS" "$tmp/$f.jsonl" "$batch" off >>"$tmp/$name.json" || die "$name: off failed"
        VERITY_SPEC_ADAPT=$adapt $B run "$m" "$THREADS" "$tmp/$f.jsonl" "$batch" "$sp" "$draft" "$k" \
            >>"$tmp/$name.json" || die "$name: $sp failed"
    done
    python3 - "$tmp/$name.json" "$name" "$batch" <<'PY' || exit 2
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name, batch = sys.argv[2], int(sys.argv[3])
off = [r for r in rows if r["spec"] == "off"]; on = [r for r in rows if r["spec"] != "off"]
if len({r["tokens_hash"] for r in rows}) != 1:
    print(f"bench/spec.sh: {name}: the tokens differ between runs", file=sys.stderr); sys.exit(2)
key = "decode_tok_s" if batch == 1 else "run_tok_s"
mo, mn = st.median(r[key] for r in off), st.median(r[key] for r in on)
ratios = [b[key] / a[key] for a, b in zip(off, on)]
dr, ac = sum(r["drafted"] for r in on), sum(r["accepted"] for r in on)
tps = st.median(r["tokens_per_step"] for r in on)
print(f"{name}: {'decode' if batch == 1 else 'run'} tok/s off {mo:.2f}, {on[0]['spec']} {mn:.2f} "
      f"(medians); median of the paired ratios {st.median(ratios):.3f} "
      f"({', '.join(f'{x:.2f}' for x in ratios)}); drafted {dr}, accepted {ac} "
      f"({100 * ac / dr if dr else 0:.1f}%) over the runs, {tps:.2f} tokens per decoding step")
PY
    echo "  (load average after it: $(cut -d' ' -f1-3 /proc/loadavg))"
}

if part 1; then
    echo "== 1. verification cost: one sequence at position 256 feeding r rows (median of $REPS)"
    for t in f16 q8_0; do
        m=$F16; [ $t = q8_0 ] && m=$Q8
        $B rows "$m" "$THREADS" "$REPS" >"$tmp/rows_$t.json" || die "rows $t failed"
        echo "$t: $(python3 -c 'import json,sys; print(", ".join("%d: %.1f ms (%.2fx)" % (r["rows"], r["ms"], r["ratio"]) for r in map(json.loads, open(sys.argv[1]))))' "$tmp/rows_$t.json")"
    done
fi

if part 2; then
    echo "== 2. stories260K (real weights): acceptance on real text, and what it would give on the 0.5b"
    for w in s_edit s_chat; do
        for c in "ngram 1 0" "ngram 2 0" "ngram 4 0" "ngram 8 0" "ngram 8 1" "draft 1 0" "draft 2 0" "draft 4 0" "draft 8 0" "draft 8 1"; do
            read -r sp k adapt <<<"$c"
            VERITY_SPEC_ADAPT=$adapt $B run "$STORIES" 1 "$tmp/$w.jsonl" 1 "$sp" "$tmp/stories-q8_0.gguf" "$k" >"$tmp/s.json" ||
                die "$w $sp failed"
            python3 - "$tmp/s.json" "$w" "$k" "$adapt" "$tmp/rows_f16.json" "$tmp/rows_q8_0.json" <<'PY'
import json, os, sys
r = json.loads(open(sys.argv[1]).read())
w, k, adapt = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
def cost(path, rows):  # the step's cost at a mean row count, interpolated in the measured table
    if not os.path.exists(path): return None
    t = [json.loads(l) for l in open(path)]
    for a, b in zip(t, t[1:]):
        if a["rows"] <= rows <= b["rows"]:
            return a["ratio"] + (b["ratio"] - a["ratio"]) * (rows - a["rows"]) / (b["rows"] - a["rows"])
    return None
rows = 1 + r["drafted"] / r["decode_steps"]
tps = r["tokens_per_step"]
acc = r["accepted"] / r["drafted"] if r["drafted"] else 0
proj = ""
if not adapt:
    p = [(n, cost(f, rows)) for n, f in (("F16", sys.argv[5]), ("Q8_0", sys.argv[6]))]
    proj = "; on the 0.5b: " + ", ".join(f"{n} {tps / c:.2f}x" for n, c in p if c)
    if r["spec"] == "draft":
        proj += " (the draft model's own time left out)"
print(f"{w} {r['spec']} {'adaptive (k <= ' + k + ')' if adapt else 'k = ' + k}: drafted {r['drafted']}, "
      f"accepted {r['accepted']} ({100 * acc:.1f}%), {tps:.3f} tokens per decoding step, "
      f"{rows:.2f} rows per step{proj}")
PY
        done
    done
fi

if part 3; then
    echo "== 3. the 0.5b model (random weights) at batch 1 (medians of $REPS_RUN interleaved runs)"
    for t in f16 q8_0; do
        m=$F16; [ $t = q8_0 ] && m=$Q8
        pair "${t}_edit_ngram" "$m" b_edit 1 ngram
        pair "${t}_edit_ngram_k16" "$m" b_edit 1 ngram "" 16
        pair "${t}_chat_ngram" "$m" b_chat 1 ngram
    done
    pair f16_edit_draft "$F16" b_edit 1 draft "$tmp/small.gguf"
    pair f16_edit_draft_fixed4 "$F16" b_edit 1 draft "$tmp/small.gguf" 4 0
fi

if part 4; then
    echo "== 4. the 0.5b model at batch 32 (32 requests at once, medians of $REPS_RUN)"
    for t in f16 q8_0; do
        m=$F16; [ $t = q8_0 ] && m=$Q8
        pair "${t}_b32_ngram" "$m" b32 32 ngram
    done
fi
