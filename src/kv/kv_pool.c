/* SPDX-License-Identifier: MIT */
/*
 * kv_pool: see kv_pool.h. The storage is one large anonymous mapping (mem.h: huge pages where
 * available; pages materialise on first write, so a large pool costs address space until used,
 * unless kv_pool_prefault writes them all at start-up);
 * the free list is a stack of ids.
 *
 * Two layouts (flag kv-pool-block-major, read once by kv_pool_create; the pool keeps its own):
 * layer-major, where layer l's buffer i is one region of n_blocks blocks (block b of it at
 * base(l, i) + b * buf_block[i]); and block-major, where block b is one region of
 * kv_block_state_bytes holding, layer by layer, each buffer's block in payload order (so
 * base(l, i) = mem + l * the bytes of one layer of one block + the buffers before i in it, and
 * every buffer's stride is the whole block's bytes). Either way kv_pool_blockp is the one address
 * formula, buf_off[i] + layer * layer_bytes the base and buf_stride[i] the stride.
 */
#include "kv/kv_pool.h"
#include "base/check.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/mem.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct kv_pool {
    kv_pool_opts o;
    unsigned char *mem;
    size_t mem_bytes;
    int n_buf;
    const char *buf_name[KV_POOL_MAX_BUFFERS];
    size_t buf_block[KV_POOL_MAX_BUFFERS];  /* one block of one layer of buffer i */
    size_t buf_off[KV_POOL_MAX_BUFFERS];    /* buffer i of layer 0 of block 0, from mem */
    size_t buf_stride[KV_POOL_MAX_BUFFERS]; /* from block b to block b + 1 in buffer i */
    size_t layer_bytes;                     /* from layer l to layer l + 1 in any buffer */
    bool block_major;
    int32_t *refs;
    int32_t *free_ids;
    int64_t n_free;
    _Atomic int32_t high_water; /* one past the highest id allocated (read by any thread) */
};

/* The buffers of o: names and bytes per position; returns how many (0 for bad sizes). */
static int kv_pool_buffers_of(const kv_pool_opts *o, const char **names, size_t *row_bytes) {
    if (o->n_layer <= 0 || o->kv_dim <= 0 || o->block_size <= 0)
        return 0;
    int n = 0;
    size_t row = (size_t)(o->f16 ? 2 : 4) * (size_t)o->kv_dim;
    names[n] = "k", row_bytes[n++] = row;
    if (!o->k_only)
        names[n] = "v", row_bytes[n++] = row;
    if (o->ik_row_bytes)
        names[n] = o->ik_name, row_bytes[n++] = o->ik_row_bytes;
    return n;
}

size_t kv_block_state_bytes_of(const kv_pool_opts *o) {
    const char *names[KV_POOL_MAX_BUFFERS];
    size_t rows[KV_POOL_MAX_BUFFERS];
    int n = kv_pool_buffers_of(o, names, rows);
    if (n == 0 || (uint64_t)o->kv_dim > UINT32_MAX || (uint64_t)o->block_size > UINT32_MAX)
        return 0;
    __uint128_t b = 0;
    for (int i = 0; i < n; i++)
        b += (__uint128_t)rows[i] * (uint64_t)o->block_size;
    b *= (uint64_t)o->n_layer;
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
    if (o->ik_row_bytes && (!o->ik_name || !o->ik_name[0] || strlen(o->ik_name) > 7))
        return err_set(ERR_INVAL, "kv pool: the companion buffer needs a name of 1-7 characters");
    kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "kv pool: out of memory");
    p->o = *o;
    atomic_init(&p->high_water, 0);
    size_t rows[KV_POOL_MAX_BUFFERS];
    p->n_buf = kv_pool_buffers_of(o, p->buf_name, rows);
    p->block_major = flags_int(FLAG_KV_POOL_BLOCK_MAJOR) != 0;
    size_t block_bytes = kv_block_state_bytes_of(o);
    for (int i = 0; i < p->n_buf; i++) {
        p->buf_block[i] = rows[i] * (size_t)o->block_size;
        p->buf_off[i] = p->layer_bytes;
        p->buf_stride[i] = p->block_major ? block_bytes : p->buf_block[i];
        /* block-major: a layer's buffers follow each other within a block; layer-major: a
         * layer's buffer regions of n_blocks blocks each follow each other */
        p->layer_bytes += p->buf_block[i] * (p->block_major ? 1 : (size_t)o->n_blocks);
    }
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

void kv_pool_prefault(kv_pool *p) {
#ifdef MADV_POPULATE_WRITE
    if (madvise(p->mem, p->mem_bytes, MADV_POPULATE_WRITE) == 0)
        return;
#endif
    /* older kernels: one write per 4 KiB page; the pool is still all zeros here */
    for (size_t off = 0; off < p->mem_bytes; off += 4096)
        ((volatile unsigned char *)p->mem)[off] = 0;
}

