/* SPDX-License-Identifier: MIT */
/*
 * rt_backend: the backends' state, the health thread and the router's /metrics.
 *
 * Health: every health_ms the thread sends GET /v1/status to each backend in turn (one blocking
 * client, a timeout of at most 2 s each). A backend is up when it answers 200 and is not
 * draining; its running and waiting sequences and KV blocks used feed the load (rt_policy.c). A
 * backend the poll or a request cannot reach is out until a poll finds it answering again.
 * Changes of health are logged and counted.
 */
#include "router/rt_int.h"
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/http_fetch.h"
#include "base/json.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const double rt_bounds[RT_N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,    2.5,   5,    10,  30};

/* Bounds (seconds) of verity_router_overhead_seconds: 1-1.5-2-3-5-7.5 per decade from 5 us to
 * 100 ms, so a p99 near 1 ms is read to within a factor of 1.5. */
static const double rt_ovh_bounds[RT_OVH_BUCKETS] = {
    5e-6,   7.5e-6, 1e-5,   1.5e-5, 2e-5, 3e-5,   5e-5, 7.5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4,
    5e-4,   7.5e-4, 1e-3,   1.5e-3, 2e-3, 3e-3,   5e-3, 7.5e-3, 1e-2, 2e-2,   5e-2, 0.1};

