/* SPDX-License-Identifier: MIT */
/*
 * sample: turns one row of logits into one token, per sequence, such that the token bits depend
 * only on (logits, this sequence's parameters and token history, seed, output position) -- never
 * on which other sequences exist, in which order they are sampled, or on which thread (P1).
 *
 * Pipeline (fixed; the order of Hugging Face's logits warpers and of OpenAI-style servers):
 *
 *   1. sanitize      NaN and -inf -> -inf (never chosen), +inf -> FLT_MAX, -0 -> +0.
 *   2. penalties     per token, in float, in this order (vLLM's arithmetic):
 *                    repetition (llama.cpp/CTRL): if the token occurs among the last
 *                      repeat_last_n tokens of the context (prompt + generated; -1 = the whole
 *                      context): w > 0 ? w / repetition_penalty : w * repetition_penalty;
 *                    frequency (OpenAI): w -= frequency_penalty * count;
 *                    presence (OpenAI):  w -= presence_penalty if count > 0;
 *                    where count is how often the token was generated (sampler_accept), not
 *                    counting the prompt, as vLLM and OpenAI do. The result is sanitized again.
 *   3. order         candidates are ordered by penalized logit descending, ties by token id
 *                    ascending. Every later step walks this one total order.
 *   4. greedy        if temperature < SAMPLE_GREEDY_TEMPERATURE (in particular 0): the first
 *                    candidate (highest logit, lowest id among equals). Steps 5-9 are skipped.
 *   5. temperature   weights e_i = exp((w_i - w_max) / T), computed as
 *                    sample_exp_neg(((double)w_i - w_max) * (1.0 / T)); e of the first candidate is
 *                    exactly 1. Z = sum of e_i over the whole vocabulary in token-id order, in
 *                    eight interleaved partial sums (lane i % 8, each ascending in i), combined as
 *                    ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). The mass of a proper
 *                    prefix of the candidate order is its sequential sum in that order; the mass
 *                    of the whole vocabulary is Z.
 *   6. top-k         keep the first K = top_k candidates (0 or >= n_vocab: all).
 *   7. top-p         keep the shortest prefix whose running sum reaches top_p * mass(kept)
 *                    (running sum >= target; if it never does, keep everything).
 *   8. min-p         keep the prefix of candidates with e_i >= min_p * e_first (= min_p),
 *                    stopping at the first that fails; the first candidate is always kept.
 *   9. draw          u = rng_uniform(seed, out_pos), t = u * mass(kept); walk the kept prefix
 *                    adding e_i and choose the first candidate where the sum exceeds t
 *                    (strictly, so zero-weight candidates are never chosen); if rounding lets
 *                    the walk end first, choose the last kept candidate with e_i > 0.
 *
 * Every step is a function of values and token ids alone, every sum has a fixed order, exp and
 * log are the deterministic ones in sample_int.h, and the draw is keyed by (seed, out_pos): the
 * same inputs give the same token bits on any machine. (vLLM's v1 sampler applies min-p before
 * top-k/top-p; the two orders differ only when top-p and min-p are both set.)
 *
 * Logprobs: what OpenAI-compatible servers report by default (vLLM's logprobs_mode
 * "raw_logprobs"): the log-softmax of the raw model logits, before penalties, temperature and
 * truncation, so a reported logprob is a property of the model and the context alone and can be
 * compared across servers and sampling settings. logprob_i = (float)(((double)r_i - r_max) -
 * sample_log(Zr)) with r the sanitized raw logits and Zr their step-5 sum at temperature 1.
 * The top alternatives are ordered by raw logit descending, ties by token id ascending (so
 * their logprobs are non-increasing).
 *
 * Efficiency: nothing is fully sorted unless the truncation keeps (nearly) everything. Top-k
 * is a selection with a rising threshold (one comparison per token, eight at a time); without
 * top-k one vectorized pass computes Z and collects the candidates whose weight is above about
 * e^-12 of the maximum's, and only the part of those that top-p, min-p and the draw reach is
 * sorted; a step that reaches further collects the rest in one more pass. The result is
 * identical to sorting the whole vocabulary (sample.c has the details). Typical cost at 152k
 * tokens: a few hundred microseconds; adversarially flat logits with top-p near 1 sort most of
 * the vocabulary (milliseconds).
 *
 * Memory and threads: a sampler allocates all scratch at create time (8 bytes per vocabulary
 * entry for the candidate keys unless greedy; with any penalty, 4 for a penalized copy of the
 * logits plus 5-8 per penalty kind for the history); sampling, accepting and resetting never
 * allocate.
 * A sampler belongs to one thread at a time; different samplers share nothing and may be used
 * concurrently. The weights pass has a portable and an AVX2 variant, chosen by the `isa` toggle
 * (flags.h) and the CPU at create time; both give the same bits.
 */
#ifndef VERITY_SAMPLE_SAMPLE_H
#define VERITY_SAMPLE_SAMPLE_H

#include <stdint.h>

/* Most top alternatives a result can carry (OpenAI's top_logprobs limit). */
#define SAMPLE_MAX_LOGPROBS 20

