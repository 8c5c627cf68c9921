/* SPDX-License-Identifier: MIT */
/*
 * kn_matmul_kq_avx2: AVX2+FMA+F16C matmul for Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights, for
 * CPUs without AVX-512 (compiled with -mavx2 -mfma -mf16c only here). Same packed planes
 * (kn_int.h) and the same per-element operation sequence as kn_matmul_kq_avx512.c, with tiles of
 * 2 rows x 16 columns (two ymm of 8 column lanes).
 *
 * Integer block dot products use vpmaddubsw (unsigned codes x signed activation codes, adjacent
 * pairs summed to int16) and vpmaddwd with ones (to int32). vpmaddubsw saturates and int16 sums
 * can overflow, so the number of partial products added in int16 before widening is bounded per
 * type with |x| <= 127: a pair is at most 2 * 15 * 127 = 3810 (4-bit codes), 7874 (5-bit),
 * 16002 (6-bit), so up to 8, 4 and 2 pair results respectively are summed (30480, 31496, 32004,
 * all < 32767) before vpmaddwd. Every integer is therefore exact and equals the VNNI kernel's and
 * the reference's, and the float folding is the same IEEE sequence.
 *
 * One row (decode at batch 1) of Q4_K, Q5_K or Q6_K: the first of a column block's two 16-column
 * passes streams the block from memory and prefetches the weights kq-prefetch / q6k-prefetch
 * bytes ahead into L1 and mm-prefetch-l2 bytes ahead into L2, as the AVX-512 kernel does; the
 * second pass finds the block in cache. Without them the unpacking added to the memory time
 * (Intel AVX-512 VM with isa avx2, 2 threads, 60 layers of 1b-kq from memory: Q4_K 10.2 GB/s
 * without either; 1.34x with the near prefetch, 1.10x more with the far one).
 */
#include "kernels/kn_int.h"
#include "base/check.h"
#include "kernels/kn_type_table.h"

#include <immintrin.h>

#define KK2_MR 2
#define KK2_RC 96

static inline int32_t kk2_load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m256i kk2_mask(int64_t c) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(c < 0 ? 0 : c > 8 ? 8 : c)), idx);
}

static inline __attribute__((always_inline)) __m256i kk2_h6_shift(__m256i h, const int g) {
    return g == 0   ? _mm256_slli_epi32(h, 4)
           : g == 1 ? _mm256_slli_epi32(h, 2)
           : g == 2 ? h
                    : _mm256_srli_epi32(h, 2);
}

