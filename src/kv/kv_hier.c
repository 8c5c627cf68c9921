/* SPDX-License-Identifier: MIT */
/*
 * kv_hier: see kv_hier.h. The prefix cache's two hooks (a node evicted, a computed node sealed)
 * encode the block into a buffer from the manager's free list (kv_tiers_blob_alloc) and hand it
 * to the manager, which owns it from then on; a decoded blob's buffer goes back to that list. A
 * kv_fetch
 * keeps, per block of its request, the lookup's state and, once it came back, the blob, until the
 * request is admitted (or freed).
 */
#include "kv/kv_hier.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "kv/kv_block.h"

#include <stdlib.h>
#include <string.h>

enum { FS_NONE = 0, FS_PENDING, FS_READY, FS_MISS };

typedef struct kv_fetch_slot {
    void *blob;
    size_t n;
    int8_t state;
    int8_t tier;
} kv_fetch_slot;

struct kv_fetch {
    int32_t cap;
    int32_t n_keys;   /* keys[0, n_keys) are computed */
    uint64_t *keys;   /* [cap] chain key of each full block */
    kv_fetch_slot *s; /* [cap] */
    /* the reload in progress: when its first lookup was queued (0: none) and the blocks restored
     * so far, per tier */
    int64_t t0_ns;
    int64_t got[KV_TIER_COUNT];
    /* [cap] scratch for the grouped calls (kv-fetch-group) */
    uint64_t *qkeys;
    int32_t *qidx;
    kv_tiers_polled *polled;
};

struct kv_hier {
    kv_pool *p;
    kv_prefix *px;
    kv_tiers *tiers; /* NULL: no tier below L1 */
    uint64_t identity;
    int64_t restored[KV_TIER_COUNT], failures[KV_TIER_COUNT];
    double reload_s[KV_TIER_COUNT]; /* wall time of finished reloads, shared by blocks */
    bool group; /* flag kv-fetch-group: a request's lookups under one lock (else key by key) */
    /* the tiers' I/O thread only: blocks [0, faulted) of the pool are faulted in; it keeps
     * ahead_blocks (flag kv-prefault-ahead) beyond the pool's high-water mark faulted */
    int32_t faulted, ahead_blocks;
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    int f_corrupt_tier; /* FAULT (h): the tier whose blobs get a bit flip, or -1 */
    int64_t f_puts;
#endif
};

/* Encodes pool block id (named key, after parent, holding toks) and puts it to tier. */
static void hier_put(kv_hier *h, int tier, const kv_pool *p, int32_t id, uint64_t key,
                     uint64_t parent, const int32_t *toks, uint64_t checksum) {
    if (!kv_tiers_has(h->tiers, tier))
        return;
    size_t n = kv_block_blob_bytes(p);
    unsigned char *blob = kv_tiers_blob_alloc(h->tiers, n); /* recycled: no malloc per block */
    if (!blob)
        return; /* a tier is a cache: a block it never got is recomputed when needed */
    kv_block_meta m = {
        .identity = h->identity, .parent = parent, .key = key, .checksum = checksum, .toks = toks};
    kv_block_encode(p, id, &m, blob);
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    /* FAULT (h, disk|redis): every eighth blob written to that tier has one bit flipped */
    if (h->f_corrupt_tier == tier && (++h->f_puts & 7) == 0)
        blob[n - 1 - (size_t)(h->f_puts % 64)] ^= 0x08;
#endif
    kv_tiers_put(h->tiers, tier, key, blob, n);
}

static void hier_on_evict(void *ud, const kv_pool *p, int32_t id, uint64_t key, uint64_t parent,
                          const int32_t *toks, uint64_t checksum) {
    hier_put(ud, KV_TIER_DISK, p, id, key, parent, toks, checksum);
}

static void hier_on_seal(void *ud, const kv_pool *p, int32_t id, uint64_t key, uint64_t parent,
                         const int32_t *toks, uint64_t checksum) {
    hier_put(ud, KV_TIER_REDIS, p, id, key, parent, toks, checksum);
}

/* The tiers' idle step: faults in the next few pool blocks up to ahead_blocks beyond the
 * pool's high-water mark (kv_pool_prefault_blocks, which leaves their bytes alone), so blocks
 * restored or computed next are written into pages the kernel has already zeroed rather than
 * zeroed on the engine thread's first write. 8 MiB of blocks per step, so a queued lookup waits
 * at most that long. True while there is more to fault. */
