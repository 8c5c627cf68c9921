/* SPDX-License-Identifier: MIT */
/*
 * The router's pure parts and the worker queue under it: router_url_check accepts exactly
 * http://HOST:PORT[/] and names what is wrong otherwise; rt_prefix_hashes makes requests that
 * share leading messages (or a leading prompt) share leading block hashes and nothing after the
 * first difference; rt_policy_choose prefers the backend holding the longest prefix, falls back
 * to the least loaded when the load spread passes balance_abs or the match is short, skips
 * backends that are down or tried, counts each decision and the request in flight, and answers
 * -1 when none is left; base/workq runs items in FIFO order, refuses a push beyond max_queued
 * (ERR_FULL, nothing queued), calls thread_init and thread_fini once per worker and finishes
 * every queued item on destroy. Nothing here depends on timing: the one worker is held on a
 * condition while the queue fills.
 */
#include "base/err.h"
#include "base/workq.h"
#include "router/rt_int.h"
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void t_url_check(void) {
    static const char *good[][2] = {
        {"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
        {"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
        {"http://node-1.example:1", "http://node-1.example:1"},
        {"http://[::1]:65535", "http://[::1]:65535"},
    };
    static const char *bad[] = {"https://127.0.0.1:8080", "http://127.0.0.1",
                                "http://:8080",           "http://127.0.0.1:0",
                                "http://h:65536",         "http://h:80/v1",
                                "http://h:80x",           "127.0.0.1:8080",
                                "http://[::1:80",         ""};
    char norm[256];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        T_CHECKF(router_url_check(good[i][0], norm, sizeof norm) == 0, "%s refused: %s", good[i][0],
                 err_detail());
        T_CHECKF(!strcmp(norm, good[i][1]), "%s -> %s", good[i][0], norm);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        T_CHECKF(router_url_check(bad[i], norm, sizeof norm) == ERR_INVAL, "'%s' accepted", bad[i]);
        T_CHECKF(strstr(err_detail(), bad[i]) != NULL, "'%s': detail '%s' does not name it", bad[i],
                 err_detail());
    }
}

static uint64_t ha[RT_MAX_BLOCKS], hb[RT_MAX_BLOCKS];

static int hashes(const char *body, uint64_t *h) {
    return rt_prefix_hashes(body, strlen(body), h);
}

static void t_prefix_hashes(void) {
    char sys[200], a[600], b[600];
    memset(sys, 's', 150);
    sys[150] = 0;
    snprintf(
        a, sizeof a,
        "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},{\"role\":\"user\",\"content\":"
        "\"what is the weather like in Zurich this afternoon\"}],\"max_tokens\":3}",
        sys);
    snprintf(
        b, sizeof b,
        "{\"seed\":4,\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},{\"role\":\"user\","
        "\"content\":\"tell me a long story about a cat on a mat\"}]}",
        sys);
    int na = hashes(a, ha), nb = hashes(b, hb);
    /* "system" 0x1f 150 x 's' 0x1e "user" 0x1f: 163 bytes, 5 blocks of 32, are shared */
    T_CHECKF(na >= 6 && nb >= 6, "%d and %d blocks", na, nb);
    int k = 0;
    while (k < na && k < nb && ha[k] == hb[k])
        k++;
    T_CHECKF(k == 5, "%d leading blocks shared, 5 expected", k);
    for (int i = k; i < na && i < nb; i++)
        T_CHECK(ha[i] != hb[i]); /* chained: nothing matches after the first difference */
    /* field order and other fields do not matter; the same prompt gives the same hashes */
    int nc =
        hashes("{\"max_tokens\":9,\"prompt\":\"0123456789012345678901234567890123456789\"}", ha);
    int nd = hashes("{\"prompt\":\"0123456789012345678901234567890123456789\",\"n\":2}", hb);
    T_CHECK(nc == 1 && nd == 1 && ha[0] == hb[0]);
    T_CHECK(hashes("{\"prompt\":\"short\"}", ha) == 0);
    T_CHECK(hashes("not json", ha) == 0);
    T_CHECK(hashes("{\"prompt\":[1,2,3]}", ha) == 0); /* "[1,2,3]": 7 bytes, no block */
}

/* A router with n backends, all up and idle, none of its threads or sockets. */
static router *fake_router(int n, bool cache_aware, int balance_abs, int cache_pct) {
    static const char *urls[] = {"http://a:1", "http://b:2", "http://c:3"};
    router *r = calloc(1, sizeof *r);
    r->o = (router_opts){.replicas = urls,
                         .n_replicas = n,
                         .cache_aware = cache_aware,
                         .balance_abs = balance_abs,
                         .cache_pct = cache_pct};
    pthread_mutex_init(&r->mu, NULL);
    T_CHECK(rt_backends_init(r) == 0);
    for (int i = 0; i < n; i++)
        r->backends[i].up = true;
    return r;
}

static void fake_router_free(router *r) {
    rt_backends_free(r);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void t_policy(void) {
    router *r = fake_router(3, true, 2, 50);
    char body[300], as[129];
    memset(as, 'a', 128);
    as[128] = 0;
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", as);
    int n = hashes(body, ha);
    T_CHECK(n == 4);
    /* nothing known: the least loaded, ties in turn; it is recorded there */
    int first = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_REPLICA);
    T_CHECK(first >= 0 && r->n_decisions[RT_DECIDE_LEAST_LOAD] == 1);
    T_CHECK(r->backends[first].inflight == 1);
    rt_backend_done(r, first, RT_OUT_OK, 0.001, false);
    T_CHECK(r->backends[first].inflight == 0);
    /* the same prompt again goes there, as a cache decision, even when it is not the next in turn
     */
    for (int k = 0; k < 3; k++) {
        int b = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_REPLICA);
        T_CHECKF(b == first, "round %d went to %d, not %d", k, b, first);
        rt_backend_done(r, b, RT_OUT_OK, 0.001, false);
    }
    T_CHECK(r->n_decisions[RT_DECIDE_CACHE] == 3);
    /* a load spread beyond balance_abs: the least loaded wins over the cache */
    r->backends[first].waiting = 3;
    int b = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_REPLICA);
    T_CHECK(b != first && r->n_decisions[RT_DECIDE_BALANCE] == 1);
    rt_backend_done(r, b, RT_OUT_OK, 0.001, false);
    r->backends[first].waiting = 0;
    /* a prompt sharing 1 of 4 blocks (25% < 50%): load decides, no cache decision */
    char other[300];
    char bs[97];
    memset(bs, 'b', 96);
    bs[96] = 0;
    snprintf(other, sizeof other, "{\"prompt\":\"%.32s%s\"}", as, bs);
    int m = hashes(other, hb);
    T_CHECK(m == 4 && hb[0] == ha[0] && hb[1] != ha[1]);
    uint64_t cache_before = r->n_decisions[RT_DECIDE_CACHE];
    b = rt_policy_choose(r, hb, m, 0, ROUTER_ROLE_REPLICA);
    T_CHECK(b >= 0 && r->n_decisions[RT_DECIDE_CACHE] == cache_before);
    rt_backend_done(r, b, RT_OUT_OK, 0.001, false);
    /* tried and down backends are skipped; none left: -1, counted */
    r->backends[1].up = false;
    b = rt_policy_choose(r, ha, n, 1ull << first | 1ull << 1, ROUTER_ROLE_REPLICA);
    T_CHECK(b >= 0 && b != first && b != 1);
    rt_backend_done(r, b, RT_OUT_RETRIED, 0, true); /* unreachable: taken out */
    T_CHECK(!r->backends[b].up && r->backends[b].n_outcome[RT_OUT_RETRIED] == 1);
    T_CHECK(rt_policy_choose(r, ha, n, 1ull << first, ROUTER_ROLE_REPLICA) == -1 && r->no_backend == 1);
    /* metrics name every backend and decision */
    strbuf sb;
    strbuf_init(&sb);
    rt_metrics_write(r, &sb);
    T_CHECK(strstr(sb.data, "verity_router_backend_up{backend=\"http://b:2\"} 0") != NULL);
    T_CHECK(strstr(sb.data, "verity_router_decisions_total{decision=\"cache\"} 3") != NULL);
    T_CHECK(strstr(sb.data, "verity_router_no_backend_total 1") != NULL);
    strbuf_deinit(&sb);
    fake_router_free(r);

    /* load alone: the same prompt goes round the backends */
    r = fake_router(2, false, 2, 50);
    int b0 = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_REPLICA);
    rt_backend_done(r, b0, RT_OUT_OK, 0, false);
    int b1 = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_REPLICA);
    rt_backend_done(r, b1, RT_OUT_OK, 0, false);
    T_CHECK(b0 != b1 && r->n_decisions[RT_DECIDE_CACHE] == 0);
    fake_router_free(r);
}

