/* SPDX-License-Identifier: MIT */
/*
 * kn_matmul_avx512: AVX-512 matmul kernels (compiled with -mavx512f/bw/vl/dq/vnni only here).
 *
 * Float types: for each 64-column block and each K chunk of w->kc, the block's [kc][64] panel is
 * converted once to f32 in the thread's scratch (F16 via vcvtph2ps, BF16 by shifting; both exact):
 * with mm-panel-fuse (the default) inside the first row tile's k loop, which stores each converted
 * k-step for the other tiles and uses it at once, so the conversion's loads wait under that
 * tile's FMAs (Intel AVX-512 VM, one thread, the 0.5b layers L3-resident: 1.08x at 32 rows,
 * decode at batch 32; 1.02x at 256); without it in a loop of its own before the tiles. Then every
 * 6-row tile of the M rows runs the register-blocked micro-kernel: 6 x 4 zmm
 * accumulators, one broadcast of x[m][k] per row and 4 FMAs per row per k. The accumulators are
 * stored to y between chunks and reloaded, which is exact, so each y[m][n] is the single fma
 * chain over k = 0..K-1 that kn_matmul_ref computes. The M rows are cut into ceil(M/6) tiles of
 * equal height give or take one (the same kernel with fewer rows); column tails are masked stores.
 * The chunk (mm-kc, default 128) only moves those stores: 128 divides the K of common shapes (896,
 * 4864, 2048, 4096...) and its 32 KiB panel still leaves L1 room for the streaming rows. The
 * activations of a chunk do not fit L1 at prefill sizes
 * (256 rows x 128 floats), so each tile prefetches the next tile's activation rows and, after the
 * first chunk, its y rows, a few lines per 16 k-steps, and its share of the weights' next chunk
 * (spread over all tiles), into L2 with mm-panel-pf-l2 (the default: into L1 the next chunk's
 * 16 KiB of F16 pushed out panel and activation lines; decode at batch 32 on the Intel VM 1.015x),
 * else into L1. The k loop addresses the six rows off two pointers and a stride, so it
 * carries no other arithmetic. With at most mm-direct-rows rows (decode up to batch 32, the few
 * rows of a speculative verification step) there is too little row reuse to pay for the panel:
 * kf_tile_direct converts in registers, prefetching 4 KiB ahead, over the whole of K for one or
 * two rows, and in L1-sized K chunks shared by all the row tiles for 3 or more (kf_block_direct).
 * The panel's conversion and its stores and reloads cost about as much as converting in every
 * row tile up to 32 rows (6 tiles); the direct loops are specialised for F16 and BF16 at compile
 * time, so their k-step carries no branch (A/B figures in BENCHMARKS.md, "## Engine"). That
 * holds where the conversion runs beside the FMAs (AMD Zen 4); on Intel a 512-bit vcvtph2ps takes
 * both FMA ports, so from 13 rows on converting each chunk once into the panel is faster (at 32
 * rows 4 conversions per 24 FMAs in every tile against 8 per 128 for the panel): mm-direct-rows
 * defaults to 32 or 12 by CPU (kn_matmul_direct_rows).
 *
 * Quantized types: 4-row x 32-column tiles (Q8_0 with mm-q-tile 5 to 7 and more than 4 rows:
 * ceil(M / mm-q-tile) tiles of equal height, up to 7 x 2 int32 and 7 x 2 float accumulators, 28
 * of the 32 registers, so 5 to 7 rows, the verification step of speculative decoding, sweep the
 * weights once); per 32-element k-block, 8 (Q8_0) or 4 x 2 (Q4_0)
 * VPDPBUSD steps accumulate exact int32 dot products (weights as the unsigned operand, offset by
 * 128 or stored as nibbles 0..15, activations broadcast as the signed operand), the offset is
 * removed with the activation block sum, and the block is folded into the float accumulator with
 * one fma(isum, d_w * d_x, acc): the same operations kn_matmul_ref performs.
 */
