/* SPDX-License-Identifier: MIT */
/*
 * router: lifecycle, the wiring to the HTTP layer (server/srv_http.h), the worker pool and the
 * proxying of one request. See router.h for what it does; rt_policy.c chooses, rt_backend.c
 * keeps the backends' health and the metrics.
 *
 * One request on a worker (rt_proxy): choose a backend, send the body with the worker's own
 * client, and pass the answer on as it arrives (rt_on_data). A streamed answer (Content-Type
 * text/event-stream with a 2xx status) is passed on event by event: bytes are held until a blank
 * line ends an event, so the client never holds half an event, and the stream begins with the
 * first complete one. Any other answer is held whole and sent once complete, so a backend dying
 * in the middle of it costs a retry, not a broken answer. While nothing has been passed on, a
 * failed attempt (no connection, a cut answer, a 503 or 429 from a backend loading, draining or
 * full) goes to the next backend (the last such refusal is passed on when none is left); after
 * that, never: the stream gets an error event and ends without [DONE].
 *
 * With router-loop N >= 1 (the default is 1) the workers are not started: rt_on_request hands each request to one of
 * N proxy loops (rt_loop.c), which make the same decisions with libcurl's multi interface and
 * never block; the pieces both paths use (answers, the error event, the disaggregated start) are
 * declared in rt_int.h.
 */
#include "router/rt_int.h"
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/http_fetch.h"
#include "base/json.h"
#include "base/log.h"
#include "base/workq.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RT_SHUTDOWN_MS    2000
#define RT_HEAD_TIMEOUT_S 10
#define RT_WORKER_STACK   (512u << 10)
#define RT_WRITE_WAIT_MS  1000

int router_url_check(const char *url, char *norm, size_t cap) {
    if (strncmp(url, "http://", 7) != 0)
        return err_set(ERR_INVAL, "replica URL '%s': must start with http://", url);
    const char *h = url + 7, *p = h;
    if (*p == '[') {
        p = strchr(p, ']');
        if (!p)
            return err_set(ERR_INVAL, "replica URL '%s': unterminated [IPv6] host", url);
        p++;
    } else {
        while (*p && (isalnum((unsigned char)*p) || *p == '.' || *p == '-'))
            p++;
    }
    if (p == h)
        return err_set(ERR_INVAL, "replica URL '%s': no host", url);
    if (*p != ':')
        return err_set(ERR_INVAL, "replica URL '%s': no :PORT after the host", url);
    const char *d = ++p;
    long port = 0;
    while (isdigit((unsigned char)*p) && port <= 65535)
        port = port * 10 + (*p++ - '0');
    if (p == d || port < 1 || port > 65535)
        return err_set(ERR_INVAL, "replica URL '%s': port must be 1..65535", url);
    if (*p == '/')
        p++;
    if (*p)
        return err_set(ERR_INVAL, "replica URL '%s': unexpected '%s' after the port (no path)", url,
                       p);
    size_t n = (size_t)(p - url) - (p[-1] == '/');
    if (n + 1 > cap)
        return err_set(ERR_INVAL, "replica URL '%s': too long", url);
    memcpy(norm, url, n);
    norm[n] = 0;
    return 0;
}

/* ---- answers of the router itself ---- */

int rt_send_error(srv_http_req *req, int status, const char *type, const char *code,
                         const char *h, const char *msg) {
    strbuf sb, hd;
    strbuf_init(&sb);
    strbuf_init(&hd);
    strbuf_puts(&sb, "{\"error\":{\"message\":");
    strbuf_json_cstr(&sb, msg);
    strbuf_puts(&sb, ",\"type\":");
    strbuf_json_cstr(&sb, type);
    strbuf_puts(&sb, ",\"param\":null,\"code\":");
    if (code)
        strbuf_json_cstr(&sb, code);
    else
        strbuf_printf(&sb, "%d", status);
    strbuf_puts(&sb, "}}");
    strbuf_puts(&hd, "Content-Type: application/json\r\n");
    if (h)
        strbuf_puts(&hd, h);
    int rc = srv_http_respond(req, status, hd.data, sb.data, sb.len);
    strbuf_deinit(&sb);
    strbuf_deinit(&hd);
    return rc;
}

