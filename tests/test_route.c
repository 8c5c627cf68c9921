/* SPDX-License-Identifier: MIT */
/*
 * Router tests (kernels/kn_route.c): each gate function against a float64 reference and known
 * values; top-k against a brute-force sort (ties to the lower index, NaN last); group limiting on
 * a worked DeepSeek-V3-style example and against a float64 reference; the weight normalisation's
 * clamp and the scale rule; the selection bias choosing experts without weighting them; kn_route
 * equal (memcmp) to its parts composed; hash routing; and whole routings of random rows against a
 * float64 router (same experts, weights within float rounding).
 */
#include "test.h"
#include "kernels/kn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rnd64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rndf(float scale) { /* uniform in [-scale, scale) */
    return (float)(((double)(rnd64() >> 11) / 9007199254740992.0 * 2.0 - 1.0) * scale);
}

static double gate_ref(kn_gating g, double x) {
    switch (g) {
    case KN_GATING_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case KN_GATING_SQRT_SOFTPLUS:
        return sqrt(x > 20.0 ? x : log1p(exp(x)));
    default:
        return x;
    }
}

static void t_gate(void) {
    enum { N = 37 };
    float l[N], p[N];
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < N; i++)
            l[i] = rndf(rep < 25 ? 4.0f : 40.0f);
        /* softmax: against float64, and it sums to 1 */
        kn_route_gate(KN_GATING_SOFTMAX, l, N, p);
        /* the float difference l - max is the kernel's argument to exp, rounded; the
         * reference starts from it too (else |l - max| up to 80 costs 80 * 2^-24 relative) */
        float m = -INFINITY;
        double s = 0;
        for (int i = 0; i < N; i++)
            m = l[i] > m ? l[i] : m;
        for (int i = 0; i < N; i++)
            s += exp((double)(l[i] - m));
        double sum = 0;
        for (int i = 0; i < N; i++) {
            double want = exp((double)(l[i] - m)) / s;
            T_CHECKF(fabs(p[i] - want) <= 1e-6 * want + 1e-30, "softmax[%d] %.9g vs %.9g", i, p[i],
                     want);
            sum += p[i];
        }
        T_CHECK(fabs(sum - 1.0) < 1e-5);
        const kn_gating gs[] = {KN_GATING_SIGMOID, KN_GATING_SQRT_SOFTPLUS};
        for (int gi = 0; gi < 2; gi++) {
            kn_route_gate(gs[gi], l, N, p);
            for (int i = 0; i < N; i++) {
                double want = gate_ref(gs[gi], l[i]);
                T_CHECKF(fabs(p[i] - want) <= 2e-6 * fabs(want) + 1e-30,
                         "gating %d: x %.9g: %.9g vs %.9g", (int)gs[gi], l[i], p[i], want);
            }
        }
    }
    /* known values; softmax-weight and none pass the logits through; in place works */
    float x[4] = {0.0f, 30.0f, -30.0f, 20.0f};
    kn_route_gate(KN_GATING_SIGMOID, x, 1, p);
    T_CHECK(p[0] == 0.5f);
    kn_route_gate(KN_GATING_SQRT_SOFTPLUS, x, 4, p);
    T_CHECK(fabsf(p[0] - sqrtf(logf(2.0f))) < 1e-7f);
    T_CHECK(p[1] == sqrtf(30.0f)); /* above 20 softplus is the identity */
    T_CHECK(p[2] > 0.0f && p[2] < 1e-6f);
    T_CHECK(p[3] == sqrtf(log1pf(kn_expf(20.0f))));
    kn_route_gate(KN_GATING_SOFTMAX_WEIGHT, x, 4, p);
    T_CHECK(memcmp(p, x, sizeof x) == 0);
    float y[3] = {1.0f, 1.0f, 1.0f};
    kn_route_gate(KN_GATING_SOFTMAX, y, 3, y);
    T_CHECK(y[0] == y[1] && y[1] == y[2] && fabsf(y[0] - 1.0f / 3.0f) < 1e-7f);
}

/* a ranks above b: larger, NaN last, lower index among equals */
static bool ref_above(float a, int ia, float b, int ib) {
    if (isnan(a) || isnan(b))
        return isnan(a) == isnan(b) ? ia < ib : isnan(b);
    return a > b || (a == b && ia < ib);
}

static void ref_topk(const float *s, int n, int k, int32_t *sel) {
    int idx[512];
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int i = 0; i < n; i++) /* selection sort by the ranking */
        for (int j = i + 1; j < n; j++)
            if (ref_above(s[idx[j]], idx[j], s[idx[i]], idx[i])) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    for (int i = 0; i < k; i++)
        sel[i] = idx[i];
}

