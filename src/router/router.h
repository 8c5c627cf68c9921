/* SPDX-License-Identifier: MIT */
/*
 * router: the front over many OpenAI-compatible verity servers (`verity router --replica
 * URL,...`): data parallel, each request answered whole by one backend, chosen by load and by
 * prefix cache.
 *
 * It serves the same routes as `verity serve` (POST /v1/completions, /v1/chat/completions,
 * /tokenize, /detokenize; GET /v1/models, /v1/flags) by passing each request to one backend and
 * its answer back, byte for byte: a whole answer as it came (status, body, Content-Type), a
 * stream event by event (only complete SSE events are passed on, so a client never sees half of
 * one). Its own routes: GET /health (200 while a backend is up), GET /metrics (per-backend
 * requests, latency, errors, health, routing decisions). Auth (--api-key), body limits and the
 * HTTP layer's caps are the server's (server/srv_http.h, the same layer).
 *
 * Threads: the HTTP layer's event thread answers /health, /metrics and every refusal inline and
 * queues complete requests for workers started as needed (base/workq.h); a worker sends its request
 * to a backend with its own blocking client (base/http_fetch.h; the workers share one cache of
 * kept-alive connections, so a backend sees no more connections than requests at once) and streams
 * the answer through: with direct_write (flag router-direct-write) it sends each complete event on
 * the client's socket itself (srv_http_cfg.direct_write), so an event costs one wake-up (the
 * worker's), not two. /metrics' verity_router_overhead_seconds is the router's own time: per
 * request, body complete -> the backend request about to be written; per write of events, the
 * backend's bytes reaching the worker -> written to the client (rt_int.h defines both). With
 * loops > 0 (flag router-loop, default 1) there are no workers: N proxy loops drive every backend transfer
 * with libcurl's multi interface, the same decisions, bytes and metrics, no thread per request
 * (rt_loop.c). A health thread polls every backend's GET /v1/status (running and waiting
 * sequences, KV blocks used, draining) every health_ms: a backend that fails it or drains is taken
 * out, one that answers again is put back. A request whose backend cannot be reached is also taken
 * out at once (passive check).
 *
 * Retries and duplication: a request is retried on another backend only while nothing of its
 * answer has been passed to the client (refused connection, a backend dying before its first
 * byte, a 503 or 429 from a backend loading, draining or full, a whole answer cut short); once a
 * stream has passed an event on, a failing backend ends it with an OpenAI error event and no
 * [DONE], never a second attempt, so no token is ever sent twice.
 *
 * Routing (rt_policy.c): each request's prompt text (the completions prompt, or the chat
 * messages' roles and contents) is cut into fixed blocks of bytes whose chain hashes approximate
 * the backend's prefix cache: every backend keeps a bounded table of the block hashes of the
 * prompts sent to it. Among backends that are up and not yet tried, if the load spread (router
 * in-flight requests plus the backend's own waiting sequences) exceeds balance_abs, the least
 * loaded wins; otherwise the backend holding the longest known prefix wins when it covers at
 * least cache_pct percent of the prompt's blocks; otherwise the least loaded (ties: least KV
 * used, then the next in turn). Each is a counted routing decision.
 *
 * Disaggregation (--prefill URL,... --decode URL,...; disagg/disagg.h has the servers' side):
 * for a generation request the router picks a decode server D (load-aware, as above, among the
 * decode servers) and a prefill server P (cache-aware, among the prefill servers), and a fresh
 * transfer id X. P gets the request with "kv_transfer":{"id":X,"send_to":D's kv_addr (from its
 * /v1/status)}, max_tokens 1 and no stream, on its own thread; D gets it with
 * "kv_transfer":{"id":X,"recv":true} and its answer is the client's, streamed or whole, exactly
 * as with replicas (the same retries, errors and auth). D waits for P's blocks (bounded), takes
 * them from its prefix cache and samples every token itself, so its answer is the monolithic
 * one. P's answer ends with "kv_transfer":{"status":"sent"|"failed"|"none"}; when P's call
 * fails, is not 200 or says "failed", the router posts {"id":X} to D's /v1/kv_transfer/cancel, so
 * D computes the prompt at once instead of waiting out its --kv-xfer-timeout (counted in
 * verity_router_disagg_cancels_total). If D fails before its first byte the request goes to another decode server without a
 * transfer (it computes the prompt itself: slower, the same bytes); no prefill server up, or no
 * kv_addr known for D: D computes it. /metrics gives each backend's role
 * (verity_router_backend_role) and counts the transfers the router set up.
 *
 * Drain: router_drain makes every new request get 503 while those in flight finish; the caller
 * waits for router_active to reach 0 (or its deadline) and destroys.
 */
