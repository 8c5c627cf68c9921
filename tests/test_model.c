/* SPDX-License-Identifier: MIT */
/*
 * Model tests:
 *  - a float64 naive reference forward (this file only) against the optimised forward on tiny
 *    synthetic models of every weight type and architecture (K-quants and the Q4_K_M mix on the
 *    "small" shape, whose rows are multiples of 256), within per-type tolerances justified
 *    below; the mixture-of-experts FFN (qwen3moe) by its definition: softmax router, top-k,
 *    renormalised weights, SwiGLU experts;
 *  - invariance at the forward level: each (sequence, position)'s logits are memcmp-identical
 *    whether computed alone token by token, in one prefill, in chunks of 1/3/16, beside other
 *    sequences in any order, with 1 or 2 threads, with any physical KV block placement, and on
 *    every instruction set.
 */
#include "test.h"
#include "test_fwd_env.h"
#include "test_isa.h"
#include "base/err.h"
#include "base/flags.h"
#include "gguf/gguf.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/forward_int.h"
#include "model/model.h"
#include "model/model_int.h"
#include "model/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TYPE_Q4_K_M: the q4_k_m mix (synth_opts.mix) in the type lists below */
#define TYPE_Q4_K_M 1000

static const char *type_label(int type) {
    return type == TYPE_Q4_K_M ? "q4_k_m" : kn_type_name(type);
}

/* K-quant types need rows that are multiples of 256: they use the "small" shape (tiny's rows
 * would all fall back to Q5_0 / Q5_1 / Q8_0). rope_scaling and window select the RoPE-scaling
 * and sliding-window variants (synth.h). */
/* shape NULL: tiny, or small for K-quant types (their rows must be multiples of 256) */
static const char *synth_shaped(const char *shape, const char *arch, int type, bool tied,
                                uint64_t seed, const char *rope_scaling, int64_t window) {
    static char path[512];
    bool k = type == TYPE_Q4_K_M || kn_type_block_size(type) == 256;
    if (!shape)
        shape = k ? "small" : "tiny";
    snprintf(path, sizeof path, "%s/%s-%s-%s-%d-%llu-%s-%lld.gguf", test_tmpdir(), shape, arch,
             type_label(type), tied, (unsigned long long)seed, rope_scaling ? rope_scaling : "none",
             (long long)window);
    synth_opts o = {.shape = shape,
                    .arch = arch,
                    .type = type,
                    .seed = seed,
                    .tied = tied,
                    .tied_set = true,
                    .mix = type == TYPE_Q4_K_M,
                    .rope_scaling = rope_scaling,
                    .sliding_window = window};
    int rc = synth_write(&o, path);
    if (rc)
        test_fail(__FILE__, __LINE__, "synth: %s", err_detail());
    return path;
}

static const char *synth_variant(const char *arch, int type, bool tied, uint64_t seed,
                                 const char *rope_scaling, int64_t window) {
    return synth_shaped(NULL, arch, type, tied, seed, rope_scaling, window);
}

static const char *synth_path(const char *arch, int type, bool tied, uint64_t seed) {
    return synth_variant(arch, type, tied, seed, NULL, 0);
}

/* ---- float64 reference ---- */

typedef struct ref_model {
    const model *m;
    int64_t D, F, H, HKV, HD, V, L, NROT;
} ref_model;

static double *ref_mat(const kn_mat *w, const model *m, const char *name) {
    (void)w;
    const gguf_tensor *t = gguf_find_tensor(model_get_gguf(m), name);
    int64_t k = t->ne[0], n = t->ne[1];
    double *d = malloc((size_t)(n * k) * sizeof(double));
    float *row = malloc((size_t)k * sizeof(float));
    for (int64_t r = 0; r < n; r++) {
        kn_dequantize_row(t->type, t->data, r, k, row);
        for (int64_t j = 0; j < k; j++)
            d[r * k + j] = row[j];
    }
    free(row);
    return d;
}

/* Expert e's slice [n][k] of the 3-D tensor name, as doubles. */
static double *ref_expert(const model *m, const char *name, int64_t e) {
    const gguf_tensor *t = gguf_find_tensor(model_get_gguf(m), name);
    int64_t k = t->ne[0], n = t->ne[1];
    double *d = malloc((size_t)(n * k) * sizeof(double));
    float *row = malloc((size_t)k * sizeof(float));
    for (int64_t r = 0; r < n; r++) {
        kn_dequantize_row(t->type, t->data, e * n + r, k, row);
        for (int64_t j = 0; j < k; j++)
            d[r * k + j] = row[j];
    }
    free(row);
    return d;
}

static void ref_matvec(const double *w, int64_t n, int64_t k, const double *x, double *y);

/* The MoE FFN of layer l on one normed row xn, into out[D]: softmax gating, the top
 * n_expert_used experts, their weights renormalised (qwen3moe), SwiGLU experts. */
