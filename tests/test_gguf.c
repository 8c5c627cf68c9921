/* SPDX-License-Identifier: MIT */
/*
 * Tests for src/gguf: writer/reader round trip of every metadata type (nested arrays included) and
 * several tensor types; the shipped stories260K.gguf; every truncation of a real header and random
 * bit flips (must error or succeed, never crash: the asan build runs this too); specific malformed
 * headers with the field named in the error.
 */
#include "test.h"
#include "base/err.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void t_roundtrip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.gguf", test_tmpdir());
    gguf_writer *w = gguf_writer_create();
    T_CHECK(w);
    T_OK(gguf_writer_set_u8(w, "a.u8", 200));
    T_OK(gguf_writer_set_i8(w, "a.i8", -5));
    T_OK(gguf_writer_set_u16(w, "a.u16", 60000));
    T_OK(gguf_writer_set_i16(w, "a.i16", -30000));
    T_OK(gguf_writer_set_u32(w, "a.u32", 4000000000u));
    T_OK(gguf_writer_set_i32(w, "a.i32", -2000000000));
    T_OK(gguf_writer_set_u64(w, "a.u64", 1ull << 60));
    T_OK(gguf_writer_set_i64(w, "a.i64", -(1ll << 60)));
    T_OK(gguf_writer_set_f32(w, "a.f32", 1.5f));
    T_OK(gguf_writer_set_f64(w, "a.f64", -2.25));
    T_OK(gguf_writer_set_bool(w, "a.bool", true));
    T_OK(gguf_writer_set_str(w, "a.str", "h\0llo", 5));
    const char *strs[] = {"x", "", "zz"};
    T_OK(gguf_writer_set_arr_str(w, "a.strs", strs, NULL, 3));
    float fa[4] = {1, 2, 3, 4};
    T_OK(gguf_writer_set_arr(w, "a.f32s", GGUF_VT_FLOAT32, fa, 4));
    T_OK(gguf_writer_set_u32(w, "general.alignment", 64));
    float t1[3 * 4];
    for (int i = 0; i < 12; i++)
        t1[i] = (float)i;
    int64_t ne1[2] = {4, 3};
    T_OK(gguf_writer_add_tensor(w, "t.f32", GGUF_TYPE_F32, 2, ne1, t1, false));
    unsigned char q8[34 * 2];
    for (int i = 0; i < 68; i++)
        q8[i] = (unsigned char)i;
    int64_t ne2[1] = {64};
    T_OK(gguf_writer_add_tensor(w, "t.q8", GGUF_TYPE_Q8_0, 1, ne2, q8, false));
    int64_t bad[1] = {33};
    T_EQ_INT(gguf_writer_add_tensor(w, "t.bad", GGUF_TYPE_Q8_0, 1, bad, q8, false), ERR_INVAL);
    T_EQ_INT(gguf_writer_add_tensor(w, "t.q8", GGUF_TYPE_Q8_0, 1, ne2, q8, false), ERR_INVAL);
    T_OK(gguf_writer_write(w, path));
    gguf_writer_destroy(w);

    gguf *g;
    T_OK(gguf_open(path, &g));
    T_EQ_INT(gguf_version(g), 3);
    T_EQ_INT(gguf_alignment(g), 64);
    T_EQ_INT(gguf_data_offset(g) % 64, 0);
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f32;
    double f64;
    bool b;
    gguf_str s;
    T_OK(gguf_get_u32(g, "a.u8", &u32));
    T_EQ_INT(u32, 200);
    T_OK(gguf_get_i64(g, "a.i8", &i64));
    T_EQ_INT(i64, -5);
    T_OK(gguf_get_u32(g, "a.u32", &u32));
    T_EQ_INT(u32, 4000000000u);
    T_EQ_INT(gguf_get_u32(g, "a.u64", &u32), ERR_FORMAT); /* does not fit */
    T_CHECK(strstr(err_detail(), "a.u64") && strstr(err_detail(), "uint64"));
    T_EQ_INT(gguf_get_u32(g, "a.i8", &u32), ERR_FORMAT); /* negative */
    T_OK(gguf_get_u64(g, "a.u64", &u64));
    T_CHECK(u64 == 1ull << 60);
    T_OK(gguf_get_i64(g, "a.i64", &i64));
    T_CHECK(i64 == -(1ll << 60));
    T_OK(gguf_get_i64(g, "a.i32", &i64));
    T_EQ_INT(i64, -2000000000);
    T_OK(gguf_get_f32(g, "a.f32", &f32));
    T_CHECK(f32 == 1.5f);
    T_OK(gguf_get_f64(g, "a.f64", &f64));
    T_CHECK(f64 == -2.25);
    T_OK(gguf_get_bool(g, "a.bool", &b));
    T_CHECK(b);
    T_OK(gguf_get_str(g, "a.str", &s));
    T_CHECK(s.len == 5 && memcmp(s.s, "h\0llo", 5) == 0);
    T_EQ_INT(gguf_get_str(g, "missing", &s), ERR_NOTFOUND);
    gguf_arr a;
    T_OK(gguf_get_arr(g, "a.strs", &a));
    T_EQ_INT(a.n, 3);
    T_CHECK(gguf_str_eq(gguf_arr_str(&a, 2), "zz") && gguf_arr_str(&a, 1).len == 0);
    T_OK(gguf_get_arr(g, "a.f32s", &a));
    T_CHECK(gguf_arr_f64(&a, 3) == 4.0);
    const gguf_tensor *t = gguf_find_tensor(g, "t.f32");
    T_CHECK(t && t->ne[0] == 4 && t->ne[1] == 3 && t->size_bytes == 48);
    T_CHECK(memcmp(t->data, t1, 48) == 0);
    T_EQ_INT(((uintptr_t)t->data - (uintptr_t)gguf_tensor_at(g, 0)->data) % 64, 0);
    t = gguf_find_tensor(g, "t.q8");
    T_CHECK(t && t->size_bytes == 68 && memcmp(t->data, q8, 68) == 0);
    T_EQ_INT(t->offset % 64, 0);

    /* copy everything into a second file, including via copy_kv: identical metadata */
    gguf_writer *w2 = gguf_writer_create();
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        T_OK(gguf_writer_copy_kv(w2, g, i));
    char path2[512];
    snprintf(path2, sizeof path2, "%s/rt2.gguf", test_tmpdir());
    T_OK(gguf_writer_write(w2, path2));
    gguf_writer_destroy(w2);
    gguf *g2;
    T_OK(gguf_open(path2, &g2));
    T_EQ_INT(gguf_n_kv(g2), gguf_n_kv(g));
    T_OK(gguf_get_arr(g2, "a.strs", &a));
    T_CHECK(gguf_str_eq(gguf_arr_str(&a, 0), "x"));
    T_OK(gguf_get_i64(g2, "a.i16", &i64));
    T_EQ_INT(i64, -30000);
    gguf_close(g2);
    gguf_close(g);
}

