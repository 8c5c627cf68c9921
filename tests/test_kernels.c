/* SPDX-License-Identifier: MIT */
/*
 * Kernel tests: every SIMD kernel against its scalar reference on ragged shapes, compared with
 * memcmp (the kernels are designed to perform identical IEEE operations, kn.h); F16 conversion
 * against the F16C hardware instructions; kn_expf accuracy against double exp; attention against
 * a float64 softmax; and thread splits of the matmul (any slicing gives the same bytes).
 */
#include "test.h"
#include "test_isa.h"
#include "base/err.h"
#include "base/flags.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rndf(void) { /* roughly N(0,1)-ish: sum of uniforms */
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += (double)(rnd64() >> 11) / 9007199254740992.0;
    return (float)((s - 2.0) * 1.7);
}

static kn_isa simd_isas[2];
static int n_simd;

/* The SIMD ISAs to compare with the scalar reference; each one missing prints its SKIP line. */
static void setup_isas(void) {
    test_skip_missing_isas();
    n_simd = 0;
    if (kn_isa_available(KN_ISA_AVX2))
        simd_isas[n_simd++] = KN_ISA_AVX2;
    if (kn_isa_available(KN_ISA_AVX512))
        simd_isas[n_simd++] = KN_ISA_AVX512;
}

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) {
    return (uint16_t)_cvtss_sh(f, 0);
}

static void t_f16_conv(void) {
    if (!kn_isa_available(KN_ISA_AVX2))
        test_skip("no F16C on this CPU");
    for (uint32_t h = 0; h < 65536; h++) {
        float a = kn_f16_to_f32((uint16_t)h), b = hw_h2f((uint16_t)h);
        uint32_t ua = kn_f32_bits(a), ub = kn_f32_bits(b);
        T_CHECKF(ua == ub, "half 0x%04x: scalar %08x hardware %08x", h, ua, ub);
    }
    /* every exponent, edge mantissas, and random bit patterns */
    int iters = (int)(4000000 * test_scale());
    for (int i = 0; i < iters; i++) {
        uint32_t u;
        if (i < 256 * 64) {
            uint32_t e = (uint32_t)i / 64, mpat = (uint32_t)i % 64;
            uint32_t man = mpat < 32 ? (mpat * 0x3FFFFu) & 0x7FFFFF : (uint32_t)rnd64() & 0x7FFFFF;
            if (mpat == 0)
                man = 0;
            if (mpat == 1)
                man = 0x7FFFFF;
            if (mpat == 2)
                man = 0x1000; /* exact tie for normal halves */
            if (mpat == 3)
                man = 0x3000;
            u = (e << 23) | man | ((uint32_t)(i & 1) << 31);
        } else {
            u = (uint32_t)rnd64();
        }
        float f = kn_bits_f32(u);
        uint16_t a = kn_f32_to_f16(f), b = hw_f2h(f);
        T_CHECKF(a == b, "float 0x%08x: scalar %04x hardware %04x", u, a, b);
    }
}

static void t_expf(void) {
    double max_rel = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + (float)i * (175.5f / 200000.0f);
        double want = exp((double)x);
        double got = kn_expf(x);
        double rel = fabs(got - want) / want;
        if (rel > max_rel)
            max_rel = rel;
    }
    T_CHECKF(max_rel < 4e-7, "kn_expf max relative error %g", max_rel);
    T_CHECK(kn_expf(-100.0f) == 0.0f);
    T_CHECK(kn_expf(-INFINITY) == 0.0f);
    T_CHECK(isinf(kn_expf(100.0f)));
    T_CHECK(isnan(kn_expf(NAN)));
    T_CHECK(kn_expf(0.0f) == 1.0f);
}

/* Builds a random weight matrix of `type` (n x k) in GGUF layout. */
static void *make_weights(int type, int64_t n, int64_t k, float *f32_out) {
    float *f = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++)
        f[i] = rndf() * 0.1f;
    if (f32_out)
        memcpy(f32_out, f, (size_t)(n * k) * sizeof(float));
    int64_t rb = kn_type_row_bytes(type, k);
    void *d = malloc((size_t)(rb * n));
    kn_quantize_rows(type, f, n, k, d);
    free(f);
    return d;
}

typedef struct {
    float *x;
    int8_t *q;
    float *qd;
    int32_t *qs, *qs16;
    kn_act a;
} act_buf;

static void act_make(act_buf *b, int64_t m, int64_t k, int64_t ldx, bool special) {
    b->x = malloc((size_t)(m * ldx) * sizeof(float));
    for (int64_t i = 0; i < m * ldx; i++)
        b->x[i] = rndf();
    if (special && m * ldx > 40) {
        b->x[0] = 0.0f;
        for (int j = 0; j < 32 && j < k; j++)
            b->x[ldx * (m - 1) + j] = 0.0f; /* an all-zero block: d = 0 */
        b->x[3] = 1e-30f;
        b->x[5] = -3.5f;
    }
    int64_t kq = k - k % 32;
    b->q = calloc((size_t)(m * (kq ? kq : 1)), 1);
    b->qd = calloc((size_t)(m * (kq / 32 + 1)), sizeof(float));
    b->qs = calloc((size_t)(m * (kq / 32 + 1)), sizeof(int32_t));
    b->qs16 = calloc((size_t)(m * (kq / 32 + 1)), sizeof(int32_t));
    b->a = (kn_act){.x = b->x, .ldx = ldx, .q = b->q, .qd = b->qd, .qs = b->qs, .qs16 = b->qs16};
}

static void act_free(act_buf *b) {
    free(b->x);
    free(b->q);
    free(b->qd);
    free(b->qs);
    free(b->qs16);
}

static void t_act_quantize(void) {
    setup_isas();
    int64_t ks[] = {32, 64, 96, 896};
    for (size_t ki = 0; ki < 4; ki++) {
        int64_t k = ks[ki], m = 7;
        act_buf r, s;
        act_make(&r, m, k, k + 3, true);
        kn_act_quantize(&r.a, k, 0, m, KN_ISA_SCALAR);
        for (int64_t i = 0; i < m * k / 32; i++) {
            int32_t lo = 0, all = 0;
            for (int j = 0; j < 32; j++) {
                all += r.q[i * 32 + j];
                lo += j < 16 ? r.q[i * 32 + j] : 0;
            }
            T_CHECK(r.qs16[i] == lo && r.qs[i] == all);
        }
        for (int ii = 0; ii < n_simd; ii++) {
            act_make(&s, m, k, k + 3, false);
            memcpy(s.x, r.x, (size_t)(m * (k + 3)) * sizeof(float));
            kn_act_quantize(&s.a, k, 0, m, simd_isas[ii]);
            T_CHECKF(memcmp(r.q, s.q, (size_t)(m * k)) == 0, "q differ k=%lld isa=%s", (long long)k,
                     kn_isa_name(simd_isas[ii]));
            T_CHECK(memcmp(r.qd, s.qd, (size_t)(m * k / 32) * sizeof(float)) == 0);
            T_CHECK(memcmp(r.qs, s.qs, (size_t)(m * k / 32) * sizeof(int32_t)) == 0);
            T_CHECK(memcmp(r.qs16, s.qs16, (size_t)(m * k / 32) * sizeof(int32_t)) == 0);
            act_free(&s);
        }
        act_free(&r);
    }
}

/* SIMD matmul against the reference for every supported type over ragged shapes, and thread
 * splits. */
