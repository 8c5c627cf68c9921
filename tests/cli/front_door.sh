# SPDX-License-Identifier: MIT
# verity serve's front door under requests built to cost more than they should, over real HTTP on
# loopback: stop strings beyond the byte cap (400 naming "stop"), a chat of 3,000 short messages
# (200: the request's memory is linear in its size), usage with n > 1 (each prompt counted once,
# in the response and in verity_prompt_tokens_total), a streamed request larger than the KV pool
# (a context_length_exceeded error, not a tool-call one), tool names with a NUL (400 naming the
# field), streamed echo (the prompt is each choice's first text) and HEAD on the GET routes;
# then pre-auth memory (the key checked on the headers: 401 before the body, no 100 Continue, peak
# RSS bounded under a flood of unauthenticated 8 MiB bodies), --max-body (413) and the global
# --max-body-total budget (503), disconnects (noticed while tokens flow, KV freed) and half-closed
# clients (still answered), the drain timeout (cut and queued requests answer 503 or end their
# stream with an error event, never "stop") and exact admission (max-batch + queue-max get in,
# the next is 429, a request that can never fit is 400, --queue-max 0 serves).
# Every case builds its state directly (a held engine, a body held half-sent) and waits for
# nothing but a state or the answer. tests/cli/http_raw.py is the raw-socket client for what curl
# cannot do.
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

RAW="python3 $(dirname "$0")/http_raw.py"
# vmhwm: the server's peak resident set in kB
vmhwm() { awk '/VmHWM/ {print $2}' /proc/"$SRV_PID"/status; }

# pre-auth memory: with --api-key the key is checked on the headers, before a byte of the body is
# read. "Expect: 100-continue" gets the 401 and never a 100; a request that sends only its headers
# (announcing 8 MiB) gets its 401 at once; 60 clients sending 8 MiB bodies at once without a key
# raise the peak RSS by less than 64 MiB (buffered, they would add 480 MiB).
if ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4 start_server front_door.preauth_start -m "$MODEL" --api-key s3cret; then
    out=$($RAW head "$SRV_PORT" $((8 << 20)) expect)
    case $out in "status=401 interim100=no "*authentication_error*) pass front_door.preauth_expect_401_not_100 ;;
        *) fail front_door.preauth_expect_401_not_100 "$(head -c 300 <<<"$out")" ;; esac
    out=$($RAW head "$SRV_PORT" $((8 << 20)) headers)
    case $out in "status=401 "*authentication_error*) pass front_door.preauth_401_before_body ;;
        *) fail front_door.preauth_401_before_body "$(head -c 300 <<<"$out")" ;; esac
    h0=$(vmhwm)
    out=$($RAW flood "$SRV_PORT" 60 $((8 << 20)))
    h1=$(vmhwm)
    if [ "$(http_code GET /health)" != 200 ]; then fail front_door.preauth_rss_bounded "the server stopped answering"
    elif [ $((h1 - h0)) -lt 65536 ]; then pass "front_door.preauth_rss_bounded(peak RSS ${h0} -> ${h1} kB over 60 unauthenticated 8 MiB bodies; $out)"
    else fail front_door.preauth_rss_bounded "peak RSS ${h0} -> ${h1} kB over 60 unauthenticated 8 MiB bodies ($out)"; fi
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer s3cret')
    check preauth_key_still_works 200 "$c" '"finish_reason"'
    stop_server
fi

# body limits: --max-body 1 (MiB) and --max-body-total 1 (MiB). A declared body over --max-body is
# refused on its headers (413 naming the flag), a chunked one once it passes the limit. The
# budget: one client announces 1 MiB and sends part of it, holding the whole budget (the gauge
# says so); a second request is then refused with 503, Retry-After and the flag's name; once the
# first body is complete (and answered), the budget is free again and the second one succeeds.
if start_server front_door.limits_start -m "$MODEL" --max-body 1 --max-body-total 1; then
    out=$($RAW head "$SRV_PORT" $(((1 << 20) + 1)) headers)
    case $out in "status=413 "*--max-body*) pass front_door.max_body_declared_413 ;;
        *) fail front_door.max_body_declared_413 "$(head -c 300 <<<"$out")" ;; esac
    head -c $((2 << 20)) /dev/zero | tr '\0' 'a' >"$TMP/2m"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' -H 'content-type: application/json' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/2m" "$SRV_URL/v1/completions")
    check max_body_chunked_413 413 "$c" '--max-body (1 MiB)' '"error":{"message":'
    python3 -c '
