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
 * The other quantized types (kn_pack_kq.c, kernels in kn_matmul_kq_*.c) use the same 32-column
 * blocks and, per 32-element k-block b, the unsigned codes e[0..31] of the block (Q4: 0..15,
 * Q5: 0..31, Q6_K: 0..63) split into planes a VNNI kernel can rebuild with a few bit operations:
 *   NIB  [4 group pairs g][32 columns][4 bytes j]: e[4g+j] & 15 | (e[16+4g+j] & 15) << 4 (as Q4_0)
 *   QH5  [32 columns][4 bytes j]: bit g of byte j = bit 4 of e[4g+j], bit 4+g = bit 4 of
 *        e[16+4g+j], so (dword << (4-g)) & 0x10 and (dword >> g) & 0x10 give the fifth bits of
 *        group g's low and high vectors in place
 *   QM5  (Q5 types on AVX-512 with the kq-q5-mask toggle, in place of QH5, same 128 bytes)
 *        [4 groups g][2 column halves h][2: low, high][8 bytes]: a 64-bit mask over the 64 bytes
 *        of group g's low (high) vector of columns 16h..16h+15 (byte 4 (c - 16h) + j): bit set
 *        where e[4g+j] (e[16+4g+j]) has bit 4, so a masked byte add of 16 restores the codes
 *   QH6  [2 halves h][32 columns][4 bytes j]: bits 2g..2g+1 of byte j = e[16h+4g+j] >> 4, so a
 *        dword shift by 4-2g and & 0x30 give group g's two top bits in place
 *   PAIR [8 steps s][16 column pairs c][4 bytes j] (Q4_K on AVX-512 with the kq-q4k-pair toggle,
 *        in place of NIB, same 512 bytes): e_c[4s+j] | e_{c+16}[4s+j] << 4, the codes of columns
 *        c and c + 16 for the same input 4s + j, so one VNNI dot product of a step's 64 bytes
 *        gives isum_c + 16 isum_{c+16} and one of its bytes & 0xF0 gives 16 isum_{c+16}
 * Per-column scales are arrays [32] of the type's scale element, with f16 kept as stored (F16C
 * converts it exactly), and per (column block):
 *   Q4_1: per b: d[32] f16, m[32] f16, NIB                                    640 bytes
 *   Q5_0: per b: d[32] f16, NIB, QH5                                          704 bytes
 *   Q5_1: per b: d[32] f16, m[32] f16, NIB, QH5                               768 bytes
 *   Q4_K: per super-block: d[32] f16, dmin[32] f16; then per b: sc[32] u8, min[32] u8 (the
 *         unpacked 6-bit scales), NIB                                128 + 8 x 576 bytes
 *   Q5_K: as Q4_K with QH5 after each NIB                            128 + 8 x 704 bytes
 *   Q6_K: per super-block: d[32] f16; then per b: sc_lo[32] i8, sc_hi[32] i8 (the scales of
 *         elements 0..15 and 16..31), NIB, QH6                        64 + 8 x 832 bytes
 * i.e. the GGUF size per column (Q4_K/Q5_K 4 bytes more per 256 for the unpacked scales). Columns
 * past N are all zero.
 */
#ifndef VERITY_KERNELS_KN_INT_H
#define VERITY_KERNELS_KN_INT_H

#include "kernels/kn.h"

#define KN_NB_F           64
#define KN_NB_Q           32
#define KN_KC_MAX         1024 /* the largest K chunk of the float panel (mm-kc) */
#define KN_Q8_BLOCK_BYTES (64 + 8 * KN_NB_Q * 4)
#define KN_Q4_BLOCK_BYTES (64 + 4 * KN_NB_Q * 4)

