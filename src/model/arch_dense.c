/* SPDX-License-Identifier: MIT */
/*
 * arch_dense: the dense transformer the llama family shares (llama, qwen2, qwen3, and the
 * attention of qwen3moe): its hyper-parameters, the binding of a layer's attention and SwiGLU FFN,
 * and their forward phases. The architectures (arch_llama.c, ...) are rows that pick the parts
 * and the variants (RoPE pairs, Q/K/V biases, per-head Q/K norms).
 *
 * Forward, per layer: residual fold + attn_norm (+ quantize) | Q, K, V | biases, Q/K norms, RoPE,
 * K/V store | attention | quantize | output projection | residual fold + ffn_norm (+ quantize) |
 * gate, up | SwiGLU (+ quantize) | down. Invariance (forward.h): every phase computes per token
 * row, per output column (matmul), or per (token, KV head, query-head slice) over absolute
 * positions (attention), so a value never depends on the batch, the chunking or the threads.
 */
#include "base/err.h"
#include "model/forward_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hyper-parameters ---- */

/* Llama 3.1 RoPE scaling from metadata (the same factors llama.cpp's converter stores as the
 * rope_freqs tensor): wavelengths shorter than original_context / high_freq_factor keep their
 * frequency, longer than original_context / low_freq_factor are divided by `factor`, and the band
 * between is interpolated. Computed in double, once, at load. */
static int arch_dense_llama3_factors(model *m, float factor) {
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;
    float lo, hi;
    int64_t orig;
    int rc;
    if ((rc = model_read_f32(m, "rope.scaling.low_freq_factor", 1.0f, &lo)) ||
        (rc = model_read_f32(m, "rope.scaling.high_freq_factor", 4.0f, &hi)) ||
        (rc = model_read_int(m, "rope.scaling.original_context_length", false, 8192, &orig)))
        return rc;
    if (!(lo > 0) || !(hi > lo) || orig <= 0)
        return err_set(ERR_FORMAT,
                       "%s: llama3 rope scaling: low %g, high %g, original context %lld "
                       "are inconsistent",
                       gguf_path(g), lo, hi, (long long)orig);
    int64_t half = hp->n_rot / 2;
    free(m->rope_factors);
    m->rope_factors = malloc((size_t)half * sizeof(float));
    if (!m->rope_factors)
        return err_set(ERR_NOMEM, "out of memory");
    double lo_wl = (double)orig / lo, hi_wl = (double)orig / hi;
    for (int64_t i = 0; i < half; i++) {
        double freq = pow((double)hp->rope_base, -2.0 * (double)i / (double)hp->n_rot);
        double wl = 2.0 * 3.14159265358979323846 / freq;
        double f;
        if (wl < hi_wl)
            f = 1.0;
        else if (wl > lo_wl)
            f = factor;
        else {
            double smooth = ((double)orig / wl - lo) / (hi - lo);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        m->rope_factors[i] = (float)f;
    }
    hp->rope_has_factors = true;
    return 0;
}

int arch_dense_read_sizes(model *m, bool ff_required) {
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;
    int rc;
    if ((rc = model_read_int(m, "embedding_length", true, 0, &hp->n_embd)) ||
        (rc = model_read_int(m, "block_count", true, 0, &hp->n_layer)) ||
        (rc = model_read_int(m, "feed_forward_length", ff_required, 0, &hp->n_ff)) ||
        (rc = model_read_int(m, "attention.head_count", true, 0, &hp->n_head)) ||
        (rc = model_read_int(m, "context_length", false, 2048, &hp->n_ctx_train)))
        return rc;
    if ((rc = model_read_int(m, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv)))
        return rc;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || (ff_required && hp->n_ff <= 0) || hp->n_head <= 0 ||
        hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0 || hp->n_ctx_train <= 0)
        return err_set(ERR_FORMAT,
                       "%s: inconsistent hyper-parameters (embd %lld, layers %lld, ff %lld, heads "
                       "%lld, kv heads %lld, context %lld)",
                       gguf_path(g), (long long)hp->n_embd, (long long)hp->n_layer,
                       (long long)hp->n_ff, (long long)hp->n_head, (long long)hp->n_head_kv,
                       (long long)hp->n_ctx_train);
    return 0;
}

