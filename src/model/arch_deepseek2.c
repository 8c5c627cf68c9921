/* SPDX-License-Identifier: MIT */
/*
 * arch_deepseek2: "deepseek2" (DeepSeek-V2/V3, Kimi-K2 and the GGUFs converted with split
 * attn_k_b / attn_v_b): multi-head latent attention (MLA) and a mixture-of-experts FFN (moe.c)
 * after n_layer_dense_lead dense layers (arch_dense.c), as the reference reads the architecture
 * (llama.cpp's deepseek2 with the absorption optimisation).
 *
 * MLA per layer, Q/K heads of nope + rope (key_length_mla), V heads of value_length_mla:
 *   q   = q_b(rmsnorm(q_a(x)))  (or a full q(x) when q_lora_rank is 0), per head [nope | rope];
 *   kv  = kv_a_mqa(x) = [latent (kv_lora) | k_pe (rope)]; the latent is RMS-normed
 *         (attn_kv_a_norm), k_pe roped un-normed; the KV pool stores [latent | k_pe] per position:
 *         one "KV head" of kv_lora + rope elements (key_length), nothing per head;
 *   absorbed: q_abs(h) = k_b(h) q_nope(h) (kv_lora wide), the query [q_abs(h) | roped q_pe(h)]
 *         attends over the cache rows with scale mscale^2 / sqrt(nope + rope), and the values
 *         are the same rows (their first kv_lora elements are the latent result o(h));
 *   out = attn_output([v_b(h) o(h) for each head]).
 * RoPE pairs are interleaved (2i, 2i+1); YaRN as llama.cpp applies it here: frequencies blended
 * by the ramp (arch_dense.c), cos/sin unscaled, mscale = 1 + 0.1 * (yarn_log_multiplier / 0.1) *
 * ln(factor) on the attention scale.
 *
 * Forward phases (per layer): residual fold + attn_norm | q_a (or q), kv_a | q_a norm, latent
 * norm, k_pe RoPE, cache write | q_b | q_pe RoPE, q_nope gathered by head | k_b per head |
 * query rows assembled | attention | latent results gathered by head | v_b per head | heads
 * assembled | attn_output. The per-head products run over head-major buffers ([head][token]
 * rows), one matmul product per head, so every head's weights are read once per step; each row
 * is computed as it would be alone (kn_matmul), and every other phase is per token row, so a
 * token's result never depends on the batch (P1).
 */
#include "base/err.h"
#include "model/arch_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- hyper-parameters ---- */

