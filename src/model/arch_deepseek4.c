/* SPDX-License-Identifier: MIT */
/*
 * arch_deepseek4: "deepseek4" (DeepSeek-V4) as the reference reads it (llama.cpp's deepseek4).
 *
 * The residual is hc_mult streams of n_embd per token (hyper-connections). Around each of the
 * attention and the FFN of layer l, with S the token's streams flattened:
 *   mix  = hc_fn . rmsnorm(S) (no weight), then with scale[3] and base[(2 + hc) hc]:
 *   pre  = sigmoid(mix[0:hc] scale0 + base) + eps; post = 2 sigmoid(mix[hc:2hc] scale1 + base);
 *   comb = Sinkhorn(mix[2hc:] scale2 + base as [src][dst]): softmax over dst, + eps, columns
 *          normalised, then (rows, columns) normalised sinkhorn_iterations - 1 more times;
 *   in   = sum_h pre_h S_h (the block's input, then its RMS norm with weight);
 *   S'_d = out post_d + sum_s S_s comb[s][d] (the block's output mixed back).
 * After the last layer the head mixes the streams the same way (pre only) into one row, which the
 * output norm and projection take (forward.c), left in c->x with c->y zero.
 *
 * Attention (one KV head K = V of head_dim D, NORM RoPE on the last n_rot channels):
 *   qr = rmsnorm(attn_q_a x) q_a_norm; q_h = rmsnorm(attn_q_b qr)_h (no weight), roped;
 *   kv = rmsnorm(attn_kv x) kv_a_norm, roped: the position's raw key/value;
 *   compressed layers (ratio r = 4 or 128): per position the compressor's kv = wkv x and
 *   score = wgate x + ape[pos % r] (F32, the "state"); when a token ends block b (pos = r b + r -
 * 1) the block's entry is the per-channel softmax(score)-weighted sum of kv over the block (r = 4
 *   overlaps: the previous block's first halves join the current block's second halves), RMS
 *   normed with attn_compressor_norm and roped at position r b; ratio 4 also builds the indexer's
 *   key of the block the same way from its own compressor;
 *   the keys of token pos: raw keys at p with pos - p < sliding_window, then compressed blocks
 *   complete at pos (r (b + 1) <= pos + 1): all of them (ratio 128) or the indexer's top_k by
 *   sum_h w_h relu(iq_h . ik_b) (ratio 4; iq = indexer.attn_q_b qr roped, w = indexer.proj x /
 *   sqrt(D_i H_i)); softmax over them with the head's sink in the denominator, scale 1/sqrt(D);
 *   the head's output de-roped at pos, heads grouped into o_groups low-rank projections
 *   (attn_output_a per group) then attn_output_b.
 * The RoPE of compressed layers (and the indexer) uses compress_rope_freq_base with the file's
 * YaRN; uncompressed layers use rope.freq_base unscaled. cos/sin are never scaled.
 *
 * Rounding as the reference's CPU path (its greedy tokens follow it; test_arch checks both KV
 * types): the indexer rotates its keys (before they are stored) and queries by the orthonormal
 * Hadamard matrix, and its query is rounded to the index keys' type (F16, BF16) as a matmul with
 * such keys converts it; the attention is flash attention's: the query rounded to F16 with F16
 * KV, an online softmax over the keys in order (window, then the compressed blocks ascending),
 * the value sum rounded to the values' type after every key, the sink added to the denominator
 * last. With F32 KV nothing is rounded.
 *
 * MTP: the file's nextn blocks (nextn_predict_layers) are bound and checked at load (a whole block
 * each, plus eh_proj, enorm, hnorm and the optional own head and embedding). fwd_run_mtp runs the
 * first as the reference does: per stream eh_proj [enorm(embedding of the token), hnorm(stream of
 * the previous position's hidden state)], the block with raw window attention over its own K
 * rows (the pool's layer n_layer), the model's head mixing, then its own head norm and head if it
 * has them (spec_mtp.c drafts with it).
 *
 * FFN: MoE (moe.c) with sqrt-softplus gating, the first hash_layer_count layers routed by token id
 * through ffn_gate_tid2eid, clamped SwiGLU (swiglu_clamp_exp / _shexp), one shared expert.
 *
 * KV (everything a position needs lives in its KV block, so preemption, the prefix cache, the
 * tiers and the checksums carry it): the K region (F16 or F32, no V region) holds per position
 * [raw kv D][compressed entry D of the block ending there]; the companion buffer "s<ik>" holds
 * the compressor state in F32 then the indexer key of the block ending there in the index-key
 * type (index-kv-dtype). Every step is per token over absolute positions in a fixed order, so a
 * token's result never depends on the batch, the chunking or the threads (P1).
 */
#include "base/err.h"
#include "base/flags.h"
#include "kernels/kn_types.h"
#include "model/forward_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS4_HC_MAX    16
#define DS4_TOPK_MAX  16384
#define DS4_HEAD_MAX  512
#define DS4_MAX_LAYER 4096

typedef struct ds4_layer {
    int64_t ratio;                            /* 0, 4 or 128 */
    kn_mat *wq_a, *wq_b, *wkv, *wo_b, **wo_a; /* wo_a: [o_groups] */
    float *q_a_norm, *kv_norm, *sinks;
    kn_mat *hc_fn[2]; /* attention, FFN: [(2 + hc) hc][hc n_embd] */
    float *hc_base[2], *hc_scale[2];
    kn_mat *c_wkv, *c_wgate;                  /* compressor [coff D][n_embd] */
    float *c_ape, *c_norm;                    /* [r][coff D], [D] */
    kn_mat *i_proj, *i_q_b, *i_wkv, *i_wgate; /* indexer (ratio 4) */
    float *i_ape, *i_norm;
    int32_t *tid2eid; /* hash layers: [n_vocab][k] */
    /* the last layer: the output head's mixing, and the file's MTP blocks */
    kn_mat *head_fn;
    float *head_base, *head_scale;
    struct ds4_mtp *mtp; /* [n_layer_nextn] */
} ds4_layer;

/* A multi-token-prediction block (file block n_layer + j): a whole layer of its own (attention,
 * MoE, hyper-connections) behind the projection of [enorm(embedding of the next token),
 * hnorm(the trunk's streams)], with an optional head of its own. */
typedef struct ds4_mtp {
    model_layer L;            /* attn_norm, ffn_norm and the MoE; L.ext is the block's ds4_layer */
    kn_mat *eh_proj;          /* [E][2E] */
    float *enorm, *hnorm;     /* [E] */
    float *head_norm;         /* shared_head_norm [E], or NULL */
    kn_mat *head;             /* shared_head_head [V][E], or NULL (the model's output) */
    const gguf_tensor *embed; /* embed_tokens, or NULL (the model's token embedding) */
} ds4_mtp;

/* ---- hyper-parameters ---- */

static int ds4_read_ratios(const model *m, int64_t n_all, int64_t l, int64_t *ratio) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.compress_ratios", m->hp.arch_name);
    gguf_arr a;
    if (gguf_get_arr(m->g, key, &a))
        return err_set(ERR_FORMAT, "%s: %s is missing", gguf_path(m->g), key);
    if ((int64_t)a.n < n_all || a.type == GGUF_VT_STRING || a.type == 9 /* array */)
        return err_set(ERR_FORMAT, "%s: %s has %llu entries for %lld layers", gguf_path(m->g), key,
                       (unsigned long long)a.n, (long long)n_all);
    *ratio = gguf_arr_i64(&a, (uint64_t)l);
    if (*ratio != 0 && *ratio != 4 && *ratio != 128)
        return err_set(ERR_UNSUPPORTED, "%s: %s[%lld] = %lld: the compression ratios are 0, 4, 128",
                       gguf_path(m->g), key, (long long)l, (long long)*ratio);
    return 0;
}

/* A per-layer float key that may be a scalar or an array (def when absent). */
static int ds4_read_layer_f32(const model *m, const char *suffix, int64_t l, float def,
                              float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    gguf_arr a;
    if (gguf_get_arr(m->g, key, &a) == 0) {
        if (a.n == 0 || a.type == GGUF_VT_STRING)
            return err_set(ERR_FORMAT, "%s: %s is empty or not numeric", gguf_path(m->g), key);
        *out = (float)gguf_arr_f64(&a, (uint64_t)l < a.n ? (uint64_t)l : a.n - 1);
        return 0;
    }
    return model_read_f32(m, suffix, def, out);
}

