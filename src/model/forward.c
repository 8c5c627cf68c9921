/* SPDX-License-Identifier: MIT */
/*
 * forward: see forward.h. One step is one pool_run; inside it every thread walks the same list of
 * phases separated by pool_barrier. Work inside a phase is divided three ways, each of which keeps
 * a value's computation independent of the division:
 *   rows   - token rows [T*i/n, T*(i+1)/n): embedding, norms, RoPE, KV writes, SwiGLU, residuals,
 *            activation quantization;
 *   cols   - kn_matmul's column blocks;
 *   pairs  - (token, head) pairs for attention.
 * Per layer: norm+quantize | Q,K,V | bias, q/k-norm, RoPE, KV store | attention | quantize |
 * output proj | residual, norm, quantize | gate, up | SwiGLU, quantize | down, then the residual is
 * folded into the next layer's first phase. Logit rows are gathered, normed and projected last.
 *
 * RoPE angles are computed per token from its absolute position in double precision
 * (theta_i = freq_scale * pos * base^(-2i/n_rot)), so they are the same for a position whichever
 * step computes it.
 */
#include "model/forward.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/pool.h"
#include "model/model_int.h"

#include <stdlib.h>
#include <string.h>

struct fwd_ctx {
    model *m;
    kv_pool *kv;
    pool *threads;
    int n_threads;
    int64_t max_tokens, max_outputs, attn_chunk;
    int64_t q_dim, kv_dim, act_k; /* act_k: widest matmul input */
    /* [max_tokens][...] */
    float *x, *xn, *q, *k, *v, *att, *y, *g, *u;
    int8_t *aq;
    float *aqd;
    int32_t *aqs;
    int32_t *aqs16; /* per-16 sums (Q6_K weights) */
    float *rope;       /* [max_tokens][n_rot/2][2] */
    int32_t *tok_id;   /* per token row */
    int32_t *tok_pos;
    int32_t *tok_seq;
    /* [max_outputs][...] */
    int64_t *out_row;
    float *out_x;
    float *logits;
    void **mm_scratch;    /* per thread */
    float **attn_scratch; /* per thread */
    bool fault_attn_offsets, fault_big_batch; /* FAULT (b), (d): fault build only */
    /* the step being run */
    const fwd_batch *b;
    int64_t n_tok, n_out;
};

static void *fwd_alloc(size_t n, bool *fail) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p)
        *fail = true;
    return p;
}