static void t_matmul(void) {
    setup_isas();
    const int types[] = {GGUF_TYPE_F32,  GGUF_TYPE_F16,  GGUF_TYPE_BF16, GGUF_TYPE_Q8_0,
                         GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,
                         GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    const int64_t ms[] = {1, 2, 5, 6, 7, 13, 33};
    const int64_t ns[] = {1, 15, 33, 64, 65, 130};
    const int64_t kf[] = {1, 7, 33, 130, 300};
    const int64_t kq[] = {32, 96, 160, 288};
    const int64_t kk[] = {256, 512, 768, 2304}; /* K-quants: 1, 2, 3, 9 super-blocks */
    int cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        int type = types[ti];
        bool q = type != GGUF_TYPE_F32 && type != GGUF_TYPE_F16 && type != GGUF_TYPE_BF16;
        bool kq_type = kn_type_block_size(type) == 256;
        for (size_t ki = 0; ki < 4; ki++) {
            int64_t k = kq_type ? kk[ki] : q ? kq[ki] : kf[ki + (rnd64() & 1)];
            for (size_t ni = 0; ni < 6; ni++) {
                int64_t n = ns[ni];
                void *w = make_weights(type, n, k, NULL);
                for (size_t mi = 0; mi < 7; mi++) {
                    int64_t m = ms[mi];
                    act_buf ab;
                    act_make(&ab, m, k, k + 1, mi == 6);
                    if (q)
                        kn_act_quantize(&ab.a, k, 0, m, KN_ISA_SCALAR);
                    int64_t ldy = n + 3;
                    float *yr = calloc((size_t)(m * ldy), sizeof(float));
                    float *ys = calloc((size_t)(m * ldy), sizeof(float));
                    kn_matmul_ref(type, w, k, &ab.a, m, 0, n, yr, ldy);
                    for (int ii = 0; ii < n_simd; ii++) {
                        kn_mat *mat;
                        T_OK(kn_mat_create(type, w, n, k, simd_isas[ii], &mat));
                        void *scratch = aligned_alloc(64, kn_matmul_scratch_bytes());
                        for (int nth = 1; nth <= 3; nth++) {
                            memset(ys, 0, (size_t)(m * ldy) * sizeof(float));
                            for (int ith = nth - 1; ith >= 0; ith--)
                                kn_matmul(mat, &ab.a, m, ys, ldy, ith, nth, scratch);
                            for (int64_t i = 0; i < m; i++)
                                T_CHECKF(memcmp(yr + i * ldy, ys + i * ldy,
                                                (size_t)n * sizeof(float)) == 0,
                                         "type %s isa %s m=%lld n=%lld k=%lld nth=%d row %lld: "
                                         "%.9g vs %.9g",
                                         kn_type_name(type), kn_isa_name(simd_isas[ii]),
                                         (long long)m, (long long)n, (long long)k, nth,
                                         (long long)i, yr[i * ldy], ys[i * ldy]);
                            /* columns past n untouched */
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t c = n; c < ldy; c++)
                                    T_CHECK(ys[i * ldy + c] == 0.0f);
                        }
                        free(scratch);
                        kn_mat_destroy(mat);
                        cases++;
                    }
                    /* the scalar ISA through the kn_mat interface equals the reference too */
                    kn_mat *ms_;
                    T_OK(kn_mat_create(type, w, n, k, KN_ISA_SCALAR, &ms_));
                    memset(ys, 0, (size_t)(m * ldy) * sizeof(float));
                    kn_matmul(ms_, &ab.a, m, ys, ldy, 0, 2, NULL);
                    kn_matmul(ms_, &ab.a, m, ys, ldy, 1, 2, NULL);
                    T_CHECK(memcmp(yr, ys, (size_t)(m * ldy) * sizeof(float)) == 0);
                    kn_mat_destroy(ms_);
                    free(yr);
                    free(ys);
                    act_free(&ab);
                }
                free(w);
            }
        }
    }
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU (scalar checked only)");
}

/* The matmul computes what it should: float types against a float64 product of the dequantized
 * weights, quantized types with the activation quantization error bound. */
static void t_matmul_accuracy(void) {
    const int types[] = {GGUF_TYPE_F32,  GGUF_TYPE_F16,  GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0,
                         GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1, GGUF_TYPE_Q4_K,
                         GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    int64_t m = 3, n = 40, k = 256;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        int type = types[ti];
        void *w = make_weights(type, n, k, NULL);
        float *wd = malloc((size_t)(n * k) * sizeof(float));
        for (int64_t r = 0; r < n; r++)
            T_OK(kn_dequantize_row(type, w, r, k, wd + r * k));
        act_buf ab;
        act_make(&ab, m, k, k, false);
        kn_act_quantize(&ab.a, k, 0, m, KN_ISA_SCALAR);
        float y[3 * 40];
        kn_matmul_ref(type, w, k, &ab.a, m, 0, n, y, n);
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int64_t t = 0; t < k; t++) {
                    ref += (double)ab.x[i * k + t] * wd[j * k + t];
                    mag += fabs((double)ab.x[i * k + t] * wd[j * k + t]);
                }
                /* f32 accumulation: ~k * eps * magnitude; Q8 activations: 1/254 relative per
                 * element at worst, so 0.5% of the magnitude bounds the quantized types */
                double tol = (type == GGUF_TYPE_F32 || type == GGUF_TYPE_F16) ? 1e-5 * mag + 1e-7
                                                                              : 5e-3 * mag;
                T_CHECKF(fabs(y[i * n + j] - ref) <= tol, "%s: %g vs %g (tol %g)",
                         kn_type_name(type), y[i * n + j], ref, tol);
            }
        }
        act_free(&ab);
        free(wd);
        free(w);
    }
}

/* Dequantization of hand-built blocks to values computed here from the llama.cpp format rules
 * (ggml-common.h), independently of kn_types' unpackers. Every expected value is exact in f32. */
