/* SPDX-License-Identifier: MIT */
/*
 * kv_pool: see kv_pool.h. The storage is one large anonymous mapping (mem.h: huge pages where
 * available; pages materialise on first write, so a large pool costs address space until used);
 * the free list is a stack of ids.
 */
#include "kv/kv_pool.h"
#include "base/check.h"
#include "base/err.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct kv_pool {
    kv_pool_opts o;
    unsigned char *mem;
    size_t mem_bytes;
    size_t block_bytes; /* one block of one layer's K (or V) */
    size_t layer_bytes; /* K region of one layer */
    int32_t *refs;
    int32_t *free_ids;
    int64_t n_free;
};

size_t kv_block_state_bytes_of(const kv_pool_opts *o) {
    if (o->n_layer <= 0 || o->kv_dim <= 0 || o->block_size <= 0)
        return 0;
    __uint128_t b = (__uint128_t)(o->f16 ? 2 : 4) * (uint64_t)o->kv_dim * (uint64_t)o->block_size;
    b *= (uint64_t)o->n_layer * 2;
    if (b > (__uint128_t)SIZE_MAX / 2)
        return 0;
    return (size_t)b;
}

size_t kv_pool_bytes(const kv_pool_opts *o) {
    if (o->n_blocks <= 0)
        return 0;
    __uint128_t b = (__uint128_t)kv_block_state_bytes_of(o) * (uint64_t)o->n_blocks;
    if (b > (__uint128_t)SIZE_MAX / 2)
        return 0;
    return (size_t)b;
}

int kv_pool_create(const kv_pool_opts *o, kv_pool **out) {
    *out = NULL;
    size_t total = kv_pool_bytes(o);
    if (!total || o->n_blocks > INT32_MAX)
        return err_set(ERR_INVAL,
                       "kv pool: invalid size (%lld layers, kv dim %lld, %lld blocks of %lld)",
                       (long long)o->n_layer, (long long)o->kv_dim, (long long)o->n_blocks,
                       (long long)o->block_size);
    kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "kv pool: out of memory");
    p->o = *o;
    p->block_bytes = kv_block_state_bytes_of(o) / (2 * (size_t)o->n_layer);
    p->layer_bytes = p->block_bytes * (size_t)o->n_blocks;
    p->mem_bytes = total;
    void *m = mem_alloc_large(total);
    p->refs = calloc((size_t)o->n_blocks, sizeof *p->refs);
    p->free_ids = malloc((size_t)o->n_blocks * sizeof *p->free_ids);
    if (!m || !p->refs || !p->free_ids) {
        mem_free_large(m, total);
        free(p->refs);
        free(p->free_ids);
        free(p);
        return err_set(ERR_NOMEM, "kv pool: cannot allocate %zu MiB", total >> 20);
    }
    p->mem = m;
    /* lowest ids on top of the stack, so allocation order is deterministic and compact */
    for (int64_t i = 0; i < o->n_blocks; i++)
        p->free_ids[i] = (int32_t)(o->n_blocks - 1 - i);
    p->n_free = o->n_blocks;
    *out = p;
    return 0;
}

void kv_pool_destroy(kv_pool *p) {
    if (!p)
        return;
    mem_free_large(p->mem, p->mem_bytes);
    free(p->refs);
    free(p->free_ids);
    free(p);
}

int32_t kv_pool_alloc(kv_pool *p) {
    if (p->n_free == 0)
        return -1;
    int32_t id = p->free_ids[--p->n_free];
    CHECK(p->refs[id] == 0);
    p->refs[id] = 1;
    return id;
}

void kv_block_ref(kv_pool *p, int32_t id) {
    CHECK(id >= 0 && id < p->o.n_blocks && p->refs[id] > 0);
    p->refs[id]++;
}

void kv_block_unref(kv_pool *p, int32_t id) {
    CHECK(id >= 0 && id < p->o.n_blocks && p->refs[id] > 0);
    if (--p->refs[id] == 0)
        p->free_ids[p->n_free++] = id;
}

int32_t kv_block_refcount(const kv_pool *p, int32_t id) {
    return id >= 0 && id < p->o.n_blocks ? p->refs[id] : 0;
}

int64_t kv_pool_n_blocks(const kv_pool *p) {
    return p->o.n_blocks;
}
int64_t kv_pool_n_layer(const kv_pool *p) {
    return p->o.n_layer;
}
int64_t kv_pool_n_free(const kv_pool *p) {
    return p->n_free;
}
int64_t kv_pool_block_size(const kv_pool *p) {
    return p->o.block_size;
}
bool kv_pool_f16(const kv_pool *p) {
    return p->o.f16;
}
size_t kv_pool_block_bytes(const kv_pool *p) {
    return p->block_bytes;
}
size_t kv_block_state_bytes(const kv_pool *p) {
    return p->block_bytes * 2 * (size_t)p->o.n_layer;
}

/* Layout of a saved block: for each layer, K then V. */
void kv_block_save(const kv_pool *p, int32_t id, void *dst) {
    CHECK(id >= 0 && id < p->o.n_blocks);
    unsigned char *d = dst;
    for (int64_t l = 0; l < p->o.n_layer; l++)
        for (int kv = 0; kv < 2; kv++) {
            const unsigned char *src = p->mem + ((size_t)l * 2 + (size_t)kv) * p->layer_bytes +
                                       (size_t)id * p->block_bytes;
            memcpy(d, src, p->block_bytes);
            d += p->block_bytes;
        }
}

void kv_block_load(kv_pool *p, int32_t id, const void *src, bool k, bool v) {
    CHECK(id >= 0 && id < p->o.n_blocks);
    const unsigned char *s = src;
    for (int64_t l = 0; l < p->o.n_layer; l++)
        for (int kv = 0; kv < 2; kv++) {
            if (kv == 0 ? k : v)
                memcpy(p->mem + ((size_t)l * 2 + (size_t)kv) * p->layer_bytes +
                           (size_t)id * p->block_bytes,
                       s, p->block_bytes);
            s += p->block_bytes;
        }
}

void *kv_pool_k_base(kv_pool *p, int64_t layer) {
    return p->mem + (size_t)layer * 2 * p->layer_bytes;
}
void *kv_pool_v_base(kv_pool *p, int64_t layer) {
    return p->mem + ((size_t)layer * 2 + 1) * p->layer_bytes;
}