int arch_mla_read_hparams(model *m) {
    model_hparams *hp = &m->hp;
    const char *path = gguf_path(m->g);
    int64_t kv_heads, klen, vlen;
    bool norm;
    int64_t gating;
    int rc;
    if ((rc = arch_dense_read_sizes(m, false)) ||
        (rc = model_read_int(m, "leading_dense_block_count", false, 0, &hp->n_layer_dense_lead)) ||
        (rc = model_read_int(m, "attention.q_lora_rank", false, 0, &hp->n_lora_q)) ||
        (rc = model_read_int(m, "attention.kv_lora_rank", true, 0, &hp->n_lora_kv)) ||
        (rc = model_read_int(m, "attention.key_length_mla", false, 0, &hp->head_dim_qk)) ||
        (rc = model_read_int(m, "attention.value_length_mla", false, 0, &hp->head_dim_v)) ||
        (rc = model_read_int(m, "rope.dimension_count", true, 0, &hp->n_rot)) ||
        (rc = model_read_int(m, "attention.head_count_kv", false, 1, &kv_heads)))
        return rc;
    if (hp->head_dim_qk == 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: deepseek2 without attention.key_length_mla (a legacy file with the "
                       "unsplit attn_kv_b) is not supported; convert it again",
                       path);
    if (hp->head_dim_v == 0)
        hp->head_dim_v = hp->head_dim_qk - hp->n_rot;
    hp->head_dim = hp->n_lora_kv + hp->n_rot;
    if ((rc = model_read_int(m, "attention.key_length", false, hp->head_dim, &klen)) ||
        (rc = model_read_int(m, "attention.value_length", false, hp->n_lora_kv, &vlen)))
        return rc;
    if (hp->n_rot <= 0 || hp->n_rot % 2 || hp->head_dim_qk <= hp->n_rot || hp->n_lora_kv <= 0 ||
        hp->head_dim > KN_ATTN_HEAD_MAX || hp->head_dim_v <= 0 || klen != hp->head_dim ||
        vlen != hp->n_lora_kv || kv_heads != 1)
        return err_set(ERR_FORMAT,
                       "%s: MLA sizes inconsistent: kv_lora_rank %lld, rope %lld, key_length_mla "
                       "%lld, value_length_mla %lld, key_length %lld, value_length %lld, "
                       "head_count_kv %lld (the cache row, kv_lora + rope, at most %d)",
                       path, (long long)hp->n_lora_kv, (long long)hp->n_rot,
                       (long long)hp->head_dim_qk, (long long)hp->head_dim_v, (long long)klen,
                       (long long)vlen, (long long)kv_heads, KN_ATTN_HEAD_MAX);
    hp->n_head_kv = 1;
    if (hp->n_layer_dense_lead > hp->n_layer || (hp->n_layer_dense_lead > 0 && hp->n_ff <= 0))
        return err_set(
            ERR_FORMAT, "%s: %lld leading dense layers of %lld, feed_forward_length %lld", path,
            (long long)hp->n_layer_dense_lead, (long long)hp->n_layer, (long long)hp->n_ff);
    if (hp->n_layer_dense_lead < hp->n_layer) {
        if ((rc = moe_read_hparams(m)) ||
            (rc = model_read_f32(m, "expert_weights_scale", 0.0f, &hp->expert_weights_scale)) ||
            (rc = model_read_bool(m, "expert_weights_norm", false, &norm)) ||
            (rc = model_read_int(m, "expert_gating_func", false, KN_GATING_NONE, &gating)))
            return rc;
        hp->expert_weights_norm = norm;
        if (gating == KN_GATING_NONE) /* DeepSeek-V2 files without the key */
            gating = KN_GATING_SOFTMAX;
        if (gating > KN_GATING_SQRT_SOFTPLUS)
            return err_set(ERR_UNSUPPORTED,
                           "%s: %s.expert_gating_func %lld is not a known gating "
                           "function (1 softmax, 2 sigmoid, 3 softmax-weight, 4 sqrt-softplus)",
                           path, hp->arch_name, (long long)gating);
        hp->expert_gating = (int)gating;
    }
    if ((rc = arch_dense_read_rope(m, true)))
        return rc;
    if (hp->rope_has_factors || (!hp->rope_yarn && hp->rope_freq_scale != 1.0f))
        return err_set(ERR_UNSUPPORTED, "%s: deepseek2 takes YaRN or no RoPE scaling", path);
    float mscale = 1.0f;
    if (hp->rope_yarn)
        mscale = 1.0f + 0.1f * (hp->yarn_log_mul / 0.1f) * logf(1.0f / hp->rope_freq_scale);
    hp->attn_scale = 1.0f * mscale * mscale / sqrtf((float)hp->head_dim_qk);
    return 0;
}

/* ---- binding ---- */

void arch_mla_free_layer(const model *m, model_layer *L) {
    mla_layer *X = L->ext;
    if (!X)
        return;
    kn_mat_destroy(X->wq_a);
    kn_mat_destroy(X->wq_b);
    kn_mat_destroy(X->wq);
    kn_mat_destroy(X->wkv_a);
    free(X->q_a_norm);
    free(X->kv_a_norm);
    model_free_slices(X->wk_b, m->hp.n_head);
    model_free_slices(X->wv_b, m->hp.n_head);
    free(X);
    L->ext = NULL;
}

int arch_mla_bind_layer(model *m, int64_t l) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->layers[l];
    int64_t D = hp->n_embd, H = hp->n_head, QK = hp->head_dim_qk, KL = hp->n_lora_kv;
    int64_t R = hp->n_rot, NOPE = QK - R, V = hp->head_dim_v, QL = hp->n_lora_q;
    mla_layer *X = calloc(1, sizeof *X);
    if (!X)
        return err_set(ERR_NOMEM, "out of memory");
    L->ext = X;
    char n[96];
    int rc;
    if ((rc =
             model_bind_vec(m, model_layer_name(n, l, "attn_norm.weight"), D, true, &L->attn_norm)))
        return rc;
    if (QL > 0) {
        if ((rc = model_bind_mat(m, model_layer_name(n, l, "attn_q_a.weight"), D, QL, true, 1.0,
                                 &X->wq_a)) ||
            (rc = model_bind_vec(m, model_layer_name(n, l, "attn_q_a_norm.weight"), QL, true,
                                 &X->q_a_norm)) ||
            (rc = model_bind_mat(m, model_layer_name(n, l, "attn_q_b.weight"), QL, H * QK, true,
                                 1.0, &X->wq_b)))
            return rc;
    } else if ((rc = model_bind_mat(m, model_layer_name(n, l, "attn_q.weight"), D, H * QK, true,
                                    1.0, &X->wq))) {
        return rc;
    }
    if ((rc = model_bind_mat(m, model_layer_name(n, l, "attn_kv_a_mqa.weight"), D, KL + R, true,
                             1.0, &X->wkv_a)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_kv_a_norm.weight"), KL, true,
                             &X->kv_a_norm)) ||
        (rc = model_bind_slices(m, model_layer_name(n, l, "attn_k_b.weight"), NOPE, KL, H, 1.0,
                                &X->wk_b)) ||
        (rc = model_bind_slices(m, model_layer_name(n, l, "attn_v_b.weight"), KL, V, H, 1.0,
                                &X->wv_b)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_output.weight"), H * V, D, true, 1.0,
                             &L->wo)))
        return rc;
    return l < hp->n_layer_dense_lead ? arch_dense_bind_ffn(m, l) : moe_bind_layer(m, l, true);
}

