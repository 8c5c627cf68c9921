/* SPDX-License-Identifier: MIT */
/*
 * kn_type_table: see kn_type_table.h. One row per type number; a number with no row is unknown.
 */
#include "kernels/kn_type_table.h"

#include <stdint.h>
#include <stddef.h>
#include <strings.h>

static const struct {
    const char *name;
    int64_t blck;
    int64_t bytes;
} kn_type_table[GGUF_TYPE_MAX] = {
    [GGUF_TYPE_F32] = {"f32", 1, 4},
    [GGUF_TYPE_F16] = {"f16", 1, 2},
    [GGUF_TYPE_Q4_0] = {"q4_0", 32, 18},
    [GGUF_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGUF_TYPE_Q5_0] = {"q5_0", 32, 22},
    [GGUF_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGUF_TYPE_Q8_0] = {"q8_0", 32, 34},
    [GGUF_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGUF_TYPE_Q2_K] = {"q2_K", 256, 84},
    [GGUF_TYPE_Q3_K] = {"q3_K", 256, 110},
    [GGUF_TYPE_Q4_K] = {"q4_K", 256, 144},
    [GGUF_TYPE_Q5_K] = {"q5_K", 256, 176},
    [GGUF_TYPE_Q6_K] = {"q6_K", 256, 210},
    [GGUF_TYPE_Q8_K] = {"q8_K", 256, 292},
    [GGUF_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [GGUF_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [GGUF_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [GGUF_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [GGUF_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [GGUF_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [GGUF_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [GGUF_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [GGUF_TYPE_I8] = {"i8", 1, 1},
    [GGUF_TYPE_I16] = {"i16", 1, 2},
    [GGUF_TYPE_I32] = {"i32", 1, 4},
    [GGUF_TYPE_I64] = {"i64", 1, 8},
    [GGUF_TYPE_F64] = {"f64", 1, 8},
    [GGUF_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [GGUF_TYPE_BF16] = {"bf16", 1, 2},
    [GGUF_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [GGUF_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [GGUF_TYPE_MXFP4] = {"mxfp4", 32, 17},
};

int64_t kn_type_block_size(int type) {
    return type >= 0 && type < GGUF_TYPE_MAX ? kn_type_table[type].blck : 0;
}

int64_t kn_type_block_bytes(int type) {
    return type >= 0 && type < GGUF_TYPE_MAX ? kn_type_table[type].bytes : 0;
}

const char *kn_type_name(int type) {
    return type >= 0 && type < GGUF_TYPE_MAX ? kn_type_table[type].name : NULL;
}

int kn_type_from_name(const char *name) {
    for (int t = 0; t < GGUF_TYPE_MAX; t++)
        if (kn_type_table[t].name && strcasecmp(kn_type_table[t].name, name) == 0)
            return t;
    return -1;
}

int64_t kn_type_row_bytes(int type, int64_t n) {
    int64_t b = kn_type_block_size(type);
    if (b <= 0 || n < 0 || n % b)
        return -1;
    int64_t blocks = n / b;
    int64_t bytes = kn_type_block_bytes(type);
    if (blocks > INT64_MAX / bytes)
        return -1;
    return blocks * bytes;
}
