/* SPDX-License-Identifier: MIT */
/*
 * chat_template: the public face of the chat-template engine (chat_template.h): create = lex +
 * parse into the template's own arena; render = a fresh arena per call holding the render
 * context, scopes and values, then the top-level statements run with output collected in a
 * private buffer that is appended to the caller's only on success.
 *
 * Tool-call arguments: OpenAI clients send function.arguments as a JSON string; some templates
 * print it as is, others apply |tojson or iterate .items() and so need an object. Like llama.cpp,
 * create() renders a probe conversation twice (arguments as string, as object) and records
 * whether only the object form shows the arguments; CHAT_TOOL_ARGS_AUTO then parses string
 * arguments for those templates alone, and passes arguments as given (HF's behaviour) to all
 * others.
 */
#include "template/chat_template.h"

#include "base/err.h"
#include "base/utf8.h"
#include "template/ct_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chat_template {
    ct_tpl t;
};

static int render_impl(const chat_template *t, const chat_render_opts *opts, strbuf *out);

/* ---- tool-call argument normalisation -------------------------------------------------------- */

static json_value *obj_copy_set(arena *a, const json_value *obj, const char *key, json_value *val) {
    json_value *o = json_obj_clone(a, obj); /* O(keys), where a json_obj_set per key is O(keys^2) */
    if (!o)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < o->obj.n; i++)
        if (kl == o->obj.key_lens[i] && memcmp(o->obj.keys[i], key, kl) == 0)
            o->obj.vals[i] = val;
    return o;
}

/* Returns the converted arguments node, or NULL when it stays as it is (*err on failure). */
static json_value *convert_args(arena *a, const json_value *args, bool to_object, int *err) {
    if (to_object) {
        if (args->type != JSON_STRING)
            return NULL;
        json_value *parsed = NULL;
        if (json_parse(a, args->str.s, args->str.len, &parsed) || parsed->type != JSON_OBJECT) {
            err_clear();
            return NULL;
        }
        return parsed;
    }
    if (args->type != JSON_OBJECT && args->type != JSON_ARRAY)
        return NULL;
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, args);
    json_value *s = strbuf_failed(&sb) ? NULL : json_new_str(a, sb.data, sb.len);
    strbuf_deinit(&sb);
    if (!s)
        *err = err_set(ERR_NOMEM, "chat: out of memory converting tool-call arguments");
    return s;
}

int chat_messages_normalize_tool_args(arena *a, const json_value *messages, bool to_object,
                                      const json_value **out) {
    if (!a || !messages || !out || messages->type != JSON_ARRAY)
        return err_set(ERR_INVAL, "chat: messages must be a JSON array");
    json_value *arr = json_new_arr(a);
    if (!arr)
        return err_set(ERR_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < messages->arr.n; i++) {
        json_value *msg = messages->arr.items[i];
        const json_value *calls = json_get(msg, "tool_calls");
        json_value *new_msg = msg;
        if (calls && calls->type == JSON_ARRAY) {
            json_value *new_calls = json_new_arr(a);
            bool changed = false;
            if (!new_calls)
                return err_set(ERR_NOMEM, "chat: out of memory");
            for (size_t k = 0; k < calls->arr.n; k++) {
                json_value *call = calls->arr.items[k];
                const json_value *fn = json_get(call, "function");
                const json_value *args = fn ? json_get(fn, "arguments") : NULL;
                json_value *new_call = call;
                if (args) {
                    int err = 0;
                    json_value *conv = convert_args(a, args, to_object, &err);
                    if (err)
                        return err;
                    if (conv) {
                        json_value *new_fn = obj_copy_set(a, fn, "arguments", conv);
                        new_call = new_fn ? obj_copy_set(a, call, "function", new_fn) : NULL;
                        if (!new_call)
                            return err_set(ERR_NOMEM, "chat: out of memory");
                        changed = true;
                    }
                }
                if (json_arr_push(a, new_calls, new_call))
                    return err_set(ERR_NOMEM, "chat: out of memory");
            }
            if (changed && !(new_msg = obj_copy_set(a, msg, "tool_calls", new_calls)))
                return err_set(ERR_NOMEM, "chat: out of memory");
        }
        if (json_arr_push(a, arr, new_msg))
            return err_set(ERR_NOMEM, "chat: out of memory");
    }
    *out = arr;
    return 0;
}

