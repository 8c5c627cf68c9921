/* SPDX-License-Identifier: MIT */
/*
 * kn_roofline: see kn_roofline.h. The per-ISA inner loops live in kn_roofline_avx512.c and
 * kn_roofline_avx2.c (and a portable fallback here); this file runs them on every pool thread and
 * times the whole.
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

struct kn_roof {
    pool *p;
    float *buf;
    size_t n; /* floats */
    kn_isa isa;
    int64_t iters;
    double sink[64];
};

static double rl_sum_scalar(const float *p, size_t n) {
    float acc[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += p[i + (size_t)j];
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

static void rl_touch(void *vctx, int ith, int nth) {
    kn_roof *c = vctx;
    size_t b = c->n * (size_t)ith / (size_t)nth, e = c->n * (size_t)(ith + 1) / (size_t)nth;
    for (size_t i = b; i < e; i++)
        c->buf[i] = (float)(i & 7);
}

static void rl_read(void *vctx, int ith, int nth) {
    kn_roof *c = vctx;
    size_t b = c->n * (size_t)ith / (size_t)nth, e = c->n * (size_t)(ith + 1) / (size_t)nth;
    b &= ~(size_t)127; /* the SIMD loops take 128 floats per iteration */
    e &= ~(size_t)127;
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

int kn_roof_create(pool *p, size_t bytes, kn_isa isa, kn_roof **out) {
    *out = NULL;
    if (bytes < ((size_t)1 << 20))
        return err_set(ERR_INVAL, "roofline: a read buffer of %zu bytes is under 1 MiB", bytes);
    kn_roof *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(ERR_NOMEM, "roofline: out of memory");
    r->p = p;
    r->isa = isa;
    r->n = bytes / sizeof(float);
    r->buf = mem_alloc_large(r->n * sizeof(float)); /* the same pages the weights live on */
    if (!r->buf) {
        free(r);
        return err_set(ERR_NOMEM, "roofline: cannot allocate a read buffer of %zu bytes", bytes);
    }
    pool_run(p, rl_touch, r);
    *out = r;
    return 0;
}

void kn_roof_destroy(kn_roof *r) {
    if (!r)
        return;
    mem_free_large(r->buf, r->n * sizeof(float));
    free(r);
}

size_t kn_roof_bytes(const kn_roof *r) {
    return r->n * sizeof(float);
}

double kn_roof_read_gbs(kn_roof *r) {
    int64_t t0 = clock_now_ns();
    pool_run(r->p, rl_read, r);
    double dt = (double)(clock_now_ns() - t0) * 1e-9;
    return (double)(r->n * sizeof(float)) / dt * 1e-9;
}

double kn_roofline_read_gbs(pool *p, size_t bytes, int reps, kn_isa isa) {
    kn_roof *r;
    int rc = kn_roof_create(p, bytes, isa, &r);
    if (rc)
        return rc;
    double best = 0;
    for (int i = 0; i < reps; i++) {
        double g = kn_roof_read_gbs(r);
        if (g > best)
            best = g;
    }
    kn_roof_destroy(r);
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
    kn_roof *c = vctx;
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

/* flops per iteration per thread: 12 chains x lanes x 2 (the scalar fallback: 8 chains x 2) */
static double rl_flops_iter(kn_isa isa) {
    return isa == KN_ISA_AVX512 ? 12 * 16 * 2 : isa == KN_ISA_AVX2 ? 12 * 8 * 2 : 8 * 2;
}

double kn_roof_fma_gflops(kn_roof *r, int64_t iters) {
    r->iters = iters;
    int64_t t0 = clock_now_ns();
    pool_run(r->p, rl_fma, r);
    double dt = (double)(clock_now_ns() - t0) * 1e-9;
    return (double)iters * rl_flops_iter(r->isa) * pool_size(r->p) / dt * 1e-9;
}

double kn_roofline_fma_gflops(pool *p, int reps, kn_isa isa) {
    kn_roof r;
    memset(&r, 0, sizeof r);
    r.p = p;
    r.isa = isa;
    int64_t iters = isa == KN_ISA_SCALAR ? 2000000 : 20000000;
    double best = 0;
    for (int i = 0; i < reps; i++) {
        double g = kn_roof_fma_gflops(&r, iters);
        if (g > best)
            best = g;
    }
    return best;
}
