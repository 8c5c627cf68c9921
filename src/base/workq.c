/* SPDX-License-Identifier: MIT */
/*
 * workq: a mutex-guarded singly linked FIFO and a condition variable; see workq.h.
 *
 * Growth: a push starts a worker when the idle workers do not outnumber the items already
 * waiting (so each waiting item has an idle worker to take it) and the pool may grow. A worker
 * that cannot be started is not an error while another runs: the item waits for it.
 */
#include "base/workq.h"
#include "base/err.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct workq_node {
    void *item;
    struct workq_node *next;
} workq_node;

struct workq {
    workq_cfg cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    workq_node *head, *tail;
    int queued, idle, n_threads;
    bool stop;
    pthread_t *threads; /* [cfg.max_threads] */
};

static void *workq_main(void *arg) {
    workq *q = arg;
    void *state = q->cfg.thread_init ? q->cfg.thread_init(q->cfg.user) : NULL;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        workq_node *n = q->head;
        if (!n)
            break; /* stopping, and nothing left */
        q->head = n->next;
        if (!q->head)
            q->tail = NULL;
        q->queued--;
        q->idle--;
        pthread_mutex_unlock(&q->mu);
        q->cfg.fn(q->cfg.user, state, n->item);
        free(n);
        pthread_mutex_lock(&q->mu);
        q->idle++;
    }
    q->idle--;
    pthread_mutex_unlock(&q->mu);
    if (q->cfg.thread_fini)
        q->cfg.thread_fini(q->cfg.user, state);
    return NULL;
}

int workq_create(const workq_cfg *cfg, workq **out) {
    *out = NULL;
    if (cfg->max_threads < 1 || !cfg->fn || cfg->max_queued < 0)
        return err_set(ERR_INVAL, "workq: max_threads %d, max_queued %d, fn %s", cfg->max_threads,
                       cfg->max_queued, cfg->fn ? "set" : "missing");
    workq *q = calloc(1, sizeof *q);
    if (q)
        q->threads = calloc((size_t)cfg->max_threads, sizeof *q->threads);
    if (!q || !q->threads) {
        free(q);
        return err_set(ERR_NOMEM, "workq: out of memory for %d threads", cfg->max_threads);
    }
    q->cfg = *cfg;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    *out = q;
    return 0;
}

int workq_push(workq *q, void *item) {
    workq_node *n = malloc(sizeof *n);
    if (!n)
        return ERR_FULL;
    *n = (workq_node){.item = item};
    pthread_mutex_lock(&q->mu);
    if (q->stop) {
        pthread_mutex_unlock(&q->mu);
        free(n);
        return ERR_STATE;
    }
    if (q->idle <= q->queued && q->n_threads < q->cfg.max_threads) {
        pthread_attr_t at;
        pthread_attr_init(&at);
        if (q->cfg.stack_bytes)
            pthread_attr_setstacksize(&at, q->cfg.stack_bytes);
        if (pthread_create(&q->threads[q->n_threads], &at, workq_main, q) == 0) {
            q->n_threads++;
            q->idle++;
        }
        pthread_attr_destroy(&at);
    }
    if (q->queued >= q->cfg.max_queued || q->n_threads == 0) {
        pthread_mutex_unlock(&q->mu);
        free(n);
        return ERR_FULL;
    }
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
    q->queued++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void workq_destroy(workq *q) {
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->threads);
    free(q);
}
