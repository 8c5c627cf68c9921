/* SPDX-License-Identifier: MIT */
/*
 * rng: a counter-based random generator, Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11; the Random123 reference). A draw is a pure
 * function of (seed, counter): there is no generator state to carry, advance, share or lock, so
 * the value drawn for output position p of a request never depends on how many draws happened
 * before, in which order sequences were sampled, or on which thread (P1, design.md).
 *
 * Mapping: key = {lo32(seed), hi32(seed)}, counter block = {lo32(counter), hi32(counter), 0, 0};
 * the 64-bit result is out[0] | out[1] << 32. For a fixed key Philox is a bijection on the
 * 128-bit counter block, so two different counters under one seed can never produce the same
 * block; different seeds are different keys. Words 2 and 3 of the counter block are reserved
 * (zero) for future independent streams under one seed (e.g. speculative-decoding acceptance).
 *
 * Only 32x32->64-bit integer multiplies, xors and adds: the bits are identical on every machine,
 * compiler and optimisation level. Thread-safe (no state).
 */
#ifndef VERITY_SAMPLE_RNG_H
#define VERITY_SAMPLE_RNG_H

#include <stdint.h>

/* One Philox4x32-10 block: out = philox(ctr, key), bit-compatible with Random123's
 * philox4x32(ctr, key) at 10 rounds (its published known-answer vectors hold). out may alias
 * ctr. Exposed for known-answer tests and for callers that want all 128 bits. */
void rng_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Returns 64 uniformly distributed random bits for (seed, counter); see the mapping above. */
uint64_t rng_u64(uint64_t seed, uint64_t counter);

/* Returns a double uniformly distributed in [0, 1): the top 53 bits of rng_u64(seed, counter)
 * times 2^-53, so every value is a multiple of 2^-53 and 1.0 is never returned. */
double rng_uniform(uint64_t seed, uint64_t counter);

#endif
