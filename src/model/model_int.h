/* SPDX-License-Identifier: MIT */
/*
 * model_int: the model's fields and the architecture descriptor, shared inside src/model only
 * (model.c loads, forward.c computes, arch_<name>.c describe one architecture each).
 *
 * An architecture is one model_arch: its name (general.architecture), how it reads its
 * hyper-parameters, how it binds one layer's tensors, how wide a position of its KV cache is, and
 * how one layer of a forward step runs. model_arch.c lists them in one table; model.c and
 * forward.c dispatch through it and know no architecture by name. Adding an architecture is one
 * arch_<name>.c and one row of that table. The dense-transformer pieces the llama family shares
 * (hyper-parameters, attention and FFN binding and forward) live in arch_dense.c, the
 * mixture-of-experts FFN in moe.c, for any architecture to compose.
 */
#ifndef VERITY_MODEL_MODEL_INT_H
#define VERITY_MODEL_MODEL_INT_H

#include "model/model.h"

typedef struct fwd_ctx fwd_ctx;

/* The FFN of a mixture-of-experts layer. The expert tensors are 3-D in the file
 * ([n_embd, n_ff_exp, n_expert] etc.): each expert's slice is its own matrix. */
typedef struct model_moe {
    kn_router router;                           /* the layer's routing (bias points below) */
    kn_mat *gate_inp;                           /* router [n_expert][n_embd] */
    float *exp_probs_b;                         /* [n_expert] selection bias, or NULL */
    kn_mat **gate_exps, **up_exps, **down_exps; /* [n_expert] each */
    kn_mat *gate_shexp, *up_shexp, *down_shexp; /* the shared experts, or NULL */
    kn_mat *gate_inp_shexp;                     /* [1][n_embd]: sigmoid gate of the shared
                                                 * experts' output, or NULL (ungated) */
    const int32_t *tid2eid; /* [n_vocab][n_expert_used]: hash routing by token id, or NULL */
    float clamp, clamp_sh;  /* SwiGLU limits of the routed / shared experts (<= 1e-6: none):
                             * silu(min(g, L)) * clamp(u, -L, L) */
} model_moe;

typedef struct model_layer {
    kn_mat *wq, *wk, *wv, *wo;
    kn_mat *w_gate, *w_up, *w_down; /* the dense FFN, or NULL in an MoE layer */
    float *attn_norm;               /* [n_embd] */
    float *ffn_norm;                /* [n_embd] */
    float *bq, *bk, *bv;            /* qwen2 biases, or NULL */
    float *q_norm, *k_norm;         /* qwen3 per-head norms [head_dim], or NULL */
    model_moe *moe;                 /* the MoE FFN, or NULL */
    void *ext;                      /* the architecture's own tensors (model_arch.free_layer) */
} model_layer;

typedef struct model_arch {
    const char *name; /* general.architecture */
    /* Reads m->g's hyper-parameters into m->hp (arch_name is already set), including the RoPE
     * kind; may set m->rope_factors. Returns 0 or an error naming the key. */
    int (*read_hparams)(model *m);
    /* Binds layer l's tensors into m->layers[l], checking each one's shape and type. Returns 0
     * or an error naming the tensor. */
    int (*bind_layer)(model *m, int64_t l);
    /* Elements per position of one layer in the KV pool's K region (and V region). */
    int64_t (*kv_dim)(const model_hparams *hp);
    /* Optional (NULL: K and V regions of kv_dim each): the rest of the KV pool's layout for the
     * model (no V region, a companion buffer), set in o after its sizes and element type. */
    void (*kv_layout)(const model *m, kv_pool_opts *o);
    /* Runs layer l of the step c is computing (forward_int.h says what is where). */
    void (*forward_layer)(fwd_ctx *c, int64_t l);
    /* Optional (NULL: nothing to do). Frees what bind_layer put in L->ext. */
    void (*free_layer)(const model *m, model_layer *L);
    /* Optional: the architecture's buffers of a forward context (fwd_ctx.arch_ctx), created
     * with it (0 or ERR_NOMEM) and destroyed with it (also after a failed create). */
    int (*ctx_create)(fwd_ctx *c);
    void (*ctx_destroy)(fwd_ctx *c);
    /* Optional: the quantized-activation space the layer's matmuls need beyond one row of the
     * widest input per token (*rows rows, *elems elements in all), for max_tokens tokens. */
    void (*ctx_act)(const model_hparams *hp, int64_t max_tokens, int64_t *rows, int64_t *elems);
    /* Optional (models with MTP layers): runs the first MTP block over the step's rows
     * (fwd_run_mtp; c->mtp_h holds each row's previous hidden state), leaving its output row in
     * c->x with c->y zero and setting c->out_norm_w / c->out_w if it has its own head. */
    void (*mtp_forward)(fwd_ctx *c);
    /* Optional: the hidden state of a token row of the last step (fwd_hidden). */
    const float *(*hidden)(const fwd_ctx *c, int64_t row, int64_t *width);
} model_arch;

struct model {
    gguf *g;
    model_hparams hp;
    const model_arch *arch;
    kn_isa isa;
    const gguf_tensor *tok_embd;
    float *output_norm;
    float *rope_factors; /* [n_rot / 2] frequency divisors, or NULL */
    double *rope_theta;  /* [n_rot / 2] YaRN: the angle per position of each pair, or NULL */
    kn_mat *output;
    model_layer *layers;
    size_t weight_bytes;
    double flops_per_token;
};

