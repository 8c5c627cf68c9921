/* SPDX-License-Identifier: MIT */
/*
 * model: loading. Reads the architecture's hyper-parameters from GGUF metadata
 * ("<arch>.embedding_length", ...), checks every tensor's type and shape against them before
 * using it, packs matmul weights for the selected instruction set, and converts norm vectors and
 * biases to f32. Every failure names the offending key or tensor; nothing is half-loaded.
 */
#include "model/model_int.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int model_get_int(const gguf *g, const char *arch, const char *suffix, bool required,
                         int64_t def, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = gguf_get_i64(g, key, out);
    if (rc == ERR_NOTFOUND && !required) {
        *out = def;
        return 0;
    }
    if (rc)
        return rc;
    if (*out < 0)
        return err_set(ERR_FORMAT, "%s: metadata %s is negative (%lld)", gguf_path(g), key,
                       (long long)*out);
    return 0;
}

static int model_get_f32(const gguf *g, const char *arch, const char *suffix, float def,
                         float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = gguf_get_f32(g, key, out);
    if (rc == ERR_NOTFOUND) {
        *out = def;
        return 0;
    }
    return rc;
}

/* Finds tensor name and checks it is 2-D [ne0, ne1] (or 1-D [ne0] when ne1 == 0). */
static int model_tensor(const model *m, const char *name, int64_t ne0, int64_t ne1, bool required,
                        const gguf_tensor **out) {
    const gguf_tensor *t = gguf_find_tensor(m->g, name);
    *out = NULL;
    if (!t) {
        if (!required)
            return 0;
        return err_set(ERR_FORMAT, "%s: tensor '%s' is missing", gguf_path(m->g), name);
    }
    bool ok = ne1 ? (t->n_dims == 2 && t->ne[0] == ne0 && t->ne[1] == ne1)
                  : (t->n_dims == 1 && t->ne[0] == ne0);
    if (!ok)
        return err_set(ERR_INVAL, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                       gguf_path(m->g), name, (long long)t->ne[0],
                       (long long)(t->n_dims > 1 ? t->ne[1] : 0), (long long)ne0, (long long)ne1);
    if (!kn_type_supported(t->type))
        return err_set(ERR_UNSUPPORTED,
                       "%s: tensor '%s' has type %s, which verity does not support",
                       gguf_path(m->g), name, kn_type_name(t->type));
    *out = t;
    return 0;
}