static inline __attribute__((always_inline)) void
kk2_tile(const int mr, const int type, const int8_t *xq, const float *xd, const int32_t *xs,
         const int32_t *xs16, int64_t K, const unsigned char *wblk, int c0, float *y, int64_t ldy,
         __m256i mask0, __m256i mask1, int64_t pf, int64_t pf2) {
    const int64_t KB = K / KN_QK;
    const bool k45 = type == GGUF_TYPE_Q4_K || type == GGUF_TYPE_Q5_K;
    const bool q6 = type == GGUF_TYPE_Q6_K;
    const bool q5 = type == GGUF_TYPE_Q5_0 || type == GGUF_TYPE_Q5_1 || type == GGUF_TYPE_Q5_K;
    const bool has_m = type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_1;
    /* groups summed in int16 before widening (see the top of the file) */
    const int g16 = q6 || q5 ? 2 : 4;
    const size_t hdr = k45 ? 128 : q6 ? 64 : 0;
    const size_t sc_bytes = has_m ? 128 : 64;
    const size_t chunk = sc_bytes + 512 + (q5 ? 128 : q6 ? 256 : 0);
    const __m256i m0f = _mm256_set1_epi8(0x0F);
    const __m256i mhb = _mm256_set1_epi8(q6 ? 0x30 : 0x10);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 facc[KK2_MR][2];
    __m256 dsb[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 msb[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        facc[i][0] = facc[i][1] = _mm256_setzero_ps();
    const unsigned char *p = wblk;
    for (int64_t b = 0; b < KB; b++) {
        if (hdr && b % 8 == 0) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                int c = c0 + 8 * h;
                dsb[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * c)));
                if (!q6)
                    msb[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 64 + 2 * c)));
            }
            p += hdr;
        }
        __m256 sa[2], sb[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            int c = c0 + 8 * h;
            if (k45) {
                __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + c)));
                __m256i m = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 32 + c)));
                sa[h] = _mm256_mul_ps(dsb[h], _mm256_cvtepi32_ps(s));
                sb[h] = _mm256_mul_ps(msb[h], _mm256_cvtepi32_ps(m));
            } else if (q6) {
                __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + c)));
                __m256i t = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 32 + c)));
                sa[h] = _mm256_cvtepi32_ps(s);
                sb[h] = _mm256_cvtepi32_ps(t);
            } else {
                sa[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * c)));
                sb[h] = has_m ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 64 + 2 * c)))
                              : _mm256_setzero_ps();
            }
        }
        kn_prefetch_ahead(p, chunk, pf, pf2);
        const unsigned char *nib = p + sc_bytes;
        const unsigned char *qh = nib + 512;
        __m256i iacc[KK2_MR][2], iacc2[KK2_MR][2];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m256i c = _mm256_setzero_si256(), c2 = _mm256_setzero_si256();
            if (type == GGUF_TYPE_Q5_0)
                c = _mm256_set1_epi32(-16 * xs[i * KB + b]);
            if (q6) {
                c = _mm256_set1_epi32(-32 * xs16[i * KB + b]);
                c2 = _mm256_set1_epi32(-32 * (xs[i * KB + b] - xs16[i * KB + b]));
            }
            iacc[i][0] = iacc[i][1] = c;
            iacc2[i][0] = iacc2[i][1] = c2;
        }
        __m256i H[2], H2[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            int c = c0 + 8 * h;
            H[h] = H2[h] = _mm256_setzero_si256();
            if (q5 || q6)
                H[h] = _mm256_loadu_si256((const __m256i *)(qh + 4 * c));
            if (q6)
                H2[h] = _mm256_loadu_si256((const __m256i *)(qh + 128 + 4 * c));
        }
        __m256i s16[KK2_MR][2], s16b[KK2_MR][2];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m256i lo[2], hi[2];
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(nib + 128 * g + 4 * (c0 + 8 * h)));
                lo[h] = _mm256_and_si256(v, m0f);
                hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
                if (q5) {
                    lo[h] = _mm256_or_si256(lo[h],
                                            _mm256_and_si256(_mm256_slli_epi32(H[h], 4 - g), mhb));
                    hi[h] =
                        _mm256_or_si256(hi[h], _mm256_and_si256(_mm256_srli_epi32(H[h], g), mhb));
                }
                if (q6) {
                    lo[h] = _mm256_or_si256(lo[h], _mm256_and_si256(kk2_h6_shift(H[h], g), mhb));
                    hi[h] = _mm256_or_si256(hi[h], _mm256_and_si256(kk2_h6_shift(H2[h], g), mhb));
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const int8_t *xr = xq + i * K + b * KN_QK;
                __m256i xl = _mm256_set1_epi32(kk2_load_i32(xr + 4 * g));
                __m256i xh = _mm256_set1_epi32(kk2_load_i32(xr + 16 + 4 * g));
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    __m256i pl = _mm256_maddubs_epi16(lo[h], xl);
                    __m256i ph = _mm256_maddubs_epi16(hi[h], xh);
                    if (q6) {
                        s16[i][h] = g % g16 == 0 ? pl : _mm256_add_epi16(s16[i][h], pl);
                        s16b[i][h] = g % g16 == 0 ? ph : _mm256_add_epi16(s16b[i][h], ph);
                    } else {
                        __m256i pp = _mm256_add_epi16(pl, ph);
                        s16[i][h] = g % g16 == 0 ? pp : _mm256_add_epi16(s16[i][h], pp);
                    }
                    if (g % g16 == g16 - 1) {
                        iacc[i][h] =
                            _mm256_add_epi32(iacc[i][h], _mm256_madd_epi16(s16[i][h], ones16));
                        if (q6)
                            iacc2[i][h] = _mm256_add_epi32(iacc2[i][h],
                                                           _mm256_madd_epi16(s16b[i][h], ones16));
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            float dxs = xd[i * KB + b];
            __m256 dx = _mm256_set1_ps(dxs);
            __m256 mx = _mm256_set1_ps(dxs * (float)xs[i * KB + b]);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256 f = _mm256_cvtepi32_ps(iacc[i][h]);
                if (q6) {
                    __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc2[i][h]), sb[h],
                                               _mm256_mul_ps(f, sa[h]));
                    facc[i][h] = _mm256_fmadd_ps(t, _mm256_mul_ps(dsb[h], dx), facc[i][h]);
                } else {
                    facc[i][h] = _mm256_fmadd_ps(f, _mm256_mul_ps(sa[h], dx), facc[i][h]);
                    if (has_m)
                        facc[i][h] = _mm256_fmadd_ps(sb[h], mx, facc[i][h]);
                    if (k45)
                        facc[i][h] = _mm256_fnmadd_ps(sb[h], mx, facc[i][h]);
                }
            }
        }
        p += chunk;
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        _mm256_maskstore_ps(y + i * ldy, mask0, facc[i][0]);
        _mm256_maskstore_ps(y + i * ldy + 8, mask1, facc[i][1]);
    }
}

