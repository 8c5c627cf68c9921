/* SPDX-License-Identifier: MIT */
/*
 * kn_matmul_kq_avx512: AVX-512 VNNI matmul for Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights
 * (compiled with -mavx512f/bw/vl/dq/vnni only here), over the packed planes of kn_int.h.
 *
 * One kernel template serves every type and every M: a tile is mr rows (<= KK_MR) by 16 or 32
 * columns; per 32-element k-block it
 *   1. rebuilds the block's unsigned weight codes for 16 columns per zmm from the NIB plane
 *      (and, vpternlogd, the QH5 / QH6 planes): one byte per code, four codes per column lane;
 *   2. runs VPDPBUSD with those codes as the unsigned operand and the row's activation codes
 *      broadcast four at a time as the signed operand, into int32 accumulators that start at the
 *      offset correction (-16 s for Q5_0, -32 s_lo and -32 s_hi for the two Q6_K halves, 0
 *      otherwise): the accumulator then holds exactly the isum (or isum_lo / isum_hi) of kn.h,
 *      since every partial sum is far inside int32 (|.| < 2^17);
 *   3. folds the block into the float accumulators with exactly the operations kn.h lists for the
 *      type; the Q6_K combination a * isum_lo + b * isum_hi is formed in float as
 *      fma(float(isum_hi), b, float(isum_lo) * a), which is exact (every intermediate is an integer
 *      below 2^24) and so equals the reference's integer combination converted once.
 * Because steps 1-2 are exact and step 3 is the reference's sequence of IEEE operations, each
 * y[m][n] is bit-identical to kn_matmul_ref's. Row tails (M mod KK_MR) use the same template with
 * fewer rows; column tails are masked stores. Rows are processed in chunks of KK_RC rows with the
 * column blocks inside, so a chunk's activation codes stay in L2 while each column block's
 * weights are reused across the chunk's row tiles (tiling only: no operation changes).
 * Q4_K packed as PAIR (kq-q4k-pair, the default on AVX-512) has its own tile, kk_tile_q4p: the
 * same integers and the same fold, with less bit work per weight byte (see there).
 * Q5 types packed with QM5 (kq-q5-mask, the default on AVX-512) rebuild the fifth bit in step 1
 * with one masked byte add of 16 per vector, the masks loaded straight into mask registers,
 * instead of a shift and a vpternlogd: the same codes (the low nibble is below 16), so the same
 * integers.
 */
#include "kernels/kn_int.h"
#include "base/check.h"
#include "kernels/kn_type_table.h"

#include <immintrin.h>

#define KK_MR 4 /* largest row tile (array bound) */
#define KK_RC 96
/* Row tile and column width (1 or 2 zmm of 16 columns) per type: 4 rows x 32 columns measured
 * best for every type on Sapphire Rapids (bench/bench_matmul.c; 3 or 5 rows within noise, 6
 * rows or 16 columns slower); -D overrides are for tuning runs. */
#ifndef KK_MR_Q4_1
#define KK_MR_Q4_1 4
#define KK_MR_Q5_0 4
#define KK_MR_Q5_1 4
#define KK_MR_Q4_K 4
#define KK_MR_Q5_K 4
#define KK_MR_Q6_K 4
#define KK_NH_Q6   2
#endif

static inline int32_t kk_load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Q6_K: group g's two top bits of a QH6 dword lane moved to bits 4..5 of each byte */
static inline __attribute__((always_inline)) __m512i kk_h6_shift(__m512i h, const int g) {
    return g == 0   ? _mm512_slli_epi32(h, 4)
           : g == 1 ? _mm512_slli_epi32(h, 2)
           : g == 2 ? h
                    : _mm512_srli_epi32(h, 2);
}

