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
    http_fetch_pool *conns; /* the workers' shared idle connections to the backends */
};

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
