/* SPDX-License-Identifier: MIT */
/*
 * moe: the mixture-of-experts FFN any architecture can compose: its hyper-parameters, the binding
 * of a layer's router, routed experts (3-D tensors, one kn_mat per expert slice) and shared
 * experts, and its forward phases.
 *
 * Forward, per MoE layer:
 *   1 residual fold + ffn_norm (+ quantize)            rows: tokens
 *   2 router logits [, shared gate, up, shared gate]   matmul over the tokens
 *   3 route (kn_route: gate, bias, groups, top-k,       rows: tokens
 *     weights) [, shared SwiGLU (+ quantize)]
 *   4 [shared down into y]                             matmul over the tokens
 *   5 group the (token, rank) slots by expert           caller: a counting sort
 *   6 gather each slot's input row (+ quantize)        rows: slots
 *   7 gate, up of every routed expert over its slots   matmul, one product per expert and matrix
 *   8 SwiGLU (+ quantize)                              rows: slots
 *   9 down of every routed expert over its slots       matmul
 *  10 y = sum over ranks r of w_r * down_r [+ shared]  rows: tokens
 * Grouping (5-9) reads each expert's weights once per step for all the rows routed to it; toggle
 * moe-group 0 multiplies each slot alone instead (one product per slot and matrix), the path a
 * batch-dependence bug in grouping would not take, and the baseline grouping is measured against.
 *
 * Invariance (P1): a slot's input row is a copy of its token's normed row, quantized per row; an
 * expert's matmul over its slots computes each row exactly as it would alone (kn_matmul: a row's
 * result never depends on M or on the other rows), so a token's expert outputs are the same bits
 * whichever other tokens chose the same experts, in whatever order the slots were gathered. The
 * sum in 10 runs over ranks (the order top-k returned the experts), never over threads or slots:
 * acc = w_0 d_0, acc = acc + w_r d_r for r = 1..k-1 (products rounded, as llama.cpp's mul then
 * add), then y = acc + shared (times sigmoid(gate) if gated). Routing is per token (kn_route).
 */
#include "base/err.h"
#include "base/flags.h"
#include "model/forward_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most experts a layer may have (llama.cpp's LLAMA_MAX_EXPERTS) and most expert groups. */
#define MOE_MAX_EXPERTS 512
#define MOE_MAX_GROUPS  64

/* ---- hyper-parameters ---- */

int moe_read_hparams(model *m) {
    model_hparams *hp = &m->hp;
    const char *path = gguf_path(m->g);
    int rc;
    if ((rc = model_read_int(m, "expert_count", true, 0, &hp->n_expert)) ||
        (rc = model_read_int(m, "expert_used_count", true, 0, &hp->n_expert_used)))
        return rc;
    if (hp->n_expert < 1 || hp->n_expert > MOE_MAX_EXPERTS || hp->n_expert_used < 1 ||
        hp->n_expert_used > hp->n_expert)
        return err_set(ERR_FORMAT,
                       "%s: %s.expert_count %lld / expert_used_count %lld invalid (1 <= used <= "
                       "count <= %d)",
                       path, hp->arch_name, (long long)hp->n_expert, (long long)hp->n_expert_used,
                       MOE_MAX_EXPERTS);
    if ((rc = model_read_int(m, "expert_feed_forward_length", false, hp->n_ff / hp->n_expert_used,
                             &hp->n_ff_exp)) ||
        (rc = model_read_int(m, "expert_shared_count", false, 0, &hp->n_expert_shared)))
        return rc;
    if ((rc = model_read_int(m, "expert_shared_feed_forward_length", false,
                             hp->n_ff_exp * hp->n_expert_shared, &hp->n_ff_shexp)) ||
        (rc = model_read_int(m, "expert_group_count", false, 0, &hp->n_expert_groups)) ||
        (rc = model_read_int(m, "expert_group_used_count", false, 0, &hp->n_group_used)))
        return rc;
    if (hp->n_ff_exp <= 0)
        return err_set(ERR_FORMAT,
                       "%s: %s.expert_feed_forward_length is missing or 0 (and no "
                       "feed_forward_length to derive it from)",
                       path, hp->arch_name);
    if (hp->n_expert_groups > 1 &&
        (hp->n_expert_groups > MOE_MAX_GROUPS || hp->n_expert % hp->n_expert_groups != 0 ||
         hp->n_group_used < 1 || hp->n_group_used > hp->n_expert_groups))
        return err_set(ERR_FORMAT,
                       "%s: %s.expert_group_count %lld / expert_group_used_count %lld invalid for "
                       "%lld experts",
                       path, hp->arch_name, (long long)hp->n_expert_groups,
                       (long long)hp->n_group_used, (long long)hp->n_expert);
    return 0;
}

