/* SPDX-License-Identifier: MIT */
/*
 * test_kv_prefix: the KV cache's block names, checksums and blob format (kv_block), the radix
 * prefix cache (kv_prefix), and P1 through the engine with the cache on.
 *   - codec: a blob restores the exact bytes; a flipped payload bit, another block's name,
 *     another token, a missing buffer, a truncated blob and a foreign geometry are each refused
 *     with their own error;
 *   - prefix cache: sealing, matching, release order (a parent becomes evictable after its
 *     children, so eviction takes leaves first), eviction before anything else fails, a private
 *     copy of a cached prefix adopting the cached nodes, copy-on-write of a shared block, and a
 *     bit flipped in a cached block's memory: detected before reuse, the block and everything
 *     after it dropped, counted;
 *   - a companion buffer (the DSA index keys) moves with its block: in the checksum, the
 *     copy-on-write copy and the blob; a blob with fewer buffers than the pool (a tier that left
 *     the index keys out), more, or index keys of another type is refused;
 *   - the engine: 24 requests sharing system prompts and multi-turn histories give the same tokens
 *     with the cache off and alone (the reference), cold and warm one at a time, and batched and
 *     chunked in a pool so small that cached blocks are evicted and sequences preempted; for a
 *     llama model and a deepseek32 one (latent cache and index keys), the latter also restoring
 *     evicted blocks from the disk tier;
 *   - disaggregation (engine.h's kv_out and kv_in hooks): a prefill engine hands over each full
 *     prompt block once, in order, and is idle again when the references come back; a decode
 *     engine that waited for them (the first poll says "still arriving") restores them and gives
 *     the tokens of an engine that computed everything, with the cached count showing the blocks
 *     were used; a corrupted blob is refused, the rest computed, the tokens still equal.
 */
#include "test.h"

#include "base/err.h"
#include "base/flags.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "kv/kv_block.h"
#include "kv/kv_pool.h"
#include "kv/kv_prefix.h"
#include "model/model.h"
#include "model/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

enum { BS = 4, NL = 2, KVD = 8 };

static kv_pool *mk_pool(int64_t n_blocks) {
    kv_pool_opts o = {
        .n_layer = NL, .kv_dim = KVD, .block_size = BS, .n_blocks = n_blocks, .f16 = true};
    kv_pool *p;
    T_OK(kv_pool_create(&o, &p));
    return p;
}

/* Writes what "computing" block id for these tokens would write: bytes derived from the tokens. */
/* Block id's K (or V) rows of layer l, addressed as the forward pass does (the pool's stride). */
static unsigned char *blk_k(kv_pool *p, int64_t l, int32_t id) {
    return (unsigned char *)kv_pool_k_base(p, l) + (size_t)id * kv_pool_kv_stride(p);
}
static unsigned char *blk_v(kv_pool *p, int64_t l, int32_t id) {
    return (unsigned char *)kv_pool_v_base(p, l) + (size_t)id * kv_pool_kv_stride(p);
}
static unsigned char *blk_ik(kv_pool *p, int64_t l, int32_t id) {
    return (unsigned char *)kv_pool_ik_base(p, l) + (size_t)id * kv_pool_ik_stride(p);
}

static void fill_block(kv_pool *p, int32_t id, const int32_t *toks) {
    size_t bb = kv_pool_block_bytes(p);
    for (int64_t l = 0; l < NL; l++)
        for (size_t i = 0; i < bb; i++) {
            unsigned v = (unsigned)(toks[i % BS] * 131 + (int)l * 17 + (int)i);
            blk_k(p, l, id)[i] = (unsigned char)v;
            blk_v(p, l, id)[i] = (unsigned char)(v >> 3);
        }
}

static bool same_block(kv_pool *p, int32_t a, int32_t b) {
    size_t bb = kv_pool_block_bytes(p);
    for (int64_t l = 0; l < NL; l++)
        if (memcmp(blk_k(p, l, a), blk_k(p, l, b), bb) || memcmp(blk_v(p, l, a), blk_v(p, l, b), bb))
            return false;
    return true;
}

static void t_codec(void) {
    kv_pool *p = mk_pool(4);
    int32_t toks[BS] = {5, 6, 7, 8};
    int32_t id = kv_pool_alloc(p), dst = kv_pool_alloc(p);
    fill_block(p, id, toks);
    uint64_t parent = 0x1234, key = kv_block_key(parent, toks, BS);
    uint64_t sum = kv_block_checksum(p, id, key);
    T_CHECK(sum != kv_block_checksum(p, id, key + 1)); /* the name is in the checksum */
    kv_block_meta m = {.identity = 99, .parent = parent, .key = key, .checksum = sum, .toks = toks};
    size_t n = kv_block_blob_bytes(p);
    unsigned char *blob = malloc(n), *bad = malloc(n);
    T_CHECK(blob && bad);
    kv_block_encode(p, id, &m, blob);
    uint64_t got = 0;
    T_OK(kv_block_decode(p, dst, &m, blob, n, &got));
    T_CHECK(got == sum && same_block(p, id, dst));
    /* one flipped payload bit */
    memcpy(bad, blob, n);
    bad[n - 3] ^= 0x04;
    T_CHECK(kv_block_decode(p, dst, &m, bad, n, NULL) == ERR_CHECKSUM);
    /* another block's name, another token, another identity */
    kv_block_meta w = m;
    w.key ^= 1;
    T_CHECK(kv_block_decode(p, dst, &w, blob, n, NULL) == ERR_NOTFOUND);
    int32_t toks2[BS] = {5, 6, 7, 9};
    w = m;
    w.toks = toks2;
    T_CHECK(kv_block_decode(p, dst, &w, blob, n, NULL) == ERR_NOTFOUND);
    w = m;
    w.identity = 98;
    T_CHECK(kv_block_decode(p, dst, &w, blob, n, NULL) == ERR_NOTFOUND);
    /* a blob naming one buffer fewer than the pool restores (offset of n_buffers: 48) */
    memcpy(bad, blob, n);
    bad[48] = 1;
    T_CHECK(kv_block_decode(p, dst, &m, bad, n, NULL) == ERR_FORMAT);
    /* a renamed buffer */
    memcpy(bad, blob, n);
    bad[56 + 16] = 'x';
    T_CHECK(kv_block_decode(p, dst, &m, bad, n, NULL) == ERR_FORMAT);
    /* truncated, and bad magic */
    T_CHECK(kv_block_decode(p, dst, &m, blob, n - 1, NULL) == ERR_FORMAT);
    T_CHECK(kv_block_decode(p, dst, &m, blob, 10, NULL) == ERR_FORMAT);
    memcpy(bad, blob, n);
    bad[0] = 'X';
    T_CHECK(kv_block_decode(p, dst, &m, bad, n, NULL) == ERR_FORMAT);
    /* a pool of another geometry (more layers) refuses it */
    kv_pool_opts o2 = {
        .n_layer = NL + 1, .kv_dim = KVD, .block_size = BS, .n_blocks = 2, .f16 = true};
    kv_pool *p2;
    T_OK(kv_pool_create(&o2, &p2));
    T_CHECK(kv_block_decode(p2, kv_pool_alloc(p2), &m, blob, n, NULL) == ERR_FORMAT);
    kv_pool_destroy(p2);
    free(blob);
    free(bad);
    kv_pool_destroy(p);
}

