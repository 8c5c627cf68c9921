/* SPDX-License-Identifier: MIT */
/*
 * kv_prefix: the radix prefix cache over full KV blocks, and the block manager every sequence's
 * block table goes through (the engine asks, kv/ decides).
 *
 * Tree. A node is a cached full block: its block id, its parent node (the block before it, -1 at
 * the root), its block_size token ids, its key (kv_block.h: the chain hash of every token up to
 * its end, seeded with the identity) and its checksum. Children are found through one hash table
 * keyed by the chain key and compared exactly (parent node and token ids), so a hash collision can
 * never hand out the wrong block. The cache holds one pool reference on every node's block.
 *
 * Life of a block. A sequence's table (kv_table) holds one reference per block. When a block is
 * full and computed, kv_prefix_seal makes it a node (unless the same prefix already has one: then
 * the sequence's copy stays private and is freed with it). When the last sequence lets go of a
 * node (its pool reference count falls to the cache's one), the node becomes evictable and joins
 * the LRU list; a match takes it off again. Tables are released last block first, so a parent
 * always joins the list after its children and the list's head is the least recently used leaf.
 * When the pool needs a block and has none free, the head is evicted (eviction comes before
 * preemption: kv_prefix_n_available counts evictable blocks as available). An evicted node's
 * subtree goes with it (possible only when a sequence's private copy carried the prefix on).
 *
 * Integrity (P2). With verify on, every node's checksum is recomputed before it is handed to a
 * new sequence; a mismatch drops the node and its subtree (never output), counts a failure and
 * logs the block, and the match stops there, so the sequence recomputes from that position.
 *
 * Invariance (P1). A hit gives a sequence exactly the bytes it would have computed (the forward
 * pass is invariant to chunking and batching), so hits, misses and evictions change speed only.
 *
 * Threading: the engine thread only.
 */
#ifndef VERITY_KV_KV_PREFIX_H
#define VERITY_KV_KV_PREFIX_H

#include "kv/kv_pool.h"

#include <stdbool.h>
#include <stdint.h>

/* A sequence's block table: ids[i] holds positions [i*B, (i+1)*B). Caller-owned storage. */
typedef struct kv_table {
    int32_t *ids;
    int32_t n, cap;
    int32_t n_sealed; /* leading blocks whose content has a node (matched or sealed) */
    int32_t tail;     /* the node holding block n_sealed - 1's content, -1 if none */
    uint64_t tail_key;
} kv_table;

/* Allocates room for cap block ids. Returns 0 or ERR_NOMEM. */
int kv_table_init(kv_table *t, int32_t cap);
/* Frees the ids (the blocks must have been released). */
void kv_table_deinit(kv_table *t);

typedef struct kv_prefix kv_prefix;

typedef struct kv_prefix_opts {
    bool enabled;      /* cache full blocks (toggle prefix-cache); off: a plain block manager */
    bool verify;       /* check a node's checksum before reuse (toggle kv-verify) */
    uint64_t identity; /* key of the root (model, KV element type, block size) */
} kv_prefix_opts;

/* Called for a node about to be evicted from the pool (its bytes still intact), so a tier below
 * can keep it: key, parent key, its block_size token ids and its checksum. */
typedef void (*kv_prefix_evict_cb)(void *ud, const kv_pool *p, int32_t id, uint64_t key,
                                   uint64_t parent, const int32_t *toks, uint64_t checksum);

/* Called when a block computed by a sequence becomes a node (not for blocks loaded from a tier):
 * the tier that replicas share can be given a copy. Same arguments as kv_prefix_evict_cb. */
typedef kv_prefix_evict_cb kv_prefix_seal_cb;

/* Creates the cache over pool p (not owned). Returns 0 or ERR_NOMEM. */
int kv_prefix_create(kv_pool *p, const kv_prefix_opts *o, kv_prefix **out);
/* Drops the cache's references (blocks still held by tables stay allocated) and frees it. */
void kv_prefix_destroy(kv_prefix *px);

