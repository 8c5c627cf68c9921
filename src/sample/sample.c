/* SPDX-License-Identifier: MIT */
/*
 * sample: parameters, the per-sequence sampler (token history for penalties, scratch), and the
 * sampling pipeline documented in sample.h.
 *
 * How a token is chosen without sorting the vocabulary.
 *
 * Pass A finds the maximum of the sanitized logits and its lowest index, four lanes at a time.
 * When a penalty applies it also copies the sanitized logits into the work array, where the few
 * history tokens are then rewritten (and the maximum fixed up, or found again if its own token
 * was penalized); later passes read the work array, or else the caller's logits directly, and
 * sanitize every value they read (sanitizing twice changes nothing).
 *
 * With top-k (k < n_vocab), pass B is pass_top_k: a buffer of candidates that can still be among
 * the first k, cut down to exactly those k now and then, so that later tokens need only beat the
 * k-th value; then k keys are sorted. Everything after that (top-p, min-p, the draw) walks those
 * k, and Z is never needed.
 *
 * Without top-k, pass B (s->pass, sample_pass.c or sample_avx2.c) computes Z and collects the
 * keys (sample_int.h) of the candidates in the first SPEC_BINS histogram bins, i.e. with weight
 * above about e^-12 of the maximum's, where top-p, min-p and the draw almost always end. A bin
 * is a weight's level / 4 (sample_exp_level: 8 bins per halving, capped at N_BINS - 1, which
 * also takes -inf), a monotone function of the value, so "every candidate in bins < B" is always
 * an exact prefix of the candidate order. The cands_* helpers keep keys[0..n_sorted) equal to
 * that prefix for bins < bins_done, sorted: they count the collected candidates per bin only when
 * a step needs counts, partition the collected rest by bin and sort only the part a step reaches,
 * and, if a step runs past the collected bins (flat distributions, a draw deep in the tail),
 * collect and count every remaining candidate in one more pass. The counts guide how far to grow
 * (top-k style counts, estimated masses from a typical weight per bin, a bin bound for min-p),
 * but only for speed: every step walks the prefix exactly as it would walk a fully sorted array
 * and grows it again when it reaches the end, so the chosen token never depends on the guesses.
 * tests/test_sample.c checks this against a sampler that sorts the whole vocabulary.
 *
 * Penalty history. Repetition window: a ring of the last repeat_last_n context tokens plus a
 * per-token count (tokens are visited once per step by negating their count while penalizing
 * and restoring it after), or, for repeat_last_n == -1, a seen flag and a list of distinct
 * context tokens. Generated tokens: a per-token count plus a list of distinct tokens. Every
 * array has its final size at create time.
 *
 * Ownership: the caller owns the sampler and uses it from one thread at a time.
 */
#include "sample/sample.h"

#include "base/check.h"
#include "base/err.h"
#include "sample/rng.h"
#include "sample/sample_int.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define N_BINS     512 /* histogram bins of the weights: level / 4, 8 per halving, to 2^-64 */
#define BINS_PER_E 11.541560327111707 /* bins per factor e of weight: 8 / ln 2 */
#define SPEC_BINS  140 /* pass B collects the candidates in these bins: weights >= about e^-12 */

enum win_mode { WIN_OFF, WIN_RING, WIN_ALL };

struct sampler {
    sample_params p;
    int32_t n_vocab;
    bool greedy;
    double inv_temp;     /* 1 / temperature, when !greedy */
    sample_pass_fn pass; /* the weights pass for this CPU and the isa toggle */
    float rep_pen, freq_pen, pres_pen;
    bool gen_on; /* frequency or presence penalty set */

    enum win_mode win;
    int32_t *win_count; /* [n_vocab] WIN_RING: occurrences in the ring */
    int32_t *ring;      /* [ring_cap] WIN_RING: token ids, -1 for out-of-range ones */
    int32_t ring_cap, ring_len, ring_head;
    uint8_t *ctx_seen; /* [n_vocab] WIN_ALL: token occurred in the context */
    int32_t *ctx_list; /* [n_vocab] WIN_ALL: distinct context tokens */
    int32_t ctx_n;

    int32_t *gen_count; /* [n_vocab] generated occurrences (gen_on) */
    int32_t *gen_list;  /* [n_vocab] distinct generated tokens (gen_on) */
    int32_t gen_n;