static bool hier_prefault_step(void *ud) {
    kv_hier *h = ud;
    int64_t n = kv_pool_n_blocks(h->p);
    int64_t target = (int64_t)kv_pool_high_water(h->p) + h->ahead_blocks;
    if (target > n)
        target = n;
    if (h->faulted >= target)
        return false;
    int64_t step = ((int64_t)8 << 20) / (int64_t)kv_block_blob_bytes(h->p) + 1;
    int32_t hi = (int32_t)(target - h->faulted > step ? h->faulted + step : target);
    if (!kv_pool_prefault_blocks(h->p, h->faulted, hi)) {
        h->faulted = (int32_t)n; /* the kernel cannot: never again */
        return false;
    }
    h->faulted = hi;
    return hi < target;
}

int kv_hier_create(kv_pool *p, const kv_hier_opts *o, kv_hier **out) {
    *out = NULL;
    kv_hier *h = calloc(1, sizeof *h);
    if (!h)
        return err_set(ERR_NOMEM, "kv hierarchy: out of memory");
    h->p = p;
    h->identity = o->prefix.identity;
    h->group = flags_int(FLAG_KV_FETCH_GROUP) != 0;
    int rc = kv_prefix_create(p, &o->prefix, &h->px);
    bool want = (o->disk_dir && o->disk_dir[0]) || (o->redis_url && o->redis_url[0]);
    if (!rc && want && !o->prefix.enabled)
        log_warn("kv tiers: the disk and Redis tiers need the prefix cache (prefix-cache=0): "
                 "not opened");
    if (!rc && want && o->prefix.enabled) {
        kv_tiers_opts to = {.disk_dir = o->disk_dir,
                            .disk_max_bytes = o->disk_max_bytes,
                            .redis_url = o->redis_url,
                            .identity = o->prefix.identity};
        rc = kv_tiers_create(&to, &h->tiers);
        if (!rc) {
            kv_prefix_set_evict_cb(h->px, hier_on_evict, h);
            kv_prefix_set_seal_cb(h->px, hier_on_seal, h);
            int64_t ahead = flags_int(FLAG_KV_PREFAULT_AHEAD) << 20;
            int64_t bb = (int64_t)kv_block_blob_bytes(p);
            h->ahead_blocks = (int32_t)(ahead / bb > INT32_MAX ? INT32_MAX : ahead / bb);
            if (h->ahead_blocks > 0 && kv_hier_has_tiers(h))
                kv_tiers_set_idle(h->tiers, hier_prefault_step, h);
        }
    }
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    const char *fc = flags_str(FLAG_FAULT_KV_CORRUPT);
    h->f_corrupt_tier = !strcmp(fc, "disk")    ? KV_TIER_DISK
                        : !strcmp(fc, "redis") ? KV_TIER_REDIS
                                               : -1;
#endif
    if (rc) {
        kv_hier_destroy(h);
        return rc;
    }
    *out = h;
    return 0;
}

/* Writes every block L1 caches to the disk tier (most recently used first, so the put queue's
 * bound keeps the hottest), for a restart on the same directory: one info line with the count. */
static void hier_flush_disk(kv_hier *h) {
    kv_tier_stats a, b;
    kv_tiers_stats_get(h->tiers, KV_TIER_DISK, &a);
    kv_prefix_stats ps;
    kv_prefix_stats_get(h->px, &ps);
    kv_prefix_for_each(h->px, hier_on_evict, h);
    kv_tiers_stats_get(h->tiers, KV_TIER_DISK, &b);
    if (ps.cached > 0)
        log_info("kv cache: %lld cached blocks written to the disk tier at shutdown (%lld more "
                 "dropped: the tiers' put queue was full)",
                 (long long)(ps.cached - (b.puts_dropped - a.puts_dropped)),
                 (long long)(b.puts_dropped - a.puts_dropped));
}

void kv_hier_destroy(kv_hier *h) {
    if (!h)
        return;
    if (kv_tiers_has(h->tiers, KV_TIER_DISK) && flags_int(FLAG_KV_DISK_FLUSH))
        hier_flush_disk(h);
    /* the tiers first: their queued puts hold their own copies, never pool memory */
    kv_tiers_destroy(h->tiers);
    kv_prefix_destroy(h->px);
    free(h);
}

kv_prefix *kv_hier_prefix(kv_hier *h) {
    return h->px;
}

bool kv_hier_has_tiers(const kv_hier *h) {
    return h->tiers != NULL &&
           (kv_tiers_has(h->tiers, KV_TIER_DISK) || kv_tiers_has(h->tiers, KV_TIER_REDIS));
}

int kv_fetch_create(int32_t cap_blocks, kv_fetch **out) {
    *out = NULL;
    kv_fetch *f = calloc(1, sizeof *f);
    size_t cap = (size_t)(cap_blocks > 0 ? cap_blocks : 1);
    if (f) {
        f->keys = malloc(cap * sizeof *f->keys);
        f->s = calloc(cap, sizeof *f->s);
        f->qkeys = malloc(cap * sizeof *f->qkeys);
        f->qidx = malloc(cap * sizeof *f->qidx);
        f->polled = malloc(cap * sizeof *f->polled);
    }
    if (!f || !f->keys || !f->s || !f->qkeys || !f->qidx || !f->polled) {
        kv_fetch_destroy(f);
        return err_set(ERR_NOMEM, "kv fetch: out of memory");
    }
    f->cap = (int32_t)cap;
    *out = f;
    return 0;
}

