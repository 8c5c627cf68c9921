/* SPDX-License-Identifier: MIT */
/*
 * synth: see synth.h. Shapes:
 *   tiny: embd 64, 2 layers, 4 heads, 2 KV heads (head 16), FFN 128, context 4096, rope base 1e4,
 *         tied output.
 *   small: embd 256, 2 layers, 4 heads, 2 KV heads (head 64), FFN 512, context 4096, rope base
 *         1e4, tied output: the smallest shape whose every matrix row is a multiple of 256, so
 *         K-quant types are used as such (tiny's rows fall back, see quantize.h).
 *   0.5b: embd 896, 24 layers, 14 heads, 2 KV heads (head 64), FFN 4864, context 4096,
 *         rope base 1e6, untied output.
 *   gqa: embd 224, 2 layers, 7 heads, 1 KV head (head 32), FFN 448, context 4096, rope base 1e4,
 *         tied output: 0.5b's seven query heads per KV head in a tiny model (grouped attention
 *         and its split of a group into units, in the invariance tests).
 *   1b-kq: embd 1024, 16 layers, 16 heads, 4 KV heads (head 64), FFN 2816, context 4096, rope
 *         base 1e6, untied output: a model the size of a small download whose every matrix row
 *         (1024 and 2816 = 11 x 256) is a multiple of 256, so K-quant types and the q4_k_m mix
 *         apply to every matrix with no fallback (the K-quant kernels measured as users meet
 *         them; 0.5b's K = 896 falls back).
 * Architecture qwen3moe: the shape's attention (with qwen3's Q/K norms), and in every layer
 * SYNTH_MOE_EXPERTS experts of FFN n_ff / 2, SYNTH_MOE_USED of them per token, with a router
 * (ffn_gate_inp, F32) instead of the dense FFN; feed_forward_length stays the shape's n_ff.
 * Architecture deepseek2: the shape's embedding, layers and heads with multi-head latent
 * attention (q_lora and kv_lora n_embd / 2, heads of 32 + 16 rope for Q/K and 32 for V, YaRN of
 * factor 4 over an original context of 1024, yarn_log_multiplier 0.1); layer 0 has the shape's
 * dense FFN, the others the MoE of qwen3moe plus one shared expert, sigmoid gating with a
 * selection bias (exp_probs_b), 2 of 4 expert groups, weights normalised and scaled by 2.5.
 * Architecture deepseek32: deepseek2's and a DSA lightning indexer in every layer (4 heads of
 * 32, its first 16 channels roped, top 8 keys per query: the selection matters from the ninth
 * position on).
 * Architecture deepseek4: the shape's embedding and heads, at least 4 layers with compression
 * ratios 0, 4, 128, 4 (repeating), heads of 32 (16 roped, NORM), q_lora n_embd / 2, one KV head
 * (K = V), attention sinks, 2 output groups of rank 16 (1 for an odd head count: gqa), sliding
 * window 8 (or --sliding-window),
 * an indexer of 4 heads of 32 and top 4 compressed blocks (the selection matters from the 20th
 * position on), 4 hyper-connection streams with 20 Sinkhorn rounds, the MoE of qwen3moe with one
 * shared expert, sqrt-softplus gating, weights normalised and scaled by 1.5, the first layer
 * hash-routed (ffn_gate_tid2eid: token t takes experts (t + 3j) mod 8), SwiGLU clamped at 0.1
 * (0.2 for the shared expert), YaRN of factor 16 over an original context of 1024 on the
 * compressed layers (base 160000). nextn > 0 (synth_opts.nextn) appends that many MTP layers.
 */
#include "model/synth.h"
#include "base/cpu.h"
#include "base/err.h"
#include "gguf/gguf.h"
#include "kernels/kn_types.h"
#include "model/quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNTH_MOE_EXPERTS 8
#define SYNTH_MOE_USED    2

typedef struct synth_shape {
    const char *name;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    float rope_base;
    bool tied;
} synth_shape;

static const synth_shape synth_shapes[] = {
    {"tiny", 64, 2, 4, 2, 128, 4096, 10000.0f, true},
    {"small", 256, 2, 4, 2, 512, 4096, 10000.0f, true},
    {"0.5b", 896, 24, 14, 2, 4864, 4096, 1000000.0f, false},
    {"gqa", 224, 2, 7, 1, 448, 4096, 10000.0f, true},
    {"1b-kq", 1024, 16, 16, 4, 2816, 4096, 1000000.0f, false},
};

