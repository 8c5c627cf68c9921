/* SPDX-License-Identifier: MIT */
/*
 * kn_roofline: measures this machine's roofline at run time, as benchmarks report against it
 * (P5): the read bandwidth of a STREAM-like sum over a buffer much larger than the last-level
 * cache, and the peak fp32 FMA rate of independent FMA chains, each using every thread of a pool.
 */
#ifndef VERITY_KERNELS_KN_ROOFLINE_H
#define VERITY_KERNELS_KN_ROOFLINE_H

#include "base/pool.h"
#include "kernels/kn.h"

#include <stddef.h>

/* Best-of-reps read bandwidth in GB/s (1e9 bytes/s) summing a buffer of `bytes` (split evenly
 * over the pool's threads, each touching its own part first so pages are local). Returns a
 * negative error (ERR_NOMEM) if the buffer cannot be allocated. */
double kn_roofline_read_gbs(pool *p, size_t bytes, int reps, kn_isa isa);

/* Best-of-reps fp32 FMA rate in GFLOP/s (2 flops per lane per FMA) over all pool threads. */
double kn_roofline_fma_gflops(pool *p, int reps, kn_isa isa);

#endif