/* ---- create / destroy ------------------------------------------------------------------------ */

/* Renders the probe conversation with the tool call's arguments as a string or an object into
 * out (empty when the template fails on it). */
static void probe_render(const chat_template *t, bool as_object, strbuf *out) {
    static const char probe[] =
        "[{\"role\":\"user\",\"content\":\"Hey\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call00001\","
        "\"type\":\"function\",\"function\":{\"name\":\"ipython\",\"arguments\":%s}}]}]";
    static const char args_obj[] = "{\"argument_needle\":\"print('Hello, World!')\"}";
    static const char args_str[] = "\"{\\\"argument_needle\\\":\\\"print('Hello, World!')\\\"}\"";
    char text[512];
    snprintf(text, sizeof text, probe, as_object ? args_obj : args_str);
    arena *a = arena_create(0, 1u << 20);
    if (!a)
        return;
    json_value *msgs = NULL;
    if (json_parse(a, text, strlen(text), &msgs) == 0) {
        chat_render_opts o = {.messages = msgs, .bos_token = "", .eos_token = ""};
        if (render_impl(t, &o, out) != 0)
            strbuf_reset(out);
    }
    arena_destroy(a);
    err_clear();
}

/* The template wants object arguments when the JSON-string form does not come out as JSON (the
 * template fails on it, or double-encodes it with |tojson) while the object form shows the
 * argument in any way (as JSON, or as Qwen3-Coder's <parameter=argument_needle>). */
static bool probe_wants_object_args(const chat_template *t) {
    strbuf s, o;
    strbuf_init(&s);
    strbuf_init(&o);
    probe_render(t, false, &s);
    probe_render(t, true, &o);
    bool str_as_json =
        strstr(s.data, "\"argument_needle\":") || strstr(s.data, "'argument_needle':");
    bool obj_shown = strstr(o.data, "argument_needle") != NULL;
    strbuf_deinit(&s);
    strbuf_deinit(&o);
    return !str_as_json && obj_shown;
}

int chat_template_create(const char *source, size_t len, chat_template **out) {
    if (!source || !out)
        return err_set(ERR_INVAL, "chat_template_create: NULL argument");
    *out = NULL;
    if (len > CT_MAX_SOURCE)
        return err_set(ERR_TOOLARGE, "template: source of %zu bytes exceeds %u MiB", len,
                       CT_MAX_SOURCE >> 20);
    size_t bad = 0;
    if (!utf8_valid(source, len, &bad))
        return err_set(ERR_FORMAT, "template: invalid UTF-8 at byte %zu", bad);
    chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(ERR_NOMEM, "template: out of memory");
    t->t.a = arena_create(0, 256u << 20);
    if (!t->t.a) {
        free(t);
        return err_set(ERR_NOMEM, "template: out of memory");
    }
    ct_tok *toks = NULL;
    size_t n_toks = 0;
    int rc = ct_lex(t->t.a, source, len, &toks, &n_toks);
    if (!rc)
        rc = ct_parse(&t->t, toks, n_toks);
    if (rc) {
        chat_template_destroy(t);
        return rc;
    }
    t->t.sym_loop = ct_sym_find(&t->t.syms, "loop", 4);
    t->t.object_args = probe_wants_object_args(t);
    *out = t;
    return 0;
}

void chat_template_destroy(chat_template *t) {
    if (!t)
        return;
    arena_destroy(t->t.a);
    free(t);
}

bool chat_template_wants_object_args(const chat_template *t) {
    return t && t->t.object_args;
}

/* ---- render ---------------------------------------------------------------------------------- */

static int ctx_set(ct_rt *rt, ct_scope *sc, const char *name, ct_val v) {
    int sym = ct_sym_find(&rt->t->syms, name, strlen(name));
    return sym < 0 ? 0 : ct_scope_set(rt, sc, sym, v);
}

