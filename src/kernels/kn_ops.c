/* SPDX-License-Identifier: MIT */
/*
 * kn_ops: row kernels (RMSNorm, RoPE, SwiGLU, add, KV store) and attention over paged KV: the
 * scalar references and the dispatch to the SIMD versions in kn_ops_avx512.c / kn_ops_avx2.c.
 *
 * The references define the canonical operation order (kn.h): lane-16 reductions with a fixed
 * tree, kn_expf, and for attention an online softmax over position chunks whose boundaries are
 * multiples of `chunk` in absolute position. The SIMD versions perform the same IEEE operations
 * in the same order and are tested against these with memcmp. kn_attn_rows (the query heads of
 * one KV head) is kn_attn_row per head here; AVX-512 and AVX2 run the heads as a group
 * (kn_ops_avx512.c, kn_ops_avx2.c) with each head's operations unchanged.
 */
#include "kernels/kn_int.h"

static float kn_lane16_tree(float acc[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] = acc[j] + acc[j + w];
    return acc[0];
}

float kn_sumsq_ref(const float *x, int64_t n) {
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i++)
        acc[i & 15] = fmaf(x[i], x[i], acc[i & 15]);
    return kn_lane16_tree(acc);
}

float kn_dot_ref(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i++)
        acc[i & 15] = fmaf(a[i], b[i], acc[i & 15]);
    return kn_lane16_tree(acc);
}

float kn_dot(const float *a, const float *b, int64_t n, kn_isa isa) {
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX2 || isa == KN_ISA_AVX512) /* AVX-512 machines run the AVX2 kernel */
        return kn_dot_avx2(a, b, n);
#endif
    return kn_dot_ref(a, b, n);
}

void kn_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y, kn_isa isa) {
    float ss;
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX512)
        ss = kn_sumsq_avx512(x, n);
    else if (isa == KN_ISA_AVX2)
        ss = kn_sumsq_avx2(x, n);
    else
#endif
        ss = kn_sumsq_ref(x, n);
    float r = 1.0f / sqrtf(ss / (float)n + eps);
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX512) {
        kn_scale_mul_avx512(x, r, w, n, y);
        return;
    }
    if (isa == KN_ISA_AVX2) {
        kn_scale_mul_avx2(x, r, w, n, y);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] = w ? (x[i] * r) * w[i] : x[i] * r;
}

void kn_rope(float *x, int64_t n_rot, const float *cs, bool neox) {
    int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        int64_t i0 = neox ? i : 2 * i;
        int64_t i1 = neox ? i + half : 2 * i + 1;
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x0 = x[i0], x1 = x[i1];
        float a = x0 * c, b = x1 * s;
        float e = x0 * s, f = x1 * c;
        x[i0] = a - b;
        x[i1] = e + f;
    }
}

void kn_swiglu(const float *g, const float *u, int64_t n, float *h, kn_isa isa) {
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX512) {
        kn_swiglu_avx512(g, u, n, h);
        return;
    }
    if (isa == KN_ISA_AVX2) {
        kn_swiglu_avx2(g, u, n, h);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        float e = kn_expf(-g[i]);
        float s = g[i] / (1.0f + e);
        h[i] = s * u[i];
    }
}

void kn_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] + x[i];
}

void kn_store_kv(void *dst, const float *src, int64_t n, bool f16, kn_isa isa) {
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX512) {
        kn_store_kv_avx512(dst, src, n, f16);
        return;
    }
    if (isa == KN_ISA_AVX2) {
        kn_store_kv_avx2(dst, src, n, f16);
        return;
    }
