/* SPDX-License-Identifier: MIT */
/*
 * kv_tiers: see kv_tiers.h. One mutex guards everything the engine thread and the I/O thread
 * share: the operation queue (a FIFO list), the results map (kv_tmap keyed by block key: one
 * entry per fetch from queue to poll), the staging list (READY results, oldest first) and the
 * counters. The backends are touched by the I/O thread only (opened before it starts, destroyed
 * after it is joined), so they need no locking, and the I/O thread never holds the mutex while a
 * backend runs: it pops an operation, unlocks, runs it, and relocks to publish the outcome.
 *
 * Invariants (under the mutex): q_bytes is the sum of the blob sizes of the queued puts;
 * staged_bytes the sum of the sizes of the READY results, all of which are on the staging list
 * and no other result is; a PENDING result has exactly one FETCH operation queued or running.
 *
 * Between operations, while the queue is empty, the I/O thread runs the idle function
 * (kv_tiers_set_idle) step by step until it says it is done; any operation queued makes it run
 * again after that operation (the pool's high-water mark may have moved). After a batch of
 * fetches is published it calls the notify function (kv_tiers_set_notify) under the mutex.
 *
 * The I/O thread blocks every signal (set before it is created), so a SIGPIPE from a write to a
 * Redis that died goes nowhere and the write just fails with EPIPE.
 */
#include "kv/kv_tiers.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/list.h"
#include "base/log.h"
#include "kv/kv_tier_int.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIERS_DEFAULT_BYTES  ((int64_t)256 << 20)
#define TIERS_MAX_QUEUED_OPS 65536 /* fetches and drops beyond it are answered as misses / lost */

const double kv_tier_load_bounds_s[KV_TIER_LOAD_BUCKETS] = {0.0001, 0.0005, 0.001, 0.005, 0.01,
                                                            0.05,   0.1,    0.5,   1};

enum { OP_PUT, OP_FETCH, OP_DROP };

typedef struct tier_op {
    list_link queued; /* in the queue */
    int kind;
    int tier; /* PUT, DROP */
    uint64_t key;
    void *blob; /* PUT: owned */
    size_t n;
} tier_op;

typedef struct fetch_res {
    kv_tmap_node node; /* key */
    int state;         /* KV_FETCH_PENDING, _READY, _MISS */
    void *blob;        /* READY: owned */
    size_t n;
    int tier;
    list_link staged; /* in the staging list: READY only */
} fetch_res;

/* What one operation did, gathered by the I/O thread without the lock and published with it. */
typedef struct op_outcome {
    bool tried[KV_TIER_COUNT];
    int rc[KV_TIER_COUNT];
    int64_t ns[KV_TIER_COUNT];
    char why[KV_TIER_COUNT][256]; /* a failure's detail (err_detail is per call, not per tier) */
    bool have_use[KV_TIER_COUNT];
    kv_tier_usage use[KV_TIER_COUNT];
    void *blob; /* FETCH hit */
    size_t n;
    int hit_tier; /* -1: none */
} op_outcome;

struct kv_tiers {
    const kv_tier_ops *ops[KV_TIER_COUNT];
    void *impl[KV_TIER_COUNT];
    bool failing[KV_TIER_COUNT]; /* I/O thread only: last operation failed (warn on change) */
    int64_t queue_max_bytes, staging_max_bytes;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stop;
    list queue; /* of tier_op, oldest first */
    int64_t q_bytes, q_ops;
    kv_tmap res;
    list staging; /* of fetch_res, oldest first */
    int64_t staged_bytes;
    kv_tier_stats st[KV_TIER_COUNT];

    void (*notify)(void *ud); /* kv_tiers_set_notify: called under mu after fetches publish */
    void *notify_ud;
    bool (*idle)(void *ud); /* kv_tiers_set_idle: run without mu while the queue is empty */
    void *idle_ud;
    bool idle_done; /* idle said it had nothing to do; an operation queued since resets it */

