/* SPDX-License-Identifier: MIT */
/*
 * arch_qwen3: "qwen3": the dense transformer of arch_dense.c with per-head Q/K RMSNorm (required;
 * before RoPE) and NEOX RoPE pairs (i, i + n_rot/2).
 */
#include "model/forward_int.h"

static int arch_qwen3_read_hparams(model *m) {
    int rc = arch_dense_read_hparams(m, true);
    m->hp.rope_neox = true;
    return rc;
}

static int arch_qwen3_bind_layer(model *m, int64_t l) {
    int rc = arch_dense_bind_attn(m, l, false, true);
    return rc ? rc : arch_dense_bind_ffn(m, l);
}

const model_arch arch_qwen3 = {
    .name = "qwen3",
    .read_hparams = arch_qwen3_read_hparams,
    .bind_layer = arch_qwen3_bind_layer,
    .kv_dim = arch_dense_kv_dim,
    .forward_layer = arch_dense_forward_layer,
};
