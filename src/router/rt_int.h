/* SPDX-License-Identifier: MIT */
/*
 * rt_int: declarations shared inside src/router only: the router's state, its backends, the
 * routing policy (rt_policy.c), the health thread and the metrics (rt_backend.c).
 *
 * Locking: r->mu guards every backend's mutable fields (health, load, counters, the prefix
 * table) and the routing counters; each holder does O(backends + prompt blocks) work under it.
 */
#ifndef VERITY_ROUTER_RT_INT_H
#define VERITY_ROUTER_RT_INT_H

#include "base/http_fetch.h"
#include "base/strbuf.h"
#include "router/router.h"
#include "server/srv_http.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Prompt bytes per hashed block, and the most blocks of one prompt considered. */
#define RT_BLOCK_BYTES 32
#define RT_MAX_BLOCKS  4096
/* Slots of a backend's table of block hashes (a power of two): direct-mapped, a newer hash
 * replaces an older one in its slot, so the table approximates the most recent prompts. */
#define RT_PREFIX_SLOTS (1u << 16)

/* Latency histogram bounds (seconds) of the per-backend request histogram. */
#define RT_N_BUCKETS 12

/* The router's own added time (verity_router_overhead_seconds; rt_backend.c has the bounds):
 * request: the request's body complete (the HTTP layer's on_request, event thread) -> the request
 * about to be written on the first backend connection made or reused for it (http_fetch's
 * on_send; an attempt refused at connect has none, so its retry is included), one sample;
 * event: a backend's bytes handed to the worker by libcurl -> the complete events among them
 * written to the client (srv_http_stream_write returned: with router-direct-write, sent on the
 * socket unless it was full; without, queued for the event thread), one sample per write. */
#define RT_OVH_BUCKETS 24
enum rt_ovh_part { RT_OVH_REQUEST, RT_OVH_EVENT, RT_OVH_N };

/* a whole (non-streamed) answer held for passing on: beyond this the attempt fails */
#define RT_MAX_ANSWER_BYTES ((size_t)256 << 20)
/* a prefill's answer (whole: its body asks for no stream): beyond this it failed */
#define RT_PREFILL_ANSWER_MAX ((size_t)1 << 20)
/* the head of a stream passed on */
#define RT_SSE_HEADERS                                                                             \
    "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"

enum rt_decision { RT_DECIDE_CACHE, RT_DECIDE_LEAST_LOAD, RT_DECIDE_BALANCE, RT_N_DECISIONS };
enum rt_outcome { RT_OUT_OK, RT_OUT_ERROR, RT_OUT_RETRIED, RT_N_OUTCOMES };

typedef struct rt_backend {
    char url[256]; /* base URL, no trailing slash */
    int role;      /* ROUTER_ROLE_* */
    char kv_addr[300]; /* decode: its KV receiver, "host:port" from /v1/status ("" unknown) */
    /* guarded by router.mu */
    bool up;
    int64_t inflight;          /* requests this router has sent it and not finished */
    int64_t waiting, running;  /* from its last /v1/status */
    int64_t kv_used, kv_total; /* from its last /v1/status */
    uint64_t n_outcome[RT_N_OUTCOMES];
    uint64_t health_changes;
    uint64_t lat_bucket[RT_N_BUCKETS + 1]; /* the last: +Inf */
    double lat_sum;
    uint64_t *prefix; /* [RT_PREFIX_SLOTS] block chain hashes (0: empty) */
} rt_backend;

