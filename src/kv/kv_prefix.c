/* SPDX-License-Identifier: MIT */
/*
 * kv_prefix: see kv_prefix.h. Nodes are indexed by block id (a block is cached at most once), so
 * every per-node array has the pool's size and nothing is allocated after creation. The hash
 * table chains nodes through next_in_bucket; children are a doubly linked sibling list; the LRU
 * list of evictable nodes is doubly linked, oldest at lru_head.
 */
#include "kv/kv_prefix.h"
#include "base/check.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "kv/kv_block.h"

#include <stdlib.h>
#include <string.h>

#define PX_NONE (-1)

typedef struct px_node {
    uint64_t key, checksum;
    int32_t parent; /* parent node's block id, or PX_NONE at the root */
    int32_t first_child, prev_sib, next_sib;
    int32_t next_in_bucket;
    int32_t lru_prev, lru_next;
    bool cached, in_lru;
} px_node;

struct kv_prefix {
    kv_pool *p;
    kv_prefix_opts o;
    int64_t bs, n_blocks;
    px_node *nodes;  /* [n_blocks] */
    int32_t *toks;   /* [n_blocks, bs] token ids of each cached block */
    int32_t *bucket; /* [n_bucket] first node of each chain */
    uint64_t n_bucket;
    int32_t lru_head, lru_tail;
    kv_prefix_evict_cb evict_cb;
    void *evict_ud;
    kv_prefix_seal_cb seal_cb;
    void *seal_ud;
    kv_prefix_stats st;
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    bool f_corrupt;
    int64_t f_count;
#endif
};

int kv_table_init(kv_table *t, int32_t cap) {
    memset(t, 0, sizeof *t);
    t->tail = PX_NONE;
    t->ids = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *t->ids);
    if (!t->ids)
        return err_set(ERR_NOMEM, "kv table: out of memory");
    t->cap = cap;
    return 0;
}

void kv_table_deinit(kv_table *t) {
    free(t->ids);
    memset(t, 0, sizeof *t);
}

int kv_prefix_create(kv_pool *p, const kv_prefix_opts *o, kv_prefix **out) {
    *out = NULL;
    kv_prefix *px = calloc(1, sizeof *px);
    if (!px)
        return err_set(ERR_NOMEM, "kv prefix: out of memory");
    px->p = p;
    px->o = *o;
    px->bs = kv_pool_block_size(p);
    px->n_blocks = kv_pool_n_blocks(p);
    px->n_bucket = 1;
    while (px->n_bucket < (uint64_t)px->n_blocks * 2)
        px->n_bucket <<= 1;
    px->lru_head = px->lru_tail = PX_NONE;
    if (o->enabled) {
        px->nodes = calloc((size_t)px->n_blocks, sizeof *px->nodes);
        px->toks = malloc((size_t)px->n_blocks * (size_t)px->bs * sizeof *px->toks);
        px->bucket = malloc(px->n_bucket * sizeof *px->bucket);
        if (!px->nodes || !px->toks || !px->bucket) {
            kv_prefix_destroy(px);
            return err_set(ERR_NOMEM, "kv prefix: cannot index %lld blocks",
                           (long long)px->n_blocks);
        }
        for (uint64_t i = 0; i < px->n_bucket; i++)
            px->bucket[i] = PX_NONE;
    }
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    px->f_corrupt = strcmp(flags_str(FLAG_FAULT_KV_CORRUPT), "l1") == 0;
#endif
    *out = px;
    return 0;
}

void kv_prefix_destroy(kv_prefix *px) {
    if (!px)
        return;
    if (px->nodes)
        for (int64_t i = 0; i < px->n_blocks; i++)
            if (px->nodes[i].cached)
                kv_block_unref(px->p, (int32_t)i);
    free(px->nodes);
    free(px->toks);
    free(px->bucket);
    free(px);
}

void kv_prefix_set_evict_cb(kv_prefix *px, kv_prefix_evict_cb cb, void *ud) {
    px->evict_cb = cb;
    px->evict_ud = ud;
}

void kv_prefix_set_seal_cb(kv_prefix *px, kv_prefix_seal_cb cb, void *ud) {
    px->seal_cb = cb;
    px->seal_ud = ud;
}

uint64_t kv_prefix_identity(const kv_prefix *px) {
    return px->o.identity;
}

