/* SPDX-License-Identifier: MIT */
/*
 * server: lifecycle, libmicrohttpd wiring, request bodies and limits, authentication, routing, and
 * the small routes (health, models, metrics, flags, tokenize, detokenize). The generation routes
 * are in srv_request.c (parsing) and srv_gen.c (running and formatting).
 *
 * libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a handler may
 * block while its request generates; it polls the client socket on every pump of its wait, so a
 * client that goes away is noticed within one engine step or SRV_POLL_MS, whichever comes first,
 * and its request cancelled (srv_peer_state says what a poll means; srv_gen.c how a half-closed
 * client is told from a gone one). We create and bind the listening socket ourselves
 * (SO_REUSEADDR, port 0 supported) and hand it to the daemon.
 *
 * Before the body: the handler's first call for a request sees its headers only, and whatever
 * would refuse the request anyway is answered there, so the body is never read (srv_first_call):
 * a missing or wrong API key (401; "Expect: 100-continue" then gets no 100), a Content-Length
 * over --max-body (413), a body the global budget has no room for (503 with Retry-After). The
 * budget, --max-body-total, bounds the bytes of bodies being received by all connections
 * together: a body of declared length takes its bytes at the first call, a chunked one as they
 * arrive, and they are given back once the body is parsed (the JSON tree holds copies) or the
 * request ends. So the memory bodies can take before authentication is nil, and after it at most
 * the budget, whatever the number of connections.
 * Per-request memory is one arena, freed when the request completes.
 */
#include "server/srv_int.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/version.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct srv_conn {
    server *s;
    strbuf body;
    int64_t body_held; /* bytes this request counts in s->body_bytes */
    bool too_large;    /* over --max-body: the rest of the body is discarded, then 413 */
    bool over_budget;  /* over --max-body-total: the rest is discarded, then 503 */
    bool answered;
    bool http11; /* the request line said HTTP/1.1 */
    int64_t t_arrival_ns;
} srv_conn;

int srv_fail(srv_err *e, int status, const char *type, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

enum srv_peer srv_peer_state(int fd) {
    if (fd < 0)
        return SRV_PEER_OK;
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0)
        return SRV_PEER_OK;
    /* POLLHUP on TCP: both directions are shut (a reset, or our side closed too); POLLERR: a
     * pending error (ECONNRESET after a reset) */
    if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL))
        return SRV_PEER_GONE;
    if (pfd.revents & POLLIN) {
        char c;
        ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r > 0)
            return SRV_PEER_OK; /* a pipelined request: still there */
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return SRV_PEER_GONE;
        if (r == 0)
            return SRV_PEER_EOF;
    }
    return pfd.revents & POLLRDHUP ? SRV_PEER_EOF : SRV_PEER_OK;
}

static enum MHD_Result srv_send(struct MHD_Connection *c, unsigned status, const char *type,
                                const char *body, size_t len, const char *h1, const char *v1) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (h1)
        MHD_add_response_header(r, h1, v1);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result srv_send_json(struct MHD_Connection *c, unsigned status, const strbuf *sb) {
    return srv_send(c, status, "application/json", sb->data, sb->len, NULL, NULL);
}

static enum MHD_Result srv_send_error_h(struct MHD_Connection *c, const srv_err *e, const char *h1,
                                        const char *v1) {
    strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "{\"error\":{\"message\":");
    strbuf_json_str(&sb, e->message, strlen(e->message), false);
    strbuf_puts(&sb, ",\"type\":");
    strbuf_json_str(&sb, e->type, strlen(e->type), false);
    strbuf_puts(&sb, ",\"param\":");
    if (e->param)
        strbuf_json_str(&sb, e->param, strlen(e->param), false);
    else
        strbuf_puts(&sb, "null");
    strbuf_puts(&sb, ",\"code\":");
    if (e->code)
        strbuf_json_str(&sb, e->code, strlen(e->code), false);
    else
        strbuf_printf(&sb, "%d", e->status);
    strbuf_puts(&sb, "}}");
    enum MHD_Result rc =
        srv_send(c, (unsigned)e->status, "application/json", sb.data, sb.len, h1, v1);
    strbuf_deinit(&sb);
    return rc;
}