static int model_vec(model *m, const char *name, int64_t n, bool required, float **out) {
    const gguf_tensor *t;
    *out = NULL;
    int rc = model_tensor(m, name, n, 0, required, &t);
    if (rc || !t)
        return rc;
    float *v = malloc((size_t)n * sizeof(float));
    if (!v)
        return err_set(ERR_NOMEM, "out of memory loading '%s'", name);
    rc = kn_dequantize_row(t->type, t->data, 0, n, v);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

static int model_mat(model *m, const char *name, int64_t k, int64_t n, kn_mat **out) {
    const gguf_tensor *t;
    int rc = model_tensor(m, name, k, n, true, &t);
    if (rc)
        return rc;
    rc = kn_mat_create(t->type, t->data, n, k, m->isa, out);
    if (rc)
        return err_wrap(rc, "%s: tensor '%s'", gguf_path(m->g), name);
    m->weight_bytes += kn_mat_bytes(*out);
    m->flops_per_token += 2.0 * (double)n * (double)k;
    return 0;
}

/* Llama 3.1 RoPE scaling from metadata (the same factors llama.cpp's converter stores as the
 * rope_freqs tensor): wavelengths shorter than original_context / high_freq_factor keep their
 * frequency, longer than original_context / low_freq_factor are divided by `factor`, and the band
 * between is interpolated. Computed in double, once, at load. */
static int model_llama3_factors(model *m, float factor) {
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;
    float lo, hi;
    int64_t orig;
    int rc;
    if ((rc = model_get_f32(g, hp->arch_name, "rope.scaling.low_freq_factor", 1.0f, &lo)) ||
        (rc = model_get_f32(g, hp->arch_name, "rope.scaling.high_freq_factor", 4.0f, &hi)) ||
        (rc = model_get_int(g, hp->arch_name, "rope.scaling.original_context_length", false, 8192,
                            &orig)))
        return rc;
    if (!(lo > 0) || !(hi > lo) || orig <= 0)
        return err_set(ERR_FORMAT,
                       "%s: llama3 rope scaling: low %g, high %g, original context %lld "
                       "are inconsistent",
                       gguf_path(g), lo, hi, (long long)orig);
    int64_t half = hp->n_rot / 2;
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

static int model_read_hparams(model *m) {
    const gguf *g = m->g;
    model_hparams *hp = &m->hp;
    gguf_str arch;
    int rc = gguf_get_str(g, "general.architecture", &arch);
    if (rc)
        return rc;
    if (arch.len >= sizeof hp->arch_name)
        return err_set(ERR_UNSUPPORTED, "%s: architecture name too long", gguf_path(g));
    memcpy(hp->arch_name, arch.s, arch.len);
    hp->arch_name[arch.len] = 0;
    if (!strcmp(hp->arch_name, "llama"))
        hp->arch = MODEL_ARCH_LLAMA;
    else if (!strcmp(hp->arch_name, "qwen2"))
        hp->arch = MODEL_ARCH_QWEN2;
    else if (!strcmp(hp->arch_name, "qwen3"))
        hp->arch = MODEL_ARCH_QWEN3;
    else
        return err_set(ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported (supported: llama, qwen2, qwen3)",
                       gguf_path(g), hp->arch_name);
    const char *a = hp->arch_name;
    if ((rc = model_get_int(g, a, "embedding_length", true, 0, &hp->n_embd)) ||
        (rc = model_get_int(g, a, "block_count", true, 0, &hp->n_layer)) ||
        (rc = model_get_int(g, a, "feed_forward_length", true, 0, &hp->n_ff)) ||
        (rc = model_get_int(g, a, "attention.head_count", true, 0, &hp->n_head)) ||
        (rc = model_get_int(g, a, "context_length", false, 2048, &hp->n_ctx_train)))
        return rc;
    if ((rc = model_get_int(g, a, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv)))
        return rc;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
        hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0 || hp->n_ctx_train <= 0)
        return err_set(ERR_FORMAT,
                       "%s: inconsistent hyper-parameters (embd %lld, layers %lld, ff %lld, heads "
                       "%lld, kv heads %lld, context %lld)",
                       gguf_path(g), (long long)hp->n_embd, (long long)hp->n_layer,
                       (long long)hp->n_ff, (long long)hp->n_head, (long long)hp->n_head_kv,
                       (long long)hp->n_ctx_train);
    int64_t def_hd = hp->n_embd / hp->n_head;
    if ((rc = model_get_int(g, a, "attention.key_length", false, def_hd, &hp->head_dim)))
        return rc;
    int64_t vlen;
    if ((rc = model_get_int(g, a, "attention.value_length", false, hp->head_dim, &vlen)))
        return rc;
    if (vlen != hp->head_dim || hp->head_dim <= 0 || hp->head_dim > 512)
        return err_set(ERR_UNSUPPORTED, "%s: head size %lld (value %lld) is not supported",
                       gguf_path(g), (long long)hp->head_dim, (long long)vlen);
    if ((rc = model_get_int(g, a, "rope.dimension_count", false, hp->head_dim, &hp->n_rot)))
        return rc;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return err_set(ERR_FORMAT, "%s: rope.dimension_count %lld invalid for head size %lld",
                       gguf_path(g), (long long)hp->n_rot, (long long)hp->head_dim);
    if ((rc = model_get_f32(g, a, "rope.freq_base", 10000.0f, &hp->rope_base)) ||
        (rc = model_get_f32(g, a, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps)))
        return rc;
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_str st;
    if (gguf_get_str(g, key, &st) == 0 && !gguf_str_eq(st, "none")) {
        float factor;
        if ((rc = model_get_f32(g, a, "rope.scaling.factor", 1.0f, &factor)))
            return rc;
        if (!(factor > 0))
            return err_set(ERR_FORMAT, "%s: rope.scaling.factor %g invalid", gguf_path(g), factor);
        if (gguf_str_eq(st, "linear")) {
            hp->rope_freq_scale = 1.0f / factor;
        } else if (gguf_str_eq(st, "llama3")) {
            if ((rc = model_llama3_factors(m, factor)))
                return rc;
        } else {
            return err_set(ERR_UNSUPPORTED,
                           "%s: rope scaling type '%.*s' is not supported (linear, "
                           "llama3)",
                           gguf_path(g), (int)st.len, st.s);
        }
    }
    if ((rc = model_get_int(g, a, "attention.sliding_window", false, 0, &hp->sliding_window)))
        return rc;
    hp->rope_neox = hp->arch != MODEL_ARCH_LLAMA;
    if (!(hp->rms_eps > 0) || !(hp->rope_base > 0))
        return err_set(ERR_FORMAT, "%s: rms epsilon %g / rope base %g invalid", gguf_path(g),
                       hp->rms_eps, hp->rope_base);
    return 0;
}

static int model_bind(model *m) {
    model_hparams *hp = &m->hp;
    int rc;
    const gguf_tensor *te = gguf_find_tensor(m->g, "token_embd.weight");
    if (!te)
        return err_set(ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", gguf_path(m->g));
    if (te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] <= 0)
        return err_set(
            ERR_INVAL,
            "%s: tensor 'token_embd.weight' has shape [%lld, %lld], expected [%lld, n_vocab]",
            gguf_path(m->g), (long long)te->ne[0], (long long)te->ne[1], (long long)hp->n_embd);
    hp->n_vocab = te->ne[1];
    if ((rc = model_tensor(m, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd)))
        return rc;
    if ((rc = model_vec(m, "output_norm.weight", hp->n_embd, true, &m->output_norm)))
        return rc;
    const gguf_tensor *to;
    if ((rc = model_tensor(m, "output.weight", hp->n_embd, hp->n_vocab, false, &to)))
        return rc;
    hp->tied_output = to == NULL;
    if ((rc = model_mat(m, hp->tied_output ? "token_embd.weight" : "output.weight", hp->n_embd,
                        hp->n_vocab, &m->output)))
        return rc;
    int64_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return err_set(ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < hp->n_layer; l++) {
        model_layer *L = &m->layers[l];
        char n[96];
#define LNAME(s) (snprintf(n, sizeof n, "blk.%lld." s, (long long)l), n)
        if ((rc = model_mat(m, LNAME("attn_q.weight"), hp->n_embd, q_dim, &L->wq)) ||
            (rc = model_mat(m, LNAME("attn_k.weight"), hp->n_embd, kv_dim, &L->wk)) ||
            (rc = model_mat(m, LNAME("attn_v.weight"), hp->n_embd, kv_dim, &L->wv)) ||
            (rc = model_mat(m, LNAME("attn_output.weight"), q_dim, hp->n_embd, &L->wo)) ||
            (rc = model_mat(m, LNAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, &L->w_gate)) ||
            (rc = model_mat(m, LNAME("ffn_up.weight"), hp->n_embd, hp->n_ff, &L->w_up)) ||
            (rc = model_mat(m, LNAME("ffn_down.weight"), hp->n_ff, hp->n_embd, &L->w_down)) ||
            (rc = model_vec(m, LNAME("attn_norm.weight"), hp->n_embd, true, &L->attn_norm)) ||
            (rc = model_vec(m, LNAME("ffn_norm.weight"), hp->n_embd, true, &L->ffn_norm)))
            return rc;
        bool qwen2 = hp->arch == MODEL_ARCH_QWEN2, qwen3 = hp->arch == MODEL_ARCH_QWEN3;
        if ((rc = model_vec(m, LNAME("attn_q.bias"), q_dim, qwen2, &L->bq)) ||
            (rc = model_vec(m, LNAME("attn_k.bias"), kv_dim, qwen2, &L->bk)) ||
            (rc = model_vec(m, LNAME("attn_v.bias"), kv_dim, qwen2, &L->bv)) ||
            (rc = model_vec(m, LNAME("attn_q_norm.weight"), hp->head_dim, qwen3, &L->q_norm)) ||
            (rc = model_vec(m, LNAME("attn_k_norm.weight"), hp->head_dim, qwen3, &L->k_norm)))
            return rc;
#undef LNAME
    }
    const gguf_tensor *rf = gguf_find_tensor(m->g, "rope_freqs.weight");
    if (rf) {
        float *f;
        if ((rc = model_vec(m, "rope_freqs.weight", hp->n_rot / 2, true, &f)))
            return rc;
        for (int64_t i = 0; i < hp->n_rot / 2; i++)
            if (!(f[i] > 0)) {
                free(f);
                return err_set(ERR_FORMAT, "%s: rope_freqs.weight[%lld] = %g is not positive",
                               gguf_path(m->g), (long long)i, f[i]);
            }
        free(m->rope_factors);
        m->rope_factors = f;
        hp->rope_has_factors = true;
    }
    hp->weight_type = m->layers[0].wq ? kn_mat_type(m->layers[0].wq) : -1;
    return 0;
}

/* Reads the hyperparameters and binds the weights of m->g (already open); logs what it loaded. */
static int model_load_gguf(model *m, const char *name, kn_isa isa, model **out) {
    m->isa = isa;
    int rc = model_read_hparams(m);
    if (!rc)
        rc = model_bind(m);
    if (rc) {
        model_destroy(m);
        return rc;
    }
    log_info(
        "loaded %s: %s, %lld layers, embd %lld, heads %lld/%lld, ff %lld, vocab %lld, %s, isa %s",
        name, m->hp.arch_name, (long long)m->hp.n_layer, (long long)m->hp.n_embd,
        (long long)m->hp.n_head, (long long)m->hp.n_head_kv, (long long)m->hp.n_ff,
        (long long)m->hp.n_vocab, kn_type_name(m->hp.weight_type), kn_isa_name(isa));
    *out = m;
    return 0;
}

int model_load(const char *path, kn_isa isa, model **out) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(ERR_NOMEM, "out of memory");
    int rc = gguf_open(path, &m->g);
    if (rc) {
        model_destroy(m);
        return rc;
    }
    return model_load_gguf(m, path, isa, out);
}

