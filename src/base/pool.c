/* SPDX-License-Identifier: MIT */
/*
 * pool: see pool.h.
 *
 * Publishing a job: the owner writes the job's descriptor (atomics, relaxed), then stores the
 * 64-bit `job` word (release): seq (24 bits, +1 per job) | n (20 bits: chunks, 0 for a pool_run)
 * | claimed (20 bits), then stores seq into `gen`, the 32-bit futex word workers sleep on.
 *
 * pool_for: a thread claims chunk c by a compare-and-swap of `job` from (seq, n, c) to
 * (seq, n, c + 1), so a claim can only succeed on the job it read: a worker that wakes late and
 * still holds an old word fails its CAS and moves on. The descriptor is read after a successful
 * claim, when the job cannot be finished (its chunk is not done), so the owner is not rewriting
 * it. Each finished chunk increments `done`; the owner waits for done == n, which only needs the
 * chunks that were claimed, never a thread that took none.
 *
 * pool_for with pool-ranges: before the job word, the owner stores one word per thread,
 * seq (24 bits) | lo (20) | hi (20): that thread's unclaimed chunks [lo, hi). A thread claims its
 * own range's front (lo + 1) and, once it is empty, another range's back (hi - 1), each by a
 * compare-and-swap of that word, which fails on a word of another job (seq), so, as above, a late
 * worker claims nothing. Its own range's word is touched by others only when they steal, so a
 * claim seldom moves a cache line between cores. Such a job's word is published with claimed = n:
 * the `job_range` flag that sends a thread to the ranges is not part of the word, and a late
 * worker holding this word may read the flag the owner has already cleared for its next job (a
 * pool_run) while the word is still this one; it then tries the shared counter, finds nothing
 * left to claim and leaves (with claimed = 0 its compare-and-swap succeeded, ran a finished job's
 * chunk 0 with the next job's ctx and counted it in the next job's `done`).
 *
 * pool_run: every worker must take part, so the owner waits for done == nth - 1 and the
 * descriptor stays put until then. The barrier is sense-reversing: the last thread to arrive
 * resets the count and bumps `bar_phase`; the others wait for the phase to change.
 *
 * Every wait spins for up to POOL_SPIN_NS with a pause instruction and then sleeps on a futex; a
 * waker calls FUTEX_WAKE only when someone may be sleeping (the `sleepers` count). A worker's wait
 * for a job and the owner's wait for a pool_for's `done` call the idle function between checks
 * while they spin (loaded once per wait: pool_set_idle's ctx is stored before its fn).
 */
#include "base/pool.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"

#include <immintrin.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define POOL_SPIN_NS    200000
#define POOL_SEQ_SHIFT  40
#define POOL_N_SHIFT    20
#define POOL_FIELD_MASK ((UINT64_C(1) << 20) - 1)
#define POOL_MAX_CHUNKS ((int64_t)POOL_FIELD_MASK)

static uint32_t pool_job_seq(uint64_t j) {
    return (uint32_t)(j >> POOL_SEQ_SHIFT);
}
static int64_t pool_job_n(uint64_t j) {
    return (int64_t)((j >> POOL_N_SHIFT) & POOL_FIELD_MASK);
}
static int64_t pool_job_claimed(uint64_t j) {
    return (int64_t)(j & POOL_FIELD_MASK);
}

/* one thread's range of a pool_for job's chunks, alone on its cache line */
typedef struct pool_range {
    _Alignas(64) _Atomic uint64_t w; /* seq | lo << 20 | hi */
} pool_range;

typedef struct pool_worker {
    pool *p;
    int ith;
    pthread_t tid;
} pool_worker;