uint64_t synth_key(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static uint64_t synth_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float synth_normal(uint64_t seed, uint64_t key, uint64_t i) {
    /* Box-Muller on two 53-bit uniforms derived from (seed, key, i / 2); even i takes the cosine
     * branch, odd i the sine branch of the same pair */
    uint64_t base = synth_mix(seed ^ synth_mix(key + 0x9E3779B97F4A7C15ull)) + (i / 2) * 2;
    double u1 = ((double)(synth_mix(base) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(synth_mix(base + 1) >> 11) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    double a = 6.283185307179586 * u2;
    return (float)(i & 1 ? r * sin(a) : r * cos(a));
}

/* Writes tensor name [ne0] (ne1 == 0), [ne0, ne1] (ne2 == 0) or [ne0, ne1, ne2] of N(mean, std)
 * values; its type is the plan's choice for it (quantize.h): F32 for vectors and norms. */
static int synth_tensor3(gguf_writer *w, const synth_opts *o, const quant_plan *plan,
                         int64_t n_layer, bool tied, const char *name, int64_t ne0, int64_t ne1,
                         int64_t ne2, float mean, float std) {
    uint32_t nd = ne2 ? 3 : ne1 ? 2 : 1;
    int type = quant_tensor_type(plan, name, nd, ne0, n_layer, tied);
    int64_t n = ne0 * (ne1 ? ne1 : 1) * (ne2 ? ne2 : 1);
    float *f = malloc((size_t)n * sizeof(float));
    if (!f)
        return err_set(ERR_NOMEM, "out of memory for '%s'", name);
    uint64_t key = synth_key(name);
    for (int64_t i = 0; i < n; i++)
        f[i] = mean + std * synth_normal(o->seed, key, (uint64_t)i);
    int64_t rb = kn_type_row_bytes(type, ne0);
    if (rb < 0) {
        free(f);
        return err_set(ERR_INVAL, "type %s does not fit row length %lld of '%s'",
                       kn_type_name(type), (long long)ne0, name);
    }
    int64_t rows = (ne1 ? ne1 : 1) * (ne2 ? ne2 : 1);
    void *d = malloc((size_t)(rb * rows));
    if (!d) {
        free(f);
        return err_set(ERR_NOMEM, "out of memory for '%s'", name);
    }
    int rc0 = quant_rows(type, f, rows, ne0, d, cpu_count_online());
    free(f);
    if (rc0) {
        free(d);
        return rc0;
    }
    int64_t ne[3] = {ne0, ne1, ne2};
    int rc = gguf_writer_add_tensor(w, name, type, nd, ne, d, false);
    free(d);
    return rc;
}

static int synth_tensor(gguf_writer *w, const synth_opts *o, const quant_plan *plan,
                        int64_t n_layer, bool tied, const char *name, int64_t ne0, int64_t ne1,
                        float mean, float std) {
    return synth_tensor3(w, o, plan, n_layer, tied, name, ne0, ne1, 0, mean, std);
}

/* The chat template of synthetic models (our own): ChatML-style turns, tools listed as JSON
 * schemas in the system turn, and calls written as <tool_call>{"name": ..., "arguments": ...}
 * </tool_call> (the Hermes syntax the tool-call parser recognises). Arguments are rendered as
 * objects, as templates that tojson them expect. */
static const char synth_chat_template[] =
    "{%- set sys = messages[0].content if messages and messages[0].role == 'system' else '' -%}\n"
    "{%- if tools or sys -%}\n"
    "<|im_start|>system\n"
    "{{ sys }}\n"
    "{%- if tools %}\n"
    "{% if sys %}\n"
    "{% endif %}Functions you may call (JSON schemas, one per line):\n"
    "{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}To call a function, reply with <tool_call>{\"name\": NAME, \"arguments\": "
    "ARGS}</tool_call>.\n"
    "{%- endif %}<|im_end|>\n"
    "{% endif -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if m.role == 'system' and loop.first -%}\n"
    "{%- elif m.role == 'tool' -%}\n"
    "<|im_start|>tool\n"
    "{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' -%}\n"
    "<|im_start|>assistant\n"
    "{{ m.content if m.content else '' }}\n"
    "{%- for c in (m.tool_calls or []) %}<tool_call>{\"name\": {{ c.function.name | tojson }}, "
    "\"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>\n"
    "{% else -%}\n"
    "<|im_start|>{{ m.role }}\n"
    "{{ m.content }}<|im_end|>\n"
    "{% endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "<|im_start|>assistant\n"
    "{% endif -%}";

/* The built-in byte-level SentencePiece vocabulary (see synth.h). */
static int synth_builtin_vocab(gguf_writer *w, int64_t *n_vocab) {
    enum { NV = 3 + 256 + 1 + 94 };
    static char pieces[NV][8];
    const char *ptrs[NV];
    float scores[NV];
    int32_t types[NV];
    int n = 0;
    const char *specials[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        snprintf(pieces[n], sizeof pieces[n], "%s", specials[i]);
        types[n] = i == 0 ? 2 : 3; /* unknown, control */
        scores[n++] = 0.0f;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(pieces[n], sizeof pieces[n], "<0x%02X>", b);
        types[n] = 6; /* byte */
        scores[n++] = 0.0f;
    }
    snprintf(pieces[n], sizeof pieces[n], "\xE2\x96\x81"); /* U+2581, the SentencePiece space */
    types[n] = 1;
    scores[n++] = -1.0f;
    for (int ch = 33; ch <= 126; ch++) {
        pieces[n][0] = (char)ch;
        pieces[n][1] = 0;
        types[n] = 1;
        scores[n++] = -2.0f;
    }
    for (int i = 0; i < n; i++)
        ptrs[i] = pieces[i];
    int rc;
    if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5)) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptrs, NULL, (uint64_t)n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, scores,
                                  (uint64_t)n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types,
                                  (uint64_t)n)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false)) ||
        (rc = gguf_writer_set_str(w, "tokenizer.chat_template", synth_chat_template,
                                  strlen(synth_chat_template))))
        return rc;
    *n_vocab = n;
    return 0;
}