/* Hand-built file with a nested array (array of arrays of strings). */
static void t_nested(void) {
    unsigned char buf[512];
    size_t n = 0;
#define PUT(v, k)                                                                                  \
    do {                                                                                           \
        uint64_t v_ = (uint64_t)(v);                                                               \
        for (int i_ = 0; i_ < (k); i_++)                                                           \
            buf[n++] = (unsigned char)(v_ >> (8 * i_));                                            \
    } while (0)
#define PUTS(str)                                                                                  \
    do {                                                                                           \
        PUT(strlen(str), 8);                                                                       \
        memcpy(buf + n, str, strlen(str));                                                         \
        n += strlen(str);                                                                          \
    } while (0)
    PUT(0x46554747u, 4);
    PUT(2, 4); /* version 2 */
    PUT(0, 8);
    PUT(1, 8);
    PUTS("nest");
    PUT(GGUF_VT_ARRAY, 4);
    PUT(GGUF_VT_ARRAY, 4);
    PUT(2, 8);
    PUT(GGUF_VT_STRING, 4);
    PUT(2, 8);
    PUTS("ab");
    PUTS("c");
    PUT(GGUF_VT_STRING, 4);
    PUT(1, 8);
    PUTS("def");
    gguf *g;
    T_OK(gguf_open_memory(buf, n, "nested", &g));
    T_EQ_INT(gguf_version(g), 2);
    gguf_arr a, sub;
    T_OK(gguf_get_arr(g, "nest", &a));
    T_EQ_INT(a.n, 2);
    T_OK(gguf_arr_get_arr(&a, 1, &sub));
    T_CHECK(sub.n == 1 && gguf_str_eq(gguf_arr_str(&sub, 0), "def"));
    T_OK(gguf_arr_get_arr(&a, 0, &sub));
    T_CHECK(gguf_str_eq(gguf_arr_str(&sub, 1), "c"));
    gguf_close(g);
    /* every truncation fails cleanly */
    for (size_t k = 0; k < n; k++) {
        int rc = gguf_open_memory(buf, k, "nested", &g);
        T_CHECKF(rc == ERR_FORMAT, "prefix %zu: rc %d", k, rc);
    }
}

