# SPDX-License-Identifier: MIT
# verity serve over real HTTP on loopback: endpoints, bad input (each the right 4xx with the field
# named, the server keeps serving), auth, overload (429 with Retry-After, memory bounded),
# a client disconnecting mid-stream (its KV freed), SIGTERM drain, promtool on /metrics, and the
# official OpenAI client (conformance) plus P1 through HTTP (64 requests alone vs concurrent, and
# again with a KV pool small enough to force preemption).
. "$(dirname "$0")/lib.bash"

MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail serve.synth "synth failed"; exit 0; }
scale=${VERITY_TEST_SCALE:-1}

if start_server serve.start -m "$MODEL"; then
    [ "$(http_code GET /health)" = 200 ] && pass serve.health || fail serve.health "$(cat "$TMP/body")"
    c=$(http_code GET /v1/models); grep -q '"object":"list"' "$TMP/body" && [ "$c" = 200 ] && pass serve.models || fail serve.models "$c $(cat "$TMP/body")"
    c=$(http_code GET /v1/flags); grep -q '"name":"kv-dtype"' "$TMP/body" && [ "$c" = 200 ] && pass serve.flags || fail serve.flags "$c"
    c=$(http_code POST /tokenize '{"prompt":"hello"}'); grep -q '"tokens":\[1,' "$TMP/body" && pass serve.tokenize || fail serve.tokenize "$c $(cat "$TMP/body")"
    c=$(http_code POST /detokenize '{"tokens":[104,105]}'); [ "$c" = 200 ] && pass serve.detokenize || fail serve.detokenize "$c $(cat "$TMP/body")"

    # bad input: status, and the error names the field
    bad() { # NAME EXPECTED_STATUS EXPECTED_SUBSTRING PATH DATA [CURL ARGS]
        local n=$1 want=$2 sub=$3 p=$4 d=$5; shift 5
        local got; got=$(http_code POST "$p" "$d" "$@")
        if [ "$got" != "$want" ]; then fail "serve.bad.$n" "status $got, expected $want: $(head -c 300 "$TMP/body")"
        elif ! grep -q -- "$sub" "$TMP/body"; then fail "serve.bad.$n" "body lacks '$sub': $(head -c 300 "$TMP/body")"
        elif ! grep -q '"error":{"message":' "$TMP/body"; then fail "serve.bad.$n" "not an OpenAI error body"
        else pass "serve.bad.$n"; fi
    }
    bad malformed_json 400 'not valid JSON' /v1/completions '{"prompt": "x",'
    bad not_object 400 'must be a JSON object' /v1/completions '[1,2]'
    bad wrong_type 400 '"param":"max_tokens"' /v1/completions '{"prompt":"x","max_tokens":"many"}'
    bad out_of_range 400 '"param":"temperature"' /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"temperature":5}'
    bad missing_messages 400 '"param":"messages"' /v1/chat/completions '{"max_tokens":3}'
    bad bad_role 400 'role' /v1/chat/completions '{"messages":[{"role":"wizard","content":"x"}]}'
    bad unknown_model 404 'model_not_found' /v1/chat/completions '{"model":"gpt-7","messages":[{"role":"user","content":"x"}]}'
    bad bad_tool_choice 400 '"param":"tool_choice"' /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}'
    bad named_tool_missing 400 'not in' /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}'
    bad too_many_stops 400 '"param":"stop"' /v1/completions '{"prompt":"x","stop":["a","b","c","d","e"]}'
    bad too_long 400 'context_length_exceeded' /v1/completions '{"prompt":"x","max_tokens":100000}'
    bad logit_bias 400 '"param":"logit_bias"' /v1/completions '{"prompt":"x","logit_bias":{"5":10}}'
    bad json_mode_unavailable 400 'response_format' /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"grammar"}}'
    bad stream_options_without_stream 400 'stream_options' /v1/completions '{"prompt":"x","stream_options":{"include_usage":true}}'
    printf '{"prompt":"\xff\xfe bad"}' >"$TMP/badutf8"
    bad invalid_utf8 400 'UTF-8' /v1/completions "$(cat "$TMP/badutf8")"
    head -c $((9 * 1024 * 1024)) /dev/zero | tr '\0' 'a' >"$TMP/big"
    got=$(curl -s -o "$TMP/body" -w '%{http_code}' -H 'content-type: application/json' --data-binary @"$TMP/big" "$SRV_URL/v1/completions")
    [ "$got" = 413 ] && pass serve.bad.oversized_body || fail serve.bad.oversized_body "status $got"
    [ "$(http_code GET /health)" = 200 ] && pass serve.keeps_serving_after_bad_input || fail serve.keeps_serving_after_bad_input "health failed"

    # a client that goes away mid-stream: its request is cancelled and its KV freed
    # (head closes the pipe after the first chunk; curl dies on SIGPIPE and the socket closes)
    curl -sN -H 'content-type: application/json' -d '{"prompt":"go on","max_tokens":4000,"stream":true,"ignore_eos":true}' "$SRV_URL/v1/completions" 2>/dev/null | head -c 100 >/dev/null
    freed=""
    for i in $(seq 1 50); do
        r=$(metric verity_kv_usage_ratio); cn=$(metric verity_requests_cancelled_total)
        if [ "$r" = "0.000000" ] && [ "${cn:-0}" -ge 1 ]; then freed=1; break; fi
        sleep 0.1
    done
    [ -n "$freed" ] && pass serve.disconnect_frees_kv || fail serve.disconnect_frees_kv "kv_usage_ratio $r, cancelled $cn"

    # promtool on a live /metrics
    if command -v promtool >/dev/null; then
        curl -s "$SRV_URL/metrics" >"$TMP/metrics.txt"
        if out=$(promtool check metrics <"$TMP/metrics.txt" 2>&1); then pass serve.promtool
        else fail serve.promtool "$(echo "$out" | head -5 | tr '\n' ' ')"; fi
    else
        skip serve.promtool "promtool not installed (Debian package prometheus)"
    fi
    # n > 1: the choices share the prompt's K/V, and each equals an independent request with its
    # seed (seed + i)
    if command -v node >/dev/null; then
        sh0=$(metric verity_shared_prompt_tokens_total)
        body='"prompt":"a fairly long shared prompt for the choices to share","max_tokens":12,"temperature":0.9'
        curl -s -H 'content-type: application/json' -d "{$body,\"n\":3,\"seed\":5}" "$SRV_URL/v1/completions" |
            node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const c of JSON.parse(s).choices)console.log(JSON.stringify(c.text))})' >"$TMP/n3"
        for k in 0 1 2; do
            curl -s -H 'content-type: application/json' -d "{$body,\"seed\":$((5 + k))}" "$SRV_URL/v1/completions" |
                node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.stringify(JSON.parse(s).choices[0].text)))'
        done >"$TMP/n1"
        sh1=$(metric verity_shared_prompt_tokens_total)
        if [ "$(grep -c '' "$TMP/n3")" -eq 3 ] && cmp -s "$TMP/n3" "$TMP/n1" && [ "$sh1" -gt "${sh0:-0}" ]; then
            pass "serve.n_choices_share_prompt($((sh1 - ${sh0:-0})) positions shared)"
        else
            fail serve.n_choices_share_prompt "choices differ from separate requests or nothing shared ($sh0 -> $sh1)"
        fi
    fi
    # every series the Grafana dashboard queries exists
    curl -s "$SRV_URL/metrics" >"$TMP/metrics.txt"
    dash="$(dirname "$0")/../../contrib/grafana/verity.json"
    absent=""
    for m in $(grep -o 'verity_[a-z0-9_]*' "$dash" | sort -u); do
        grep -q "^$m[ {]" "$TMP/metrics.txt" || absent="$absent $m"
    done
    [ -z "$absent" ] && pass serve.grafana_metrics_exist || fail serve.grafana_metrics_exist "not exported:$absent"

    # the official OpenAI client, and P1 through HTTP
    nodedir="$(dirname "$0")/../node"
    if command -v node >/dev/null && { [ -d "$nodedir/node_modules/openai" ] || (cd "$nodedir" && timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1); }; then
        VERITY_URL=$SRV_URL timeout 600 node "$nodedir/conformance.mjs"
        VERITY_URL=$SRV_URL timeout 600 node "$nodedir/detok.mjs"
        VERITY_URL=$SRV_URL timeout 600 node "$nodedir/p1.mjs" record >"$TMP/p1.alone"
        VERITY_URL=$SRV_URL timeout 600 node "$nodedir/p1.mjs" replay >"$TMP/p1.concurrent"
        if [ "$(grep -c '' "$TMP/p1.alone")" -eq 64 ] && ! grep -q '"error"' "$TMP/p1.alone" && cmp -s "$TMP/p1.alone" "$TMP/p1.concurrent"; then
            pass serve.p1_http_alone_vs_64_concurrent
        else
            fail serve.p1_http_alone_vs_64_concurrent "responses differ: $(diff "$TMP/p1.alone" "$TMP/p1.concurrent" | head -c 300)"
        fi
        have_node=1
    else
        skip serve.node "node or the openai npm package unavailable"
        have_node=""
    fi
    stop_server
    [ "$SRV_STATUS" = 0 ] && pass serve.sigterm_exit_0 || fail serve.sigterm_exit_0 "exit status $SRV_STATUS"
