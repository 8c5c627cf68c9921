/* SPDX-License-Identifier: MIT */
/*
 * hash: see hash.h. A thin layer over libxxhash, so that no other file includes xxhash.h and the
 * choice of hash stays in one place.
 */
#include "base/hash.h"

#include <xxhash.h>

/* hash_state is an XXH3_state_t: the opaque type only hides the library's name */
uint64_t hash64(uint64_t seed, const void *p, size_t n) {
    return XXH3_64bits_withSeed(p, n, seed);
}

hash_state *hash_state_create(uint64_t seed) {
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return NULL;
    XXH3_64bits_reset_withSeed(st, seed);
    return (hash_state *)st;
}

void hash_state_reset(hash_state *h, uint64_t seed) {
    XXH3_64bits_reset_withSeed((XXH3_state_t *)h, seed);
}

void hash_state_update(hash_state *h, const void *p, size_t n) {
    XXH3_64bits_update((XXH3_state_t *)h, p, n);
}

uint64_t hash_state_digest(const hash_state *h) {
    return XXH3_64bits_digest((const XXH3_state_t *)h);
}

void hash_state_destroy(hash_state *h) {
    if (h)
        XXH3_freeState((XXH3_state_t *)h);
}