/* One tile (see the top of the file). pf: bytes ahead of each k-block to prefetch its share of
 * the weight stream (one prefetch per 64-byte line of the block; 0 = none); it changes no
 * operation on the data. Used for one-row products: Q6_K (the q6k-prefetch toggle, default 2048:
 * on the AMD EPYC VM of 2026-12-02, in one process alternating passes over the 1b-kq shape's 16
 * layers of matrices, 148 MB on two threads, 2048 bytes ahead streamed 1.13x as fast as none,
 * 512-4096: 1.13-1.26x; Q6_K's blocks are the largest, 832 bytes per 32 columns read from three
 * planes at the block's start, and perf of its decode put the stalls on a block's first loads)
 * and Q4_K / Q5_K (the kq-prefetch toggle, default 2048: on the Intel AVX-512 VM of 2026-12-03,
 * one thread streaming the same matrices by CPU time, 1.24x for Q4_K and 1.25x for Q5_K, 1024
 * and 4096 bytes 1.16-1.26x; on the EPYC the same two had measured 0.88-0.91x and 0.94-0.99x on
 * two threads by the wall clock, so the default is the machine's to check; BENCHMARKS.md).
 * pf2: bytes ahead to prefetch the same lines into L2 (mm-prefetch-l2, default 4096, one-row
 * products): the L1 prefetch alone keeps at most the core's few line-fill buffers in flight, and
 * the hardware streamer stops at each 4 KiB page; on the Intel AVX-512 VM of 2026-12-03, two
 * threads alternating passes over the 1b-kq matrices, 1.15-1.17x for Q4_K, Q5_K and Q6_K (4096
 * to 32768 bytes within 3% of each other); on the one of 2026-12-04, 160 layers of them from
 * memory, 4096 against 8192 1.06-1.12x for every type (3072-5120 within 2%, 16384 and 32768
 * slower, 0 below 4096; AVX2 1.07x). */
