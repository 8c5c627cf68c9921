/* SPDX-License-Identifier: MIT */
/*
 * kv_block: see kv_block.h. A block's bytes are read and written in place, layer by layer and
 * buffer by buffer (one segment each, addressed through the pool's per-buffer stride, so either
 * pool layout of kv_pool.h works), without a staging copy. Integers in the blob are written
 * little-endian byte by byte, so the format does not depend on the host.
 */
#include "kv/kv_block.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/hash.h"

#include <string.h>

#define KV_BLOB_MAGIC    "VKVB"
#define KV_BLOB_VERSION  1u
#define KV_BLOB_FIXED    (4 + 4 + 8 * 4 + 4 * 4)
#define KV_BLOB_BUF_DESC 16

/* Block id's bytes of the pool's buffer buf (kv_pool_buffer_name) of a layer. */
static unsigned char *kv_block_bufp(const kv_pool *p, int32_t id, int64_t layer, int buf) {
    return (unsigned char *)kv_pool_buffer_base((kv_pool *)p, layer, buf) +
           (size_t)id * kv_pool_buffer_stride(p, buf);
}

uint64_t kv_block_key(uint64_t parent, const int32_t *toks, int64_t n_toks) {
    return hash64(parent, toks, (size_t)n_toks * sizeof *toks);
}

/* The checksum is a chain over the block's segments (one buffer of one layer each, in payload
 * order): h = key, then h = hash64(h, segment) for each. A chain needs no hashing state, so
 * sealing a block allocates nothing on the engine's step. */
uint64_t kv_block_checksum(const kv_pool *p, int32_t id, uint64_t key) {
    uint64_t h = key;
    for (int64_t l = 0; l < kv_pool_n_layer(p); l++)
        for (int b = 0; b < kv_pool_n_buffers(p); b++)
            h = hash64(h, kv_block_bufp(p, id, l, b), kv_pool_buffer_block_bytes(p, b));
    return h;
}

/* The same chain over a blob's payload. */
static uint64_t kv_block_payload_sum(const kv_pool *p, const unsigned char *pl, uint64_t key) {
    uint64_t h = key;
    for (int64_t l = 0; l < kv_pool_n_layer(p); l++)
        for (int b = 0; b < kv_pool_n_buffers(p); b++) {
            size_t bb = kv_pool_buffer_block_bytes(p, b);
            h = hash64(h, pl, bb);
            pl += bb;
        }
    return h;
}

static size_t kv_block_header_bytes(const kv_pool *p) {
    return KV_BLOB_FIXED + (size_t)kv_pool_n_buffers(p) * KV_BLOB_BUF_DESC +
           (size_t)kv_pool_block_size(p) * sizeof(int32_t);
}

size_t kv_block_blob_bytes(const kv_pool *p) {
    return kv_block_header_bytes(p) + kv_block_state_bytes(p);
}

static unsigned char *put_u32(unsigned char *d, uint32_t v) {
    for (int i = 0; i < 4; i++)
        d[i] = (unsigned char)(v >> (8 * i));
    return d + 4;
}
static unsigned char *put_u64(unsigned char *d, uint64_t v) {
    for (int i = 0; i < 8; i++)
        d[i] = (unsigned char)(v >> (8 * i));
    return d + 8;
}
static uint32_t get_u32(const unsigned char *s) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)s[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *s) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)s[i] << (8 * i);
    return v;
}

size_t kv_block_head_bytes(const kv_pool *p) {
    return kv_block_header_bytes(p);
}

void kv_block_encode_head(const kv_pool *p, const kv_block_meta *m, void *out) {
    unsigned char *d = out;
    int64_t bs = kv_pool_block_size(p);
    memcpy(d, KV_BLOB_MAGIC, 4);
    d = put_u32(d + 4, KV_BLOB_VERSION);
    d = put_u64(d, m->identity);
    d = put_u64(d, m->parent);
    d = put_u64(d, m->key);
    d = put_u64(d, m->checksum);
    d = put_u32(d, (uint32_t)bs);
    d = put_u32(d, (uint32_t)kv_pool_n_layer(p));
    int nbuf = kv_pool_n_buffers(p);
    d = put_u32(d, (uint32_t)nbuf);
    d = put_u32(d, 0);
    for (int b = 0; b < nbuf; b++) {
        const char *name = kv_pool_buffer_name(p, b);
        memset(d, 0, 8);
        memcpy(d, name, strlen(name));
        d = put_u64(d + 8, kv_pool_buffer_block_bytes(p, b));
    }
    for (int64_t i = 0; i < bs; i++)
        d = put_u32(d, (uint32_t)m->toks[i]);
}

void kv_block_encode(const kv_pool *p, int32_t id, const kv_block_meta *m, void *out) {
    kv_block_encode_head(p, m, out);
    unsigned char *d = (unsigned char *)out + kv_block_header_bytes(p);
    for (int64_t l = 0; l < kv_pool_n_layer(p); l++)
        for (int b = 0; b < kv_pool_n_buffers(p); b++) {
            memcpy(d, kv_block_bufp(p, id, l, b), kv_pool_buffer_block_bytes(p, b));
            d += kv_pool_buffer_block_bytes(p, b);
        }
}

int kv_block_segments(const kv_pool *p, int32_t id, struct iovec *seg, int cap) {
    int64_t n = kv_pool_n_layer(p) * kv_pool_n_buffers(p);
    if (n > cap)
        return err_set(ERR_RANGE, "kv block %d: %lld segments, room for %d", id, (long long)n, cap);
    int i = 0;
    for (int64_t l = 0; l < kv_pool_n_layer(p); l++)
        for (int b = 0; b < kv_pool_n_buffers(p); b++) {
            unsigned char *s = kv_block_bufp(p, id, l, b);
            size_t bb = kv_pool_buffer_block_bytes(p, b);
            if (i > 0 && (unsigned char *)seg[i - 1].iov_base + seg[i - 1].iov_len == s)
                seg[i - 1].iov_len += bb; /* adjacent in the pool: one piece */
            else
                seg[i++] = (struct iovec){s, bb};
        }
    return i;
}

