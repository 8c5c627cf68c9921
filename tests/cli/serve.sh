# SPDX-License-Identifier: MIT
# verity serve over real HTTP on loopback: endpoints, bad input (each the right 4xx with the field
# named, the server keeps serving), auth, overload (429 with Retry-After, memory bounded),
# a client disconnecting mid-stream (its KV freed), SIGTERM drain, promtool on /metrics, and the
# official OpenAI client (conformance) plus P1 through HTTP (64 requests alone vs concurrent, and
# again with a KV pool small enough to force preemption, and alone vs concurrent on a model of
# each mixture-of-experts architecture: qwen3moe, deepseek2, deepseek32, deepseek4).
#
# Nothing here races the engine: the servers run with --admin-api 1, and a test that needs a
# state (a full queue, 64 requests in one batch, a request holding KV, requests in flight at
# SIGTERM) holds the engine (POST /admin/pause), builds the state, checks it through /metrics,
# and only then releases or steps the engine. Waits poll for a state, never for a time.
#
# P1 through HTTP: the reference answers come from a server that runs one sequence per step
# (--max-batch 1, whole-prompt prefill, one thread), each request alone; the compared servers
# batch up to 64 sequences, prefill in chunks of 8 tokens (so most prompts span several chunks)
# and use 2 threads, and get all 64 requests at once, held until every choice waits. The test
# fails unless the batch-size histogram shows steps with more than 8 sequences in that phase,
# so a server that serialised the requests would fail it.
. "$(dirname "$0")/lib.bash"

MODEL="$TMP/tiny.gguf"
"$VERITY" synth --shape tiny --type q8_0 --seed 5 -o "$MODEL" 2>/dev/null || { fail serve.synth "synth failed"; exit 0; }
scale=${VERITY_TEST_SCALE:-1}

nodedir="$(dirname "$0")/../node"
have_node=""
if ! command -v node >/dev/null; then fail serve.node "node not found (scripts/setup.sh installs nodejs)"
elif [ ! -d "$nodedir/node_modules/openai" ] && ! (cd "$nodedir" && timeout 300 npm ci --no-audit --no-fund >"$TMP/npm.log" 2>&1); then
    fail serve.node "npm ci in tests/node failed (the openai package is needed): $(tail -c 300 "$TMP/npm.log")"
else have_node=1; fi

# the reference: every P1 request alone on a server that never batches
if [ -n "$have_node" ] && start_server serve.p1_reference -m "$MODEL" --max-batch 1 --chunk 512 -t 1; then
    VERITY_URL=$SRV_URL run_node serve.p1_record -o "$TMP/p1.alone" "$nodedir/p1.mjs" record
    h=$(batch_hist)
    [ "${h#* }" = "0 0" ] || fail serve.p1_reference "the reference server batched: steps/over 1/over 8 = $h"
    stop_server
fi
# p1_replay NAME [MIN_OVER_8]: replays the 64 requests at once against $SRV_URL, held until all
# wait, and compares with the reference; fails unless steps with more than one sequence ran
# meanwhile (and at least MIN_OVER_8 steps with more than 8, default 1) and most prompts were
# longer than the server's prefill chunk (8)
p1_replay() {
    local name=$1 min8=${2:-1} h0 h1 multi big
    h0=$(batch_hist)
    VERITY_P1_HOLD=1 VERITY_URL=$SRV_URL run_node "$name" -o "$TMP/p1.$name" "$nodedir/p1.mjs" replay || return 1
    h1=$(batch_hist)
    read -r s0 m0 b0 <<<"$h0"; read -r s1 m1 b1 <<<"$h1"
    multi=$((m1 - m0)); big=$((b1 - b0))
    chunked=$(grep -o '"prompt_tokens":[0-9]*' "$TMP/p1.$name" | awk -F: '$2 > 8' | wc -l)
    if [ "$(grep -c '' "$TMP/p1.alone")" -ne 64 ] || grep -q '"error"' "$TMP/p1.alone"; then
        fail "$name" "the reference run is incomplete: $(grep -m1 '"error"' "$TMP/p1.alone" | head -c 300)"
    elif ! cmp -s "$TMP/p1.alone" "$TMP/p1.$name"; then
        fail "$name" "responses differ from the reference: $(diff "$TMP/p1.alone" "$TMP/p1.$name" | head -c 300)"
    elif [ "$multi" -le 0 ] || [ "$big" -lt "$min8" ]; then
        fail "$name" "$((s1 - s0)) steps, $multi with more than one sequence, $big with more than 8 (at least $min8 needed): the requests were not batched"
    elif [ "$chunked" -lt 32 ]; then
        fail "$name" "only $chunked prompts longer than the prefill chunk: chunking not exercised"
    else
        P1_NOTE="$((s1 - s0)) steps, $multi with >1 sequences, $big with >8; $chunked prompts chunked"
        return 0
    fi
    return 1
}

