/* SPDX-License-Identifier: MIT */
/*
 * workq: a FIFO of work items run by worker threads that are started as needed, for fronts that
 * hand each complete request to a thread that may block on it (the server's generation, the
 * router's backend request).
 *
 * workq_push queues an item and, when no worker is idle for it and fewer than max_threads run,
 * starts one; at most max_queued items wait. Each worker calls thread_init once (its own state:
 * the router's HTTP client), then fn for item after item in FIFO order, then thread_fini when the
 * queue is destroyed. Workers live until workq_destroy, which lets them finish every queued item
 * and joins them.
 *
 * Threads: workq_push from any thread; workq_destroy from one thread, after the last push.
 */
#ifndef VERITY_BASE_WORKQ_H
#define VERITY_BASE_WORKQ_H

#include <stddef.h>

typedef struct workq workq;

typedef struct workq_cfg {
    int max_threads;    /* >= 1 */
    int max_queued;     /* items waiting for a worker at most (>= 0) */
    size_t stack_bytes; /* each worker's stack; 0: the system's default */
    /* runs item on a worker; state is what thread_init returned on that worker */
    void (*fn)(void *user, void *state, void *item);
    void *(*thread_init)(void *user);             /* NULL: state is NULL */
    void (*thread_fini)(void *user, void *state); /* NULL: nothing */
    void *user;
} workq_cfg;

/* Creates the queue (no thread yet). Returns 0 and *out, ERR_INVAL (max_threads < 1, no fn,
 * max_queued < 0) or ERR_NOMEM. */
int workq_create(const workq_cfg *cfg, workq **out);

/* Queues item. Returns 0 (a worker will run it), ERR_FULL when max_queued items already wait or
 * no worker runs and none could be started (nothing queued: the caller answers the refusal), or
 * ERR_STATE after workq_destroy began. */
int workq_push(workq *q, void *item);

/* Lets the workers finish every queued item, joins them and frees q. NULL is a no-op. */
void workq_destroy(workq *q);

#endif
