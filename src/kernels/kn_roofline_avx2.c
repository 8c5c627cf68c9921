/* SPDX-License-Identifier: MIT */
/* kn_roofline_avx2: inner loops of the roofline probe (see kn_roofline.c). */
#include "kernels/kn.h"

#include <immintrin.h>

double kn_roofline_sum_avx2(const float *p, size_t n);
double kn_roofline_fma_avx2(int64_t iters);

/* Eight independent accumulators, 256 bytes per iteration (as the AVX-512 loop). */
double kn_roofline_sum_avx2(const float *p, size_t n) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_ps();
    for (size_t i = 0; i + 64 <= n; i += 64)
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
    float t[8], s = 0;
#pragma GCC unroll 8
    for (int j = 1; j < 8; j++)
        a[0] = _mm256_add_ps(a[0], a[j]);
    _mm256_storeu_ps(t, a[0]);
    for (int j = 0; j < 8; j++)
        s += t[j];
    return s;
}

double kn_roofline_fma_avx2(int64_t iters) {
    /* 12 independent chains in named registers: enough to cover the FMA latency on two ports */
    /* distinct seeds: identical chains would be merged into one by the compiler */
    __m256 a0 = _mm256_set1_ps(1.00f), a1 = _mm256_set1_ps(1.01f), a2 = _mm256_set1_ps(1.02f);
    __m256 a3 = _mm256_set1_ps(1.03f), a4 = _mm256_set1_ps(1.04f), a5 = _mm256_set1_ps(1.05f);
    __m256 a6 = _mm256_set1_ps(1.06f), a7 = _mm256_set1_ps(1.07f), a8 = _mm256_set1_ps(1.08f);
    __m256 a9 = _mm256_set1_ps(1.09f), a10 = _mm256_set1_ps(1.10f), a11 = _mm256_set1_ps(1.11f);
    const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float t[8];
    _mm256_storeu_ps(t, s);
    return (double)t[0];
}
