/* SPDX-License-Identifier: MIT */
/*
 * sample_int: declarations shared inside src/sample (and its unit tests) only.
 *
 * Deterministic math. The sampler never calls libm's exp or log: glibc picks an FMA-compiled
 * variant of both at load time on CPUs with FMA (ifunc), and libms differ between versions and
 * vendors, so the same logits could give different probabilities, and therefore a different
 * token, on two machines running one build. sample_exp_neg and sample_log use only IEEE-754
 * add, subtract, multiply, divide and exact bit manipulation; the Makefile builds with
 * -ffp-contract=off, so no compiler fuses a multiply-add either. Their bits are the same on
 * every x86-64 (and every other IEEE-754 machine in the default rounding mode).
 *
 * Candidate keys. A candidate (value v, token id) is packed into one uint64_t whose unsigned
 * order is the sampler's total order: value descending, then token id ascending. The high 32 bits
 * are v's bits mapped so that unsigned order equals numeric order (positive floats get the sign
 * bit set, negative floats are complemented); the low 32 bits are 0xFFFFFFFF - id. Values are
 * sanitized first (NaN -> -inf, +inf -> FLT_MAX, -0 -> +0), so equal values have equal bits and
 * ties are decided by the id alone. Keys are unique (ids are), so any correct sort or selection
 * produces the same sequence: memory order can never leak into the result.
 */
#ifndef VERITY_SAMPLE_SAMPLE_INT_H
#define VERITY_SAMPLE_SAMPLE_INT_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 2^(j/32) for j = 0..31, correctly rounded. */
extern const double sample_exp2_table[32];

/* Returns e^x for x <= 0, with a relative error below about 2e-15. Exactly 1.0 at x == 0 (and
 * -0); exactly 0.0 for x < -708 (results that would be at or near the subnormal range: those
 * probabilities are zero to the sampler), for -inf and for NaN. x > 0 is outside the contract.
 * Method: x = (32k + j) ln2/32 + r with |r| <= ln2/64 (Cody-Waite split of ln2/32, round to
 * nearest through the 1.5 * 2^52 shifter), e^x = 2^k * 2^(j/32) * p(r), p the degree-5 Taylor
 * polynomial in Horner form, 2^k applied exactly through the exponent bits. */
static inline double sample_exp_neg(double x) {
    if (!(x >= -708.0))
        return 0.0;
    double kd = x * 0x1.71547652b82fep+5 + 0x1.8p52; /* x * 32/ln2, rounded to an integer */
    uint64_t n;
    memcpy(&n, &kd, sizeof n);
    n -= UINT64_C(0x4338000000000000); /* round(x * 32/ln2) as a two's complement integer */
    kd -= 0x1.8p52;
    double r = x - kd * 0x1.62e42fefa0000p-6; /* exact: kd * hi has trailing zero bits */
    r = r - kd * 0x1.cf79abc9e3b3ap-45;
    uint64_t j = n & 31;
    double p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120)))));
    double t = sample_exp2_table[j];
    uint64_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    tbits += (n - j) << 47; /* + k in the exponent field, k = (n - j) / 32 >= -1022 */
    memcpy(&t, &tbits, sizeof t);
    return t * p;
}

/* Two lanes of doubles and of 64-bit integers (GCC/Clang vector extensions: SSE2 on x86-64,
 * NEON on arm64, plain scalar code elsewhere). Lane arithmetic is the same IEEE operation as
 * the scalar one, so vector code here produces the scalar code's bits. */
typedef double sample_v2d __attribute__((vector_size(16)));
typedef uint64_t sample_v2u __attribute__((vector_size(16)));

/* The level of a weight e^x: -round(x * 32/ln2) >= 0 for x in [-708, 0], the n of
 * sample_exp_neg, so e^x is within a factor 2^(1/64) of 2^(-level/32); UINT64_MAX for x < -708,
 * -inf and NaN (weight 0). Non-increasing in x; the sampler's histogram bins are level / 4. */
static inline uint64_t sample_exp_level(double x) {
    if (!(x >= -708.0))
        return UINT64_MAX;
    double kd = x * 0x1.71547652b82fep+5 + 0x1.8p52;
    uint64_t n;
    memcpy(&n, &kd, sizeof n);
    return UINT64_C(0x4338000000000000) - n;
}

/* sample_exp_neg on two lanes, with the same operations in the same order and so the same bits;
 * if level is not NULL it also receives sample_exp_level of each lane. */
static inline sample_v2d sample_exp_neg2(sample_v2d x, sample_v2u *level) {
    const sample_v2d shift = {0x1.8p52, 0x1.8p52};
    sample_v2u ok = (sample_v2u)(x >= -708.0); /* all ones where x is in range */
    x = (sample_v2d)((sample_v2u)x & ok);      /* out-of-range lanes compute e^0, masked below */
    sample_v2d kd = x * 0x1.71547652b82fep+5 + shift;
    sample_v2u n = (sample_v2u)kd - UINT64_C(0x4338000000000000);
    if (level)
        *level = ((sample_v2u){0, 0} - n) | ~ok;
    kd -= shift;
    sample_v2d r = x - kd * 0x1.62e42fefa0000p-6;
    r = r - kd * 0x1.cf79abc9e3b3ap-45;
    sample_v2u j = n & 31;
    sample_v2d p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120)))));
    sample_v2d t = {sample_exp2_table[j[0]], sample_exp2_table[j[1]]};
    t = (sample_v2d)((sample_v2u)t + ((n - j) << 47));
    return (sample_v2d)((sample_v2u)(t * p) & ok);
}