    kv_blobs *blobs; /* free list of blob buffers, shared by both threads (its own lock) */
    int batch_max;   /* most fetches run together (flag kv-tier-batch) */
    /* I/O thread only: one batch of operations, [batch_max] each */
    tier_op **b_ops;
    op_outcome *b_oc;
    uint64_t *b_keys;
    kv_tier_got *b_got;
    int *b_idx;
};

const char *kv_tiers_tier_name(int tier) {
    return tier == KV_TIER_DISK ? "disk" : tier == KV_TIER_REDIS ? "redis" : "?";
}

static bool tier_ok(const kv_tiers *t, int tier) {
    return tier >= 0 && tier < KV_TIER_COUNT && t->ops[tier];
}

/* ---- I/O thread ---- */

static void op_run_put(kv_tiers *t, tier_op *op, op_outcome *oc) {
    int i = op->tier;
    int64_t t0 = clock_now_ns();
    oc->tried[i] = true;
    oc->rc[i] = t->ops[i]->put(t->impl[i], op->key, op->blob, op->n);
    oc->ns[i] = clock_now_ns() - t0;
    if (oc->rc[i] < 0)
        snprintf(oc->why[i], sizeof oc->why[i], "%s", err_detail());
}

static void op_run_drop(kv_tiers *t, tier_op *op, op_outcome *oc) {
    oc->tried[op->tier] = true;
    oc->rc[op->tier] = t->ops[op->tier]->drop(t->impl[op->tier], op->key);
    if (oc->rc[op->tier] < 0)
        snprintf(oc->why[op->tier], sizeof oc->why[op->tier], "%s", err_detail());
}

/* Records tier i's answer got for a fetch (no lock: the outcome is the I/O thread's). */
static void fetch_note(op_outcome *oc, int i, const kv_tier_got *got, int64_t ns) {
    oc->tried[i] = true;
    oc->rc[i] = got->rc;
    oc->ns[i] = ns;
    if (got->rc < 0 && got->rc != ERR_NOTFOUND)
        snprintf(oc->why[i], sizeof oc->why[i], "%s", err_detail());
    if (got->rc == 0) {
        oc->blob = got->data;
        oc->n = got->n;
        oc->hit_tier = i;
    }
}

/* Fetches ops[0, n): L2, then L3 for the keys L2 missed or failed. A tier with get_many answers
 * its keys in one call and each key's load time is the call's time over its keys (a pipeline's
 * keys arrive together); otherwise key by key, each timed alone. */
static void op_run_fetches(kv_tiers *t, tier_op **ops, op_outcome *oc, int n) {
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        if (!t->ops[i])
            continue;
        int m = 0;
        for (int j = 0; j < n; j++)
            if (oc[j].hit_tier < 0) {
                t->b_idx[m] = j;
                t->b_keys[m++] = ops[j]->key;
            }
        if (m == 0)
            break;
        if (t->ops[i]->get_many) {
            int64_t t0 = clock_now_ns();
            t->ops[i]->get_many(t->impl[i], t->blobs, t->b_keys, m, t->b_got);
            int64_t ns = (clock_now_ns() - t0) / m;
            for (int j = 0; j < m; j++)
                fetch_note(&oc[t->b_idx[j]], i, &t->b_got[j], ns);
            continue;
        }
        for (int j = 0; j < m; j++) {
            kv_tier_got g = {.data = NULL, .n = 0, .rc = 0};
            int64_t t0 = clock_now_ns();
            g.rc = t->ops[i]->get(t->impl[i], t->b_keys[j], t->blobs, &g.data, &g.n);
            fetch_note(&oc[t->b_idx[j]], i, &g, clock_now_ns() - t0);
        }
    }
}

/* Warns when a tier starts failing (once, not per block) and notes when it recovers. */
static void op_log(kv_tiers *t, const tier_op *op, const op_outcome *oc) {
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        if (!oc->tried[i])
            continue;
        bool bad = oc->rc[i] < 0 && oc->rc[i] != ERR_NOTFOUND;
        if (bad && !t->failing[i])
            log_warn("kv tiers: %s tier failing (%s); its blocks are treated as misses: %s",
                     t->ops[i]->name, err_name(oc->rc[i]), oc->why[i]);
        else if (bad)
            log_debug("kv tiers: %s tier: key %016llx: %s", t->ops[i]->name,
                      (unsigned long long)op->key, oc->why[i]);
        else if (t->failing[i])
            log_info("kv tiers: %s tier works again", t->ops[i]->name);
        t->failing[i] = bad;
    }
}

