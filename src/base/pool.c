/* SPDX-License-Identifier: MIT */
/*
 * pool: see pool.h.
 *
 * Start of a run: the owner stores fn/ctx, then increments `gen` with release order; workers that
 * see a new gen (acquire) read fn/ctx. End of a run: each worker increments `done` (release); the
 * owner waits for done == nth - 1 (acquire). The barrier is sense-reversing: the last thread to
 * arrive resets the count and bumps `bar_phase`; the others wait for the phase to change. Every
 * wait spins for up to POOL_SPIN_NS with a pause instruction and then sleeps on a futex; a waker
 * calls FUTEX_WAKE only when someone may be sleeping (the `sleepers` count).
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

#define POOL_SPIN_NS 200000

typedef struct pool_worker {
    pool *p;
    int ith;
    pthread_t tid;
} pool_worker;

struct pool {
    int n;
    bool spin;
    pool_worker *workers;
    pool_fn fn;
    void *ctx;
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

/* Waits until *addr != val (acquire). */
static void pool_wait_change(pool *p, atomic_int *addr, int val) {
    if (p->spin) {
        int64_t t0 = 0;
        for (unsigned it = 0;; it++) {
            if (atomic_load_explicit(addr, memory_order_acquire) != val)
                return;
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

static void *pool_worker_main(void *arg) {
    pool_worker *w = arg;
    pool *p = w->p;
    int seen = 0;
    for (;;) {
        pool_wait_change(p, &p->gen, seen);
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        p->fn(p->ctx, w->ith, p->n);
        int d = atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1;
        if (d == p->n - 1)
            pool_wake(p, &p->done);
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
    atomic_init(&p->gen, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_phase, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads, sizeof *p->workers);
        if (!p->workers) {
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
        atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
        pool_wake(p, &p->gen);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->workers[i].tid, NULL);
    }
    free(p->workers);
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
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    pool_wake(p, &p->gen);
    fn(ctx, 0, p->n);
    for (;;) {
        int d = atomic_load_explicit(&p->done, memory_order_acquire);
        if (d == p->n - 1)
            break;
        pool_wait_change(p, &p->done, d);
    }
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
    pool_wait_change(p, &p->bar_phase, phase);
}
