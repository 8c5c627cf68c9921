/* SPDX-License-Identifier: MIT */
/*
 * forward: see forward.h. One step is a sequence of phases, each one pool_for over chunks that
 * whichever thread is free claims (so a descheduled thread delays only the chunk it holds). A
 * phase's work is divided three ways, each of which keeps a value's computation independent of
 * the division:
 *   rows   - token rows [T*i/n, T*(i+1)/n): embedding, norms, RoPE, KV writes, SwiGLU, residuals,
 *            activation quantization;
 *   cols   - kn_matmul's column blocks (Q, K and V in one phase; gate and up in one);
 *   heads  - attention units: one token's query heads of one KV head (up to attn-group of them,
 *            fewer when a step has too few units to keep every thread busy), each head's result
 *            the same bits whichever heads share its unit (kn_attn_rows).
 * Chunk counts follow the work (a tiny model's phases run on the caller alone).
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
    /* mm-panel: matmuls over more rows run panel by panel, every thread sweeping the columns of
     * one panel before the next: a panel's activations (under 1 MiB at K = 896) stay in the L2
     * across the sweep, where a whole 4096-row prefill step's would stream from L3 for every
     * column block; each panel converts the weights again, a cost amortised over its 256 rows as
     * at batch 1. 0: one panel of all rows. */
    int64_t mm_panel;
    int64_t attn_group;    /* most query heads per attention unit (attn-group, <= the GQA group) */
    bool attn_per_row;     /* attn-group 0: kn_attn_row per head, one head per unit */
    int64_t attn_per_unit; /* the step being run: heads per attention unit */
    int64_t q_dim, kv_dim, act_k; /* act_k: widest matmul input */
    /* [max_tokens][...] */
    float *x, *xn, *q, *k, *v, *att, *y, *g, *u;
    int8_t *aq;
    float *aqd;
    int32_t *aqs;
    int32_t *aqs16;  /* per-16 sums (Q6_K weights) */
    float *rope;     /* [max_tokens][n_rot/2][2] */
    int32_t *tok_id; /* per token row */
    int32_t *tok_pos;
    int32_t *tok_seq;
    /* [max_outputs][...] */
    int64_t *out_row;
    float *out_x;
    float *logits;
    void **mm_scratch;                        /* per thread */
    float **attn_scratch;                     /* per thread */
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
    c->mm_panel = flags_int(FLAG_MM_PANEL) > 0 ? flags_int(FLAG_MM_PANEL) : max_tokens;
    c->attn_group = hp->n_head / hp->n_head_kv;
    c->attn_per_row = flags_int(FLAG_ATTN_GROUP) == 0;
    if (c->attn_group > flags_int(FLAG_ATTN_GROUP))
        c->attn_group = c->attn_per_row ? 1 : flags_int(FLAG_ATTN_GROUP);
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
        size_t an = kn_attn_scratch_floats(c->attn_group, hp->head_dim, attn_chunk);
        c->attn_scratch[i] = fwd_alloc(an * F, &fail);
        if (c->attn_scratch[i]) /* padding rows are read (never used): keep them defined */
            memset(c->attn_scratch[i], 0, an * F);
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

/* Work per chunk below which a phase is not split further: a chunk should cost well above a
 * claim (tens of nanoseconds) and a wake-up; a tiny model's phases run on the caller alone. */
#define FWD_CHUNK_WORK    32768
#define FWD_MM_CHUNK_WORK 262144

typedef enum fwd_kind {
    FWD_PRE_ATTN, /* (layer 0: embedding and RoPE angles; else residual), attention norm */
    FWD_QKV_POST, /* biases, Q/K norms, RoPE, K/V store */
    FWD_ATTN,     /* attention over (token, head) pairs */
    FWD_ATT_QUANT,
    FWD_PRE_FFN, /* residual, FFN norm */
    FWD_SWIGLU,
    FWD_OUT_NORM, /* last residual and output norm of the logit rows */
    FWD_MATMUL,
} fwd_kind;