int fwd_ctx_create(model *m, kv_pool *kv, int64_t max_tokens, int64_t max_outputs, int n_threads,
                   int64_t attn_chunk, fwd_ctx **out) {
    *out = NULL;
    const model_hparams *hp = &m->hp;
    if (max_tokens <= 0 || max_outputs <= 0 || n_threads <= 0 || attn_chunk <= 0)
        return err_set(ERR_INVAL, "forward: invalid sizes (tokens %lld, outputs %lld, threads %d)",
                       (long long)max_tokens, (long long)max_outputs, n_threads);
    fwd_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(ERR_NOMEM, "forward: out of memory");
    c->m = m;
    c->kv = kv;
    c->max_tokens = max_tokens;
    c->max_outputs = max_outputs;
    c->attn_chunk = attn_chunk;
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->act_k = hp->n_embd;
    if (c->q_dim > c->act_k)
        c->act_k = c->q_dim;
    if (hp->n_ff > c->act_k)
        c->act_k = hp->n_ff;
    size_t T = (size_t)max_tokens, O = (size_t)max_outputs, F = sizeof(float);
    bool fail = false;
    c->x = fwd_alloc(T * (size_t)hp->n_embd * F, &fail);
    c->xn = fwd_alloc(T * (size_t)hp->n_embd * F, &fail);
    c->y = fwd_alloc(T * (size_t)hp->n_embd * F, &fail);
    c->q = fwd_alloc(T * (size_t)c->q_dim * F, &fail);
    c->att = fwd_alloc(T * (size_t)c->q_dim * F, &fail);
    c->k = fwd_alloc(T * (size_t)c->kv_dim * F, &fail);
    c->v = fwd_alloc(T * (size_t)c->kv_dim * F, &fail);
    c->g = fwd_alloc(T * (size_t)hp->n_ff * F, &fail);
    c->u = fwd_alloc(T * (size_t)hp->n_ff * F, &fail);
    size_t arows = T > O ? T : O;
    c->aq = fwd_alloc(arows * (size_t)c->act_k, &fail);
    c->aqd = fwd_alloc(arows * (size_t)(c->act_k / 32 + 1) * F, &fail);
    c->aqs = fwd_alloc(arows * (size_t)(c->act_k / 32 + 1) * sizeof(int32_t), &fail);
    c->aqs16 = fwd_alloc(arows * (size_t)(c->act_k / 32 + 1) * sizeof(int32_t), &fail);
    c->rope = fwd_alloc(T * (size_t)hp->n_rot * F, &fail);
    c->tok_id = fwd_alloc(T * sizeof(int32_t), &fail);
    c->tok_pos = fwd_alloc(T * sizeof(int32_t), &fail);
    c->tok_seq = fwd_alloc(T * sizeof(int32_t), &fail);
    c->out_row = fwd_alloc(O * sizeof(int64_t), &fail);
    c->out_x = fwd_alloc(O * (size_t)hp->n_embd * F, &fail);
    c->logits = fwd_alloc(O * (size_t)hp->n_vocab * F, &fail);
    c->mm_scratch = calloc((size_t)n_threads, sizeof(void *));
    c->attn_scratch = calloc((size_t)n_threads, sizeof(float *));
    if (!c->mm_scratch || !c->attn_scratch)
        fail = true;
    for (int i = 0; !fail && i < n_threads; i++) {
        c->mm_scratch[i] = fwd_alloc(kn_matmul_scratch_bytes(), &fail);
        c->attn_scratch[i] = fwd_alloc((size_t)attn_chunk * F, &fail);
    }
    if (fail) {
        fwd_ctx_destroy(c);
        return err_set(ERR_NOMEM, "forward: out of memory for %lld-token buffers",
                       (long long)max_tokens);
    }
    int rc = pool_create(n_threads, &c->threads);
    if (rc) {
        fwd_ctx_destroy(c);
        return rc;
    }
    c->n_threads = n_threads;
    c->fault_attn_offsets = FLAG_FAULT(ATTN_OFFSETS);
    c->fault_big_batch = FLAG_FAULT(BIG_BATCH);
    *out = c;
    return 0;
}

void fwd_ctx_destroy(fwd_ctx *c) {
    if (!c)
        return;
    pool_destroy(c->threads);
    free(c->x);
    free(c->xn);
    free(c->y);
    free(c->q);
    free(c->att);
    free(c->k);
    free(c->v);
    free(c->g);
    free(c->u);
    free(c->aq);
    free(c->aqd);
    free(c->aqs);
    free(c->aqs16);
    free(c->rope);
    free(c->tok_id);
    free(c->tok_pos);
    free(c->tok_seq);
    free(c->out_row);
    free(c->out_x);
    free(c->logits);
    for (int i = 0; i < c->n_threads; i++) {
        if (c->mm_scratch)
            free(c->mm_scratch[i]);
        if (c->attn_scratch)
            free(c->attn_scratch[i]);
    }
    free(c->mm_scratch);
    free(c->attn_scratch);
    free(c);
}

int fwd_ctx_n_threads(const fwd_ctx *c) {
    return c->n_threads;
}

/* ---- the phases ---- */

typedef struct fwd_part {
    int64_t r0, r1; /* my token rows */
    int ith, nth;
} fwd_part;

static void fwd_quantize_rows(fwd_ctx *c, const float *x, int64_t k, int64_t r0, int64_t r1) {
    kn_act a = {.x = x, .ldx = k, .q = c->aq, .qd = c->aqd, .qs = c->aqs,
                .qs16 = c->aqs16};
    kn_act_quantize(&a, k, r0, r1, c->m->isa);
}

