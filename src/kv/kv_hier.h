/* SPDX-License-Identifier: MIT */
/*
 * kv_hier: the KV memory hierarchy. L1 is the pool with its prefix cache (kv_prefix.h); below it
 * the optional tiers (kv_tiers.h): L2 on local disk, L3 in Redis shared by replicas. This module
 * decides what moves between them; the engine only asks.
 *
 * Down. A block evicted from L1 is encoded (kv_block.h) and put to L2. A block a sequence has
 * just computed and sealed is put to L3 at once (write-through), so another replica can reuse it
 * while this one still holds it. At shutdown (kv_hier_destroy) every block L1 still caches is put
 * to L2 too (toggle kv-disk-flush), so a restart on the same directory finds the whole cache.
 *
 * Up. A queued request has a kv_fetch: the chain keys of its full known blocks and, for each
 * block past what L1 holds, the state of its lookup in the tiers. kv_hier_prefetch (every step,
 * for requests near the head of the queue) asks the tiers for those blocks and collects what came
 * back, so the I/O overlaps the steps before the request's admission (kv-fetch-group: a
 * request's lookups go to the tiers under one lock with one wake of the I/O thread, and its
 * answers are collected under one; the I/O thread wakes the engine when it answered, see
 * kv_hier_set_notify). With kv-fetch-group the engine restores once every lookup up to the first
 * miss is answered (kv_hier_waiting). While the I/O thread has nothing queued it faults in the
 * pool's pages up to kv-prefault-ahead MiB past the highest block used so far, so a block restored
 * (or computed) into fresh pool memory does not wait on the kernel zeroing it on the engine
 * thread (contents never change: P1 holds). At admission,
 * kv_hier_load restores the collected blobs, in order, into fresh blocks of the request's table:
 * each is decoded and verified (kv_block_decode: identity, name, tokens, every buffer, checksum
 * before and after the write) and sealed into L1. The first miss ends the prefix; a lookup still
 * in flight makes the request wait (the I/O thread always answers: a dead tier is a miss). A blob
 * that fails verification is never used: its tier is told to drop it, the failure is counted per
 * tier, the log names the block, and the request computes from there.
 *
 * Invariance (P1): a restored block holds exactly the bytes the request would have computed, so a
 * load changes speed only.
 *
 * Threading: the engine thread only (kv_tiers has its own I/O thread), except the pre-faulting
 * step, which runs on the I/O thread and touches only its own counter and the pool's immutable
 * layout and atomic high-water mark.
 */
#ifndef VERITY_KV_KV_HIER_H
#define VERITY_KV_KV_HIER_H

#include "kv/kv_pool.h"
#include "kv/kv_prefix.h"
#include "kv/kv_tiers.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kv_hier kv_hier;

typedef struct kv_hier_opts {
    kv_prefix_opts prefix;
    const char *disk_dir; /* L2 directory, NULL or "" for none */
    int64_t disk_max_bytes;
    const char *redis_url; /* L3, NULL or "" for none */
} kv_hier_opts;

/* Creates the hierarchy over pool p (not owned): the prefix cache and, when named, the tiers.
 * Tiers need the prefix cache: with it disabled they are not opened. Returns 0; ERR_INVAL (a
 * malformed Redis URL or disk bound, the detail names it); ERR_NOMEM. A tier that cannot be
 * reached is a warning, not an error (kv_tiers.h). */
int kv_hier_create(kv_pool *p, const kv_hier_opts *o, kv_hier **out);

/* With a disk tier and kv-disk-flush on, first queues a put of every block L1 caches (most
 * recently used first; beyond the tiers' put-queue bound they are dropped and counted), then
 * stops the tiers (which finishes the queued puts) and frees everything. NULL is a no-op. */
void kv_hier_destroy(kv_hier *h);

kv_prefix *kv_hier_prefix(kv_hier *h);

/* True if any tier below L1 is open. */
bool kv_hier_has_tiers(const kv_hier *h);

/* One request's lookups in the tiers. */
typedef struct kv_fetch kv_fetch;

/* For a request of at most cap_blocks blocks. Returns 0 or ERR_NOMEM. */
int kv_fetch_create(int32_t cap_blocks, kv_fetch **out);
/* Frees it and any blob it still holds. NULL is a no-op. */
void kv_fetch_destroy(kv_fetch *f);
/* Forgets every lookup and frees the blobs (after admission; the keys are kept). */
void kv_fetch_reset(kv_fetch *f);

/* Asks the tiers for the blocks of toks (n_full full blocks) that L1 does not hold and collects
 * the answers that arrived. No-op without tiers. */
void kv_hier_prefetch(kv_hier *h, kv_fetch *f, const int32_t *toks, int32_t n_full);

/* True if a block of toks (n_full full blocks) past what L1 holds, before the first one the tiers
 * said they lack, is still being looked up (after collecting the answers that arrived). The
 * caller then waits rather than match and restore: a kv_hier_load now would stop at that block,
 * and the caller would give back and next time take again (and verify again) every block
 * restored so far; so a request restores once, when all its answers are in. False without
 * tiers or with kv-fetch-group 0 (the caller then tries every step, as before). */
bool kv_hier_waiting(kv_hier *h, kv_fetch *f, const int32_t *toks, int32_t n_full);

/* Sets the function the tiers' I/O thread calls when lookups were answered (kv_tiers_set_notify:
 * under the tiers' lock, quick, not calling back). NULL fn: none. No-op without tiers. */
void kv_hier_set_notify(kv_hier *h, void (*fn)(void *ud), void *ud);

/* At admission, after kv_prefix_match filled t with L1's blocks: restores the following blocks
 * from the tiers, at most up to n_full, into new blocks of t (sealed). Returns the number of
 * blocks restored, or -1 when a lookup it needs is still in flight (t then holds what it held;
 * the caller waits and calls again). */
int32_t kv_hier_load(kv_hier *h, kv_fetch *f, kv_table *t, const int32_t *toks, int32_t n_full);

typedef struct kv_hier_tier_stats {
    kv_tier_stats io; /* the tier's own counters (kv_tiers.h) */
    int64_t restored; /* blocks restored from it into L1 */
    int64_t failures; /* blobs from it refused (checksum, format, another block) */
    double reload_s;  /* wall time of reloads, from a request's first lookup to its blocks in
                       * L1 (waits, I/O, decoding, verifying), shared among tiers by blocks */
    bool open;
} kv_hier_tier_stats;

void kv_hier_stats_get(const kv_hier *h, kv_hier_tier_stats out[KV_TIER_COUNT]);

#endif
