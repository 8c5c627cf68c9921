/* SPDX-License-Identifier: MIT */
/*
 * kv_blobs: a small free list of blob buffers, so that moving KV blocks between the pool and the
 * tiers does not malloc and free about 200 KB per block (a size above glibc's mmap threshold at
 * first, and page faults on every fresh buffer). The engine thread takes a buffer to encode a
 * block it seals or evicts, the tiers' I/O thread gives it back after the put; the I/O thread
 * takes one to receive a fetched blob, the engine gives it back after decoding it.
 *
 * Buffers are page-aligned (KV_BLOBS_ALIGN) and hold kv_blobs_capacity(n) bytes for a request of
 * n, always more than n and a multiple of the alignment, so a disk tier can read a whole file into
 * one with O_DIRECT and a Redis tier can NUL-terminate what it received. Every buffer, from a
 * free list or not, may also be released with plain free(): a caller that keeps no free list
 * (tests, error paths) loses only the reuse.
 *
 * Only buffers of one capacity are kept (all blocks of a pool have one size); a buffer of another
 * capacity is freed when given back, and so is one beyond the list's bound.
 *
 * Threading: every function may be called from any thread (one mutex, held for a few loads and
 * stores).
 */
#ifndef VERITY_KV_KV_BLOBS_H
#define VERITY_KV_KV_BLOBS_H

#include <stddef.h>
#include <stdint.h>

#define KV_BLOBS_ALIGN 4096

typedef struct kv_blobs kv_blobs;

/* Counters, for tests and the benchmark. */
typedef struct kv_blobs_stats {
    int64_t allocs; /* buffers allocated from the system */
    int64_t reuses; /* buffers handed out again from the free list */
    int64_t cached; /* buffers on the free list now */
} kv_blobs_stats;

/* A free list keeping at most max_cached buffers (0: none kept; every alloc allocates).
 * Returns 0 and *out, ERR_INVAL (max_cached < 0), ERR_NOMEM. */
int kv_blobs_create(int max_cached, kv_blobs **out);

/* Frees the list and every buffer on it. Buffers handed out stay valid (free them with free()).
 * NULL is a no-op. */
void kv_blobs_destroy(kv_blobs *b);

/* The bytes a buffer for n bytes holds: the least multiple of KV_BLOBS_ALIGN above n. */
size_t kv_blobs_capacity(size_t n);

/* A buffer of kv_blobs_capacity(n) bytes, aligned to KV_BLOBS_ALIGN, from b's free list if it
 * holds one of that capacity, else newly allocated (b may be NULL). Its contents are
 * unspecified. NULL when out of memory. */
void *kv_blobs_alloc(kv_blobs *b, size_t n);

/* Gives back buf, which kv_blobs_alloc(any list or NULL, n) returned (n the same). Kept for reuse
 * when b has room and the capacity matches, freed otherwise (b NULL: freed). NULL buf is a
 * no-op. */
void kv_blobs_free(kv_blobs *b, void *buf, size_t n);

/* Copies b's counters to *out (zeros for NULL). */
void kv_blobs_stats_get(kv_blobs *b, kv_blobs_stats *out);

#endif