/* y[n_rows][N] = x W^T over my column slice; x quantized beforehand if W wants it. */
static void fwd_matmul(fwd_ctx *c, const fwd_part *pt, const kn_mat *w, const float *x,
                       int64_t n_rows, float *y) {
    int64_t k = kn_mat_k(w);
    kn_act a = {.x = x, .ldx = k, .q = c->aq, .qd = c->aqd, .qs = c->aqs,
                .qs16 = c->aqs16};
    kn_matmul(w, &a, n_rows, y, kn_mat_n(w), pt->ith, pt->nth, c->mm_scratch[pt->ith]);
}

static void fwd_norm_rows(fwd_ctx *c, const fwd_part *pt, const float *w, bool quant) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd;
    for (int64_t t = pt->r0; t < pt->r1; t++)
        kn_rmsnorm(c->x + t * D, w, hp->rms_eps, D, c->xn + t * D, c->m->isa);
    if (quant)
        fwd_quantize_rows(c, c->xn, D, pt->r0, pt->r1);
}

static void fwd_embed(fwd_ctx *c, const fwd_part *pt) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd, half = hp->n_rot / 2;
    for (int64_t t = pt->r0; t < pt->r1; t++) {
        kn_dequantize_row(c->m->tok_embd->type, c->m->tok_embd->data, c->tok_id[t], D,
                          c->x + t * D);
        float *cs = c->rope + t * hp->n_rot;
        double pos = (double)c->tok_pos[t];
        for (int64_t i = 0; i < half; i++) {
            double theta = (double)hp->rope_freq_scale * pos *
                           pow((double)hp->rope_base, -2.0 * (double)i / (double)hp->n_rot);
            if (c->m->rope_factors)
                theta /= (double)c->m->rope_factors[i];
            cs[2 * i] = (float)cos(theta);
            cs[2 * i + 1] = (float)sin(theta);
        }
    }
}

/* Biases, per-head Q/K norms, RoPE, and the K/V write into the pool, for my rows. */
static void fwd_qkv_post(fwd_ctx *c, const fwd_part *pt, const model_layer *L, int64_t layer) {
    const model_hparams *hp = &c->m->hp;
    int64_t hd = hp->head_dim, bs = kv_pool_block_size(c->kv);
    bool f16 = kv_pool_f16(c->kv);
    size_t esz = f16 ? 2 : 4, bb = kv_pool_block_bytes(c->kv);
    char *kb = kv_pool_k_base(c->kv, layer), *vb = kv_pool_v_base(c->kv, layer);
    for (int64_t t = pt->r0; t < pt->r1; t++) {
        float *q = c->q + t * c->q_dim, *k = c->k + t * c->kv_dim, *v = c->v + t * c->kv_dim;
        if (L->bq) {
            kn_add(q, L->bq, c->q_dim);
            kn_add(k, L->bk, c->kv_dim);
            kn_add(v, L->bv, c->kv_dim);
        }
        const float *cs = c->rope + t * hp->n_rot;
        for (int64_t h = 0; h < hp->n_head; h++) {
            if (L->q_norm)
                kn_rmsnorm(q + h * hd, L->q_norm, hp->rms_eps, hd, q + h * hd, c->m->isa);
            kn_rope(q + h * hd, hp->n_rot, cs, hp->rope_neox);
        }
        for (int64_t h = 0; h < hp->n_head_kv; h++) {
            if (L->k_norm)
                kn_rmsnorm(k + h * hd, L->k_norm, hp->rms_eps, hd, k + h * hd, c->m->isa);
            kn_rope(k + h * hd, hp->n_rot, cs, hp->rope_neox);
        }
        const fwd_seq *s = &c->b->seqs[c->tok_seq[t]];
        int64_t p = c->tok_pos[t];
        size_t off = (size_t)s->blocks[p / bs] * bb + (size_t)((p % bs) * c->kv_dim) * esz;
        kn_store_kv(kb + off, k, c->kv_dim, f16, c->m->isa);
        kn_store_kv(vb + off, v, c->kv_dim, f16, c->m->isa);
    }
}

