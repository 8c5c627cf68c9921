/* SPDX-License-Identifier: MIT */
/*
 * spec_mtp: drafting with a model's own multi-token-prediction layers (DeepSeek's "nextn"
 * layers, counted by the GGUF key <arch>.nextn_predict_layers; deepseek4 runs its first one,
 * fwd_run_mtp). A model without them is refused at creation, naming why.
 *
 * The MTP block predicts the token after position p from the trunk's hidden state at p - 1 and
 * the token at p; fed its own hidden state and its guess, it predicts the next one, and so on.
 * For a sequence whose tokens are x_0 .. x_{n-1} (x_{n-1} the newest, not yet run by the
 * target), one spec_draft call:
 *   1. runs the trunk over x_{n_done} .. x_{n-2} in the drafter's own forward context and KV
 *      pool (the engine does not share its hidden states yet, so the drafter recomputes them:
 *      correct, but it costs as much as the target's own decode of those tokens);
 *   2. runs the MTP block over the last positions (at most its sliding window, whose K rows its
 *      attention reads) up to n - 1, each fed (trunk hidden at p - 1, x_p): the last row's
 *      greedy token is the first guess;
 *   3. feeds each guess back with the block's own hidden state, one row per sequence, until the
 *      sequence has its k guesses.
 * The MTP block's K rows live in the pool's layer n_layer (the drafter's pool has one more layer
 * than the target's). The trunk's hidden states of the last positions are kept per sequence in a
 * ring. Tokens only ever grow, and the trunk only runs real tokens, so what it computed stays
 * valid; the MTP rows of guesses are recomputed from real tokens at the next call.
 *
 * The greedy token is the highest logit, ties to the lowest id. Drafting is deterministic, but
 * that matters for speed only: the target decides every token (spec.h).
 */
#include "base/err.h"
#include "gguf/gguf.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "spec/spec_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most MTP rows a sequence feeds to refill the block's K rows: its sliding window (128 in
 * DeepSeek-V4), capped. A row's K depends on its own inputs only, so the rows of the last `fill`
 * positions are exactly what the newest row's window attention reads; a block without a window,
 * or a wider one, would read older K rows never refilled, which could only make guesses worse
 * (the target decides every token). */
#define MTP_FILL_MAX 128

typedef struct mtp_impl {
    model *m;
    kv_pool *kv;
    fwd_ctx *fc;
    int32_t bs;
    int64_t n_vocab, n_ctx, max_tokens, W; /* W: hidden width */
    int32_t max_seqs, max_k, fill;         /* fill: MTP rows refilled per sequence */
    fwd_seq *fs;                           /* [max_tokens] */
    int32_t *fs_of;                        /* [max_tokens] the request of each row of fs */
    int32_t *pos;                          /* [max_seqs] per request: the next trunk position */
    int32_t *want;                         /* [max_seqs] per request: tokens it drafts (0: none) */
    int32_t *tok;                          /* [max_tokens] tokens of an MTP run */
    float *h_in;                           /* [max_tokens][W] */
} mtp_impl;

typedef struct mtp_seq {
    spec_kvseq s; /* first: its blocks, the tokens the trunk ran (n_done: trunk positions with
                   * K/V), then guesses */
    float *ring;  /* [fill + 1][W] trunk hidden states of the last positions, by pos % (fill + 1) */
    float *hcur;  /* [W] the MTP block's hidden state of the last row */
} mtp_seq;

static void mtp_destroy(void *impl) {
    mtp_impl *d = impl;
    if (!d)
        return;
    fwd_ctx_destroy(d->fc);
    kv_pool_destroy(d->kv);
    free(d->fs);
    free(d->fs_of);
    free(d->pos);
    free(d->want);
    free(d->tok);
    free(d->h_in);
    free(d);
}