static int ds4_read_hparams(model *m) {
    model_hparams *hp = &m->hp;
    const char *path = gguf_path(m->g);
    int64_t nextn, gating, vlen;
    bool norm;
    int rc;
    if ((rc = arch_dense_read_sizes(m, false)) ||
        (rc = model_read_int(m, "attention.key_length", true, 0, &hp->head_dim)) ||
        (rc = model_read_int(m, "attention.value_length", false, hp->head_dim, &vlen)) ||
        (rc = model_read_int(m, "rope.dimension_count", true, 0, &hp->n_rot)) ||
        (rc = arch_dense_read_rope(m, true)) || (rc = moe_read_hparams(m)) ||
        (rc = model_read_int(m, "expert_gating_func", true, 0, &gating)) ||
        (rc = model_read_bool(m, "expert_weights_norm", false, &norm)) ||
        (rc = model_read_f32(m, "expert_weights_scale", 1.0f, &hp->expert_weights_scale)) ||
        (rc = model_read_int(m, "nextn_predict_layers", false, 0, &nextn)) ||
        (rc = model_read_int(m, "attention.q_lora_rank", true, 0, &hp->n_lora_q)) ||
        (rc = model_read_int(m, "attention.indexer.head_count", true, 0, &hp->indexer_n_head)) ||
        (rc = model_read_int(m, "attention.indexer.key_length", true, 0, &hp->indexer_head_dim)) ||
        (rc = model_read_int(m, "attention.indexer.top_k", true, 0, &hp->indexer_top_k)) ||
        (rc = model_read_int(m, "attention.output_group_count", true, 0, &hp->o_groups)) ||
        (rc = model_read_int(m, "attention.output_lora_rank", true, 0, &hp->o_lora)) ||
        (rc = model_read_f32(m, "attention.compress_rope_freq_base", hp->rope_base,
                             &hp->compress_rope_base)) ||
        (rc = model_read_int(m, "hyper_connection.count", true, 0, &hp->hc_mult)) ||
        (rc = model_read_int(m, "hyper_connection.sinkhorn_iterations", true, 0,
                             &hp->hc_sinkhorn_iters)) ||
        (rc = model_read_f32(m, "hyper_connection.epsilon", 1e-6f, &hp->hc_eps)) ||
        (rc = model_read_int(m, "hash_layer_count", false, 0, &hp->n_hash_layers)))
        return rc;
    if (gating != 4)
        return err_set(ERR_UNSUPPORTED,
                       "%s: %s.expert_gating_func %lld: deepseek4 takes sqrt-softplus (4) only",
                       path, hp->arch_name, (long long)gating);
    hp->expert_gating = (int)gating;
    hp->expert_weights_norm = norm;
    if (nextn < 0 || nextn >= hp->n_layer)
        return err_set(ERR_FORMAT, "%s: %s.nextn_predict_layers %lld of %lld layers", path,
                       hp->arch_name, (long long)nextn, (long long)hp->n_layer);
    /* the reference ignores the MTP count when the file lacks the first MTP block */
    char n[96];
    if (nextn > 0 &&
        !gguf_find_tensor(m->g, model_layer_name(n, hp->n_layer - nextn, "nextn.eh_proj.weight")))
        nextn = 0;
    int64_t r;
    if ((rc = ds4_read_ratios(m, hp->n_layer, 0, &r)))
        return rc;
    hp->n_layer_nextn = nextn;
    hp->n_layer -= nextn;
    int64_t D = hp->head_dim, R = hp->n_rot;
    if (vlen != D || D < 16 || D > DS4_HEAD_MAX || D % 2 || R < 2 || R > D || R % 2)
        return err_set(
            ERR_UNSUPPORTED,
            "%s: %s.attention.key_length %lld / value_length %lld / rope %lld: deepseek4 "
            "takes equal key and value lengths 16..%d with an even rope part",
            path, hp->arch_name, (long long)D, (long long)vlen, (long long)R, DS4_HEAD_MAX);
    if (hp->n_head_kv != 1)
        return err_set(ERR_UNSUPPORTED, "%s: %s.attention.head_count_kv %lld (deepseek4: 1)", path,
                       hp->arch_name, (long long)hp->n_head_kv);
    int64_t ID = hp->indexer_head_dim;
    if (ID < R || ID > DS4_HEAD_MAX || ID % 2)
        return err_set(ERR_UNSUPPORTED,
                       "%s: %s.attention.indexer.key_length %lld: the indexer takes even sizes "
                       "%lld..%d",
                       path, hp->arch_name, (long long)ID, (long long)R, DS4_HEAD_MAX);
    if (hp->indexer_n_head < 1 || hp->indexer_n_head > 1024)
        return err_set(ERR_FORMAT, "%s: %s.attention.indexer.head_count %lld (1 to 1024)", path,
                       hp->arch_name, (long long)hp->indexer_n_head);
    if (hp->indexer_top_k < 1 || hp->indexer_top_k > DS4_TOPK_MAX)
        return err_set(ERR_FORMAT, "%s: %s.attention.indexer.top_k %lld (1 to %d)", path,
                       hp->arch_name, (long long)hp->indexer_top_k, DS4_TOPK_MAX);
    if (hp->o_groups < 1 || hp->n_head % hp->o_groups || hp->o_lora < 1)
        return err_set(ERR_FORMAT,
                       "%s: %s.attention.output_group_count %lld / output_lora_rank %lld invalid "
                       "for %lld heads",
                       path, hp->arch_name, (long long)hp->o_groups, (long long)hp->o_lora,
                       (long long)hp->n_head);
    if (hp->hc_mult < 1 || hp->hc_mult > DS4_HC_MAX || hp->hc_sinkhorn_iters < 1)
        return err_set(ERR_FORMAT,
                       "%s: %s.hyper_connection.count %lld (1 to %d) / sinkhorn_iterations %lld "
                       "invalid",
                       path, hp->arch_name, (long long)hp->hc_mult, DS4_HC_MAX,
                       (long long)hp->hc_sinkhorn_iters);
    if (hp->n_lora_q < 1)
        return err_set(ERR_FORMAT, "%s: %s.attention.q_lora_rank %lld (deepseek4 needs > 0)", path,
                       hp->arch_name, (long long)hp->n_lora_q);
    if (hp->n_hash_layers < 0 || hp->n_hash_layers > hp->n_layer)
        return err_set(ERR_FORMAT, "%s: %s.hash_layer_count %lld of %lld layers", path,
                       hp->arch_name, (long long)hp->n_hash_layers, (long long)hp->n_layer);
    if (hp->n_layer > DS4_MAX_LAYER)
        return err_set(ERR_UNSUPPORTED, "%s: %lld layers (at most %d)", path,
                       (long long)hp->n_layer, DS4_MAX_LAYER);
    hp->n_lora_kv = 0;
    hp->attn_scale = 1.0f / sqrtf((float)D);
    return 0;
}

/* ---- binding ---- */

static void ds4_free_layer(const model *m, model_layer *L) {
    ds4_layer *X = L->ext; /* model.c frees attn_norm, ffn_norm and the MoE */
    if (!X)
        return;
    for (int64_t j = 0; X->mtp && j < m->hp.n_layer_nextn; j++) {
        ds4_mtp *t = &X->mtp[j];
        free(t->L.attn_norm);
        free(t->L.ffn_norm);
        moe_free(t->L.moe, m->hp.n_expert);
        ds4_free_layer(m, &t->L);
        kn_mat_destroy(t->eh_proj);
        kn_mat_destroy(t->head);
        free(t->enorm);
        free(t->hnorm);
        free(t->head_norm);
    }
    free(X->mtp);
    kn_mat *mats[] = {X->wq_a,    X->wq_b,   X->wkv,   X->wo_b,  X->hc_fn[0], X->hc_fn[1], X->c_wkv,
                      X->c_wgate, X->i_proj, X->i_q_b, X->i_wkv, X->i_wgate,  X->head_fn};
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
        kn_mat_destroy(mats[i]);
    if (X->wo_a)
        model_free_slices(X->wo_a, m->hp.o_groups);
    float *vecs[] = {X->q_a_norm,    X->kv_norm,     X->sinks,     X->hc_base[0], X->hc_base[1],
                     X->hc_scale[0], X->hc_scale[1], X->c_ape,     X->c_norm,     X->i_ape,
                     X->i_norm,      X->head_base,   X->head_scale};
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++)
        free(vecs[i]);
    free(X->tid2eid);
    free(X);
    L->ext = NULL;
}

/* A 2-D F32-convertible tensor [ne0, ne1] as a malloc'd float array (ape tables). */
static int ds4_bind_table(model *m, const char *name, int64_t ne0, int64_t ne1, float **out) {
    const gguf_tensor *t;
    int rc = model_bind_tensor(m, name, ne0, ne1, 0, true, &t);
    if (rc)
        return rc;
    *out = malloc((size_t)(ne0 * ne1) * sizeof(float));
    if (!*out)
        return err_set(ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < ne1; r++)
        kn_dequantize_row(t->type, t->data, r, ne0, *out + r * ne0);
    return 0;
}

/* The 2-D tensor [k, n G] as G matrices [k, n] (rows g n .. g n + n - 1 each): the grouped
 * output projection. */
static int ds4_bind_groups(model *m, const char *name, int64_t k, int64_t n, int64_t G,
                           kn_mat ***out) {
    const gguf_tensor *t;
    int rc = model_bind_tensor(m, name, k, n * G, 0, true, &t);
    if (rc)
        return rc;
    int64_t row_bytes = kn_type_row_bytes(t->type, k);
    if (row_bytes <= 0)
        return err_set(ERR_INVAL, "%s: tensor '%s': rows of %lld do not fit type %s",
                       gguf_path(m->g), name, (long long)k, kn_type_name(t->type));
    *out = calloc((size_t)G, sizeof **out);
    if (!*out)
        return err_set(ERR_NOMEM, "out of memory loading '%s'", name);
    for (int64_t g = 0; g < G; g++) {
        const char *data = (const char *)t->data + (size_t)(g * n * row_bytes);
        if ((rc = kn_mat_create(t->type, data, n, k, m->isa, &(*out)[g])))
            return err_wrap(rc, "%s: tensor '%s', group %lld", gguf_path(m->g), name, (long long)g);
        m->weight_bytes += kn_mat_bytes((*out)[g]);
        m->flops_per_token += 2.0 * (double)n * (double)k;
    }
    return 0;
}

