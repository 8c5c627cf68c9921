/* SPDX-License-Identifier: MIT */
/*
 * server: lifecycle, the wiring to the HTTP layer (srv_http.h), the worker pool, authentication,
 * routing, and the small routes (health, models, metrics, flags, tokenize, detokenize). The
 * generation routes are in srv_request.c (parsing) and srv_gen.c (running and formatting).
 *
 * Threads: srv_http's one event thread owns every connection; no thread is tied to a connection,
 * so idle or trickling clients cost memory and a slot under the connection caps, never a thread.
 * It calls srv_on_head with each parsed head and srv_on_request with each complete body.
 *
 * Before the body (srv_on_head, on the event thread, never blocking on the engine's work): a
 * missing or wrong API key is answered 401 there, so the body is never read ("Expect:
 * 100-continue" gets no 100); so is a declared body over --max-body (413). The cheap routes
 * (/health, /metrics, /v1/models, /v1/flags), and every refusal that needs no body (loading,
 * draining, 404, 405), are answered inline too, so they work while every worker is busy; HEAD is
 * GET without the body bytes. Everything else reads its body. The layer bounds the bytes of
 * bodies being received by all connections together (--max-body-total: a declared body takes
 * its room when its head is parsed; beyond it 503 with Retry-After), and frames bodies itself.
 *
 * After the body (srv_on_request): the request is queued for the worker pool, which parses the
 * JSON, renders templates, tokenizes and runs the generation, so none of that runs on the event
 * thread. Workers are started as needed up to max_batch + queue_max + SRV_WORKERS_EXTRA (at most
 * SRV_WORKERS_MAX): enough for every sequence admission can hold (srv_gen_start counts them
 * exactly) and a few small requests beside them. A request arriving when every worker is busy
 * and the queue holds as many as there are workers gets 429 with Retry-After.
 *
 * A worker answers with srv_http_respond or a stream (srv_gen.c), checks the layer's gone flag on
 * every pump of its wait (the layer probes a half-closed client), and releases the request.
 * Per-request memory is one arena, freed when the request completes.
 */
#include "server/srv_int.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/version.h"
#include "base/workq.h"
#include "disagg/disagg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SRV_WORKERS_EXTRA  8
#define SRV_WORKERS_MAX    1024
#define SRV_WORKER_STACK   (2u << 20)
#define SRV_HEAD_TIMEOUT_S 10 /* the request head's deadline, when --timeout is longer */
#define SRV_SHUTDOWN_MS    2000

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

/* Answers req with body[0, len) of Content-Type type and one optional extra header h1: v1. */
static int srv_send(srv_http_req *req, int status, const char *type, const char *body, size_t len,
                    const char *h1, const char *v1) {
    char hdr[256];
    if (h1)
        snprintf(hdr, sizeof hdr, "Content-Type: %s\r\n%s: %s\r\n", type, h1, v1);
    else
        snprintf(hdr, sizeof hdr, "Content-Type: %s\r\n", type);
    return srv_http_respond(req, status, hdr, body, len); /* a gone client: nothing to do */
}

static int srv_send_json(srv_http_req *req, int status, const strbuf *sb) {
    return srv_send(req, status, "application/json", sb->data, sb->len, NULL, NULL);
}

static int srv_send_error_h(srv_http_req *req, const srv_err *e, const char *h1, const char *v1) {
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
    int rc = srv_send(req, e->status, "application/json", sb.data, sb.len, h1, v1);
    strbuf_deinit(&sb);
    return rc;
}

static int srv_send_error(srv_http_req *req, const srv_err *e) {
    return srv_send_error_h(req, e, NULL, NULL);
}

static bool srv_auth_ok(const server *s, const srv_http_req *req) {
    return srv_http_req_bearer_ok(req, s->api_key);
}

static void srv_refuse_unauthorized(server *s, srv_http_req *req) {
    srv_err e;
    srv_metrics_reject(s->metrics, SRV_REJECT_UNAUTHORIZED);
    srv_fail(&e, 401, "authentication_error", NULL, "missing or invalid API key");
    srv_send_error_h(req, &e, "WWW-Authenticate", "Bearer");
}

static void srv_refuse_too_large(server *s, srv_http_req *req) {
    srv_err e;
    srv_metrics_reject(s->metrics, SRV_REJECT_TOO_LARGE);
    srv_fail(&e, 413, "invalid_request_error", NULL,
             "request body larger than --max-body (%zu MiB)", s->o.max_body_bytes >> 20);
    e.code = "request_too_large";
    srv_send_error_h(req, &e, NULL, NULL);
}

