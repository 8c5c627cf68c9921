# SPDX-License-Identifier: MIT
# The chat front ends: `verity chat-template` against committed jinja2 renderings, its bad input,
# and `generate --chat` answering exactly what the server's chat endpoint answers.
# node is a required dependency (scripts/setup.sh installs it): without it the node cases FAIL.
. "$(dirname "$0")/lib.bash"

# node's own verdict stands; a missing node, or an exit without a verdict line, is a FAIL
out=$(SHARED="$SHARED" run_node chat_template_cli "$(dirname "$0")/../node/chat_cli.mjs")
printf '%s\n' "$out"
grep -Eq '^(PASS|SKIP|FAIL) chat_template_cli' <<<"$out" || fail chat_template_cli "chat_cli.mjs printed no verdict"
echo '[{"role":"user","content":"x"}]' >"$TMP/m.json"
echo '{"not":"an array"}' >"$TMP/bad.json"
"$VERITY" synth --shape tiny --type f32 --seed 2 -o "$TMP/t.gguf" 2>/dev/null
expect_exit2 chat_template.messages_not_array "$VERITY" chat-template -m "$TMP/t.gguf" --messages "$TMP/bad.json"
expect_exit2 chat_template.missing_file "$VERITY" chat-template -m "$TMP/t.gguf" --messages "$TMP/nope.json"
printf '{%% for x in %%}' >"$TMP/broken.jinja"
expect_exit2 chat_template.broken_template "$VERITY" chat-template -m "$TMP/t.gguf" --messages "$TMP/m.json" --template "$TMP/broken.jinja"
if need_shared chat_template.no_template_in_vocab vocab/ggml-vocab-gpt-2.gguf; then
    expect_exit2 chat_template.no_template_in_vocab "$VERITY" chat-template -m "$SHARED/vocab/ggml-vocab-gpt-2.gguf" --messages "$TMP/m.json"
fi

# generate --chat and the server render and decode the same way
if ! command -v node >/dev/null; then
    fail chat.generate_chat_equals_server "node not found (a required dependency; scripts/setup.sh installs it)"
elif start_server chat.server -m "$TMP/t.gguf"; then
    # seeded sampling (not greedy) so the sampler path is compared too; trailing newlines kept
    a=$("$VERITY" generate -m "$TMP/t.gguf" --chat --system "Be brief." -p "Hello there" -n 12 --temp 0.9 --top-p 1 --min-p 0 --seed 7 2>/dev/null; printf x)
    b=$(curl -s -H 'content-type: application/json' -d '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}],"max_tokens":12,"temperature":0.9,"seed":7}' "$SRV_URL/v1/chat/completions" |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(JSON.parse(s).choices[0].message.content))'; printf x)
    [ ${#a} -gt 4 ] && [ "$a" == "$b" ] && pass chat.generate_chat_equals_server || fail chat.generate_chat_equals_server "$(printf '%q' "$a") vs $(printf '%q' "$b")"
    stop_server
fi