/* A k_only pool (MLA) with a companion buffer of ik_row bytes named ik (ik_row 0: none). */
static kv_pool *mk_pool_ik(int64_t n_blocks, const char *ik, size_t ik_row) {
    kv_pool_opts o = {.n_layer = NL,
                      .kv_dim = KVD,
                      .block_size = BS,
                      .n_blocks = n_blocks,
                      .f16 = true,
                      .k_only = true,
                      .ik_row_bytes = ik_row,
                      .ik_name = ik};
    kv_pool *p;
    T_OK(kv_pool_create(&o, &p));
    return p;
}

/* Fills block id's K rows and index keys with bytes derived from seed. */
static void fill_ik_block(kv_pool *p, int32_t id, unsigned seed) {
    size_t kb = kv_pool_block_bytes(p), ib = kv_pool_ik_block_bytes(p);
    for (int64_t l = 0; l < NL; l++) {
        for (size_t i = 0; i < kb; i++)
            blk_k(p, l, id)[i] = (unsigned char)(seed * 7 + (unsigned)i + (unsigned)l * 13);
        for (size_t i = 0; i < ib; i++)
            blk_ik(p, l, id)[i] = (unsigned char)(seed * 29 + (unsigned)i * 3 + (unsigned)l);
    }
}

static bool same_ik(kv_pool *p, int32_t a, int32_t b) {
    size_t ib = kv_pool_ik_block_bytes(p);
    for (int64_t l = 0; l < NL; l++)
        if (memcmp(blk_ik(p, l, a), blk_ik(p, l, b), ib))
            return false;
    return true;
}

static void t_companion(void) {
    kv_pool *p = mk_pool_ik(4, "ik-f16", 2 * 8);
    T_EQ_INT(kv_pool_n_buffers(p), 2); /* k and the index keys: no V region */
    T_CHECK(!strcmp(kv_pool_buffer_name(p, 1), "ik-f16"));
    T_EQ_INT(kv_block_state_bytes(p), NL * BS * (KVD * 2 + 16));
    T_CHECK(kv_pool_v_base(p, 1) == kv_pool_k_base(p, 1));
    int32_t toks[BS] = {5, 6, 7, 8};
    int32_t a = kv_pool_alloc(p), b = kv_pool_alloc(p);
    fill_ik_block(p, a, 1);
    fill_ik_block(p, b, 2);
    uint64_t key = kv_block_key(7, toks, BS), sum = kv_block_checksum(p, a, key);
    /* the index keys are in the checksum */
    blk_ik(p, 1, a)[3] ^= 0x10;
    T_CHECK(kv_block_checksum(p, a, key) != sum);
    blk_ik(p, 1, a)[3] ^= 0x10;
    /* copy-on-write copies them */
    kv_block_copy(p, b, a);
    T_CHECK(same_ik(p, a, b) && kv_block_checksum(p, b, key) == sum);
    /* the blob carries them: a reload restores the index keys, not only K */
    fill_ik_block(p, b, 3);
    kv_block_meta m = {.identity = 99, .parent = 7, .key = key, .checksum = sum, .toks = toks};
    size_t n = kv_block_blob_bytes(p);
    unsigned char *blob = malloc(n);
    T_CHECK(blob);
    kv_block_encode(p, a, &m, blob);
    T_OK(kv_block_decode(p, b, &m, blob, n, NULL));
    T_CHECK(same_ik(p, a, b) && kv_block_checksum(p, b, key) == sum);
    /* a pool without the companion (the same K) refuses the blob, and its own blob, which has
     * one buffer fewer, is refused by p: a reload must never leave the index keys stale */
    kv_pool *q = mk_pool_ik(4, NULL, 0);
    int32_t qa = kv_pool_alloc(q);
    T_CHECK(kv_block_decode(q, qa, &m, blob, n, NULL) == ERR_FORMAT);
    size_t qn = kv_block_blob_bytes(q);
    unsigned char *qblob = malloc(qn);
    T_CHECK(qblob);
    fill_ik_block(q, qa, 1);
    kv_block_meta qm = m;
    qm.checksum = kv_block_checksum(q, qa, key);
    kv_block_encode(q, qa, &qm, qblob);
    T_CHECK(kv_block_decode(p, b, &qm, qblob, qn, NULL) == ERR_FORMAT);
    /* index keys of another type, of the same size, are refused by name */
    kv_pool *r = mk_pool_ik(4, "ik-bf16", 2 * 8);
    T_CHECK(kv_block_decode(r, kv_pool_alloc(r), &m, blob, n, NULL) == ERR_FORMAT);
    free(blob);
    free(qblob);
    kv_pool_destroy(r);
    kv_pool_destroy(q);
    kv_pool_destroy(p);
}

typedef struct evict_log {
    uint64_t keys[64];
    int n;
} evict_log;

static void on_evict(void *ud, const kv_pool *p, int32_t id, uint64_t key, uint64_t parent,
                     const int32_t *toks, uint64_t checksum) {
    (void)parent;
    (void)toks;
    evict_log *l = ud;
    /* the bytes are still intact when a tier is offered the block */
    T_CHECK(kv_block_checksum(p, id, key) == checksum);
    if (l->n < 64)
        l->keys[l->n++] = key;
}

/* "Computes" t's blocks up to n_blocks for toks (allocating them) and seals them. */
static void compute(kv_pool *p, kv_prefix *px, kv_table *t, const int32_t *toks, int32_t n_blocks) {
    for (int32_t b = t->n; b < n_blocks; b++) {
        int32_t id = kv_prefix_alloc(px, t);
        T_CHECK(id >= 0);
        fill_block(p, id, toks + b * BS);
    }
    kv_prefix_seal(px, t, toks, n_blocks);
}