static bool rt_any_up(router *r) {
    return router_backends_up(r) > 0;
}

static void rt_route_health(router *r, srv_http_req *req) {
    static const char ok[] = "{\"status\":\"ok\"}", none[] = "{\"status\":\"no_backend\"}",
                      dr[] = "{\"status\":\"draining\"}";
    const char *hd = "Content-Type: application/json\r\n";
    if (atomic_load(&r->draining))
        srv_http_respond(req, 503, hd, dr, sizeof dr - 1);
    else if (!rt_any_up(r))
        srv_http_respond(req, 503, hd, none, sizeof none - 1);
    else
        srv_http_respond(req, 200, hd, ok, sizeof ok - 1);
}

static void rt_route_metrics(router *r, srv_http_req *req) {
    strbuf sb;
    strbuf_init(&sb);
    rt_metrics_write(r, &sb);
    srv_http_stats hs;
    srv_http_stats_get(r->http, &hs);
    strbuf_printf(&sb,
                  "# HELP verity_http_connections_open Client connections open now.\n"
                  "# TYPE verity_http_connections_open gauge\n"
                  "verity_http_connections_open %d\n"
                  "# HELP verity_http_send_full_total Sends that found a client's socket full "
                  "(a slow reader: once each time its output blocks, not once per write).\n"
                  "# TYPE verity_http_send_full_total counter\n"
                  "verity_http_send_full_total %llu\n",
                  hs.open_conns, (unsigned long long)hs.send_full);
    srv_http_respond(req, 200, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
                     sb.data, sb.len);
    strbuf_deinit(&sb);
}

/* ---- proxying one request ---- */

typedef struct rt_call {
    router *r;
    srv_http_req *req;
    int64_t req_t0; /* the request's body complete (ns); 0 once its overhead is counted */
    long status;
    bool sse;     /* the answer is a stream */
    bool begun;   /* the client's stream has begun: no retry from here on */
    int write_rc; /* the client's write failed (gone) */
    strbuf held;  /* a whole answer, or a stream's bytes after its last complete event */
    char ctype[128];
} rt_call;

/* http_fetch's on_send: the first attempt's request is about to be written to its backend. */
static void rt_on_send(void *ud) {
    rt_call *c = ud;
    if (c->req_t0) {
        rt_overhead_add(c->r, RT_OVH_REQUEST, clock_now_ns() - c->req_t0);
        c->req_t0 = 0;
    }
}

static int rt_on_data(void *ud, long status, const char *ct, const char *bytes, size_t n) {
    rt_call *c = ud;
    int64_t t_in = clock_now_ns();
    if (!c->status) {
        c->status = status;
        snprintf(c->ctype, sizeof c->ctype, "%s", ct);
        c->sse = status >= 200 && status < 300 && !strncmp(ct, "text/event-stream", 17);
    }
    strbuf_append(&c->held, bytes, n);
    if (strbuf_failed(&c->held) || c->held.len > RT_MAX_ANSWER_BYTES)
        return ERR_NOMEM;
    if (!c->sse)
        return 0;
    /* pass on everything up to the last blank line (the end of the last complete event) */
    size_t end = rt_sse_complete(c->held.data, c->held.len);
    if (!end)
        return 0;
    if (!c->begun) {
        int rc = srv_http_stream_begin(c->req, (int)status, RT_SSE_HEADERS);
        if (rc)
            return c->write_rc = rc;
        c->begun = true;
    }
    int rc;
    while ((rc = srv_http_stream_write(c->req, c->held.data, end, RT_WRITE_WAIT_MS)) == ERR_BUSY)
        ;
    if (rc)
        return c->write_rc = rc;
    rt_overhead_add(c->r, RT_OVH_EVENT, clock_now_ns() - t_in);
    memmove(c->held.data, c->held.data + end, c->held.len - end);
    c->held.len -= end;
    return 0;
}

