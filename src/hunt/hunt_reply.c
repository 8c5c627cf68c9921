/* SPDX-License-Identifier: MIT */
/*
 * hunt_reply: parsing chat-completion responses, whole or streamed. See hunt_reply.h.
 *
 * The stream accumulator parses each SSE event's JSON into a scratch arena that is reset per
 * event, and appends what it keeps (content bytes, tool-call fragments, logprob tokens) to growing
 * buffers; hunt_stream_finish copies the result into the caller's arena once. Tool-call fragments
 * are keyed by their "index"; a chunk without an index continues the last call (some servers omit
 * it when there is only one).
 */
#include "hunt/hunt_reply.h"
#include "base/err.h"
#include "base/json.h"
#include "base/mem.h"
#include "base/strbuf.h"
#include "hunt/hunt_sse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HUNT_MAX_CALLS 64
#define HUNT_MAX_TOP   32

static char *hunt_dup(arena *a, const char *s, size_t n) {
    return arena_strndup(a, s ? s : "", s ? n : 0);
}

/* Quotes up to 200 bytes of a body for an error detail, non-printable bytes as '.'. */
static void hunt_quote(char *out, size_t cap, const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < cap && i < 200; i++)
        out[k++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '.';
    if (n > 200 && k + 4 < cap) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = 0;
}

/* An {"error": ...} body: OpenAI's {"error":{"message":...}}, or a bare string. */
static int hunt_server_error(const json_value *err) {
    const char *m;
    size_t ml;
    const json_value *msg = err->type == JSON_OBJECT ? json_get(err, "message") : err;
    if (json_as_str(msg, &m, &ml))
        return err_set(ERR_PROTOCOL, "server error: %.*s", (int)(ml > 300 ? 300 : ml), m);
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, err);
    int rc = err_set(ERR_PROTOCOL, "server error: %.300s", sb.data);
    strbuf_deinit(&sb);
    return rc;
}

/* Parses one logprobs entry {token, logprob, top_logprobs:[...]} into t (strings in a). */
static int hunt_parse_tok(arena *a, const json_value *e, hunt_tok *t) {
    const char *s = "";
    size_t n = 0;
    double lp = 0;
    memset(t, 0, sizeof *t);
    json_as_str(json_get(e, "token"), &s, &n);
    json_as_double(json_get(e, "logprob"), &lp);
    if (!(t->text = hunt_dup(a, s, n)))
        return ERR_NOMEM;
    t->len = n;
    t->logprob = lp;
    const json_value *top = json_get(e, "top_logprobs");
    if (top && top->type == JSON_ARRAY && top->arr.n) {
        size_t k = top->arr.n < HUNT_MAX_TOP ? top->arr.n : HUNT_MAX_TOP;
        t->top = arena_calloc(a, k, sizeof *t->top);
        if (!t->top)
            return ERR_NOMEM;
        for (size_t i = 0; i < k; i++) {
            const json_value *c = top->arr.items[i];
            s = "";
            n = 0;
            lp = 0;
            json_as_str(json_get(c, "token"), &s, &n);
            json_as_double(json_get(c, "logprob"), &lp);
            if (!(t->top[i].text = hunt_dup(a, s, n)))
                return ERR_NOMEM;
            t->top[i].len = n;
            t->top[i].logprob = lp;
        }
        t->n_top = (int)k;
    }
    return 0;
}

static void hunt_parse_usage(const json_value *root, hunt_reply *r) {
    const json_value *u = json_get(root, "usage");
    int64_t v;
    if (json_as_int(json_get(u, "prompt_tokens"), &v))
        r->prompt_tokens = v;
    if (json_as_int(json_get(u, "completion_tokens"), &v))
        r->completion_tokens = v;
}

/* A tool call's arguments: a string as the API says, or (some servers) an object, serialised. */
static const char *hunt_args_text(arena *a, const json_value *v, size_t *len) {
    const char *s;
    size_t n;
    if (json_as_str(v, &s, &n)) {
        *len = n;
        return hunt_dup(a, s, n);
    }
    if (!v || v->type == JSON_NULL) {
        *len = 0;
        return hunt_dup(a, "", 0);
    }
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, v);
    const char *out = strbuf_failed(&sb) ? NULL : hunt_dup(a, sb.data, sb.len);
    *len = sb.len;
    strbuf_deinit(&sb);
    return out;
}