int64_t kv_prefix_n_available(const kv_prefix *px) {
    return kv_pool_n_free(px->p) + px->st.evictable;
}

/* ---- LRU list of evictable nodes ---- */

static void px_lru_remove(kv_prefix *px, int32_t id) {
    px_node *n = &px->nodes[id];
    if (!n->in_lru)
        return;
    if (n->lru_prev != PX_NONE)
        px->nodes[n->lru_prev].lru_next = n->lru_next;
    else
        px->lru_head = n->lru_next;
    if (n->lru_next != PX_NONE)
        px->nodes[n->lru_next].lru_prev = n->lru_prev;
    else
        px->lru_tail = n->lru_prev;
    n->in_lru = false;
    px->st.evictable--;
}

static void px_lru_append(kv_prefix *px, int32_t id) {
    px_node *n = &px->nodes[id];
    CHECK(!n->in_lru);
    n->lru_prev = px->lru_tail;
    n->lru_next = PX_NONE;
    if (px->lru_tail != PX_NONE)
        px->nodes[px->lru_tail].lru_next = id;
    else
        px->lru_head = id;
    px->lru_tail = id;
    n->in_lru = true;
    px->st.evictable++;
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    /* FAULT (h, l1): a cached block's memory takes a bit flip while nobody uses it */
    if (px->f_corrupt && (++px->f_count & 7) == 0)
        ((unsigned char *)kv_pool_v_base(px->p, 0))[(size_t)id * kv_pool_kv_stride(px->p)] ^=
            0x10;
#endif
}

/* ---- hash table and tree ---- */

static int32_t *px_bucket_of(kv_prefix *px, uint64_t key) {
    return &px->bucket[key & (px->n_bucket - 1)];
}

static int32_t px_find(kv_prefix *px, int32_t parent, uint64_t key, const int32_t *toks) {
    for (int32_t i = *px_bucket_of(px, key); i != PX_NONE; i = px->nodes[i].next_in_bucket) {
        const px_node *n = &px->nodes[i];
        if (n->key == key && n->parent == parent &&
            memcmp(px->toks + (size_t)i * (size_t)px->bs, toks, (size_t)px->bs * sizeof *toks) == 0)
            return i;
    }
    return PX_NONE;
}

/* Makes block id (one reference taken here for the cache) the node for toks under parent. */
static void px_insert(kv_prefix *px, int32_t id, int32_t parent, uint64_t key, uint64_t checksum,
                      const int32_t *toks) {
    px_node *n = &px->nodes[id];
    CHECK(!n->cached);
    memset(n, 0, sizeof *n);
    n->key = key;
    n->checksum = checksum;
    n->parent = parent;
    n->first_child = n->prev_sib = PX_NONE;
    n->lru_prev = n->lru_next = PX_NONE;
    n->cached = true;
    memcpy(px->toks + (size_t)id * (size_t)px->bs, toks, (size_t)px->bs * sizeof *toks);
    int32_t *b = px_bucket_of(px, key);
    n->next_in_bucket = *b;
    *b = id;
    if (parent != PX_NONE) {
        px_node *pn = &px->nodes[parent];
        n->next_sib = pn->first_child;
        if (pn->first_child != PX_NONE)
            px->nodes[pn->first_child].prev_sib = id;
        pn->first_child = id;
    } else {
        n->next_sib = PX_NONE;
    }
    kv_block_ref(px->p, id);
    px->st.cached++;
    px->st.inserted++;
}

/* Takes node id out of the tree (its children must be gone) and drops the cache's reference. */
static void px_unlink(kv_prefix *px, int32_t id) {
    px_node *n = &px->nodes[id];
    CHECK(n->cached && n->first_child == PX_NONE);
    px_lru_remove(px, id);
    int32_t *pp = px_bucket_of(px, n->key);
    while (*pp != id)
        pp = &px->nodes[*pp].next_in_bucket;
    *pp = n->next_in_bucket;
    if (n->prev_sib != PX_NONE)
        px->nodes[n->prev_sib].next_sib = n->next_sib;
    else if (n->parent != PX_NONE)
        px->nodes[n->parent].first_child = n->next_sib;
    if (n->next_sib != PX_NONE)
        px->nodes[n->next_sib].prev_sib = n->prev_sib;
    n->cached = false;
    px->st.cached--;
    kv_block_unref(px->p, id);
}

