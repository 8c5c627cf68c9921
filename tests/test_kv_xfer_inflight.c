/* SPDX-License-Identifier: MIT */
/*
 * test_kv_xfer_inflight: the KV transfer's posted writes (kv-xfer-inflight; kv_xfer_int.h's
 * write_held and flush), over real connections with 256 KiB blocks (UCX's rendezvous path), on
 * kv_xfer_fx.h's fixture. Split from test_kv_xfer.c (the state machine per transport), under the
 * same names "kv_xfer.<transport>[.frame].<case>".
 *
 * Per transport ("tcp", then "ucx"; one SKIP line if UCX cannot start here) and per path (in
 * place, then frame): inflight_1 and inflight_4, a pipelined transfer with kv-xfer-inflight 1 and
 * 4 whose receiver thread is held back until the sender has posted as many writes as it may:
 * every block arrives byte-identical and is released once, none while a posted write was left,
 * and the connection's most sends in flight is what the transport and flags allow.
 *
 * Then over ucx once (each case sets the flags it needs): a transfer ended under its posted
 * writes, one thread driving both ends: the peer gone (inflight_peer_gone), a receiver that
 * stops reading (inflight_stalled, the sender's flush timing out), a sender's cancel with writes
 * posted (inflight_cancel); and posted_bound, write_held's bound (the third of max_posted 2
 * returns only once the first was fetched) and the stream's order on a bare connection. No case
 * depends on timing to pass: a receiver held back past its gate (10 s), or a sender that would
 * wait on a receiver its own thread drives, makes the case fail, not hang.
 */
#include "kv_xfer_fx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- posted writes (kv-xfer-inflight, kv_xfer_int.h's write_held and flush) ---- */

/* A receiver thread that starts reading when told to (gate_open), or after GATE_MS anyway: a
 * sender that does not post, and so waits for its first block to be fetched, makes the case fail
 * (its counts are wrong), not hang. */
enum { GATE_MS = 10000 };

/* A one-way signal between two threads: set once, waited for with a deadline. */
typedef struct latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set;
} latch;

static void latch_init(latch *l) {
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->set = false;
}

static void latch_deinit(latch *l) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

static void latch_set(latch *l) {
    pthread_mutex_lock(&l->mu);
    l->set = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Waits up to GATE_MS for the latch; returns whether it was set. */
static bool latch_wait(latch *l) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GATE_MS / 1000;
    pthread_mutex_lock(&l->mu);
    while (!l->set && pthread_cond_timedwait(&l->cv, &l->mu, &until) == 0) {
    }
    bool set = l->set;
    pthread_mutex_unlock(&l->mu);
    return set;
}

typedef struct gated_rx {
    kv_xfer_recv *r;
    latch go;
    kv_xfer_state st;
    int32_t got[NB];
    int n_got;
} gated_rx;

static void *gated_reader(void *arg) {
    gated_rx *g = arg;
    (void)latch_wait(&g->go);
    while ((g->st = kv_xfer_recv_step(g->r)) == KV_XFER_OPEN) {
    }
    g->n_got = kv_xfer_recv_take(g->r, g->got, NB);
    return NULL;
}

/* kv-xfer-inflight n, 256 KiB blocks (rendezvous on ucx). The receiver is held back until the
 * sender has sent as many blocks as it may post, so a sender that posts has exactly that many on
 * their way (n_posted) before any was fetched; then the receiver reads everything. Every block
 * arrives byte-identical, each is released once, none while a posted write was left, and the
 * connection's n_inflight_max is n (plus at most one header write waiting for its own send) where
 * the sender posts, 1 over ucx where it does not (each write waits until the receiver fetched it:
 * today's behaviour), 0 over tcp (no write waits for the peer). */
