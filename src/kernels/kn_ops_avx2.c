/* SPDX-License-Identifier: MIT */
/*
 * kn_ops_avx2: AVX2+FMA+F16C versions of the row kernels and attention. A lane-16 accumulator is
 * two ymm registers (lanes 0-7 and 8-15) fed in element order; the tree is lo+hi, then 128+128,
 * 64+64, 32+32, the same additions as the reference and the AVX-512 version.
 *
 * Grouped attention (kn_attn_rows) runs the query heads of one KV head together for head_dim 32,
 * 64 and 128: per chunk the keys are converted once (F16C) to f32 rows, each head's scores come 8
 * positions at a time (8 accumulator pairs reduced by one transposed tree that performs kx2_tree's
 * additions for all 8), the values are converted once into the same rows, and the value pass
 * takes two heads per value load. Each head's operations are exactly kn_attn_row_avx2's (the
 * reference's), so its bits do not depend on which heads share its group or on the ISA. With
 * kv->prefetch (attn-prefetch) each score block also prefetches a share of the next chunk's key
 * and value rows into L2 (kn_attn_pf_chunk: the next unit's first chunk during the last).
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
        if (hd - d >= 8)
            return _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + d)));
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

/* ---- grouped attention: the query heads of one KV head together (kn_attn_rows) ---- */

/* Rows [c0, c0 + n) of kv head kvh from base (k_base or v_base) as f32 rows of 16 * NV at dst, a
 * block's run of slots at a time (F16 through F16C, 8 elements per conversion); rows n up to the
 * next multiple of 8 are zeroed so the 8-position score groups never read stale memory. The kv
 * fields are read into locals first: the float stores could alias them. */
static inline __attribute__((always_inline)) void
kx2_attn_gather(const int NV, const kn_attn_kv *kv, const void *base, int64_t kvh, int64_t c0,
                int64_t n, float *dst) {
    const int64_t hd = 16 * NV, bs = kv->block_size;
    const bool f16 = kv->f16;
    const size_t esz = f16 ? 2 : 4, rs = (size_t)kv->kv_stride * esz, bb = kv->block_bytes;
    const char *b0 = (const char *)base + (size_t)(kvh * hd) * esz;
    const int32_t *table = kv->table;
    int64_t blk = c0 / bs, slot = c0 % bs;
    for (int64_t i = 0; i < n; blk++, slot = 0) {
        int64_t cnt = bs - slot < n - i ? bs - slot : n - i;
        const char *r = b0 + (size_t)table[blk] * bb + (size_t)slot * rs;
        float *d = dst + i * hd;
        if (f16) {
            for (int64_t e = 0; e < cnt; e++, r += rs, d += hd)
#pragma GCC unroll 16
                for (int j = 0; j < 2 * NV; j++)
                    _mm256_storeu_ps(d + 8 * j, _mm256_cvtph_ps(_mm_loadu_si128(
                                                    (const __m128i *)(const void *)r + j)));
        } else {
            for (int64_t e = 0; e < cnt; e++, r += rs, d += hd)
#pragma GCC unroll 16
                for (int j = 0; j < 2 * NV; j++)
                    _mm256_storeu_ps(d + 8 * j,
                                     _mm256_loadu_ps((const float *)(const void *)r + 8 * j));
        }
        i += cnt;
    }
    for (int64_t i = n; i < ((n + 7) & ~(int64_t)7); i++)
        for (int64_t e = 0; e < hd; e++)
            dst[i * hd + e] = 0.0f;
}

/* Scores of the 8 f32 key rows at kf (row stride 16 * NV) against query q: lane i is
 * (q . k_i) * scale, each row's lane-16 accumulator (lanes 0-7 and 8-15) fed in element order as
 * kn_attn_row_avx2 does, then kx2_tree's additions (lo+hi, 128+128, 64+64, 32+32) for the 8 rows
 * at once: the same operands meet in every addition. */