static bool rt_client_gone(void *ud) {
    rt_call *c = ud;
    return srv_http_request_gone(c->req);
}

/* Ends a begun stream whose backend failed: an error event as OpenAI streams one, no [DONE]. */
static void rt_stream_fail(rt_call *c, const char *url, const char *why) {
    strbuf sb;
    strbuf_init(&sb);
    rt_stream_error_event(&sb, url, why);
    int rc;
    while ((rc = srv_http_stream_write(c->req, sb.data, sb.len, RT_WRITE_WAIT_MS)) == ERR_BUSY)
        ;
    srv_http_stream_end(c->req);
    strbuf_deinit(&sb);
}

size_t rt_sse_complete(const char *p, size_t len) {
    for (size_t i = len; i >= 2; i--)
        if (p[i - 1] == '\n' && p[i - 2] == '\n')
            return i;
    return 0;
}

void rt_stream_error_event(strbuf *sb, const char *url, const char *why) {
    char msg[1024];
    snprintf(msg, sizeof msg, "the backend %s failed during the stream: %s", url, why);
    strbuf_puts(sb, "data: {\"error\":{\"message\":");
    strbuf_json_cstr(sb, msg);
    strbuf_puts(sb, ",\"type\":\"server_error\",\"param\":null,\"code\":\"backend_failed\"}}\n\n");
}

void rt_respond_whole(srv_http_req *req, long status, const char *ctype, const strbuf *held) {
    char hd[256];
    snprintf(hd, sizeof hd, "Content-Type: %s\r\n%s", ctype[0] ? ctype : "application/json",
             status == 429 || status == 503 ? "Retry-After: 1\r\n" : "");
    srv_http_respond(req, (int)status, hd, held->data, held->len);
}

/* Sends a complete held answer as it came. */
static void rt_pass_whole(rt_call *c) {
    rt_respond_whole(c->req, c->status, c->ctype, &c->held);
}

/* ---- the disaggregated flow (router.h) ---- */

/* body (a JSON object) with the members in extra appended (a later duplicate wins: json.h), in a
 * new buffer; NULL if body is not an object. */
static char *rt_body_with(const char *body, size_t len, const char *extra, size_t *out_len) {
    size_t b = 0, e = len;
    while (b < len && isspace((unsigned char)body[b]))
        b++;
    while (e > b && isspace((unsigned char)body[e - 1]))
        e--;
    if (e - b < 2 || body[b] != '{' || body[e - 1] != '}')
        return NULL;
    size_t k = e - 1;
    while (k > b + 1 && isspace((unsigned char)body[k - 1]))
        k--;
    bool empty = k == b + 1;
    size_t xl = strlen(extra), n = (e - 1) + (empty ? 0 : 1) + xl + 1;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    memcpy(out, body, e - 1);
    size_t o = e - 1;
    if (!empty)
        out[o++] = ',';
    memcpy(out + o, extra, xl);
    o += xl;
    out[o++] = '}';
    out[o] = 0;
    *out_len = o;
    return out;
}

/* The prefill's answer (whole: its body asks for no stream), bounded. */
static int rt_prefill_on_data(void *ud, long status, const char *ct, const char *bytes,
                              size_t n) {
    (void)status;
    (void)ct;
    return rt_prefill_answer_add(ud, bytes, n);
}

int rt_prefill_answer_add(strbuf *sb, const char *bytes, size_t n) {
    if (sb->len + n > RT_PREFILL_ANSWER_MAX)
        return ERR_NOMEM;
    strbuf_append(sb, bytes, n);
    return strbuf_failed(sb) ? ERR_NOMEM : 0;
}

/* Whether a prefill's answer says its transfer failed ("kv_transfer":{"status":"failed"}; "sent"
 * and "none", nothing to send, are not failures). */