static void inflight(const char *n) {
    char keep[8];
    snprintf(keep, sizeof keep, "%s", flags_str(FLAG_KV_XFER_INFLIGHT));
    T_OK(flags_set("kv-xfer-inflight", n));
    fx f;
    big_tx t;
    kv_pool *dst = big_begin(&f, &t);
    int most = payloads_in_flight(t.src);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    T_OK(flags_set("kv-xfer-inflight", keep));
    kv_xfer_recv_opts o = {
        .xfer_id = 7, .identity = IDENTITY, .toks = f.toks, .n_toks = NB * BS, .timeout_ms = -1};
    gated_rx g = {.n_got = -1};
    latch_init(&g.go);
    T_OK(kv_xfer_recv_create(f.cr, dst, &o, &g.r));
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, gated_reader, &g) == 0);
    int pre = most > 1 ? most : 0, posted_at_gate = -1, rc = 0;
    for (int b = 0; b < NB && rc == 0; b++) {
        if (b == pre) {
            posted_at_gate = f.cs->n_posted;
            latch_set(&g.go);
        }
        rc = kv_xfer_send_block(s, t.src, t.ids[b], &t.meta[b], b == NB - 1, fx_release, &f);
    }
    latch_set(&g.go);
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    pthread_join(th, NULL);
    latch_deinit(&g.go);
    T_CHECKF(rc == 0 && kv_xfer_send_state(s) == KV_XFER_COMPLETE, "sender: %s, ended %d (%s)",
             err_name(rc), kv_xfer_send_state(s), err_name(kv_xfer_send_error(s)));
    T_CHECKF(g.st == KV_XFER_COMPLETE && g.n_got == NB, "receiver ended %d (%s), took %d", g.st,
             err_name(kv_xfer_recv_error(g.r)), g.n_got);
    T_CHECKF(posted_at_gate == pre, "%d writes posted before the receiver read, %d expected",
             posted_at_gate, pre);
    for (int b = 0; b < NB; b++)
        check_same_pools(t.src, t.ids[b], dst, g.got[b], b);
    T_CHECKF(f.early == 0, "%d blocks released while a posted write was in flight", f.early);
    for (int b = 0; b < NB; b++)
        T_CHECKF(f.releases[t.ids[b]] == 1, "block %d released %d times", b,
                 f.releases[t.ids[b]]);
    int mx = f.cs->n_inflight_max;
    if (strcmp(tp->name, "tcp") == 0)
        T_CHECKF(mx == 0, "tcp: %d sends in flight", mx);
    else if (most > 1)
        T_CHECKF(mx >= most && mx <= most + 1, "%d sends in flight at most, %d expected", mx, most);
    else
        T_CHECKF(mx == 1, "%d sends in flight at most, 1 expected", mx);
    T_CHECK(f.cs->n_posted == 0);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(g.r);
    for (int b = 0; b < NB; b++)
        kv_block_unref(dst, g.got[b]);
    T_CHECK(kv_pool_n_free(dst) == NB);
    kv_pool_destroy(t.src);
    kv_pool_destroy(dst);
    fx_free(&f);
}

static void t_inflight_1(void) {
    inflight("1");
}

static void t_inflight_4(void) {
    inflight("4");
}

/* Shuts connection c down (kv_xfer_conn_shutdown: any thread may) unless told within GATE_MS
 * that the writes it guards returned: a sender that waits for a receiver its own thread drives
 * would hang, and ends with ERR_CONNECT instead. */
typedef struct watchdog {
    kv_xfer_conn *c;
    pthread_t th;
    latch done;
} watchdog;

static void *watchdog_main(void *arg) {
    watchdog *w = arg;
    if (!latch_wait(&w->done))
        kv_xfer_conn_shutdown(w->c);
    return NULL;
}

static void watchdog_start(watchdog *w, kv_xfer_conn *c) {
    w->c = c;
    latch_init(&w->done);
    T_CHECK(pthread_create(&w->th, NULL, watchdog_main, w) == 0);
}

static void watchdog_stop(watchdog *w) {
    latch_set(&w->done);
    pthread_join(w->th, NULL);
    latch_deinit(&w->done);
}

/* The release callback of the abort cases: counted (fx_release: once each, none while a posted
 * write is left) and the block given back to the sender's pool. */
typedef struct give_back {
    fx *f;
    kv_pool *src;
} give_back;

static void give_back_release(void *ctx, int32_t id) {
    give_back *g = ctx;
    fx_release(g->f, id);
    kv_block_unref(g->src, id);
}