struct kn_mat {
    int type;
    int64_t n, k;
    kn_isa isa;
    const void *ref_data; /* GGUF-layout data (scalar ISA) */
    void *packed;         /* SIMD ISAs */
    size_t packed_bytes;
    bool prefetch;       /* the mm-prefetch toggle at creation */
    int direct_rows;     /* the mm-direct-rows toggle at creation (AVX-512 float types) */
    int kc;              /* the float panel's K chunk (kn_matmul_kc of mm-kc at creation) */
    bool panel_fuse;     /* mm-panel-fuse at creation: the first row tile converts the panel */
    bool panel_pf_l2;    /* mm-panel-pf-l2 at creation: the next chunk's weights into L2 */
    int q_tile;          /* the mm-q-tile toggle at creation (AVX-512 Q8_0) */
    int q6k_prefetch;    /* the q6k-prefetch toggle at creation (bytes ahead; 0 = none) */
    int kq_prefetch;     /* the kq-prefetch toggle at creation (Q4_K/Q5_K; bytes ahead, 0 = none) */
    int q8_prefetch;     /* the q8-prefetch toggle at creation (Q8_0; bytes ahead, 0 = none) */
    int prefetch_l2;     /* the mm-prefetch-l2 toggle at creation (one-row K-quant and Q8_0
                          * products: bytes ahead into L2, 0 = none) */
    bool q4k_pair;       /* Q4_K packed as PAIR, not NIB (AVX-512 and the kq-q4k-pair toggle) */
    bool q5_mask;        /* Q5 types' fifth bits as QM5, not QH5 (AVX-512 and kq-q5-mask) */
    int64_t n_blocks;    /* column blocks */
    size_t block_stride; /* bytes per column block */
};

/* Float-type matmul over column blocks [b0, b1). scratch: KN_KC_MAX * KN_NB_F floats. */
void kn_matmul_f_avx512(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                        int64_t b0, int64_t b1, float *scratch);
void kn_matmul_f_avx2(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                      int64_t b0, int64_t b1, float *scratch);
/* Quantized-type matmul over column blocks [b0, b1). */
void kn_matmul_q_avx512(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                        int64_t b0, int64_t b1);
void kn_matmul_q_avx2(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                      int64_t b0, int64_t b1);

/* Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K matmul over column blocks [b0, b1). */
void kn_matmul_kq_avx512(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                         int64_t b0, int64_t b1);
void kn_matmul_kq_avx2(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy,
                       int64_t b0, int64_t b1);

/* Packing of the types above (kn_pack_kq.c): bytes per column block, and the packer (writes
 * every byte of w->packed from GGUF-layout src). */
size_t kn_kq_block_stride(int type, int64_t k);
void kn_pack_kq(kn_mat *w, const unsigned char *src);
/* True for the types kn_pack_kq packs. */
bool kn_type_is_kq(int type);

/* The one-row products' weight prefetch over the len bytes being read at p: the same bytes pf
 * ahead into L1 and pf2 ahead into L2 (0: none). A hint only. */
static inline __attribute__((always_inline)) void kn_prefetch_ahead(const void *p, size_t len,
                                                                    int64_t pf, int64_t pf2) {
    if (pf)
        for (size_t o = 0; o < len; o += 64)
            __builtin_prefetch((const char *)p + pf + o, 0, 3); /* prefetcht0 */
    if (pf2)
        for (size_t o = 0; o < len; o += 64)
            __builtin_prefetch((const char *)p + pf2 + o, 0, 2); /* prefetcht1 */
}

/* A cursor over the K and V rows of one KV head at positions [p0, p1) that kn_attn_pf_step
 * prefetches a few positions at a time (the grouped attention kernels' kv->prefetch). */
typedef struct kn_attn_pf {
    const char *kb, *vb; /* the head's row in block 0 of K and of V */
    const int32_t *table;
    size_t bb, rs;                    /* block bytes, position stride in bytes */
    int64_t bs, blk, slot, left, per; /* block size; cursor; positions left; per step */
    int lines;                        /* 64-byte lines of a row */
} kn_attn_pf;

/* Points f at positions [p0, p1) of kv head kvh (rows of hd elements) through table, to be
 * prefetched over `steps` calls of kn_attn_pf_step (p1 <= p0 or steps < 1: nothing). */
static inline void kn_attn_pf_set(kn_attn_pf *f, const kn_attn_kv *kv, const int32_t *table,
                                  int64_t kvh, int64_t hd, int64_t p0, int64_t p1, int64_t steps) {
    size_t esz = kv->f16 ? 2 : 4;
    f->kb = (const char *)kv->k_base + (size_t)(kvh * hd) * esz;
    f->vb = (const char *)kv->v_base + (size_t)(kvh * hd) * esz;
    f->table = table;
    f->bb = kv->block_bytes;
    f->rs = (size_t)kv->kv_stride * esz;
    f->bs = kv->block_size;
    f->blk = p0 / kv->block_size;
    f->slot = p0 % kv->block_size;
    f->left = p1 > p0 && steps > 0 ? p1 - p0 : 0;
    f->per = steps > 0 ? (f->left + steps - 1) / steps : 0;
    f->lines = (int)(((size_t)hd * esz + 63) / 64);
}

