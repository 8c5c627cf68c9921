/* SPDX-License-Identifier: MIT */
/*
 * kn_index: the kernels of DeepSeek sparse attention (DSA, kn.h): the index keys' element types
 * (f32, f16, bf16, fp8 e4m3 with a scale per key row), LayerNorm, the lightning indexer's score,
 * the top-k selection of key positions, and MLA attention over a selected set of positions.
 *
 * Scalar code, each function its own reference; the indexer's score, n_head dot products per
 * (query, key) over every cached position, the one part whose work grows with the context, has
 * an AVX2 version (kn_index_avx2.c) checked against it with memcmp. Every function reads one
 * query's (or one key's) data and the cache, in an order fixed by absolute positions, so a
 * token's selection and attention never depend on the batch, the chunking or the thread (P1).
 *
 * FP8: each key row (one position of one layer) is one quantization block with its own f32
 * scale, amax / 448, stored before the row's codes; a scale shared by all the positions of a
 * KV block would move as later positions arrive, and the keys a query reads would then depend on
 * how its prompt was chunked. Codes are e4m3 ("fn": no infinities, 448 the largest), rounded to
 * nearest-even, saturating.
 */
#include "kernels/kn_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kn_ik_names[] = {"ik-f32", "ik-f16", "ik-bf16", "ik-fp8"};

kn_ik_type kn_ik_type_parse(const char *value, bool kv_f16) {
    static const char *const names[] = {"f32", "f16", "bf16", "fp8"};
    for (int t = 0; t < 4; t++)
        if (strcmp(value, names[t]) == 0)
            return (kn_ik_type)t;
    return kv_f16 ? KN_IK_F16 : KN_IK_F32;
}

const char *kn_ik_name(kn_ik_type t) {
    return kn_ik_names[t];
}

int kn_ik_type_from_name(const char *name) {
    for (int t = 0; t < 4; t++)
        if (name && strcmp(name, kn_ik_names[t]) == 0)
            return t;
    return -1;
}

size_t kn_ik_row_bytes(kn_ik_type t, int64_t d) {
    switch (t) {
    case KN_IK_F32:
        return 4 * (size_t)d;
    case KN_IK_F16:
    case KN_IK_BF16:
        return 2 * (size_t)d;
    case KN_IK_FP8:
        return 4 + (size_t)d;
    }
    return 0;
}

uint8_t kn_f32_to_e4m3(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(x))
        return 0x7f;
    if (a < 0.015625f) { /* below 2^-6: subnormal codes m * 2^-9, m = 0..8 (8 is 2^-6) */
        float m = nearbyintf(a * 512.0f);
        return (uint8_t)(sign | (uint8_t)m);
    }
    int e;
    frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): the exponent of a is e - 1 */
    e -= 1;
    float q = nearbyintf((ldexpf(a, -e) - 1.0f) * 8.0f);
    if (q == 8.0f)
        q = 0.0f, e += 1;
    int biased = e + 7;
    if (biased > 15 || (biased == 15 && q == 7.0f))
        return (uint8_t)(sign | 0x7e); /* saturate at 448 */
    return (uint8_t)(sign | (uint8_t)(biased << 3) | (uint8_t)q);
}

float kn_e4m3_to_f32(uint8_t b) {
    int exp = (b >> 3) & 15, man = b & 7;
    float v;
    if (exp == 15 && man == 7)
        v = NAN;
    else if (exp == 0)
        v = ldexpf((float)man, -9);
    else
        v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return (b & 0x80) ? -v : v;
}

void kn_ik_store(void *dst, const float *k, int64_t d, kn_ik_type t) {
    switch (t) {
    case KN_IK_F32:
        memcpy(dst, k, (size_t)d * sizeof(float));
        return;
    case KN_IK_F16:
        for (int64_t i = 0; i < d; i++)
            ((uint16_t *)dst)[i] = kn_f32_to_f16(k[i]);
        return;
    case KN_IK_BF16:
        for (int64_t i = 0; i < d; i++)
            ((uint16_t *)dst)[i] = kn_f32_to_bf16(k[i]);
        return;
    case KN_IK_FP8: {
        float amax = 0.0f;
        for (int64_t i = 0; i < d; i++)
            amax = kn_maxf(amax, fabsf(k[i]));
        float s = amax > 0.0f ? amax / 448.0f : 1.0f;
        memcpy(dst, &s, sizeof s);
        uint8_t *q = (uint8_t *)dst + 4;
        for (int64_t i = 0; i < d; i++)
            q[i] = kn_f32_to_e4m3(k[i] / s);
        return;
    }
    }
}

void kn_ik_load(const void *src, int64_t d, kn_ik_type t, float *out) {
    switch (t) {
    case KN_IK_F32:
        memcpy(out, src, (size_t)d * sizeof(float));
        return;
    case KN_IK_F16:
        for (int64_t i = 0; i < d; i++)
            out[i] = kn_f16_to_f32(((const uint16_t *)src)[i]);
        return;
    case KN_IK_BF16:
        for (int64_t i = 0; i < d; i++)
            out[i] = kn_bf16_to_f32(((const uint16_t *)src)[i]);
        return;
    case KN_IK_FP8: {
        float s;
        memcpy(&s, src, sizeof s);
        const uint8_t *q = (const uint8_t *)src + 4;
        for (int64_t i = 0; i < d; i++)
            out[i] = kn_e4m3_to_f32(q[i]) * s;
        return;
    }
    }
}

