# SPDX-License-Identifier: MIT
# The fault-injection build (make faults -> build/faults/verity): each FAULT toggle is listed by
# `verity flags --json` with its environment variable, off by default and absent from the release
# build; each of (a)-(f), switched on by its variable, leaves output identical at batch 1 and
# corrupts it when requests share steps (the property hunt relies on). The KV hierarchy's (g) and
# (h) are exercised by kv_faults.sh, speculation's (i) by spec.sh. Fault (a) (the detokenizer) is checked
# through the server. Every run is checked (exit status 0, all 64 lines, each well formed) before
# anything is compared with it: two crashed runs must fail, not compare equal.
. "$(dirname "$0")/lib.bash"

FB=${VERITY_FAULTS_BIN:-$(dirname "$0")/../../build/faults/verity}
if [ ! -x "$FB" ]; then skip faults "no fault build at $FB (make faults)"; exit 0; fi
case "$VERITY" in *"/build/release/"*) ;; *) skip faults "runs once, with the release suite"; exit 0 ;; esac

j=$("$FB" flags --json)
rc=$?
missing=""
for f in fault-detok-shared fault-attn-offsets fault-kv-reuse fault-big-batch fault-table-race fault-tier-reload fault-tier-konly fault-spec-accept; do
    env=VERITY_$(echo "${f}" | tr 'a-z-' 'A-Z_')
    grep -q "\"name\":\"$f\",\"env\":\"$env\",\"kind\":\"bool\",\"default\":\"0\",\"value\":\"0\"" <<<"$j" || missing="$missing $f"
done
grep -q '"name":"fault-kv-corrupt","env":"VERITY_FAULT_KV_CORRUPT","kind":"enum","default":"none","value":"none"' <<<"$j" ||
    missing="$missing fault-kv-corrupt"
[ $rc -eq 0 ] && [ -z "$missing" ] && pass faults.listed_off_by_default ||
    fail faults.listed_off_by_default "exit $rc; missing or not off:$missing"
jr=$("$VERITY" flags --json)
rc=$?
if [ $rc -ne 0 ] || ! grep -q '"name":"isa"' <<<"$jr"; then
    fail faults.absent_from_release "release 'flags --json' exited $rc without the toggle list"
elif grep -q '"name":"fault-' <<<"$jr"; then fail faults.absent_from_release "release build lists fault toggles"
else pass faults.absent_from_release; fi

"$FB" synth --shape tiny --type q8_0 --seed 11 -o "$TMP/m.gguf" 2>"$TMP/synth.err" ||
    { fail faults.model "verity synth failed: $(tail -n 2 "$TMP/synth.err")"; exit 0; }
awk -v n=64 'BEGIN { srand(1234); split("the a little girl dog ran over hill sky blue green said and then it was happy sad big small red ball tree", w, " ");
    for (i = 0; i < n; i++) { len = 1 + int(rand() * 60); p = "";
        for (j = 0; j < len; j++) p = p (j ? " " : "") w[1 + int(rand() * 24)];
        printf("{\"prompt\":\"%s\",\"n\":%d,\"seed\":%d,\"temperature\":0}\n", p, 4 + int(rand() * 30), i) } }' >"$TMP/p.jsonl"
# gen NAME OUT [VAR=VALUE ...] -- OPTIONS...: runs the fault build's generate over the 64 prompts
# (with the environment variables given) into OUT and checks the run: exit status 0 and exactly
# 64 lines, line i being prompt i's with a logits digest. A bad run prints FAIL NAME and returns 1.
gen() {
    local name=$1 out=$2; shift 2
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$FB" generate -m "${GEN_MODEL:-$TMP/m.gguf}" --prompts "$TMP/p.jsonl" --logits-digest "$@" \
        >"$out" 2>"$out.err"
    local rc=$? n bad
    n=$(grep -c '' "$out")
    bad=$(awk 'index($0, "{\"index\":" (NR - 1) ",") != 1 || $0 !~ /"logits_digest":"[0-9a-f]+"/ { b++ } END { print b + 0 }' "$out")
    if [ $rc -ne 0 ] || [ "$n" -ne 64 ] || [ "$bad" -ne 0 ]; then
        fail "$name" "generate${envs[*]:+ ${envs[*]}} $* exited $rc with $n of 64 lines ($bad malformed): $(tail -n 1 "$out.err")"
        return 1
    fi
}
gen faults.off_is_invariant "$TMP/gold" -- --max-batch 1 &&
    gen faults.off_is_invariant "$TMP/clean" -- --max-batch 16 || exit 0