static void ref_moe(const model *m, int64_t l, const double *xn, double *out) {
    const model_hparams *hp = model_get_hparams(m);
    int64_t D = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, F = hp->n_ff_exp;
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%lld.ffn_gate_inp.weight", (long long)l);
    double *wr = ref_mat(NULL, m, nm), p[64], mx = -1e300, den = 0;
    ref_matvec(wr, E, D, xn, p);
    free(wr);
    for (int64_t e = 0; e < E; e++)
        mx = p[e] > mx ? p[e] : mx;
    for (int64_t e = 0; e < E; e++)
        den += (p[e] = exp(p[e] - mx));
    int64_t sel[16];
    double wsum = 0;
    for (int64_t r = 0; r < K; r++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t j = 0; j < r; j++)
                taken = taken || sel[j] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[r] = best;
        wsum += p[best] / den;
    }
    double *g = malloc((size_t)F * 8), *u = malloc((size_t)F * 8), *d = malloc((size_t)D * 8);
    for (int64_t i = 0; i < D; i++)
        out[i] = 0;
    for (int64_t r = 0; r < K; r++) {
        const char *mats[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                               "ffn_down_exps.weight"};
        double *w[3];
        for (int i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)l, mats[i]);
            w[i] = ref_expert(m, nm, sel[r]);
        }
        ref_matvec(w[0], F, D, xn, g);
        ref_matvec(w[1], F, D, xn, u);
        for (int64_t i = 0; i < F; i++)
            g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        ref_matvec(w[2], D, F, g, d);
        double wt = p[sel[r]] / den / wsum;
        for (int64_t i = 0; i < D; i++)
            out[i] += wt * d[i];
        for (int i = 0; i < 3; i++)
            free(w[i]);
    }
    free(g);
    free(u);
    free(d);
}

static void ref_matvec(const double *w, int64_t n, int64_t k, const double *x, double *y) {
    for (int64_t r = 0; r < n; r++) {
        double s = 0;
        for (int64_t j = 0; j < k; j++)
            s += w[r * k + j] * x[j];
        y[r] = s;
    }
}

static void ref_rmsnorm(const double *x, const float *w, int64_t n, double eps, double *y) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * r * (w ? w[i] : 1.0);
}

static const float *ref_factors; /* the model's RoPE frequency factors, or NULL */

static void ref_rope(double *x, int64_t n_rot, int64_t pos, const model_hparams *hp) {
    for (int64_t i = 0; i < n_rot / 2; i++) {
        double th = hp->rope_freq_scale * (double)pos *
                    pow(hp->rope_base, -2.0 * (double)i / (double)n_rot);
        if (ref_factors)
            th /= ref_factors[i];
        int64_t a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + n_rot / 2 : 2 * i + 1;
        double x0 = x[a], x1 = x[b];
        x[a] = x0 * cos(th) - x1 * sin(th);
        x[b] = x0 * sin(th) + x1 * cos(th);
    }
}

/* Logits for every position of one token sequence, in double. kv_f16 rounds cached K/V through
 * F16 as the optimised path does with the f16 KV toggle. */