static void t_dequant_known(void) {
    float y[256];
    { /* Q4_1: x = nibble * d + m */
        kn_block_q4_1 b = {.d = 0x3800 /* 0.5 */, .m = 0xC000 /* -2 */};
        for (int j = 0; j < 16; j++)
            b.q[j] = (uint8_t)(j | (15 - j) << 4);
        T_OK(kn_dequantize_row(GGUF_TYPE_Q4_1, &b, 0, 32, y));
        for (int j = 0; j < 16; j++) {
            T_CHECK(y[j] == (float)j * 0.5f - 2.0f);
            T_CHECK(y[j + 16] == (float)(15 - j) * 0.5f - 2.0f);
        }
    }
    for (int one = 0; one < 2; one++) { /* Q5_0 / Q5_1: fifth bit j of the little-endian qh */
        uint8_t qh[4] = {0x01, 0x80, 0x5A, 0xC3}, q[16];
        uint32_t h = 0xC35A8001u;
        for (int j = 0; j < 16; j++)
            q[j] = (uint8_t)((j * 7) % 16 | ((j * 3 + 5) % 16) << 4);
        if (!one) {
            kn_block_q5_0 b = {.d = 0x3400 /* 0.25 */};
            memcpy(b.qh, qh, 4);
            memcpy(b.q, q, 16);
            T_OK(kn_dequantize_row(GGUF_TYPE_Q5_0, &b, 0, 32, y));
        } else {
            kn_block_q5_1 b = {.d = 0x3400, .m = 0x3C00 /* 1 */};
            memcpy(b.qh, qh, 4);
            memcpy(b.q, q, 16);
            T_OK(kn_dequantize_row(GGUF_TYPE_Q5_1, &b, 0, 32, y));
        }
        for (int j = 0; j < 32; j++) {
            int nib = j < 16 ? q[j] & 15 : q[j - 16] >> 4;
            int e = nib + 16 * (int)((h >> j) & 1);
            float want = one ? (float)e * 0.25f + 1.0f : (float)(e - 16) * 0.25f;
            T_CHECKF(y[j] == want, "q5_%d element %d: %g, want %g", one, j, y[j], want);
        }
    }
    /* Q4_K / Q5_K: 6-bit scales and mins packed as get_scale_min_k4 reads them */
    const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 5}, mn[8] = {0, 1, 62, 3, 20, 40, 63, 7};
    uint8_t scales[12] = {0};
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = (uint8_t)sc[j];
            scales[j + 4] = (uint8_t)mn[j];
        } else {
            scales[j + 4] = (uint8_t)((sc[j] & 15) | (mn[j] & 15) << 4);
            scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
    for (int five = 0; five < 2; five++) {
        uint8_t q[128], qh[32];
        for (int i = 0; i < 128; i++)
            q[i] = (uint8_t)((i * 5) % 16 | ((i * 11 + 3) % 16) << 4);
        for (int l = 0; l < 32; l++)
            qh[l] = (uint8_t)(l * 37 + 11);
        if (!five) {
            kn_block_q4_K b = {.d = 0x3C00 /* 1 */, .dmin = 0x3800 /* 0.5 */};
            memcpy(b.scales, scales, 12);
            memcpy(b.q, q, 128);
            T_OK(kn_dequantize_row(GGUF_TYPE_Q4_K, &b, 0, 256, y));
        } else {
            kn_block_q5_K b = {.d = 0x3C00, .dmin = 0x3800};
            memcpy(b.scales, scales, 12);
            memcpy(b.q, q, 128);
            memcpy(b.qh, qh, 32);
            T_OK(kn_dequantize_row(GGUF_TYPE_Q5_K, &b, 0, 256, y));
        }
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++)
                for (int t = 0; t < 2; t++) {
                    int e = t ? q[32 * p + l] >> 4 : q[32 * p + l] & 15;
                    if (five)
                        e += 16 * ((qh[l] >> (2 * p + t)) & 1);
                    int j = 2 * p + t;
                    float want = 1.0f * (float)sc[j] * (float)e - 0.5f * (float)mn[j];
                    T_CHECKF(y[64 * p + 32 * t + l] == want, "q%d_K element %d: %g, want %g",
                             4 + five, 64 * p + 32 * t + l, y[64 * p + 32 * t + l], want);
                }
    }
    { /* Q6_K: ql / qh quarters, int8 scales per 16 (including -128), d last */
        kn_block_q6_K b = {.d = 0x3800 /* 0.5 */};
        const int8_t s6[16] = {-128, 127, 1, -1, 5, -7, 64, -64, 0, 3, 2, -2, 100, -100, 9, 11};
        memcpy(b.scales, s6, 16);
        for (int i = 0; i < 128; i++)
            b.ql[i] = (uint8_t)(i * 29 + 7);
        for (int i = 0; i < 64; i++)
            b.qh[i] = (uint8_t)(i * 53 + 1);
        b.ql[0] = 0; /* element 0: q = 0, value -32 */
        b.qh[0] &= 0xFC;
        T_OK(kn_dequantize_row(GGUF_TYPE_Q6_K, &b, 0, 256, y));
        T_CHECK(y[0] == 0.5f * -128.0f * -32.0f);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                for (int t = 0; t < 4; t++) {
                    int lo = b.ql[64 * h + l + 32 * (t & 1)];
                    lo = t >= 2 ? lo >> 4 : lo & 15;
                    int e = lo | ((b.qh[32 * h + l] >> (2 * t)) & 3) << 4;
                    int idx = 128 * h + 32 * t + l;
                    float want = 0.5f * (float)s6[idx / 16] * (float)(e - 32);
                    T_CHECKF(y[idx] == want, "q6_K element %d: %g, want %g", idx, y[idx], want);
                }
    }
}

/* Quantize then dequantize rows of N(0, 1)-like data (plus an all-zero, a constant and an
 * outlier block) and bound the error:
 *   Q4_1 / Q5_1: codes are round((x - min) / d), d = range / nmax, so |err| <= d/2, plus the f16
 *     rounding of d (relative 2^-11, times at most nmax) and of m (2^-11 |min|);
 *   Q5_0: d = -max/16 maps the block's largest magnitude to code 0; the opposite end (+16 d) is
 *     clamped to code 31 (15 d), so |err| <= |d| (one step), plus 16 |d| 2^-11 for f16 d;
 *   K-quants, per element: half a step of the block's grid for rounding, one more step because
 *     the least-squares fit may clamp the extremes, and the quantization of the sub-block scale
 *     to 6 bits (Q4_K/Q5_K) or int8 (Q6_K) against the super-block's d, which moves a code's
 *     value by at most nmax * d / 2, and of the min by dmin / 2. On average they do much better:
 *     the RMS error over all elements, relative to the RMS of x, is bounded too: a uniform
 * quantizer with step range/nmax has RMS error step / sqrt(12); for 32 normal samples range ~ 4.1
 * sigma, so Q4_K ~0.079, Q5_K ~0.038; Q6_K (16-element absmax, 32 levels per side, amax ~ 2.0
 * sigma) ~0.018. The limits below are those with ~25% headroom (measured: VERITY_TEST_VERBOSE=1),
 * and every element must be within 1.5 sub-block steps of its input. */
static void t_quant_roundtrip(void) {
    const int types[] = {GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,
                         GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    const double rms_limit[] = {0, 0, 0, 0.10, 0.048, 0.024};
    const int64_t k = 2304, n = 48;
    float *x = malloc((size_t)(n * k) * sizeof(float)),
          *y = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++)
        x[i] = rndf();
    for (int j = 0; j < 32; j++) {
        x[j] = 0.0f;           /* zero block */
        x[k + j] = 0.75f;      /* constant block */
        x[2 * k + j] *= 0.01f; /* tiny block with an outlier */
    }
    x[2 * k + 5] = 40.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        int type = types[ti];
        int64_t rb = kn_type_row_bytes(type, k);
        void *d = malloc((size_t)(rb * n));
        T_EQ_INT(kn_quantize_rows(type, x, n, k, d), rb * n);
        for (int64_t r = 0; r < n; r++)
            T_OK(kn_dequantize_row(type, d, r, k, y + r * k));
        double se = 0, sx = 0;
        for (int64_t b = 0; b < n * k / 32; b++) {
            const float *xb = x + b * 32, *yb = y + b * 32;
            float mn = xb[0], mx = xb[0], amax = 0, big = 0;
            for (int j = 0; j < 32; j++) {
                mn = xb[j] < mn ? xb[j] : mn;
                mx = xb[j] > mx ? xb[j] : mx;
                if (fabsf(xb[j]) > amax) {
                    amax = fabsf(xb[j]);
                    big = xb[j];
                }
            }
            for (int j = 0; j < 32; j++) {
                double e = fabs((double)yb[j] - xb[j]);
                if (b >= 3 * k / 32) {
                    se += e * e;
                    sx += (double)xb[j] * xb[j];
                }
                double tol;
                if (type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_1) {
                    double nmax = type == GGUF_TYPE_Q4_1 ? 15 : 31, dd = (mx - mn) / nmax;
                    tol = 0.5 * dd + (nmax + 1) * dd / 2048 + fabs(mn) / 2048 + 1e-6 * amax;
                } else if (type == GGUF_TYPE_Q5_0) {
                    tol = fabs(big / 16.0) * (1 + 16.0 / 2048) + 1e-6 * amax;
                } else {
                    /* the fitted min is <= 0, so the grid spans [min(mn, 0), max(mx, 0)] */
                    double range = fmax(mx, 0.0) - fmin(mn, 0.0);
                    double nmax = type == GGUF_TYPE_Q6_K ? 32 : type == GGUF_TYPE_Q4_K ? 15 : 31;
                    double step = type == GGUF_TYPE_Q6_K ? 2 * amax / 63 : range / nmax;
                    /* the super-block's stored d and dmin (same offsets in Q4_K and Q5_K) */
                    int64_t row = b / (k / 32), sb = (b % (k / 32)) / 8;
                    const unsigned char *blk =
                        (const unsigned char *)d + row * rb + sb * kn_type_block_bytes(type);
                    double dsup, dmin = 0;
                    if (type == GGUF_TYPE_Q6_K) {
                        dsup = fabs(kn_f16_to_f32(((const kn_block_q6_K *)blk)->d));
                    } else {
                        dsup = kn_f16_to_f32(((const kn_block_q4_K *)blk)->d);
                        dmin = kn_f16_to_f32(((const kn_block_q4_K *)blk)->dmin);
                    }
                    tol = 1.5 * step + nmax * dsup / 2 + dmin / 2 + 1e-6;
                }
                T_CHECKF(e <= tol, "%s block %lld element %d: %.9g -> %.9g (err %g > %g)",
                         kn_type_name(type), (long long)b, j, xb[j], yb[j], e, tol);
            }
        }
        /* the three special blocks (rows 0-2) are excluded from the RMS: they are not N(0,1) */
        double rms = sqrt(se / sx);
        if (getenv("VERITY_TEST_VERBOSE"))
            fprintf(stderr, "%s: relative RMS error %.4f\n", kn_type_name(type), rms);
        if (rms_limit[ti] > 0)
            T_CHECKF(rms <= rms_limit[ti], "%s: relative RMS error %.4f > %.4f", kn_type_name(type),
                     rms, rms_limit[ti]);
        /* all-zero block stays exactly zero */
        for (int j = 0; j < 32; j++)
            T_CHECK(y[j] == 0.0f);
        free(d);
    }
    /* K-quants refuse rows that are not a multiple of 256 */
    T_CHECK(kn_quantize_rows(GGUF_TYPE_Q4_K, x, 1, 96, y) < 0);
    free(x);
    free(y);
}