/* ---- the registry (model_arch.c) ---- */

/* The architecture named name, or NULL. */
const model_arch *model_arch_find(const char *name);

/* Writes "llama, qwen2, ...", the supported names (for messages), into buf[size] (truncated). */
void model_arch_names(char *buf, size_t size);

/* ---- loading helpers (model.c), for the architectures ---- */

/* Metadata "<arch>.<suffix>": an integer (>= 0; def when absent and not required), a float (def
 * when absent), a bool (def when absent). Return 0 or an error naming the key. */
int model_read_int(const model *m, const char *suffix, bool required, int64_t def, int64_t *out);
int model_read_f32(const model *m, const char *suffix, float def, float *out);
int model_read_bool(const model *m, const char *suffix, bool def, bool *out);

/* "blk.<l>.<suffix>" into buf (at least 96 bytes); returns buf. */
const char *model_layer_name(char *buf, int64_t l, const char *suffix);

/* Finds tensor name and checks its type and that it is [ne0, ne1, ne2] with trailing zeros
 * meaning fewer dimensions ([ne0] for ne1 == 0). *out is NULL for an absent optional tensor.
 * Returns 0, ERR_FORMAT (missing), ERR_INVAL (shape), ERR_UNSUPPORTED (type); the detail names
 * the tensor, its shape and the expected one. */
int model_bind_tensor(const model *m, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                      bool required, const gguf_tensor **out);

/* A 1-D tensor [n] converted to f32 (malloc'd, the model frees it); NULL if optional and absent. */
int model_bind_vec(model *m, const char *name, int64_t n, bool required, float **out);

/* A weight matrix [k, n] (n outputs of k inputs) packed for m->isa; counts its bytes and FLOPs
 * per token times `share` (1 for a matrix every token uses). NULL if optional and absent. */
int model_bind_mat(model *m, const char *name, int64_t k, int64_t n, bool required, double share,
                   kn_mat **out);

/* A 3-D tensor [k, n, count] as count matrices [k, n] (its slices along the last dimension:
 * experts, heads), each counting `share` of its bytes and FLOPs per token; *out is a malloc'd
 * array (model_free_slices). Same errors as model_bind_tensor, slices named in kn_mat errors. */
int model_bind_slices(model *m, const char *name, int64_t k, int64_t n, int64_t count, double share,
                      kn_mat ***out);
void model_free_slices(kn_mat **mats, int64_t count);

/* ---- the dense transformer (arch_dense.c) ---- */

/* The llama family's hyper-parameters (embedding, layers, heads, head sizes, FFN, context, RoPE
 * and its scaling, norm epsilon, sliding window); ff_required: feed_forward_length must be
 * present (an MoE model may omit it). Leaves rope_neox false. Made of the two parts below and the
 * head sizes (key_length = value_length <= 512, rope.dimension_count) between them. */
int arch_dense_read_hparams(model *m, bool ff_required);

/* Embedding, layers, FFN, heads, KV heads, context, checked. */
int arch_dense_read_sizes(model *m, bool ff_required);

/* RoPE base, RMS epsilon, RoPE scaling (linear, llama3, and yarn if the architecture takes it),
 * sliding window; needs n_rot. Leaves rope_neox false. */
int arch_dense_read_rope(model *m, bool yarn);

/* Binds layer l's attention: norm, Q, K, V, output; with biases (qwen2) and per-head Q/K norms
 * (qwen3) required, or optional if the flag is false (absent then). */
int arch_dense_bind_attn(model *m, int64_t l, bool biases, bool qk_norm);

/* Binds layer l's dense SwiGLU FFN (ffn_norm, ffn_gate, ffn_up, ffn_down of n_ff). */
int arch_dense_bind_ffn(model *m, int64_t l);

/* n_head_kv * head_dim. */
int64_t arch_dense_kv_dim(const model_hparams *hp);

/* ---- the mixture-of-experts FFN (moe.c) ---- */

/* Reads the MoE keys (expert_count, expert_used_count, expert_feed_forward_length (default
 * n_ff / n_expert_used), expert_shared_count, expert_shared_feed_forward_length,
 * expert_group_count, expert_group_used_count) and checks them; the gating, normalisation and
 * scale are the caller's (they are fixed by some architectures, read by others). */
int moe_read_hparams(model *m);

/* Binds layer l's MoE FFN: ffn_norm, ffn_gate_inp, the three expert tensors (3-D, sliced per
 * expert), the selection bias exp_probs_b if use_bias and the file has it, and the shared experts
 * (ffn_*_shexp, n_ff_shexp wide) if n_ff_shexp > 0, with ffn_gate_inp_shexp if present. */
int moe_bind_layer(model *m, int64_t l, bool use_bias);

/* moe_bind_layer into L (file block l): a block outside m->layers (DeepSeek-V4's MTP layers). */
int moe_bind_layer_into(model *m, int64_t l, model_layer *L, bool use_bias);

/* Frees a layer's MoE (NULL: no-op). */
void moe_free(model_moe *moe, int64_t n_expert);

#endif