#include "kernels/kn_int.h"
#include "kernels/kn_type_table.h"

#include <immintrin.h>

#define KF_MR  6
#define KQ_MR  4
#define KQ_MR6 7 /* Q8_0 with mm-q-tile 5 to 7 */

static inline int32_t kq_load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 16 F16 (f16) or BF16 weights at p as f32, exactly: vcvtph2ps, or the bits shifted into the high
 * half of each lane */
static inline __attribute__((always_inline)) __m512 kf_cvt16(const bool f16, const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return f16 ? _mm512_cvtph_ps(h)
               : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* n k-steps of the micro-kernel: row m's activations at x0 + m * ldx (rows 3-5 off a second
 * pointer, so every broadcast is one base + index addressing mode and the loop carries no other
 * arithmetic), the panel's rows at wk. */
static inline __attribute__((always_inline)) void
kf_steps(const int mr, const float *x0, int64_t ldx, const float *wk, int64_t n, __m512 (*acc)[4]) {
    const float *x3 = x0 + 3 * ldx;
    const int64_t ldx2 = 2 * ldx;
    for (int64_t k = 0; k < n; k++, x0++, x3++, wk += KN_NB_F) {
        __m512 w0 = _mm512_load_ps(wk);
        __m512 w1 = _mm512_load_ps(wk + 16);
        __m512 w2 = _mm512_load_ps(wk + 32);
        __m512 w3 = _mm512_load_ps(wk + 48);
#pragma GCC unroll 16
        for (int m = 0; m < mr; m++) {
            const float *xp = m < 3 ? x0 : x3;
            int r = m % 3;
            __m512 xb = _mm512_set1_ps(r == 0 ? xp[0] : r == 1 ? xp[ldx] : xp[ldx2]);
            acc[m][0] = _mm512_fmadd_ps(xb, w0, acc[m][0]);
            acc[m][1] = _mm512_fmadd_ps(xb, w1, acc[m][1]);
            acc[m][2] = _mm512_fmadd_ps(xb, w2, acc[m][2]);
            acc[m][3] = _mm512_fmadd_ps(xb, w3, acc[m][3]);
        }
    }
}

/* kf_steps for the first row tile of a chunk with mm-panel-fuse: each k-step's 64 weights are
 * converted from F16 (f16) or BF16 at src in registers, stored to the panel at wk for the tiles
 * that follow, and used at once; the same f32 values and the same FMAs as kf_steps over the
 * panel kf_convert would have made, so the same bits. The conversion's loads then wait under
 * this tile's FMAs instead of in a loop of their own. */
static inline __attribute__((always_inline)) void kf_steps_conv(const int mr, const bool f16,
                                                                const float *x0, int64_t ldx,
                                                                const uint16_t *src, float *wk,
                                                                int64_t n, __m512 (*acc)[4]) {
    const float *x3 = x0 + 3 * ldx;
    const int64_t ldx2 = 2 * ldx;
    for (int64_t k = 0; k < n; k++, x0++, x3++, wk += KN_NB_F, src += KN_NB_F) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            wv[j] = kf_cvt16(f16, src + 16 * j);
            _mm512_store_ps(wk + 16 * j, wv[j]);
        }
#pragma GCC unroll 16
        for (int m = 0; m < mr; m++) {
            const float *xp = m < 3 ? x0 : x3;
            int r = m % 3;
            __m512 xb = _mm512_set1_ps(r == 0 ? xp[0] : r == 1 ? xp[ldx] : xp[ldx2]);
            acc[m][0] = _mm512_fmadd_ps(xb, wv[0], acc[m][0]);
            acc[m][1] = _mm512_fmadd_ps(xb, wv[1], acc[m][1]);
            acc[m][2] = _mm512_fmadd_ps(xb, wv[2], acc[m][2]);
            acc[m][3] = _mm512_fmadd_ps(xb, wv[3], acc[m][3]);
        }
    }
}

