/* SPDX-License-Identifier: MIT */
/*
 * arch_qwen3moe: "qwen3moe" (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (per-head Q/K
 * RMSNorm before NEOX RoPE; key_length may differ from n_embd / n_head) and a mixture-of-experts
 * FFN in every layer (moe.c). As the reference reads this architecture (llama.cpp's qwen3moe):
 * softmax gating over all experts, top expert_used_count, the selected weights renormalised to
 * sum 1 (sum clamped at the smallest normal F16), no weight scale, no selection bias; group-limited
 * routing if the file has expert_group_count > 1; shared experts if it declares them.
 */
#include "model/forward_int.h"

static int arch_qwen3moe_read_hparams(model *m) {
    int rc = arch_dense_read_hparams(m, false);
    if (!rc)
        rc = moe_read_hparams(m);
    m->hp.rope_neox = true;
    m->hp.expert_gating = KN_GATING_SOFTMAX;
    m->hp.expert_weights_norm = true;
    m->hp.expert_weights_scale = 0.0f;
    return rc;
}

static int arch_qwen3moe_bind_layer(model *m, int64_t l) {
    int rc = arch_dense_bind_attn(m, l, false, true);
    return rc ? rc : moe_bind_layer(m, l, false);
}

static void arch_qwen3moe_forward_layer(fwd_ctx *c, int64_t l) {
    arch_dense_forward_attn(c, l);
    moe_forward_ffn(c, l);
}

const model_arch arch_qwen3moe = {
    .name = "qwen3moe",
    .read_hparams = arch_qwen3moe_read_hparams,
    .bind_layer = arch_qwen3moe_bind_layer,
    .kv_dim = arch_dense_kv_dim,
    .forward_layer = arch_qwen3moe_forward_layer,
};