static enum MHD_Result srv_send_error(struct MHD_Connection *c, const srv_err *e) {
    return srv_send_error_h(c, e, NULL, NULL);
}

/* Constant-time comparison of the bearer token (no early exit on the first differing byte; the
 * length is compared the same way). */
static bool srv_auth_ok(const server *s, struct MHD_Connection *c) {
    if (!s->api_key || !s->api_key[0])
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return false;
    const char *tok = h + 7;
    size_t a = strlen(tok), b = strlen(s->api_key);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)((i < a ? (unsigned char)tok[i] : 0) ^ (unsigned char)s->api_key[i]);
    return diff == 0;
}

/* ---- request bodies ---- */

/* Takes n bytes of the body budget (--max-body-total) for cc; false, taking nothing, when they do
 * not fit. */
static bool srv_body_take(server *s, srv_conn *cc, int64_t n) {
    int64_t cur = atomic_load(&s->body_bytes), cap = (int64_t)s->o.max_body_total_bytes;
    do {
        if (n > cap - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&s->body_bytes, &cur, cur + n));
    cc->body_held += n;
    return true;
}

/* Frees cc's body and gives its bytes back to the budget: once it is parsed (the tree holds
 * copies), when it is refused, or when the request ends. */
static void srv_body_release(server *s, srv_conn *cc) {
    strbuf_deinit(&cc->body);
    if (cc->body_held) {
        atomic_fetch_sub(&s->body_bytes, cc->body_held);
        cc->body_held = 0;
    }
}

/* The request's Content-Length: -1 when it has none (a chunked body) or it is not a plain
 * decimal number (then the body is counted as it arrives, as a chunked one is); INT64_MAX when it
 * is larger. */
static int64_t srv_content_length(struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!v)
        return -1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v < '0' || *v > '9')
        return -1;
    int64_t n = 0;
    for (; *v >= '0' && *v <= '9'; v++)
        n = n > (INT64_MAX - 9) / 10 ? INT64_MAX : n * 10 + (*v - '0');
    while (*v == ' ' || *v == '\t')
        v++;
    return *v ? -1 : n;
}

static enum MHD_Result srv_refuse_unauthorized(server *s, struct MHD_Connection *c) {
    srv_err e;
    srv_metrics_reject(s->metrics, SRV_REJECT_UNAUTHORIZED);
    srv_fail(&e, 401, "authentication_error", NULL, "missing or invalid API key");
    return srv_send_error_h(c, &e, "WWW-Authenticate", "Bearer");
}

static enum MHD_Result srv_refuse_too_large(server *s, struct MHD_Connection *c) {
    srv_err e;
    srv_metrics_reject(s->metrics, SRV_REJECT_TOO_LARGE);
    srv_fail(&e, 413, "invalid_request_error", NULL,
             "request body larger than --max-body (%zu MiB)", s->o.max_body_bytes >> 20);
    e.code = "request_too_large";
    return srv_send_error_h(c, &e, NULL, NULL);
}

static enum MHD_Result srv_refuse_over_budget(server *s, struct MHD_Connection *c) {
    srv_err e;
    srv_metrics_reject(s->metrics, SRV_REJECT_BODY_BUDGET);
    srv_fail(&e, 503, "server_error", NULL,
             "the server is receiving as many request bodies as --max-body-total (%zu MiB) "
             "allows; retry later",
             s->o.max_body_total_bytes >> 20);
    e.code = "body_budget_exhausted";
    return srv_send_error_h(c, &e, "Retry-After", "1");
}

