/* SPDX-License-Identifier: MIT */
/*
 * quantize: which weight type each tensor of a model gets (plain types and the llama.cpp-style
 * Q4_K_M and Q5_K_M mixes), the fallback for rows a block type does not fit, and requantizing a
 * whole GGUF model (`verity quantize`). synth uses the same plan, so a synthetic model and a
 * quantized one of the same type have the same tensor types.
 *
 * Fallback (llama.cpp's tensor_type_fallback, extended to the 32-element types): a matrix whose
 * row length ne0 is not a multiple of the type's block size gets Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0; if that (or a 32-element target type) still does not fit (ne0 % 32 != 0), F16.
 *
 * Q4_K_M and Q5_K_M (llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M / _Q5_K_M recipes for dense, non-Falcon
 * models, without an importance matrix; the two differ only in the base type): Q4_K (Q5_K) for
 * every 2-D weight matrix, except
 *   - output.weight, or token_embd.weight when the output is tied to it: Q6_K (Q8_0 if its rows
 *     are not a multiple of 256);
 *   - attn_v.weight and ffn_down.weight of the layers where use_more_bits(i, n) holds,
 *     i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (n layers, integer division): Q6_K;
 * then the fallback above. Norms, biases, every other 1-D tensor and the MoE routers
 * (ffn_gate_inp, as llama.cpp's quantize keeps them) are F32. Expert tensors (3-D) are quantized
 * like matrices, row by row.
 */
#ifndef VERITY_MODEL_QUANTIZE_H
#define VERITY_MODEL_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

/* A weight-type plan: one gguf type for every matrix, or a K-quant _M mix. */
typedef struct quant_plan {
    int type;      /* gguf type of the matrices (the mix's base: Q4_K or Q5_K) */
    bool mix;      /* the _M mix of type: Q6_K output and more-bits attn_v / ffn_down */
    char name[16]; /* "q4_k_m", "q5_k_m" or the type's name */
} quant_plan;

/* Parses a type name: "q4_k_m", "q5_k_m", or any gguf type name verity computes with (f32, f16,
 * bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k; case-insensitive). Returns 0 and *out, or
 * ERR_INVAL naming the type. */
int quant_plan_parse(const char *name, quant_plan *out);

/* The llama.cpp fallback for a type whose block does not divide ne0 (see the top of the file);
 * returns type itself when it fits. */
int quant_fallback_type(int type, int64_t ne0);

/* The type tensor `name` (n_dims dimensions, rows of ne0 elements) gets under plan p in a model
 * of n_layer layers whose output projection is tied to token_embd if tied: F32 for 1-D tensors and
 * norms, else the plan's choice after the fallback. */
int quant_tensor_type(const quant_plan *p, const char *name, uint32_t n_dims, int64_t ne0,
                      int64_t n_layer, bool tied);

/* Quantizes n_rows rows of k floats to type into dst with n_threads threads (rows are independent,
 * so the bytes do not depend on n_threads). Returns 0 or the kn_quantize_rows error. */
int quant_rows(int type, const float *src, int64_t n_rows, int64_t k, void *dst, int n_threads);

/* Requantizes the model at in_path to plan p and writes it atomically to out_path: metadata is
 * copied (general.file_type updated), every tensor gets quant_tensor_type (matrices of another
 * type are dequantized to f32 first; a tensor already of its target type is copied unchanged).
 * Returns 0, ERR_IO / ERR_FORMAT (input), ERR_UNSUPPORTED (a tensor type verity cannot read,
 * naming it), ERR_NOMEM, or the writer's error; on error no output file is written. */
int quant_model(const char *in_path, const char *out_path, const quant_plan *p, int n_threads);

#endif