/* Creates type's matrix (n x k, weights w) for isa, runs it over the m rows of a in two thread
 * shares (the second first) into ys (m x ldy, cleared first) and says whether every byte equals
 * the reference's yr. */
static bool mm_same(int type, const void *w, int64_t n, int64_t k, kn_isa isa, const kn_act *a,
                    int64_t m, const float *yr, float *ys, int64_t ldy) {
    kn_mat *mat;
    T_OK(kn_mat_create(type, w, n, k, isa, &mat));
    void *scratch = aligned_alloc(64, kn_matmul_scratch_bytes());
    memset(ys, 0, (size_t)(m * ldy) * sizeof(float));
    kn_matmul(mat, a, m, ys, ldy, 1, 2, scratch);
    kn_matmul(mat, a, m, ys, ldy, 0, 2, scratch);
    free(scratch);
    kn_mat_destroy(mat);
    return memcmp(yr, ys, (size_t)(m * ldy) * sizeof(float)) == 0;
}

/* The new quantized kernels tile rows in chunks of 96 (activation reuse in L2): M across a
 * chunk boundary, with a tail, gives the reference's bytes too. */
/* The few-row paths (speculative verification feeds 1 + k rows of one sequence, decode at batch
 * 32 feeds 32): every row count 1 .. 33 of F16 / BF16 (mm-direct-rows 0, 2, 12, 16, 32 and -1:
 * the panel, the one- and two-row direct tiles, and the chunked direct path whose row tiles share
 * each K chunk, up to 12, 16 and 32 rows, and the CPU's default, 12 or 32), 1 .. 17 of Q8_0 /
 * Q4_0 (mm-q-tile 4, 6 and 7: tiles of 4 and the rest, or of equal height up to 6 or 7; Q8_0
 * with q8-prefetch 0, 64 and 4096 alongside), of Q6_K over 9 super-blocks (q6k-prefetch 0, 64
 * and 4096: one-row products prefetch the weights, or not) and of Q4_K / Q5_K over 9
 * (kq-q4k-pair 0 and 1: the NIB plane, or AVX-512's two columns a byte, each with kq-prefetch 0
 * or 64 / 4096; Q5_K with kq-prefetch 0, 64 and 4096), every quantized case also with
 * mm-prefetch-l2 64 (with the near prefetch 0: the one-row tile for the far one alone), 0,
 * 65536 (past the weights' end) or 8192,
 * against the reference bit for bit, with K ending mid-chunk; so each row's result is the same
 * whatever m and the toggle (batch invariance: a row never depends on the rows beside it). */
static void t_matmul_few_rows(void) {
    setup_isas();
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU");
    const int types[] = {GGUF_TYPE_F16,  GGUF_TYPE_BF16, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0,
                         GGUF_TYPE_Q6_K, GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K};
    const char *direct[] = {"0", "2", "12", "16", "32", "-1"}, *qtile[] = {"4", "6", "7"},
               *pf[] = {"0", "64", "4096"}, *pair[] = {"0", "1", "0", "1"},
               *kpf[] = {"0", "0", "4096", "64"}, *pl2[] = {"64", "0", "65536", "8192"};
    const int64_t n = 130;
    int cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        bool q6 = types[ti] == GGUF_TYPE_Q6_K, q4k = types[ti] == GGUF_TYPE_Q4_K,
             q5k = types[ti] == GGUF_TYPE_Q5_K;
        bool q = types[ti] == GGUF_TYPE_Q8_0 || types[ti] == GGUF_TYPE_Q4_0 || q6 || q4k || q5k;
        int64_t k = q6 || q4k || q5k ? 2304
                    : q              ? 416
                                     : 300; /* 300: 2 chunks of 128 and 44 at mm-kc 128 */
        void *w = make_weights(types[ti], n, k, NULL);
        const int64_t m_max = q ? 17 : 33, n_vals = q4k ? 4 : q ? 3 : 6;
        for (int64_t m = 1; m <= m_max; m++) {
            act_buf ab;
            act_make(&ab, m, k, k + 5, m == m_max);
            if (q)
                kn_act_quantize(&ab.a, k, 0, m, KN_ISA_SCALAR);
            int64_t ldy = n + 1;
            float *yr = calloc((size_t)(m * ldy), sizeof(float));
            float *ys = calloc((size_t)(m * ldy), sizeof(float));
            kn_matmul_ref(types[ti], w, k, &ab.a, m, 0, n, yr, ldy);
            for (int ii = 0; ii < n_simd; ii++)
                for (int64_t di = 0; di < n_vals; di++) {
                    const char *flag = q6    ? "q6k-prefetch"
                                       : q4k ? "kq-q4k-pair"
                                       : q5k ? "kq-prefetch"
                                       : q   ? "mm-q-tile"
                                             : "mm-direct-rows";
                    const char *val = q6 || q5k ? pf[di]
                                      : q4k     ? pair[di]
                                      : q       ? qtile[di]
                                                : direct[di];
                    T_OK(flags_set(flag, val));
                    if (q4k)
                        T_OK(flags_set("kq-prefetch", kpf[di]));
                    if (types[ti] == GGUF_TYPE_Q8_0) /* and the one-row prefetch */
                        T_OK(flags_set("q8-prefetch", pf[di]));
                    if (q) /* the far prefetch into L2, past the end of the weights at 65536 */
                        T_OK(flags_set("mm-prefetch-l2", pl2[di]));
                    T_CHECKF(mm_same(types[ti], w, n, k, simd_isas[ii], &ab.a, m, yr, ys, ldy),
                             "type %s isa %s m=%lld %s %s kq-prefetch %s mm-prefetch-l2 %s",
                             kn_type_name(types[ti]), kn_isa_name(simd_isas[ii]), (long long)m,
                             flag, val, flags_str(FLAG_KQ_PREFETCH),
                             flags_str(FLAG_MM_PREFETCH_L2));
                    cases++;
                }
            free(yr);
            free(ys);
            act_free(&ab);
        }
        free(w);
    }
    T_OK(flags_set("mm-direct-rows", flags_find("mm-direct-rows")->def));
    T_OK(flags_set("mm-q-tile", flags_find("mm-q-tile")->def));
    T_OK(flags_set("q6k-prefetch", flags_find("q6k-prefetch")->def));
    T_OK(flags_set("kq-q4k-pair", flags_find("kq-q4k-pair")->def));
    T_OK(flags_set("kq-prefetch", flags_find("kq-prefetch")->def));
    T_OK(flags_set("q8-prefetch", flags_find("q8-prefetch")->def));
    T_OK(flags_set("mm-prefetch-l2", flags_find("mm-prefetch-l2")->def));
    T_CHECK(cases == (2 * 33 * 6 + 4 * 17 * 3 + 17 * 4) * n_simd);
}

/* kn_mat_units_span (the forward pass's mm-warm prefetch spans): on every SIMD ISA, for a float,
 * a Q8_0 and a K-quant layout, each unit's span starts where the one before ends, a range's span
 * is its units' together, and all units' is kn_mat_bytes; an empty or out-of-range range and the
 * scalar ISA's GGUF layout give none. */
