/* SPDX-License-Identifier: MIT */
/*
 * kn_types: reference quantizers and dequantizers of the 32-element block types, and per-type row
 * conversion. See kn_types.h; the K-quants are in kn_kquant.c. These run at load time (embedding
 * rows, synth, quantize) and in tests; they are not on the hot path of the forward pass except for
 * embedding lookups (one row per token).
 *
 * The quantizers follow llama.cpp's reference quantizers (quantize_row_*_ref): the same scale
 * rule, the same rounding (add 0.5 or 8.5/16.5 and truncate) and the same clamps, so for finite
 * input they should produce the same bytes; that has not been checked against llama.cpp itself
 * here (no copy of it on this machine), only against the format facts.
 */
#include "kernels/kn_types.h"
#include "base/err.h"
#include "kernels/kn_type_table.h"

void kn_quantize_row_q8_0(const float *x, kn_block_q8_0 *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        const float *xb = x + b * KN_QK;
        float amax = 0.0f;
        for (int j = 0; j < KN_QK; j++) {
            float a = fabsf(xb[j]);
            if (a > amax)
                amax = a;
        }
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kn_f32_to_f16(d);
        for (int j = 0; j < KN_QK; j++)
            y[b].q[j] = (int8_t)roundf(xb[j] * id);
    }
}

/* The element of the block with the largest magnitude, sign kept (the first of equals): Q4_0 and
 * Q5_0 scale by it so that it maps to the most negative level. */
static float kq_max_magnitude(const float *xb) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < KN_QK; j++) {
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            max = xb[j];
        }
    }
    return max;
}