static const char *hunt_str_or(arena *a, const json_value *v, const char *dflt) {
    const char *s;
    size_t n;
    if (json_as_str(v, &s, &n))
        return hunt_dup(a, s, n);
    return hunt_dup(a, dflt, strlen(dflt));
}

int hunt_reply_parse_json(arena *a, const char *body, size_t len, hunt_reply *out) {
    memset(out, 0, sizeof *out);
    out->prompt_tokens = out->completion_tokens = -1;
    out->content = "";
    out->finish = "";
    json_value *root;
    char q[256];
    if (json_parse(a, body, len, &root) != 0) {
        if (err_detail()[0] && strstr(err_detail(), "memory"))
            return ERR_NOMEM;
        hunt_quote(q, sizeof q, body, len);
        return err_set(ERR_PROTOCOL, "response is not JSON: '%s'", q);
    }
    const json_value *e = json_get(root, "error");
    if (e && e->type != JSON_NULL)
        return hunt_server_error(e);
    const json_value *ch = json_get(root, "choices");
    if (!ch || ch->type != JSON_ARRAY || ch->arr.n == 0) {
        hunt_quote(q, sizeof q, body, len);
        return err_set(ERR_PROTOCOL, "response has no choices: '%s'", q);
    }
    const json_value *c0 = ch->arr.items[0];
    const json_value *msg = json_get(c0, "message");
    if (!msg || msg->type != JSON_OBJECT) {
        hunt_quote(q, sizeof q, body, len);
        return err_set(ERR_PROTOCOL, "choices[0] has no message: '%s'", q);
    }
    const char *s;
    size_t n;
    if (json_as_str(json_get(msg, "content"), &s, &n)) {
        if (!(out->content = hunt_dup(a, s, n)))
            return ERR_NOMEM;
        out->content_len = n;
    } else {
        out->content_null = true;
    }
    const json_value *tc = json_get(msg, "tool_calls");
    if (tc && tc->type == JSON_ARRAY && tc->arr.n) {
        size_t k = tc->arr.n < HUNT_MAX_CALLS ? tc->arr.n : HUNT_MAX_CALLS;
        out->calls = arena_calloc(a, k, sizeof *out->calls);
        if (!out->calls)
            return ERR_NOMEM;
        for (size_t i = 0; i < k; i++) {
            const json_value *c = tc->arr.items[i];
            const json_value *fn = json_get(c, "function");
            hunt_call *hc = &out->calls[i];
            hc->id = hunt_str_or(a, json_get(c, "id"), "");
            hc->type = hunt_str_or(a, json_get(c, "type"), "function");
            hc->name = hunt_str_or(a, json_get(fn, "name"), "");
            hc->args = hunt_args_text(a, json_get(fn, "arguments"), &hc->args_len);
            if (!hc->id || !hc->type || !hc->name || !hc->args)
                return ERR_NOMEM;
        }
        out->n_calls = (int)k;
    }
    out->finish = hunt_str_or(a, json_get(c0, "finish_reason"), "");
    const json_value *lc = json_get(json_get(c0, "logprobs"), "content");
    if (lc && lc->type == JSON_ARRAY) {
        out->has_logprobs = true;
        if (lc->arr.n) {
            out->toks = arena_calloc(a, lc->arr.n, sizeof *out->toks);
            if (!out->toks)
                return ERR_NOMEM;
            for (size_t i = 0; i < lc->arr.n; i++)
                if (hunt_parse_tok(a, lc->arr.items[i], &out->toks[i]))
                    return ERR_NOMEM;
            out->n_toks = (int)lc->arr.n;
        }
    }
    hunt_parse_usage(root, out);
    if (!out->finish)
        return ERR_NOMEM;
    return 0;
}

/* ---- streaming ---- */

typedef struct hunt_scall {
    strbuf id, type, name, args;
    bool seen;
} hunt_scall;

struct hunt_stream {
    arena *out_arena;
    arena *scratch;    /* per-event JSON trees */
    arena *toks_arena; /* token strings, copied to out_arena at finish */
    hunt_sse sse;
    strbuf content;
    bool content_seen;
    hunt_scall calls[HUNT_MAX_CALLS];
    int n_calls;
    int last_index;
    strbuf finish;
    hunt_tok *toks;
    int n_toks;
    size_t cap_toks;
    bool has_logprobs;
    int64_t prompt_tokens, completion_tokens;
    char issue[512];
    bool have_issue;
    bool done;
    int n_chunks;
    int n_choice_chunks;
    int error; /* sticky */
};

