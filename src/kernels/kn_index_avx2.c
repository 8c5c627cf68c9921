/* SPDX-License-Identifier: MIT */
/*
 * kn_index_avx2: the lane-16 dot product (kn_dot), the lightning indexer's score and the sparse
 * attention row's value sum (kn_index.c) with AVX2+FMA. A dot product keeps kn_dot_ref's lane-16
 * accumulators (lanes 0-7 and 8-15 in two ymm registers, fed in element order with one fma each);
 * a tail of fewer than 16 elements and the lane tree run as in the scalar code, on the same
 * accumulators. The indexer's heads are then folded in order as there, and the value sum is one
 * fma per element as there (F16 values widened exactly by vcvtph2ps), so every result is bitwise
 * the scalar reference's (tests/test_kernels.c compares them).
 */
#include "kernels/kn_int.h"

#include <immintrin.h>

float kn_dot_avx2(const float *a, const float *b, int64_t n) {
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
        float dot = kn_dot_avx2(q + h * d, k, d);
        if (dot > 0.0f)
            s = fmaf(w[h], dot, s);
    }
    return s;
}

void kn_sparse_acc_avx2(float *out, float p, const void *row, bool f16, int64_t n) {
    __m256 vp = _mm256_set1_ps(p);
    int64_t d = 0;
    if (f16) {
        const uint16_t *r = row;
        for (; d + 8 <= n; d += 8) {
            __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + d)));
            _mm256_storeu_ps(out + d, _mm256_fmadd_ps(vp, v, _mm256_loadu_ps(out + d)));
        }
        for (; d < n; d++)
            out[d] = fmaf(p, kn_f16_to_f32(r[d]), out[d]);
    } else {
        const float *r = row;
        for (; d + 8 <= n; d += 8)
            _mm256_storeu_ps(out + d,
                             _mm256_fmadd_ps(vp, _mm256_loadu_ps(r + d), _mm256_loadu_ps(out + d)));
        for (; d < n; d++)
            out[d] = fmaf(p, r[d], out[d]);
    }
}

void kn_f16_widen_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + d))));
    for (; d < n; d++)
        dst[d] = kn_f16_to_f32(src[d]);
}