static double *ref_forward(const model *m, const int32_t *tok, int64_t n, bool kv_f16) {
    const model_hparams *hp = model_get_hparams(m);
    int64_t D = hp->n_embd, F = hp->n_ff, HD = hp->head_dim, QD = hp->n_head * HD;
    int64_t KVD = hp->n_head_kv * HD, V = hp->n_vocab;
    double *x = calloc((size_t)(n * D), 8), *xn = malloc((size_t)D * 8),
           *q = malloc((size_t)QD * 8);
    double *kc = malloc((size_t)(n * KVD) * 8), *vc = malloc((size_t)(n * KVD) * 8);
    double *att = malloc((size_t)QD * 8), *tmp = malloc((size_t)(F > D ? F : D) * 8 + 8);
    double *g = malloc((size_t)F * 8), *u = malloc((size_t)F * 8), *sc = malloc((size_t)n * 8);
    double *logits = malloc((size_t)(n * V) * 8);
    float *row = malloc((size_t)D * 4);
    ref_factors = m->rope_factors;
    int64_t win = hp->sliding_window;
    const gguf_tensor *te = gguf_find_tensor(model_get_gguf(m), "token_embd.weight");
    for (int64_t t = 0; t < n; t++) {
        kn_dequantize_row(te->type, te->data, tok[t], D, row);
        for (int64_t i = 0; i < D; i++)
            x[t * D + i] = row[i];
    }
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        char nm[64];
#define W(s) (snprintf(nm, sizeof nm, "blk.%lld." s, (long long)l), ref_mat(NULL, m, nm))
        double *wq = W("attn_q.weight"), *wk = W("attn_k.weight"), *wv = W("attn_v.weight");
        double *wo = W("attn_output.weight"), *wg = NULL, *wu = NULL, *wd = NULL;
        if (!L->moe) {
            wg = W("ffn_gate.weight");
            wu = W("ffn_up.weight");
            wd = W("ffn_down.weight");
        }
#undef W
        for (int64_t t = 0; t < n; t++) {
            ref_rmsnorm(x + t * D, L->attn_norm, D, hp->rms_eps, xn);
            ref_matvec(wk, KVD, D, xn, kc + t * KVD);
            ref_matvec(wv, KVD, D, xn, vc + t * KVD);
            for (int64_t i = 0; i < KVD; i++) {
                if (L->bk) {
                    kc[t * KVD + i] += L->bk[i];
                    vc[t * KVD + i] += L->bv[i];
                }
            }
            for (int64_t h = 0; h < hp->n_head_kv; h++) {
                if (L->k_norm)
                    ref_rmsnorm(kc + t * KVD + h * HD, L->k_norm, HD, hp->rms_eps,
                                kc + t * KVD + h * HD);
                ref_rope(kc + t * KVD + h * HD, hp->n_rot, t, hp);
            }
            if (kv_f16)
                for (int64_t i = 0; i < KVD; i++) {
                    kc[t * KVD + i] = kn_f16_to_f32(kn_f32_to_f16((float)kc[t * KVD + i]));
                    vc[t * KVD + i] = kn_f16_to_f32(kn_f32_to_f16((float)vc[t * KVD + i]));
                }
        }
        double *xo = malloc((size_t)(n * D) * 8);
        for (int64_t t = 0; t < n; t++) {
            ref_rmsnorm(x + t * D, L->attn_norm, D, hp->rms_eps, xn);
            ref_matvec(wq, QD, D, xn, q);
            for (int64_t h = 0; h < hp->n_head; h++) {
                if (L->bq)
                    for (int64_t i = 0; i < HD; i++)
                        q[h * HD + i] += L->bq[h * HD + i];
                if (L->q_norm)
                    ref_rmsnorm(q + h * HD, L->q_norm, HD, hp->rms_eps, q + h * HD);
                ref_rope(q + h * HD, hp->n_rot, t, hp);
                int64_t kvh = h / (hp->n_head / hp->n_head_kv);
                double mx = -1e300, den = 0;
                int64_t p0 = win && t + 1 > win ? t + 1 - win : 0;
                for (int64_t p = p0; p <= t; p++) {
                    double s = 0;
                    for (int64_t i = 0; i < HD; i++)
                        s += q[h * HD + i] * kc[p * KVD + kvh * HD + i];
                    sc[p] = s / sqrt((double)HD);
                    if (sc[p] > mx)
                        mx = sc[p];
                }
                for (int64_t i = 0; i < HD; i++)
                    att[h * HD + i] = 0;
                for (int64_t p = p0; p <= t; p++) {
                    double e = exp(sc[p] - mx);
                    den += e;
                    for (int64_t i = 0; i < HD; i++)
                        att[h * HD + i] += e * vc[p * KVD + kvh * HD + i];
                }
                for (int64_t i = 0; i < HD; i++)
                    att[h * HD + i] /= den;
            }
            ref_matvec(wo, D, QD, att, tmp);
            for (int64_t i = 0; i < D; i++)
                xo[t * D + i] = x[t * D + i] + tmp[i];
            ref_rmsnorm(xo + t * D, L->ffn_norm, D, hp->rms_eps, xn);
            if (L->moe) {
                ref_moe(m, l, xn, tmp);
                for (int64_t i = 0; i < D; i++)
                    xo[t * D + i] += tmp[i];
                continue;
            }
            ref_matvec(wg, F, D, xn, g);
            ref_matvec(wu, F, D, xn, u);
            for (int64_t i = 0; i < F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_matvec(wd, D, F, g, tmp);
            for (int64_t i = 0; i < D; i++)
                xo[t * D + i] += tmp[i];
        }
        memcpy(x, xo, (size_t)(n * D) * 8);
        free(xo);
        free(wq);
        free(wk);
        free(wv);
        free(wo);
        free(wg);
        free(wu);
        free(wd);
    }
    double *wout = ref_mat(NULL, m, hp->tied_output ? "token_embd.weight" : "output.weight");
    for (int64_t t = 0; t < n; t++) {
        ref_rmsnorm(x + t * D, m->output_norm, D, hp->rms_eps, xn);
        ref_matvec(wout, V, D, xn, logits + t * V);
    }
    free(wout);
    free(x);
    free(xn);
    free(q);
    free(kc);
    free(vc);
    free(att);
    free(tmp);
    free(g);
    free(u);
    free(sc);
    free(row);
    return logits;
}

/* ---- optimised path helpers (run_env: test_fwd_env.h) ---- */

/* Runs a 40-token sequence through model path and checks its logits against the float64
 * reference within tol (relative to the largest reference logit). */
static void ref_compare(const char *path, double tol, const char *what) {
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    run_env e;
    env_open(&e, path, isa, false, 2, 64, 64);
    int64_t n = 40, V = model_get_hparams(e.m)->n_vocab;
    int32_t toks[40];
    for (int i = 0; i < n; i++)
        toks[i] = (int32_t)((i * 41 + 5) % V);
    int32_t blocks[4] = {2, 3, 0, 1};
    fwd_seq sq = {.tokens = toks,
                  .n_tokens = (int32_t)n,
                  .pos0 = 0,
                  .blocks = blocks,
                  .n_blocks = 4,
                  .n_logits = (int32_t)n};
    fwd_batch b = {.seqs = &sq, .n_seqs = 1};
    const float *lg;
    int64_t no;
    T_OK(fwd_run(e.fc, &b, &lg, &no));
    double *ref = ref_forward(e.m, toks, n, false);
    double maxref = 0, maxdiff = 0;
    for (int64_t i = 0; i < n * V; i++) {
        maxref = fabs(ref[i]) > maxref ? fabs(ref[i]) : maxref;
        maxdiff = fabs(lg[i] - ref[i]) > maxdiff ? fabs(lg[i] - ref[i]) : maxdiff;
    }
    free(ref);
    env_close(&e);
    T_CHECKF(maxdiff <= tol * maxref, "%s: rel %g > %g", what, maxdiff / maxref, tol);
}