/* ---- workq ---- */

typedef struct wq_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool release, started;
    int order[64], n_done, inits, finis;
} wq_state;

static void *wq_init(void *user) {
    wq_state *w = user;
    pthread_mutex_lock(&w->mu);
    w->inits++;
    pthread_mutex_unlock(&w->mu);
    return w;
}

static void wq_fini(void *user, void *state) {
    wq_state *w = user;
    T_CHECK(state == w);
    pthread_mutex_lock(&w->mu);
    w->finis++;
    pthread_mutex_unlock(&w->mu);
}

static void wq_fn(void *user, void *state, void *item) {
    wq_state *w = user;
    (void)state;
    pthread_mutex_lock(&w->mu);
    w->started = true;
    pthread_cond_broadcast(&w->cv);
    while (!w->release)
        pthread_cond_wait(&w->cv, &w->mu);
    w->order[w->n_done++] = (int)(intptr_t)item;
    pthread_mutex_unlock(&w->mu);
}

/* Disaggregation: a choice for one role never lands on a backend of another. */
static void t_policy_roles(void) {
    router *r = fake_router(3, true, 2, 50);
    r->backends[0].role = ROUTER_ROLE_PREFILL;
    r->backends[1].role = ROUTER_ROLE_DECODE;
    r->backends[2].role = ROUTER_ROLE_DECODE;
    char body[300], as[129];
    memset(as, 'a', 128);
    as[128] = 0;
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", as);
    int n = hashes(body, ha);
    for (int k = 0; k < 6; k++) {
        int d = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_DECODE);
        T_CHECK(d == 1 || d == 2);
        rt_backend_done(r, d, RT_OUT_OK, 0.001, false);
        int p = rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_PREFILL);
        T_CHECK(p == 0);
        rt_backend_done(r, p, RT_OUT_OK, 0.001, false);
    }
    T_CHECK(rt_policy_choose(r, ha, n, 0, ROUTER_ROLE_REPLICA) == -1);
    T_CHECK(rt_policy_choose(r, ha, n, 1ull << 0, ROUTER_ROLE_PREFILL) == -1);
    fake_router_free(r);
}

