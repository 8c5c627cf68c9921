/* SPDX-License-Identifier: MIT */
/*
 * kv_pool: the paged KV cache's memory: a fixed number of blocks, each holding block_size
 * positions of keys and values for every layer, and the block allocator (free list + reference
 * counts). Sequences address their KV through block tables (arrays of block ids in position
 * order) that the engine owns; the forward pass writes K/V rows into the slots of the positions it
 * computes and reads them through kn_attn_kv.
 *
 * Buffers: a block holds, for every layer, one or more named buffers of per-position rows: "k"
 * (kv_dim elements per position), "v" (the same, unless the architecture reads its values from
 * the K rows: MLA's latent cache keeps no V region), and a companion buffer if the architecture
 * has one (the DSA indexer's keys, named by their element type, e.g. "ik-f16"; rows of ik_row_bytes
 * laid out by the model). Elements of K and V are F16 or F32 (the kv-dtype toggle).
 *
 * Layout: block b of buffer i of layer l starts at kv_pool_buffer_base(l, i) + b *
 * kv_pool_buffer_stride(i), in both layouts the pool can have (flag kv-pool-block-major, read
 * when the pool is created): layer-major, for each layer, for each buffer, a region of n_blocks x
 * block_size rows (the stride is one block of that buffer, kv_pool_buffer_block_bytes(i)); or
 * block-major, each block one region of kv_block_state_bytes holding every layer's buffers in
 * payload order (the order kv_block_save writes: the stride is the whole block's bytes, and
 * kv_pool_block_payload is the block as one piece). Whoever addresses a block in a buffer uses the
 * stride, never the block's bytes: the two are equal in the layer-major layout only.
 * kv_pool_k_base / kv_pool_v_base / kv_pool_ik_base are the three buffers by role, and
 * kv_pool_kv_stride / kv_pool_ik_stride their strides (V's is K's in either layout).
 *
 * Reference counts let a block be shared (prefix cache, n > 1 sampling): kv_pool_alloc returns a
 * block with one reference, kv_block_ref adds one, kv_block_unref drops one and frees the block
 * when none remain. A freshly allocated block's contents are undefined; readers never read a slot
 * before the forward pass wrote it.
 *
 * Threading: allocation and reference counting belong to one thread (the engine thread); the
 * compute threads only write and read slots of blocks the engine handed them for the step.
 */
#ifndef VERITY_KV_KV_POOL_H
#define VERITY_KV_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_pool kv_pool;

typedef struct kv_pool_opts {
    int64_t n_layer;
    int64_t kv_dim;     /* n_kv_heads * head_dim */
    int64_t block_size; /* positions per block */
    int64_t n_blocks;
    bool f16;
    bool k_only;         /* no V region: the values are the K rows (MLA's latent cache) */
    size_t ik_row_bytes; /* the companion buffer's bytes per position and layer (0: none) */
    const char *ik_name; /* its name (at most 7 characters; static storage), if ik_row_bytes */
} kv_pool_opts;

/* Most buffers a block has (k, v, a companion). */
#define KV_POOL_MAX_BUFFERS 3

/* Bytes of one block's buffers over all layers for pool options o (K: elements of 2 or 4 bytes x
 * kv_dim x block_size, V the same unless k_only, the companion ik_row_bytes x block_size, all
 * times n_layer; n_blocks is not used): the one block-size formula, which kv_block_state_bytes
 * and kv_pool_bytes agree with. 0 for non-positive sizes or overflow. */
size_t kv_block_state_bytes_of(const kv_pool_opts *o);

/* Bytes a pool with these options needs (0 if the product overflows). */
size_t kv_pool_bytes(const kv_pool_opts *o);

/* Creates the pool. Returns 0, ERR_INVAL (non-positive sizes, a companion buffer without a name
 * or with one longer than 7 characters), ERR_NOMEM (detail gives the size). */
int kv_pool_create(const kv_pool_opts *o, kv_pool **out);
void kv_pool_destroy(kv_pool *p);

/* Writes every page of the pool's storage once (zeros over zeros: the contents do not change), so
 * the kernel's zeroing of first-touched pages happens now rather than while blocks are first
 * written; from here on the whole pool is resident (flag kv-prefault). */
