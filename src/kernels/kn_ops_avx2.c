/* SPDX-License-Identifier: MIT */
/*
 * kn_ops_avx2: AVX2+FMA+F16C versions of the row kernels and attention. A lane-16 accumulator is
 * two ymm registers (lanes 0-7 and 8-15) fed in element order; the tree is lo+hi, then 128+128,
 * 64+64, 32+32, the same additions as the reference and the AVX-512 version.
 */
#include "kernels/kn_int.h"

#include <immintrin.h>

static inline __m256i kx2_mask(int64_t c) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(c < 0 ? 0 : c > 8 ? 8 : c)), idx);
}

static inline float kx2_tree(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

static inline __m256 kx2_exp(__m256 x) {
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.38888889e-3f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.33333333e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.16666667e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.66666667e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256i b127 = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, b127), 23));
    __m256 s2 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), b127), 23));
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    __m256 in_lo = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    __m256 hi = _mm256_cmp_ps(x, _mm256_set1_ps(88.5f), _CMP_GT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    res = _mm256_and_ps(res, in_lo);
    res = _mm256_blendv_ps(res, _mm256_set1_ps(INFINITY), hi);
    res = _mm256_blendv_ps(res, x, nan);
    return res;
}

float kn_sumsq_avx2(const float *x, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __m256 a = _mm256_maskload_ps(x + i, kx2_mask(n - i));
        __m256 b = _mm256_maskload_ps(x + i + 8, kx2_mask(n - i - 8));
        lo = _mm256_fmadd_ps(a, a, lo);
        hi = _mm256_fmadd_ps(b, b, hi);
    }
    return kx2_tree(lo, hi);
}

void kn_scale_mul_avx2(const float *x, float r, const float *w, int64_t n, float *y) {
    __m256 vr = _mm256_set1_ps(r);
    for (int64_t i = 0; i < n; i += 8) {
        __m256i mk = kx2_mask(n - i);
        __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, mk), vr);
        if (w)
            v = _mm256_mul_ps(v, _mm256_maskload_ps(w + i, mk));
        _mm256_maskstore_ps(y + i, mk, v);
    }
}

void kn_swiglu_avx2(const float *g, const float *u, int64_t n, float *h) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    for (int64_t i = 0; i < n; i += 8) {
        __m256i mk = kx2_mask(n - i);
        __m256 gv = _mm256_maskload_ps(g + i, mk);
        __m256 e = kx2_exp(_mm256_xor_ps(gv, sign));
        __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_maskstore_ps(h + i, mk, _mm256_mul_ps(s, _mm256_maskload_ps(u + i, mk)));
    }
}

void kn_store_kv_avx2(void *dst, const float *src, int64_t n, bool f16) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i hv = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(d + i), hv);
    }
    for (; i < n; i++)
        d[i] = kn_f32_to_f16(src[i]);
}

/* Loads 8 elements of a K/V row from d (masked) as floats. */
static inline __m256 kx2_load_row(const void *row, bool f16, int64_t d, int64_t hd) {
    if (f16) {
        uint16_t tmp[8] = {0};
        int64_t c = hd - d < 8 ? hd - d : 8;
        memcpy(tmp, (const uint16_t *)row + d, (size_t)c * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
    }
    return _mm256_maskload_ps((const float *)row + d, kx2_mask(hd - d));
}

void kn_attn_row_avx2(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t hd, int64_t n_pos,
                      float scale, int64_t chunk, float *scratch, float *out) {
    float m = -INFINITY, l = 0.0f;
    for (int64_t d = 0; d < hd; d++)
        out[d] = 0.0f;
    int64_t start = kv->window > 0 && n_pos > kv->window ? n_pos - kv->window : 0;
    for (int64_t cb = start - start % chunk; cb < n_pos; cb += chunk) {
        int64_t c0 = cb < start ? start : cb;
        int64_t c1 = cb + chunk < n_pos ? cb + chunk : n_pos;
        float mc = -INFINITY;
        for (int64_t p = c0; p < c1; p++) {
            const void *row = kn_attn_row_ptr(kv, kv->k_base, p, kvh, hd);
            __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d += 16) {
                lo = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, kx2_mask(hd - d)),
                                     kx2_load_row(row, kv->f16, d, hd), lo);
                if (d + 8 < hd)
                    hi = _mm256_fmadd_ps(_mm256_maskload_ps(q + d + 8, kx2_mask(hd - d - 8)),
                                         kx2_load_row(row, kv->f16, d + 8, hd), hi);
            }
            float s = kx2_tree(lo, hi) * scale;
            scratch[p - c0] = s;
            mc = kn_maxf(mc, s);
        }
        float mn = kn_maxf(m, mc);
        float alpha = kn_expf(m - mn);
        l = l * alpha;
        __m256 va = _mm256_set1_ps(alpha);
        for (int64_t d = 0; d < hd; d += 8) {
            __m256i mk = kx2_mask(hd - d);
            _mm256_maskstore_ps(out + d, mk, _mm256_mul_ps(_mm256_maskload_ps(out + d, mk), va));
        }
        __m256 vmn = _mm256_set1_ps(mn);
        for (int64_t p = 0; p < c1 - c0; p += 8) {
            __m256i mk = kx2_mask(c1 - c0 - p);
            __m256 e = kx2_exp(_mm256_sub_ps(_mm256_maskload_ps(scratch + p, mk), vmn));
            _mm256_maskstore_ps(scratch + p, mk, e);
        }
        for (int64_t p = c0; p < c1; p++) {
            float pj = scratch[p - c0];
            l = l + pj;
            const void *row = kn_attn_row_ptr(kv, kv->v_base, p, kvh, hd);
            __m256 vp = _mm256_set1_ps(pj);
            for (int64_t d = 0; d < hd; d += 8) {
                __m256i mk = kx2_mask(hd - d);
                __m256 o = _mm256_maskload_ps(out + d, mk);
                o = _mm256_fmadd_ps(vp, kx2_load_row(row, kv->f16, d, hd), o);
                _mm256_maskstore_ps(out + d, mk, o);
            }
        }
        m = mn;
    }
    __m256 vl = _mm256_set1_ps(l);
    for (int64_t d = 0; d < hd; d += 8) {
        __m256i mk = kx2_mask(hd - d);
        _mm256_maskstore_ps(out + d, mk, _mm256_div_ps(_mm256_maskload_ps(out + d, mk), vl));
    }
}