/* YaRN (llama.cpp's rope_yarn with ext_factor 1): per RoPE pair i, the angle per position is the
 * interpolated frequency freq_scale * base^(-2i/n_rot) blended with the original one by a ramp
 * over the pairs between the correction dimensions of beta_fast and beta_slow; computed in
 * double, once, at load. cos and sin are not scaled (the architectures that take YaRN cancel
 * its magnitude correction there and scale the attention instead). */
static int arch_dense_yarn(model *m, float factor) {
    model_hparams *hp = &m->hp;
    float beta_fast, beta_slow, ext;
    int rc;
    if ((rc = model_read_int(m, "rope.scaling.original_context_length", false, hp->n_ctx_train,
                             &hp->n_ctx_orig)) ||
        (rc = model_read_f32(m, "rope.scaling.yarn_beta_fast", 32.0f, &beta_fast)) ||
        (rc = model_read_f32(m, "rope.scaling.yarn_beta_slow", 1.0f, &beta_slow)) ||
        (rc = model_read_f32(m, "rope.scaling.yarn_ext_factor", -1.0f, &ext)) ||
        (rc = model_read_f32(m, "rope.scaling.yarn_log_multiplier", 0.0f, &hp->yarn_log_mul)))
        return rc;
    if (ext < 0.0f)
        ext = 1.0f;
    if (hp->n_ctx_orig <= 0 || !(beta_fast > 0) || !(beta_slow > 0))
        return err_set(ERR_FORMAT,
                       "%s: yarn: original context %lld, beta fast %g / slow %g invalid",
                       gguf_path(m->g), (long long)hp->n_ctx_orig, beta_fast, beta_slow);
    int64_t half = hp->n_rot / 2;
    double n = (double)hp->n_rot, base = hp->rope_base, pi = 3.14159265358979323846;
    /* the pair index where the rotation count over the original context is beta */
    double lo = floor(n * log((double)hp->n_ctx_orig / (beta_fast * 2 * pi)) / (2 * log(base)));
    double hi = ceil(n * log((double)hp->n_ctx_orig / (beta_slow * 2 * pi)) / (2 * log(base)));
    lo = lo > 0 ? lo : 0;
    hi = hi < n - 1 ? hi : n - 1;
    m->rope_theta = malloc((size_t)half * sizeof(double));
    if (!m->rope_theta)
        return err_set(ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < half; i++) {
        double extrap = pow(base, -2.0 * (double)i / n), interp = extrap / (double)factor;
        double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
        double ramp = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * (double)ext;
        m->rope_theta[i] = interp * (1.0 - ramp) + extrap * ramp;
    }
    hp->rope_freq_scale = 1.0f / factor;
    hp->rope_yarn = true;
    return 0;
}

int arch_dense_read_rope(model *m, bool yarn) {
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;
    int rc;
    if ((rc = model_read_f32(m, "rope.freq_base", 10000.0f, &hp->rope_base)) ||
        (rc = model_read_f32(m, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps)))
        return rc;
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    gguf_str st;
    if (gguf_get_str(g, key, &st) == 0 && !gguf_str_eq(st, "none")) {
        float factor;
        if ((rc = model_read_f32(m, "rope.scaling.factor", 1.0f, &factor)))
            return rc;
        if (!(factor > 0))
            return err_set(ERR_FORMAT, "%s: rope.scaling.factor %g invalid", gguf_path(g), factor);
        if (gguf_str_eq(st, "linear")) {
            hp->rope_freq_scale = 1.0f / factor;
        } else if (gguf_str_eq(st, "llama3")) {
            if ((rc = arch_dense_llama3_factors(m, factor)))
                return rc;
        } else if (yarn && gguf_str_eq(st, "yarn")) {
            if ((rc = arch_dense_yarn(m, factor)))
                return rc;
        } else {
            return err_set(ERR_UNSUPPORTED,
                           "%s: rope scaling type '%.*s' is not supported for %s (linear, "
                           "llama3%s)",
                           gguf_path(g), (int)st.len, st.s, hp->arch_name, yarn ? ", yarn" : "");
        }
    }
    if ((rc = model_read_int(m, "attention.sliding_window", false, 0, &hp->sliding_window)))
        return rc;
    hp->rope_neox = false;
    if (!(hp->rms_eps > 0) || !(hp->rope_base > 0))
        return err_set(ERR_FORMAT, "%s: rms epsilon %g / rope base %g invalid", gguf_path(g),
                       hp->rms_eps, hp->rope_base);
    return 0;
}

