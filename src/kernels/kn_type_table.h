/* SPDX-License-Identifier: MIT */
/*
 * kn_type_table: the tensor element types and their sizes (elements and bytes per block), the
 * one type-size table. It lives in kernels, the lowest subsystem that computes with the types;
 * the GGUF reader and writer use it to validate and lay out tensors (gguf -> kernels is the one
 * sideways edge of that tier, docs/architecture.md). The type numbers and names are ggml's (the
 * GGUF file format's), hence the GGUF_TYPE_ names. Read-only data: safe from any thread.
 */
#ifndef VERITY_KERNELS_KN_TYPE_TABLE_H
#define VERITY_KERNELS_KN_TYPE_TABLE_H

#include <stdint.h>

/* Tensor element types, numbered as ggml numbers them. */
enum gguf_type {
    GGUF_TYPE_F32 = 0,
    GGUF_TYPE_F16 = 1,
    GGUF_TYPE_Q4_0 = 2,
    GGUF_TYPE_Q4_1 = 3,
    GGUF_TYPE_Q5_0 = 6,
    GGUF_TYPE_Q5_1 = 7,
    GGUF_TYPE_Q8_0 = 8,
    GGUF_TYPE_Q8_1 = 9,
    GGUF_TYPE_Q2_K = 10,
    GGUF_TYPE_Q3_K = 11,
    GGUF_TYPE_Q4_K = 12,
    GGUF_TYPE_Q5_K = 13,
    GGUF_TYPE_Q6_K = 14,
    GGUF_TYPE_Q8_K = 15,
    GGUF_TYPE_IQ2_XXS = 16,
    GGUF_TYPE_IQ2_XS = 17,
    GGUF_TYPE_IQ3_XXS = 18,
    GGUF_TYPE_IQ1_S = 19,
    GGUF_TYPE_IQ4_NL = 20,
    GGUF_TYPE_IQ3_S = 21,
    GGUF_TYPE_IQ2_S = 22,
    GGUF_TYPE_IQ4_XS = 23,
    GGUF_TYPE_I8 = 24,
    GGUF_TYPE_I16 = 25,
    GGUF_TYPE_I32 = 26,
    GGUF_TYPE_I64 = 27,
    GGUF_TYPE_F64 = 28,
    GGUF_TYPE_IQ1_M = 29,
    GGUF_TYPE_BF16 = 30,
    GGUF_TYPE_TQ1_0 = 34,
    GGUF_TYPE_TQ2_0 = 35,
    GGUF_TYPE_MXFP4 = 39,
    GGUF_TYPE_MAX = 40
};

/* Elements per block and bytes per block of a tensor type; both 0 for a number that is not a known
 * type. */
int64_t kn_type_block_size(int type);
int64_t kn_type_block_bytes(int type);

/* Name of a tensor type ("q8_0", "f16"), or NULL if unknown. */
const char *kn_type_name(int type);

/* Parses a type name (case-insensitive: "Q8_0", "f16"); returns the type or -1. */
int kn_type_from_name(const char *name);

/* Bytes needed for a row of n elements of type, or -1 if n is not a multiple of the block size
 * (or the type is unknown / the size overflows). */
int64_t kn_type_row_bytes(int type, int64_t n);

#endif