static int synth_copy_vocab(gguf_writer *w, const char *path, int64_t *n_vocab) {
    gguf *g;
    int rc = gguf_open(path, &g);
    if (rc)
        return rc;
    int64_t copied = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_kv_key(g, i);
        if (k.len > 10 && memcmp(k.s, "tokenizer.", 10) == 0) {
            if ((rc = gguf_writer_copy_kv(w, g, i))) {
                gguf_close(g);
                return rc;
            }
            copied++;
        }
    }
    gguf_arr toks;
    rc = gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    if (rc || toks.type != GGUF_VT_STRING || toks.n == 0) {
        gguf_close(g);
        return err_set(ERR_FORMAT, "%s: no tokenizer.ggml.tokens string array to copy", path);
    }
    *n_vocab = (int64_t)toks.n;
    gguf_close(g);
    return 0;
}

/* MLA sizes of the deepseek2 architecture for a shape (see the top of the file). */
#define SYNTH_MLA_ROPE 16
#define SYNTH_MLA_NOPE 32
#define SYNTH_MLA_V    32

/* The DSA indexer of deepseek32 (see the top of the file). */
#define SYNTH_DSA_HEADS 4
#define SYNTH_DSA_DIM   32
#define SYNTH_DSA_TOP_K 8

/* deepseek2's (and deepseek32's) metadata beyond the common keys and the experts' counts; dsa:
 * the indexer's too. */
static int synth_mla_keys(gguf_writer *w, const synth_shape *sh, const char *arch, bool dsa) {
    int64_t kl = sh->n_embd / 2;
    struct {
        const char *key;
        int64_t u;
        float f;
        int kind; /* 0 u32, 1 f32, 2 bool */
    } k[] = {
        {"attention.head_count_kv", 1, 0, 0},
        {"rope.dimension_count", SYNTH_MLA_ROPE, 0, 0},
        {"attention.q_lora_rank", sh->n_embd / 2, 0, 0},
        {"attention.kv_lora_rank", kl, 0, 0},
        {"attention.key_length", kl + SYNTH_MLA_ROPE, 0, 0},
        {"attention.value_length", kl, 0, 0},
        {"attention.key_length_mla", SYNTH_MLA_NOPE + SYNTH_MLA_ROPE, 0, 0},
        {"attention.value_length_mla", SYNTH_MLA_V, 0, 0},
        {"leading_dense_block_count", 1, 0, 0},
        {"expert_shared_count", 1, 0, 0},
        {"expert_group_count", 4, 0, 0},
        {"expert_group_used_count", 2, 0, 0},
        {"expert_gating_func", 2, 0, 0},
        {"expert_weights_scale", 0, 2.5f, 1},
        {"expert_weights_norm", 1, 0, 2},
        {"rope.scaling.factor", 0, 4.0f, 1},
        {"rope.scaling.original_context_length", 1024, 0, 0},
        {"rope.scaling.yarn_log_multiplier", 0, 0.1f, 1},
        {"attention.indexer.head_count", SYNTH_DSA_HEADS, 0, 0},
        {"attention.indexer.key_length", SYNTH_DSA_DIM, 0, 0},
        {"attention.indexer.top_k", SYNTH_DSA_TOP_K, 0, 0},
    };
    size_t n = sizeof k / sizeof *k - (dsa ? 0 : 3);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int rc = gguf_writer_set_str(w, key, "yarn", 4);
    for (size_t i = 0; !rc && i < n; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, k[i].key);
        rc = k[i].kind == 0   ? gguf_writer_set_u32(w, key, (uint32_t)k[i].u)
             : k[i].kind == 1 ? gguf_writer_set_f32(w, key, k[i].f)
                              : gguf_writer_set_bool(w, key, k[i].u != 0);
    }
    return rc;
}

/* One deepseek2 layer: MLA attention (dsa: with deepseek32's indexer), then the dense FFN (layer
 * 0) or the MoE with a shared expert and a selection bias. */