static int ds4_bind_hash(model *m, int64_t l, ds4_layer *X) {
    const model_hparams *hp = &m->hp;
    char n[96];
    model_layer_name(n, l, "ffn_gate_tid2eid.weight");
    const gguf_tensor *t = gguf_find_tensor(m->g, n);
    if (!t)
        return err_set(ERR_FORMAT, "%s: tensor '%s' is missing", gguf_path(m->g), n);
    int64_t k = hp->n_expert_used, V = hp->n_vocab;
    if (t->type != 26 /* I32 */ || t->n_dims != 2 || t->ne[0] != k || t->ne[1] != V)
        return err_set(ERR_INVAL,
                       "%s: tensor '%s' must be I32 [%lld, %lld] (type %d, shape [%lld, %lld])",
                       gguf_path(m->g), n, (long long)k, (long long)V, t->type, (long long)t->ne[0],
                       (long long)(t->n_dims > 1 ? t->ne[1] : 0));
    X->tid2eid = malloc((size_t)(k * V) * sizeof(int32_t));
    if (!X->tid2eid)
        return err_set(ERR_NOMEM, "out of memory");
    memcpy(X->tid2eid, t->data, (size_t)(k * V) * sizeof(int32_t));
    for (int64_t i = 0; i < k * V; i++)
        if (X->tid2eid[i] < 0 || X->tid2eid[i] >= hp->n_expert)
            return err_set(ERR_INVAL, "%s: tensor '%s': token %lld routes to expert %d of %lld",
                           gguf_path(m->g), n, (long long)(i / k), X->tid2eid[i],
                           (long long)hp->n_expert);
    m->layers[l].moe->tid2eid = X->tid2eid;
    return 0;
}

static int ds4_bind_mtp(model *m, ds4_layer *last);

/* Binds file block l into L (a trunk layer, or an MTP block). */
static int ds4_bind_block(model *m, int64_t l, model_layer *L) {
    const model_hparams *hp = &m->hp;
    ds4_layer *X = calloc(1, sizeof *X);
    if (!X)
        return err_set(ERR_NOMEM, "out of memory");
    L->ext = X;
    int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, QL = hp->n_lora_q;
    int64_t G = hp->o_groups, O = hp->o_lora, hc = hp->hc_mult, mix = (2 + hc) * hc;
    int64_t ID = hp->indexer_head_dim, IH = hp->indexer_n_head;
    char n[96];
    int rc;
    if ((rc = ds4_read_ratios(m, hp->n_layer + hp->n_layer_nextn, l, &X->ratio)))
        return rc;
    if ((rc = model_bind_vec(m, model_layer_name(n, l, "attn_norm.weight"), E, true,
                             &L->attn_norm)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_sinks.weight"), H, true, &X->sinks)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_q_a.weight"), E, QL, true, 1.0,
                             &X->wq_a)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_q_a_norm.weight"), QL, true,
                             &X->q_a_norm)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_q_b.weight"), QL, H * D, true, 1.0,
                             &X->wq_b)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_kv.weight"), E, D, true, 1.0,
                             &X->wkv)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_kv_a_norm.weight"), D, true,
                             &X->kv_norm)) ||
        (rc = ds4_bind_groups(m, model_layer_name(n, l, "attn_output_a.weight"), H * D / G, O, G,
                              &X->wo_a)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_output_b.weight"), G * O, E, true, 1.0,
                             &X->wo_b)))
        return rc;
    const char *hcn[2][3] = {{"hc_attn_fn.weight", "hc_attn_base.weight", "hc_attn_scale.weight"},
                             {"hc_ffn_fn.weight", "hc_ffn_base.weight", "hc_ffn_scale.weight"}};
    for (int i = 0; i < 2; i++)
        if ((rc = model_bind_mat(m, model_layer_name(n, l, hcn[i][0]), hc * E, mix, true, 1.0,
                                 &X->hc_fn[i])) ||
            (rc =
                 model_bind_vec(m, model_layer_name(n, l, hcn[i][1]), mix, true, &X->hc_base[i])) ||
            (rc = model_bind_vec(m, model_layer_name(n, l, hcn[i][2]), 3, true, &X->hc_scale[i])))
            return rc;
    if (X->ratio) {
        int64_t coff = X->ratio == 4 ? 2 : 1;
        if ((rc = model_bind_mat(m, model_layer_name(n, l, "attn_compressor_kv.weight"), E,
                                 coff * D, true, 1.0, &X->c_wkv)) ||
            (rc = model_bind_mat(m, model_layer_name(n, l, "attn_compressor_gate.weight"), E,
                                 coff * D, true, 1.0, &X->c_wgate)) ||
            (rc = ds4_bind_table(m, model_layer_name(n, l, "attn_compressor_ape.weight"), coff * D,
                                 X->ratio, &X->c_ape)) ||
            (rc = model_bind_vec(m, model_layer_name(n, l, "attn_compressor_norm.weight"), D, true,
                                 &X->c_norm)))
            return rc;
    }
    if (X->ratio == 4 &&
        ((rc = model_bind_mat(m, model_layer_name(n, l, "indexer.proj.weight"), E, IH, true, 1.0,
                              &X->i_proj)) ||
         (rc = model_bind_mat(m, model_layer_name(n, l, "indexer.attn_q_b.weight"), QL, IH * ID,
                              true, 1.0, &X->i_q_b)) ||
         (rc = model_bind_mat(m, model_layer_name(n, l, "indexer_compressor_kv.weight"), E, 2 * ID,
                              true, 1.0, &X->i_wkv)) ||
         (rc = model_bind_mat(m, model_layer_name(n, l, "indexer_compressor_gate.weight"), E,
                              2 * ID, true, 1.0, &X->i_wgate)) ||
         (rc = ds4_bind_table(m, model_layer_name(n, l, "indexer_compressor_ape.weight"), 2 * ID, 4,
                              &X->i_ape)) ||
         (rc = model_bind_vec(m, model_layer_name(n, l, "indexer_compressor_norm.weight"), ID, true,
                              &X->i_norm))))
        return rc;
    bool hash = l < hp->n_hash_layers;
    if ((rc = moe_bind_layer_into(m, l, L, !hash)))
        return rc;
    if (hash && (rc = ds4_bind_hash(m, l, X)))
        return rc;
    if ((rc = ds4_read_layer_f32(m, "swiglu_clamp_exp", l, 0.0f, &L->moe->clamp)))
        return rc;
    L->moe->clamp_sh = L->moe->clamp;
    if ((rc = ds4_read_layer_f32(m, "swiglu_clamp_shexp", l, L->moe->clamp, &L->moe->clamp_sh)))
        return rc;
    if (l == hp->n_layer - 1 &&
        ((rc = model_bind_mat(m, "output_hc_fn.weight", hc * E, hc, true, 1.0, &X->head_fn)) ||
         (rc = model_bind_vec(m, "output_hc_base.weight", hc, true, &X->head_base)) ||
         (rc = model_bind_vec(m, "output_hc_scale.weight", 1, true, &X->head_scale)) ||
         (rc = ds4_bind_mtp(m, X))))
        return rc;
    return 0;
}

static int ds4_bind_layer(model *m, int64_t l) {
    return ds4_bind_block(m, l, &m->layers[l]);
}

/* The file's MTP blocks (nextn_predict_layers after the trunk), kept by the last trunk layer. */
static int ds4_bind_mtp(model *m, ds4_layer *last) {
    const model_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, V = hp->n_vocab;
    if (hp->n_layer_nextn <= 0)
        return 0;
    last->mtp = calloc((size_t)hp->n_layer_nextn, sizeof *last->mtp);
    if (!last->mtp)
        return err_set(ERR_NOMEM, "out of memory");
    char n[96];
    int rc;
    /* the MTP blocks are not read by a trunk step: they count in neither its bytes nor its FLOPs
     * (the roofline of bench) */
    size_t bytes = m->weight_bytes;
    double flops = m->flops_per_token;
    for (int64_t j = 0; j < hp->n_layer_nextn; j++) {
        ds4_mtp *t = &last->mtp[j];
        int64_t l = hp->n_layer + j;
        if ((rc = ds4_bind_block(m, l, &t->L)) ||
            (rc = model_bind_mat(m, model_layer_name(n, l, "nextn.eh_proj.weight"), 2 * E, E, true,
                                 0.0, &t->eh_proj)) ||
            (rc = model_bind_vec(m, model_layer_name(n, l, "nextn.enorm.weight"), E, true,
                                 &t->enorm)) ||
            (rc = model_bind_vec(m, model_layer_name(n, l, "nextn.hnorm.weight"), E, true,
                                 &t->hnorm)) ||
            (rc = model_bind_vec(m, model_layer_name(n, l, "nextn.shared_head_norm.weight"), E,
                                 false, &t->head_norm)) ||
            (rc = model_bind_mat(m, model_layer_name(n, l, "nextn.shared_head_head.weight"), E, V,
                                 false, 0.0, &t->head)) ||
            (rc = model_bind_tensor(m, model_layer_name(n, l, "nextn.embed_tokens.weight"), E, V, 0,
                                    false, &t->embed)))
            return rc;
    }
    m->weight_bytes = bytes;
    m->flops_per_token = flops;
    return 0;
}

/* ---- the KV layout ---- */

/* Floats of compressor state per position: the widest layer's (ratio 4: attention kv and score
 * of 2D each, indexer kv and score of 2ID each; ratio 128: kv and score of D). */
