/* SPDX-License-Identifier: MIT */
/*
 * arch_deepseek32: "deepseek32" (DeepSeek-V3.2): deepseek2's MLA and MoE (arch_deepseek2.c, via
 * arch_mla.h) plus DeepSeek sparse attention (DSA): a lightning indexer picks, for each query,
 * the top_k cached positions its MLA attention then reads, as the reference reads the
 * architecture (llama.cpp's deepseek32).
 *
 * The indexer of layer l, per token (x: the attention-normed input, qr: the normed q_a output):
 *   k   = LayerNorm(indexer.attn_k x) with weight and bias (eps 1e-6), its first n_rot channels
 *         roped with NEOX pairs at the token's position: the token's index key, stored in the KV
 *         block's companion buffer (element type: the index-kv-dtype toggle, kn_index.c);
 *   q_h = indexer.attn_q_b qr, head h (head_dim wide), roped likewise;
 *   w_h = (indexer.proj x)_h / sqrt(head_dim * n_head);
 *   score(p) = sum_h w_h relu(q_h . k_p) for every position p <= the token's (causal);
 *   the top_k positions by score (an equal score: the lower position first; all of them while
 *   there are at most top_k), ascending, are the only keys of its MLA attention (with F16 KV
 *   its query rounded to F16 first, as the reference multiplies them: kn_attn_sparse_row).
 * Every step is per token over absolute positions and the scoring reads the cache in position
 * order (kn_index_score, kn_topk_push), so a token's selection, and hence its output, never
 * depends on the batch, the chunking or the threads (P1). The index keys are part of the KV
 * block: allocated, shared, copied, checksummed, sent to the tiers and freed with it (kv_pool.h).
 *
 * Hyper-parameters as deepseek2's, with attention.q_lora_rank > 0 (the indexer's queries come from
 * q_a), expert_gating_func required, attention.indexer.{head_count, key_length, top_k}, and
 * nextn_predict_layers (trailing MTP layers: loaded by nothing, run by nothing).
 */
#include "base/err.h"
#include "base/flags.h"
#include "model/arch_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The indexer's head sizes the kernel takes: multiples of 16 up to 512, at least n_rot. */
#define DSA_HEAD_MAX  512
#define DSA_TOP_K_MAX 16384

/* A layer's indexer tensors (mla_layer.ext). */
typedef struct dsa_layer {
    kn_mat *wk;      /* indexer.attn_k [D][n_embd] */
    kn_mat *wq_b;    /* indexer.attn_q_b [H * D][q_lora] */
    kn_mat *wproj;   /* indexer.proj [H][n_embd] */
    float *k_norm;   /* [D] */
    float *k_norm_b; /* [D] */
} dsa_layer;

/* A forward context's indexer buffers (mla_ctx.ext); T = max_tokens, H = indexer heads. */
typedef struct dsa_ctx {
    float *k;            /* [T][D]: index keys */
    float *q;            /* [T][H * D]: index queries */
    float *w;            /* [T][H]: head weights */
    int32_t *sel;        /* [T][top_k]: each token's selected positions, ascending */
    int64_t *n_sel;      /* [T] */
    kn_topk_item **heap; /* per thread [top_k] */
    float **kbuf;        /* per thread [D] */
    float **scores;      /* per thread [top_k] */
    kn_ik_type ik;       /* the pool's index-key type */
    int n_threads;
} dsa_ctx;

/* ---- hyper-parameters ---- */