static int synth_mla_layer(gguf_writer *w, const synth_opts *o, const quant_plan *plan,
                           const synth_shape *sh, bool tied, int64_t l, bool dsa) {
    int64_t D = sh->n_embd, H = sh->n_head, QL = D / 2, KL = D / 2, R = SYNTH_MLA_ROPE;
    int64_t QK = SYNTH_MLA_NOPE + R, V = SYNTH_MLA_V, E = SYNTH_MOE_EXPERTS, F = sh->n_ff / 2;
    const float std = 0.02f;
    char name[96];
    int rc;
#define T(suffix, ne0, ne1, ne2, mean)                                                             \
    (snprintf(name, sizeof name, "blk.%lld." suffix, (long long)l),                                \
     synth_tensor3(w, o, plan, sh->n_layer, tied, name, ne0, ne1, ne2, mean, std))
    if ((rc = T("attn_norm.weight", D, 0, 0, 1.0f)) || (rc = T("attn_q_a.weight", D, QL, 0, 0)) ||
        (rc = T("attn_q_a_norm.weight", QL, 0, 0, 1.0f)) ||
        (rc = T("attn_q_b.weight", QL, H * QK, 0, 0)) ||
        (rc = T("attn_kv_a_mqa.weight", D, KL + R, 0, 0)) ||
        (rc = T("attn_kv_a_norm.weight", KL, 0, 0, 1.0f)) ||
        (rc = T("attn_k_b.weight", QK - R, KL, H, 0)) || (rc = T("attn_v_b.weight", KL, V, H, 0)) ||
        (rc = T("attn_output.weight", H * V, D, 0, 0)) ||
        (rc = T("ffn_norm.weight", D, 0, 0, 1.0f)))
        return rc;
    int64_t IH = SYNTH_DSA_HEADS, ID = SYNTH_DSA_DIM;
    if (dsa && ((rc = T("indexer.k_norm.weight", ID, 0, 0, 1.0f)) ||
                (rc = T("indexer.k_norm.bias", ID, 0, 0, 0)) ||
                (rc = T("indexer.proj.weight", D, IH, 0, 0)) ||
                (rc = T("indexer.attn_k.weight", D, ID, 0, 0)) ||
                (rc = T("indexer.attn_q_b.weight", QL, IH * ID, 0, 0))))
        return rc;
    if (l == 0) {
        if ((rc = T("ffn_gate.weight", D, sh->n_ff, 0, 0)) ||
            (rc = T("ffn_up.weight", D, sh->n_ff, 0, 0)))
            return rc;
        return T("ffn_down.weight", sh->n_ff, D, 0, 0);
    }
    if ((rc = T("ffn_gate_inp.weight", D, E, 0, 0)) || (rc = T("exp_probs_b.bias", E, 0, 0, 0)) ||
        (rc = T("ffn_gate_exps.weight", D, F, E, 0)) ||
        (rc = T("ffn_up_exps.weight", D, F, E, 0)) ||
        (rc = T("ffn_down_exps.weight", F, D, E, 0)) ||
        (rc = T("ffn_gate_shexp.weight", D, F, 0, 0)) ||
        (rc = T("ffn_up_shexp.weight", D, F, 0, 0)) ||
        (rc = T("ffn_down_shexp.weight", F, D, 0, 0)))
        return rc;
#undef T
    return 0;
}

/* deepseek4's sizes (see the top of the file). */
#define SYNTH_DS4_HEAD  32
#define SYNTH_DS4_ROPE  16
#define SYNTH_DS4_HC    4
#define SYNTH_DS4_OG    2 /* output groups (1 for an odd head count) */
#define SYNTH_DS4_OR    16
#define SYNTH_DS4_TOP_K 4

static int64_t synth_ds4_layers(const synth_shape *sh) {
    return sh->n_layer < 4 ? 4 : sh->n_layer;
}

static int64_t synth_ds4_ratio(int64_t l) {
    static const int64_t r[4] = {0, 4, 128, 4};
    return r[l % 4];
}

