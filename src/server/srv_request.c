/* SPDX-License-Identifier: MIT */
/*
 * srv_request: parsing and validating /v1/completions and /v1/chat/completions bodies into
 * srv_params, and building the prompt tokens (chat: the model's template rendered over the
 * messages and tools, then tokenized with special tokens parsed).
 *
 * Rules: unknown fields are ignored; a known field of the wrong type or out of range is a 400
 * naming it (OpenAI's ranges: temperature 0..2, top_p (0, 1], penalties -2..2, top_logprobs
 * 0..20, completions logprobs 0..5, at most 4 stop strings, of 4096 bytes together); null means
 * "not given". Fields whose silent omission would change results (logit_bias, suffix, best_of > n)
 * are refused with a clear 400 instead of being ignored. A model name other than the served one is
 * a 404. A prompt that cannot fit the context, or prompt + max_tokens beyond it, is a 400.
 *
 * Constrained decoding (chat/tool_grammar.h): tool_choice "required" or a named function makes
 * every choice one call in the model's tool-call syntax, to one of the tools (or the named one)
 * with arguments valid under its parameters schema; response_format json_object / json_schema
 * makes the output a JSON object / a value of the schema, or, with tool_choice "auto" and tools,
 * either that or a tool call. With a forced call the response_format is moot (it describes
 * content, which a forced call does not have). A schema outside the
 * supported subset is a 400 naming the keyword and its place; so is tool_choice required/named
 * on a model whose template has no tool-call syntax the server knows (it could not be enforced).
 * tool_choice "auto" stays free generation, parsed afterwards. The grammar is compiled last, on
 * the request's thread, so nothing after it can fail and leak it.
 *
 * Defaults: max_tokens 16 for completions (OpenAI's), "as many as fit" for chat; temperature 1,
 * top_p 1; seed 0 when absent (so every request is reproducible); choice i of n samples with
 * seed + i.
 */
#include "server/srv_int.h"
#include "template/chat_prompt.h"
#include "template/chat_source.h"
#include "base/clock.h"
#include "base/err.h"
#include "toolcall/tool_grammar.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INV "invalid_request_error"

static int srv_num(const json_value *body, const char *key, double lo, double hi, bool lo_open,
                   double *out, bool *given, srv_err *e) {
    const json_value *v = json_get(body, key);
    *given = false;
    if (!v || v->type == JSON_NULL)
        return 0;
    double d;
    if (!json_as_double(v, &d) || !isfinite(d))
        return srv_fail(e, 400, INV, key, "\"%s\" must be a number, not %s", key,
                        json_type_name(v->type));
    if (d < lo || d > hi || (lo_open && d == lo))
        return srv_fail(e, 400, INV, key, "\"%s\" is %g; it must be in %s%g, %g]", key, d,
                        lo_open ? "(" : "[", lo, hi);
    *out = d;
    *given = true;
    return 0;
}

static int srv_int(const json_value *body, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   bool *given, srv_err *e) {
    const json_value *v = json_get(body, key);
    *given = false;
    if (!v || v->type == JSON_NULL)
        return 0;
    int64_t i;
    if (!json_as_int(v, &i))
        return srv_fail(e, 400, INV, key, "\"%s\" must be an integer, not %s", key,
                        v->type == JSON_NUMBER ? "a fraction" : json_type_name(v->type));
    if (i < lo || i > hi)
        return srv_fail(e, 400, INV, key, "\"%s\" is %lld; it must be in [%lld, %lld]", key,
                        (long long)i, (long long)lo, (long long)hi);
    *out = i;
    *given = true;
    return 0;
}

static int srv_bool(const json_value *body, const char *key, bool *out, bool *given, srv_err *e) {
    const json_value *v = json_get(body, key);
    *given = false;
    if (!v || v->type == JSON_NULL)
        return 0;
    if (!json_as_bool(v, out))
        return srv_fail(e, 400, INV, key, "\"%s\" must be a boolean, not %s", key,
                        json_type_name(v->type));
    *given = true;
    return 0;
}