static void t_prefix(void) {
    kv_pool *p = mk_pool(8);
    kv_prefix *px;
    kv_prefix_opts o = {.enabled = true, .verify = true, .identity = 7};
    T_OK(kv_prefix_create(p, &o, &px));
    evict_log log = {0};
    kv_prefix_set_evict_cb(px, on_evict, &log);
    int32_t a[4 * BS], b[4 * BS];
    for (int i = 0; i < 4 * BS; i++) {
        a[i] = i + 1;
        b[i] = i < 2 * BS ? i + 1 : 100 + i; /* shares a's first two blocks */
    }
    kv_table t, u;
    T_OK(kv_table_init(&t, 8));
    T_OK(kv_table_init(&u, 8));
    kv_prefix_stats st;

    /* a computes 4 blocks; released, they stay cached and evictable */
    compute(p, px, &t, a, 4);
    int32_t a_ids[4];
    memcpy(a_ids, t.ids, sizeof a_ids);
    kv_prefix_stats_get(px, &st);
    T_CHECK(st.cached == 4 && st.evictable == 0 && kv_prefix_n_available(px) == 4);
    kv_prefix_release(px, &t);
    kv_prefix_stats_get(px, &st);
    T_CHECK(st.cached == 4 && st.evictable == 4 && kv_pool_n_free(p) == 4 &&
            kv_prefix_n_available(px) == 8);

    /* b matches the first two, computes two of its own */
    T_CHECK(kv_prefix_match(px, &u, b, 4) == 2);
    T_CHECK(u.ids[0] == a_ids[0] && u.ids[1] == a_ids[1] && u.n_sealed == 2);
    compute(p, px, &u, b, 4);
    kv_prefix_stats_get(px, &st);
    T_CHECK(st.cached == 6 && st.hits == 2);
    kv_prefix_release(px, &u);

    /* for_each visits every cached node once, intact (on_evict checks), the evictable ones
     * first, then those a table holds (here a's four, matched), and changes nothing */
    T_CHECK(kv_prefix_match(px, &t, a, 4) == 4);
    evict_log seen = {0};
    kv_prefix_for_each(px, on_evict, &seen);
    T_EQ_INT(seen.n, 6);
    for (int i = 0; i < seen.n; i++)
        for (int j = i + 1; j < seen.n; j++)
            T_CHECK(seen.keys[i] != seen.keys[j]);
    uint64_t ka0 = kv_block_key(7, a, BS), ka3 = ka0;
    for (int j = 1; j < 4; j++)
        ka3 = kv_block_key(ka3, a + j * BS, BS);
    int pos0 = -1, pos3 = -1;
    for (int i = 0; i < seen.n; i++) {
        pos0 = seen.keys[i] == ka0 ? i : pos0;
        pos3 = seen.keys[i] == ka3 ? i : pos3;
    }
    T_CHECKF(pos0 >= 2 && pos3 >= 2, "held blocks visited at %d and %d, before the evictable", pos0,
             pos3);
    kv_prefix_stats_get(px, &st);
    T_CHECK(st.cached == 6 && st.evictable == 2 && log.n == 0);
    kv_prefix_release(px, &t);

    /* a private copy of a's prefix adopts the cached nodes when sealed: its blocks are freed */
    for (int b2 = 0; b2 < 2; b2++)
        fill_block(p, kv_prefix_alloc(px, &t), a + b2 * BS);
    int64_t free0 = kv_pool_n_free(p);
    kv_prefix_seal(px, &t, a, 2);
    T_CHECK(t.ids[0] == a_ids[0] && t.ids[1] == a_ids[1]);
    T_CHECK(kv_pool_n_free(p) == free0 + 2);
    kv_prefix_release(px, &t);

    /* copy-on-write: the copy holds the same bytes, the table's sealed prefix ends before it */
    T_CHECK(kv_prefix_match(px, &t, a, 4) == 4);
    T_OK(kv_prefix_copy_block(px, &t, 3));
    T_CHECK(t.ids[3] != a_ids[3] && same_block(p, t.ids[3], a_ids[3]) && t.n_sealed == 3);
    kv_prefix_release(px, &t);

    /* eviction: a table wanting the whole pool evicts every cached block, leaves first (a's
     * last block before its third, before the shared second...) and each is offered intact */
    int32_t c[8 * BS];
    for (int i = 0; i < 8 * BS; i++)
        c[i] = 500 + i;
    compute(p, px, &t, c, 8);
    kv_prefix_stats_get(px, &st);
    T_CHECK(st.evictions == 6 && log.n == 6);
    int pos_a3 = -1, pos_a2 = -1, pos_a1 = -1, pos_a0 = -1;
    uint64_t k0 = kv_block_key(7, a, BS), k1 = kv_block_key(k0, a + BS, BS);
    uint64_t k2 = kv_block_key(k1, a + 2 * BS, BS), k3 = kv_block_key(k2, a + 3 * BS, BS);
    for (int i = 0; i < log.n; i++) {
        pos_a0 = log.keys[i] == k0 ? i : pos_a0;
        pos_a1 = log.keys[i] == k1 ? i : pos_a1;
        pos_a2 = log.keys[i] == k2 ? i : pos_a2;
        pos_a3 = log.keys[i] == k3 ? i : pos_a3;
    }
    T_CHECKF(pos_a3 >= 0 && pos_a3 < pos_a2 && pos_a2 < pos_a1 && pos_a1 < pos_a0,
             "eviction order %d %d %d %d", pos_a3, pos_a2, pos_a1, pos_a0);
    T_CHECK(kv_prefix_n_available(px) == 0);
    /* nothing left to evict: allocation fails cleanly */
    kv_table v;
    T_OK(kv_table_init(&v, 2));
    T_CHECK(kv_prefix_alloc(px, &v) == -1 && v.n == 0);
    kv_prefix_release(px, &t);

    /* a bit flipped in a cached block's memory: caught before reuse, dropped with its subtree */
    kv_prefix_stats_get(px, &st);
    int64_t cached0 = st.cached;
    T_CHECK(kv_prefix_match(px, &t, c, 8) == 8);
    int32_t third = t.ids[2];
    kv_prefix_release(px, &t);
    blk_v(p, 1, third)[5] ^= 0x20;
    T_CHECK(kv_prefix_match(px, &t, c, 8) == 2);
    kv_prefix_stats_get(px, &st);
    T_CHECK(st.checksum_failures == 1 && st.cached == cached0 - 6);
    kv_prefix_release(px, &t);

    /* with verify off the same flip goes unnoticed (what kv-verify=0 trades away) */
    kv_prefix_destroy(px);
    o.verify = false;
    T_OK(kv_prefix_create(p, &o, &px));
    compute(p, px, &t, a, 2);
    int32_t first = t.ids[0];
    kv_prefix_release(px, &t);
    blk_k(p, 0, first)[0] ^= 1;
    T_CHECK(kv_prefix_match(px, &t, a, 2) == 2);
    kv_prefix_release(px, &t);
    kv_prefix_destroy(px);
    T_CHECK(kv_pool_n_free(p) == 8); /* every reference given back */

    /* disabled: a plain block manager */
    o.enabled = false;
    T_OK(kv_prefix_create(p, &o, &px));
    compute(p, px, &t, a, 2);
    kv_prefix_release(px, &t);
    T_CHECK(kv_prefix_match(px, &t, a, 2) == 0 && kv_pool_n_free(p) == 8);
    kv_prefix_destroy(px);
    kv_table_deinit(&t);
    kv_table_deinit(&u);
    kv_table_deinit(&v);
    kv_pool_destroy(p);
}

