/* SPDX-License-Identifier: MIT */
/*
 * arena: a bump allocator for memory that dies together (a request, a parsed document). Nothing
 * in an arena is freed one by one (style.md, after nginx's pools); arena_reset() or
 * arena_destroy() releases everything at once. Allocations are 16-byte aligned. An optional byte
 * limit bounds what one arena may hold, so one oversized request cannot exhaust the process.
 * Not thread-safe: an arena belongs to one thread at a time.
 */
#ifndef VERITY_BASE_ARENA_H
#define VERITY_BASE_ARENA_H

#include <stddef.h>

typedef struct arena arena;

/* Creates an arena whose chunks are at least chunk_bytes (0 = 64 KiB) and whose total allocation
 * may not exceed limit_bytes (0 = unlimited). Returns NULL on allocation failure. */
arena *arena_create(size_t chunk_bytes, size_t limit_bytes);

/* Frees every chunk and the arena. NULL is a no-op. */
void arena_destroy(arena *a);

/* Returns n bytes (16-byte aligned, uninitialised), or NULL if memory or the limit ran out. n == 0
 * returns a valid unique pointer. */
void *arena_alloc(arena *a, size_t n);

/* Like arena_alloc, zero-filled; n * size checked for overflow. */
void *arena_calloc(arena *a, size_t n, size_t size);

/* Makes the array *items in a (*cap items of item_bytes each; NULL when *cap is 0) hold at least
 * need items: when *cap is smaller, allocates the first capacity in 4, 8, 16, ... (doubling *cap
 * when it is not 0) that is >= need and copies the *cap old items into it. The outgrown array
 * stays in the arena until it dies, less than the new one, so n appends cost O(n) bytes and
 * copies. Returns 0, or ERR_NOMEM (memory or the arena's limit ran out; detail set; *items and
 * *cap unchanged). */
int arena_grow(arena *a, void **items, size_t *cap, size_t need, size_t item_bytes);

/* Copies s[0..n) into the arena with a NUL after it. NULL on failure. */
char *arena_strndup(arena *a, const char *s, size_t n);

/* Frees every chunk but the first and makes the whole arena available again. */
void arena_reset(arena *a);

/* Bytes handed out since creation or the last reset. */
size_t arena_used(const arena *a);

#endif
