/* SPDX-License-Identifier: MIT */
/*
 * kn_ops_avx512: AVX-512 versions of the row kernels and attention (see kn_ops.c for the
 * canonical order they reproduce). Lane-16 reductions are one zmm accumulator fed in element
 * order (tails by zero-masked loads, which add +0 and change nothing because an accumulator that
 * starts at +0 can never become -0), reduced by the fixed tree 256+256, 128+128, 64+64, 32+32.
 * kx_exp512 is kn_expf lane by lane: same constants, same fma sequence, same two-step scaling.
 *
 * Grouped attention (kn_attn_rows) runs the query heads of one KV head together: per chunk the
 * keys are converted once to f32 rows, each head's scores come 16 positions at a time (16
 * accumulators reduced by one butterfly that performs kx_tree512's additions for all 16 lanes),
 * and the value pass takes up to four heads per value row read. Each head's operations are
 * exactly kx_attn_fixed's, so its bits do not depend on which heads share its group. With
 * kv->prefetch (attn-prefetch) each score block also prefetches a share of the next chunk's key
 * and value rows into L2 (kn_attn_pf_chunk: the next unit's first chunk during the last): from
 * memory a chunk's reads otherwise stall its gather and value pass, the hardware streamer starting
 * afresh in each 4 KiB block. With kv->v_once (attn-v-once) F16 values that more than one value
 * pass reads (more than 4 heads: the 0.5b shape's 7) are converted once per chunk into the key
 * rows' scratch, after the scores: the Intel VM's one-thread kernel at 272 positions 3.83 -> 3.60
 * ns per (head, position).
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

/* ---- grouped attention: the query heads of one KV head together (kn_attn_rows) ---- */

/* kx_tree512 of 16 accumulators at once: lane i of the result is kx_tree512(a[i]), by the same
 * additions in the same pairings (lanes i and i+8, then i and i+4 of the sums, i and i+2, 0 and
 * 1), each stage adding the lower operands of two accumulators' pairs in one instruction. */
static inline __m512 kx_tree512_x16(const __m512 *a) {
    __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* b[i]: 128-bit lanes [i s8 0-3, i s8 4-7, i+8 ..., i+8 ...] */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], 0x44),
                             _mm512_shuffle_f32x4(a[i], a[i + 8], 0xEE));
#pragma GCC unroll 4
    for (int w = 0; w < 4; w++) /* c[w]: lanes [w s4, w+8 s4, w+4 s4, w+12 s4] */
        c[w] = _mm512_add_ps(_mm512_shuffle_f32x4(b[w], b[w + 4], 0x88),
                             _mm512_shuffle_f32x4(b[w], b[w + 4], 0xDD));