int model_load_memory(const void *data, size_t size, const char *name, kn_isa isa, model **out) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(ERR_NOMEM, "out of memory");
    int rc = gguf_open_memory(data, size, name, &m->g);
    if (rc) {
        model_destroy(m);
        return rc;
    }
    return model_load_gguf(m, name, isa, out);
}

void model_destroy(model *m) {
    if (!m)
        return;
    if (m->layers) {
        for (int64_t l = 0; l < m->hp.n_layer; l++) {
            model_layer *L = &m->layers[l];
            kn_mat_destroy(L->wq);
            kn_mat_destroy(L->wk);
            kn_mat_destroy(L->wv);
            kn_mat_destroy(L->wo);
            kn_mat_destroy(L->w_gate);
            kn_mat_destroy(L->w_up);
            kn_mat_destroy(L->w_down);
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->bq);
            free(L->bk);
            free(L->bv);
            free(L->q_norm);
            free(L->k_norm);
        }
        free(m->layers);
    }
    kn_mat_destroy(m->output);
    free(m->output_norm);
    free(m->rope_factors);
    gguf_close(m->g);
    free(m);
}

const model_hparams *model_get_hparams(const model *m) {
    return &m->hp;
}
const gguf *model_get_gguf(const model *m) {
    return m->g;
}
kn_isa model_get_isa(const model *m) {
    return m->isa;
}
uint64_t model_identity(const model *m) {
    const gguf *g = model_get_gguf(m);
    const unsigned char *b = gguf_bytes(g);
    uint64_t size = gguf_file_size(g), data = gguf_data_offset(g);
    uint64_t h = hash64(0x7665726974792d6dULL, b, (size_t)(data < size ? data : size));
    if (data < size) {
        uint64_t span = size - data, n = 4096, w = 64;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t off = data + span * i / n;
            h = hash64(h, b + off, (size_t)(off + w <= size ? w : size - off));
        }
    }
    return h;
}

size_t model_weight_bytes(const model *m) {
    return m->weight_bytes;
}
double model_flops_per_token(const model *m) {
    return m->flops_per_token;
}
