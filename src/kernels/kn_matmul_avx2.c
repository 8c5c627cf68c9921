/* SPDX-License-Identifier: MIT */
/*
 * kn_matmul_avx2: AVX2+FMA+F16C matmul kernels for CPUs without AVX-512 (compiled with -mavx2
 * -mfma -mf16c only here). Same packed layouts and the same per-element operation sequence as the
 * AVX-512 kernels (see kn_matmul_avx512.c and kn_int.h), with narrower tiles: float types use
 * 6 rows x 16 columns (12 ymm accumulators) per sub-tile of the 64-column block; quantized types
 * use 2 rows x 16 columns, with the integer block dot products built from vpmaddubsw/vpmaddwd
 * (Q8_0 via the sign trick |w| * sign(x, w), so no 16-bit intermediate can saturate; Q4_0 nibbles
 * 0..15 times x directly). The integer results are exact, so they equal the VNNI kernel's.
 * One row (decode at batch 1) of Q8_0: the first of a column block's two 16-column passes
 * prefetches the weights q8-prefetch bytes ahead into L1 and mm-prefetch-l2 bytes ahead into L2,
 * as the AVX-512 kernel does (isa avx2 on the Intel AVX-512 VM, from memory: 1.29x, then 1.12x).
 */
#include "kernels/kn_int.h"
#include "kernels/kn_type_table.h"

#include <immintrin.h>

#define KF2_MR 6
#define KQ2_MR 2

static inline int32_t kq2_load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m256i kf2_mask(int64_t c) {
    /* lanes < c are all-ones */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(c < 0 ? 0 : c > 8 ? 8 : c)), idx);
}