/* One tile: mr rows (<= KF_MR) x 64 columns over kc k-steps of the panel wp, accumulating into y
 * (or starting from zero with init). The k loop runs in blocks of 16 steps; at the top of each,
 * a line of each of the next tile's activation rows (xn, NULL for none) and, after the first
 * chunk, a row of its y are prefetched, and this tile's share of the weight prefetch: pf_n
 * lines from pf, spread over the blocks. With src (the chunk's F16/BF16 weights, f16 telling
 * which; NULL for none) the tile converts them into the panel wp as it goes (kf_steps_conv). */
static inline __attribute__((always_inline)) void
kf_tile(const int mr, const float *x, int64_t ldx, const float *wp, int64_t kc, float *y,
        int64_t ldy, const __mmask16 *mask, bool init, const char *pf, int64_t pf_n,
        const float *xn, const uint16_t *src, bool f16, bool pf_l2) {
    const int64_t nb = (kc + 15) / 16;
    __m512 acc[KF_MR][4];
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            acc[m][j] =
                init ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[j], y + m * ldy + 16 * j);
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        int64_t n = kc - k0 < 16 ? kc - k0 : 16;
        if (xn) {
#pragma GCC unroll 16
            for (int m = 0; m < KF_MR; m++)
                _mm_prefetch((const char *)(xn + m * ldx + k0), _MM_HINT_T0);
            if (!init) {
                int64_t r = k0 / 16; /* the next tile's y: a row's 4 lines per block of 16 */
                if (r < KF_MR)
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++)
                        _mm_prefetch((const char *)(y + (mr + r) * ldy + 16 * j), _MM_HINT_T0);
            }
        }
        for (int64_t l = k0 / 16 * pf_n / nb; l < (k0 / 16 + 1) * pf_n / nb; l++) {
            if (pf_l2)
                _mm_prefetch(pf + l * 64, _MM_HINT_T1);
            else
                _mm_prefetch(pf + l * 64, _MM_HINT_T0);
        }
        if (src) /* the first tile with mm-panel-fuse: converts as it goes (wp is the panel) */
            kf_steps_conv(mr, f16, x + k0, ldx, src + k0 * KN_NB_F, (float *)wp + k0 * KN_NB_F, n,
                          acc);
        else
            kf_steps(mr, x + k0, ldx, wp + k0 * KN_NB_F, n, acc);
    }
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            _mm512_mask_storeu_ps(y + m * ldy + 16 * j, mask[j], acc[m][j]);
}

/* Converts a [kc][64] panel of F16/BF16 to f32. */
static void kf_convert(int type, const uint16_t *src, int64_t kc, float *dst) {
    int64_t n = kc * KN_NB_F;
    if (type == GGUF_TYPE_F16)
        for (int64_t i = 0; i < n; i += 16)
            _mm512_store_ps(dst + i, kf_cvt16(true, src + i));
    else
        for (int64_t i = 0; i < n; i += 16)
            _mm512_store_ps(dst + i, kf_cvt16(false, src + i));
}

/* Few-row tile for F16/BF16 (rows <= KF_DIRECT_MR): converts each weight vector in registers
 * right before its FMAs instead of through the scratch panel (with little row reuse the panel is
 * only extra L1 traffic), over the k-steps [k0, k0 + kc), starting from zero (init) or from the
 * partial sums already in y (stored and reloaded exactly, as kf_tile does). Same converted values,
 * same fma chain per y element as kf_tile, so the same bits. pf: prefetch the weights
 * KF_DIRECT_PF k-steps (4 KiB) ahead; a prefetch past the end of the weights is a hint and never
 * faults. */