/* ---- small routes ---- */

static int srv_route_health(server *s, srv_http_req *c) {
    if (!atomic_load(&s->ready))
        return srv_send(c, 503, "application/json", "{\"status\":\"loading\"}", 20, NULL, NULL);
    if (atomic_load(&s->draining))
        return srv_send(c, 503, "application/json", "{\"status\":\"draining\"}", 21, NULL, NULL);
    return srv_send(c, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, NULL);
}

static int srv_route_models(server *s, srv_http_req *c) {
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
    int rc = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return rc;
}

static int srv_route_metrics(server *s, srv_http_req *c) {
    strbuf sb;
    strbuf_init(&sb);
    eloop_stats st;
    memset(&st, 0, sizeof st);
    if (s->sm.loop)
        engine_loop_stats(s->sm.loop, &st);
    srv_http_stats hs;
    srv_http_stats_get(s->http, &hs);
    srv_metrics_write(s->metrics, &st, s->sm.name ? s->sm.name : "", (int64_t)hs.body_bytes, &sb);
    /* the connection layer's own counters (srv_http_stats) */
    strbuf_printf(&sb,
                  "# HELP verity_http_connections_open Client connections open now.\n"
                  "# TYPE verity_http_connections_open gauge\n"
                  "verity_http_connections_open %d\n"
                  "# HELP verity_http_connections_total Client connections accepted.\n"
                  "# TYPE verity_http_connections_total counter\n"
                  "verity_http_connections_total %llu\n"
                  "# HELP verity_http_connections_refused_total Connections refused at a cap "
                  "(limit: total for --max-conns, per_address for --max-conns-per-addr).\n"
                  "# TYPE verity_http_connections_refused_total counter\n"
                  "verity_http_connections_refused_total{limit=\"total\"} %llu\n"
                  "verity_http_connections_refused_total{limit=\"per_address\"} %llu\n"
                  "# HELP verity_http_timeouts_total Connections closed by the head, body or "
                  "idle deadline.\n"
                  "# TYPE verity_http_timeouts_total counter\n"
                  "verity_http_timeouts_total %llu\n"
                  "# HELP verity_http_bad_requests_total Requests the HTTP layer refused itself "
                  "(malformed, too large, too slow).\n"
                  "# TYPE verity_http_bad_requests_total counter\n"
                  "verity_http_bad_requests_total %llu\n"
                  "# HELP verity_http_send_full_total Sends that found a client's socket full "
                  "(a slow reader: once each time its output blocks, not once per write).\n"
                  "# TYPE verity_http_send_full_total counter\n"
                  "verity_http_send_full_total %llu\n",
                  hs.open_conns, (unsigned long long)hs.accepted,
                  (unsigned long long)hs.refused_cap, (unsigned long long)hs.refused_addr,
                  (unsigned long long)hs.timed_out, (unsigned long long)hs.bad_requests,
                  (unsigned long long)hs.send_full);
    /* disaggregation (disagg.h): transfers and blocks, both directions, and the engine's side */
    disagg_stats ds;
    disagg_stats_get(&ds);
    strbuf_printf(&sb,
                  "# HELP verity_kv_xfer_transfers_total KV transfers ended, by direction (send: "
                  "a prefill server, recv: a decode server) and result (ok, aborted).\n"
                  "# TYPE verity_kv_xfer_transfers_total counter\n"
                  "verity_kv_xfer_transfers_total{dir=\"send\",result=\"ok\"} %lld\n"
                  "verity_kv_xfer_transfers_total{dir=\"send\",result=\"aborted\"} %lld\n"
                  "verity_kv_xfer_transfers_total{dir=\"recv\",result=\"ok\"} %lld\n"
                  "verity_kv_xfer_transfers_total{dir=\"recv\",result=\"aborted\"} %lld\n"
                  "# HELP verity_kv_xfer_open KV transfers in progress.\n"
                  "# TYPE verity_kv_xfer_open gauge\n"
                  "verity_kv_xfer_open{dir=\"send\"} %lld\n"
                  "verity_kv_xfer_open{dir=\"recv\"} %lld\n"
                  "# HELP verity_kv_xfer_blocks_total KV blocks: sent and acknowledged (prefill), "
                  "received and verified (decode), dropped (duplicate or late messages), restored "
                  "into the engine's cache and refused there (verification failed: recomputed).\n"
                  "# TYPE verity_kv_xfer_blocks_total counter\n"
                  "verity_kv_xfer_blocks_total{event=\"sent\"} %lld\n"
                  "verity_kv_xfer_blocks_total{event=\"acked\"} %lld\n"
                  "verity_kv_xfer_blocks_total{event=\"verified\"} %lld\n"
                  "verity_kv_xfer_blocks_total{event=\"dropped\"} %lld\n"
                  "verity_kv_xfer_blocks_total{event=\"restored\"} %lld\n"
                  "verity_kv_xfer_blocks_total{event=\"refused\"} %lld\n"
                  "# HELP verity_kv_xfer_waits_expired_total Decode requests that stopped "
                  "waiting for their KV (no progress for --kv-xfer-timeout) and computed it.\n"
                  "# TYPE verity_kv_xfer_waits_expired_total counter\n"
                  "verity_kv_xfer_waits_expired_total %lld\n"
                  "# HELP verity_kv_xfer_cancelled_total Decode requests whose KV transfer was "
                  "cancelled (its prefill failed: POST /v1/kv_transfer/cancel) and computed it "
                  "at once.\n"
                  "# TYPE verity_kv_xfer_cancelled_total counter\n"
                  "verity_kv_xfer_cancelled_total %lld\n",
                  (long long)ds.tx_transfers_ok, (long long)ds.tx_transfers_aborted,
                  (long long)ds.rx_transfers_ok, (long long)ds.rx_transfers_aborted,
                  (long long)ds.tx_open, (long long)ds.rx_open, (long long)ds.tx_blocks_sent,
                  (long long)ds.tx_blocks_acked, (long long)ds.rx_blocks_verified,
                  (long long)ds.rx_blocks_dropped, (long long)st.e.kv_in_restored,
                  (long long)st.e.kv_in_refused, (long long)ds.rx_waits_expired,
                  (long long)ds.rx_cancelled);
    int rc =
        srv_send(c, 200, "text/plain; version=0.0.4; charset=utf-8", sb.data, sb.len, NULL, NULL);
    strbuf_deinit(&sb);
    return rc;
}

