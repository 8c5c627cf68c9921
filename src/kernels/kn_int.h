/* SPDX-License-Identifier: MIT */
/*
 * kn_int: declarations shared inside src/kernels only: the packed weight layouts and the per-ISA
 * entry points that kn_matmul.c / kn_ops.c dispatch to.
 *
 * Packed layouts (SIMD ISAs; the scalar ISA computes straight from GGUF layout):
 *   Float types (F32, F16, BF16): columns in blocks of KN_NB_F = 64; block jb stores [K][64]
 *     elements of the native type: element (k, c) is W[jb*64 + c][k]. Columns past N are zero.
 *   Q8_0: columns in blocks of KN_NB_Q = 32; block jb stores, for each 32-element k-block b:
 *     32 f16 scales (64 bytes), then [8 groups][32 columns][4 bytes] of (w ^ 0x80), i.e. w + 128
 *     as unsigned, so VNNI's unsigned x signed dot takes the weights as the unsigned operand;
 *     the kernel subtracts 128 * sum(x) to recover sum(w * x).  1088 bytes per (block, b).
 *   Q4_0: as Q8_0 but quants are [4 group pairs][32 columns][4 bytes], byte j of group pair g for
 *     column c = q[4g + j] | q[16 + 4g + j] << 4 (raw nibbles 0..15, w = q - 8; the kernel
 *     subtracts 8 * sum(x)).  576 bytes per (block, b).
 */
#ifndef VERITY_KERNELS_KN_INT_H
#define VERITY_KERNELS_KN_INT_H

#include "kernels/kn.h"

#define KN_NB_F 64
#define KN_NB_Q 32
#define KN_KC 128
#define KN_Q8_BLOCK_BYTES (64 + 8 * KN_NB_Q * 4)
#define KN_Q4_BLOCK_BYTES (64 + 4 * KN_NB_Q * 4)

struct kn_mat {
    int type;
    int64_t n, k;
    kn_isa isa;
    const void *ref_data; /* GGUF-layout data (scalar ISA) */
    void *packed;         /* SIMD ISAs */
    size_t packed_bytes;
    int64_t n_blocks;      /* column blocks */
    size_t block_stride;   /* bytes per column block */
};

/* Float-type matmul over column blocks [b0, b1). scratch: KN_KC * KN_NB_F floats. */
void kn_matmul_f_avx512(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                        int64_t b0, int64_t b1, float *scratch);
void kn_matmul_f_avx2(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                      int64_t b0, int64_t b1, float *scratch);
/* Quantized-type matmul over column blocks [b0, b1). */
void kn_matmul_q_avx512(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                        int64_t b0, int64_t b1);
void kn_matmul_q_avx2(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                      int64_t b0, int64_t b1);

void kn_act_quantize_avx512(const kn_act *a, int64_t k, int64_t m0, int64_t m1);
void kn_act_quantize_avx2(const kn_act *a, int64_t k, int64_t m0, int64_t m1);

/* Row kernels (kn_ops_*.c). */
float kn_sumsq_avx512(const float *x, int64_t n);
float kn_sumsq_avx2(const float *x, int64_t n);
void kn_scale_mul_avx512(const float *x, float r, const float *w, int64_t n, float *y);
void kn_scale_mul_avx2(const float *x, float r, const float *w, int64_t n, float *y);
void kn_swiglu_avx512(const float *g, const float *u, int64_t n, float *h);
void kn_swiglu_avx2(const float *g, const float *u, int64_t n, float *h);
void kn_store_kv_avx512(void *dst, const float *src, int64_t n, bool f16);
void kn_store_kv_avx2(void *dst, const float *src, int64_t n, bool f16);
void kn_attn_row_avx512(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim,
                        int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out);
void kn_attn_row_avx2(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim,
                      int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out);

#endif
