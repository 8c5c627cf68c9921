/* SPDX-License-Identifier: MIT */
/*
 * hash: see hash.h. A thin layer over libxxhash, so that no other file includes xxhash.h and the
 * choice of hash stays in one place.
 */
#include "base/hash.h"

#include <xxhash.h>

uint64_t hash64(uint64_t seed, const void *p, size_t n) {
    return XXH3_64bits_withSeed(p, n, seed);
}