static int mtp_create(const spec_opts *o, void **impl) {
    *impl = NULL;
    const gguf *g = model_get_gguf(o->target);
    const model_hparams *hp = model_get_hparams(o->target);
    char key[160];
    snprintf(key, sizeof key, "%s.nextn_predict_layers", hp->arch_name);
    if (hp->n_layer_nextn <= 0)
        return err_set(ERR_UNSUPPORTED,
                       "spec mtp: the model has no multi-token-prediction layers (%s is %s); use "
                       "--spec ngram or --spec draft",
                       key, gguf_find_key(g, key) >= 0 ? "0 or without its blocks" : "absent");
    if (hp->hc_mult <= 0)
        return err_set(ERR_UNSUPPORTED,
                       "spec mtp: the model's %lld multi-token-prediction layer(s) (%s) are not "
                       "run for architecture %s (deepseek4 only); use --spec ngram or --spec draft",
                       (long long)hp->n_layer_nextn, key, hp->arch_name);
    if (o->block_size <= 0 || o->kv_blocks <= 0 || o->max_tokens < o->max_seqs || o->threads <= 0)
        return err_set(ERR_INVAL, "spec mtp: invalid options");
    mtp_impl *d = calloc(1, sizeof *d);
    if (!d)
        return err_set(ERR_NOMEM, "spec mtp: out of memory");
    d->m = o->target;
    d->bs = o->block_size;
    d->n_vocab = hp->n_vocab;
    d->n_ctx = hp->n_ctx_train;
    d->max_tokens = o->max_tokens;
    d->max_seqs = o->max_seqs;
    d->max_k = o->max_k;
    d->W = hp->hc_mult * hp->n_embd;
    d->fill = hp->sliding_window > 0 && hp->sliding_window < MTP_FILL_MAX
                  ? (int32_t)hp->sliding_window
                  : MTP_FILL_MAX;
    int64_t per_seq = (o->max_k + o->block_size - 1) / o->block_size + 1;
    kv_pool_opts ko; /* the target's buffers, and one more layer: the MTP block's K rows */
    model_kv_pool_opts(d->m, o->kv_f16, o->block_size, o->kv_blocks + per_seq * o->max_seqs, &ko);
    ko.n_layer += 1;
    int rc = kv_pool_create(&ko, &d->kv);
    if (!rc)
        rc = fwd_ctx_create(d->m, d->kv, o->max_tokens, o->max_seqs, o->threads, o->attn_chunk,
                            &d->fc);
    size_t T = (size_t)o->max_tokens;
    d->fs = calloc(T, sizeof *d->fs);
    d->fs_of = calloc(T, sizeof *d->fs_of);
    d->pos = calloc((size_t)o->max_seqs, sizeof *d->pos);
    d->want = calloc((size_t)o->max_seqs, sizeof *d->want);
    d->tok = calloc(T, sizeof *d->tok);
    d->h_in = calloc(T * (size_t)d->W, sizeof *d->h_in);
    if (!rc && (!d->fs || !d->fs_of || !d->pos || !d->want || !d->tok || !d->h_in))
        rc = err_set(ERR_NOMEM, "spec mtp: out of memory");
    if (rc) {
        mtp_destroy(d);
        return rc;
    }
    *impl = d;
    return 0;
}

static int mtp_seq_create(void *impl, int32_t cap, void **st) {
    mtp_impl *d = impl;
    mtp_seq *q = calloc(1, sizeof *q);
    if (!q)
        return err_set(ERR_NOMEM, "spec mtp: out of memory");
    int rc = spec_kvseq_init(&q->s, cap, d->bs, "mtp");
    q->ring = calloc((size_t)(d->fill + 1) * (size_t)d->W, sizeof *q->ring);
    q->hcur = calloc((size_t)d->W, sizeof *q->hcur);
    if (rc || !q->ring || !q->hcur) {
        spec_kvseq_free(&q->s, d->kv);
        free(q->ring);
        free(q->hcur);
        free(q);
        return rc ? rc : err_set(ERR_NOMEM, "spec mtp: out of memory");
    }
    *st = q;
    return 0;
}

static void mtp_seq_destroy(void *impl, void *st) {
    mtp_seq *q = st;
    spec_kvseq_free(&q->s, ((mtp_impl *)impl)->kv);
    free(q->ring);
    free(q->hcur);
    free(q);
}

