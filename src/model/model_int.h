/* SPDX-License-Identifier: MIT */
/*
 * model_int: the model's fields, shared by model.c (loading) and forward.c (the hot path) only.
 */
#ifndef VERITY_MODEL_MODEL_INT_H
#define VERITY_MODEL_MODEL_INT_H

#include "model/model.h"

typedef struct model_layer {
    kn_mat *wq, *wk, *wv, *wo;
    kn_mat *w_gate, *w_up, *w_down;
    float *attn_norm;       /* [n_embd] */
    float *ffn_norm;        /* [n_embd] */
    float *bq, *bk, *bv;    /* qwen2 biases, or NULL */
    float *q_norm, *k_norm; /* qwen3 per-head norms [head_dim], or NULL */
} model_layer;

struct model {
    gguf *g;
    model_hparams hp;
    kn_isa isa;
    const gguf_tensor *tok_embd;
    float *output_norm;
    float *rope_factors; /* [n_rot / 2] frequency divisors, or NULL */
    kn_mat *output;
    model_layer *layers;
    size_t weight_bytes;
    double flops_per_token;
};

#endif