void kv_fetch_reset(kv_fetch *f) {
    if (!f)
        return;
    for (int32_t i = 0; i < f->cap; i++) {
        free(f->s[i].blob);
        f->s[i] = (kv_fetch_slot){0};
    }
    f->t0_ns = 0;
    memset(f->got, 0, sizeof f->got);
}

void kv_fetch_destroy(kv_fetch *f) {
    if (!f)
        return;
    if (f->s)
        kv_fetch_reset(f);
    free(f->keys);
    free(f->s);
    free(f->qkeys);
    free(f->qidx);
    free(f->polled);
    free(f);
}

/* Computes the chain keys of blocks [f->n_keys, n_full). */
static void hier_keys(const kv_hier *h, kv_fetch *f, const int32_t *toks, int32_t n_full) {
    int64_t bs = kv_pool_block_size(h->p);
    if (n_full > f->cap)
        n_full = f->cap;
    for (int32_t j = f->n_keys; j < n_full; j++)
        f->keys[j] =
            kv_block_key(j ? f->keys[j - 1] : h->identity, toks + (size_t)j * (size_t)bs, bs);
    if (n_full > f->n_keys)
        f->n_keys = n_full;
}

/* Records in block j's slot the answer state (kv_tiers_poll's) with its blob. */
static void slot_answer(kv_fetch *f, int32_t j, int state, void *blob, size_t n, int tier) {
    kv_fetch_slot *sl = &f->s[j];
    switch (state) {
    case KV_FETCH_READY:
        sl->blob = blob;
        sl->n = n;
        sl->tier = (int8_t)tier;
        sl->state = FS_READY;
        break;
    case KV_FETCH_MISS:
        sl->state = FS_MISS;
        break;
    case KV_FETCH_NONE:
        /* another request polled this key's answer first: ask again */
        sl->state = FS_NONE;
        break;
    default:
        break;
    }
}

/* Collects block j's answer if it arrived. */
static void hier_poll(kv_hier *h, kv_fetch *f, int32_t j) {
    if (f->s[j].state != FS_PENDING)
        return;
    void *blob = NULL;
    size_t n = 0;
    int tier = 0;
    int state = kv_tiers_poll(h->tiers, f->keys[j], &blob, &n, &tier);
    slot_answer(f, j, state, blob, n, tier);
}

/* Collects the answers that arrived for the pending blocks in [from, to), under one lock. */
static void hier_poll_range(kv_hier *h, kv_fetch *f, int32_t from, int32_t to) {
    int m = 0;
    for (int32_t j = from; j < to; j++)
        if (f->s[j].state == FS_PENDING) {
            f->qidx[m] = j;
            f->qkeys[m++] = f->keys[j];
        }
    if (m == 0)
        return;
    kv_tiers_poll_many(h->tiers, f->qkeys, m, f->polled);
    for (int i = 0; i < m; i++)
        slot_answer(f, f->qidx[i], f->polled[i].state, f->polled[i].blob, f->polled[i].n,
                    f->polled[i].tier);
}

/* Asks the tiers for the blocks in [from, to) not asked yet, up to the first known miss (the
 * prefix ends there), under one lock and with one wake of the I/O thread. */
static void hier_fetch_range(kv_hier *h, kv_fetch *f, int32_t from, int32_t to) {
    int m = 0;
    for (int32_t j = from; j < to && f->s[j].state != FS_MISS; j++)
        if (f->s[j].state == FS_NONE) {
            f->qkeys[m++] = f->keys[j];
            f->s[j].state = FS_PENDING;
        }
    if (m > 0 && !f->t0_ns)
        f->t0_ns = clock_now_ns();
    kv_tiers_fetch_many(h->tiers, f->qkeys, m);
}

/* Key by key (kv-fetch-group 0): block j's answer, and a lookup if it has none. */
static void hier_ask_one(kv_hier *h, kv_fetch *f, int32_t j) {
    hier_poll(h, f, j);
    if (f->s[j].state == FS_NONE) {
        if (!f->t0_ns)
            f->t0_ns = clock_now_ns();
        kv_tiers_fetch(h->tiers, f->keys[j]);
        f->s[j].state = FS_PENDING;
    }
}

void kv_hier_set_notify(kv_hier *h, void (*fn)(void *ud), void *ud) {
    kv_tiers_set_notify(h->tiers, fn, ud);
}