static void hunt_stream_issue(hunt_stream *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void hunt_stream_issue(hunt_stream *s, const char *fmt, ...) {
    if (s->have_issue)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->issue, sizeof s->issue, fmt, ap);
    va_end(ap);
    s->have_issue = true;
}

static bool hunt_sb_eq(const strbuf *sb, const char *p, size_t n) {
    return sb->len == n && memcmp(sb->data, p, n) == 0;
}

/* One tool-call delta: {index, id, type, function:{name, arguments}}. */
static void hunt_stream_call(hunt_stream *s, const json_value *d) {
    int64_t idx;
    int i = s->last_index;
    if (json_as_int(json_get(d, "index"), &idx))
        i = (int)idx;
    if (i < 0 || i >= HUNT_MAX_CALLS) {
        hunt_stream_issue(s, "tool call delta with index %d out of range", i);
        return;
    }
    s->last_index = i;
    if (i >= s->n_calls)
        s->n_calls = i + 1;
    hunt_scall *c = &s->calls[i];
    bool first = !c->seen;
    c->seen = true;
    const char *p;
    size_t n;
    if (json_as_str(json_get(d, "id"), &p, &n) && n) {
        if (c->id.len && !hunt_sb_eq(&c->id, p, n))
            hunt_stream_issue(s, "tool_calls[%d]: id changed from '%.60s' to '%.*s' mid-stream", i,
                              c->id.data, (int)(n > 60 ? 60 : n), p);
        else if (!c->id.len) {
            for (int j = 0; j < s->n_calls; j++)
                if (j != i && hunt_sb_eq(&s->calls[j].id, p, n))
                    hunt_stream_issue(s, "tool_calls[%d] reuses the id '%.*s' of tool_calls[%d]", i,
                                      (int)(n > 60 ? 60 : n), p, j);
            strbuf_append(&c->id, p, n);
        }
    }
    if (json_as_str(json_get(d, "type"), &p, &n) && n) {
        if (c->type.len && !hunt_sb_eq(&c->type, p, n))
            hunt_stream_issue(s, "tool_calls[%d]: type changed from '%s' to '%.*s' mid-stream", i,
                              c->type.data, (int)(n > 60 ? 60 : n), p);
        else if (!c->type.len)
            strbuf_append(&c->type, p, n);
    }
    const json_value *fn = json_get(d, "function");
    if (json_as_str(json_get(fn, "name"), &p, &n) && n) {
        if (c->name.len && !hunt_sb_eq(&c->name, p, n))
            hunt_stream_issue(s, "tool_calls[%d]: name changed from '%.60s' to '%.*s' mid-stream",
                              i, c->name.data, (int)(n > 60 ? 60 : n), p);
        else if (!c->name.len) {
            if (!first && c->args.len)
                hunt_stream_issue(s, "tool_calls[%d]: name '%.*s' announced after its arguments", i,
                                  (int)(n > 60 ? 60 : n), p);
            strbuf_append(&c->name, p, n);
        }
    }
    const json_value *args = json_get(fn, "arguments");
    if (json_as_str(args, &p, &n))
        strbuf_append(&c->args, p, n);
    else if (args && args->type == JSON_OBJECT)
        json_write(&c->args, args);
}

static int hunt_stream_push_tok(hunt_stream *s, const json_value *e) {
    if (mem_grow((void **)&s->toks, &s->cap_toks, (size_t)s->n_toks + 1, sizeof *s->toks))
        return ERR_NOMEM;
    if (hunt_parse_tok(s->toks_arena, e, &s->toks[s->n_toks]))
        return ERR_NOMEM;
    s->n_toks++;
    return 0;
}