static void t_mat_units_span(void) {
    setup_isas();
    const int types[] = {GGUF_TYPE_F32, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K};
    const int64_t n = 200, k = 512;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        void *wd = make_weights(types[ti], n, k, NULL);
        for (int ii = -1; ii < n_simd; ii++) {
            kn_isa isa = ii < 0 ? KN_ISA_SCALAR : simd_isas[ii];
            kn_mat *w;
            T_OK(kn_mat_create(types[ti], wd, n, k, isa, &w));
            int64_t u = kn_mat_n_units(w);
            const void *p, *p0;
            size_t b, b0;
            if (isa == KN_ISA_SCALAR) {
                T_CHECK(!kn_mat_units_span(w, 0, u, &p, &b));
                kn_mat_destroy(w);
                continue;
            }
            T_CHECKF(u >= 4, "type %s: %lld units", kn_type_name(types[ti]), (long long)u);
            T_CHECK(kn_mat_units_span(w, 0, u, &p0, &b0));
            T_EQ_INT(b0, kn_mat_bytes(w));
            const unsigned char *at = p0;
            for (int64_t a = 0; a < u; a++) {
                T_CHECK(kn_mat_units_span(w, a, a + 1, &p, &b));
                T_CHECKF(p == at && b > 0, "type %s isa %s unit %lld", kn_type_name(types[ti]),
                         kn_isa_name(isa), (long long)a);
                at += b;
            }
            T_CHECK(at == (const unsigned char *)p0 + b0);
            const void *p1;
            size_t b1;
            T_CHECK(kn_mat_units_span(w, 1, u - 1, &p, &b));
            T_CHECK(kn_mat_units_span(w, 1, 2, &p1, &b1));
            T_CHECK(p == p1 && b == b1 * (size_t)(u - 2));
            T_CHECK(!kn_mat_units_span(w, 2, 2, &p, &b));
            T_CHECK(!kn_mat_units_span(w, -1, 1, &p, &b));
            T_CHECK(!kn_mat_units_span(w, 0, u + 1, &p, &b));
            kn_mat_destroy(w);
        }
        free(wd);
    }
}

/* The float panel's K chunk (mm-kc): 16, 48, 100 (96), 128, 512 and 1024, over K = 1100
 * (many chunks and a tail; one chunk and a tail), for F32 / F16 / BF16, m = 1, 7, 13 and 33 with
 * mm-direct-rows 0 (every m through the panel), each with mm-panel-fuse 0 and 1 (the panel
 * converted in a loop of its own, or by the first row tile; with mm-panel-pf-l2 0 and 1, the next
 * chunk's weights prefetched into L1 or L2), against the reference bit for bit: the chunk only
 * moves where the accumulators are stored and reloaded. */
static void t_matmul_kc(void) {
    setup_isas();
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU");
    const int types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16, GGUF_TYPE_BF16};
    const char *kcs[] = {"16", "48", "100", "128", "512", "1024"};
    const int64_t ms[] = {1, 7, 13, 33}, n = 130, k = 1100;
    int cases = 0;
    T_OK(flags_set("mm-direct-rows", "0"));
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        void *w = make_weights(types[ti], n, k, NULL);
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            int64_t m = ms[mi], ldy = n + 3;
            act_buf ab;
            act_make(&ab, m, k, k + 5, mi == 3);
            float *yr = calloc((size_t)(m * ldy), sizeof(float));
            float *ys = calloc((size_t)(m * ldy), sizeof(float));
            kn_matmul_ref(types[ti], w, k, &ab.a, m, 0, n, yr, ldy);
            for (int ii = 0; ii < n_simd; ii++)
                for (size_t ci = 0; ci < 2 * (sizeof kcs / sizeof *kcs); ci++) {
                    const char *fuse = ci % 2 ? "1" : "0";
                    T_OK(flags_set("mm-kc", kcs[ci / 2]));
                    T_OK(flags_set("mm-panel-fuse", fuse));
                    T_OK(flags_set("mm-panel-pf-l2", fuse));
                    T_CHECKF(mm_same(types[ti], w, n, k, simd_isas[ii], &ab.a, m, yr, ys, ldy),
                             "type %s isa %s m=%lld mm-kc %s mm-panel-fuse and -pf-l2 %s",
                             kn_type_name(types[ti]), kn_isa_name(simd_isas[ii]), (long long)m,
                             kcs[ci / 2], fuse);
                    cases++;
                }
            free(yr);
            free(ys);
            act_free(&ab);
        }
        free(w);
    }
    T_OK(flags_set("mm-kc", flags_find("mm-kc")->def));
    T_OK(flags_set("mm-panel-fuse", flags_find("mm-panel-fuse")->def));
    T_OK(flags_set("mm-panel-pf-l2", flags_find("mm-panel-pf-l2")->def));
    T_OK(flags_set("mm-direct-rows", flags_find("mm-direct-rows")->def));
    T_CHECK(cases == 3 * 4 * 6 * 2 * n_simd);
    /* the value: rounded down to a multiple of 16, within 16..KN_KC_MAX */
    T_CHECK(kn_matmul_kc(16) == 16);
    T_CHECK(kn_matmul_kc(100) == 96);
    T_CHECK(kn_matmul_kc(1024) == 1024);
    T_CHECK(kn_matmul_kc(128) == 128 && flags_int(FLAG_MM_KC) == 128);
    T_CHECK(flags_set("mm-kc", "15") != 0 && flags_set("mm-kc", "1025") != 0);
}

/* mm-direct-rows: a value of 0 or more is taken as it is; -1 (the default) is 32 on AMD and 12
 * elsewhere (where the conversion competes with the FMAs for their ports). */
static void t_matmul_direct_rows(void) {
    T_CHECK(kn_matmul_direct_rows(-1, true) == 32);
    T_CHECK(kn_matmul_direct_rows(-1, false) == 12);
    T_CHECK(kn_matmul_direct_rows(0, true) == 0);
    T_CHECK(kn_matmul_direct_rows(20, false) == 20);
    T_CHECK(kn_matmul_direct_rows(32, false) == 32);
    T_CHECK(flags_int(FLAG_MM_DIRECT_ROWS) == -1); /* the registry's default is the CPU's */
}

/* The K-quant and Q4_1/Q5 kernels at M = 197 (every row tile and the row chunks) and M = 1 (the
 * one-row decode tile), against the reference bit for bit; the Q5 types with their fifth bits as
 * AVX-512 byte masks (kq-q5-mask 1) and as shifted bit planes (0, and AVX2's only layout). */
static void t_matmul_kq_large_m(void) {
    setup_isas();
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU");
    const int types[] = {GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,
                         GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    int64_t m = 197, n = 47, k = 512;
    act_buf ab;
    act_make(&ab, m, k, k, true);
    kn_act_quantize(&ab.a, k, 0, m, KN_ISA_SCALAR);
    float *yr = calloc((size_t)(m * n), sizeof(float)),
          *ys = calloc((size_t)(m * n), sizeof(float));
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        void *w = make_weights(types[ti], n, k, NULL);
        kn_matmul_ref(types[ti], w, k, &ab.a, m, 0, n, yr, n);
        bool q5 = types[ti] == GGUF_TYPE_Q5_0 || types[ti] == GGUF_TYPE_Q5_1 ||
                  types[ti] == GGUF_TYPE_Q5_K;
        for (int mk = 1; mk >= (q5 ? 0 : 1); mk--)
            for (int ii = 0; ii < n_simd; ii++) {
                T_OK(flags_set("kq-q5-mask", mk ? "1" : "0"));
                kn_mat *mat;
                T_OK(kn_mat_create(types[ti], w, n, k, simd_isas[ii], &mat));
                for (int64_t mm = m; mm >= 1; mm = mm == m ? 1 : 0) {
                    memset(ys, 0, (size_t)(m * n) * sizeof(float));
                    kn_matmul(mat, &ab.a, mm, ys, n, 0, 1, NULL);
                    T_CHECKF(memcmp(yr, ys, (size_t)(mm * n) * sizeof(float)) == 0,
                             "%s %s M=%lld kq-q5-mask %d", kn_type_name(types[ti]),
                             kn_isa_name(simd_isas[ii]), (long long)mm, mk);
                }
                kn_mat_destroy(mat);
            }
        T_OK(flags_set("kq-q5-mask", "1"));
        free(w);
    }
    free(yr);
    free(ys);
    act_free(&ab);
}