static inline __attribute__((always_inline)) void
kk_tile(const int mr, const int nh, const int type, const bool q5m, const int8_t *xq,
        const float *xd, const int32_t *xs, const int32_t *xs16, int64_t K,
        const unsigned char *wblk, int h0, float *y, int64_t ldy, const __mmask16 *mask, int64_t pf,
        int64_t pf2) {
    const int64_t KB = K / KN_QK;
    const bool k45 = type == GGUF_TYPE_Q4_K || type == GGUF_TYPE_Q5_K;
    const bool q6 = type == GGUF_TYPE_Q6_K;
    const bool q5 = type == GGUF_TYPE_Q5_0 || type == GGUF_TYPE_Q5_1 || type == GGUF_TYPE_Q5_K;
    const bool has_m = type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_1;
    const size_t hdr = k45 ? 128 : q6 ? 64 : 0;
    const size_t sc_bytes = has_m ? 128 : 64;
    const size_t chunk = sc_bytes + 512 + (q5 ? 128 : q6 ? 256 : 0);
    const __m512i m0f = _mm512_set1_epi8(0x0F);
    const __m512i mhb = _mm512_set1_epi8(q6 ? 0x30 : 0x10);
    __m512 facc[KK_MR][2];
    __m512 dsb[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 msb[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++)
            facc[i][h] = _mm512_setzero_ps();
    const unsigned char *p = wblk;
    for (int64_t b = 0; b < KB; b++) {
        if (hdr && b % 8 == 0) {
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                int hh = h0 + h;
                dsb[h] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * hh)));
                if (!q6)
                    msb[h] =
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 64 + 32 * hh)));
            }
            p += hdr;
        }
        /* per-column block scales: d and m (Q4_1/Q5_1), d (Q5_0), s_j and m_j (Q4_K/Q5_K),
         * the two int8 sub-block scales as floats (Q6_K) */
        __m512 sa[2], sb[2];
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            int hh = h0 + h;
            if (k45) {
                __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16 * hh)));
                __m512i m =
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * hh)));
                sa[h] = _mm512_mul_ps(dsb[h], _mm512_cvtepi32_ps(s));
                sb[h] = _mm512_mul_ps(msb[h], _mm512_cvtepi32_ps(m));
            } else if (q6) {
                __m512i s = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16 * hh)));
                __m512i t =
                    _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * hh)));
                sa[h] = _mm512_cvtepi32_ps(s);
                sb[h] = _mm512_cvtepi32_ps(t);
            } else {
                sa[h] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * hh)));
                sb[h] =
                    has_m ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 64 + 32 * hh)))
                          : _mm512_setzero_ps();
            }
        }
        kn_prefetch_ahead(p, chunk, pf, pf2);
        const unsigned char *nib = p + sc_bytes;
        const unsigned char *qh = nib + 512;
        __m512i iacc[KK_MR][2], iacc2[KK_MR][2];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512i c = _mm512_setzero_si512(), c2 = _mm512_setzero_si512();
            if (type == GGUF_TYPE_Q5_0)
                c = _mm512_set1_epi32(-16 * xs[i * KB + b]);
            if (q6) {
                c = _mm512_set1_epi32(-32 * xs16[i * KB + b]);
                c2 = _mm512_set1_epi32(-32 * (xs[i * KB + b] - xs16[i * KB + b]));
            }
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                iacc[i][h] = c;
                iacc2[i][h] = c2;
            }
        }
        __m512i H[2], H2[2];
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            int hh = h0 + h;
            H[h] = H2[h] = _mm512_setzero_si512();
            if ((q5 && !q5m) || q6)
                H[h] = _mm512_loadu_si512((const void *)(qh + 64 * hh));
            if (q6)
                H2[h] = _mm512_loadu_si512((const void *)(qh + 128 + 64 * hh));
        }
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m512i lo[2], hi[2];
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                __m512i v = _mm512_loadu_si512((const void *)(nib + 128 * g + 64 * (h0 + h)));
                lo[h] = _mm512_and_si512(v, m0f);
                hi[h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
                /* lo |= shifted & mask (vpternlogd 0xF8 = A | (B & C)) */
                if (q5 && q5m) { /* QM5: + 16 where the fifth bit is set (lo, hi < 16) */
                    __mmask64 *mk = (__mmask64 *)(uintptr_t)(qh + 16 * (2 * g + h0 + h));
                    lo[h] = _mm512_mask_add_epi8(lo[h], _load_mask64(mk), lo[h], mhb);
                    hi[h] = _mm512_mask_add_epi8(hi[h], _load_mask64(mk + 1), hi[h], mhb);
                } else if (q5) {
                    lo[h] =
                        _mm512_ternarylogic_epi32(lo[h], _mm512_slli_epi32(H[h], 4 - g), mhb, 0xF8);
                    hi[h] = _mm512_ternarylogic_epi32(hi[h], _mm512_srli_epi32(H[h], g), mhb, 0xF8);
                }
                if (q6) {
                    lo[h] = _mm512_ternarylogic_epi32(lo[h], kk_h6_shift(H[h], g), mhb, 0xF8);
                    hi[h] = _mm512_ternarylogic_epi32(hi[h], kk_h6_shift(H2[h], g), mhb, 0xF8);
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const int8_t *xr = xq + i * K + b * KN_QK;
                __m512i xl = _mm512_set1_epi32(kk_load_i32(xr + 4 * g));
                __m512i xh = _mm512_set1_epi32(kk_load_i32(xr + 16 + 4 * g));
#pragma GCC unroll 2
                for (int h = 0; h < nh; h++) {
                    iacc[i][h] = _mm512_dpbusd_epi32(iacc[i][h], lo[h], xl);
                    if (q6)
                        iacc2[i][h] = _mm512_dpbusd_epi32(iacc2[i][h], hi[h], xh);
                    else
                        iacc[i][h] = _mm512_dpbusd_epi32(iacc[i][h], hi[h], xh);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            float dxs = xd[i * KB + b];
            __m512 dx = _mm512_set1_ps(dxs);
            __m512 mx = _mm512_set1_ps(dxs * (float)xs[i * KB + b]);
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) {
                __m512 f = _mm512_cvtepi32_ps(iacc[i][h]);
                if (q6) {
                    __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc2[i][h]), sb[h],
                                               _mm512_mul_ps(f, sa[h]));
                    facc[i][h] = _mm512_fmadd_ps(t, _mm512_mul_ps(dsb[h], dx), facc[i][h]);
                } else {
                    facc[i][h] = _mm512_fmadd_ps(f, _mm512_mul_ps(sa[h], dx), facc[i][h]);
                    if (has_m)
                        facc[i][h] = _mm512_fmadd_ps(sb[h], mx, facc[i][h]);
                    if (k45)
                        facc[i][h] = _mm512_fnmadd_ps(sb[h], mx, facc[i][h]);
                }
            }
        }
        p += chunk;
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++)
            _mm512_mask_storeu_ps(y + i * ldy + 16 * h, mask[h0 + h], facc[i][h]);
}

/* One Q4_K tile of mr rows by 32 columns over the PAIR plane (kq-q4k-pair; see kn_int.h). Per
 * k-block and row, two int32 accumulators over the block's 8 steps of 4 inputs: A takes each
 * step's 64 bytes as they are, B the same bytes & 0xF0, both against the row's 4 codes of the
 * step broadcast; lane c (column c of the first 16, column c + 16 of the second) then holds
 *   A = isum_c + 16 isum_{c+16},  B = 16 isum_{c+16}
 * exactly (|A| < 2^20), so isum_c = A - B and isum_{c+16} = B >> 4 (arithmetic: B is a multiple
 * of 16) are the integers the NIB tile computes, and the fold that follows is kk_tile's for Q4_K
 * operation for operation (s_j = d sc_j, then s_j d_x, fma; m_j = dmin min_j, fnmadd with
 * d_x s): the same bits. Per 64 weight bytes it spends one AND where the NIB tile spends an AND,
 * a shift and an AND (the nibbles need no shift: both dot products take whole bytes), and it
 * needs no per-group low/high split of the activations. */