/* ---- the engine ---- */

enum { NR = 24, MAXP = 160, MAXG = 12 };

typedef struct run_out {
    int32_t toks[MAXG];
    int n;
    int32_t cached;
    engine_finish fin;
} run_out;

static void on_event(void *ud, const engine_event *ev) {
    run_out *o = ud;
    if (ev->token >= 0 && o->n < MAXG)
        o->toks[o->n++] = ev->token;
    o->cached = ev->n_cached;
    if (ev->finish != ENGINE_FINISH_NONE)
        o->fin = ev->finish;
}

typedef struct workload {
    int32_t p[NR][MAXP];
    int32_t len[NR];
} workload;

static engine *mk_engine_disk(model *m, bool cache, int max_batch, int chunk, int64_t blocks,
                              int threads, const char *disk_dir) {
    engine_opts o = {.max_batch = max_batch,
                     .chunk = chunk,
                     .kv_blocks = blocks,
                     .block_size = 16,
                     .threads = threads,
                     .attn_chunk = 64,
                     .prefix_cache = cache,
                     .kv_verify = true,
                     .kv_disk_dir = disk_dir,
                     .kv_disk_bytes = disk_dir ? 64 << 20 : 0};
    engine *e;
    T_OK(engine_create(m, NULL, &o, &e));
    return e;
}

static engine *mk_engine(model *m, bool cache, int max_batch, int chunk, int64_t blocks,
                         int threads) {
    return mk_engine_disk(m, cache, max_batch, chunk, blocks, threads, NULL);
}

/* Request i of w with seed (seed 0: i * 7 + 1) in share group group (0: none). */
static void submit_in(engine *e, const workload *w, int i, uint64_t seed, uint64_t group,
                      run_out *o) {
    memset(o, 0, sizeof *o);
    sample_params sp = sample_params_default();
    sp.seed = seed ? seed : (uint64_t)i * 7 + 1;
    if (i % 3 == 0 && !seed)
        sp.temperature = 0;
    engine_req r = {.id = (uint64_t)i + 1,
                    .prompt = w->p[i],
                    .n_prompt = w->len[i],
                    .sp = sp,
                    .max_tokens = MAXG,
                    .ignore_eog = true,
                    .cb = on_event,
                    .ud = o,
                    .share_group = group};
    T_OK(engine_submit(e, &r));
}

static void submit(engine *e, const workload *w, int i, run_out *o) {
    submit_in(e, w, i, 0, 0, o);
}

/* Runs requests [from, to) one at a time. */
static void run_alone(engine *e, const workload *w, int from, int to, run_out *out) {
    for (int i = from; i < to; i++) {
        submit(e, w, i, &out[i]);
        while (engine_busy(e))
            T_OK(engine_step(e));
    }
}

static void run_all(engine *e, const workload *w, run_out *out) {
    for (int i = 0; i < NR; i++)
        submit(e, w, i, &out[i]);
    while (engine_busy(e))
        T_OK(engine_step(e));
}

static void expect_same(const run_out *ref, const run_out *got, const char *what) {
    for (int i = 0; i < NR; i++)
        T_CHECKF(got[i].fin == ENGINE_FINISH_LENGTH && got[i].n == ref[i].n &&
                     memcmp(got[i].toks, ref[i].toks, sizeof ref[i].toks) == 0,
                 "%s: request %d differs from the reference", what, i);
}