static void t_topk(void) {
    float s[8] = {0.5f, 2.0f, NAN, 2.0f, -INFINITY, 7.0f, 0.5f, NAN};
    int32_t sel[8];
    kn_route_topk(s, 8, 8, sel);
    const int32_t want[8] = {5, 1, 3, 0, 6, 4, 2, 7};
    T_CHECK(memcmp(sel, want, sizeof want) == 0);
    kn_route_topk(s, 8, 3, sel);
    T_CHECK(sel[0] == 5 && sel[1] == 1 && sel[2] == 3);
    kn_route_topk(s, 8, 1, sel);
    T_CHECK(sel[0] == 5);
    /* random rows with many ties (values from a small set) against the brute-force order */
    for (int rep = 0; rep < 300; rep++) {
        int n = 1 + (int)(rnd64() % 300), k = 1 + (int)(rnd64() % (uint64_t)(n < 20 ? n : 20));
        float v[300];
        for (int i = 0; i < n; i++) {
            uint64_t r = rnd64() % 10;
            v[i] = r == 0 ? NAN : r == 1 ? -INFINITY : (float)(rnd64() % 7);
        }
        int32_t a[20], b[20];
        kn_route_topk(v, n, k, a);
        ref_topk(v, n, k, b);
        T_CHECKF(memcmp(a, b, (size_t)k * 4) == 0, "n %d k %d: first %d vs %d", n, k, a[0], b[0]);
    }
}

static void t_group_mask(void) {
    /* 8 experts in 4 groups of 2; group scores (sum of the top two) 0.3, 1.1, 0.9, 1.0: keep the
     * best 2 groups (1 and 3), mask the others */
    float s[8] = {0.1f, 0.2f, 0.6f, 0.5f, 0.4f, 0.5f, 0.9f, 0.1f};
    kn_route_group_mask(s, 8, 4, 2);
    const float inf = INFINITY;
    float want[8] = {-inf, -inf, 0.6f, 0.5f, -inf, -inf, 0.9f, 0.1f};
    T_CHECK(memcmp(s, want, sizeof s) == 0);
    /* a group's score is its top two, not its sum: 3 experts per group */
    float t[6] = {1.0f, 1.0f, -5.0f, 0.9f, 0.9f, 0.9f}; /* scores 2.0 vs 1.8 */
    kn_route_group_mask(t, 6, 2, 1);
    T_CHECK(t[0] == 1.0f && t[2] == -5.0f && t[3] == -inf && t[5] == -inf);
    /* no-ops: one group, or every group used */
    float u[4] = {1, 2, 3, 4}, u0[4] = {1, 2, 3, 4};
    kn_route_group_mask(u, 4, 1, 1);
    kn_route_group_mask(u, 4, 2, 2);
    T_CHECK(memcmp(u, u0, sizeof u) == 0);
}