#define KF_DIRECT_MR 6
#define KF_DIRECT_PF 32
static inline __attribute__((always_inline)) void
kf_tile_direct(const int mr, const bool f16, const float *x, int64_t ldx, const uint16_t *wb,
               int64_t k0, int64_t kc, bool init, float *y, int64_t ldy, const __mmask16 *mask,
               bool pf) {
    __m512 acc[KF_DIRECT_MR][4];
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            acc[m][j] =
                init ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[j], y + m * ldy + 16 * j);
    /* without pf the two prefetches name the k-step's own lines, about to be loaded anyway: a
     * branch-free loop either way */
    const int64_t pf_off = pf ? KF_DIRECT_PF * KN_NB_F : 0;
    for (int64_t k = k0; k < k0 + kc; k++) {
        const uint16_t *wk = wb + k * KN_NB_F;
        _mm_prefetch((const char *)(wk + pf_off), _MM_HINT_T0); /* two lines per k-step */
        _mm_prefetch((const char *)(wk + pf_off) + 64, _MM_HINT_T0);
        __m512 w[4];
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            w[j] = kf_cvt16(f16, wk + 16 * j);
#pragma GCC unroll 16
        for (int m = 0; m < mr; m++) {
            __m512 xb = _mm512_set1_ps(x[m * ldx + k]);
#pragma GCC unroll 16
            for (int j = 0; j < 4; j++)
                acc[m][j] = _mm512_fmadd_ps(xb, w[j], acc[m][j]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 16
        for (int j = 0; j < 4; j++)
            _mm512_mask_storeu_ps(y + m * ldy + 16 * j, mask[j], acc[m][j]);
}

/* Rows 3 .. mm-direct-rows of F16/BF16 (the verification step of speculative decoding, decode at
 * batch up to 32): column block by column block, K in chunks of KF_DIRECT_KC k-steps (16 KiB of
 * weights, which stay in L1), and within a chunk every tile of up to KF_DIRECT_MR rows converts
 * the chunk's weights in registers: each weight is read from memory once for all the rows, and
 * no panel is written. The tiles are ceil(m / 6) of equal height give or take one; a row's
 * operations depend neither on its tile nor on m, so the bits are kf_tile's. Only the first tile
 * prefetches (the others find the chunk in L1). */
#define KF_DIRECT_KC 128
static inline __attribute__((always_inline)) void
kf_block_direct(const kn_mat *w, const bool f16, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                int64_t jb, const uint16_t *blk, const __mmask16 *mask) {
    const int64_t K = w->k, ldx = xa->ldx;
    const int64_t nt = (m + KF_DIRECT_MR - 1) / KF_DIRECT_MR, base = m / nt, extra = m % nt;
    float *yb = y + jb * KN_NB_F;
    for (int64_t k0 = 0; k0 < K; k0 += KF_DIRECT_KC) {
        const int64_t kc = K - k0 < KF_DIRECT_KC ? K - k0 : KF_DIRECT_KC;
        const bool init = k0 == 0;
        for (int64_t t = 0, i = 0; t < nt; t++) {
            const int64_t r = base + (t < extra);
            const float *xt = xa->x + i * ldx;
            float *yt = yb + i * ldy;
            const bool pf = w->prefetch && t == 0;
            switch (r) {
            case 6:
                kf_tile_direct(6, f16, xt, ldx, blk, k0, kc, init, yt, ldy, mask, pf);
                break;
            case 5:
                kf_tile_direct(5, f16, xt, ldx, blk, k0, kc, init, yt, ldy, mask, pf);
                break;
            case 4:
                kf_tile_direct(4, f16, xt, ldx, blk, k0, kc, init, yt, ldy, mask, pf);
                break;
            case 3:
                kf_tile_direct(3, f16, xt, ldx, blk, k0, kc, init, yt, ldy, mask, pf);
                break;
            case 2:
                kf_tile_direct(2, f16, xt, ldx, blk, k0, kc, init, yt, ldy, mask, pf);
                break;
            default:
                kf_tile_direct(1, f16, xt, ldx, blk, k0, kc, init, yt, ldy, mask, pf);
                break;
            }
            i += r;
        }
    }
}

/* Column masks of block jb (columns past N masked off). */
static void kf_masks(const kn_mat *w, int64_t jb, __mmask16 *mask) {
    int64_t ncols = w->n - jb * KN_NB_F;
    if (ncols > KN_NB_F)
        ncols = KN_NB_F;
    for (int j = 0; j < 4; j++) {
        int64_t c = ncols - 16 * j;
        mask[j] = c >= 16 ? (__mmask16)0xFFFF : c <= 0 ? (__mmask16)0 : (__mmask16)((1u << c) - 1);
    }
}

/* The k-chunk [k0, k0 + w->kc) of column block jb for all m rows: converts the panel (F16/BF16)
 * and runs the row tiles; the first tile prefetches pf (the weights this thread converts next;
 * NULL for none). */
static void kf_block_chunk(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                           int64_t jb, int64_t k0, float *scratch, const char *pf) {
    const int64_t K = w->k, kc = K - k0 < w->kc ? K - k0 : w->kc;
    __mmask16 mask[4];
    kf_masks(w, jb, mask);
    const unsigned char *blk = (const unsigned char *)w->packed + (size_t)jb * w->block_stride;
    const float *wp;
    const uint16_t *src = NULL; /* mm-panel-fuse: the first tile converts the panel */
    const bool f16 = w->type == GGUF_TYPE_F16;
    if (w->type == GGUF_TYPE_F32) {
        wp = (const float *)blk + k0 * KN_NB_F;
    } else if (w->panel_fuse) {
        src = (const uint16_t *)blk + k0 * KN_NB_F;
        wp = scratch;
    } else {
        kf_convert(w->type, (const uint16_t *)blk + k0 * KN_NB_F, kc, scratch);
        wp = scratch;
    }
    float *yb = y + jb * KN_NB_F;
    const float *xb = xa->x + k0;
    const bool pf_l2 = w->panel_pf_l2;
    const int64_t ldx = xa->ldx;
    bool init = k0 == 0;
    /* the weights converted next, this panel's size in lines, shared evenly among the tiles: the
     * first tile alone would ask for a chunk in a few microseconds, more than the fill buffers
     * and memory give one core, and the rest would ask for nothing (decode at batch 32: a
     * fifth faster spread) */
    const int64_t pf_total = pf ? kc * (w->type == GGUF_TYPE_F32 ? 4 : 2) : 0;
    /* ceil(m / 6) tiles of as equal a height as can be (32 rows: 6, 6, 5, 5, 5, 5; never a
     * thin last tile): the row count of a tile does not change a row's operations */
    const int64_t nt = (m + KF_MR - 1) / KF_MR, base = m / nt, extra = m % nt;
    for (int64_t t = 0, i = 0; t < nt; t++) {
        int64_t r = base + (t < extra);
        int64_t l0 = pf_total * t / nt, l1 = pf_total * (t + 1) / nt;
        const char *pft = pf ? pf + l0 * 64 : NULL;
        int64_t pf_n = l1 - l0;
        const float *xt = xb + i * ldx, *xn = t + 1 < nt && w->prefetch ? xt + r * ldx : NULL;
        float *yt = yb + i * ldy;
        const uint16_t *st = t == 0 ? src : NULL;
        switch (r) {
        case 6:
            kf_tile(6, xt, ldx, wp, kc, yt, ldy, mask, init, pft, pf_n, xn, st, f16, pf_l2);
            break;
        case 5:
            kf_tile(5, xt, ldx, wp, kc, yt, ldy, mask, init, pft, pf_n, xn, st, f16, pf_l2);
            break;
        case 4:
            kf_tile(4, xt, ldx, wp, kc, yt, ldy, mask, init, pft, pf_n, xn, st, f16, pf_l2);
            break;
        case 3:
            kf_tile(3, xt, ldx, wp, kc, yt, ldy, mask, init, pft, pf_n, xn, st, f16, pf_l2);
            break;
        case 2:
            kf_tile(2, xt, ldx, wp, kc, yt, ldy, mask, init, pft, pf_n, xn, st, f16, pf_l2);
            break;
        default:
            kf_tile(1, xt, ldx, wp, kc, yt, ldy, mask, init, pft, pf_n, xn, st, f16, pf_l2);
            break;
        }
        i += r;
    }
}

/* The direct path over column blocks [b0, b1) for m <= mm-direct-rows rows: one or two rows
 * in one tile over the whole of K, more in K chunks shared by the row tiles (kf_block_direct). */
static inline __attribute__((always_inline)) void kf_direct(const kn_mat *w, const bool f16,
                                                            const kn_act *xa, int64_t m, float *y,
                                                            int64_t ldy, int64_t b0, int64_t b1) {
    for (int64_t jb = b0; jb < b1; jb++) {
        __mmask16 mask[4];
        kf_masks(w, jb, mask);
        const uint16_t *blk =
            (const uint16_t *)((const unsigned char *)w->packed + (size_t)jb * w->block_stride);
        float *yb = y + jb * KN_NB_F;
        if (m == 2)
            kf_tile_direct(2, f16, xa->x, xa->ldx, blk, 0, w->k, true, yb, ldy, mask, w->prefetch);
        else if (m == 1)
            kf_tile_direct(1, f16, xa->x, xa->ldx, blk, 0, w->k, true, yb, ldy, mask, w->prefetch);
        else
            kf_block_direct(w, f16, xa, m, y, ldy, jb, blk, mask);
    }
}

void kn_matmul_f_avx512(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                        int64_t b0, int64_t b1, float *scratch) {
    const int64_t K = w->k;
    const size_t esz = w->type == GGUF_TYPE_F32 ? 4 : 2;
    /* address of the weights of (block jb, k-step k) */
    const unsigned char *wb = (const unsigned char *)w->packed;
#define KF_W(jb, k) (wb + (size_t)(jb)*w->block_stride + (size_t)(k)*KN_NB_F * esz)
    if (w->type != GGUF_TYPE_F32 && m <= w->direct_rows) {
        /* F16 and BF16 as constants: the conversion is chosen at compile time, not per k-step */
        if (w->type == GGUF_TYPE_F16)
            kf_direct(w, true, xa, m, y, ldy, b0, b1);
        else
            kf_direct(w, false, xa, m, y, ldy, b0, b1);
        return;
    }
    for (int64_t jb = b0; jb < b1; jb++)
        for (int64_t k0 = 0; k0 < K; k0 += w->kc) /* next: this block's next chunk or the next
                                                   * block's first, contiguous in memory */
            kf_block_chunk(w, xa, m, y, ldy, jb, k0, scratch,
                           w->prefetch ? (const char *)KF_W(jb, k0 + w->kc) : NULL);
#undef KF_W
}

static inline __attribute__((always_inline)) void
kq_tile(const int mr, const bool q8, const int8_t *xq, const float *xd, const int32_t *xs,
        int64_t K, const unsigned char *wblk, float *y, int64_t ldy, __mmask16 mask0,
        __mmask16 mask1, int64_t pf, int64_t pf2) {
    const int64_t KB = K / KN_QK;
    const size_t bb = q8 ? KN_Q8_BLOCK_BYTES : KN_Q4_BLOCK_BYTES;
    const __m512i corr_mul = _mm512_set1_epi32(q8 ? 128 : 8);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    __m512 facc[KQ_MR6][2];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
        facc[i][0] = facc[i][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < KB; b++) {
        const unsigned char *p = wblk + (size_t)b * bb;
        const unsigned char *qs = p + 64;
        kn_prefetch_ahead(p, bb, pf, pf2);
        __m512i iacc[KQ_MR6][2];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++)
            iacc[i][0] = iacc[i][1] = _mm512_setzero_si512();
        if (q8) {
#pragma GCC unroll 16
            for (int g = 0; g < 8; g++) {
                __m512i w0 = _mm512_loadu_si512((const void *)(qs + g * 128));
                __m512i w1 = _mm512_loadu_si512((const void *)(qs + g * 128 + 64));
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    __m512i xb = _mm512_set1_epi32(kq_load_i32(xq + i * K + b * KN_QK + 4 * g));
                    iacc[i][0] = _mm512_dpbusd_epi32(iacc[i][0], w0, xb);
                    iacc[i][1] = _mm512_dpbusd_epi32(iacc[i][1], w1, xb);
                }
            }
        } else {
#pragma GCC unroll 16
            for (int g = 0; g < 4; g++) {
                __m512i v0 = _mm512_loadu_si512((const void *)(qs + g * 128));
                __m512i v1 = _mm512_loadu_si512((const void *)(qs + g * 128 + 64));
                __m512i lo0 = _mm512_and_si512(v0, nib);
                __m512i lo1 = _mm512_and_si512(v1, nib);
                __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), nib);
                __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), nib);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    const int8_t *xr = xq + i * K + b * KN_QK;
                    __m512i xl = _mm512_set1_epi32(kq_load_i32(xr + 4 * g));
                    __m512i xh = _mm512_set1_epi32(kq_load_i32(xr + 16 + 4 * g));
                    iacc[i][0] = _mm512_dpbusd_epi32(iacc[i][0], lo0, xl);
                    iacc[i][1] = _mm512_dpbusd_epi32(iacc[i][1], lo1, xl);
                    iacc[i][0] = _mm512_dpbusd_epi32(iacc[i][0], hi0, xh);
                    iacc[i][1] = _mm512_dpbusd_epi32(iacc[i][1], hi1, xh);
                }
            }
        }
        __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            __m512i corr = _mm512_mullo_epi32(_mm512_set1_epi32(xs[i * KB + b]), corr_mul);
            __m512 dx = _mm512_set1_ps(xd[i * KB + b]);
            __m512 f0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(iacc[i][0], corr));
            __m512 f1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(iacc[i][1], corr));
            facc[i][0] = _mm512_fmadd_ps(f0, _mm512_mul_ps(dw0, dx), facc[i][0]);
            facc[i][1] = _mm512_fmadd_ps(f1, _mm512_mul_ps(dw1, dx), facc[i][1]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
        _mm512_mask_storeu_ps(y + i * ldy, mask0, facc[i][0]);
        _mm512_mask_storeu_ps(y + i * ldy + 16, mask1, facc[i][1]);
    }
}