/* Temperatures below this sample greedily (vLLM's _SAMPLING_EPS): 1/T would otherwise amplify
 * float noise in the logits into the choice. */
#define SAMPLE_GREEDY_TEMPERATURE 1e-5

/* Largest accepted repeat_last_n (a 4 MiB ring): bounds what one request can make us allocate.
 * Use -1 for "the whole context". */
#define SAMPLE_MAX_REPEAT_LAST_N (1 << 20)

/* Sampling parameters of one sequence. Plain data; copy freely. */
typedef struct sample_params {
    double temperature;        /* >= 0; < SAMPLE_GREEDY_TEMPERATURE = greedy. Default 1 */
    int32_t top_k;             /* >= 0; 0 = off. Default 0 */
    double top_p;              /* (0, 1]; 1 = off. Default 1 */
    double min_p;              /* [0, 1]; 0 = off. Default 0 */
    double repetition_penalty; /* > 0; 1 = off. Applied as a float. Default 1 */
    int32_t repeat_last_n;     /* -1 = whole context, 0 = off, else a window. Default 64 */
    double frequency_penalty;  /* [-2, 2]; 0 = off. Applied as a float. Default 0 */
    double presence_penalty;   /* [-2, 2]; 0 = off. Applied as a float. Default 0 */
    uint64_t seed;             /* the RNG key; the engine assigns one when the client gave none */
    int32_t n_logprobs;        /* 0..SAMPLE_MAX_LOGPROBS top alternatives to report. Default 0 */
} sample_params;

/* One reported alternative. */
typedef struct sample_logprob {
    int32_t token;
    float logprob; /* raw log-softmax; -inf for a token whose logit was -inf or NaN */
} sample_logprob;

/* What sampler_sample reports besides the token. */
typedef struct sample_result {
    int32_t token; /* the chosen token (also the return value) */
    float logprob; /* its raw logprob (see the design note) */
    int32_t n_top; /* min(n_logprobs, n_vocab) entries of top[] are valid */
    sample_logprob top[SAMPLE_MAX_LOGPROBS]; /* raw logit descending, ties by id ascending */
} sample_result;

typedef struct sampler sampler;

/* Returns the defaults: temperature 1, every truncation and penalty off, repeat_last_n 64
 * (llama.cpp's window for when a repetition penalty is set), seed 0, no logprobs. */
sample_params sample_params_default(void);

/* Checks every field. Returns 0, or ERR_INVAL with a detail naming the first offending field and
 * its value ("sample params: top_p = 1.5 is outside (0, 1]"). Ranges: temperature finite and
 * >= 0; top_k >= 0; top_p in (0, 1]; min_p in [0, 1]; repetition_penalty in [FLT_MIN, FLT_MAX]
 * (> 0 and finite as a float); repeat_last_n in [-1, SAMPLE_MAX_REPEAT_LAST_N];
 * frequency_penalty and presence_penalty in [-2, 2]; n_logprobs in [0, SAMPLE_MAX_LOGPROBS].
 * NaN fails every range. */
int sample_params_validate(const sample_params *p);

/* Creates a sampler for one sequence over a vocabulary of n_vocab tokens, copying *p, and
 * allocates all its scratch. Returns 0 and sets *out (owned by the caller, freed with
 * sampler_destroy), or ERR_INVAL (p fails sample_params_validate, or n_vocab < 1; detail names
 * the field) or ERR_NOMEM (detail names the bytes); *out is untouched on error. */
int sampler_create(const sample_params *p, int n_vocab, sampler **out);

/* Frees a sampler. NULL is a no-op. */
void sampler_destroy(sampler *s);

/* Forgets the token history (prompt window and generated counts), as if just created. Costs
 * time proportional to the history, not the vocabulary. Never allocates. */
void sampler_reset(sampler *s);

/* Appends n context tokens (the prompt, possibly in chunks) to the repetition-penalty window.
 * They do not count toward frequency/presence penalties. A token outside [0, n_vocab) occupies a
 * window position but penalizes nothing. Never allocates. */
void sampler_accept_prompt(sampler *s, const int32_t *tokens, int n);

/* Records a generated token: it enters the repetition window and the frequency/presence counts.
 * Call it once per token the sequence actually emits, in order. Out-of-range tokens are handled
 * as in sampler_accept_prompt. Never allocates. */
void sampler_accept(sampler *s, int32_t token);

/* Chooses the next token from logits[0..n_vocab) (read only, not modified) following the
 * pipeline in the design note, drawing with rng_uniform(seed, out_pos), where out_pos >= 0 is the
 * 0-based index of this token in the sequence's output. Does not record the token: call
 * sampler_accept with it. If res is not NULL it receives the token, its raw logprob and the
 * top n_logprobs alternatives; pass NULL when logprobs are not wanted, which saves up to two
 * passes over the vocabulary. If every logit is -inf or NaN, returns token 0. Never allocates,
 * never fails; a NULL logits or a negative out_pos is a programmer error (CHECK). Returns the
 * token id in [0, n_vocab). */
int32_t sampler_sample(sampler *s, const float *logits, int64_t out_pos, sample_result *res);

#endif