/* The first call of a request: its headers are read, none of its body. What would refuse the
 * request anyway is decided here and answered at once, so that its body is never read: a missing
 * or wrong API key (401), a declared body larger than --max-body (413), one the body budget has
 * no room for now (503). A response queued now makes libmicrohttpd skip the body: it answers no
 * "Expect: 100-continue" with 100, sends the response and closes the connection. A body of
 * declared length takes its bytes of the budget now, so what the headers announced fits when it
 * comes; a chunked one takes them as they arrive (srv_handler). */
static enum MHD_Result srv_first_call(server *s, struct MHD_Connection *c, srv_conn *cc,
                                      const char *url, const char *method) {
    if ((!strcmp(method, "GET") || !strcmp(method, "HEAD")) && !strcmp(url, "/health"))
        return MHD_YES; /* open to all: load balancers probe it without a key */
    if (!srv_auth_ok(s, c)) {
        cc->answered = true;
        return srv_refuse_unauthorized(s, c);
    }
    int64_t len = srv_content_length(c);
    if (len > 0 && (uint64_t)len > s->o.max_body_bytes) {
        cc->answered = true;
        return srv_refuse_too_large(s, c);
    }
    if (len > 0 && !srv_body_take(s, cc, len)) {
        cc->answered = true;
        return srv_refuse_over_budget(s, c);
    }
    return MHD_YES;
}

/* ---- small routes ---- */

static enum MHD_Result srv_route_health(server *s, struct MHD_Connection *c) {
    if (!atomic_load(&s->ready))
        return srv_send(c, 503, "application/json", "{\"status\":\"loading\"}", 20, NULL, NULL);
    if (atomic_load(&s->draining))
        return srv_send(c, 503, "application/json", "{\"status\":\"draining\"}", 21, NULL, NULL);
    return srv_send(c, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, NULL);
}

static enum MHD_Result srv_route_models(server *s, struct MHD_Connection *c) {
    strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "{\"object\":\"list\",\"data\":[");
    int n = s->sm.names ? s->sm.n_names : 1;
    for (int i = 0; i < n; i++) {
        const char *name = s->sm.names ? s->sm.names[i] : s->sm.name;
        strbuf_puts(&sb, i ? ",{\"id\":" : "{\"id\":");
        strbuf_json_str(&sb, name, strlen(name), false);
        strbuf_printf(&sb,
                      ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"verity\","
                      "\"max_model_len\":%lld}",
                      (long long)clock_wall_s(), (long long)s->sm.n_ctx);
    }
    strbuf_puts(&sb, "]}");
    enum MHD_Result rc = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return rc;
}

static enum MHD_Result srv_route_metrics(server *s, struct MHD_Connection *c) {
    strbuf sb;
    strbuf_init(&sb);
    eloop_stats st;
    memset(&st, 0, sizeof st);
    if (s->sm.loop)
        engine_loop_stats(s->sm.loop, &st);
    srv_metrics_write(s->metrics, &st, s->sm.name ? s->sm.name : "", atomic_load(&s->body_bytes),
                      &sb);
    enum MHD_Result rc =
        srv_send(c, 200, "text/plain; version=0.0.4; charset=utf-8", sb.data, sb.len, NULL, NULL);
    strbuf_deinit(&sb);
    return rc;
}

static enum MHD_Result srv_route_flags(struct MHD_Connection *c) {
    strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < FLAG_COUNT; i++) {
        const flag_info *f = flags_get(i);
        const char *shown = f->secret ? (f->value[0] ? "(set)" : "") : f->value;
        strbuf_puts(&sb, i ? ",{\"name\":" : "{\"name\":");
        strbuf_json_str(&sb, f->name, strlen(f->name), false);
        strbuf_puts(&sb, ",\"env\":");
        strbuf_json_str(&sb, f->env, strlen(f->env), false);
        strbuf_puts(&sb, ",\"default\":");
        strbuf_json_str(&sb, f->def, strlen(f->def), false);
        strbuf_puts(&sb, ",\"value\":");
        strbuf_json_str(&sb, shown, strlen(shown), false);
        strbuf_puts(&sb, ",\"description\":");
        strbuf_json_str(&sb, f->desc, strlen(f->desc), false);
        strbuf_putc(&sb, '}');
    }
    strbuf_puts(&sb, "]}");
    enum MHD_Result rc = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return rc;
}

