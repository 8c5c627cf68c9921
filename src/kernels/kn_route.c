/* SPDX-License-Identifier: MIT */
/*
 * kn_route: the mixture-of-experts routers (kn.h): gate functions, group limiting, top-k, the
 * weights of the selected experts, and hash routing by token id.
 *
 * These are scalar code only, and they are their own reference: a router row is n_expert values
 * (8 to 384 in the models we know), next to which the expert matmuls it selects cost thousands of
 * times more. Every function reads and writes one token's row and nothing else, so a token's
 * routing is the same whatever else is in the batch (P1); the order of every sum is fixed here
 * (index order, or rank order for the selected weights).
 *
 * The operation order follows llama.cpp's build_moe_ffn, the reference the model files are
 * checked against: gate, + selection bias, group mask, top-k, gather the unbiased gate values,
 * (softmax of them for SOFTMAX_WEIGHT), divide by their sum clamped at the smallest normal F16,
 * scale.
 */
#include "kernels/kn_int.h"

static void kn_route_softmax(const float *x, int64_t n, float *p) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        p[i] = kn_expf(x[i] - m);
        s = s + p[i];
    }
    float inv = 1.0f / s;
    for (int64_t i = 0; i < n; i++)
        p[i] = p[i] * inv;
}

void kn_route_gate(kn_gating g, const float *logits, int64_t n, float *p) {
    switch (g) {
    case KN_GATING_SOFTMAX:
        kn_route_softmax(logits, n, p);
        return;
    case KN_GATING_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            p[i] = 1.0f / (1.0f + kn_expf(-logits[i]));
        return;
    case KN_GATING_SQRT_SOFTPLUS:
        for (int64_t i = 0; i < n; i++) {
            float x = logits[i];
            p[i] = sqrtf(x > 20.0f ? x : log1pf(kn_expf(x)));
        }
        return;
    case KN_GATING_NONE:
    case KN_GATING_SOFTMAX_WEIGHT:
        break;
    }
    if (p != logits)
        memmove(p, logits, (size_t)n * sizeof(float));
}

/* True if a ranks above b (a at index ia, b at ib): larger first, NaN last, lower index first
 * among equals (and among NaNs). */
static bool kn_route_above(float a, int64_t ia, float b, int64_t ib) {
    bool na = a != a, nb = b != b;
    if (na || nb)
        return na == nb ? ia < ib : nb;
    return a > b || (a == b && ia < ib);
}

void kn_route_topk(const float *s, int64_t n, int64_t k, int32_t *sel) {
    /* insertion into a sorted list of k: O(n k), and k is small (2 to 16) */
    int64_t have = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t pos = have;
        while (pos > 0 && kn_route_above(s[i], i, s[sel[pos - 1]], sel[pos - 1]))
            pos--;
        if (pos >= k)
            continue;
        int64_t end = have < k ? have : k - 1;
        for (int64_t j = end; j > pos; j--)
            sel[j] = sel[j - 1];
        sel[pos] = (int32_t)i;
        if (have < k)
            have++;
    }
}

void kn_route_group_mask(float *s, int64_t n, int64_t n_group, int64_t n_group_used) {
    if (n_group <= 1 || n_group_used >= n_group)
        return;
    enum { MAX_GROUPS = 64 };
    float score[MAX_GROUPS];
    int32_t keep[MAX_GROUPS];
    int64_t per = n / n_group;
    if (n_group > MAX_GROUPS || per < 1)
        return; /* the loader refuses such files */
    for (int64_t g = 0; g < n_group; g++) {
        int32_t top[2];
        int64_t nt = per < 2 ? per : 2;
        kn_route_topk(s + g * per, per, nt, top);
        score[g] = nt == 2 ? s[g * per + top[0]] + s[g * per + top[1]] : s[g * per + top[0]];
    }
    kn_route_topk(score, n_group, n_group_used, keep);
    for (int64_t g = 0; g < n_group; g++) {
        bool kept = false;
        for (int64_t j = 0; j < n_group_used; j++)
            kept = kept || keep[j] == g;
        if (!kept)
            for (int64_t e = 0; e < per; e++)
                s[g * per + e] = -INFINITY;
    }
}

void kn_route_weights(const kn_router *r, const float *p, const int32_t *sel, float *w) {
    int64_t k = r->n_used;
    for (int64_t j = 0; j < k; j++)
        w[j] = p[sel[j]];
    if (r->gating == KN_GATING_SOFTMAX_WEIGHT)
        kn_route_softmax(w, k, w);
    if (r->norm) {
        float s = 0.0f;
        for (int64_t j = 0; j < k; j++)
            s = s + w[j];
        if (!(s >= KN_ROUTE_SUM_MIN))
            s = KN_ROUTE_SUM_MIN; /* a NaN sum too */
        for (int64_t j = 0; j < k; j++)
            w[j] = w[j] / s;
    }
    if (r->scale != 0.0f && r->scale != 1.0f)
        for (int64_t j = 0; j < k; j++)
            w[j] = w[j] * r->scale;
}

void kn_route(const kn_router *r, const float *logits, float *scratch, int32_t *sel, float *w) {
    int64_t n = r->n_expert;
    float *p = scratch, *s = scratch + n;
    kn_route_gate(r->gating, logits, n, p);
    for (int64_t e = 0; e < n; e++)
        s[e] = r->bias ? p[e] + r->bias[e] : p[e];
    kn_route_group_mask(s, n, r->n_group, r->n_group_used);
    kn_route_topk(s, n, r->n_used, sel);
    kn_route_weights(r, p, sel, w);
}

bool kn_route_hash(const int32_t *table, int64_t k, int64_t n_expert, int32_t token, int32_t *sel) {
    const int32_t *row = table + (int64_t)token * k;
    for (int64_t j = 0; j < k; j++)
        if (row[j] < 0 || row[j] >= n_expert)
            return false;
    memcpy(sel, row, (size_t)k * sizeof(int32_t));
    return true;
}