static void stats_load(kv_tier_stats *s, int64_t ns) {
    double sec = (double)ns * 1e-9;
    int b = 0;
    while (b < KV_TIER_LOAD_BUCKETS && sec > kv_tier_load_bounds_s[b])
        b++;
    s->load_counts[b]++;
    s->load_sum_s += sec;
    s->load_count++;
}

/* Takes a READY result off the staging list (mutex held); its blob stays with it. */
static void staging_unlink(kv_tiers *t, fetch_res *r) {
    list_unlink(&t->staging, &r->staged);
    t->staged_bytes -= (int64_t)r->n;
}

/* Publishes a fetch's result (mutex held). */
static void fetch_publish(kv_tiers *t, uint64_t key, op_outcome *oc) {
    kv_tmap_node *nd = kv_tmap_find(&t->res, key);
    CHECK(nd);
    fetch_res *r = KV_TMAP_ENTRY(nd, fetch_res, node);
    CHECK(r->state == KV_FETCH_PENDING);
    if (oc->hit_tier < 0) {
        r->state = KV_FETCH_MISS;
        return;
    }
    r->state = KV_FETCH_READY;
    r->blob = oc->blob;
    r->n = oc->n;
    r->tier = oc->hit_tier;
    oc->blob = NULL;
    list_push_last(&t->staging, &r->staged);
    t->staged_bytes += (int64_t)r->n;
    fetch_res *o;
    while (t->staged_bytes > t->staging_max_bytes &&
           (o = LIST_ENTRY(t->staging.first, fetch_res, staged))) {
        staging_unlink(t, o);
        kv_blobs_free(t->blobs, o->blob, o->n);
        o->blob = NULL;
        o->state = KV_FETCH_MISS;
        t->st[o->tier].staged_dropped++;
    }
}

/* Publishes an operation's outcome: counters, usage, the fetch result (mutex held). */
static void op_publish(kv_tiers *t, const tier_op *op, op_outcome *oc) {
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        kv_tier_stats *s = &t->st[i];
        if (oc->have_use[i]) {
            s->blocks = oc->use[i].blocks;
            s->bytes = oc->use[i].bytes;
            s->evictions = oc->use[i].evictions;
        }
        if (!oc->tried[i])
            continue;
        int rc = oc->rc[i];
        if (rc < 0 && rc != ERR_NOTFOUND)
            s->errors++;
        if (op->kind == OP_PUT && rc == 0) {
            s->puts++;
            s->put_bytes += (int64_t)op->n;
        } else if (op->kind == OP_DROP && rc == 0) {
            s->drops++;
        } else if (op->kind == OP_FETCH && rc == 0) {
            s->hits++;
            s->hit_bytes += (int64_t)oc->n;
            stats_load(s, oc->ns[i]);
        } else if (op->kind == OP_FETCH) {
            s->misses++;
        }
    }
    if (op->kind == OP_FETCH)
        fetch_publish(t, op->key, oc);
}

/* Takes the next operations off the queue (mutex held): the first one and, if it is a fetch, the
 * fetches right behind it, at most batch_max (only a run at the head, so the queue's order
 * holds). Fetches found while stopping are abandoned (destroy frees their results). Returns how
 * many are in t->b_ops; 0 when there is nothing to run. */
static int tiers_take(kv_tiers *t) {
    int n = 0;
    tier_op *op;
    while (n < t->batch_max && (op = LIST_ENTRY(t->queue.first, tier_op, queued))) {
        if (n > 0 && (op->kind != OP_FETCH || t->b_ops[0]->kind != OP_FETCH))
            break;
        list_unlink(&t->queue, &op->queued);
        t->q_ops--;
        if (op->kind == OP_PUT)
            t->q_bytes -= (int64_t)op->n;
        if (t->stop && op->kind == OP_FETCH) {
            free(op);
            continue;
        }
        t->b_ops[n++] = op;
    }
    return n;
}