    float *work;          /* [n_vocab] sanitized, penalized logits; NULL when no penalty is set */
    uint64_t *keys;       /* [n_vocab] collected candidate keys; NULL when greedy */
    uint32_t cnt[N_BINS]; /* candidates per bin (what the cands_* helpers counted) */
    double bin_weight[N_BINS]; /* a typical weight in each bin, for estimates */
};

/* ---- parameters ---- */

sample_params sample_params_default(void) {
    sample_params p = {
        .temperature = 1.0,
        .top_k = 0,
        .top_p = 1.0,
        .min_p = 0.0,
        .repetition_penalty = 1.0,
        .repeat_last_n = 64,
        .frequency_penalty = 0.0,
        .presence_penalty = 0.0,
        .seed = 0,
        .n_logprobs = 0,
    };
    return p;
}

int sample_params_validate(const sample_params *p) {
    if (!(p->temperature >= 0.0 && isfinite(p->temperature)))
        return err_set(ERR_INVAL, "sample params: temperature = %g must be finite and >= 0",
                       p->temperature);
    if (p->top_k < 0)
        return err_set(ERR_INVAL, "sample params: top_k = %d must be >= 0 (0 = off)",
                       (int)p->top_k);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        return err_set(ERR_INVAL, "sample params: top_p = %g is outside (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
        return err_set(ERR_INVAL, "sample params: min_p = %g is outside [0, 1]", p->min_p);
    if (!(p->repetition_penalty >= FLT_MIN && p->repetition_penalty <= FLT_MAX))
        return err_set(ERR_INVAL,
                       "sample params: repetition_penalty = %g must be > 0 and finite as a float",
                       p->repetition_penalty);
    if (p->repeat_last_n < -1 || p->repeat_last_n > SAMPLE_MAX_REPEAT_LAST_N)
        return err_set(ERR_INVAL, "sample params: repeat_last_n = %d is outside [-1, %d]",
                       (int)p->repeat_last_n, SAMPLE_MAX_REPEAT_LAST_N);
    if (!(p->frequency_penalty >= -2.0 && p->frequency_penalty <= 2.0))
        return err_set(ERR_INVAL, "sample params: frequency_penalty = %g is outside [-2, 2]",
                       p->frequency_penalty);
    if (!(p->presence_penalty >= -2.0 && p->presence_penalty <= 2.0))
        return err_set(ERR_INVAL, "sample params: presence_penalty = %g is outside [-2, 2]",
                       p->presence_penalty);
    if (p->n_logprobs < 0 || p->n_logprobs > SAMPLE_MAX_LOGPROBS)
        return err_set(ERR_INVAL, "sample params: n_logprobs = %d is outside [0, %d]",
                       (int)p->n_logprobs, SAMPLE_MAX_LOGPROBS);
    return 0;
}

/* ---- lifecycle and history ---- */

/* calloc with an error detail naming what was being allocated. */
static int alloc_zeroed(void **out, size_t n, size_t size, const char *what, int32_t n_vocab) {
    *out = calloc(n, size);
    if (!*out)
        return err_set(ERR_NOMEM, "sampler_create: %zu bytes for %s (n_vocab %d)", n * size, what,
                       (int)n_vocab);
    return 0;
}

int sampler_create(const sample_params *p, int n_vocab, sampler **out) {
    int rc = sample_params_validate(p);
    if (rc)
        return rc;
    if (n_vocab < 1)
        return err_set(ERR_INVAL, "sampler_create: n_vocab = %d must be >= 1", n_vocab);
    sampler *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "sampler_create: %zu bytes for the sampler", sizeof *s);
    s->p = *p;
    s->n_vocab = n_vocab;
    s->greedy = p->temperature < SAMPLE_GREEDY_TEMPERATURE;
    s->inv_temp = s->greedy ? 0.0 : 1.0 / p->temperature;
    s->pass = sample_pass_select();
    s->rep_pen = (float)p->repetition_penalty;
    s->freq_pen = (float)p->frequency_penalty;
    s->pres_pen = (float)p->presence_penalty;
    s->gen_on = s->freq_pen != 0.0f || s->pres_pen != 0.0f;
    for (int b = 0; b < N_BINS - 1; b++) /* 2^-(b + 3/8)/8, about the middle of bin b */
        s->bin_weight[b] = sample_exp_neg(-(b + 0.375) * (0.6931471805599453 / 8));
    s->bin_weight[N_BINS - 1] = 0.0;
    if (s->rep_pen == 1.0f || p->repeat_last_n == 0)
        s->win = WIN_OFF;
    else
        s->win = p->repeat_last_n < 0 ? WIN_ALL : WIN_RING;

    size_t nv = (size_t)n_vocab;
    if (s->win == WIN_RING) {
        s->ring_cap = p->repeat_last_n;
        if ((rc = alloc_zeroed((void **)&s->win_count, nv, sizeof(int32_t), "window counts",
                               s->n_vocab)) ||
            (rc = alloc_zeroed((void **)&s->ring, (size_t)s->ring_cap, sizeof(int32_t),
                               "the repetition window", s->n_vocab)))
            goto fail;
    } else if (s->win == WIN_ALL) {
        if ((rc = alloc_zeroed((void **)&s->ctx_seen, nv, 1, "context flags", s->n_vocab)) ||
            (rc = alloc_zeroed((void **)&s->ctx_list, nv, sizeof(int32_t), "context tokens",
                               s->n_vocab)))
            goto fail;
    }
    if (s->gen_on) {
        if ((rc = alloc_zeroed((void **)&s->gen_count, nv, sizeof(int32_t), "generated counts",
                               s->n_vocab)) ||
            (rc = alloc_zeroed((void **)&s->gen_list, nv, sizeof(int32_t), "generated tokens",
                               s->n_vocab)))
            goto fail;
    }
    if ((s->win != WIN_OFF || s->gen_on) &&
        (rc = alloc_zeroed((void **)&s->work, nv, sizeof(float), "the work logits", s->n_vocab)))
        goto fail;
    if (!s->greedy &&
        (rc = alloc_zeroed((void **)&s->keys, nv, sizeof(uint64_t), "candidate keys", s->n_vocab)))
        goto fail;
    *out = s;
    return 0;
fail:
    sampler_destroy(s);
    return rc;
}

