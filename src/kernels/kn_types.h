/* SPDX-License-Identifier: MIT */
/*
 * kn_types: element conversions and block formats of the weight types verity computes with, as
 * scalar reference code: F32, F16, BF16, Q8_0 and Q4_0 in llama.cpp's exact block layouts.
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
 */
#ifndef VERITY_KERNELS_KN_TYPES_H
#define VERITY_KERNELS_KN_TYPES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KN_QK 32 /* elements per Q8_0 / Q4_0 block */

typedef struct kn_block_q8_0 {
    uint16_t d;
    int8_t q[KN_QK];
} kn_block_q8_0;

typedef struct kn_block_q4_0 {
    uint16_t d;
    uint8_t q[KN_QK / 2];
} kn_block_q4_0;

_Static_assert(sizeof(kn_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(kn_block_q4_0) == 18, "q4_0 block is 18 bytes");

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

/* Reference (de)quantization of one row of k elements (k a multiple of 32 for Q types). The
 * quantizers follow llama.cpp's reference rules (scale from the absolute maximum, round half away
 * from zero), so files we write read the same in other engines. */
void kn_quantize_row_q8_0(const float *x, kn_block_q8_0 *y, int64_t k);
void kn_quantize_row_q4_0(const float *x, kn_block_q4_0 *y, int64_t k);
void kn_dequantize_row_q8_0(const kn_block_q8_0 *x, float *y, int64_t k);
void kn_dequantize_row_q4_0(const kn_block_q4_0 *x, float *y, int64_t k);

/* Converts row i of a weight tensor of gguf type `type` with k elements per row to floats. Returns
 * 0, or ERR_UNSUPPORTED for a type without a dequantizer. */
int kn_dequantize_row(int type, const void *data, int64_t row, int64_t k, float *out);

/* Quantizes n_rows rows of k floats into dst (gguf type `type`), returning the bytes written, or a
 * negative error for unsupported types / bad k. */
int64_t kn_quantize_rows(int type, const float *src, int64_t n_rows, int64_t k, void *dst);

/* True if verity can compute with weights of this gguf type (matmul and embedding lookup). */
int kn_type_supported(int type);

#endif
