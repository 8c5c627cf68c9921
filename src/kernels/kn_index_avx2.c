/* SPDX-License-Identifier: MIT */
/*
 * kn_index_avx2: the lightning indexer's score (kn_index.c) with AVX2+FMA. Each head's dot
 * product keeps kn_dot_ref's lane-16 accumulators (lanes 0-7 and 8-15 in two ymm registers, fed
 * in element order with one fma each); a tail of fewer than 16 elements and the lane tree run as
 * in the scalar code, on the same accumulators. The heads are then folded in order as there, so
 * the result is bitwise the scalar reference's (tests/test_kernels.c compares them).
 */
#include "kernels/kn_int.h"

#include <immintrin.h>

static float kx_index_dot(const float *a, const float *b, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    float acc[16];
    _mm256_storeu_ps(acc, lo);
    _mm256_storeu_ps(acc + 8, hi);
    for (; i < n; i++)
        acc[i & 15] = fmaf(a[i], b[i], acc[i & 15]);
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] = acc[j] + acc[j + w];
    return acc[0];
}

float kn_index_score_avx2(const float *q, const float *w, int64_t n_head, int64_t d,
                          const float *k) {
    float s = 0.0f;
    for (int64_t h = 0; h < n_head; h++) {
        float dot = kx_index_dot(q + h * d, k, d);
        if (dot > 0.0f)
            s = fmaf(w[h], dot, s);
    }
    return s;
}