void sampler_destroy(sampler *s) {
    if (!s)
        return;
    free(s->win_count);
    free(s->ring);
    free(s->ctx_seen);
    free(s->ctx_list);
    free(s->gen_count);
    free(s->gen_list);
    free(s->work);
    free(s->keys);
    free(s);
}

void sampler_reset(sampler *s) {
    if (s->win == WIN_RING) {
        for (int32_t i = 0; i < s->ring_len; i++)
            if (s->ring[i] >= 0)
                s->win_count[s->ring[i]] = 0;
        s->ring_len = s->ring_head = 0;
    } else if (s->win == WIN_ALL) {
        for (int32_t i = 0; i < s->ctx_n; i++)
            s->ctx_seen[s->ctx_list[i]] = 0;
        s->ctx_n = 0;
    }
    if (s->gen_on) {
        for (int32_t i = 0; i < s->gen_n; i++)
            s->gen_count[s->gen_list[i]] = 0;
        s->gen_n = 0;
    }
}

static void window_push(sampler *s, int32_t t) {
    bool valid = t >= 0 && t < s->n_vocab;
    if (s->win == WIN_RING) {
        if (s->ring_len == s->ring_cap) {
            int32_t old = s->ring[s->ring_head];
            if (old >= 0)
                s->win_count[old]--;
        } else {
            s->ring_len++;
        }
        s->ring[s->ring_head] = valid ? t : -1;
        if (valid)
            s->win_count[t]++;
        if (++s->ring_head == s->ring_cap)
            s->ring_head = 0;
    } else if (s->win == WIN_ALL && valid && !s->ctx_seen[t]) {
        s->ctx_seen[t] = 1;
        s->ctx_list[s->ctx_n++] = t;
    }
}

void sampler_accept_prompt(sampler *s, const int32_t *tokens, int n) {
    if (s->win == WIN_OFF)
        return;
    for (int i = 0; i < n; i++)
        window_push(s, tokens[i]);
}

void sampler_accept(sampler *s, int32_t token) {
    window_push(s, token);
    if (s->gen_on && token >= 0 && token < s->n_vocab && s->gen_count[token]++ == 0)
        s->gen_list[s->gen_n++] = token;
}

