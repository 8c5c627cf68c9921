/* SPDX-License-Identifier: MIT */
/*
 * Converter tests: our llama2.c conversion of stories260K holds exactly the tensors (names, types,
 * shapes, bytes) and the vocabulary (pieces, scores, types) of the shipped GGUF made by the
 * reference converter; malformed checkpoints fail with the field named and leave no output.
 */
#include "test.h"
#include "base/err.h"
#include "gguf/gguf.h"
#include "model/convert.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void t_same_as_shipped(void) {
    char bin[512], tok[512], out[512];
    snprintf(bin, sizeof bin, "%s", test_shared_file("models/stories260K.bin"));
    snprintf(tok, sizeof tok, "%s", test_shared_file("models/tok512.bin"));
    const char *ship = test_shared_file("models/stories260K.gguf");
    snprintf(out, sizeof out, "%s/conv.gguf", test_tmpdir());
    T_OK(convert_llama2c(bin, tok, out));
    gguf *a, *b;
    T_OK(gguf_open(ship, &a));
    T_OK(gguf_open(out, &b));
    T_EQ_INT(gguf_n_tensors(a), gguf_n_tensors(b));
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)ta->name.len, ta->name.s);
        const gguf_tensor *tb = gguf_find_tensor(b, name);
        T_CHECKF(tb, "tensor %s missing from our conversion", name);
        T_CHECKF(ta->type == tb->type && ta->n_dims == tb->n_dims && ta->ne[0] == tb->ne[0] &&
                     ta->ne[1] == tb->ne[1],
                 "tensor %s: type/shape differ", name);
        T_CHECKF(memcmp(ta->data, tb->data, ta->size_bytes) == 0, "tensor %s: data differ", name);
    }
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type"};
    for (int k = 0; k < 3; k++) {
        gguf_arr x, y;
        T_OK(gguf_get_arr(a, keys[k], &x));
        T_OK(gguf_get_arr(b, keys[k], &y));
        T_EQ_INT(x.n, y.n);
        for (uint64_t i = 0; i < x.n; i++) {
            if (x.type == GGUF_VT_STRING) {
                gguf_str s = gguf_arr_str(&x, i), t = gguf_arr_str(&y, i);
                T_CHECKF(s.len == t.len && memcmp(s.s, t.s, s.len) == 0, "%s[%llu] differs",
                         keys[k], (unsigned long long)i);
            } else {
                T_CHECKF(gguf_arr_f64(&x, i) == gguf_arr_f64(&y, i), "%s[%llu] differs", keys[k],
                         (unsigned long long)i);
            }
        }
    }
    const char *hp[] = {"llama.embedding_length",
                        "llama.feed_forward_length",
                        "llama.block_count",
                        "llama.attention.head_count",
                        "llama.attention.head_count_kv",
                        "llama.rope.dimension_count"};
    for (int k = 0; k < 6; k++) {
        uint32_t u, v;
        T_OK(gguf_get_u32(a, hp[k], &u));
        T_OK(gguf_get_u32(b, hp[k], &v));
        T_CHECKF(u == v, "%s: %u vs %u", hp[k], u, v);
    }
    gguf_close(a);
    gguf_close(b);
}

static void t_malformed(void) {
    char tok[512], bad[512], out[512];
    snprintf(tok, sizeof tok, "%s", test_shared_file("models/tok512.bin"));
    const char *bin = test_shared_file("models/stories260K.bin");
    snprintf(bad, sizeof bad, "%s/cut.bin", test_tmpdir());
    snprintf(out, sizeof out, "%s/never.gguf", test_tmpdir());
    FILE *f = fopen(bin, "rb"), *g = fopen(bad, "wb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fwrite(buf, 1, n, g);
    fclose(f);
    fclose(g);
    T_EQ_INT(convert_llama2c(bad, tok, out), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "does not match the header"));
    T_CHECK(access(out, F_OK) != 0);
    g = fopen(bad, "wb");
    int32_t h[7] = {64, 172, 5, 8, 3, 512, 512}; /* 8 heads not a multiple of 3 kv heads */
    fwrite(h, 4, 7, g);
    fclose(g);
    T_EQ_INT(convert_llama2c(bad, tok, out), ERR_FORMAT);
    h[4] = 0;
    g = fopen(bad, "wb");
    fwrite(h, 4, 7, g);
    fclose(g);
    T_EQ_INT(convert_llama2c(bad, tok, out), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "n_kv_heads"));
    T_EQ_INT(convert_llama2c("/nonexistent.bin", tok, out), ERR_IO);
    T_CHECK(access(out, F_OK) != 0);
}

int main(void) {
    test_run("convert.llama2c_same_as_shipped", t_same_as_shipped);
    test_run("convert.llama2c_malformed", t_malformed);
    return test_summary();
}