static bool rt_prefill_xfer_failed(const strbuf *sb) {
    arena *a = arena_create(16 * 1024, 8 << 20);
    json_value *v = NULL;
    const char *st = NULL;
    size_t sl = 0;
    bool failed = a && json_parse(a, sb->data ? sb->data : "", sb->len, &v) == 0 &&
                  v->type == JSON_OBJECT &&
                  json_as_str(json_get(json_get(v, "kv_transfer"), "status"), &st, &sl) &&
                  sl == 6 && !memcmp(st, "failed", 6);
    arena_destroy(a);
    return failed;
}

bool rt_prefill_failed(const rt_prefill *p, int rc, long status, const strbuf *ans) {
    if (!rc && status == 200 && !rt_prefill_xfer_failed(ans))
        return false;
    log_warn("router: prefill of transfer %016llx on %s failed (%s): the decode server is "
             "told to compute the prompt",
             (unsigned long long)p->id, p->r->backends[p->b].url,
             rc ? err_detail() : status != 200 ? "not 200" : "its transfer failed");
    return true;
}

int rt_prefill_cancel_body(const rt_prefill *p, char *buf, size_t cap) {
    return snprintf(buf, cap, "{\"id\":\"%016llx\"}", (unsigned long long)p->id);
}

void rt_prefill_cancel_done(rt_prefill *p, int rc, long status) {
    router *r = p->r;
    bool ok = rc == 0 && status == 200;
    if (!ok)
        log_warn("router: cancel of transfer %016llx on %s failed (%s): the decode server waits "
                 "out its --kv-xfer-timeout",
                 (unsigned long long)p->id, p->cancel_url, rc ? err_detail() : "not 200");
    pthread_mutex_lock(&r->mu);
    r->n_cancels[ok ? 0 : 1]++;
    pthread_mutex_unlock(&r->mu);
}

/* Tells the decode server that transfer p->id will not come. */
static void rt_prefill_cancel(rt_prefill *p, http_fetch *f) {
    router *r = p->r;
    char body[64];
    int n = rt_prefill_cancel_body(p, body, sizeof body);
    long status = 0;
    http_fetch_req q = {.url = p->cancel_url,
                        .body = body,
                        .body_len = (size_t)n,
                        .api_key = r->backend_api_key,
                        .timeout_s = r->o.timeout_s};
    int rc = f ? http_fetch_run(f, &q, &status) : ERR_NOMEM;
    rt_prefill_cancel_done(p, rc, status);
}

/* The prefill side of one request on its own thread (the worker path): its answer, then the
 * cancel when it failed (rt_int.h, rt_prefill). */
static void *rt_prefill_main(void *arg) {
    rt_prefill *p = arg;
    router *r = p->r;
    http_fetch *f = NULL;
    long status = 0;
    strbuf ans;
    strbuf_init(&ans);
    int64_t t0 = clock_now_ns();
    int rc = http_fetch_create(r->conns, &f);
    if (!rc) {
        http_fetch_req q = {.url = p->url,
                            .body = p->body,
                            .body_len = p->len,
                            .api_key = r->backend_api_key,
                            .timeout_s = r->o.timeout_s,
                            .on_data = rt_prefill_on_data,
                            .ud = &ans};
        rc = http_fetch_run(f, &q, &status);
    }
    if (rt_prefill_failed(p, rc, status, &ans))
        rt_prefill_cancel(p, f);
    rt_backend_done(r, p->b, rc || status != 200 ? RT_OUT_ERROR : RT_OUT_OK,
                    (double)(clock_now_ns() - t0) * 1e-9, rc == ERR_CONNECT);
    http_fetch_destroy(f);
    strbuf_deinit(&ans);
    return NULL;
}

static int rt_prefill_thread_start(rt_prefill *pf, void *ud) {
    (void)ud;
    return pthread_create(&pf->thread, NULL, rt_prefill_main, pf) ? ERR_INTERNAL : 0;
}

