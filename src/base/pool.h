/* SPDX-License-Identifier: MIT */
/*
 * pool: a fixed set of compute threads, driven two ways.
 *
 *   pool_for  - the owner hands out the chunks 0..n-1 of one phase; every thread (the owner too)
 *               claims chunks from a shared counter until none are left, and pool_for returns
 *               when all are finished. Nobody waits for a thread that has not claimed anything,
 *               so a worker the OS has descheduled (a loaded or oversubscribed machine: clients,
 *               other processes) only delays the chunk it holds, never the whole phase. The
 *               forward pass is a sequence of pool_for phases.
 *   pool_run  - SPMD: every thread runs fn(ctx, ith, nth) at once, with pool_barrier inside.
 *               For code that needs all threads simultaneously (the roofline probe, benchmarks).
 *
 * Claiming (the `pool-ranges` toggle, default on): the chunks are cut into one contiguous range
 * per thread, thread t's [n * t / T, n * (t + 1) / T) of n chunks on T threads; each thread claims
 * its own range's chunks in order, then the last unclaimed chunk of another's range, until none is
 * left. A thread's chunks then follow one another (a matmul phase's weights stream on where the
 * last chunk ended, the prefetches already ahead: claimed from one shared counter, the two threads
 * of a one-row product alternate chunks and each of its streams restarts at every chunk, 11-14%
 * slower on 16 chunks a matrix from memory), and a thread that is slow or descheduled only loses
 * its range's tail to the others. Off: every chunk from one shared counter, in order.
 *
 * Which thread runs which chunk varies from run to run; callers make each chunk's result depend
 * only on the chunk (verity's kernels compute every output element with the same operations
 * whatever the division), which is why the thread count never changes results (P1).
 *
 * Waiting: threads spin (with pause) for a short while, then sleep on a futex, so a loaded or
 * oversubscribed machine does not livelock and an idle pool uses no CPU. The spinning is the
 * `pool-spin` toggle. While it spins waiting for a job or for a pool_for's last chunks, a thread
 * calls the idle function if one is set (pool_set_idle): the forward pass prefetches the next
 * matmul's weights there, so the memory bus works while a thread has nothing to compute.
 *
 * Threading: pool_run and pool_for may be called by one thread at a time (the owner);
 * pool_barrier only from inside a pool_run fn, by all nth threads.
 */
#ifndef VERITY_BASE_POOL_H
#define VERITY_BASE_POOL_H

#include <stdint.h>

typedef struct pool pool;
typedef void (*pool_fn)(void *ctx, int ith, int nth);
/* One chunk of a pool_for: chunk of n_chunks, run by thread `thread` (0 = the owner, else
 * 1..pool_size-1; for per-thread scratch buffers). */
typedef void (*pool_chunk_fn)(void *ctx, int64_t chunk, int64_t n_chunks, int thread);
/* Work for a waiting thread (thread 0 = the owner, else 1..pool_size-1): see pool_set_idle. */
typedef void (*pool_idle_fn)(void *ctx, int thread);

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

/* Runs fn(ctx, c, n_chunks, thread) once for every chunk c in [0, n_chunks), spread over the
 * threads that are free to take them, and returns when all have returned. Memory written by any
 * chunk is visible to the caller afterwards. With one thread or one chunk everything runs on the
 * caller. Must not be called from inside fn or a pool_run. */
void pool_for(pool *p, int64_t n_chunks, pool_chunk_fn fn, void *ctx);

/* Sets the function every spinning thread calls, over and over, while it waits for a job or (the
 * owner) for a pool_for's chunks to finish; never while it sleeps, never at a pool_barrier. fn
 * must return within a few hundred nanoseconds and may only do what cannot change a result
 * (prefetch hints, its own thread's bookkeeping, atomics); it sees ctx and its thread number. Set
 * it before the first pool_run / pool_for (or between jobs: a thread may call the old fn once
 * more); ctx must stay valid until pool_destroy. fn NULL: none (the default). */
void pool_set_idle(pool *p, pool_idle_fn fn, void *ctx);

/* Waits until all nth threads of the current pool_run have reached it. Writes before the barrier
 * are visible to all threads after it. */
void pool_barrier(pool *p);

#endif