if start_server serve.start -m "$MODEL" --admin-api 1 --max-batch 64 --chunk 8 -t 2; then
    [ "$(http_code GET /health)" = 200 ] && pass serve.health || fail serve.health "$(cat "$TMP/body")"
    c=$(http_code GET /v1/models); grep -q '"object":"list"' "$TMP/body" && [ "$c" = 200 ] && pass serve.models || fail serve.models "$c $(cat "$TMP/body")"
    c=$(http_code GET /v1/flags); grep -q '"name":"kv-dtype"' "$TMP/body" && [ "$c" = 200 ] && pass serve.flags || fail serve.flags "$c"
    # /tokenize gives exactly `verity tokenize`'s ids for the same model (BOS included), and
    # /detokenize of them gives the text back: after the one space SentencePiece prefixes
    tk='Hello, world! héllo 😀 "q"' tk_json='Hello, world! héllo 😀 \"q\"'
    want=$("$VERITY" tokenize -m "$MODEL" "$tk" | tr -d ' ')
    c=$(http_code POST /tokenize "{\"prompt\":\"$tk_json\"}"); ids=$(sed -n 's/^{"tokens":\(\[[0-9,]*\]\),.*/\1/p' "$TMP/body")
    [ "$c" = 200 ] && [ "${#want}" -gt 20 ] && [ "$ids" = "$want" ] && pass serve.tokenize || fail serve.tokenize "$c $(head -c 300 "$TMP/body"), verity tokenize: $want"
    c=$(http_code POST /detokenize "{\"tokens\":${ids:-[]}}")
    [ "$c" = 200 ] && [ "$(cat "$TMP/body")" = "{\"prompt\":\" $tk_json\"}" ] && pass serve.detokenize || fail serve.detokenize "$c $(head -c 300 "$TMP/body")"

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
    bad admin_step_bad_body 400 '"param":"steps"' /admin/step '{"steps":"x"}'
    bad admin_step_not_paused 409 'needs a paused engine' /admin/step '{"steps":1}'
    printf '{"prompt":"\xff\xfe bad"}' >"$TMP/badutf8"
    bad invalid_utf8 400 'UTF-8' /v1/completions "$(cat "$TMP/badutf8")"
    head -c $((9 * 1024 * 1024)) /dev/zero | tr '\0' 'a' >"$TMP/big"
    got=$(curl -s -o "$TMP/body" -w '%{http_code}' -H 'content-type: application/json' --data-binary @"$TMP/big" "$SRV_URL/v1/completions")
    [ "$got" = 413 ] && pass serve.bad.oversized_body || fail serve.bad.oversized_body "status $got"
    [ "$(http_code GET /health)" = 200 ] && pass serve.keeps_serving_after_bad_input || fail serve.keeps_serving_after_bad_input "health failed"

    # a client that goes away mid-stream: its request is cancelled and its KV freed. The engine
    # is held; one granted step admits the request, prefills it and sends its first token, so it
    # holds KV; the client then goes away while the engine is still held (the request cannot
    # finish meanwhile), the server notices (cancelled_total), and the next step frees the KV.
    c0=$(metric verity_requests_cancelled_total)
    admin pause >/dev/null
    curl -sN -H 'content-type: application/json' -d '{"prompt":"go on","max_tokens":200,"stream":true,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/dc.out" 2>/dev/null &
    dc=$!
    why=""
    if ! wait_metric verity_requests_waiting -eq 1; then why="the request never reached the engine"
    elif ! admin step 1 >/dev/null || [ "$(metric verity_kv_usage_ratio)" = 0.000000 ]; then why="no KV held after one step"
    fi
    kill "$dc" 2>/dev/null; wait "$dc" 2>/dev/null
    if [ -z "$why" ] && ! wait_metric verity_requests_cancelled_total -ge $((${c0:-0} + 1)); then why="the disconnect was not noticed"; fi
    admin resume >/dev/null
    if [ -z "$why" ] && ! wait_metric verity_kv_usage_ratio = 0.000000; then why="KV not freed: $(metric verity_kv_usage_ratio)"; fi
    [ -z "$why" ] && pass serve.disconnect_frees_kv || fail serve.disconnect_frees_kv "$why"

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
    if [ -n "$have_node" ]; then
        sh0=$(metric verity_shared_prompt_tokens_total)
        body='"prompt":"a fairly long shared prompt for the choices to share","max_tokens":12,"temperature":0.9'
        curl -s -H 'content-type: application/json' -d "{$body,\"n\":3,\"seed\":5}" "$SRV_URL/v1/completions" >"$TMP/n3.json"
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const c of JSON.parse(s).choices)console.log(JSON.stringify(c.text))})' <"$TMP/n3.json" >"$TMP/n3"
        for k in 0 1 2; do
            curl -s -H 'content-type: application/json' -d "{$body,\"seed\":$((5 + k))}" "$SRV_URL/v1/completions" |
                node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.stringify(JSON.parse(s).choices[0].text)))'
        done >"$TMP/n1"
        sh1=$(metric verity_shared_prompt_tokens_total)
        if [ "$(grep -c '' "$TMP/n3")" -eq 3 ] && cmp -s "$TMP/n3" "$TMP/n1" && [ "$sh1" -gt "${sh0:-0}" ]; then
            pass "serve.n_choices_share_prompt($((sh1 - ${sh0:-0})) positions shared)"
        else
            fail serve.n_choices_share_prompt "choices differ from separate requests or nothing shared ($sh0 -> $sh1); n=3 answered: $(head -c 300 "$TMP/n3.json"); separately: $(head -c 200 "$TMP/n1" | tr '\n' ' ')"
        fi
    fi
    # every series the Grafana dashboard queries exists (the KV tiers' own series exist only on a
    # server with a tier: kv_cache.sh checks those)
    curl -s "$SRV_URL/metrics" >"$TMP/metrics.txt"
    dash="$(dirname "$0")/../../contrib/grafana/verity.json"
    absent=""
    for m in $(grep -o 'verity_[a-z0-9_]*' "$dash" | grep -v '^verity_kv_tier_' | sort -u); do
        grep -q "^$m[ {]" "$TMP/metrics.txt" || absent="$absent $m"
    done
    [ -z "$absent" ] && pass serve.grafana_metrics_exist || fail serve.grafana_metrics_exist "not exported:$absent"

    # the official OpenAI client, and P1 through HTTP
    if [ -n "$have_node" ]; then
        VERITY_URL=$SRV_URL run_node serve.conformance "$nodedir/conformance.mjs"
        VERITY_URL=$SRV_URL run_node serve.detok "$nodedir/detok.mjs"
        [ -s "$TMP/p1.alone" ] && p1_replay serve.p1_http_alone_vs_64_concurrent &&
            pass "serve.p1_http_alone_vs_64_concurrent($P1_NOTE)"
    fi
    stop_server
    [ "$SRV_STATUS" = 0 ] && pass serve.sigterm_exit_0 ||
        fail serve.sigterm_exit_0 "exit status $SRV_STATUS: $(grep -A12 -m1 'WARNING: ThreadSanitizer\|ERROR: AddressSanitizer\|runtime error' "$SRV_LOG" | tr '\n' ' ' | head -c 1500)"
