# SPDX-License-Identifier: MIT
# verity serve's front door under requests built to cost more than they should, over real HTTP on
# loopback: stop strings beyond the byte cap (400 naming "stop"), a chat of 3,000 short messages
# (200: the request's memory is linear in its size), usage with n > 1 (each prompt counted once,
# in the response and in verity_prompt_tokens_total), a streamed request larger than the KV pool
# (a context_length_exceeded error, not a tool-call one), tool names with a NUL (400 naming the
# field), streamed echo (the prompt is each choice's first text) and HEAD on the GET routes.
# Every case builds its state directly and waits for nothing but the answer.
. "$(dirname "$0")/lib.bash"

if ! command -v python3 >/dev/null; then skip front_door "python3 not found"; exit 0; fi
MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail front_door.synth "synth failed"; exit 0; }
# a template that renders only the last message: 3,000 messages make a short prompt, so the test
# measures the request's handling, not the context
printf '%s' "{% for m in messages %}{% if loop.last %}{{ m['content'] }}{% endif %}{% endfor %}" >"$TMP/last.jinja"

# check NAME WANT_STATUS SUBSTRING...: the last http_code's status and body
check() {
    local n=$1 want=$2 got=$3; shift 3
    local sub
    if [ "$got" != "$want" ]; then fail "front_door.$n" "status $got, expected $want: $(head -c 300 "$TMP/body")"; return; fi
    for sub in "$@"; do
        if ! grep -q -- "$sub" "$TMP/body"; then fail "front_door.$n" "body lacks '$sub': $(head -c 300 "$TMP/body")"; return; fi
    done
    pass "front_door.$n"
}

if start_server front_door.start -m "$MODEL" --chat-template "$TMP/last.jinja"; then
    # stop strings: 4 of 1,100 bytes are over the 4,096-byte total; 4 of 1,000 are fine
    s1100=$(head -c 1100 /dev/zero | tr '\0' 'q') s1000=$(head -c 1000 /dev/zero | tr '\0' 'q')
    c=$(http_code POST /v1/completions "{\"prompt\":\"x\",\"max_tokens\":2,\"stop\":[\"$s1100\",\"$s1100\",\"$s1100\",\"$s1100\"]}")
    check stop_over_total 400 "$c" '"param":"stop"' '4096' '"error":{"message":'
    c=$(http_code POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"stop\":\"$(head -c 5000 /dev/zero | tr '\0' 'q')\"}")
    check stop_one_over_total 400 "$c" '"param":"stop"' '4096'
    c=$(http_code POST /v1/completions "{\"prompt\":\"x\",\"max_tokens\":2,\"stop\":[\"$s1000\",\"$s1000\",\"$s1000\",\"$s1000\"]}")
    check stop_within_total 200 "$c" '"finish_reason":"length"'

    # 3,000 short messages: each is copied once (the copy grows geometrically), so the request
    # stays far inside its arena (a copy per push ran out of memory at 2,800)
    python3 -c '