/* Tokenizes text into a new arena array. */
static int srv_tokenize(server *s, arena *a, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **out, int32_t *n_out, const char *param,
                        srv_err *e) {
    size_t cap = tokenizer_max_tokens(len), n = 0;
    int32_t *ids = arena_alloc(a, (cap ? cap : 1) * sizeof *ids);
    if (!ids)
        return srv_fail(e, 413, INV, param, "prompt too large");
    int rc = tokenizer_encode(s->sm.tok, text, len, add_special, parse_special, ids, cap, &n);
    if (rc)
        return srv_fail(e, 400, INV, param, "cannot tokenize \"%s\": %s", param, err_detail());
    *out = ids;
    *n_out = (int32_t)n;
    return 0;
}

static int srv_parse_stop(arena *a, const json_value *body, srv_params *p, srv_err *e) {
    const json_value *v = json_get(body, "stop");
    if (!v || v->type == JSON_NULL)
        return 0;
    const json_value *items[SRV_MAX_STOP];
    size_t n;
    if (v->type == JSON_STRING) {
        items[0] = v;
        n = 1;
    } else if (v->type == JSON_ARRAY) {
        if (v->arr.n > SRV_MAX_STOP)
            return srv_fail(e, 400, INV, "stop", "\"stop\" has %zu strings; at most %d are allowed",
                            v->arr.n, SRV_MAX_STOP);
        n = v->arr.n;
        for (size_t i = 0; i < n; i++)
            items[i] = v->arr.items[i];
    } else {
        return srv_fail(e, 400, INV, "stop", "\"stop\" must be a string or an array of strings");
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *sv;
        size_t sl;
        if (!json_as_str(items[i], &sv, &sl))
            return srv_fail(e, 400, INV, "stop", "\"stop\"[%zu] must be a string", i);
        if (sl == 0)
            return srv_fail(e, 400, INV, "stop", "\"stop\"[%zu] is empty", i);
        /* the matcher is linear in the text whatever the stops, but its automaton and every
         * choice's held-back text grow with them: bound both */
        if ((total += sl) > SRV_STOP_MAX_BYTES)
            return srv_fail(e, 400, INV, "stop",
                            "\"stop\" strings total %zu bytes or more; at most %d are allowed",
                            total, SRV_STOP_MAX_BYTES);
        p->stop[p->n_stop] = arena_strndup(a, sv, sl);
        p->stop_len[p->n_stop++] = sl;
    }
    return 0;
}

/* True when name[0..len) is one of the names the server answers to. */
static bool srv_model_known(const server_model *sm, const char *name, size_t len) {
    int n = sm->names ? sm->n_names : 1;
    for (int i = 0; i < n; i++) {
        const char *id = sm->names ? sm->names[i] : sm->name;
        if (strlen(id) == len && memcmp(name, id, len) == 0)
            return true;
    }
    return false;
}

