/* SPDX-License-Identifier: MIT */
/*
 * fuzz_gguf: libFuzzer target for the GGUF reader. Opens the input as a GGUF file from memory and,
 * if it validates, touches every metadata value, array element and tensor byte range through the
 * public accessors, so any out-of-bounds access the validation missed is caught by ASan.
 */
#include "gguf/gguf.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t fuzz_sink;

static void fuzz_arr(const gguf_arr *a, int depth) {
    for (uint64_t i = 0; i < a->n && i < 4096; i++) {
        if (a->type == GGUF_VT_STRING) {
            gguf_str s = gguf_arr_str(a, i);
            if (s.len)
                fuzz_sink += (unsigned char)s.s[s.len - 1];
        } else if (a->type == GGUF_VT_ARRAY) {
            gguf_arr sub;
            if (depth < 20 && gguf_arr_get_arr(a, i, &sub) == 0)
                fuzz_arr(&sub, depth + 1);
        } else {
            fuzz_sink += (uint64_t)gguf_arr_i64(a, i);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf *g;
    if (gguf_open_memory(data, size, "fuzz", &g) != 0)
        return 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_kv_key(g, i);
        if (k.len)
            fuzz_sink += (unsigned char)k.s[k.len - 1];
        if (gguf_kv_type(g, i) == GGUF_VT_ARRAY) {
            gguf_arr a;
            if (gguf_kv_arr(g, i, &a) == 0)
                fuzz_arr(&a, 0);
        } else {
            gguf_scalar s = gguf_kv_scalar(g, i);
            if (gguf_kv_type(g, i) == GGUF_VT_STRING && s.s.len)
                fuzz_sink += (unsigned char)s.s.s[s.s.len - 1];
        }
    }
    uint32_t u;
    float f;
    gguf_get_u32(g, "general.alignment", &u);
    gguf_get_f32(g, "llama.rope.freq_base", &f);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->size_bytes) {
            const unsigned char *p = t->data;
            fuzz_sink += p[0] + p[t->size_bytes - 1];
        }
    }
    gguf_close(g);
    return 0;
}