fi

# P1 again with a KV pool small enough to force preemption: 48 blocks of 16 positions hold the
# largest of these requests (about 25 blocks) but not two of them growing at once
if [ -n "${have_node:-}" ] && start_server serve.preempt -m "$MODEL" --kv-blocks 48 --max-batch 64; then
    VERITY_URL=$SRV_URL timeout 600 node "$nodedir/p1.mjs" replay >"$TMP/p1.preempt"
    pre=$(metric verity_preemptions_total)
    if ! cmp -s "$TMP/p1.alone" "$TMP/p1.preempt"; then fail serve.p1_http_preemption "responses differ under preemption"
    elif [ "${pre:-0}" -eq 0 ]; then fail serve.p1_http_preemption "no preemption happened"
    else pass "serve.p1_http_preemption($pre preemptions)"; fi
    stop_server
fi

# overload: a queue of 2 and a batch of 1; far more concurrent requests than that
if start_server serve.overload -m "$MODEL" --queue-max 2 --max-batch 1; then
    rss0=$(awk '/VmRSS/ {print $2}' /proc/"$SRV_PID"/status)
    n=$(awk -v s="$scale" 'BEGIN { print int(40 * s) + 8 }')
    pids=""
    for i in $(seq 1 "$n"); do
        curl -s -m 120 -o /dev/null -D "$TMP/h.$i" -w '%{http_code}\n' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":64,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/code.$i" &
        pids="$pids $!"
    done
    wait $pids   # not a bare wait: the server is a background child of this shell too
    n429=$(cat "$TMP"/code.* | grep -c '^429$'); n200=$(cat "$TMP"/code.* | grep -c '^200$')
    retry=$(grep -il '^retry-after:' "$TMP"/h.* | wc -l)
    rss1=$(awk '/VmRSS/ {print $2}' /proc/"$SRV_PID"/status)
    if [ "$n429" -gt 0 ] && [ "$n200" -gt 0 ] && [ $((n429 + n200)) -eq "$n" ] && [ "$retry" -ge "$n429" ] && [ "$(http_code GET /health)" = 200 ]; then
        pass "serve.overload_429($n200 ok, $n429 rejected with Retry-After)"
    else
        fail serve.overload_429 "200: $n200, 429: $n429, Retry-After: $retry of $n"
    fi
    [ "$rss1" -lt $((rss0 + 200000)) ] && pass "serve.overload_memory_bounded(${rss0}->${rss1} kB)" || fail serve.overload_memory_bounded "RSS ${rss0} -> ${rss1} kB"
    stop_server