static int64_t ds4_state_floats(const model *m) {
    const model_hparams *hp = &m->hp;
    int64_t s = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const ds4_layer *X = m->layers[l].ext;
        int64_t w = X->ratio == 4 ? 4 * hp->head_dim + 4 * hp->indexer_head_dim
                    : X->ratio    ? 2 * hp->head_dim
                                  : 0;
        s = w > s ? w : s;
    }
    return s;
}

static int64_t ds4_kv_dim(const model_hparams *hp) {
    return 2 * hp->head_dim;
}

/* The companion buffer's name: "ds-" and the index keys' type. */
static const char *ds4_buf_name(kn_ik_type t) {
    switch (t) {
    case KN_IK_F16:
        return "ds-f16";
    case KN_IK_BF16:
        return "ds-bf16";
    case KN_IK_FP8:
        return "ds-fp8";
    default:
        return "ds-f32";
    }
}

static void ds4_kv_layout(const model *m, kv_pool_opts *o) {
    o->k_only = true;
    kn_ik_type t = kn_ik_type_parse(flags_str(FLAG_INDEX_KV_DTYPE), o->f16);
    o->ik_row_bytes =
        (size_t)ds4_state_floats(m) * sizeof(float) + kn_ik_row_bytes(t, m->hp.indexer_head_dim);
    o->ik_name = ds4_buf_name(t);
}

/* ---- forward buffers ---- */

typedef struct ds4_ctx {
    int64_t SF;       /* state floats per position */
    kn_ik_type ik;    /* the index keys' type */
    size_t ik_off;    /* the index key's byte offset in a companion row */
    double *th_plain; /* [n_rot/2] angle per position of each pair: uncompressed layers */
    double *th_comp;  /* compressed layers and the indexer */
    /* [T][...] */
    float *hs, *hs2; /* [hc E] streams, and the normed flat streams */
    float *mix;      /* [(2 + hc) hc] */
    float *pre, *post, *comb;
    float *qr, *q, *kv, *att, *attg, *oag, *oa, *ao;
    float *ckv, *csc, *ikv, *isc; /* compressor products [2D], [2D], [2ID], [2ID] */
    float *iq, *iw;               /* indexer queries [IH ID], weights [IH] */
    float *cat;                   /* MTP: [T hc][2E] the projection's inputs, or NULL */
    int32_t *sel;                 /* [T][top_k] */
    int64_t *n_sel;
    float *cs_plain, *cs_comp; /* [T][n_rot/2][2] */
    fwd_mm *mm;                /* [o_groups + 8] */
    kn_topk_item **heap;       /* per thread [top_k] */
    float **tmp;               /* per thread: [4 max(D, ID) + 512] */
    int n_threads;
} ds4_ctx;

static void ds4_ctx_destroy(fwd_ctx *c) {
    ds4_ctx *d = c->arch_ctx;
    if (!d)
        return;
    for (int i = 0; i < d->n_threads; i++) {
        if (d->heap)
            free(d->heap[i]);
        if (d->tmp)
            free(d->tmp[i]);
    }
    free(d->heap);
    free(d->tmp);
    float *bufs[] = {d->hs,  d->hs2, d->mix,  d->pre, d->post,     d->comb,   d->qr,  d->q,
                     d->kv,  d->att, d->attg, d->oag, d->oa,       d->ao,     d->ckv, d->csc,
                     d->ikv, d->isc, d->iq,   d->iw,  d->cs_plain, d->cs_comp};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(d->cat);
    free(d->th_plain);
    free(d->th_comp);
    free(d->sel);
    free(d->n_sel);
    free(d->mm);
    free(d);
    c->arch_ctx = NULL;
}

/* The angle per position of each RoPE pair: base^(-2i/n_rot), with YaRN (llama.cpp's rope_yarn,
 * correction dimensions of the given base) when yarn. */
static void ds4_thetas(const model_hparams *hp, double base, bool yarn, double factor,
                       double beta_fast, double beta_slow, double ext, double *th) {
    int64_t half = hp->n_rot / 2;
    double n = (double)hp->n_rot, pi = 3.14159265358979323846;
    double lo = floor(n * log((double)hp->n_ctx_orig / (beta_fast * 2 * pi)) / (2 * log(base)));
    double hi = ceil(n * log((double)hp->n_ctx_orig / (beta_slow * 2 * pi)) / (2 * log(base)));
    lo = lo > 0 ? lo : 0;
    hi = hi < n - 1 ? hi : n - 1;
    for (int64_t i = 0; i < half; i++) {
        double extrap = pow(base, -2.0 * (double)i / n);
        if (!yarn) {
            th[i] = extrap * (double)hp->rope_freq_scale;
            continue;
        }
        double interp = extrap / factor;
        double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
        double ramp = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * ext;
        th[i] = interp * (1.0 - ramp) + extrap * ramp;
    }
}

static int ds4_ctx_create(fwd_ctx *c) {
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    int t = -1;
    const char *nm = kv_pool_ik_name(c->kv);
    for (int i = KN_IK_F32; nm && i <= KN_IK_FP8; i++)
        if (strcmp(nm, ds4_buf_name((kn_ik_type)i)) == 0)
            t = i;
    int64_t SF = ds4_state_floats(m);
    if (t < 0 || kv_pool_ik_block_bytes(c->kv) !=
                     ((size_t)SF * sizeof(float) + kn_ik_row_bytes(t, hp->indexer_head_dim)) *
                         (size_t)kv_pool_block_size(c->kv))
        return err_set(ERR_INVAL,
                       "forward: the KV pool has no compressor-state buffer for %s (make it with "
                       "model_kv_pool_opts)",
                       hp->arch_name);
    ds4_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return ERR_NOMEM;
    c->arch_ctx = d;
    d->SF = SF;
    d->ik = (kn_ik_type)t;
    d->ik_off = (size_t)SF * sizeof(float);
    size_t T = (size_t)c->max_tokens, F = sizeof(float), E = (size_t)hp->n_embd;
    size_t hc = (size_t)hp->hc_mult, D = (size_t)hp->head_dim, H = (size_t)hp->n_head;
    size_t ID = (size_t)hp->indexer_head_dim, IH = (size_t)hp->indexer_n_head;
    size_t G = (size_t)hp->o_groups, O = (size_t)hp->o_lora, K = (size_t)hp->indexer_top_k;
    size_t half = (size_t)hp->n_rot / 2;
    d->hs = aligned_alloc(64, ((T * hc * E * F + 63) / 64) * 64);
    d->hs2 = aligned_alloc(64, ((T * hc * E * F + 63) / 64) * 64);
    d->mix = malloc(T * (2 + hc) * hc * F);
    d->pre = malloc(T * hc * F);
    d->post = malloc(T * hc * F);
    d->comb = malloc(T * hc * hc * F);
    d->qr = malloc(T * (size_t)hp->n_lora_q * F);
    d->q = malloc(T * H * D * F);
    d->kv = malloc(T * D * F);
    d->att = malloc(T * H * D * F);
    d->attg = malloc(T * H * D * F);
    d->oag = malloc(T * G * O * F);
    d->oa = malloc(T * G * O * F);
    d->ao = malloc(T * E * F);
    d->ckv = malloc(T * 2 * D * F);
    d->csc = malloc(T * 2 * D * F);
    d->ikv = malloc(T * 2 * ID * F);
    d->isc = malloc(T * 2 * ID * F);
    d->iq = malloc(T * IH * ID * F);
    d->iw = malloc(T * IH * F);
    d->sel = malloc(T * K * sizeof(int32_t));
    d->n_sel = malloc(T * sizeof(int64_t));
    d->cs_plain = malloc(T * half * 2 * F);
    d->cs_comp = malloc(T * half * 2 * F);
    d->th_plain = malloc(half * sizeof(double));
    d->th_comp = malloc(half * sizeof(double));
    d->mm = malloc((G + 8) * sizeof(fwd_mm));
    if (hp->n_layer_nextn > 0 && !(d->cat = malloc(T * hc * 2 * E * F)))
        return ERR_NOMEM;
    d->n_threads = c->n_threads;
    d->heap = calloc((size_t)c->n_threads, sizeof *d->heap);
    d->tmp = calloc((size_t)c->n_threads, sizeof *d->tmp);
    if (!d->hs || !d->hs2 || !d->mix || !d->pre || !d->post || !d->comb || !d->qr || !d->q ||
        !d->kv || !d->att || !d->attg || !d->oag || !d->oa || !d->ao || !d->ckv || !d->csc ||
        !d->ikv || !d->isc || !d->iq || !d->iw || !d->sel || !d->n_sel || !d->cs_plain ||
        !d->cs_comp || !d->th_plain || !d->th_comp || !d->mm || !d->heap || !d->tmp)
        return ERR_NOMEM;
    size_t W = 4 * DS4_HEAD_MAX + 1024 + E + hc; /* heads, compressor weights, a row */
    for (int i = 0; i < c->n_threads; i++) {
        d->heap[i] = malloc(K * sizeof(kn_topk_item));
        d->tmp[i] = malloc(W * F);
        if (!d->heap[i] || !d->tmp[i])
            return ERR_NOMEM;
    }
    /* RoPE: uncompressed layers unscaled at rope.freq_base; the others at the compressed base
     * with the file's YaRN (factor and corrections; ext_factor 1 unless the file says) */
    float bf = 32.0f, bs = 1.0f, ext = -1.0f;
    int rc;
    if ((rc = model_read_f32(m, "rope.scaling.yarn_beta_fast", 32.0f, &bf)) ||
        (rc = model_read_f32(m, "rope.scaling.yarn_beta_slow", 1.0f, &bs)) ||
        (rc = model_read_f32(m, "rope.scaling.yarn_ext_factor", -1.0f, &ext)))
        return rc;
    model_hparams plain = *hp;
    plain.rope_freq_scale = 1.0f;
    ds4_thetas(&plain, hp->rope_base, false, 1, bf, bs, 0, d->th_plain);
    ds4_thetas(hp, hp->compress_rope_base, hp->rope_yarn, 1.0 / hp->rope_freq_scale, bf, bs,
               ext < 0 ? 1.0 : ext, d->th_comp);
    return 0;
}