/* deepseek4's metadata beyond the common keys and the experts' counts. */
static int synth_ds4_keys(gguf_writer *w, const synth_opts *o, const synth_shape *sh) {
    const char *arch = "deepseek4";
    int64_t NL = synth_ds4_layers(sh) + o->nextn;
    struct {
        const char *key;
        int64_t u;
        float f;
        int kind; /* 0 u32, 1 f32, 2 bool */
    } k[] = {
        {"block_count", NL, 0, 0},
        {"attention.head_count_kv", 1, 0, 0},
        {"attention.key_length", SYNTH_DS4_HEAD, 0, 0},
        {"attention.value_length", SYNTH_DS4_HEAD, 0, 0},
        {"rope.dimension_count", SYNTH_DS4_ROPE, 0, 0},
        {"attention.q_lora_rank", sh->n_embd / 2, 0, 0},
        {"attention.sliding_window", o->sliding_window > 0 ? o->sliding_window : 8, 0, 0},
        {"expert_shared_count", 1, 0, 0},
        {"expert_gating_func", 4, 0, 0},
        {"expert_weights_scale", 0, 1.5f, 1},
        {"expert_weights_norm", 1, 0, 2},
        {"attention.indexer.head_count", SYNTH_DSA_HEADS, 0, 0},
        {"attention.indexer.key_length", SYNTH_DSA_DIM, 0, 0},
        {"attention.indexer.top_k", SYNTH_DS4_TOP_K, 0, 0},
        {"attention.output_group_count", sh->n_head % SYNTH_DS4_OG ? 1 : SYNTH_DS4_OG, 0, 0},
        {"attention.output_lora_rank", SYNTH_DS4_OR, 0, 0},
        {"attention.compress_rope_freq_base", 0, 160000.0f, 1},
        {"hyper_connection.count", SYNTH_DS4_HC, 0, 0},
        {"hyper_connection.sinkhorn_iterations", 20, 0, 0},
        {"hyper_connection.epsilon", 0, 1e-6f, 1},
        {"hash_layer_count", 1, 0, 0},
        {"rope.scaling.factor", 0, 16.0f, 1},
        {"rope.scaling.original_context_length", 1024, 0, 0},
        {"nextn_predict_layers", o->nextn, 0, 0},
    };
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int rc = gguf_writer_set_str(w, key, "yarn", 4);
    for (size_t i = 0; !rc && i < sizeof k / sizeof *k; i++) {
        if (!strcmp(k[i].key, "nextn_predict_layers") && o->nextn <= 0)
            continue;
        snprintf(key, sizeof key, "%s.%s", arch, k[i].key);
        rc = k[i].kind == 0   ? gguf_writer_set_u32(w, key, (uint32_t)k[i].u)
             : k[i].kind == 1 ? gguf_writer_set_f32(w, key, k[i].f)
                              : gguf_writer_set_bool(w, key, k[i].u != 0);
    }
    int32_t ratios[256];
    float clamp[256], clamp_sh[256];
    for (int64_t l = 0; l < NL && l < 256; l++) {
        ratios[l] = (int32_t)(l < NL - o->nextn ? synth_ds4_ratio(l) : 0);
        clamp[l] = 0.1f;
        clamp_sh[l] = 0.2f;
    }
    if (!rc)
        rc = gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_VT_INT32, ratios,
                                 (uint64_t)NL);
    if (!rc)
        rc = gguf_writer_set_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_VT_FLOAT32, clamp,
                                 (uint64_t)NL);
    if (!rc)
        rc = gguf_writer_set_arr(w, "deepseek4.swiglu_clamp_shexp", GGUF_VT_FLOAT32, clamp_sh,
                                 (uint64_t)NL);
    return rc;
}

