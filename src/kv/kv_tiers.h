/* SPDX-License-Identifier: MIT */
/*
 * kv_tiers: the asynchronous manager of the KV tiers below the pool: L2 (local disk) and L3
 * (Redis), each optional (kv_tier.h has the backends). The engine thread queues puts, fetches
 * and drops and polls for fetched blobs; one I/O thread owned by the manager runs the backends.
 * The engine never waits for I/O: every call here only takes the manager's mutex for a few
 * list and map operations.
 *
 * Order: operations run on the I/O thread in the order they were queued, so a fetch queued after
 * a put of the same key (on the same manager) sees that put. Fetches queued one after another
 * run together, at most kv-tier-batch of them (flags.h): a backend with get_many answers them in
 * one call (Redis: one pipelined round trip; disk: every file read ahead), and each one's load
 * time is the call's time shared by its keys. Puts and drops run one at a time.
 *
 * Blobs: every blob that crosses the manager, in a put or out of a poll, is a buffer of
 * kv_blobs_alloc (kv_blobs.h): the manager keeps a free list of them (flag kv-blob-cache), so the
 * engine encodes a block it seals or evicts into a recycled buffer (kv_tiers_blob_alloc), the I/O
 * thread gives it back after the put, receives fetched blobs into recycled buffers, and the
 * engine gives those back after decoding them (kv_tiers_blob_free).
 *
 * A fetch looks in L2, then in L3 on a miss; the first hit is held ("staged") until the engine
 * polls it. An L3 hit is not copied into L2 by the manager: the engine puts to L2 what it wants
 * there. A tier that fails (I/O error, lost connection) counts an error and the fetch goes on as
 * if that tier missed: errors degrade to misses, never reach the caller.
 *
 * Bounds: queued puts hold at most queue_max_bytes of blobs (a put beyond it is dropped and
 * counted, never waited for); staged blobs at most staging_max_bytes (beyond it the oldest is
 * freed and its fetch reports a miss).
 */
#ifndef VERITY_KV_KV_TIERS_H
#define VERITY_KV_KV_TIERS_H

#include "kv/kv_tier.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KV_TIER_DISK = 0, KV_TIER_REDIS = 1, KV_TIER_COUNT = 2 };

/* kv_tiers_poll's results. */
enum { KV_FETCH_NONE = 0, KV_FETCH_PENDING = 1, KV_FETCH_READY = 2, KV_FETCH_MISS = 3 };

typedef struct kv_tiers kv_tiers;

typedef struct kv_tiers_opts {
    const char *disk_dir;      /* NULL or "" = no disk tier */
    int64_t disk_max_bytes;    /* bound on the disk tier's files (LRU eviction); must be > 0 */
    const char *redis_url;     /* NULL or "" = no Redis tier; redis://HOST[:PORT][/DB], unix:///p */
    uint64_t identity;         /* model + settings identity: namespaces the keys of both tiers */
    int64_t staging_max_bytes; /* bound on fetched blobs held for the engine; 0 = 256 MiB */
    int64_t queue_max_bytes;   /* bound on blobs in queued puts; 0 = 256 MiB */
} kv_tiers_opts;

/* Load-time histogram: the upper bounds (seconds) of its buckets, ascending; counts[i] counts
 * loads in (bounds[i-1], bounds[i]], counts[KV_TIER_LOAD_BUCKETS] the ones above the last bound
 * (so the counts are not cumulative; a Prometheus printer sums them). */
#define KV_TIER_LOAD_BUCKETS 9
extern const double kv_tier_load_bounds_s[KV_TIER_LOAD_BUCKETS];

typedef struct kv_tier_stats {
    int64_t puts;         /* puts stored */
    int64_t put_bytes;    /* their bytes */
    int64_t puts_dropped; /* puts dropped: the queue was over its bound, or no such tier */
    int64_t hits;         /* fetches this tier answered */
    int64_t misses;       /* fetches it did not have */
    int64_t errors;    /* failed operations (put, get, drop): a failed get counts as a miss too */
    int64_t hit_bytes; /* bytes of the hits */
    int64_t staged_dropped; /* hits freed unpolled to keep staging within its bound */
    int64_t drops;          /* blobs dropped on the engine's request */
    int64_t blocks;         /* blobs stored now (0 where the tier cannot tell: Redis) */
    int64_t bytes;          /* their bytes now */
    int64_t evictions;      /* blobs the tier evicted to stay within its bound */
    int64_t load_counts[KV_TIER_LOAD_BUCKETS + 1]; /* time of the gets that hit, by bucket */
    double load_sum_s;                             /* their total time */
    int64_t load_count;                            /* their number (== hits) */
} kv_tier_stats;

/* Opens the tiers o names and starts the I/O thread. A tier that cannot be opened (a directory
 * that cannot be created or written, an unreachable Redis) is left out with one warning naming it
 * and the reason; create still succeeds (kv_tiers_has says which tiers are there). Returns 0 and
 * *out; ERR_INVAL for malformed options (a Redis URL that does not parse, disk_max_bytes <= 0
 * with a disk_dir, negative bounds: the detail names the option), ERR_NOMEM, ERR_INTERNAL (the
 * thread cannot be started). On error *out is NULL. */
