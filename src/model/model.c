/* SPDX-License-Identifier: MIT */
/*
 * model: loading. Finds general.architecture in the registry (model_arch.c), lets the
 * architecture read its hyper-parameters from GGUF metadata ("<arch>.embedding_length", ...) and
 * bind each layer, and binds what every architecture has (token embedding, output norm and
 * projection, RoPE frequency factors). Every tensor's type and shape is checked before it is used;
 * matmul weights are packed for the selected instruction set, norm vectors and biases converted to
 * f32. Every failure names the offending key or tensor; nothing is half-loaded. The helpers the
 * architectures bind with (model_read_*, model_bind_*) are here.
 */
#include "model/model_int.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/log.h"
#include "kernels/kn_type_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_read_int(const model *m, const char *suffix, bool required, int64_t def, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    int rc = gguf_get_i64(m->g, key, out);
    if (rc == ERR_NOTFOUND && !required) {
        *out = def;
        return 0;
    }
    if (rc)
        return rc;
    if (*out < 0)
        return err_set(ERR_FORMAT, "%s: metadata %s is negative (%lld)", gguf_path(m->g), key,
                       (long long)*out);
    return 0;
}

int model_read_f32(const model *m, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    int rc = gguf_get_f32(m->g, key, out);
    if (rc == ERR_NOTFOUND) {
        *out = def;
        return 0;
    }
    return rc;
}

int model_read_bool(const model *m, const char *suffix, bool def, bool *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    int rc = gguf_get_bool(m->g, key, out);
    if (rc == ERR_NOTFOUND) {
        *out = def;
        return 0;
    }
    return rc;
}

const char *model_layer_name(char *buf, int64_t l, const char *suffix) {
    snprintf(buf, 96, "blk.%lld.%s", (long long)l, suffix);
    return buf;
}

int model_bind_tensor(const model *m, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                      bool required, const gguf_tensor **out) {
    const gguf_tensor *t = gguf_find_tensor(m->g, name);
    *out = NULL;
    if (!t) {
        if (!required)
            return 0;
        return err_set(ERR_FORMAT, "%s: tensor '%s' is missing", gguf_path(m->g), name);
    }
    uint32_t nd = ne2 ? 3 : ne1 ? 2 : 1;
    int64_t want[3] = {ne0, ne1, ne2};
    bool ok = t->n_dims == nd;
    for (uint32_t d = 0; ok && d < nd; d++)
        ok = t->ne[d] == want[d];
    if (!ok) {
        char got[96] = "", exp[96] = "";
        size_t gl = 0, el = 0;
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++)
            gl += (size_t)snprintf(got + gl, sizeof got - gl, d ? ", %lld" : "%lld",
                                   (long long)t->ne[d]);
        for (uint32_t d = 0; d < nd; d++)
            el += (size_t)snprintf(exp + el, sizeof exp - el, d ? ", %lld" : "%lld",
                                   (long long)want[d]);
        return err_set(ERR_INVAL, "%s: tensor '%s' has shape [%s], expected [%s]", gguf_path(m->g),
                       name, got, exp);
    }
    if (!kn_type_supported(t->type))
        return err_set(ERR_UNSUPPORTED,
                       "%s: tensor '%s' has type %s, which verity does not support",
                       gguf_path(m->g), name, kn_type_name(t->type));
    *out = t;
    return 0;
}