static inline __attribute__((always_inline)) void kf2_tile(const int mr, const float *x,
                                                           int64_t ldx, const float *wp, int64_t kc,
                                                           float *y, int64_t ldy, __m256i mask0,
                                                           __m256i mask1, bool init) {
    __m256 acc[KF2_MR][2];
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++) {
        acc[m][0] = init ? _mm256_setzero_ps() : _mm256_maskload_ps(y + m * ldy, mask0);
        acc[m][1] = init ? _mm256_setzero_ps() : _mm256_maskload_ps(y + m * ldy + 8, mask1);
    }
    for (int64_t k = 0; k < kc; k++) {
        const float *wk = wp + k * KN_NB_F;
        __m256 w0 = _mm256_loadu_ps(wk);
        __m256 w1 = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 16
        for (int m = 0; m < mr; m++) {
            __m256 xb = _mm256_broadcast_ss(x + m * ldx + k);
            acc[m][0] = _mm256_fmadd_ps(xb, w0, acc[m][0]);
            acc[m][1] = _mm256_fmadd_ps(xb, w1, acc[m][1]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++) {
        _mm256_maskstore_ps(y + m * ldy, mask0, acc[m][0]);
        _mm256_maskstore_ps(y + m * ldy + 8, mask1, acc[m][1]);
    }
}

static void kf2_convert(int type, const uint16_t *src, int64_t kc, float *dst) {
    int64_t n = kc * KN_NB_F;
    if (type == GGUF_TYPE_F16) {
        for (int64_t i = 0; i < n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    } else {
        for (int64_t i = 0; i < n; i += 8) {
            __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        }
    }
}

#define KF2_ROWS(MR)                                                                               \
    kf2_tile(MR, xb + i * xa->ldx, xa->ldx, wp + c0, kc, yb + c0 + i * ldy, ldy, mask0, mask1, init)

void kn_matmul_f_avx2(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                      int64_t b0, int64_t b1, float *scratch) {
    const int64_t K = w->k;
    for (int64_t jb = b0; jb < b1; jb++) {
        int64_t ncols = w->n - jb * KN_NB_F;
        if (ncols > KN_NB_F)
            ncols = KN_NB_F;
        const unsigned char *blk = (const unsigned char *)w->packed + (size_t)jb * w->block_stride;
        for (int64_t k0 = 0; k0 < K; k0 += w->kc) {
            int64_t kc = K - k0 < w->kc ? K - k0 : w->kc;
            const float *wp;
            if (w->type == GGUF_TYPE_F32) {
                wp = (const float *)blk + k0 * KN_NB_F;
            } else {
                kf2_convert(w->type, (const uint16_t *)blk + k0 * KN_NB_F, kc, scratch);
                wp = scratch;
            }
            float *yb = y + jb * KN_NB_F;
            const float *xb = xa->x + k0;
            bool init = k0 == 0;
            for (int c0 = 0; c0 < KN_NB_F && c0 < ncols; c0 += 16) {
                __m256i mask0 = kf2_mask(ncols - c0), mask1 = kf2_mask(ncols - c0 - 8);
                int64_t i = 0;
                for (; i + KF2_MR <= m; i += KF2_MR)
                    KF2_ROWS(KF2_MR);
                switch (m - i) {
                case 5:
                    KF2_ROWS(5);
                    break;
                case 4:
                    KF2_ROWS(4);
                    break;
                case 3:
                    KF2_ROWS(3);
                    break;
                case 2:
                    KF2_ROWS(2);
                    break;
                case 1:
                    KF2_ROWS(1);
                    break;
                default:
                    break;
                }
            }
        }
    }
}

static inline __attribute__((always_inline)) void
kq2_tile(const int mr, const bool q8, const int8_t *xq, const float *xd, const int32_t *xs,
         int64_t K, const unsigned char *wblk, int c0, float *y, int64_t ldy, __m256i mask0,
         __m256i mask1, int64_t pf, int64_t pf2) {
    const int64_t KB = K / KN_QK;
    const size_t bb = q8 ? KN_Q8_BLOCK_BYTES : KN_Q4_BLOCK_BYTES;
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i nib = _mm256_set1_epi8(0x0F);
    __m256 facc[KQ2_MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
        facc[i][0] = facc[i][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < KB; b++) {
        const unsigned char *p = wblk + (size_t)b * bb;
        const unsigned char *qs = p + 64;
        kn_prefetch_ahead(p, bb, pf, pf2);
        __m256i iacc[KQ2_MR][2];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++)
            iacc[i][0] = iacc[i][1] = _mm256_setzero_si256();
        if (q8) {
#pragma GCC unroll 16
            for (int g = 0; g < 8; g++) {
                const unsigned char *gp = qs + ((size_t)g * KN_NB_Q + (size_t)c0) * 4;
                __m256i s0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)gp), flip);
                __m256i s1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(gp + 32)), flip);
                __m256i a0 = _mm256_abs_epi8(s0), a1 = _mm256_abs_epi8(s1);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    __m256i xb = _mm256_set1_epi32(kq2_load_i32(xq + i * K + b * KN_QK + 4 * g));
                    __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(xb, s0));
                    __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(xb, s1));
                    iacc[i][0] = _mm256_add_epi32(iacc[i][0], _mm256_madd_epi16(p0, ones16));
                    iacc[i][1] = _mm256_add_epi32(iacc[i][1], _mm256_madd_epi16(p1, ones16));
                }
            }
        } else {
#pragma GCC unroll 16
            for (int g = 0; g < 4; g++) {
                const unsigned char *gp = qs + ((size_t)g * KN_NB_Q + (size_t)c0) * 4;
                __m256i v0 = _mm256_loadu_si256((const __m256i *)gp);
                __m256i v1 = _mm256_loadu_si256((const __m256i *)(gp + 32));
                __m256i lo0 = _mm256_and_si256(v0, nib), lo1 = _mm256_and_si256(v1, nib);
                __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), nib);
                __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), nib);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    const int8_t *xr = xq + i * K + b * KN_QK;
                    __m256i xl = _mm256_set1_epi32(kq2_load_i32(xr + 4 * g));
                    __m256i xh = _mm256_set1_epi32(kq2_load_i32(xr + 16 + 4 * g));
                    __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, xl),
                                                  _mm256_maddubs_epi16(hi0, xh));
                    __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xl),
                                                  _mm256_maddubs_epi16(hi1, xh));
                    iacc[i][0] = _mm256_add_epi32(iacc[i][0], _mm256_madd_epi16(p0, ones16));
                    iacc[i][1] = _mm256_add_epi32(iacc[i][1], _mm256_madd_epi16(p1, ones16));
                }
            }
        }
        const uint16_t *sc = (const uint16_t *)p + c0;
        __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sc));
        __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + 8)));
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            __m256i corr = _mm256_set1_epi32(q8 ? 0 : 8 * xs[i * KB + b]);
            __m256 dx = _mm256_set1_ps(xd[i * KB + b]);
            __m256 f0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(iacc[i][0], corr));
            __m256 f1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(iacc[i][1], corr));
            facc[i][0] = _mm256_fmadd_ps(f0, _mm256_mul_ps(dw0, dx), facc[i][0]);
            facc[i][1] = _mm256_fmadd_ps(f1, _mm256_mul_ps(dw1, dx), facc[i][1]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
        _mm256_maskstore_ps(y + i * ldy, mask0, facc[i][0]);
        _mm256_maskstore_ps(y + i * ldy + 8, mask1, facc[i][1]);
    }
}

