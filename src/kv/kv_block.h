/* SPDX-License-Identifier: MIT */
/*
 * kv_block: a KV block's name, checksum and portable form (P2).
 *
 * Name. A full block holding positions [i*B, (i+1)*B) is named by a chain hash: key_i =
 * hash(key_{i-1}, token ids of block i), with key_{-1} = the identity (model file, KV element type,
 * block size). The key therefore stands for every token before and in the block, and for the model
 * and settings that computed it: two blocks with one key hold the same bytes (P1).
 *
 * Checksum. A chain of hashes over the block's bytes, seeded with its key: h = key, then for each
 * layer and each of its buffers in order, h = hash(h, that buffer's bytes of the block). Computed
 * when a block is sealed (kv_prefix), kept beside it, and verified before the block is reused from
 * the pool, and on every load from a tier. Because the seed is the key, a block's bytes cannot be
 * passed off under another prefix, model or element type.
 *
 * Blob. What a tier stores (little-endian, packed, version 1):
 *   magic "VKVB", u32 version, u64 identity, u64 parent key, u64 key, u64 checksum,
 *   u32 block_size, u32 n_layer, u32 n_buffers, u32 reserved,
 *   n_buffers x { char name[8] (NUL-padded), u64 bytes per layer },
 *   i32 tokens[block_size],
 *   payload: for each layer, each buffer's bytes in the order named.
 * Decoding checks every field against the pool and the expected name, the buffer list against the
 * pool's own (a blob with fewer, more or other buffers than the pool restores is refused: a reload
 * must never restore K and leave a companion buffer stale), the checksum over the payload, and
 * after writing the pool block, the checksum over the block as the pool now holds it.
 *
 * Buffers: the pool's own, in its order (kv_pool.h): "k", "v" unless the architecture's values
 * are its K rows (MLA), and a companion buffer where the architecture has one (the DSA indexer's
 * keys, named with their element type: "ik-f32", "ik-f16", "ik-bf16", "ik-fp8"). A blob of a pool
 * without the companion, or with another index-key type, is refused rather than half-restored.
 */
#ifndef VERITY_KV_KV_BLOCK_H
#define VERITY_KV_KV_BLOCK_H

#include "kv/kv_pool.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The chain hash of a block: parent is the previous block's key (the identity for block 0). */
uint64_t kv_block_key(uint64_t parent, const int32_t *toks, int64_t n_toks);

/* The checksum of pool block id as it holds now, for a block named key. */
uint64_t kv_block_checksum(const kv_pool *p, int32_t id, uint64_t key);

/* Bytes of one block's blob for this pool. */
size_t kv_block_blob_bytes(const kv_pool *p);

/* What a blob says it is (see the format above). */
typedef struct kv_block_meta {
    uint64_t identity, parent, key, checksum;
    const int32_t *toks; /* block_size token ids */
} kv_block_meta;

/* Writes pool block id as a blob of kv_block_blob_bytes(p) bytes into out. m names it (toks:
 * block_size ids; checksum as kv_block_checksum gave it when the block was sealed). */
void kv_block_encode(const kv_pool *p, int32_t id, const kv_block_meta *m, void *out);

/* Restores blob (n bytes) into pool block id if it is exactly the block want names (identity,
 * parent, key and tokens equal) and intact. Returns 0; ERR_FORMAT (bad magic, version, size,
 * geometry, or buffers other than the pool's: the detail names the field), ERR_NOTFOUND (a valid
 * blob of another block: identity, parent, key or tokens differ), ERR_CHECKSUM (the payload, or
 * the pool block after the write, does not match the blob's checksum). On any error the block's
 * contents are unspecified (the caller frees it). *checksum_out (may be NULL) gets the checksum. */
int kv_block_decode(kv_pool *p, int32_t id, const kv_block_meta *want, const void *blob, size_t n,
                    uint64_t *checksum_out);

/* In place (kv_xfer's fast path, flag kv-xfer-inplace): a blob is its head (everything before
 * the payload: kv_block_head_bytes) followed by the block's segments (one buffer of one layer
 * each, in payload order), so a sender can write the head and then the segments straight from its
 * pool, and a receiver can read the head into a buffer and the segments straight into a pool block
 * that is still invisible to everyone else, then verify the block once where it lies
 * (kv_block_check_head, then kv_block_checksum against the checksum the head carries). */

/* Bytes of a blob's head for this pool. */
size_t kv_block_head_bytes(const kv_pool *p);

/* Writes the head of pool p's blob for block m (kv_block_head_bytes(p) bytes) into out: the first
 * bytes kv_block_encode writes. */
void kv_block_encode_head(const kv_pool *p, const kv_block_meta *m, void *out);

/* Fills seg[0..n) with pool block id's segments in payload order (one buffer of one layer each,
 * those adjacent in the pool merged into one: a block-major pool's block is a single segment).
 * Returns n (1 <= n <= n_layer x n_buffers), or ERR_RANGE (nothing written) if cap is less than
 * n_layer x n_buffers. The segments point into the pool: whoever writes them must own the block
 * (allocated, not yet seen by anyone else). */
int kv_block_segments(const kv_pool *p, int32_t id, struct iovec *seg, int cap);

/* Checks a blob's head (n bytes) as kv_block_decode checks it: geometry and buffers against the
 * pool, identity, parent, key and tokens against want. Returns 0 and *checksum (the payload
 * checksum the head carries), ERR_FORMAT or ERR_NOTFOUND (detail as kv_block_decode's). */
int kv_block_check_head(const kv_pool *p, const kv_block_meta *want, const void *head, size_t n,
                        uint64_t *checksum);

#endif