#endif
    if (f16) {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = kn_f32_to_f16(src[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* Reads position p's row for kv head kvh as floats into out[0..hd). */
static void kn_attn_load(const kn_attn_kv *kv, const void *base, int64_t p, int64_t kvh, int64_t hd,
                         float *out) {
    const void *r = kn_attn_row_ptr(kv, base, p, kvh, hd);
    if (kv->f16) {
        for (int64_t d = 0; d < hd; d++)
            out[d] = kn_f16_to_f32(((const uint16_t *)r)[d]);
    } else {
        memcpy(out, r, (size_t)hd * sizeof(float));
    }
}

static void kn_attn_row_ref(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t hd,
                            int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out) {
    float kbuf[KN_ATTN_HEAD_MAX], vbuf[KN_ATTN_HEAD_MAX]; /* the model loaders check head_dim */
    float m = -INFINITY, l = 0.0f;
    for (int64_t d = 0; d < hd; d++)
        out[d] = 0.0f;
    int64_t start = kv->window > 0 && n_pos > kv->window ? n_pos - kv->window : 0;
    for (int64_t cb = start - start % chunk; cb < n_pos; cb += chunk) {
        int64_t c0 = cb < start ? start : cb;
        int64_t c1 = cb + chunk < n_pos ? cb + chunk : n_pos;
        float mc = -INFINITY;
        for (int64_t p = c0; p < c1; p++) {
            kn_attn_load(kv, kv->k_base, p, kvh, hd, kbuf);
            float s = kn_dot_ref(q, kbuf, hd) * scale;
            scratch[p - c0] = s;
            mc = kn_maxf(mc, s);
        }
        float mn = kn_maxf(m, mc);
        float alpha = kn_expf(m - mn);
        l = l * alpha;
        for (int64_t d = 0; d < hd; d++)
            out[d] = out[d] * alpha;
        for (int64_t p = c0; p < c1; p++) {
            float pj = kn_expf(scratch[p - c0] - mn);
            l = l + pj;
            kn_attn_load(kv, kv->v_base, p, kvh, hd, vbuf);
            for (int64_t d = 0; d < hd; d++)
                out[d] = fmaf(pj, vbuf[d], out[d]);
        }
        m = mn;
    }
    for (int64_t d = 0; d < hd; d++)
        out[d] = out[d] / l;
}

void kn_attn_row(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim, int64_t n_pos,
                 float scale, int64_t chunk, float *scratch, float *out, kn_isa isa) {
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX512) {
        kn_attn_row_avx512(q, kv, kvh, head_dim, n_pos, scale, chunk, scratch, out);
        return;
    }
    if (isa == KN_ISA_AVX2) {
        kn_attn_row_avx2(q, kv, kvh, head_dim, n_pos, scale, chunk, scratch, out);
        return;
    }
#endif
    kn_attn_row_ref(q, kv, kvh, head_dim, n_pos, scale, chunk, scratch, out);
}

size_t kn_attn_scratch_floats(int64_t g, int64_t head_dim, int64_t chunk) {
    /* AVX-512 and AVX2 grouped kernels: the chunk's keys (then, for AVX2, values) as f32 rows,
     * g rows of scores and (AVX-512) the value rows' addresses, the chunk rounded up to 16 */
    size_t cp = (size_t)(chunk + 15) & ~(size_t)15;
    return cp * ((size_t)head_dim + (size_t)g + 2);
}

void kn_attn_rows(const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim,
                  int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out,
                  kn_isa isa) {
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX512) {
        for (int64_t h = 0; h < g; h += KN_ATTN_GROUP_MAX) /* one piece unless g is too many */
            kn_attn_rows_avx512(q + h * head_dim,
                                g - h < KN_ATTN_GROUP_MAX ? g - h : KN_ATTN_GROUP_MAX, kv, kvh,
                                head_dim, n_pos, scale, chunk, scratch, out + h * head_dim);
        return;
    }
    if (isa == KN_ISA_AVX2) {
        for (int64_t h = 0; h < g; h += KN_ATTN_GROUP_MAX)
            kn_attn_rows_avx2(q + h * head_dim,
                              g - h < KN_ATTN_GROUP_MAX ? g - h : KN_ATTN_GROUP_MAX, kv, kvh,
                              head_dim, n_pos, scale, chunk, scratch, out + h * head_dim);
        return;
    }
#endif
    for (int64_t h = 0; h < g; h++)
        kn_attn_row(q + h * head_dim, kv, kvh, head_dim, n_pos, scale, chunk, scratch,
                    out + h * head_dim, isa);
}