#define KQ_ROWS(MR, Q8)                                                                            \
    kq_tile(MR, Q8, xa->q + i * K, xa->qd + i * KB, xa->qs + i * KB, K, blk, yb + i * ldy, ldy,    \
            mask0, mask1, 0, 0)

void kn_matmul_q_avx512(const kn_mat *w, const kn_act *xa, int64_t m, float *y, int64_t ldy,
                        int64_t b0, int64_t b1) {
    const int64_t K = w->k, KB = K / KN_QK;
    const bool q8 = w->type == GGUF_TYPE_Q8_0;
    for (int64_t jb = b0; jb < b1; jb++) {
        int64_t ncols = w->n - jb * KN_NB_Q;
        if (ncols > KN_NB_Q)
            ncols = KN_NB_Q;
        __mmask16 mask0 = ncols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ncols) - 1);
        __mmask16 mask1 = ncols >= 32   ? (__mmask16)0xFFFF
                          : ncols <= 16 ? (__mmask16)0
                                        : (__mmask16)((1u << (ncols - 16)) - 1);
        const unsigned char *blk = (const unsigned char *)w->packed + (size_t)jb * w->block_stride;
        float *yb = y + jb * KN_NB_Q;
        int64_t i = 0;
        /* decode at batch 1 (q8-prefetch, default 2048): one thread streaming the 1b-kq
         * layer matrices (192 MB) by CPU time on the Intel AVX-512 VM, 16 alternated rounds,
         * 1.16x as fast as the hardware prefetcher alone (1024: 1.07x, 4096: 1.10x); with
         * mm-prefetch-l2 also 8192 bytes ahead into L2 (1.01x in the kernel on two threads,
         * already at the read roof there; 1.09-1.14x through decode, BENCHMARKS.md; now 4096:
         * 1.11x over 8192 on 2026-12-04's VM, 1.9 GB of layers from memory) */
        if (q8 && m == 1 && (w->q8_prefetch || w->prefetch_l2)) {
            kq_tile(1, true, xa->q, xa->qd, xa->qs, K, blk, yb, ldy, mask0, mask1, w->q8_prefetch,
                    w->prefetch_l2);
            continue;
        }
        if (q8 && w->q_tile > KQ_MR && m > KQ_MR) {
            /* ceil(m / mm-q-tile) tiles of equal height give or take one (5 to 7 rows: one sweep
             * of the weights, not two); a row's operations do not depend on its tile */
            const int64_t nt = (m + w->q_tile - 1) / w->q_tile, base = m / nt, extra = m % nt;
            for (int64_t t = 0; t < nt; t++) {
                switch (base + (t < extra)) {
                case 7:
                    KQ_ROWS(7, true);
                    i += 7;
                    break;
                case 6:
                    KQ_ROWS(6, true);
                    i += 6;
                    break;
                case 5:
                    KQ_ROWS(5, true);
                    i += 5;
                    break;
                case 4:
                    KQ_ROWS(4, true);
                    i += 4;
                    break;
                case 3:
                    KQ_ROWS(3, true);
                    i += 3;
                    break;
                case 2:
                    KQ_ROWS(2, true);
                    i += 2;
                    break;
                default:
                    KQ_ROWS(1, true);
                    i += 1;
                    break;
                }
            }
            continue;
        }
        if (q8) {
            for (; i + KQ_MR <= m; i += KQ_MR)
                KQ_ROWS(KQ_MR, true);
            switch (m - i) {
            case 3:
                KQ_ROWS(3, true);
                break;
            case 2:
                KQ_ROWS(2, true);
                break;
            case 1:
                KQ_ROWS(1, true);
                break;
            default:
                break;
            }
        } else {
            for (; i + KQ_MR <= m; i += KQ_MR)
                KQ_ROWS(KQ_MR, false);
            switch (m - i) {
            case 3:
                KQ_ROWS(3, false);
                break;
            case 2:
                KQ_ROWS(2, false);
                break;
            case 1:
                KQ_ROWS(1, false);
                break;
            default:
                break;
            }
        }
    }
}

