/* SPDX-License-Identifier: MIT */
/*
 * sample_pass: the portable weights pass and the choice between it and the AVX2 one
 * (sample_avx2.c). The pass is the sampler's only loop that evaluates exp over the whole
 * vocabulary, so it is where vector width pays. Both variants perform, per element, the same
 * IEEE operations in the same order (lane arithmetic is scalar arithmetic, and element i always
 * lands in Z lane i % 8), so they return the same bits; tests/test_sample.c compares them.
 */
#include "base/cpu.h"
#include "base/flags.h"
#include "sample/sample_int.h"

#include <string.h>

/* One element, scalar: the tail of every variant. */
static inline void pass_one(const float *src, int32_t i, double w_max, double inv_temp,
                            uint64_t spec_level, sample_v2d lane[4], uint64_t *keys, int32_t *k) {
    float v = sample_logit_sanitize(src[i]);
    double x = ((double)v - w_max) * inv_temp;
    lane[(i & 7) / 2][i & 1] += sample_exp_neg(x);
    if (sample_exp_level(x) < spec_level)
        keys[(*k)++] = sample_key_make(v, i);
}

double sample_pass_weights(const float *src, int32_t n, double w_max, double inv_temp,
                           uint64_t spec_level, uint64_t *keys, int32_t *n_keys) {
    sample_v2d lane[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}}; /* lane[u / 2][u % 2] is Z lane u */
    int32_t i = 0, k = 0;
    for (; i + 8 <= n; i += 8) {
        sample_v4f f[2];
        memcpy(f, src + i, sizeof f);
        f[0] = sample_logit_sanitize4(f[0]);
        f[1] = sample_logit_sanitize4(f[1]);
        for (int u = 0; u < 4; u++) { /* elements i + 2u, i + 2u + 1 */
            sample_v4f h = f[u / 2];
            sample_v2d v = {h[(2 * u) % 4], h[(2 * u) % 4 + 1]};
            sample_v2u level;
            lane[u] += sample_exp_neg2((v - w_max) * inv_temp, &level);
            if (level[0] < spec_level)
                keys[k++] = sample_key_make(h[(2 * u) % 4], i + 2 * u);
            if (level[1] < spec_level)
                keys[k++] = sample_key_make(h[(2 * u) % 4 + 1], i + 2 * u + 1);
        }
    }
    for (; i < n; i++)
        pass_one(src, i, w_max, inv_temp, spec_level, lane, keys, &k);
    *n_keys = k;
    return ((lane[0][0] + lane[0][1]) + (lane[1][0] + lane[1][1])) +
           ((lane[2][0] + lane[2][1]) + (lane[3][0] + lane[3][1]));
}

bool sample_pass_avx2_usable(void) {
#if defined(__x86_64__) && !defined(VERITY_NO_SIMD)
    const cpu_features *f = cpu_get_features();
    return f->avx2 && f->fma && f->bmi2 && f->f16c;
#else
    return false;
#endif
}

sample_pass_fn sample_pass_select(void) {
    if (strcmp(flags_str(FLAG_ISA), "scalar") == 0)
        return sample_pass_weights;
#if defined(__x86_64__) && !defined(VERITY_NO_SIMD)
    if (sample_pass_avx2_usable())
        return sample_pass_weights_avx2;
#endif
    return sample_pass_weights;
}