int kv_tiers_create(const kv_tiers_opts *o, kv_tiers **out);

/* Like kv_tiers_create with backends already opened: ops[i]/impl[i] is tier i (ops[i] NULL: no
 * such tier); o's disk and Redis fields are not used. Takes ownership of every impl, also on
 * error (they are destroyed). For tests and other callers that bring their own backends. */
int kv_tiers_create_with(const kv_tiers_opts *o, const kv_tier_ops *const ops[KV_TIER_COUNT],
                         void *const impl[KV_TIER_COUNT], kv_tiers **out);

/* Stops the I/O thread and closes the tiers. Puts and drops already queued are finished first
 * (so blobs handed to L2 before shutdown persist; bounded by queue_max_bytes and, for a dead
 * Redis, by its fail-fast backoff); queued fetches are abandoned; staged blobs are freed. NULL is
 * a no-op. */
void kv_tiers_destroy(kv_tiers *t);

/* True if tier (KV_TIER_DISK, KV_TIER_REDIS) was opened. */
bool kv_tiers_has(const kv_tiers *t, int tier);

/* A buffer for a blob of n bytes (kv_blobs_alloc from t's free list; t may be NULL), to encode a
 * block into before kv_tiers_put. NULL when out of memory. Any thread. */
void *kv_tiers_blob_alloc(kv_tiers *t, size_t n);

/* Gives back blob (n bytes), a buffer of kv_tiers_blob_alloc or of a READY poll, for reuse
 * (t NULL, or a full free list: freed). NULL blob is a no-op. Any thread. */
void kv_tiers_blob_free(kv_tiers *t, void *blob, size_t n);

/* t's free list counters (kv_blobs.h); zeros for NULL. */
void kv_tiers_blob_stats(kv_tiers *t, kv_blobs_stats *out);

/* Queues a put of blob (n bytes, from kv_tiers_blob_alloc(t, n) or kv_blobs_alloc(any, n)) under
 * key in tier; takes ownership of blob in every case. Never waits: without that tier, or with the
 * queue over its bound, the blob is given back and the put counted as dropped. */
void kv_tiers_put(kv_tiers *t, int tier, uint64_t key, void *blob, size_t n);

/* Queues a lookup of key: L2, then L3 on a miss. A no-op while a fetch of key is pending or its
 * result not yet polled. Without any tier the result is a miss at once. */
void kv_tiers_fetch(kv_tiers *t, uint64_t key);

/* kv_tiers_fetch for keys[0, n): one lock and one wake of the I/O thread for all of them, so it
 * takes them as one batch. */
void kv_tiers_fetch_many(kv_tiers *t, const uint64_t *keys, int n);

/* Never waits. Returns KV_FETCH_NONE (never asked, or already polled), KV_FETCH_PENDING,
 * KV_FETCH_READY (hands over the blob: *blob from kv_blobs_alloc, which the caller gives back
 * with kv_tiers_blob_free or frees with free(), *n its size, *tier where it came from),
 * KV_FETCH_MISS (no tier had it, a tier failed, or the staged blob was dropped for the staging
 * bound). READY and MISS are reported once; the next poll says NONE. blob, n and tier are written
 * only on READY (*blob NULL otherwise); tier may be NULL. */
int kv_tiers_poll(kv_tiers *t, uint64_t key, void **blob, size_t *n, int *tier);

/* One key's answer in kv_tiers_poll_many: state as kv_tiers_poll returns it; blob, n and tier
 * set on KV_FETCH_READY only (blob NULL otherwise), the blob then the caller's. */
typedef struct kv_tiers_polled {
    int state;
    void *blob;
    size_t n;
    int tier;
} kv_tiers_polled;

/* kv_tiers_poll for keys[0, n) under one lock: out[i] is key i's answer. Never waits. */
void kv_tiers_poll_many(kv_tiers *t, const uint64_t *keys, int n, kv_tiers_polled *out);

/* Sets a function the I/O thread calls after it published the results of a batch of fetches
 * (fn NULL: none). It is called with the manager's mutex held: it must be quick and must not call
 * back into t (signal a condition variable). Once this returns, the previous function is not
 * running and will not be called again, so its ud may be freed. Any thread. */
void kv_tiers_set_notify(kv_tiers *t, void (*fn)(void *ud), void *ud);

/* Sets a function the I/O thread runs, without the manager's lock, while no operation is queued
 * (fn NULL: none): one short step of background work per call (queued operations wait for it),
 * returning true while it has more to do; once it returns false it runs again only after an
 * operation was queued. Call it before anything fn uses can go away only with fn NULL or at
 * kv_tiers_destroy (which joins the thread: fn is not running after it). Any thread. */
void kv_tiers_set_idle(kv_tiers *t, bool (*fn)(void *ud), void *ud);

/* Queues a drop: the engine found the blob from tier corrupt, and the tier forgets key. */
void kv_tiers_drop(kv_tiers *t, int tier, uint64_t key);

/* Copies tier's counters to *out (all zero for a tier not opened or out of range). */
void kv_tiers_stats_get(const kv_tiers *t, int tier, kv_tier_stats *out);

/* The metrics label of tier: "disk", "redis"; "?" for a value out of range. */
const char *kv_tiers_tier_name(int tier);

#endif
