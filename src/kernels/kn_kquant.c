/* SPDX-License-Identifier: MIT */
/*
 * kn_kquant: reference quantizers, dequantizers and code unpackers of llama.cpp's K-quants Q4_K,
 * Q5_K and Q6_K (block layouts in kn_types.h). They run when a model is written (synth, quantize),
 * for embedding rows and in tests; the matmul never dequantizes (kn_matmul.c).
 *
 * The quantizers implement the rules of llama.cpp's reference quantizers (the ones
 * `llama-quantize` uses without an importance matrix), written from the format description:
 *   Q4_K / Q5_K: per 32-element sub-block, weights w = rms(x) + |x| and a weighted least-squares
 *     fit of x ~ scale * e + min (min <= 0, e in 0..15 or 0..31) over a grid of candidate inverse
 *     scales ((nmax + rmin + rdelta * i) / range, i = 0..nstep; Q4_K rmin -1, rdelta 0.1, 20
 *     steps; Q5_K -0.5, 0.1, 15); the eight scales and mins are then quantized to 6 bits against
 *     the largest of each (d = max_scale / 63, dmin = max_min / 63, both stored as f16), and the
 *     codes recomputed from the stored scales: e = clamp(round((x + dmin * m) / (d * sc))).
 *   Q6_K: per 16-element sub-block, a signed absmax scale refined by trying 18 nearby inverse
 *     scales (nmax + 0.1 i, i = -9..9) under weights x^2; the sixteen scales are quantized to int8
 *     against the one of largest magnitude (which becomes -128), d = that scale / -128 stored as
 *     f16, and the codes recomputed: q = clamp(round(x / (d * sc)), -32, 31) + 32.
 * Rounding is round-half-even of the float value (llama.cpp's nearest_int), every sum is
 * accumulated in float in element order. They should give llama.cpp's bytes for ordinary input,
 * but that is not asserted: llama.cpp is usually built with floating-point contraction, which can
 * flip a tie, and neither engine needs byte equality (the files are valid either way).
 */
#include "kernels/kn_types.h"

#define KN_GROUP_EPS 1e-15f

/* round-half-even to int, saturating far outside the range any caller can use. Adding and
 * subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer in the current (nearest-
 * even) mode, as llama.cpp's nearest_int does, without a libm call (baseline x86-64 has no
 * roundss). */
static int kn_nearest_int(float f) {
    if (!(f > -4194303.0f))
        f = -4194303.0f;
    if (!(f < 4194303.0f))
        f = 4194303.0f;
    /* (f + c) - c is not an identity in IEEE arithmetic, so the compiler keeps it (no fast-math) */
    return (int)((f + 12582912.0f) - 12582912.0f);
}

static int kn_clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Weighted least-squares fit of x[0..n) ~ scale * L + min with L in 0..nmax and min <= 0 (the
 * search described at the top of the file). Writes L and *neg_min = -min; returns scale. */