import sys
pre, post = b"{\"prompt\":\"x\",\"max_tokens\":1,\"user\":\"", b"\"}"
sys.stdout.buffer.write(pre + b"a" * ((1 << 20) - len(pre) - len(post)) + post)' >"$TMP/1m.json"
    $RAW hold "$SRV_PORT" $((1 << 20)) 1000 "$TMP/go" "$TMP/1m.json" >"$TMP/hold.out" &
    hold=$!
    if ! wait_metric verity_request_body_bytes -eq $((1 << 20)); then
        fail front_door.body_budget_503 "the held body never took the budget: $(metric verity_request_body_bytes)"
    else
        c=$(curl -s -D "$TMP/hdr" -o "$TMP/body" -w '%{http_code}' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":1}' "$SRV_URL/v1/completions")
        if ! grep -qi '^retry-after:' "$TMP/hdr"; then fail front_door.body_budget_503 "no Retry-After: $(cat "$TMP/hdr")"
        else check body_budget_503 503 "$c" '--max-body-total' '"error":{"message":'; fi
    fi
    touch "$TMP/go"
    wait "$hold"
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}')
    if [ "$(cat "$TMP/hold.out")" != status=200 ]; then fail front_door.body_budget_freed "the held request: $(cat "$TMP/hold.out")"
    elif [ "$(metric verity_request_body_bytes)" != 0 ]; then fail front_door.body_budget_freed "gauge $(metric verity_request_body_bytes) after every body was parsed"
    else check body_budget_freed 200 "$c" '"finish_reason"'; fi
    stop_server
fi

# disconnects and half-closes (held engine). A non-streaming request holding KV whose client goes
# away is cancelled and its KV freed; one whose client goes away while tokens keep coming (the
# engine stepped one step at a time, faster than the old 20 ms quiet period) is noticed within
# a step or two, not when it finishes. A client that shuts down only its writing side after the
# request still gets the whole answer, streamed or not: the server sees the EOF, probes (a
# "100 Continue" interim response; a held stream has not sent its headers yet), and goes on.
if start_server front_door.dc_start -m "$MODEL" --admin-api 1; then
    c0=$(metric verity_requests_cancelled_total)
    admin pause >/dev/null
    curl -s -H 'content-type: application/json' -d '{"prompt":"go on","max_tokens":200,"ignore_eos":true}' "$SRV_URL/v1/completions" >/dev/null 2>&1 &
    dc=$!
    why=""
    if ! wait_metric verity_requests_waiting -eq 1; then why="the request never reached the engine"
    elif ! admin step 1 >/dev/null || [ "$(metric verity_kv_usage_ratio)" = 0.000000 ]; then why="no KV held after one step"
    fi
    kill "$dc" 2>/dev/null; wait "$dc" 2>/dev/null
    if [ -z "$why" ] && ! wait_metric verity_requests_cancelled_total -ge $((${c0:-0} + 1)); then why="the disconnect was not noticed"; fi
    admin resume >/dev/null
    if [ -z "$why" ] && ! wait_metric verity_kv_usage_ratio = 0.000000; then why="KV not freed: $(metric verity_kv_usage_ratio)"; fi
    [ -z "$why" ] && pass front_door.disconnect_whole_frees_kv || fail front_door.disconnect_whole_frees_kv "$why"

    ok0=$(metric_sum verity_request_success_total)
    out=$($RAW disconnect_while_stepping "$SRV_PORT" 400 '{"prompt":"go on","max_tokens":1000,"ignore_eos":true}')
    admin resume >/dev/null
    ok1=$(metric_sum verity_request_success_total)
    if [ "${out#*cancelled=}" != yes ]; then fail front_door.disconnect_while_tokens_flow "not cancelled while tokens came: $out"
    elif [ "$ok1" != "$ok0" ]; then fail front_door.disconnect_while_tokens_flow "the request ran to its end ($out)"
    elif ! wait_metric verity_kv_usage_ratio = 0.000000; then fail front_door.disconnect_while_tokens_flow "KV not freed: $(metric verity_kv_usage_ratio)"
    else pass "front_door.disconnect_while_tokens_flow($out)"; fi

    for how in whole stream; do
        c0=$(metric verity_requests_cancelled_total)
        out=$($RAW halfclose "$SRV_PORT" $how "{\"prompt\":\"x\",\"max_tokens\":8,\"ignore_eos\":true,\"stream\":$([ $how = stream ] && echo true || echo false)}")
        case $how:$out in
            whole:"probe=yes status=200 "*'"completion_tokens":8'*) pass front_door.half_close_whole ;;
            stream:"probe=yes status=200 "*'"finish_reason":"length"'*'[DONE]'*) pass front_door.half_close_stream ;;
            *) fail front_door.half_close_$how "$(head -c 400 <<<"$out")" ;;
        esac
    done
    stop_server