/* ---- penalties ---- */

static bool penalties_active(const sampler *s) {
    return (s->win == WIN_RING && s->ring_len > 0) || (s->win == WIN_ALL && s->ctx_n > 0) ||
           (s->gen_on && s->gen_n > 0);
}

static inline float repetition_apply(float w, float pen) {
    return w > 0.0f ? w / pen : w * pen;
}

/* Candidate (value, id) with the running best by the candidate order. */
static inline void best_update(float v, int32_t id, float *best_v, int32_t *best_id) {
    if (v > *best_v || (v == *best_v && id < *best_id)) {
        *best_v = v;
        *best_id = id;
    }
}

static void pass_argmax(const float *work, int32_t n, float *max_out, int32_t *arg_out);

/* Applies every penalty to the work array (pass A output) and updates the maximum and its
 * index. Returns nothing; never allocates. */
static void penalties_apply(sampler *s, float *max_io, int32_t *arg_io) {
    float *work = s->work;
    if (s->win == WIN_RING) {
        /* each distinct token once: negate its count while visited */
        for (int32_t i = 0; i < s->ring_len; i++) {
            int32_t t = s->ring[i];
            if (t >= 0 && s->win_count[t] > 0) {
                work[t] = sample_logit_sanitize(repetition_apply(work[t], s->rep_pen));
                s->win_count[t] = -s->win_count[t];
            }
        }
        for (int32_t i = 0; i < s->ring_len; i++) {
            int32_t t = s->ring[i];
            if (t >= 0 && s->win_count[t] < 0)
                s->win_count[t] = -s->win_count[t];
        }
    } else if (s->win == WIN_ALL) {
        for (int32_t i = 0; i < s->ctx_n; i++) {
            int32_t t = s->ctx_list[i];
            work[t] = sample_logit_sanitize(repetition_apply(work[t], s->rep_pen));
        }
    }
    if (s->gen_on) {
        for (int32_t i = 0; i < s->gen_n; i++) {
            int32_t t = s->gen_list[i];
            float w = work[t];
            w = w - s->freq_pen * (float)s->gen_count[t];
            w = w - s->pres_pen;
            work[t] = sample_logit_sanitize(w);
        }
    }
    /* The old maximum stands unless its own token was penalized (then rescan); otherwise only
     * a penalized token can have overtaken it. */
    int32_t arg = *arg_io;
    bool lost = false;
    if (s->win == WIN_RING) {
        for (int32_t i = 0; i < s->ring_len && !lost; i++)
            lost = s->ring[i] == arg;
    } else if (s->win == WIN_ALL) {
        lost = s->ctx_seen[arg] != 0;
    }
    if (s->gen_on && !lost)
        lost = s->gen_count[arg] != 0;
    if (lost) {
        pass_argmax(work, s->n_vocab, max_io, arg_io);
        return;
    }
    float best_v = *max_io;
    int32_t best_id = arg;
    if (s->win == WIN_RING)
        for (int32_t i = 0; i < s->ring_len; i++)
            if (s->ring[i] >= 0)
                best_update(work[s->ring[i]], s->ring[i], &best_v, &best_id);
    if (s->win == WIN_ALL)
        for (int32_t i = 0; i < s->ctx_n; i++)
            best_update(work[s->ctx_list[i]], s->ctx_list[i], &best_v, &best_id);
    if (s->gen_on)
        for (int32_t i = 0; i < s->gen_n; i++)
            best_update(work[s->gen_list[i]], s->gen_list[i], &best_v, &best_id);
    *max_io = best_v;
    *arg_io = best_id;
}

/* ---- passes over the vocabulary ---- */

/* The exponent of a candidate's weight: (w - w_max) / T, as sample.h defines it. */
static inline double x_of(double w_max, double inv_temp, float v) {
    return ((double)v - w_max) * inv_temp;
}

static inline double weight_of(double w_max, double inv_temp, float v) {
    return sample_exp_neg(x_of(w_max, inv_temp, v));
}

/* Histogram bin of a level (sample_exp_level): 4 levels per bin, the last bin takes the rest. */
static inline int bin_of_level(uint64_t level) {
    return level < 4 * (uint64_t)(N_BINS - 1) ? (int)(level >> 2) : N_BINS - 1;
}