static void t_weights(void) {
    float p[6] = {0.1f, 0.2f, 0.3f, 0.4f, 1e-6f, 2e-6f};
    int32_t sel[3] = {3, 1, 0};
    float w[3];
    kn_router r = {.n_expert = 6, .n_used = 3, .gating = KN_GATING_SOFTMAX, .norm = false};
    kn_route_weights(&r, p, sel, w);
    T_CHECK(w[0] == 0.4f && w[1] == 0.2f && w[2] == 0.1f);
    r.norm = true; /* divided by the sum, summed in rank order */
    kn_route_weights(&r, p, sel, w);
    float sum = (0.4f + 0.2f) + 0.1f;
    T_CHECK(w[0] == 0.4f / sum && w[1] == 0.2f / sum && w[2] == 0.1f / sum);
    r.scale = 2.5f;
    kn_route_weights(&r, p, sel, w);
    T_CHECK(w[0] == (0.4f / sum) * 2.5f && w[2] == (0.1f / sum) * 2.5f);
    r.scale = 1.0f; /* 1 and 0 do not scale */
    kn_route_weights(&r, p, sel, w);
    T_CHECK(w[0] == 0.4f / sum);
    r.scale = 0.0f;
    kn_route_weights(&r, p, sel, w);
    T_CHECK(w[0] == 0.4f / sum);
    /* a sum below the smallest normal F16 is clamped to it */
    int32_t tiny[2] = {5, 4};
    r.n_used = 2;
    kn_route_weights(&r, p, tiny, w);
    T_CHECK(w[0] == 2e-6f / KN_ROUTE_SUM_MIN && w[1] == 1e-6f / KN_ROUTE_SUM_MIN);
    T_CHECK(KN_ROUTE_SUM_MIN == 6.103515625e-5f);
    /* softmax-weight: the k selected logits softmaxed, then normalised (a no-op up to rounding) */
    float l[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    int32_t s2[2] = {1, 2};
    kn_router rw = {.n_expert = 4, .n_used = 2, .gating = KN_GATING_SOFTMAX_WEIGHT};
    kn_route_weights(&rw, l, s2, w);
    double e = exp(-1.0);
    T_CHECK(fabs(w[0] - 1.0 / (1.0 + e)) < 1e-7 && fabs(w[1] - e / (1.0 + e)) < 1e-7);
}

/* The selection bias picks experts; their weights are the unbiased gate values. */
static void t_bias(void) {
    float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f}, bias[4] = {0.0f, 0.0f, 0.0f, 5.0f};
    kn_router r = {.n_expert = 4,
                   .n_used = 2,
                   .gating = KN_GATING_SIGMOID,
                   .bias = bias,
                   .norm = true,
                   .scale = 2.5f};
    float scratch[8], w[2];
    int32_t sel[2];
    kn_route(&r, logits, scratch, sel, w);
    T_CHECK(sel[0] == 3 && sel[1] == 0);
    float p3 = 1.0f / (1.0f + kn_expf(1.0f)), p0 = 1.0f / (1.0f + kn_expf(-2.0f));
    float s = p3 + p0;
    T_CHECK(w[0] == (p3 / s) * 2.5f && w[1] == (p0 / s) * 2.5f);
}

/* kn_route is its parts composed (memcmp), for every gating, with and without bias and groups. */
static void t_route_composed(void) {
    enum { E = 64 };
    for (int rep = 0; rep < 200; rep++) {
        float logits[E], bias[E];
        for (int i = 0; i < E; i++) {
            logits[i] = rndf(3.0f);
            bias[i] = rndf(0.5f);
        }
        kn_router r = {.n_expert = E,
                       .n_used = 1 + (int64_t)(rnd64() % 8),
                       .gating = (kn_gating)(1 + rep % 4),
                       .bias = rep % 3 ? bias : NULL,
                       .n_group = rep % 2 ? 8 : 0,
                       .n_group_used = 3,
                       .norm = rep % 5 != 0,
                       .scale = rep % 7 ? 1.0f : 2.5f};
        float scratch[2 * E], w1[8], w2[8], p[E], s[E];
        int32_t sel1[8], sel2[8];
        kn_route(&r, logits, scratch, sel1, w1);
        kn_route_gate(r.gating, logits, E, p);
        for (int i = 0; i < E; i++)
            s[i] = r.bias ? p[i] + r.bias[i] : p[i];
        kn_route_group_mask(s, E, r.n_group, r.n_group_used);
        kn_route_topk(s, E, r.n_used, sel2);
        kn_route_weights(&r, p, sel2, w2);
        T_CHECK(memcmp(sel1, sel2, (size_t)r.n_used * 4) == 0);
        T_CHECK(memcmp(w1, w2, (size_t)r.n_used * 4) == 0);
    }
}

/* Whole routings against a float64 router: the same experts (rows with a near tie at the cut
 * are skipped), weights within float rounding. */
