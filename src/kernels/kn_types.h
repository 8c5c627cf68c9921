/* SPDX-License-Identifier: MIT */
/*
 * kn_types: element conversions and block formats of the weight types verity computes with, as
 * scalar reference code: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K,
 * Q6_K, in llama.cpp's exact block layouts (ggml-common.h).
 *
 * Conversions are bit-exact models of the hardware ones the SIMD kernels use: kn_f32_to_f16 rounds
 * to nearest-even exactly as F16C's vcvtps2ph (imm 0) does, subnormals and NaN payloads included,
 * so KV written in F16 is the same whether the scalar or the SIMD path wrote it. kn_cvt_rne_i32
 * models cvtps2dq (round to nearest-even, NaN and out-of-range give INT32_MIN), kn_maxf models
 * maxps (returns the second operand when unordered).
 *
 * Block formats (K elements per row, a multiple of 32 for the quantized types):
 *   Q8_0: { f16 d; int8 q[32]; }            x = q * d                          34 bytes
 *   Q4_0: { f16 d; uint8 q[16]; }            x[j] = ((q[j] & 15) - 8) * d,
 *                                            x[j+16] = ((q[j] >> 4) - 8) * d     18 bytes
 *   Q4_1: { f16 d, m; uint8 q[16]; }         x[j] = (q[j] & 15) * d + m,
 *                                            x[j+16] = (q[j] >> 4) * d + m        20 bytes
 *   Q5_0: { f16 d; uint8 qh[4]; uint8 q[16]; }  5-bit e[j] = nibble | bit j of qh (little-endian
 *                                            u32) << 4, nibbles as Q4_0; x = (e - 16) * d    22
 * bytes Q5_1: { f16 d, m; uint8 qh[4]; uint8 q[16]; }  e as Q5_0; x = e * d + m              24
 * bytes K-quants, super-blocks of KN_QK_K = 256 elements (rows must be a multiple of 256): Q4_K: {
 * f16 d, dmin; uint8 scales[12]; uint8 q[128]; }                            144 bytes eight
 * 32-element sub-blocks j, each with a 6-bit scale sc_j and 6-bit min m_j packed in scales[]
 * (kn_q4k_scale_min); q[32p + l] holds element 64p + l in its low nibble and 64p + 32 + l in its
 * high nibble; x = (d * sc_j) * e - dmin * m_j. Q5_K: { f16 d, dmin; uint8 scales[12]; uint8
 * qh[32]; uint8 q[128]; }             176 bytes as Q4_K plus a fifth bit: bit 2p of qh[l] for
 * element 64p + l, bit 2p+1 for 64p + 32 + l. Q6_K: { uint8 ql[128]; uint8 qh[64]; int8 scales[16];
 * f16 d; }                    210 bytes sixteen 16-element sub-blocks with int8 scales; for each
 * half h (128 elements) and l < 32: element 128h + 32t + l (t = 0..3) has low nibble ql[64h + l +
 * 32(t & 1)] >> 4(t >> 1) and high bits (qh[32h + l] >> 2t) & 3; x = (d * scales[e / 16]) * (q -
 * 32).
 */
#ifndef VERITY_KERNELS_KN_TYPES_H
#define VERITY_KERNELS_KN_TYPES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KN_QK   32  /* elements per Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 block */
#define KN_QK_K 256 /* elements per K-quant super-block */

typedef struct kn_block_q8_0 {
    uint16_t d;
    int8_t q[KN_QK];
} kn_block_q8_0;

typedef struct kn_block_q4_0 {
    uint16_t d;
    uint8_t q[KN_QK / 2];
} kn_block_q4_0;

typedef struct kn_block_q4_1 {
    uint16_t d, m;
    uint8_t q[KN_QK / 2];
} kn_block_q4_1;

typedef struct kn_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t q[KN_QK / 2];
} kn_block_q5_0;

typedef struct kn_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t q[KN_QK / 2];
} kn_block_q5_1;

typedef struct kn_block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t q[KN_QK_K / 2];
} kn_block_q4_K;

typedef struct kn_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[KN_QK_K / 8];
    uint8_t q[KN_QK_K / 2];
} kn_block_q5_K;

typedef struct kn_block_q6_K {
    uint8_t ql[KN_QK_K / 2];
    uint8_t qh[KN_QK_K / 4];
    int8_t scales[KN_QK_K / 16];
    uint16_t d;
} kn_block_q6_K;