static int hunt_stream_event(void *ud, const char *event, const char *data, size_t len) {
    hunt_stream *s = ud;
    (void)event;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        s->done = true;
        return 0;
    }
    arena_reset(s->scratch);
    json_value *root;
    char q[256];
    if (json_parse(s->scratch, data, len, &root) != 0) {
        hunt_quote(q, sizeof q, data, len);
        return err_set(ERR_PROTOCOL, "stream chunk %d is not JSON: '%s'", s->n_chunks + 1, q);
    }
    s->n_chunks++;
    const json_value *e = json_get(root, "error");
    if (e && e->type != JSON_NULL)
        return hunt_server_error(e);
    const json_value *u = json_get(root, "usage");
    if (u && u->type == JSON_OBJECT) {
        hunt_reply tmp;
        tmp.prompt_tokens = s->prompt_tokens;
        tmp.completion_tokens = s->completion_tokens;
        hunt_parse_usage(root, &tmp);
        s->prompt_tokens = tmp.prompt_tokens;
        s->completion_tokens = tmp.completion_tokens;
    }
    const json_value *ch = json_get(root, "choices");
    if (!ch || ch->type != JSON_ARRAY || ch->arr.n == 0)
        return 0; /* usage-only or keep-alive chunk */
    s->n_choice_chunks++;
    const json_value *c0 = ch->arr.items[0];
    const json_value *d = json_get(c0, "delta");
    const char *p;
    size_t n;
    if (json_as_str(json_get(d, "content"), &p, &n)) {
        strbuf_append(&s->content, p, n);
        s->content_seen = true;
    }
    const json_value *tc = json_get(d, "tool_calls");
    if (tc && tc->type == JSON_ARRAY)
        for (size_t i = 0; i < tc->arr.n; i++)
            hunt_stream_call(s, tc->arr.items[i]);
    if (json_as_str(json_get(c0, "finish_reason"), &p, &n) && n) {
        strbuf_reset(&s->finish);
        strbuf_append(&s->finish, p, n);
    }
    const json_value *lc = json_get(json_get(c0, "logprobs"), "content");
    if (lc && lc->type == JSON_ARRAY) {
        s->has_logprobs = true;
        for (size_t i = 0; i < lc->arr.n; i++)
            if (hunt_stream_push_tok(s, lc->arr.items[i]))
                return err_set(ERR_NOMEM, "out of memory buffering logprobs");
    }
    if (strbuf_failed(&s->content) || strbuf_failed(&s->finish))
        return err_set(ERR_NOMEM, "out of memory buffering a stream");
    return 0;
}

int hunt_stream_create(arena *a, hunt_stream **out) {
    hunt_stream *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "out of memory creating a stream parser");
    s->out_arena = a;
    s->scratch = arena_create(16 * 1024, 0);
    s->toks_arena = arena_create(16 * 1024, 0);
    if (!s->scratch || !s->toks_arena) {
        arena_destroy(s->scratch);
        arena_destroy(s->toks_arena);
        free(s);
        return err_set(ERR_NOMEM, "out of memory creating a stream parser");
    }
    hunt_sse_init(&s->sse, hunt_stream_event, s, 0);
    strbuf_init(&s->content);
    strbuf_init(&s->finish);
    for (int i = 0; i < HUNT_MAX_CALLS; i++) {
        strbuf_init(&s->calls[i].id);
        strbuf_init(&s->calls[i].type);
        strbuf_init(&s->calls[i].name);
        strbuf_init(&s->calls[i].args);
    }
    s->prompt_tokens = s->completion_tokens = -1;
    *out = s;
    return 0;
}

void hunt_stream_destroy(hunt_stream *s) {
    if (!s)
        return;
    hunt_sse_deinit(&s->sse);
    strbuf_deinit(&s->content);
    strbuf_deinit(&s->finish);
    for (int i = 0; i < HUNT_MAX_CALLS; i++) {
        strbuf_deinit(&s->calls[i].id);
        strbuf_deinit(&s->calls[i].type);
        strbuf_deinit(&s->calls[i].name);
        strbuf_deinit(&s->calls[i].args);
    }
    free(s->toks);
    arena_destroy(s->scratch);
    arena_destroy(s->toks_arena);
    free(s);
}

int hunt_stream_feed(hunt_stream *s, const char *bytes, size_t n) {
    if (s->error)
        return s->error;
    int rc = hunt_sse_feed(&s->sse, bytes, n);
    if (rc)
        s->error = rc;
    return rc;
}

bool hunt_stream_done(const hunt_stream *s) {
    return s->done;
}

/* Deep-copies n tokens (their texts and top candidates) into a as *out. 0 or ERR_NOMEM. */
static int hunt_toks_copy(arena *a, const hunt_tok *src, int n, hunt_tok **out) {
    hunt_tok *d = arena_calloc(a, (size_t)n, sizeof *d);
    if (!d)
        return ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const hunt_tok *t = &src[i];
        d[i] = *t;
        if (!(d[i].text = hunt_dup(a, t->text, t->len)))
            return ERR_NOMEM;
        if (t->n_top && !(d[i].top = arena_calloc(a, (size_t)t->n_top, sizeof *d[i].top)))
            return ERR_NOMEM;
        for (int k = 0; k < t->n_top; k++) {
            d[i].top[k] = t->top[k];
            if (!(d[i].top[k].text = hunt_dup(a, t->top[k].text, t->top[k].len)))
                return ERR_NOMEM;
        }
    }
    *out = d;
    return 0;
}