fi

# SIGTERM drain: in-flight requests finish, new ones get 503, exit 0. Three long requests on a
# batch of one keep the server busy for a while whatever the machine's speed; the signal goes
# once the server holds all three (running + waiting), not after a guessed delay (under TSan
# the third one could still be on its way in).
if start_server serve.drain -m "$MODEL" --drain-timeout 60 --max-batch 1; then
    dp=""
    for k in 1 2 3; do
        curl -s -o "$TMP/drain.body.$k" -w '%{http_code}' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":3000,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/drain.code.$k" &
        dp="$dp $!"
    done
    for i in $(seq 1 300); do
        r=$(metric verity_requests_running) w=$(metric verity_requests_waiting)
        [ $((${r:-0} + ${w:-0})) -ge 3 ] && break
        sleep 0.1
    done
    kill -TERM "$SRV_PID"
    sleep 0.1
    late=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}')
    wait $dp
    for i in $(seq 1 600); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$SRV_PID"; st=$?
    ok=0
    for k in 1 2 3; do
        [ "$(cat "$TMP/drain.code.$k")" = 200 ] && grep -q '"completion_tokens":3000' "$TMP/drain.body.$k" && ok=$((ok + 1))
    done
    if [ $ok -eq 3 ] && [ "$late" = 503 ] && [ $st -eq 0 ]; then
        pass serve.sigterm_drain
    else
        fail serve.sigterm_drain "in-flight completed: $ok of 3, late request: $late, exit: $st"
    fi
fi

# authentication: 401 without the key, /health open, constant-time compare path with the key
if start_server serve.auth -m "$MODEL" --api-key s3cret; then
    a=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}')
    b=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer wrong')
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer s3cret')
    h=$(http_code GET /health)
    f=$(curl -s -H 'Authorization: Bearer s3cret' "$SRV_URL/v1/flags")
    if [ "$a$b$c$h" = 401401200200 ] && ! grep -q s3cret <<<"$f"; then pass serve.api_key
    else fail serve.api_key "no key $a, wrong key $b, right key $c, health $h"; fi
    stop_server
fi