static inline int bin_of(double w_max, double inv_temp, float v) {
    return bin_of_level(sample_exp_level(x_of(w_max, inv_temp, v)));
}

/* Finds the maximum of the sanitized src[0..n) and its lowest index, and copies the sanitized
 * values to dst unless dst is NULL. Four lanes; each lane keeps its first maximum (strict >),
 * and the lanes are merged by value, then index, so the result is the scalar loop's. */
static void pass_copy_argmax(const float *src, float *dst, int32_t n, float *max_out,
                             int32_t *arg_out) {
    sample_v4f mx = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    sample_v4i at = {0, 1, 2, 3}, idx = {0, 1, 2, 3};
    const sample_v4i four = {4, 4, 4, 4};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        sample_v4f v;
        memcpy(&v, src + i, sizeof v);
        v = sample_logit_sanitize4(v);
        if (dst)
            memcpy(dst + i, &v, sizeof v);
        sample_v4i gt = v > mx;
        mx = sample_v4f_select(gt, v, mx);
        at = (at & ~gt) | (idx & gt);
        idx += four;
    }
    float best_v = -INFINITY;
    int32_t best_id = 0;
    for (int u = 0; u < 4; u++)
        if (i > u) /* lanes that saw at least one element */
            best_update(mx[u], at[u], &best_v, &best_id);
    for (; i < n; i++) {
        float v = sample_logit_sanitize(src[i]);
        if (dst)
            dst[i] = v;
        best_update(v, i, &best_v, &best_id);
    }
    *max_out = best_v;
    *arg_out = best_id;
}

/* The maximum of an already sanitized array and its lowest index. */
static void pass_argmax(const float *work, int32_t n, float *max_out, int32_t *arg_out) {
    pass_copy_argmax(work, NULL, n, max_out, arg_out);
}

/* Pass B, when top-k applies (k < n): leaves the first k candidates, sorted, in keys[0..k).
 * Keeps a buffer of candidates that can still be among the first k: once the buffer has been
 * cut down to its k first, a later token (higher id, so it loses ties) enters only if its value
 * exceeds the k-th's. Most tokens are rejected by one comparison, eight at a time. */
static void pass_top_k(sampler *s, const float *vals, int32_t k) {
    uint64_t *keys = s->keys;
    const int32_t n = s->n_vocab;
    int32_t cap = k <= n / 8 ? (k < 1024 ? k + 4096 : 4 * k) : n; /* > k, <= n */
    if (cap > n)
        cap = n;
    int32_t m = 0;
    bool cut = false;      /* the buffer has been cut to k at least once */
    float thr = -INFINITY; /* after a cut: the k-th value */
    for (int32_t i = 0; i < n; i += 8) {
        int32_t end = i + 8 < n ? i + 8 : n;
        if (cut && end - i == 8) {
            sample_v4f a, b, t = {thr, thr, thr, thr};
            memcpy(&a, vals + i, sizeof a); /* raw > thr whenever sanitized > thr */
            memcpy(&b, vals + i + 4, sizeof b);
            sample_v4i gt = (a > t) | (b > t);
            if (!(gt[0] | gt[1] | gt[2] | gt[3]))
                continue;
        }
        for (int32_t j = i; j < end; j++) {
            float v = sample_logit_sanitize(vals[j]);
            if (cut && !(v > thr))
                continue;
            if (m == cap) { /* cut to the k first and raise the bar */
                sample_keys_select_desc(keys, (size_t)m, (size_t)k);
                m = k;
                uint64_t kth = keys[0];
                for (int32_t q = 1; q < k; q++)
                    kth = keys[q] < kth ? keys[q] : kth;
                thr = sample_key_value(kth);
                cut = true;
                if (!(v > thr))
                    continue;
            }
            keys[m++] = sample_key_make(v, j);
        }
    }
    CHECK(m >= k);
    sample_keys_select_desc(keys, (size_t)m, (size_t)k);
    sample_keys_sort_desc(keys, (size_t)k);
}

/* ---- candidate prefix ---- */

/* The sorted prefix of the candidate order (see the file's design note). Invariants:
 * keys[0..n_sorted) is every candidate in bins < bins_done, sorted; keys[n_sorted..n_coll) is
 * every candidate in bins [bins_done, coll_bins), unsorted; cnt[b] is valid for b < cnt_bins. */
