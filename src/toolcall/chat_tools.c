/* SPDX-License-Identifier: MIT */
/*
 * chat_tools: see chat_tools.h. This file holds the parser object and the
 * generic scanner outside calls; detection and names are tc_registry.c's, and each family's
 * call regions live in its tc_<family>.c (chat_tools_int.h explains how they plug in).
 *
 * The parser is a three-state machine over one pending buffer, the text not yet released:
 *   OUTSIDE  (LLAMA3 first: while the lead rule is undecided, everything is held.) The earliest
 *            complete marker in pending ends the content before it; an opening marker starts a
 *            region, any other marker is an error. Without a complete marker, everything up to
 *            the longest suffix that is a proper prefix of a marker is released. Since no marker
 *            is a substring of another, a marker can only be missed by holding too little if it
 *            extends past the end of the buffer, which the suffix rule covers: the release is
 *            the same whatever the chunking.
 *   INSIDE   the format's region function consumes the call region (calls are appended as they
 *            complete); when it is over the parser is OUTSIDE again.
 *   FAILED   a region did not parse: nothing more is parsed or released; finish reports the
 *            recorded error.
 * Every decision depends only on the bytes seen, never on where the chunks ended, so content,
 * calls and errors are the same for any split of the same text (the tests feed every split).
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"
#include "base/mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool chat_tool_param_is_string(const json_value *schema) {
    if (!schema || schema->type != JSON_OBJECT)
        return false;
    const json_value *t = json_get(schema, "type");
    if (t && t->type == JSON_STRING)
        return !strcmp(t->str.s, "string");
    if (t && t->type == JSON_ARRAY) {
        bool str = false;
        for (size_t i = 0; i < t->arr.n; i++) {
            const json_value *e = t->arr.items[i];
            if (e->type != JSON_STRING || (strcmp(e->str.s, "string") && strcmp(e->str.s, "null")))
                return false;
            str |= !strcmp(e->str.s, "string");
        }
        return str;
    }
    if (t)
        return false;
    const json_value *c = json_get(schema, "const");
    if (c)
        return c->type == JSON_STRING;
    const json_value *e = json_get(schema, "enum");
    if (!e || e->type != JSON_ARRAY || e->arr.n == 0)
        return false;
    for (size_t i = 0; i < e->arr.n; i++)
        if (e->arr.items[i]->type != JSON_STRING)
            return false;
    return true;
}

/* ---- helpers ---- */

void ctp_consume(chat_tool_parser *p, size_t n) {
    if (n > p->pending.len)
        n = p->pending.len;
    memmove(p->pending.data, p->pending.data + n, p->pending.len - n);
    p->pending.len -= n;
    if (p->pending.data)
        p->pending.data[p->pending.len] = 0;
}

int ctp_starts(const char *s, size_t n, const char *lit) {
    size_t l = strlen(lit);
    if (n >= l)
        return memcmp(s, lit, l) == 0 ? 1 : -1;
    return memcmp(s, lit, n) == 0 ? 0 : -1;
}

static bool ctp_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t ctp_skip_ws(const char *s, size_t n, size_t from) {
    while (from < n && ctp_ws(s[from]))
        from++;
    return from;
}

size_t ctp_trim(const char *s, size_t n, const char **b) {
    size_t i = ctp_skip_ws(s, n, 0);
    while (n > i && ctp_ws(s[n - 1]))
        n--;
    *b = s + i;
    return n - i;
}

size_t ctp_find(const char *s, size_t n, size_t from, const char *lit) {
    if (from >= n)
        return n;
    const char *at = memmem(s + from, n - from, lit, strlen(lit));
    return at ? (size_t)(at - s) : n;
}