/* RoPE scaling (linear, llama3 from metadata, llama3 as the rope_freqs tensor) and a sliding
 * window, against the reference with the same f32 tolerance as plain models. */
static void t_reference_rope_window(void) {
    const char *scalings[] = {"linear", "llama3", "llama3-tensor"};
    for (int i = 0; i < 3; i++)
        ref_compare(synth_variant("llama", GGUF_TYPE_F32, true, 3, scalings[i], 0), 2e-6,
                    scalings[i]);
    ref_compare(synth_variant("llama", GGUF_TYPE_F32, false, 4, NULL, 7), 2e-6, "window 7");
    ref_compare(synth_variant("qwen2", GGUF_TYPE_F32, false, 4, "llama3", 9), 2e-6,
                "qwen2 llama3 window 9");
    /* the loader really applied them */
    model *m;
    T_OK(
        model_load(synth_variant("llama", GGUF_TYPE_F32, true, 3, "llama3", 0), KN_ISA_SCALAR, &m));
    T_CHECK(m->rope_factors && m->rope_factors[0] == 1.0f && m->rope_factors[7] > 1.0f);
    model_destroy(m);
    T_OK(model_load(synth_variant("llama", GGUF_TYPE_F32, false, 4, NULL, 7), KN_ISA_SCALAR, &m));
    T_EQ_INT(model_get_hparams(m)->sliding_window, 7);
    model_destroy(m);
}

static void t_reference(void) {
    const int types[] = {GGUF_TYPE_F32,  GGUF_TYPE_F16,  GGUF_TYPE_BF16, GGUF_TYPE_Q8_0,
                         GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,
                         GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K, TYPE_Q4_K_M};
    const int n_types = (int)(sizeof types / sizeof *types);
    /* Tolerances, as max |ours - ref| / max |ref| over all logits of a 40-token sequence
     * (measured on these models: F32/F16/BF16 2e-7..3e-7, F16 KV up to 2e-6, Q8_0/Q4_0 3e-3..1e-2;
     * VERITY_TEST_VERBOSE=1 prints them):
     *  F32, F16, BF16 weights: the reference uses the same dequantized weights, so the only
     *    difference is float32 rounding (eps 6e-8) in sums of <= 128 terms, exp and rsqrt,
     *    compounded over 2 layers and the logit projection: 2e-6.
     *  F16 KV cache: K and V additionally rounded to 11 significant bits (rel. 4.9e-4 per
     *    element, averaged by attention over many positions): 5e-5.
     *  Q8_0/Q4_0 weights: activations are quantized to 8 bits per 32-block (rel. error up to
     *    1/254 per element) before every matmul, ~10 quantized matmuls deep: 2.5e-2.
     *  Q4_1/Q5_0/Q5_1 (tiny shape) and Q4_K/Q5_K/Q6_K/Q4_K_M (small shape: embd 256, FFN 512):
     *    the reference uses the same dequantized weights, so again only the activation
     *    quantization differs, with the same per-element bound and depth: 2.5e-2 (measured:
     *    Q4_1 9.1e-3, Q5_0 3.3e-3, Q5_1 7.5e-3, Q4_K 8.1e-3, Q5_K 1.2e-2, Q6_K 8.5e-3, Q4_K_M
     *    1.3e-2; the small shape's longer rows (K up to 512) and the mix's Q6_K/Q4_K layers give
     *    the larger values, still 2x inside the bound). */
    const char *archs[] = {"llama", "qwen2", "qwen3", "qwen3moe"};
    for (int ai = 0; ai < 4; ai++) {
        for (int ti = 0; ti < n_types; ti++) {
            int type = types[ti];
            if (ai > 0 && ti != 0 && ti != 3)
                continue; /* variants: F32 and Q8_0 suffice for arch-specific ops */
            /* MoE: F32 only. Routing is a discontinuous function of the activations: the
             * quantized path's activation error (1/254 per element) moves router logits by more
             * than the gap between some token's k-th and (k+1)-th expert, and a changed choice is
             * no small error. Quantized experts are checked by invariance (below, test_arch). */
            if (ai == 3 && ti != 0)
                continue;
            for (int kvf = 0; kvf < 2; kvf++) {
                bool q = ti >= 3;
                if (kvf && (q || ai > 0))
                    continue;
                const char *path = synth_path(archs[ai], type, ti % 2 == 0, 7 + (uint64_t)ti);
                kn_isa isa;
                T_OK(kn_isa_select(&isa));
                run_env e;
                env_open(&e, path, isa, kvf, 2, 64, 64);
                int64_t n = 40, V = model_get_hparams(e.m)->n_vocab;
                int32_t toks[40];
                for (int i = 0; i < n; i++)
                    toks[i] = (int32_t)((i * 37 + 11) % V);
                int32_t blocks[4] = {3, 0, 2, 1};
                fwd_seq s = {.tokens = toks,
                             .n_tokens = (int32_t)n,
                             .pos0 = 0,
                             .blocks = blocks,
                             .n_blocks = 4,
                             .n_logits = (int32_t)n};
                fwd_batch b = {.seqs = &s, .n_seqs = 1};
                const float *lg;
                int64_t no;
                T_OK(fwd_run(e.fc, &b, &lg, &no));
                T_EQ_INT(no, n);
                double *ref = ref_forward(e.m, toks, n, kvf);
                double maxref = 0, maxdiff = 0;
                for (int64_t i = 0; i < n * V; i++) {
                    if (fabs(ref[i]) > maxref)
                        maxref = fabs(ref[i]);
                    double d = fabs(lg[i] - ref[i]);
                    if (d > maxdiff)
                        maxdiff = d;
                }
                double tol = q ? 2.5e-2 : kvf ? 5e-5 : 2e-6;
                if (getenv("VERITY_TEST_VERBOSE"))
                    fprintf(stderr, "%s %s kv%s: rel %.3g (tol %g)\n", archs[ai], type_label(type),
                            kvf ? "f16" : "f32", maxdiff / maxref, tol);
                T_CHECKF(maxdiff <= tol * maxref,
                         "%s %s kv%s: max diff %g, max |ref| %g (rel %g > %g)", archs[ai],
                         type_label(type), kvf ? "f16" : "f32", maxdiff, maxref, maxdiff / maxref,
                         tol);
                free(ref);
                env_close(&e);
            }
        }
    }
}

