/* SPDX-License-Identifier: MIT */
/*
 * pool: a fixed set of compute threads that run one function together (fork-join), with a
 * barrier for phases inside it. The forward pass is one pool_run whose phases (matmuls, attention,
 * norms) are separated by pool_barrier, so a decode step costs a handful of barrier crossings and
 * no thread creation or allocation.
 *
 * Work division is the caller's: fn(ctx, ith, nth) decides what thread ith of nth computes. verity's
 * kernels divide work so that every output element is computed by exactly the same operations
 * whichever thread gets it, which is why thread count never changes results (P1).
 *
 * Waiting: threads spin (with pause) for a short while, then sleep on a futex, so a loaded or
 * oversubscribed machine does not livelock and an idle pool uses no CPU. The spinning is the
 * `pool-spin` toggle.
 *
 * Threading: pool_run may be called by one thread at a time (the owner); pool_barrier only from
 * inside fn, by all nth threads.
 */
#ifndef VERITY_BASE_POOL_H
#define VERITY_BASE_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *ctx, int ith, int nth);

/* Creates a pool of n_threads compute threads including the caller (so n_threads - 1 are
 * started). n_threads must be >= 1. Returns 0, ERR_INVAL, or ERR_NOMEM / ERR_INTERNAL if a thread
 * could not be created. */
int pool_create(int n_threads, pool **out);

/* Stops and joins the threads and frees the pool. NULL is a no-op. Must not be called from fn. */
void pool_destroy(pool *p);

/* Number of threads, including the caller. */
int pool_size(const pool *p);

/* Runs fn(ctx, ith, nth) on every thread (the caller is ith 0) and returns when all have
 * returned. Memory written by any thread in fn is visible to the caller afterwards. */
void pool_run(pool *p, pool_fn fn, void *ctx);

/* Waits until all nth threads of the current pool_run have reached it. Writes before the barrier
 * are visible to all threads after it. */
void pool_barrier(pool *p);

#endif