static void ds4_ctx_act(const model_hparams *hp, int64_t max_tokens, int64_t *rows,
                        int64_t *elems) {
    int64_t w = hp->hc_mult * hp->n_embd;
    if (hp->n_head * hp->head_dim > w)
        w = hp->n_head * hp->head_dim;
    if (hp->o_groups * hp->o_lora > w)
        w = hp->o_groups * hp->o_lora;
    *rows = max_tokens * (hp->o_groups + 1);
    *elems = max_tokens * w;
    if (hp->n_layer_nextn > 0) { /* the MTP projection: hc rows of 2 n_embd per token */
        *rows = *rows > max_tokens * hp->hc_mult ? *rows : max_tokens * hp->hc_mult;
        *elems = *elems > max_tokens * 2 * hp->hc_mult * hp->n_embd
                     ? *elems
                     : max_tokens * 2 * hp->hc_mult * hp->n_embd;
    }
}

/* ---- helpers ---- */

static float ds4_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* RMS norm as the reference's (the sum of squares in double). */
static void ds4_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(s / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

/* RoPE (NORM pairs) of the last n_rot channels of x[0..n), cs[i] = {cos, sin}; inverse: the
 * rotation by the negative angle. */
static void ds4_rope(float *x, int64_t n, int64_t n_rot, const float *cs, bool inverse) {
    float *r = x + n - n_rot;
    for (int64_t i = 0; i < n_rot / 2; i++) {
        float co = cs[2 * i], si = inverse ? -cs[2 * i + 1] : cs[2 * i + 1];
        float x0 = r[2 * i], x1 = r[2 * i + 1];
        r[2 * i] = x0 * co - x1 * si;
        r[2 * i + 1] = x0 * si + x1 * co;
    }
}

static void ds4_cs(const double *th, int64_t half, double pos, float *cs) {
    for (int64_t i = 0; i < half; i++) {
        double a = pos * th[i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

static float *ds4_state(fwd_ctx *c, int64_t l, const int32_t *blocks, int64_t p) {
    int64_t bs = kv_pool_block_size(c->kv);
    size_t ist = kv_pool_ik_stride(c->kv), row = kv_pool_ik_block_bytes(c->kv) / (size_t)bs;
    unsigned char *base = kv_pool_ik_base(c->kv, l);
    return (float *)(void *)(base + (size_t)blocks[p / bs] * ist + (size_t)(p % bs) * row);
}

/* Element `slot` (0: raw, 1: compressed) of position p's K row in layer l, as floats. */
static void ds4_k_load(fwd_ctx *c, int64_t l, const int32_t *blocks, int64_t p, int slot,
                       float *out) {
    int64_t D = c->m->hp.head_dim, bs = kv_pool_block_size(c->kv);
    size_t bb = kv_pool_kv_stride(c->kv);
    bool f16 = kv_pool_f16(c->kv);
    const unsigned char *base = kv_pool_k_base(c->kv, l);
    size_t es = f16 ? 2 : 4;
    const unsigned char *row = base + (size_t)blocks[p / bs] * bb +
                               ((size_t)(p % bs) * 2 * (size_t)D + (size_t)slot * (size_t)D) * es;
    if (f16) {
        const uint16_t *h = (const uint16_t *)(const void *)row;
        for (int64_t i = 0; i < D; i++)
            out[i] = kn_f16_to_f32(h[i]);
    } else {
        memcpy(out, row, (size_t)D * sizeof(float));
    }
}

static void ds4_k_store(fwd_ctx *c, int64_t l, const int32_t *blocks, int64_t p, int slot,
                        const float *x) {
    int64_t D = c->m->hp.head_dim, bs = kv_pool_block_size(c->kv);
    size_t bb = kv_pool_kv_stride(c->kv);
    bool f16 = kv_pool_f16(c->kv);
    unsigned char *base = kv_pool_k_base(c->kv, l);
    size_t es = f16 ? 2 : 4;
    unsigned char *row = base + (size_t)blocks[p / bs] * bb +
                         ((size_t)(p % bs) * 2 * (size_t)D + (size_t)slot * (size_t)D) * es;
    kn_store_kv(row, x, D, f16, c->m->isa);
}

/* x[0..n) times the orthonormal Sylvester Hadamard matrix, blockwise over the largest power of
 * two dividing n, each output a sum in index order: the indexer's rotation of its keys and
 * queries (the reference rotates both before the keys are stored). */
static void ds4_hadamard(float *x, int64_t n, float *tmp) {
    int64_t bn = n & -n;
    float s = 1.0f / sqrtf((float)bn);
    for (int64_t b0 = 0; b0 < n; b0 += bn) {
        for (int64_t i = 0; i < bn; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < bn; j++) {
                float h = __builtin_popcountll((unsigned long long)(i & j)) & 1 ? -s : s;
                acc += h * x[b0 + j];
            }
            tmp[b0 + i] = acc;
        }
    }
    memcpy(x, tmp, (size_t)n * sizeof(float));
}

static inline float ds4_round(float x, bool f16) {
    return f16 ? kn_f16_to_f32(kn_f32_to_f16(x)) : x;
}

/* ---- hyper-connections ---- */

typedef struct ds4_arg {
    int64_t layer; /* the block's KV layer */
    const model_layer *L;
    const ds4_layer *X;
    int64_t ratio; /* the compression this step runs (0 for an MTP block) */
    int which;     /* 0 attention, 1 FFN */
    bool quant;
} ds4_arg;

/* Rows [t0, t1): hs2 = rmsnorm(flat streams), quantized for the mixing product if wanted; with
 * embed (layer 0), the streams first become copies of the token's embedding. */
static void ds4_rows_hc_norm(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    ds4_ctx *d = c->arch_ctx;
    int64_t E = hp->n_embd, W = hp->hc_mult * E;
    for (int64_t t = t0; t < t1; t++) {
        float *s = d->hs + t * W;
        if (ph->embed) {
            kn_dequantize_row(c->m->tok_embd->type, c->m->tok_embd->data, c->tok_id[t], E, s);
            for (int64_t h = 1; h < hp->hc_mult; h++)
                memcpy(s + h * E, s, (size_t)E * sizeof(float));
            ds4_cs(d->th_plain, hp->n_rot / 2, (double)c->tok_pos[t], d->cs_plain + t * hp->n_rot);
            ds4_cs(d->th_comp, hp->n_rot / 2, (double)c->tok_pos[t], d->cs_comp + t * hp->n_rot);
        }
        ds4_rmsnorm(s, NULL, hp->rms_eps, W, d->hs2 + t * W);
    }
    if (ph->quant)
        fwd_quantize_rows(c, d->hs2, W, t0, t1);
}

/* The Sinkhorn mixing matrix comb[src][dst] of one token, in place. */
static void ds4_sinkhorn(float *cb, int64_t hc, int64_t iters, float eps) {
    for (int64_t s = 0; s < hc; s++) { /* softmax over dst */
        float *r = cb + s * hc, mx = r[0];
        for (int64_t j = 1; j < hc; j++)
            mx = r[j] > mx ? r[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < hc; j++) {
            r[j] = expf(r[j] - mx);
            sum += (double)r[j];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < hc; j++)
            r[j] = r[j] * inv + eps;
    }
    for (int64_t it = 0; it < iters; it++) {
        if (it > 0)
            for (int64_t s = 0; s < hc; s++) { /* rows: over dst for each src */
                double sum = 0;
                for (int64_t j = 0; j < hc; j++)
                    sum += (double)cb[s * hc + j];
                float den = (float)sum + eps;
                for (int64_t j = 0; j < hc; j++)
                    cb[s * hc + j] = cb[s * hc + j] / den;
            }
        for (int64_t j = 0; j < hc; j++) { /* columns: over src for each dst */
            double sum = 0;
            for (int64_t s = 0; s < hc; s++)
                sum += (double)cb[s * hc + j];
            float den = (float)sum + eps;
            for (int64_t s = 0; s < hc; s++)
                cb[s * hc + j] = cb[s * hc + j] / den;
        }
    }
}

/* Rows [t0, t1): pre, post, comb from the mixes, and the block's input sum_h pre_h S_h normed by
 * the block's norm into c->xn (quantized if wanted); for the FFN the un-normed input goes to c->x
 * and c->y is zeroed, where moe.c's residual fold and ffn_norm take it. */
static void ds4_rows_hc_pre(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_arg *a = ph->arg;
    const model_layer *L = a->L;
    const ds4_layer *X = a->X;
    ds4_ctx *d = c->arch_ctx;
    int64_t E = hp->n_embd, hc = hp->hc_mult, mixn = (2 + hc) * hc;
    const float *base = X->hc_base[a->which], *sc = X->hc_scale[a->which];
    float *tmp = d->tmp[thread];
    for (int64_t t = t0; t < t1; t++) {
        const float *mx = d->mix + t * mixn;
        float *pre = d->pre + t * hc, *post = d->post + t * hc, *cb = d->comb + t * hc * hc;
        for (int64_t h = 0; h < hc; h++) {
            pre[h] = ds4_sigmoid(mx[h] * sc[0] + base[h]) + hp->hc_eps;
            post[h] = ds4_sigmoid(mx[hc + h] * sc[1] + base[hc + h]) * 2.0f;
        }
        /* the reference's comb is [dst (fastest)][src]: element dst + hc src */
        for (int64_t i = 0; i < hc * hc; i++)
            cb[i] = mx[2 * hc + i] * sc[2] + base[2 * hc + i];
        ds4_sinkhorn(cb, hc, hp->hc_sinkhorn_iters, hp->hc_eps);
        const float *s = d->hs + t * hc * E;
        float *in = a->which ? c->x + t * E : tmp;
        for (int64_t i = 0; i < E; i++) {
            float acc = s[i] * pre[0];
            for (int64_t h = 1; h < hc; h++)
                acc = acc + s[h * E + i] * pre[h];
            in[i] = acc;
        }
        if (a->which)
            memset(c->y + t * E, 0, (size_t)E * sizeof(float));
        else
            ds4_rmsnorm(in, L->attn_norm, hp->rms_eps, E, c->xn + t * E);
    }
    if (!a->which && a->quant)
        fwd_quantize_rows(c, c->xn, E, t0, t1);
}

/* Rows [t0, t1): the block's output (ao for the attention, c->y for the FFN) mixed back into the
 * streams, then the streams normed for the next mixing product (hs2, quantized if wanted). */
static void ds4_rows_hc_post(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_arg *a = ph->arg;
    ds4_ctx *d = c->arch_ctx;
    int64_t E = hp->n_embd, hc = hp->hc_mult, W = hc * E;
    float *tmp = d->tmp[thread];
    for (int64_t t = t0; t < t1; t++) {
        const float *out = a->which ? c->y + t * E : d->ao + t * E;
        const float *post = d->post + t * hc, *cb = d->comb + t * hc * hc;
        float *s = d->hs + t * W;
        for (int64_t i = 0; i < E; i++) {
            for (int64_t dst = 0; dst < hc; dst++) {
                float acc = out[i] * post[dst];
                for (int64_t src = 0; src < hc; src++)
                    acc = acc + s[src * E + i] * cb[dst + hc * src];
                tmp[dst] = acc;
            }
            for (int64_t dst = 0; dst < hc; dst++)
                s[dst * E + i] = tmp[dst];
        }
        ds4_rmsnorm(s, NULL, hp->rms_eps, W, d->hs2 + t * W);
    }
    if (a->quant)
        fwd_quantize_rows(c, d->hs2, W, t0, t1);
}

/* Rows [t0, t1): the output head's mixing: c->x = sum_h pre_h S_h, c->y = 0. */
static void ds4_rows_head(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_layer *X = ph->arg;
    ds4_ctx *d = c->arch_ctx;
    int64_t E = hp->n_embd, hc = hp->hc_mult;
    for (int64_t t = t0; t < t1; t++) {
        const float *mx = d->mix + t * hc; /* the head's product has hc outputs */
        float pre[DS4_HC_MAX];
        for (int64_t h = 0; h < hc; h++)
            pre[h] = ds4_sigmoid(mx[h] * X->head_scale[0] + X->head_base[h]) + hp->hc_eps;
        const float *s = d->hs + t * hc * E;
        for (int64_t i = 0; i < E; i++) {
            float acc = s[i] * pre[0];
            for (int64_t h = 1; h < hc; h++)
                acc = acc + s[h * E + i] * pre[h];
            c->x[t * E + i] = acc;
        }
        memset(c->y + t * E, 0, (size_t)E * sizeof(float));
    }
}

/* ---- attention ---- */

/* Rows [t0, t1): qr normed (quantized), kv normed, roped and stored; the compressor state of the
 * position (scores with the position's ape row) stored. */
static void ds4_rows_kv(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_arg *a = ph->arg;
    int64_t l = a->layer;
    const ds4_layer *X = a->X;
    ds4_ctx *d = c->arch_ctx;
    int64_t D = hp->head_dim, ID = hp->indexer_head_dim, QL = hp->n_lora_q, R = hp->n_rot;
    for (int64_t t = t0; t < t1; t++) {
        ds4_rmsnorm(d->qr + t * QL, X->q_a_norm, hp->rms_eps, QL, d->qr + t * QL);
        float *kv = d->kv + t * D;
        ds4_rmsnorm(kv, X->kv_norm, hp->rms_eps, D, kv);
        ds4_rope(kv, D, R, (X->ratio ? d->cs_comp : d->cs_plain) + t * R, false);
        const int32_t *blocks = c->b->seqs[c->tok_seq[t]].blocks;
        int64_t p = c->tok_pos[t];
        ds4_k_store(c, l, blocks, p, 0, kv);
        if (!a->ratio)
            continue;
        int64_t r = a->ratio, coff = r == 4 ? 2 : 1, j = p % r;
        float *st = ds4_state(c, l, blocks, p);
        for (int64_t i = 0; i < coff * D; i++) {
            st[i] = d->ckv[t * 2 * D + i];
            st[coff * D + i] = d->csc[t * 2 * D + i] + X->c_ape[j * coff * D + i];
        }
        if (r == 4)
            for (int64_t i = 0; i < 2 * ID; i++) {
                st[4 * D + i] = d->ikv[t * 2 * ID + i];
                st[4 * D + 2 * ID + i] = d->isc[t * 2 * ID + i] + X->i_ape[j * 2 * ID + i];
            }
    }
    if (a->quant)
        fwd_quantize_rows(c, d->qr, QL, t0, t1);
}

/* The compressed entry of the block ending at position p (ratio r, width n, state offsets kv_off
 * and sc_off in a state row of 2n (r = 4) or n values each), normed and roped at its first
 * position, into out[n]. */
static void ds4_compress(fwd_ctx *c, int64_t l, const int32_t *blocks, int64_t p, int64_t r,
                         int64_t n, int64_t kv_off, int64_t sc_off, const float *norm, float *out,
                         float *w) {
    const model_hparams *hp = &c->m->hp;
    ds4_ctx *d = c->arch_ctx;
    int64_t start = p + 1 - r, R = hp->n_rot;
    bool overlap = r == 4;
    int64_t ne = overlap ? 2 * r : r;
    for (int64_t ch = 0; ch < n; ch++) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < ne; j++) {
            float s = -INFINITY;
            if (overlap && j < r) {
                if (start - r + j >= 0)
                    s = ds4_state(c, l, blocks, start - r + j)[sc_off + ch];
            } else {
                int64_t q = start + (overlap ? j - r : j);
                s = ds4_state(c, l, blocks, q)[sc_off + (overlap ? n : 0) + ch];
            }
            w[j] = s;
            mx = s > mx ? s : mx;
        }
        double sum = 0;
        for (int64_t j = 0; j < ne; j++) {
            w[j] = w[j] == -INFINITY ? 0.0f : expf(w[j] - mx);
            sum += (double)w[j];
        }
        float inv = (float)(1.0 / sum);
        double acc = 0;
        for (int64_t j = 0; j < ne; j++) {
            float v = 0.0f;
            if (overlap && j < r) {
                if (start - r + j >= 0)
                    v = ds4_state(c, l, blocks, start - r + j)[kv_off + ch];
            } else {
                int64_t q = start + (overlap ? j - r : j);
                v = ds4_state(c, l, blocks, q)[kv_off + (overlap ? n : 0) + ch];
            }
            acc += (double)(v * (w[j] * inv));
        }
        out[ch] = (float)acc;
    }
    ds4_rmsnorm(out, norm, hp->rms_eps, n, out);
    float cs[DS4_HEAD_MAX];
    ds4_cs(d->th_comp, R / 2, (double)start, cs);
    ds4_rope(out, n, R, cs, false);
}

/* Rows [t0, t1): q heads normed and roped; indexer queries roped and weights scaled; a token that
 * ends a block writes the block's compressed entry (and index key). */
static void ds4_rows_q(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_arg *a = ph->arg;
    int64_t l = a->layer;
    const ds4_layer *X = a->X;
    ds4_ctx *d = c->arch_ctx;
    int64_t D = hp->head_dim, H = hp->n_head, R = hp->n_rot;
    int64_t ID = hp->indexer_head_dim, IH = hp->indexer_n_head;
    float *tmp = d->tmp[thread];
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = (X->ratio ? d->cs_comp : d->cs_plain) + t * R;
        for (int64_t h = 0; h < H; h++) {
            float *q = d->q + (t * H + h) * D;
            ds4_rmsnorm(q, NULL, hp->rms_eps, D, q);
            ds4_rope(q, D, R, cs, false);
        }
        if (a->ratio == 4) {
            for (int64_t h = 0; h < IH; h++) {
                float *iq = d->iq + (t * IH + h) * ID;
                ds4_rope(iq, ID, R, d->cs_comp + t * R, false);
                ds4_hadamard(iq, ID, tmp);
                /* the reference multiplies F16 (BF16) keys by a query of their type */
                for (int64_t i = 0; d->ik == KN_IK_F16 && i < ID; i++)
                    iq[i] = kn_f16_to_f32(kn_f32_to_f16(iq[i]));
                for (int64_t i = 0; d->ik == KN_IK_BF16 && i < ID; i++)
                    iq[i] = kn_bf16_to_f32(kn_f32_to_bf16(iq[i]));
            }
            float ws = 1.0f / sqrtf((float)(ID * IH));
            for (int64_t h = 0; h < IH; h++)
                d->iw[t * IH + h] = d->iw[t * IH + h] * ws;
        }
        int64_t p = c->tok_pos[t], r = a->ratio;
        if (!r || (p + 1) % r)
            continue;
        const int32_t *blocks = c->b->seqs[c->tok_seq[t]].blocks;
        float *w = tmp + 2 * DS4_HEAD_MAX;
        ds4_compress(c, l, blocks, p, r, D, 0, r == 4 ? 2 * D : D, X->c_norm, tmp, w);
        ds4_k_store(c, l, blocks, p, 1, tmp);
        if (r == 4) {
            ds4_compress(c, l, blocks, p, r, ID, 4 * D, 4 * D + 2 * ID, X->i_norm, tmp, w);
            ds4_hadamard(tmp, ID, w);
            unsigned char *row = (unsigned char *)ds4_state(c, l, blocks, p) + d->ik_off;
            kn_ik_store(row, tmp, ID, d->ik);
        }
    }
}