struct router {
    router_opts o;
    char *api_key, *backend_api_key;
    srv_http *http;
    int listen_fd;
    int port;
    atomic_bool draining;
    _Atomic int64_t active;
    int n_backends;
    rt_backend *backends; /* [n_backends] */
    pthread_mutex_t mu;
    uint64_t n_decisions[RT_N_DECISIONS];
    uint64_t no_backend; /* requests answered 503 for want of a backend */
    bool disagg;         /* prefill and decode backends: the disaggregated flow */
    uint64_t n_disagg[3]; /* requests: with a transfer, without a prefill server, without a
                             kv_addr (D computes) */
    uint64_t n_cancels[2]; /* cancels sent to decode servers after a failed prefill: answered
                              200, failed */
    _Atomic uint64_t xfer_seq; /* transfer ids */
    unsigned turn;       /* rotates the ties */
    /* health thread */
    pthread_t health;
    bool health_started, health_stop;
    pthread_cond_t health_cv;
    /* the overhead histogram: counts per bucket (the last: +Inf) and sums, lock-free */
    _Atomic uint64_t ovh_bucket[RT_OVH_N][RT_OVH_BUCKETS + 1];
    _Atomic uint64_t ovh_sum_ns[RT_OVH_N];
    struct workq *pool;     /* the workers (base/workq.h), started as needed up to o.workers */
    struct rt_loop **loops; /* [o.loops] the proxy loops (rt_loop.c) when o.loops > 0 */
    _Atomic unsigned loop_turn; /* the loop the next request goes to */
    http_fetch_pool *conns; /* the workers' shared idle connections to the backends */
};

/* ---- router.c: pieces both proxy paths use (the workers' rt_proxy, rt_loop.c) ---- */

/* Answers req with an OpenAI-shaped error {"error":{"message","type","param":null,"code"}}
 * (code NULL: the status), with an optional extra header line h (ending in CRLF). Returns
 * srv_http_respond's code. */
int rt_send_error(srv_http_req *req, int status, const char *type, const char *code,
                  const char *h, const char *msg);

/* The length of p[0, len) up to and including its last blank line ("\n\n", the end of the last
 * complete SSE event); 0 when it holds no complete event. */
size_t rt_sse_complete(const char *p, size_t len);

/* Appends to sb the error event that ends a stream whose backend url failed (why): an OpenAI
 * error object with code "backend_failed", as "data: ...\n\n". */
void rt_stream_error_event(strbuf *sb, const char *url, const char *why);

/* Answers req with a complete held answer as it came: status, Content-Type ctype ("" ->
 * application/json; Retry-After: 1 with a 429 or 503), body held. */
void rt_respond_whole(srv_http_req *req, long status, const char *ctype, const strbuf *held);

/* The prefill side of one disaggregated request (router.h "Disaggregation"): P's request and,
 * when it fails (no answer, not 200, "kv_transfer":{"status":"failed"}), the cancel POSTed to
 * the decode server (body rt_prefill_cancel_body), so it computes the prompt at once instead of
 * waiting out its --kv-xfer-timeout. Runs on its own thread (workers) or as further transfers of
 * the request's loop (rt_loop.c); either way the request ends after it. The same cancel goes to
 * the decode server when the router gives up on it before it answered (a 503 or 429 refusal, a
 * failure before anything was passed on: the request goes to another decode server, which
 * computes the prompt, or to none): there it leaves a tombstone, so P's connection for the
 * transfer is refused at once instead of waiting out that server's --kv-xfer-timeout with P's
 * blocks held (disagg.h "Cancel"). */
typedef struct rt_prefill {
    router *r;
    int b; /* the prefill backend */
    char url[1200];
    char cancel_url[1200]; /* the decode server's cancel route */
    uint64_t id;           /* the transfer's */
    char *body;            /* owned */
    size_t len;
    pthread_t thread; /* the worker path's */
} rt_prefill;

/* Starts pf's part (called by rt_disagg_start with its ud). Returns 0, or a negative code: then
 * nothing was started and rt_disagg_start frees pf. */
typedef int (*rt_prefill_start_fn)(rt_prefill *pf, void *ud);

/* For a generation request sent to decode server d: picks a prefill server (cache-aware, blocks
 * h[0, nh)), builds its body and D's, starts P's part with start(pf, ud), and counts the
 * request in verity_router_disagg_requests_total. Returns D's body (malloc'd, *dlen its length)
 * and *pp (the caller frees pf->body and pf once its part ended), or NULL and *pp NULL: D gets the
 * original body and computes the prompt (no kv_addr known, no prefill server up, a body that is
 * not a JSON object, start failed). */
