# SPDX-License-Identifier: MIT
# Speculative decoding changes no byte, through HTTP and the command line.
#
# P1: 64 requests that hold text to copy (p1.mjs's "spec" workload: greedy and seeded sampling at
# temperature 0.7 and 1.0, tool calls and json_schema response formats, stop strings, n > 1,
# logprobs) give byte-identical responses on a reference server (--spec off, one sequence per
# step, each request alone) and on servers with --spec off, ngram and draft, each alone and with
# all 64 held and released together (48 and more sequences at once), every other one streamed.
# The draft model is the target's unquantized twin (the same synthetic weights in F32 beside the
# target's Q8_0): it shares the vocabulary and guesses right often, not always. The speculative
# servers feed guesses in every step, even in full batches (--spec-adapt 0 --spec-rows 512), and
# once more each with the defaults (the adaptive controller; a full batch backs off); the first
# ones' metrics must show guesses drafted, accepted and refused, and /v1/flags the toggles. The same through `verity generate --prompts`, logits
# digests included.
# Bad input: a draft model with another vocabulary, and --spec mtp on a model without MTP layers,
# exit 2 with one line naming why. With the fault build (make faults), FAULT (i)
# (fault-spec-accept, a guess kept without comparing) leaves output alone at batch 1 and corrupts
# it batched: the P1 comparison here would catch such a bug.
. "$(dirname "$0")/lib.bash"

MODEL="$TMP/tiny.gguf"
DRAFT="$TMP/draft.gguf"
OTHER="$TMP/other.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null &&
    "$VERITY" synth --shape tiny --type f32 --seed 5 -o "$DRAFT" 2>/dev/null &&
    "$VERITY" synth --shape tiny --type f32 --seed 5 --vocab-from "$(dirname "$0")/../../models/stories260K.gguf" \
        -o "$OTHER" 2>/dev/null || { fail spec.synth "synth failed"; exit 0; }
nodedir="$(dirname "$0")/../node"
if ! command -v node >/dev/null; then fail spec.node "node not found (scripts/setup.sh installs nodejs)"; exit 0; fi

# p1 NAME MODE [HOLD]: the spec workload against $SRV_URL into $TMP/p1.NAME
p1() {
    VERITY_P1_WORKLOAD=spec VERITY_P1_HOLD=${3:-0} VERITY_URL=$SRV_URL run_node "$1" -o "$TMP/p1.$1" "$nodedir/p1.mjs" "$2"
}
# same NAME [NOTE]: passes if $TMP/p1.NAME equals the reference byte for byte
same() {
    if cmp -s "$TMP/p1.ref" "$TMP/p1.$1"; then pass "$1${2:+($2)}"
    else fail "$1" "responses differ from the reference: $(diff "$TMP/p1.ref" "$TMP/p1.$1" | head -c 600)"; fi
}
m() { metric "$1"; }

if start_server spec.reference -m "$MODEL" --spec off --max-batch 1 -t 1; then
    p1 spec.record record
    if [ "$(grep -c '' "$TMP/p1.spec.record")" -eq 64 ] && ! grep -q '^{"i":[0-9]*,"error"' "$TMP/p1.spec.record"; then
        cp "$TMP/p1.spec.record" "$TMP/p1.ref"
        calls=$(grep -c '"finish_reason":"tool_calls"' "$TMP/p1.ref")
        [ "$calls" -gt 0 ] && pass "spec.reference_has_tool_calls($calls)" || fail spec.reference_has_tool_calls "no tool call in the workload's answers"
    else
        fail spec.record "the reference run is incomplete: $(grep -m1 '"error"' "$TMP/p1.spec.record" | head -c 300)"
    fi
    stop_server
fi
[ -s "$TMP/p1.ref" ] || exit 0

# spec_run NAME ARGS...: a server with ARGS; the workload alone, then held and released together
spec_run() {
    local name=$1; shift
    start_server "spec.$name" -m "$MODEL" --admin-api 1 --max-batch 64 --chunk 16 -t 2 "$@" || return 1
    p1 "spec.${name}_alone" record
    same "spec.${name}_alone"
    h0=$(batch_hist)
    p1 "spec.${name}_batched" replay 1
    h1=$(batch_hist)
    read -r _ _ b0 <<<"$h0"; read -r _ _ b1 <<<"$h1"
    if [ $((b1 - b0)) -le 0 ]; then fail "spec.${name}_batched" "no step ran more than eight sequences"
    else same "spec.${name}_batched" "$((b1 - b0)) steps of more than eight sequences"; fi
    DRAFTED=$(m verity_spec_drafted_tokens_total) ACCEPTED=$(m verity_spec_accepted_tokens_total)
    return 0
}

if spec_run off --spec off; then
    [ "$DRAFTED" = 0 ] && [ "$ACCEPTED" = 0 ] && pass spec.off_drafts_nothing || fail spec.off_drafts_nothing "drafted $DRAFTED, accepted $ACCEPTED"
    stop_server
