/* SPDX-License-Identifier: MIT */
/*
 * cmd_inspect: `verity inspect FILE.gguf` prints the header, every metadata entry (long arrays
 * abbreviated to their first elements), the tensor table, and the model's hyper-parameters as its
 * architecture reads them (model_hparams_read: defaults filled in, experts and routing for MoE
 * models), or why it cannot be loaded. Output goes to stdout.
 */
#include "base/err.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

#define INSPECT_ARR_SHOW 8

static void inspect_print_str(gguf_str s, size_t max) {
    putchar('"');
    size_t n = s.len < max ? s.len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (s.len > max)
        printf("... (%llu bytes)", (unsigned long long)s.len);
}

static void inspect_print_arr(const gguf_arr *a, int depth) {
    printf("[%s x %llu] ", gguf_vtype_name(a->type), (unsigned long long)a->n);
    uint64_t show = a->n < INSPECT_ARR_SHOW ? a->n : INSPECT_ARR_SHOW;
    putchar('[');
    for (uint64_t i = 0; i < show; i++) {
        if (i)
            fputs(", ", stdout);
        if (a->type == GGUF_VT_STRING)
            inspect_print_str(gguf_arr_str(a, i), 40);
        else if (a->type == GGUF_VT_ARRAY) {
            gguf_arr sub;
            if (depth < 4 && gguf_arr_get_arr(a, i, &sub) == 0)
                inspect_print_arr(&sub, depth + 1);
            else
                fputs("...", stdout);
        } else if (a->type == GGUF_VT_FLOAT32 || a->type == GGUF_VT_FLOAT64)
            printf("%g", gguf_arr_f64(a, i));
        else
            printf("%lld", (long long)gguf_arr_i64(a, i));
    }
    if (a->n > show)
        fputs(", ...", stdout);
    putchar(']');
}

static const char *inspect_gating_name(int g) {
    static const char *names[] = {"none", "softmax", "sigmoid", "softmax-weight", "sqrt-softplus"};
    return g >= 0 && g <= KN_GATING_SQRT_SOFTPLUS ? names[g] : "?";
}

/* DeepSeek-V4's own hyper-parameters: the per-layer compression ratios and SwiGLU clamps, the
 * compressed layers' RoPE, hyper-connections, grouped output, hash-routed layers. */
static void inspect_print_ds4(const gguf *g, const model_hparams *hp) {
    char key[128];
    gguf_arr a;
    printf("  compression ratios:");
    snprintf(key, sizeof key, "%s.attention.compress_ratios", hp->arch_name);
    if (gguf_get_arr(g, key, &a) == 0)
        for (uint64_t i = 0; i < a.n && i < (uint64_t)hp->n_layer; i++)
            printf(" %lld", (long long)gguf_arr_i64(&a, i));
    printf(" (compressed layers: rope base %g, yarn; others: base %g unscaled)\n",
           hp->compress_rope_base, hp->rope_base);
    printf(
        "  attention: q lora %lld, one kv head (k = v) with sinks, score scale %g, output in %lld "
        "groups of rank %lld\n",
        (long long)hp->n_lora_q, hp->attn_scale, (long long)hp->o_groups, (long long)hp->o_lora);
    printf("  hyper-connections: %lld streams, %lld sinkhorn iterations, eps %g; hash-routed "
           "layers %lld\n",
           (long long)hp->hc_mult, (long long)hp->hc_sinkhorn_iters, hp->hc_eps,
           (long long)hp->n_hash_layers);
    const char *cl[2] = {"swiglu_clamp_exp", "swiglu_clamp_shexp"};
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof key, "%s.%s", hp->arch_name, cl[i]);
        if (gguf_get_arr(g, key, &a) == 0 && a.n > 0) {
            printf("  %s:", cl[i]);
            for (uint64_t j = 0; j < a.n && j < 16; j++)
                printf(" %g", gguf_arr_f64(&a, j));
            printf("%s\n", a.n > 16 ? " ..." : "");
        }
    }
}

/* The hyper-parameters as the architecture reads them; a file verity cannot run says why (the
 * command still succeeds: the file itself was read). */