/* Sampling and output fields common to both routes. */
static int srv_parse_common(server *s, arena *a, const json_value *body, bool chat, srv_params *p,
                            srv_err *e) {
    bool g;
    int64_t iv;
    double d;
    const json_value *v;
    p->sp = sample_params_default();
    p->sp.seed = 0;
    p->sp.repeat_last_n = -1; /* OpenAI/vLLM semantics: the whole context */
    p->skip_special = true;
    p->n = 1;
    p->max_tokens = chat ? -1 : 16;
    if ((v = json_get(body, "model")) && v->type != JSON_NULL) {
        const char *mn;
        size_t ml;
        if (!json_as_str(v, &mn, &ml))
            return srv_fail(e, 400, INV, "model", "\"model\" must be a string");
        if (ml && !srv_model_known(&s->sm, mn, ml)) {
            srv_fail(e, 404, INV, "model",
                     "the model '%.*s' does not exist (this server serves '%s')",
                     (int)(ml > 200 ? 200 : ml), mn, s->sm.name);
            e->code = "model_not_found";
            return -1;
        }
    }
    if (srv_int(body, "n", 1, SRV_MAX_CHOICES, &iv, &g, e))
        return -1;
    if (g)
        p->n = (int32_t)iv;
    const char *mt =
        chat && json_get(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (srv_int(body, mt, 1, 1 << 24, &iv, &g, e))
        return -1;
    if (g)
        p->max_tokens = (int32_t)iv;
    if (srv_num(body, "temperature", 0, 2, false, &d, &g, e))
        return -1;
    if (g)
        p->sp.temperature = d;
    if (srv_num(body, "top_p", 0, 1, true, &d, &g, e))
        return -1;
    if (g)
        p->sp.top_p = d;
    if (srv_int(body, "top_k", -1, 1 << 30, &iv, &g, e))
        return -1;
    if (g)
        p->sp.top_k = iv < 0 ? 0 : (int32_t)iv;
    if (srv_num(body, "min_p", 0, 1, false, &d, &g, e))
        return -1;
    if (g)
        p->sp.min_p = d;
    if (srv_num(body, "presence_penalty", -2, 2, false, &d, &g, e))
        return -1;
    if (g)
        p->sp.presence_penalty = d;
    if (srv_num(body, "frequency_penalty", -2, 2, false, &d, &g, e))
        return -1;
    if (g)
        p->sp.frequency_penalty = d;
    if (srv_num(body, "repetition_penalty", 0, 100, true, &d, &g, e))
        return -1;
    if (g)
        p->sp.repetition_penalty = d;
    if (srv_int(body, "seed", INT64_MIN, INT64_MAX, &iv, &g, e))
        return -1;
    if (g)
        p->sp.seed = (uint64_t)iv;
    if (srv_parse_stop(a, body, p, e))
        return -1;
    if (srv_bool(body, "stream", &p->stream, &g, e))
        return -1;
    if ((v = json_get(body, "stream_options")) && v->type != JSON_NULL) {
        if (v->type != JSON_OBJECT)
            return srv_fail(e, 400, INV, "stream_options", "\"stream_options\" must be an object");
        if (!p->stream)
            return srv_fail(e, 400, INV, "stream_options",
                            "\"stream_options\" is only allowed when \"stream\" is true");
        if (srv_bool(v, "include_usage", &p->include_usage, &g, e)) {
            e->param = "stream_options.include_usage";
            return -1;
        }
    }
    if (srv_bool(body, "skip_special_tokens", &p->skip_special, &g, e))
        return -1;
    if (srv_bool(body, "ignore_eos", &p->ignore_eos, &g, e))
        return -1;
    if ((v = json_get(body, "kv_transfer")) && v->type != JSON_NULL) {
        const char *to = NULL;
        size_t tol = 0;
        bool recv = false;
        if (srv_parse_xfer_id(v, "kv_transfer", "kv_transfer.id", &p->xfer_id, e))
            return -1;
        const json_value *sv = json_get(v, "send_to");
        if (sv && !json_as_str(sv, &to, &tol))
            return srv_fail(e, 400, INV, "kv_transfer.send_to",
                            "\"kv_transfer\".send_to must be a \"host:port\" string");
        if (srv_bool(v, "recv", &recv, &g, e)) {
            e->param = "kv_transfer.recv";
            return -1;
        }
        if ((to != NULL) == recv || (to && (tol == 0 || tol > 255)))
            return srv_fail(e, 400, INV, "kv_transfer",
                            "\"kv_transfer\" needs exactly one of \"send_to\" (a host:port) "
                            "or \"recv\": true");
        if (to && !(p->xfer_to = arena_strndup(a, to, tol)))
            return srv_fail(e, 500, "server_error", NULL, "out of memory");
        p->xfer_recv = recv;
    }
    if ((v = json_get(body, "logit_bias")) && v->type != JSON_NULL &&
        !(v->type == JSON_OBJECT && v->obj.n == 0))
        return srv_fail(e, 400, INV, "logit_bias", "\"logit_bias\" is not supported");
    if ((v = json_get(body, "response_format")) && v->type != JSON_NULL) {
        const char *t;
        size_t tl;
        if (v->type != JSON_OBJECT || !json_as_str(json_get(v, "type"), &t, &tl))
            return srv_fail(e, 400, INV, "response_format",
                            "\"response_format\" must be an object with a \"type\" string");
        bool json = (tl == 11 && !memcmp(t, "json_object", 11)) ||
                    (tl == 11 && !memcmp(t, "json_schema", 11));
        if (!json && !(tl == 4 && !memcmp(t, "text", 4)))
            return srv_fail(e, 400, INV, "response_format",
                            "response_format type '%.*s' is not supported; use \"text\", "
                            "\"json_object\" or \"json_schema\"",
                            (int)(tl > 50 ? 50 : tl), t);
        if (json)
            p->response_format = v; /* compiled last, by srv_constraint */
    }
    return 0;
}

/* Collapses a message's content to a string: a string stays, an array of text parts is joined
 * with newlines; other part types are refused. */
static int srv_content_string(arena *a, const json_value *msg, size_t idx, json_value **out,
                              srv_err *e) {
    const json_value *c = json_get(msg, "content");
    *out = NULL;
    if (!c || c->type == JSON_NULL || c->type == JSON_STRING)
        return 0;
    if (c->type != JSON_ARRAY)
        return srv_fail(e, 400, INV, "messages",
                        "messages[%zu].content must be a string or an "
                        "array of content parts",
                        idx);
    strbuf sb;
    strbuf_init(&sb);
    for (size_t i = 0; i < c->arr.n; i++) {
        const json_value *part = c->arr.items[i];
        const char *t, *txt;
        size_t tl, xl;
        if (part->type != JSON_OBJECT || !json_as_str(json_get(part, "type"), &t, &tl)) {
            strbuf_deinit(&sb);
            return srv_fail(e, 400, INV, "messages",
                            "messages[%zu].content[%zu] must be an object with a \"type\"", idx, i);
        }
        if (!(tl == 4 && !memcmp(t, "text", 4)) ||
            !json_as_str(json_get(part, "text"), &txt, &xl)) {
            strbuf_deinit(&sb);
            return srv_fail(e, 400, INV, "messages",
                            "messages[%zu].content[%zu]: only text parts are supported", idx, i);
        }
        if (i)
            strbuf_putc(&sb, '\n');
        strbuf_append(&sb, txt, xl);
    }
    *out = json_new_str(a, sb.data, sb.len);
    strbuf_deinit(&sb);
    return *out ? 0 : srv_fail(e, 500, "server_error", NULL, "out of memory");
}

/* Validates messages and returns a copy whose contents are strings. */
static int srv_messages(arena *a, const json_value *body, const json_value **out, srv_err *e) {
    const json_value *m = json_get(body, "messages");
    if (!m || m->type != JSON_ARRAY || m->arr.n == 0)
        return srv_fail(e, 400, INV, "messages", "\"messages\" must be a non-empty array");
    json_value *copy = json_new_arr(a);
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < m->arr.n; i++) {
        const json_value *msg = m->arr.items[i];
        const char *role;
        size_t rl;
        if (msg->type != JSON_OBJECT || !json_as_str(json_get(msg, "role"), &role, &rl))
            return srv_fail(e, 400, INV, "messages",
                            "messages[%zu] must be an object with a "
                            "\"role\" string",
                            i);
        bool ok = false;
        for (size_t r = 0; r < sizeof roles / sizeof *roles; r++)
            ok |= strlen(roles[r]) == rl && !memcmp(roles[r], role, rl);
        if (!ok)
            return srv_fail(e, 400, INV, "messages",
                            "messages[%zu].role '%.*s' is not one of "
                            "system, developer, user, assistant, tool",
                            i, (int)(rl > 30 ? 30 : rl), role);
        const json_value *tc = json_get(msg, "tool_calls");
        if (tc && tc->type != JSON_NULL && tc->type != JSON_ARRAY)
            return srv_fail(e, 400, INV, "messages", "messages[%zu].tool_calls must be an array",
                            i);
        json_value *content;
        if (srv_content_string(a, msg, i, &content, e))
            return -1;
        /* a clone (O(keys)) with the content replaced; the copy grows geometrically, so a
         * request's messages cost arena bytes linear in their number */
        json_value *mc = json_obj_clone(a, msg);
        if (!mc || json_arr_push(a, copy, mc))
            return srv_fail(e, 413, INV, "messages",
                            "out of memory copying messages[%zu]: the request is too large", i);
        for (size_t k = 0; k < mc->obj.n && content; k++)
            if (mc->obj.key_lens[k] == 7 && !memcmp(mc->obj.keys[k], "content", 7))
                mc->obj.vals[k] = content;
    }
    *out = copy;
    return 0;
}