/* Rows [t0, t1) of a ratio-4 layer: the indexer's top_k complete blocks of each token. */
static void ds4_rows_select(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_arg *a = ph->arg;
    ds4_ctx *d = c->arch_ctx;
    int64_t ID = hp->indexer_head_dim, IH = hp->indexer_n_head, K = hp->indexer_top_k;
    kn_topk_item *heap = d->heap[thread];
    float *kb = d->tmp[thread];
    for (int64_t t = t0; t < t1; t++) {
        const int32_t *blocks = c->b->seqs[c->tok_seq[t]].blocks;
        int64_t nb = ((int64_t)c->tok_pos[t] + 1) / 4, n = 0;
        const float *q = d->iq + t * IH * ID, *w = d->iw + t * IH;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *row =
                (const unsigned char *)ds4_state(c, a->layer, blocks, 4 * b + 3) + d->ik_off;
            kn_ik_load(row, ID, d->ik, kb);
            kn_topk_push(heap, &n, K, kn_index_score(q, w, IH, ID, kb, c->m->isa), (int32_t)b);
        }
        kn_topk_positions(heap, n, d->sel + t * K);
        d->n_sel[t] = n;
    }
}

/* Attention units [u0, u1): token u / H, head u % H, over the window and the compressed blocks;
 * the result de-roped into its group's row of attg. */