/* ---- binding ---- */

/* The expert tensor "blk.<l>.<suffix>" [k, n, n_expert], one matrix per expert slice; each counts
 * n_expert_used / n_expert of its bytes and FLOPs per token. */
static int moe_bind_experts(model *m, int64_t l, const char *suffix, int64_t k, int64_t n,
                            kn_mat ***out) {
    const model_hparams *hp = &m->hp;
    char name[96];
    return model_bind_slices(m, model_layer_name(name, l, suffix), k, n, hp->n_expert,
                             (double)hp->n_expert_used / (double)hp->n_expert, out);
}

int moe_bind_layer(model *m, int64_t l, bool use_bias) {
    return moe_bind_layer_into(m, l, &m->layers[l], use_bias);
}

int moe_bind_layer_into(model *m, int64_t l, model_layer *L, bool use_bias) {
    const model_hparams *hp = &m->hp;
    int64_t D = hp->n_embd, F = hp->n_ff_exp, FS = hp->n_ff_shexp;
    model_moe *moe = calloc(1, sizeof *moe);
    if (!moe)
        return err_set(ERR_NOMEM, "out of memory");
    L->moe = moe;
    char n[96];
    int rc;
    if ((rc =
             model_bind_vec(m, model_layer_name(n, l, "ffn_norm.weight"), D, true, &L->ffn_norm)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "ffn_gate_inp.weight"), D, hp->n_expert,
                             true, 1.0, &moe->gate_inp)) ||
        (use_bias && (rc = model_bind_vec(m, model_layer_name(n, l, "exp_probs_b.bias"),
                                          hp->n_expert, false, &moe->exp_probs_b))) ||
        (rc = moe_bind_experts(m, l, "ffn_gate_exps.weight", D, F, &moe->gate_exps)) ||
        (rc = moe_bind_experts(m, l, "ffn_up_exps.weight", D, F, &moe->up_exps)) ||
        (rc = moe_bind_experts(m, l, "ffn_down_exps.weight", F, D, &moe->down_exps)))
        return rc;
    if (FS > 0) {
        if ((rc = model_bind_mat(m, model_layer_name(n, l, "ffn_gate_shexp.weight"), D, FS, true,
                                 1.0, &moe->gate_shexp)) ||
            (rc = model_bind_mat(m, model_layer_name(n, l, "ffn_up_shexp.weight"), D, FS, true, 1.0,
                                 &moe->up_shexp)) ||
            (rc = model_bind_mat(m, model_layer_name(n, l, "ffn_down_shexp.weight"), FS, D, true,
                                 1.0, &moe->down_shexp)))
            return rc;
        /* the optional gate of the shared experts is a vector [n_embd] in the file: a 1 x D
         * matrix here */
        const gguf_tensor *t;
        if ((rc = model_bind_tensor(m, model_layer_name(n, l, "ffn_gate_inp_shexp.weight"), D, 0, 0,
                                    false, &t)))
            return rc;
        if (t) {
            if ((rc = kn_mat_create(t->type, t->data, 1, D, m->isa, &moe->gate_inp_shexp)))
                return err_wrap(rc, "%s: tensor '%s'", gguf_path(m->g), n);
            m->weight_bytes += kn_mat_bytes(moe->gate_inp_shexp);
            m->flops_per_token += 2.0 * (double)D;
        }
    }
    moe->router = (kn_router){.n_expert = hp->n_expert,
                              .n_used = hp->n_expert_used,
                              .gating = (kn_gating)hp->expert_gating,
                              .bias = moe->exp_probs_b,
                              .n_group = hp->n_expert_groups,
                              .n_group_used = hp->n_group_used,
                              .norm = hp->expert_weights_norm,
                              .scale = hp->expert_weights_scale};
    return 0;
}