/* Drops node id and everything below it (children first). */
static void px_drop_subtree(kv_prefix *px, int32_t id) {
    while (px->nodes[id].first_child != PX_NONE)
        px_drop_subtree(px, px->nodes[id].first_child);
    px_unlink(px, id);
}

/* Calls cb for node id. */
static void px_visit(const kv_prefix *px, int32_t id, kv_prefix_evict_cb cb, void *ud) {
    const px_node *n = &px->nodes[id];
    uint64_t parent_key = n->parent != PX_NONE ? px->nodes[n->parent].key : px->o.identity;
    cb(ud, px->p, id, n->key, parent_key, px->toks + (size_t)id * (size_t)px->bs, n->checksum);
}

/* Evicts the least recently used evictable node (a leaf unless a private copy carried its prefix
 * on, see kv_prefix.h), offering it to the tier below first. Returns false if none is evictable. */
static bool px_evict_one(kv_prefix *px) {
    int32_t id = px->lru_head;
    if (id == PX_NONE)
        return false;
    if (px->evict_cb)
        px_visit(px, id, px->evict_cb, px->evict_ud);
    px_drop_subtree(px, id);
    px->st.evictions++;
    return true;
}

void kv_prefix_for_each(kv_prefix *px, kv_prefix_evict_cb cb, void *ud) {
    if (!px->o.enabled)
        return;
    for (int32_t id = px->lru_tail; id != PX_NONE; id = px->nodes[id].lru_prev)
        px_visit(px, id, cb, ud);
    for (int64_t i = 0; i < px->n_blocks; i++)
        if (px->nodes[i].cached && !px->nodes[i].in_lru)
            px_visit(px, (int32_t)i, cb, ud);
}

int32_t kv_prefix_alloc(kv_prefix *px, kv_table *t) {
    CHECK(t->n < t->cap);
    if (kv_pool_n_free(px->p) == 0 && !px_evict_one(px))
        return -1;
    int32_t id = kv_pool_alloc(px->p);
    CHECK(id >= 0);
    t->ids[t->n++] = id;
    return id;
}

uint64_t kv_prefix_next_key(const kv_prefix *px, const kv_table *t, const int32_t *block_toks) {
    return kv_block_key(t->n_sealed ? t->tail_key : px->o.identity, block_toks, px->bs);
}

int32_t kv_prefix_match(kv_prefix *px, kv_table *t, const int32_t *toks, int32_t max_blocks) {
    CHECK(t->n == 0);
    if (!px->o.enabled)
        return 0;
    int32_t parent = PX_NONE;
    uint64_t parent_key = px->o.identity;
    int32_t got = 0;
    while (got < max_blocks && got < t->cap) {
        const int32_t *bt = toks + (size_t)got * (size_t)px->bs;
        uint64_t key = kv_block_key(parent_key, bt, px->bs);
        px->st.lookups++;
        int32_t id = px_find(px, parent, key, bt);
        if (id == PX_NONE)
            break;
        if (px->o.verify && kv_block_checksum(px->p, id, key) != px->nodes[id].checksum) {
            log_error("kv cache: block %d (key %016llx, positions %lld..%lld) fails its checksum: "
                      "dropped, recomputed",
                      id, (unsigned long long)key, (long long)got * px->bs,
                      (long long)(got + 1) * px->bs - 1);
            px->st.checksum_failures++;
            px_drop_subtree(px, id);
            break;
        }
        px_lru_remove(px, id);
        kv_block_ref(px->p, id);
        t->ids[t->n++] = id;
        parent = id;
        parent_key = key;
        got++;
        px->st.hits++;
    }
    t->n_sealed = got;
    t->tail = parent;
    t->tail_key = parent_key;
    return got;
}

/* Seals t's block t->n_sealed (content block_toks), whose checksum is given (have_sum) or
 * computed here. If the prefix already has a node, t takes the node instead of its own copy (the
 * bytes are the same, P1), so a table always holds every node of its sealed prefix and none of
 * them can be evicted under it. A chain whose previous node was dropped (checksum failure) stays
 * private from there on. */