#pragma GCC unroll 2
    for (int x = 0; x < 2; x++) /* d[x]: lane L holds s2 of c[2x].L, then of c[2x+1].L */
        d[x] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * x], c[2 * x + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[2 * x], c[2 * x + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane L of e: s1 of c[0].L, c[1].L, c[2].L, c[3].L, i.e. positions 0-3, 8-11, 4-7, 12-15 */
    __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_shuffle_f32x4(e, e, 0xD8);
}

/* Scores of the 16 f32 key rows at kf (row stride 16 * NV) against one query: lane i is
 * (q . k_i) * scale with kx_attn_fixed's fma chain and tree. */
static inline __attribute__((always_inline)) __m512 kx_scores16(const int NV, const __m512 *qv,
                                                                const float *kf, __m512 scale) {
    __m512 a[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        a[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            a[i] = _mm512_fmadd_ps(qv[j], _mm512_loadu_ps(kf + (i * NV + j) * 16), a[i]);
    }
    return _mm512_mul_ps(kx_tree512_x16(a), scale);
}

/* Keys of positions [c0, c0 + n) of kv head kvh as f32 rows of 16 * NV at kf, and the addresses
 * of their value rows at vrow, a block's run of slots at a time (the kv fields are read into
 * locals first: the float stores could alias them). */
static inline __attribute__((always_inline)) void kx_attn_gather(const int NV, const kn_attn_kv *kv,
                                                                 int64_t kvh, int64_t c0, int64_t n,
                                                                 float *kf, const void **vrow) {
    const int64_t hd = 16 * NV, bs = kv->block_size;
    const bool f16 = kv->f16;
    const size_t esz = f16 ? 2 : 4, rs = (size_t)kv->kv_stride * esz, bb = kv->block_bytes;
    const char *kb = (const char *)kv->k_base + (size_t)(kvh * hd) * esz;
    const char *vb = (const char *)kv->v_base + (size_t)(kvh * hd) * esz;
    const int32_t *table = kv->table;
    int64_t blk = c0 / bs, slot = c0 % bs;
    for (int64_t i = 0; i < n; blk++, slot = 0) {
        int64_t cnt = bs - slot < n - i ? bs - slot : n - i;
        size_t off = (size_t)table[blk] * bb + (size_t)slot * rs;
        const char *kr = kb + off, *vr = vb + off;
        float *kd = kf + i * hd;
        for (int64_t e = 0; e < cnt; e++, vr += rs)
            vrow[i + e] = vr;
        if (f16) {
            for (int64_t e = 0; e < cnt; e++, kr += rs, kd += hd)
#pragma GCC unroll 8
                for (int j = 0; j < NV; j++)
                    _mm512_storeu_ps(kd + 16 * j, _mm512_cvtph_ps(_mm256_loadu_si256(
                                                      (const __m256i *)(const void *)kr + j)));
        } else {
            for (int64_t e = 0; e < cnt; e++, kr += rs, kd += hd)
#pragma GCC unroll 8
                for (int j = 0; j < NV; j++)
                    _mm512_storeu_ps(kd + 16 * j, _mm512_loadu_ps((const float *)kr + 16 * j));
        }
        i += cnt;
    }
}

/* The value pass of one chunk for GS heads: out rows (stride 16 * NV) are scaled by alpha[h],
 * then for each position i in order l[h] += p[h][i] and out_h = fma(p[h][i], v_i, out_h), all
 * GS heads sharing each value row load. p rows have stride ps. */
static inline __attribute__((always_inline)) void
kx_attn_values(const int NV, const int GS, const bool f16, const void *const *vrow, int64_t n,
               const float *p, int64_t ps, const float *alpha, float *l, float *out) {
    const int64_t hd = 16 * NV;
    __m512 ov[4][8];
    float lv[4];
#pragma GCC unroll 4
    for (int h = 0; h < GS; h++) {
        lv[h] = l[h];
        __m512 va = _mm512_set1_ps(alpha[h]);
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            ov[h][j] = _mm512_mul_ps(_mm512_loadu_ps(out + h * hd + 16 * j), va);
    }
    for (int64_t i = 0; i < n; i++) {
        __m512 v[8];
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            v[j] = f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)vrow[i] + j))
                       : _mm512_loadu_ps((const float *)vrow[i] + 16 * j);
#pragma GCC unroll 4
        for (int h = 0; h < GS; h++) {
            float pj = p[h * ps + i];
            lv[h] = lv[h] + pj;
            __m512 vp = _mm512_set1_ps(pj);
#pragma GCC unroll 8
            for (int j = 0; j < NV; j++)
                ov[h][j] = _mm512_fmadd_ps(vp, v[j], ov[h][j]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < GS; h++) {
        l[h] = lv[h];
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            _mm512_storeu_ps(out + h * hd + 16 * j, ov[h][j]);
    }
}

/* kx_attn_fixed for g query heads (rows of q and out, stride 16 * NV) of kv head kvh: each row
 * gets kx_attn_fixed's operations exactly, the chunk's keys and values converted once for all,
 * the scores 16 positions at a time and the value pass over up to 4 heads at a time. */
static inline __attribute__((always_inline)) void
kx_attn_group(const int NV, const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh,
              int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
    const int64_t hd = 16 * NV, cp = (chunk + 15) & ~(int64_t)15;
    const int GS = NV == 8 ? 2 : 4;
    float *kf = scratch, *sc = scratch + cp * hd;
    const void **vrow = (const void **)(void *)(sc + g * cp); /* cp pointers */
    float m[KN_ATTN_GROUP_MAX], l[KN_ATTN_GROUP_MAX], alpha[KN_ATTN_GROUP_MAX];
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t h = 0; h < g; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        for (int j = 0; j < NV; j++)
            _mm512_storeu_ps(out + h * hd + 16 * j, _mm512_setzero_ps());
    }
    int64_t start = kv->window > 0 && n_pos > kv->window ? n_pos - kv->window : 0;
    for (int64_t cb = start - start % chunk; cb < n_pos; cb += chunk) {
        int64_t c0 = cb < start ? start : cb;
        int64_t c1 = cb + chunk < n_pos ? cb + chunk : n_pos;
        int64_t n = c1 - c0;
        kx_attn_gather(NV, kv, kvh, c0, n, kf, vrow);
        kn_attn_pf pf;
        kn_attn_pf_chunk(&pf, kv, kvh, hd, n_pos, chunk, cb, c1, g * ((n + 15) / 16));
        for (int64_t h = 0; h < g; h++) {
            __m512 qv[8];
#pragma GCC unroll 8
            for (int j = 0; j < NV; j++)
                qv[j] = _mm512_loadu_ps(q + h * hd + 16 * j);
            float *sh = sc + h * cp;
            /* rows past n of the last 16 are stale or zero: their lanes are never stored */
            __m512 vmax = _mm512_set1_ps(-INFINITY);
            for (int64_t p = 0; p < n; p += 16) {
                __mmask16 mk = kx_tail(n - p);
                kn_attn_pf_step(&pf);
                __m512 s = kx_scores16(NV, qv, kf + p * hd, vscale);
                _mm512_mask_storeu_ps(sh + p, mk, s);
                vmax = _mm512_mask_max_ps(vmax, mk, vmax, s); /* kn_maxf(running, new) */
            }
            float mc = _mm512_reduce_max_ps(vmax);
            float mn = kn_maxf(m[h], mc);
            alpha[h] = kn_expf(m[h] - mn);
            l[h] = l[h] * alpha[h];
            __m512 vmn = _mm512_set1_ps(mn);
            for (int64_t p = 0; p < n; p += 16) {
                __mmask16 mk = kx_tail(n - p);
                __m512 e = kx_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sh + p), vmn));
                _mm512_mask_storeu_ps(sh + p, mk, e);
            }
            m[h] = mn;
        }
        /* kv->v_once: F16 values read by more than one pass of GS heads are converted once,
         * into the keys' rows (done with by now), and the passes read those */
        bool vf16 = kv->f16;
        if (vf16 && g > GS && kv->v_once) {
            for (int64_t i = 0; i < n; i++) {
#pragma GCC unroll 8
                for (int j = 0; j < NV; j++)
                    _mm512_storeu_ps(kf + i * hd + 16 * j, _mm512_cvtph_ps(_mm256_loadu_si256(
                                                               (const __m256i *)vrow[i] + j)));
                vrow[i] = kf + i * hd;
            }
            vf16 = false;
        }
        for (int64_t h = 0; h < g; h += GS) {
            const float *ph = sc + h * cp;
            float *oh = out + h * hd;
            switch (g - h < GS ? g - h : GS) {
            case 1:
                kx_attn_values(NV, 1, vf16, vrow, n, ph, cp, alpha + h, l + h, oh);
                break;
            case 2:
                kx_attn_values(NV, 2, vf16, vrow, n, ph, cp, alpha + h, l + h, oh);
                break;
            case 3:
                kx_attn_values(NV, 3, vf16, vrow, n, ph, cp, alpha + h, l + h, oh);
                break;
            default:
                kx_attn_values(NV, 4, vf16, vrow, n, ph, cp, alpha + h, l + h, oh);
                break;
            }
        }
    }
    for (int64_t h = 0; h < g; h++) {
        __m512 vl = _mm512_set1_ps(l[h]);
        for (int j = 0; j < NV; j++)
            _mm512_storeu_ps(out + h * hd + 16 * j,
                             _mm512_div_ps(_mm512_loadu_ps(out + h * hd + 16 * j), vl));
    }
}

void kn_attn_rows_avx512(const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh, int64_t hd,
                         int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
    switch (hd) {
    case 32:
        kx_attn_group(2, q, g, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    case 64:
        kx_attn_group(4, q, g, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    case 128:
        kx_attn_group(8, q, g, kv, kvh, n_pos, scale, chunk, scratch, out);
        return;
    default:
        for (int64_t h = 0; h < g; h++)
            kn_attn_row_avx512(q + h * hd, kv, kvh, hd, n_pos, scale, chunk, scratch, out + h * hd);
    }
}