int hunt_stream_finish(hunt_stream *s, hunt_reply *out) {
    memset(out, 0, sizeof *out);
    out->content = "";
    out->finish = "";
    if (s->error)
        return s->error;
    int rc = hunt_sse_end(&s->sse);
    if (rc)
        return s->error = rc;
    if (s->n_choice_chunks == 0)
        return err_set(ERR_PROTOCOL, "stream ended after %d chunks without any choice",
                       s->n_chunks);
    arena *a = s->out_arena;
    out->content = hunt_dup(a, s->content.data, s->content.len);
    out->content_len = s->content.len;
    out->content_null = !s->content_seen;
    out->finish = hunt_dup(a, s->finish.data, s->finish.len);
    if (!out->content || !out->finish)
        return ERR_NOMEM;
    if (s->n_calls) {
        out->calls = arena_calloc(a, (size_t)s->n_calls, sizeof *out->calls);
        if (!out->calls)
            return ERR_NOMEM;
        for (int i = 0; i < s->n_calls; i++) {
            hunt_scall *c = &s->calls[i];
            hunt_call *hc = &out->calls[i];
            if (!c->seen)
                hunt_stream_issue(s, "tool_calls[%d] never announced (indices skip it)", i);
            hc->id = hunt_dup(a, c->id.data, c->id.len);
            hc->type = c->type.len ? hunt_dup(a, c->type.data, c->type.len) : "function";
            hc->name = hunt_dup(a, c->name.data, c->name.len);
            hc->args = hunt_dup(a, c->args.data, c->args.len);
            hc->args_len = c->args.len;
            if (!hc->id || !hc->type || !hc->name || !hc->args)
                return ERR_NOMEM;
        }
        out->n_calls = s->n_calls;
    }
    out->has_logprobs = s->has_logprobs;
    if (s->n_toks && hunt_toks_copy(a, s->toks, s->n_toks, &out->toks))
        return ERR_NOMEM;
    out->n_toks = s->n_toks;
    out->prompt_tokens = s->prompt_tokens;
    out->completion_tokens = s->completion_tokens;
    out->n_chunks = s->n_chunks;
    if (s->have_issue && !(out->stream_issue = hunt_dup(a, s->issue, strlen(s->issue))))
        return ERR_NOMEM;
    return 0;
}

bool hunt_reply_same(const hunt_reply *a, const hunt_reply *b) {
    if (a->content_len != b->content_len || memcmp(a->content, b->content, a->content_len))
        return false;
    if (a->n_calls != b->n_calls || strcmp(a->finish, b->finish))
        return false;
    for (int i = 0; i < a->n_calls; i++) {
        const hunt_call *x = &a->calls[i], *y = &b->calls[i];
        if (strcmp(x->name, y->name) || strcmp(x->type, y->type) || x->args_len != y->args_len ||
            memcmp(x->args, y->args, x->args_len))
            return false;
    }
    return true;
}

int hunt_reply_copy(arena *a, const hunt_reply *src, hunt_reply *dst) {
    *dst = *src;
    dst->content = hunt_dup(a, src->content, src->content_len);
    dst->finish = hunt_dup(a, src->finish, strlen(src->finish));
    if (!dst->content || !dst->finish)
        return ERR_NOMEM;
    if (src->stream_issue &&
        !(dst->stream_issue = hunt_dup(a, src->stream_issue, strlen(src->stream_issue))))
        return ERR_NOMEM;
    if (src->n_calls) {
        dst->calls = arena_calloc(a, (size_t)src->n_calls, sizeof *dst->calls);
        if (!dst->calls)
            return ERR_NOMEM;
        for (int i = 0; i < src->n_calls; i++) {
            const hunt_call *s = &src->calls[i];
            hunt_call *d = &dst->calls[i];
            d->id = hunt_dup(a, s->id, strlen(s->id));
            d->type = hunt_dup(a, s->type, strlen(s->type));
            d->name = hunt_dup(a, s->name, strlen(s->name));
            d->args = hunt_dup(a, s->args, s->args_len);
            d->args_len = s->args_len;
            if (!d->id || !d->type || !d->name || !d->args)
                return ERR_NOMEM;
        }
    }
    if (src->n_toks && hunt_toks_copy(a, src->toks, src->n_toks, &dst->toks))
        return ERR_NOMEM;
    return 0;
}