typedef struct cands {
    uint64_t *keys;    /* [n] */
    const float *vals; /* [n] the values (sanitized here on every read) */
    int32_t n;         /* n_vocab */
    int32_t n_sorted;
    int bins_done;
    int32_t n_coll;
    int coll_bins;
    int cnt_bins;
    uint32_t *cnt;            /* [N_BINS] candidates per bin */
    const double *bin_weight; /* [N_BINS] */
    double w_max, inv_temp;
} cands;

/* Makes the counts of every collected bin valid (after pass B: a pass over the few collected). */
static void cands_count(cands *c) {
    if (c->cnt_bins >= c->coll_bins)
        return;
    for (int b = c->cnt_bins; b < c->coll_bins; b++)
        c->cnt[b] = 0;
    for (int32_t j = c->n_sorted; j < c->n_coll; j++) {
        int b = bin_of(c->w_max, c->inv_temp, sample_key_value(c->keys[j]));
        if (b >= c->cnt_bins)
            c->cnt[b]++;
    }
    c->cnt_bins = c->coll_bins;
}

/* Collects every candidate not collected yet (bins >= coll_bins) and counts its bins: one pass
 * over the values, needed only when a step reaches past the speculative bins. */
static void cands_collect_rest(cands *c) {
    if (c->coll_bins == N_BINS)
        return;
    cands_count(c);
    for (int b = c->coll_bins; b < N_BINS; b++)
        c->cnt[b] = 0;
    int32_t k = c->n_coll;
    for (int32_t i = 0; i < c->n; i++) {
        float v = sample_logit_sanitize(c->vals[i]);
        int b = bin_of(c->w_max, c->inv_temp, v);
        if (b >= c->coll_bins) {
            c->cnt[b]++;
            c->keys[k++] = sample_key_make(v, i);
        }
    }
    CHECK(k == c->n); /* pass B and this pass use one bin function */
    c->n_coll = k;
    c->coll_bins = c->cnt_bins = N_BINS;
}

/* Extends the sorted prefix to every candidate in bins < bin_end. */
static void cands_extend_to(cands *c, int bin_end) {
    if (bin_end > N_BINS)
        bin_end = N_BINS;
    if (bin_end <= c->bins_done)
        return;
    if (bin_end > c->coll_bins)
        cands_collect_rest(c);
    cands_count(c);
    uint64_t *keys = c->keys;
    int32_t lo = c->n_sorted, need = 0;
    for (int b = c->bins_done; b < bin_end; b++)
        need += (int32_t)c->cnt[b];
    if (lo + need < c->n_coll) { /* move bins < bin_end to the front of the unsorted part */
        int32_t w = lo;
        for (int32_t r = lo; w < lo + need && r < c->n_coll; r++) {
            uint64_t key = keys[r];
            if (bin_of(c->w_max, c->inv_temp, sample_key_value(key)) < bin_end) {
                keys[r] = keys[w];
                keys[w++] = key;
            }
        }
        CHECK(w == lo + need);
    }
    sample_keys_sort_desc(keys + lo, (size_t)need);
    c->n_sorted = lo + need;
    c->bins_done = bin_end;
}

/* Grows the sorted prefix to at least m candidates (m <= n). */
static void cands_extend_count(cands *c, int64_t m) {
    if (m > c->n)
        m = c->n;
    if (m > c->n_coll)
        cands_collect_rest(c);
    cands_count(c);
    int64_t have = c->n_sorted;
    int b = c->bins_done;
    while (have < m && b < N_BINS)
        have += c->cnt[b++];
    cands_extend_to(c, b);
}

/* Grows the sorted prefix to where, by the histogram of what is collected, the running mass
 * probably first exceeds target (weight units): bin masses are estimated from counts and a
 * typical weight per bin, plus one bin of margin. Only a guess that saves growth steps; the walk
 * grows further if it must (and collects the rest then). */
static void cands_extend_mass(cands *c, double target) {
    cands_count(c);
    double cum = 0.0;
    int b = 0;
    for (; b < c->coll_bins && cum <= target; b++)
        cum += c->cnt[b] * c->bin_weight[b];
    cands_extend_to(c, b + 1 < c->coll_bins ? b + 1 : c->coll_bins);
}