char *rt_disagg_start(router *r, int d, const char *path, const char *body, size_t blen,
                      const uint64_t *h, int nh, rt_prefill_start_fn start, void *ud,
                      rt_prefill **pp, size_t *dlen) {
    char kv[300];
    pthread_mutex_lock(&r->mu);
    snprintf(kv, sizeof kv, "%s", r->backends[d].kv_addr);
    pthread_mutex_unlock(&r->mu);
    int which = 0;
    int p = kv[0] ? rt_policy_choose(r, h, nh, 0, ROUTER_ROLE_PREFILL) : -1;
    which = !kv[0] ? 2 : p < 0 ? 1 : 0;
    char *dbody = NULL;
    rt_prefill *pf = NULL;
    if (p >= 0) {
        uint64_t id = atomic_fetch_add(&r->xfer_seq, 1) + 1;
        id = hash64(id, &r, sizeof r) ^ (uint64_t)clock_now_ns();
        id = id ? id : 1;
        char ex[600];
        bool chat = strstr(path, "chat") != NULL;
        snprintf(ex, sizeof ex,
                 "\"kv_transfer\":{\"id\":\"%016llx\",\"send_to\":\"%s\"},\"max_tokens\":1%s,"
                 "\"stream\":false,\"stream_options\":null",
                 (unsigned long long)id, kv, chat ? ",\"max_completion_tokens\":1" : "");
        pf = calloc(1, sizeof *pf);
        if (pf) {
            pf->r = r;
            pf->b = p;
            pf->id = id;
            snprintf(pf->url, sizeof pf->url, "%s%s", r->backends[p].url, path);
            snprintf(pf->cancel_url, sizeof pf->cancel_url, "%s/v1/kv_transfer/cancel",
                     r->backends[d].url);
            pf->body = rt_body_with(body, blen, ex, &pf->len);
        }
        snprintf(ex, sizeof ex, "\"kv_transfer\":{\"id\":\"%016llx\",\"recv\":true}",
                 (unsigned long long)id);
        dbody = pf && pf->body ? rt_body_with(body, blen, ex, dlen) : NULL;
        if (!dbody || start(pf, ud)) {
            rt_backend_done(r, p, RT_OUT_ERROR, 0, false);
            if (pf)
                free(pf->body);
            free(pf);
            free(dbody);
            pf = NULL;
            dbody = NULL;
            which = 2; /* the body could not carry a transfer (not a JSON object) */
        }
    }
    pthread_mutex_lock(&r->mu);
    r->n_disagg[which]++;
    pthread_mutex_unlock(&r->mu);
    *pp = pf;
    return dbody;
}

static void rt_disagg_join(rt_prefill *pf) {
    if (!pf)
        return;
    pthread_join(pf->thread, NULL);
    free(pf->body);
    free(pf);
}

