/* SPDX-License-Identifier: MIT */
/*
 * kn_ops_avx512: AVX-512 versions of the row kernels and attention (see kn_ops.c for the
 * canonical order they reproduce). Lane-16 reductions are one zmm accumulator fed in element
 * order (tails by zero-masked loads, which add +0 and change nothing because an accumulator that
 * starts at +0 can never become -0), reduced by the fixed tree 256+256, 128+128, 64+64, 32+32.
 * kx_exp512 is kn_expf lane by lane: same constants, same fma sequence, same two-step scaling.
 */
#include "kernels/kn_int.h"

#include <immintrin.h>

static inline __mmask16 kx_tail(int64_t rem) {
    return rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1);
}

static inline float kx_tree512(__m512 acc) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

static inline __m512 kx_exp512(__m512 x) {
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.38888889e-3f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i h = _mm512_srai_epi32(ni, 1);
    __m512i b127 = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, b127), 23));
    __m512 s2 =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, h), b127), 23));
    __m512 res = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    __mmask16 in_lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.5f), _CMP_GT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    res = _mm512_maskz_mov_ps(in_lo, res);
    res = _mm512_mask_mov_ps(res, hi, _mm512_set1_ps(INFINITY));
    res = _mm512_mask_mov_ps(res, nan, x);
    return res;
}

float kn_sumsq_avx512(const float *x, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        __m512 v = _mm512_maskz_loadu_ps(kx_tail(n - i), x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    return kx_tree512(acc);
}

void kn_scale_mul_avx512(const float *x, float r, const float *w, int64_t n, float *y) {
    __m512 vr = _mm512_set1_ps(r);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mk = kx_tail(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), vr);
        if (w)
            v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, w + i));
        _mm512_mask_storeu_ps(y + i, mk, v);
    }
}

void kn_swiglu_avx512(const float *g, const float *u, int64_t n, float *h) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mk = kx_tail(n - i);
        __m512 gv = _mm512_maskz_loadu_ps(mk, g + i);
        __m512 e = kx_exp512(_mm512_xor_ps(gv, sign));
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(h + i, mk, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mk, u + i)));
    }
}

void kn_store_kv_avx512(void *dst, const float *src, int64_t n, bool f16) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mk = kx_tail(n - i);
        __m256i hv = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, src + i),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(d + i, mk, hv);
    }
}

/* Loads elements [d, d+16) of a K or V row as floats (masked tail). */
static inline __m512 kx_load_row(const void *row, bool f16, int64_t d, __mmask16 mk) {
    if (f16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + d));
    return _mm512_maskz_loadu_ps(mk, (const float *)row + d);
}

static void kx_attn_generic(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t hd,
                            int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
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
            __m512 acc = _mm512_setzero_ps();
            for (int64_t d = 0; d < hd; d += 16) {
                __mmask16 mk = kx_tail(hd - d);
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + d),
                                      kx_load_row(row, kv->f16, d, mk), acc);
            }
            float s = kx_tree512(acc) * scale;
            scratch[p - c0] = s;
            mc = kn_maxf(mc, s);
        }
        float mn = kn_maxf(m, mc);
        float alpha = kn_expf(m - mn);
        l = l * alpha;
        __m512 va = _mm512_set1_ps(alpha);
        for (int64_t d = 0; d < hd; d += 16) {
            __mmask16 mk = kx_tail(hd - d);
            _mm512_mask_storeu_ps(out + d, mk,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, out + d), va));
        }
        /* probabilities of the chunk, 16 at a time (kx_exp512 == kn_expf per lane) */
        __m512 vmn = _mm512_set1_ps(mn);
        for (int64_t p = 0; p < c1 - c0; p += 16) {
            __mmask16 mk = kx_tail(c1 - c0 - p);
            __m512 e = kx_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, scratch + p), vmn));
            _mm512_mask_storeu_ps(scratch + p, mk, e);
        }
        for (int64_t p = c0; p < c1; p++) {
            float pj = scratch[p - c0];
            l = l + pj;
            const void *row = kn_attn_row_ptr(kv, kv->v_base, p, kvh, hd);
            __m512 vp = _mm512_set1_ps(pj);
            for (int64_t d = 0; d < hd; d += 16) {
                __mmask16 mk = kx_tail(hd - d);
                __m512 o = _mm512_maskz_loadu_ps(mk, out + d);
                o = _mm512_fmadd_ps(vp, kx_load_row(row, kv->f16, d, mk), o);
                _mm512_mask_storeu_ps(out + d, mk, o);
            }
        }
        m = mn;
    }
    __m512 vl = _mm512_set1_ps(l);
    for (int64_t d = 0; d < hd; d += 16) {
        __mmask16 mk = kx_tail(hd - d);
        _mm512_mask_storeu_ps(out + d, mk, _mm512_div_ps(_mm512_maskz_loadu_ps(mk, out + d), vl));
    }
}