/* POST /admin/pause, /admin/resume, /admin/step (only with --admin-api): hold the engine between
 * steps, release it, or run N steps of a held engine ({"steps":N}, default 1). Each answers once
 * the engine is in the state asked for, so a client can build a state (a full queue, a batch of
 * N, a request holding KV) without racing the engine. */
static enum MHD_Result srv_route_admin(server *s, struct MHD_Connection *c, srv_conn *cc,
                                       const char *url) {
    srv_err e;
    strbuf sb;
    strbuf_init(&sb);
    if (!strcmp(url, "/admin/pause")) {
        engine_loop_pause(s->sm.loop);
        strbuf_puts(&sb, "{\"paused\":true}");
    } else if (!strcmp(url, "/admin/resume")) {
        engine_loop_resume(s->sm.loop);
        strbuf_puts(&sb, "{\"paused\":false}");
    } else {
        int64_t n = 1, taken = 0;
        arena *a = arena_create(4096, 1 << 20);
        json_value *body = NULL;
        const json_value *v;
        int rc = !a             ? ERR_NOMEM
                 : cc->body.len ? json_parse(a, cc->body.data, cc->body.len, &body)
                                : 0;
        srv_body_release(s, cc);
        if (rc == 0 && body && body->type != JSON_OBJECT)
            rc = ERR_INVAL;
        if (rc == 0 && body && (v = json_get(body, "steps")) && (!json_as_int(v, &n) || n < 1))
            rc = ERR_INVAL;
        arena_destroy(a);
        if (rc) {
            strbuf_deinit(&sb);
            srv_fail(&e, 400, "invalid_request_error", "steps",
                     "/admin/step takes a JSON object {\"steps\": N} with N a positive integer");
            return srv_send_error(c, &e);
        }
        if (engine_loop_step(s->sm.loop, n, &taken)) {
            strbuf_deinit(&sb);
            srv_fail(&e, 409, "invalid_request_error", NULL,
                     "/admin/step needs a paused engine (POST /admin/pause first)");
            return srv_send_error(c, &e);
        }
        strbuf_printf(&sb, "{\"steps\":%lld}", (long long)taken);
    }
    enum MHD_Result r = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return r;
}

static enum MHD_Result srv_route_tokenize(server *s, struct MHD_Connection *c,
                                          const json_value *body) {
    srv_err e;
    const char *text;
    size_t len;
    const json_value *v = json_get(body, "prompt");
    if (!v)
        v = json_get(body, "content");
    if (!json_as_str(v, &text, &len)) {
        srv_fail(&e, 400, "invalid_request_error", "prompt",
                 "\"prompt\" (or \"content\") must be a string");
        return srv_send_error(c, &e);
    }
    bool add_special = true, parse_special = false;
    const json_value *as = json_get(body, "add_special_tokens");
    if (as && !json_as_bool(as, &add_special)) {
        srv_fail(&e, 400, "invalid_request_error", "add_special_tokens",
                 "\"add_special_tokens\" must be a boolean");
        return srv_send_error(c, &e);
    }
    const json_value *ps = json_get(body, "parse_special");
    if (ps && !json_as_bool(ps, &parse_special)) {
        srv_fail(&e, 400, "invalid_request_error", "parse_special",
                 "\"parse_special\" must be a boolean");
        return srv_send_error(c, &e);
    }
    size_t cap = tokenizer_max_tokens(len), n = 0;
    int32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    int rc = ids ? tokenizer_encode(s->sm.tok, text, len, add_special, parse_special, ids, cap, &n)
                 : ERR_NOMEM;
    if (rc) {
        free(ids);
        srv_fail(&e, rc == ERR_NOMEM ? 500 : 400, "invalid_request_error", "prompt", "%s",
                 err_detail());
        return srv_send_error(c, &e);
    }
    strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++)
        strbuf_printf(&sb, i ? ",%d" : "%d", ids[i]);
    strbuf_printf(&sb, "],\"count\":%zu,\"max_model_len\":%lld}", n, (long long)s->sm.n_ctx);
    free(ids);
    enum MHD_Result r = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return r;
}