int arch_dense_read_hparams(model *m, bool ff_required) {
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;
    int rc = arch_dense_read_sizes(m, ff_required);
    if (rc)
        return rc;
    int64_t def_hd = hp->n_embd / hp->n_head;
    if ((rc = model_read_int(m, "attention.key_length", false, def_hd, &hp->head_dim)))
        return rc;
    int64_t vlen;
    if ((rc = model_read_int(m, "attention.value_length", false, hp->head_dim, &vlen)))
        return rc;
    if (vlen != hp->head_dim || hp->head_dim <= 0 || hp->head_dim > 512)
        return err_set(ERR_UNSUPPORTED, "%s: head size %lld (value %lld) is not supported",
                       gguf_path(g), (long long)hp->head_dim, (long long)vlen);
    if ((rc = model_read_int(m, "rope.dimension_count", false, hp->head_dim, &hp->n_rot)))
        return rc;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return err_set(ERR_FORMAT, "%s: rope.dimension_count %lld invalid for head size %lld",
                       gguf_path(g), (long long)hp->n_rot, (long long)hp->head_dim);
    return arch_dense_read_rope(m, false);
}

int64_t arch_dense_kv_dim(const model_hparams *hp) {
    return hp->n_head_kv * hp->head_dim;
}

/* ---- binding ---- */

int arch_dense_bind_attn(model *m, int64_t l, bool biases, bool qk_norm) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->layers[l];
    int64_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char n[96];
    int rc;
    if ((rc = model_bind_mat(m, model_layer_name(n, l, "attn_q.weight"), hp->n_embd, q_dim, true,
                             1.0, &L->wq)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_k.weight"), hp->n_embd, kv_dim, true,
                             1.0, &L->wk)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_v.weight"), hp->n_embd, kv_dim, true,
                             1.0, &L->wv)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "attn_output.weight"), q_dim, hp->n_embd,
                             true, 1.0, &L->wo)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_norm.weight"), hp->n_embd, true,
                             &L->attn_norm)))
        return rc;
    if ((rc = model_bind_vec(m, model_layer_name(n, l, "attn_q.bias"), q_dim, biases, &L->bq)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_k.bias"), kv_dim, biases, &L->bk)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_v.bias"), kv_dim, biases, &L->bv)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_q_norm.weight"), hp->head_dim, qk_norm,
                             &L->q_norm)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "attn_k_norm.weight"), hp->head_dim, qk_norm,
                             &L->k_norm)))
        return rc;
    /* the forward pass adds the three biases together */
    if (!L->bq != !L->bk || !L->bq != !L->bv)
        return err_set(ERR_FORMAT, "%s: layer %lld has some of attn_q/k/v.bias but not all three",
                       gguf_path(m->g), (long long)l);
    return 0;
}

int arch_dense_bind_ffn(model *m, int64_t l) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->layers[l];
    char n[96];
    int rc;
    if ((rc = model_bind_mat(m, model_layer_name(n, l, "ffn_gate.weight"), hp->n_embd, hp->n_ff,
                             true, 1.0, &L->w_gate)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "ffn_up.weight"), hp->n_embd, hp->n_ff, true,
                             1.0, &L->w_up)) ||
        (rc = model_bind_mat(m, model_layer_name(n, l, "ffn_down.weight"), hp->n_ff, hp->n_embd,
                             true, 1.0, &L->w_down)) ||
        (rc = model_bind_vec(m, model_layer_name(n, l, "ffn_norm.weight"), hp->n_embd, true,
                             &L->ffn_norm)))
        return rc;
    return 0;
}

