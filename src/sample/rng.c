/* SPDX-License-Identifier: MIT */
/*
 * rng: Philox4x32-10, written from the round function in the SC'11 paper and checked against
 * Random123's known-answer vectors (tests/test_sample.c). Each round multiplies two counter words
 * by fixed odd constants, keeps the high and low halves, and mixes in the round key; the key is
 * bumped by two Weyl constants between rounds. Nothing here depends on floating point except the
 * final exact conversion in rng_uniform (an integer below 2^53 times a power of two).
 */
#include "sample/rng.h"

#define PHILOX_M0 UINT32_C(0xD2511F53)
#define PHILOX_M1 UINT32_C(0xCD9E8D57)
#define PHILOX_W0 UINT32_C(0x9E3779B9)
#define PHILOX_W1 UINT32_C(0xBB67AE85)

void rng_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t rng_u64(uint64_t seed, uint64_t counter) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    uint32_t out[4];
    rng_philox4x32_10(ctr, key, out);
    return (uint64_t)out[0] | (uint64_t)out[1] << 32;
}

double rng_uniform(uint64_t seed, uint64_t counter) {
    return (double)(rng_u64(seed, counter) >> 11) * 0x1.0p-53;
}