static void px_seal_one(kv_prefix *px, kv_table *t, const int32_t *block_toks, bool have_sum,
                        uint64_t sum) {
    int32_t i = t->n_sealed;
    CHECK(i < t->n);
    int32_t parent = i ? t->tail : PX_NONE;
    uint64_t key = kv_prefix_next_key(px, t, block_toks);
    int32_t id = PX_NONE;
    if (i == 0 || (parent != PX_NONE && px->nodes[parent].cached)) {
        id = px_find(px, parent, key, block_toks);
        int32_t own = t->ids[i];
        if (id == PX_NONE && !px->nodes[own].cached) {
            id = own;
            uint64_t cs = have_sum ? sum : kv_block_checksum(px->p, id, key);
            px_insert(px, id, parent, key, cs, block_toks);
            if (!have_sum && px->seal_cb)
                px->seal_cb(px->seal_ud, px->p, id, key, i ? t->tail_key : px->o.identity,
                            block_toks, cs);
        } else if (id != PX_NONE && id != own) {
            px_lru_remove(px, id);
            kv_block_ref(px->p, id);
            kv_block_unref(px->p, own);
            t->ids[i] = id;
        }
    }
    t->tail = id;
    t->tail_key = key;
    t->n_sealed++;
}

void kv_prefix_seal(kv_prefix *px, kv_table *t, const int32_t *toks, int32_t n_full) {
    if (!px->o.enabled)
        return;
    CHECK(n_full <= t->n);
    while (t->n_sealed < n_full)
        px_seal_one(px, t, toks + (size_t)t->n_sealed * (size_t)px->bs, false, 0);
}

void kv_prefix_seal_loaded(kv_prefix *px, kv_table *t, const int32_t *block_toks,
                           uint64_t checksum) {
    if (px->o.enabled)
        px_seal_one(px, t, block_toks, true, checksum);
}

int32_t kv_prefix_peek(kv_prefix *px, const int32_t *toks, int32_t max_blocks) {
    if (!px->o.enabled)
        return 0;
    int32_t parent = PX_NONE, got = 0;
    uint64_t parent_key = px->o.identity;
    while (got < max_blocks) {
        const int32_t *bt = toks + (size_t)got * (size_t)px->bs;
        uint64_t key = kv_block_key(parent_key, bt, px->bs);
        int32_t id = px_find(px, parent, key, bt);
        if (id == PX_NONE)
            break;
        parent = id;
        parent_key = key;
        got++;
    }
    return got;
}

void kv_prefix_pop(kv_prefix *px, kv_table *t) {
    CHECK(t->n > t->n_sealed);
    int32_t id = t->ids[--t->n];
    kv_block_unref(px->p, id);
    if (px->nodes && px->nodes[id].cached && kv_block_refcount(px->p, id) == 1)
        px_lru_append(px, id);
}

void kv_prefix_unref(kv_prefix *px, int32_t id) {
    kv_block_unref(px->p, id);
    if (px->nodes && px->nodes[id].cached && kv_block_refcount(px->p, id) == 1)
        px_lru_append(px, id);
}

void kv_prefix_release(kv_prefix *px, kv_table *t) {
    for (int32_t i = t->n - 1; i >= 0; i--) {
        int32_t id = t->ids[i];
        kv_block_unref(px->p, id);
        if (px->nodes && px->nodes[id].cached && kv_block_refcount(px->p, id) == 1)
            px_lru_append(px, id);
    }
    t->n = 0;
    t->n_sealed = 0;
    t->tail = PX_NONE;
    t->tail_key = 0;
}

int kv_prefix_copy_block(kv_prefix *px, kv_table *t, int32_t i) {
    CHECK(i >= 0 && i < t->n);
    if (kv_pool_n_free(px->p) == 0 && !px_evict_one(px))
        return err_set(ERR_FULL, "kv prefix: no block free for a copy");
    int32_t src = t->ids[i], dst = kv_pool_alloc(px->p);
    CHECK(dst >= 0);
    kv_block_copy(px->p, dst, src); /* every buffer: K, V, the companion */
    t->ids[i] = dst;
    if (t->n_sealed > i) {
        /* the copy will be written: t's sealed prefix ends before it */
        t->n_sealed = i;
        t->tail = i ? t->ids[i - 1] : PX_NONE;
        t->tail_key = i && px->nodes ? px->nodes[t->ids[i - 1]].key : 0;
    }
    kv_block_unref(px->p, src);
    if (px->nodes && px->nodes[src].cached && kv_block_refcount(px->p, src) == 1)
        px_lru_append(px, src);
    return 0;
}

void kv_prefix_stats_get(const kv_prefix *px, kv_prefix_stats *out) {
    *out = px->st;
}