static void mtp_seq_park(void *impl, void *st) {
    spec_kvseq_park(&((mtp_seq *)st)->s, ((mtp_impl *)impl)->kv);
}

/* The ring slot of trunk position p. */
static float *mtp_ring(const mtp_impl *d, mtp_seq *q, int64_t p) {
    return q->ring + (p % (d->fill + 1)) * d->W;
}

/* Reconciles q with the sequence's tokens and makes room: returns the tokens to draft (0: none). */
static int32_t mtp_prepare(mtp_impl *d, mtp_seq *q, const spec_req *r) {
    if (q->s.off || r->n_toks > q->s.cap)
        return 0;
    int32_t n = r->n_toks;
    /* the trunk ran real tokens only; they only ever grow (a mismatch: start over) */
    if (q->s.n_done > n - 1 ||
        memcmp(q->s.toks, r->toks, (size_t)q->s.n_done * sizeof *q->s.toks) != 0)
        q->s.n_done = 0;
    memcpy(q->s.toks + q->s.n_done, r->toks + q->s.n_done,
           (size_t)(n - q->s.n_done) * sizeof *q->s.toks);
    return spec_kvseq_reserve(&q->s, d->kv, d->bs, d->n_ctx, n, r->k); /* MTP rows up to
                                                                        * n - 1 + k - 1 */
}

/* Runs fwd_run_mtp over d->fs[0..nb) (tokens in d->tok, previous hidden states in d->h_in). */
static int mtp_run(mtp_impl *d, int32_t nb, const float **logits) {
    int64_t n_out;
    fwd_batch b = {.seqs = d->fs, .n_seqs = nb};
    return fwd_run_mtp(d->fc, &b, d->h_in, logits, &n_out);
}