_Static_assert(sizeof(kn_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(kn_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(kn_block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(kn_block_q5_0) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(kn_block_q5_1) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(kn_block_q4_K) == 144, "q4_K block is 144 bytes");
_Static_assert(sizeof(kn_block_q5_K) == 176, "q5_K block is 176 bytes");
_Static_assert(sizeof(kn_block_q6_K) == 210, "q6_K block is 210 bytes");

static inline uint32_t kn_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float kn_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half -> float, exact, bit-identical to vcvtph2ps (signalling NaNs come out quiet). */
static inline float kn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0x1f) {
        /* infinity, or NaN with the payload kept and the quiet bit set, as vcvtph2ps does */
        u = sign | 0x7f800000 | (man << 13) | (man ? 0x400000u : 0);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {
            /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    return kn_bits_f32(u);
}

/* float -> IEEE half, round to nearest-even, bit-identical to vcvtps2ph with imm 0. */
static inline uint16_t kn_f32_to_f16(float f) {
    uint32_t x = kn_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) {
        if (ax > 0x7f800000)
            return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* quiet NaN, payload kept */
        return (uint16_t)(sign | 0x7c00);
    }
    if (ax >= 0x477ff000) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00);
    if (ax >= 0x38800000) { /* normal half */
        uint32_t r = ax - 0x38000000;
        r += 0xfff + ((r >> 13) & 1);
        return (uint16_t)(sign | (r >> 13));
    }
    /* half subnormal or zero */
    uint32_t e = ax >> 23;
    if (e == 0)
        return (uint16_t)sign; /* float subnormal: far below half's range */
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* >= 14 here */
    if (shift > 24)
        return (uint16_t)sign;
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

static inline float kn_bf16_to_f32(uint16_t h) {
    return kn_bits_f32((uint32_t)h << 16);
}

/* float -> bfloat16, round to nearest-even; NaN becomes a quiet NaN. */
static inline uint16_t kn_f32_to_bf16(float f) {
    uint32_t u = kn_f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* cvtps2dq: round to nearest-even; NaN or out of int32 range gives INT32_MIN. */
static inline int32_t kn_cvt_rne_i32(float f) {
    if (!(f >= -2147483648.0f && f < 2147483648.0f))
        return INT32_MIN;
    return (int32_t)nearbyintf(f);
}

/* maxps(a, b): b if a is not greater (including when either is NaN). */
static inline float kn_maxf(float a, float b) {
    return a > b ? a : b;
}

/* Reference (de)quantization of one row of k elements (k a multiple of 32 for Q types, of 256 for
 * K-quants). The quantizers follow llama.cpp's reference rules (scale from the absolute maximum,
 * round half away from zero; for Q4_1/Q5_1 scale and min from the block's range; for K-quants the
 * weighted least-squares scale/min search of its reference quantizer, see kn_kquant.c), so files we
 * write read the same in other engines. */
void kn_quantize_row_q8_0(const float *x, kn_block_q8_0 *y, int64_t k);
void kn_quantize_row_q4_0(const float *x, kn_block_q4_0 *y, int64_t k);
void kn_quantize_row_q4_1(const float *x, kn_block_q4_1 *y, int64_t k);
void kn_quantize_row_q5_0(const float *x, kn_block_q5_0 *y, int64_t k);
void kn_quantize_row_q5_1(const float *x, kn_block_q5_1 *y, int64_t k);
void kn_quantize_row_q4_K(const float *x, kn_block_q4_K *y, int64_t k);
void kn_quantize_row_q5_K(const float *x, kn_block_q5_K *y, int64_t k);
void kn_quantize_row_q6_K(const float *x, kn_block_q6_K *y, int64_t k);
void kn_dequantize_row_q8_0(const kn_block_q8_0 *x, float *y, int64_t k);
void kn_dequantize_row_q4_0(const kn_block_q4_0 *x, float *y, int64_t k);
void kn_dequantize_row_q4_1(const kn_block_q4_1 *x, float *y, int64_t k);
void kn_dequantize_row_q5_0(const kn_block_q5_0 *x, float *y, int64_t k);
void kn_dequantize_row_q5_1(const kn_block_q5_1 *x, float *y, int64_t k);
void kn_dequantize_row_q4_K(const kn_block_q4_K *x, float *y, int64_t k);
void kn_dequantize_row_q5_K(const kn_block_q5_K *x, float *y, int64_t k);
void kn_dequantize_row_q6_K(const kn_block_q6_K *x, float *y, int64_t k);

/* The unsigned integer codes of one block, in element order (what the dequantizers scale and the
 * matmul packers and scalar reference consume): Q5_0/Q5_1 e[32] in 0..31; Q4_K e[256] in 0..15,
 * Q5_K in 0..31, Q6_K in 0..63 (the value is e - 32). */
void kn_unpack_q5(const uint8_t qh[4], const uint8_t q[16], uint8_t e[KN_QK]);
void kn_unpack_q4_K(const kn_block_q4_K *b, uint8_t e[KN_QK_K]);
void kn_unpack_q5_K(const kn_block_q5_K *b, uint8_t e[KN_QK_K]);
void kn_unpack_q6_K(const kn_block_q6_K *b, uint8_t e[KN_QK_K]);

/* The 6-bit scale and min of sub-block j (0..7) from a Q4_K/Q5_K scales[12] array: j < 4 in the low
 * six bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 with their top two bits in the
 * top two bits of bytes j - 4 (scale) and j (min). */
static inline void kn_kquant_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Converts row i of a weight tensor of gguf type `type` with k elements per row to floats. Returns
 * 0, or ERR_UNSUPPORTED for a type without a dequantizer. */
int kn_dequantize_row(int type, const void *data, int64_t row, int64_t k, float *out);

/* Quantizes n_rows rows of k floats into dst (gguf type `type`), returning the bytes written, or a
 * negative error for unsupported types / bad k. */
int64_t kn_quantize_rows(int type, const float *src, int64_t n_rows, int64_t k, void *dst);

/* True if verity can compute with weights of this gguf type (matmul and embedding lookup). */
int kn_type_supported(int type);

#endif