/* GET /v1/status: the load a router balances on, cheap enough to poll often: sequences running
 * and waiting in the engine, KV blocks held and the pool's size, requests being handled, and
 * whether the server is draining (a router then sends it nothing new). */
static int srv_route_status(server *s, srv_http_req *c) {
    eloop_stats st;
    memset(&st, 0, sizeof st);
    if (s->sm.loop)
        engine_loop_stats(s->sm.loop, &st);
    char body[768];
    int n = snprintf(body, sizeof body,
                     "{\"running\":%lld,\"waiting\":%lld,\"kv_used\":%lld,\"kv_total\":%lld,"
                     "\"active\":%lld,\"role\":\"%s\",\"kv_addr\":\"%s\",\"draining\":%s}",
                     (long long)st.e.running, (long long)st.e.waiting, (long long)st.e.kv_used,
                     (long long)st.e.kv_total, (long long)atomic_load(&s->active),
                     s->sm.role ? s->sm.role : "both",
                     s->sm.kv_rx ? disagg_rx_addr(s->sm.kv_rx) : "",
                     atomic_load(&s->draining) ? "true" : "false");
    return srv_send(c, 200, "application/json", body, (size_t)n, NULL, NULL);
}

static int srv_route_flags(srv_http_req *c) {
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
    int rc = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return rc;
}

/* POST /admin/pause, /admin/resume, /admin/step (only with --admin-api): hold the engine between
 * steps, release it, or run N steps of a held engine ({"steps":N}, default 1). Each answers once
 * the engine is in the state asked for, so a client can build a state (a full queue, a batch of
 * N, a request holding KV) without racing the engine. */
static int srv_route_admin(server *s, srv_http_req *c, const char *url) {
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
        size_t blen;
        const char *bdata = srv_http_req_body(c, &blen);
        int rc = !a ? ERR_NOMEM : blen ? json_parse(a, bdata, blen, &body) : 0;
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
    int r = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return r;
}

#define SRV_KV_CANCEL_URL "/v1/kv_transfer/cancel"

/* POST /v1/kv_transfer/cancel {"id":"HEX"} (a decode server; the router sends it when the
 * prefill side of transfer HEX failed): the request waiting for it computes its prompt now
 * (disagg.h "Cancel"). Answered while draining too: it shortens a wait the drain waits for. */