int ctp_span_scan(ctp_span *sp, const char *t, size_t n, size_t *end) {
    if (!sp->started) {
        if (n == 0)
            return 0;
        if (t[0] != '{' && t[0] != '[' && t[0] != '"')
            return -1;
        sp->started = true;
        sp->pos = 0;
        sp->depth = 0;
        sp->in_str = sp->esc = false;
    }
    for (size_t i = sp->pos; i < n; i++) {
        char c = t[i];
        if (sp->in_str) {
            if (sp->esc)
                sp->esc = false;
            else if (c == '\\')
                sp->esc = true;
            else if (c == '"') {
                sp->in_str = false;
                if (sp->depth == 0) {
                    *end = i + 1;
                    sp->pos = i + 1;
                    return 1;
                }
            }
            continue;
        }
        if (c == '"') {
            sp->in_str = true;
        } else if (c == '{' || c == '[') {
            sp->depth++;
        } else if (c == '}' || c == ']') {
            if (--sp->depth <= 0) {
                sp->pos = i + 1;
                if (sp->depth < 0)
                    return -1;
                *end = i + 1;
                return 1;
            }
        }
    }
    sp->pos = n;
    return 0;
}

const char *ctp_excerpt(char *buf, size_t cap, const char *s, size_t n) {
    size_t k = 0, i = 0;
    for (; i < n && i < 48 && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
            k += (size_t)snprintf(buf + k, cap - k, c == '\n' ? "\\n" : "\\x%02x", c);
        else
            buf[k++] = (char)c;
    }
    if (i < n && k + 4 < cap) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k < cap ? k : cap - 1] = 0;
    return buf;
}

const char *ctp_byte(char *buf, char c) {
    unsigned char u = (unsigned char)c;
    if (u > ' ' && u < 0x7f && u != '\'' && u != '\\')
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "\\x%02x", u);
    return buf;
}

int ctp_fail(chat_tool_parser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    return err_set(ERR_FORMAT, "%s", p->error);
}