static int ds32_read_hparams(model *m) {
    model_hparams *hp = &m->hp;
    const char *path = gguf_path(m->g);
    int64_t gating, nextn;
    int rc;
    /* the reference requires the gating key here (deepseek2 defaults it) */
    if ((rc = model_read_int(m, "expert_gating_func", true, 0, &gating)) ||
        (rc = model_read_int(m, "nextn_predict_layers", false, 0, &nextn)) ||
        (rc = arch_mla_read_hparams(m)) ||
        (rc = model_read_int(m, "attention.indexer.head_count", true, 0, &hp->indexer_n_head)) ||
        (rc = model_read_int(m, "attention.indexer.key_length", true, 0, &hp->indexer_head_dim)) ||
        (rc = model_read_int(m, "attention.indexer.top_k", true, 0, &hp->indexer_top_k)))
        return rc;
    if (nextn >= hp->n_layer)
        return err_set(ERR_FORMAT, "%s: %s.nextn_predict_layers %lld of %lld layers", path,
                       hp->arch_name, (long long)nextn, (long long)hp->n_layer);
    hp->n_layer_nextn = nextn;
    hp->n_layer -= nextn;
    if (hp->n_layer_dense_lead > hp->n_layer)
        hp->n_layer_dense_lead = hp->n_layer;
    if (hp->n_lora_q <= 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: %s.attention.q_lora_rank is 0: deepseek32's indexer takes its queries "
                       "from q_a",
                       path, hp->arch_name);
    int64_t D = hp->indexer_head_dim;
    if (D % 16 || D < 16 || D > DSA_HEAD_MAX || D < hp->n_rot)
        return err_set(ERR_UNSUPPORTED,
                       "%s: %s.attention.indexer.key_length %lld: the indexer kernel takes "
                       "multiples of 16 up to %d, at least rope.dimension_count (%lld)",
                       path, hp->arch_name, (long long)D, DSA_HEAD_MAX, (long long)hp->n_rot);
    if (hp->indexer_n_head < 1 || hp->indexer_n_head > 1024)
        return err_set(ERR_FORMAT, "%s: %s.attention.indexer.head_count %lld (1 to 1024)", path,
                       hp->arch_name, (long long)hp->indexer_n_head);
    if (hp->indexer_top_k < 1 || hp->indexer_top_k > DSA_TOP_K_MAX)
        return err_set(ERR_FORMAT, "%s: %s.attention.indexer.top_k %lld (1 to %d)", path,
                       hp->arch_name, (long long)hp->indexer_top_k, DSA_TOP_K_MAX);
    return 0;
}

/* ---- binding ---- */

static void ds32_free_layer(const model *m, model_layer *L) {
    mla_layer *X = L->ext;
    if (X && X->ext) {
        dsa_layer *I = X->ext;
        kn_mat_destroy(I->wk);
        kn_mat_destroy(I->wq_b);
        kn_mat_destroy(I->wproj);
        free(I->k_norm);
        free(I->k_norm_b);
        free(I);
        X->ext = NULL;
    }
    arch_mla_free_layer(m, L);
}

static int ds32_bind_layer(model *m, int64_t l) {
    const model_hparams *hp = &m->hp;
    int rc = arch_mla_bind_layer(m, l);
    if (rc)
        return rc;
    mla_layer *X = m->layers[l].ext;
    dsa_layer *I = calloc(1, sizeof *I);
    if (!I)
        return err_set(ERR_NOMEM, "out of memory");
    X->ext = I;
    int64_t D = hp->indexer_head_dim, H = hp->indexer_n_head;
    char n[96];
    if ((rc = model_bind_vec(m, model_layer_name(n, l, "indexer.k_norm.weight"), D, true,
                             &I->k_norm)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "indexer.k_norm.bias"), D, true,
                             &I->k_norm_b)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "indexer.proj.weight"), hp->n_embd, H, true,
                             1.0, &I->wproj)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "indexer.attn_k.weight"), hp->n_embd, D,
                             true, 1.0, &I->wk)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "indexer.attn_q_b.weight"), hp->n_lora_q,
                             H * D, true, 1.0, &I->wq_b)))
        return rc;
    return 0;
}

static void ds32_kv_layout(const model *m, kv_pool_opts *o) {
    arch_mla_kv_layout(m, o);
    kn_ik_type t = kn_ik_type_parse(flags_str(FLAG_INDEX_KV_DTYPE), o->f16);
    o->ik_row_bytes = kn_ik_row_bytes(t, m->hp.indexer_head_dim);
    o->ik_name = kn_ik_name(t);
}

/* ---- forward buffers ---- */

static void ds32_ctx_destroy(fwd_ctx *c) {
    mla_ctx *mc = c->arch_ctx;
    if (mc && mc->ext) {
        dsa_ctx *st = mc->ext;
        for (int i = 0; i < st->n_threads; i++) {
            if (st->heap)
                free(st->heap[i]);
            if (st->kbuf)
                free(st->kbuf[i]);
            if (st->scores)
                free(st->scores[i]);
        }
        free(st->heap);
        free(st->kbuf);
        free(st->scores);
        free(st->k);
        free(st->q);
        free(st->w);
        free(st->sel);
        free(st->n_sel);
        free(st);
        mc->ext = NULL;
    }
    arch_mla_ctx_destroy(c);
}