/* sample_exp_level on two lanes. */
static inline sample_v2u sample_exp_level2(sample_v2d x) {
    sample_v2u ok = (sample_v2u)(x >= -708.0);
    sample_v2d kd = x * 0x1.71547652b82fep+5 + (sample_v2d){0x1.8p52, 0x1.8p52};
    return ((sample_v2u){0, 0} - ((sample_v2u)kd - UINT64_C(0x4338000000000000))) | ~ok;
}

/* The weights pass (pass B of sample.c, and the raw-logprob normaliser): for i in [0, n), with
 * v = sample_logit_sanitize(src[i]) and x = ((double)v - w_max) * inv_temp, adds sample_exp_neg(x)
 * to Z lane i % 8 (lanes ascending in i), and, when sample_exp_level(x) < spec_level, appends
 * sample_key_make(v, i) to keys (which must have room for n; may be NULL when spec_level is 0).
 * Returns Z = ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) and the number of keys appended in
 * *n_keys. w_max must be finite and >= every value. Every variant returns the same bits. */
typedef double (*sample_pass_fn)(const float *src, int32_t n, double w_max, double inv_temp,
                                 uint64_t spec_level, uint64_t *keys, int32_t *n_keys);

/* The portable variant: two-lane vector extensions (SSE2 on x86-64). */
double sample_pass_weights(const float *src, int32_t n, double w_max, double inv_temp,
                           uint64_t spec_level, uint64_t *keys, int32_t *n_keys);

/* The AVX2 variant (sample_avx2.c): four lanes. Call only where sample_pass_avx2_usable(). */
double sample_pass_weights_avx2(const float *src, int32_t n, double w_max, double inv_temp,
                                uint64_t spec_level, uint64_t *keys, int32_t *n_keys);

/* True if this CPU runs sample_avx2.c (AVX2, FMA, BMI2, F16C: what the Makefile compiles it for)
 * and the build has it. */
bool sample_pass_avx2_usable(void);

/* The variant the `isa` toggle (flags.h) and this CPU select: "scalar" the portable one; "auto",
 * "avx2" and "avx512" the AVX2 one where usable, else the portable one. Only speed differs. */
sample_pass_fn sample_pass_select(void);

/* Returns ln x for a finite normal x > 0, with an absolute error below about 1e-15 * |ln x| +
 * 1e-16. Method: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m-1)/(m+1)) by its
 * odd series to s^23, e ln2 added in two parts. Used once per sampled token (the log of the
 * softmax normaliser), so it favours clarity over speed. */
double sample_log(double x);

/* Sorts keys[0..n) in descending unsigned order: MSD radix sort from 1024 keys up, else
 * introsort (median-of-three quicksort, heapsort past 2 log2(n) levels, insertion sort below 24
 * elements). Keys are unique, so the result is fully determined by the set. No allocation. */
void sample_keys_sort_desc(uint64_t *keys, size_t n);

/* Heapsort, descending: the introsort's guaranteed-n-log-n fallback (exposed for its test). */
void sample_keys_heap_sort_desc(uint64_t *keys, size_t n);

/* Rearranges keys[0..n) so that keys[0..k) are its k largest (in no particular order) and the
 * rest follow (introselect: median-of-three quickselect, a sort of the remaining range past
 * 2 log2(n) rounds). k == 0 or k >= n leaves the array as it is. No allocation. */
void sample_keys_select_desc(uint64_t *keys, size_t n, size_t k);

/* Maps a logit to the value the sampler orders by: NaN and -inf -> -inf, +inf -> FLT_MAX (so the
 * maximum is finite and max - max == 0), -0 -> +0, anything else unchanged. */
static inline float sample_logit_sanitize(float f) {
    if (!(f >= -FLT_MAX))
        return -INFINITY;
    if (f > FLT_MAX)
        return FLT_MAX;
    return f + 0.0f;
}

typedef float sample_v4f __attribute__((vector_size(16)));
typedef int32_t sample_v4i __attribute__((vector_size(16)));

/* Lanes of a where mask is all ones, of b where it is zero. */
static inline sample_v4f sample_v4f_select(sample_v4i mask, sample_v4f a, sample_v4f b) {
    return (sample_v4f)(((sample_v4i)a & mask) | ((sample_v4i)b & ~mask));
}

/* sample_logit_sanitize on four lanes (same results). */
static inline sample_v4f sample_logit_sanitize4(sample_v4f f) {
    const sample_v4f neg_inf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const sample_v4f big = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
    f = sample_v4f_select(~(f >= -FLT_MAX), neg_inf, f);
    f = sample_v4f_select(f > FLT_MAX, big, f);
    return f + 0.0f;
}

/* Packs a sanitized value and a token id into a key (see the design note above). */
static inline uint64_t sample_key_make(float v, int32_t id) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    uint32_t m = (uint32_t)((int32_t)u >> 31); /* all ones for negative values */
    uint32_t ord = u ^ (m | UINT32_C(0x80000000));
    return (uint64_t)ord << 32 | (uint32_t)(UINT32_C(0xFFFFFFFF) - (uint32_t)id);
}

/* The value packed in a key. */
static inline float sample_key_value(uint64_t key) {
    uint32_t ord = (uint32_t)(key >> 32);
    uint32_t m = (ord >> 31) - 1u; /* all ones when the value was negative */
    uint32_t u = ord ^ (m | UINT32_C(0x80000000));
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* The token id packed in a key. */
static inline int32_t sample_key_token(uint64_t key) {
    return (int32_t)(UINT32_C(0xFFFFFFFF) - (uint32_t)key);
}

#endif