static void rt_proxy(router *r, http_fetch *f, srv_http_req *req, int64_t body_t0) {
    size_t blen;
    const char *body = srv_http_req_body(req, &blen);
    const char *method = srv_http_req_method(req), *path = srv_http_req_path(req),
               *query = srv_http_req_query(req);
    bool post = !strcmp(method, "POST");
    static _Thread_local uint64_t h[RT_MAX_BLOCKS];
    int nh = post ? rt_prefix_hashes(body, blen, h) : 0;
    uint64_t tried = 0;
    /* disaggregated: every route goes to a decode server; a generation also to a prefill one */
    int role = r->disagg ? ROUTER_ROLE_DECODE : ROUTER_ROLE_REPLICA;
    bool gen = r->disagg && post &&
               (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions"));
    rt_prefill *pf = NULL;
    char *dbody = NULL;
    size_t dlen = 0;
    rt_call c = {.r = r, .req = req, .req_t0 = body_t0 ? body_t0 : 1};
    strbuf_init(&c.held);
    char last_err[400] = "no backend is up";
    bool have_whole = false; /* c holds a complete answer worth passing on if nothing better */
    for (;;) {
        int b = rt_policy_choose(r, h, nh, tried, role);
        if (b < 0)
            break;
        bool first = tried == 0;
        tried |= 1ull << b;
        if (gen && first)
            dbody = rt_disagg_start(r, b, path, body, blen, h, nh, rt_prefill_thread_start, NULL,
                                    &pf, &dlen);
        else if (dbody) { /* a retry on another decode server: no transfer, it computes */
            free(dbody);
            dbody = NULL;
            rt_prefill_cancel(pf, f); /* the first one will not take the transfer (rt_int.h) */
        }
        const char *base = r->backends[b].url;
        char url[1200];
        snprintf(url, sizeof url, "%s%s%s%s", base, path, query[0] ? "?" : "", query);
        c.status = 0;
        c.sse = false;
        c.ctype[0] = 0;
        strbuf_reset(&c.held);
        http_fetch_req q = {.url = url,
                            .method = post ? NULL : "GET",
                            .body = post ? (dbody ? dbody : body) : NULL,
                            .body_len = dbody ? dlen : blen,
                            .api_key = r->backend_api_key,
                            .timeout_s = r->o.timeout_s,
                            .on_data = rt_on_data,
                            .should_abort = rt_client_gone,
                            .on_send = rt_on_send,
                            .ud = &c};
        int64_t t0 = clock_now_ns();
        long status = 0;
        int rc = http_fetch_run(f, &q, &status);
        double secs = (double)(clock_now_ns() - t0) * 1e-9;
        if (!c.status)
            c.status = status;
        if (rc == 0 || c.write_rc || rc == ERR_CANCELLED) {
            /* refused before any work (loading, draining, full, over its connection cap):
             * another backend may take it */
            bool retry_503 = rc == 0 && !c.begun && (c.status == 503 || c.status == 429);
            rt_backend_done(r, b, retry_503 ? RT_OUT_RETRIED : RT_OUT_OK, secs, false);
            if (c.write_rc || rc == ERR_CANCELLED)
                goto done; /* the client went away */
            if (retry_503) {
                snprintf(last_err, sizeof last_err, "%s answered %ld", base, c.status);
                have_whole = true;
                continue;
            }
            if (c.begun) {
                if (c.held.len) /* a last event without its blank line */
                    srv_http_stream_write(req, c.held.data, c.held.len, RT_WRITE_WAIT_MS);
                srv_http_stream_end(req);
            } else {
                rt_pass_whole(&c);
            }
            goto done;
        }
        snprintf(last_err, sizeof last_err, "%s", err_detail());
        rt_backend_done(r, b, c.begun ? RT_OUT_ERROR : RT_OUT_RETRIED, secs,
                        rc == ERR_CONNECT || (rc == ERR_PROTOCOL && !c.status));
        if (c.begun) {
            rt_stream_fail(&c, base, last_err);
            goto done;
        }
        have_whole = false;
        log_info("router: %s %s on %s failed before anything was passed on (%s); retrying", method,
                 path, base, last_err);
    }
    if (dbody) /* the decode server that got the transfer did not take the request */
        rt_prefill_cancel(pf, f);
    if (have_whole) {
        rt_pass_whole(&c);
    } else {
        char msg[600];
        snprintf(msg, sizeof msg, "no backend could take the request (%s)", last_err);
        rt_send_error(req, 503, "server_error", "no_backend", "Retry-After: 1\r\n", msg);
    }
done:
    strbuf_deinit(&c.held);
    free(dbody);
    rt_disagg_join(pf); /* bounded by --timeout: its server ends the request or dies */
}

/* ---- the HTTP layer's callbacks ---- */

static bool rt_is_post_route(const char *url) {
    return !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions") ||
           !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize");
}

static bool rt_is_get_route(const char *url) {
    return !strcmp(url, "/v1/models") || !strcmp(url, "/v1/flags");
}

/* The head, on the event thread: the same order of checks as `verity serve` (/health open to
 * all, the API key, a declared body over the limit, /metrics, draining, unknown routes, wrong
 * methods). The proxied routes read their body and go to a worker. */
static int rt_on_head(void *user, srv_http_req *req) {
    router *r = user;
    const char *method = srv_http_req_method(req), *url = srv_http_req_path(req);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    char msg[600];
    if (get && !strcmp(url, "/health")) {
        rt_route_health(r, req);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (!srv_http_req_bearer_ok(req, r->api_key)) {
        rt_send_error(req, 401, "authentication_error", NULL, "WWW-Authenticate: Bearer\r\n",
                      "missing or invalid API key");
        return SRV_HTTP_HEAD_ANSWERED;
    }
    const char *cl = srv_http_req_header(req, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > r->o.max_body_bytes) {
        snprintf(msg, sizeof msg, "request body larger than --max-body (%zu MiB)",
                 r->o.max_body_bytes >> 20);
        rt_send_error(req, 413, "invalid_request_error", "request_too_large", NULL, msg);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (get && !strcmp(url, "/metrics")) {
        rt_route_metrics(r, req);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (atomic_load(&r->draining)) {
        rt_send_error(req, 503, "server_error", NULL, NULL, "the router is shutting down");
        return SRV_HTTP_HEAD_ANSWERED;
    }
    bool is_post = rt_is_post_route(url), is_get = rt_is_get_route(url);
    if (!is_post && !is_get) {
        snprintf(msg, sizeof msg, "no route %s %s", method, url);
        rt_send_error(req, 404, "invalid_request_error", NULL, NULL, msg);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if ((is_post && !post) || (is_get && !get)) {
        snprintf(msg, sizeof msg, "%s needs %s, not %s", url, is_post ? "POST" : "GET", method);
        rt_send_error(req, 405, "invalid_request_error", NULL,
                      is_post ? "Allow: POST\r\n" : "Allow: GET, HEAD\r\n", msg);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    return SRV_HTTP_HEAD_READ_BODY;
}

/* A worker's state: its HTTP client, on the router's shared connection pool (NULL if it could
 * not be made: the worker then answers 500). */
static void *rt_worker_init(void *user) {
    router *r = user;
    http_fetch *f = NULL;
    http_fetch_create(r->conns, &f);
    return f;
}

static void rt_worker_fini(void *user, void *state) {
    (void)user;
    http_fetch_destroy(state);
}

/* A request queued for the workers, with when its body was complete. */
typedef struct rt_job {
    srv_http_req *req;
    int64_t t0;
} rt_job;

/* Runs one request on a worker (base/workq.h). */
static void rt_worker_run(void *user, void *state, void *item) {
    router *r = user;
    rt_job *job = item;
    srv_http_req *req = job->req;
    int64_t t0 = job->t0;
    free(job);
    if (!state)
        rt_send_error(req, 500, "server_error", NULL, NULL,
                      "the router's worker has no HTTP client");
    else if (atomic_load(&r->draining))
        rt_send_error(req, 503, "server_error", NULL, NULL, "the router is shutting down");
    else
        rt_proxy(r, state, req, t0);
    srv_http_req_release(req);
    atomic_fetch_sub(&r->active, 1);
}

/* A complete request, on the event thread: queued for the workers; 429 when as many wait as
 * there are workers. With loops: handed to one, 429 when twice as many requests as there are
 * workers are in flight (where the workers refuse). */
static void rt_on_request(void *user, srv_http_req *req) {
    router *r = user;
    int64_t n = atomic_fetch_add(&r->active, 1);
    if (r->loops && n < 2 * (int64_t)r->o.workers) {
        rt_loop_submit(r, req, clock_now_ns());
        return;
    }
    rt_job *job = r->loops ? NULL : malloc(sizeof *job);
    if (job) {
        *job = (rt_job){.req = req, .t0 = clock_now_ns()};
        if (workq_push(r->pool, job) == 0)
            return;
        free(job);
    }
    char msg[200];
    snprintf(msg, sizeof msg,
             "the router is at capacity (%d requests being proxied and as many waiting); retry "
             "later",
             r->o.workers);
    rt_send_error(req, 429, "rate_limit_error", NULL, "Retry-After: 1\r\n", msg);
    srv_http_req_release(req);
    atomic_fetch_sub(&r->active, 1);
}

/* ---- lifecycle ---- */

static int rt_start_workers(router *r) {
    workq_cfg wc = {.max_threads = r->o.workers,
                    .max_queued = r->o.workers,
                    .stack_bytes = RT_WORKER_STACK,
                    .fn = rt_worker_run,
                    .thread_init = rt_worker_init,
                    .thread_fini = rt_worker_fini,
                    .user = r};
    return workq_create(&wc, &r->pool);
}

int router_create(const router_opts *o, router **out) {
    *out = NULL;
    if (o->n_replicas < 1 || o->n_replicas > ROUTER_MAX_BACKENDS)
        return err_set(ERR_INVAL, "router: %d replicas (1..%d)", o->n_replicas,
                       ROUTER_MAX_BACKENDS);
    int rc = http_fetch_global_init();
    if (rc)
        return rc;
    router *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(ERR_NOMEM, "router: out of memory");
    r->o = *o;
    if (r->o.workers < 1)
        r->o.workers = 1;
    if (r->o.health_ms < 10)
        r->o.health_ms = 10;
    r->listen_fd = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->health_cv, NULL);
    r->api_key = o->api_key && o->api_key[0] ? strdup(o->api_key) : NULL;
    r->backend_api_key =
        o->backend_api_key && o->backend_api_key[0] ? strdup(o->backend_api_key) : NULL;
    if ((rc = rt_backends_init(r)) || (rc = http_fetch_pool_create(&r->conns)) ||
        (rc = srv_http_listen(r->o.host, r->o.port, &r->listen_fd, &r->port))) {
        router_destroy(r);
        char why[400]; /* err_detail() is the buffer err_set writes */
        snprintf(why, sizeof why, "%s", err_detail());
        return err_set(rc, "router: %s", why);
    }
    rt_health_poll(r);
    srv_http_cfg cfg = {
        .listen_fd = r->listen_fd,
        .on_head = rt_on_head,
        .on_request = rt_on_request,
        .user = r,
        .max_body_bytes = o->max_body_bytes,
        .max_body_total_bytes = o->max_body_total_bytes,
        .max_conns = o->max_conns,
        .max_conns_per_addr = o->max_conns_per_addr,
        .direct_write = o->direct_write,
        .nagle = o->nagle,
        .send_each_write = o->send_each_write,
    };
    srv_http_cfg_timeouts(&cfg, o->timeout_s, RT_HEAD_TIMEOUT_S);
    if ((rc = r->o.loops > 0 ? rt_loops_start(r) : rt_start_workers(r)) ||
        (rc = rt_health_start(r))) {
        router_destroy(r);
        return rc;
    }
    if ((rc = srv_http_create(&cfg, &r->http))) {
        router_destroy(r);
        char why[400];
        snprintf(why, sizeof why, "%s", err_detail());
        return err_set(rc, "router: cannot start the HTTP layer: %s", why);
    }
    r->listen_fd = -1;
    *out = r;
    return 0;
}

int router_port(const router *r) {
    return r->port;
}

int router_backends_up(router *r) {
    pthread_mutex_lock(&r->mu);
    int n = 0;
    for (int i = 0; i < r->n_backends; i++)
        n += r->backends[i].up;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void router_drain(router *r) {
    atomic_store(&r->draining, true);
}

int64_t router_active(const router *r) {
    return atomic_load(&r->active);
}

void router_destroy(router *r) {
    if (!r)
        return;
    if (r->http)
        srv_http_shutdown(r->http, RT_SHUTDOWN_MS);
    workq_destroy(r->pool); /* the layer is shut down: what is queued is gone and quick */
    rt_loops_stop(r);
    rt_health_stop(r);
    if (r->http)
        srv_http_destroy(r->http);
    else if (r->listen_fd >= 0)
        close(r->listen_fd);
    rt_backends_free(r);
    http_fetch_pool_destroy(r->conns);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->health_cv);
    free(r->api_key);
    free(r->backend_api_key);
    free(r);
}
