/* SPDX-License-Identifier: MIT */
/*
 * arena: see arena.h. Chunks form a singly linked list, newest first; a request larger than the
 * chunk size gets a chunk of its own. The first chunk survives arena_reset so a reused arena (one
 * per connection, say) does not go back to malloc for small requests.
 */
#include "base/arena.h"
#include "base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    _Alignas(16) unsigned char data[];
} arena_chunk;

struct arena {
    arena_chunk *head;
    size_t chunk_bytes;
    size_t limit_bytes;
    size_t total_bytes; /* chunk bytes allocated */
    size_t used_bytes;  /* bytes handed out */
};

static arena_chunk *arena_chunk_new(arena *a, size_t size) {
    if (a->limit_bytes && (size > a->limit_bytes || a->total_bytes > a->limit_bytes - size))
        return NULL;
    if (size > SIZE_MAX - sizeof(arena_chunk))
        return NULL;
    arena_chunk *c = malloc(sizeof(arena_chunk) + size);
    if (!c)
        return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    a->total_bytes += size;
    return c;
}

arena *arena_create(size_t chunk_bytes, size_t limit_bytes) {
    arena *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : 64 * 1024;
    a->limit_bytes = limit_bytes;
    return a;
}

void arena_destroy(arena *a) {
    if (!a)
        return;
    arena_chunk *c = a->head;
    while (c) {
        arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

void *arena_alloc(arena *a, size_t n) {
    size_t need = (n + 15) & ~(size_t)15;
    if (need < n)
        return NULL;
    if (need == 0)
        need = 16;
    arena_chunk *c = a->head;
    if (!c || c->size - c->used < need) {
        size_t size = need > a->chunk_bytes ? need : a->chunk_bytes;
        arena_chunk *nc = arena_chunk_new(a, size);
        if (!nc)
            return NULL;
        if (c && need > a->chunk_bytes) {
            /* oversized: keep the current chunk at the head for later small allocations */
            nc->next = c->next;
            c->next = nc;
            nc->used = need;
            a->used_bytes += need;
            return nc->data;
        }
        nc->next = c;
        a->head = nc;
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += need;
    a->used_bytes += need;
    return p;
}

void *arena_calloc(arena *a, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = arena_alloc(a, n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

int arena_grow(arena *a, void **items, size_t *cap, size_t need, size_t item_bytes) {
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4;
    while (c < need && c <= SIZE_MAX / 2)
        c *= 2;
    void *p = c >= need && c <= SIZE_MAX / item_bytes ? arena_alloc(a, c * item_bytes) : NULL;
    if (!p)
        return err_set(ERR_NOMEM, "out of arena memory growing an array to %zu items of %zu bytes",
                       need, item_bytes);
    if (*cap)
        memcpy(p, *items, *cap * item_bytes);
    *items = p;
    *cap = c;
    return 0;
}

char *arena_strndup(arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX)
        return NULL;
    char *p = arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void arena_reset(arena *a) {
    arena_chunk *c = a->head;
    if (!c)
        return;
    /* keep the last chunk in the list (the oldest, normal-sized one) */
    arena_chunk *keep = c;
    while (keep->next)
        keep = keep->next;
    while (c != keep) {
        arena_chunk *n = c->next;
        a->total_bytes -= c->size;
        free(c);
        c = n;
    }
    keep->used = 0;
    a->head = keep;
    a->used_bytes = 0;
}

size_t arena_used(const arena *a) {
    return a->used_bytes;
}
