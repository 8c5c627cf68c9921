/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/sample: the Philox generator (known answers, uniformity), the deterministic
 * exp/log and key helpers, parameter validation, each pipeline step on crafted logits, logprobs,
 * the statistical match to the softmax, invariance to what other samplers do (P1), and the
 * central check: the fast sampler (histogram-guided partial selection) against a reference that
 * sorts the whole vocabulary, token and logprob bits compared exactly over many random cases.
 *
 * Allocation: sampler_sample, sampler_accept* and sampler_reset never allocate (sample.h). In
 * builds without a sanitizer this binary interposes malloc, calloc, realloc and free (forwarding
 * to glibc's own) and counts calls while sampling; sanitizer builds bring their own allocator,
 * so there the check is skipped.
 */
#include "test.h"
#include "base/err.h"
#include "base/flags.h"
#include "sample/rng.h"
#include "sample/sample.h"
#include "sample/sample_int.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation counting ---- */

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static long alloc_calls; /* while counting: calls of the four below */
static bool alloc_counting;

void *malloc(size_t n) {
    alloc_calls += alloc_counting;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size) {
    alloc_calls += alloc_counting;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n) {
    alloc_calls += alloc_counting;
    return __libc_realloc(p, n);
}

void free(void *p) {
    alloc_calls += alloc_counting && p;
    __libc_free(p);
}
#endif

/* ---- helpers ---- */

static int scaled(int n) {
    int m = (int)(n * test_scale());
    return m < 1 ? 1 : m;
}

/* A standard normal from (seed, i), Box-Muller over rng_uniform. */
static double gauss(uint64_t seed, uint64_t i) {
    double u1 = rng_uniform(seed, 2 * i) + 0x1.0p-60, u2 = rng_uniform(seed, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

enum logit_shape { SHAPE_LM, SHAPE_FLAT, SHAPE_TIES, SHAPE_SPECIAL, SHAPE_WIDE, SHAPE_COUNT };

/* Fills logits[0..n) with a shape: LM-like (bulk plus a head), flat, heavily tied (values on a
 * 0.5 grid), with -inf/NaN/+inf/-0 sprinkled in, or spread over a very wide range. */
static void fill_logits(float *l, int n, enum logit_shape shape, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        double g = gauss(seed, (uint64_t)i);
        switch (shape) {
        case SHAPE_LM:
            l[i] = (float)(g * 2.5);
            break;
        case SHAPE_FLAT:
            l[i] = (float)(g * 0.2);
            break;
        case SHAPE_TIES:
            l[i] = (float)(floor(g * 2.0) * 0.5);
            break;
        case SHAPE_SPECIAL:
            l[i] = (float)(g * 3.0);
            break;
        case SHAPE_WIDE:
            l[i] = (float)(g * 60.0);
            break;
        default:
            break;
        }
    }
    if (shape == SHAPE_LM || shape == SHAPE_SPECIAL)
        for (int h = 0; h < 12 && h < n; h++)
            l[rng_u64(seed + 1, (uint64_t)h) % (uint64_t)n] +=
                (float)(12.0 - h + gauss(seed + 2, h));
    if (shape == SHAPE_SPECIAL) {
        static const float specials[] = {-INFINITY, NAN, INFINITY, -0.0f, 0.0f, -INFINITY};
        for (int h = 0; h < 6 && h < n; h++)
            l[rng_u64(seed + 3, (uint64_t)h) % (uint64_t)n] = specials[h];
    }
}

/* ---- the reference sampler: sample.h's pipeline, literally, with a full sort ---- */

typedef struct ref_cand {
    float v;
    int32_t id;
} ref_cand;

static int ref_cand_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static double ref_lane_sum(const double *e, int n) {
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++)
        l[i & 7] += e[i];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Reference result for one step. ctx = every context token so far (prompt then generated),
 * gen = the generated ones. */
static int32_t ref_sample(const sample_params *p, int n, const float *logits, const int32_t *ctx,
                          int n_ctx, const int32_t *gen, int n_gen, int64_t pos,
                          sample_result *res) {
    float *w = malloc(sizeof(float) * (size_t)n);
    double *e = malloc(sizeof(double) * (size_t)n);
    ref_cand *c = malloc(sizeof(ref_cand) * (size_t)n);
    int32_t *count = calloc((size_t)n, sizeof(int32_t));
    char *in_win = calloc((size_t)n, 1);
    T_CHECK(w && e && c && count && in_win);
    for (int i = 0; i < n; i++)
        w[i] = sample_logit_sanitize(logits[i]);
    /* penalties */
    float rp = (float)p->repetition_penalty;
    if (rp != 1.0f && p->repeat_last_n != 0) {
        int from = p->repeat_last_n < 0 || p->repeat_last_n > n_ctx ? 0 : n_ctx - p->repeat_last_n;
        for (int i = from; i < n_ctx; i++)
            if (ctx[i] >= 0 && ctx[i] < n)
                in_win[ctx[i]] = 1;
        for (int t = 0; t < n; t++)
            if (in_win[t])
                w[t] = sample_logit_sanitize(w[t] > 0.0f ? w[t] / rp : w[t] * rp);
    }
    float fp = (float)p->frequency_penalty, pp = (float)p->presence_penalty;
    if (fp != 0.0f || pp != 0.0f) {
        for (int i = 0; i < n_gen; i++)
            if (gen[i] >= 0 && gen[i] < n)
                count[gen[i]]++;
        for (int t = 0; t < n; t++) {
            if (count[t] > 0) {
                float x = w[t] - fp * (float)count[t];
                x = x - pp;
                w[t] = sample_logit_sanitize(x);
            }
        }
    }
    for (int i = 0; i < n; i++)
        c[i] = (ref_cand){.v = w[i], .id = i};
    qsort(c, (size_t)n, sizeof *c, ref_cand_cmp);
    int32_t token;
    double w_max = c[0].v;
    if (p->temperature < SAMPLE_GREEDY_TEMPERATURE || c[0].v == -INFINITY) {
        token = c[0].id;
    } else {
        double inv_t = 1.0 / p->temperature;
        for (int i = 0; i < n; i++)
            e[i] = sample_exp_neg(((double)w[i] - w_max) * inv_t);
        double z = ref_lane_sum(e, n);
        int keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
        double mass = z;
        if (keep < n) {
            mass = 0.0;
            for (int j = 0; j < keep; j++)
                mass += e[c[j].id];
        }
        if (p->top_p < 1.0) {
            double target = p->top_p * mass, cum = 0.0;
            int j = 0;
            while (j < keep) {
                cum += e[c[j].id];
                j++;
                if (cum >= target)
                    break;
            }
            if (j < keep) {
                keep = j;
                mass = cum;
            }
        }
        if (p->min_p > 0.0) {
            double thr = p->min_p * e[c[0].id];
            int j = 1;
            while (j < keep && e[c[j].id] >= thr)
                j++;
            if (j < keep) {
                keep = j;
                mass = 0.0;
                for (int q = 0; q < keep; q++)
                    mass += e[c[q].id];
            }
        }
        double t = rng_uniform(p->seed, (uint64_t)pos) * mass, acc = 0.0;
        int last_nonzero = 0, chosen = -1;
        for (int j = 0; j < keep && chosen < 0; j++) {
            acc += e[c[j].id];
            if (e[c[j].id] > 0.0)
                last_nonzero = j;
            if (acc > t)
                chosen = j;
        }
        token = c[chosen >= 0 ? chosen : last_nonzero].id;
    }
    if (res) {
        memset(res, 0, sizeof *res);
        res->token = token;
        for (int i = 0; i < n; i++)
            c[i] = (ref_cand){.v = sample_logit_sanitize(logits[i]), .id = i};
        qsort(c, (size_t)n, sizeof *c, ref_cand_cmp);
        double r_max = c[0].v;
        res->n_top = p->n_logprobs < n ? p->n_logprobs : n;
        if (r_max == -INFINITY) {
            res->logprob = -INFINITY;
            for (int k = 0; k < res->n_top; k++)
                res->top[k] = (sample_logprob){.token = c[k].id, .logprob = -INFINITY};
        } else {
            for (int i = 0; i < n; i++)
                e[i] = sample_exp_neg((double)sample_logit_sanitize(logits[i]) - r_max);
            double log_z = sample_log(ref_lane_sum(e, n));
            res->logprob = (float)(((double)sample_logit_sanitize(logits[token]) - r_max) - log_z);
            for (int k = 0; k < res->n_top; k++)
                res->top[k] = (sample_logprob){
                    .token = c[k].id, .logprob = (float)(((double)c[k].v - r_max) - log_z)};
        }
    }
    free(w);
    free(e);
    free(c);
    free(count);
    free(in_win);
    return token;
}

/* Two results are the same bits (only the n_top valid entries of top[] count). */
static bool results_equal(const sample_result *a, const sample_result *b) {
    if (a->token != b->token || a->n_top != b->n_top ||
        memcmp(&a->logprob, &b->logprob, sizeof a->logprob) != 0)
        return false;
    return memcmp(a->top, b->top, sizeof a->top[0] * (size_t)a->n_top) == 0;
}

/* ---- rng ---- */

static void t_rng_known_answers(void) {
    /* Random123's published kat_vectors for philox4x32 at 10 rounds */
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
        uint32_t out[4];
        rng_philox4x32_10(kat[k].ctr, kat[k].key, out);
        T_CHECKF(memcmp(out, kat[k].out, sizeof out) == 0, "philox KAT %zu", k);
    }
    /* this module's mapping, computed once: a change to the generator or the mapping shows */
    T_CHECK(rng_u64(0, 0) == UINT64_C(0xe169c58d6627e8d5));
    T_CHECK(rng_u64(42, 7) == UINT64_C(0x68784c855bbd83b1));
    T_CHECK(rng_u64(UINT64_MAX, UINT64_MAX) == UINT64_C(0x430ac65a4d18d7d2));
    T_CHECK(rng_u64(UINT64_C(0x0123456789abcdef), 1000000) == UINT64_C(0xcf806c40e8dce684));
    T_CHECK(rng_uniform(42, 7) == 0x1.a1e132156ef6p-2);
    T_CHECK(rng_uniform(0, 0) == 0x1.c2d38b1acc4fdp-1);
}

static void t_rng_uniformity(void) {
    const int n = 100000;
    double sum = 0.0, sum2 = 0.0;
    int bits[64] = {0};
    for (int i = 0; i < n; i++) {
        double u = rng_uniform(12345, (uint64_t)i);
        T_CHECK(u >= 0.0 && u < 1.0);
        sum += u;
        sum2 += u * u;
        uint64_t r = rng_u64(777, (uint64_t)i);
        for (int b = 0; b < 64; b++)
            bits[b] += (int)((r >> b) & 1);
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    T_CHECKF(fabs(mean - 0.5) < 0.005, "mean %g", mean);
    T_CHECKF(fabs(var - 1.0 / 12) < 0.002, "variance %g", var);
    for (int b = 0; b < 64; b++) /* sd of a bit count is 158; allow about 6.5 sd */
        T_CHECKF(abs(bits[b] - n / 2) < 1000, "bit %d set %d times of %d", b, bits[b], n);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void t_rng_distinct(void) {
    /* a grid of seeds x counters, including near-collisions like (s, c) vs (c, s) */
    enum { S = 64, C = 64 };
    uint64_t *v = malloc(sizeof(uint64_t) * S * C * 2);
    T_CHECK(v);
    int k = 0;
    for (uint64_t s = 0; s < S; s++)
        for (uint64_t c = 0; c < C; c++) {
            v[k++] = rng_u64(s, c);
            v[k++] = rng_u64(s << 32 | c, (c << 32) ^ s ^ UINT64_C(0x8000000000000000));
        }
    qsort(v, (size_t)k, sizeof v[0], cmp_u64);
    for (int i = 1; i < k; i++)
        T_CHECKF(v[i] != v[i - 1], "collision at %d", i);
    free(v);
    T_CHECK(rng_u64(1, 2) != rng_u64(2, 1));
    T_CHECK(rng_u64(0, 1) != rng_u64(1, 0));
}

/* ---- deterministic math and keys ---- */

static void t_math_exp_log(void) {
    T_CHECK(sample_exp_neg(0.0) == 1.0);
    T_CHECK(sample_exp_neg(-0.0) == 1.0);
    T_CHECK(sample_exp_neg(-708.5) == 0.0);
    T_CHECK(sample_exp_neg(-INFINITY) == 0.0);
    T_CHECK(sample_exp_neg(NAN) == 0.0);
    T_CHECK(sample_exp_level(0.0) == 0);
    T_CHECK(sample_exp_level(-INFINITY) == UINT64_MAX);
    double max_rel = 0.0;
    uint64_t prev_level = 0;
    for (int i = 0; i <= 200000; i++) {
        double x = -708.0 * i / 200000.0;
        double got = sample_exp_neg(x), want = exp(x);
        double rel = fabs(got - want) / want;
        max_rel = rel > max_rel ? rel : max_rel;
        uint64_t level = sample_exp_level(x);
        T_CHECKF(level >= prev_level, "level not monotone at x = %g", x);
        prev_level = level;
    }
    T_CHECKF(max_rel < 4e-15, "exp max relative error %g", max_rel);
    /* the two-lane version gives the scalar bits, and levels, everywhere */
    for (int i = 0; i < 100000; i++) {
        double a = -750.0 * rng_uniform(5, (uint64_t)i), b = -30.0 * rng_uniform(6, (uint64_t)i);
        if (i % 97 == 0)
            a = -INFINITY;
        if (i % 89 == 0)
            b = 0.0;
        sample_v2u lv;
        sample_v2d e = sample_exp_neg2((sample_v2d){a, b}, &lv);
        double ea = sample_exp_neg(a), eb = sample_exp_neg(b);
        double e0 = e[0], e1 = e[1];
        T_CHECKF(memcmp(&e0, &ea, 8) == 0 && memcmp(&e1, &eb, 8) == 0, "lanes at %d", i);
        T_CHECK(lv[0] == sample_exp_level(a) && lv[1] == sample_exp_level(b));
        sample_v2u lv2 = sample_exp_level2((sample_v2d){a, b});
        T_CHECK(lv2[0] == lv[0] && lv2[1] == lv[1]);
    }
    double max_abs = 0.0;
    for (int i = 1; i < 100000; i++) {
        double x = 1.0 + i * 7.31;
        double d = fabs(sample_log(x) - log(x)) / log(x + 1.0);
        max_abs = d > max_abs ? d : max_abs;
    }
    T_CHECKF(max_abs < 2e-15, "log relative error %g", max_abs);
    T_CHECK(sample_log(1.0) == 0.0);
    T_CHECK(fabs(sample_log(0.05) - log(0.05)) < 1e-15);
}

static void t_math_keys(void) {
    static const float vals[] = {-INFINITY, -FLT_MAX, -1e30f, -2.5f, -1.0f, -1e-40f,
                                 0.0f,      1e-40f,   1e-3f,  1.0f,  3.5f,  FLT_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        uint64_t k = sample_key_make(vals[i], 17);
        T_CHECK(sample_key_value(k) == vals[i] && sample_key_token(k) == 17);
        if (i > 0)
            T_CHECK(sample_key_make(vals[i], 5) > sample_key_make(vals[i - 1], 3));
    }
    /* equal values: the lower id is the larger key */
    T_CHECK(sample_key_make(1.0f, 3) > sample_key_make(1.0f, 4));
    T_CHECK(sample_logit_sanitize(-0.0f) == 0.0f && !signbit(sample_logit_sanitize(-0.0f)));
    T_CHECK(sample_logit_sanitize(NAN) == -INFINITY);
    T_CHECK(sample_logit_sanitize(INFINITY) == FLT_MAX);
    /* sort and select against qsort, on random, sorted and reversed input */
    const int n = 5000;
    uint64_t *a = malloc(sizeof(uint64_t) * n), *b = malloc(sizeof(uint64_t) * n);
    T_CHECK(a && b);
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < n; i++)
            a[i] = round < 4 ? rng_u64((uint64_t)round, (uint64_t)i) % 100000 * 65536 + (uint64_t)i
                             : (uint64_t)(round == 4 ? i : n - i);
        memcpy(b, a, sizeof(uint64_t) * n);
        qsort(b, (size_t)n, sizeof b[0], cmp_u64); /* ascending */
        int k = round * 900 + 1;
        sample_keys_select_desc(a, (size_t)n, (size_t)k);
        for (int i = 0; i < k; i++)
            T_CHECKF(a[i] >= b[n - k], "select round %d", round);
        for (int i = k; i < n; i++)
            T_CHECKF(a[i] < b[n - k], "select round %d", round);
        sample_keys_sort_desc(a, (size_t)n);
        for (int i = 0; i < n; i++)
            T_CHECKF(a[i] == b[n - 1 - i], "sort round %d at %d", round, i);
        /* the small-set paths (introsort) and its heapsort fallback */
        int m = 1 + round * 150;
        memcpy(a, b, sizeof(uint64_t) * (size_t)m); /* ascending: a quicksort's bad case */
        sample_keys_sort_desc(a, (size_t)m);
        for (int i = 0; i < m; i++)
            T_CHECKF(a[i] == b[m - 1 - i], "small sort round %d at %d", round, i);
        memcpy(a, b, sizeof(uint64_t) * (size_t)m);
        sample_keys_heap_sort_desc(a, (size_t)m);
        for (int i = 0; i < m; i++)
            T_CHECKF(a[i] == b[m - 1 - i], "heap sort round %d at %d", round, i);
    }
    free(a);
    free(b);
}

/* ---- parameters ---- */

static void expect_invalid(sample_params p, const char *field) {
    err_clear();
    T_EQ_INT(sample_params_validate(&p), ERR_INVAL);
    T_CHECKF(strstr(err_detail(), field) != NULL, "detail '%s' lacks '%s'", err_detail(), field);
    sampler *s = NULL;
    T_EQ_INT(sampler_create(&p, 100, &s), ERR_INVAL);
    T_CHECK(s == NULL);
}

static void t_params_validate(void) {
    sample_params d = sample_params_default();
    T_OK(sample_params_validate(&d));
    T_CHECK(d.temperature == 1.0 && d.top_k == 0 && d.top_p == 1.0 && d.min_p == 0.0 &&
            d.repetition_penalty == 1.0 && d.repeat_last_n == 64 && d.n_logprobs == 0);
    sample_params p;
    p = d, p.temperature = -0.5, expect_invalid(p, "temperature");
    p = d, p.temperature = INFINITY, expect_invalid(p, "temperature");
    p = d, p.temperature = NAN, expect_invalid(p, "temperature");
    p = d, p.top_k = -1, expect_invalid(p, "top_k");
    p = d, p.top_p = 0.0, expect_invalid(p, "top_p");
    p = d, p.top_p = 1.5, expect_invalid(p, "top_p");
    p = d, p.top_p = NAN, expect_invalid(p, "top_p");
    p = d, p.min_p = -0.1, expect_invalid(p, "min_p");
    p = d, p.min_p = 1.01, expect_invalid(p, "min_p");
    p = d, p.repetition_penalty = 0.0, expect_invalid(p, "repetition_penalty");
    p = d, p.repetition_penalty = INFINITY, expect_invalid(p, "repetition_penalty");
    p = d, p.repeat_last_n = -2, expect_invalid(p, "repeat_last_n");
    p = d, p.repeat_last_n = SAMPLE_MAX_REPEAT_LAST_N + 1, expect_invalid(p, "repeat_last_n");
    p = d, p.frequency_penalty = 2.5, expect_invalid(p, "frequency_penalty");
    p = d, p.frequency_penalty = NAN, expect_invalid(p, "frequency_penalty");
    p = d, p.presence_penalty = -2.01, expect_invalid(p, "presence_penalty");
    p = d, p.n_logprobs = 21, expect_invalid(p, "n_logprobs");
    p = d, p.n_logprobs = -1, expect_invalid(p, "n_logprobs");
    /* the value is named too */
    p = d, p.top_p = 1.5;
    sample_params_validate(&p);
    T_CHECKF(strstr(err_detail(), "1.5") != NULL, "detail '%s'", err_detail());
    /* edges that are valid */
    p = d, p.temperature = 0.0, p.top_p = 1e-9, p.min_p = 1.0, p.frequency_penalty = -2.0;
    p.presence_penalty = 2.0, p.repeat_last_n = -1, p.n_logprobs = 20;
    T_OK(sample_params_validate(&p));
    sampler *s = NULL;
    err_clear();
    T_EQ_INT(sampler_create(&d, 0, &s), ERR_INVAL);
    T_CHECK(strstr(err_detail(), "n_vocab") != NULL);
    sampler_destroy(NULL);
}

/* ---- steps on crafted logits ---- */

static sampler *make(sample_params p, int n_vocab) {
    sampler *s = NULL;
    T_OK(sampler_create(&p, n_vocab, &s));
    return s;
}

static void t_greedy_ties(void) {
    sample_params p = sample_params_default();
    p.temperature = 0.0;
    sampler *s = make(p, 10);
    float l[10] = {0, 1, 5, 2, 5, 5, -1, NAN, 3, 5};
    T_EQ_INT(sampler_sample(s, l, 0, NULL), 2);
    float z[10] = {-0.0f, 0.0f, -1, -1, -1, -1, -1, -1, -1, 0.0f};
    T_EQ_INT(sampler_sample(s, z, 0, NULL), 0); /* -0 and +0 tie: lowest id */
    float inf[10] = {1, INFINITY, 2, INFINITY, 0, 0, 0, 0, 0, 0};
    T_EQ_INT(sampler_sample(s, inf, 0, NULL), 1);
    float none[10];
    for (int i = 0; i < 10; i++)
        none[i] = i % 2 ? -INFINITY : NAN;
    T_EQ_INT(sampler_sample(s, none, 0, NULL), 0);
    sampler_destroy(s);
    /* tiny temperatures are greedy too, and so is a sampled all--inf row */
    p.temperature = 5e-6;
    s = make(p, 10);
    T_EQ_INT(sampler_sample(s, l, 3, NULL), 2);
    sampler_destroy(s);
    p.temperature = 1.0;
    s = make(p, 10);
    T_EQ_INT(sampler_sample(s, none, 3, NULL), 0);
    sampler_destroy(s);
}

static void t_truncation_equals_greedy(void) {
    const int n = 3000;
    float *l = malloc(sizeof(float) * n);
    T_CHECK(l);
    sample_params g = sample_params_default(), k1 = g, tp = g;
    g.temperature = 0.0;
    k1.temperature = 0.8, k1.top_k = 1;
    tp.temperature = 1.3, tp.top_p = 1e-9;
    for (int round = 0; round < 40; round++) {
        fill_logits(l, n, (enum logit_shape)(round % SHAPE_COUNT), 100 + (uint64_t)round);
        k1.seed = tp.seed = (uint64_t)round;
        sampler *sg = make(g, n), *sk = make(k1, n), *sp = make(tp, n);
        int32_t want = sampler_sample(sg, l, round, NULL);
        T_EQ_INT(sampler_sample(sk, l, round, NULL), want);
        T_EQ_INT(sampler_sample(sp, l, round, NULL), want);
        sampler_destroy(sg);
        sampler_destroy(sk);
        sampler_destroy(sp);
    }
    free(l);
}

static void t_min_p(void) {
    /* weights at T = 1: 1, e^-1 = .37, e^-2 = .14, e^-3 = .05; min_p .2 keeps the first two */
    float l[6] = {0.0f, -1.0f, -2.0f, -3.0f, -INFINITY, -2.5f};
    sample_params p = sample_params_default();
    p.min_p = 0.2, p.seed = 9;
    sampler *s = make(p, 6);
    int seen[6] = {0};
    for (int pos = 0; pos < 2000; pos++)
        seen[sampler_sample(s, l, pos, NULL)]++;
    T_CHECK(seen[0] > 0 && seen[1] > 0);
    T_CHECK(seen[2] == 0 && seen[3] == 0 && seen[4] == 0 && seen[5] == 0);
    /* the kept two in proportion 1 : e^-1 (0.731 : 0.269), loosely */
    T_CHECKF(fabs(seen[0] / 2000.0 - 0.731) < 0.05, "token 0 share %g", seen[0] / 2000.0);
    sampler_destroy(s);
    /* min_p = 1 keeps only the maximum (and ties at exactly the same weight) */
    p.min_p = 1.0;
    s = make(p, 6);
    for (int pos = 0; pos < 200; pos++)
        T_EQ_INT(sampler_sample(s, l, pos, NULL), 0);
    sampler_destroy(s);
}

/* Greedy-samples logits where token t has raw logit raw and a probe token holds value e, first
 * at a lower id and then at a higher one: both ties resolve toward t's side only if the
 * penalized logit of t equals e exactly. */
static void expect_penalized(sample_params p, const int32_t *prompt, int n_prompt,
                             const int32_t *gen, int n_gen, float raw, float e) {
    enum { N = 8, T = 4 };
    p.temperature = 0.0;
    for (int side = 0; side < 2; side++) {
        int probe = side == 0 ? 2 : 6;
        float l[N];
        for (int i = 0; i < N; i++)
            l[i] = -INFINITY;
        l[T] = raw;
        l[probe] = e;
        sampler *s = make(p, N);
        sampler_accept_prompt(s, prompt, n_prompt);
        for (int i = 0; i < n_gen; i++)
            sampler_accept(s, gen[i]);
        int32_t got = sampler_sample(s, l, 0, NULL);
        T_CHECKF(got == (side == 0 ? probe : T),
                 "raw %g: penalized value is not exactly %g (probe at %d won: %d)", raw, e, probe,
                 got == probe);
        sampler_destroy(s);
    }
}

static void t_penalties(void) {
    const int32_t t4[] = {4}, t4x3[] = {4, 4, 4}, other[] = {1, 0}, oor[] = {-5, 99, 4};
    sample_params p = sample_params_default();
    /* repetition: positive logits divided, negative multiplied (llama.cpp) */
    p.repetition_penalty = 2.0;
    expect_penalized(p, t4, 1, NULL, 0, 3.0f, 1.5f);
    expect_penalized(p, t4, 1, NULL, 0, -3.0f, -6.0f);
    expect_penalized(p, NULL, 0, t4, 1, 3.0f, 1.5f);   /* generated tokens are context too */
    expect_penalized(p, t4x3, 3, NULL, 0, 3.0f, 1.5f); /* once, however often */
    p.repetition_penalty = 1.3;
    expect_penalized(p, t4, 1, NULL, 0, 1.0f, 1.0f / 1.3f);
    /* the window: only the last repeat_last_n context tokens count */
    const int32_t ctx[] = {4, 1, 3}; /* probes sit at ids 2 and 6 */
    p.repetition_penalty = 2.0, p.repeat_last_n = 2;
    expect_penalized(p, ctx, 3, NULL, 0, 3.0f, 3.0f);
    p.repeat_last_n = 3;
    expect_penalized(p, ctx, 3, NULL, 0, 3.0f, 1.5f);
    p.repeat_last_n = -1;
    expect_penalized(p, ctx, 3, NULL, 0, 3.0f, 1.5f);
    p.repeat_last_n = 0;
    expect_penalized(p, ctx, 3, NULL, 0, 3.0f, 3.0f);
    /* a window that has slid past the token; out-of-range tokens take a slot but nothing else */
    const int32_t slid[] = {4, 1, 0, 3, 5};
    p.repeat_last_n = 4;
    expect_penalized(p, slid, 5, NULL, 0, 3.0f, 3.0f);
    p.repeat_last_n = 2;
    expect_penalized(p, oor, 3, NULL, 0, 3.0f, 1.5f);
    expect_penalized(p, oor, 2, NULL, 0, 3.0f, 3.0f);
    /* frequency and presence: generated tokens only (OpenAI), count-weighted */
    p = sample_params_default();
    p.frequency_penalty = 0.5, p.presence_penalty = 0.25;
    expect_penalized(p, t4, 1, NULL, 0, 3.0f, 3.0f);
    expect_penalized(p, NULL, 0, t4, 1, 3.0f, 3.0f - 0.5f - 0.25f);
    expect_penalized(p, NULL, 0, t4x3, 3, 3.0f, 3.0f - 1.5f - 0.25f);
    expect_penalized(p, NULL, 0, other, 2, 3.0f, 3.0f);
    p.frequency_penalty = -1.0, p.presence_penalty = 0.0;
    expect_penalized(p, NULL, 0, t4x3, 3, -1.0f, 2.0f);
    /* all three, in vLLM's order: repetition first, then frequency, then presence */
    p.repetition_penalty = 2.0, p.repeat_last_n = -1, p.frequency_penalty = 0.5;
    p.presence_penalty = 0.25;
    expect_penalized(p, NULL, 0, t4x3, 3, 3.0f, (1.5f - 0.5f * 3.0f) - 0.25f);
    expect_penalized(p, NULL, 0, t4x3, 3, -3.0f, (-6.0f - 1.5f) - 0.25f);
}

static void t_penalty_changes_choice(void) {
    /* a penalized former maximum gives way; the new maximum is found among the rest */
    sample_params p = sample_params_default();
    p.temperature = 0.0, p.repetition_penalty = 4.0, p.repeat_last_n = -1;
    p.frequency_penalty = 1.0;
    const int n = 1000;
    float *l = malloc(sizeof(float) * n);
    T_CHECK(l);
    for (int i = 0; i < n; i++)
        l[i] = (float)(i % 97) * 0.01f;
    l[500] = 10.0f;
    l[600] = 3.0f;
    sampler *s = make(p, n);
    T_EQ_INT(sampler_sample(s, l, 0, NULL), 500);
    sampler_accept(s, 500); /* 10 -> 2.5 -> 1.5 */
    T_EQ_INT(sampler_sample(s, l, 1, NULL), 600);
    sampler_accept(s, 600); /* 3 -> .75 -> -.25 */
    T_EQ_INT(sampler_sample(s, l, 2, NULL), 500);
    sampler_reset(s);
    T_EQ_INT(sampler_sample(s, l, 3, NULL), 500);
    sampler_destroy(s);
    free(l);
}

/* ---- logprobs ---- */

static void t_logprobs(void) {
    enum { N = 20 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)((i * 7) % 5) * 0.5f - 1.0f; /* values repeat: ties */
    l[13] = -INFINITY;
    sample_params p = sample_params_default();
    p.n_logprobs = 20, p.temperature = 0.7, p.top_k = 3, p.seed = 5;
    sampler *s = make(p, N);
    sample_result r;
    int32_t tok = sampler_sample(s, l, 11, &r);
    T_EQ_INT(r.token, tok);
    T_EQ_INT(r.n_top, 20);
    double sum = 0.0;
    for (int k = 0; k < N; k++) {
        sum += exp(r.top[k].logprob);
        if (k > 0) {
            T_CHECK(r.top[k].logprob <= r.top[k - 1].logprob);
            if (l[r.top[k].token] == l[r.top[k - 1].token])
                T_CHECK(r.top[k].token > r.top[k - 1].token);
        }
        if (r.top[k].token == tok)
            T_CHECK(r.top[k].logprob == r.logprob);
    }
    T_CHECKF(fabs(sum - 1.0) < 1e-5, "probabilities sum to %.9f", sum);
    T_CHECK(r.top[N - 1].token == 13 && r.top[N - 1].logprob == -INFINITY);
    /* raw: temperature, truncation and penalties do not change them */
    sample_params q = sample_params_default();
    q.n_logprobs = 20, q.temperature = 0.0, q.repetition_penalty = 3.0;
    sampler *s2 = make(q, N);
    int32_t ctx[] = {0, 1, 2, 3, 4};
    sampler_accept_prompt(s2, ctx, 5);
    sample_result r2;
    sampler_sample(s2, l, 0, &r2);
    T_CHECK(memcmp(r.top, r2.top, sizeof r.top) == 0);
    /* log-softmax of known values */
    float two[2] = {0.0f, (float)log(3.0)};
    sample_params t = sample_params_default();
    t.n_logprobs = 2, t.temperature = 0.0;
    sampler *s3 = make(t, 2);
    sample_result r3;
    T_EQ_INT(sampler_sample(s3, two, 0, &r3), 1);
    T_CHECKF(fabs(r3.logprob - log(0.75)) < 1e-7, "logprob %g", r3.logprob);
    T_CHECK(r3.top[0].token == 1 && r3.top[1].token == 0);
    T_CHECKF(fabs(r3.top[1].logprob - log(0.25)) < 1e-7, "logprob %g", r3.top[1].logprob);
    /* fewer tokens than asked for */
    t.n_logprobs = 5;
    sampler *s4 = make(t, 2);
    sampler_sample(s4, two, 0, &r3);
    T_EQ_INT(r3.n_top, 2);
    sampler_destroy(s);
    sampler_destroy(s2);
    sampler_destroy(s3);
    sampler_destroy(s4);
}

/* ---- statistics ---- */

/* Chi-square statistic of counts against probabilities. */
static double chi_square(const int *count, const double *prob, int k, int n_draws) {
    double chi = 0.0;
    for (int i = 0; i < k; i++) {
        double want = prob[i] * n_draws;
        if (want > 0)
            chi += (count[i] - want) * (count[i] - want) / want;
        else if (count[i] > 0)
            return INFINITY;
    }
    return chi;
}

static void t_softmax_distribution(void) {
    enum { N = 8 };
    const float l[N] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.25f, 1.5f};
    const int draws = scaled(60000);
    struct {
        double temperature, top_p;
        int top_k;
    } cases[] = {{1.0, 1.0, 0}, {0.6, 1.0, 0}, {1.0, 1.0, 3}, {1.0, 0.7, 0}, {2.0, 0.9, 5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sample_params p = sample_params_default();
        p.temperature = cases[c].temperature, p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p, p.seed = 1000 + c;
        /* the expected distribution, computed here in long double */
        int order[N];
        for (int i = 0; i < N; i++)
            order[i] = i;
        for (int i = 0; i < N; i++) /* sort ids by logit descending (no ties here) */
            for (int j = i + 1; j < N; j++)
                if (l[order[j]] > l[order[i]]) {
                    int t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
        long double w[N], z = 0;
        for (int j = 0; j < N; j++)
            z += w[j] = expl((long double)(l[order[j]] - l[order[0]]) / p.temperature);
        int keep = p.top_k > 0 ? p.top_k : N;
        long double zk = 0;
        for (int j = 0; j < keep; j++)
            zk += w[j];
        if (p.top_p < 1.0) {
            long double cum = 0;
            int j = 0;
            while (j < keep && cum < p.top_p * zk)
                cum += w[j++];
            keep = j;
        }
        double prob[N] = {0};
        long double zkeep = 0;
        for (int j = 0; j < keep; j++)
            zkeep += w[j];
        for (int j = 0; j < keep; j++)
            prob[order[j]] = (double)(w[j] / zkeep);
        (void)z;
        sampler *s = make(p, N);
        int count[N] = {0};
        for (int pos = 0; pos < draws; pos++)
            count[sampler_sample(s, l, pos, NULL)]++;
        sampler_destroy(s);
        double chi = chi_square(count, prob, N, draws);
        /* 7 degrees of freedom at most: the 1e-6 tail starts near 37; fixed seeds, no flakes */
        T_CHECKF(chi < 40.0, "case %zu: chi-square %g", c, chi);
    }
}

/* ---- invariance (P1) ---- */

static void t_invariance_interleaving(void) {
    enum { NS = 4, STEPS = 24, NV = 20000 };
    sample_params ps[NS];
    for (int k = 0; k < NS; k++)
        ps[k] = sample_params_default();
    ps[0].temperature = 0.8, ps[0].top_p = 0.9, ps[0].seed = 1, ps[0].n_logprobs = 5;
    ps[1].temperature = 1.0, ps[1].seed = 2, ps[1].repetition_penalty = 1.2;
    ps[1].frequency_penalty = 0.4, ps[1].presence_penalty = 0.3;
    ps[2].temperature = 0.0, ps[2].n_logprobs = 3, ps[2].repetition_penalty = 1.5;
    ps[3].temperature = 1.4, ps[3].top_k = 50, ps[3].min_p = 0.02, ps[3].seed = 1;
    float *l = malloc(sizeof(float) * NV);
    T_CHECK(l);
    static sample_result want[NS][STEPS], got[NS][STEPS];
    const int32_t prompt[] = {5, 17, 5, 9000, 12};
    /* alone, one after the other */
    for (int k = 0; k < NS; k++) {
        sampler *s = make(ps[k], NV);
        sampler_accept_prompt(s, prompt, 5);
        for (int t = 0; t < STEPS; t++) {
            fill_logits(l, NV, (enum logit_shape)((k + t) % SHAPE_COUNT), 7000 + 100 * k + t);
            sampler_sample(s, l, t, &want[k][t]);
            sampler_accept(s, want[k][t].token);
        }
        sampler_destroy(s);
    }
    /* interleaved, in rotating orders, with strangers created, used and destroyed between */
    sampler *ss[NS];
    for (int k = NS - 1; k >= 0; k--) {
        ss[k] = make(ps[k], NV);
        sampler_accept_prompt(ss[k], prompt, 5);
    }
    for (int t = 0; t < STEPS; t++) {
        for (int q = 0; q < NS; q++) {
            int k = (t % 2 ? NS - 1 - q : q + t) % NS;
            if ((t + q) % 3 == 0) {
                sample_params sp = ps[(k + 1) % NS];
                sp.seed = 99;
                sampler *stranger = make(sp, NV);
                fill_logits(l, NV, SHAPE_FLAT, 5 + t);
                sample_result junk;
                for (int j = 0; j < 3; j++)
                    sampler_accept(stranger, sampler_sample(stranger, l, t, &junk));
                sampler_destroy(stranger);
            }
            fill_logits(l, NV, (enum logit_shape)((k + t) % SHAPE_COUNT), 7000 + 100 * k + t);
            sampler_sample(ss[k], l, t, &got[k][t]);
            sampler_accept(ss[k], got[k][t].token);
        }
    }
    for (int k = 0; k < NS; k++) {
        sampler_destroy(ss[k]);
        for (int t = 0; t < STEPS; t++)
            T_CHECKF(results_equal(&want[k][t], &got[k][t]), "sampler %d step %d differs", k, t);
    }
    free(l);
}

static void t_invariance_position(void) {
    /* the draw at position p does not depend on how many draws came before */
    enum { NV = 5000 };
    float *l = malloc(sizeof(float) * NV);
    T_CHECK(l);
    fill_logits(l, NV, SHAPE_FLAT, 3);
    sample_params p = sample_params_default();
    p.seed = 77;
    sampler *a = make(p, NV), *b = make(p, NV);
    int32_t seq[50];
    for (int pos = 0; pos < 50; pos++)
        seq[pos] = sampler_sample(a, l, pos, NULL);
    for (int pos = 49; pos >= 0; pos -= 7)
        T_EQ_INT(sampler_sample(b, l, pos, NULL), seq[pos]);
    int distinct = 0;
    for (int pos = 1; pos < 50; pos++)
        distinct += seq[pos] != seq[0];
    T_CHECK(distinct > 0); /* positions really draw differently */
    sampler_destroy(a);
    sampler_destroy(b);
    free(l);
}

/* ---- the weights pass: every variant gives the same bits ---- */

static void t_pass_variants(void) {
    if (!sample_pass_avx2_usable())
        test_skip("this CPU or build has no AVX2 variant to compare");
    enum { NMAX = 5003 };
    float *src = malloc(sizeof(float) * NMAX);
    uint64_t *ka = malloc(sizeof(uint64_t) * NMAX), *kb = malloc(sizeof(uint64_t) * NMAX);
    T_CHECK(src && ka && kb);
    for (int r = 0; r < 200; r++) {
        int n = 1 + (int)(rng_u64(50, (uint64_t)r) % NMAX);
        fill_logits(src, n, (enum logit_shape)(r % SHAPE_COUNT), 600 + (uint64_t)r);
        float m = -INFINITY;
        for (int i = 0; i < n; i++)
            m = sample_logit_sanitize(src[i]) > m ? sample_logit_sanitize(src[i]) : m;
        if (m == -INFINITY)
            continue;
        double inv_t = r % 3 == 0 ? 1.0 : 1.0 / (0.1 + 3.0 * rng_uniform(51, (uint64_t)r));
        uint64_t spec = (uint64_t)(r % 4) * 300;
        int32_t na = -1, nb = -2;
        double za = sample_pass_weights(src, n, m, inv_t, spec, ka, &na);
        double zb = sample_pass_weights_avx2(src, n, m, inv_t, spec, kb, &nb);
        T_CHECKF(memcmp(&za, &zb, sizeof za) == 0, "round %d: Z %.17g vs %.17g", r, za, zb);
        T_EQ_INT(na, nb);
        T_CHECKF(memcmp(ka, kb, sizeof(uint64_t) * (size_t)na) == 0, "round %d: keys", r);
    }
    free(src);
    free(ka);
    free(kb);
}

static void t_isa_toggle(void) {
    /* the isa toggle changes speed only: whole sampler results match */
    enum { NV = 30000 };
    float *l = malloc(sizeof(float) * NV);
    T_CHECK(l);
    sample_params p = sample_params_default();
    p.temperature = 0.9, p.top_p = 0.95, p.n_logprobs = 4, p.seed = 8;
    sample_result a[12], b[12];
    const char *old = flags_str(FLAG_ISA);
    char saved[32];
    snprintf(saved, sizeof saved, "%s", old);
    for (int pass = 0; pass < 2; pass++) {
        T_OK(flags_set("isa", pass == 0 ? "scalar" : "auto"));
        sampler *s = make(p, NV);
        for (int t = 0; t < 12; t++) {
            fill_logits(l, NV, (enum logit_shape)(t % SHAPE_COUNT), 4400 + (uint64_t)t);
            sampler_sample(s, l, t, pass == 0 ? &a[t] : &b[t]);
        }
        sampler_destroy(s);
    }
    T_OK(flags_set("isa", saved));
    for (int t = 0; t < 12; t++)
        T_CHECKF(results_equal(&a[t], &b[t]), "step %d differs between isa scalar and auto", t);
    free(l);
}

static void t_reset(void) {
    /* after a reset, a sampler behaves like a new one, in every history mode */
    static const int32_t modes[] = {-1, 3, 64};
    enum { NV = 50 };
    float l[NV];
    for (int i = 0; i < NV; i++)
        l[i] = (float)(i % 7) * 0.3f;
    l[9] = 5.0f;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        sample_params p = sample_params_default();
        p.temperature = 0.0, p.repetition_penalty = 8.0, p.repeat_last_n = modes[m];
        p.frequency_penalty = 1.0;
        sampler *s = make(p, NV);
        const int32_t prompt[] = {9, 9, 3, 60, -1};
        sampler_accept_prompt(s, prompt, 5);
        sampler_accept(s, 9);
        T_CHECK(sampler_sample(s, l, 0, NULL) != 9);
        sampler_reset(s);
        T_EQ_INT(sampler_sample(s, l, 0, NULL), 9);
        sampler_accept_prompt(s, prompt, 2);
        T_CHECK(sampler_sample(s, l, 0, NULL) != 9);
        sampler_destroy(s);
    }
}

static void t_no_allocation(void) {
#ifndef COUNT_ALLOCS
    test_skip("allocation counting needs glibc and a build without sanitizers");
#else
    enum { NV = 40000 };
    float *l = malloc(sizeof(float) * NV);
    T_CHECK(l);
    sample_params ps[6];
    for (int k = 0; k < 6; k++)
        ps[k] = sample_params_default();
    ps[0].temperature = 0.0;
    ps[1].temperature = 0.0, ps[1].repetition_penalty = 1.3, ps[1].n_logprobs = 20;
    ps[2].top_p = 0.9, ps[2].temperature = 0.8, ps[2].frequency_penalty = 0.5;
    ps[3].top_k = 40, ps[3].min_p = 0.1, ps[3].repeat_last_n = -1, ps[3].repetition_penalty = 1.1;
    ps[4].top_p = 0.999, ps[4].presence_penalty = 1.0, ps[4].n_logprobs = 3; /* flat: deep */
    ps[5].temperature = 3.0, ps[5].top_k = NV / 2, ps[5].repeat_last_n = 8;
    ps[5].repetition_penalty = 0.8;
    sampler *s[6];
    alloc_calls = 0;
    alloc_counting = true;
    for (int k = 0; k < 6; k++)
        s[k] = make(ps[k], NV);
    alloc_counting = false;
    T_CHECKF(alloc_calls >= 6, "the counter saw only %ld calls in sampler_create", alloc_calls);
    const int32_t prompt[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -3};
    sample_result r;
    alloc_calls = 0;
    alloc_counting = true;
    for (int t = 0; t < 6; t++) {
        for (int k = 0; k < 6; k++) {
            alloc_counting = false; /* filling the logits is not the sampler's business */
            fill_logits(l, NV, (enum logit_shape)((t + k) % SHAPE_COUNT), 50 + (uint64_t)t);
            alloc_counting = true;
            if (t == 0)
                sampler_accept_prompt(s[k], prompt, 11);
            sampler_accept(s[k], sampler_sample(s[k], l, t, t % 2 ? &r : NULL));
            if (t == 4)
                sampler_reset(s[k]);
        }
    }
    alloc_counting = false;
    for (int k = 0; k < 6; k++)
        sampler_destroy(s[k]);
    free(l);
    T_CHECKF(alloc_calls == 0, "sampling made %ld allocator calls", alloc_calls);
#endif
}

/* ---- the fast sampler against the full-sort reference ---- */

static void t_against_reference(void) {
    static const int vocabs[] = {1, 2, 3, 7, 8, 9, 64, 257, 1000, 4099, 32000};
    static const double temps[] = {0.0, 1e-6, 0.05, 0.3, 0.8, 1.0, 1.7, 8.0};
    static const double top_ps[] = {1.0, 0.9, 0.5, 1e-9, 0.999, 0.99999};
    static const double min_ps[] = {0.0, 0.0, 0.05, 0.5, 1.0, 1e-8};
    const int rounds = scaled(1200);
    float *l = malloc(sizeof(float) * 32000);
    int32_t ctx[80], gen[60];
    T_CHECK(l);
    for (int r = 0; r < rounds; r++) {
        uint64_t h = rng_u64(424242, (uint64_t)r);
        int n = vocabs[h % (sizeof vocabs / sizeof vocabs[0])];
        if (n == 32000 && r % 4 != 0)
            n = 2000;
        h >>= 8;
        sample_params p = sample_params_default();
        p.temperature = temps[h % 8], h >>= 3;
        int kk = (int)(h % 8);
        h >>= 3;
        p.top_k = kk < 3 ? 0 : kk == 3 ? 1 : kk == 4 ? 5 : kk == 5 ? 40 : kk == 6 ? n - 1 : n + 3;
        if (p.top_k < 0)
            p.top_k = 0;
        p.top_p = top_ps[h % 6], h >>= 3;
        p.min_p = min_ps[h % 6], h >>= 3;
        if (h % 3 == 0) {
            p.repetition_penalty = h % 2 ? 1.3 : 0.7;
            p.repeat_last_n = (int)((h >> 2) % 4) * 8 - 1;
        }
        h >>= 4;
        if (h % 3 == 0) {
            p.frequency_penalty = (double)(h % 5) * 0.5 - 1.0;
            p.presence_penalty = (double)((h >> 3) % 5) * 0.5 - 1.0;
        }
        h >>= 6;
        p.n_logprobs = (int)(h % 4) * 7 - 1;
        if (p.n_logprobs < 0)
            p.n_logprobs = 0;
        p.seed = rng_u64(1, (uint64_t)r);
        enum logit_shape shape = (enum logit_shape)(r % SHAPE_COUNT);
        fill_logits(l, n, shape, 9000 + (uint64_t)r);
        if (r % 50 == 7)
            for (int i = 0; i < n; i++)
                l[i] = -INFINITY;
        int n_prompt = (int)(rng_u64(2, (uint64_t)r) % 40), n_gen = (int)(rng_u64(3, r) % 40);
        for (int i = 0; i < n_prompt; i++)
            ctx[i] = (int32_t)(rng_u64(4, (uint64_t)(r * 100 + i)) % (uint64_t)(n + 1)) - (i == 3);
        for (int i = 0; i < n_gen; i++)
            gen[i] = ctx[n_prompt + i] =
                (int32_t)(rng_u64(5, (uint64_t)(r * 100 + i)) % (uint64_t)n);
        int64_t pos = (int64_t)(rng_u64(6, (uint64_t)r) % 5000);

        sampler *s = make(p, n);
        sampler_accept_prompt(s, ctx, n_prompt);
        for (int i = 0; i < n_gen; i++)
            sampler_accept(s, gen[i]);
        sample_result got, want;
        int32_t tok = sampler_sample(s, l, pos, &got);
        int32_t ref = ref_sample(&p, n, l, ctx, n_prompt + n_gen, gen, n_gen, pos, &want);
        sampler_destroy(s);
        T_CHECKF(tok == ref && got.token == tok,
                 "round %d (n %d T %g k %d p %g minp %g shape %d): token %d, reference %d", r, n,
                 p.temperature, (int)p.top_k, p.top_p, p.min_p, (int)shape, tok, ref);
        T_CHECKF(results_equal(&got, &want), "round %d: logprobs differ (%.9g vs %.9g)", r,
                 got.logprob, want.logprob);
    }
    free(l);
}

static void t_reference_large_vocab(void) {
    /* the sizes that matter, each shape, the common configurations */
    enum { NV = 152064 };
    float *l = malloc(sizeof(float) * NV);
    T_CHECK(l);
    const int rounds = scaled(24);
    for (int r = 0; r < rounds; r++) {
        sample_params p = sample_params_default();
        p.temperature = r % 3 == 0 ? 0.8 : r % 3 == 1 ? 1.0 : 0.6;
        p.top_p = r % 2 ? 0.9 : 1.0;
        p.top_k = r % 4 == 3 ? 40 : 0;
        p.min_p = r % 5 == 4 ? 0.05 : 0.0;
        p.n_logprobs = r % 2 ? 5 : 0;
        p.seed = (uint64_t)r * 31;
        fill_logits(l, NV, (enum logit_shape)(r % SHAPE_COUNT), 31337 + (uint64_t)r);
        sampler *s = make(p, NV);
        sample_result got, want;
        sampler_sample(s, l, r, &got);
        ref_sample(&p, NV, l, NULL, 0, NULL, 0, r, &want);
        sampler_destroy(s);
        T_CHECKF(results_equal(&got, &want), "round %d: token %d, reference %d", r, got.token,
                 want.token);
    }
    free(l);
}

int main(void) {
    test_run("sample.rng_known_answers", t_rng_known_answers);
    test_run("sample.rng_uniformity", t_rng_uniformity);
    test_run("sample.rng_distinct", t_rng_distinct);
    test_run("sample.math_exp_log", t_math_exp_log);
    test_run("sample.math_keys", t_math_keys);
    test_run("sample.params_validate", t_params_validate);
    test_run("sample.greedy_ties", t_greedy_ties);
    test_run("sample.truncation_equals_greedy", t_truncation_equals_greedy);
    test_run("sample.min_p", t_min_p);
    test_run("sample.penalties", t_penalties);
    test_run("sample.penalty_changes_choice", t_penalty_changes_choice);
    test_run("sample.logprobs", t_logprobs);
    test_run("sample.softmax_distribution", t_softmax_distribution);
    test_run("sample.invariance_interleaving", t_invariance_interleaving);
    test_run("sample.invariance_position", t_invariance_position);
    test_run("sample.pass_variants", t_pass_variants);
    test_run("sample.isa_toggle", t_isa_toggle);
    test_run("sample.reset", t_reset);
    test_run("sample.no_allocation", t_no_allocation);
    test_run("sample.against_reference", t_against_reference);
    test_run("sample.reference_large_vocab", t_reference_large_vocab);
    return test_summary();
}