typedef struct fwd_mm {
    const kn_mat *w;
    const float *x;
    float *y;
    int64_t rows, chunks; /* chunks: column chunks per row panel */
    int64_t panels;       /* row panels of fwd_ctx.mm_panel rows (the last one shorter) */
} fwd_mm;

typedef struct fwd_phase {
    fwd_ctx *c;
    fwd_kind kind;
    int64_t layer;
    int64_t units; /* rows, outputs or (token, head) pairs */
    bool quant;    /* row phases: quantize the normed rows for a Q8 matmul */
    fwd_mm mm[3];
    int n_mm;
} fwd_phase;

static void fwd_quantize_rows(fwd_ctx *c, const float *x, int64_t k, int64_t r0, int64_t r1) {
    kn_act a = {.x = x, .ldx = k, .q = c->aq, .qd = c->aqd, .qs = c->aqs, .qs16 = c->aqs16};
    kn_act_quantize(&a, k, r0, r1, c->m->isa);
}

static void fwd_norm_rows(fwd_ctx *c, int64_t r0, int64_t r1, const float *w, bool quant) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd;
    for (int64_t t = r0; t < r1; t++)
        kn_rmsnorm(c->x + t * D, w, hp->rms_eps, D, c->xn + t * D, c->m->isa);
    if (quant)
        fwd_quantize_rows(c, c->xn, D, r0, r1);
}

static void fwd_add_rows(fwd_ctx *c, int64_t r0, int64_t r1) {
    int64_t D = c->m->hp.n_embd;
    for (int64_t t = r0; t < r1; t++)
        kn_add(c->x + t * D, c->y + t * D, D);
}