int model_bind_vec(model *m, const char *name, int64_t n, bool required, float **out) {
    const gguf_tensor *t;
    *out = NULL;
    int rc = model_bind_tensor(m, name, n, 0, 0, required, &t);
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

int model_bind_mat(model *m, const char *name, int64_t k, int64_t n, bool required, double share,
                   kn_mat **out) {
    const gguf_tensor *t;
    *out = NULL;
    int rc = model_bind_tensor(m, name, k, n, 0, required, &t);
    if (rc || !t)
        return rc;
    rc = kn_mat_create(t->type, t->data, n, k, m->isa, out);
    if (rc)
        return err_wrap(rc, "%s: tensor '%s'", gguf_path(m->g), name);
    m->weight_bytes += (size_t)((double)kn_mat_bytes(*out) * share);
    m->flops_per_token += 2.0 * (double)n * (double)k * share;
    return 0;
}

int model_bind_slices(model *m, const char *name, int64_t k, int64_t n, int64_t count, double share,
                      kn_mat ***out) {
    const gguf_tensor *t;
    *out = NULL;
    int rc = model_bind_tensor(m, name, k, n, count, true, &t);
    if (rc)
        return rc;
    int64_t row_bytes = kn_type_row_bytes(t->type, k);
    if (row_bytes <= 0)
        return err_set(ERR_INVAL, "%s: tensor '%s': rows of %lld do not fit type %s",
                       gguf_path(m->g), name, (long long)k, kn_type_name(t->type));
    kn_mat **mats = calloc((size_t)count, sizeof *mats);
    if (!mats)
        return err_set(ERR_NOMEM, "out of memory loading '%s'", name);
    *out = mats;
    for (int64_t e = 0; e < count; e++) {
        const char *data = (const char *)t->data + (size_t)(e * n * row_bytes);
        if ((rc = kn_mat_create(t->type, data, n, k, m->isa, &mats[e])))
            return err_wrap(rc, "%s: tensor '%s', slice %lld", gguf_path(m->g), name, (long long)e);
        m->weight_bytes += (size_t)((double)kn_mat_bytes(mats[e]) * share);
        m->flops_per_token += 2.0 * (double)n * (double)k * share;
    }
    return 0;
}

void model_free_slices(kn_mat **mats, int64_t count) {
    for (int64_t e = 0; mats && e < count; e++)
        kn_mat_destroy(mats[e]);
    free(mats);
}

/* general.architecture into hp->arch_name, and its descriptor. */
static int model_find_arch(model *m) {
    model_hparams *hp = &m->hp;
    gguf_str arch;
    int rc = gguf_get_str(m->g, "general.architecture", &arch);
    if (rc)
        return rc;
    if (arch.len >= sizeof hp->arch_name)
        return err_set(ERR_UNSUPPORTED, "%s: architecture name too long", gguf_path(m->g));
    memcpy(hp->arch_name, arch.s, arch.len);
    hp->arch_name[arch.len] = 0;
    m->arch = model_arch_find(hp->arch_name);
    if (!m->arch) {
        char names[256];
        model_arch_names(names, sizeof names);
        return err_set(ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)",
                       gguf_path(m->g), hp->arch_name, names);
    }
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
    if ((rc = model_bind_tensor(m, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, true,
                                &m->tok_embd)))
        return rc;
    if ((rc = model_bind_vec(m, "output_norm.weight", hp->n_embd, true, &m->output_norm)))
        return rc;
    const gguf_tensor *to;
    if ((rc = model_bind_tensor(m, "output.weight", hp->n_embd, hp->n_vocab, 0, false, &to)))
        return rc;
    hp->tied_output = to == NULL;
    if ((rc = model_bind_mat(m, hp->tied_output ? "token_embd.weight" : "output.weight", hp->n_embd,
                             hp->n_vocab, true, 1.0, &m->output)))
        return rc;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return err_set(ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < hp->n_layer; l++)
        if ((rc = m->arch->bind_layer(m, l)))
            return rc;
    const gguf_tensor *rf = gguf_find_tensor(m->g, "rope_freqs.weight");
    if (rf) {
        float *f;
        if ((rc = model_bind_vec(m, "rope_freqs.weight", hp->n_rot / 2, true, &f)))
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
    hp->weight_type = kn_mat_type(m->layers[0].wq ? m->layers[0].wq : m->output);
    return 0;
}

/* Reads the hyperparameters and binds the weights of m->g (already open); logs what it loaded. */
static int model_load_gguf(model *m, const char *name, kn_isa isa, model **out) {
    m->isa = isa;
    int rc = model_find_arch(m);
    if (!rc)
        rc = m->arch->read_hparams(m);
    if (!rc)
        rc = model_bind(m);
    if (rc) {
        model_destroy(m);
        return rc;
    }
    const model_hparams *hp = &m->hp;
    char moe[96] = "";
    if (hp->n_expert > 0)
        snprintf(moe, sizeof moe, ", experts %lld (%lld used, ff %lld, %lld shared)",
                 (long long)hp->n_expert, (long long)hp->n_expert_used, (long long)hp->n_ff_exp,
                 (long long)hp->n_expert_shared);
    log_info("loaded %s: %s, %lld layers, embd %lld, heads %lld/%lld, ff %lld%s, vocab %lld, %s, "
             "isa %s",
             name, hp->arch_name, (long long)hp->n_layer, (long long)hp->n_embd,
             (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->n_ff, moe,
             (long long)hp->n_vocab, kn_type_name(hp->weight_type), kn_isa_name(isa));
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
            moe_free(L->moe, m->hp.n_expert);
            if (m->arch->free_layer)
                m->arch->free_layer(m, L);
        }
        free(m->layers);
    }
    kn_mat_destroy(m->output);
    free(m->output_norm);
    free(m->rope_factors);
    free(m->rope_theta);
    gguf_close(m->g);
    free(m);
}

int model_hparams_read(const gguf *g, model_hparams *out) {
    model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(ERR_NOMEM, "out of memory");
    m->g = (gguf *)g; /* only read; not closed below */
    int rc = model_find_arch(m);
    if (!rc)
        rc = m->arch->read_hparams(m);
    if (!rc)
        *out = m->hp;
    free(m->rope_factors);
    free(m->rope_theta);
    free(m);
    return rc;
}

void model_kv_pool_opts(const model *m, bool f16, int64_t block_size, int64_t n_blocks,
                        kv_pool_opts *o) {
    *o = (kv_pool_opts){.n_layer = m->hp.n_layer,
                        .kv_dim = model_kv_dim(m),
                        .block_size = block_size,
                        .n_blocks = n_blocks,
                        .f16 = f16};
    if (m->arch->kv_layout)
        m->arch->kv_layout(m, o);
}

int64_t model_kv_dim(const model *m) {
    return m->arch->kv_dim(&m->hp);
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