/* ---- forward ---- */

/* Biases, per-head Q/K norms, RoPE, and the K/V write into the pool, for rows [r0, r1). */
static void arch_dense_rows_qkv_post(fwd_ctx *c, const fwd_phase *ph, int64_t r0, int64_t r1,
                                     int thread) {
    const model_hparams *hp = &c->m->hp;
    const model_layer *L = &c->m->layers[ph->layer];
    int64_t hd = hp->head_dim, bs = kv_pool_block_size(c->kv);
    bool f16 = kv_pool_f16(c->kv);
    size_t esz = f16 ? 2 : 4, bb = kv_pool_kv_stride(c->kv);
    char *kb = kv_pool_k_base(c->kv, ph->layer), *vb = kv_pool_v_base(c->kv, ph->layer);
    for (int64_t t = r0; t < r1; t++) {
        float *q = c->q + t * c->q_dim, *k = c->k + t * c->kv_dim, *v = c->v + t * c->kv_dim;
        if (L->bq) {
            kn_add(q, L->bq, c->q_dim);
            kn_add(k, L->bk, c->kv_dim);
            kn_add(v, L->bv, c->kv_dim);
        }
        const float *cs = c->rope + t * hp->n_rot;
        for (int64_t h = 0; h < hp->n_head; h++) {
            if (L->q_norm)
                kn_rmsnorm(q + h * hd, L->q_norm, hp->rms_eps, hd, q + h * hd, c->m->isa);
            kn_rope(q + h * hd, hp->n_rot, cs, hp->rope_neox);
        }
        for (int64_t h = 0; h < hp->n_head_kv; h++) {
            if (L->k_norm)
                kn_rmsnorm(k + h * hd, L->k_norm, hp->rms_eps, hd, k + h * hd, c->m->isa);
            kn_rope(k + h * hd, hp->n_rot, cs, hp->rope_neox);
        }
        const fwd_seq *s = &c->b->seqs[c->tok_seq[t]];
        int64_t p = c->tok_pos[t];
        size_t off = (size_t)s->blocks[p / bs] * bb + (size_t)((p % bs) * c->kv_dim) * esz;
        kn_store_kv(kb + off, k, c->kv_dim, f16, c->m->isa);
        kn_store_kv(vb + off, v, c->kv_dim, f16, c->m->isa);
    }
}

typedef struct arch_dense_attn {
    float scale;
    bool v_is_k;
} arch_dense_attn;

/* Attention units [p0, p1): unit u is token u / units_per_token, kv head kvh and the
 * attn_per_unit-head slice s of its query heads (see fwd_step). */
