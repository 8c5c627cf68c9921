/* SPDX-License-Identifier: MIT */
/*
 * quant_ref: an independent check of quantized GGUF files for tests/cli/quantize.sh. Not part of
 * verity. It dequantizes with its own code, written from the block formats (llama.cpp's
 * ggml-common.h layouts, restated in src/kernels/kn_types.h) and converting f16 from the IEEE
 * binary16 definition, so it shares no quantization code with the engine (only the GGUF reader
 * and writer).
 *
 *   quant_ref compare [--exact] REF.gguf Q.gguf
 *     Every tensor of Q is dequantized and compared with the same tensor of REF (dequantized too
 *     when it is not F32). Without --exact, each element must be where the format's rounding
 *     rule puts it (the bound): F32 tensors identical; F16 and BF16 the round-to-nearest-even of
 *     the source; block types the grid point of its block nearest the source (the grid read from
 *     the block: base + code * step), within half a step, plus, for the 32-element types whose
 *     scale is rounded to f16 after the codes are chosen, (|code| + 1) * step * 2^-10 (and
 *     |min| * 2^-10 for the types with a min); at the ends of a grid, Q4_0 and Q5_0 may clamp the
 * top code by one step, and the K-quants may clamp a source beyond the grid's end to that end
 *     (their fit clips on purpose); K-quant sub-blocks whose 6-bit scale rounded to 0 carry no
 *     grid and are only counted. With --exact, every element must equal the source exactly.
 *
 *   quant_ref grid SRC.gguf TYPED.gguf OUT.gguf
 *     Writes OUT: SRC's metadata and tensors (all F32), where every tensor that TYPED holds in a
 *     quantized type T is replaced by nearby values exactly representable in T, chosen so that
 *     the quantizer's own scale rule finds them: per block a power-of-two scale (and min) with the
 *     codes at both ends of the range present, the K-quants' sub-block scales and mins on their
 *     6-bit (Q6_K: 8-bit) grids with the largest at the top code. Quantizing OUT to T must then
 *     give back OUT's values exactly (compare --exact).
 *
 * Exit status: 0 all within the rule, 1 an element is not (the first few are printed on stderr),
 * 2 bad input (a file, a tensor missing or of a type this tool does not know).
 */
#include "base/err.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- element conversions (independent of src/kernels) ---- */

/* The value of the IEEE binary16 number stored little-endian at p (finite: sign, 5-bit exponent
 * biased by 15, 10-bit fraction; exponent 0 is subnormal, fraction * 2^-24). */
static float qr_f16(const uint8_t *p) {
    unsigned h = (unsigned)(p[0] | p[1] << 8), ex = (h >> 10) & 31, fr = h & 1023;
    double v = ex == 0    ? ldexp((double)fr, -24)
               : ex == 31 ? (fr ? NAN : INFINITY)
                          : ldexp((double)(1024 + fr), (int)ex - 25);
    return (float)(h & 0x8000 ? -v : v);
}

/* x rounded to the nearest binary16 value, ties to even (rint in the default rounding mode), as
 * a float; |x| beyond the largest finite one (65504) does not occur here. */
static float qr_round_f16(float x) {
    double a = fabs((double)x);
    if (a == 0)
        return x;
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): the binade's ulp is 2^(e - 11) */
    int ulp = e - 11 < -24 ? -24 : e - 11;
    double v = ldexp(rint(ldexp(a, -ulp)), ulp);
    return (float)(x < 0 ? -v : v);
}

static float qr_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t qr_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* bf16 of a finite float, rounded to nearest even */
static float qr_round_bf16(float x) {
    uint32_t u = qr_f32_bits(x);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return qr_bits_f32(u & 0xFFFF0000u);
}

/* ---- dequantization, one element at a time, with its grid ----
 * An element of a block type is base + code * step (code in 0..code_max); code_tol is the extra
 * tolerance per unit of |code - code_zero| in steps and base_tol that per unit of |base| (f16
 * rounding of scales chosen before it); clamp_top: the top code may be a step off (Q4_0, Q5_0);
 * clip_ends: a source beyond the grid's end may sit on that end (the K-quants). */
typedef struct qr_elem {
    float v;
    float base, step;
    int code, code_max, code_zero;
    double code_tol, base_tol;
    bool clamp_top, clip_ends, no_grid;
} qr_elem;