fi

# drain: a held engine with a batch of 2. Two requests (one streamed) run and have tokens, two
# more (one streamed) wait behind them; SIGTERM with --drain-timeout 1 cannot let any finish.
# The cut ones answer 503 (server_shutdown_error, drain_timeout), the streamed ones end with
# finish_reason "error", the error object and an error event, never "stop" or [DONE]; the server
# exits 0.
if start_server front_door.drain_start -m "$MODEL" --admin-api 1 --max-batch 2 --drain-timeout 1; then
    body='{"prompt":"x","max_tokens":100,"ignore_eos":true'
    admin pause >/dev/null
    curl -s -m 300 -o "$TMP/run.whole" -w '%{http_code}' -H 'content-type: application/json' -d "$body}" "$SRV_URL/v1/completions" >"$TMP/run.code" &
    p1=$!
    curl -sN -m 300 -o "$TMP/run.sse" -H 'content-type: application/json' -d "$body,\"stream\":true}" "$SRV_URL/v1/completions" &
    p2=$!
    why=""
    if ! wait_metric verity_requests_waiting -eq 2; then why="the running two never reached the engine"
    elif ! admin step 2 >/dev/null || [ "$(metric verity_requests_running)" != 2 ]; then why="not running after two steps"
    fi
    curl -s -m 300 -o "$TMP/q.whole" -w '%{http_code}' -H 'content-type: application/json' -d "$body}" "$SRV_URL/v1/completions" >"$TMP/q.code" &
    p3=$!
    curl -sN -m 300 -o "$TMP/q.sse" -H 'content-type: application/json' -d "$body,\"stream\":true}" "$SRV_URL/v1/completions" &
    p4=$!
    if [ -z "$why" ] && ! wait_metric verity_requests_waiting -eq 2; then why="the queued two never reached the engine"; fi
    kill -TERM "$SRV_PID"
    wait $p1 $p2 $p3 $p4
    for i in $(seq 1 3000); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$SRV_PID"; st=$?
    if [ -n "$why" ]; then fail front_door.drain "$why"
    else
        for k in run q; do
            code=$(cat "$TMP/$k.code")
            if [ "$code" = 503 ] && grep -q '"type":"server_shutdown_error"' "$TMP/$k.whole" && grep -q '"code":"drain_timeout"' "$TMP/$k.whole" && grep -q -- '--drain-timeout (1 s)' "$TMP/$k.whole"; then
                pass front_door.drain_${k}_whole_503
            else fail front_door.drain_${k}_whole_503 "status $code: $(head -c 300 "$TMP/$k.whole")"; fi
            f=$TMP/$k.sse
            if grep -q '"finish_reason":"error","error":{"type":"server_shutdown_error","code":"drain_timeout"' "$f" &&
                grep -q '^data: {"error":{"message":"the server is shutting down' "$f" &&
                ! grep -q '"finish_reason":"stop"' "$f" && ! grep -q '\[DONE\]' "$f"; then
                pass front_door.drain_${k}_stream_error
            else fail front_door.drain_${k}_stream_error "$(tail -c 400 "$f")"; fi
        done
        grep -q 'after [0-9]* generated tokens' "$TMP/run.whole" && grep -q 'before this request produced any output' "$TMP/q.whole" &&
            pass front_door.drain_says_cut_or_queued || fail front_door.drain_says_cut_or_queued "$(head -c 300 "$TMP/run.whole") / $(head -c 300 "$TMP/q.whole")"
        [ "$st" = 0 ] && pass front_door.drain_exit_0 || fail front_door.drain_exit_0 "exit status $st"
    fi