static void t_row_ops(void) {
    setup_isas();
    const int64_t lens[] = {1, 7, 16, 17, 64, 100, 896, 4864};
    for (size_t li = 0; li < 8; li++) {
        int64_t n = lens[li];
        float *x = malloc((size_t)n * sizeof(float)), *w = malloc((size_t)n * sizeof(float));
        float *u = malloc((size_t)n * sizeof(float));
        float *yr = malloc((size_t)n * sizeof(float)), *ys = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            x[i] = rndf() * 3;
            w[i] = rndf();
            u[i] = rndf();
        }
        if (n > 5) {
            x[1] = 95.0f; /* exp overflow side of silu(-x) */
            x[2] = -95.0f;
            x[3] = 0.0f;
        }
        uint16_t *hr = malloc((size_t)n * 2), *hs = malloc((size_t)n * 2);
        for (int ii = 0; ii < n_simd; ii++) {
            kn_isa isa = simd_isas[ii];
            kn_rmsnorm(x, w, 1e-5f, n, yr, KN_ISA_SCALAR);
            kn_rmsnorm(x, w, 1e-5f, n, ys, isa);
            T_CHECKF(memcmp(yr, ys, (size_t)n * 4) == 0, "rmsnorm n=%lld %s", (long long)n,
                     kn_isa_name(isa));
            kn_rmsnorm(x, NULL, 1e-6f, n, yr, KN_ISA_SCALAR);
            kn_rmsnorm(x, NULL, 1e-6f, n, ys, isa);
            T_CHECK(memcmp(yr, ys, (size_t)n * 4) == 0);
            kn_swiglu(x, u, n, yr, KN_ISA_SCALAR);
            kn_swiglu(x, u, n, ys, isa);
            T_CHECKF(memcmp(yr, ys, (size_t)n * 4) == 0, "swiglu n=%lld %s", (long long)n,
                     kn_isa_name(isa));
            kn_store_kv(hr, x, n, true, KN_ISA_SCALAR);
            kn_store_kv(hs, x, n, true, isa);
            T_CHECK(memcmp(hr, hs, (size_t)n * 2) == 0);
        }
        free(x);
        free(w);
        free(u);
        free(yr);
        free(ys);
        free(hr);
        free(hs);
    }
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU");
}

/* The kn_attn_kv of a test's paged pools (no sliding window). */
static kn_attn_kv paged_kv(const void *k, const void *v, size_t block_bytes, const int32_t *table,
                           int64_t block_size, int64_t stride, bool f16) {
    return (kn_attn_kv){.k_base = k,
                        .v_base = v,
                        .block_bytes = block_bytes,
                        .table = table,
                        .block_size = block_size,
                        .kv_stride = stride,
                        .f16 = f16};
}

/* A paged KV with shuffled block order, head_dim 8/64/80/128, F16 and F32. */
static void t_attention(void) {
    setup_isas();
    const int64_t hds[] = {8, 32, 64, 80, 128};
    for (int hi = 0; hi < 5; hi++) {
        for (int f16 = 0; f16 < 2; f16++) {
            int64_t hd = hds[hi], n_kv = 2, bs = 16, n_pos = 150;
            int64_t stride = n_kv * hd, nb = (n_pos + bs - 1) / bs;
            size_t esz = f16 ? 2 : 4;
            size_t block_bytes = (size_t)(bs * stride) * esz;
            unsigned char *kpool = malloc((size_t)nb * block_bytes);
            unsigned char *vpool = malloc((size_t)nb * block_bytes);
            int32_t table[16];
            float *kf = malloc((size_t)(n_pos * stride) * 4),
                  *vf = malloc((size_t)(n_pos * stride) * 4);
            for (int64_t b = 0; b < nb; b++)
                table[b] = (int32_t)(nb - 1 - b); /* blocks deliberately out of order */
            for (int64_t p = 0; p < n_pos; p++) {
                for (int64_t e = 0; e < stride; e++) {
                    kf[p * stride + e] = rndf();
                    vf[p * stride + e] = rndf();
                }
                size_t off =
                    (size_t)table[p / bs] * block_bytes + (size_t)((p % bs) * stride) * esz;
                kn_store_kv(kpool + off, kf + p * stride, stride, f16, KN_ISA_SCALAR);
                kn_store_kv(vpool + off, vf + p * stride, stride, f16, KN_ISA_SCALAR);
                if (f16)
                    for (int64_t e = 0; e < stride; e++) {
                        kf[p * stride + e] = kn_f16_to_f32(kn_f32_to_f16(kf[p * stride + e]));
                        vf[p * stride + e] = kn_f16_to_f32(kn_f32_to_f16(vf[p * stride + e]));
                    }
            }
            kn_attn_kv kv = paged_kv(kpool, vpool, block_bytes, table, bs, stride, f16);
            float q[128], outr[128], outs[128], scratch[64];
            for (int64_t d = 0; d < hd; d++)
                q[d] = rndf();
            float scale = 1.0f / sqrtf((float)hd);
            for (int64_t win = 0; win <= 37; win += 37)
                for (int64_t np = 1; np <= n_pos; np += 37) {
                    kv.window = win;
                    int64_t p_start = win && np > win ? np - win : 0;
                    kn_attn_row(q, &kv, 1, hd, np, scale, 64, scratch, outr, KN_ISA_SCALAR);
                    /* float64 reference */
                    double mx = -1e300, den = 0, num[128] = {0};
                    double sc[200];
                    for (int64_t p = p_start; p < np; p++) {
                        double s = 0;
                        for (int64_t d = 0; d < hd; d++)
                            s += (double)q[d] * kf[p * stride + hd + d];
                        sc[p] = s * scale;
                        if (sc[p] > mx)
                            mx = sc[p];
                    }
                    for (int64_t p = p_start; p < np; p++) {
                        double e = exp(sc[p] - mx);
                        den += e;
                        for (int64_t d = 0; d < hd; d++)
                            num[d] += e * vf[p * stride + hd + d];
                    }
                    for (int64_t d = 0; d < hd; d++)
                        T_CHECKF(fabs(outr[d] - num[d] / den) < 2e-5, "attn hd=%lld np=%lld d=%lld",
                                 (long long)hd, (long long)np, (long long)d);
                    for (int ii = 0; ii < n_simd; ii++) {
                        kn_attn_row(q, &kv, 1, hd, np, scale, 64, scratch, outs, simd_isas[ii]);
                        T_CHECKF(memcmp(outr, outs, (size_t)hd * 4) == 0,
                                 "attention hd=%lld f16=%d n_pos=%lld window %lld isa %s",
                                 (long long)hd, f16, (long long)np, (long long)win,
                                 kn_isa_name(simd_isas[ii]));
                    }
                }
            free(kpool);
            free(vpool);
            free(kf);
            free(vf);
        }
    }
}

/* kn_attn_rows: every row of every group size bitwise equals kn_attn_row's scalar reference, for
 * head_dim with and without a fixed-size kernel, F16 and F32, chunk lengths that are and are not
 * multiples of 16 (a last 16-position group that is partly padding), windows, and the scores of
 * a repeated key (equal maxima in a chunk); with the prefetch hints off and on (a next unit of
 * another length and KV head, or none), through block tables allocated to their exact length so
 * that an address sanitizer build catches the prefetch cursor reading past one; and with the
 * values converted once per chunk (v_once) or in every value pass. */