static void engine_p1(const char *arch) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-prefix-%s.gguf", test_tmpdir(), arch);
    synth_opts so = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 23, .arch = arch};
    T_OK(synth_write(&so, path));
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    model *m;
    T_OK(model_load(path, isa, &m));
    int32_t nv = (int32_t)model_get_hparams(m)->n_vocab;
    /* requests 0..11: one of three system prompts (20, 37 and 48 tokens: one exactly 3 blocks)
     * and a user turn (three of them end on a block boundary); 12..23: request i-12's prompt, its
     * reference answer and a second user turn (a multi-turn history) */
    static workload w;
    static run_out ref[NR], out[NR], out2[NR];
    uint32_t st = 99;
    int32_t sys[3][48];
    const int sys_len[3] = {20, 37, 48};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < sys_len[k]; j++)
            sys[k][j] = (int32_t)((st = st * 1103515245u + 12345u) >> 8) % nv;
    for (int i = 0; i < 12; i++) {
        int k = i % 3, u = 5 + i * 2;
        if (i % 4 == 1) /* a block-aligned prompt: warm, its last block is copied, not written */
            u = 32 - sys_len[k] % 16;
        memcpy(w.p[i], sys[k], (size_t)sys_len[k] * sizeof(int32_t));
        for (int j = 0; j < u; j++)
            w.p[i][sys_len[k] + j] = (int32_t)((st = st * 1103515245u + 12345u) >> 8) % nv;
        w.len[i] = sys_len[k] + u;
    }
    engine *e = mk_engine(m, false, 1, 512, 64, 1);
    run_alone(e, &w, 0, 12, ref);
    for (int i = 12; i < NR; i++) {
        const int32_t *prev = w.p[i - 12];
        int n = w.len[i - 12];
        memcpy(w.p[i], prev, (size_t)n * sizeof(int32_t));
        memcpy(w.p[i] + n, ref[i - 12].toks, (size_t)ref[i - 12].n * sizeof(int32_t));
        n += ref[i - 12].n;
        for (int j = 0; j < 7; j++)
            w.p[i][n + j] = (int32_t)((st = st * 1103515245u + 12345u) >> 8) % nv;
        w.len[i] = n + 7;
        T_CHECK(w.len[i] <= MAXP);
    }
    run_alone(e, &w, 12, NR, ref);
    engine_stats es;
    engine_stats_get(e, &es);
    T_CHECK(es.cached_positions == 0 && es.prefix.cached == 0);
    engine_destroy(e);

    /* the cache on, one at a time: cold (the system prompts and histories already hit), then
     * warm (every request finds its whole prompt but the last token cached) */
    e = mk_engine(m, true, 1, 512, 64, 1);
    run_alone(e, &w, 0, NR, out);
    expect_same(ref, out, "cache on, cold, alone");
    int hits_cold = 0;
    for (int i = 0; i < NR; i++)
        hits_cold += out[i].cached > 0;
    T_CHECKF(hits_cold >= 18, "only %d of %d cold requests hit the cache", hits_cold, NR);
    T_CHECK(out[12].cached >= w.len[0] / 16 * 16); /* turn 2 reuses turn 1's prompt */
    run_alone(e, &w, 0, NR, out2);
    expect_same(ref, out2, "cache on, warm, alone");
    for (int i = 0; i < NR; i++)
        T_CHECKF(out2[i].cached >= (w.len[i] - 1) / 16 * 16,
                 "warm request %d: %d of %d positions cached", i, out2[i].cached, w.len[i]);
    engine_destroy(e);

    /* batched and chunked in a pool of 40 blocks (the largest request needs 11): cached blocks
     * are evicted, sequences preempted, and requests wait for the blocks a peer is computing */
    for (int threads = 1; threads <= 2; threads++) {
        e = mk_engine(m, true, 16, 8, 40, threads);
        run_all(e, &w, out);
        expect_same(ref, out, "cache on, batched, small pool");
        run_all(e, &w, out2);
        expect_same(ref, out2, "cache on, batched, small pool, second round");
        engine_stats_get(e, &es);
        T_CHECKF(es.prefix.evictions > 0 && es.prefix.hits > 0 && es.cached_positions > 0,
                 "evictions %lld, hits %lld", (long long)es.prefix.evictions,
                 (long long)es.prefix.hits);
        T_CHECK(es.prefix.checksum_failures == 0);
        engine_destroy(e);
    }
    if (strcmp(arch, "deepseek32") == 0 || strcmp(arch, "deepseek4") == 0) {
        /* evicted blocks go to the disk tier; a second engine on the same directory (the same
         * identity) restores them: latent rows and index keys, or the tokens would differ */
        char dir[600];
        snprintf(dir, sizeof dir, "%s/kv-disk-%s", test_tmpdir(), arch);
        e = mk_engine_disk(m, true, 16, 8, 40, 2, dir);
        run_all(e, &w, out);
        expect_same(ref, out, "disk tier, first engine");
        engine_destroy(e);
        e = mk_engine_disk(m, true, 1, 512, 64, 1, dir);
        run_alone(e, &w, 0, NR, out2);
        expect_same(ref, out2, "disk tier, restored");
        engine_stats_get(e, &es);
        T_CHECKF(es.tiers[KV_TIER_DISK].restored > 0 && es.tiers[KV_TIER_DISK].failures == 0,
                 "disk tier: %lld restored, %lld refused",
                 (long long)es.tiers[KV_TIER_DISK].restored,
                 (long long)es.tiers[KV_TIER_DISK].failures);
        engine_destroy(e);
        /* n > 1: three choices of one prompt (a share group) take its K/V and index keys from
         * one computation, and each equals its request alone */
        run_out alone[3], grp[3];
        e = mk_engine(m, false, 4, 512, 64, 2);
        for (int k = 0; k < 3; k++) {
            submit_in(e, &w, 13, 100 + (uint64_t)k, 0, &alone[k]);
            while (engine_busy(e))
                T_OK(engine_step(e));
        }
        for (int k = 0; k < 3; k++)
            submit_in(e, &w, 13, 100 + (uint64_t)k, 77, &grp[k]);
        while (engine_busy(e))
            T_OK(engine_step(e));
        engine_stats_get(e, &es);
        T_CHECKF(es.shared_positions > 0, "%lld positions shared", (long long)es.shared_positions);
        for (int k = 0; k < 3; k++)
            T_CHECKF(grp[k].n == alone[k].n &&
                         !memcmp(grp[k].toks, alone[k].toks, sizeof grp[k].toks),
                     "choice %d of the share group differs from its request alone", k);
        engine_destroy(e);
    }
    model_destroy(m);
}

static void t_engine(void) {
    engine_p1("llama");
}

static void t_engine_dsa(void) {
    engine_p1("deepseek32");
}

/* ---- disaggregation: the engine's kv_out and kv_in hooks (engine.h) ---- */

enum { DG_N = 6, DG_MAXB = 8 };

typedef struct dg_out {
    int32_t idx[DG_MAXB], id[DG_MAXB];
    int n;
    int ends;
    bool complete;
} dg_out;

static void dg_block(void *ctx, int32_t index, int32_t id) {
    dg_out *o = ctx;
    if (o->n < DG_MAXB) {
        o->idx[o->n] = index;
        o->id[o->n++] = id;
    }
}

static void dg_end(void *ctx, bool complete) {
    dg_out *o = ctx;
    o->ends++;
    o->complete = complete;
}

typedef struct dg_in {
    void *blobs[DG_MAXB];
    int n;
    size_t bytes;
    int polls, dones;
    int32_t restored, refused;
} dg_in;

static int32_t dg_poll(void *ctx, const void *const **blobs, size_t *bytes) {
    dg_in *in = ctx;
    if (in->polls++ == 0)
        return -1; /* still arriving: the request must wait and ask again */
    *blobs = (const void *const *)in->blobs;
    *bytes = in->bytes;
    return in->n;
}

/* A transfer that has not arrived until *ready (then nothing came: the request computes). */
typedef struct dg_late {
    bool ready;
    int polls;
} dg_late;

static int32_t dg_late_poll(void *ctx, const void *const **blobs, size_t *bytes) {
    dg_late *l = ctx;
    l->polls++;
    *blobs = NULL;
    *bytes = 0;
    return l->ready ? 0 : -1;
}

static void dg_late_done(void *ctx, int32_t restored, int32_t refused) {
    (void)ctx;
    (void)restored;
    (void)refused;
}

static void dg_done(void *ctx, int32_t restored, int32_t refused) {
    dg_in *in = ctx;
    in->dones++;
    in->restored = restored;
    in->refused = refused;
}