fi

# P1 again with a KV pool small enough to force preemption: 40 blocks of 16 positions hold the
# largest of these requests (about 25 blocks) but not two of them growing at once. The requests
# enter the held engine's queue in index order (p1.mjs), so the schedule is the same on every
# run: 3 preemptions with this pool.
if [ -n "$have_node" ] && [ -s "$TMP/p1.alone" ] &&
    start_server serve.preempt -m "$MODEL" --admin-api 1 --kv-blocks 40 --max-batch 64 --chunk 8 -t 2; then
    # (a pool this small holds about 8 sequences at once: batches above 8 are not expected)
    if p1_replay serve.p1_http_preemption 0; then
        pre=$(metric verity_preemptions_total)
        if [ "${pre:-0}" -eq 0 ]; then fail serve.p1_http_preemption "no preemption happened"
        else pass "serve.p1_http_preemption($pre preemptions; $P1_NOTE)"; fi
    fi
    stop_server
fi

# overload: a queue of 2 and a batch of 1, the engine held. Three requests (max-batch + queue-max)
# fill the server (and wait while the engine is held), so every further request must get 429 with
# Retry-After, and the three must then complete. Memory: rounds of rejected requests with 256 KiB bodies; after the
# first round RSS may not grow by more than 32 MiB over four more (a leak of one body per
# rejected request would add 64 MiB; TSan's shadow memory alone grows by about 18 MiB).
# (under ASan a freed block sits in a quarantine of up to 256 MiB before reuse, which RSS would
# show as growth: the quarantine is kept small here so that only memory kept alive counts)
if ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4 start_server serve.overload -m "$MODEL" --admin-api 1 --queue-max 2 --max-batch 1; then
    admin pause >/dev/null
    hp=""
    for k in 1 2 3; do
        curl -s -m 300 -o /dev/null -w '%{http_code}' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":8,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/hold.$k" &
        hp="$hp $!"
    done
    if ! wait_metric verity_requests_waiting -eq 3; then
        fail serve.overload_429 "the three holding requests never reached the queue"
    else
        n=$(awk -v s="$scale" 'BEGIN { print int(40 * s) + 8 }')
        pids=""
        for i in $(seq 1 "$n"); do
            curl -s -m 60 -o /dev/null -D "$TMP/h.$i" -w '%{http_code}\n' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":64,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/code.$i" &
            pids="$pids $!"
        done
        wait $pids # not a bare wait: the server is a background child of this shell too
        n429=$(cat "$TMP"/code.* | grep -c '^429$')
        retry=$(grep -il '^retry-after:' "$TMP"/h.* | wc -l)
        # memory: rejected requests with large bodies (a padding field the parser must read)
        head -c $((256 * 1024)) /dev/zero | tr '\0' 'a' | awk '{ printf("{\"prompt\":\"x\",\"max_tokens\":4,\"user\":\"%s\"}", $0) }' >"$TMP/bigreq"
        round() {
            local i p=""
            for i in $(seq 1 64); do
                curl -s -m 60 -o /dev/null -w '%{http_code}\n' -H 'content-type: application/json' --data-binary @"$TMP/bigreq" "$SRV_URL/v1/completions" >>"$TMP/mem.codes" &
                p="$p $!"
            done
            wait $p
        }
        round
        rss0=$(awk '/VmRSS/ {print $2}' /proc/"$SRV_PID"/status)
        round; round; round; round
        rss1=$(awk '/VmRSS/ {print $2}' /proc/"$SRV_PID"/status)
        nmem=$(grep -c '^429$' "$TMP/mem.codes")
        admin resume >/dev/null
        wait $hp
        held=$(cat "$TMP"/hold.* | tr -d '\n')
        if [ "$n429" -eq "$n" ] && [ "$retry" -eq "$n" ] && [ "$held" = 200200200 ] && [ "$(http_code GET /health)" = 200 ]; then
            pass "serve.overload_429($n of $n rejected with Retry-After, the 3 queued ones completed)"
        else
            fail serve.overload_429 "429: $n429 of $n, Retry-After: $retry, queued ones: $held"
        fi
        if [ "$nmem" -ne 320 ]; then fail serve.overload_memory_bounded "$nmem of 320 large requests got 429"
        elif [ "$rss1" -lt $((rss0 + 32768)) ]; then pass "serve.overload_memory_bounded(${rss0}->${rss1} kB over 256 rejected 256 KiB requests)"
        else fail serve.overload_memory_bounded "RSS ${rss0} -> ${rss1} kB over 256 rejected 256 KiB requests"; fi
    fi
    stop_server