cmp -s "$TMP/gold" "$TMP/clean" && pass faults.off_is_invariant || fail faults.off_is_invariant "the fault build without faults is not batch-invariant"
# FAULT ... batched options
while read -r f opts; do
    VAR=VERITY_FAULT_$f
    # shellcheck disable=SC2086
    gen "faults.$f" "$TMP/b1" "$VAR=1" -- --max-batch 1 && gen "faults.$f" "$TMP/bn" "$VAR=1" -- $opts || continue
    d1=$(diff "$TMP/gold" "$TMP/b1" | grep -c '^<'); dn=$(diff "$TMP/gold" "$TMP/bn" | grep -c '^<')
    if [ "$d1" -eq 0 ] && [ "$dn" -gt 0 ]; then pass "faults.$f($dn of 64 corrupted when batched, 0 alone)"
    else fail "faults.$f" "alone: $d1 corrupted, batched ($opts): $dn corrupted"; fi
done <<'LIST'
ATTN_OFFSETS --max-batch 16
KV_REUSE --max-batch 16
BIG_BATCH --max-batch 64
TABLE_RACE --max-batch 16
TIER_RELOAD --max-batch 64 --kv-blocks 60
LIST
# (e) on an architecture whose KV block holds buffers of different sizes (deepseek32: the MLA
# latent and the indexer's keys): the race must still lose exactly the slot the step wrote
if "$FB" synth --shape tiny --arch deepseek32 --type q8_0 --seed 11 -o "$TMP/ds32.gguf" 2>"$TMP/synth.err"; then
    GEN_MODEL=$TMP/ds32.gguf
    if gen faults.TABLE_RACE_deepseek32 "$TMP/dgold" -- --max-batch 1 &&
        gen faults.TABLE_RACE_deepseek32 "$TMP/db1" VERITY_FAULT_TABLE_RACE=1 -- --max-batch 1 &&
        gen faults.TABLE_RACE_deepseek32 "$TMP/dbn" VERITY_FAULT_TABLE_RACE=1 -- --max-batch 16; then
        d1=$(diff "$TMP/dgold" "$TMP/db1" | grep -c '^<'); dn=$(diff "$TMP/dgold" "$TMP/dbn" | grep -c '^<')
        if [ "$d1" -eq 0 ] && [ "$dn" -gt 0 ]; then pass "faults.TABLE_RACE_deepseek32($dn of 64 corrupted when batched, 0 alone)"
        else fail faults.TABLE_RACE_deepseek32 "alone: $d1 corrupted, batched: $dn corrupted"; fi
    fi
    unset GEN_MODEL
else
    fail faults.TABLE_RACE_deepseek32 "verity synth failed: $(tail -n 2 "$TMP/synth.err")"
fi

# fault (a): the per-request detokenization test must fail with it and pass without it; "detected"
# means detok.mjs ran to the end and found the fault's mismatch (not that it could not run, nor its
# "no special token was produced" vacuity failure)
if command -v node >/dev/null; then
    VERITY_SAVE=$VERITY; VERITY=$FB
    for on in 0 1; do
        if VERITY_FAULT_DETOK_SHARED=$on start_server faults.detok_server -m "$TMP/m.gguf"; then
            r=$(VERITY_URL=$SRV_URL node "$(dirname "$0")/../node/detok.mjs" 2>"$TMP/detok.err")
            nrc=$?
            stop_server
            if [ $on = 0 ]; then
                [ $nrc -eq 0 ] && [[ "$r" == "PASS serve.detok_per_request("* ]] && pass faults.DETOK_SHARED_off ||
                    fail faults.DETOK_SHARED_off "node exit $nrc: $r $(tail -n 1 "$TMP/detok.err")"
            else
                # detected: a detokenization difference ("seed N: ..."), not a failed request
                [[ "$r" == "FAIL serve.detok_per_request: seed "* ]] && pass faults.DETOK_SHARED_detected ||
                    fail faults.DETOK_SHARED_detected "not detected (node exit $nrc): $r $(tail -n 1 "$TMP/detok.err")"
            fi
        fi
    done
    VERITY=$VERITY_SAVE
else
    fail faults.DETOK_SHARED "node not found (a required dependency; scripts/setup.sh installs it)"
fi