static int mtp_draft(void *impl, spec_req *reqs, int32_t n) {
    mtp_impl *d = impl;
    int64_t W = d->W, width;
    for (int32_t i = 0; i < n; i++) {
        mtp_seq *q = (mtp_seq *)reqs[i].seq;
        reqs[i].n_out = 0;
        d->want[i] = mtp_prepare(d, q, &reqs[i]);
        d->pos[i] = q->s.n_done;
    }
    /* 1: the trunk over each sequence's unseen tokens but the newest, in budget-sized runs; the
     * hidden states go to the sequences' rings */
    for (;;) {
        int32_t nb = 0;
        int64_t budget = d->max_tokens;
        for (int32_t i = 0; i < n && budget > 0; i++) {
            mtp_seq *q = (mtp_seq *)reqs[i].seq;
            int32_t left = reqs[i].n_toks - 1 - d->pos[i];
            if (!d->want[i] || left <= 0)
                continue;
            int32_t t = left < budget ? left : (int32_t)budget;
            d->fs[nb] = (fwd_seq){.tokens = q->s.toks + d->pos[i],
                                  .n_tokens = t,
                                  .pos0 = d->pos[i],
                                  .blocks = q->s.ids,
                                  .n_blocks = q->s.n_ids,
                                  .n_logits = 0};
            d->fs_of[nb++] = i;
            budget -= t;
        }
        if (nb == 0)
            break;
        const float *logits;
        int64_t n_out, row = 0;
        fwd_batch b = {.seqs = d->fs, .n_seqs = nb};
        int rc = fwd_run(d->fc, &b, &logits, &n_out);
        if (rc)
            return rc;
        for (int32_t j = 0; j < nb; j++) {
            int32_t i = d->fs_of[j];
            mtp_seq *q = (mtp_seq *)reqs[i].seq;
            for (int32_t t = 0; t < d->fs[j].n_tokens; t++, row++) {
                int64_t p = d->fs[j].pos0 + t;
                if (p + 1 + d->fill < reqs[i].n_toks - 1)
                    continue; /* older than the MTP rows will read */
                const float *h = fwd_hidden(d->fc, row, &width);
                if (!h || width != W)
                    return err_set(ERR_INVAL, "spec mtp: the model keeps no hidden state");
                memcpy(mtp_ring(d, q, p), h, (size_t)W * sizeof(float));
            }
            d->pos[i] += d->fs[j].n_tokens;
            q->s.n_done = d->pos[i];
        }
    }
    /* 2: the MTP block over each sequence's last positions (its window) up to the newest token;
     * the last row's greedy token is the first guess */
    int32_t nb = 0;
    int64_t rows = 0;
    for (int32_t i = 0; i < n; i++) {
        mtp_seq *q = (mtp_seq *)reqs[i].seq;
        int32_t last = reqs[i].n_toks - 1;
        if (!d->want[i] || q->s.n_done != last)
            continue;
        int32_t p0 = last - d->fill + 1 > 0 ? last - d->fill + 1 : 0;
        if (rows + (last - p0 + 1) > d->max_tokens) {
            d->want[i] = 0;
            continue;
        }
        for (int32_t p = p0; p <= last; p++, rows++) {
            d->tok[rows] = q->s.toks[p];
            if (p == 0)
                memset(d->h_in + rows * W, 0, (size_t)W * sizeof(float));
            else
                memcpy(d->h_in + rows * W, mtp_ring(d, q, p - 1), (size_t)W * sizeof(float));
        }
        d->fs[nb] = (fwd_seq){.tokens = d->tok + rows - (last - p0 + 1),
                              .n_tokens = last - p0 + 1,
                              .pos0 = p0,
                              .blocks = q->s.ids,
                              .n_blocks = q->s.n_ids,
                              .n_logits = 1};
        d->fs_of[nb++] = i;
    }
    if (nb > 0) {
        const float *logits;
        int rc = mtp_run(d, nb, &logits);
        if (rc)
            return rc;
        int64_t row = 0;
        for (int32_t j = 0; j < nb; j++) {
            int32_t i = d->fs_of[j];
            mtp_seq *q = (mtp_seq *)reqs[i].seq;
            row += d->fs[j].n_tokens;
            const float *h = fwd_hidden(d->fc, row - 1, &width);
            memcpy(q->hcur, h, (size_t)W * sizeof(float));
            reqs[i].out[0] = spec_argmax(logits + (int64_t)j * d->n_vocab, d->n_vocab);
            reqs[i].n_out = 1;
        }
    }
    /* 3: each guess fed back with the block's own hidden state, one row per sequence */
    for (int32_t round = 1;; round++) {
        nb = 0;
        for (int32_t i = 0; i < n; i++) {
            mtp_seq *q = (mtp_seq *)reqs[i].seq;
            if (d->want[i] <= round || reqs[i].n_out != round)
                continue;
            int32_t p = reqs[i].n_toks - 1 + round;
            d->tok[nb] = reqs[i].out[round - 1];
            memcpy(d->h_in + (int64_t)nb * W, q->hcur, (size_t)W * sizeof(float));
            d->fs[nb] = (fwd_seq){.tokens = d->tok + nb,
                                  .n_tokens = 1,
                                  .pos0 = p,
                                  .blocks = q->s.ids,
                                  .n_blocks = q->s.n_ids,
                                  .n_logits = 1};
            d->fs_of[nb++] = i;
        }
        if (nb == 0)
            break;
        const float *logits;
        int rc = mtp_run(d, nb, &logits);
        if (rc)
            return rc;
        for (int32_t j = 0; j < nb; j++) {
            int32_t i = d->fs_of[j];
            mtp_seq *q = (mtp_seq *)reqs[i].seq;
            memcpy(q->hcur, fwd_hidden(d->fc, j, &width), (size_t)W * sizeof(float));
            reqs[i].out[round] = spec_argmax(logits + (int64_t)j * d->n_vocab, d->n_vocab);
            reqs[i].n_out = round + 1;
        }
    }
    return 0;
}

const spec_drafter spec_mtp_drafter = {
    .name = "mtp",
    .create = mtp_create,
    .destroy = mtp_destroy,
    .seq_create = mtp_seq_create,
    .seq_destroy = mtp_seq_destroy,
    .seq_park = mtp_seq_park,
    .draft = mtp_draft,
};