fi
for mode in ngram draft; do
    extra=()
    [ $mode = draft ] && extra=(--draft-model "$DRAFT")
    if spec_run $mode --spec $mode --spec-rows 512 --spec-adapt 0 "${extra[@]}"; then
        if [ "${DRAFTED:-0}" -gt 0 ] && [ "${ACCEPTED:-0}" -gt 0 ] && [ "$ACCEPTED" -lt "$DRAFTED" ]; then
            pass "spec.${mode}_metrics($ACCEPTED of $DRAFTED guesses accepted)"
        else fail "spec.${mode}_metrics" "drafted ${DRAFTED:-none}, accepted ${ACCEPTED:-none}"; fi
        # the histograms agree with the counters
        curl -s "$SRV_URL/metrics" >"$TMP/metrics.txt"
        hs=$(awk '$1 == "verity_spec_acceptance_length_sum" { print $2 }' "$TMP/metrics.txt")
        hc=$(awk '$1 == "verity_spec_tokens_per_step_bucket{le=\"+Inf\"}" { print $2 }' "$TMP/metrics.txt")
        [ "$hs" = "$ACCEPTED" ] && [ "${hc:-0}" -gt 0 ] && pass "spec.${mode}_histograms" ||
            fail "spec.${mode}_histograms" "acceptance sum $hs (accepted $ACCEPTED), tokens-per-step count $hc"
        c=$(http_code GET /v1/flags)
        if [ "$c" = 200 ] && grep -q '"name":"spec"' "$TMP/body" && grep -q "\"value\":\"$mode\"" "$TMP/body" &&
            grep -q '"name":"spec-k"' "$TMP/body" && grep -q '"name":"draft-model"' "$TMP/body"; then
            pass "spec.${mode}_flags_listed"
        else fail "spec.${mode}_flags_listed" "HTTP $c: $(head -c 300 "$TMP/body")"; fi
        stop_server
    fi
done
# the defaults (--spec-rows 16: with 48 and more sequences decoding, a step drafts nothing; the
# adaptive controller: how many guesses depends on the measured cost and acceptance, and on the
# clock)
for mode in ngram draft; do
    extra=()
    [ $mode = draft ] && extra=(--draft-model "$DRAFT")
    if spec_run ${mode}_defaults --spec $mode "${extra[@]}"; then
        pass "spec.${mode}_defaults_drafted(${DRAFTED:-0} guesses, ${ACCEPTED:-0} accepted)"
        stop_server
    fi
done

# the command line: 64 prompts through one engine, tokens and logits digests
awk -v n=64 'BEGIN { srand(4321); split("the a little girl dog ran over hill sky blue green said and then it was happy sad big small red ball tree", w, " ");
    for (i = 0; i < n; i++) { len = 4 + int(rand() * 30); p = "";
        for (j = 0; j < len; j++) p = p (j ? " " : "") w[1 + int(rand() * 24)];
        printf("{\"prompt\":\"%s %s\",\"n\":%d,\"seed\":%d,\"temperature\":%s}\n", p, p, 8 + int(rand() * 40), i, (i % 3 == 0) ? "0" : (i % 3 == 1) ? "0.7" : "1.0") } }' >"$TMP/p.jsonl"
gen() { # OUT ARGS...
    local out=$1; shift
    "$VERITY" generate -m "$MODEL" --prompts "$TMP/p.jsonl" --logits-digest "$@" >"$out" 2>"$out.err" &&
        [ "$(grep -c '"logits_digest"' "$out")" -eq 64 ]
}
if gen "$TMP/g.ref" --max-batch 1; then
    for c in "ngram:--spec ngram --max-batch 16 --spec-rows 256 --spec-adapt 0" \
        "draft:--spec draft --draft-model $DRAFT --max-batch 16 --spec-rows 256 --spec-adapt 0" \
        "ngram_alone:--spec ngram --max-batch 1 --spec-adapt 0" "ngram_adaptive:--spec ngram --max-batch 16"; do
        name=${c%%:*}
        # shellcheck disable=SC2086
        if ! gen "$TMP/g.$name" ${c#*:}; then fail "spec.generate_$name" "generate failed: $(tail -n 1 "$TMP/g.$name.err")"
        elif ! cmp -s "$TMP/g.ref" "$TMP/g.$name"; then fail "spec.generate_$name" "output differs: $(diff "$TMP/g.ref" "$TMP/g.$name" | head -c 300)"
        else pass "spec.generate_$name($(grep -o 'spec [a-z]*: .*' "$TMP/g.$name.err"))"; fi
    done
else
    fail spec.generate "the reference generate run failed: $(tail -n 1 "$TMP/g.ref.err")"
fi

# bad input: one line, exit 2, naming why
err=$("$VERITY" generate -m "$MODEL" --spec draft --draft-model "$OTHER" -p hi -n 2 2>&1 >/dev/null); rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '' <<<"$err")" -eq 1 ] && grep -q "differs from the target's at token [0-9]*: '" <<<"$err"; then
    pass spec.draft_other_vocabulary_refused
else fail spec.draft_other_vocabulary_refused "exit $rc: $err"; fi
err=$("$VERITY" generate -m "$MODEL" --spec mtp -p hi -n 2 2>&1 >/dev/null); rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '' <<<"$err")" -eq 1 ] && grep -q 'no multi-token-prediction layers' <<<"$err"; then
    pass spec.mtp_without_layers_refused