static void ds4_rows_attn(fwd_ctx *c, const fwd_phase *ph, int64_t u0, int64_t u1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_arg *a = ph->arg;
    int64_t l = a->layer;
    const ds4_layer *X = a->X;
    ds4_ctx *d = c->arch_ctx;
    int64_t D = hp->head_dim, H = hp->n_head, R = hp->n_rot, K = hp->indexer_top_k;
    int64_t G = hp->o_groups, HG = H / G, T = c->n_tok;
    bool f16 = kv_pool_f16(c->kv);
    float *q = d->tmp[thread], *kb = q + DS4_HEAD_MAX, *acc = kb + DS4_HEAD_MAX;
    for (int64_t u = u0; u < u1; u++) {
        int64_t t = u / H, h = u % H, p = c->tok_pos[t], r = a->ratio;
        const int32_t *blocks = c->b->seqs[c->tok_seq[t]].blocks;
        memcpy(q, d->q + (t * H + h) * D, (size_t)D * sizeof(float));
        if (f16) /* the reference multiplies F16 keys by an F16 query */
            for (int64_t i = 0; i < D; i++)
                q[i] = kn_f16_to_f32(kn_f32_to_f16(q[i]));
        int64_t lo = hp->sliding_window > 0 && p - hp->sliding_window + 1 > 0
                         ? p - hp->sliding_window + 1
                         : 0;
        int64_t nw = p - lo + 1, nc = 0;
        const int32_t *sel = NULL;
        if (r == 4) {
            nc = d->n_sel[t];
            sel = d->sel + t * K;
        } else if (r) {
            nc = (p + 1) / r;
        }
        /* the reference's flash attention: an online softmax over the keys in order, the value
         * sum kept in the values' type (F16 rounding after every step with F16 KV), the sink
         * joining the denominator last */
        float M = -INFINITY, S = 0.0f;
        for (int64_t j = 0; j < D; j++)
            acc[j] = 0.0f;
        for (int64_t i = 0; i < nw + nc; i++) {
            if (i < nw)
                ds4_k_load(c, l, blocks, lo + i, 0, kb);
            else {
                int64_t b = sel ? sel[i - nw] : i - nw;
                ds4_k_load(c, l, blocks, r * b + r - 1, 1, kb);
            }
            float sc = kn_dot(q, kb, D, c->m->isa) * hp->attn_scale, ms = 1.0f, vs = 1.0f;
            if (sc > M) {
                float m_old = M;
                M = sc;
                ms = expf(m_old - M);
                for (int64_t j = 0; j < D; j++)
                    acc[j] = ds4_round(acc[j] * ms, f16);
            } else {
                vs = expf(sc - M);
            }
            for (int64_t j = 0; j < D; j++)
                acc[j] = ds4_round(acc[j] + kb[j] * vs, f16);
            S = S * ms + vs;
        }
        {
            float sk = X->sinks[h], ms = 1.0f, vs = 1.0f;
            if (sk > M) {
                ms = expf(M - sk);
                for (int64_t j = 0; j < D; j++)
                    acc[j] = acc[j] * ms;
            } else {
                vs = expf(sk - M);
            }
            S = S * ms + vs;
        }
        float inv = 1.0f / S;
        for (int64_t j = 0; j < D; j++)
            acc[j] = acc[j] * inv;
        ds4_rope(acc, D, R, (X->ratio ? d->cs_comp : d->cs_plain) + t * R, true);
        int64_t g = h / HG;
        memcpy(d->attg + (g * T + t) * HG * D + (h % HG) * D, acc, (size_t)D * sizeof(float));
    }
}

/* Rows [r0, r1) of attg (G T rows): quantized for the grouped output products. */
static void ds4_rows_quant_attg(fwd_ctx *c, const fwd_phase *ph, int64_t r0, int64_t r1,
                                int thread) {
    const model_hparams *hp = &c->m->hp;
    ds4_ctx *d = c->arch_ctx;
    fwd_quantize_rows(c, d->attg, hp->n_head / hp->o_groups * hp->head_dim, r0, r1);
}

/* Rows [t0, t1): the groups' low-rank outputs side by side (oa), quantized if wanted. */
static void ds4_rows_oa(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    ds4_ctx *d = c->arch_ctx;
    int64_t G = hp->o_groups, O = hp->o_lora, T = c->n_tok;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t g = 0; g < G; g++)
            memcpy(d->oa + (t * G + g) * O, d->oag + (g * T + t) * O, (size_t)O * sizeof(float));
    if (ph->quant)
        fwd_quantize_rows(c, d->oa, G * O, t0, t1);
}

/* One block over the step's rows: KV layer l, tensors L / X, its compression `ratio` (0 for an
 * MTP block); embed: the streams start as the tokens' embeddings (layer 0; otherwise hs2 holds
 * the normed streams); head: the output head's mixing follows (the last layer's X), or next:
 * the next block's mixing product (for its quantization). */