/* A pipelined transfer ended under its posted writes (ucx, in place, block-major pools,
 * kv-xfer-inflight 4; one thread drives both ends, which only posting allows): the sender posts
 * blocks 0..3 (none fetched yet). ABORT_PEER_GONE: the receiver takes block 0 and goes (its
 * transfer destroyed: ABORT; its connection destroyed: FIN); the sender's next step flushes
 * first: block 0's write completed, blocks 1..3's cannot (the peer is gone) and are cancelled, the
 * flush fails and the transfer aborts with ERR_CONNECT. ABORT_STALLED: the receiver just stops
 * reading: the sender's flush (timeout_ms 300 each) gives up on block 0, closes the connection and
 * cancels the rest: ERR_CONNECT too. ABORT_CANCEL: the receiver takes block 0, then the sender
 * cancels (drain) with 1..3 still posted: the abort flushes before it releases (300 ms, then
 * cancelled as above); ERR_CANCELLED. Each way blocks 0..3 are released exactly once, none while
 * a posted write was left, and given back: the sender's pool has 4 free blocks again (it had none
 * after big_make), nothing is posted any more. */
enum { ABORT_PEER_GONE, ABORT_STALLED, ABORT_CANCEL };

static void inflight_abort(int how) {
    char keep_n[8], keep_ip[4], keep_bm[4];
    snprintf(keep_n, sizeof keep_n, "%s", flags_str(FLAG_KV_XFER_INFLIGHT));
    snprintf(keep_ip, sizeof keep_ip, "%s", flags_str(FLAG_KV_XFER_INPLACE));
    snprintf(keep_bm, sizeof keep_bm, "%s", flags_str(FLAG_KV_POOL_BLOCK_MAJOR));
    T_OK(flags_set("kv-xfer-inflight", "4"));
    T_OK(flags_set("kv-xfer-inplace", "1"));
    T_OK(flags_set("kv-pool-block-major", "1"));
    fx f;
    big_tx t;
    kv_pool *dst = big_begin(&f, &t);
    kv_xfer_send_opts so = {.xfer_id = 7, .timeout_ms = how == ABORT_PEER_GONE ? -1 : 300};
    kv_xfer_send *s = NULL;
    T_OK(kv_xfer_send_create(f.cs, &so, &s));
    kv_xfer_recv_opts o = {
        .xfer_id = 7, .identity = IDENTITY, .toks = f.toks, .n_toks = NB * BS, .timeout_ms = -1};
    kv_xfer_recv *r = NULL;
    T_OK(kv_xfer_recv_create(f.cr, dst, &o, &r));
    T_OK(flags_set("kv-xfer-inflight", keep_n));
    T_OK(flags_set("kv-xfer-inplace", keep_ip));
    T_OK(flags_set("kv-pool-block-major", keep_bm));
    T_CHECK(kv_pool_n_free(t.src) == 0);
    give_back gb = {&f, t.src};
    watchdog w;
    watchdog_start(&w, f.cs);
    int rc = 0;
    for (int b = 0; b < 4 && rc == 0; b++)
        rc = kv_xfer_send_block(s, t.src, t.ids[b], &t.meta[b], false, give_back_release, &gb);
    watchdog_stop(&w);
    T_CHECKF(rc == 0 && f.cs->n_posted == 4, "4 blocks sent: %s, %d posted", err_name(rc),
             f.cs->n_posted);
    if (how != ABORT_STALLED)
        T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN); /* block 0 fetched and verified */
    if (how == ABORT_PEER_GONE) {
        kv_xfer_recv_destroy(r);
        r = NULL;
        kv_xfer_conn_destroy(f.cr);
        f.cr = NULL;
        T_CHECK(kv_pool_n_free(dst) == NB);
    }
    if (how == ABORT_CANCEL)
        kv_xfer_send_cancel(s, ERR_CANCELLED);
    else
        T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    int want = how == ABORT_CANCEL ? ERR_CANCELLED : ERR_CONNECT;
    T_CHECKF(kv_xfer_send_state(s) == KV_XFER_ABORTED && kv_xfer_send_error(s) == want,
             "sender ended %d, error %s (%s)", kv_xfer_send_state(s),
             err_name(kv_xfer_send_error(s)), err_detail());
    T_EQ_INT(f.cs->n_posted, 0);
    T_CHECKF(f.early == 0, "%d blocks released while a posted write was in flight", f.early);
    for (int b = 0; b < NB; b++)
        T_CHECKF(f.releases[t.ids[b]] == (b < 4 ? 1 : 0), "block %d released %d times", b,
                 f.releases[t.ids[b]]);
    T_EQ_INT(kv_pool_n_free(t.src), 4);
    kv_xfer_send_destroy(s); /* ended: releases nothing more */
    T_EQ_INT(kv_pool_n_free(t.src), 4);
    kv_xfer_recv_destroy(r);
    T_CHECK(kv_pool_n_free(dst) == NB);
    kv_pool_destroy(t.src);
    kv_pool_destroy(dst);
    fx_free(&f);
}