/* Weight of the candidate at sorted position j < n, growing the prefix if needed. */
static inline double cands_weight(cands *c, int32_t j) {
    if (j >= c->n_sorted) {
        cands_extend_count(c, 2 * (int64_t)c->n_sorted + 32);
        CHECK(j < c->n_sorted);
    }
    return weight_of(c->w_max, c->inv_temp, sample_key_value(c->keys[j]));
}

/* Sequential sum of the first m weights in candidate order. */
static double cands_prefix_mass(cands *c, int32_t m) {
    double sum = 0.0;
    for (int32_t j = 0; j < m; j++)
        sum += cands_weight(c, j);
    return sum;
}

/* ---- sampling ---- */

/* Steps 5-9 over vals (the work array when penalized, else the caller's logits; sanitized on
 * every read), whose maximum w_max is finite. Returns the token and, via *z_out, Z when it was
 * computed (else -1). */
static int32_t sample_truncated(sampler *s, const float *vals, double w_max, int64_t out_pos,
                                double *z_out) {
    const int32_t n = s->n_vocab;
    const sample_params *p = &s->p;
    cands c = {.keys = s->keys,
               .vals = vals,
               .n = n,
               .coll_bins = SPEC_BINS,
               .cnt = s->cnt,
               .bin_weight = s->bin_weight,
               .w_max = w_max,
               .inv_temp = s->inv_temp};
    int32_t n_keep = n;
    double mass;
    if (p->top_k > 0 && p->top_k < n) { /* top-k: no Z, and nothing past the k first is read */
        n_keep = p->top_k;
        pass_top_k(s, vals, n_keep);
        c.n_sorted = c.n_coll = n_keep;
        c.bins_done = c.coll_bins = c.cnt_bins = N_BINS;
        mass = cands_prefix_mass(&c, n_keep);
        *z_out = -1.0;
    } else {
        /* pass B: Z, and the candidates in the first SPEC_BINS bins */
        mass = *z_out =
            s->pass(vals, n, w_max, s->inv_temp, 4 * (uint64_t)SPEC_BINS, s->keys, &c.n_coll);
    }
    if (p->top_p < 1.0) { /* top-p */
        double target = p->top_p * mass;
        if (n_keep == n)
            cands_extend_mass(&c, target);
        double cum = 0.0;
        int32_t j = 0;
        while (j < n_keep) {
            cum += cands_weight(&c, j);
            j++;
            if (cum >= target)
                break;
        }
        if (j < n_keep) {
            n_keep = j;
            mass = cum;
        }
    }
    if (p->min_p > 0.0) { /* min-p */
        double thr = p->min_p * cands_weight(&c, 0);
        if (n_keep == n) { /* weights >= min_p lie in bins up to about -ln(min_p) 8/ln2 */
            double bins = -sample_log(p->min_p) * BINS_PER_E;
            cands_extend_to(&c, bins < N_BINS - 2 ? (int)bins + 2 : N_BINS);
        }
        int32_t j = 1;
        while (j < n_keep && cands_weight(&c, j) >= thr)
            j++;
        if (j < n_keep) {
            n_keep = j;
            mass = cands_prefix_mass(&c, n_keep);
        }
    }
    /* draw */
    double t = rng_uniform(p->seed, (uint64_t)out_pos) * mass;
    if (n_keep == n)
        cands_extend_mass(&c, t);
    double acc = 0.0;
    int32_t last_nonzero = 0;
    for (int32_t j = 0; j < n_keep; j++) {
        double e = cands_weight(&c, j);
        acc += e;
        if (e > 0.0)
            last_nonzero = j;
        if (acc > t)
            return sample_key_token(c.keys[j]);
    }
    return sample_key_token(c.keys[last_nonzero]);
}

/* Inserts (v, id) into the descending top list of n entries (have filled so far); id is larger
 * than every id already there, so it goes after the entries >= v. */
static inline void top_insert(float *top_v, int32_t *top_id, int32_t n, int32_t *have, float v,
                              int32_t id) {
    int32_t pos = *have < n ? *have : n - 1;
    while (pos > 0 && top_v[pos - 1] < v) {
        top_v[pos] = top_v[pos - 1];
        top_id[pos] = top_id[pos - 1];
        pos--;
    }
    top_v[pos] = v;
    top_id[pos] = id;
    if (*have < n)
        (*have)++;
}