static inline __attribute__((always_inline)) void
kk_tile_q4p(const int mr, const int8_t *xq, const float *xd, const int32_t *xs, int64_t K,
            const unsigned char *wblk, float *y, int64_t ldy, const __mmask16 *mask, int64_t pf,
            int64_t pf2) {
    const int64_t KB = K / KN_QK;
    const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
    __m512 facc[KK_MR][2], dsb[2], msb[2];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        facc[i][0] = facc[i][1] = _mm512_setzero_ps();
    dsb[0] = dsb[1] = msb[0] = msb[1] = _mm512_setzero_ps();
    const unsigned char *p = wblk;
    for (int64_t b = 0; b < KB; b++) {
        if (b % 8 == 0) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                dsb[h] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * h)));
                msb[h] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 64 + 32 * h)));
            }
            p += 128;
        }
        __m512 sa[2], sb[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            __m512i mn = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
            sa[h] = _mm512_mul_ps(dsb[h], _mm512_cvtepi32_ps(sc));
            sb[h] = _mm512_mul_ps(msb[h], _mm512_cvtepi32_ps(mn));
        }
        kn_prefetch_ahead(p, 576, pf, pf2);
        const unsigned char *pr = p + 64;
        /* tiles of 1-2 rows keep two accumulators of each kind (even and odd steps): half the
         * dependency chain; int32 addition is exact, so the sums are the same */
        const int na = mr <= 2 ? 2 : 1;
        __m512i A[KK_MR][2], B[KK_MR][2];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            A[i][0] = A[i][1] = B[i][0] = B[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int st = 0; st < 8; st++) {
            __m512i v = _mm512_loadu_si512((const void *)(pr + 64 * st));
            __m512i vh = _mm512_and_si512(v, mf0);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                __m512i xb = _mm512_set1_epi32(kk_load_i32(xq + i * K + b * KN_QK + 4 * st));
                A[i][st % na] = _mm512_dpbusd_epi32(A[i][st % na], v, xb);
                B[i][st % na] = _mm512_dpbusd_epi32(B[i][st % na], vh, xb);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            float dxs = xd[i * KB + b];
            __m512 dx = _mm512_set1_ps(dxs);
            __m512 mx = _mm512_set1_ps(dxs * (float)xs[i * KB + b]);
            __m512i a = _mm512_add_epi32(A[i][0], A[i][1]), bb = _mm512_add_epi32(B[i][0], B[i][1]);
            __m512 f0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a, bb));
            __m512 f1 = _mm512_cvtepi32_ps(_mm512_srai_epi32(bb, 4));
            facc[i][0] = _mm512_fmadd_ps(f0, _mm512_mul_ps(sa[0], dx), facc[i][0]);
            facc[i][0] = _mm512_fnmadd_ps(sb[0], mx, facc[i][0]);
            facc[i][1] = _mm512_fmadd_ps(f1, _mm512_mul_ps(sa[1], dx), facc[i][1]);
            facc[i][1] = _mm512_fnmadd_ps(sb[1], mx, facc[i][1]);
        }
        p += 64 + 512;
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            _mm512_mask_storeu_ps(y + i * ldy + 16 * h, mask[h], facc[i][h]);
}

#define KK_TILE_Q4P(MR)                                                                            \
    kk_tile_q4p(MR, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB, K, blk, yb + i * ldy, ldy,    \
                mask, MR == 1 && m == 1 ? w->kq_prefetch : 0,                                      \
                MR == 1 && m == 1 ? w->prefetch_l2 : 0)

#define KK_TILE(MR, PF, PF2)                                                                       \
    kk_tile(MR, nh, type, Q5M, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB,                    \
            xa->qs16 ? xa->qs16 + i * KB : NULL, K, blk, h0, yb + 16 * h0 + i * ldy, ldy, mask,    \
            PF, PF2)

/* All column blocks [b0, b1) and rows [0, m) for one type and column width (nh zmm); Q5M: the
 * fifth bits are QM5 (w->q5_mask, Q5 types only). */
