/* SPDX-License-Identifier: MIT */
/*
 * kn_roofline: measures this machine's roofline at run time, as benchmarks report against it
 * (P5): the read bandwidth of a STREAM-like sum over a buffer much larger than the last-level
 * cache, and the peak fp32 FMA rate of independent FMA chains, each using every thread of a pool.
 *
 * On a shared VM one measurement is not a roof: the read bandwidth of the same buffer moved from
 * 31 to 56 GB/s between two runs minutes apart. So the probe is an object (kn_roof) that keeps
 * its buffer, touched once, and takes one short sample per call; a benchmark samples it before and
 * after every phase it times and reports the median of the samples and their spread, so that each
 * fraction uses a roof measured in the same minutes as the workload (cmd_bench.c).
 *
 * The read loop is the fastest plain one measured on this machine (kn_roofline_avx512.c: eight
 * independent accumulators over aligned 64-byte loads; software prefetch, T0 or NTA, 1-4 KiB
 * ahead, measured slower, the hardware prefetcher already streams it).
 */
#ifndef VERITY_KERNELS_KN_ROOFLINE_H
#define VERITY_KERNELS_KN_ROOFLINE_H

#include "base/pool.h"
#include "kernels/kn.h"

#include <stddef.h>
#include <stdint.h>

/* A roofline probe: a buffer of read bytes, touched by the pool's threads (each its own share, so
 * pages are local), and the pool it runs on (borrowed: it must outlive the probe). */
typedef struct kn_roof kn_roof;

/* Makes a probe over a buffer of `bytes` (each thread's share rounded to 128 floats) on pool p with
 * the kernels of isa. Returns 0 and *out, ERR_INVAL (bytes too small for the pool: under 1 MiB),
 * or ERR_NOMEM naming the size. */
int kn_roof_create(pool *p, size_t bytes, kn_isa isa, kn_roof **out);

/* Frees the probe's buffer. NULL is a no-op. */
void kn_roof_destroy(kn_roof *r);

/* Bytes the probe reads per sample. */
size_t kn_roof_bytes(const kn_roof *r);

/* One read sample: every pool thread sums its share of the buffer once; returns GB/s (1e9
 * bytes/s) of the whole pass. */
double kn_roof_read_gbs(kn_roof *r);

/* One FMA sample: iters iterations of 12 independent FMA chains per thread on every pool thread;
 * returns GFLOP/s (2 flops per lane per FMA). */
double kn_roof_fma_gflops(kn_roof *r, int64_t iters);

/* Best-of-reps read bandwidth in GB/s over a fresh buffer of `bytes` (a probe made and destroyed
 * for the call). Returns a negative error (ERR_NOMEM) if the buffer cannot be allocated. */
double kn_roofline_read_gbs(pool *p, size_t bytes, int reps, kn_isa isa);

/* Best-of-reps fp32 FMA rate in GFLOP/s (2 flops per lane per FMA) over all pool threads. */
double kn_roofline_fma_gflops(pool *p, int reps, kn_isa isa);

#endif
