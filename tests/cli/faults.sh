# SPDX-License-Identifier: MIT
# The fault-injection build (make faults -> build/faults/verity): each FAULT toggle is listed by
# `verity flags --json` with its environment variable, off by default and absent from the release
# build; each one, switched on by its variable, leaves output identical at batch 1 and corrupts it
# when requests share steps (the property hunt relies on). Fault (a) (the detokenizer) is checked
# through the server.
. "$(dirname "$0")/lib.bash"

FB=${VERITY_FAULTS_BIN:-$(dirname "$0")/../../build/faults/verity}
if [ ! -x "$FB" ]; then skip faults "no fault build at $FB (make faults)"; exit 0; fi
case "$VERITY" in *"/build/release/"*) ;; *) skip faults "runs once, with the release suite"; exit 0 ;; esac

j=$("$FB" flags --json)
missing=""
for f in fault-detok-shared fault-attn-offsets fault-kv-reuse fault-big-batch fault-table-race fault-tier-reload; do
    env=VERITY_$(echo "${f}" | tr 'a-z-' 'A-Z_')
    grep -q "\"name\":\"$f\",\"env\":\"$env\",\"kind\":\"bool\",\"default\":\"0\",\"value\":\"0\"" <<<"$j" || missing="$missing $f"
done
[ -z "$missing" ] && pass faults.listed_off_by_default || fail faults.listed_off_by_default "missing or not off:$missing"
"$VERITY" flags --json | grep -q fault- && fail faults.absent_from_release "release build lists fault toggles" || pass faults.absent_from_release

"$FB" synth --shape tiny --type q8_0 --seed 11 -o "$TMP/m.gguf" 2>/dev/null
awk -v n=64 'BEGIN { srand(1234); split("the a little girl dog ran over hill sky blue green said and then it was happy sad big small red ball tree", w, " ");
    for (i = 0; i < n; i++) { len = 1 + int(rand() * 60); p = "";
        for (j = 0; j < len; j++) p = p (j ? " " : "") w[1 + int(rand() * 24)];
        printf("{\"prompt\":\"%s\",\"n\":%d,\"seed\":%d,\"temperature\":0}\n", p, 4 + int(rand() * 30), i) } }' >"$TMP/p.jsonl"
gen() { "$FB" generate -m "$TMP/m.gguf" --prompts "$TMP/p.jsonl" --logits-digest "$@" 2>/dev/null; }
gen --max-batch 1 >"$TMP/gold"
gen --max-batch 16 >"$TMP/clean"
cmp -s "$TMP/gold" "$TMP/clean" && pass faults.off_is_invariant || fail faults.off_is_invariant "the fault build without faults is not batch-invariant"
# FAULT ... batched options
while read -r f opts; do
    VAR=VERITY_FAULT_$f
    env "$VAR=1" "$FB" generate -m "$TMP/m.gguf" --prompts "$TMP/p.jsonl" --logits-digest --max-batch 1 >"$TMP/b1" 2>/dev/null
    env "$VAR=1" "$FB" generate -m "$TMP/m.gguf" --prompts "$TMP/p.jsonl" --logits-digest $opts >"$TMP/bn" 2>/dev/null
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

# fault (a): the per-request detokenization test must fail with it and pass without it
if command -v node >/dev/null; then
    VERITY_SAVE=$VERITY; VERITY=$FB
    for on in 0 1; do
        if VERITY_FAULT_DETOK_SHARED=$on start_server faults.detok_server -m "$TMP/m.gguf"; then
            r=$(VERITY_URL=$SRV_URL node "$(dirname "$0")/../node/detok.mjs")
            stop_server
            if [ $on = 0 ]; then [[ "$r" == PASS* ]] && pass faults.DETOK_SHARED_off || fail faults.DETOK_SHARED_off "$r"
            # detected means a detokenization difference ("seed N: ..."), not a failed request
            else [[ "$r" == "FAIL serve.detok_per_request: seed "* ]] && pass faults.DETOK_SHARED_detected || fail faults.DETOK_SHARED_detected "not detected: $r"; fi
        fi
    done
    VERITY=$VERITY_SAVE
else
    fail faults.DETOK_SHARED "node not found (a required dependency; scripts/setup.sh installs it)"
fi