static void fwd_attention(fwd_ctx *c, const fwd_part *pt, int64_t layer) {
    const model_hparams *hp = &c->m->hp;
    int64_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    int64_t n_pairs = c->n_tok * hp->n_head;
    int64_t p0 = n_pairs * pt->ith / pt->nth, p1 = n_pairs * (pt->ith + 1) / pt->nth;
    float scale = 1.0f / sqrtf((float)hd);
    kn_attn_kv kv = {.k_base = kv_pool_k_base(c->kv, layer),
                     .v_base = kv_pool_v_base(c->kv, layer),
                     .block_bytes = kv_pool_block_bytes(c->kv),
                     .block_size = kv_pool_block_size(c->kv),
                     .kv_stride = c->kv_dim,
                     .f16 = kv_pool_f16(c->kv),
                     .window = hp->sliding_window};
    for (int64_t pi = p0; pi < p1; pi++) {
        int64_t t = pi / hp->n_head, h = pi % hp->n_head;
        kv.table = c->b->seqs[c->tok_seq[t]].blocks;
        if (c->fault_attn_offsets && c->b->n_seqs > 1 &&
            c->b->seqs[0].n_blocks * kv.block_size > c->tok_pos[t])
            kv.table = c->b->seqs[0].blocks; /* FAULT (b): the first sequence's block table */
        kn_attn_row(c->q + t * c->q_dim + h * hd, &kv, h / group, hd, (int64_t)c->tok_pos[t] + 1,
                    scale, c->attn_chunk, c->attn_scratch[pt->ith], c->att + t * c->q_dim + h * hd,
                    c->m->isa);
    }
}

static void fwd_step(void *vctx, int ith, int nth) {
    fwd_ctx *c = vctx;
    model *m = c->m;
    const model_hparams *hp = &m->hp;
    int64_t D = hp->n_embd, FF = hp->n_ff, T = c->n_tok;
    fwd_part pt = {.r0 = T * ith / nth, .r1 = T * (ith + 1) / nth, .ith = ith, .nth = nth};
    pool *P = c->threads;

    fwd_embed(c, &pt);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        if (l > 0)
            for (int64_t t = pt.r0; t < pt.r1; t++)
                kn_add(c->x + t * D, c->y + t * D, D);
        /* Q, K and V (and gate and up) share their input: quantize it if any of them needs it
         * (mixed-type files, e.g. Q4_K_M, give attn_v another type than attn_q) */
        fwd_norm_rows(c, &pt, L->attn_norm,
                      kn_mat_wants_q8(L->wq) || kn_mat_wants_q8(L->wk) || kn_mat_wants_q8(L->wv));
        pool_barrier(P);
        fwd_matmul(c, &pt, L->wq, c->xn, T, c->q);
        fwd_matmul(c, &pt, L->wk, c->xn, T, c->k);
        fwd_matmul(c, &pt, L->wv, c->xn, T, c->v);
        pool_barrier(P);
        fwd_qkv_post(c, &pt, L, l);
        pool_barrier(P);
        fwd_attention(c, &pt, l);
        pool_barrier(P);
        if (kn_mat_wants_q8(L->wo)) {
            fwd_quantize_rows(c, c->att, c->q_dim, pt.r0, pt.r1);
            pool_barrier(P);
        }
        fwd_matmul(c, &pt, L->wo, c->att, T, c->y);
        pool_barrier(P);
        for (int64_t t = pt.r0; t < pt.r1; t++)
            kn_add(c->x + t * D, c->y + t * D, D);
        fwd_norm_rows(c, &pt, L->ffn_norm,
                      kn_mat_wants_q8(L->w_gate) || kn_mat_wants_q8(L->w_up));
        pool_barrier(P);
        fwd_matmul(c, &pt, L->w_gate, c->xn, T, c->g);
        fwd_matmul(c, &pt, L->w_up, c->xn, T, c->u);
        pool_barrier(P);
        for (int64_t t = pt.r0; t < pt.r1; t++)
            kn_swiglu(c->g + t * FF, c->u + t * FF, FF, c->g + t * FF, m->isa);
        if (kn_mat_wants_q8(L->w_down))
            fwd_quantize_rows(c, c->g, FF, pt.r0, pt.r1);
        pool_barrier(P);
        fwd_matmul(c, &pt, L->w_down, c->g, T, c->y);
        pool_barrier(P);
    }
    /* last residual, then the output rows */
    for (int64_t t = pt.r0; t < pt.r1; t++)
        kn_add(c->x + t * D, c->y + t * D, D);
    pool_barrier(P);
    int64_t o0 = c->n_out * ith / nth, o1 = c->n_out * (ith + 1) / nth;
    for (int64_t o = o0; o < o1; o++)
        kn_rmsnorm(c->x + c->out_row[o] * D, m->output_norm, hp->rms_eps, D, c->out_x + o * D,
                   m->isa);
    if (kn_mat_wants_q8(m->output))
        fwd_quantize_rows(c, c->out_x, D, o0, o1);
    pool_barrier(P);
    /* FAULT (d): above batch 32 only the first 32 logit rows are computed; later rows keep
     * whatever the buffer held from an earlier step */
    int64_t n_logit_rows = c->fault_big_batch && c->n_out > 32 ? 32 : c->n_out;
    if (n_logit_rows > 0)
        fwd_matmul(c, &pt, m->output, c->out_x, n_logit_rows, c->logits);
}

