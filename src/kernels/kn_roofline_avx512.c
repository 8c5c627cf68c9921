/* SPDX-License-Identifier: MIT */
/* kn_roofline_avx512: inner loops of the roofline probe (see kn_roofline.c). */
#include "kernels/kn.h"

#include <immintrin.h>

double kn_roofline_sum_avx512(const float *p, size_t n);
double kn_roofline_fma_avx512(int64_t iters);

/* Eight independent accumulators, 512 bytes per iteration: more loads in flight than four (a few
 * percent on this VM); no software prefetch (1-4 KiB ahead measured slower). */
double kn_roofline_sum_avx512(const float *p, size_t n) {
    __m512 a[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_setzero_ps();
    for (size_t i = 0; i + 128 <= n; i += 128)
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        a[j] = _mm512_add_ps(a[j], a[j + 4]);
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

double kn_roofline_fma_avx512(int64_t iters) {
    /* 12 independent chains in named registers: enough to cover the FMA latency on two ports */
    /* distinct seeds: identical chains would be merged into one by the compiler */
    __m512 a0 = _mm512_set1_ps(1.00f), a1 = _mm512_set1_ps(1.01f), a2 = _mm512_set1_ps(1.02f);
    __m512 a3 = _mm512_set1_ps(1.03f), a4 = _mm512_set1_ps(1.04f), a5 = _mm512_set1_ps(1.05f);
    __m512 a6 = _mm512_set1_ps(1.06f), a7 = _mm512_set1_ps(1.07f), a8 = _mm512_set1_ps(1.08f);
    __m512 a9 = _mm512_set1_ps(1.09f), a10 = _mm512_set1_ps(1.10f), a11 = _mm512_set1_ps(1.11f);
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm512_fmadd_ps(a0, m, c);
        a1 = _mm512_fmadd_ps(a1, m, c);
        a2 = _mm512_fmadd_ps(a2, m, c);
        a3 = _mm512_fmadd_ps(a3, m, c);
        a4 = _mm512_fmadd_ps(a4, m, c);
        a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c);
        a7 = _mm512_fmadd_ps(a7, m, c);
        a8 = _mm512_fmadd_ps(a8, m, c);
        a9 = _mm512_fmadd_ps(a9, m, c);
        a10 = _mm512_fmadd_ps(a10, m, c);
        a11 = _mm512_fmadd_ps(a11, m, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    float t[16];
    _mm512_storeu_ps(t, s);
    return (double)t[0];
}