void kn_act_quantize_avx512(const kn_act *a, int64_t k, int64_t m0, int64_t m1) {
    const int64_t kb = k / KN_QK;
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t m = m0; m < m1; m++) {
        const float *x = a->x + m * a->ldx;
        int8_t *q = a->q + m * k;
        for (int64_t b = 0; b < kb; b++) {
            __m512 v0 = _mm512_loadu_ps(x + b * KN_QK);
            __m512 v1 = _mm512_loadu_ps(x + b * KN_QK + 16);
            /* max_ps(a, 0) maps NaN lanes to 0, as the scalar "if (a > amax)" ignores them */
            __m512 a0 = _mm512_max_ps(_mm512_and_ps(v0, absmask), _mm512_setzero_ps());
            __m512 a1 = _mm512_max_ps(_mm512_and_ps(v1, absmask), _mm512_setzero_ps());
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            __m512 vid = _mm512_set1_ps(id);
            __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
            __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
            _mm_storeu_si128((__m128i *)(q + b * KN_QK), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(q + b * KN_QK + 16), _mm512_cvtepi32_epi8(q1));
            /* sums of the stored int8 values (cvtepi32_epi8 truncates, as the scalar cast does) */
            __m512i s0 = _mm512_cvtepi8_epi32(_mm512_cvtepi32_epi8(q0));
            __m512i s1 = _mm512_cvtepi8_epi32(_mm512_cvtepi32_epi8(q1));
            a->qd[m * kb + b] = d;
            a->qs[m * kb + b] = _mm512_reduce_add_epi32(_mm512_add_epi32(s0, s1));
            if (a->qs16)
                a->qs16[m * kb + b] = _mm512_reduce_add_epi32(s0);
        }
    }
}