int fwd_run(fwd_ctx *c, const fwd_batch *b, const float **logits, int64_t *n_out) {
    const model_hparams *hp = &c->m->hp;
    int64_t bs = kv_pool_block_size(c->kv);
    int64_t n_tok = 0, n_o = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const fwd_seq *q = &b->seqs[s];
        if (q->n_tokens <= 0 || q->pos0 < 0 || q->n_logits < 0 || q->n_logits > q->n_tokens)
            return err_set(ERR_INVAL, "forward: sequence %d: bad token count %d / position %d / logits %d",
                           s, q->n_tokens, q->pos0, q->n_logits);
        int64_t end = (int64_t)q->pos0 + q->n_tokens;
        if ((end + bs - 1) / bs > q->n_blocks)
            return err_set(ERR_INVAL, "forward: sequence %d: %d blocks do not cover %lld positions",
                           s, q->n_blocks, (long long)end);
        for (int32_t i = 0; i < q->n_blocks && i < (end + bs - 1) / bs; i++)
            if (q->blocks[i] < 0 || q->blocks[i] >= kv_pool_n_blocks(c->kv))
                return err_set(ERR_INVAL, "forward: sequence %d: block id %d out of range", s,
                               q->blocks[i]);
        for (int32_t i = 0; i < q->n_tokens; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= hp->n_vocab)
                return err_set(ERR_INVAL, "forward: sequence %d: token id %d outside vocabulary of %lld",
                               s, q->tokens[i], (long long)hp->n_vocab);
        n_tok += q->n_tokens;
        n_o += q->n_logits;
    }
    if (n_tok > c->max_tokens || n_o > c->max_outputs)
        return err_set(ERR_INVAL, "forward: %lld tokens / %lld outputs exceed the context's %lld / %lld",
                       (long long)n_tok, (long long)n_o, (long long)c->max_tokens,
                       (long long)c->max_outputs);
    int64_t t = 0, o = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const fwd_seq *q = &b->seqs[s];
        for (int32_t i = 0; i < q->n_tokens; i++, t++) {
            c->tok_id[t] = q->tokens[i];
            c->tok_pos[t] = q->pos0 + i;
            c->tok_seq[t] = s;
            if (i >= q->n_tokens - q->n_logits)
                c->out_row[o++] = t;
        }
    }
    c->b = b;
    c->n_tok = n_tok;
    c->n_out = n_o;
    if (n_tok > 0)
        pool_run(c->threads, fwd_step, c);
    *logits = c->logits;
    *n_out = n_o;
    return 0;
}
