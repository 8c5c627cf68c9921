/* SPDX-License-Identifier: MIT */
/*
 * mem: large, long-lived allocations (packed weights, the KV pool, benchmark buffers) as
 * anonymous mappings advised for transparent huge pages. Streaming through hundreds of megabytes
 * on 4 KiB pages costs a page walk every 64 cache lines; 2 MiB pages remove most of them where the
 * kernel allows (THP "madvise" mode is common). Contents start zeroed; pages materialise on first
 * touch.
 *
 * And the one way a growable array grows (mem_grow): every module's "append one more" goes
 * through it, doubling the capacity so that n appends cost O(n) copying in all.
 */
#ifndef VERITY_BASE_MEM_H
#define VERITY_BASE_MEM_H

#include <stddef.h>

/* Returns n bytes (64-byte aligned, zeroed), or NULL. */
void *mem_alloc_large(size_t n);

/* Frees a block from mem_alloc_large of the same size. NULL is a no-op. */
void mem_free_large(void *p, size_t n);

/* Makes the malloc'd array *items (*cap items of item_bytes each; NULL when *cap is 0) hold at
 * least need items: when *cap is smaller, reallocates it to the first capacity in 16, 32, 64, ...
 * (doubling *cap when it is not 0) that is >= need. Returns 0, or ERR_NOMEM (detail set; *items
 * and *cap unchanged, the array still valid). */
int mem_grow(void **items, size_t *cap, size_t need, size_t item_bytes);

#endif