/* One deepseek4 layer (mtp: an MTP block, with its nextn tensors). */
static int synth_ds4_layer(gguf_writer *w, const synth_opts *o, const quant_plan *plan,
                           const synth_shape *sh, bool tied, int64_t n_vocab, int64_t l, bool mtp) {
    int64_t E = sh->n_embd, H = sh->n_head, D = SYNTH_DS4_HEAD, QL = E / 2, HC = SYNTH_DS4_HC;
    int64_t MIX = (2 + HC) * HC, G = H % SYNTH_DS4_OG ? 1 : SYNTH_DS4_OG, O = SYNTH_DS4_OR;
    int64_t X = SYNTH_MOE_EXPERTS;
    int64_t F = sh->n_ff / 2, IH = SYNTH_DSA_HEADS, ID = SYNTH_DSA_DIM;
    int64_t r = mtp ? 0 : synth_ds4_ratio(l), coff = r == 4 ? 2 : 1, NL = synth_ds4_layers(sh);
    const float std = 0.02f;
    char name[96];
    int rc;
#define T(suffix, ne0, ne1, ne2, mean)                                                             \
    (snprintf(name, sizeof name, "blk.%lld." suffix, (long long)l),                                \
     synth_tensor3(w, o, plan, NL, tied, name, ne0, ne1, ne2, mean, std))
    if ((rc = T("attn_norm.weight", E, 0, 0, 1.0f)) || (rc = T("attn_sinks.weight", H, 0, 0, 0)) ||
        (rc = T("attn_q_a.weight", E, QL, 0, 0)) ||
        (rc = T("attn_q_a_norm.weight", QL, 0, 0, 1.0f)) ||
        (rc = T("attn_q_b.weight", QL, H * D, 0, 0)) || (rc = T("attn_kv.weight", E, D, 0, 0)) ||
        (rc = T("attn_kv_a_norm.weight", D, 0, 0, 1.0f)) ||
        (rc = T("attn_output_a.weight", H * D / G, O * G, 0, 0)) ||
        (rc = T("attn_output_b.weight", G * O, E, 0, 0)) ||
        (rc = T("hc_attn_fn.weight", HC * E, MIX, 0, 0)) ||
        (rc = T("hc_attn_base.weight", MIX, 0, 0, 0)) ||
        (rc = T("hc_attn_scale.weight", 3, 0, 0, 1.0f)) ||
        (rc = T("hc_ffn_fn.weight", HC * E, MIX, 0, 0)) ||
        (rc = T("hc_ffn_base.weight", MIX, 0, 0, 0)) ||
        (rc = T("hc_ffn_scale.weight", 3, 0, 0, 1.0f)) ||
        (rc = T("ffn_norm.weight", E, 0, 0, 1.0f)) || (rc = T("ffn_gate_inp.weight", E, X, 0, 0)) ||
        (rc = T("ffn_gate_exps.weight", E, F, X, 0)) ||
        (rc = T("ffn_up_exps.weight", E, F, X, 0)) ||
        (rc = T("ffn_down_exps.weight", F, E, X, 0)) ||
        (rc = T("ffn_gate_shexp.weight", E, F, 0, 0)) ||
        (rc = T("ffn_up_shexp.weight", E, F, 0, 0)) ||
        (rc = T("ffn_down_shexp.weight", F, E, 0, 0)))
        return rc;
    if (r && ((rc = T("attn_compressor_kv.weight", E, coff * D, 0, 0)) ||
              (rc = T("attn_compressor_gate.weight", E, coff * D, 0, 0)) ||
              (rc = T("attn_compressor_ape.weight", coff * D, r, 0, 0)) ||
              (rc = T("attn_compressor_norm.weight", D, 0, 0, 1.0f))))
        return rc;
    if (r == 4 && ((rc = T("indexer.proj.weight", E, IH, 0, 0)) ||
                   (rc = T("indexer.attn_q_b.weight", QL, IH * ID, 0, 0)) ||
                   (rc = T("indexer_compressor_kv.weight", E, 2 * ID, 0, 0)) ||
                   (rc = T("indexer_compressor_gate.weight", E, 2 * ID, 0, 0)) ||
                   (rc = T("indexer_compressor_ape.weight", 2 * ID, 4, 0, 0)) ||
                   (rc = T("indexer_compressor_norm.weight", ID, 0, 0, 1.0f))))
        return rc;
    if (mtp && ((rc = T("nextn.eh_proj.weight", 2 * E, E, 0, 0)) ||
                (rc = T("nextn.enorm.weight", E, 0, 0, 1.0f)) ||
                (rc = T("nextn.hnorm.weight", E, 0, 0, 1.0f)) ||
                (rc = T("nextn.shared_head_norm.weight", E, 0, 0, 1.0f))))
        return rc;
#undef T
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)l,
             l == 0 ? "ffn_gate_tid2eid.weight" : "exp_probs_b.bias");
    if (l != 0) {
        return synth_tensor3(w, o, plan, NL, tied, name, X, 0, 0, 0, std);
    }
    int32_t *tab = malloc((size_t)(n_vocab * SYNTH_MOE_USED) * sizeof(int32_t));
    if (!tab)
        return err_set(ERR_NOMEM, "out of memory");
    for (int64_t t = 0; t < n_vocab; t++)
        for (int64_t j = 0; j < SYNTH_MOE_USED; j++)
            tab[t * SYNTH_MOE_USED + j] = (int32_t)((t + 3 * j) % X);
    int64_t ne[2] = {SYNTH_MOE_USED, n_vocab};
    rc = gguf_writer_add_tensor(w, name, 26 /* I32 */, 2, ne, tab, false);
    free(tab);
    return rc;
}

/* The deepseek4 output head's stream mixing. */
static int synth_ds4_head(gguf_writer *w, const synth_opts *o, const quant_plan *plan,
                          const synth_shape *sh, bool tied) {
    int64_t HC = SYNTH_DS4_HC, NL = synth_ds4_layers(sh);
    int rc;
    if ((rc = synth_tensor(w, o, plan, NL, tied, "output_hc_fn.weight", HC * sh->n_embd, HC, 0,
                           0.02f)) ||
        (rc = synth_tensor(w, o, plan, NL, tied, "output_hc_base.weight", HC, 0, 0, 0.02f)))
        return rc;
    return synth_tensor(w, o, plan, NL, tied, "output_hc_scale.weight", 1, 0, 1.0f, 0.02f);
}

