/* SPDX-License-Identifier: MIT */
/*
 * spec_draft: a draft model. A second, smaller GGUF with exactly the target's vocabulary (the
 * same token texts, in the same order, and as many logit rows; checked at creation, the error
 * naming the first token that differs) runs over its own KV pool and forward context. One
 * spec_draft call drafts for every sequence at once: a first forward run feeds each sequence
 * the tokens the draft model has not seen yet (at least its last token) and takes the greedy
 * token of its last row, then each further run feeds every sequence still drafting its previous
 * guess, one row each, until each has its k guesses.
 *
 * Each sequence keeps the tokens whose K/V its blocks hold (positions [0, n_done)). At the next
 * call that prefix is compared with the sequence's real tokens: what the target accepted stays,
 * and n_done falls back to the first position that differs (guesses the target refused), so the
 * draft model recomputes from there; nothing is copied. Its blocks are its own (the draft pool
 * has no prefix cache and shares nothing): as many as the target's pool, plus room for the guesses
 * of every sequence. A sequence for which the pool has no room drafts nothing from then on; a
 * parked (preempted) sequence gives its blocks back and starts over when it runs again.
 *
 * The draft model's greedy token is its highest logit, ties to the lowest id. Drafting is
 * deterministic, but that matters for speed only: the target decides every token.
 */
#include "base/err.h"
#include "gguf/gguf.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "spec/spec_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dr_impl {
    model *m;
    kv_pool *kv;
    fwd_ctx *fc;
    int32_t bs;
    int64_t n_vocab;
    int64_t n_ctx; /* the draft model's context: no position at or past it is fed */
    int64_t max_tokens;
    int32_t max_seqs, max_k;
    fwd_seq *fs;    /* [max_seqs] */
    int32_t *fs_of; /* [max_seqs] the request of each row of fs */
    int32_t *pos;   /* [max_seqs] per request: the next position to feed */
    int32_t *want;  /* [max_seqs] per request: tokens it drafts this call (0: none) */
} dr_impl;

typedef spec_kvseq dr_seq; /* its blocks in the draft pool, the tokens they hold, then guesses */

/* Writes token text s as one printable line fragment (at most about 48 bytes) into buf. */
static void dr_show(gguf_str s, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < s.len && o + 8 < cap && i < 40; i++) {
        unsigned char c = (unsigned char)s.s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (s.len > 40 && o + 4 < cap)
        o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = 0;
}

/* Refuses a draft model whose vocabulary is not the target's, naming the first difference. */
static int dr_check_vocab(const model *target, const model *draft, const char *path) {
    gguf_arr a, b;
    const gguf *gt = model_get_gguf(target), *gd = model_get_gguf(draft);
    int ha = gguf_get_arr(gt, "tokenizer.ggml.tokens", &a) == 0 && a.type == GGUF_VT_STRING;
    int hb = gguf_get_arr(gd, "tokenizer.ggml.tokens", &b) == 0 && b.type == GGUF_VT_STRING;
    if (!ha || !hb)
        return err_set(ERR_INVAL,
                       "draft model %s: cannot compare vocabularies (tokenizer.ggml.tokens is "
                       "missing from the %s)",
                       path, ha ? "draft model" : "target model");
    uint64_t n = a.n < b.n ? a.n : b.n;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str x = gguf_arr_str(&a, i), y = gguf_arr_str(&b, i);
        if (x.len != y.len || memcmp(x.s, y.s, x.len) != 0) {
            char sx[64], sy[64];
            dr_show(x, sx, sizeof sx);
            dr_show(y, sy, sizeof sy);
            return err_set(ERR_INVAL,
                           "draft model %s: its vocabulary differs from the target's at token "
                           "%llu: '%s' in the draft model, '%s' in the target",
                           path, (unsigned long long)i, sy, sx);
        }
    }
    if (a.n != b.n) {
        char s[64];
        dr_show(gguf_arr_str(a.n > b.n ? &a : &b, n), s, sizeof s);
        return err_set(ERR_INVAL,
                       "draft model %s: its vocabulary differs from the target's at token %llu: "
                       "'%s' in the %s, none in the %s (%llu tokens against %llu)",
                       path, (unsigned long long)n, s, a.n > b.n ? "target" : "draft model",
                       a.n > b.n ? "draft model" : "target", (unsigned long long)b.n,
                       (unsigned long long)a.n);
    }
    int64_t vt = model_get_hparams(target)->n_vocab, vd = model_get_hparams(draft)->n_vocab;
    if (vt != vd)
        return err_set(ERR_INVAL,
                       "draft model %s: %lld logit rows against the target's %lld (same token "
                       "list, different embedding sizes)",
                       path, (long long)vd, (long long)vt);
    return 0;
}