#define KK2_TILE(MR, PF, PF2)                                                                      \
    kk2_tile(MR, type, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB,                            \
             xa->qs16 ? xa->qs16 + i * KB : NULL, K, blk, c0, yb + c0 + i * ldy, ldy, mask0,       \
             mask1, PF, PF2)

static inline __attribute__((always_inline)) void kk2_run(const int type, const kn_mat *w,
                                                          const kn_act *xa, int64_t m, float *y,
                                                          int64_t ldy, int64_t b0, int64_t b1) {
    const int64_t K = w->k, KB = K / KN_QK;
    /* one row (decode at batch 1): the first of a block's two 16-column passes streams it from
     * memory, prefetching ahead as the AVX-512 kernel does; the second finds it in cache */
    const bool kq = type == GGUF_TYPE_Q4_K || type == GGUF_TYPE_Q5_K || type == GGUF_TYPE_Q6_K;
    const int64_t pf1 = !kq || m != 1            ? 0
                        : type == GGUF_TYPE_Q6_K ? w->q6k_prefetch
                                                 : w->kq_prefetch;
    const int64_t pf2 = kq && m == 1 ? w->prefetch_l2 : 0;
    for (int64_t r0 = 0; r0 < m; r0 += KK2_RC) {
        int64_t r1 = m - r0 < KK2_RC ? m : r0 + KK2_RC;
        for (int64_t jb = b0; jb < b1; jb++) {
            int64_t ncols = w->n - jb * KN_NB_Q;
            if (ncols > KN_NB_Q)
                ncols = KN_NB_Q;
            const unsigned char *blk =
                (const unsigned char *)w->packed + (size_t)jb * w->block_stride;
            float *yb = y + jb * KN_NB_Q;
            for (int c0 = 0; c0 < KN_NB_Q && c0 < ncols; c0 += 16) {
                __m256i mask0 = kk2_mask(ncols - c0), mask1 = kk2_mask(ncols - c0 - 8);
                int64_t i = r0;
                for (; i + KK2_MR <= r1; i += KK2_MR)
                    KK2_TILE(KK2_MR, 0, 0);
                if (i < r1 && c0 == 0 && (pf1 || pf2))
                    KK2_TILE(1, pf1, pf2);
                else if (i < r1)
                    KK2_TILE(1, 0, 0);
            }
        }
    }
}

void kn_matmul_kq_avx2(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                       int64_t b0, int64_t b1) {
    switch (w->type) {
    case GGUF_TYPE_Q4_1:
        kk2_run(GGUF_TYPE_Q4_1, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q5_0:
        kk2_run(GGUF_TYPE_Q5_0, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q5_1:
        kk2_run(GGUF_TYPE_Q5_1, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q4_K:
        kk2_run(GGUF_TYPE_Q4_K, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q5_K:
        kk2_run(GGUF_TYPE_Q5_K, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q6_K:
        CHECK(xa->qs16 != NULL);
        kk2_run(GGUF_TYPE_Q6_K, w, xa, m, y, ldy, b0, b1);
        break;
    default:
        CHECK(!"kn_matmul_kq_avx2: unexpected type");
    }
}