/* Attention for head_dim = 16 * NV (NV <= 8): q and the output accumulator live in registers for
 * the whole pass; the operation sequence is exactly kx_attn_generic's (and the reference's). */
static inline __attribute__((always_inline)) void
kx_attn_fixed(const int NV, const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t n_pos,
              float scale, int64_t chunk, float *scratch, float *out) {
    const int64_t hd = 16 * NV;
    __m512 qv[8], ov[8];
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++) {
        qv[j] = _mm512_loadu_ps(q + 16 * j);
        ov[j] = _mm512_setzero_ps();
    }
    float m = -INFINITY, l = 0.0f;
    int64_t start = kv->window > 0 && n_pos > kv->window ? n_pos - kv->window : 0;
    for (int64_t cb = start - start % chunk; cb < n_pos; cb += chunk) {
        int64_t c0 = cb < start ? start : cb;
        int64_t c1 = cb + chunk < n_pos ? cb + chunk : n_pos;
        float mc = -INFINITY;
        for (int64_t p = c0; p < c1; p++) {
            const void *row = kn_attn_row_ptr(kv, kv->k_base, p, kvh, hd);
            __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int j = 0; j < NV; j++)
                acc = _mm512_fmadd_ps(qv[j], kx_load_row(row, kv->f16, 16 * j, 0xFFFF), acc);
            float sc = kx_tree512(acc) * scale;
            scratch[p - c0] = sc;
            mc = kn_maxf(mc, sc);
        }
        float mn = kn_maxf(m, mc);
        float alpha = kn_expf(m - mn);
        l = l * alpha;
        __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            ov[j] = _mm512_mul_ps(ov[j], va);
        __m512 vmn = _mm512_set1_ps(mn);
        for (int64_t p = 0; p < c1 - c0; p += 16) {
            __mmask16 mk = kx_tail(c1 - c0 - p);
            __m512 e = kx_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, scratch + p), vmn));
            _mm512_mask_storeu_ps(scratch + p, mk, e);
        }
        for (int64_t p = c0; p < c1; p++) {
            float pj = scratch[p - c0];
            l = l + pj;
            const void *row = kn_attn_row_ptr(kv, kv->v_base, p, kvh, hd);
            __m512 vp = _mm512_set1_ps(pj);
#pragma GCC unroll 8
            for (int j = 0; j < NV; j++)
                ov[j] = _mm512_fmadd_ps(vp, kx_load_row(row, kv->f16, 16 * j, 0xFFFF), ov[j]);
        }
        m = mn;
    }
    __m512 vl = _mm512_set1_ps(l);
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++)
        _mm512_storeu_ps(out + 16 * j, _mm512_div_ps(ov[j], vl));
}

void kn_attn_row_avx512(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t hd,
                        int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
    switch (hd) {
    case 32:
        kx_attn_fixed(2, q, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    case 64:
        kx_attn_fixed(4, q, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    case 128:
        kx_attn_fixed(8, q, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    default:
        kx_attn_generic(q, kv, kvh, hd, n_pos, scale, chunk, scratch, out);
    }
}