#ifndef VERITY_ROUTER_ROUTER_H
#define VERITY_ROUTER_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ROUTER_MAX_BACKENDS 64

/* A backend's role: a monolithic replica, or one side of the disaggregated flow. */
enum { ROUTER_ROLE_REPLICA = 0, ROUTER_ROLE_PREFILL = 1, ROUTER_ROLE_DECODE = 2 };

typedef struct router_opts {
    const char *host;            /* IPv4 address to bind */
    int port;                    /* 0: any free port */
    const char *const *replicas; /* base URLs as router_url_check normalised them */
    int n_replicas;
    const int *roles; /* [n_replicas] ROUTER_ROLE_*; NULL: every backend is a replica. With
                         prefill and decode backends the router runs the disaggregated flow */
    const char *api_key;               /* clients must send it (NULL or "": none) */
    const char *backend_api_key;       /* sent to the backends (NULL or "": none) */
    int timeout_s;                     /* idle/body deadline of client connections, and the bound on
                                          one backend request */
    int max_conns, max_conns_per_addr; /* 0: the layer's defaults */
    size_t max_body_bytes, max_body_total_bytes;
    int workers;      /* worker threads: requests proxied at once */
    int health_ms;    /* interval of the health and load polls */
    bool cache_aware; /* false: load alone decides */
    int balance_abs;  /* load spread beyond which the least loaded backend wins */
    int cache_pct;    /* matched share of a prompt's blocks for the cache to decide */
    bool nagle;        /* keep Nagle's algorithm on client connections (--http-nodelay 0) */
    bool send_each_write; /* srv_http_cfg.send_each_write (--http-append-blocked 0) */
    bool direct_write; /* a worker sends its stream's events on the client's socket itself
                          (srv_http_cfg.direct_write; flag router-direct-write) */
    int loops; /* 0: every request is proxied on a worker (above); N >= 1: N proxy loops drive
                  every backend transfer without a thread per request (flag router-loop,
                  default 1) */
} router_opts;

typedef struct router router;

/* Checks one backend URL, "http://HOST:PORT" with an optional trailing '/', and writes it without
 * the slash into norm[0, cap). Returns 0, or ERR_INVAL with err_detail() naming the URL and what
 * is wrong with it (another scheme, no host, no or a bad port, a path). */
int router_url_check(const char *url, char *norm, size_t cap);

/* Binds and listens, polls every backend once (so a router whose backends are up serves from its
 * first request), then starts the health thread and the workers. Returns 0 and *out, ERR_INVAL
 * (no replicas, too many, a bad host), ERR_IO (cannot listen: the detail names the address),
 * ERR_NOMEM, ERR_INTERNAL (a thread or libcurl). */
int router_create(const router_opts *o, router **out);

/* The port actually bound. */
int router_port(const router *r);

/* Backends up now. */
int router_backends_up(router *r);

/* New requests get 503 from now on; those in flight continue. */
void router_drain(router *r);

/* Requests handed to the workers and not finished. */
int64_t router_active(const router *r);

/* Stops listening, lets answers in progress be sent for up to 2 s, closes every connection,
 * stops the workers and the health thread, frees. NULL is a no-op. */
void router_destroy(router *r);

#endif