static enum MHD_Result srv_route_detokenize(server *s, struct MHD_Connection *c,
                                            const json_value *body) {
    srv_err e;
    const json_value *v = json_get(body, "tokens");
    if (!v || v->type != JSON_ARRAY) {
        srv_fail(&e, 400, "invalid_request_error", "tokens",
                 "\"tokens\" must be an array of token ids");
        return srv_send_error(c, &e);
    }
    int32_t *ids = malloc((v->arr.n ? v->arr.n : 1) * sizeof *ids);
    if (!ids) {
        srv_fail(&e, 500, "server_error", NULL, "out of memory");
        return srv_send_error(c, &e);
    }
    int32_t nv = tokenizer_n_vocab(s->sm.tok);
    for (size_t i = 0; i < v->arr.n; i++) {
        int64_t id;
        if (!json_as_int(v->arr.items[i], &id) || id < 0 || id >= nv) {
            free(ids);
            srv_fail(&e, 400, "invalid_request_error", "tokens",
                     "\"tokens\"[%zu] is not a token id in 0..%d", i, nv - 1);
            return srv_send_error(c, &e);
        }
        ids[i] = (int32_t)id;
    }
    strbuf text, sb;
    strbuf_init(&text);
    strbuf_init(&sb);
    tokenizer_decode(s->sm.tok, ids, v->arr.n, false, &text);
    free(ids);
    strbuf_puts(&sb, "{\"prompt\":");
    strbuf_json_str(&sb, text.data, text.len, false);
    strbuf_putc(&sb, '}');
    enum MHD_Result r = srv_send_json(c, 200, &sb);
    strbuf_deinit(&text);
    strbuf_deinit(&sb);
    return r;
}

/* ---- generation routes ---- */