static void dg_run(engine *e, const int32_t *p, int32_t n, uint64_t seed, run_out *o,
                   engine_kv_in in, engine_kv_out out) {
    memset(o, 0, sizeof *o);
    sample_params sp = sample_params_default();
    sp.seed = seed;
    if (seed % 2)
        sp.temperature = 0;
    engine_req r = {.id = seed, .prompt = p, .n_prompt = n, .sp = sp, .max_tokens = MAXG,
                    .ignore_eog = true, .cb = on_event, .ud = o, .kv_in = in, .kv_out = out};
    T_OK(engine_submit(e, &r));
    while (engine_busy(e))
        T_OK(engine_step(e));
}

/* A prefill engine hands over each full prompt block once, in order, with a reference it gives
 * back (its pool idle again); a decode engine restores them (verified) into its cache and gives
 * the same tokens as an engine that computed everything, with the cached count saying the blocks
 * were used; a corrupted blob is refused there and the rest computed, the tokens still equal. */
static void t_engine_disagg(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-disagg.gguf", test_tmpdir());
    synth_opts so = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 31, .arch = "llama"};
    T_OK(synth_write(&so, path));
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    model *m;
    T_OK(model_load(path, isa, &m));
    int32_t nv = (int32_t)model_get_hparams(m)->n_vocab;
    engine *ref = mk_engine(m, false, 1, 64, 64, 1), *pe = mk_engine(m, true, 2, 16, 64, 1);
    static int32_t p[DG_N][MAXP];
    const int32_t len[DG_N] = {20, 32, 47, 64, 70, 15};
    uint32_t st = 7;
    for (int i = 0; i < DG_N; i++)
        for (int j = 0; j < len[i]; j++)
            p[i][j] = (int32_t)((st = st * 1103515245u + 12345u) >> 8) % nv;
    const kv_pool *pp = engine_kv_pool(pe);
    size_t nb = kv_block_blob_bytes(pp);
    for (int corrupt = 0; corrupt < 2; corrupt++) {
        engine *de = mk_engine(m, true, 2, 16, 64, 1);
        T_CHECK(engine_kv_identity(de) == engine_kv_identity(pe));
        for (int i = 0; i < DG_N; i++) {
            run_out want, got, pre;
            dg_run(ref, p[i], len[i], (uint64_t)i + 1, &want, (engine_kv_in){0},
                   (engine_kv_out){0});
            dg_out o = {0};
            dg_run(pe, p[i], len[i], (uint64_t)i + 1, &pre,
                   (engine_kv_in){0}, (engine_kv_out){.block = dg_block, .end = dg_end, .ctx = &o});
            int full = len[i] / 16;
            T_CHECKF(o.n == full && o.ends == 1 && o.complete, "request %d: %d of %d blocks, %d ends",
                     i, o.n, full, o.ends);
            dg_in in = {.n = o.n, .bytes = nb};
            uint64_t key = engine_kv_identity(pe);
            for (int b = 0; b < o.n; b++) {
                T_CHECK(o.idx[b] == b);
                uint64_t parent = key;
                key = kv_block_key(parent, p[i] + b * 16, 16);
                kv_block_meta bm = {.identity = engine_kv_identity(pe), .parent = parent,
                                    .key = key, .checksum = kv_block_checksum(pp, o.id[b], key),
                                    .toks = p[i] + b * 16};
                in.blobs[b] = malloc(nb);
                kv_block_encode(pp, o.id[b], &bm, in.blobs[b]);
                engine_kv_unref(pe, o.id[b]);
            }
            if (corrupt && o.n > 1)
                ((unsigned char *)in.blobs[1])[nb - 5] ^= 0x20;
            dg_run(de, p[i], len[i], (uint64_t)i + 1, &got,
                   (engine_kv_in){.poll = dg_poll, .done = dg_done, .ctx = &in}, (engine_kv_out){0});
            T_CHECKF(got.n == want.n && !memcmp(got.toks, want.toks, sizeof want.toks) &&
                         pre.n == want.n && !memcmp(pre.toks, want.toks, sizeof want.toks),
                     "request %d (corrupt %d): tokens differ from the monolithic engine's", i,
                     corrupt);
            int32_t want_restored = corrupt && o.n > 1 ? 1 : o.n;
            T_CHECKF(in.dones == 1 && in.polls >= 2 && in.restored == want_restored &&
                         in.refused == (corrupt && o.n > 1),
                     "request %d: done %d, polls %d, restored %d, refused %d", i, in.dones,
                     in.polls, in.restored, in.refused);
            int32_t cached = want_restored * 16 < len[i] ? want_restored * 16 : len[i] - 1;
            T_CHECKF(got.cached == cached, "request %d: %d cached positions, %d expected", i,
                     got.cached, cached);
            for (int b = 0; b < o.n; b++)
                free(in.blobs[b]);
            engine_stats es;
            engine_stats_get(pe, &es);
            T_CHECKF(es.kv_used == 0, "prefill engine: %lld blocks still held", (long long)es.kv_used);
        }
        engine_stats es;
        engine_stats_get(de, &es);
        T_CHECK(es.kv_used == 0 && es.kv_in_refused == (corrupt ? 4 : 0));
        engine_destroy(de);
    }
    /* no head-of-line wait: a request whose KV has not arrived holds nothing, and the request
     * submitted after it runs to its end meanwhile; then its transfer gives up (nothing came)
     * and it computes its prompt, the tokens the monolithic engine's */
    engine *de = mk_engine(m, true, 2, 16, 64, 1);
    run_out want0, want1, got0 = {0}, got1 = {0};
    dg_run(ref, p[0], len[0], 1, &want0, (engine_kv_in){0}, (engine_kv_out){0});
    dg_run(ref, p[1], len[1], 2, &want1, (engine_kv_in){0}, (engine_kv_out){0});
    dg_late late = {0};
    sample_params sp0 = sample_params_default(), sp1 = sample_params_default();
    sp0.seed = 1;
    sp0.temperature = 0;
    sp1.seed = 2;
    engine_req r0 = {.id = 1, .prompt = p[0], .n_prompt = len[0], .sp = sp0, .max_tokens = MAXG,
                     .ignore_eog = true, .cb = on_event, .ud = &got0,
                     .kv_in = {.poll = dg_late_poll, .done = dg_late_done, .ctx = &late}};
    engine_req r1 = {.id = 2, .prompt = p[1], .n_prompt = len[1], .sp = sp1, .max_tokens = MAXG,
                     .ignore_eog = true, .cb = on_event, .ud = &got1};
    T_OK(engine_submit(de, &r0));
    T_OK(engine_submit(de, &r1));
    for (int i = 0; i < 100000 && got1.fin == ENGINE_FINISH_NONE; i++)
        T_OK(engine_step(de));
    T_CHECKF(got1.fin != ENGINE_FINISH_NONE && got0.n == 0 && late.polls > 0,
             "the request behind a waiting transfer: finish %d; the waiting one: %d tokens, "
             "%d polls",
             (int)got1.fin, got0.n, late.polls);
    late.ready = true;
    while (engine_busy(de))
        T_OK(engine_step(de));
    T_CHECK(got0.n == want0.n && !memcmp(got0.toks, want0.toks, sizeof want0.toks) &&
            got1.n == want1.n && !memcmp(got1.toks, want1.toks, sizeof want1.toks));
    engine_destroy(de);
    /* kv-in-skip 0 (kv_in_fifo): the waiting request keeps its place, so the one behind it does
     * not start while it waits (however many steps); once the transfer gives up, both run, with
     * the same tokens */
    engine_opts fo = {.max_batch = 2, .chunk = 16, .kv_blocks = 64, .block_size = 16,
                      .threads = 1, .attn_chunk = 64, .prefix_cache = true, .kv_verify = true,
                      .kv_in_fifo = true};
    T_OK(engine_create(m, NULL, &fo, &de));
    memset(&got0, 0, sizeof got0);
    memset(&got1, 0, sizeof got1);
    late = (dg_late){0};
    T_OK(engine_submit(de, &r0));
    T_OK(engine_submit(de, &r1));
    for (int i = 0; i < 200; i++)
        T_OK(engine_step(de));
    T_CHECKF(got1.n == 0 && got1.fin == ENGINE_FINISH_NONE && got0.n == 0 && late.polls > 0,
             "kv-in-skip 0: the request behind a waiting transfer has %d tokens (finish %d), "
             "%d polls",
             got1.n, (int)got1.fin, late.polls);
    late.ready = true;
    while (engine_busy(de))
        T_OK(engine_step(de));
    T_CHECK(got0.n == want0.n && !memcmp(got0.toks, want0.toks, sizeof want0.toks) &&
            got1.n == want1.n && !memcmp(got1.toks, want1.toks, sizeof want1.toks));
    engine_destroy(de);
    engine_destroy(pe);
    engine_destroy(ref);
    model_destroy(m);
}

