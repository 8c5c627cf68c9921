/* SPDX-License-Identifier: MIT */
/*
 * kn_types: reference quantizers and dequantizers, and per-type row conversion. See kn_types.h.
 * These run at load time (embedding rows, synth, quantize) and in tests; they are not on the hot
 * path of the forward pass except for embedding lookups (one row per token).
 */
#include "kernels/kn_types.h"
#include "base/err.h"
#include "gguf/gguf.h"

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

void kn_quantize_row_q4_0(const float *x, kn_block_q4_0 *y, int64_t k) {
    for (int64_t b = 0; b < k / KN_QK; b++) {
        const float *xb = x + b * KN_QK;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < KN_QK; j++) {
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
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
        return 1;
    default:
        return 0;
    }
}

int kn_dequantize_row(int type, const void *data, int64_t row, int64_t k, float *out) {
    int64_t rb = gguf_type_row_bytes(type, k);
    if (rb < 0 || !kn_type_supported(type))
        return err_set(ERR_UNSUPPORTED, "no dequantizer for type %s with row length %lld",
                       gguf_type_name(type) ? gguf_type_name(type) : "?", (long long)k);
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
    }
    return 0;
}

int64_t kn_quantize_rows(int type, const float *src, int64_t n_rows, int64_t k, void *dst) {
    int64_t rb = gguf_type_row_bytes(type, k);
    if (rb < 0 || !kn_type_supported(type))
        return err_set(ERR_UNSUPPORTED, "cannot quantize to type %s with row length %lld",
                       gguf_type_name(type) ? gguf_type_name(type) : "?", (long long)k);
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
        }
    }
    return rb * n_rows;
}