void rt_overhead_add(router *r, enum rt_ovh_part p, int64_t ns) {
    ns = ns < 0 ? 0 : ns;
    double s = (double)ns * 1e-9;
    int k = 0;
    while (k < RT_OVH_BUCKETS && s > rt_ovh_bounds[k])
        k++;
    atomic_fetch_add_explicit(&r->ovh_bucket[p][k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->ovh_sum_ns[p], (uint64_t)ns, memory_order_relaxed);
}

/* verity_router_overhead_seconds (rt_int.h defines the parts). */
static void rt_overhead_write(router *r, strbuf *sb) {
    static const char *part[RT_OVH_N] = {"request", "event"};
    strbuf_puts(sb,
                "# HELP verity_router_overhead_seconds The router's own added time. "
                "part=\"request\": from a request's body being complete on the router to the "
                "request being about to be written to the first backend connection made or reused "
                "for it (queueing for a worker, routing, connection reuse; a refused connection's "
                "retry included). part=\"event\": "
                "from a backend's stream bytes reaching the router's worker to the complete SSE "
                "events among them being written to the client (sent on its socket with "
                "router-direct-write=1 unless the socket was full, else queued for the event "
                "thread), one sample per write of one or more events.\n"
                "# TYPE verity_router_overhead_seconds histogram\n");
    for (int p = 0; p < RT_OVH_N; p++) {
        uint64_t cum = 0;
        for (int k = 0; k <= RT_OVH_BUCKETS; k++) {
            cum += atomic_load_explicit(&r->ovh_bucket[p][k], memory_order_relaxed);
            if (k < RT_OVH_BUCKETS)
                strbuf_printf(sb, "verity_router_overhead_seconds_bucket{part=\"%s\",le=\"%g\"} %llu\n",
                              part[p], rt_ovh_bounds[k], (unsigned long long)cum);
            else
                strbuf_printf(sb,
                              "verity_router_overhead_seconds_bucket{part=\"%s\",le=\"+Inf\"} %llu\n",
                              part[p], (unsigned long long)cum);
        }
        strbuf_printf(sb, "verity_router_overhead_seconds_sum{part=\"%s\"} %.9f\n", part[p],
                      (double)atomic_load_explicit(&r->ovh_sum_ns[p], memory_order_relaxed) * 1e-9);
        strbuf_printf(sb, "verity_router_overhead_seconds_count{part=\"%s\"} %llu\n", part[p],
                      (unsigned long long)cum);
    }
}

int rt_backends_init(router *r) {
    r->n_backends = r->o.n_replicas;
    r->backends = calloc((size_t)r->n_backends, sizeof *r->backends);
    if (!r->backends)
        return err_set(ERR_NOMEM, "router: out of memory");
    for (int i = 0; i < r->n_backends; i++) {
        rt_backend *b = &r->backends[i];
        snprintf(b->url, sizeof b->url, "%s", r->o.replicas[i]);
        b->role = r->o.roles ? r->o.roles[i] : ROUTER_ROLE_REPLICA;
        r->disagg |= b->role != ROUTER_ROLE_REPLICA;
        b->prefix = calloc(RT_PREFIX_SLOTS, sizeof *b->prefix);
        if (!b->prefix)
            return err_set(ERR_NOMEM, "router: out of memory");
    }
    return 0;
}

void rt_backends_free(router *r) {
    for (int i = 0; r->backends && i < r->n_backends; i++)
        free(r->backends[i].prefix);
    free(r->backends);
    r->backends = NULL;
}

/* Sets b's health (under r->mu), logging and counting a change. */
static void rt_set_up(rt_backend *b, bool up, const char *why) {
    if (b->up == up)
        return;
    b->up = up;
    b->health_changes++;
    if (up)
        log_info("router: backend %s is up", b->url);
    else
        log_warn("router: backend %s is out: %s", b->url, why);
}

typedef struct rt_status_buf {
    char data[1024];
    size_t len;
} rt_status_buf;

static int rt_status_data(void *ud, long status, const char *ct, const char *bytes, size_t n) {
    (void)status, (void)ct;
    rt_status_buf *sb = ud;
    if (n > sizeof sb->data - 1 - sb->len)
        return ERR_TOOLARGE;
    memcpy(sb->data + sb->len, bytes, n);
    sb->len += n;
    sb->data[sb->len] = 0;
    return 0;
}

static int64_t rt_json_int(const json_value *o, const char *key) {
    int64_t v = 0;
    const json_value *x = json_get(o, key);
    if (!x || !json_as_int(x, &v))
        return 0;
    return v;
}

/* One backend's poll: its status, parsed, applied under r->mu. */
static void rt_poll_one(router *r, http_fetch *f, int i) {
    rt_backend *b = &r->backends[i];
    char url[300];
    snprintf(url, sizeof url, "%s/v1/status", b->url);
    rt_status_buf sb = {.len = 0};
    double t = r->o.health_ms < 2000 ? 2.0 : r->o.health_ms / 1000.0;
    if (t > 2)
        t = 2;
    http_fetch_req q = {.url = url,
                        .api_key = r->backend_api_key,
                        .timeout_s = t,
                        .on_data = rt_status_data,
                        .ud = &sb};
    long status = 0;
    int rc = http_fetch_run(f, &q, &status);
    char why[600] = "";
    arena *a = arena_create(4096, 1 << 20);
    json_value *v = NULL;
    bool up = false, draining = false;
    if (rc)
        snprintf(why, sizeof why, "%s", err_detail());
    else if (status != 200)
        snprintf(why, sizeof why, "GET %s answered %ld", url, status);
    else if (!a || json_parse(a, sb.data, sb.len, &v) || v->type != JSON_OBJECT)
        snprintf(why, sizeof why, "GET %s: not a status object", url);
    else {
        const json_value *d = json_get(v, "draining");
        if (d)
            json_as_bool(d, &draining);
        up = !draining;
        if (draining)
            snprintf(why, sizeof why, "draining");
    }
    pthread_mutex_lock(&r->mu);
    if (v && v->type == JSON_OBJECT) {
        b->running = rt_json_int(v, "running");
        b->waiting = rt_json_int(v, "waiting");
        b->kv_used = rt_json_int(v, "kv_used");
        b->kv_total = rt_json_int(v, "kv_total");
        /* a decode server's KV receiver; a wildcard host means: the host of its URL */
        const char *ka = NULL;
        size_t kl = 0;
        b->kv_addr[0] = 0;
        if (json_as_str(json_get(v, "kv_addr"), &ka, &kl) && kl > 0 && kl < 200) {
            const char *colon = memrchr(ka, ':', kl);
            bool wild = colon && ((colon - ka == 7 && !memcmp(ka, "0.0.0.0", 7)) || colon == ka);
            if (wild) {
                const char *h = b->url + 7, *e = strrchr(h, ':');
                snprintf(b->kv_addr, sizeof b->kv_addr, "%.*s%.*s", (int)(e - h), h,
                         (int)(kl - (size_t)(colon - ka)), colon);
            } else {
                snprintf(b->kv_addr, sizeof b->kv_addr, "%.*s", (int)kl, ka);
            }
        }
    }
    rt_set_up(b, up, why);
    pthread_mutex_unlock(&r->mu);
    arena_destroy(a);
}

void rt_health_poll(router *r) {
    http_fetch *f;
    if (http_fetch_create(NULL, &f))
        return;
    for (int i = 0; i < r->n_backends; i++)
        rt_poll_one(r, f, i);
    http_fetch_destroy(f);
}

static void *rt_health_main(void *arg) {
    router *r = arg;
    http_fetch *f = NULL;
    http_fetch_create(NULL, &f);
    pthread_mutex_lock(&r->mu);
    while (!r->health_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (int64_t)r->o.health_ms * 1000000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&r->health_cv, &r->mu, &ts);
        if (r->health_stop || !f)
            break;
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < r->n_backends; i++)
            rt_poll_one(r, f, i);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    http_fetch_destroy(f);
    return NULL;
}