/* A name as the XML forms write it: non-empty, at most 256 bytes, no markup or whitespace. */
bool ctp_name_ok(const char *s, size_t n) {
    if (n == 0 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<' || s[i] == '>' || s[i] == '"' || (unsigned char)s[i] <= ' ')
            return false;
    return true;
}

/* Sets key k[0..kl) of obj to the typed raw value. */
int ctp_set_raw(chat_tool_parser *p, arena *a, json_value *obj, const char *tool, const char *k,
                size_t kl, const char *v, size_t vl, int is_string) {
    char *key = arena_strndup(a, k, kl);
    json_value *val;
    if (!key)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    int rc = ctp_raw_value(p, a, tool, key, v, vl, is_string, &val);
    if (!rc && json_obj_set(a, obj, key, val))
        rc = err_set(ERR_NOMEM, "tool parser: out of memory");
    return rc;
}

arena *ctp_arena(void) {
    arena *a = arena_create(0, 1 << 24);
    if (!a)
        err_set(ERR_NOMEM, "tool parser: out of memory");
    return a;
}

int ctp_add_call(chat_tool_parser *p, const char *name, size_t nl, const json_value *args) {
    if (nl == 0)
        return ctp_fail(p, "a tool call has an empty function name");
    for (size_t i = 0; i < nl; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
            char b[8];
            return ctp_fail(p, "the function name \"%.*s\" contains the control byte %s",
                            (int)(i > 64 ? 64 : i), name, ctp_byte(b, name[i]));
        }
    if (mem_grow((void **)&p->calls, &p->cap_calls, (size_t)p->n_calls + 1, sizeof *p->calls))
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    strbuf sb;
    strbuf_init(&sb);
    if (args)
        json_write(&sb, args);
    else
        strbuf_puts(&sb, "{}");
    char *nm = strndup(name, nl);
    char *ar = strbuf_take(&sb, NULL);
    if (!nm || !ar) {
        free(nm);
        free(ar);
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    }
    p->calls[p->n_calls].name = nm;
    p->calls[p->n_calls].arguments = ar;
    p->n_calls++;
    p->region_calls++;
    return 0;
}

/* The object held by an arguments value: an object, or a JSON string of one. */
static int ctp_args_of(chat_tool_parser *p, arena *a, const char *name, size_t nl,
                       const json_value *v, const json_value **out) {
    if (v->type == JSON_OBJECT) {
        *out = v;
        return 0;
    }
    if (v->type == JSON_STRING) {
        json_value *inner;
        int rc = json_parse(a, v->str.s, v->str.len, &inner);
        if (rc == ERR_NOMEM)
            return rc;
        if (!rc && inner->type == JSON_OBJECT) {
            *out = inner;
            return 0;
        }
        return ctp_fail(p, "tool call \"%.*s\": the arguments string is not a JSON object",
                        (int)(nl > 64 ? 64 : nl), name);
    }
    return ctp_fail(p, "tool call \"%.*s\": arguments must be an object, not %s",
                    (int)(nl > 64 ? 64 : nl), name, json_type_name(v->type));
}

int ctp_parse_args(chat_tool_parser *p, arena *a, const char *name, size_t nl, const char *text,
                   size_t n, const json_value **out) {
    json_value *v;
    int rc = json_parse(a, text, n, &v);
    if (rc == ERR_NOMEM)
        return rc;
    if (rc) {
        char ex[256];
        return ctp_fail(p, "tool call \"%.*s\": arguments are not valid JSON (%s): \"%s\"",
                        (int)(nl > 64 ? 64 : nl), name, err_detail(),
                        ctp_excerpt(ex, sizeof ex, text, n));
    }
    return ctp_args_of(p, a, name, nl, v, out);
}

int ctp_add_json_call(chat_tool_parser *p, arena *a, const json_value *v, const char *what) {
    const char *name;
    size_t nl;
    if (v->type != JSON_OBJECT || !json_as_str(json_get(v, "name"), &name, &nl) || nl == 0)
        return ctp_fail(p, "%s: a tool call needs a JSON object with a \"name\" string", what);
    const json_value *args = json_get(v, "arguments");
    if (!args)
        args = json_get(v, "parameters");
    const json_value *obj = NULL;
    if (args) {
        int rc = ctp_args_of(p, a, name, nl, args, &obj);
        if (rc)
            return rc;
    }
    return ctp_add_call(p, name, nl, obj);
}

int ctp_parse_json(chat_tool_parser *p, arena *a, const char *text, size_t n, const char *what,
                   json_value **v) {
    int rc = json_parse(a, text, n, v);
    if (rc && rc != ERR_NOMEM) {
        char ex[256];
        rc = ctp_fail(p, "%s is not valid JSON (%s): \"%s\"", what, err_detail(),
                      ctp_excerpt(ex, sizeof ex, text, n));
    }
    return rc;
}

int ctp_add_json_text(chat_tool_parser *p, const char *text, size_t n, const char *what) {
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    json_value *v;
    int rc = ctp_parse_json(p, a, text, n, what, &v);
    if (!rc)
        rc = ctp_add_json_call(p, a, v, what);
    arena_destroy(a);
    return rc;
}

int ctp_add_args_text(chat_tool_parser *p, const char *name, size_t nl, const char *text,
                      size_t n) {
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    const json_value *args;
    int rc = ctp_parse_args(p, a, name, nl, text, n, &args);
    if (!rc)
        rc = ctp_add_call(p, name, nl, args);
    arena_destroy(a);
    return rc;
}

/* The schema of parameter key of tool `tool` among the tools given to set_tools, or NULL. */
static const json_value *ctp_param_schema(const chat_tool_parser *p, const char *tool,
                                          const char *key) {
    if (!p->tools || p->tools->type != JSON_ARRAY)
        return NULL;
    for (size_t i = 0; i < p->tools->arr.n; i++) {
        const json_value *fn = json_get(p->tools->arr.items[i], "function");
        const char *nm;
        size_t nl;
        if (!json_as_str(json_get(fn, "name"), &nm, &nl) || strlen(tool) != nl ||
            memcmp(nm, tool, nl))
            continue;
        return json_get(json_get(json_get(fn, "parameters"), "properties"), key);
    }
    return NULL;
}

int ctp_raw_value(chat_tool_parser *p, arena *a, const char *tool, const char *key, const char *raw,
                  size_t n, int is_string, json_value **out) {
    /* strict: marked as JSON by the text itself; typed: a schema says it is not a string;
     * guess: no schema, take it as JSON only when it is a non-string JSON value */
    enum {
        RAW,
        STRICT,
        TYPED,
        GUESS
    } mode = is_string == 1   ? RAW
             : is_string == 0 ? STRICT
                              : GUESS;
    if (mode == GUESS) {
        const json_value *s = ctp_param_schema(p, tool, key);
        if (s)
            mode = chat_tool_param_is_string(s) ? RAW : TYPED;
    }
    if (mode != RAW) {
        const char *b;
        size_t tn = ctp_trim(raw, n, &b);
        json_value *v;
        int rc = json_parse(a, b, tn, &v);
        if (rc == ERR_NOMEM)
            return rc;
        if (!rc && !(mode == GUESS && v->type == JSON_STRING)) {
            *out = v;
            return 0;
        }
        if (mode == STRICT) {
            char ex[256];
            return ctp_fail(p,
                            "tool call \"%s\": parameter \"%s\" is marked as JSON but is not "
                            "valid JSON: \"%s\"",
                            tool, key, ctp_excerpt(ex, sizeof ex, raw, n));
        }
    }
    *out = json_new_str(a, raw, n);
    return *out ? 0 : err_set(ERR_NOMEM, "tool parser: out of memory");
}

/* ---- the parser ---- */

int chat_tool_parser_create(chat_tool_format f, chat_tool_parser **out) {
    *out = NULL;
    if ((unsigned)f >= CHAT_TOOL_FORMAT_COUNT)
        return err_set(ERR_INVAL, "tool parser: format %d out of range", (int)f);
    chat_tool_parser *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    p->f = f;
    p->syn = tc_syntax_of(f);
    p->lead = p->syn && p->syn->lead;
    strbuf_init(&p->pending);
    *out = p;
    return 0;
}

void chat_tool_parser_destroy(chat_tool_parser *p) {
    if (!p)
        return;
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    strbuf_deinit(&p->pending);
    arena_destroy(p->tools_a);
    free(p);
}

int chat_tool_parser_set_tools(chat_tool_parser *p, const json_value *tools) {
    arena_destroy(p->tools_a);
    p->tools_a = NULL;
    p->tools = NULL;
    if (!tools)
        return 0;
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, tools);
    json_value *copy = NULL;
    int rc = strbuf_failed(&sb) ? ERR_NOMEM : 0;
    if (!rc && !(p->tools_a = arena_create(0, 0)))
        rc = ERR_NOMEM;
    if (!rc)
        rc = json_parse(p->tools_a, sb.data, sb.len, &copy);
    strbuf_deinit(&sb);
    if (rc) {
        arena_destroy(p->tools_a);
        p->tools_a = NULL;
        return err_set(ERR_NOMEM, "tool parser: out of memory copying the tools");
    }
    p->tools = copy;
    return 0;
}