fi

# SIGTERM drain: in-flight requests finish, new ones get 503, exit 0. Three requests wait in a
# held engine (batch of one); the signal goes once all three are there, the late request once
# /health says draining; then the engine is released and all three must complete.
if start_server serve.drain -m "$MODEL" --admin-api 1 --drain-timeout 600 --max-batch 1; then
    admin pause >/dev/null
    dp=""
    for k in 1 2 3; do
        curl -s -m 300 -o "$TMP/drain.body.$k" -w '%{http_code}' -H 'content-type: application/json' -d '{"prompt":"x","max_tokens":40,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/drain.code.$k" &
        dp="$dp $!"
    done
    late="" st=""
    if wait_metric verity_requests_waiting -eq 3; then
        kill -TERM "$SRV_PID"
        for i in $(seq 1 3000); do [ "$(http_code GET /health)" = 503 ] && break; sleep 0.1; done
        late=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}')
        admin resume >/dev/null
    fi
    wait $dp
    for i in $(seq 1 3000); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$SRV_PID"; st=$?
    ok=0
    for k in 1 2 3; do
        [ "$(cat "$TMP/drain.code.$k")" = 200 ] && grep -q '"completion_tokens":40' "$TMP/drain.body.$k" && ok=$((ok + 1))
    done
    if [ $ok -eq 3 ] && [ "$late" = 503 ] && [ $st -eq 0 ]; then
        pass serve.sigterm_drain
    else
        fail serve.sigterm_drain "in-flight completed: $ok of 3 ($(for k in 1 2 3; do printf '%s: %s; ' "$(cat "$TMP/drain.code.$k")" "$(head -c 200 "$TMP/drain.body.$k")"; done)), late request: $late, exit: $st"
    fi