static void arch_dense_rows_attention(fwd_ctx *c, const fwd_phase *ph, int64_t p0, int64_t p1,
                                      int thread) {
    const model_hparams *hp = &c->m->hp;
    const arch_dense_attn *opt = ph->arg;
    int64_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv, per = c->attn_per_unit;
    int64_t slices = (group + per - 1) / per, units_tok = hp->n_head_kv * slices;
    float scale = opt->scale;
    kn_attn_kv kv = {.k_base = kv_pool_k_base(c->kv, ph->layer),
                     .v_base = opt->v_is_k ? kv_pool_k_base(c->kv, ph->layer)
                                           : kv_pool_v_base(c->kv, ph->layer),
                     .block_bytes = kv_pool_kv_stride(c->kv),
                     .block_size = kv_pool_block_size(c->kv),
                     .kv_stride = c->kv_dim,
                     .f16 = kv_pool_f16(c->kv),
                     .window = hp->sliding_window,
                     .prefetch = c->attn_prefetch,
                     .v_once = c->attn_v_once};
    for (int64_t pi = p0; pi < p1; pi++) {
        int64_t t = pi / units_tok, kvh = pi % units_tok / slices, s = pi % slices;
        int64_t h = kvh * group + s * per, g = group - s * per < per ? group - s * per : per;
        kv.table = c->b->seqs[c->tok_seq[t]].blocks;
        if (c->fault_attn_offsets && c->b->n_seqs > 1 &&
            c->b->seqs[0].n_blocks * kv.block_size > c->tok_pos[t])
            kv.table = c->b->seqs[0].blocks; /* FAULT (b): the first sequence's block table */
        /* the next unit this thread most likely runs, whose first keys are prefetched */
        int64_t pn = pi + 1 < p1 ? pi + 1 : c->chunk_next_unit[thread];
        kv.next_table = NULL;
        if (pn >= 0 && pn < ph->units) {
            int64_t tn = pn / units_tok;
            kv.next_table = c->b->seqs[c->tok_seq[tn]].blocks;
            kv.next_kvh = pn % units_tok / slices;
            kv.next_n_pos = (int64_t)c->tok_pos[tn] + 1;
        }
        const float *q = c->q + t * c->q_dim + h * hd;
        float *o = c->att + t * c->q_dim + h * hd;
        int64_t n_pos = (int64_t)c->tok_pos[t] + 1;
        if (c->attn_per_row)
            kn_attn_row(q, &kv, kvh, hd, n_pos, scale, c->attn_chunk, c->attn_scratch[thread], o,
                        c->m->isa);
        else
            kn_attn_rows(q, g, &kv, kvh, hd, n_pos, scale, c->attn_chunk, c->attn_scratch[thread],
                         o, c->m->isa);
    }
}

static void arch_dense_rows_att_quant(fwd_ctx *c, const fwd_phase *ph, int64_t r0, int64_t r1,
                                      int thread) {
    fwd_quantize_rows(c, c->att, c->q_dim, r0, r1);
}

static void arch_dense_rows_swiglu(fwd_ctx *c, const fwd_phase *ph, int64_t r0, int64_t r1,
                                   int thread) {
    int64_t FF = c->m->hp.n_ff;
    for (int64_t t = r0; t < r1; t++)
        kn_swiglu(c->g + t * FF, c->u + t * FF, FF, c->g + t * FF, c->m->isa);
    if (ph->quant)
        fwd_quantize_rows(c, c->g, FF, r0, r1);
}

void arch_dense_phase_attention(fwd_ctx *c, int64_t l, float scale, bool v_is_k) {
    const model_hparams *hp = &c->m->hp;
    int64_t T = c->n_tok;
    arch_dense_attn opt = {.scale = scale, .v_is_k = v_is_k};
    /* a unit's work grows with its position; the mean is a fine guess for chunking */
    int64_t mean_pos = c->tok_pos[T / 2] + 1, per = c->attn_per_unit;
    int64_t units = T * hp->n_head_kv * ((hp->n_head / hp->n_head_kv + per - 1) / per);
    fwd_phase ph = {.c = c,
                    .fn = arch_dense_rows_attention,
                    .layer = l,
                    .units = units,
                    .uneven = true,
                    .arg = &opt};
    fwd_phase_run(c, &ph, 2 * mean_pos * hp->head_dim * per);
}

/* Layer l's Q, K and V products (over the step's tokens). */
static void arch_dense_mm_qkv(fwd_ctx *c, int64_t l, fwd_mm qkv[3]) {
    const model_layer *L = &c->m->layers[l];
    int64_t T = c->n_tok;
    qkv[0] = (fwd_mm){.w = L->wq, .x = c->xn, .y = c->q, .rows = T};
    qkv[1] = (fwd_mm){.w = L->wk, .x = c->xn, .y = c->k, .rows = T};
    qkv[2] = (fwd_mm){.w = L->wv, .x = c->xn, .y = c->v, .rows = T};
}
/* Layer l's gate and up products. */
static void arch_dense_mm_gu(fwd_ctx *c, int64_t l, fwd_mm gu[2]) {
    const model_layer *L = &c->m->layers[l];
    int64_t T = c->n_tok;
    gu[0] = (fwd_mm){.w = L->w_gate, .x = c->xn, .y = c->g, .rows = T};
    gu[1] = (fwd_mm){.w = L->w_up, .x = c->xn, .y = c->u, .rows = T};
}