void moe_free(model_moe *moe, int64_t n_expert) {
    if (!moe)
        return;
    model_free_slices(moe->gate_exps, n_expert);
    model_free_slices(moe->up_exps, n_expert);
    model_free_slices(moe->down_exps, n_expert);
    kn_mat_destroy(moe->gate_inp);
    kn_mat_destroy(moe->gate_shexp);
    kn_mat_destroy(moe->up_shexp);
    kn_mat_destroy(moe->down_shexp);
    kn_mat_destroy(moe->gate_inp_shexp);
    free(moe->exp_probs_b);
    free(moe);
}

/* ---- forward ---- */

struct fwd_moe {
    int64_t n_expert, k, ff, n_threads;
    float *logits;    /* [T][n_expert] router output */
    float *sh_gate;   /* [T] shared-expert gate logits */
    int32_t *sel;     /* [T][k] experts of each token, by rank */
    float *w;         /* [T][k] their weights */
    int32_t *slot_of; /* [T][k] the slot of (token, rank) */
    int32_t *tok_of;  /* [T * k] the token row of each slot */
    int64_t *off;     /* [n_expert + 1] expert e's slots are [off[e], off[e + 1]) */
    float *xg;        /* [T * k][n_embd] gathered inputs, later the experts' down outputs */
    float *gg, *ug;   /* [T * k][ff] */
    float *scratch;   /* [n_threads][2 * n_expert] routing scratch */
    fwd_mm *mm;       /* [2 * n_expert] */
};

int64_t moe_act_rows(const model_hparams *hp, int64_t max_tokens) {
    return hp->n_expert > 0 ? max_tokens * hp->n_expert_used : 0;
}

int moe_ctx_create(fwd_ctx *c) {
    const model_hparams *hp = &c->m->hp;
    if (hp->n_expert <= 0)
        return 0;
    fwd_moe *f = calloc(1, sizeof *f);
    if (!f)
        return ERR_NOMEM;
    c->moe = f;
    f->n_expert = hp->n_expert;
    f->k = hp->n_expert_used;
    f->ff = hp->n_ff_exp;
    f->n_threads = c->n_threads;
    size_t T = (size_t)c->max_tokens, S = T * (size_t)f->k, E = (size_t)f->n_expert;
    f->logits = malloc(T * E * sizeof(float));
    f->sh_gate = malloc(T * sizeof(float));
    f->sel = malloc(S * sizeof(int32_t));
    f->w = malloc(S * sizeof(float));
    f->slot_of = malloc(S * sizeof(int32_t));
    f->tok_of = malloc(S * sizeof(int32_t));
    f->off = malloc((E + 1) * sizeof(int64_t));
    f->xg = aligned_alloc(64, S * (size_t)hp->n_embd * sizeof(float));
    f->gg = aligned_alloc(64, S * (size_t)f->ff * sizeof(float));
    f->ug = aligned_alloc(64, S * (size_t)f->ff * sizeof(float));
    f->scratch = malloc((size_t)f->n_threads * 2 * E * sizeof(float));
    f->mm =
        malloc(2 * (S > E ? S : E) * sizeof(fwd_mm)); /* per expert, or per slot (moe-group 0) */
    if (!f->logits || !f->sh_gate || !f->sel || !f->w || !f->slot_of || !f->tok_of || !f->off ||
        !f->xg || !f->gg || !f->ug || !f->scratch || !f->mm)
        return ERR_NOMEM;
    return 0;
}

void moe_ctx_destroy(fwd_ctx *c) {
    fwd_moe *f = c->moe;
    if (!f)
        return;
    free(f->logits);
    free(f->sh_gate);
    free(f->sel);
    free(f->w);
    free(f->slot_of);
    free(f->tok_of);
    free(f->off);
    free(f->xg);
    free(f->gg);
    free(f->ug);
    free(f->scratch);
    free(f->mm);
    free(f);
    c->moe = NULL;
}

/* The clamped SwiGLU's inputs (DeepSeek-V4): g = min(g, L), u = clamp(u, -L, L) before the
 * SwiGLU; limit <= 1e-6 (every other architecture): unchanged. */
static void moe_clamp(float *g, float *u, int64_t n, float limit) {
    if (!(limit > 1e-6f))
        return;
    for (int64_t i = 0; i < n; i++) {
        g[i] = g[i] > limit ? limit : g[i];
        u[i] = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
    }
}

/* Tokens [t0, t1): route each (kn_route, or by the token id through tid2eid), and run the shared
 * experts' SwiGLU. */