static void dr_destroy(void *impl) {
    dr_impl *d = impl;
    if (!d)
        return;
    fwd_ctx_destroy(d->fc);
    kv_pool_destroy(d->kv);
    model_destroy(d->m);
    free(d->fs);
    free(d->fs_of);
    free(d->pos);
    free(d->want);
    free(d);
}

static int dr_create(const spec_opts *o, void **impl) {
    *impl = NULL;
    if (!o->draft_path || !o->draft_path[0])
        return err_set(ERR_INVAL, "spec draft: no draft model (give --draft-model FILE)");
    if (o->block_size <= 0 || o->kv_blocks <= 0 || o->max_tokens < o->max_seqs || o->threads <= 0)
        return err_set(ERR_INVAL, "spec draft: invalid options");
    dr_impl *d = calloc(1, sizeof *d);
    if (!d)
        return err_set(ERR_NOMEM, "spec draft: out of memory");
    int rc = model_load(o->draft_path, model_get_isa(o->target), &d->m);
    if (rc) {
        free(d);
        return err_wrap(rc, "draft model"); /* the detail names the file */
    }
    if ((rc = dr_check_vocab(o->target, d->m, o->draft_path))) {
        dr_destroy(d);
        return rc;
    }
    const model_hparams *hp = model_get_hparams(d->m);
    d->bs = o->block_size;
    d->n_vocab = hp->n_vocab;
    d->n_ctx = hp->n_ctx_train;
    d->max_tokens = o->max_tokens;
    d->max_seqs = o->max_seqs;
    d->max_k = o->max_k;
    int64_t per_seq = (o->max_k + o->block_size - 1) / o->block_size + 1;
    kv_pool_opts ko; /* the draft architecture's buffers (latent, index keys, ...) */
    model_kv_pool_opts(d->m, o->kv_f16, o->block_size, o->kv_blocks + per_seq * o->max_seqs, &ko);
    rc = kv_pool_create(&ko, &d->kv);
    if (!rc)
        rc = fwd_ctx_create(d->m, d->kv, o->max_tokens, o->max_seqs, o->threads, o->attn_chunk,
                            &d->fc);
    d->fs = calloc((size_t)o->max_seqs, sizeof *d->fs);
    d->fs_of = calloc((size_t)o->max_seqs, sizeof *d->fs_of);
    d->pos = calloc((size_t)o->max_seqs, sizeof *d->pos);
    d->want = calloc((size_t)o->max_seqs, sizeof *d->want);
    if (!rc && (!d->fs || !d->fs_of || !d->pos || !d->want))
        rc = err_set(ERR_NOMEM, "spec draft: out of memory");
    if (rc) {
        dr_destroy(d);
        return rc;
    }
    *impl = d;
    return 0;
}

static int dr_seq_create(void *impl, int32_t cap, void **st) {
    dr_impl *d = impl;
    dr_seq *q = malloc(sizeof *q);
    if (!q)
        return err_set(ERR_NOMEM, "spec draft: out of memory");
    int rc = spec_kvseq_init(q, cap, d->bs, "draft");
    if (rc) {
        free(q);
        return rc;
    }
    *st = q;
    return 0;
}

static void dr_seq_destroy(void *impl, void *st) {
    spec_kvseq_free(st, ((dr_impl *)impl)->kv);
    free(st);
}

static void dr_seq_park(void *impl, void *st) {
    spec_kvseq_park(st, ((dr_impl *)impl)->kv);
}