int synth_write(const synth_opts *o, const char *path) {
    const synth_shape *sh = NULL;
    for (size_t i = 0; i < sizeof synth_shapes / sizeof *synth_shapes; i++)
        if (o->shape && strcmp(o->shape, synth_shapes[i].name) == 0)
            sh = &synth_shapes[i];
    if (!sh)
        return err_set(ERR_INVAL, "unknown shape '%s' (tiny, small, 0.5b, gqa or 1b-kq)",
                       o->shape ? o->shape : "");
    const char *arch = o->arch ? o->arch : "llama";
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3") &&
        strcmp(arch, "qwen3moe") && strcmp(arch, "deepseek2") && strcmp(arch, "deepseek32") &&
        strcmp(arch, "deepseek4"))
        return err_set(ERR_INVAL,
                       "unknown architecture '%s' (llama, qwen2, qwen3, qwen3moe, "
                       "deepseek2, deepseek32, deepseek4)",
                       arch);
    if (o->nextn < 0 || o->nextn > 4 || (o->nextn && strcmp(arch, "deepseek4")))
        return err_set(ERR_INVAL, "--nextn %d: 0 to 4 MTP layers, deepseek4 only", o->nextn);
    quant_plan plan;
    if (o->mix) {
        quant_plan_parse(o->type == GGUF_TYPE_Q5_K ? "q5_k_m" : "q4_k_m", &plan);
    } else {
        if (!kn_type_supported(o->type))
            return err_set(ERR_INVAL, "type %s is not supported",
                           kn_type_name(o->type) ? kn_type_name(o->type) : "?");
        quant_plan_parse(kn_type_name(o->type), &plan);
    }
    bool tied = o->tied_set ? o->tied : sh->tied;
    gguf_writer *w = gguf_writer_create();
    if (!w)
        return err_set(ERR_NOMEM, "out of memory");
    int64_t n_vocab = 0;
    int rc = o->vocab_from ? synth_copy_vocab(w, o->vocab_from, &n_vocab)
                           : synth_builtin_vocab(w, &n_vocab);
    int64_t hd = sh->n_embd / sh->n_head;
    char key[128], name[96];
    if (!rc) {
        char gname[64];
        snprintf(gname, sizeof gname, "verity-synth-%s-%s", sh->name, plan.name);
        struct {
            const char *suffix;
            int64_t u;
            float f;
            bool is_f;
        } hp[] = {
            {"context_length", sh->n_ctx, 0, false},
            {"embedding_length", sh->n_embd, 0, false},
            {"block_count", sh->n_layer, 0, false},
            {"feed_forward_length", sh->n_ff, 0, false},
            {"attention.head_count", sh->n_head, 0, false},
            {"attention.head_count_kv", sh->n_head_kv, 0, false},
            {"rope.dimension_count", hd, 0, false},
            {"rope.freq_base", 0, sh->rope_base, true},
            {"attention.layer_norm_rms_epsilon", 0, 1e-6f, true},
        };
        rc = gguf_writer_set_str(w, "general.architecture", arch, strlen(arch));
        if (!rc)
            rc = gguf_writer_set_str(w, "general.name", gname, strlen(gname));
        for (size_t i = 0; !rc && i < sizeof hp / sizeof *hp; i++) {
            snprintf(key, sizeof key, "%s.%s", arch, hp[i].suffix);
            rc = hp[i].is_f ? gguf_writer_set_f32(w, key, hp[i].f)
                            : gguf_writer_set_u32(w, key, (uint32_t)hp[i].u);
        }
    }
    /* qwen3moe, deepseek2, deepseek32: SYNTH_MOE_EXPERTS experts of n_ff / 2, SYNTH_MOE_USED per
     * token */
    bool dsa = !strcmp(arch, "deepseek32"), mla = !strcmp(arch, "deepseek2") || dsa;
    bool ds4 = !strcmp(arch, "deepseek4");
    bool moe = !strcmp(arch, "qwen3moe") || mla || ds4;
    int64_t n_ff_exp = sh->n_ff / 2;
    if (!rc && moe) {
        struct {
            const char *suffix;
            int64_t v;
        } mk[] = {{"expert_count", SYNTH_MOE_EXPERTS},
                  {"expert_used_count", SYNTH_MOE_USED},
                  {"expert_feed_forward_length", n_ff_exp}};
        for (size_t i = 0; !rc && i < sizeof mk / sizeof *mk; i++) {
            snprintf(key, sizeof key, "%s.%s", arch, mk[i].suffix);
            rc = gguf_writer_set_u32(w, key, (uint32_t)mk[i].v);
        }
    }
    if (!rc && mla)
        rc = synth_mla_keys(w, sh, arch, dsa);
    if (!rc && ds4)
        rc = synth_ds4_keys(w, o, sh);
    if (!rc && o->sliding_window > 0 && !ds4) {
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        rc = gguf_writer_set_u32(w, key, (uint32_t)o->sliding_window);
    }
    if (!rc && o->rope_scaling) {
        const char *rs = o->rope_scaling;
        if (strcmp(rs, "linear") && strcmp(rs, "llama3") && strcmp(rs, "llama3-tensor"))
            rc = err_set(ERR_INVAL,
                         "unknown rope scaling '%s' (linear, llama3, llama3-tensor)", rs);
        if (!rc && strcmp(rs, "llama3-tensor")) {
            bool l3 = !strcmp(rs, "llama3");
            snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
            rc = gguf_writer_set_str(w, key, l3 ? "llama3" : "linear",
                                     strlen(l3 ? "llama3" : "linear"));
            snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
            if (!rc)
                rc = gguf_writer_set_f32(w, key, l3 ? 8.0f : 2.0f);
            if (!rc && l3) {
                snprintf(key, sizeof key, "%s.rope.scaling.low_freq_factor", arch);
                rc = gguf_writer_set_f32(w, key, 1.0f);
                snprintf(key, sizeof key, "%s.rope.scaling.high_freq_factor", arch);
                if (!rc)
                    rc = gguf_writer_set_f32(w, key, 4.0f);
                snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
                if (!rc)
                    rc = gguf_writer_set_u32(w, key, 256);
            }
        }
        if (!rc && !strcmp(rs, "llama3-tensor")) {
            /* the llama3 rule (factor 8, low 1, high 4, original context 256) as a tensor */
            int64_t half = hd / 2;
            float f[256];
            for (int64_t i = 0; i < half && i < 256; i++) {
                double freq = pow((double)sh->rope_base, -2.0 * (double)i / (double)hd);
                double wl = 2.0 * 3.14159265358979323846 / freq, lo_wl = 256.0, hi_wl = 64.0;
                double smooth = (256.0 / wl - 1.0) / 3.0;
                f[i] = (float)(wl < hi_wl   ? 1.0
                               : wl > lo_wl ? 8.0
                                            : 1.0 / ((1.0 - smooth) / 8.0 + smooth));
            }
            int64_t ne[1] = {half};
            rc = gguf_writer_add_tensor(w, "rope_freqs.weight", GGUF_TYPE_F32, 1, ne, f, false);
        }
    }
    const float std = 0.02f;
    int64_t q_dim = sh->n_head * hd, kv_dim = sh->n_head_kv * hd;
    const int64_t NL = sh->n_layer;
    if (!rc)
        rc = synth_tensor(w, o, &plan, NL, tied, "token_embd.weight", sh->n_embd, n_vocab, 0, std);
    if (!rc)
        rc = synth_tensor(w, o, &plan, NL, tied, "output_norm.weight", sh->n_embd, 0, 1.0f, std);
    if (!rc && !tied)
        rc = synth_tensor(w, o, &plan, NL, tied, "output.weight", sh->n_embd, n_vocab, 0, std);
    bool qwen2 = !strcmp(arch, "qwen2"), qwen3 = !strcmp(arch, "qwen3") || (moe && !mla);
    for (int64_t l = 0; l < sh->n_layer && !rc && mla; l++)
        rc = synth_mla_layer(w, o, &plan, sh, tied, l, dsa);
    for (int64_t l = 0; ds4 && !rc && l < synth_ds4_layers(sh) + o->nextn; l++)
        rc = synth_ds4_layer(w, o, &plan, sh, tied, n_vocab, l, l >= synth_ds4_layers(sh));
    if (ds4 && !rc)
        rc = synth_ds4_head(w, o, &plan, sh, tied);
    for (int64_t l = 0; l < sh->n_layer && !rc && !mla && !ds4; l++) {
#define T(suffix, ne0, ne1, mean)                                                                  \
    (snprintf(name, sizeof name, "blk.%lld." suffix, (long long)l),                                \
     synth_tensor(w, o, &plan, NL, tied, name, ne0, ne1, mean, std))
#define T3(suffix, ne0, ne1, ne2)                                                                  \
    (snprintf(name, sizeof name, "blk.%lld." suffix, (long long)l),                                \
     synth_tensor3(w, o, &plan, NL, tied, name, ne0, ne1, ne2, 0.0f, std))
        if ((rc = T("attn_norm.weight", sh->n_embd, 0, 1.0f)) ||
            (rc = T("attn_q.weight", sh->n_embd, q_dim, 0.0f)) ||
            (rc = T("attn_k.weight", sh->n_embd, kv_dim, 0.0f)) ||
            (rc = T("attn_v.weight", sh->n_embd, kv_dim, 0.0f)) ||
            (rc = T("attn_output.weight", q_dim, sh->n_embd, 0.0f)) ||
            (rc = T("ffn_norm.weight", sh->n_embd, 0, 1.0f)))
            break;
        if (!moe && ((rc = T("ffn_gate.weight", sh->n_embd, sh->n_ff, 0.0f)) ||
                     (rc = T("ffn_up.weight", sh->n_embd, sh->n_ff, 0.0f)) ||
                     (rc = T("ffn_down.weight", sh->n_ff, sh->n_embd, 0.0f))))
            break;
        if (moe && ((rc = T("ffn_gate_inp.weight", sh->n_embd, SYNTH_MOE_EXPERTS, 0.0f)) ||
                    (rc = T3("ffn_gate_exps.weight", sh->n_embd, n_ff_exp, SYNTH_MOE_EXPERTS)) ||
                    (rc = T3("ffn_up_exps.weight", sh->n_embd, n_ff_exp, SYNTH_MOE_EXPERTS)) ||
                    (rc = T3("ffn_down_exps.weight", n_ff_exp, sh->n_embd, SYNTH_MOE_EXPERTS))))
            break;
        if (qwen2 &&
            ((rc = T("attn_q.bias", q_dim, 0, 0.0f)) || (rc = T("attn_k.bias", kv_dim, 0, 0.0f)) ||
             (rc = T("attn_v.bias", kv_dim, 0, 0.0f))))
            break;
        if (qwen3 && ((rc = T("attn_q_norm.weight", hd, 0, 1.0f)) ||
                      (rc = T("attn_k_norm.weight", hd, 0, 1.0f))))
            break;
#undef T
#undef T3
    }
    if (!rc)
        rc = gguf_writer_write(w, path);
    gguf_writer_destroy(w);
    return rc;
}