/* ---- invariance ---- */

#define INV_SEQS   12
#define INV_MAXLEN 40

typedef struct inv_case {
    int32_t toks[INV_SEQS][INV_MAXLEN];
    int32_t len[INV_SEQS];
    float *gold; /* [seq][pos][V] */
    int64_t V;
    model_hparams hp;
} inv_case;

/* Runs every sequence to completion with the given schedule: each step takes up to `batch`
 * sequences (rotating, in an order shuffled by `order_seed`), each advancing by up to `chunk`
 * tokens; logits for all positions are requested and compared with (or stored into) gold. */
static void inv_run(inv_case *ic, const char *path, kn_isa isa, int threads, int batch, int chunk,
                    uint64_t order_seed, bool store) {
    run_env e;
    env_open(&e, path, isa, true, threads, INV_SEQS * INV_MAXLEN, 200);
    int32_t tables[INV_SEQS][4];
    /* physical block ids depend on the schedule seed */
    int32_t ids[INV_SEQS * 4];
    for (int i = 0; i < INV_SEQS * 4; i++)
        ids[i] = i;
    uint64_t st = order_seed * 2654435761u + 1;
    for (int i = INV_SEQS * 4 - 1; i > 0; i--) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((st >> 33) % (uint64_t)(i + 1));
        int32_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    for (int s = 0; s < INV_SEQS; s++)
        for (int j = 0; j < 4; j++)
            tables[s][j] = ids[s * 4 + j] + 100 * (int)(order_seed & 1);
    int32_t done[INV_SEQS] = {0};
    int order[INV_SEQS];
    for (int i = 0; i < INV_SEQS; i++)
        order[i] = i;
    for (int i = INV_SEQS - 1; i > 0; i--) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((st >> 33) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int remaining = INV_SEQS, cursor = 0;
    while (remaining > 0) {
        fwd_seq seqs[INV_SEQS];
        int which[INV_SEQS];
        int ns = 0;
        for (int tries = 0; tries < INV_SEQS && ns < batch; tries++) {
            int s = order[(cursor + tries) % INV_SEQS];
            if (done[s] >= ic->len[s])
                continue;
            int32_t n = ic->len[s] - done[s];
            if (n > chunk)
                n = chunk;
            seqs[ns] = (fwd_seq){.tokens = ic->toks[s] + done[s],
                                 .n_tokens = n,
                                 .pos0 = done[s],
                                 .blocks = tables[s],
                                 .n_blocks = 4,
                                 .n_logits = n};
            which[ns++] = s;
        }
        cursor = (cursor + 1) % INV_SEQS;
        fwd_batch b = {.seqs = seqs, .n_seqs = ns};
        const float *lg;
        int64_t no;
        if (order_seed & 2) /* threads woken between steps (bench --cold) change nothing */
            fwd_ctx_wake(e.fc);
        T_OK(fwd_run(e.fc, &b, &lg, &no));
        int64_t o = 0;
        for (int i = 0; i < ns; i++) {
            int s = which[i];
            for (int32_t k = 0; k < seqs[i].n_tokens; k++, o++) {
                float *g = ic->gold + ((int64_t)s * INV_MAXLEN + done[s] + k) * ic->V;
                if (store)
                    memcpy(g, lg + o * ic->V, (size_t)ic->V * 4);
                else
                    T_CHECKF(
                        memcmp(g, lg + o * ic->V, (size_t)ic->V * 4) == 0,
                        "seq %d pos %d differs (isa %s threads %d batch %d chunk %d order %llu)", s,
                        done[s] + k, kn_isa_name(isa), threads, batch, chunk,
                        (unsigned long long)order_seed);
            }
            done[s] += seqs[i].n_tokens;
            if (done[s] >= ic->len[s])
                remaining--;
        }
    }
    env_close(&e);
}

/* Whether this is the ThreadSanitizer build (gcc and clang define __SANITIZE_THREAD__ there). */
static bool tsan_build(void) {
#if defined(__SANITIZE_THREAD__)
    return true;
#else
    return false;
#endif
}

static void t_invariance(void) {
    /* every weight family, and every architecture and attention variant */
    static const struct {
        const char *arch;
        int type;
        const char *rope;
        int64_t window;
        const char *shape;
    } vs[] = {
        {"llama", GGUF_TYPE_F16, NULL, 0, NULL},       {"llama", GGUF_TYPE_Q8_0, NULL, 0, NULL},
        {"llama", GGUF_TYPE_Q4_0, NULL, 0, NULL},      {"llama", GGUF_TYPE_Q5_1, NULL, 0, NULL},
        {"llama", GGUF_TYPE_Q5_K, NULL, 0, NULL},      {"llama", TYPE_Q4_K_M, NULL, 0, NULL},
        {"qwen2", GGUF_TYPE_F16, NULL, 0, NULL},       {"qwen3", TYPE_Q4_K_M, NULL, 0, NULL},
        {"llama", GGUF_TYPE_F16, "llama3", 13, NULL},  {"llama", GGUF_TYPE_F16, NULL, 0, "gqa"},
        {"qwen2", GGUF_TYPE_F32, NULL, 0, "gqa"},      {"qwen3moe", GGUF_TYPE_Q8_0, NULL, 0, NULL},
        {"qwen3moe", TYPE_Q4_K_M, NULL, 0, NULL},      {"qwen3moe", GGUF_TYPE_F32, NULL, 0, "gqa"},
        {"deepseek2", GGUF_TYPE_Q8_0, NULL, 0, NULL},  {"deepseek2", TYPE_Q4_K_M, NULL, 0, NULL},
        {"deepseek32", GGUF_TYPE_Q8_0, NULL, 0, NULL}, {"deepseek32", GGUF_TYPE_F32, NULL, 0, NULL},
        {"deepseek4", GGUF_TYPE_Q8_0, NULL, 0, NULL},  {"deepseek4", GGUF_TYPE_F32, NULL, 0, NULL},
    };
    for (int ti = 0; ti < (int)(sizeof vs / sizeof *vs); ti++) {
        /* under sanitizers, one Q8_0 row per MoE architecture (their K-quant and gqa rows run
         * the same code paths as the dense rows above and test_arch's MoE rows) */
        bool moe = !strcmp(vs[ti].arch, "qwen3moe") || !strcmp(vs[ti].arch, "deepseek2") ||
                   !strcmp(vs[ti].arch, "deepseek32") || !strcmp(vs[ti].arch, "deepseek4");
        if (moe && test_scale() < 1 && vs[ti].type != GGUF_TYPE_Q8_0)
            continue;
        /* under TSan (whose question is races between the pool's threads, not the bits of a
         * weight format: release and ASan run every row) the rows whose threading differs: the
         * dense F16 and K-quant matmul splits, grouped attention (gqa), and each MoE / MLA /
         * indexer architecture */
        if (tsan_build() && !vs[ti].shape && !moe && ti != 0 && vs[ti].type != TYPE_Q4_K_M)
            continue;
        if (tsan_build() && ti != 0 && !strcmp(vs[ti].arch, "qwen3"))
            continue;
        const char *path = synth_shaped(vs[ti].shape, vs[ti].arch, vs[ti].type, false, 21,
                                        vs[ti].rope, vs[ti].window);
        inv_case ic;
        model *m;
        T_OK(model_load(path, KN_ISA_SCALAR, &m));
        ic.hp = *model_get_hparams(m);
        ic.V = ic.hp.n_vocab;
        model_destroy(m);
        uint64_t st = 99 + (uint64_t)ti;
        for (int s = 0; s < INV_SEQS; s++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            ic.len[s] = 1 + (int32_t)((st >> 33) % INV_MAXLEN);
            for (int i = 0; i < ic.len[s]; i++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                ic.toks[s][i] = (int32_t)((st >> 33) % (uint64_t)ic.V);
            }
        }
        ic.gold = malloc((size_t)(INV_SEQS * INV_MAXLEN * ic.V) * 4);
        kn_isa best;
        T_OK(kn_isa_select(&best));
        /* gold: every sequence alone, one token per step, one thread */
        inv_run(&ic, path, best, 1, 1, 1, 0, true);
        const int batches[] = {1, 3, INV_SEQS};
        const int chunks[] = {1, 3, 16, INV_MAXLEN};
        bool full = test_scale() >= 1; /* under sanitizers: batch 3 and 12, chunk 1 and 16 */
        for (int bi = full ? 0 : 1; bi < 3; bi++)
            for (int ci = 0; ci < 4; ci += full ? 1 : 2)
                for (int th = 1; th <= 2; th++)
                    inv_run(&ic, path, best, th, batches[bi], chunks[ci],
                            (uint64_t)(bi * 8 + ci + th), false);
        /* every instruction set gives the same bits (those this CPU lacks say SKIP, once); under
         * the sanitizers on the first row only: the scalar kernels are most of their time there,
         * and test_kernels compares every kernel with its scalar reference, format by format,
         * under ASan too (release runs every row) */
        if (ti == 0)
            test_skip_missing_isas();
        for (int isa = KN_ISA_SCALAR; isa <= KN_ISA_AVX512 && (ti == 0 || test_scale() >= 1); isa++)
            if (kn_isa_available((kn_isa)isa))
                inv_run(&ic, path, (kn_isa)isa, 2, INV_SEQS, 7, 5, false);
        /* and every grouping of query heads in attention (0: the per-head kernel), one thread
         * (a single decode token then splits a group over units) or two; where the grouped
         * kernel runs (head 32, 64 or 128), and under sanitizers on the wide-group shape only */
        const model_hparams *hp = &ic.hp;
        bool grouped = hp->n_head > hp->n_head_kv &&
                       (hp->head_dim == 32 || hp->head_dim == 64 || hp->head_dim == 128);
        if (test_scale() < 1 && !vs[ti].shape)
            grouped = false;
        const char *groups[] = {"0", "1", "3"};
        for (int gi = 0; grouped && gi < 3; gi++) {
            T_OK(flags_set("attn-group", groups[gi]));
            inv_run(&ic, path, best, 1 + gi % 2, INV_SEQS, 5, 7, false);
            inv_run(&ic, path, best, 2, 1, 1, 3, false);
        }
        T_OK(flags_set("attn-group", "16"));
        /* matmuls by row panels of 7 (tiles of 4 and 3 rows), or all rows at once */
        T_OK(flags_set("mm-panel", "7"));
        inv_run(&ic, path, best, 2, INV_SEQS, 16, 9, false);
        T_OK(flags_set("mm-panel", "0"));
        inv_run(&ic, path, best, 2, INV_SEQS, INV_MAXLEN, 4, false);
        T_OK(flags_set("mm-panel", "256"));
        /* chunks by work alone rather than equal ones per thread */
        T_OK(flags_set("mm-even-split", "0"));
        inv_run(&ic, path, best, 2, 1, 1, 6, false);
        T_OK(flags_set("mm-even-split", "1"));
        /* each thread's last chunk whole, or in 16 pieces (some of them empty: more pieces than
         * the chunk has column blocks) */
        T_OK(flags_set("mm-tail-split", "1"));
        inv_run(&ic, path, best, 2, 3, 3, 10, false);
        T_OK(flags_set("mm-tail-split", "16"));
        inv_run(&ic, path, best, 2, INV_SEQS, 16, 11, false);
        inv_run(&ic, path, best, 2, 1, 1, 12, false);
        T_OK(flags_set("mm-tail-split", "4"));
        /* no weight prefetch by waiting threads, and the most (hints: the bits cannot move) */
        T_OK(flags_set("mm-warm", "0"));
        inv_run(&ic, path, best, 2, 3, 3, 13, false);
        T_OK(flags_set("mm-warm", "4194304"));
        inv_run(&ic, path, best, 2, INV_SEQS, 16, 14, false);
        T_OK(flags_set("mm-warm", "65536"));
        free(ic.gold);
    }
}

static void t_bad_input(void) {
    const char *path = synth_path("llama", GGUF_TYPE_F32, true, 5);
    run_env e;
    env_open(&e, path, KN_ISA_SCALAR, false, 1, 8, 4);
    int32_t toks[2] = {1, 99999};
    int32_t blocks[1] = {0};
    fwd_seq s = {
        .tokens = toks, .n_tokens = 2, .pos0 = 0, .blocks = blocks, .n_blocks = 1, .n_logits = 1};
    fwd_batch b = {.seqs = &s, .n_seqs = 1};
    const float *lg;
    int64_t no;
    T_EQ_INT(fwd_run(e.fc, &b, &lg, &no), ERR_INVAL);
    T_CHECK(strstr(err_detail(), "99999"));
    toks[1] = 5;
    s.pos0 = 15; /* positions 15,16 need 2 blocks */
    T_EQ_INT(fwd_run(e.fc, &b, &lg, &no), ERR_INVAL);
    s.pos0 = 0;
    s.n_tokens = 9; /* over max_tokens */
    int32_t many[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    s.tokens = many;
    T_EQ_INT(fwd_run(e.fc, &b, &lg, &no), ERR_INVAL);
    env_close(&e);
    /* malformed / unsupported models */
    model *m;
    T_EQ_INT(model_load("/nonexistent.gguf", KN_ISA_SCALAR, &m), ERR_IO);
    char p2[512];
    snprintf(p2, sizeof p2, "%s/noarch.gguf", test_tmpdir());
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "mamba", 5);
    gguf_writer_write(w, p2);
    gguf_writer_destroy(w);
    T_EQ_INT(model_load(p2, KN_ISA_SCALAR, &m), ERR_UNSUPPORTED);
    T_CHECK(strstr(err_detail(), "mamba"));
}

/* mm-even-split: equal chunks, a multiple of the thread count, near the work-based count */
/* fwd_warm_matmul (mm-warm): each thread's target is the front of its pool-ranges range (pool.h:
 * chunks [n t / T, n (t + 1) / T)) in the matrix that range starts in, at most mm-warm bytes; a
 * matmul phase in between keeps it, the phase it is for clears it. Two 1024 x 512 F32 matrices
 * at one row: 16 column blocks each, two equal chunks each (mm-even-split), so on two threads
 * thread 0's range is all of A and thread 1's all of B; with A alone, A's two halves. */
static void t_warm_targets(void) {
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    if (isa == KN_ISA_SCALAR)
        test_skip("the scalar ISA's matrices have no packed spans to warm");
    const int64_t n = 1024, k = 512;
    float *wd = calloc((size_t)(n * k), sizeof(float));
    float *x = calloc((size_t)k, sizeof(float)), *y = calloc((size_t)n, sizeof(float));
    T_CHECK(wd && x && y);
    kn_mat *wa, *wb;
    T_OK(kn_mat_create(GGUF_TYPE_F32, wd, n, k, isa, &wa));
    T_OK(kn_mat_create(GGUF_TYPE_F32, wd, n, k, isa, &wb));
    const char *warm[] = {"4096", "0"};
    for (int wi = 0; wi < 2; wi++) {
        T_OK(flags_set("mm-warm", warm[wi]));
        run_env e;
        env_open(&e, synth_path("llama", GGUF_TYPE_F32, true, 5), isa, false, 2, 8, 4);
        fwd_ctx *c = e.fc;
        if (wi == 1) { /* off: no targets at all */
            T_CHECK(c->warm == NULL);
            fwd_mm a = {.w = wa, .x = x, .y = y, .rows = 1};
            fwd_warm_matmul(c, 1, &a);
            env_close(&e);
            break;
        }
        T_CHECK(c->warm != NULL);
        const void *pa, *pb, *ph;
        size_t ba, bb, bh;
        T_CHECK(kn_mat_units_span(wa, 0, kn_mat_n_units(wa), &pa, &ba));
        T_CHECK(kn_mat_units_span(wb, 0, kn_mat_n_units(wb), &pb, &bb));
        T_CHECK(kn_mat_units_span(wa, kn_mat_n_units(wa) / 2, kn_mat_n_units(wa), &ph, &bh));
        T_CHECK(ba > 4096 && bh > 4096);
        fwd_mm ab[2] = {{.w = wa, .x = x, .y = y, .rows = 1}, {.w = wb, .x = x, .y = y, .rows = 1}};
        fwd_warm_matmul(c, 2, ab);
        T_EQ_INT(ab[0].chunks, 2);
        T_EQ_INT(ab[1].chunks, 2);
        T_CHECK(atomic_load(&c->warm[0].lo) == (uintptr_t)pa);
        T_CHECK(atomic_load(&c->warm[0].hi) == (uintptr_t)pa + 4096);
        T_CHECK(atomic_load(&c->warm[1].lo) == (uintptr_t)pb);
        T_CHECK(atomic_load(&c->warm[1].hi) == (uintptr_t)pb + 4096);
        /* a phase in between keeps the targets; the phase they are for clears them */
        fwd_mm other = {.w = wb, .x = x, .y = y, .rows = 1};
        fwd_phase_matmul(c, 1, &other);
        T_CHECK(atomic_load(&c->warm[1].lo) == (uintptr_t)pb);
        fwd_phase_matmul(c, 2, ab);
        for (int t = 0; t < 2; t++)
            T_CHECK(atomic_load(&c->warm[t].lo) == 0 && atomic_load(&c->warm[t].hi) == 0);
        /* A alone: its two halves */
        fwd_mm a = {.w = wa, .x = x, .y = y, .rows = 1};
        fwd_warm_matmul(c, 1, &a);
        T_CHECK(atomic_load(&c->warm[0].lo) == (uintptr_t)pa);
        T_CHECK(atomic_load(&c->warm[1].lo) == (uintptr_t)ph);
        T_CHECK(atomic_load(&c->warm[1].hi) == (uintptr_t)ph + 4096);
        env_close(&e);
    }
    T_OK(flags_set("mm-warm", "65536"));
    kn_mat_destroy(wa);
    kn_mat_destroy(wb);
    free(wd);
    free(x);
    free(y);
}

static void t_mm_chunks_even(void) {
    T_EQ_INT(fwd_mm_chunks_even(11, 32, 2), 8);  /* 1b-kq ffn_down at batch 1: 8 x 4 blocks */
    T_EQ_INT(fwd_mm_chunks_even(11, 88, 2), 8);  /* gate, up: 8 x 11 */
    T_EQ_INT(fwd_mm_chunks_even(4, 32, 2), 4);   /* attn_q, attn_output */
    T_EQ_INT(fwd_mm_chunks_even(1, 8, 2), 2);    /* attn_k, attn_v */
    T_EQ_INT(fwd_mm_chunks_even(1, 12, 2), 2);   /* output, 354 columns */
    T_EQ_INT(fwd_mm_chunks_even(11, 86, 2), 10); /* 2 x 43: no divisor near, nearest multiple */
    T_EQ_INT(fwd_mm_chunks_even(3, 16, 4), 4);
    T_EQ_INT(fwd_mm_chunks_even(5, 7, 1), 5); /* one thread: unchanged */
    T_EQ_INT(fwd_mm_chunks_even(1, 1, 2), 1); /* fewer units than threads: unchanged */
    for (int64_t want = 1; want <= 40; want++)
        for (int64_t units = 2; units <= 100; units++) {
            int64_t n = fwd_mm_chunks_even(want, units, 2);
            T_CHECK(n >= 2 && n <= units && n % 2 == 0);
        }
}

int main(void) {
    test_run("model.mm_chunks_even", t_mm_chunks_even);
    test_run("model.warm_targets", t_warm_targets);
    test_run("model.reference_f64", t_reference);
    test_run("model.reference_f64_rope_scaling_and_window", t_reference_rope_window);
    test_run("model.invariance_forward", t_invariance);
    test_run("model.bad_input", t_bad_input);
    return test_summary();
}
