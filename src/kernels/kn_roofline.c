/* SPDX-License-Identifier: MIT */
/*
 * kn_roofline: see kn_roofline.h. The per-ISA inner loops live in kn_roofline_avx512.c (and a
 * portable fallback here); this file runs them on every pool thread and times the whole.
 */
#include "kernels/kn_roofline.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

double kn_roofline_sum_avx512(const float *p, size_t n);
double kn_roofline_fma_avx512(int64_t iters);
double kn_roofline_sum_avx2(const float *p, size_t n);
double kn_roofline_fma_avx2(int64_t iters);

typedef struct rl_ctx {
    float *buf;
    size_t n; /* floats */
    kn_isa isa;
    int64_t iters;
    double sink[64];
} rl_ctx;

static double rl_sum_scalar(const float *p, size_t n) {
    float acc[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += p[i + (size_t)j];
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

static void rl_touch(void *vctx, int ith, int nth) {
    rl_ctx *c = vctx;
    size_t b = c->n * (size_t)ith / (size_t)nth, e = c->n * (size_t)(ith + 1) / (size_t)nth;
    for (size_t i = b; i < e; i++)
        c->buf[i] = (float)(i & 7);
}

static void rl_read(void *vctx, int ith, int nth) {
    rl_ctx *c = vctx;
    size_t b = c->n * (size_t)ith / (size_t)nth, e = c->n * (size_t)(ith + 1) / (size_t)nth;
    b &= ~(size_t)15;
    e &= ~(size_t)15;
    double s;
#ifndef VERITY_NO_SIMD
    if (c->isa == KN_ISA_AVX512)
        s = kn_roofline_sum_avx512(c->buf + b, e - b);
    else if (c->isa == KN_ISA_AVX2)
        s = kn_roofline_sum_avx2(c->buf + b, e - b);
    else
#endif
        s = rl_sum_scalar(c->buf + b, e - b);
    c->sink[ith & 63] += s;
}

double kn_roofline_read_gbs(pool *p, size_t bytes, int reps, kn_isa isa) {
    rl_ctx c;
    memset(&c, 0, sizeof c);
    c.n = bytes / sizeof(float);
    c.isa = isa;
    c.buf = mem_alloc_large(c.n * sizeof(float)); /* the same pages the weights live on */
    if (!c.buf)
        return ERR_NOMEM;
    pool_run(p, rl_touch, &c);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = clock_now_ns();
        pool_run(p, rl_read, &c);
        double dt = (double)(clock_now_ns() - t0) * 1e-9;
        double gbs = (double)(c.n * sizeof(float)) / dt * 1e-9;
        if (gbs > best)
            best = gbs;
    }
    mem_free_large(c.buf, c.n * sizeof(float));
    return best;
}

static double rl_fma_scalar(int64_t iters) {
    float a[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++)
            a[j] = fmaf(a[j], 0.9999999f, 1e-7f);
    return (double)(a[0] + a[7]);
}

static void rl_fma(void *vctx, int ith, int nth) {
    (void)nth;
    rl_ctx *c = vctx;
    double s;
#ifndef VERITY_NO_SIMD
    if (c->isa == KN_ISA_AVX512)
        s = kn_roofline_fma_avx512(c->iters);
    else if (c->isa == KN_ISA_AVX2)
        s = kn_roofline_fma_avx2(c->iters);
    else
#endif
        s = rl_fma_scalar(c->iters);
    c->sink[ith & 63] += s;
}

double kn_roofline_fma_gflops(pool *p, int reps, kn_isa isa) {
    rl_ctx c;
    memset(&c, 0, sizeof c);
    c.isa = isa;
    /* flops per iteration per thread: 12 chains x lanes x 2 */
    double lanes = isa == KN_ISA_AVX512 ? 16 : isa == KN_ISA_AVX2 ? 8 : 0.5;
    c.iters = isa == KN_ISA_SCALAR ? 2000000 : 20000000;
    double flops_thread = (double)c.iters * 12 * lanes * 2;
    if (isa == KN_ISA_SCALAR)
        flops_thread = (double)c.iters * 8 * 2;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = clock_now_ns();
        pool_run(p, rl_fma, &c);
        double dt = (double)(clock_now_ns() - t0) * 1e-9;
        double g = flops_thread * pool_size(p) / dt * 1e-9;
        if (g > best)
            best = g;
    }
    return best;
}
