/* SPDX-License-Identifier: MIT */
/*
 * model: a transformer loaded from GGUF: hyper-parameters, weights bound to packed kernel
 * matrices, and the forward pass over a ragged batch (forward.h).
 *
 * Supported architectures (general.architecture), one file each (src/model/arch_<name>.c, listed
 * in model_arch.c): "llama" (llama2.c-style models, TinyLlama, Llama-2/3 shapes; tied or untied
 * output), the llama-family variants "qwen2" (Q/K/V biases, NEOX RoPE) and "qwen3" (per-head Q/K
 * RMSNorm, NEOX RoPE), "qwen3moe" (qwen3 attention, mixture-of-experts FFN), "deepseek2"
 * (DeepSeek-V2/V3, Kimi-K2: multi-head latent attention over a latent KV cache, YaRN, leading
 * dense layers, MoE with shared experts, selection bias and grouped routing), and "deepseek32"
 * (DeepSeek-V3.2: deepseek2 with DeepSeek sparse attention, a lightning indexer whose keys are a
 * companion buffer of the KV blocks and that picks the positions each query attends to), and
 * "deepseek4" (DeepSeek-V4: hyper-connections, compressed attention with an indexer, sliding
 * window, sinks, grouped low-rank output, hash-routed MoE layers, clamped SwiGLU). Weight
 * types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, mixed freely across
 * tensors (kn_type_supported), expert tensors included. Anything else is refused at load with
 * ERR_UNSUPPORTED naming the architecture, tensor or type.
 *
 * Lifetime: the GGUF file stays mapped for the model's life (embedding rows, tokenizer data);
 * matmul weights are packed copies for SIMD instruction sets. A loaded model is immutable and may
 * be used by several forward contexts at once.
 */
#ifndef VERITY_MODEL_MODEL_H
#define VERITY_MODEL_MODEL_H

#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "kv/kv_pool.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct model_hparams {
    char arch_name[32];
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;
    int64_t n_ff;
    int64_t n_ctx_train; /* context length the file declares */
    int64_t n_rot;       /* rotated dimensions per head */
    bool rope_neox;      /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    float rope_base;
    float rope_freq_scale;  /* 1 / linear scaling factor */
    bool rope_has_factors;  /* per-dimension frequency factors (Llama 3.1 scaling) */
    bool rope_yarn;         /* YaRN frequencies (rope.scaling.type yarn) */
    int64_t n_ctx_orig;     /* YaRN: the original context length */
    float yarn_log_mul;     /* YaRN: rope.scaling.yarn_log_multiplier as stored (0: absent) */
    int64_t sliding_window; /* attention sees the last sliding_window positions (0: all) */
    float rms_eps;
    bool tied_output; /* output projection is the token embedding */
    int weight_type;  /* type of the attention Q weight, for reporting */
    /* multi-head latent attention (n_lora_kv 0: none). The KV cache holds per position the
     * normed latent (n_lora_kv) and the roped key part (n_rot): head_dim = n_lora_kv + n_rot,
     * n_head_kv = 1. */
    int64_t n_lora_q;    /* query low-rank width (0: a full query projection) */
    int64_t n_lora_kv;   /* latent width */
    int64_t head_dim_qk; /* a query/key head as trained: nope + rope (key_length_mla) */
    int64_t head_dim_v;  /* a value head (value_length_mla) */
    float attn_scale;    /* the attention's score scale */
    /* mixture of experts (n_expert 0: a dense FFN of n_ff in every layer) */
    int64_t n_expert;           /* routed experts of an MoE layer */
    int64_t n_expert_used;      /* experts per token (k) */
    int64_t n_ff_exp;           /* FFN width of one routed expert */
    int64_t n_expert_shared;    /* shared experts (0: none) */
    int64_t n_ff_shexp;         /* FFN width of the shared experts together */
    int64_t n_expert_groups;    /* group-limited routing over this many groups (<= 1: none) */
    int64_t n_group_used;       /* groups a token's experts come from */
    int64_t n_layer_dense_lead; /* leading layers with a dense FFN instead */
    int expert_gating;          /* kn_gating */
    bool expert_weights_norm;   /* the k weights are normalised to sum 1 */
    float expert_weights_scale; /* and multiplied by this (0 or 1: not) */
    /* DeepSeek sparse attention (indexer_n_head 0: none): the lightning indexer's heads, head
     * size (its first n_rot channels roped, NEOX pairs) and the keys each query attends to */
    int64_t indexer_n_head;
    int64_t indexer_head_dim;
    int64_t indexer_top_k;
    int64_t n_layer_nextn; /* trailing multi-token-prediction layers of the file, not run */
    /* DeepSeek-V4 (hc_mult 0: none): hyper-connection streams, Sinkhorn rounds and epsilon,
     * leading hash-routed layers, grouped low-rank output, the compressed layers' RoPE base
     * (per-layer compression ratios and SwiGLU clamps are the layers' own) */
    int64_t hc_mult, hc_sinkhorn_iters, n_hash_layers, o_groups, o_lora;
    float hc_eps, compress_rope_base;
} model_hparams;

typedef struct model model;

/* Loads path for instruction set isa. Returns 0, or ERR_IO / ERR_FORMAT (malformed file),
 * ERR_UNSUPPORTED (architecture, tensor type), ERR_INVAL (inconsistent shapes; the detail names
 * the tensor, its shape and the expected one), ERR_NOMEM. */
int model_load(const char *path, kn_isa isa, model **out);

/* Like model_load over a GGUF image in memory (the embedded default model). data must be aligned
 * to the file's alignment (32 bytes by default) and outlive the model; it is only read. name is
 * used in messages and logs. Same returns as model_load. */
int model_load_memory(const void *data, size_t size, const char *name, kn_isa isa, model **out);

/* Reads only the hyper-parameters of the model in g (no tensor is bound or checked): what
 * `verity inspect` shows. Returns 0 and *out, or model_load's errors for the metadata. */
int model_hparams_read(const gguf *g, model_hparams *out);

/* Frees the model. NULL is a no-op. */
void model_destroy(model *m);

const model_hparams *model_get_hparams(const model *m);
const gguf *model_get_gguf(const model *m);
kn_isa model_get_isa(const model *m);

/* The model file's identity: a hash of its header (metadata, tensor names, types, shapes and
 * data offsets) and of 4,096 evenly spaced 64-byte windows of its tensor data. Two files with one
 * identity are treated as the same model by the KV cache tiers. */
uint64_t model_identity(const model *m);

/* Elements each position of one layer occupies in the KV pool's K region (and in its V region):
 * the architecture's cache layout (n_head_kv * head_dim for the dense attention). */
int64_t model_kv_dim(const model *m);

/* The KV pool options for this model: n_layer, kv_dim, block_size, n_blocks and the K/V element
 * type (f16) as given, and the architecture's layout (no V region for MLA's latent cache; the DSA
 * indexer's key buffer, its element type from the index-kv-dtype toggle, "auto" following f16).
 * Every pool a forward context of the model uses must be made with these options. */
void model_kv_pool_opts(const model *m, bool f16, int64_t block_size, int64_t n_blocks,
                        kv_pool_opts *o);

/* Bytes of weights one forward pass reads per token for the matmuls (for roofline reporting);
 * for MoE layers the routed experts count n_expert_used / n_expert of their bytes. */
size_t model_weight_bytes(const model *m);

/* Matmul FLOPs per token (2 * multiply-adds over all weight matrices). */
double model_flops_per_token(const model *m);

#endif
