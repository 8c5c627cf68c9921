/* SPDX-License-Identifier: MIT */
/*
 * hash: the one 64-bit hash of the project, XXH3-64 (libxxhash). It names KV blocks (a chain hash
 * over token ids), checksums their bytes wherever they move, and fingerprints model files. A
 * streaming state hashes bytes that are not contiguous (a block's K and V over every layer) and
 * gives exactly the one-shot hash of their concatenation.
 */
#ifndef VERITY_BASE_HASH_H
#define VERITY_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of n bytes at p with seed. */
uint64_t hash64(uint64_t seed, const void *p, size_t n);

typedef struct hash_state hash_state;

/* A streaming hash: create with a seed (NULL when out of memory), feed bytes in order, read the
 * digest (the state stays usable), reset to start over, destroy. */
hash_state *hash_state_create(uint64_t seed);
void hash_state_reset(hash_state *h, uint64_t seed);
void hash_state_update(hash_state *h, const void *p, size_t n);
uint64_t hash_state_digest(const hash_state *h);
void hash_state_destroy(hash_state *h);

#endif