/* Reconciles q with the sequence's tokens and makes room: returns the tokens to draft (0: none). */
static int32_t dr_prepare(dr_impl *d, dr_seq *q, const spec_req *r) {
    if (q->off || r->n_toks > q->cap)
        return 0;
    int32_t n = r->n_toks, keep = 0;
    int32_t lim = q->n_done < n - 1 ? q->n_done : n - 1; /* the last token is always fed */
    while (keep < lim && q->toks[keep] == r->toks[keep])
        keep++;
    q->n_done = keep;
    memcpy(q->toks + keep, r->toks + keep, (size_t)(n - keep) * sizeof *q->toks);
    return spec_kvseq_reserve(q, d->kv, d->bs, d->n_ctx, n, r->k);
}

static int dr_draft(void *impl, spec_req *reqs, int32_t n) {
    dr_impl *d = impl;
    for (int32_t i = 0; i < n; i++) {
        dr_seq *q = (dr_seq *)reqs[i].seq;
        d->want[i] = dr_prepare(d, q, &reqs[i]);
        d->pos[i] = q->n_done;
    }
    /* round 0: each sequence's unseen tokens (chunked by the run's token budget), the greedy
     * token of the last one's row */
    for (;;) {
        int32_t nb = 0;
        int64_t budget = d->max_tokens;
        for (int32_t i = 0; i < n && budget > 0; i++) {
            dr_seq *q = (dr_seq *)reqs[i].seq;
            int32_t left = reqs[i].n_toks - d->pos[i];
            if (!d->want[i] || left <= 0)
                continue;
            int32_t t = left < budget ? left : (int32_t)budget;
            d->fs[nb] = (fwd_seq){.tokens = q->toks + d->pos[i],
                                  .n_tokens = t,
                                  .pos0 = d->pos[i],
                                  .blocks = q->ids,
                                  .n_blocks = q->n_ids,
                                  .n_logits = t == left ? 1 : 0};
            d->fs_of[nb++] = i;
            budget -= t;
        }
        if (nb == 0)
            break;
        const float *logits;
        int64_t n_out;
        fwd_batch b = {.seqs = d->fs, .n_seqs = nb};
        int rc = fwd_run(d->fc, &b, &logits, &n_out);
        if (rc)
            return rc;
        int64_t o = 0;
        for (int32_t j = 0; j < nb; j++) {
            int32_t i = d->fs_of[j];
            d->pos[i] += d->fs[j].n_tokens;
            ((dr_seq *)reqs[i].seq)->n_done = d->pos[i];
            if (d->fs[j].n_logits) {
                reqs[i].out[0] = spec_argmax(logits + o * d->n_vocab, d->n_vocab);
                reqs[i].n_out = 1;
                o++;
            }
        }
    }
    /* rounds 1..k-1: each guess fed back, one row per sequence */
    for (int32_t round = 1;; round++) {
        int32_t nb = 0;
        for (int32_t i = 0; i < n; i++) {
            dr_seq *q = (dr_seq *)reqs[i].seq;
            if (d->want[i] <= round)
                continue;
            int32_t p = reqs[i].n_toks - 1 + round;
            q->toks[p] = reqs[i].out[round - 1];
            d->fs[nb] = (fwd_seq){.tokens = q->toks + p,
                                  .n_tokens = 1,
                                  .pos0 = p,
                                  .blocks = q->ids,
                                  .n_blocks = q->n_ids,
                                  .n_logits = 1};
            d->fs_of[nb++] = i;
        }
        if (nb == 0)
            break;
        const float *logits;
        int64_t n_out;
        fwd_batch b = {.seqs = d->fs, .n_seqs = nb};
        int rc = fwd_run(d->fc, &b, &logits, &n_out);
        if (rc)
            return rc;
        for (int32_t j = 0; j < nb; j++) {
            int32_t i = d->fs_of[j];
            ((dr_seq *)reqs[i].seq)->n_done = reqs[i].n_toks + round;
            reqs[i].out[round] = spec_argmax(logits + (int64_t)j * d->n_vocab, d->n_vocab);
            reqs[i].n_out = round + 1;
        }
    }
    return 0;
}

const spec_drafter spec_draft_drafter = {
    .name = "draft",
    .create = dr_create,
    .destroy = dr_destroy,
    .seq_create = dr_seq_create,
    .seq_destroy = dr_seq_destroy,
    .seq_park = dr_seq_park,
    .draft = dr_draft,
};