else fail spec.mtp_without_layers_refused "exit $rc: $err"; fi
expect_exit2 spec.draft_without_model_refused "$VERITY" serve -m "$MODEL" --port 0 --spec draft
"$VERITY" serve -m "$MODEL" --port 0 --spec draft --draft-model "$OTHER" >/dev/null 2>"$TMP/serve.err"; rc=$?
if [ $rc -eq 2 ] && tail -n 1 "$TMP/serve.err" | grep -q "differs from the target's at token" && ! grep -q listening "$TMP/serve.err"; then
    pass spec.serve_other_vocabulary_refused
else fail spec.serve_other_vocabulary_refused "exit $rc: $(tail -c 300 "$TMP/serve.err")"; fi

# FAULT (i): a guess kept without comparing corrupts batched output, not output alone
FB=${VERITY_FAULTS_BIN:-$(dirname "$0")/../../build/faults/verity}
case "$VERITY" in
*"/build/release/"*)
    if [ ! -x "$FB" ]; then skip spec.fault "no fault build at $FB (make faults)"
    else
        "$FB" generate -m "$MODEL" --prompts "$TMP/p.jsonl" --spec ngram --spec-rows 256 --spec-adapt 0 --max-batch 1 >"$TMP/f1" 2>/dev/null
        VERITY_FAULT_SPEC_ACCEPT=1 "$FB" generate -m "$MODEL" --prompts "$TMP/p.jsonl" --spec ngram --spec-rows 256 --spec-adapt 0 --max-batch 1 >"$TMP/f1x" 2>/dev/null
        VERITY_FAULT_SPEC_ACCEPT=1 "$FB" generate -m "$MODEL" --prompts "$TMP/p.jsonl" --spec ngram --spec-rows 256 --spec-adapt 0 --max-batch 16 >"$TMP/fnx" 2>/dev/null
        d1=$(diff "$TMP/f1" "$TMP/f1x" | grep -c '^<'); dn=$(diff "$TMP/f1" "$TMP/fnx" | grep -c '^<')
        if [ "$(grep -c '' "$TMP/f1")" -eq 64 ] && [ "$d1" -eq 0 ] && [ "$dn" -gt 0 ]; then
            pass "spec.fault_spec_accept($dn of 64 corrupted when batched, 0 alone)"
        else fail spec.fault_spec_accept "alone: $d1 corrupted, batched: $dn"; fi
    fi ;;
*) skip spec.fault "runs with the release suite" ;;
esac
# --spec mtp on a deepseek4 with one MTP layer: the 64 prompts give the same bytes (tokens and
# logits digests) as --spec off, drafting every step (spec-adapt 0, 4 guesses) at batch 1 and 16
if "$VERITY" synth --shape tiny --arch deepseek4 --type q8_0 --seed 2 --nextn 1 -o "$TMP/ds4-mtp.gguf" 2>"$TMP/err"; then
    awk -v n=64 'BEGIN { srand(77); split("the a little girl dog ran over hill sky blue green said and then it was happy sad big small red ball tree", w, " ");
        for (i = 0; i < n; i++) { len = 1 + int(rand() * 40); p = "";
            for (j = 0; j < len; j++) p = p (j ? " " : "") w[1 + int(rand() * 24)];
            printf("{\"prompt\":\"%s\",\"n\":%d,\"seed\":%d,\"temperature\":%s}\n", p, 4 + int(rand() * 16), i, (i % 2) ? 0.8 : 0) } }' >"$TMP/mtp.jsonl"
    "$VERITY" generate -m "$TMP/ds4-mtp.gguf" --prompts "$TMP/mtp.jsonl" --max-batch 16 --logits-digest >"$TMP/mtp-off" 2>"$TMP/err"
    bad=""
    for b in 1 16; do
        "$VERITY" generate -m "$TMP/ds4-mtp.gguf" --prompts "$TMP/mtp.jsonl" --max-batch $b -t 2 --spec mtp --spec-adapt 0 --spec-k 4 --logits-digest >"$TMP/mtp-on" 2>"$TMP/err-on"
        drafted=$(sed -n 's/.*spec mtp: \([0-9]*\) drafted.*/\1/p' "$TMP/err-on")
        cmp -s "$TMP/mtp-off" "$TMP/mtp-on" || bad="$bad batch=$b"
        [ "${drafted:-0}" -gt 0 ] || bad="$bad batch=$b(nothing drafted: $(tail -c 200 "$TMP/err-on"))"
    done
    [ "$(grep -c '' "$TMP/mtp-off")" -eq 64 ] || bad="$bad (reference run failed)"
    if [ -z "$bad" ]; then pass "spec.mtp_deepseek4_same_bytes($drafted drafted at batch 16)"
    else fail spec.mtp_deepseek4_same_bytes "differs or failed:$bad"; fi
else
    fail spec.mtp_deepseek4_same_bytes "synth failed: $(cat "$TMP/err")"
fi