/* ---- forward ---- */

void arch_mla_ctx_act(const model_hparams *hp, int64_t max_tokens, int64_t *rows, int64_t *elems) {
    int64_t nope = hp->head_dim_qk - hp->n_rot, w = nope > hp->n_lora_kv ? nope : hp->n_lora_kv;
    *rows = hp->n_head * max_tokens;
    *elems = *rows * (w > hp->head_dim_v ? w : hp->head_dim_v);
}

void arch_mla_ctx_destroy(fwd_ctx *c) {
    mla_ctx *st = c->arch_ctx;
    if (!st)
        return;
    free(st->qa);
    free(st->qf);
    free(st->qn);
    free(st->qabs);
    free(st->ol);
    free(st->vo);
    free(st->av);
    free(st->mm);
    free(st);
    c->arch_ctx = NULL;
}

int arch_mla_ctx_create(fwd_ctx *c) {
    const model_hparams *hp = &c->m->hp;
    mla_ctx *st = calloc(1, sizeof *st);
    if (!st)
        return ERR_NOMEM;
    c->arch_ctx = st;
    size_t T = (size_t)c->max_tokens, H = (size_t)hp->n_head, F = sizeof(float);
    size_t nope = (size_t)(hp->head_dim_qk - hp->n_rot), KL = (size_t)hp->n_lora_kv;
    size_t QL = (size_t)(hp->n_lora_q > 0 ? hp->n_lora_q : 1), V = (size_t)hp->head_dim_v;
    st->qa = malloc(T * QL * F);
    st->qf = malloc(T * H * (size_t)hp->head_dim_qk * F);
    st->qn = malloc(H * T * nope * F);
    st->qabs = malloc(H * T * KL * F);
    st->ol = malloc(H * T * KL * F);
    st->vo = malloc(H * T * V * F);
    st->av = malloc(T * H * V * F);
    st->mm = malloc(H * sizeof(fwd_mm));
    if (!st->qa || !st->qf || !st->qn || !st->qabs || !st->ol || !st->vo || !st->av || !st->mm)
        return ERR_NOMEM;
    return 0;
}

/* Tokens [t0, t1): the q_a norm (and its quantization for q_b), the latent's norm, k_pe's RoPE,
 * and the cache row [latent | k_pe] into the pool. */