fi

# authentication: 401 without the key, /health open, constant-time compare path with the key
if start_server serve.auth -m "$MODEL" --api-key s3cret; then
    a=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}')
    b=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer wrong')
    c=$(http_code POST /v1/completions '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer s3cret')
    h=$(http_code GET /health)
    f=$(curl -s -H 'Authorization: Bearer s3cret' "$SRV_URL/v1/flags")
    # without --admin-api the admin routes do not exist
    adm=$(http_code POST /admin/pause '{}' -H 'Authorization: Bearer s3cret')
    [ "$adm" = 404 ] && pass serve.admin_api_off_by_default || fail serve.admin_api_off_by_default "POST /admin/pause: $adm"
    if [ "$a$b$c$h" = 401401200200 ] && ! grep -q s3cret <<<"$f"; then pass serve.api_key
    else fail serve.api_key "no key $a, wrong key $b, right key $c, health $h"; fi
    stop_server
fi

# P1 through HTTP on each mixture-of-experts architecture: qwen3moe, deepseek2 (latent cache),
# deepseek32 (DSA indexer, index keys in every KV block) and deepseek4 (compressed attention, its
# companion buffer, hyper-connections): each request alone on a server that never batches, then
# all 64 at once, batched and chunked
if [ -n "$have_node" ] && [ -s "$TMP/p1.alone" ]; then
    mv "$TMP/p1.alone" "$TMP/p1.alone.llama"
    for arch in qwen3moe deepseek2 deepseek32 deepseek4; do
        am="$TMP/$arch.gguf"
        if ! "$VERITY" synth --shape tiny --arch $arch --type q8_0 --seed 5 -o "$am" 2>"$TMP/err"; then
            fail "serve.p1_http_$arch" "synth failed: $(head -c 300 "$TMP/err")"; continue
        fi
        rm -f "$TMP/p1.alone"
        if start_server "serve.${arch}_reference" -m "$am" --max-batch 1 --chunk 512 -t 1; then
            VERITY_URL=$SRV_URL run_node "serve.${arch}_p1_record" -o "$TMP/p1.alone" "$nodedir/p1.mjs" record
            stop_server
        fi
        if [ -s "$TMP/p1.alone" ] && start_server "serve.$arch" -m "$am" --admin-api 1 --max-batch 64 --chunk 8 -t 2; then
            p1_replay "serve.p1_http_$arch" && pass "serve.p1_http_$arch($P1_NOTE)"
            stop_server
        fi
    done
    mv "$TMP/p1.alone.llama" "$TMP/p1.alone"
fi