/* deepseek4: the compressor state and index keys of its companion buffer, and the compressed
 * entries of its K rows, through the prefix cache, the disk tier and share groups */
static void t_engine_ds4(void) {
    engine_p1("deepseek4");
}

/* Resident pages of this process (from /proc/self/statm), 0 if unreadable. */
static long long resident_pages(void) {
    long long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%lld %lld", &size, &res) != 2)
        res = 0;
    fclose(f);
    return res;
}

/* kv_pool_prefault (flag kv-prefault): the whole storage becomes resident at once and its bytes
 * stay zero. */
static void t_prefault(void) {
    kv_pool_opts o = {
        .n_layer = NL, .kv_dim = 1024, .block_size = 16, .n_blocks = 256, .f16 = true};
    size_t bytes = kv_pool_bytes(&o); /* 32 MiB */
    kv_pool *p;
    T_OK(kv_pool_create(&o, &p));
    long long before = resident_pages();
    if (!before) {
        kv_pool_destroy(p);
        test_skip("/proc/self/statm unreadable");
        return;
    }
    kv_pool_prefault(p);
    long long grew = (resident_pages() - before) * (long long)sysconf(_SC_PAGESIZE);
    T_CHECKF(grew >= (long long)bytes * 9 / 10, "prefault: resident grew by %lld of %zu bytes",
             grew, bytes);
    size_t bb = kv_pool_block_bytes(p);
    bool zero = true;
    for (int32_t b = 0; b < 256; b++)
        for (int64_t l = 0; l < NL; l++)
            for (size_t i = 0; i < bb; i++)
                zero &= blk_k(p, l, b)[i] == 0 && blk_v(p, l, b)[i] == 0;
    T_CHECK(zero);
    kv_pool_destroy(p);
}

/* kv_pool_prefault_blocks (flag kv-prefault-ahead, run by the tiers' I/O thread beside the
 * engine): the range becomes resident and no byte changes, a block written before included; the
 * high-water mark is one past the highest id handed out. */
static void t_prefault_blocks(void) {
    kv_pool_opts o = {
        .n_layer = NL, .kv_dim = 1024, .block_size = 16, .n_blocks = 256, .f16 = true};
    kv_pool *p;
    T_OK(kv_pool_create(&o, &p));
    T_EQ_INT(kv_pool_high_water(p), 0);
    int32_t a = kv_pool_alloc(p), b = kv_pool_alloc(p), c = kv_pool_alloc(p);
    T_CHECK(a == 0 && b == 1 && c == 2);
    T_EQ_INT(kv_pool_high_water(p), 3);
    kv_block_unref(p, c);
    T_EQ_INT(kv_pool_high_water(p), 3);
    size_t bb = kv_pool_block_bytes(p);
    for (int64_t l = 0; l < NL; l++)
        for (size_t i = 0; i < bb; i++) {
            blk_k(p, l, 1)[i] = (unsigned char)(i * 7 + l);
            blk_v(p, l, 1)[i] = (unsigned char)(i * 5 + l + 1);
        }
    if (!kv_pool_prefault_blocks(p, 0, 128)) {
        kv_pool_destroy(p);
        test_skip("no MADV_POPULATE_WRITE");
        return;
    }
    /* every page of blocks [0, 128) of K and V in every layer is resident (mincore; a block's
     * rows of one layer are whole pages in either layout) */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = bb / pg, missing = 0;
    unsigned char *vec = malloc(np);
    T_CHECK(vec && bb % pg == 0);
    for (int32_t id = 0; id < 128; id++)
        for (int64_t l = 0; l < NL; l++)
            for (int kv = 0; kv < 2; kv++) {
                void *base = kv ? blk_v(p, l, id) : blk_k(p, l, id);
                T_CHECK(((uintptr_t)base & (pg - 1)) == 0);
                T_OK(mincore(base, bb, vec));
                for (size_t i = 0; i < np; i++)
                    missing += !(vec[i] & 1);
            }
    T_CHECKF(missing == 0, "%zu pages of blocks [0, 128) not resident", missing);
    free(vec);
    bool same = true, zero = true;
    for (int32_t id = 0; id < 128; id++)
        for (int64_t l = 0; l < NL; l++)
            for (size_t i = 0; i < bb; i++) {
                unsigned char k = blk_k(p, l, id)[i], v = blk_v(p, l, id)[i];
                if (id == 1)
                    same &= k == (unsigned char)(i * 7 + l) && v == (unsigned char)(i * 5 + l + 1);
                else
                    zero &= k == 0 && v == 0;
            }
    T_CHECKF(same, "prefault changed a written block");
    T_CHECKF(zero, "prefault wrote into the pool");
    T_CHECK(kv_pool_prefault_blocks(p, 200, 1000)); /* clamped to the pool */
    kv_pool_destroy(p);
}