static void *tiers_main(void *arg) {
    kv_tiers *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->queue.first && !t->stop) {
            if (t->idle && !t->idle_done) {
                bool (*fn)(void *) = t->idle;
                void *ud = t->idle_ud;
                pthread_mutex_unlock(&t->mu);
                bool more = fn(ud);
                pthread_mutex_lock(&t->mu);
                t->idle_done = !more;
                continue;
            }
            pthread_cond_wait(&t->cv, &t->mu);
        }
        if (!t->queue.first)
            break; /* stopping and drained */
        int n = tiers_take(t);
        if (n == 0)
            continue;
        pthread_mutex_unlock(&t->mu);

        tier_op **ops = t->b_ops;
        op_outcome *oc = t->b_oc;
        for (int j = 0; j < n; j++) {
            memset(&oc[j], 0, sizeof oc[j]);
            oc[j].hit_tier = -1;
        }
        if (ops[0]->kind == OP_PUT)
            op_run_put(t, ops[0], &oc[0]);
        else if (ops[0]->kind == OP_DROP)
            op_run_drop(t, ops[0], &oc[0]);
        else
            op_run_fetches(t, ops, oc, n);
        for (int j = 0; j < n; j++)
            op_log(t, ops[j], &oc[j]);
        for (int i = 0; i < KV_TIER_COUNT; i++) {
            if (t->ops[i] && t->ops[i]->usage) {
                t->ops[i]->usage(t->impl[i], &oc[n - 1].use[i]);
                oc[n - 1].have_use[i] = true;
            }
        }

        pthread_mutex_lock(&t->mu);
        bool fetched = ops[0]->kind == OP_FETCH;
        for (int j = 0; j < n; j++) {
            op_publish(t, ops[j], &oc[j]);
            kv_blobs_free(t->blobs, oc[j].blob, oc[j].n);
            kv_blobs_free(t->blobs, ops[j]->blob, ops[j]->n);
            free(ops[j]);
        }
        /* under the mutex, so kv_tiers_set_notify(NULL) returning means no call is running or
         * will run, and a poll that sees these results READY knows the waiter was told */
        if (fetched && t->notify)
            t->notify(t->notify_ud);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- engine side ---- */

/* Appends op to the queue and wakes the I/O thread (mutex held). */
static void queue_push(kv_tiers *t, tier_op *op) {
    t->idle_done = false;
    list_push_last(&t->queue, &op->queued);
    t->q_ops++;
    if (op->kind == OP_PUT)
        t->q_bytes += (int64_t)op->n;
    pthread_cond_signal(&t->cv);
}

void kv_tiers_put(kv_tiers *t, int tier, uint64_t key, void *blob, size_t n) {
    if (!t) {
        kv_blobs_free(NULL, blob, n);
        return;
    }
    tier_op *op = NULL;
    bool ok = tier_ok(t, tier);
    if (ok)
        op = malloc(sizeof *op);
    pthread_mutex_lock(&t->mu);
    if (!op || t->stop || t->q_ops >= TIERS_MAX_QUEUED_OPS ||
        (int64_t)n > t->queue_max_bytes - t->q_bytes) {
        if (ok)
            t->st[tier].puts_dropped++;
        pthread_mutex_unlock(&t->mu);
        free(op);
        kv_blobs_free(t->blobs, blob, n);
        return;
    }
    *op = (tier_op){.kind = OP_PUT, .tier = tier, .key = key, .blob = blob, .n = n};
    queue_push(t, op);
    pthread_mutex_unlock(&t->mu);
}

void kv_tiers_drop(kv_tiers *t, int tier, uint64_t key) {
    if (!t || !tier_ok(t, tier))
        return;
    tier_op *op = malloc(sizeof *op);
    if (!op)
        return; /* the blob fails verification again next time and is dropped then */
    *op = (tier_op){.kind = OP_DROP, .tier = tier, .key = key};
    pthread_mutex_lock(&t->mu);
    if (t->stop || t->q_ops >= TIERS_MAX_QUEUED_OPS) {
        pthread_mutex_unlock(&t->mu);
        free(op);
        return;
    }
    queue_push(t, op);
    pthread_mutex_unlock(&t->mu);
}