static int ds32_ctx_create(fwd_ctx *c) {
    const model_hparams *hp = &c->m->hp;
    int rc = arch_mla_ctx_create(c);
    if (rc)
        return rc;
    int t = kn_ik_type_from_name(kv_pool_ik_name(c->kv));
    if (t < 0 || kv_pool_ik_block_bytes(c->kv) !=
                     kn_ik_row_bytes(t, hp->indexer_head_dim) * (size_t)kv_pool_block_size(c->kv))
        return err_set(ERR_INVAL,
                       "forward: the KV pool has no index-key buffer for %s (make it "
                       "with model_kv_pool_opts)",
                       hp->arch_name);
    mla_ctx *mc = c->arch_ctx;
    dsa_ctx *st = calloc(1, sizeof *st);
    if (!st)
        return ERR_NOMEM;
    mc->ext = st;
    size_t T = (size_t)c->max_tokens, H = (size_t)hp->indexer_n_head;
    size_t D = (size_t)hp->indexer_head_dim, K = (size_t)hp->indexer_top_k, F = sizeof(float);
    st->ik = (kn_ik_type)t;
    st->k = malloc(T * D * F);
    st->q = malloc(T * H * D * F);
    st->w = malloc(T * H * F);
    st->sel = malloc(T * K * sizeof(int32_t));
    st->n_sel = malloc(T * sizeof(int64_t));
    st->n_threads = c->n_threads;
    st->heap = calloc((size_t)c->n_threads, sizeof *st->heap);
    st->kbuf = calloc((size_t)c->n_threads, sizeof *st->kbuf);
    st->scores = calloc((size_t)c->n_threads, sizeof *st->scores);
    if (!st->k || !st->q || !st->w || !st->sel || !st->n_sel || !st->heap || !st->kbuf ||
        !st->scores)
        return ERR_NOMEM;
    for (int i = 0; i < c->n_threads; i++) {
        st->heap[i] = malloc(K * sizeof(kn_topk_item));
        st->kbuf[i] = malloc(D * F);
        st->scores[i] = malloc(K * F);
        if (!st->heap[i] || !st->kbuf[i] || !st->scores[i])
            return ERR_NOMEM;
    }
    return 0;
}

/* ---- forward ---- */
/* Tokens [t0, t1): the index key (LayerNorm, RoPE) into the pool's companion buffer, the index
 * query heads roped, the head weights scaled. */
static void ds32_rows_index_kq(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1,
                               int thread) {
    const model_hparams *hp = &c->m->hp;
    const dsa_layer *I = ph->arg;
    dsa_ctx *st = ((mla_ctx *)c->arch_ctx)->ext;
    int64_t D = hp->indexer_head_dim, H = hp->indexer_n_head, R = hp->n_rot;
    int64_t bs = kv_pool_block_size(c->kv);
    size_t ist = kv_pool_ik_stride(c->kv), row = kv_pool_ik_block_bytes(c->kv) / (size_t)bs;
    unsigned char *base = kv_pool_ik_base(c->kv, ph->layer);
    float wscale = 1.0f / sqrtf((float)(D * H));
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = c->rope + t * R;
        float *k = st->k + t * D;
        kn_layernorm(k, I->k_norm, I->k_norm_b, 1e-6f, D, k);
        kn_rope(k, R, cs, true);
        for (int64_t h = 0; h < H; h++)
            kn_rope(st->q + (t * H + h) * D, R, cs, true);
        const fwd_seq *s = &c->b->seqs[c->tok_seq[t]];
        int64_t p = c->tok_pos[t];
        kn_ik_store(base + (size_t)s->blocks[p / bs] * ist + (size_t)(p % bs) * row, k, D, st->ik);
        for (int64_t h = 0; h < H; h++)
            st->w[t * H + h] = st->w[t * H + h] * wscale;
    }
}

/* Tokens [t0, t1): every causal position's score, the top_k of them into the token's selection. */
static void ds32_rows_select(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    dsa_ctx *st = ((mla_ctx *)c->arch_ctx)->ext;
    int64_t D = hp->indexer_head_dim, H = hp->indexer_n_head, K = hp->indexer_top_k;
    int64_t bs = kv_pool_block_size(c->kv);
    size_t ist = kv_pool_ik_stride(c->kv), row = kv_pool_ik_block_bytes(c->kv) / (size_t)bs;
    const unsigned char *base = kv_pool_ik_base(c->kv, ph->layer);
    kn_topk_item *heap = st->heap[thread];
    float *kb = st->kbuf[thread];
    for (int64_t t = t0; t < t1; t++) {
        const int32_t *blocks = c->b->seqs[c->tok_seq[t]].blocks;
        int64_t n_pos = (int64_t)c->tok_pos[t] + 1, n = 0;
        const float *q = st->q + t * H * D, *w = st->w + t * H;
        for (int64_t p = 0; p < n_pos; p++) {
            kn_ik_load(base + (size_t)blocks[p / bs] * ist + (size_t)(p % bs) * row, D, st->ik, kb);
            kn_topk_push(heap, &n, K, kn_index_score(q, w, H, D, kb, c->m->isa), (int32_t)p);
        }
        kn_topk_positions(heap, n, st->sel + t * K);
        st->n_sel[t] = n;
    }
}