static inline __attribute__((always_inline)) void
kk_run(const int type, const bool Q5M, const int nh, const int mr, const kn_mat *w,
       const kn_act *xa, int64_t m, float *y, int64_t ldy, int64_t b0, int64_t b1) {
    const int64_t K = w->k, KB = K / KN_QK;
    for (int64_t r0 = 0; r0 < m; r0 += KK_RC) {
        int64_t r1 = m - r0 < KK_RC ? m : r0 + KK_RC;
        for (int64_t jb = b0; jb < b1; jb++) {
            int64_t ncols = w->n - jb * KN_NB_Q;
            if (ncols > KN_NB_Q)
                ncols = KN_NB_Q;
            __mmask16 mask[2];
            mask[0] = ncols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ncols) - 1);
            mask[1] = ncols >= 32   ? (__mmask16)0xFFFF
                      : ncols <= 16 ? (__mmask16)0
                                    : (__mmask16)((1u << (ncols - 16)) - 1);
            const unsigned char *blk =
                (const unsigned char *)w->packed + (size_t)jb * w->block_stride;
            float *yb = y + jb * KN_NB_Q;
            if (type == GGUF_TYPE_Q4_K && w->q4k_pair) {
                int64_t i = r0;
                for (; i + 4 <= r1; i += 4)
                    KK_TILE_Q4P(4);
                switch (r1 - i) {
                case 3:
                    KK_TILE_Q4P(3);
                    break;
                case 2:
                    KK_TILE_Q4P(2);
                    break;
                case 1:
                    KK_TILE_Q4P(1);
                    break;
                default:
                    break;
                }
                continue;
            }
            for (int h0 = 0; h0 < 2 && 16 * h0 < ncols; h0 += nh) {
                int64_t i = r0;
                if (m == 1 && type == GGUF_TYPE_Q6_K &&
                    (w->q6k_prefetch || w->prefetch_l2)) { /* decode, batch 1 */
                    KK_TILE(1, w->q6k_prefetch, w->prefetch_l2);
                    continue;
                }
                if (m == 1 && (type == GGUF_TYPE_Q4_K || type == GGUF_TYPE_Q5_K) &&
                    (w->kq_prefetch || w->prefetch_l2)) {
                    KK_TILE(1, w->kq_prefetch, w->prefetch_l2);
                    continue;
                }
                if (mr == 4)
                    for (; i + 4 <= r1; i += 4)
                        KK_TILE(4, 0, 0);
                else if (mr == 3)
                    for (; i + 3 <= r1; i += 3)
                        KK_TILE(3, 0, 0);
                else
                    for (; i + 2 <= r1; i += 2)
                        KK_TILE(2, 0, 0);
                switch (r1 - i) {
                case 3:
                    KK_TILE(3, 0, 0);
                    break;
                case 2:
                    KK_TILE(2, 0, 0);
                    break;
                case 1:
                    KK_TILE(1, 0, 0);
                    break;
                default:
                    break;
                }
            }
        }
    }
}

void kn_matmul_kq_avx512(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                         int64_t b0, int64_t b1) {
    switch (w->type) {
    case GGUF_TYPE_Q4_1:
        kk_run(GGUF_TYPE_Q4_1, false, 2, KK_MR_Q4_1, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q5_0:
        if (w->q5_mask)
            kk_run(GGUF_TYPE_Q5_0, true, 2, KK_MR_Q5_0, w, xa, m, y, ldy, b0, b1);
        else
            kk_run(GGUF_TYPE_Q5_0, false, 2, KK_MR_Q5_0, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q5_1:
        if (w->q5_mask)
            kk_run(GGUF_TYPE_Q5_1, true, 2, KK_MR_Q5_1, w, xa, m, y, ldy, b0, b1);
        else
            kk_run(GGUF_TYPE_Q5_1, false, 2, KK_MR_Q5_1, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q4_K:
        kk_run(GGUF_TYPE_Q4_K, false, 2, KK_MR_Q4_K, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q5_K:
        if (w->q5_mask)
            kk_run(GGUF_TYPE_Q5_K, true, 2, KK_MR_Q5_K, w, xa, m, y, ldy, b0, b1);
        else
            kk_run(GGUF_TYPE_Q5_K, false, 2, KK_MR_Q5_K, w, xa, m, y, ldy, b0, b1);
        break;
    case GGUF_TYPE_Q6_K:
        CHECK(xa->qs16 != NULL);
        kk_run(GGUF_TYPE_Q6_K, false, KK_NH_Q6, KK_MR_Q6_K, w, xa, m, y, ldy, b0, b1);
        break;
    default:
        CHECK(!"kn_matmul_kq_avx512: unexpected type");
    }
}