void kn_layernorm(const float *x, const float *w, const float *b, float eps, int64_t n, float *y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i];
    float mean = (float)(sum / (double)n);
    double sum2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] - mean;
        sum2 += (double)(v * v);
    }
    float scale = 1.0f / sqrtf((float)(sum2 / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * scale;
        y[i] = (w ? v * w[i] : v) + (b ? b[i] : 0.0f);
    }
}

float kn_index_score(const float *q, const float *w, int64_t n_head, int64_t d, const float *k,
                     kn_isa isa) {
#ifndef VERITY_NO_SIMD
    if (isa == KN_ISA_AVX2 || isa == KN_ISA_AVX512) /* AVX-512 machines run the AVX2 kernel */
        return kn_index_score_avx2(q, w, n_head, d, k);
#endif
    float s = 0.0f;
    for (int64_t h = 0; h < n_head; h++) {
        float dot = kn_dot_ref(q + h * d, k, d);
        if (dot > 0.0f)
            s = fmaf(w[h], dot, s);
    }
    return s;
}

/* Heap order: a is worse than b (lower score, or an equal score at a later position). */
static bool kn_topk_worse(const kn_topk_item *a, const kn_topk_item *b) {
    return a->score < b->score || (a->score == b->score && a->pos > b->pos);
}

static void kn_topk_sift_down(kn_topk_item *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && kn_topk_worse(&h[l], &h[m]))
            m = l;
        if (r < n && kn_topk_worse(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        kn_topk_item t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

void kn_topk_push(kn_topk_item *heap, int64_t *n, int64_t k, float score, int32_t pos) {
    if (score != score) /* NaN ranks below every number: never selected over one */
        score = -INFINITY;
    kn_topk_item it = {score, pos};
    if (*n < k) {
        int64_t i = (*n)++;
        heap[i] = it;
        while (i > 0 && kn_topk_worse(&heap[i], &heap[(i - 1) / 2])) {
            kn_topk_item t = heap[i];
            heap[i] = heap[(i - 1) / 2];
            heap[(i - 1) / 2] = t;
            i = (i - 1) / 2;
        }
        return;
    }
    if (kn_topk_worse(&heap[0], &it)) {
        heap[0] = it;
        kn_topk_sift_down(heap, *n, 0);
    }
}

static int kn_cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void kn_topk_positions(const kn_topk_item *heap, int64_t n, int32_t *pos) {
    for (int64_t i = 0; i < n; i++)
        pos[i] = heap[i].pos;
    qsort(pos, (size_t)n, sizeof *pos, kn_cmp_i32);
}

void kn_attn_sparse_row(const float *q, const kn_attn_kv *kv, int64_t head_dim, const int32_t *pos,
                        int64_t n, float scale, float *scores, float *out, kn_isa isa) {
    float kbuf[KN_ATTN_HEAD_MAX], qbuf[KN_ATTN_HEAD_MAX];
    if (kv->f16) { /* F16 keys: the query rounded to F16 too, the reference's KQ product */
        for (int64_t d = 0; d < head_dim; d++)
            qbuf[d] = kn_f16_to_f32(kn_f32_to_f16(q[d]));
        q = qbuf;
    }
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const void *r = kn_attn_row_ptr(kv, kv->k_base, pos[i], 0, head_dim);
        const float *k = r;
        if (kv->f16) {
#ifndef VERITY_NO_SIMD
            if (isa == KN_ISA_AVX2 || isa == KN_ISA_AVX512)
                kn_f16_widen_avx2(r, kbuf, head_dim);
            else
#endif
                for (int64_t d = 0; d < head_dim; d++)
                    kbuf[d] = kn_f16_to_f32(((const uint16_t *)r)[d]);
            k = kbuf;
        }
        scores[i] = kn_dot(q, k, head_dim, isa) * scale;
        m = kn_maxf(m, scores[i]);
    }
    float l = 0.0f;
    for (int64_t d = 0; d < head_dim; d++)
        out[d] = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float p = kn_expf(scores[i] - m);
        l = l + p;
        const void *r = kn_attn_row_ptr(kv, kv->v_base, pos[i], 0, head_dim);
#ifndef VERITY_NO_SIMD
        if (isa == KN_ISA_AVX2 || isa == KN_ISA_AVX512) {
            kn_sparse_acc_avx2(out, p, r, kv->f16, head_dim);
            continue;
        }
#endif
        for (int64_t d = 0; d < head_dim; d++) {
            float v = kv->f16 ? kn_f16_to_f32(((const uint16_t *)r)[d]) : ((const float *)r)[d];
            out[d] = fmaf(p, v, out[d]);
        }
    }
    for (int64_t d = 0; d < head_dim; d++)
        out[d] = out[d] / l;
}