static void t_shipped(void) {
    const char *p = test_shared_file("models/stories260K.gguf");
    gguf *g;
    T_OK(gguf_open(p, &g));
    gguf_str s;
    T_OK(gguf_get_str(g, "general.architecture", &s));
    T_CHECK(gguf_str_eq(s, "llama"));
    T_EQ_INT(gguf_n_tensors(g), 48);
    gguf_arr a;
    T_OK(gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    T_EQ_INT(a.n, 512);
    T_CHECK(gguf_str_eq(gguf_arr_str(&a, 1), "<s>"));
    gguf_close(g);
}

static void t_truncate_and_flip(void) {
    const char *p = test_shared_file("models/stories260K.gguf");
    size_t n;
    char *b = test_read_file(p, &n);
    T_CHECK(b);
    gguf *g;
    T_OK(gguf_open_memory(b, n, "full", &g));
    uint64_t data_off = gguf_data_offset(g);
    gguf_close(g);
    /* every prefix up to the data section, then a sample of longer ones: all must fail */
    size_t step = 1;
    for (size_t k = 0; k < n; k += step) {
        if (k > data_off)
            step = 4099;
        int rc = gguf_open_memory(b, k, "trunc", &g);
        T_CHECKF(rc == ERR_FORMAT, "prefix of %zu bytes: rc %d (%s)", k, rc, err_detail());
        T_CHECKF(strstr(err_detail(), "at byte"), "prefix %zu: detail '%s'", k, err_detail());
    }
    /* random bit flips in the header: open must not crash; if it succeeds, access must be safe */
    uint64_t st = 12345;
    int iters = (int)(3000 * test_scale());
    char *c = malloc(n);
    for (int it = 0; it < iters; it++) {
        memcpy(c, b, n);
        for (int f = 0; f < 1 + it % 4; f++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)((st >> 33) % data_off);
            c[pos] ^= (char)(1u << ((st >> 20) & 7));
        }
        if (gguf_open_memory(c, n, "flip", &g) == 0) {
            for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
                const gguf_tensor *t = gguf_tensor_at(g, i);
                T_CHECK((const char *)t->data + t->size_bytes <= c + n);
            }
            gguf_close(g);
        }
    }
    free(c);
    free(b);
}

static void t_malformed(void) {
    unsigned char h[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    gguf *g;
    /* zero tensors, zero kv: valid */
    T_OK(gguf_open_memory(h, 24, "empty", &g));
    gguf_close(g);
    h[0] = 'X';
    T_EQ_INT(gguf_open_memory(h, 24, "m", &g), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "magic at byte 0"));
    h[0] = 'G';
    h[4] = 1;
    T_EQ_INT(gguf_open_memory(h, 24, "m", &g), ERR_UNSUPPORTED);
    h[4] = 0;
    h[7] = 3; /* big-endian version 3 */
    T_EQ_INT(gguf_open_memory(h, 24, "m", &g), ERR_UNSUPPORTED);
    T_CHECK(strstr(err_detail(), "big-endian"));
    h[7] = 0;
    h[4] = 3;
    h[8] = 0xff; /* absurd tensor count */
    h[15] = 0x7f;
    T_EQ_INT(gguf_open_memory(h, 24, "m", &g), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "tensor count"));
    T_EQ_INT(gguf_open("/nonexistent/x.gguf", &g), ERR_IO);
}

int main(void) {
    test_run("gguf.roundtrip", t_roundtrip);
    test_run("gguf.nested_arrays", t_nested);
    test_run("gguf.shipped_stories260K", t_shipped);
    test_run("gguf.truncate_and_bitflip", t_truncate_and_flip);
    test_run("gguf.malformed_headers", t_malformed);
    return test_summary();
}