static void ds2_rows_kv(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const mla_layer *X = ph->arg;
    mla_ctx *st = c->arch_ctx;
    int64_t KL = hp->n_lora_kv, HD = hp->head_dim, QL = hp->n_lora_q,
            bs = kv_pool_block_size(c->kv);
    bool f16 = kv_pool_f16(c->kv);
    size_t esz = f16 ? 2 : 4, bb = kv_pool_kv_stride(c->kv);
    char *kb = kv_pool_k_base(c->kv, ph->layer);
    for (int64_t t = t0; t < t1; t++) {
        if (X->wq_a)
            kn_rmsnorm(st->qa + t * QL, X->q_a_norm, hp->rms_eps, QL, st->qa + t * QL, c->m->isa);
        float *kv = c->k + t * HD;
        kn_rmsnorm(kv, X->kv_a_norm, hp->rms_eps, KL, kv, c->m->isa);
        kn_rope(kv + KL, hp->n_rot, c->rope + t * hp->n_rot, false);
        const fwd_seq *s = &c->b->seqs[c->tok_seq[t]];
        int64_t p = c->tok_pos[t];
        size_t off = (size_t)s->blocks[p / bs] * bb + (size_t)((p % bs) * HD) * esz;
        kn_store_kv(kb + off, kv, HD, f16, c->m->isa);
    }
    if (ph->quant)
        fwd_quantize_rows(c, st->qa, QL, t0, t1);
}

/* Tokens [t0, t1): each head's q_pe roped into its query row, its q_nope into the head-major
 * buffer (quantized there for k_b). */
static void ds2_rows_q(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    mla_ctx *st = c->arch_ctx;
    int64_t H = hp->n_head, QK = hp->head_dim_qk, R = hp->n_rot, NOPE = QK - R;
    int64_t KL = hp->n_lora_kv, HD = hp->head_dim, T = c->n_tok;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < H; h++) {
            float *qh = st->qf + (t * H + h) * QK;
            kn_rope(qh + NOPE, R, c->rope + t * R, false);
            memcpy(st->qn + (h * T + t) * NOPE, qh, (size_t)NOPE * sizeof(float));
            memcpy(c->q + (t * H + h) * HD + KL, qh + NOPE, (size_t)R * sizeof(float));
        }
    if (ph->quant)
        for (int64_t h = 0; h < H; h++)
            fwd_quantize_rows(c, st->qn, NOPE, h * T + t0, h * T + t1);
}

/* Tokens [t0, t1): each head's absorbed q_nope into the first kv_lora elements of its query row. */
static void ds2_rows_qcat(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    mla_ctx *st = c->arch_ctx;
    int64_t H = hp->n_head, KL = hp->n_lora_kv, HD = hp->head_dim, T = c->n_tok;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(c->q + (t * H + h) * HD, st->qabs + (h * T + t) * KL,
                   (size_t)KL * sizeof(float));
}

/* Tokens [t0, t1): each head's latent result (the first kv_lora elements of its attention
 * output) into the head-major buffer, quantized there for v_b. */
static void ds2_rows_latent(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    mla_ctx *st = c->arch_ctx;
    int64_t H = hp->n_head, KL = hp->n_lora_kv, HD = hp->head_dim, T = c->n_tok;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(st->ol + (h * T + t) * KL, c->att + (t * H + h) * HD,
                   (size_t)KL * sizeof(float));
    if (ph->quant)
        for (int64_t h = 0; h < H; h++)
            fwd_quantize_rows(c, st->ol, KL, h * T + t0, h * T + t1);
}

/* Tokens [t0, t1): the value heads back in token order, quantized for attn_output. */
static void ds2_rows_v(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    mla_ctx *st = c->arch_ctx;
    int64_t H = hp->n_head, V = hp->head_dim_v, T = c->n_tok;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(st->av + (t * H + h) * V, st->vo + (h * T + t) * V, (size_t)V * sizeof(float));
    if (ph->quant)
        fwd_quantize_rows(c, st->av, H * V, t0, t1);
}