void kv_hier_prefetch(kv_hier *h, kv_fetch *f, const int32_t *toks, int32_t n_full) {
    if (!h->tiers)
        return;
    hier_keys(h, f, toks, n_full);
    n_full = f->n_keys < n_full ? f->n_keys : n_full;
    int32_t l1 = kv_prefix_peek(h->px, toks, n_full);
    if (h->group) {
        hier_poll_range(h, f, l1, n_full);
        hier_fetch_range(h, f, l1, n_full);
        return;
    }
    for (int32_t j = l1; j < n_full; j++) {
        hier_ask_one(h, f, j);
        if (f->s[j].state == FS_MISS)
            break; /* the prefix ends here: later blocks could not be used */
    }
}

bool kv_hier_waiting(kv_hier *h, kv_fetch *f, const int32_t *toks, int32_t n_full) {
    if (!h->tiers || !h->group)
        return false;
    hier_keys(h, f, toks, n_full);
    n_full = f->n_keys < n_full ? f->n_keys : n_full;
    int32_t l1 = kv_prefix_peek(h->px, toks, n_full);
    if (l1 >= n_full)
        return false;
    hier_poll_range(h, f, l1, n_full);
    /* restore once, when every lookup up to the first miss is answered: a restore that stopped
     * at a block still on its way would give its blocks back and the next one take (and verify)
     * them again */
    for (int32_t j = l1; j < n_full && f->s[j].state != FS_MISS; j++)
        if (f->s[j].state == FS_PENDING)
            return true;
    return false;
}

/* A reload ended (kv_hier_load returned >= 0): its wall time, from the first lookup queued to
 * now, goes to the tiers its blocks came from, shared by their number. */
static void hier_reload_done(kv_hier *h, kv_fetch *f) {
    int64_t all = 0;
    for (int i = 0; i < KV_TIER_COUNT; i++)
        all += f->got[i];
    if (f->t0_ns && all > 0) {
        double s = (double)(clock_now_ns() - f->t0_ns) * 1e-9;
        for (int i = 0; i < KV_TIER_COUNT; i++)
            h->reload_s[i] += s * (double)f->got[i] / (double)all;
    }
    f->t0_ns = 0;
    memset(f->got, 0, sizeof f->got);
}

int32_t kv_hier_load(kv_hier *h, kv_fetch *f, kv_table *t, const int32_t *toks, int32_t n_full) {
    if (!h->tiers)
        return 0;
    CHECK(t->n == t->n_sealed);
    hier_keys(h, f, toks, n_full);
    int64_t bs = kv_pool_block_size(h->p);
    int32_t got = 0;
    if (h->group) {
        int32_t end = n_full < f->n_keys ? n_full : f->n_keys;
        hier_poll_range(h, f, t->n, end);
        hier_fetch_range(h, f, t->n, end);
    }
    for (int32_t j = t->n; j < n_full && j < f->n_keys; j++) {
        kv_fetch_slot *sl = &f->s[j];
        if (!h->group)
            hier_ask_one(h, f, j);
        if (sl->state == FS_PENDING)
            return -1;
        if (sl->state != FS_READY)
            break;
        const int32_t *bt = toks + (size_t)j * (size_t)bs;
        int32_t id = kv_prefix_alloc(h->px, t);
        if (id < 0)
            break; /* no room: the rest is computed */
        kv_block_meta want = {.identity = h->identity,
                              .parent = j ? f->keys[j - 1] : h->identity,
                              .key = f->keys[j],
                              .toks = bt};
        uint64_t sum = 0;
        int rc = kv_block_decode(h->p, id, &want, sl->blob, sl->n, &sum);
        int tier = sl->tier;
        kv_tiers_blob_free(h->tiers, sl->blob, sl->n);
        sl->blob = NULL;
        if (rc) {
            log_error("kv cache: block %016llx (positions %lld..%lld) from the %s tier refused: "
                      "%s; dropped, recomputed",
                      (unsigned long long)f->keys[j], (long long)j * bs,
                      (long long)(j + 1) * bs - 1, kv_tiers_tier_name(tier), err_detail());
            h->failures[tier]++;
            kv_tiers_drop(h->tiers, tier, f->keys[j]);
            kv_prefix_pop(h->px, t);
            sl->state = FS_MISS;
            break;
        }
        kv_prefix_seal_loaded(h->px, t, bt, sum);
        h->restored[tier]++;
        f->got[tier]++;
        sl->state = FS_NONE;
        got++;
    }
    hier_reload_done(h, f);
    return got;
}

void kv_hier_stats_get(const kv_hier *h, kv_hier_tier_stats out[KV_TIER_COUNT]) {
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].open = h->tiers && kv_tiers_has(h->tiers, i);
        if (out[i].open)
            kv_tiers_stats_get(h->tiers, i, &out[i].io);
        out[i].restored = h->restored[i];
        out[i].reload_s = h->reload_s[i];
        out[i].failures = h->failures[i];
    }
}