typedef struct qr_type {
    int type;
    int block;       /* elements per block */
    int block_bytes; /* bytes per block */
} qr_type;

static const qr_type qr_types[] = {
    {GGUF_TYPE_F32, 1, 4},      {GGUF_TYPE_F16, 1, 2},      {GGUF_TYPE_BF16, 1, 2},
    {GGUF_TYPE_Q8_0, 32, 34},   {GGUF_TYPE_Q4_0, 32, 18},   {GGUF_TYPE_Q4_1, 32, 20},
    {GGUF_TYPE_Q5_0, 32, 22},   {GGUF_TYPE_Q5_1, 32, 24},   {GGUF_TYPE_Q4_K, 256, 144},
    {GGUF_TYPE_Q5_K, 256, 176}, {GGUF_TYPE_Q6_K, 256, 210},
};

static const qr_type *qr_type_find(int type) {
    for (size_t i = 0; i < sizeof qr_types / sizeof *qr_types; i++)
        if (qr_types[i].type == type)
            return &qr_types[i];
    return NULL;
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes. */
static void qr_k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Element i of the block at b (of type t). */
static qr_elem qr_elem_at(int type, const uint8_t *b, int i) {
    qr_elem e = {0};
    switch (type) {
    case GGUF_TYPE_F32:
        memcpy(&e.v, b, 4);
        break;
    case GGUF_TYPE_F16:
        e.v = qr_f16(b);
        break;
    case GGUF_TYPE_BF16:
        e.v = qr_bits_f32((uint32_t)(b[0] | b[1] << 8) << 16);
        break;
    case GGUF_TYPE_Q8_0: {
        e.step = qr_f16(b);
        e.code = (int8_t)b[2 + i] + 128;
        e.code_zero = 128, e.code_max = 255;
        e.base = -128.0f * e.step;
        e.v = (float)(int8_t)b[2 + i] * e.step;
        e.code_tol = 0x1p-10;
        break;
    }
    case GGUF_TYPE_Q4_0:
    case GGUF_TYPE_Q5_0: {
        bool five = type == GGUF_TYPE_Q5_0;
        const uint8_t *qs = b + (five ? 6 : 2);
        int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
        if (five) {
            uint32_t qh =
                (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
            q |= (int)((qh >> i) & 1) << 4;
        }
        int half = five ? 16 : 8;
        e.step = qr_f16(b);
        e.code = q, e.code_max = 2 * half - 1, e.code_zero = half;
        e.base = (float)-half * e.step;
        e.v = (float)(q - half) * e.step;
        e.code_tol = 0x1p-10;
        e.clamp_top = true;
        break;
    }
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q5_1: {
        bool five = type == GGUF_TYPE_Q5_1;
        const uint8_t *qs = b + (five ? 8 : 4);
        int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
        if (five) {
            uint32_t qh =
                (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
            q |= (int)((qh >> i) & 1) << 4;
        }
        e.step = qr_f16(b);
        e.base = qr_f16(b + 2);
        e.code = q, e.code_max = five ? 31 : 15, e.code_zero = 0;
        e.v = (float)q * e.step + e.base;
        e.code_tol = 0x1p-10, e.base_tol = 0x1p-10;
        break;
    }
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q5_K: {
        bool five = type == GGUF_TYPE_Q5_K;
        float d = qr_f16(b), dmin = qr_f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
        int p = i / 64, hi = (i % 64) / 32, l = i % 32, j = 2 * p + hi, sc, mn;
        qr_k_scale_min(scales, j, &sc, &mn);
        int q = hi ? qs[32 * p + l] >> 4 : qs[32 * p + l] & 15;
        if (five && (qh[l] >> (2 * p + hi) & 1))
            q += 16;
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        e.v = d1 * (float)q - m1;
        e.step = d1, e.base = -m1;
        e.code = q, e.code_max = five ? 31 : 15, e.code_zero = 0;
        e.clip_ends = true;
        e.no_grid = sc == 0;
        break;
    }
    case GGUF_TYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = qr_f16(b + 208);
        int h = i / 128, r = i % 128, t = r / 32, l = r % 32;
        int lo = (t & 1) ? ql[64 * h + l + 32] : ql[64 * h + l];
        lo = (t >> 1) ? lo >> 4 : lo & 15;
        int q = lo | ((qh[32 * h + l] >> (2 * t)) & 3) << 4;
        float dj = d * (float)sc[8 * h + l / 16 + 2 * t];
        e.v = dj * (float)(q - 32);
        e.step = dj, e.base = -32.0f * dj;
        e.code = q, e.code_max = 63, e.code_zero = 32;
        e.clip_ends = true;
        e.no_grid = dj == 0.0f;
        break;
    }
    }
    return e;
}

/* Dequantizes tensor t into a new array of n elements (NULL on a type this tool does not know). */
static float *qr_dequant(const gguf_tensor *t, int64_t *n_out) {
    const qr_type *qt = qr_type_find(t->type);
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->ne[d];
    *n_out = n;
    if (!qt || n % qt->block)
        return NULL;
    float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    if (!y)
        return NULL;
    const uint8_t *p = t->data;
    for (int64_t k = 0; k < n / qt->block; k++, p += qt->block_bytes)
        for (int i = 0; i < qt->block; i++)
            y[k * qt->block + i] = qr_elem_at(t->type, p, i).v;
    return y;
}

/* ---- compare ---- */

typedef struct qr_stats {
    int64_t elements, clipped, no_grid, bad;
    double worst; /* largest |error| in steps among block-type elements */
    char worst_tensor[96];
} qr_stats;

static void qr_report(qr_stats *s, const char *tensor, int64_t idx, float x, float v,
                      const char *why) {
    if (s->bad++ < 5)
        fprintf(stderr,
                "quant_ref: tensor %s element %lld: source %.9g, quantized %.9g (error %.3g): "
                "%s\n",
                tensor, (long long)idx, (double)x, (double)v, (double)(v - x), why);
}

/* Checks element idx (value e, source x) against the rule of its type. */
static void qr_check(qr_stats *s, int type, const char *tensor, int64_t idx, float x, qr_elem e,
                     bool exact) {
    s->elements++;
    char why[160];
    if (exact || type == GGUF_TYPE_F32) {
        if (!(e.v == x)) /* +0 and -0 are the same value */
            qr_report(s, tensor, idx, x, e.v, exact ? "not exactly the source" : "F32 changed");
        return;
    }
    if (type == GGUF_TYPE_F16 || type == GGUF_TYPE_BF16) {
        float want = type == GGUF_TYPE_F16 ? qr_round_f16(x) : qr_round_bf16(x);
        if (!(e.v == want)) {
            snprintf(why, sizeof why, "not the nearest %s (%.9g)",
                     type == GGUF_TYPE_F16 ? "f16" : "bf16", (double)want);
            qr_report(s, tensor, idx, x, e.v, why);
        }
        return;
    }
    if (e.no_grid) {
        s->no_grid++;
        return;
    }
    double step = fabs((double)e.step), err = fabs((double)e.v - (double)x);
    /* float rounding of the quantizer's own arithmetic */
    double eps = 0x1p-20 * (fabs((double)x) + fabs((double)e.base) + step * e.code_max);
    /* a scale rounded to f16 after the codes were chosen moves the midpoint between codes k and
     * k + 1 by (|k| + 1/2) * |d - f16(d)| <= (|k| + 1/2) * d * 2^-11; code_tol is 2^-10 */
    double bound = step * (0.5 + e.code_tol * (abs(e.code - e.code_zero) + 1)) +
                   e.base_tol * fabs((double)e.base) + eps;
    if (step > 0 && err / step > s->worst) {
        s->worst = err / step;
        snprintf(s->worst_tensor, sizeof s->worst_tensor, "%s", tensor);
    }
    if (err <= bound)
        return;
    if (e.clamp_top && e.code == e.code_max && err <= step * (1.0 + e.code_tol * e.code_max) + eps)
        return;
    if (e.clip_ends && step > 0) {
        /* the source's position on the grid, in codes: beyond the end the element sits on? */
        double t = ((double)x - (double)e.base) / (double)e.step;
        if ((e.code == 0 && t < 0) || (e.code == e.code_max && t > e.code_max)) {
            s->clipped++;
            return;
        }
    }
    snprintf(why, sizeof why,
             "off its grid's nearest point (code %d of 0..%d, step %.6g, bound %.6g)", e.code,
             e.code_max, (double)e.step, bound);
    qr_report(s, tensor, idx, x, e.v, why);
}

static int qr_compare(const char *ref_path, const char *q_path, bool exact) {
    gguf *ref = NULL, *q = NULL;
    if (gguf_open(ref_path, &ref) != 0 || gguf_open(q_path, &q) != 0) {
        fprintf(stderr, "quant_ref: %s\n", err_detail());
        gguf_close(ref);
        return 2;
    }
    qr_stats s = {0};
    int status = 0;
    int64_t n_t = gguf_n_tensors(q);
    if (n_t == 0 || n_t != gguf_n_tensors(ref)) {
        fprintf(stderr, "quant_ref: %s has %lld tensors, %s %lld\n", q_path, (long long)n_t,
                ref_path, (long long)gguf_n_tensors(ref));
        status = 2;
    }
    for (int64_t ti = 0; ti < n_t && status != 2; ti++) {
        const gguf_tensor *tq = gguf_tensor_at(q, ti);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)tq->name.len, tq->name.s);
        const gguf_tensor *tr = gguf_find_tensor(ref, name);
        const qr_type *qt = qr_type_find(tq->type);
        int64_t n = 0;
        float *x = tr ? qr_dequant(tr, &n) : NULL;
        bool same_shape = tr && tr->n_dims == tq->n_dims;
        for (uint32_t d = 0; same_shape && d < tq->n_dims; d++)
            same_shape = tr->ne[d] == tq->ne[d];
        if (!tr || !qt || !x || !same_shape || n % qt->block) {
            fprintf(stderr, "quant_ref: tensor %s: %s\n", name,
                    !tr           ? "not in the reference"
                    : !qt         ? "a type this tool does not know"
                    : !x          ? "the reference's type is unknown (or out of memory)"
                    : !same_shape ? "shapes differ"
                                  : "not whole blocks");
            free(x);
            status = 2;
            break;
        }
        const uint8_t *p = tq->data;
        for (int64_t k = 0; k < n / qt->block; k++, p += qt->block_bytes)
            for (int i = 0; i < qt->block; i++) {
                int64_t idx = k * qt->block + i;
                qr_check(&s, tq->type, name, idx, x[idx], qr_elem_at(tq->type, p, i), exact);
            }
        free(x);
    }
    if (status == 0 && s.bad)
        status = 1;
    if (status != 2)
        printf("quant_ref: %s vs %s: %lld tensors, %lld elements, %lld off the rule%s; largest "
               "error %.3f steps (%s), %lld clipped at a grid end, %lld without a grid\n",
               q_path, ref_path, (long long)n_t, (long long)s.elements, (long long)s.bad,
               exact ? " (exact)" : "", s.worst, s.worst_tensor[0] ? s.worst_tensor : "-",
               (long long)s.clipped, (long long)s.no_grid);
    gguf_close(ref);
    gguf_close(q);
    return status;
}