void kv_pool_prefault(kv_pool *p);

/* Faults in, writable, the pages holding blocks [lo, hi) in every layer and buffer, without
 * writing them (MADV_POPULATE_WRITE: contents unchanged, so any thread may call it while the
 * engine thread uses the pool; the range is clamped to the pool). Returns false, doing nothing,
 * where the kernel cannot (no MADV_POPULATE_WRITE): writing the pages instead would race. */
bool kv_pool_prefault_blocks(kv_pool *p, int32_t lo, int32_t hi);

/* One past the highest block id ever allocated (kv_pool_alloc hands out the lowest free ids
 * first, so this is how far into the pool's storage blocks have reached). Any thread. */
int32_t kv_pool_high_water(const kv_pool *p);

/* Takes a free block (one reference). Returns its id, or -1 if none is free. */
int32_t kv_pool_alloc(kv_pool *p);

/* Adds / drops a reference; the last unref returns the block to the free list. */
void kv_block_ref(kv_pool *p, int32_t id);
void kv_block_unref(kv_pool *p, int32_t id);
int32_t kv_block_refcount(const kv_pool *p, int32_t id);

int64_t kv_pool_n_blocks(const kv_pool *p);
int64_t kv_pool_n_layer(const kv_pool *p);
int64_t kv_pool_n_free(const kv_pool *p);
int64_t kv_pool_block_size(const kv_pool *p);
bool kv_pool_f16(const kv_pool *p);
/* Bytes of one block of one layer's K (and V) rows. */
size_t kv_pool_block_bytes(const kv_pool *p);

/* The buffers, in payload order within a layer: how many, buffer i's name ("k", "v", or the
 * companion's), its bytes per block of one layer, and layer l's region of it. */
int kv_pool_n_buffers(const kv_pool *p);
const char *kv_pool_buffer_name(const kv_pool *p, int i);
size_t kv_pool_buffer_block_bytes(const kv_pool *p, int i);
void *kv_pool_buffer_base(kv_pool *p, int64_t layer, int i);

/* Bytes from block b to block b + 1 in buffer i of any layer: the one per-block stride (layer-major:
 * kv_pool_buffer_block_bytes(i); block-major: kv_block_state_bytes). K's (V's is the same) and
 * the companion's (0 without one). */
size_t kv_pool_buffer_stride(const kv_pool *p, int i);
size_t kv_pool_kv_stride(const kv_pool *p);
size_t kv_pool_ik_stride(const kv_pool *p);

/* Whether the pool is block-major (flag kv-pool-block-major when it was created). */
bool kv_pool_block_major(const kv_pool *p);

/* Block id's bytes as one region of kv_block_state_bytes in payload order (what kv_block_save
 * would write), in a block-major pool; NULL in a layer-major one. Whoever writes it must own the
 * block. */
void *kv_pool_block_payload(kv_pool *p, int32_t id);

/* Bytes of one block's buffers over all layers (what kv_block_save writes). */
size_t kv_block_state_bytes(const kv_pool *p);

/* Copies block id's buffers (every layer, in payload order) to dst (kv_block_state_bytes bytes). */
void kv_block_save(const kv_pool *p, int32_t id, void *dst);

/* Restores block id from src (saved by kv_block_save): K if k, and every other buffer (V and the
 * companion) if v. */
void kv_block_load(kv_pool *p, int32_t id, const void *src, bool k, bool v);

/* Copies every buffer of block src to block dst (copy-on-write). */
void kv_block_copy(kv_pool *p, int32_t dst, int32_t src);

/* Base of layer l's K region; of its V region (the K region in a k_only pool, whose values are
 * the K rows); of its companion region (NULL without one). */
void *kv_pool_k_base(kv_pool *p, int64_t layer);
void *kv_pool_v_base(kv_pool *p, int64_t layer);
void *kv_pool_ik_base(kv_pool *p, int64_t layer);

/* The companion buffer's name (NULL without one) and bytes per block of one layer (0 without). */
const char *kv_pool_ik_name(const kv_pool *p);
size_t kv_pool_ik_block_bytes(const kv_pool *p);

#endif