/* Checks the header of blob (n bytes; want_n: a whole blob's or a head's) against the pool's
 * geometry and buffers. */
static int kv_block_check_header(const kv_pool *p, const unsigned char *s, size_t n,
                                 size_t want_n) {
    if (n < KV_BLOB_FIXED || memcmp(s, KV_BLOB_MAGIC, 4) != 0)
        return err_set(ERR_FORMAT, "kv blob: bad magic or %zu bytes", n);
    if (get_u32(s + 4) != KV_BLOB_VERSION)
        return err_set(ERR_FORMAT, "kv blob: version %u, expected %u", get_u32(s + 4),
                       KV_BLOB_VERSION);
    const unsigned char *g = s + 8 + 32;
    if (get_u32(g) != (uint32_t)kv_pool_block_size(p) ||
        get_u32(g + 4) != (uint32_t)kv_pool_n_layer(p))
        return err_set(ERR_FORMAT,
                       "kv blob: geometry %u positions x %u layers, the pool has %lld x %lld",
                       get_u32(g), get_u32(g + 4), (long long)kv_pool_block_size(p),
                       (long long)kv_pool_n_layer(p));
    uint32_t nbuf = get_u32(g + 8);
    if (nbuf != (uint32_t)kv_pool_n_buffers(p))
        return err_set(ERR_FORMAT,
                       "kv blob: %u buffers, the pool restores %d: refused (a partial restore "
                       "would leave a buffer stale)",
                       nbuf, kv_pool_n_buffers(p));
    if (n != want_n)
        return err_set(ERR_FORMAT, "kv blob%s: %zu bytes, expected %zu",
                       want_n == kv_block_blob_bytes(p) ? "" : " head", n, want_n);
    const unsigned char *bd = s + KV_BLOB_FIXED;
    for (int b = 0; b < kv_pool_n_buffers(p); b++, bd += KV_BLOB_BUF_DESC) {
        char name[9] = {0};
        memcpy(name, bd, 8);
        size_t bb = kv_pool_buffer_block_bytes(p, b);
        if (strcmp(name, kv_pool_buffer_name(p, b)) != 0 || get_u64(bd + 8) != bb)
            return err_set(ERR_FORMAT,
                           "kv blob: buffer %d is \"%s\" of %llu bytes, the pool's is \"%s\" of "
                           "%zu",
                           b, name, (unsigned long long)get_u64(bd + 8),
                           kv_pool_buffer_name(p, b), bb);
    }
    return 0;
}

/* Checks that blob s (its header checked) names exactly the block want names; its checksum into
 * *checksum. */
static int kv_block_check_name(const kv_pool *p, const kv_block_meta *want, const unsigned char *s,
                               uint64_t *checksum) {
    int64_t bs = kv_pool_block_size(p);
    uint64_t identity = get_u64(s + 8), parent = get_u64(s + 16), key = get_u64(s + 24);
    const unsigned char *tk = s + KV_BLOB_FIXED + (size_t)kv_pool_n_buffers(p) * KV_BLOB_BUF_DESC;
    bool same = identity == want->identity && parent == want->parent && key == want->key;
    for (int64_t i = 0; same && i < bs; i++)
        same = get_u32(tk + 4 * i) == (uint32_t)want->toks[i];
    if (!same)
        return err_set(ERR_NOTFOUND, "kv blob: holds block %016llx, expected %016llx",
                       (unsigned long long)key, (unsigned long long)want->key);
    *checksum = get_u64(s + 32);
    return 0;
}

int kv_block_check_head(const kv_pool *p, const kv_block_meta *want, const void *head, size_t n,
                        uint64_t *checksum) {
    int rc = kv_block_check_header(p, head, n, kv_block_header_bytes(p));
    return rc ? rc : kv_block_check_name(p, want, head, checksum);
}

int kv_block_decode(kv_pool *p, int32_t id, const kv_block_meta *want, const void *blob, size_t n,
                    uint64_t *checksum_out) {
    const unsigned char *s = blob;
    uint64_t key = want->key, sum = 0;
    int rc = kv_block_check_header(p, s, n, kv_block_blob_bytes(p));
    if (rc || (rc = kv_block_check_name(p, want, s, &sum)))
        return rc;
    const unsigned char *pl = s + kv_block_header_bytes(p);
    if (kv_block_payload_sum(p, pl, key) != sum)
        return err_set(ERR_CHECKSUM, "kv blob %016llx: payload checksum mismatch",
                       (unsigned long long)key);
    /* FAULT (i): the reload restores K but not V or the companion (the incident's host tier
     * that forgot a companion buffer); the check below must catch it */
    bool skip_v = FLAG_FAULT(TIER_KONLY);
    for (int64_t l = 0; l < kv_pool_n_layer(p); l++)
        for (int b = 0; b < kv_pool_n_buffers(p); b++) {
            size_t bb = kv_pool_buffer_block_bytes(p, b);
            if (!(skip_v && b > 0))
                memcpy(kv_block_bufp(p, id, l, b), pl, bb);
            pl += bb;
        }
    if (kv_block_checksum(p, id, key) != sum)
        return err_set(ERR_CHECKSUM,
                       "kv blob %016llx: block %d differs from the blob after the load",
                       (unsigned long long)key, id);
    if (checksum_out)
        *checksum_out = sum;
    return 0;
}