char *rt_disagg_start(router *r, int d, const char *path, const char *body, size_t blen,
                      const uint64_t *h, int nh, rt_prefill_start_fn start, void *ud,
                      rt_prefill **pp, size_t *dlen);

/* Appends n bytes of P's answer to sb. Returns 0, or ERR_NOMEM past RT_PREFILL_ANSWER_MAX. */
int rt_prefill_answer_add(strbuf *sb, const char *bytes, size_t n);

/* Whether P's part failed (rc: its transfer's code, status, ans: its answer); logs why when it
 * did (the caller then sends the cancel). */
bool rt_prefill_failed(const rt_prefill *p, int rc, long status, const strbuf *ans);

/* Writes the cancel's body {"id":"X"} into buf[0, cap); returns its length. */
int rt_prefill_cancel_body(const rt_prefill *p, char *buf, size_t cap);

/* Counts the cancel's outcome (rc: its transfer's code, status) and logs a failed one. */
void rt_prefill_cancel_done(rt_prefill *p, int rc, long status);

/* ---- rt_loop.c: the event-driven proxy path (flag router-loop) ---- */

/* Starts r->o.loops proxy loops into r->loops. Returns 0, ERR_NOMEM or ERR_INTERNAL (a thread,
 * epoll, an eventfd or libcurl's multi handle: err_detail names which); on error the loops
 * started are stopped. */
int rt_loops_start(router *r);

/* Hands a complete request (its body complete at t0_ns) to a loop; the loop owns the caller's
 * reference from here (it answers, releases req and decrements r->active). Any thread; never
 * blocks (a lock held for a list insert, an eventfd write when the loop sleeps). */
void rt_loop_submit(router *r, srv_http_req *req, int64_t t0_ns);

/* Stops every loop: requests still queued are answered 503, transfers in progress are removed
 * (their clients are gone once srv_http_shutdown returned), each request released; joins the
 * threads and frees. Call after srv_http_shutdown. No-op when none were started. */
void rt_loops_stop(router *r);

/* ---- rt_policy.c ---- */

/* The chain hashes of the prompt blocks of a request body (JSON of /v1/completions or
 * /v1/chat/completions) into h[0, RT_MAX_BLOCKS); returns how many (0 when the body has no
 * prompt, is not JSON, or its prompt is shorter than one block). */
int rt_prefix_hashes(const char *body, size_t len, uint64_t *h);

/* Chooses a backend among those up and not in tried (a bitmask of indices) for a prompt of
 * blocks h[0, n), counts the decision and the request as in flight there, and records the
 * prompt's blocks in its table. Only backends of role `role` (ROUTER_ROLE_*) are considered.
 * Returns the index, or -1 when none is left. */
int rt_policy_choose(router *r, const uint64_t *h, int n, uint64_t tried, int role);

/* ---- rt_backend.c ---- */

/* Allocates the backends' tables and state for r->o.replicas. Returns 0 or ERR_NOMEM. */
int rt_backends_init(router *r);
void rt_backends_free(router *r);

/* Polls every backend's /v1/status once, updating health and load. */
void rt_health_poll(router *r);

/* Starts / stops the thread that calls rt_health_poll every health_ms. */
int rt_health_start(router *r);
void rt_health_stop(router *r);

/* Records a finished attempt on backend b: its outcome and (for OK) its latency; takes it out
 * when unreachable is set. Ends the attempt's in-flight count. */
void rt_backend_done(router *r, int b, enum rt_outcome out, double seconds, bool unreachable);

/* Counts one sample of the router's own time, ns nanoseconds, in part p's histogram. Any
 * thread, no lock. */
void rt_overhead_add(router *r, enum rt_ovh_part p, int64_t ns);

/* Appends the router's metrics (Prometheus text) to sb. */
void rt_metrics_write(router *r, strbuf *sb);

#endif