import json, sys
m = [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(3000)]
m[-1]["role"] = "user"
json.dump({"messages": m, "max_tokens": 2}, sys.stdout)' >"$TMP/m3000.json"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' -H 'content-type: application/json' --data-binary @"$TMP/m3000.json" "$SRV_URL/v1/chat/completions")
    check chat_3000_messages 200 "$c" '"object":"chat.completion"'

    # usage with n = 3: prompt_tokens is the prompt's size (as with n = 1), completion_tokens
    # sums the choices, and verity_prompt_tokens_total grows by the prompt once
    body='{"prompt":"Once upon a time there was","max_tokens":3,"ignore_eos":true,"n":NUM}'
    http_code POST /v1/completions "${body/NUM/1}" >/dev/null
    p1=$(grep -o '"prompt_tokens":[0-9]*' "$TMP/body" | cut -d: -f2)
    m0=$(metric verity_prompt_tokens_total)
    c=$(http_code POST /v1/completions "${body/NUM/3}")
    p3=$(grep -o '"prompt_tokens":[0-9]*' "$TMP/body" | cut -d: -f2)
    k3=$(grep -o '"completion_tokens":[0-9]*' "$TMP/body" | cut -d: -f2)
    ca3=$(grep -o '"cached_tokens":[0-9]*' "$TMP/body" | cut -d: -f2)
    m1=$(metric verity_prompt_tokens_total)
    if [ "$c" != 200 ] || [ -z "$p1" ]; then fail front_door.usage_n3 "status $c: $(head -c 300 "$TMP/body")"
    elif [ "$p3" != "$p1" ] || [ "$k3" != 9 ]; then fail front_door.usage_n3 "n=3: prompt_tokens $p3 completion_tokens $k3; n=1: prompt_tokens $p1 (want $p1 and 9)"
    elif [ "${ca3:-x}" -ge "$p1" ]; then fail front_door.usage_n3 "n=3: cached_tokens $ca3 is not below the prompt's $p1 tokens (counted per choice)"
    elif [ "$(( ${m1%.*} - ${m0%.*} ))" != "$p1" ]; then fail front_door.usage_n3 "verity_prompt_tokens_total grew by $(( ${m1%.*} - ${m0%.*} )), want $p1"
    else pass front_door.usage_n3; fi

    # streamed echo: each choice's streamed text is the whole response's text (prompt first)
    body='{"prompt":"Once upon a time","max_tokens":4,"ignore_eos":true,"n":2,"echo":true,"seed":3STREAM}'
    http_code POST /v1/completions "${body/STREAM/}" >/dev/null; cp "$TMP/body" "$TMP/echo.whole"
    curl -sN -H 'content-type: application/json' -d "${body/STREAM/,\"stream\":true}" "$SRV_URL/v1/completions" >"$TMP/echo.sse"
    why=$(python3 - "$TMP/echo.whole" "$TMP/echo.sse" <<'EOF'
import json, sys
whole = json.load(open(sys.argv[1]))
texts, first = {}, {}
for line in open(sys.argv[2]):
    if not line.startswith("data: {"):
        continue
    for ch in json.loads(line[6:])["choices"]:
        if ch["text"]:
            first.setdefault(ch["index"], ch["text"])
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
for ch in whole["choices"]:
    i, t = ch["index"], ch["text"]
    if texts.get(i) != t:
        print("choice %d streamed %r, the whole response has %r" % (i, texts.get(i), t)); break
    if not first[i].endswith("Once upon a time"):
        print("choice %d's first streamed text is %r, not the prompt" % (i, first[i])); break
EOF
)
    [ -z "$why" ] && [ -s "$TMP/echo.sse" ] && pass front_door.stream_echo || fail front_door.stream_echo "${why:-no stream}"

    # HEAD is GET without a body
    for r in /health /v1/models; do
        c=$(curl -s -I -o "$TMP/head" -w '%{http_code}' "$SRV_URL$r")
        b=$(curl -s --head -w '%{size_download}' -o /dev/null "$SRV_URL$r")
        [ "$c" = 200 ] && [ "$b" = 0 ] && grep -qi '^content-type: application/json' "$TMP/head" && pass "front_door.head$r" || fail "front_door.head$r" "status $c, $b body bytes: $(head -c 200 "$TMP/head")"
    done
    [ "$(http_code GET /health)" = 200 ] && pass front_door.keeps_serving || fail front_door.keeps_serving "health failed"
    stop_server
fi

# tool names with a NUL can never be called: refused before generating (with the model's own
# template, which has a tool-call syntax, so a forced call would otherwise run)
if start_server front_door.tools_start -m "$MODEL"; then
    # tool names with a NUL can never be called: refused before generating
    tools='[{"type":"function","function":{"name":"a\u0000b"}}]'
    c=$(http_code POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$tools,\"tool_choice\":\"required\",\"max_tokens\":50}")
    check tool_name_nul 400 "$c" '"param":"tools"' 'tools\[0\].function.name'
    c=$(http_code POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"a\u0000b\"}},\"max_tokens\":5}")
    check tool_choice_name_nul 400 "$c" '"param":"tool_choice"' 'function.name'

    stop_server
fi

# a streamed request larger than the whole KV pool (2 blocks): the stream ends with the capacity
# error it is, and the whole response is the same 400
if start_server front_door.kv_start -m "$MODEL" --kv-blocks 2 --max-batch 1; then
    curl -sN -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":1000,"stream":true}' "$SRV_URL/v1/completions" >"$TMP/kv.sse"
    if grep -q '"finish_reason":"error","error":{"type":"invalid_request_error","code":"context_length_exceeded","param":"max_tokens","message":"the request does not fit the server' "$TMP/kv.sse" && ! grep -q tool_call "$TMP/kv.sse"; then
        pass front_door.stream_kv_capacity
    else fail front_door.stream_kv_capacity "$(head -c 400 "$TMP/kv.sse")"; fi
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1000}')
    check whole_kv_capacity 400 "$c" '"code":"context_length_exceeded"' '"param":"max_tokens"' 'KV cache'
    stop_server
fi