static float kn_fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                              float *neg_min, float rmin, float rdelta, int nstep) {
    float mn = x[0], mx = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn)
            mn = x[i];
        if (x[i] > mx)
            mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0)
        mn = 0;
    if (mx == mn) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        *neg_min = -mn;
        return 0.0f;
    }
    float iscale = (float)nmax / (mx - mn);
    float scale = 1.0f / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)kn_clampi(kn_nearest_int(iscale * (x[i] - mn)), 0, nmax);
        float diff = scale * (float)L[i] + mn - x[i];
        best += w[i] * (diff * diff);
    }
    uint8_t Laux[KN_QK];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = kn_clampi(kn_nearest_int(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    *neg_min = -mn;
    return scale;
}

/* Signed scale for x[0..n) with codes L in 0..2*nmax-1 (value L - nmax), weights x^2 (the Q6_K
 * sub-block rule at the top of the file). */
static float kn_fit_scale_signed(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < KN_GROUP_EPS) {
        for (int i = 0; i < n; i++)
            L[i] = 0;
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = kn_clampi(kn_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = kn_clampi(kn_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + kn_clampi(kn_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* The shared Q4_K / Q5_K scale search and 6-bit packing of one super-block: fills scales[12],
 * *d, *dmin and the codes L[256] (0..nmax). */
static void kn_kquant_fit(const float *x, int nmax, float rmin, float rdelta, int nstep,
                          uint8_t scales[12], uint16_t *d16, uint16_t *dmin16, uint8_t L[KN_QK_K]) {
    float sc[8], mins[8], w[KN_QK];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        sc[j] = kn_fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, rdelta, nstep);
        if (sc[j] > max_scale)
            max_scale = sc[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        int ls = kn_clampi(kn_nearest_int(inv_scale * sc[j]), 0, 63);
        int lm = kn_clampi(kn_nearest_int(inv_min * mins[j]), 0, 63);
        if (j < 4) {
            scales[j] = (uint8_t)ls;
            scales[j + 4] = (uint8_t)lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = kn_f32_to_f16(max_scale / 63.0f);
    *dmin16 = kn_f32_to_f16(max_min / 63.0f);
    float d = kn_f16_to_f32(*d16), dmin = kn_f16_to_f32(*dmin16);
    for (int j = 0; j < 8; j++) {
        int s, m;
        kn_kquant_scale_min(scales, j, &s, &m);
        float dj = d * (float)s;
        if (dj == 0.0f)
            continue; /* keep the fit's codes, as the reference does */
        float dm = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)kn_clampi(kn_nearest_int((x[32 * j + l] + dm) / dj), 0, nmax);
    }
}

void kn_quantize_row_q4_K(const float *x, kn_block_q4_K *y, int64_t k) {
    for (int64_t i = 0; i < k / KN_QK_K; i++, x += KN_QK_K) {
        uint8_t L[KN_QK_K];
        kn_kquant_fit(x, 15, -1.0f, 0.1f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++)
                y[i].q[32 * p + l] = (uint8_t)(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
    }
}

void kn_quantize_row_q5_K(const float *x, kn_block_q5_K *y, int64_t k) {
    for (int64_t i = 0; i < k / KN_QK_K; i++, x += KN_QK_K) {
        uint8_t L[KN_QK_K];
        kn_kquant_fit(x, 31, -0.5f, 0.1f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int p = 0; p < 4; p++) {
            for (int l = 0; l < 32; l++) {
                int a = L[64 * p + l], b = L[64 * p + 32 + l];
                y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1)));
                y[i].q[32 * p + l] = (uint8_t)((a & 15) | ((b & 15) << 4));
            }
        }
    }
}

void kn_quantize_row_q6_K(const float *x, kn_block_q6_K *y, int64_t k) {
    for (int64_t i = 0; i < k / KN_QK_K; i++, x += KN_QK_K) {
        int8_t L[KN_QK_K];
        float sc[16];
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = kn_fit_scale_signed(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(sc[j]) > max_abs) {
                max_abs = fabsf(sc[j]);
                max_scale = sc[j];
            }
        }
        if (max_abs < KN_GROUP_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.0f / max_scale;
        y[i].d = kn_f32_to_f16(1.0f / iscale);
        for (int j = 0; j < 16; j++) {
            int s = kn_nearest_int(iscale * sc[j]);
            y[i].scales[j] = (int8_t)kn_clampi(s, -128, 127);
        }
        float d = kn_f16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            float dj = d * (float)y[i].scales[j];
            if (dj == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] =
                    (int8_t)(kn_clampi(kn_nearest_int(x[16 * j + l] / dj), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
                y[i].ql[64 * h + l] = (uint8_t)((q0 & 15) | ((q2 & 15) << 4));
                y[i].ql[64 * h + l + 32] = (uint8_t)((q1 & 15) | ((q3 & 15) << 4));
                y[i].qh[32 * h + l] =
                    (uint8_t)((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
            }
        }
    }
}

void kn_unpack_q4_K(const kn_block_q4_K *b, uint8_t e[KN_QK_K]) {
    for (int p = 0; p < 4; p++) {
        for (int l = 0; l < 32; l++) {
            e[64 * p + l] = b->q[32 * p + l] & 15;
            e[64 * p + 32 + l] = b->q[32 * p + l] >> 4;
        }
    }
}

void kn_unpack_q5_K(const kn_block_q5_K *b, uint8_t e[KN_QK_K]) {
    for (int p = 0; p < 4; p++) {
        for (int l = 0; l < 32; l++) {
            e[64 * p + l] = (uint8_t)((b->q[32 * p + l] & 15) | ((b->qh[l] >> (2 * p)) & 1) << 4);
            e[64 * p + 32 + l] =
                (uint8_t)((b->q[32 * p + l] >> 4) | ((b->qh[l] >> (2 * p + 1)) & 1) << 4);
        }
    }
}

void kn_unpack_q6_K(const kn_block_q6_K *b, uint8_t e[KN_QK_K]) {
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 32; l++) {
            uint8_t lo = b->ql[64 * h + l], hi = b->ql[64 * h + l + 32], qh = b->qh[32 * h + l];
            e[128 * h + l] = (uint8_t)((lo & 15) | ((qh & 3) << 4));
            e[128 * h + l + 32] = (uint8_t)((hi & 15) | (((qh >> 2) & 3) << 4));
            e[128 * h + l + 64] = (uint8_t)((lo >> 4) | (((qh >> 4) & 3) << 4));
            e[128 * h + l + 96] = (uint8_t)((hi >> 4) | (((qh >> 6) & 3) << 4));
        }
    }
}

void kn_dequantize_row_q4_K(const kn_block_q4_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / KN_QK_K; i++, y += KN_QK_K) {
        uint8_t e[KN_QK_K];
        kn_unpack_q4_K(&x[i], e);
        float d = kn_f16_to_f32(x[i].d), dmin = kn_f16_to_f32(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            int s, m;
            kn_kquant_scale_min(x[i].scales, j, &s, &m);
            float dj = d * (float)s, mj = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = dj * (float)e[32 * j + l] - mj;
        }
    }
}

void kn_dequantize_row_q5_K(const kn_block_q5_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / KN_QK_K; i++, y += KN_QK_K) {
        uint8_t e[KN_QK_K];
        kn_unpack_q5_K(&x[i], e);
        float d = kn_f16_to_f32(x[i].d), dmin = kn_f16_to_f32(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            int s, m;
            kn_kquant_scale_min(x[i].scales, j, &s, &m);
            float dj = d * (float)s, mj = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = dj * (float)e[32 * j + l] - mj;
        }
    }
}

void kn_dequantize_row_q6_K(const kn_block_q6_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / KN_QK_K; i++, y += KN_QK_K) {
        uint8_t e[KN_QK_K];
        kn_unpack_q6_K(&x[i], e);
        float d = kn_f16_to_f32(x[i].d);
        for (int l = 0; l < KN_QK_K; l++)
            y[l] = d * (float)x[i].scales[l / 16] * (float)(e[l] - 32);
    }
}