void kv_tiers_fetch(kv_tiers *t, uint64_t key) {
    kv_tiers_fetch_many(t, &key, 1);
}

/* One key of kv_tiers_fetch_many (mutex held): r and op are preallocated (op NULL without a tier
 * or out of memory); the ones it uses are set to NULL, the caller frees the rest. Returns true if
 * an operation was queued. */
static bool fetch_one(kv_tiers *t, uint64_t key, fetch_res **r, tier_op **op) {
    if (!*r || kv_tmap_find(&t->res, key))
        return false;
    fetch_res *res = *r;
    *r = NULL;
    res->node.key = key;
    res->state = KV_FETCH_MISS;
    bool queued = false;
    if (*op && !t->stop && t->q_ops < TIERS_MAX_QUEUED_OPS) {
        res->state = KV_FETCH_PENDING;
        **op = (tier_op){.kind = OP_FETCH, .key = key};
        list_push_last(&t->queue, &(*op)->queued);
        t->q_ops++;
        t->idle_done = false;
        *op = NULL;
        queued = true;
    }
    kv_tmap_insert(&t->res, &res->node);
    return queued;
}

void kv_tiers_fetch_many(kv_tiers *t, const uint64_t *keys, int n) {
    if (!t || n <= 0)
        return;
    bool any = t->ops[KV_TIER_DISK] || t->ops[KV_TIER_REDIS];
    /* allocate outside the lock, a few at a time (the map is checked under it: callers on
     * several threads may ask for the same key) */
    enum { CHUNK = 32 };
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        int m = n - i0 < CHUNK ? n - i0 : CHUNK;
        fetch_res *r[CHUNK];
        tier_op *op[CHUNK];
        for (int i = 0; i < m; i++) {
            r[i] = calloc(1, sizeof *r[i]);
            op[i] = any && r[i] ? malloc(sizeof *op[i]) : NULL;
        }
        /* out of memory: that key's poll says NONE and the engine computes the block */
        bool queued = false;
        pthread_mutex_lock(&t->mu);
        for (int i = 0; i < m; i++)
            queued |= fetch_one(t, keys[i0 + i], &r[i], &op[i]);
        if (queued)
            pthread_cond_signal(&t->cv); /* one wake for the lot: the I/O thread batches them */
        pthread_mutex_unlock(&t->mu);
        for (int i = 0; i < m; i++) {
            free(r[i]);
            free(op[i]);
        }
    }
}

int kv_tiers_poll(kv_tiers *t, uint64_t key, void **blob, size_t *n, int *tier) {
    kv_tiers_polled p;
    kv_tiers_poll_many(t, &key, 1, &p);
    if (blob)
        *blob = p.blob;
    else
        kv_blobs_free(t ? t->blobs : NULL, p.blob, p.n);
    if (p.state == KV_FETCH_READY) {
        if (n)
            *n = p.n;
        if (tier)
            *tier = p.tier;
    }
    return p.state;
}

void kv_tiers_poll_many(kv_tiers *t, const uint64_t *keys, int n, kv_tiers_polled *out) {
    for (int i = 0; i < n; i++)
        out[i] = (kv_tiers_polled){.state = KV_FETCH_NONE, .blob = NULL, .n = 0, .tier = 0};
    if (!t || n <= 0)
        return;
    fetch_res *done = NULL; /* the answered results, freed after the lock (chained by .blob) */
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < n; i++) {
        kv_tmap_node *nd = kv_tmap_find(&t->res, keys[i]);
        if (!nd)
            continue;
        fetch_res *r = KV_TMAP_ENTRY(nd, fetch_res, node);
        out[i].state = r->state;
        if (r->state == KV_FETCH_PENDING)
            continue;
        if (r->state == KV_FETCH_READY) {
            staging_unlink(t, r);
            out[i].blob = r->blob;
            out[i].n = r->n;
            out[i].tier = r->tier;
        }
        kv_tmap_remove(&t->res, nd);
        r->blob = done;
        done = r;
    }
    pthread_mutex_unlock(&t->mu);
    while (done) {
        fetch_res *next = done->blob;
        free(done);
        done = next;
    }
}

