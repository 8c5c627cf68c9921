/* SPDX-License-Identifier: MIT */
/*
 * kn_pack_kq: repacks Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights from GGUF layout into the
 * column-blocked planes of kn_int.h, once at load time. Each row is decoded with the reference
 * unpackers of kn_types (so the packed codes are by construction the ones kn_matmul_ref reads) and
 * scattered into its column's lanes (Q4_K's PAIR plane: into the low or high nibbles of lanes
 * shared with the column 16 away; the QM5 plane: into bits of masks shared with its half's other
 * columns); nothing is rounded or rescaled here except the K-quant 6-bit
 * scales, which are unpacked to bytes.
 */
#include "kernels/kn_int.h"
#include "kernels/kn_type_table.h"

#include <string.h>

#define KQ_NIB 512
#define KQ_QH5 128
#define KQ_QH6 256

bool kn_type_is_kq(int type) {
    switch (type) {
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q5_0:
    case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q5_K:
    case GGUF_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

/* bytes per 32-element chunk, and per super-block header (K-quants) */
static size_t kq_chunk_bytes(int type) {
    switch (type) {
    case GGUF_TYPE_Q4_1:
        return 128 + KQ_NIB;
    case GGUF_TYPE_Q5_0:
        return 64 + KQ_NIB + KQ_QH5;
    case GGUF_TYPE_Q5_1:
        return 128 + KQ_NIB + KQ_QH5;
    case GGUF_TYPE_Q4_K:
        return 64 + KQ_NIB;
    case GGUF_TYPE_Q5_K:
        return 64 + KQ_NIB + KQ_QH5;
    case GGUF_TYPE_Q6_K:
        return 64 + KQ_NIB + KQ_QH6;
    default:
        return 0;
    }
}

static size_t kq_header_bytes(int type) {
    return type == GGUF_TYPE_Q4_K || type == GGUF_TYPE_Q5_K ? 128 : type == GGUF_TYPE_Q6_K ? 64 : 0;
}

size_t kn_kq_block_stride(int type, int64_t k) {
    return (size_t)(k / KN_QK) * kq_chunk_bytes(type) +
           (size_t)(k / KN_QK_K) * kq_header_bytes(type);
}

/* Scatters block codes e[32] of column c into NIB, or PAIR if pair (and QH5, or QM5 if qm5, /
 * QH6 when given). PAIR and QM5 bytes hold several columns: the caller has zeroed them. */
static void kq_put_codes(unsigned char *nib, unsigned char *qh5, unsigned char *qh6, int c,
                         const uint8_t *e, bool pair, bool qm5) {
    if (pair) {
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 4; j++)
                nib[(s * 16 + (c & 15)) * 4 + j] |=
                    (unsigned char)((e[4 * s + j] & 15) << (c >= 16 ? 4 : 0));
        return;
    }
    for (int g = 0; g < 4; g++)
        for (int j = 0; j < 4; j++)
            nib[(g * KN_NB_Q + c) * 4 + j] =
                (unsigned char)((e[4 * g + j] & 15) | ((e[16 + 4 * g + j] & 15) << 4));
    if (qh5 && qm5) {
        for (int g = 0; g < 4; g++) {
            unsigned char *mk = qh5 + 16 * (2 * g + c / 16);
            for (int j = 0; j < 4; j++) {
                int lane = (c % 16) * 4 + j;
                mk[lane / 8] |= (unsigned char)(((e[4 * g + j] >> 4) & 1) << (lane % 8));
                mk[8 + lane / 8] |= (unsigned char)(((e[16 + 4 * g + j] >> 4) & 1) << (lane % 8));
            }
        }
    } else if (qh5) {
        for (int j = 0; j < 4; j++) {
            unsigned v = 0;
            for (int g = 0; g < 4; g++)
                v |= (unsigned)((e[4 * g + j] >> 4) & 1) << g |
                     (unsigned)((e[16 + 4 * g + j] >> 4) & 1) << (4 + g);
            qh5[c * 4 + j] = (unsigned char)v;
        }
    }
    if (qh6)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++) {
                unsigned v = 0;
                for (int g = 0; g < 4; g++)
                    v |= (unsigned)((e[16 * h + 4 * g + j] >> 4) & 3) << (2 * g);
                qh6[(h * KN_NB_Q + c) * 4 + j] = (unsigned char)v;
            }
}

