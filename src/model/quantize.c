/* SPDX-License-Identifier: MIT */
/*
 * quantize: see quantize.h. The per-tensor plan is a pure function of (plan, tensor name, shape,
 * layer count, tied output), so synth and `verity quantize` agree. Requantizing runs tensor by
 * tensor: each matrix is dequantized row by row to f32 (kn_dequantize_row) and quantized with the
 * reference quantizers of kn_types on a pool of threads that split the rows; every row is
 * quantized independently, so the file's bytes do not depend on the thread count. The writer keeps
 * every output tensor in memory and writes the file atomically at the end, so an error leaves no
 * output file.
 */
#include "model/quantize.h"
#include "base/err.h"
#include "base/log.h"
#include "base/pool.h"
#include "gguf/gguf.h"
#include "kernels/kn_types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int quant_plan_parse(const char *name, quant_plan *out) {
    memset(out, 0, sizeof *out);
    if (!name)
        return err_set(ERR_INVAL, "missing type");
    if (!strcasecmp(name, "q4_k_m") || !strcasecmp(name, "q5_k_m")) {
        bool five = name[1] == '5';
        out->type = five ? GGUF_TYPE_Q5_K : GGUF_TYPE_Q4_K;
        out->mix = true;
        snprintf(out->name, sizeof out->name, five ? "q5_k_m" : "q4_k_m");
        return 0;
    }
    int t = kn_type_from_name(name);
    if (t < 0 || !kn_type_supported(t))
        return err_set(ERR_INVAL,
                       "unsupported type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, "
                       "q5_k, q6_k, q4_k_m, q5_k_m)",
                       name);
    out->type = t;
    snprintf(out->name, sizeof out->name, "%s", kn_type_name(t));
    for (char *c = out->name; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    return 0;
}

int quant_fallback_type(int type, int64_t ne0) {
    int64_t bs = kn_type_block_size(type);
    if (bs <= 0 || ne0 % bs == 0)
        return type;
    int fb = type == GGUF_TYPE_Q4_K   ? GGUF_TYPE_Q5_0
             : type == GGUF_TYPE_Q5_K ? GGUF_TYPE_Q5_1
             : type == GGUF_TYPE_Q6_K ? GGUF_TYPE_Q8_0
                                      : type;
    if (ne0 % kn_type_block_size(fb) != 0)
        fb = GGUF_TYPE_F16;
    return fb;
}

/* llama.cpp's use_more_bits */
static bool quant_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool quant_ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

int quant_tensor_type(const quant_plan *p, const char *name, uint32_t n_dims, int64_t ne0,
                      int64_t n_layer, bool tied) {
    if (n_dims < 2 || !quant_ends_with(name, "weight") || strstr(name, "_norm.weight") ||
        strstr(name, "ffn_gate_inp"))
        return GGUF_TYPE_F32;
    int type = p->type;
    if (p->mix) {
        bool out = !strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"));
        long long layer = -1;
        if (sscanf(name, "blk.%lld.", &layer) != 1)
            layer = -1;
        if (out) {
            type = ne0 % KN_QK_K ? GGUF_TYPE_Q8_0 : GGUF_TYPE_Q6_K;
        } else if ((strstr(name, "attn_v.weight") || strstr(name, "ffn_down")) && layer >= 0 &&
                   quant_more_bits(layer, n_layer)) {
            type = GGUF_TYPE_Q6_K;
        }
    }
    return quant_fallback_type(type, ne0);
}

typedef struct quant_job {
    int type;
    const float *src;
    int64_t n_rows, k;
    unsigned char *dst;
    int64_t row_bytes;
    int rc;
} quant_job;

static void quant_job_run(void *vctx, int ith, int nth) {
    quant_job *j = vctx;
    int64_t r0 = j->n_rows * ith / nth, r1 = j->n_rows * (ith + 1) / nth;
    if (r0 < r1) {
        int64_t rc = kn_quantize_rows(j->type, j->src + r0 * j->k, r1 - r0, j->k,
                                      j->dst + r0 * j->row_bytes);
        if (rc < 0)
            j->rc = (int)rc; /* every thread fails alike (same type and k) */
    }
}

int quant_rows(int type, const float *src, int64_t n_rows, int64_t k, void *dst, int n_threads) {
    int64_t rb = kn_type_row_bytes(type, k);
    if (rb < 0 || !kn_type_supported(type))
        return err_set(ERR_UNSUPPORTED, "cannot quantize to type %s with row length %lld",
                       kn_type_name(type) ? kn_type_name(type) : "?", (long long)k);
    quant_job j = {.type = type, .src = src, .n_rows = n_rows, .k = k, .dst = dst, .row_bytes = rb};
    /* a pool only for work worth it: K-quant fitting costs ~1 us per 32 elements */
    if (n_threads <= 1 || n_rows * k < (1 << 16)) {
        quant_job_run(&j, 0, 1);
        return j.rc;
    }
    pool *pl;
    int rc = pool_create(n_threads, &pl);
    if (rc)
        return rc;
    pool_run(pl, quant_job_run, &j);
    pool_destroy(pl);
    return j.rc;
}