void kn_matmul_q_avx2(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                      int64_t b0, int64_t b1) {
    const int64_t K = w->k, KB = K / KN_QK;
    const bool q8 = w->type == GGUF_TYPE_Q8_0;
    for (int64_t jb = b0; jb < b1; jb++) {
        int64_t ncols = w->n - jb * KN_NB_Q;
        if (ncols > KN_NB_Q)
            ncols = KN_NB_Q;
        const unsigned char *blk = (const unsigned char *)w->packed + (size_t)jb * w->block_stride;
        for (int c0 = 0; c0 < KN_NB_Q && c0 < ncols; c0 += 16) {
            __m256i mask0 = kf2_mask(ncols - c0), mask1 = kf2_mask(ncols - c0 - 8);
            float *yb = y + jb * KN_NB_Q + c0;
            int64_t i = 0;
            for (; i + KQ2_MR <= m; i += KQ2_MR) {
                if (q8)
                    kq2_tile(KQ2_MR, true, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB, K, blk,
                             c0, yb + i * ldy, ldy, mask0, mask1, 0, 0);
                else
                    kq2_tile(KQ2_MR, false, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB, K, blk,
                             c0, yb + i * ldy, ldy, mask0, mask1, 0, 0);
            }
            if (i < m) {
                /* one row (decode at batch 1) of Q8_0: the first of a block's two 16-column
                 * passes streams it from memory, prefetching ahead as the AVX-512 kernel does */
                bool one = q8 && m == 1 && c0 == 0;
                if (q8)
                    kq2_tile(1, true, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB, K, blk, c0,
                             yb + i * ldy, ldy, mask0, mask1, one ? w->q8_prefetch : 0,
                             one ? w->prefetch_l2 : 0);
                else
                    kq2_tile(1, false, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB, K, blk, c0,
                             yb + i * ldy, ldy, mask0, mask1, 0, 0);
            }
        }
    }
}

void kn_act_quantize_avx2(const kn_act *a, int64_t k, int64_t m0, int64_t m1) {
    const int64_t kb = k / KN_QK;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t m = m0; m < m1; m++) {
        const float *x = a->x + m * a->ldx;
        int8_t *q = a->q + m * k;
        for (int64_t b = 0; b < kb; b++) {
            __m256 v[4];
            __m256 mx = _mm256_setzero_ps();
#pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                v[j] = _mm256_loadu_ps(x + b * KN_QK + 8 * j);
                /* max_ps(a, mx) returns mx for NaN lanes: NaN never wins, as in the reference */
                mx = _mm256_max_ps(_mm256_and_ps(v[j], absmask), mx);
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
            float amax = _mm_cvtss_f32(m4);
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            __m256 vid = _mm256_set1_ps(id);
            int32_t s = 0, s16 = 0;
#pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                if (j == 2)
                    s16 = s;
                __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], vid));
                int32_t tmp[8];
                _mm256_storeu_si256((__m256i *)tmp, qi);
                for (int t = 0; t < 8; t++) {
                    int8_t qv = (int8_t)tmp[t];
                    q[b * KN_QK + 8 * j + t] = qv;
                    s += qv;
                }
            }
            a->qd[m * kb + b] = d;
            a->qs[m * kb + b] = s;
            if (a->qs16)
                a->qs16[m * kb + b] = s16;
        }
    }
}