int rt_health_start(router *r) {
    if (pthread_create(&r->health, NULL, rt_health_main, r))
        return err_set(ERR_INTERNAL, "router: cannot start the health thread");
    r->health_started = true;
    return 0;
}

void rt_health_stop(router *r) {
    if (!r->health_started)
        return;
    pthread_mutex_lock(&r->mu);
    r->health_stop = true;
    pthread_cond_broadcast(&r->health_cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->health, NULL);
    r->health_started = false;
}

void rt_backend_done(router *r, int i, enum rt_outcome out, double seconds, bool unreachable) {
    pthread_mutex_lock(&r->mu);
    rt_backend *b = &r->backends[i];
    b->inflight--;
    b->n_outcome[out]++;
    if (out == RT_OUT_OK) {
        int k = 0;
        while (k < RT_N_BUCKETS && seconds > rt_bounds[k])
            k++;
        b->lat_bucket[k]++;
        b->lat_sum += seconds;
    }
    if (unreachable)
        rt_set_up(b, false, "a request could not reach it");
    pthread_mutex_unlock(&r->mu);
}

void rt_metrics_write(router *r, strbuf *sb) {
    static const char *dec[RT_N_DECISIONS] = {"cache", "least_load", "balance"};
    static const char *outc[RT_N_OUTCOMES] = {"ok", "error", "retried"};
    pthread_mutex_lock(&r->mu);
    strbuf_puts(sb, "# HELP verity_router_backend_up Whether the backend is in the rotation.\n"
                    "# TYPE verity_router_backend_up gauge\n");
    for (int i = 0; i < r->n_backends; i++)
        strbuf_printf(sb, "verity_router_backend_up{backend=\"%s\"} %d\n", r->backends[i].url,
                      r->backends[i].up);
    static const char *roles[3] = {"replica", "prefill", "decode"};
    strbuf_puts(sb, "# HELP verity_router_backend_role The backend's role (replica, prefill, "
                    "decode): always 1.\n# TYPE verity_router_backend_role gauge\n");
    for (int i = 0; i < r->n_backends; i++)
        strbuf_printf(sb, "verity_router_backend_role{backend=\"%s\",role=\"%s\"} 1\n",
                      r->backends[i].url, roles[r->backends[i].role]);
    if (r->disagg)
        strbuf_printf(sb,
                      "# HELP verity_router_disagg_requests_total Generation requests by how the "
                      "prompt's KV reached the decode server (transfer: from a prefill server; "
                      "no_prefill: none was up; no_kv_addr: the decode server's KV address is "
                      "unknown, or the body cannot carry a transfer; both compute it on the "
                      "decode server).\n"
                      "# TYPE verity_router_disagg_requests_total counter\n"
                      "verity_router_disagg_requests_total{path=\"transfer\"} %llu\n"
                      "verity_router_disagg_requests_total{path=\"no_prefill\"} %llu\n"
                      "verity_router_disagg_requests_total{path=\"no_kv_addr\"} %llu\n",
                      (unsigned long long)r->n_disagg[0], (unsigned long long)r->n_disagg[1],
                      (unsigned long long)r->n_disagg[2]);
    if (r->disagg)
        strbuf_printf(sb,
                      "# HELP verity_router_disagg_cancels_total Transfers whose prefill failed "
                      "(no answer, not 200, or its transfer not sent), so the decode server was "
                      "told to compute the prompt now, by the cancel's result (ok: answered 200).\n"
                      "# TYPE verity_router_disagg_cancels_total counter\n"
                      "verity_router_disagg_cancels_total{result=\"ok\"} %llu\n"
                      "verity_router_disagg_cancels_total{result=\"failed\"} %llu\n",
                      (unsigned long long)r->n_cancels[0], (unsigned long long)r->n_cancels[1]);
    strbuf_puts(sb, "# HELP verity_router_backend_inflight Requests this router has in flight "
                    "at the backend.\n# TYPE verity_router_backend_inflight gauge\n");
    for (int i = 0; i < r->n_backends; i++)
        strbuf_printf(sb, "verity_router_backend_inflight{backend=\"%s\"} %lld\n",
                      r->backends[i].url, (long long)r->backends[i].inflight);
    strbuf_puts(sb, "# HELP verity_router_backend_waiting Sequences waiting at the backend (its "
                    "last status).\n# TYPE verity_router_backend_waiting gauge\n");
    for (int i = 0; i < r->n_backends; i++)
        strbuf_printf(sb, "verity_router_backend_waiting{backend=\"%s\"} %lld\n",
                      r->backends[i].url, (long long)r->backends[i].waiting);
    strbuf_puts(sb, "# HELP verity_router_backend_kv_used_ratio KV blocks held at the backend "
                    "over its pool (its last status).\n"
                    "# TYPE verity_router_backend_kv_used_ratio gauge\n");
    for (int i = 0; i < r->n_backends; i++) {
        const rt_backend *b = &r->backends[i];
        strbuf_printf(sb, "verity_router_backend_kv_used_ratio{backend=\"%s\"} %.6f\n", b->url,
                      b->kv_total > 0 ? (double)b->kv_used / (double)b->kv_total : 0.0);
    }
    strbuf_puts(sb, "# HELP verity_router_backend_health_changes_total Times the backend was "
                    "taken out or put back.\n"
                    "# TYPE verity_router_backend_health_changes_total counter\n");
    for (int i = 0; i < r->n_backends; i++)
        strbuf_printf(sb, "verity_router_backend_health_changes_total{backend=\"%s\"} %llu\n",
                      r->backends[i].url, (unsigned long long)r->backends[i].health_changes);
    strbuf_puts(sb, "# HELP verity_router_requests_total Attempts sent to a backend, by outcome "
                    "(ok: answered; error: failed after streaming began, the client got an error; "
                    "retried: failed before anything was passed on).\n"
                    "# TYPE verity_router_requests_total counter\n");
    for (int i = 0; i < r->n_backends; i++)
        for (int k = 0; k < RT_N_OUTCOMES; k++)
            strbuf_printf(sb, "verity_router_requests_total{backend=\"%s\",outcome=\"%s\"} %llu\n",
                          r->backends[i].url, outc[k],
                          (unsigned long long)r->backends[i].n_outcome[k]);
    strbuf_puts(sb, "# HELP verity_router_request_seconds Time from sending a request to a "
                    "backend to the end of its answer (answered attempts).\n"
                    "# TYPE verity_router_request_seconds histogram\n");
    for (int i = 0; i < r->n_backends; i++) {
        const rt_backend *b = &r->backends[i];
        uint64_t cum = 0;
        for (int k = 0; k <= RT_N_BUCKETS; k++) {
            cum += b->lat_bucket[k];
            if (k < RT_N_BUCKETS)
                strbuf_printf(sb,
                              "verity_router_request_seconds_bucket{backend=\"%s\",le=\"%g\"} "
                              "%llu\n",
                              b->url, rt_bounds[k], (unsigned long long)cum);
            else
                strbuf_printf(sb,
                              "verity_router_request_seconds_bucket{backend=\"%s\",le=\"+Inf\"} "
                              "%llu\n",
                              b->url, (unsigned long long)cum);
        }
        strbuf_printf(sb, "verity_router_request_seconds_sum{backend=\"%s\"} %.6f\n", b->url,
                      b->lat_sum);
        strbuf_printf(sb, "verity_router_request_seconds_count{backend=\"%s\"} %llu\n", b->url,
                      (unsigned long long)cum);
    }
    rt_overhead_write(r, sb);
    strbuf_puts(sb, "# HELP verity_router_decisions_total Routing decisions (cache: the longest "
                    "known prefix; least_load: the least loaded; balance: the least loaded because "
                    "the load spread passed router-balance-abs).\n"
                    "# TYPE verity_router_decisions_total counter\n");
    for (int k = 0; k < RT_N_DECISIONS; k++)
        strbuf_printf(sb, "verity_router_decisions_total{decision=\"%s\"} %llu\n", dec[k],
                      (unsigned long long)r->n_decisions[k]);
    strbuf_printf(sb,
                  "# HELP verity_router_no_backend_total Requests answered 503 because no backend "
                  "was up (or every one had failed them).\n"
                  "# TYPE verity_router_no_backend_total counter\n"
                  "verity_router_no_backend_total %llu\n"
                  "# HELP verity_router_active Requests being proxied now.\n"
                  "# TYPE verity_router_active gauge\n"
                  "verity_router_active %lld\n",
                  (unsigned long long)r->no_backend, (long long)atomic_load(&r->active));
    pthread_mutex_unlock(&r->mu);
}