/* Logprobs of the raw logits into res (res->token already set). max_known says r_max already is
 * the maximum of the sanitized logits; z_reuse >= 0 is their Zr, when the caller has it (nothing
 * penalized, temperature 1). */
static void logprobs_fill(const sampler *s, const float *logits, bool max_known, float r_max,
                          double z_reuse, sample_result *res) {
    const int32_t n = s->n_vocab;
    int32_t n_top = s->p.n_logprobs < n ? s->p.n_logprobs : n;
    float top_v[SAMPLE_MAX_LOGPROBS];
    int32_t top_id[SAMPLE_MAX_LOGPROBS];
    int32_t have = 0;
    if (n_top > 0) {
        /* a token enters once it beats the current n-th; eight raw values are rejected at once
         * when none exceeds it (a raw value exceeds it whenever its sanitized value does) */
        int32_t i = 0;
        for (; i < n && have < n_top; i++)
            top_insert(top_v, top_id, n_top, &have, sample_logit_sanitize(logits[i]), i);
        for (; i + 8 <= n; i += 8) {
            float thr = top_v[n_top - 1];
            sample_v4f a, b, t = {thr, thr, thr, thr};
            memcpy(&a, logits + i, sizeof a);
            memcpy(&b, logits + i + 4, sizeof b);
            sample_v4i gt = (a > t) | (b > t);
            if (!(gt[0] | gt[1] | gt[2] | gt[3]))
                continue;
            for (int32_t j = i; j < i + 8; j++) {
                float v = sample_logit_sanitize(logits[j]);
                if (v > top_v[n_top - 1])
                    top_insert(top_v, top_id, n_top, &have, v, j);
            }
        }
        for (; i < n; i++) {
            float v = sample_logit_sanitize(logits[i]);
            if (v > top_v[n_top - 1])
                top_insert(top_v, top_id, n_top, &have, v, i);
        }
        r_max = top_v[0];
    } else if (!max_known) {
        int32_t arg;
        pass_copy_argmax(logits, NULL, n, &r_max, &arg);
    }
    res->n_top = n_top;
    if (r_max == -INFINITY) { /* no token has a probability: report -inf everywhere */
        res->logprob = -INFINITY;
        for (int32_t k = 0; k < n_top; k++)
            res->top[k] = (sample_logprob){.token = top_id[k], .logprob = -INFINITY};
        return;
    }
    double z = z_reuse;
    if (z < 0.0) {
        int32_t none;
        z = s->pass(logits, n, (double)r_max, 1.0, 0, NULL, &none);
    }
    double log_z = sample_log(z);
    res->logprob =
        (float)(((double)sample_logit_sanitize(logits[res->token]) - (double)r_max) - log_z);
    for (int32_t k = 0; k < n_top; k++)
        res->top[k] = (sample_logprob){
            .token = top_id[k], .logprob = (float)(((double)top_v[k] - (double)r_max) - log_z)};
}

int32_t sampler_sample(sampler *s, const float *logits, int64_t out_pos, sample_result *res) {
    CHECK(logits != NULL && out_pos >= 0);
    const int32_t n = s->n_vocab;
    int32_t token;
    float w_max;
    double z = -1.0;
    bool penalized = penalties_active(s);
    if (!penalized) { /* pass A reads the logits; everything after sanitizes as it reads */
        pass_copy_argmax(logits, NULL, n, &w_max, &token);
        if (!s->greedy && w_max != -INFINITY) /* all -inf: token 0, the first candidate */
            token = sample_truncated(s, logits, w_max, out_pos, &z);
    } else {
        pass_copy_argmax(logits, s->work, n, &w_max, &token);
        penalties_apply(s, &w_max, &token);
        if (!s->greedy && w_max != -INFINITY)
            token = sample_truncated(s, s->work, w_max, out_pos, &z);
    }
    if (res) { /* unpenalized, pass A's maximum is the raw one; at T = 1 so is pass B's Z */
        res->token = token;
        bool reuse = z >= 0.0 && !penalized && s->inv_temp == 1.0;
        logprobs_fill(s, logits, !penalized, w_max, reuse ? z : -1.0, res);
    }
    return token;
}
