# SPDX-License-Identifier: MIT
# serve_names: --served-model-name (every name listed by /v1/models and accepted in "model", the
# first reported), --chat-template (a built-in for a model that has no template of its own, and the
# 400 naming --chat-template without one), --chat-template-kwargs (defaults that reach the
# template, replaced key by key by a request's chat_template_kwargs), and bad values of each
# (exit 2, one line). The model is the embedded default, stories260K, which has no chat template;
# the same checks through the official openai client are in tests/node/names.mjs.
. "$(dirname "$0")/lib.bash"
nodedir="$(cd "$(dirname "$0")/../node" && pwd)"

# json FILE EXPR: evaluates a Python expression over the JSON document d read from FILE
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# bad values: refused before anything listens, also when given as VERITY_* variables
expect_exit2 serve_names.bad_builtin "$VERITY" serve --port 0 --chat-template no-such-template
expect_exit2 serve_names.missing_file "$VERITY" serve --port 0 --chat-template "$TMP/missing.jinja"
printf '{%% for m in %%}' >"$TMP/broken.jinja"
expect_exit2 serve_names.broken_template "$VERITY" serve --port 0 --chat-template "$TMP/broken.jinja"
expect_exit2 serve_names.kwargs_not_object "$VERITY" serve --port 0 --chat-template-kwargs '[1]'
expect_exit2 serve_names.kwargs_not_json "$VERITY" serve --port 0 --chat-template-kwargs '{x'
expect_exit2 serve_names.empty_name "$VERITY" serve --port 0 --served-model-name 'a,,b'
expect_exit2 serve_names.env_bad_builtin env VERITY_CHAT_TEMPLATE=no-such-template "$VERITY" serve --port 0

chat_body() { printf '{"model":"%s","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":8,"temperature":0%s}' "$1" "${2:-}"; }
compl_body() { printf '{"model":"%s","prompt":"Once upon a time","max_tokens":8,"temperature":0}' "$1"; }

if MODEL= start_server serve_names.start --served-model-name a,b --chat-template chatml; then
    if [ "$(http_code GET /v1/models)" = 200 ] && [ "$(json "$TMP/body" '",".join(m["id"] for m in d["data"])')" = "a,b" ]; then
        pass serve_names.models_lists_all
    else fail serve_names.models_lists_all "$(head -c 300 "$TMP/body")"; fi
    ok=1 why=""
    for n in a b; do
        c=$(http_code POST /v1/completions "$(compl_body $n)")
        if [ "$c" != 200 ] || [ "$(json "$TMP/body" 'd["model"]')" != a ]; then ok=0 why="$why model $n: $c $(head -c 200 "$TMP/body");"; fi
    done
    if [ $ok = 1 ]; then pass serve_names.every_name_answers_first_reported; else fail serve_names.every_name_answers_first_reported "$why"; fi
    c=$(http_code POST /v1/completions "$(compl_body c)")
    if [ "$c" = 404 ] && [ "$(json "$TMP/body" 'd["error"]["code"]')" = model_not_found ]; then
        pass serve_names.unknown_name_404
    else fail serve_names.unknown_name_404 "$c $(head -c 300 "$TMP/body")"; fi
    c=$(http_code POST /v1/chat/completions "$(chat_body b)")
    if [ "$c" = 200 ] && [ "$(json "$TMP/body" 'd["usage"]["completion_tokens"] > 0 and d["model"] == "a"')" = True ]; then
        pass serve_names.chat_with_builtin_template
    else fail serve_names.chat_with_builtin_template "$c $(head -c 300 "$TMP/body")"; fi
    if [ -d "$nodedir/node_modules/openai" ] || (cd "$nodedir" && timeout 300 npm ci --no-audit --no-fund >"$TMP/npm.log" 2>&1); then
        VERITY_URL=$SRV_URL run_node serve_names.node "$nodedir/names.mjs"
    else
        fail serve_names.node "npm ci in tests/node failed (the openai package is needed): $(tail -c 300 "$TMP/npm.log")"
    fi
    stop_server
fi

# no template at all: chat is a 400 whose message names --chat-template; completions still work
if MODEL= start_server serve_names.no_template_start; then
    c=$(http_code POST /v1/chat/completions "$(chat_body stories260K)")
    if [ "$c" = 400 ] && grep -q -- '--chat-template' "$TMP/body"; then pass serve_names.no_template_400
    else fail serve_names.no_template_400 "$c $(head -c 300 "$TMP/body")"; fi
    c=$(http_code POST /v1/completions "$(compl_body stories260K)")
    if [ "$c" = 200 ]; then pass serve_names.default_name_completes
    else fail serve_names.default_name_completes "$c $(head -c 300 "$TMP/body")"; fi
    stop_server
fi

# kwargs: the template refuses (raise_exception, a 400 carrying its message) unless it sees the
# default variables, so a 200 shows they arrived; a request's own value for one key replaces that
# key only, which the refusal's message shows
cat >"$TMP/kw.jinja" <<'JINJA'
{%- if who is not defined or also is not defined %}{{ raise_exception('kwargs missing') }}{% endif -%}
{%- if who != 'kw-default' or also != 1 %}{{ raise_exception('saw who=' ~ who ~ ' also=' ~ also) }}{% endif -%}
{%- for m in messages %}{{ m['content'] }}{% endfor -%}
JINJA
if MODEL= start_server serve_names.kwargs_start --chat-template "$TMP/kw.jinja" --chat-template-kwargs '{"who":"kw-default","also":1}'; then
    c=$(http_code POST /v1/chat/completions "$(chat_body stories260K)")
    if [ "$c" = 200 ]; then pass serve_names.kwargs_default_reaches_template
    else fail serve_names.kwargs_default_reaches_template "$c $(head -c 300 "$TMP/body")"; fi
    c=$(http_code POST /v1/chat/completions "$(chat_body stories260K ',"chat_template_kwargs":{"who":"req"}')")
    if [ "$c" = 400 ] && grep -q 'saw who=req also=1' "$TMP/body"; then pass serve_names.kwargs_request_overrides_per_key
    else fail serve_names.kwargs_request_overrides_per_key "$c $(head -c 300 "$TMP/body")"; fi
    stop_server
fi