static void moe_rows_route(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_moe *moe = ph->arg;
    fwd_moe *f = c->moe;
    int64_t E = f->n_expert, k = f->k, FS = c->m->hp.n_ff_shexp;
    float *scratch = f->scratch + (size_t)thread * 2 * (size_t)E;
    for (int64_t t = t0; t < t1; t++) {
        if (moe->tid2eid) { /* hash routing: the token's experts, weighted by their gate values */
            kn_route_gate(moe->router.gating, f->logits + t * E, E, scratch);
            if (!kn_route_hash(moe->tid2eid, k, E, c->tok_id[t], f->sel + t * k))
                memset(f->sel + t * k, 0, (size_t)k * sizeof(int32_t)); /* checked at load */
            kn_route_weights(&moe->router, scratch, f->sel + t * k, f->w + t * k);
        } else {
            kn_route(&moe->router, f->logits + t * E, scratch, f->sel + t * k, f->w + t * k);
        }
    }
    if (moe->gate_shexp) {
        for (int64_t t = t0; t < t1; t++) {
            moe_clamp(c->g + t * FS, c->u + t * FS, FS, moe->clamp_sh);
            kn_swiglu(c->g + t * FS, c->u + t * FS, FS, c->g + t * FS, c->m->isa);
        }
        if (ph->quant)
            fwd_quantize_rows(c, c->g, FS, t0, t1);
    }
}

/* Slots [s0, s1): copy the token's normed row (and quantize it if the experts want it). */
static void moe_rows_gather(fwd_ctx *c, const fwd_phase *ph, int64_t s0, int64_t s1, int thread) {
    fwd_moe *f = c->moe;
    int64_t D = c->m->hp.n_embd;
    for (int64_t s = s0; s < s1; s++)
        memcpy(f->xg + s * D, c->xn + (int64_t)f->tok_of[s] * D, (size_t)D * sizeof(float));
    if (ph->quant)
        fwd_quantize_rows(c, f->xg, D, s0, s1);
}

/* Slots [s0, s1): SwiGLU of the experts' gate and up (and quantize it for down). */
static void moe_rows_swiglu(fwd_ctx *c, const fwd_phase *ph, int64_t s0, int64_t s1, int thread) {
    fwd_moe *f = c->moe;
    int64_t F = f->ff;
    const model_moe *moe = ph->arg;
    for (int64_t s = s0; s < s1; s++) {
        if (moe)
            moe_clamp(f->gg + s * F, f->ug + s * F, F, moe->clamp);
        kn_swiglu(f->gg + s * F, f->ug + s * F, F, f->gg + s * F, c->m->isa);
    }
    if (ph->quant)
        fwd_quantize_rows(c, f->gg, F, s0, s1);
}

/* Tokens [t0, t1): the weighted sum of the experts' outputs in rank order, plus the shared
 * experts' (already in y), into y. */
static void moe_rows_combine(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_moe *moe = ph->arg;
    fwd_moe *f = c->moe;
    int64_t D = c->m->hp.n_embd, k = f->k;
    for (int64_t t = t0; t < t1; t++) {
        float *y = c->y + t * D;
        const float *w = f->w + t * k;
        const float *d0 = f->xg + (int64_t)f->slot_of[t * k] * D;
        float sg = 1.0f;
        if (moe->gate_inp_shexp)
            sg = 1.0f / (1.0f + kn_expf(-f->sh_gate[t]));
        for (int64_t i = 0; i < D; i++) {
            float acc = d0[i] * w[0];
            for (int64_t r = 1; r < k; r++) {
                float p = f->xg[(int64_t)f->slot_of[t * k + r] * D + i] * w[r];
                acc = acc + p;
            }
            if (!moe->gate_shexp)
                y[i] = acc;
            else if (moe->gate_inp_shexp)
                y[i] = acc + y[i] * sg;
            else
                y[i] = acc + y[i];
        }
    }
}