/* ---- grid ---- */

/* The largest power of two <= x (x > 0), with its exponent kept where f16 holds it exactly. */
static float qr_pow2_below(double x) {
    int e = x > 0 ? (int)floor(log2(x)) : -14;
    if (e < -14)
        e = -14;
    if (e > 10)
        e = 10;
    return ldexpf(1.0f, e);
}

static int qr_clampi(long v, long lo, long hi) {
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

/* Indices of the smallest and largest of x[0..n), distinct when n > 1. */
static void qr_argminmax(const float *x, int n, int *imin, int *imax) {
    int a = 0, b = 0;
    for (int i = 1; i < n; i++) {
        if (x[i] < x[a])
            a = i;
        if (x[i] > x[b])
            b = i;
    }
    if (a == b)
        b = a == 0 ? 1 : 0;
    *imin = a;
    *imax = b;
}

/* One Q8_0 block: values q * d, q in -127..127, the largest magnitude at +-127 (the scale rule is
 * amax / 127). */
static void qr_grid_q8(float *x) {
    int imin, imax;
    qr_argminmax(x, 32, &imin, &imax);
    int top = fabs(x[imin]) >= fabs(x[imax]) ? imin : imax;
    float d = qr_pow2_below(fabs(x[top]) / 127.0);
    for (int i = 0; i < 32; i++) {
        int q = i == top ? (x[top] < 0 ? -127 : 127) : qr_clampi(lrint(x[i] / d), -127, 127);
        x[i] = (float)q * d;
    }
}

/* One 32-element block of Q4_0 / Q5_0: values (q - half) * d, q in 0..2 half - 1, the largest
 * magnitude alone at code 0 (the scale rule is max / -half). */
static void qr_grid_sym(float *x, int half) {
    int imin, imax;
    qr_argminmax(x, 32, &imin, &imax);
    double amax = fmax(fabs(x[imin]), fabs(x[imax]));
    float d = qr_pow2_below(amax / half);
    int neg = fabs(x[imin]) >= fabs(x[imax]) ? imin : imax; /* becomes -half * d */
    float sgn = x[neg] < 0 ? 1.0f : -1.0f;                  /* d's sign: -half * d has x's sign */
    d *= sgn;
    for (int i = 0; i < 32; i++) {
        int q = i == neg ? 0 : qr_clampi(lrint(x[i] / d) + half, 1, 2 * half - 1);
        x[i] = (float)(q - half) * d;
    }
}

/* One 32-element block with a min: values m + q * d, codes 0 and qmax present. */
static void qr_grid_min(float *x, int qmax) {
    int imin, imax;
    qr_argminmax(x, 32, &imin, &imax);
    float d = qr_pow2_below(((double)x[imax] - x[imin]) / qmax);
    int k = qr_clampi(lrint(floor(x[imin] / d)), -1024, 1024); /* m = k * d, exact in f16 */
    float m = (float)k * d;
    for (int i = 0; i < 32; i++) {
        int q = i == imin ? 0 : i == imax ? qmax : qr_clampi(lrint((x[i] - m) / d), 0, qmax);
        x[i] = (float)q * d + m;
    }
}

/* One 256-element super-block of Q4_K / Q5_K: values (d * sc_j) * L - dmin * m_j. */
static void qr_grid_k(float *x, int nmax) {
    double rng[8], neg_min[8], rmax = 0, mmax = 0;
    int jr = 0, jm = 0;
    for (int j = 0; j < 8; j++) {
        int a, b;
        qr_argminmax(x + 32 * j, 32, &a, &b);
        double lo = fmin(x[32 * j + a], 0.0);
        rng[j] = x[32 * j + b] - lo;
        neg_min[j] = -lo;
        if (rng[j] > rmax)
            rmax = rng[j], jr = j;
        if (neg_min[j] > mmax)
            mmax = neg_min[j], jm = j;
    }
    float d = qr_pow2_below(rmax / (63.0 * nmax)), dmin = qr_pow2_below(mmax / 63.0);
    for (int j = 0; j < 8; j++) {
        float *xs = x + 32 * j;
        int sc = j == jr ? 63 : qr_clampi(lrint(rng[j] / (nmax * (double)d)), 1, 63);
        int m = j == jm ? 63 : qr_clampi(lrint(neg_min[j] / dmin), 0, 63);
        if (mmax == 0)
            m = 0;
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        int a, b;
        qr_argminmax(xs, 32, &a, &b);
        for (int i = 0; i < 32; i++) {
            int q = i == a ? 0 : i == b ? nmax : qr_clampi(lrint((xs[i] + m1) / d1), 0, nmax);
            xs[i] = d1 * (float)q - m1;
        }
    }
}

/* One 256-element super-block of Q6_K: values (d * sc_j) * (q - 32), one sub-block at sc -128. */
static void qr_grid_q6k(float *x) {
    double amax[16], top = 0;
    int arg[16], jt = 0;
    for (int j = 0; j < 16; j++) {
        amax[j] = 0, arg[j] = 0;
        for (int i = 0; i < 16; i++)
            if (fabs(x[16 * j + i]) > amax[j])
                amax[j] = fabs(x[16 * j + i]), arg[j] = i;
        if (amax[j] > top)
            top = amax[j], jt = j;
    }
    float d = qr_pow2_below(top / (32.0 * 128.0));
    for (int j = 0; j < 16; j++) {
        float *xs = x + 16 * j;
        /* the element of largest magnitude takes code -32, so its scale's sign is -sign(x) */
        int mag = qr_clampi(lrint(amax[j] / (32.0 * d)), 1, 127);
        int sc = j == jt ? -128 : xs[arg[j]] < 0 ? mag : -mag;
        float dj = d * (float)sc;
        for (int i = 0; i < 16; i++) {
            int q = i == arg[j] ? -32 : qr_clampi(lrint(xs[i] / dj), -31, 31);
            xs[i] = dj * (float)q;
        }
    }
}

static int qr_grid(const char *src_path, const char *typed_path, const char *out_path) {
    gguf *src = NULL, *typed = NULL;
    if (gguf_open(src_path, &src) != 0 || gguf_open(typed_path, &typed) != 0) {
        fprintf(stderr, "quant_ref: %s\n", err_detail());
        gguf_close(src);
        return 2;
    }
    gguf_writer *w = gguf_writer_create();
    int rc = w ? 0 : ERR_NOMEM;
    for (int64_t i = 0; i < gguf_n_kv(src) && rc == 0; i++)
        rc = gguf_writer_copy_kv(w, src, i);
    for (int64_t ti = 0; ti < gguf_n_tensors(src) && rc == 0; ti++) {
        const gguf_tensor *t = gguf_tensor_at(src, ti);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.s);
        const gguf_tensor *tt = gguf_find_tensor(typed, name);
        if (t->type != GGUF_TYPE_F32 || !tt) {
            fprintf(stderr, "quant_ref: tensor %s: %s\n", name,
                    tt ? "the source must be F32" : "not in the typed file");
            rc = ERR_INVAL;
            break;
        }
        int64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= t->ne[d];
        float *x = malloc((size_t)n * sizeof *x);
        if (!x) {
            rc = ERR_NOMEM;
            break;
        }
        memcpy(x, t->data, (size_t)n * sizeof *x);
        const qr_type *qt = qr_type_find(tt->type);
        if (!qt || n % qt->block) {
            fprintf(stderr, "quant_ref: tensor %s: type %s is not one this tool knows\n", name,
                    kn_type_name(tt->type) ? kn_type_name(tt->type) : "?");
            free(x);
            rc = ERR_INVAL;
            break;
        }
        for (int64_t k = 0; k < n / qt->block; k++) {
            float *xb = x + k * qt->block;
            switch (tt->type) {
            case GGUF_TYPE_F16:
                xb[0] = qr_round_f16(xb[0]);
                break;
            case GGUF_TYPE_BF16:
                xb[0] = qr_round_bf16(xb[0]);
                break;
            case GGUF_TYPE_Q8_0:
                qr_grid_q8(xb);
                break;
            case GGUF_TYPE_Q4_0:
                qr_grid_sym(xb, 8);
                break;
            case GGUF_TYPE_Q5_0:
                qr_grid_sym(xb, 16);
                break;
            case GGUF_TYPE_Q4_1:
                qr_grid_min(xb, 15);
                break;
            case GGUF_TYPE_Q5_1:
                qr_grid_min(xb, 31);
                break;
            case GGUF_TYPE_Q4_K:
                qr_grid_k(xb, 15);
                break;
            case GGUF_TYPE_Q5_K:
                qr_grid_k(xb, 31);
                break;
            case GGUF_TYPE_Q6_K:
                qr_grid_q6k(xb);
                break;
            default: /* F32 stays */
                break;
            }
        }
        rc = gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, t->n_dims, t->ne, x, false);
        free(x);
    }
    if (rc == 0)
        rc = gguf_writer_write(w, out_path);
    if (rc != 0)
        fprintf(stderr, "quant_ref: grid: %s\n", err_detail());
    gguf_writer_destroy(w);
    gguf_close(src);
    gguf_close(typed);
    return rc == 0 ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "compare") == 0) {
        bool exact = argc == 5 && strcmp(argv[2], "--exact") == 0;
        if (argc == 4 || exact)
            return qr_compare(argv[argc - 2], argv[argc - 1], exact);
    } else if (argc == 5 && strcmp(argv[1], "grid") == 0) {
        return qr_grid(argv[2], argv[3], argv[4]);
    }
    fprintf(stderr, "usage: quant_ref compare [--exact] REF.gguf Q.gguf | quant_ref grid SRC.gguf "
                    "TYPED.gguf OUT.gguf\n");
    return 2;
}