static int srv_route_kv_cancel(server *s, srv_http_req *c) {
    srv_err e;
    if (!s->sm.kv_rx) {
        srv_fail(&e, 404, "invalid_request_error", NULL,
                 "%s: this server receives no KV (--role %s)", SRV_KV_CANCEL_URL,
                 s->sm.role ? s->sm.role : "both");
        return srv_send_error(c, &e);
    }
    size_t blen;
    const char *bdata = srv_http_req_body(c, &blen);
    arena *a = arena_create(4096, 1 << 20);
    json_value *body = NULL;
    uint64_t id = 0;
    int rc = !a ? ERR_NOMEM : json_parse(a, bdata, blen, &body);
    if (rc == ERR_NOMEM)
        srv_fail(&e, 500, "server_error", NULL, "out of memory");
    else if (rc)
        srv_fail(&e, 400, "invalid_request_error", NULL,
                 "%s: the body is not valid JSON: %s", SRV_KV_CANCEL_URL, err_detail());
    else
        rc = srv_parse_xfer_id(body, "body", "id", &id, &e);
    arena_destroy(a);
    if (rc)
        return srv_send_error(c, &e);
    static const char *const what[] = {"cancelled", "pending", "ignored"};
    disagg_cancel_result r = disagg_rx_cancel(s->sm.kv_rx, id);
    char out[128];
    int n = snprintf(out, sizeof out, "{\"id\":\"%016llx\",\"result\":\"%s\"}",
                     (unsigned long long)id, what[r]);
    return srv_send(c, 200, "application/json", out, (size_t)n, NULL, NULL);
}

static int srv_route_tokenize(server *s, srv_http_req *c, const json_value *body) {
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
    int r = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return r;
}

static int srv_route_detokenize(server *s, srv_http_req *c, const json_value *body) {
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
    int r = srv_send_json(c, 200, &sb);
    strbuf_deinit(&text);
    strbuf_deinit(&sb);
    return r;
}

/* ---- generation routes ---- */

static int srv_route_generate(server *s, srv_http_req *c, int64_t t_arrival_ns, arena *a,
                              const json_value *body, bool chat) {
    srv_err e;
    srv_params p;
    if (srv_parse_generate(s, a, body, chat, &p, &e) != 0) {
        srv_metrics_reject(s->metrics, e.code && !strcmp(e.code, "context_length_exceeded")
                                           ? SRV_REJECT_TOO_LONG
                                           : SRV_REJECT_INVALID);
        return srv_send_error(c, &e);
    }
    srv_gen *g = srv_gen_start(s, &p, c, t_arrival_ns, &e);
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
        srv_gen_stream(g);
        srv_gen_free(g);
        return 0;
    }
    strbuf sb;
    strbuf_init(&sb);
    int rc = srv_gen_complete(g, &sb, &e);
    srv_gen_free(g);
    int res = 0;
    if (rc == ERR_CANCELLED)
        res = rc; /* the client is gone: nothing to answer */
    else if (rc)
        res = srv_send_error_h(c, &e, e.status == 503 ? "Retry-After" : NULL, "1");
    else
        res = srv_send_json(c, 200, &sb);
    strbuf_deinit(&sb);
    return res;
}

static bool srv_is_admin(const server *s, const char *url) {
    return s->o.admin_api && !strncmp(url, "/admin/", 7) &&
           (!strcmp(url + 7, "pause") || !strcmp(url + 7, "resume") || !strcmp(url + 7, "step"));
}

/* The head of a request, on the event thread (srv_http.h: on_head). Answers here whatever needs
 * no body and no wait, in the order the routes always had: /health (open to all: load balancers
 * probe it without a key), the API key, a declared body over --max-body, loading, /metrics,
 * draining, /v1/models, /v1/flags, unknown routes and wrong methods. Everything else reads its
 * body and goes to a worker. */
