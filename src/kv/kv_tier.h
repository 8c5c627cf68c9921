/* SPDX-License-Identifier: MIT */
/*
 * kv_tier: the storage tiers below the in-memory KV pool (L1): L2 on local disk, L3 in Redis.
 * A tier stores opaque byte strings ("blobs", made and verified by the block codec, kv_block.c)
 * under 64-bit keys. It never looks inside a blob: a torn or corrupted one is caught by the
 * codec's checksum, and the engine then asks the tier to forget it (drop).
 *
 * This header is the backend interface: one table of function pointers per kind of tier, and the
 * functions that open each backend. The asynchronous manager that runs the backends on its one
 * I/O thread is kv_tiers.h; the engine uses that, never a backend directly.
 *
 * Threading: a backend has no locking. Every call on one backend instance (put, get, drop, usage,
 * destroy) must come from one thread at a time: in the server that is the manager's I/O thread
 * (the instance is opened before the thread starts and destroyed after it is joined); a test may
 * drive a backend from its own thread.
 */
#ifndef VERITY_KV_KV_TIER_H
#define VERITY_KV_KV_TIER_H

#include "kv/kv_blobs.h"

#include <stddef.h>
#include <stdint.h>

/* What a backend holds now, for the metrics. */
typedef struct kv_tier_usage {
    int64_t blocks;    /* blobs stored now */
    int64_t bytes;     /* their total size */
    int64_t evictions; /* blobs evicted to stay within the tier's bound, since open */
} kv_tier_usage;

/* One key's answer in a batched lookup (get_many): as get's out-parameters and return code. */
typedef struct kv_tier_got {
    void *data; /* rc 0: the blob, from kv_blobs_alloc(pool, n); NULL otherwise */
    size_t n;
    int rc; /* 0, ERR_NOTFOUND, or another negative code */
} kv_tier_got;

typedef struct kv_tier_ops {
    const char *name; /* "disk", "redis": also the metrics label */
    /* Stores n bytes under key, replacing any value; data stays the caller's. Returns 0 or a
     * negative error code (the detail names the tier and the key). */
    int (*put)(void *impl, uint64_t key, const void *data, size_t n);
    /* On a hit returns 0 with a copy in *data, from kv_blobs_alloc(pool, *n) (pool may be NULL;
     * the caller gives it back with kv_blobs_free or frees it; never NULL, also for n == 0) and
     * its size in *n; ERR_NOTFOUND on a miss; another negative code on failure (then *data is
     * NULL). */
    int (*get)(void *impl, uint64_t key, kv_blobs *pool, void **data, size_t *n);
    /* Optional (NULL: the manager calls get once per key). Looks up keys[0, n) together and
     * fills got[i] with what get(keys[i]) would answer, each with its own code, so that a tier
     * can overlap them: Redis pipelines the n GETs in one round trip, the disk tier hints the
     * kernel to read every file ahead before reading the first. On a failure detail (err_set)
     * names the first key that failed. */
    void (*get_many)(void *impl, kv_blobs *pool, const uint64_t *keys, int n, kv_tier_got *got);
    /* Forgets key (a blob that failed verification). 0 (also when key was not there), or a
     * negative code. */
    int (*drop)(void *impl, uint64_t key);
    /* Optional (NULL: the tier cannot tell, e.g. a Redis shared with others and evicting by its
     * own policy; the metrics then show zeros). Fills *u. Never fails. */
    void (*usage)(void *impl, kv_tier_usage *u);
    /* Closes the backend and frees impl. */
    void (*destroy)(void *impl);
} kv_tier_ops;

/* Opens the disk tier (L2) in directory dir: one file per blob, "<16 hex digits of key>.kvb",
 * bounded by max_bytes (least recently used files are evicted beyond it), namespaced by identity
 * through a MANIFEST file in the directory. A missing directory is created (with its parents).
 * A directory whose MANIFEST is missing, unreadable, corrupt or names another identity is not
 * trusted: its *.kvb and *.kvb.tmp files (only those) are deleted, a fresh MANIFEST is written,
 * and one warning says so and why. A trusted directory's blobs are indexed (least recently
 * written or read first, by mtime) and evicted down to max_bytes.
 * On success returns 0 with *ops (static) and *impl (free it with (*ops)->destroy(*impl)).
 * Returns ERR_INVAL (dir NULL or empty, max_bytes <= 0, a path too long), ERR_IO (the directory
 * cannot be created, listed or written: the detail names the path and the system's reason),
 * ERR_NOMEM. */
int kv_tier_disk_open(const char *dir, int64_t max_bytes, uint64_t identity,
                      const kv_tier_ops **ops, void **impl);

/* Opens the Redis tier (L3) at url, "redis://HOST[:PORT][/DB]" (port 6379 and db 0 by default)
 * or "unix:///path/to.sock", and checks it answers (PING, and SELECT for a db other than 0) with
 * a 1 s connect and command timeout. Keys are "verity:kv:<identity, 16 hex>:<key, 16 hex>".
 * After open, a failed command drops the connection and fails (ERR_CONNECT, ERR_IO); a later
 * operation reconnects, at most one attempt per second (until then operations fail at once, so
 * a dead Redis costs nothing per block).
 * On success returns 0 with *ops (static) and *impl. Returns ERR_INVAL (a URL that does not
 * parse: the detail quotes it), ERR_CONNECT (cannot connect, or the server does not answer:
 * the detail names the URL and the reason), ERR_NOMEM. */
int kv_tier_redis_open(const char *url, uint64_t identity, const kv_tier_ops **ops, void **impl);

/* Checks url's form without connecting: 0 or ERR_INVAL (the detail quotes it). */
int kv_tier_redis_url_check(const char *url);

#endif
