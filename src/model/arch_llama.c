/* SPDX-License-Identifier: MIT */
/*
 * arch_llama: "llama" (llama2.c-style models, TinyLlama, Llama-2/3 shapes): the dense transformer
 * of arch_dense.c with interleaved RoPE pairs (2i, 2i+1), optional Q/K/V biases (all three or
 * none), tied or untied output, linear / llama3 RoPE scaling and a sliding window if the file
 * says so.
 */
#include "model/forward_int.h"

static int arch_llama_read_hparams(model *m) {
    return arch_dense_read_hparams(m, true);
}

static int arch_llama_bind_layer(model *m, int64_t l) {
    int rc = arch_dense_bind_attn(m, l, false, false);
    return rc ? rc : arch_dense_bind_ffn(m, l);
}

const model_arch arch_llama = {
    .name = "llama",
    .read_hparams = arch_llama_read_hparams,
    .bind_layer = arch_llama_bind_layer,
    .kv_dim = arch_dense_kv_dim,
    .forward_layer = arch_dense_forward_layer,
};