void kv_tiers_set_idle(kv_tiers *t, bool (*fn)(void *ud), void *ud) {
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->idle = fn;
    t->idle_ud = fn ? ud : NULL;
    t->idle_done = false;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void kv_tiers_set_notify(kv_tiers *t, void (*fn)(void *ud), void *ud) {
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->notify = fn;
    t->notify_ud = fn ? ud : NULL;
    pthread_mutex_unlock(&t->mu);
}

void *kv_tiers_blob_alloc(kv_tiers *t, size_t n) {
    return kv_blobs_alloc(t ? t->blobs : NULL, n);
}

void kv_tiers_blob_free(kv_tiers *t, void *blob, size_t n) {
    kv_blobs_free(t ? t->blobs : NULL, blob, n);
}

void kv_tiers_blob_stats(kv_tiers *t, kv_blobs_stats *out) {
    kv_blobs_stats_get(t ? t->blobs : NULL, out);
}

bool kv_tiers_has(const kv_tiers *t, int tier) {
    return t && tier_ok(t, tier);
}

void kv_tiers_stats_get(const kv_tiers *t, int tier, kv_tier_stats *out) {
    memset(out, 0, sizeof *out);
    if (!t || !tier_ok(t, tier))
        return;
    kv_tiers *m = (kv_tiers *)t; /* the mutex is not part of the logical state */
    pthread_mutex_lock(&m->mu);
    *out = m->st[tier];
    pthread_mutex_unlock(&m->mu);
}

/* ---- life cycle ---- */

static void tiers_close_backends(const kv_tier_ops *const ops[KV_TIER_COUNT],
                                 void *const impl[KV_TIER_COUNT]) {
    for (int i = 0; i < KV_TIER_COUNT; i++)
        if (ops[i])
            ops[i]->destroy(impl[i]);
}

/* Frees what tiers_alloc allocated, and t (NULL: no-op). The mutex, the thread and the backends
 * are the caller's. */
static void tiers_free(kv_tiers *t) {
    if (!t)
        return;
    kv_tmap_deinit(&t->res);
    kv_blobs_destroy(t->blobs);
    free(t->b_ops);
    free(t->b_oc);
    free(t->b_keys);
    free(t->b_got);
    free(t->b_idx);
    free(t);
}

/* The results map, the blob free list (flag kv-blob-cache) and the I/O thread's batch arrays
 * (flag kv-tier-batch). 0 or ERR_NOMEM. */
static int tiers_alloc(kv_tiers *t) {
    t->batch_max = (int)flags_int(FLAG_KV_TIER_BATCH);
    if (t->batch_max < 1)
        t->batch_max = 1;
    size_t b = (size_t)t->batch_max;
    t->b_ops = calloc(b, sizeof *t->b_ops);
    t->b_oc = calloc(b, sizeof *t->b_oc);
    t->b_keys = calloc(b, sizeof *t->b_keys);
    t->b_got = calloc(b, sizeof *t->b_got);
    t->b_idx = calloc(b, sizeof *t->b_idx);
    if (!t->b_ops || !t->b_oc || !t->b_keys || !t->b_got || !t->b_idx)
        return ERR_NOMEM;
    if (kv_blobs_create((int)flags_int(FLAG_KV_BLOB_CACHE), &t->blobs))
        return ERR_NOMEM;
    return kv_tmap_init(&t->res) ? ERR_NOMEM : 0;
}

int kv_tiers_create_with(const kv_tiers_opts *o, const kv_tier_ops *const ops[KV_TIER_COUNT],
                         void *const impl[KV_TIER_COUNT], kv_tiers **out) {
    *out = NULL;
    if (o->staging_max_bytes < 0 || o->queue_max_bytes < 0) {
        tiers_close_backends(ops, impl);
        return err_set(
            ERR_INVAL, "kv tiers: negative %s (%lld)",
            o->staging_max_bytes < 0 ? "staging_max_bytes" : "queue_max_bytes",
            (long long)(o->staging_max_bytes < 0 ? o->staging_max_bytes : o->queue_max_bytes));
    }
    kv_tiers *t = calloc(1, sizeof *t);
    if (!t || tiers_alloc(t)) {
        tiers_free(t);
        tiers_close_backends(ops, impl);
        return err_set(ERR_NOMEM, "kv tiers: out of memory");
    }
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        t->ops[i] = ops[i];
        t->impl[i] = ops[i] ? impl[i] : NULL;
    }
    t->staging_max_bytes = o->staging_max_bytes ? o->staging_max_bytes : TIERS_DEFAULT_BYTES;
    t->queue_max_bytes = o->queue_max_bytes ? o->queue_max_bytes : TIERS_DEFAULT_BYTES;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    for (int i = 0; i < KV_TIER_COUNT; i++)
        if (t->ops[i] && t->ops[i]->usage) {
            kv_tier_usage u;
            t->ops[i]->usage(t->impl[i], &u);
            t->st[i].blocks = u.blocks;
            t->st[i].bytes = u.bytes;
            t->st[i].evictions = u.evictions;
        }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t->thread, NULL, tiers_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        tiers_close_backends(t->ops, t->impl);
        tiers_free(t);
        return err_set(ERR_INTERNAL, "kv tiers: cannot start the I/O thread (error %d)", rc);
    }
    *out = t;
    return 0;
}