static void fwd_embed(fwd_ctx *c, int64_t r0, int64_t r1) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd, half = hp->n_rot / 2;
    for (int64_t t = r0; t < r1; t++) {
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

/* Biases, per-head Q/K norms, RoPE, and the K/V write into the pool, for rows [r0, r1). */
static void fwd_qkv_post(fwd_ctx *c, int64_t r0, int64_t r1, const model_layer *L, int64_t layer) {
    const model_hparams *hp = &c->m->hp;
    int64_t hd = hp->head_dim, bs = kv_pool_block_size(c->kv);
    bool f16 = kv_pool_f16(c->kv);
    size_t esz = f16 ? 2 : 4, bb = kv_pool_block_bytes(c->kv);
    char *kb = kv_pool_k_base(c->kv, layer), *vb = kv_pool_v_base(c->kv, layer);
    for (int64_t t = r0; t < r1; t++) {
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

/* Attention units [p0, p1): unit u is token u / units_per_token, kv head kvh and the
 * attn_per_unit-head slice s of its query heads (see fwd_step). */
static void fwd_attention(fwd_ctx *c, int64_t p0, int64_t p1, int64_t layer, int thread) {
    const model_hparams *hp = &c->m->hp;
    int64_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv, per = c->attn_per_unit;
    int64_t slices = (group + per - 1) / per, units_tok = hp->n_head_kv * slices;
    float scale = 1.0f / sqrtf((float)hd);
    kn_attn_kv kv = {.k_base = kv_pool_k_base(c->kv, layer),
                     .v_base = kv_pool_v_base(c->kv, layer),
                     .block_bytes = kv_pool_block_bytes(c->kv),
                     .block_size = kv_pool_block_size(c->kv),
                     .kv_stride = c->kv_dim,
                     .f16 = kv_pool_f16(c->kv),
                     .window = hp->sliding_window};
    for (int64_t pi = p0; pi < p1; pi++) {
        int64_t t = pi / units_tok, kvh = pi % units_tok / slices, s = pi % slices;
        int64_t h = kvh * group + s * per, g = group - s * per < per ? group - s * per : per;
        kv.table = c->b->seqs[c->tok_seq[t]].blocks;
        if (c->fault_attn_offsets && c->b->n_seqs > 1 &&
            c->b->seqs[0].n_blocks * kv.block_size > c->tok_pos[t])
            kv.table = c->b->seqs[0].blocks; /* FAULT (b): the first sequence's block table */
        const float *q = c->q + t * c->q_dim + h * hd;
        float *o = c->att + t * c->q_dim + h * hd;
        int64_t n_pos = (int64_t)c->tok_pos[t] + 1;
        if (c->attn_per_row)
            kn_attn_row(q, &kv, kvh, hd, n_pos, scale, c->attn_chunk, c->attn_scratch[thread], o,
                        c->m->isa);
        else
            kn_attn_rows(q, g, &kv, kvh, hd, n_pos, scale, c->attn_chunk, c->attn_scratch[thread],
                         o, c->m->isa);
    }
}

/* Output rows [o0, o1): the last residual of their token rows (the other rows' is never read),
 * the output norm, and quantization if the output matrix wants it. */
static void fwd_out_norm(fwd_ctx *c, int64_t o0, int64_t o1, bool quant) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd;
    for (int64_t o = o0; o < o1; o++) {
        int64_t t = c->out_row[o];
        kn_add(c->x + t * D, c->y + t * D, D);
        kn_rmsnorm(c->x + t * D, c->m->output_norm, hp->rms_eps, D, c->out_x + o * D, c->m->isa);
    }
    if (quant)
        fwd_quantize_rows(c, c->out_x, D, o0, o1);
}

/* Runs chunk ci of n of a phase. Row-like phases take units [units*ci/n, units*(ci+1)/n). */
static void fwd_phase_chunk(void *vph, int64_t ci, int64_t n, int thread) {
    fwd_phase *ph = vph;
    fwd_ctx *c = ph->c;
    const model_layer *L = ph->layer >= 0 ? &c->m->layers[ph->layer] : NULL;
    if (ph->kind == FWD_MATMUL) {
        int i = 0;
        while (ci >= ph->mm[i].chunks * ph->mm[i].panels)
            ci -= ph->mm[i].chunks * ph->mm[i].panels, i++;
        const fwd_mm *mm = &ph->mm[i];
        int64_t k = kn_mat_k(mm->w), kb = k / 32, ldy = kn_mat_n(mm->w);
        int64_t r0 = ci / mm->chunks * c->mm_panel, r1 = r0 + c->mm_panel;
        if (r1 > mm->rows)
            r1 = mm->rows;
        ci %= mm->chunks;
        /* rows [r0, r1): the activation rows and their quantized forms start r0 rows in */
        kn_act a = {.x = mm->x + r0 * k,
                    .ldx = k,
                    .q = c->aq + r0 * k,
                    .qd = c->aqd + r0 * kb,
                    .qs = c->aqs + r0 * kb,
                    .qs16 = c->aqs16 + r0 * kb};
        kn_matmul(mm->w, &a, r1 - r0, mm->y + r0 * ldy, ldy, (int)ci, (int)mm->chunks,
                  c->mm_scratch[thread]);
        return;
    }
    if (ph->kind == FWD_ATTN) /* later tokens attend to more keys: claim the heaviest first */
        ci = n - 1 - ci;
    int64_t u0 = ph->units * ci / n, u1 = ph->units * (ci + 1) / n;
    switch (ph->kind) {
    case FWD_PRE_ATTN:
        if (ph->layer == 0)
            fwd_embed(c, u0, u1);
        else
            fwd_add_rows(c, u0, u1);
        fwd_norm_rows(c, u0, u1, L->attn_norm, ph->quant);
        break;
    case FWD_QKV_POST:
        fwd_qkv_post(c, u0, u1, L, ph->layer);
        break;
    case FWD_ATTN:
        fwd_attention(c, u0, u1, ph->layer, thread);
        break;
    case FWD_ATT_QUANT:
        fwd_quantize_rows(c, c->att, c->q_dim, u0, u1);
        break;
    case FWD_PRE_FFN:
        fwd_add_rows(c, u0, u1);
        fwd_norm_rows(c, u0, u1, L->ffn_norm, ph->quant);
        break;
    case FWD_SWIGLU: {
        int64_t FF = c->m->hp.n_ff;
        for (int64_t t = u0; t < u1; t++)
            kn_swiglu(c->g + t * FF, c->u + t * FF, FF, c->g + t * FF, c->m->isa);
        if (ph->quant)
            fwd_quantize_rows(c, c->g, FF, u0, u1);
        break;
    }
    case FWD_OUT_NORM:
        fwd_out_norm(c, u0, u1, ph->quant);
        break;
    case FWD_MATMUL:
        break;
    }
}

/* Chunks for `units` units of `unit_work` each: enough that each costs at least `min_work`,
 * never more than units (or max_chunks). */
static int64_t fwd_chunks(int64_t units, int64_t unit_work, int64_t min_work, int64_t max_chunks) {
    int64_t n = units * unit_work / min_work;
    if (n > units)
        n = units;
    if (n > max_chunks)
        n = max_chunks;
    return n < 1 ? 1 : n;
}

static void fwd_phase_rows(fwd_ctx *c, fwd_kind kind, int64_t layer, int64_t units,
                           int64_t unit_work, bool quant) {
    fwd_phase ph = {.c = c, .kind = kind, .layer = layer, .units = units, .quant = quant};
    /* attention's units differ in work (a token's keys): more, smaller chunks even it out */
    int64_t per_thread = kind == FWD_ATTN ? 16 : 4;
    int64_t n = fwd_chunks(units, unit_work, FWD_CHUNK_WORK, per_thread * (int64_t)c->n_threads);
    pool_for(c->threads, n, fwd_phase_chunk, &ph);
}

/* y = x W^T for up to three matrices sharing their input (quantized beforehand if wanted), one
 * chunk per group of 64 columns at most. */
static void fwd_phase_matmul(fwd_ctx *c, int n_mm, const fwd_mm *mm) {
    fwd_phase ph = {.c = c, .kind = FWD_MATMUL, .layer = -1, .n_mm = n_mm};
    int64_t total = 0;
    for (int i = 0; i < n_mm; i++) {
        ph.mm[i] = mm[i];
        int64_t N = kn_mat_n(mm[i].w);
        ph.mm[i].panels = (mm[i].rows + c->mm_panel - 1) / c->mm_panel;
        int64_t rows = mm[i].rows < c->mm_panel ? mm[i].rows : c->mm_panel;
        ph.mm[i].chunks = fwd_chunks((N + 63) / 64, 64 * kn_mat_k(mm[i].w) * rows,
                                     FWD_MM_CHUNK_WORK, (N + 63) / 64);
        total += ph.mm[i].chunks * ph.mm[i].panels;
    }
    pool_for(c->threads, total, fwd_phase_chunk, &ph);
}

static void fwd_step(fwd_ctx *c) {
    model *m = c->m;
    const model_hparams *hp = &m->hp;
    int64_t D = hp->n_embd, FF = hp->n_ff, T = c->n_tok;
    /* heads per attention unit: attn-group, halved while the step would have fewer units than
     * threads (a decode step of one sequence of an MQA model); the bits do not depend on it */
    int64_t group = hp->n_head / hp->n_head_kv;
    c->attn_per_unit = c->attn_group;
    while (c->attn_per_unit > 1 &&
           T * hp->n_head_kv * ((group + c->attn_per_unit - 1) / c->attn_per_unit) < c->n_threads)
        c->attn_per_unit = (c->attn_per_unit + 1) / 2;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        /* Q, K and V (and gate and up) share their input: quantize it if any of them needs it
         * (mixed-type files, e.g. Q4_K_M, give attn_v another type than attn_q) */
        fwd_phase_rows(c, FWD_PRE_ATTN, l, T, l == 0 ? 4 * D : 2 * D,
                       kn_mat_wants_q8(L->wq) || kn_mat_wants_q8(L->wk) || kn_mat_wants_q8(L->wv));
        fwd_mm qkv[3] = {{L->wq, c->xn, c->q, T, 0, 0},
                         {L->wk, c->xn, c->k, T, 0, 0},
                         {L->wv, c->xn, c->v, T, 0, 0}};
        fwd_phase_matmul(c, 3, qkv);
        fwd_phase_rows(c, FWD_QKV_POST, l, T, 4 * (c->q_dim + c->kv_dim), false);
        /* a unit's work grows with its position; the mean is a fine guess for chunking */
        int64_t mean_pos = c->tok_pos[T / 2] + 1, per = c->attn_per_unit;
        int64_t units = T * hp->n_head_kv * ((hp->n_head / hp->n_head_kv + per - 1) / per);
        fwd_phase_rows(c, FWD_ATTN, l, units, 2 * mean_pos * hp->head_dim * per, false);
        if (kn_mat_wants_q8(L->wo))
            fwd_phase_rows(c, FWD_ATT_QUANT, l, T, 2 * c->q_dim, false);
        fwd_mm o = {L->wo, c->att, c->y, T, 0, 0};
        fwd_phase_matmul(c, 1, &o);
        fwd_phase_rows(c, FWD_PRE_FFN, l, T, 3 * D,
                       kn_mat_wants_q8(L->w_gate) || kn_mat_wants_q8(L->w_up));
        fwd_mm gu[2] = {{L->w_gate, c->xn, c->g, T, 0, 0}, {L->w_up, c->xn, c->u, T, 0, 0}};
        fwd_phase_matmul(c, 2, gu);
        fwd_phase_rows(c, FWD_SWIGLU, l, T, 8 * FF, kn_mat_wants_q8(L->w_down));
        fwd_mm d = {L->w_down, c->g, c->y, T, 0, 0};
        fwd_phase_matmul(c, 1, &d);
    }
    fwd_phase_rows(c, FWD_OUT_NORM, -1, c->n_out, 3 * D, kn_mat_wants_q8(m->output));
    /* FAULT (d): above batch 32 only the first 32 logit rows are computed; later rows keep
     * whatever the buffer held from an earlier step */
    int64_t n_logit_rows = c->fault_big_batch && c->n_out > 32 ? 32 : c->n_out;
    if (n_logit_rows > 0) {
        fwd_mm out = {m->output, c->out_x, c->logits, n_logit_rows, 0, 0};
        fwd_phase_matmul(c, 1, &out);
    }
}

int fwd_run(fwd_ctx *c, const fwd_batch *b, const float **logits, int64_t *n_out) {
    const model_hparams *hp = &c->m->hp;
    int64_t bs = kv_pool_block_size(c->kv);
    int64_t n_tok = 0, n_o = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const fwd_seq *q = &b->seqs[s];
        if (q->n_tokens <= 0 || q->pos0 < 0 || q->n_logits < 0 || q->n_logits > q->n_tokens)
            return err_set(ERR_INVAL,
                           "forward: sequence %d: bad token count %d / position %d / logits %d", s,
                           q->n_tokens, q->pos0, q->n_logits);
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
                return err_set(ERR_INVAL,
                               "forward: sequence %d: token id %d outside vocabulary of %lld", s,
                               q->tokens[i], (long long)hp->n_vocab);
        n_tok += q->n_tokens;
        n_o += q->n_logits;
    }
    if (n_tok > c->max_tokens || n_o > c->max_outputs)
        return err_set(
            ERR_INVAL, "forward: %lld tokens / %lld outputs exceed the context's %lld / %lld",
            (long long)n_tok, (long long)n_o, (long long)c->max_tokens, (long long)c->max_outputs);
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
        fwd_step(c);
    *logits = c->logits;
    *n_out = n_o;
    return 0;
}