static void inspect_print_model(const gguf *g) {
    model_hparams hp;
    if (model_hparams_read(g, &hp)) {
        printf("model: not loadable: %s\n", err_detail());
        return;
    }
    printf("model: %s\n", hp.arch_name);
    printf("  layers %lld, embd %lld, heads %lld, kv heads %lld, head size %lld, ff %lld, "
           "context %lld\n",
           (long long)hp.n_layer, (long long)hp.n_embd, (long long)hp.n_head,
           (long long)hp.n_head_kv, (long long)hp.head_dim, (long long)hp.n_ff,
           (long long)hp.n_ctx_train);
    printf("  rope: %lld dims, %s pairs, base %g, freq scale %g%s; rms eps %g", (long long)hp.n_rot,
           hp.rope_neox ? "neox" : "interleaved", hp.rope_base, hp.rope_freq_scale,
           hp.rope_has_factors ? ", frequency factors" : "", hp.rms_eps);
    if (hp.sliding_window > 0)
        printf("; sliding window %lld", (long long)hp.sliding_window);
    if (hp.rope_yarn)
        printf("; yarn over an original context of %lld", (long long)hp.n_ctx_orig);
    printf("\n");
    if (hp.n_lora_kv > 0)
        printf("  latent attention: q lora %lld, kv lora %lld, q/k head %lld (rope %lld), v head "
               "%lld, cache row %lld, score scale %g\n",
               (long long)hp.n_lora_q, (long long)hp.n_lora_kv, (long long)hp.head_dim_qk,
               (long long)hp.n_rot, (long long)hp.head_dim_v, (long long)hp.head_dim,
               hp.attn_scale);
    if (hp.indexer_n_head > 0)
        printf("  sparse attention (DSA indexer): %lld heads of %lld (rope %lld, %s pairs), top "
               "%lld %s per query\n",
               (long long)hp.indexer_n_head, (long long)hp.indexer_head_dim, (long long)hp.n_rot,
               hp.hc_mult ? "interleaved" : "neox", (long long)hp.indexer_top_k,
               hp.hc_mult ? "compressed blocks (ratio-4 layers)" : "keys");
    if (hp.hc_mult > 0)
        inspect_print_ds4(g, &hp);
    if (hp.n_layer_nextn > 0)
        printf("  multi-token prediction layers: %lld%s\n", (long long)hp.n_layer_nextn,
               hp.hc_mult ? " (the mtp drafter: --spec mtp)"
                          : " (not run)");
    if (hp.n_expert > 0) {
        printf("  experts: %lld, used per token %lld, expert ff %lld", (long long)hp.n_expert,
               (long long)hp.n_expert_used, (long long)hp.n_ff_exp);
        if (hp.n_expert_shared > 0 || hp.n_ff_shexp > 0)
            printf(", shared %lld (ff %lld)", (long long)hp.n_expert_shared,
                   (long long)hp.n_ff_shexp);
        if (hp.n_layer_dense_lead > 0)
            printf(", leading dense layers %lld", (long long)hp.n_layer_dense_lead);
        printf("\n  routing: %s gating", inspect_gating_name(hp.expert_gating));
        if (hp.n_expert_groups > 1)
            printf(", %lld of %lld groups", (long long)hp.n_group_used,
                   (long long)hp.n_expert_groups);
        printf(", weights %s", hp.expert_weights_norm ? "normalised" : "not normalised");
        if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f)
            printf(", scaled by %g", hp.expert_weights_scale);
        printf("\n");
    }
}

int cmd_inspect(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-')
        return cli_usage_error("inspect", "usage: verity inspect FILE.gguf");
    gguf *g;
    int rc = gguf_open(argv[1], &g);
    if (rc)
        return cli_fail("inspect", rc);
    printf("file: %s\nversion: %u\nalignment: %u\nsize: %llu bytes\ndata offset: %llu\n", argv[1],
           gguf_version(g), gguf_alignment(g), (unsigned long long)gguf_file_size(g),
           (unsigned long long)gguf_data_offset(g));
    printf("metadata: %lld entries\n", (long long)gguf_n_kv(g));
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_kv_key(g, i);
        int vt = gguf_kv_type(g, i);
        printf("  %.*s: ", (int)k.len, k.s);
        gguf_scalar s = gguf_kv_scalar(g, i);
        switch (vt) {
        case GGUF_VT_STRING:
            inspect_print_str(s.s, 200);
            break;
        case GGUF_VT_ARRAY: {
            gguf_arr a;
            gguf_kv_arr(g, i, &a);
            inspect_print_arr(&a, 0);
            break;
        }
        case GGUF_VT_BOOL:
            fputs(s.b ? "true" : "false", stdout);
            break;
        case GGUF_VT_FLOAT32:
        case GGUF_VT_FLOAT64:
            printf("%.9g", s.f);
            break;
        case GGUF_VT_UINT8:
        case GGUF_VT_UINT16:
        case GGUF_VT_UINT32:
        case GGUF_VT_UINT64:
            printf("%llu", (unsigned long long)s.u);
            break;
        default:
            printf("%lld", (long long)s.i);
        }
        printf(" (%s)\n", gguf_vtype_name(vt));
    }
    printf("tensors: %lld\n", (long long)gguf_n_tensors(g));
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        printf("  %-40.*s %-6s [", (int)t->name.len, t->name.s, kn_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++)
            printf(d ? ", %lld" : "%lld", (long long)t->ne[d]);
        printf("] offset %llu, %llu bytes\n", (unsigned long long)t->offset,
               (unsigned long long)t->size_bytes);
        total += t->size_bytes;
    }
    printf("tensor bytes: %llu\n", (unsigned long long)total);
    inspect_print_model(g);
    gguf_close(g);
    return 0;
}
