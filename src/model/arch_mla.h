/* SPDX-License-Identifier: MIT */
/*
 * arch_mla: multi-head latent attention (arch_deepseek2.c) as a part other architectures compose,
 * inside src/model only: the layer tensors and forward buffers of MLA, and its layer forward with
 * hooks where an extension (the DSA indexer of deepseek32) adds products and replaces the
 * attention phase. Each structure has an ext pointer the extending architecture owns.
 */
#ifndef VERITY_MODEL_ARCH_MLA_H
#define VERITY_MODEL_ARCH_MLA_H

#include "model/forward_int.h"

/* A layer's attention tensors (model_layer.ext); attn_norm and attn_output are the layer's. */
typedef struct mla_layer {
    kn_mat *wq_a, *wq_b; /* q_lora_rank > 0: [q_lora][n_embd], [n_head * qk][q_lora] */
    float *q_a_norm;     /* [q_lora] */
    kn_mat *wq;          /* q_lora_rank 0: [n_head * qk][n_embd] */
    kn_mat *wkv_a;       /* [kv_lora + rope][n_embd] */
    float *kv_a_norm;    /* [kv_lora] */
    kn_mat **wk_b;       /* [n_head]: [kv_lora][nope] */
    kn_mat **wv_b;       /* [n_head]: [v][kv_lora] */
    void *ext;           /* the extending architecture's tensors (it frees them first) */
} mla_layer;

/* A forward context's buffers (fwd_ctx.arch_ctx); T = max_tokens, H = n_head. The query rows
 * [T][H][kv_lora + rope] are c->q, the attention's output rows c->att, the cache rows c->k. */
typedef struct mla_ctx {
    float *qa;   /* [T][q_lora]: the normed q_a output once the cache rows are written */
    float *qf;   /* [T][H * qk]: the full query heads */
    float *qn;   /* [H * T][nope]: q_nope by head */
    float *qabs; /* [H * T][kv_lora]: absorbed q_nope by head */
    float *ol;   /* [H * T][kv_lora]: latent attention results by head */
    float *vo;   /* [H * T][v]: value heads by head */
    float *av;   /* [T][H * v]: value heads by token, attn_output's input */
    fwd_mm *mm;  /* [H] */
    void *ext;   /* the extending architecture's buffers (it frees them first) */
} mla_ctx;

/* What an extension adds to the MLA layer forward (all optional). */
typedef struct mla_hooks {
    /* products of the attention-normed input c->xn, run with q_a and kv_a (n_x <= 4) */
    fwd_mm x_mm[4];
    int n_x;
    /* products of the normed q_a output (mla_ctx.qa), run with q_b (n_qa <= 4) */
    fwd_mm qa_mm[4];
    int n_qa;
    /* after the cache rows are written and every product above is done */
    void (*after_qkv)(fwd_ctx *c, int64_t l);
    /* the attention phase (default: arch_dense_phase_attention over all positions) */
    void (*attention)(fwd_ctx *c, int64_t l, float scale);
} mla_hooks;

/* deepseek2's hyper-parameters: MLA sizes, leading dense layers, MoE, gating (absent: softmax),
 * YaRN and the attention scale. */
int arch_mla_read_hparams(model *m);

/* Binds layer l's MLA attention and its FFN (dense before n_layer_dense_lead, MoE after). */
int arch_mla_bind_layer(model *m, int64_t l);
void arch_mla_free_layer(const model *m, model_layer *L);

/* The MLA forward buffers (c->arch_ctx). */
int arch_mla_ctx_create(fwd_ctx *c);
void arch_mla_ctx_destroy(fwd_ctx *c);
void arch_mla_ctx_act(const model_hparams *hp, int64_t max_tokens, int64_t *rows, int64_t *elems);

/* The KV pool of MLA: the latent cache, K rows only (the values are their first kv_lora
 * elements). */
void arch_mla_kv_layout(const model *m, kv_pool_opts *o);

/* The attention of layer l, with hk's additions (NULL: none), output into c->y. */
void arch_mla_forward_attn(fwd_ctx *c, int64_t l, const mla_hooks *hk);

/* The whole layer l: the attention above, then the dense FFN (before n_layer_dense_lead) or the
 * MoE. */
void arch_mla_forward_layer(fwd_ctx *c, int64_t l, const mla_hooks *hk);

#endif