/* arch_dense_forward_attn, and the n_next products of the matmul phase after its output
 * projection (or none), warmed from that projection's last chunks on. Each matmul phase's
 * weights are warmed by the threads that wait before it (mm-warm, fwd_warm_matmul). */
static void arch_dense_attn_block(fwd_ctx *c, int64_t l, int n_next, fwd_mm *next) {
    const model_hparams *hp = &c->m->hp;
    const model_layer *L = &c->m->layers[l];
    int64_t T = c->n_tok;
    fwd_mm qkv[3];
    arch_dense_mm_qkv(c, l, qkv);
    fwd_mm o = {.w = L->wo, .x = c->att, .y = c->y, .rows = T};
    fwd_warm_matmul(c, 3, qkv); /* unless the layer before has already */
    /* Q, K and V share their input: quantize it if any of them needs it (mixed-type files, e.g.
     * Q4_K_M, give attn_v another type than attn_q) */
    fwd_phase_residual_norm(c, l, L->attn_norm, l == 0,
                            kn_mat_wants_q8(L->wq) || kn_mat_wants_q8(L->wk) ||
                                kn_mat_wants_q8(L->wv));
    fwd_warm_matmul(c, 1, &o);
    fwd_phase_matmul(c, 3, qkv);
    fwd_phase_rows(c, arch_dense_rows_qkv_post, l, T, 4 * (c->q_dim + c->kv_dim), false, NULL);
    arch_dense_phase_attention(c, l, 1.0f / sqrtf((float)hp->head_dim), false);
    if (kn_mat_wants_q8(L->wo))
        fwd_phase_rows(c, arch_dense_rows_att_quant, l, T, 2 * c->q_dim, false, NULL);
    if (n_next)
        fwd_warm_matmul(c, n_next, next);
    fwd_phase_matmul(c, 1, &o);
}

/* arch_dense_forward_ffn, with n_next products warmed from the down projection's last chunks. */
static void arch_dense_ffn_block(fwd_ctx *c, int64_t l, int n_next, fwd_mm *next) {
    const model_layer *L = &c->m->layers[l];
    int64_t T = c->n_tok;
    fwd_mm gu[2];
    arch_dense_mm_gu(c, l, gu);
    fwd_mm d = {.w = L->w_down, .x = c->g, .y = c->y, .rows = T};
    fwd_warm_matmul(c, 2, gu); /* unless the attention before has already */
    fwd_phase_residual_norm(c, l, L->ffn_norm, false,
                            kn_mat_wants_q8(L->w_gate) || kn_mat_wants_q8(L->w_up));
    fwd_warm_matmul(c, 1, &d);
    fwd_phase_matmul(c, 2, gu);
    fwd_phase_rows(c, arch_dense_rows_swiglu, l, T, 8 * c->m->hp.n_ff, kn_mat_wants_q8(L->w_down),
                   NULL);
    if (n_next)
        fwd_warm_matmul(c, n_next, next);
    fwd_phase_matmul(c, 1, &d);
}

void arch_dense_forward_attn(fwd_ctx *c, int64_t l) {
    arch_dense_attn_block(c, l, 0, NULL);
}

void arch_dense_forward_ffn(fwd_ctx *c, int64_t l) {
    arch_dense_ffn_block(c, l, 0, NULL);
}

void arch_dense_forward_layer(fwd_ctx *c, int64_t l) {
    /* every layer is this function's (model_arch.forward_layer): the next products are known */
    fwd_mm gu[2], qkv[3];
    arch_dense_mm_gu(c, l, gu);
    arch_dense_attn_block(c, l, 2, gu);
    bool more = l + 1 < c->m->hp.n_layer;
    if (more)
        arch_dense_mm_qkv(c, l + 1, qkv);
    arch_dense_ffn_block(c, l, more ? 3 : 0, qkv);
}