static void t_inflight_peer_gone(void) {
    inflight_abort(ABORT_PEER_GONE);
}

static void t_inflight_stalled(void) {
    inflight_abort(ABORT_STALLED);
}

static void t_inflight_cancel(void) {
    inflight_abort(ABORT_CANCEL);
}

/* write_held's bound and the stream's order, on a bare ucx connection: with max_posted 2, the
 * third posted write returns only once the first was fetched. The reader (another thread) pauses,
 * then marks that it starts reading; the writer checks the mark once its third posted write
 * returned (a bound not kept returns at once, before the mark). The three 256 KiB buffers (each
 * its own bytes) and a small write_all between the first two arrive in call order, byte-identical
 * (eager and rendezvous messages of one endpoint are matched in send order). */
enum { BIG_MSG = 256 * 1024 };

typedef struct bound_rx {
    kv_xfer_conn *c;
    atomic_int started;
    unsigned char *got; /* [3 * BIG_MSG + 64] */
    int rc;
} bound_rx;

static void *bound_reader(void *arg) {
    bound_rx *b = arg;
    struct timespec pause_ts = {0, 200 * 1000000L};
    nanosleep(&pause_ts, NULL);
    atomic_store(&b->started, 1);
    b->rc = b->c->ops->read_full(b->c, b->got, 3 * BIG_MSG + 64, 30000);
    return NULL;
}

static void t_posted_bound(void) {
    fx f;
    fx_init(&f, true);
    unsigned char *buf = malloc(3 * BIG_MSG + 64), *small = buf + 3 * BIG_MSG;
    bound_rx b = {.c = f.cr, .got = malloc(3 * BIG_MSG + 64)};
    T_CHECK(buf && b.got);
    for (size_t i = 0; i < 3 * BIG_MSG + 64; i++)
        buf[i] = (unsigned char)(i * 7 + i / BIG_MSG * 13);
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, bound_reader, &b) == 0);
    kv_xfer_conn *c = f.cs;
    T_OK(c->ops->write_held(c, buf, BIG_MSG, 2));
    T_OK(c->ops->write_all(c, small, 64));
    T_OK(c->ops->write_held(c, buf + BIG_MSG, BIG_MSG, 2));
    int posted = c->n_posted;
    T_OK(c->ops->write_held(c, buf + 2 * BIG_MSG, BIG_MSG, 2));
    int started = atomic_load(&b.started);
    T_OK(c->ops->flush(c, -1));
    pthread_join(th, NULL);
    T_EQ_INT(posted, 2);
    T_CHECKF(started, "the third posted write returned before the receiver read anything");
    T_EQ_INT(c->n_posted, 0);
    T_CHECKF(c->n_inflight_max <= 3, "%d sends in flight (2 posted, 1 header)",
             c->n_inflight_max);
    T_OK(b.rc);
    T_CHECK(memcmp(b.got, buf, BIG_MSG) == 0);
    T_CHECK(memcmp(b.got + BIG_MSG, small, 64) == 0);
    T_CHECK(memcmp(b.got + BIG_MSG + 64, buf + BIG_MSG, 2 * BIG_MSG) == 0);
    free(buf);
    free(b.got);
    fx_free(&f);
}

static const tcase cases[] = {
    {"inflight_1", t_inflight_1, false},
    {"inflight_4", t_inflight_4, false},
};

/* over ucx once, after the per-path runs */
static const tcase ucx_cases[] = {
    {"inflight_peer_gone", t_inflight_peer_gone, false},
    {"inflight_stalled", t_inflight_stalled, false},
    {"inflight_cancel", t_inflight_cancel, false},
    {"posted_bound", t_posted_bound, false},
};

int main(void) {
    if (fx_run_cases("test_kv_xfer_inflight", cases, sizeof cases / sizeof cases[0], ucx_cases,
                     sizeof ucx_cases / sizeof ucx_cases[0]))
        return 1;
    return test_summary();
}