static void t_route_vs_f64(void) {
    enum { E = 32 };
    int checked = 0;
    for (int rep = 0; rep < 400; rep++) {
        float logits[E], bias[E];
        for (int i = 0; i < E; i++) {
            logits[i] = rndf(4.0f);
            bias[i] = rndf(0.3f);
        }
        kn_router r = {.n_expert = E,
                       .n_used = 1 + (int64_t)(rnd64() % 6),
                       .gating = (kn_gating)(1 + rep % 4),
                       .bias = rep % 2 ? bias : NULL,
                       .n_group = rep % 3 ? 4 : 0,
                       .n_group_used = 2,
                       .norm = rep % 4 != 0,
                       .scale = rep % 5 ? 0.0f : 2.5f};
        double p[E], s[E];
        double m = -INFINITY, den = 0;
        for (int i = 0; i < E; i++)
            m = logits[i] > m ? logits[i] : m;
        for (int i = 0; i < E; i++)
            den += exp(logits[i] - m);
        for (int i = 0; i < E; i++) {
            p[i] = r.gating == KN_GATING_SOFTMAX ? exp(logits[i] - m) / den
                                                 : gate_ref(r.gating, logits[i]);
            s[i] = r.bias ? p[i] + r.bias[i] : p[i];
        }
        if (r.n_group > 1) { /* groups of 8, keep the 2 with the largest top-two sums */
            double gs[4];
            for (int g = 0; g < 4; g++) {
                double a = -INFINITY, b = -INFINITY;
                for (int e = 0; e < 8; e++) {
                    double v = s[g * 8 + e];
                    if (v > a) {
                        b = a;
                        a = v;
                    } else if (v > b) {
                        b = v;
                    }
                }
                gs[g] = a + b;
            }
            for (int drop = 0; drop < 2; drop++) {
                int lo = -1;
                for (int g = 0; g < 4; g++)
                    if (gs[g] > -INFINITY && (lo < 0 || gs[g] < gs[lo]))
                        lo = g;
                gs[lo] = -INFINITY;
                for (int e = 0; e < 8; e++)
                    s[lo * 8 + e] = -INFINITY;
            }
        }
        int32_t want[8];
        double w[8], sum = 0;
        bool near_tie = false;
        for (int j = 0; j <= r.n_used && j < E; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int q = 0; q < j; q++)
                    taken = taken || want[q] == e;
                if (!taken && (best < 0 || s[e] > s[best]))
                    best = e;
            }
            if (j == r.n_used) { /* the first one left out */
                near_tie = s[want[j - 1]] - s[best] < 1e-5;
                break;
            }
            want[j] = best;
        }
        if (near_tie)
            continue;
        for (int j = 0; j < r.n_used; j++)
            w[j] = p[want[j]];
        if (r.gating == KN_GATING_SOFTMAX_WEIGHT) {
            double mm = -INFINITY, d = 0;
            for (int j = 0; j < r.n_used; j++)
                mm = w[j] > mm ? w[j] : mm;
            for (int j = 0; j < r.n_used; j++)
                d += exp(w[j] - mm);
            for (int j = 0; j < r.n_used; j++)
                w[j] = exp(w[j] - mm) / d;
        }
        for (int j = 0; j < r.n_used; j++)
            sum += w[j];
        float scratch[2 * E], got[8];
        int32_t sel[8];
        kn_route(&r, logits, scratch, sel, got);
        T_CHECKF(memcmp(sel, want, (size_t)r.n_used * 4) == 0, "rep %d: expert %d vs %d", rep,
                 sel[0], want[0]);
        for (int j = 0; j < r.n_used; j++) {
            double x = r.norm ? w[j] / (sum > 6.103515625e-5 ? sum : 6.103515625e-5) : w[j];
            if (r.scale != 0.0f)
                x *= r.scale;
            T_CHECKF(fabs(got[j] - x) <= 4e-6 * fabs(x) + 1e-30, "rep %d weight %d: %.9g vs %.9g",
                     rep, j, got[j], x);
        }
        checked++;
    }
    T_CHECKF(checked > 300, "only %d of 400 rows without a near tie", checked);
}

static void t_hash(void) {
    /* 4 tokens, 2 experts each, 8 experts */
    const int32_t table[8] = {0, 1, 7, 3, 5, 5, 2, 8};
    int32_t sel[2] = {-1, -1};
    T_CHECK(kn_route_hash(table, 2, 8, 1, sel) && sel[0] == 7 && sel[1] == 3);
    T_CHECK(kn_route_hash(table, 2, 8, 2, sel) && sel[0] == 5 && sel[1] == 5);
    sel[0] = sel[1] = -1;
    T_CHECK(!kn_route_hash(table, 2, 8, 3, sel) && sel[0] == -1); /* 8 is out of range */
    /* the weights of hash-routed experts come from the gate as for learned routing */
    float p[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f}, w[2];
    kn_router r = {.n_expert = 8, .n_used = 2, .gating = KN_GATING_SQRT_SOFTPLUS, .norm = true};
    T_CHECK(kn_route_hash(table, 2, 8, 1, sel));
    kn_route_weights(&r, p, sel, w);
    T_CHECK(w[0] == 0.8f / (0.8f + 0.4f) && w[1] == 0.4f / (0.8f + 0.4f));
}

int main(void) {
    test_run("route.gate_functions", t_gate);
    test_run("route.topk_order_ties_nan", t_topk);
    test_run("route.group_limited", t_group_mask);
    test_run("route.weights_norm_clamp_scale", t_weights);
    test_run("route.selection_bias", t_bias);
    test_run("route.composed_memcmp", t_route_composed);
    test_run("route.vs_float64", t_route_vs_f64);
    test_run("route.hash_by_token", t_hash);
    return test_summary();
}