static int render_impl(const chat_template *t, const chat_render_opts *opts, strbuf *out) {
    if (opts->messages && opts->messages->type != JSON_ARRAY)
        return err_set(ERR_INVAL, "chat: messages must be a JSON array, not %s",
                       json_type_name(opts->messages->type));
    if (opts->extra && opts->extra->type != JSON_OBJECT)
        return err_set(ERR_INVAL, "chat: extra variables must be a JSON object, not %s",
                       json_type_name(opts->extra->type));
    arena *a = arena_create(0, CT_MAX_ARENA);
    if (!a)
        return err_set(ERR_NOMEM, "chat: out of memory");
    ct_rt rt = {.a = a, .t = &t->t, .now_unix = opts->now_unix, .line = 1};
    rt.block_input = ct_undef_val();
    strbuf buf;
    strbuf_init(&buf);
    rt.out = &buf;
    int rc = 0;
    ct_scope *ctx = ct_scope_new(&rt, NULL);
    ct_scope *root = ctx ? ct_scope_new(&rt, ctx) : NULL;
    if (!root) {
        rc = err_set(ERR_NOMEM, "chat: out of memory");
        goto done;
    }
    const json_value *msgs = opts->messages;
    bool to_object = opts->tool_args == CHAT_TOOL_ARGS_OBJECT ||
                     (opts->tool_args == CHAT_TOOL_ARGS_AUTO && t->t.object_args);
    if (msgs && opts->tool_args != CHAT_TOOL_ARGS_AS_GIVEN &&
        (to_object || opts->tool_args == CHAT_TOOL_ARGS_STRING) &&
        (rc = chat_messages_normalize_tool_args(a, msgs, to_object, &msgs)))
        goto done;
    ct_val v;
    if (msgs) {
        if ((rc = ct_from_json(&rt, msgs, &v)))
            goto done;
    } else if ((rc = ct_list_new(&rt, 0, CT_SEQ_LIST, &v))) {
        goto done;
    }
    if ((rc = ctx_set(&rt, ctx, "messages", v)))
        goto done;
    if ((rc = ct_from_json(&rt, opts->tools, &v)) || (rc = ctx_set(&rt, ctx, "tools", v)) ||
        (rc = ctx_set(&rt, ctx, "documents", ct_none())) ||
        (rc = ctx_set(&rt, ctx, "add_generation_prompt", ct_bool(opts->add_generation_prompt))))
        goto done;
    if (opts->bos_token && (rc = ctx_set(&rt, ctx, "bos_token", ct_cstr(opts->bos_token))))
        goto done;
    if (opts->eos_token && (rc = ctx_set(&rt, ctx, "eos_token", ct_cstr(opts->eos_token))))
        goto done;
    if (opts->extra) {
        const json_value *ex = opts->extra;
        for (size_t i = 0; i < ex->obj.n; i++) {
            int sym = ct_sym_find(&t->t.syms, ex->obj.keys[i], ex->obj.key_lens[i]);
            if (sym < 0)
                continue;
            if ((rc = ct_from_json(&rt, ex->obj.vals[i], &v)) ||
                (rc = ct_scope_set(&rt, ctx, sym, v)))
                goto done;
        }
    }
    rc = ct_exec_body(&rt, t->t.root->kids, t->t.root->n_kids, root);
    if (!rc && strbuf_failed(&buf))
        rc = err_set(ERR_NOMEM, "chat: out of memory");
    if (!rc) {
        strbuf_append(out, buf.data, buf.len);
        if (strbuf_failed(out))
            rc = err_set(ERR_NOMEM, "chat: out of memory");
    }
done:
    strbuf_deinit(&buf);
    arena_destroy(a);
    return rc;
}

int chat_template_render(const chat_template *t, const chat_render_opts *opts, strbuf *out) {
    if (!t || !opts || !out)
        return err_set(ERR_INVAL, "chat_template_render: NULL argument");
    return render_impl(t, opts, out);
}