/* Sets the eviction hook and the hook for newly sealed computed blocks (NULL: none). */
void kv_prefix_set_evict_cb(kv_prefix *px, kv_prefix_evict_cb cb, void *ud);
void kv_prefix_set_seal_cb(kv_prefix *px, kv_prefix_seal_cb cb, void *ud);

/* The identity the cache was created with (the root key). */
uint64_t kv_prefix_identity(const kv_prefix *px);

/* How many leading full blocks of toks (at most max_blocks) the cache holds now. Takes nothing,
 * verifies nothing: for prefetching what lies beyond. 0 when disabled. */
int32_t kv_prefix_peek(kv_prefix *px, const int32_t *toks, int32_t max_blocks);

/* Blocks a table could get now: free ones plus evictable cached ones. */
int64_t kv_prefix_n_available(const kv_prefix *px);

/* Appends one block to t (evicting the least recently used cached leaf if no block is free).
 * Returns the block id, or -1 when none is available (t unchanged). */
int32_t kv_prefix_alloc(kv_prefix *px, kv_table *t);

/* For an empty table: appends the cached blocks of the longest cached prefix of toks, at most
 * max_blocks full blocks, each with a reference taken, and seals them into t. Returns the number
 * of blocks appended (0 when disabled). */
int32_t kv_prefix_match(kv_prefix *px, kv_table *t, const int32_t *toks, int32_t max_blocks);

/* The chain key t's next block (index t->n_sealed) would have with these block_size token ids. */
uint64_t kv_prefix_next_key(const kv_prefix *px, const kv_table *t, const int32_t *block_toks);

/* Seals t's blocks [t->n_sealed, n_full): each holds the computed K/V of its block_size tokens
 * (toks are the sequence's tokens from position 0). A block whose prefix has no node becomes one
 * (checksummed); one that has keeps its node. Requires n_full <= t->n; disabled: no-op. */
void kv_prefix_seal(kv_prefix *px, kv_table *t, const int32_t *toks, int32_t n_full);

/* Records that t's block n_sealed was loaded from a tier with this checksum (already verified)
 * and seals it, exactly as kv_prefix_seal would after computing it. */
void kv_prefix_seal_loaded(kv_prefix *px, kv_table *t, const int32_t *block_toks,
                           uint64_t checksum);

/* Releases t's last block (a block that was allocated but could not be filled). */
void kv_prefix_pop(kv_prefix *px, kv_table *t);

/* Drops one reference taken with kv_block_ref on block id outside any table (a transfer's); a
 * cached block left with only the cache's reference becomes evictable, as kv_prefix_release. */
void kv_prefix_unref(kv_prefix *px, int32_t id);

/* Releases every block of t (last first; cached ones become evictable) and empties it. */
void kv_prefix_release(kv_prefix *px, kv_table *t);

/* Replaces t's block i (shared) with a private copy of it (the copy has one reference). Returns 0
 * or ERR_FULL (no block available; t unchanged). */
int kv_prefix_copy_block(kv_prefix *px, kv_table *t, int32_t i);

/* Calls cb (same arguments as the eviction hook) for every cached node, the evictable ones most
 * recently used first, then the ones tables still hold. Changes nothing: for writing the cache
 * out (at shutdown, to the disk tier). No-op when disabled. */
void kv_prefix_for_each(kv_prefix *px, kv_prefix_evict_cb cb, void *ud);

typedef struct kv_prefix_stats {
    int64_t lookups;           /* blocks looked up by kv_prefix_match */
    int64_t hits;              /* blocks handed out from the cache */
    int64_t cached;            /* nodes now */
    int64_t inserted;          /* nodes created (blocks sealed into the cache) */
    int64_t evictable;         /* nodes held by the cache alone */
    int64_t evictions;         /* nodes evicted for room */
    int64_t checksum_failures; /* nodes whose bytes no longer matched their checksum */
} kv_prefix_stats;

void kv_prefix_stats_get(const kv_prefix *px, kv_prefix_stats *out);

#endif
