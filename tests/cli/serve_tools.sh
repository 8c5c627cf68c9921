# SPDX-License-Identifier: MIT
# Constrained decoding end to end: a synthetic tiny model (random weights; its built-in chat
# template lists tools and uses the Hermes syntax) behind `verity serve`, and requests with
# tool_choice "required" / a named function (non-streaming, streaming, n > 1, a max_tokens barely
# above the shortest call), response_format json_schema / json_object, and tool_choice "auto"
# with a JSON response_format (content or a call). Every choice must end
# with finish_reason "tool_calls" (or "stop" for JSON) and output valid under the request's
# schemas, checked by `test_grammar_engine --check-response` (the schema validator of
# tests/test_grammar_util.h). Also: a schema keyword outside the subset is a 400 naming it, and a
# constrained request's bytes do not change when other requests run beside it (P1).
. "$(dirname "$0")/lib.bash"

CHECK="${VERITY_BUILD:-$(dirname "$VERITY")}/tests/test_grammar_engine"
if ! command -v curl >/dev/null 2>&1; then skip serve_tools "curl not found"; exit 0; fi
if [ ! -x "$CHECK" ]; then skip serve_tools "$CHECK not built (make tests)"; exit 0; fi

SRV_PID=
cleanup() {
    if [ -n "$SRV_PID" ] && kill -0 "$SRV_PID" 2>/dev/null; then stop_server; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

model="$TMP/tiny.gguf"
if ! "$VERITY" synth --shape tiny --seed 5 -o "$model" 2>"$TMP/err"; then
    fail serve_tools "synth failed: $(cat "$TMP/err")"; exit 0
fi
start_server serve_tools -m "$model" --admin-api 1 || exit 0
port=$SRV_PORT

# post NAME ROUTE BODY: writes $TMP/NAME.req and $TMP/NAME.out, prints the HTTP status
post() {
    printf '%s' "$3" >"$TMP/$1.req"
    curl -s -o "$TMP/$1.out" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary @"$TMP/$1.req" "http://127.0.0.1:$port$2"
}

# expect_valid NAME ROUTE BODY MODE [FUNCTION]: 200 and the checker agrees
expect_valid() {
    local name=$1 route=$2 body=$3 mode=$4 fn=${5:-}
    local code why
    code=$(post "$name" "$route" "$body")
    if [ "$code" != 200 ]; then fail "serve_tools.$name" "HTTP $code: $(head -c 300 "$TMP/$name.out")"; return; fi
    if why=$("$CHECK" --check-response "$TMP/$name.out" "$TMP/$name.req" "$mode" $fn); then
        pass "serve_tools.$name"
    else
        fail "serve_tools.$name" "$why"
    fi
}

TOOLS='[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":40},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]}}},{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1,"maximum":50},"filters":{"type":"array","items":{"type":"string","enum":["news","images","video"]},"maxItems":3}},"required":["query"]}}}]'
MSG='[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the weather like in Zürich today?"}]'

expect_valid required /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"seed\":1}" tools
expect_valid required_stream /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"seed\":2,\"stream\":true}" tools
expect_valid named_n3 /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"search\"}},\"n\":3,\"seed\":3}" tools search
expect_valid named_stream_greedy /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"temperature\":0,\"stream\":true}" tools get_weather
# the shortest get_weather call is 73 bytes; the completion budget must make 80 tokens enough
expect_valid tight_max_tokens /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"max_tokens\":80,\"n\":4,\"seed\":4}" tools get_weather
expect_valid json_schema /v1/chat/completions \
    "{\"messages\":$MSG,\"seed\":5,\"n\":2,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"w\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"temp\":{\"type\":\"number\",\"minimum\":-50,\"maximum\":50},\"sky\":{\"enum\":[\"clear\",\"cloudy\",\"rain\"]},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":20}},\"required\":[\"temp\",\"sky\",\"note\"],\"additionalProperties\":false}}}}" json
expect_valid auto_json_or_call /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":\"auto\",\"n\":6,\"seed\":7,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"string\",\"maxLength\":30}},\"required\":[\"answer\"]}}}}" either
expect_valid json_object_completions /v1/completions \
    "{\"prompt\":\"The weather as JSON:\",\"max_tokens\":400,\"seed\":6,\"response_format\":{\"type\":\"json_object\"}}" json

# a keyword outside the subset: 400 naming it and where it is
code=$(post refused /v1/chat/completions \
    "{\"messages\":$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[0-9]+$\"}}}}}],\"tool_choice\":\"required\"}")
if [ "$code" = 400 ] && grep -q 'tools\[0\].function.parameters.properties.id: keyword \\"pattern\\"' "$TMP/refused.out"; then
    pass serve_tools.refused_keyword
else
    fail serve_tools.refused_keyword "HTTP $code: $(head -c 300 "$TMP/refused.out")"
fi

# P1: the same constrained request alone and beside four others gives the same choices. The
# engine is held until all five requests (six choices beside the others' four) wait, so they
# are scheduled together; the batch-size histogram must show steps with more than one sequence.
body="{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"seed\":9,\"n\":2}"
post alone /v1/chat/completions "$body" >/dev/null
h0=$(batch_hist)
admin pause >/dev/null
others=()
for i in 1 2 3 4; do
    other="{\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":\"auto\",\"seed\":$i,\"max_tokens\":$((200 * i))}"
    [ "$i" -ge 3 ] && other="{\"messages\":$MSG,\"seed\":$i,\"response_format\":{\"type\":\"json_object\"}}"
    post "other$i" /v1/chat/completions "$other" >/dev/null &
    others+=($!)
done
post beside /v1/chat/completions "$body" >/dev/null &
others+=($!)
held=1
wait_metric verity_requests_waiting -eq 6 || held=""
admin resume >/dev/null
wait "${others[@]}" 2>/dev/null
h1=$(batch_hist)
multi=$(( $(cut -d' ' -f2 <<<"$h1") - $(cut -d' ' -f2 <<<"$h0") ))
a=$(sed 's/.*"choices"://' "$TMP/alone.out")
b=$(sed 's/.*"choices"://' "$TMP/beside.out")
if [ -z "$held" ]; then
    fail serve_tools.invariance "the six choices never waited together: $(metric verity_requests_waiting) waiting"
elif [ "$multi" -le 0 ]; then
    fail serve_tools.invariance "no step ran more than one sequence: the requests did not overlap"
elif [ -n "$a" ] && [ "$a" = "$b" ] && grep -q tool_calls "$TMP/alone.out"; then
    pass "serve_tools.invariance($multi steps with more than one sequence)"
else
    fail serve_tools.invariance "choices differ: $(head -c 200 "$TMP/alone.out") vs $(head -c 200 "$TMP/beside.out")"
fi
