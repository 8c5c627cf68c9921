/* SPDX-License-Identifier: MIT */
/*
 * mem: large, long-lived allocations (packed weights, the KV pool, benchmark buffers) as
 * anonymous mappings advised for transparent huge pages. Streaming through hundreds of megabytes
 * on 4 KiB pages costs a page walk every 64 cache lines; 2 MiB pages remove most of them where the
 * kernel allows (THP "madvise" mode is common). Contents start zeroed; pages materialise on first
 * touch.
 */
#ifndef VERITY_BASE_MEM_H
#define VERITY_BASE_MEM_H

#include <stddef.h>

/* Returns n bytes (64-byte aligned, zeroed), or NULL. */
void *mem_alloc_large(size_t n);

/* Frees a block from mem_alloc_large of the same size. NULL is a no-op. */
void mem_free_large(void *p, size_t n);

#endif