struct pool {
    int n;
    bool spin;
    bool ranges;           /* pool-ranges at creation */
    pool_range *range;     /* [n], with ranges and n > 1 */
    atomic_bool job_range; /* the published pool_for job claims by range */
    pool_worker *workers;
    uint32_t seq; /* owner only: the last job's seq (24 bits) */
    /* the job's descriptor */
    _Atomic(pool_fn) run_fn;
    _Atomic(pool_chunk_fn) for_fn;
    _Atomic(void *) ctx;
    _Atomic(pool_idle_fn) idle_fn; /* pool_set_idle */
    _Atomic(void *) idle_ctx;
    _Atomic int64_t for_base, for_total; /* chunk c of the job is chunk base + c of total */
    _Alignas(64) _Atomic uint64_t job;
    _Alignas(64) atomic_int gen;
    _Alignas(64) atomic_int done;
    _Alignas(64) atomic_int bar_count;
    _Alignas(64) atomic_int bar_phase;
    _Alignas(64) atomic_int sleepers;
    atomic_bool stop;
};

static void pool_futex_wait(atomic_int *addr, int val) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void pool_futex_wake(atomic_int *addr) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until *addr != val (acquire); while spinning, thread >= 0 calls the idle function. */
static void pool_wait_change(pool *p, atomic_int *addr, int val, int thread) {
    if (p->spin) {
        int64_t t0 = 0;
        pool_idle_fn idle =
            thread >= 0 ? atomic_load_explicit(&p->idle_fn, memory_order_acquire) : NULL;
        void *idle_ctx = idle ? atomic_load_explicit(&p->idle_ctx, memory_order_relaxed) : NULL;
        for (unsigned it = 0;; it++) {
            if (atomic_load_explicit(addr, memory_order_acquire) != val)
                return;
            if (idle)
                idle(idle_ctx, thread);
            _mm_pause();
            if ((it & 255) == 255) {
                int64_t now = clock_now_ns();
                if (!t0)
                    t0 = now;
                else if (now - t0 > POOL_SPIN_NS)
                    break;
            }
        }
    }
    atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(addr, memory_order_seq_cst) == val)
        pool_futex_wait(addr, val);
    atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_seq_cst);
}

/* Wakes sleepers on addr after it was changed (the change must be seq_cst or followed by this). */
static void pool_wake(pool *p, atomic_int *addr) {
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst) > 0)
        pool_futex_wake(addr);
}

/* Runs chunk c of the pool_for job of n chunks (claimed; its descriptor cannot change) and counts
 * it done. */
static void pool_run_chunk(pool *p, int64_t c, int64_t n, int thread) {
    pool_chunk_fn fn = atomic_load_explicit(&p->for_fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    int64_t base = atomic_load_explicit(&p->for_base, memory_order_relaxed);
    int64_t total = atomic_load_explicit(&p->for_total, memory_order_relaxed);
    fn(ctx, base + c, total, thread);
    if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n)
        pool_wake(p, &p->done);
}

static uint64_t pool_range_word(uint32_t seq, int64_t lo, int64_t hi) {
    return ((uint64_t)seq << POOL_SEQ_SHIFT) | ((uint64_t)lo << POOL_N_SHIFT) | (uint64_t)hi;
}

/* Claims one chunk of range r of job seq: its front (own) or its back. Returns the chunk, -1 if
 * the range is empty, -2 if the word belongs to another job. */
static int64_t pool_range_claim(pool *p, int r, uint32_t seq, bool own) {
    uint64_t w = atomic_load_explicit(&p->range[r].w, memory_order_acquire);
    for (;;) {
        if (pool_job_seq(w) != seq)
            return -2;
        int64_t lo = pool_job_n(w), hi = pool_job_claimed(w);
        if (lo >= hi)
            return -1;
        uint64_t nw = own ? pool_range_word(seq, lo + 1, hi) : pool_range_word(seq, lo, hi - 1);
        if (atomic_compare_exchange_weak_explicit(&p->range[r].w, &w, nw, memory_order_acq_rel,
                                                  memory_order_acquire))
            return own ? lo : hi - 1;
    }
}

/* pool_claim_chunks of a job claimed by range: this thread's own range from its front, then the
 * other ranges from their backs, nearest thread first. */