/* Prefetches the next f->per positions' K and V rows into L2 (prefetcht1: from memory it beat
 * prefetcht0 here, 1.157x against 1.11x over no prefetch at two threads). A hint only. */
static inline __attribute__((always_inline)) void kn_attn_pf_step(kn_attn_pf *f) {
    for (int64_t n = f->per; n > 0 && f->left > 0; n--, f->left--) {
        size_t off = (size_t)f->table[f->blk] * f->bb + (size_t)f->slot * f->rs;
        for (int o = 0; o < f->lines; o++) {
            __builtin_prefetch(f->kb + off + 64 * o, 0, 2);
            __builtin_prefetch(f->vb + off + 64 * o, 0, 2);
        }
        if (++f->slot == f->bs) {
            f->slot = 0;
            f->blk++;
        }
    }
}

/* Sets f to the rows to prefetch while a grouped kernel works on chunk [c0, c1) (chunk starting at
 * absolute cb) of kv head kvh over n_pos positions, over `steps` calls: the next chunk, else the
 * first chunk of kv->next_table's unit, else nothing (kv->prefetch false: nothing). */
static inline void kn_attn_pf_chunk(kn_attn_pf *f, const kn_attn_kv *kv, int64_t kvh, int64_t hd,
                                    int64_t n_pos, int64_t chunk, int64_t cb, int64_t c1,
                                    int64_t steps) {
    f->left = f->per = 0; /* nothing, unless one of the cases below */
    if (kv->prefetch && c1 < n_pos) {
        kn_attn_pf_set(f, kv, kv->table, kvh, hd, c1,
                       cb + 2 * chunk < n_pos ? cb + 2 * chunk : n_pos, steps);
    } else if (kv->prefetch && kv->next_table) {
        int64_t np = kv->next_n_pos;
        int64_t s = kv->window > 0 && np > kv->window ? np - kv->window : 0;
        int64_t e = s - s % chunk + chunk;
        kn_attn_pf_set(f, kv, kv->next_table, kv->next_kvh, hd, s, e < np ? e : np, steps);
    }
}

void kn_act_quantize_avx512(const kn_act *a, int64_t k, int64_t m0, int64_t m1);
void kn_act_quantize_avx2(const kn_act *a, int64_t k, int64_t m0, int64_t m1);

/* Row kernels (kn_ops_*.c). */
float kn_sumsq_avx512(const float *x, int64_t n);
float kn_sumsq_avx2(const float *x, int64_t n);
/* The lane-16 dot product (kn_index_avx2.c), bitwise kn_dot_ref. */
float kn_dot_avx2(const float *a, const float *b, int64_t n);
/* out[d] = fma(p, row[d], out[d]) for d < n, row F16 (widened exactly) or F32: kn_attn_sparse_row's
 * value sum, bitwise its scalar loop. */
void kn_sparse_acc_avx2(float *out, float p, const void *row, bool f16, int64_t n);
/* dst[d] = the F16 src[d] as a float (exact), d < n. */
void kn_f16_widen_avx2(const uint16_t *src, float *dst, int64_t n);
/* The lightning indexer's score (kn_index_avx2.c), bitwise kn_index_score's scalar code. */
float kn_index_score_avx2(const float *q, const float *w, int64_t n_head, int64_t d,
                          const float *k);
void kn_scale_mul_avx512(const float *x, float r, const float *w, int64_t n, float *y);
void kn_scale_mul_avx2(const float *x, float r, const float *w, int64_t n, float *y);
void kn_swiglu_avx512(const float *g, const float *u, int64_t n, float *h);
void kn_swiglu_avx2(const float *g, const float *u, int64_t n, float *h);
void kn_store_kv_avx512(void *dst, const float *src, int64_t n, bool f16);
void kn_store_kv_avx2(void *dst, const float *src, int64_t n, bool f16);
void kn_attn_row_avx512(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim,
                        int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out);
void kn_attn_rows_avx512(const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh,
                         int64_t head_dim, int64_t n_pos, float scale, int64_t chunk,
                         float *scratch, float *out);
void kn_attn_row_avx2(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim,
                      int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out);
void kn_attn_rows_avx2(const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh,
                       int64_t head_dim, int64_t n_pos, float scale, int64_t chunk, float *scratch,
                       float *out);

#endif
