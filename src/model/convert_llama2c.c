/* SPDX-License-Identifier: MIT */
/*
 * convert_llama2c: see convert.h. The checkpoint is read whole into memory (llama2.c models are
 * small) and validated: the header's sizes must be positive and consistent, and the file must hold
 * exactly the weights the header implies (plus the two legacy RoPE tables llama2.c writes), so a
 * truncated or foreign file is an error naming what is wrong, never a read past the end.
 */
#include "model/convert.h"
#include "base/err.h"
#include "base/file.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file, as bytes (file_read_all); a missing file is an I/O error here, as
 * convert_llama2c's contract says. */
static int cv_read_file(const char *path, unsigned char **data, size_t *size) {
    char *b;
    int rc = file_read_all(path, 0, &b, size);
    *data = (unsigned char *)b;
    return rc == ERR_NOTFOUND ? ERR_IO : rc;
}

typedef struct cv_vocab {
    char **text;
    size_t *len;
    float *scores;
    int32_t *types;
    int32_t n;
} cv_vocab;

static void cv_vocab_free(cv_vocab *v) {
    if (v->text)
        for (int32_t i = 0; i < v->n; i++)
            free(v->text[i]);
    free(v->text);
    free(v->len);
    free(v->scores);
    free(v->types);
}

static int cv_read_vocab(const char *path, int32_t n_vocab, cv_vocab *v) {
    unsigned char *d;
    size_t sz;
    int rc = cv_read_file(path, &d, &sz);
    if (rc)
        return rc;
    memset(v, 0, sizeof *v);
    v->n = n_vocab;
    v->text = calloc((size_t)n_vocab, sizeof *v->text);
    v->len = calloc((size_t)n_vocab, sizeof *v->len);
    v->scores = calloc((size_t)n_vocab, sizeof *v->scores);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    if (!v->text || !v->len || !v->scores || !v->types) {
        free(d);
        cv_vocab_free(v);
        return err_set(ERR_NOMEM, "out of memory");
    }
    size_t off = 4; /* int32 max_token_length */
    if (sz < 4) {
        free(d);
        cv_vocab_free(v);
        return err_set(ERR_FORMAT, "%s: max token length at byte 0: file too short", path);
    }
    for (int32_t i = 0; i < n_vocab; i++) {
        float score;
        int32_t len;
        if (sz - off < 8) {
            rc = err_set(ERR_FORMAT, "%s: token %d at byte %zu: file ends (expected %d tokens)",
                         path, i, off, n_vocab);
            break;
        }
        memcpy(&score, d + off, 4);
        memcpy(&len, d + off + 4, 4);
        off += 8;
        if (len < 0 || (size_t)len > sz - off) {
            rc = err_set(ERR_FORMAT, "%s: token %d length at byte %zu: %d runs past end of file",
                         path, i, off - 4, len);
            break;
        }
        /* SentencePiece text: spaces are U+2581; llama2.c decorates BOS/EOS with newlines */
        const char *src = (const char *)d + off;
        size_t n = 0;
        char *t = malloc((size_t)len * 3 + 1);
        if (!t) {
            rc = err_set(ERR_NOMEM, "out of memory");
            break;
        }
        if (i == 1) {
            memcpy(t, "<s>", 3), n = 3;
        } else if (i == 2) {
            memcpy(t, "</s>", 4), n = 4;
        } else {
            for (int32_t j = 0; j < len; j++) {
                if (src[j] == ' ') {
                    memcpy(t + n, "\xE2\x96\x81", 3);
                    n += 3;
                } else {
                    t[n++] = src[j];
                }
            }
        }
        t[n] = 0;
        off += (size_t)len;
        v->text[i] = t;
        v->len[i] = n;
        v->scores[i] = score;
        bool is_byte = n == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>';
        v->types[i] = i == 0 ? 2 : (i == 1 || i == 2) ? 3 : is_byte ? 6 : 1;
    }
    free(d);
    if (rc)
        cv_vocab_free(v);
    return rc;
}