/* A pool of layout bm ("0" or "1", flag kv-pool-block-major) with K, V or a companion. */
static kv_pool *mk_pool_layout(const char *bm, bool ik) {
    char keep[4];
    snprintf(keep, sizeof keep, "%s", flags_str(FLAG_KV_POOL_BLOCK_MAJOR));
    T_OK(flags_set("kv-pool-block-major", bm));
    kv_pool_opts o = {.n_layer = NL,
                      .kv_dim = KVD,
                      .block_size = BS,
                      .n_blocks = 6,
                      .f16 = true,
                      .k_only = ik,
                      .ik_row_bytes = ik ? 12 : 0,
                      .ik_name = ik ? "ik-f16" : NULL};
    kv_pool *p;
    T_OK(kv_pool_create(&o, &p));
    T_OK(flags_set("kv-pool-block-major", keep));
    return p;
}

/* The two layouts (kv-pool-block-major) hold the same blocks: the strides are what kv_pool.h
 * says, a block written through them in one layout saves, copies, encodes and checksums exactly
 * as in the other, a blob of either restores into either, and a block-major block is one segment
 * laid out as kv_block_save writes it. */
static void t_layouts(void) {
    for (int ik = 0; ik < 2; ik++) {
        kv_pool *bm = mk_pool_layout("1", ik), *lm = mk_pool_layout("0", ik);
        T_CHECK(kv_pool_block_major(bm) && !kv_pool_block_major(lm));
        size_t state = kv_block_state_bytes(bm);
        T_EQ_INT(state, kv_block_state_bytes(lm));
        T_EQ_INT(kv_pool_kv_stride(bm), state);
        T_EQ_INT(kv_pool_kv_stride(lm), kv_pool_block_bytes(lm));
        T_EQ_INT(kv_pool_ik_stride(bm), ik ? state : 0);
        T_EQ_INT(kv_pool_ik_stride(lm), kv_pool_ik_block_bytes(lm));
        int32_t toks[BS] = {9, 8, 7, 6};
        uint64_t key = kv_block_key(5, toks, BS);
        /* blocks 0 and 3 (not the first: a stride mistaken for the block's bytes shows) */
        int32_t a = -1, b = -1;
        for (int i = 0; i < 4; i++) {
            a = kv_pool_alloc(bm);
            b = kv_pool_alloc(lm);
        }
        if (ik) {
            fill_ik_block(bm, a, 3);
            fill_ik_block(lm, b, 3);
        } else {
            fill_block(bm, a, toks);
            fill_block(lm, b, toks);
        }
        unsigned char *sa = malloc(state), *sb = malloc(state);
        T_CHECK(sa && sb);
        kv_block_save(bm, a, sa);
        kv_block_save(lm, b, sb);
        T_CHECK(memcmp(sa, sb, state) == 0);
        T_CHECK(kv_block_checksum(bm, a, key) == kv_block_checksum(lm, b, key));
        T_CHECK(memcmp(kv_pool_block_payload(bm, a), sa, state) == 0);
        T_CHECK(kv_pool_block_payload(lm, b) == NULL);
        struct iovec seg[2 * NL * KV_POOL_MAX_BUFFERS];
        T_EQ_INT(kv_block_segments(bm, a, seg, 2 * NL * KV_POOL_MAX_BUFFERS), 1);
        T_CHECK(seg[0].iov_base == kv_pool_block_payload(bm, a) && seg[0].iov_len == state);
        T_EQ_INT(kv_block_segments(lm, b, seg, 2 * NL * KV_POOL_MAX_BUFFERS),
                 NL * kv_pool_n_buffers(lm));
        /* a blob of either restores into the other; a copy-on-write copy is the same block */
        kv_block_meta m = {.identity = 5, .parent = 5, .key = key, .toks = toks};
        m.checksum = kv_block_checksum(bm, a, key);
        size_t nb = kv_block_blob_bytes(bm);
        unsigned char *blob = malloc(nb), *blob2 = malloc(nb);
        T_CHECK(blob && blob2 && nb == kv_block_blob_bytes(lm));
        kv_block_encode(bm, a, &m, blob);
        kv_block_encode(lm, b, &m, blob2);
        T_CHECK(memcmp(blob, blob2, nb) == 0);
        int32_t a2 = kv_pool_alloc(bm), b2 = kv_pool_alloc(lm), a3 = kv_pool_alloc(bm);
        T_OK(kv_block_decode(bm, a2, &m, blob2, nb, NULL));
        T_OK(kv_block_decode(lm, b2, &m, blob, nb, NULL));
        kv_block_copy(bm, a3, a);
        kv_block_save(bm, a2, sb);
        T_CHECK(memcmp(sa, sb, state) == 0);
        kv_block_save(lm, b2, sb);
        T_CHECK(memcmp(sa, sb, state) == 0);
        kv_block_save(bm, a3, sb);
        T_CHECK(memcmp(sa, sb, state) == 0);
        /* kv_block_load writes where the forward pass reads */
        kv_block_load(bm, a2, blob + kv_block_head_bytes(bm), true, true);
        T_CHECK(ik ? same_ik(bm, a, a2) : same_block(bm, a, a2));
        free(blob);
        free(blob2);
        free(sa);
        free(sb);
        kv_pool_destroy(bm);
        kv_pool_destroy(lm);
    }
}

int main(void) {
    test_run("kv_block.codec", t_codec);
    test_run("kv_pool.layouts", t_layouts);
    test_run("kv_pool.prefault", t_prefault);
    test_run("kv_pool.prefault_blocks", t_prefault_blocks);
    test_run("kv_prefix.tree", t_prefix);
    test_run("kv_block.companion", t_companion);
    test_run("kv_prefix.engine_p1", t_engine);
    test_run("kv_prefix.engine_p1_deepseek32", t_engine_dsa);
    test_run("kv_prefix.engine_disagg", t_engine_disagg);
    test_run("kv_prefix.engine_p1_deepseek4", t_engine_ds4);
    return test_summary();
}