static int srv_on_head(void *user, srv_http_req *c) {
    server *s = user;
    srv_err e;
    const char *method = srv_http_req_method(c), *url = srv_http_req_path(c);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/health")) {
        srv_route_health(s, c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (!srv_auth_ok(s, c)) {
        srv_refuse_unauthorized(s, c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    /* the layer validated the field (digits only) */
    const char *cl = srv_http_req_header(c, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) {
        srv_refuse_too_large(s, c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (!atomic_load(&s->ready)) {
        srv_metrics_reject(s->metrics, SRV_REJECT_LOADING);
        srv_fail(&e, 503, "server_error", NULL, "the model is loading");
        srv_send_error_h(c, &e, "Retry-After", "1");
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (get && !strcmp(url, "/metrics")) {
        srv_route_metrics(s, c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (get && !strcmp(url, "/v1/status")) { /* answered while draining too: it says so */
        srv_route_status(s, c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    /* before the drain check: a drained server's held engine must still be releasable, and a
     * request waiting for its KV must still hear that it will not come */
    if (srv_is_admin(s, url) || !strcmp(url, SRV_KV_CANCEL_URL)) {
        if (post)
            return SRV_HTTP_HEAD_READ_BODY;
        srv_fail(&e, 405, "invalid_request_error", NULL, "%s needs POST, not %s", url, method);
        srv_send_error_h(c, &e, "Allow", "POST");
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (atomic_load(&s->draining)) {
        srv_metrics_reject(s->metrics, SRV_REJECT_DRAINING);
        srv_fail(&e, 503, "server_error", NULL, "the server is shutting down");
        srv_send_error(c, &e);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (get && !strcmp(url, "/v1/models")) {
        srv_route_models(s, c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (get && !strcmp(url, "/v1/flags")) {
        srv_route_flags(c);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    bool known = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions") ||
                 !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize");
    if (!known) {
        srv_fail(&e, 404, "invalid_request_error", NULL, "no route %s %s", method, url);
        srv_send_error(c, &e);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (!post) {
        srv_fail(&e, 405, "invalid_request_error", NULL, "%s needs POST, not %s", url, method);
        srv_send_error_h(c, &e, "Allow", "POST");
        return SRV_HTTP_HEAD_ANSWERED;
    }
    return SRV_HTTP_HEAD_READ_BODY;
}

/* A request with its whole body, on a worker: the admin routes and the POST routes. */
static void srv_dispatch(server *s, srv_http_req *c, int64_t t_arrival_ns) {
    srv_err e;
    const char *url = srv_http_req_path(c);
    if (srv_is_admin(s, url)) {
        srv_route_admin(s, c, url);
        return;
    }
    if (!strcmp(url, SRV_KV_CANCEL_URL)) {
        srv_route_kv_cancel(s, c);
        return;
    }
    if (atomic_load(&s->draining)) { /* drained while it was queued or its body arrived */
        srv_metrics_reject(s->metrics, SRV_REJECT_DRAINING);
        srv_fail(&e, 503, "server_error", NULL, "the server is shutting down");
        srv_send_error(c, &e);
        return;
    }
    size_t blen;
    const char *bdata = srv_http_req_body(c, &blen);
    arena *a = arena_create(64 * 1024, 64 * 1024 * 1024);
    json_value *body;
    int rc = a ? json_parse(a, bdata, blen, &body) : ERR_NOMEM;
    if (rc) {
        srv_metrics_reject(s->metrics, SRV_REJECT_INVALID);
        srv_fail(&e, 400, "invalid_request_error", NULL, "request body is not valid JSON: %s",
                 err_detail());
        srv_send_error(c, &e);
    } else if (body->type != JSON_OBJECT) {
        srv_metrics_reject(s->metrics, SRV_REJECT_INVALID);
        srv_fail(&e, 400, "invalid_request_error", NULL, "request body must be a JSON object");
        srv_send_error(c, &e);
    } else if (!strcmp(url, "/tokenize")) {
        srv_route_tokenize(s, c, body);
    } else if (!strcmp(url, "/detokenize")) {
        srv_route_detokenize(s, c, body);
    } else {
        srv_route_generate(s, c, t_arrival_ns, a, body, !strcmp(url, "/v1/chat/completions"));
    }
    arena_destroy(a);
}

/* ---- the worker pool ---- */

typedef struct srv_job {
    srv_http_req *req;
    int64_t t_arrival_ns;
} srv_job;

/* Runs one request on a worker (base/workq.h). */
static void srv_worker_run(void *user, void *state, void *item) {
    (void)state;
    server *s = user;
    srv_job *j = item;
    srv_dispatch(s, j->req, j->t_arrival_ns);
    srv_http_req_release(j->req); /* an unanswered request is answered 500 */
    free(j);
    atomic_fetch_sub(&s->active, 1);
}

/* A complete request, on the event thread (srv_http.h: on_request): queued for a worker, one
 * started if none is idle and the pool may grow; 429 when the pool and its queue are full. */
static void srv_on_request(void *user, srv_http_req *c) {
    server *s = user;
    atomic_fetch_add(&s->active, 1);
    srv_job *j = malloc(sizeof *j);
    if (j) {
        *j = (srv_job){.req = c, .t_arrival_ns = clock_now_ns()};
        if (workq_push(s->pool, j) == 0)
            return;
    }
    free(j);
    srv_err e;
    srv_metrics_reject(s->metrics, SRV_REJECT_QUEUE_FULL);
    srv_fail(&e, 429, "rate_limit_error", NULL,
             "the server is at capacity (%d requests being handled or waiting for a handler); "
             "retry later",
             s->max_workers);
    srv_send_error_h(c, &e, "Retry-After", "1");
    srv_http_req_release(c);
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
    int64_t nw = o->max_batch + o->queue_max + SRV_WORKERS_EXTRA;
    s->max_workers = (int)(nw > SRV_WORKERS_MAX ? SRV_WORKERS_MAX : nw);
    workq_cfg wc = {.max_threads = s->max_workers,
                    .max_queued = s->max_workers,
                    .stack_bytes = SRV_WORKER_STACK,
                    .fn = srv_worker_run,
                    .user = s};
    workq_create(&wc, &s->pool);
    s->api_key = o->api_key && o->api_key[0] ? strdup(o->api_key) : NULL;
    s->metrics = srv_metrics_create();
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_verity_%s", VERITY_VERSION);
    if (!s->metrics || !s->pool) {
        server_destroy(s);
        return err_set(ERR_NOMEM, "server: out of memory");
    }
    int rc = srv_http_listen(o->host, o->port, &s->listen_fd, &s->port);
    if (rc) {
        server_destroy(s);
        char why[400]; /* err_detail() is the buffer err_set writes */
        snprintf(why, sizeof why, "%s", err_detail());
        return err_set(rc, "server: %s", why);
    }
    snprintf(s->too_large_msg, sizeof s->too_large_msg,
             "request body larger than --max-body (%zu MiB)", o->max_body_bytes >> 20);
    snprintf(s->budget_msg, sizeof s->budget_msg,
             "the server is receiving as many request bodies as --max-body-total (%zu MiB) "
             "allows; retry later",
             o->max_body_total_bytes >> 20);
    /* --timeout: how long a connection may stay idle or take to send its request; the head has
     * its own, shorter deadline (at most SRV_HEAD_TIMEOUT_S), the body a rate floor besides */
    srv_http_cfg cfg = {
        .listen_fd = s->listen_fd,
        .on_head = srv_on_head,
        .on_request = srv_on_request,
        .user = s,
        .max_body_bytes = o->max_body_bytes,
        .max_body_total_bytes = o->max_body_total_bytes,
        .max_conns = o->max_conns,
        .max_conns_per_addr = o->max_conns_per_addr,
        .nagle = o->nagle,
        .send_each_write = o->send_each_write,
        .too_large_msg = s->too_large_msg,
        .budget_msg = s->budget_msg,
    };
    srv_http_cfg_timeouts(&cfg, o->timeout_s, SRV_HEAD_TIMEOUT_S);
    rc = srv_http_create(&cfg, &s->http);
    if (rc) {
        char why[400]; /* err_set must not format the detail into itself */
        snprintf(why, sizeof why, "%s", err_detail());
        server_destroy(s);
        return err_set(rc, "server: cannot start the HTTP layer on %s:%d: %s", o->host, o->port,
                       why);
    }
    s->listen_fd = -1; /* the layer's now */
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
    /* answers in progress get SRV_SHUTDOWN_MS to be sent; then every connection closes, so a
     * worker still writing to a client that does not read sees it gone and finishes */
    if (s->http)
        srv_http_shutdown(s->http, SRV_SHUTDOWN_MS);
    /* the workers finish what is queued (the layer is shut down by then, so those requests are
     * gone and cost nothing) and exit */
    workq_destroy(s->pool);
    s->pool = NULL;
    if (s->http)
        srv_http_destroy(s->http);
    else if (s->listen_fd >= 0)
        close(s->listen_fd);
    srv_metrics_destroy(s->metrics);
    grammar_vocab_destroy(s->gvocab);
    pthread_mutex_destroy(&s->admit_mu);
    free(s->api_key);
    free(s);
}