int convert_llama2c(const char *model_path, const char *tokenizer_path, const char *out_path) {
    unsigned char *d;
    size_t sz;
    int rc = cv_read_file(model_path, &d, &sz);
    if (rc)
        return rc;
    int32_t h[7];
    if (sz < sizeof h) {
        free(d);
        return err_set(ERR_FORMAT, "%s: header at byte 0: file shorter than 28 bytes", model_path);
    }
    memcpy(h, d, sizeof h);
    int32_t dim = h[0], hidden = h[1], n_layers = h[2], n_heads = h[3], n_kv = h[4];
    int32_t vocab = h[5] < 0 ? -h[5] : h[5], seq_len = h[6];
    bool shared = h[5] > 0;
    static const char *names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                   "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++) {
        if (h[i] == 0 || (i != 5 && h[i] < 0) || (h[i] > (1 << 24)) || (h[i] < -(1 << 24))) {
            free(d);
            return err_set(ERR_FORMAT, "%s: header field %s at byte %d: invalid value %d",
                           model_path, names[i], 4 * i, h[i]);
        }
    }
    if (dim % n_heads || n_heads % n_kv) {
        free(d);
        return err_set(ERR_FORMAT, "%s: header: dim %d, heads %d, kv heads %d are inconsistent",
                       model_path, dim, n_heads, n_kv);
    }
    int64_t hd = dim / n_heads, kvd = (int64_t)n_kv * hd;
    int64_t L = n_layers;
    int64_t nfloats = (int64_t)vocab * dim + L * dim + L * dim * dim + 2 * L * dim * kvd +
                      L * dim * dim + L * dim + 3 * L * (int64_t)dim * hidden + dim +
                      (int64_t)seq_len * hd + (shared ? 0 : (int64_t)vocab * dim);
    if ((size_t)nfloats * 4 + 28 != sz) {
        free(d);
        return err_set(ERR_FORMAT, "%s: size %zu bytes does not match the header (expected %lld)",
                       model_path, sz, (long long)(nfloats * 4 + 28));
    }
    cv_vocab v;
    if ((rc = cv_read_vocab(tokenizer_path, vocab, &v))) {
        free(d);
        return rc;
    }
    const float *p = (const float *)(d + 28);
    const float *tok = p;
    p += (int64_t)vocab * dim;
    const float *rms_att = p;
    p += L * dim;
    const float *wq = p;
    p += L * dim * dim;
    const float *wk = p;
    p += L * dim * kvd;
    const float *wv = p;
    p += L * dim * kvd;
    const float *wo = p;
    p += L * dim * dim;
    const float *rms_ffn = p;
    p += L * dim;
    const float *w1 = p;
    p += L * dim * hidden;
    const float *w2 = p;
    p += L * dim * hidden;
    const float *w3 = p;
    p += L * dim * hidden;
    const float *rms_final = p;
    p += dim;
    p += (int64_t)seq_len * hd; /* legacy freq_cis_real and freq_cis_imag */
    const float *wcls = shared ? tok : p;

    gguf_writer *w = gguf_writer_create();
    if (!w) {
        free(d);
        cv_vocab_free(&v);
        return err_set(ERR_NOMEM, "out of memory");
    }
    const char *const *texts = (const char *const *)v.text;
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
    if (!rc)
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, v.len, (uint64_t)vocab);
    if (!rc)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v.scores,
                                 (uint64_t)vocab);
    if (!rc)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v.types,
                                 (uint64_t)vocab);
    struct {
        const char *k;
        uint32_t v;
    } u32s[] = {{"tokenizer.ggml.unknown_token_id", 0},
                {"tokenizer.ggml.bos_token_id", 1},
                {"tokenizer.ggml.eos_token_id", 2},
                {"llama.context_length", (uint32_t)seq_len},
                {"llama.embedding_length", (uint32_t)dim},
                {"llama.feed_forward_length", (uint32_t)hidden},
                {"llama.attention.head_count", (uint32_t)n_heads},
                {"llama.attention.head_count_kv", (uint32_t)n_kv},
                {"llama.block_count", (uint32_t)n_layers},
                {"llama.rope.dimension_count", (uint32_t)hd}};
    if (!rc)
        rc = gguf_writer_set_str(w, "general.architecture", "llama", 5);
    if (!rc)
        rc = gguf_writer_set_str(w, "general.name", "llama", 5);
    for (size_t i = 0; !rc && i < sizeof u32s / sizeof *u32s; i++)
        rc = gguf_writer_set_u32(w, u32s[i].k, u32s[i].v);
    if (!rc)
        rc = gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    int64_t ne[2];
#define ADD(name, ptr, a, b)                                                                       \
    (ne[0] = (a), ne[1] = (b),                                                                     \
     gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, (b) ? 2 : 1, ne, ptr, true))
    if (!rc)
        rc = ADD("token_embd.weight", tok, dim, vocab);
    if (!rc)
        rc = ADD("output_norm.weight", rms_final, dim, 0);
    if (!rc)
        rc = ADD("output.weight", wcls, dim, vocab);
    for (int64_t l = 0; l < L && !rc; l++) {
        char n[64];
#define LN(s) (snprintf(n, sizeof n, "blk.%lld." s, (long long)l), n)
        if ((rc = ADD(LN("attn_q.weight"), wq + l * dim * dim, dim, dim)) ||
            (rc = ADD(LN("attn_k.weight"), wk + l * dim * kvd, dim, kvd)) ||
            (rc = ADD(LN("attn_v.weight"), wv + l * dim * kvd, dim, kvd)) ||
            (rc = ADD(LN("attn_output.weight"), wo + l * dim * dim, dim, dim)) ||
            (rc = ADD(LN("attn_norm.weight"), rms_att + l * dim, dim, 0)) ||
            (rc = ADD(LN("ffn_gate.weight"), w1 + l * dim * hidden, dim, hidden)) ||
            (rc = ADD(LN("ffn_down.weight"), w2 + l * dim * hidden, hidden, dim)) ||
            (rc = ADD(LN("ffn_up.weight"), w3 + l * dim * hidden, dim, hidden)) ||
            (rc = ADD(LN("ffn_norm.weight"), rms_ffn + l * dim, dim, 0)))
            break;
#undef LN
    }
#undef ADD
    if (!rc)
        rc = gguf_writer_write(w, out_path);
    gguf_writer_destroy(w);
    cv_vocab_free(&v);
    free(d);
    return rc;
}