/* Groups the step's (token, rank) slots by expert, tokens in order within an expert. */
static void moe_group_slots(fwd_moe *f, int64_t T) {
    int64_t E = f->n_expert, k = f->k;
    memset(f->off, 0, (size_t)(E + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < T * k; i++)
        f->off[f->sel[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        f->off[e + 1] += f->off[e];
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < k; r++) {
            int64_t s = f->off[f->sel[t * k + r]]++;
            f->slot_of[t * k + r] = (int32_t)s;
            f->tok_of[s] = (int32_t)t;
        }
    /* the fill advanced each offset to the next expert's start: shift back */
    for (int64_t e = E; e > 0; e--)
        f->off[e] = f->off[e - 1];
    f->off[0] = 0;
}

void moe_forward_ffn(fwd_ctx *c, int64_t l) {
    moe_forward_ffn_layer(c, l, &c->m->layers[l]);
}

void moe_forward_ffn_layer(fwd_ctx *c, int64_t l, const model_layer *L) {
    const model_hparams *hp = &c->m->hp;
    const model_moe *moe = L->moe;
    fwd_moe *f = c->moe;
    int64_t T = c->n_tok, D = hp->n_embd, E = f->n_expert, k = f->k, F = f->ff;
    int64_t FS = hp->n_ff_shexp;
    /* 1-2: norm, router logits and the shared experts' gate and up (one shared input) */
    bool q =
        kn_mat_wants_q8(moe->gate_inp) ||
        (moe->gate_shexp && (kn_mat_wants_q8(moe->gate_shexp) || kn_mat_wants_q8(moe->up_shexp))) ||
        (moe->gate_inp_shexp && kn_mat_wants_q8(moe->gate_inp_shexp));
    fwd_phase_residual_norm(c, l, L->ffn_norm, false, q);
    fwd_mm in[4] = {{.w = moe->gate_inp, .x = c->xn, .y = f->logits, .rows = T}};
    int n_in = 1;
    if (moe->gate_shexp) {
        in[n_in++] = (fwd_mm){.w = moe->gate_shexp, .x = c->xn, .y = c->g, .rows = T};
        in[n_in++] = (fwd_mm){.w = moe->up_shexp, .x = c->xn, .y = c->u, .rows = T};
        if (moe->gate_inp_shexp)
            in[n_in++] = (fwd_mm){.w = moe->gate_inp_shexp, .x = c->xn, .y = f->sh_gate, .rows = T};
    }
    fwd_phase_matmul(c, n_in, in);
    /* 3-4: routing, and the shared experts into y */
    fwd_phase_rows(c, moe_rows_route, l, T, 16 * E + (moe->gate_shexp ? 8 * FS : 0),
                   moe->gate_shexp && kn_mat_wants_q8(moe->down_shexp), moe);
    if (moe->gate_shexp) {
        fwd_mm sd = {.w = moe->down_shexp, .x = c->g, .y = c->y, .rows = T};
        fwd_phase_matmul(c, 1, &sd);
    }
    /* 5-6: slots grouped by expert, their inputs gathered */
    moe_group_slots(f, T);
    fwd_phase_rows(c, moe_rows_gather, l, T * k, 2 * D,
                   kn_mat_wants_q8(moe->gate_exps[0]) || kn_mat_wants_q8(moe->up_exps[0]), NULL);
    /* 7-9: every expert with slots, over its slots */
    bool grouped = flags_int(FLAG_MOE_GROUP) != 0;
    int n = 0;
    for (int64_t e = 0; e < E; e++)
        for (int64_t r0 = f->off[e]; r0 < f->off[e + 1]; r0 = grouped ? f->off[e + 1] : r0 + 1) {
            int64_t rows = grouped ? f->off[e + 1] - r0 : 1;
            f->mm[n++] =
                (fwd_mm){.w = moe->gate_exps[e], .x = f->xg, .y = f->gg, .row0 = r0, .rows = rows};
            f->mm[n++] =
                (fwd_mm){.w = moe->up_exps[e], .x = f->xg, .y = f->ug, .row0 = r0, .rows = rows};
        }
    fwd_phase_matmul(c, n, f->mm);
    fwd_phase_rows(c, moe_rows_swiglu, l, T * k, 8 * F, kn_mat_wants_q8(moe->down_exps[0]), moe);
    n = 0; /* the down outputs overwrite the gathered inputs, no longer read */
    for (int64_t e = 0; e < E; e++)
        for (int64_t r0 = f->off[e]; r0 < f->off[e + 1]; r0 = grouped ? f->off[e + 1] : r0 + 1)
            f->mm[n++] = (fwd_mm){.w = moe->down_exps[e],
                                  .x = f->gg,
                                  .y = f->xg,
                                  .row0 = r0,
                                  .rows = grouped ? f->off[e + 1] - r0 : 1};
    fwd_phase_matmul(c, n, f->mm);
    /* 10: the weighted sum */
    fwd_phase_rows(c, moe_rows_combine, l, T, 2 * k * D, false, moe);
}