static void t_workq(void) {
    wq_state w = {.n_done = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    workq_cfg bad = {.max_threads = 0, .fn = wq_fn};
    workq *q;
    T_CHECK(workq_create(&bad, &q) == ERR_INVAL);
    workq_cfg c = {.max_threads = 1,
                   .max_queued = 3,
                   .fn = wq_fn,
                   .thread_init = wq_init,
                   .thread_fini = wq_fini,
                   .user = &w};
    T_CHECK(workq_create(&c, &q) == 0);
    T_CHECK(workq_push(q, (void *)(intptr_t)1) == 0);
    /* the one worker holds item 1; three may wait, a fourth is refused */
    pthread_mutex_lock(&w.mu);
    while (!w.started)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    for (int i = 2; i <= 4; i++)
        T_CHECK(workq_push(q, (void *)(intptr_t)i) == 0);
    T_CHECK(workq_push(q, (void *)(intptr_t)5) == ERR_FULL);
    pthread_mutex_lock(&w.mu);
    w.release = true;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    workq_destroy(q); /* finishes 2, 3, 4 */
    T_CHECKF(w.n_done == 4, "%d items run", w.n_done);
    for (int i = 0; i < 4; i++)
        T_CHECK(w.order[i] == i + 1);
    T_CHECK(w.inits == 1 && w.finis == 1);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}

int main(void) {
    test_run("router.url_check", t_url_check);
    test_run("router.prefix_hashes", t_prefix_hashes);
    test_run("router.policy", t_policy);
    test_run("router.policy_roles", t_policy_roles);
    test_run("router.workq", t_workq);
    return test_summary();
}
