/* SPDX-License-Identifier: MIT */
/*
 * sample_avx2: the weights pass (sample_int.h) four lanes at a time, built with the Makefile's
 * AVX2 flags and called only where sample_pass_avx2_usable(). It mirrors sample_pass.c operation
 * for operation: -ffp-contract=off keeps every multiply and add separate even though -mfma is on,
 * the exp is sample_exp_neg's sequence on four lanes, and eight consecutive elements feed Z
 * lanes 0-3 and 4-7, so the result has the portable variant's bits.
 */
#include "sample/sample_int.h"

#if defined(__x86_64__) && !defined(VERITY_NO_SIMD)

typedef double v4d __attribute__((vector_size(32)));
typedef uint64_t v4u __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* sample_exp_neg and sample_exp_level on four lanes. */
static inline v4d exp_neg4(v4d x, v4u *level) {
    const v4d shift = {0x1.8p52, 0x1.8p52, 0x1.8p52, 0x1.8p52};
    v4u ok = (v4u)(x >= -708.0);
    x = (v4d)((v4u)x & ok);
    v4d kd = x * 0x1.71547652b82fep+5 + shift;
    v4u n = (v4u)kd - UINT64_C(0x4338000000000000);
    *level = ((v4u){0, 0, 0, 0} - n) | ~ok;
    kd -= shift;
    v4d r = x - kd * 0x1.62e42fefa0000p-6;
    r = r - kd * 0x1.cf79abc9e3b3ap-45;
    v4u j = n & 31;
    v4d p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120)))));
    v4d t = {sample_exp2_table[j[0]], sample_exp2_table[j[1]], sample_exp2_table[j[2]],
             sample_exp2_table[j[3]]};
    t = (v4d)((v4u)t + ((n - j) << 47));
    return (v4d)((v4u)(t * p) & ok);
}

static inline v8f sanitize8(v8f f) {
    const v8f neg_inf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                         -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const v8f big = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
    v8i bad = ~(f >= -FLT_MAX);
    f = (v8f)(((v8i)neg_inf & bad) | ((v8i)f & ~bad));
    v8i over = f > FLT_MAX;
    f = (v8f)(((v8i)big & over) | ((v8i)f & ~over));
    return f + 0.0f;
}

double sample_pass_weights_avx2(const float *src, int32_t n, double w_max, double inv_temp,
                                uint64_t spec_level, uint64_t *keys, int32_t *n_keys) {
    v4d lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0}; /* Z lanes 0-3 and 4-7 */
    int32_t i = 0, k = 0;
    for (; i + 8 <= n; i += 8) {
        v8f f;
        memcpy(&f, src + i, sizeof f);
        f = sanitize8(f);
        v4d a = {f[0], f[1], f[2], f[3]}, b = {f[4], f[5], f[6], f[7]};
        v4u la, lb;
        lo += exp_neg4((a - w_max) * inv_temp, &la);
        hi += exp_neg4((b - w_max) * inv_temp, &lb);
        for (int u = 0; u < 4; u++) {
            if (la[u] < spec_level)
                keys[k++] = sample_key_make(f[u], i + u);
        }
        for (int u = 0; u < 4; u++) {
            if (lb[u] < spec_level)
                keys[k++] = sample_key_make(f[4 + u], i + 4 + u);
        }
    }
    double l[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    for (; i < n; i++) {
        float v = sample_logit_sanitize(src[i]);
        double x = ((double)v - w_max) * inv_temp;
        l[i & 7] += sample_exp_neg(x);
        if (sample_exp_level(x) < spec_level)
            keys[k++] = sample_key_make(v, i);
    }
    *n_keys = k;
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

#endif