void arch_mla_forward_attn(fwd_ctx *c, int64_t l, const mla_hooks *hk) {
    const model_hparams *hp = &c->m->hp;
    const model_layer *L = &c->m->layers[l];
    const mla_layer *X = L->ext;
    mla_ctx *st = c->arch_ctx;
    int64_t T = c->n_tok, H = hp->n_head, QK = hp->head_dim_qk, KL = hp->n_lora_kv;
    int64_t V = hp->head_dim_v, HD = hp->head_dim;
    const kn_mat *wq_in = X->wq_a ? X->wq_a : X->wq;
    static const mla_hooks none = {0};
    if (!hk)
        hk = &none;
    bool q8_x = kn_mat_wants_q8(wq_in) || kn_mat_wants_q8(X->wkv_a);
    for (int i = 0; i < hk->n_x; i++)
        q8_x = q8_x || kn_mat_wants_q8(hk->x_mm[i].w);
    fwd_phase_residual_norm(c, l, L->attn_norm, l == 0, q8_x);
    fwd_mm in[6] = {{.w = wq_in, .x = c->xn, .y = X->wq_a ? st->qa : st->qf, .rows = T},
                    {.w = X->wkv_a, .x = c->xn, .y = c->k, .rows = T}};
    for (int i = 0; i < hk->n_x; i++)
        in[2 + i] = hk->x_mm[i];
    fwd_phase_matmul(c, 2 + hk->n_x, in);
    bool q8_qa = X->wq_a && kn_mat_wants_q8(X->wq_b);
    for (int i = 0; i < hk->n_qa; i++)
        q8_qa = q8_qa || kn_mat_wants_q8(hk->qa_mm[i].w);
    fwd_phase_rows(c, ds2_rows_kv, l, T, 4 * (HD + hp->n_lora_q), q8_qa, X);
    if (X->wq_a) {
        fwd_mm qb[5] = {{.w = X->wq_b, .x = st->qa, .y = st->qf, .rows = T}};
        for (int i = 0; i < hk->n_qa; i++)
            qb[1 + i] = hk->qa_mm[i];
        fwd_phase_matmul(c, 1 + hk->n_qa, qb);
    }
    if (hk->after_qkv)
        hk->after_qkv(c, l);
    fwd_phase_rows(c, ds2_rows_q, l, T, 4 * H * QK, kn_mat_wants_q8(X->wk_b[0]), X);
    for (int64_t h = 0; h < H; h++)
        st->mm[h] = (fwd_mm){.w = X->wk_b[h], .x = st->qn, .y = st->qabs, .row0 = h * T, .rows = T};
    fwd_phase_matmul(c, (int)H, st->mm);
    fwd_phase_rows(c, ds2_rows_qcat, l, T, 2 * H * KL, false, X);
    if (hk->attention)
        hk->attention(c, l, hp->attn_scale);
    else
        arch_dense_phase_attention(c, l, hp->attn_scale, true);
    fwd_phase_rows(c, ds2_rows_latent, l, T, 2 * H * KL, kn_mat_wants_q8(X->wv_b[0]), X);
    for (int64_t h = 0; h < H; h++)
        st->mm[h] = (fwd_mm){.w = X->wv_b[h], .x = st->ol, .y = st->vo, .row0 = h * T, .rows = T};
    fwd_phase_matmul(c, (int)H, st->mm);
    fwd_phase_rows(c, ds2_rows_v, l, T, 2 * H * V, kn_mat_wants_q8(L->wo), X);
    fwd_mm o = {.w = L->wo, .x = st->av, .y = c->y, .rows = T};
    fwd_phase_matmul(c, 1, &o);
}

void arch_mla_kv_layout(const model *m, kv_pool_opts *o) {
    o->k_only = true;
}

void arch_mla_forward_layer(fwd_ctx *c, int64_t l, const mla_hooks *hk) {
    arch_mla_forward_attn(c, l, hk);
    if (l < c->m->hp.n_layer_dense_lead)
        arch_dense_forward_ffn(c, l);
    else
        moe_forward_ffn(c, l);
}

static void ds2_forward_layer(fwd_ctx *c, int64_t l) {
    arch_mla_forward_layer(c, l, NULL);
}

const model_arch arch_deepseek2 = {
    .name = "deepseek2",
    .read_hparams = arch_mla_read_hparams,
    .bind_layer = arch_mla_bind_layer,
    .kv_dim = arch_dense_kv_dim,
    .kv_layout = arch_mla_kv_layout,
    .forward_layer = ds2_forward_layer,
    .free_layer = arch_mla_free_layer,
    .ctx_create = arch_mla_ctx_create,
    .ctx_destroy = arch_mla_ctx_destroy,
    .ctx_act = arch_mla_ctx_act,
};