/* Validates o; 0 or ERR_INVAL naming the option. */
static int tiers_opts_check(const kv_tiers_opts *o) {
    if (o->disk_dir && o->disk_dir[0] && o->disk_max_bytes <= 0)
        return err_set(ERR_INVAL,
                       "kv tiers: disk_max_bytes must be positive with disk_dir %s (%lld)",
                       o->disk_dir, (long long)o->disk_max_bytes);
    if (o->redis_url && o->redis_url[0] && kv_tier_redis_url_check(o->redis_url))
        return err_wrap(ERR_INVAL, "kv tiers: redis_url");
    return 0;
}

int kv_tiers_create(const kv_tiers_opts *o, kv_tiers **out) {
    *out = NULL;
    int rc = tiers_opts_check(o);
    if (rc)
        return rc;
    const kv_tier_ops *ops[KV_TIER_COUNT] = {NULL, NULL};
    void *impl[KV_TIER_COUNT] = {NULL, NULL};
    if (o->disk_dir && o->disk_dir[0]) {
        rc = kv_tier_disk_open(o->disk_dir, o->disk_max_bytes, o->identity, &ops[KV_TIER_DISK],
                               &impl[KV_TIER_DISK]);
        if (rc) {
            log_warn("kv tiers: disk tier %s left out: %s", o->disk_dir, err_detail());
            ops[KV_TIER_DISK] = NULL;
        }
    }
    if (o->redis_url && o->redis_url[0]) {
        rc = kv_tier_redis_open(o->redis_url, o->identity, &ops[KV_TIER_REDIS],
                                &impl[KV_TIER_REDIS]);
        if (rc) {
            log_warn("kv tiers: redis tier %s left out: %s", o->redis_url, err_detail());
            ops[KV_TIER_REDIS] = NULL;
        }
    }
    return kv_tiers_create_with(o, ops, impl, out);
}

void kv_tiers_destroy(kv_tiers *t) {
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    CHECK(!t->queue.first);
    for (size_t i = 0; i < t->res.nb; i++) {
        kv_tmap_node *nd = t->res.b[i];
        while (nd) {
            kv_tmap_node *next = nd->hnext;
            fetch_res *r = KV_TMAP_ENTRY(nd, fetch_res, node);
            kv_blobs_free(t->blobs, r->blob, r->n);
            free(r);
            nd = next;
        }
    }
    tiers_close_backends(t->ops, t->impl);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    tiers_free(t);
}
