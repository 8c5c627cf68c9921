/* SPDX-License-Identifier: MIT */
/*
 * kv_blobs: see kv_blobs.h. The free list is an array used as a stack (the most recently given
 * back buffer, the likeliest to be in the CPU's caches, is handed out first) under one mutex.
 * cap is the capacity of every buffer on the list; it is set by the first buffer given back and
 * changes only when the list is empty. Allocation and free() happen outside the mutex.
 */
#include "kv/kv_blobs.h"
#include "base/err.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct kv_blobs {
    pthread_mutex_t mu;
    void **free_bufs; /* [max] */
    int n, max;
    size_t cap; /* capacity of the buffers on the list (0: none yet) */
    int64_t allocs, reuses;
};

size_t kv_blobs_capacity(size_t n) {
    return (n / KV_BLOBS_ALIGN + 1) * KV_BLOBS_ALIGN;
}

int kv_blobs_create(int max_cached, kv_blobs **out) {
    *out = NULL;
    if (max_cached < 0)
        return err_set(ERR_INVAL, "kv blobs: negative free list bound (%d)", max_cached);
    kv_blobs *b = calloc(1, sizeof *b);
    if (b && max_cached > 0)
        b->free_bufs = calloc((size_t)max_cached, sizeof *b->free_bufs);
    if (!b || (max_cached > 0 && !b->free_bufs)) {
        free(b);
        return err_set(ERR_NOMEM, "kv blobs: out of memory");
    }
    b->max = max_cached;
    pthread_mutex_init(&b->mu, NULL);
    *out = b;
    return 0;
}

void kv_blobs_destroy(kv_blobs *b) {
    if (!b)
        return;
    for (int i = 0; i < b->n; i++)
        free(b->free_bufs[i]);
    free(b->free_bufs);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void *kv_blobs_alloc(kv_blobs *b, size_t n) {
    size_t cap = kv_blobs_capacity(n);
    if (b) {
        void *buf = NULL;
        pthread_mutex_lock(&b->mu);
        if (b->n > 0 && b->cap == cap) {
            buf = b->free_bufs[--b->n];
            b->reuses++;
        } else {
            b->allocs++;
        }
        pthread_mutex_unlock(&b->mu);
        if (buf)
            return buf;
    }
    void *buf = NULL;
    if (posix_memalign(&buf, KV_BLOBS_ALIGN, cap) != 0)
        return NULL;
    return buf;
}

void kv_blobs_free(kv_blobs *b, void *buf, size_t n) {
    if (!buf)
        return;
    size_t cap = kv_blobs_capacity(n);
    if (b) {
        pthread_mutex_lock(&b->mu);
        if (b->n == 0)
            b->cap = cap;
        bool keep = b->n < b->max && b->cap == cap;
        if (keep)
            b->free_bufs[b->n++] = buf;
        pthread_mutex_unlock(&b->mu);
        if (keep)
            return;
    }
    free(buf);
}

void kv_blobs_stats_get(kv_blobs *b, kv_blobs_stats *out) {
    *out = (kv_blobs_stats){0};
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    out->allocs = b->allocs;
    out->reuses = b->reuses;
    out->cached = b->n;
    pthread_mutex_unlock(&b->mu);
}