static void pool_claim_ranges(pool *p, uint64_t j, int thread) {
    uint32_t seq = pool_job_seq(j);
    int64_t n = pool_job_n(j), c;
    while ((c = pool_range_claim(p, thread, seq, true)) >= 0)
        pool_run_chunk(p, c, n, thread);
    if (c == -2)
        return;
    for (int k = 1; k < p->n; k++) {
        int r = (thread + k) % p->n;
        while ((c = pool_range_claim(p, r, seq, false)) >= 0)
            pool_run_chunk(p, c, n, thread);
        if (c == -2)
            return;
    }
}

/* Claims and runs chunks of the pool_for job whose word is j until it has none left or a newer
 * job replaced it. */
static void pool_claim_chunks(pool *p, uint64_t j, int thread) {
    if (atomic_load_explicit(&p->job_range, memory_order_relaxed)) {
        pool_claim_ranges(p, j, thread);
        return;
    }
    uint32_t seq = pool_job_seq(j);
    int64_t n = pool_job_n(j);
    for (;;) {
        if (pool_job_seq(j) != seq || pool_job_claimed(j) >= n)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->job, &j, j + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* j now holds the current word */
        pool_run_chunk(p, pool_job_claimed(j), n, thread);
        j = atomic_load_explicit(&p->job, memory_order_acquire);
    }
}

static void *pool_worker_main(void *arg) {
    pool_worker *w = arg;
    pool *p = w->p;
    uint32_t last = 0;
    for (;;) {
        pool_wait_change(p, &p->gen, (int)last, w->ith);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        uint64_t j = atomic_load_explicit(&p->job, memory_order_acquire);
        /* again after reading the job: a worker that passed the check above for an earlier job
         * (the owner finished it alone) may read pool_destroy's word, whose run_fn is NULL; the
         * stop stored before that word is visible once the word is (release/acquire) */
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        if (pool_job_seq(j) == last)
            continue; /* gen not yet caught up with job */
        last = pool_job_seq(j);
        if (pool_job_n(j) == 0) {
            /* pool_run: the owner waits for every worker, so the descriptor is this job's */
            pool_fn fn = atomic_load_explicit(&p->run_fn, memory_order_relaxed);
            fn(atomic_load_explicit(&p->ctx, memory_order_relaxed), w->ith, p->n);
            int d = atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1;
            if (d == p->n - 1)
                pool_wake(p, &p->done);
        } else {
            pool_claim_chunks(p, j, w->ith);
        }
    }
}

/* Owner: publishes a job word (the descriptor already written) and wakes the workers; a pool_for
 * job with ranges gets its range words first. */
static void pool_publish(pool *p, int64_t n, bool ranges) {
    p->seq = (p->seq + 1) & 0xFFFFFF;
    if (p->seq == 0)
        p->seq = 1; /* 0 is the workers' initial "last seen" */
    atomic_store_explicit(&p->job_range, ranges, memory_order_relaxed);
    if (ranges)
        for (int t = 0; t < p->n; t++)
            atomic_store_explicit(&p->range[t].w,
                                  pool_range_word(p->seq, n * t / p->n, n * (t + 1) / p->n),
                                  memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->job,
                          ((uint64_t)p->seq << POOL_SEQ_SHIFT) | ((uint64_t)n << POOL_N_SHIFT) |
                              (ranges ? (uint64_t)n : 0),
                          memory_order_release);
    atomic_store_explicit(&p->gen, (int)p->seq, memory_order_seq_cst);
    pool_wake(p, &p->gen);
}

/* Owner: waits until `done` reaches target (idle: call the idle function while spinning). */
static void pool_wait_done(pool *p, int target, bool idle) {
    for (;;) {
        int d = atomic_load_explicit(&p->done, memory_order_acquire);
        if (d == target)
            return;
        pool_wait_change(p, &p->done, d, idle ? 0 : -1);
    }
}