static void ds4_forward_block(fwd_ctx *c, int64_t l, const model_layer *L, const ds4_layer *X,
                              int64_t ratio, bool embed, const ds4_layer *head,
                              const kn_mat *next) {
    const model_hparams *hp = &c->m->hp;
    ds4_ctx *d = c->arch_ctx;
    int64_t T = c->n_tok, E = hp->n_embd, hc = hp->hc_mult, W = hc * E, D = hp->head_dim;
    int64_t H = hp->n_head, G = hp->o_groups, O = hp->o_lora, QL = hp->n_lora_q;
    int64_t ID = hp->indexer_head_dim, IH = hp->indexer_n_head;
    ds4_arg a = {.layer = l, .L = L, .X = X, .ratio = ratio, .which = 0};
    /* the attention's stream mixing */
    if (embed) {
        fwd_phase ph = {.c = c,
                        .fn = ds4_rows_hc_norm,
                        .layer = l,
                        .units = T,
                        .embed = true,
                        .quant = kn_mat_wants_q8(X->hc_fn[0]),
                        .arg = &a};
        fwd_phase_run(c, &ph, 4 * W);
    }
    fwd_mm mm = {.w = X->hc_fn[0], .x = d->hs2, .y = d->mix, .rows = T};
    fwd_phase_matmul(c, 1, &mm);
    a.quant = kn_mat_wants_q8(X->wq_a) || kn_mat_wants_q8(X->wkv) ||
              (X->c_wkv && (kn_mat_wants_q8(X->c_wkv) || kn_mat_wants_q8(X->c_wgate))) ||
              (X->i_proj && (kn_mat_wants_q8(X->i_proj) || kn_mat_wants_q8(X->i_wkv) ||
                             kn_mat_wants_q8(X->i_wgate)));
    fwd_phase_rows(c, ds4_rows_hc_pre, l, T, 8 * W + 64 * hc * hc * hp->hc_sinkhorn_iters, a.quant,
                   &a);
    /* the products of the normed input */
    fwd_mm *p = d->mm;
    int n = 0;
    p[n++] = (fwd_mm){.w = X->wq_a, .x = c->xn, .y = d->qr, .rows = T};
    p[n++] = (fwd_mm){.w = X->wkv, .x = c->xn, .y = d->kv, .rows = T};
    if (ratio) {
        p[n++] = (fwd_mm){.w = X->c_wkv, .x = c->xn, .y = d->ckv, .rows = T};
        p[n++] = (fwd_mm){.w = X->c_wgate, .x = c->xn, .y = d->csc, .rows = T};
    }
    if (ratio == 4) {
        p[n++] = (fwd_mm){.w = X->i_wkv, .x = c->xn, .y = d->ikv, .rows = T};
        p[n++] = (fwd_mm){.w = X->i_wgate, .x = c->xn, .y = d->isc, .rows = T};
        p[n++] = (fwd_mm){.w = X->i_proj, .x = c->xn, .y = d->iw, .rows = T};
    }
    fwd_phase_matmul(c, n, p);
    /* the compressor's products have a row stride of their width: spread them for the state */
    if (ratio == 128)
        for (int64_t t = T - 1; t >= 0; t--) {
            memmove(d->ckv + t * 2 * D, d->ckv + t * D, (size_t)D * sizeof(float));
            memmove(d->csc + t * 2 * D, d->csc + t * D, (size_t)D * sizeof(float));
        }
    a.quant = kn_mat_wants_q8(X->wq_b) || (X->i_q_b && kn_mat_wants_q8(X->i_q_b));
    fwd_phase_rows(c, ds4_rows_kv, l, T, 16 * D + 8 * QL, a.quant, &a);
    n = 0;
    p[n++] = (fwd_mm){.w = X->wq_b, .x = d->qr, .y = d->q, .rows = T};
    if (ratio == 4)
        p[n++] = (fwd_mm){.w = X->i_q_b, .x = d->qr, .y = d->iq, .rows = T};
    fwd_phase_matmul(c, n, p);
    fwd_phase_rows(c, ds4_rows_q, l, T, 8 * H * D + 4 * IH * ID + 64 * D, false, &a);
    if (ratio == 4) {
        int64_t mean = (c->tok_pos[T / 2] + 1) / 4 + 1;
        fwd_phase ph = {
            .c = c, .fn = ds4_rows_select, .layer = l, .units = T, .uneven = true, .arg = &a};
        fwd_phase_run(c, &ph, 2 * mean * IH * ID);
    }
    {
        int64_t per = hp->sliding_window + hp->indexer_top_k + 1;
        fwd_phase ph = {
            .c = c, .fn = ds4_rows_attn, .layer = l, .units = T * H, .uneven = true, .arg = &a};
        fwd_phase_run(c, &ph, 8 * per * D);
    }
    /* grouped low-rank output */
    int64_t K1 = H / G * D;
    if (kn_mat_wants_q8(X->wo_a[0]))
        fwd_phase_rows(c, ds4_rows_quant_attg, l, G * T, 4 * K1, false, NULL);
    for (int64_t g = 0; g < G; g++)
        p[g] = (fwd_mm){.w = X->wo_a[g], .x = d->attg, .y = d->oag, .row0 = g * T, .rows = T};
    fwd_phase_matmul(c, (int)G, p);
    fwd_phase_rows(c, ds4_rows_oa, l, T, 2 * G * O, kn_mat_wants_q8(X->wo_b), NULL);
    mm = (fwd_mm){.w = X->wo_b, .x = d->oa, .y = d->ao, .rows = T};
    fwd_phase_matmul(c, 1, &mm);
    /* mixed back, and the FFN's mixing */
    a.quant = kn_mat_wants_q8(X->hc_fn[1]);
    fwd_phase_rows(c, ds4_rows_hc_post, l, T, 4 * W * hc, a.quant, &a);
    mm = (fwd_mm){.w = X->hc_fn[1], .x = d->hs2, .y = d->mix, .rows = T};
    fwd_phase_matmul(c, 1, &mm);
    a.which = 1;
    fwd_phase_rows(c, ds4_rows_hc_pre, l, T, 8 * W + 64 * hc * hc * hp->hc_sinkhorn_iters, false,
                   &a);
    moe_forward_ffn_layer(c, l, L);
    a.quant = kn_mat_wants_q8(head ? head->head_fn : next);
    fwd_phase_rows(c, ds4_rows_hc_post, l, T, 4 * W * hc, a.quant, &a);
    if (head) {
        mm = (fwd_mm){.w = head->head_fn, .x = d->hs2, .y = d->mix, .rows = T};
        fwd_phase_matmul(c, 1, &mm);
        fwd_phase_rows(c, ds4_rows_head, l, T, 2 * W, false, head);
    }
}

static void ds4_forward_layer(fwd_ctx *c, int64_t l) {
    const model *m = c->m;
    const model_layer *L = &m->layers[l];
    const ds4_layer *X = L->ext;
    bool last = l == m->hp.n_layer - 1;
    ds4_forward_block(c, l, L, X, X->ratio, l == 0, last ? X : NULL,
                      last ? NULL : ((const ds4_layer *)m->layers[l + 1].ext)->hc_fn[0]);
}

/* ---- multi-token prediction ---- */

/* Rows [t0, t1) of an MTP step: the RoPE angles, and the projection's inputs: per stream s,
 * [rmsnorm(embedding of the token) enorm, rmsnorm(stream s of the previous hidden) hnorm]. */
static void ds4_rows_mtp_in(fwd_ctx *c, const fwd_phase *ph, int64_t t0, int64_t t1, int thread) {
    const model_hparams *hp = &c->m->hp;
    const ds4_mtp *mt = ph->arg;
    ds4_ctx *d = c->arch_ctx;
    int64_t E = hp->n_embd, hc = hp->hc_mult, W = hc * E;
    const gguf_tensor *emb = mt->embed ? mt->embed : c->m->tok_embd;
    float *e = d->tmp[thread];
    for (int64_t t = t0; t < t1; t++) {
        ds4_cs(d->th_plain, hp->n_rot / 2, (double)c->tok_pos[t], d->cs_plain + t * hp->n_rot);
        ds4_cs(d->th_comp, hp->n_rot / 2, (double)c->tok_pos[t], d->cs_comp + t * hp->n_rot);
        kn_dequantize_row(emb->type, emb->data, c->tok_id[t], E, e);
        ds4_rmsnorm(e, mt->enorm, hp->rms_eps, E, e);
        for (int64_t h = 0; h < hc; h++) {
            float *row = d->cat + (t * hc + h) * 2 * E;
            memcpy(row, e, (size_t)E * sizeof(float));
            ds4_rmsnorm(c->mtp_h + t * W + h * E, mt->hnorm, hp->rms_eps, E, row + E);
        }
    }
    if (ph->quant)
        fwd_quantize_rows(c, d->cat, 2 * E, t0 * hc, t1 * hc);
}

/* An MTP step (fwd_run_mtp): the projection into streams, the first MTP block (raw attention over
 * its own K rows in the pool's layer n_layer), the model's head mixing, and its own head if any. */
static void ds4_mtp_forward(fwd_ctx *c) {
    const model *m = c->m;
    const model_hparams *hp = &m->hp;
    const ds4_layer *last = m->layers[hp->n_layer - 1].ext;
    const ds4_mtp *mt = &last->mtp[0];
    ds4_ctx *d = c->arch_ctx;
    int64_t T = c->n_tok, E = hp->n_embd, hc = hp->hc_mult;
    fwd_phase_rows(c, ds4_rows_mtp_in, hp->n_layer, T, 8 * hc * E, kn_mat_wants_q8(mt->eh_proj),
                   mt);
    fwd_mm mm = {.w = mt->eh_proj, .x = d->cat, .y = d->hs, .rows = T * hc};
    fwd_phase_matmul(c, 1, &mm);
    const ds4_layer *X = mt->L.ext;
    ds4_arg a = {.layer = hp->n_layer, .L = &mt->L, .X = X};
    fwd_phase ph = {.c = c,
                    .fn = ds4_rows_hc_norm,
                    .layer = hp->n_layer,
                    .units = T,
                    .quant = kn_mat_wants_q8(X->hc_fn[0]),
                    .arg = &a};
    fwd_phase_run(c, &ph, 4 * hc * E);
    ds4_forward_block(c, hp->n_layer, &mt->L, X, 0, false, last, NULL);
    c->out_norm_w = mt->head_norm;
    c->out_w = mt->head;
}

static const float *ds4_hidden(const fwd_ctx *c, int64_t row, int64_t *width) {
    const ds4_ctx *d = c->arch_ctx;
    int64_t W = c->m->hp.hc_mult * c->m->hp.n_embd;
    *width = W;
    return d->hs + row * W;
}

const model_arch arch_deepseek4 = {
    .name = "deepseek4",
    .read_hparams = ds4_read_hparams,
    .bind_layer = ds4_bind_layer,
    .kv_dim = ds4_kv_dim,
    .kv_layout = ds4_kv_layout,
    .forward_layer = ds4_forward_layer,
    .free_layer = ds4_free_layer,
    .ctx_create = ds4_ctx_create,
    .ctx_destroy = ds4_ctx_destroy,
    .ctx_act = ds4_ctx_act,
    .mtp_forward = ds4_mtp_forward,
    .hidden = ds4_hidden,
};
