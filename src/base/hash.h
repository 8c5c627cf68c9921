/* SPDX-License-Identifier: MIT */
/*
 * hash: the one 64-bit hash of the project, XXH3-64 (libxxhash). It names KV blocks (a chain hash
 * over token ids), checksums their bytes wherever they move, and fingerprints model files. Bytes
 * that are not contiguous are hashed as a chain (each piece seeded with the hash so far), which
 * needs no state to allocate.
 */
#ifndef VERITY_BASE_HASH_H
#define VERITY_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of n bytes at p with seed. */
uint64_t hash64(uint64_t seed, const void *p, size_t n);

#endif