static void ds32_after_qkv(fwd_ctx *c, int64_t l) {
    const model_hparams *hp = &c->m->hp;
    const mla_layer *X = c->m->layers[l].ext;
    int64_t T = c->n_tok, D = hp->indexer_head_dim, H = hp->indexer_n_head;
    fwd_phase_rows(c, ds32_rows_index_kq, l, T, 8 * D + 4 * H * hp->n_rot, false, X->ext);
    int64_t mean_pos = c->tok_pos[T / 2] + 1;
    fwd_phase ph = {.c = c, .fn = ds32_rows_select, .layer = l, .units = T, .uneven = true};
    fwd_phase_run(c, &ph, 2 * mean_pos * H * D);
}

typedef struct ds32_attn {
    float scale;
} ds32_attn;

/* Attention units [u0, u1): token u / n_head, head u % n_head, over the token's selection. */
static void ds32_rows_attention(fwd_ctx *c, const fwd_phase *ph, int64_t u0, int64_t u1,
                                int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds32_attn *opt = ph->arg;
    dsa_ctx *st = ((mla_ctx *)c->arch_ctx)->ext;
    int64_t H = hp->n_head, HD = hp->head_dim, K = hp->indexer_top_k;
    kn_attn_kv kv = {.k_base = kv_pool_k_base(c->kv, ph->layer),
                     .v_base = kv_pool_k_base(c->kv, ph->layer),
                     .block_bytes = kv_pool_kv_stride(c->kv),
                     .block_size = kv_pool_block_size(c->kv),
                     .kv_stride = c->kv_dim,
                     .f16 = kv_pool_f16(c->kv)};
    for (int64_t u = u0; u < u1; u++) {
        int64_t t = u / H, h = u % H;
        kv.table = c->b->seqs[c->tok_seq[t]].blocks;
        kn_attn_sparse_row(c->q + (t * H + h) * HD, &kv, HD, st->sel + t * K, st->n_sel[t],
                           opt->scale, st->scores[thread], c->att + (t * H + h) * HD, c->m->isa);
    }
}

static void ds32_attention(fwd_ctx *c, int64_t l, float scale) {
    const model_hparams *hp = &c->m->hp;
    ds32_attn opt = {.scale = scale};
    int64_t per = c->tok_pos[c->n_tok / 2] + 1;
    if (per > hp->indexer_top_k)
        per = hp->indexer_top_k;
    fwd_phase ph = {.c = c,
                    .fn = ds32_rows_attention,
                    .layer = l,
                    .units = c->n_tok * hp->n_head,
                    .uneven = true,
                    .arg = &opt};
    fwd_phase_run(c, &ph, 4 * per * hp->head_dim);
}

static void ds32_forward_layer(fwd_ctx *c, int64_t l) {
    const mla_layer *X = c->m->layers[l].ext;
    const dsa_layer *I = X->ext;
    dsa_ctx *st = ((mla_ctx *)c->arch_ctx)->ext;
    mla_ctx *mc = c->arch_ctx;
    int64_t T = c->n_tok;
    mla_hooks hk = {.x_mm = {{.w = I->wk, .x = c->xn, .y = st->k, .rows = T},
                             {.w = I->wproj, .x = c->xn, .y = st->w, .rows = T}},
                    .n_x = 2,
                    .qa_mm = {{.w = I->wq_b, .x = mc->qa, .y = st->q, .rows = T}},
                    .n_qa = 1,
                    .after_qkv = ds32_after_qkv,
                    .attention = ds32_attention};
    arch_mla_forward_layer(c, l, &hk);
}

const model_arch arch_deepseek32 = {
    .name = "deepseek32",
    .read_hparams = ds32_read_hparams,
    .bind_layer = ds32_bind_layer,
    .kv_dim = arch_dense_kv_dim,
    .kv_layout = ds32_kv_layout,
    .forward_layer = ds32_forward_layer,
    .free_layer = ds32_free_layer,
    .ctx_create = ds32_ctx_create,
    .ctx_destroy = ds32_ctx_destroy,
    .ctx_act = arch_mla_ctx_act,
};