void kn_pack_kq(kn_mat *w, const unsigned char *src) {
    const int type = w->type;
    const int64_t K = w->k, KB = K / KN_QK;
    const size_t rb = (size_t)kn_type_row_bytes(type, K);
    const size_t chunk = kq_chunk_bytes(type), hdr = kq_header_bytes(type);
    const bool kquant = hdr != 0;
    memset(w->packed, 0, w->packed_bytes);
    for (int64_t jb = 0; jb < w->n_blocks; jb++) {
        unsigned char *blk = (unsigned char *)w->packed + (size_t)jb * w->block_stride;
        for (int c = 0; c < KN_NB_Q; c++) {
            int64_t n = jb * KN_NB_Q + c;
            if (n >= w->n)
                break; /* padding columns stay zero */
            const unsigned char *row = src + (size_t)n * rb;
            unsigned char *p = blk;
            uint8_t e[KN_QK_K]; /* a K-quant super-block's codes, decoded once per super-block */
            for (int64_t b = 0; b < KB; b++) {
                int j = (int)(b % 8); /* sub-block within a K-quant super-block */
                if (kquant && j == 0) {
                    uint16_t *h = (uint16_t *)p;
                    if (type == GGUF_TYPE_Q6_K) {
                        h[c] = ((const kn_block_q6_K *)row)[b / 8].d;
                    } else {
                        /* Q4_K and Q5_K start with the same d, dmin fields */
                        const kn_block_q4_K *kb =
                            (const kn_block_q4_K *)(row + (size_t)(b / 8) *
                                                              (size_t)kn_type_block_bytes(type));
                        h[c] = kb->d;
                        h[KN_NB_Q + c] = kb->dmin;
                    }
                    p += hdr;
                }
                const uint8_t *eb = e;
                bool dm = type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_1;
                unsigned char *nib = p + (dm ? 128 : 64);
                unsigned char *qh5 = NULL, *qh6 = NULL;
                switch (type) {
                case GGUF_TYPE_Q4_1: {
                    const kn_block_q4_1 *q = (const kn_block_q4_1 *)row + b;
                    ((uint16_t *)p)[c] = q->d;
                    ((uint16_t *)p)[KN_NB_Q + c] = q->m;
                    for (int i = 0; i < 16; i++) {
                        e[i] = q->q[i] & 15;
                        e[i + 16] = q->q[i] >> 4;
                    }
                    break;
                }
                case GGUF_TYPE_Q5_0: {
                    const kn_block_q5_0 *q = (const kn_block_q5_0 *)row + b;
                    ((uint16_t *)p)[c] = q->d;
                    kn_unpack_q5(q->qh, q->q, e);
                    qh5 = nib + KQ_NIB;
                    break;
                }
                case GGUF_TYPE_Q5_1: {
                    const kn_block_q5_1 *q = (const kn_block_q5_1 *)row + b;
                    ((uint16_t *)p)[c] = q->d;
                    ((uint16_t *)p)[KN_NB_Q + c] = q->m;
                    kn_unpack_q5(q->qh, q->q, e);
                    qh5 = nib + KQ_NIB;
                    break;
                }
                case GGUF_TYPE_Q4_K:
                case GGUF_TYPE_Q5_K: {
                    /* d, dmin and scales[12] sit at the same offsets in both blocks */
                    const unsigned char *sb =
                        row + (size_t)(b / 8) * (size_t)kn_type_block_bytes(type);
                    int sc, mn;
                    kn_kquant_scale_min(((const kn_block_q4_K *)sb)->scales, j, &sc, &mn);
                    p[c] = (unsigned char)sc;
                    p[KN_NB_Q + c] = (unsigned char)mn;
                    if (type == GGUF_TYPE_Q4_K) {
                        if (j == 0)
                            kn_unpack_q4_K((const kn_block_q4_K *)sb, e);
                    } else {
                        if (j == 0)
                            kn_unpack_q5_K((const kn_block_q5_K *)sb, e);
                        qh5 = nib + KQ_NIB;
                    }
                    eb = e + 32 * j;
                    break;
                }
                case GGUF_TYPE_Q6_K: {
                    const kn_block_q6_K *sb = (const kn_block_q6_K *)row + b / 8;
                    p[c] = (unsigned char)sb->scales[2 * j];
                    p[KN_NB_Q + c] = (unsigned char)sb->scales[2 * j + 1];
                    if (j == 0)
                        kn_unpack_q6_K(sb, e);
                    eb = e + 32 * j;
                    qh6 = nib + KQ_NIB;
                    break;
                }
                }
                kq_put_codes(nib, qh5, qh6, c, eb, w->q4k_pair, w->q5_mask);
                p += chunk;
            }
        }
    }
}