fi

# admission counts exactly: with --max-batch 2 --queue-max 3 a held engine takes exactly 5
# requests (all 200 once released) and the 6th gets 429 with Retry-After; n = 6 can never be
# admitted (400 naming n and the limit, not a 429 retried forever); with --queue-max 0 a single
# request on an idle server is served, and n = 2 over --max-batch 1 is the same 400.
if start_server front_door.admit_start -m "$MODEL" --admin-api 1 --max-batch 2 --queue-max 3; then
    admin pause >/dev/null
    pids=""
    for k in 1 2 3 4 5; do
        curl -s -m 300 -o /dev/null -w '%{http_code}' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":4,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/adm.$k" &
        pids="$pids $!"
        # one at a time: each must get in (a refused one has its answer: its curl ends)
        while [ "$(metric verity_requests_waiting)" != $k ] && kill -0 $! 2>/dev/null; do sleep 0.05; done
    done
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":4}' -D "$TMP/adm.hdr")
    cp "$TMP/body" "$TMP/adm.body"
    admin resume >/dev/null
    wait $pids
    cp "$TMP/adm.body" "$TMP/body"
    codes=$(cat "$TMP"/adm.[0-9] | tr -d '\n')
    if [ "$codes" != 200200200200200 ]; then fail front_door.admission_exact "the 5 that fit got: $codes"
    elif ! grep -qi '^retry-after:' "$TMP/adm.hdr"; then fail front_door.admission_exact "no Retry-After on the 6th: $c $(head -c 200 "$TMP/body")"
    else check admission_exact 429 "$c" 'max-batch 2 + --queue-max 3'; fi
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":2,"n":6}')
    check n_over_capacity_400 400 "$c" '"param":"n"' 'holds at most 5' 'never be admitted'
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":2,"n":5}')
    check n_at_capacity_200 200 "$c" '"index":4'
    stop_server
fi
if start_server front_door.queue0_start -m "$MODEL" --max-batch 1 --queue-max 0; then
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":2}')
    check queue_max_0_serves 200 "$c" '"finish_reason"'
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":2,"n":2}')
    check queue_max_0_n2_400 400 "$c" '"param":"n"' 'holds at most 1'
    stop_server
fi

# Framing the HTTP layer must refuse with exactly one status line and an error body, the server
# serving on afterwards: a negative or huge Content-Length (libmicrohttpd sent its head twice for
# these), a bad chunk size, chunked twice, an unknown transfer coding.
if start_server front_door.framing_start -m "$MODEL"; then
    req='POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n'
    while read -r name want extra; do
        got=$($RAW raw "$SRV_PORT" "$req$extra")
        [ "$got" = "statuses=1 first=$want error=yes" ] && pass "front_door.framing_$name" || fail "front_door.framing_$name" "$got (expected one $want with an error body)"
    done <<'CASES'
cl_negative 400 Content-Length: -1\r\n\r\n{}
cl_1e23 413 Content-Length: 100000000000000000000000\r\n\r\n{}
chunk_size_bad 400 Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n
te_chunked_twice 400 Transfer-Encoding: chunked, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n
te_gzip 501 Transfer-Encoding: gzip\r\n\r\n{}
CASES
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":2}')
    check framing_keeps_serving 200 "$c" '"finish_reason"'
    stop_server
fi