static void t_attention_rows(void) {
    setup_isas();
    const int64_t hds[] = {32, 64, 80, 128};
    const int64_t gs[] = {1, 2, 3, 4, 5, 7, 16, 20}; /* 20: more than one piece */
    const int64_t chunks[] = {1, 7, 16, 64, 100};
    const int64_t n_kv = 2, bs = 16, n_pos = 210, nb = (n_pos + bs - 1) / bs;
    for (int hi = 0; hi < 4; hi++) {
        for (int f16 = 0; f16 < 2; f16++) {
            int64_t hd = hds[hi], stride = n_kv * hd;
            size_t esz = f16 ? 2 : 4, block_bytes = (size_t)(bs * stride) * esz;
            unsigned char *kpool = malloc((size_t)nb * block_bytes);
            unsigned char *vpool = malloc((size_t)nb * block_bytes);
            float *row = malloc((size_t)stride * 4);
            float *q = malloc((size_t)(20 * hd) * 4), *outr = malloc((size_t)(20 * hd) * 4),
                  *outs = malloc((size_t)(20 * hd) * 4);
            float *scratch = malloc(kn_attn_scratch_floats(16, hd, 100) * 4);
            int32_t *table = malloc((size_t)nb * sizeof(int32_t));
            for (int64_t b = 0; b < nb; b++)
                table[b] = (int32_t)((b * 5) % nb); /* nb = 14: a permutation */
            for (int64_t p = 0; p < n_pos; p++) {
                size_t off =
                    (size_t)table[p / bs] * block_bytes + (size_t)((p % bs) * stride) * esz;
                for (int64_t e = 0; e < stride; e++)
                    row[e] = rndf();
                if (p == 40) /* a key equal to position 39's: two equal scores */
                    memcpy(kpool + off, kpool + off - (size_t)stride * esz, (size_t)stride * esz);
                else
                    kn_store_kv(kpool + off, row, stride, f16, KN_ISA_SCALAR);
                for (int64_t e = 0; e < stride; e++)
                    row[e] = rndf();
                kn_store_kv(vpool + off, row, stride, f16, KN_ISA_SCALAR);
            }
            for (int64_t i = 0; i < 20 * hd; i++)
                q[i] = rndf();
            kn_attn_kv kv = paged_kv(kpool, vpool, block_bytes, table, bs, stride, f16);
            float scale = 1.0f / sqrtf((float)hd);
            for (int ci = 0; ci < 5; ci++)
                for (int64_t win = 0; win <= 45; win += 45)
                    for (int64_t np = 1; np <= n_pos; np += 19) {
                        int64_t chunk = chunks[ci];
                        kv.window = win;
                        for (int64_t h = 0; h < 20; h++)
                            kn_attn_row(q + h * hd, &kv, 1, hd, np, scale, chunk, scratch,
                                        outr + h * hd, KN_ISA_SCALAR);
                        /* the next unit: another length, its table exactly as long */
                        int64_t nnp = (np * 7 + 30) % n_pos + 1, nnb = (nnp + bs - 1) / bs;
                        int32_t *next = malloc((size_t)nnb * sizeof(int32_t));
                        for (int64_t b = 0; b < nnb; b++)
                            next[b] = (int32_t)((b * 3 + 1) % nb);
                        for (int gi = 0; gi < 8; gi++)
                            for (int ii = 0; ii < n_simd; ii++)
                                for (int pf = 0; pf < 3; pf++) {
                                    int64_t g = gs[gi], h0 = 20 - g; /* the last g heads */
                                    kv.prefetch = pf > 0;
                                    kv.v_once = pf != 1;
                                    kv.next_table = pf == 2 ? next : NULL;
                                    kv.next_kvh = 0;
                                    kv.next_n_pos = nnp;
                                    memset(outs, 0xFF, (size_t)(g * hd) * 4);
                                    kn_attn_rows(q + h0 * hd, g, &kv, 1, hd, np, scale, chunk,
                                                 scratch, outs, simd_isas[ii]);
                                    T_CHECKF(memcmp(outr + h0 * hd, outs, (size_t)(g * hd) * 4) ==
                                                 0,
                                             "attn rows hd=%lld f16=%d g=%lld chunk=%lld np=%lld "
                                             "window %lld isa %s prefetch %d v-once %d",
                                             (long long)hd, f16, (long long)g, (long long)chunk,
                                             (long long)np, (long long)win,
                                             kn_isa_name(simd_isas[ii]), pf, pf != 1);
                                }
                        kv.prefetch = false;
                        kv.next_table = NULL;
                        free(next);
                    }
            free(kpool);
            free(vpool);
            free(row);
            free(q);
            free(outr);
            free(outs);
            free(scratch);
            free(table);
        }
    }
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU");
}

/* The DSA kernels (kn_index.c): FP8 e4m3 codes, the index-key element types, LayerNorm, the
 * indexer score's relu, the top-k order, and sparse attention against a float64 softmax. */