static enum MHD_Result srv_route_generate(server *s, struct MHD_Connection *c, srv_conn *cc,
                                          arena *a, const json_value *body, bool chat) {
    srv_err e;
    srv_params p;
    if (srv_parse_generate(s, a, body, chat, &p, &e) != 0) {
        srv_metrics_reject(s->metrics, e.code && !strcmp(e.code, "context_length_exceeded")
                                           ? SRV_REJECT_TOO_LONG
                                           : SRV_REJECT_INVALID);
        return srv_send_error(c, &e);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    srv_gen *g = srv_gen_start(s, &p, fd, cc->http11, cc->t_arrival_ns, &e);
    if (!g) {
        if (e.status == 429) {
            srv_metrics_reject(s->metrics, SRV_REJECT_QUEUE_FULL);
            return srv_send_error_h(c, &e, "Retry-After", "1");
        }
        if (e.status == 400)
            srv_metrics_reject(s->metrics, SRV_REJECT_INVALID);
        return srv_send_error(c, &e);
    }
    if (p.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16 * 1024, srv_gen_stream_read, g, srv_gen_free);
        if (!r) {
            srv_gen_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    strbuf sb;
    strbuf_init(&sb);
    int rc = srv_gen_complete(g, &sb, &e);
    srv_gen_free(g);
    enum MHD_Result res;
    if (rc == ERR_CANCELLED)
        res = MHD_NO; /* the client is gone: close */
    else if (rc)
        res = srv_send_error_h(c, &e, e.status == 503 ? "Retry-After" : NULL, "1");
    else
        res = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return res;
}

static enum MHD_Result srv_dispatch(server *s, struct MHD_Connection *c, srv_conn *cc,
                                    const char *url, const char *method) {
    srv_err e;
    /* HEAD is GET without the body: libmicrohttpd sends the headers (Content-Length included)
     * of the response queued for it and drops the body */
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/health"))
        return srv_route_health(s, c);
    /* the API key was checked on the headers (srv_first_call) */
    if (cc->too_large)
        return srv_refuse_too_large(s, c);
    if (cc->over_budget)
        return srv_refuse_over_budget(s, c);
    if (!atomic_load(&s->ready)) {
        srv_metrics_reject(s->metrics, SRV_REJECT_LOADING);
        srv_fail(&e, 503, "server_error", NULL, "the model is loading");
        return srv_send_error_h(c, &e, "Retry-After", "1");
    }
    if (get && !strcmp(url, "/metrics"))
        return srv_route_metrics(s, c);
    /* before the drain check: a drained server's held engine must still be releasable */
    if (s->o.admin_api && !strncmp(url, "/admin/", 7) &&
        (!strcmp(url + 7, "pause") || !strcmp(url + 7, "resume") || !strcmp(url + 7, "step"))) {
        if (!post) {
            srv_fail(&e, 405, "invalid_request_error", NULL, "%s needs POST, not %s", url, method);
            return srv_send_error_h(c, &e, "Allow", "POST");
        }
        return srv_route_admin(s, c, cc, url);
    }
    if (atomic_load(&s->draining)) {
        srv_metrics_reject(s->metrics, SRV_REJECT_DRAINING);
        srv_fail(&e, 503, "server_error", NULL, "the server is shutting down");
        return srv_send_error(c, &e);
    }
    if (get && !strcmp(url, "/v1/models"))
        return srv_route_models(s, c);
    if (get && !strcmp(url, "/v1/flags"))
        return srv_route_flags(c);
    bool known = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions") ||
                 !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize");
    if (!known) {
        srv_fail(&e, 404, "invalid_request_error", NULL, "no route %s %s", method, url);
        return srv_send_error(c, &e);
    }
    if (!post) {
        srv_fail(&e, 405, "invalid_request_error", NULL, "%s needs POST, not %s", url, method);
        return srv_send_error_h(c, &e, "Allow", "POST");
    }
    arena *a = arena_create(64 * 1024, 64 * 1024 * 1024);
    json_value *body;
    int rc = a ? json_parse(a, cc->body.data, cc->body.len, &body) : ERR_NOMEM;
    srv_body_release(s, cc); /* the tree holds copies; the budget is for bodies being received */
    enum MHD_Result res;
    if (rc) {
        srv_metrics_reject(s->metrics, SRV_REJECT_INVALID);
        srv_fail(&e, 400, "invalid_request_error", NULL, "request body is not valid JSON: %s",
                 err_detail());
        res = srv_send_error(c, &e);
    } else if (body->type != JSON_OBJECT) {
        srv_metrics_reject(s->metrics, SRV_REJECT_INVALID);
        srv_fail(&e, 400, "invalid_request_error", NULL, "request body must be a JSON object");
        res = srv_send_error(c, &e);
    } else if (!strcmp(url, "/tokenize")) {
        res = srv_route_tokenize(s, c, body);
    } else if (!strcmp(url, "/detokenize")) {
        res = srv_route_detokenize(s, c, body);
    } else {
        res = srv_route_generate(s, c, cc, a, body, !strcmp(url, "/v1/chat/completions"));
    }
    arena_destroy(a);
    return res;
}

static enum MHD_Result srv_handler(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_size, void **con_cls) {
    server *s = cls;
    srv_conn *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc)
            return MHD_NO;
        cc->s = s;
        cc->t_arrival_ns = clock_now_ns();
        cc->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        strbuf_init(&cc->body);
        *con_cls = cc;
        atomic_fetch_add(&s->active, 1);
        return srv_first_call(s, c, cc, url, method);
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cc->answered || cc->too_large || cc->over_budget)
            return MHD_YES; /* refused: the rest is discarded as it comes */
        if (cc->body.len + n > s->o.max_body_bytes) {
            cc->too_large = true;
            srv_body_release(s, cc);
            return MHD_YES;
        }
        /* a body of declared length took its bytes at the first call; a chunked one takes them
         * now, as they arrive */
        int64_t need = (int64_t)(cc->body.len + n) - cc->body_held;
        if (need > 0 && !srv_body_take(s, cc, need)) {
            cc->over_budget = true;
            srv_body_release(s, cc);
            return MHD_YES;
        }
        strbuf_append(&cc->body, upload_data, n);
        if (strbuf_failed(&cc->body)) {
            cc->too_large = true;
            srv_body_release(s, cc);
        }
        return MHD_YES;
    }
    if (cc->answered)
        return MHD_YES;
    cc->answered = true;
    return srv_dispatch(s, c, cc, url, method);
}