static inline __attribute__((always_inline)) __m256 kx2_scores8(const int NV, const float *q,
                                                                const float *kf, __m256 scale) {
    const int64_t hd = 16 * NV;
    __m256 s8[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16 * j), _mm256_loadu_ps(kf + i * hd + 16 * j),
                                 lo);
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16 * j + 8),
                                 _mm256_loadu_ps(kf + i * hd + 16 * j + 8), hi);
        }
        s8[i] = _mm256_add_ps(lo, hi);
    }
    /* b[i]: 128-bit halves [s8[i] 0-3 + 4-7, s8[i+4] 0-3 + 4-7] (s4 of rows i and i+4) */
    __m256 b[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_permute2f128_ps(s8[i], s8[i + 4], 0x20),
                             _mm256_permute2f128_ps(s8[i], s8[i + 4], 0x31));
    /* c[w] per half: [s2 of row 2w (2 lanes), s2 of row 2w+1 (2 lanes)] (rows +4 in the high half)
     */
    __m256 c0 = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(b[0], b[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 c1 = _mm256_add_ps(_mm256_shuffle_ps(b[2], b[3], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(b[2], b[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* s1 = s2[0] + s2[1] of rows 0-3 in the low half and 4-7 in the high half */
    __m256 e = _mm256_add_ps(_mm256_shuffle_ps(c0, c1, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(c0, c1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_mul_ps(e, scale);
}

/* The value pass of one chunk over the f32 value rows at vf (n rows of 16 * NV) for GS heads
 * (rows of out and p, strides 16 * NV and ps): per 32-column slice, out = out * alpha[h], then
 * for each position in order out = fma(p[h][i], v_i, out): the reference's operations per
 * element, the slices and heads only interleaved. */
static inline __attribute__((always_inline)) void kx2_attn_values(const int NV, const int GS,
                                                                  const float *vf, int64_t n,
                                                                  const float *p, int64_t ps,
                                                                  const float *alpha, float *out) {
    const int64_t hd = 16 * NV;
    for (int64_t c = 0; c < hd; c += 32) {
        __m256 ov[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < GS; h++) {
            __m256 va = _mm256_set1_ps(alpha[h]);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                ov[h][j] = _mm256_mul_ps(_mm256_loadu_ps(out + h * hd + c + 8 * j), va);
        }
        const float *v = vf + c;
        for (int64_t i = 0; i < n; i++, v += hd) {
            __m256 vv[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                vv[j] = _mm256_loadu_ps(v + 8 * j);
#pragma GCC unroll 2
            for (int h = 0; h < GS; h++) {
                __m256 vp = _mm256_broadcast_ss(p + h * ps + i);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    ov[h][j] = _mm256_fmadd_ps(vp, vv[j], ov[h][j]);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < GS; h++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                _mm256_storeu_ps(out + h * hd + c + 8 * j, ov[h][j]);
    }
}

/* kn_attn_row_avx2's operations (the reference's) for g query heads (rows of q and out, stride
 * 16 * NV) of kv head kvh: per chunk the keys are converted once to f32 rows for all heads, each
 * head's scores come 8 positions at a time, then the values are converted once into the same
 * rows and the value pass takes two heads per value load. Scratch as kn_attn_scratch_floats. */
static inline __attribute__((always_inline)) void
kx2_attn_group(const int NV, const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh,
               int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
    const int64_t hd = 16 * NV, cp = (chunk + 15) & ~(int64_t)15;
    float *kf = scratch, *sc = scratch + cp * hd;
    float m[KN_ATTN_GROUP_MAX], l[KN_ATTN_GROUP_MAX], alpha[KN_ATTN_GROUP_MAX];
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int64_t h = 0; h < g; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        for (int64_t d = 0; d < hd; d++)
            out[h * hd + d] = 0.0f;
    }
    int64_t start = kv->window > 0 && n_pos > kv->window ? n_pos - kv->window : 0;
    for (int64_t cb = start - start % chunk; cb < n_pos; cb += chunk) {
        int64_t c0 = cb < start ? start : cb;
        int64_t c1 = cb + chunk < n_pos ? cb + chunk : n_pos;
        int64_t n = c1 - c0;
        kx2_attn_gather(NV, kv, kv->k_base, kvh, c0, n, kf);
        kn_attn_pf pf;
        kn_attn_pf_chunk(&pf, kv, kvh, hd, n_pos, chunk, cb, c1, g * ((n + 7) / 8));
        for (int64_t h = 0; h < g; h++) {
            const float *qh = q + h * hd;
            float *sh = sc + h * cp;
            __m256 vmax = _mm256_set1_ps(-INFINITY);
            for (int64_t p = 0; p < n; p += 8) {
                kn_attn_pf_step(&pf);
                __m256 s = kx2_scores8(NV, qh, kf + p * hd, vscale);
                __m256i mk = kx2_mask(n - p);
                _mm256_maskstore_ps(sh + p, mk, s);
                /* kn_maxf(running, new) on the chunk's lanes only */
                vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(s, vmax), _mm256_castsi256_ps(mk));
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
            float mc = _mm_cvtss_f32(m4);
            float mn = kn_maxf(m[h], mc);
            alpha[h] = kn_expf(m[h] - mn);
            l[h] = l[h] * alpha[h];
            __m256 vmn = _mm256_set1_ps(mn);
            for (int64_t p = 0; p < n; p += 8) {
                __m256i mk = kx2_mask(n - p);
                __m256 e = kx2_exp(_mm256_sub_ps(_mm256_maskload_ps(sh + p, mk), vmn));
                _mm256_maskstore_ps(sh + p, mk, e);
            }
            for (int64_t p = 0; p < n; p++)
                l[h] = l[h] + sh[p];
            m[h] = mn;
        }
        kx2_attn_gather(NV, kv, kv->v_base, kvh, c0, n, kf);
        for (int64_t h = 0; h < g; h += 2) {
            if (g - h >= 2)
                kx2_attn_values(NV, 2, kf, n, sc + h * cp, cp, alpha + h, out + h * hd);
            else
                kx2_attn_values(NV, 1, kf, n, sc + h * cp, cp, alpha + h, out + h * hd);
        }
    }
    for (int64_t h = 0; h < g; h++) {
        __m256 vl = _mm256_set1_ps(l[h]);
        for (int64_t d = 0; d < hd; d += 8)
            _mm256_storeu_ps(out + h * hd + d,
                             _mm256_div_ps(_mm256_loadu_ps(out + h * hd + d), vl));
    }
}

void kn_attn_rows_avx2(const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh, int64_t hd,
                       int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
    switch (hd) {
    case 32:
        kx2_attn_group(2, q, g, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    case 64:
        kx2_attn_group(4, q, g, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    case 128:
        kx2_attn_group(8, q, g, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    default:
        for (int64_t h = 0; h < g; h++)
            kn_attn_row_avx2(q + h * hd, kv, kvh, hd, n_pos, scale, chunk, scratch, out + h * hd);
    }
}