static void t_dsa(void) {
    /* every non-NaN code decodes to a value that encodes back to it (-0 stays -0) */
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f)
            continue;
        float v = kn_e4m3_to_f32((uint8_t)b);
        T_CHECKF(kn_f32_to_e4m3(v) == b, "code %02x -> %g -> %02x", b, v, kn_f32_to_e4m3(v));
    }
    T_CHECK(kn_e4m3_to_f32(0x7e) == 448.0f && kn_e4m3_to_f32(0x01) == 0x1p-9f);
    T_CHECK(kn_f32_to_e4m3(1000.0f) == 0x7e && kn_f32_to_e4m3(-1e30f) == 0xfe); /* saturate */
    T_CHECK(kn_e4m3_to_f32(0x7f) != kn_e4m3_to_f32(0x7f));                      /* NaN */
    /* halfway between 1 (0x38) and 1.125 (0x39) rounds to even (1), above it to 1.125 */
    T_CHECK(kn_f32_to_e4m3(1.0625f) == 0x38 && kn_f32_to_e4m3(1.07f) == 0x39);
    T_CHECK(kn_f32_to_e4m3(1.1875f) == 0x3a); /* halfway 1.125 / 1.25: even is 1.25 */
    /* key rows: f32 exact, f16/bf16 as the conversions, fp8 within half a step of its scale */
    float k[40], back[40];
    unsigned char row[4 * 40];
    float amax = 0;
    for (int i = 0; i < 40; i++) {
        k[i] = rndf() * (i == 7 ? 9.0f : 1.0f);
        amax = fabsf(k[i]) > amax ? fabsf(k[i]) : amax;
    }
    const kn_ik_type types[] = {KN_IK_F32, KN_IK_F16, KN_IK_BF16, KN_IK_FP8};
    for (int ti = 0; ti < 4; ti++) {
        kn_ik_type t = types[ti];
        T_EQ_INT(kn_ik_type_from_name(kn_ik_name(t)), t);
        T_CHECK(kn_ik_row_bytes(t, 40) <= sizeof row);
        kn_ik_store(row, k, 40, t);
        kn_ik_load(row, 40, t, back);
        for (int i = 0; i < 40; i++) {
            float want = t == KN_IK_F32    ? k[i]
                         : t == KN_IK_F16  ? kn_f16_to_f32(kn_f32_to_f16(k[i]))
                         : t == KN_IK_BF16 ? kn_bf16_to_f32(kn_f32_to_bf16(k[i]))
                                           : back[i];
            T_CHECKF(back[i] == want, "type %d element %d: %g, expected %g", t, i, back[i], want);
            /* fp8: scale s = amax / 448; rounding is at most half a step, a sixteenth of the
             * value's octave, or half of the subnormal step s * 2^-9 */
            if (t == KN_IK_FP8)
                T_CHECKF(fabsf(back[i] - k[i]) <= fabsf(k[i]) / 16.0f + amax / 448.0f * 0x1p-10f,
                         "fp8 element %d: %g for %g", i, back[i], k[i]);
        }
    }
    T_EQ_INT(kn_ik_type_from_name("ik-f8"), -1);
    /* LayerNorm: mean 0, variance 1 before weight and bias */
    float y[40];
    kn_layernorm(k, NULL, NULL, 1e-6f, 40, y);
    double mean = 0, var = 0;
    for (int i = 0; i < 40; i++)
        mean += y[i];
    for (int i = 0; i < 40; i++)
        var += (y[i] - mean / 40) * (y[i] - mean / 40);
    T_CHECKF(fabs(mean / 40) < 1e-6 && fabs(var / 40 - 1) < 1e-4, "mean %g var %g", mean / 40,
             var / 40);
    /* the score: heads whose dot is not positive add nothing */
    float q[2 * 4] = {1, 0, 0, 0, -1, 0, 0, 0}, w[2] = {2.0f, 5.0f}, key[4] = {0.5f, 1, 1, 1};
    T_CHECK(kn_index_score(q, w, 2, 4, key, KN_ISA_SCALAR) == 1.0f);
    /* every instruction set gives the scalar reference's bits, for any head size and count */
    for (int isa = KN_ISA_AVX2; isa <= KN_ISA_AVX512; isa++) {
        if (!kn_isa_available((kn_isa)isa))
            continue;
        float qq[17 * 70], ww[17], kk[70];
        for (int trial = 0; trial < 200; trial++) {
            int64_t d = 1 + (int64_t)(rnd64() % 70), h = 1 + (int64_t)(rnd64() % 17);
            for (int64_t i = 0; i < h * d; i++)
                qq[i] = rndf();
            for (int64_t i = 0; i < d; i++)
                kk[i] = rndf();
            for (int64_t i = 0; i < h; i++)
                ww[i] = rndf();
            float ref = kn_index_score(qq, ww, h, d, kk, KN_ISA_SCALAR);
            float got = kn_index_score(qq, ww, h, d, kk, (kn_isa)isa);
            T_CHECKF(!memcmp(&ref, &got, sizeof ref), "isa %d, %lld heads of %lld: %a vs %a", isa,
                     (long long)h, (long long)d, got, ref);
        }
    }
    /* top-k: the k best, ties to the lower position, whatever the push order */
    float sc[12] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
    kn_topk_item heap[5];
    int32_t sel[5], sel2[5];
    int64_t n = 0, n2 = 0;
    for (int p = 0; p < 12; p++)
        kn_topk_push(heap, &n, 5, sc[p], p);
    kn_topk_positions(heap, n, sel);
    for (int p = 11; p >= 0; p--)
        kn_topk_push(heap, &n2, 5, sc[p], p);
    kn_topk_positions(heap, n2, sel2);
    const int32_t want[5] = {4, 5, 7, 8, 11}; /* 9, 8, 6, and the first two 5s (4, 8) */
    T_CHECK(n == 5 && n2 == 5 && !memcmp(sel, want, sizeof want) &&
            !memcmp(sel2, want, sizeof want));
    /* sparse attention over positions {1, 3, 4} of a 6-position F32 cache: the float64 softmax */
    enum { HD = 8, NP = 6 };
    float kv[NP * HD], qa[HD], out[HD], scratch[3];
    for (int i = 0; i < NP * HD; i++)
        kv[i] = rndf();
    for (int i = 0; i < HD; i++)
        qa[i] = rndf();
    int32_t table[1] = {0};
    kn_attn_kv a = {.k_base = kv,
                    .v_base = kv,
                    .block_bytes = sizeof kv,
                    .table = table,
                    .block_size = NP,
                    .kv_stride = HD};
    const int32_t pos[3] = {1, 3, 4};
    kn_attn_sparse_row(qa, &a, HD, pos, 3, 0.5f, scratch, out, KN_ISA_SCALAR);
    double s[3], m = -1e300, l = 0;
    for (int j = 0; j < 3; j++) {
        s[j] = 0;
        for (int d = 0; d < HD; d++)
            s[j] += (double)qa[d] * kv[pos[j] * HD + d];
        s[j] *= 0.5;
        m = s[j] > m ? s[j] : m;
    }
    for (int j = 0; j < 3; j++)
        l += exp(s[j] - m);
    for (int d = 0; d < HD; d++) {
        double o = 0;
        for (int j = 0; j < 3; j++)
            o += exp(s[j] - m) / l * kv[pos[j] * HD + d];
        T_CHECKF(fabs(out[d] - o) < 1e-5, "sparse attention element %d: %g, expected %g", d, out[d],
                 o);
    }
    /* every instruction set gives the scalar bits: the dot product for any length, and the sparse
     * row for F32 and F16 caches, any head size (MLA's 576 among them) and selection */
    enum { SP = 40, SD = 576 };
    static float bk[SP * SD], bq[SD], bo[2][SD], bs[SP];
    static uint16_t hk[SP * SD];
    for (int isa = KN_ISA_AVX2; isa <= KN_ISA_AVX512; isa++) {
        if (!kn_isa_available((kn_isa)isa))
            continue;
        for (int trial = 0; trial < 300; trial++) {
            int64_t d = trial < 20 ? SD - trial : 1 + (int64_t)(rnd64() % 100);
            for (int64_t i = 0; i < SP * d; i++) {
                bk[i] = rndf();
                hk[i] = kn_f32_to_f16(bk[i] * 3);
            }
            for (int64_t i = 0; i < d; i++)
                bq[i] = rndf() * 2;
            float r1 = kn_dot_ref(bq, bk, d), r2 = kn_dot(bq, bk, d, (kn_isa)isa);
            T_CHECKF(!memcmp(&r1, &r2, sizeof r1), "isa %d, dot of %lld: %a vs %a", isa,
                     (long long)d, r2, r1);
            int32_t sp[SP], np = 0;
            for (int32_t p = 0; p < SP; p++)
                if (p == trial % SP || rnd64() % 3 == 0)
                    sp[np++] = p;
            bool f16 = trial & 1;
            int32_t tb[2] = {1, 0}; /* two blocks, in reverse order */
            kn_attn_kv sa = {.k_base = f16 ? (const void *)hk : bk,
                             .v_base = f16 ? (const void *)(hk + 3) : bk + 3,
                             .block_bytes = (size_t)(SP / 2) * d * (f16 ? 2 : 4),
                             .table = tb,
                             .block_size = SP / 2,
                             .kv_stride = d,
                             .f16 = f16};
            int64_t hd = d > 3 ? d - 3 : d; /* values read at an offset: unaligned rows */
            if (d <= 3)
                sa.v_base = sa.k_base;
            kn_attn_sparse_row(bq, &sa, hd, sp, np, 0.3f, bs, bo[0], KN_ISA_SCALAR);
            kn_attn_sparse_row(bq, &sa, hd, sp, np, 0.3f, bs, bo[1], (kn_isa)isa);
            T_CHECKF(!memcmp(bo[0], bo[1], (size_t)hd * sizeof(float)),
                     "isa %d, sparse row of %lld (%s), %d positions: differs", isa, (long long)hd,
                     f16 ? "f16" : "f32", np);
        }
    }
}

int main(void) {
    test_run("kernels.f16_conversion_matches_f16c", t_f16_conv);
    test_run("kernels.expf", t_expf);
    test_run("kernels.act_quantize_simd_eq_ref", t_act_quantize);
    test_run("kernels.dequantize_known_blocks", t_dequant_known);
    test_run("kernels.quantize_roundtrip", t_quant_roundtrip);
    test_run("kernels.matmul_simd_eq_ref", t_matmul);
    test_run("kernels.matmul_kq_large_m", t_matmul_kq_large_m);
    test_run("kernels.matmul_few_rows_eq_ref", t_matmul_few_rows);
    test_run("kernels.matmul_direct_rows_by_cpu", t_matmul_direct_rows);
    test_run("kernels.matmul_kc", t_matmul_kc);
    test_run("kernels.mat_units_span", t_mat_units_span);
    test_run("kernels.matmul_accuracy", t_matmul_accuracy);
    test_run("kernels.row_ops_simd_eq_ref", t_row_ops);
    test_run("kernels.attention", t_attention);
    test_run("kernels.attention_rows_eq_ref", t_attention_rows);
    test_run("kernels.dsa", t_dsa);
    return test_summary();
}