static int srv_tools(const json_value *body, srv_params *p, srv_err *e) {
    const json_value *t = json_get(body, "tools");
    p->tool_choice = SRV_TOOLS_AUTO;
    p->parallel_tool_calls = true;
    bool g;
    if (srv_bool(body, "parallel_tool_calls", &p->parallel_tool_calls, &g, e))
        return -1;
    if (t && t->type != JSON_NULL) {
        if (t->type != JSON_ARRAY)
            return srv_fail(e, 400, INV, "tools", "\"tools\" must be an array");
        for (size_t i = 0; i < t->arr.n; i++) {
            const json_value *f = json_get(t->arr.items[i], "function");
            const char *ty, *nm;
            size_t tl, nl;
            if (!json_as_str(json_get(t->arr.items[i], "type"), &ty, &tl) || tl != 8 ||
                memcmp(ty, "function", 8) || !f || !json_as_str(json_get(f, "name"), &nm, &nl) ||
                !nl)
                return srv_fail(
                    e, 400, INV, "tools",
                    "tools[%zu] must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
            /* a NUL cannot be in a name the model writes and the parser reads back (they are
             * C strings there): such a tool could never be called, and a forced call would run
             * to its token limit and end in a parse error */
            if (memchr(nm, 0, nl))
                return srv_fail(e, 400, INV, "tools",
                                "tools[%zu].function.name contains a NUL character", i);
            const json_value *par = json_get(f, "parameters");
            if (par && par->type != JSON_OBJECT && par->type != JSON_NULL)
                return srv_fail(e, 400, INV, "tools",
                                "tools[%zu].function.parameters must be an "
                                "object (a JSON schema)",
                                i);
        }
        if (t->arr.n)
            p->tools = t;
    }
    const json_value *tc = json_get(body, "tool_choice");
    if (!tc || tc->type == JSON_NULL) {
        if (!p->tools)
            p->tool_choice = SRV_TOOLS_NONE;
        return 0;
    }
    const char *s;
    size_t sl;
    if (json_as_str(tc, &s, &sl)) {
        if (sl == 4 && !memcmp(s, "none", 4))
            p->tool_choice = SRV_TOOLS_NONE;
        else if (sl == 4 && !memcmp(s, "auto", 4))
            p->tool_choice = p->tools ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
        else if (sl == 8 && !memcmp(s, "required", 8))
            p->tool_choice = SRV_TOOLS_REQUIRED;
        else
            return srv_fail(e, 400, INV, "tool_choice",
                            "\"tool_choice\" '%.*s' must be none, auto, "
                            "required or an object naming a function",
                            (int)(sl > 30 ? 30 : sl), s);
    } else if (tc->type == JSON_OBJECT) {
        const json_value *f = json_get(tc, "function");
        if (!f || !json_as_str(json_get(f, "name"), &s, &sl))
            return srv_fail(e, 400, INV, "tool_choice",
                            "\"tool_choice\" object must be "
                            "{\"type\":\"function\",\"function\":{\"name\":...}}");
        if (memchr(s, 0, sl)) /* it is used as a C string from here on */
            return srv_fail(e, 400, INV, "tool_choice",
                            "\"tool_choice\".function.name contains a NUL character");
        p->tool_choice = SRV_TOOLS_NAMED;
        p->tool_choice_name = s;
    } else {
        return srv_fail(e, 400, INV, "tool_choice",
                        "\"tool_choice\" must be a string or an object");
    }
    if (p->tool_choice == SRV_TOOLS_REQUIRED || p->tool_choice == SRV_TOOLS_NAMED) {
        if (!p->tools)
            return srv_fail(e, 400, INV, "tool_choice", "\"tool_choice\" requires \"tools\"");
        if (p->tool_choice == SRV_TOOLS_NAMED) {
            bool found = false;
            for (size_t i = 0; i < p->tools->arr.n && !found; i++) {
                const char *nm;
                size_t nl;
                json_as_str(json_get(json_get(p->tools->arr.items[i], "function"), "name"), &nm,
                            &nl);
                found = nl == strlen(p->tool_choice_name) && !memcmp(nm, p->tool_choice_name, nl);
            }
            if (!found)
                return srv_fail(e, 400, INV, "tool_choice",
                                "\"tool_choice\" names function '%s', which is not in \"tools\"",
                                p->tool_choice_name);
        }
    }
    return 0;
}

static int srv_chat_prompt(server *s, arena *a, const json_value *body, srv_params *p, srv_err *e) {
    if (!s->sm.tmpl)
        return srv_fail(e, 400, INV, "messages",
                        "this model has no chat template (tokenizer.chat_template): start the "
                        "server with --chat-template NAME|FILE, or use /v1/completions");
    const json_value *msgs = NULL;
    if (srv_messages(a, body, &msgs, e) || srv_tools(body, p, e))
        return -1;
    p->messages = msgs;
    const json_value *extra = json_get(body, "chat_template_kwargs");
    if (extra && extra->type != JSON_OBJECT && extra->type != JSON_NULL)
        return srv_fail(e, 400, INV, "chat_template_kwargs",
                        "\"chat_template_kwargs\" must be an object");
    const json_value *vars;
    if (chat_source_merge_kwargs(a, s->sm.template_kwargs,
                                 extra && extra->type == JSON_OBJECT ? extra : NULL, &vars))
        return srv_fail(e, 500, "server_error", NULL, "%s", err_detail());
    chat_prompt_opts po = {.messages = msgs,
                           .tools = p->tools,
                           .extra = vars,
                           .add_generation_prompt = true,
                           .now_unix = clock_wall_s()};
    strbuf sb;
    strbuf_init(&sb);
    int rc = chat_prompt_render(s->sm.tmpl, s->sm.tok, a, &po, &sb);
    if (rc) {
        strbuf_deinit(&sb);
        return srv_fail(e, 400, INV, "messages", "the chat template refused the conversation: %s",
                        err_detail());
    }
    p->prompts = arena_alloc(a, sizeof *p->prompts);
    p->prompt_lens = arena_alloc(a, sizeof *p->prompt_lens);
    p->n_prompts = 1;
    rc = chat_prompt_tokenize(s->sm.tok, a, sb.data, sb.len, &p->prompts[0], &p->prompt_lens[0]);
    strbuf_deinit(&sb);
    if (rc)
        return srv_fail(e, rc == ERR_TOOLARGE ? 413 : 400, INV, "messages", "%s", err_detail());
    return 0;
}

static int srv_completion_prompt(server *s, arena *a, const json_value *body, srv_params *p,
                                 srv_err *e) {
    const json_value *v = json_get(body, "prompt");
    if (!v || v->type == JSON_NULL)
        return srv_fail(e, 400, INV, "prompt", "\"prompt\" is required");
    const json_value *items[SRV_MAX_CHOICES];
    size_t n = 0;
    bool token_ids = false;
    if (v->type == JSON_STRING) {
        items[n++] = v;
    } else if (v->type == JSON_ARRAY && v->arr.n > 0) {
        if (v->arr.items[0]->type == JSON_NUMBER) {
            items[n++] = v; /* one prompt of token ids */
            token_ids = true;
        } else {
            if (v->arr.n > SRV_MAX_CHOICES)
                return srv_fail(e, 400, INV, "prompt", "at most %d prompts per request",
                                SRV_MAX_CHOICES);
            for (size_t i = 0; i < v->arr.n; i++)
                items[n++] = v->arr.items[i];
        }
    } else {
        return srv_fail(e, 400, INV, "prompt",
                        "\"prompt\" must be a string, an array of strings or "
                        "an array of token ids");
    }
    if ((size_t)p->n * n > SRV_MAX_CHOICES)
        return srv_fail(e, 400, INV, "n", "n x prompts is %zu; at most %d choices per request",
                        (size_t)p->n * n, SRV_MAX_CHOICES);
    p->prompts = arena_alloc(a, n * sizeof *p->prompts);
    p->prompt_lens = arena_alloc(a, n * sizeof *p->prompt_lens);
    p->n_prompts = (int)n;
    int32_t nv = tokenizer_n_vocab(s->sm.tok);
    for (size_t i = 0; i < n; i++) {
        if (token_ids) {
            const json_value *arr = items[i];
            p->prompts[i] = arena_alloc(a, (arr->arr.n ? arr->arr.n : 1) * sizeof(int32_t));
            for (size_t k = 0; k < arr->arr.n; k++) {
                int64_t id;
                if (!json_as_int(arr->arr.items[k], &id) || id < 0 || id >= nv)
                    return srv_fail(e, 400, INV, "prompt",
                                    "\"prompt\"[%zu] is not a token id in "
                                    "0..%d",
                                    k, nv - 1);
                p->prompts[i][k] = (int32_t)id;
            }
            p->prompt_lens[i] = (int32_t)arr->arr.n;
            continue;
        }
        const char *t;
        size_t tl;
        if (!json_as_str(items[i], &t, &tl))
            return srv_fail(e, 400, INV, "prompt", "\"prompt\"[%zu] must be a string", i);
        if (srv_tokenize(s, a, t, tl, true, false, &p->prompts[i], &p->prompt_lens[i], "prompt", e))
            return -1;
    }
    bool g;
    if (srv_bool(body, "echo", &p->echo, &g, e))
        return -1;
    const json_value *sfx = json_get(body, "suffix");
    if (sfx && sfx->type != JSON_NULL)
        return srv_fail(e, 400, INV, "suffix", "\"suffix\" is not supported");
    int64_t bo;
    if (srv_int(body, "best_of", 1, SRV_MAX_CHOICES, &bo, &g, e))
        return -1;
    if (g && bo != p->n)
        return srv_fail(e, 400, INV, "best_of", "\"best_of\" other than n is not supported");
    return 0;
}

/* Compiles the request's constraint, if it has one, into p->constraint. */
static int srv_constraint(server *s, srv_params *p, srv_err *e) {
    bool call =
        p->chat && (p->tool_choice == SRV_TOOLS_REQUIRED || p->tool_choice == SRV_TOOLS_NAMED);
    if (!call && !p->response_format)
        return 0;
    if (call && s->tool_format == CHAT_TOOL_FORMAT_NONE)
        return srv_fail(e, 400, INV, "tool_choice",
                        "\"tool_choice\" %s cannot be enforced: this model's chat template has no "
                        "tool-call syntax the server knows; use \"auto\"",
                        p->tool_choice == SRV_TOOLS_REQUIRED ? "\"required\""
                                                             : "naming a function");
    if (!s->gvocab)
        return srv_fail(e, 500, "server_error", call ? "tool_choice" : "response_format",
                        "constrained decoding is unavailable on this server (its vocabulary tables "
                        "could not be built)");
    tool_grammar_spec spec = {.format = s->tool_format};
    if (call) {
        spec.tools = p->tools;
        spec.name = p->tool_choice == SRV_TOOLS_NAMED ? p->tool_choice_name : NULL;
    } else {
        spec.response_format = p->response_format;
        /* "auto": the model may still call a tool instead of answering in JSON */
        if (p->chat && p->tool_choice == SRV_TOOLS_AUTO && s->tool_format != CHAT_TOOL_FORMAT_NONE)
            spec.tools = p->tools;
    }
    int rc = tool_grammar_compile(&spec, NULL, s->gvocab, &p->constraint);
    if (rc == ERR_NOMEM)
        return srv_fail(e, 500, "server_error", NULL, "%s", err_detail());
    if (rc)
        return srv_fail(e, 400, INV,
                        call || !strncmp(err_detail(), "tools", 5) ? "tools" : "response_format",
                        "%s", err_detail());
    return 0;
}

int srv_parse_xfer_id(const json_value *v, const char *name, const char *id_param, uint64_t *id,
                      srv_err *e) {
    const char *t = NULL;
    size_t tl = 0;
    char hex[17];
    if (!v || v->type != JSON_OBJECT || !json_as_str(json_get(v, "id"), &t, &tl) || tl == 0 ||
        tl > 16)
        return srv_fail(e, 400, INV, name,
                        "\"%s\" must be an object with an \"id\" of 1 to 16 hex digits", name);
    memcpy(hex, t, tl);
    hex[tl] = 0;
    char *end = NULL;
    *id = strtoull(hex, &end, 16);
    if (*end || *id == 0 || !isxdigit((unsigned char)hex[0]))
        return srv_fail(e, 400, INV, id_param, "\"%s\".id '%s' is not a nonzero hex number",
                        name, hex);
    return 0;
}

int srv_parse_generate(server *s, arena *a, const json_value *body, bool chat, srv_params *p,
                       srv_err *e) {
    memset(p, 0, sizeof *p);
    p->chat = chat;
    if (srv_parse_common(s, a, body, chat, p, e))
        return -1;
    bool g;
    int64_t iv;
    if (chat) {
        if (srv_bool(body, "logprobs", &p->logprobs, &g, e))
            return -1;
        if (srv_int(body, "top_logprobs", 0, SAMPLE_MAX_LOGPROBS, &iv, &g, e))
            return -1;
        if (g && !p->logprobs)
            return srv_fail(e, 400, INV, "top_logprobs",
                            "\"top_logprobs\" requires \"logprobs\": true");
        p->top_logprobs = g ? (int32_t)iv : 0;
        if (srv_chat_prompt(s, a, body, p, e))
            return -1;
    } else {
        if (srv_int(body, "logprobs", 0, 5, &iv, &g, e))
            return -1;
        p->logprobs = g;
        p->top_logprobs = g ? (int32_t)iv : 0;
        if (srv_completion_prompt(s, a, body, p, e))
            return -1;
        if (p->echo && p->logprobs)
            return srv_fail(e, 400, INV, "echo", "\"echo\" with \"logprobs\" is not supported");
    }
    p->sp.n_logprobs = p->top_logprobs;
    for (int i = 0; i < p->n_prompts; i++) {
        int64_t len = p->prompt_lens[i];
        if (len == 0)
            return srv_fail(e, 400, INV, chat ? "messages" : "prompt", "the prompt is empty");
        if (len >= s->sm.n_ctx) {
            srv_fail(e, 400, INV, chat ? "messages" : "prompt",
                     "the prompt is %lld tokens; this model's context is %lld tokens",
                     (long long)len, (long long)s->sm.n_ctx);
            e->code = "context_length_exceeded";
            return -1;
        }
        if (p->max_tokens > 0 && len + p->max_tokens > s->sm.n_ctx) {
            srv_fail(e, 400, INV,
                     chat && json_get(body, "max_completion_tokens") ? "max_completion_tokens"
                                                                     : "max_tokens",
                     "the prompt (%lld tokens) plus max_tokens (%d) exceeds the context of %lld "
                     "tokens",
                     (long long)len, p->max_tokens, (long long)s->sm.n_ctx);
            e->code = "context_length_exceeded";
            return -1;
        }
    }
    if (sample_params_validate(&p->sp))
        return srv_fail(e, 400, INV, NULL, "%s", err_detail());
    return srv_constraint(s, p, e); /* last: nothing after it may fail */
}