bool kv_pool_prefault_blocks(kv_pool *p, int32_t lo, int32_t hi) {
#ifdef MADV_POPULATE_WRITE
    if (lo < 0)
        lo = 0;
    if (hi > p->o.n_blocks)
        hi = (int32_t)p->o.n_blocks;
    if (lo >= hi)
        return true;
    if (p->block_major) {
        size_t bb = kv_block_state_bytes(p);
        uintptr_t a = ((uintptr_t)p->mem + (size_t)lo * bb) & ~(uintptr_t)4095;
        uintptr_t b = ((uintptr_t)p->mem + (size_t)hi * bb + 4095) & ~(uintptr_t)4095;
        return madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0;
    }
    for (int64_t l = 0; l < p->o.n_layer; l++)
        for (int i = 0; i < p->n_buf; i++) {
            uintptr_t base = (uintptr_t)p->mem + (size_t)l * p->layer_bytes + p->buf_off[i];
            uintptr_t a = (base + (size_t)lo * p->buf_stride[i]) & ~(uintptr_t)4095;
            uintptr_t b = (base + (size_t)hi * p->buf_stride[i] + 4095) & ~(uintptr_t)4095;
            if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0)
                return false;
        }
    return true;
#else
    (void)p, (void)lo, (void)hi;
    return false;
#endif
}

int32_t kv_pool_high_water(const kv_pool *p) {
    return atomic_load_explicit(&((kv_pool *)p)->high_water, memory_order_relaxed);
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
    if (id >= atomic_load_explicit(&p->high_water, memory_order_relaxed))
        atomic_store_explicit(&p->high_water, id + 1, memory_order_relaxed);
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
    return p->buf_block[0];
}
int kv_pool_n_buffers(const kv_pool *p) {
    return p->n_buf;
}
const char *kv_pool_buffer_name(const kv_pool *p, int i) {
    CHECK(i >= 0 && i < p->n_buf);
    return p->buf_name[i];
}
size_t kv_pool_buffer_block_bytes(const kv_pool *p, int i) {
    CHECK(i >= 0 && i < p->n_buf);
    return p->buf_block[i];
}
size_t kv_pool_buffer_stride(const kv_pool *p, int i) {
    CHECK(i >= 0 && i < p->n_buf);
    return p->buf_stride[i];
}
size_t kv_pool_kv_stride(const kv_pool *p) {
    return kv_pool_buffer_stride(p, 0);
}
size_t kv_pool_ik_stride(const kv_pool *p) {
    return p->o.ik_row_bytes ? kv_pool_buffer_stride(p, p->n_buf - 1) : 0;
}
bool kv_pool_block_major(const kv_pool *p) {
    return p->block_major;
}
void *kv_pool_block_payload(kv_pool *p, int32_t id) {
    CHECK(id >= 0 && id < p->o.n_blocks);
    return p->block_major ? p->mem + (size_t)id * p->buf_stride[0] : NULL;
}
void *kv_pool_buffer_base(kv_pool *p, int64_t layer, int i) {
    CHECK(i >= 0 && i < p->n_buf && layer >= 0 && layer < p->o.n_layer);
    return p->mem + (size_t)layer * p->layer_bytes + p->buf_off[i];
}
size_t kv_block_state_bytes(const kv_pool *p) {
    size_t b = 0;
    for (int i = 0; i < p->n_buf; i++)
        b += p->buf_block[i];
    return b * (size_t)p->o.n_layer;
}

/* Block id of buffer i of layer l. */
static unsigned char *kv_pool_blockp(const kv_pool *p, int32_t id, int64_t l, int i) {
    return p->mem + (size_t)l * p->layer_bytes + p->buf_off[i] + (size_t)id * p->buf_stride[i];
}

/* Layout of a saved block: for each layer, each buffer in order. */
void kv_block_save(const kv_pool *p, int32_t id, void *dst) {
    CHECK(id >= 0 && id < p->o.n_blocks);
    unsigned char *d = dst;
    for (int64_t l = 0; l < p->o.n_layer; l++)
        for (int i = 0; i < p->n_buf; i++) {
            memcpy(d, kv_pool_blockp(p, id, l, i), p->buf_block[i]);
            d += p->buf_block[i];
        }
}

void kv_block_load(kv_pool *p, int32_t id, const void *src, bool k, bool v) {
    CHECK(id >= 0 && id < p->o.n_blocks);
    const unsigned char *s = src;
    for (int64_t l = 0; l < p->o.n_layer; l++)
        for (int i = 0; i < p->n_buf; i++) {
            if (i == 0 ? k : v)
                memcpy(kv_pool_blockp(p, id, l, i), s, p->buf_block[i]);
            s += p->buf_block[i];
        }
}

void kv_block_copy(kv_pool *p, int32_t dst, int32_t src) {
    CHECK(dst >= 0 && dst < p->o.n_blocks && src >= 0 && src < p->o.n_blocks);
    for (int64_t l = 0; l < p->o.n_layer; l++)
        for (int i = 0; i < p->n_buf; i++)
            memcpy(kv_pool_blockp(p, dst, l, i), kv_pool_blockp(p, src, l, i), p->buf_block[i]);
}

void *kv_pool_k_base(kv_pool *p, int64_t layer) {
    return kv_pool_buffer_base(p, layer, 0);
}
void *kv_pool_v_base(kv_pool *p, int64_t layer) {
    return kv_pool_buffer_base(p, layer, p->o.k_only ? 0 : 1);
}
void *kv_pool_ik_base(kv_pool *p, int64_t layer) {
    return p->o.ik_row_bytes ? kv_pool_buffer_base(p, layer, p->n_buf - 1) : NULL;
}
const char *kv_pool_ik_name(const kv_pool *p) {
    return p->o.ik_row_bytes ? p->o.ik_name : NULL;
}
size_t kv_pool_ik_block_bytes(const kv_pool *p) {
    return p->o.ik_row_bytes ? p->buf_block[p->n_buf - 1] : 0;
}