int pool_create(int n_threads, pool **out) {
    if (n_threads < 1)
        return err_set(ERR_INVAL, "pool: thread count %d must be at least 1", n_threads);
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "pool: out of memory");
    p->n = n_threads;
    p->spin = flags_int(FLAG_POOL_SPIN) != 0;
    p->ranges = flags_int(FLAG_POOL_RANGES) != 0 && n_threads > 1;
    atomic_init(&p->job_range, false);
    if (p->ranges) {
        p->range = aligned_alloc(64, (size_t)n_threads * sizeof *p->range);
        if (!p->range) {
            free(p);
            return err_set(ERR_NOMEM, "pool: out of memory");
        }
        for (int i = 0; i < n_threads; i++)
            atomic_init(&p->range[i].w, 0);
    }
    atomic_init(&p->gen, 0);
    atomic_init(&p->job, 0);
    atomic_init(&p->run_fn, NULL);
    atomic_init(&p->for_fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->idle_fn, NULL);
    atomic_init(&p->idle_ctx, NULL);
    atomic_init(&p->for_base, 0);
    atomic_init(&p->for_total, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_phase, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads, sizeof *p->workers);
        if (!p->workers) {
            free(p->range);
            free(p);
            return err_set(ERR_NOMEM, "pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].p = p;
        p->workers[i].ith = i;
        if (pthread_create(&p->workers[i].tid, NULL, pool_worker_main, &p->workers[i]) != 0) {
            p->n = i; /* destroy joins the ones that started */
            pool_destroy(p);
            return err_set(ERR_INTERNAL, "pool: could not start thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return 0;
}

void pool_destroy(pool *p) {
    if (!p)
        return;
    if (p->n > 1) {
        atomic_store_explicit(&p->stop, true, memory_order_release);
        atomic_store_explicit(&p->run_fn, NULL, memory_order_relaxed);
        pool_publish(p, 0, false);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->workers[i].tid, NULL);
    }
    free(p->workers);
    free(p->range);
    free(p);
}

int pool_size(const pool *p) {
    return p->n;
}

void pool_run(pool *p, pool_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    atomic_store_explicit(&p->run_fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    pool_publish(p, 0, false);
    fn(ctx, 0, p->n);
    pool_wait_done(p, p->n - 1, false);
}

void pool_for(pool *p, int64_t n_chunks, pool_chunk_fn fn, void *ctx) {
    if (p->n == 1 || n_chunks <= 1) {
        for (int64_t c = 0; c < n_chunks; c++)
            fn(ctx, c, n_chunks, 0);
        return;
    }
    for (int64_t base = 0; base < n_chunks; base += POOL_MAX_CHUNKS) {
        int64_t n = n_chunks - base < POOL_MAX_CHUNKS ? n_chunks - base : POOL_MAX_CHUNKS;
        atomic_store_explicit(&p->for_fn, fn, memory_order_relaxed);
        atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
        atomic_store_explicit(&p->for_base, base, memory_order_relaxed);
        atomic_store_explicit(&p->for_total, n_chunks, memory_order_relaxed);
        pool_publish(p, n, p->ranges);
        pool_claim_chunks(p, atomic_load_explicit(&p->job, memory_order_acquire), 0);
        pool_wait_done(p, (int)n, true);
    }
}

void pool_set_idle(pool *p, pool_idle_fn fn, void *ctx) {
    atomic_store_explicit(&p->idle_ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->idle_fn, fn, memory_order_release);
}

void pool_barrier(pool *p) {
    if (p->n == 1)
        return;
    int phase = atomic_load_explicit(&p->bar_phase, memory_order_acquire);
    int arrived = atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) + 1;
    if (arrived == p->n) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bar_phase, 1, memory_order_seq_cst);
        pool_wake(p, &p->bar_phase);
        return;
    }
    pool_wait_change(p, &p->bar_phase, phase, -1);
}