void kn_quantize_row_q4_0(const float *x, kn_block_q4_0 *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        const float *xb = x + b * KN_QK;
        float max = kq_max_magnitude(xb);
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kn_f32_to_f16(d);
        for (int j = 0; j < KN_QK / 2; j++) {
            float v0 = xb[j] * id + 8.5f;
            float v1 = xb[j + KN_QK / 2] * id + 8.5f;
            int q0 = (int)v0, q1 = (int)v1;
            if (q0 > 15)
                q0 = 15;
            if (q1 > 15)
                q1 = 15;
            if (q0 < 0)
                q0 = 0;
            if (q1 < 0)
                q1 = 0;
            y[b].q[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* min and max of 32 floats (NaN never wins, as in the reference) */
static void kn_block_minmax(const float *x, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < KN_QK; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

void kn_quantize_row_q4_1(const float *x, kn_block_q4_1 *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        const float *xb = x + b * KN_QK;
        float mn, mx;
        kn_block_minmax(xb, &mn, &mx);
        float d = (mx - mn) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kn_f32_to_f16(d);
        y[b].m = kn_f32_to_f16(mn);
        for (int j = 0; j < KN_QK / 2; j++) {
            int q0 = (int)((xb[j] - mn) * id + 0.5f);
            int q1 = (int)((xb[j + KN_QK / 2] - mn) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[b].q[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Stores 32 five-bit codes e[] as nibbles q[] plus the fifth bits qh[] (bit j for element j). */
static void kn_pack_q5(const int e[KN_QK], uint8_t qh[4], uint8_t q[16]) {
    uint32_t h = 0;
    for (int j = 0; j < KN_QK / 2; j++) {
        q[j] = (uint8_t)((e[j] & 15) | ((e[j + 16] & 15) << 4));
        h |= (uint32_t)((e[j] >> 4) & 1) << j;
        h |= (uint32_t)((e[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int i = 0; i < 4; i++)
        qh[i] = (uint8_t)(h >> (8 * i));
}

void kn_unpack_q5(const uint8_t qh[4], const uint8_t q[16], uint8_t e[KN_QK]) {
    uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < KN_QK / 2; j++) {
        e[j] = (uint8_t)((q[j] & 15) | ((h >> j) & 1) << 4);
        e[j + 16] = (uint8_t)((q[j] >> 4) | ((h >> (j + 16)) & 1) << 4);
    }
}

void kn_quantize_row_q5_0(const float *x, kn_block_q5_0 *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        const float *xb = x + b * KN_QK;
        float max = kq_max_magnitude(xb);
        float d = max / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kn_f32_to_f16(d);
        int e[KN_QK];
        for (int j = 0; j < KN_QK; j++) {
            int v = (int)(xb[j] * id + 16.5f);
            e[j] = v > 31 ? 31 : v < 0 ? 0 : v;
        }
        kn_pack_q5(e, y[b].qh, y[b].q);
    }
}

void kn_quantize_row_q5_1(const float *x, kn_block_q5_1 *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        const float *xb = x + b * KN_QK;
        float mn, mx;
        kn_block_minmax(xb, &mn, &mx);
        float d = (mx - mn) / 31.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kn_f32_to_f16(d);
        y[b].m = kn_f32_to_f16(mn);
        int e[KN_QK];
        for (int j = 0; j < KN_QK; j++) {
            int v = (int)((xb[j] - mn) * id + 0.5f);
            e[j] = v > 31 ? 31 : v;
        }
        kn_pack_q5(e, y[b].qh, y[b].q);
    }
}

void kn_dequantize_row_q4_1(const kn_block_q4_1 *x, float *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        float d = kn_f16_to_f32(x[b].d), m = kn_f16_to_f32(x[b].m);
        for (int j = 0; j < KN_QK / 2; j++) {
            y[b * KN_QK + j] = (float)(x[b].q[j] & 15) * d + m;
            y[b * KN_QK + j + KN_QK / 2] = (float)(x[b].q[j] >> 4) * d + m;
        }
    }
}

void kn_dequantize_row_q5_0(const kn_block_q5_0 *x, float *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        float d = kn_f16_to_f32(x[b].d);
        uint8_t e[KN_QK];
        kn_unpack_q5(x[b].qh, x[b].q, e);
        for (int j = 0; j < KN_QK; j++)
            y[b * KN_QK + j] = (float)(e[j] - 16) * d;
    }
}

void kn_dequantize_row_q5_1(const kn_block_q5_1 *x, float *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        float d = kn_f16_to_f32(x[b].d), m = kn_f16_to_f32(x[b].m);
        uint8_t e[KN_QK];
        kn_unpack_q5(x[b].qh, x[b].q, e);
        for (int j = 0; j < KN_QK; j++)
            y[b * KN_QK + j] = (float)e[j] * d + m;
    }
}

void kn_dequantize_row_q8_0(const kn_block_q8_0 *x, float *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        float d = kn_f16_to_f32(x[b].d);
        for (int j = 0; j < KN_QK; j++)
            y[b * KN_QK + j] = (float)x[b].q[j] * d;
    }
}

void kn_dequantize_row_q4_0(const kn_block_q4_0 *x, float *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        float d = kn_f16_to_f32(x[b].d);
        for (int j = 0; j < KN_QK / 2; j++) {
            y[b * KN_QK + j] = (float)((x[b].q[j] & 15) - 8) * d;
            y[b * KN_QK + j + KN_QK / 2] = (float)((x[b].q[j] >> 4) - 8) * d;
        }
    }
}

int kn_type_supported(int type) {
    switch (type) {
    case GGUF_TYPE_F32:
    case GGUF_TYPE_F16:
    case GGUF_TYPE_BF16:
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q4_0:
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q5_0:
    case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q5_K:
    case GGUF_TYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

int kn_dequantize_row(int type, const void *data, int64_t row, int64_t k, float *out) {
    int64_t rb = kn_type_row_bytes(type, k);
    if (rb < 0 || !kn_type_supported(type))
        return err_set(ERR_UNSUPPORTED, "no dequantizer for type %s with row length %lld",
                       kn_type_name(type) ? kn_type_name(type) : "?", (long long)k);
    const unsigned char *p = (const unsigned char *)data + row * rb;
    switch (type) {
    case GGUF_TYPE_F32:
        memcpy(out, p, (size_t)k * 4);
        break;
    case GGUF_TYPE_F16: {
        const uint16_t *h = (const uint16_t *)p;
        for (int64_t i = 0; i < k; i++)
            out[i] = kn_f16_to_f32(h[i]);
        break;
    }
    case GGUF_TYPE_BF16: {
        const uint16_t *h = (const uint16_t *)p;
        for (int64_t i = 0; i < k; i++)
            out[i] = kn_bf16_to_f32(h[i]);
        break;
    }
    case GGUF_TYPE_Q8_0:
        kn_dequantize_row_q8_0((const kn_block_q8_0 *)p, out, k);
        break;
    case GGUF_TYPE_Q4_0:
        kn_dequantize_row_q4_0((const kn_block_q4_0 *)p, out, k);
        break;
    case GGUF_TYPE_Q4_1:
        kn_dequantize_row_q4_1((const kn_block_q4_1 *)p, out, k);
        break;
    case GGUF_TYPE_Q5_0:
        kn_dequantize_row_q5_0((const kn_block_q5_0 *)p, out, k);
        break;
    case GGUF_TYPE_Q5_1:
        kn_dequantize_row_q5_1((const kn_block_q5_1 *)p, out, k);
        break;
    case GGUF_TYPE_Q4_K:
        kn_dequantize_row_q4_K((const kn_block_q4_K *)p, out, k);
        break;
    case GGUF_TYPE_Q5_K:
        kn_dequantize_row_q5_K((const kn_block_q5_K *)p, out, k);
        break;
    case GGUF_TYPE_Q6_K:
        kn_dequantize_row_q6_K((const kn_block_q6_K *)p, out, k);
        break;
    }
    return 0;
}

int64_t kn_quantize_rows(int type, const float *src, int64_t n_rows, int64_t k, void *dst) {
    int64_t rb = kn_type_row_bytes(type, k);
    if (rb < 0 || !kn_type_supported(type))
        return err_set(ERR_UNSUPPORTED, "cannot quantize to type %s with row length %lld",
                       kn_type_name(type) ? kn_type_name(type) : "?", (long long)k);
    unsigned char *d = dst;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = src + r * k;
        unsigned char *o = d + r * rb;
        switch (type) {
        case GGUF_TYPE_F32:
            memcpy(o, x, (size_t)k * 4);
            break;
        case GGUF_TYPE_F16:
            for (int64_t i = 0; i < k; i++)
                ((uint16_t *)o)[i] = kn_f32_to_f16(x[i]);
            break;
        case GGUF_TYPE_BF16:
            for (int64_t i = 0; i < k; i++)
                ((uint16_t *)o)[i] = kn_f32_to_bf16(x[i]);
            break;
        case GGUF_TYPE_Q8_0:
            kn_quantize_row_q8_0(x, (kn_block_q8_0 *)o, k);
            break;
        case GGUF_TYPE_Q4_0:
            kn_quantize_row_q4_0(x, (kn_block_q4_0 *)o, k);
            break;
        case GGUF_TYPE_Q4_1:
            kn_quantize_row_q4_1(x, (kn_block_q4_1 *)o, k);
            break;
        case GGUF_TYPE_Q5_0:
            kn_quantize_row_q5_0(x, (kn_block_q5_0 *)o, k);
            break;
        case GGUF_TYPE_Q5_1:
            kn_quantize_row_q5_1(x, (kn_block_q5_1 *)o, k);
            break;
        case GGUF_TYPE_Q4_K:
            kn_quantize_row_q4_K(x, (kn_block_q4_K *)o, k);
            break;
        case GGUF_TYPE_Q5_K:
            kn_quantize_row_q5_K(x, (kn_block_q5_K *)o, k);
            break;
        case GGUF_TYPE_Q6_K:
            kn_quantize_row_q6_K(x, (kn_block_q6_K *)o, k);
            break;
        }
    }
    return rb * n_rows;
}