int chat_tool_parser_n_calls(const chat_tool_parser *p) {
    return p->n_calls;
}

const chat_tool_call *chat_tool_parser_call(const chat_tool_parser *p, int i) {
    return i >= 0 && i < p->n_calls ? &p->calls[i] : NULL;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of a marker of p. */
static size_t ctp_partial(const chat_tool_parser *p, const char *s, size_t n) {
    size_t hold = 0;
    for (int k = 0; k < p->syn->n_markers; k++) {
        const char *m = p->syn->markers[k];
        for (size_t h = strlen(m) - 1; h > hold; h--)
            if (h <= n && memcmp(s + n - h, m, h) == 0) {
                hold = h;
                break;
            }
    }
    return hold;
}

/* Releases the first n bytes of pending as content and updates the content's tail. */
static void ctp_release(chat_tool_parser *p, strbuf *content, size_t n) {
    if (n == 0)
        return;
    strbuf_append(content, p->pending.data, n);
    char buf[2 * sizeof p->tail];
    size_t keep = n < sizeof p->tail - 1 ? n : sizeof p->tail - 1;
    size_t old = p->tail_len + keep <= sizeof buf ? p->tail_len : 0;
    memcpy(buf, p->tail, old);
    memcpy(buf + old, p->pending.data + n - keep, keep);
    size_t t = ctp_partial(p, buf, old + keep);
    if (t >= sizeof p->tail)
        t = 0;
    memcpy(p->tail, buf + old + keep - t, t);
    p->tail_len = t;
    ctp_consume(p, n);
}

/* After a call region, the content may end with the start of a marker (text released right
 * before the region's opening marker); text after the region must not complete it, or the
 * content would show markup. Returns 0 (no such marker), 1 (pending could still complete one)
 * or ERR_FORMAT. */
static int ctp_split_marker(chat_tool_parser *p, bool eof) {
    bool need = false;
    for (int k = 0; k < p->syn->n_markers; k++) {
        const char *m = p->syn->markers[k];
        size_t ml = strlen(m);
        for (size_t h = ml - 1; h > 0; h--) {
            if (h > p->tail_len || memcmp(p->tail + p->tail_len - h, m, h))
                continue;
            int r = ctp_starts(p->pending.data, p->pending.len, m + h);
            if (r == 1)
                return ctp_fail(p,
                                "'%s' is split around a tool call (%s format): \"%.*s\" came "
                                "before the call and the rest after it",
                                m, chat_tool_format_name(p->f), (int)h, m);
            need |= r == 0;
        }
    }
    return need && !eof ? 1 : 0;
}

static void ctp_enter(chat_tool_parser *p) {
    p->st = CTP_INSIDE;
    p->sub = 0;
    p->scan = 0;
    p->r0 = p->r1 = 0;
    p->region_calls = 0;
    memset(&p->span, 0, sizeof p->span);
}

/* Outside a call: releases content; returns CTP_NEED (the rest is held), CTP_REGION (a region
 * starts at pending[0]) or an error. */
static int ctp_outside(chat_tool_parser *p, strbuf *content, bool eof) {
    const ctp_syntax *s = p->syn;
    if (p->tail_len) {
        int r = ctp_split_marker(p, eof);
        if (r)
            return r > 0 ? CTP_NEED : r;
    }
    if (p->lead) {
        size_t skip = 0, sep = 0;
        int r = s->lead(p, eof, &skip, &sep);
        if (r < 0)
            return r;
        if (r == CTP_NEED && !eof)
            return CTP_NEED;
        if (r == CTP_REGION) {
            ctp_release(p, content, skip);
            ctp_enter(p);
            p->r0 = sep;
            return CTP_REGION;
        }
        p->lead = false;
    }
    const char *d = p->pending.data;
    size_t n = p->pending.len, best = n;
    int which = -1;
    for (int k = 0; k < s->n_markers; k++) {
        size_t at = ctp_find(d, n, 0, s->markers[k]);
        if (at < best) {
            best = at;
            which = k;
        }
    }
    if (which >= 0) {
        ctp_release(p, content, best);
        if (which < s->n_open) {
            ctp_enter(p);
            return CTP_REGION;
        }
        return ctp_fail(p, "'%s' outside a tool call (%s format)", s->markers[which],
                        chat_tool_format_name(p->f));
    }
    ctp_release(p, content, n - (eof ? 0 : ctp_partial(p, d, n)));
    return CTP_NEED;
}

/* 1 when s[0..n) starts with lit or, lit2 not NULL, with lit2 (*which: the one it starts with);
 * else 0 when more text could make it so, -1 when it cannot. */
static int ctp_starts2(const char *s, size_t n, const char *lit, const char *lit2,
                       const char **which) {
    int a = ctp_starts(s, n, lit), b = lit2 ? ctp_starts(s, n, lit2) : -1;
    *which = a == 1 ? lit : lit2;
    return a == 1 || b == 1 ? 1 : a == 0 || b == 0 ? 0 : -1;
}

/* The region function of the formats whose calls come in sections (ctp_section). */
static int ctp_section_region(chat_tool_parser *p, bool eof, const ctp_section *sec) {
    char ex[256];
    const char *m;
    if (p->sub == 0) {
        if (ctp_starts2(p->pending.data, p->pending.len, sec->begin, sec->begin2, &m) == 1)
            ctp_consume(p, strlen(m));
        p->sub = 1;
    }
    for (;;) {
        const char *s = p->pending.data;
        size_t n = p->pending.len, i = ctp_skip_ws(s, n, 0);
        if (i == n) {
            if (!eof)
                return CTP_NEED;
            if (p->region_calls > 0) {
                ctp_consume(p, n);
                return CTP_DONE;
            }
            return ctp_fail(p, "a %s tool-call section was opened but holds no complete call",
                            sec->family);
        }
        int c = ctp_starts(s + i, n - i, sec->call_begin);
        if (c == 1) {
            size_t from = i + strlen(sec->call_begin), el = strlen(sec->call_end);
            size_t at = ctp_find(s, n, p->scan > from ? p->scan : from, sec->call_end);
            if (at == n) {
                p->scan = n - from >= el ? n - el + 1 : from;
                if (eof)
                    return ctp_fail(p, "a %s tool call was started but %s never came: \"%s\"",
                                    sec->family, sec->call_end,
                                    ctp_excerpt(ex, sizeof ex, s + i, n - i));
                return CTP_NEED;
            }
            int rc = sec->body(p, s + from, at - from);
            if (rc)
                return rc;
            ctp_consume(p, at + el);
            p->scan = 0;
            continue;
        }
        int e = ctp_starts2(s + i, n - i, sec->end, sec->end2, &m);
        if (e == 1) {
            ctp_consume(p, i + strlen(m));
            return CTP_DONE;
        }
        if ((c == 0 || e == 0) && !eof)
            return CTP_NEED;
        return ctp_fail(p, "unexpected %s in a %s tool-call section (expected %s or %s)",
                        ctp_byte(ex, s[i]), sec->family, sec->call_begin, sec->end);
    }
}

/* Runs the machine over pending. */
static int ctp_run(chat_tool_parser *p, strbuf *content, bool eof) {
    for (;;) {
        int r;
        if (p->st == CTP_FAILED)
            return 0;
        if (p->st == CTP_OUTSIDE) {
            r = ctp_outside(p, content, eof);
            if (r == CTP_NEED)
                return strbuf_failed(content) ? err_set(ERR_NOMEM, "tool parser: out of memory")
                                              : 0;
        } else {
            r = p->syn->region ? p->syn->region(p, content, eof)
                               : ctp_section_region(p, eof, p->syn->section);
            if (r == CTP_NEED && eof) {
                char ex[256];
                r = ctp_fail(p, "a tool call was started but not completed: \"%s\"",
                             ctp_excerpt(ex, sizeof ex, p->pending.data, p->pending.len));
            }
            if (r == CTP_NEED)
                return 0;
            if (r == CTP_DONE || r == CTP_TEXT) {
                p->st = CTP_OUTSIDE;
                p->after_call = p->after_call || r == CTP_DONE;
                p->lead = r == CTP_DONE && p->syn->lead;
            }
        }
        if (r < 0) {
            if (r != ERR_FORMAT)
                snprintf(p->error, sizeof p->error, "%s", err_detail());
            p->st = CTP_FAILED;
            p->fail_rc = r;
            return r;
        }
    }
}

int chat_tool_parser_feed(chat_tool_parser *p, const char *text, size_t n, strbuf *content) {
    if (!p->syn) {
        strbuf_append(content, text, n);
        return strbuf_failed(content) ? err_set(ERR_NOMEM, "tool parser: out of memory") : 0;
    }
    if (p->st == CTP_FAILED)
        return 0;
    strbuf_append(&p->pending, text, n);
    if (strbuf_failed(&p->pending)) {
        snprintf(p->error, sizeof p->error, "tool parser: out of memory");
        p->st = CTP_FAILED;
        p->fail_rc = ERR_NOMEM;
        return err_set(ERR_NOMEM, "%s", p->error);
    }
    return ctp_run(p, content, false);
}

int chat_tool_parser_finish(chat_tool_parser *p, strbuf *content) {
    if (!p->syn)
        return 0;
    if (p->st != CTP_FAILED) {
        int rc = ctp_run(p, content, true);
        if (rc && p->st != CTP_FAILED)
            return rc;
    }
    if (p->st == CTP_FAILED)
        return err_set(p->fail_rc, "%s", p->error);
    ctp_release(p, content, p->pending.len);
    return strbuf_failed(content) ? err_set(ERR_NOMEM, "tool parser: out of memory") : 0;
}