static void srv_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    server *s = cls;
    srv_conn *cc = *con_cls;
    if (!cc)
        return;
    srv_body_release(s, cc);
    free(cc);
    *con_cls = NULL;
    atomic_fetch_sub(&s->active, 1);
}

int server_create(const server_opts *o, server **out) {
    *out = NULL;
    server *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "server: out of memory");
    s->o = *o;
    s->listen_fd = -1;
    pthread_mutex_init(&s->admit_mu, NULL);
    s->api_key = o->api_key && o->api_key[0] ? strdup(o->api_key) : NULL;
    s->metrics = srv_metrics_create();
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_verity_%s", VERITY_VERSION);
    if (!s->metrics) {
        server_destroy(s);
        return err_set(ERR_NOMEM, "server: out of memory");
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)o->port);
    if (inet_pton(AF_INET, o->host, &sa.sin_addr) != 1) {
        server_destroy(s);
        return err_set(ERR_INVAL, "server: host '%s' is not an IPv4 address", o->host);
    }
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->listen_fd < 0 || setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s->listen_fd, (struct sockaddr *)&sa, sizeof sa) || listen(s->listen_fd, 1024)) {
        int en = errno;
        server_destroy(s);
        return err_set(ERR_IO, "server: cannot listen on %s:%d: %s", o->host, o->port,
                       strerror(en));
    }
    socklen_t sl = sizeof sa;
    getsockname(s->listen_fd, (struct sockaddr *)&sa, &sl);
    s->port = ntohs(sa.sin_port);
    unsigned limit = (unsigned)(o->queue_max + 4 * o->max_batch + 64);
    s->d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_SUSPEND_RESUME, 0,
        NULL, NULL, srv_handler, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        limit, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
        MHD_OPTION_NOTIFY_COMPLETED, srv_completed, s, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)(1024 * 1024), MHD_OPTION_END);
    if (!s->d) {
        server_destroy(s);
        return err_set(ERR_IO, "server: cannot start the HTTP daemon on %s:%d", o->host, o->port);
    }
    *out = s;
    return 0;
}

int server_port(const server *s) {
    return s->port;
}

void server_set_ready(server *s, const server_model *sm) {
    s->sm = *sm;
    /* built once: every constrained request's grammar shares these vocabulary tables */
    if (sm->tok && grammar_vocab_create(sm->tok, &s->gvocab))
        log_warn("constrained decoding is off (tool_choice required/named and json "
                 "response_format will fail): %s",
                 err_detail());
    s->tool_format = CHAT_TOOL_FORMAT_NONE;
    if (sm->tmpl && sm->tmpl_src)
        s->tool_format = chat_tool_format_detect(sm->tmpl_src, sm->tmpl_src_len);
    atomic_store(&s->ready, true);
}

void server_drain(server *s) {
    atomic_store(&s->draining, true);
}

srv_metrics *server_metrics(server *s) {
    return s->metrics;
}

int64_t server_active(const server *s) {
    return atomic_load(&s->active);
}

void server_destroy(server *s) {
    if (!s)
        return;
    if (s->d)
        MHD_stop_daemon(s->d);
    else if (s->listen_fd >= 0)
        close(s->listen_fd);
    srv_metrics_destroy(s->metrics);
    grammar_vocab_destroy(s->gvocab);
    pthread_mutex_destroy(&s->admit_mu);
    free(s->api_key);
    free(s);
}