/* llama.cpp's general.file_type numbers (llama_ftype) for the plans */
static uint32_t quant_file_type(const quant_plan *p) {
    if (p->mix)
        return p->type == GGUF_TYPE_Q5_K ? 17 : 15;
    switch (p->type) {
    case GGUF_TYPE_F32:
        return 0;
    case GGUF_TYPE_F16:
        return 1;
    case GGUF_TYPE_Q4_0:
        return 2;
    case GGUF_TYPE_Q4_1:
        return 3;
    case GGUF_TYPE_Q8_0:
        return 7;
    case GGUF_TYPE_Q5_0:
        return 8;
    case GGUF_TYPE_Q5_1:
        return 9;
    case GGUF_TYPE_Q4_K:
        return 14; /* Q4_K_S: all Q4_K */
    case GGUF_TYPE_Q5_K:
        return 16; /* Q5_K_S */
    case GGUF_TYPE_Q6_K:
        return 18;
    case GGUF_TYPE_BF16:
        return 32;
    default:
        return 0;
    }
}

/* Converts one tensor to type into a new buffer (*out, *out_bytes). */
static int quant_convert(const gguf *g, const gguf_tensor *t, const char *name, int type,
                         int n_threads, void **out, size_t *out_bytes) {
    int64_t k = t->ne[0], rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++)
        rows *= t->ne[d];
    int64_t rb = kn_type_row_bytes(type, k);
    if (rb < 0)
        return err_set(ERR_INTERNAL, "%s: tensor '%s': type %s does not fit rows of %lld",
                       gguf_path(g), name, kn_type_name(type), (long long)k);
    size_t bytes = (size_t)rb * (size_t)rows;
    void *dst = malloc(bytes ? bytes : 1);
    if (!dst)
        return err_set(ERR_NOMEM, "%s: out of memory for tensor '%s'", gguf_path(g), name);
    if (t->type == type) {
        memcpy(dst, t->data, bytes);
    } else {
        if (!kn_type_supported(t->type)) {
            free(dst);
            return err_set(ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which verity cannot read",
                           gguf_path(g), name, kn_type_name(t->type) ? kn_type_name(t->type) : "?");
        }
        float *f = malloc((size_t)(rows * k) * sizeof(float));
        if (!f) {
            free(dst);
            return err_set(ERR_NOMEM, "%s: out of memory for tensor '%s'", gguf_path(g), name);
        }
        int rc = 0;
        for (int64_t r = 0; r < rows && !rc; r++)
            rc = kn_dequantize_row(t->type, t->data, r, k, f + r * k);
        if (!rc)
            rc = quant_rows(type, f, rows, k, dst, n_threads);
        free(f);
        if (rc) {
            free(dst);
            return err_wrap(rc, "%s: tensor '%s'", gguf_path(g), name);
        }
    }
    *out = dst;
    *out_bytes = bytes;
    return 0;
}

int quant_model(const char *in_path, const char *out_path, const quant_plan *p, int n_threads) {
    gguf *g;
    int rc = gguf_open(in_path, &g);
    if (rc)
        return rc;
    gguf_writer *w = gguf_writer_create();
    if (!w) {
        gguf_close(g);
        return err_set(ERR_NOMEM, "quantize: out of memory");
    }
    /* layer count (for the mix): <arch>.block_count, else 1 + the largest blk.N */
    int64_t n_layer = 0;
    gguf_str arch;
    if (gguf_get_str(g, "general.architecture", &arch) == 0 && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.s);
        if (gguf_get_i64(g, key, &n_layer) != 0)
            n_layer = 0;
    }
    bool tied = gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; n_layer <= 0 && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        long long l;
        char nm[256];
        snprintf(nm, sizeof nm, "%.*s", (int)(t->name.len < 255 ? t->name.len : 255), t->name.s);
        if (sscanf(nm, "blk.%lld.", &l) == 1 && l + 1 > -n_layer)
            n_layer = -(l + 1); /* negative while counting */
    }
    if (n_layer < 0)
        n_layer = -n_layer;
    for (int64_t i = 0; !rc && i < gguf_n_kv(g); i++) {
        gguf_str key = gguf_kv_key(g, i);
        if (gguf_str_eq(key, "general.file_type") ||
            gguf_str_eq(key, "general.quantization_version"))
            continue;
        rc = gguf_writer_copy_kv(w, g, i);
    }
    if (!rc)
        rc = gguf_writer_set_u32(w, "general.file_type", quant_file_type(p));
    if (!rc)
        rc = gguf_writer_set_u32(w, "general.quantization_version", 2);
    int64_t n_fallback = 0;
    for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->name.len >= 256) {
            rc = err_set(ERR_FORMAT, "%s: tensor %lld: name of %llu bytes is too long", in_path,
                         (long long)i, (unsigned long long)t->name.len);
            break;
        }
        char name[256];
        memcpy(name, t->name.s, t->name.len);
        name[t->name.len] = 0;
        int type = quant_tensor_type(p, name, t->n_dims, t->ne[0], n_layer, tied);
        if (t->type >= GGUF_TYPE_I8 && t->type <= GGUF_TYPE_I64)
            type = t->type; /* a table (deepseek4's token-to-expert map), not weights: kept */
        if (type != GGUF_TYPE_F32 && type != p->type)
            n_fallback++;
        void *data = NULL;
        size_t bytes = 0;
        rc = quant_convert(g, t, name, type, n_threads, &data, &bytes);
        if (!rc) {
            rc = gguf_writer_add_tensor(w, name, type, t->n_dims, t->ne, data, false);
            log_debug("quantize: %s %s -> %s", name, kn_type_name(t->type), kn_type_name(type));
        }
        free(data);
    }
    if (!rc) {
        if (n_fallback)
            log_info("quantize: %lld tensors got another type than %s (mix or fallback)",
                     (long long)n_fallback, p->name);
        rc = gguf_writer_write(w, out_path);
    }
    gguf_writer_destroy(w);
    gguf_close(g);
    return rc;
}
