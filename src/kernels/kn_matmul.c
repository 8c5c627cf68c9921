/* SPDX-License-Identifier: MIT */
/*
 * kn_matmul: ISA selection, weight packing, matmul dispatch and the scalar references.
 *
 * Work division: the N columns are cut into blocks (64 columns for float types, 32 for quantized
 * types, see kn_int.h) and thread ith of nth takes blocks [ith*nb/nth, (ith+1)*nb/nth). Splitting
 * over N only (never K) is what keeps each output element's operation sequence independent of the
 * thread count. Every M (1 token or 512) goes through the same kernels: there is no path that
 * exists only above some batch size (design.md, "One path").
 *
 * The scalar ISA computes from the GGUF layout directly (kn_matmul_ref), which is also the
 * reference the SIMD kernels are tested against bit for bit.
 */
#include "kernels/kn_int.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/mem.h"
#include "kernels/kn_type_table.h"

#include <stdlib.h>
#include <string.h>

bool kn_isa_available(kn_isa isa) {
#ifdef VERITY_NO_SIMD
    return isa == KN_ISA_SCALAR;
#else
    const cpu_features *f = cpu_get_features();
    switch (isa) {
    case KN_ISA_SCALAR:
        return true;
    case KN_ISA_AVX2:
        return f->avx2 && f->fma && f->f16c;
    case KN_ISA_AVX512:
        return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl &&
               f->avx512dq && f->avx512vnni;
    }
    return false;
#endif
}

const char *kn_isa_name(kn_isa isa) {
    static const char *names[] = {"scalar", "avx2", "avx512"};
    return (unsigned)isa < 3 ? names[isa] : "?";
}

int kn_isa_select(kn_isa *out) {
    const char *want = flags_str(FLAG_ISA);
    if (strcmp(want, "auto") == 0) {
        *out = kn_isa_available(KN_ISA_AVX512) ? KN_ISA_AVX512
               : kn_isa_available(KN_ISA_AVX2) ? KN_ISA_AVX2
                                               : KN_ISA_SCALAR;
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (strcmp(want, kn_isa_name((kn_isa)i)) == 0) {
            if (!kn_isa_available((kn_isa)i))
                return err_set(ERR_UNSUPPORTED, "isa %s requested but this CPU does not support it",
                               want);
            *out = (kn_isa)i;
            return 0;
        }
    }
    return err_set(ERR_INVAL, "unknown isa '%s'", want);
}

static bool kn_type_is_q(int type) {
    return type == GGUF_TYPE_Q8_0 || type == GGUF_TYPE_Q4_0 || kn_type_is_kq(type);
}

static int kn_elem_bytes(int type) {
    return type == GGUF_TYPE_F32 ? 4 : 2;
}

/* Packs float-type W into [nb][K][64] of the native element type; columns past N are zero.
 * Rows are read sequentially and written with a stride of 64 elements (typed copies, not memcpy
 * per element: packing a 0.5b model takes well under a second). */
static void kn_pack_f(kn_mat *w, const unsigned char *src) {
    const int64_t K = w->k;
    for (int64_t jb = 0; jb < w->n_blocks; jb++) {
        unsigned char *dst = (unsigned char *)w->packed + (size_t)jb * w->block_stride;
        for (int c = 0; c < KN_NB_F; c++) {
            int64_t n = jb * KN_NB_F + c;
            bool pad = n >= w->n;
            if (w->type == GGUF_TYPE_F32) {
                uint32_t *d = (uint32_t *)dst + c;
                const uint32_t *row = pad ? NULL : (const uint32_t *)src + (size_t)n * (size_t)K;
                for (int64_t k = 0; k < K; k++)
                    d[k * KN_NB_F] = pad ? 0 : row[k];
            } else {
                uint16_t *d = (uint16_t *)dst + c;
                const uint16_t *row = pad ? NULL : (const uint16_t *)src + (size_t)n * (size_t)K;
                for (int64_t k = 0; k < K; k++)
                    d[k * KN_NB_F] = pad ? 0 : row[k];
            }
        }
    }
}

/* Packs Q8_0 / Q4_0 W into the blocked layout of kn_int.h. */
static void kn_pack_q(kn_mat *w, const unsigned char *src) {
    int64_t kb = w->k / KN_QK;
    bool q8 = w->type == GGUF_TYPE_Q8_0;
    size_t bb = q8 ? KN_Q8_BLOCK_BYTES : KN_Q4_BLOCK_BYTES;
    size_t row_bytes = (size_t)kb * (q8 ? sizeof(kn_block_q8_0) : sizeof(kn_block_q4_0));
    for (int64_t jb = 0; jb < w->n_blocks; jb++) {
        unsigned char *blk = (unsigned char *)w->packed + (size_t)jb * w->block_stride;
        for (int64_t b = 0; b < kb; b++) {
            unsigned char *p = blk + (size_t)b * bb;
            uint16_t *scales = (uint16_t *)p;
            unsigned char *qs = p + 64;
            for (int c = 0; c < KN_NB_Q; c++) {
                int64_t n = jb * KN_NB_Q + c;
                if (n >= w->n) {
                    scales[c] = 0;
                    if (q8)
                        for (int g = 0; g < 8; g++)
                            memset(qs + ((size_t)g * KN_NB_Q + (size_t)c) * 4, 0x80, 4);
                    else
                        for (int g = 0; g < 4; g++)
                            memset(qs + ((size_t)g * KN_NB_Q + (size_t)c) * 4, 0x88, 4);
                    continue;
                }
                const unsigned char *row = src + (size_t)n * row_bytes;
                if (q8) {
                    const kn_block_q8_0 *blkq = (const kn_block_q8_0 *)row + b;
                    scales[c] = blkq->d;
                    for (int g = 0; g < 8; g++)
                        for (int j = 0; j < 4; j++)
                            qs[((size_t)g * KN_NB_Q + (size_t)c) * 4 + (size_t)j] =
                                (unsigned char)((uint8_t)blkq->q[4 * g + j] ^ 0x80);
                } else {
                    const kn_block_q4_0 *blkq = (const kn_block_q4_0 *)row + b;
                    scales[c] = blkq->d;
                    uint8_t nib[KN_QK];
                    for (int j = 0; j < 16; j++) {
                        nib[j] = blkq->q[j] & 15;
                        nib[j + 16] = blkq->q[j] >> 4;
                    }
                    for (int g = 0; g < 4; g++)
                        for (int j = 0; j < 4; j++)
                            qs[((size_t)g * KN_NB_Q + (size_t)c) * 4 + (size_t)j] =
                                (unsigned char)(nib[4 * g + j] | (nib[16 + 4 * g + j] << 4));
                }
            }
        }
    }
}

int kn_mat_create(int type, const void *data, int64_t n, int64_t k, kn_isa isa, kn_mat **out) {
    *out = NULL;
    if (!kn_type_supported(type))
        return err_set(ERR_UNSUPPORTED, "matmul: weight type %s is not supported",
                       kn_type_name(type) ? kn_type_name(type) : "?");
    if (n <= 0 || k <= 0 || kn_type_row_bytes(type, k) < 0)
        return err_set(ERR_INVAL, "matmul: bad shape %lld x %lld for type %s", (long long)n,
                       (long long)k, kn_type_name(type));
    kn_mat *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(ERR_NOMEM, "matmul: out of memory");
    w->type = type;
    w->n = n;
    w->k = k;
    w->isa = isa;
    w->ref_data = data;
    w->prefetch = flags_int(FLAG_MM_PREFETCH) != 0;
    w->direct_rows = kn_matmul_direct_rows(flags_int(FLAG_MM_DIRECT_ROWS), cpu_get_features()->amd);
    w->kc = kn_matmul_kc(flags_int(FLAG_MM_KC));
    w->panel_fuse = flags_int(FLAG_MM_PANEL_FUSE) != 0;
    w->panel_pf_l2 = flags_int(FLAG_MM_PANEL_PF_L2) != 0;
    w->q_tile = (int)flags_int(FLAG_MM_Q_TILE);
    w->q6k_prefetch = (int)flags_int(FLAG_Q6K_PREFETCH);
    w->kq_prefetch = (int)flags_int(FLAG_KQ_PREFETCH);
    w->q8_prefetch = (int)flags_int(FLAG_Q8_PREFETCH);
    w->prefetch_l2 = (int)flags_int(FLAG_MM_PREFETCH_L2);
    w->q4k_pair =
        type == GGUF_TYPE_Q4_K && isa == KN_ISA_AVX512 && flags_int(FLAG_KQ_Q4K_PAIR) != 0;
    w->q5_mask = (type == GGUF_TYPE_Q5_0 || type == GGUF_TYPE_Q5_1 || type == GGUF_TYPE_Q5_K) &&
                 isa == KN_ISA_AVX512 && flags_int(FLAG_KQ_Q5_MASK) != 0;
    if (isa == KN_ISA_SCALAR) {
        w->packed_bytes = (size_t)kn_type_row_bytes(type, k) * (size_t)n;
        *out = w;
        return 0;
    }
    if (kn_type_is_kq(type)) {
        w->n_blocks = (n + KN_NB_Q - 1) / KN_NB_Q;
        w->block_stride = kn_kq_block_stride(type, k);
    } else if (kn_type_is_q(type)) {
        w->n_blocks = (n + KN_NB_Q - 1) / KN_NB_Q;
        w->block_stride =
            (size_t)(k / KN_QK) * (type == GGUF_TYPE_Q8_0 ? KN_Q8_BLOCK_BYTES : KN_Q4_BLOCK_BYTES);
    } else {
        w->n_blocks = (n + KN_NB_F - 1) / KN_NB_F;
        w->block_stride = (size_t)k * KN_NB_F * (size_t)kn_elem_bytes(type);
    }
    w->packed_bytes = w->block_stride * (size_t)w->n_blocks;
    w->packed = mem_alloc_large(w->packed_bytes);
    if (!w->packed) {
        free(w);
        return err_set(ERR_NOMEM, "matmul: out of memory packing %lld x %lld weights", (long long)n,
                       (long long)k);
    }
    /* every byte is written by the packers (padding columns included) */
    if (kn_type_is_kq(type))
        kn_pack_kq(w, data);
    else if (kn_type_is_q(type))
        kn_pack_q(w, data);
    else
        kn_pack_f(w, data);
    w->ref_data = NULL; /* packed copy is self-contained */
    *out = w;
    return 0;
}

void kn_mat_destroy(kn_mat *w) {
    if (!w)
        return;
    mem_free_large(w->packed, w->packed_bytes);
    free(w);
}

int64_t kn_mat_n(const kn_mat *w) {
    return w->n;
}
int64_t kn_mat_n_units(const kn_mat *w) {
    return w->isa == KN_ISA_SCALAR ? (w->n + 15) / 16 : w->n_blocks;
}
int64_t kn_mat_k(const kn_mat *w) {
    return w->k;
}
int kn_mat_type(const kn_mat *w) {
    return w->type;
}
size_t kn_mat_bytes(const kn_mat *w) {
    return w->packed_bytes;
}
bool kn_mat_units_span(const kn_mat *w, int64_t u0, int64_t u1, const void **p, size_t *bytes) {
    if (w->isa == KN_ISA_SCALAR || !w->packed || u0 < 0 || u1 > w->n_blocks || u0 >= u1)
        return false;
    *p = (const unsigned char *)w->packed + (size_t)u0 * w->block_stride;
    *bytes = (size_t)(u1 - u0) * w->block_stride;
    return true;
}
bool kn_mat_wants_q8(const kn_mat *w) {
    return kn_type_is_q(w->type);
}
bool kn_mat_wants_q16(const kn_mat *w) {
    return w->type == GGUF_TYPE_Q6_K;
}

int kn_matmul_direct_rows(int64_t flag, bool amd) {
    if (flag >= 0)
        return (int)flag;
    return amd ? 32 : 12;
}

int kn_matmul_kc(int64_t flag) {
    int64_t kc = flag / 16 * 16;
    return (int)(kc < 16 ? 16 : kc > KN_KC_MAX ? KN_KC_MAX : kc);
}

size_t kn_matmul_scratch_bytes(void) {
    return (size_t)KN_KC_MAX * KN_NB_F * sizeof(float);
}

/* ---- scalar references ---- */

static void kn_act_quantize_ref(const kn_act *a, int64_t k, int64_t m0, int64_t m1) {
    int64_t kb = k / KN_QK;
    for (int64_t m = m0; m < m1; m++) {
        const float *x = a->x + m * a->ldx;
        int8_t *q = a->q + m * k;
        for (int64_t b = 0; b < kb; b++) {
            const float *xb = x + b * KN_QK;
            float amax = 0.0f;
            for (int j = 0; j < KN_QK; j++) {
                float av = fabsf(xb[j]);
                if (av > amax) /* NaN never wins */
                    amax = av;
            }
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            int32_t s = 0, s16 = 0;
            for (int j = 0; j < KN_QK; j++) {
                int8_t v = (int8_t)kn_cvt_rne_i32(xb[j] * id);
                q[b * KN_QK + j] = v;
                s += v;
                if (j == 15)
                    s16 = s;
            }
            a->qd[m * kb + b] = d;
            a->qs[m * kb + b] = s;
            if (a->qs16)
                a->qs16[m * kb + b] = s16;
        }
    }
}

void kn_act_quantize(const kn_act *a, int64_t k, int64_t m0, int64_t m1, kn_isa isa) {
    switch (isa) {
#ifndef VERITY_NO_SIMD
    case KN_ISA_AVX512:
        kn_act_quantize_avx512(a, k, m0, m1);
        return;
    case KN_ISA_AVX2:
        kn_act_quantize_avx2(a, k, m0, m1);
        return;
#endif
    default:
        kn_act_quantize_ref(a, k, m0, m1);
    }
}

/* One row's dot product with a Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K weight row, in the
 * canonical order of kn.h: q, d, s are the activation row's codes, block scales and block sums. */
static float kn_dot_kq_ref(int type, const unsigned char *row, int64_t k, const int8_t *q,
                           const float *d, const int32_t *s) {
    float acc = 0.0f;
    if (type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_0 || type == GGUF_TYPE_Q5_1) {
        for (int64_t b = 0; b < k / KN_QK; b++) {
            uint8_t e[KN_QK];
            uint16_t dh, mh = 0;
            if (type == GGUF_TYPE_Q4_1) {
                const kn_block_q4_1 *wb = (const kn_block_q4_1 *)row + b;
                for (int j = 0; j < 16; j++) {
                    e[j] = wb->q[j] & 15;
                    e[j + 16] = wb->q[j] >> 4;
                }
                dh = wb->d;
                mh = wb->m;
            } else if (type == GGUF_TYPE_Q5_0) {
                const kn_block_q5_0 *wb = (const kn_block_q5_0 *)row + b;
                kn_unpack_q5(wb->qh, wb->q, e);
                dh = wb->d;
            } else {
                const kn_block_q5_1 *wb = (const kn_block_q5_1 *)row + b;
                kn_unpack_q5(wb->qh, wb->q, e);
                dh = wb->d;
                mh = wb->m;
            }
            int off = type == GGUF_TYPE_Q5_0 ? 16 : 0;
            int32_t isum = 0;
            for (int j = 0; j < KN_QK; j++)
                isum += (e[j] - off) * q[b * KN_QK + j];
            acc = fmaf((float)isum, kn_f16_to_f32(dh) * d[b], acc);
            if (type != GGUF_TYPE_Q5_0)
                acc = fmaf(kn_f16_to_f32(mh), d[b] * (float)s[b], acc);
        }
        return acc;
    }
    size_t bb = (size_t)kn_type_block_bytes(type);
    for (int64_t sb = 0; sb < k / KN_QK_K; sb++) {
        const unsigned char *blk = row + (size_t)sb * bb;
        uint8_t e[KN_QK_K];
        if (type == GGUF_TYPE_Q6_K) {
            const kn_block_q6_K *wb = (const kn_block_q6_K *)blk;
            kn_unpack_q6_K(wb, e);
            float dw = kn_f16_to_f32(wb->d);
            for (int j = 0; j < 8; j++) {
                int64_t b = sb * 8 + j;
                const int8_t *qb = q + b * KN_QK;
                int32_t lo = 0, hi = 0;
                for (int l = 0; l < 16; l++) {
                    lo += (e[32 * j + l] - 32) * qb[l];
                    hi += (e[32 * j + 16 + l] - 32) * qb[16 + l];
                }
                int32_t isum = wb->scales[2 * j] * lo + wb->scales[2 * j + 1] * hi;
                acc = fmaf((float)isum, dw * d[b], acc);
            }
        } else {
            const kn_block_q4_K *wb = (const kn_block_q4_K *)blk; /* d, dmin, scales shared */
            if (type == GGUF_TYPE_Q4_K)
                kn_unpack_q4_K(wb, e);
            else
                kn_unpack_q5_K((const kn_block_q5_K *)blk, e);
            float dw = kn_f16_to_f32(wb->d), dmin = kn_f16_to_f32(wb->dmin);
            for (int j = 0; j < 8; j++) {
                int64_t b = sb * 8 + j;
                int sc, mn;
                kn_kquant_scale_min(wb->scales, j, &sc, &mn);
                int32_t isum = 0;
                for (int l = 0; l < 32; l++)
                    isum += e[32 * j + l] * q[b * KN_QK + l];
                float sj = dw * (float)sc, mj = dmin * (float)mn;
                acc = fmaf((float)isum, sj * d[b], acc);
                acc = fmaf(-mj, d[b] * (float)s[b], acc);
            }
        }
    }
    return acc;
}

void kn_matmul_ref(int type, const void *data, int64_t k, const kn_act *x, int64_t m, int64_t n0,
                   int64_t n1, float *y, int64_t ldy) {
    size_t rb = (size_t)kn_type_row_bytes(type, k);
    int64_t kb = k / KN_QK;
    for (int64_t n = n0; n < n1; n++) {
        const unsigned char *row = (const unsigned char *)data + (size_t)n * rb;
        for (int64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            const float *xr = x->x ? x->x + i * x->ldx : NULL;
            if (kn_type_is_kq(type)) {
                y[i * ldy + n] =
                    kn_dot_kq_ref(type, row, k, x->q + i * k, x->qd + i * kb, x->qs + i * kb);
                continue;
            }
            switch (type) {
            case GGUF_TYPE_F32: {
                const float *wr = (const float *)row;
                for (int64_t j = 0; j < k; j++)
                    acc = fmaf(xr[j], wr[j], acc);
                break;
            }
            case GGUF_TYPE_F16: {
                const uint16_t *wr = (const uint16_t *)row;
                for (int64_t j = 0; j < k; j++)
                    acc = fmaf(xr[j], kn_f16_to_f32(wr[j]), acc);
                break;
            }
            case GGUF_TYPE_BF16: {
                const uint16_t *wr = (const uint16_t *)row;
                for (int64_t j = 0; j < k; j++)
                    acc = fmaf(xr[j], kn_bf16_to_f32(wr[j]), acc);
                break;
            }
            case GGUF_TYPE_Q8_0: {
                const kn_block_q8_0 *wb = (const kn_block_q8_0 *)row;
                const int8_t *q = x->q + i * k;
                for (int64_t b = 0; b < kb; b++) {
                    int32_t isum = 0;
                    for (int j = 0; j < KN_QK; j++)
                        isum += (int32_t)wb[b].q[j] * q[b * KN_QK + j];
                    float s = kn_f16_to_f32(wb[b].d) * x->qd[i * kb + b];
                    acc = fmaf((float)isum, s, acc);
                }
                break;
            }
            case GGUF_TYPE_Q4_0: {
                const kn_block_q4_0 *wb = (const kn_block_q4_0 *)row;
                const int8_t *q = x->q + i * k;
                for (int64_t b = 0; b < kb; b++) {
                    int32_t isum = 0;
                    for (int j = 0; j < 16; j++) {
                        isum += ((wb[b].q[j] & 15) - 8) * q[b * KN_QK + j];
                        isum += ((wb[b].q[j] >> 4) - 8) * q[b * KN_QK + j + 16];
                    }
                    float s = kn_f16_to_f32(wb[b].d) * x->qd[i * kb + b];
                    acc = fmaf((float)isum, s, acc);
                }
                break;
            }
            }
            y[i * ldy + n] = acc;
        }
    }
}

void kn_matmul(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy, int ith, int nth,
               void *scratch) {
    int64_t units = kn_mat_n_units(w);
    kn_matmul_units(w, x, m, y, ldy, units * ith / nth, units * (ith + 1) / nth, scratch);
}

void kn_matmul_units(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy, int64_t u0,
                     int64_t u1, void *scratch) {
    int64_t units = kn_mat_n_units(w);
    if (u0 < 0)
        u0 = 0;
    if (u1 > units)
        u1 = units;
    if (w->isa == KN_ISA_SCALAR) {
        /* split columns in groups of 16 so the slices match the SIMD split in spirit */
        int64_t n0 = u0 * 16, n1 = u1 * 16 < w->n ? u1 * 16 : w->n;
        if (n0 < n1 && m > 0)
            kn_matmul_ref(w->type, w->ref_data, w->k, x, m, n0, n1, y, ldy);
        return;
    }
    int64_t b0 = u0, b1 = u1;
    if (b0 >= b1 || m <= 0)
        return;
#ifndef VERITY_NO_SIMD
    bool q = kn_type_is_q(w->type);
    if (kn_type_is_kq(w->type)) {
        if (w->isa == KN_ISA_AVX512)
            kn_matmul_kq_avx512(w, x, m, y, ldy, b0, b1);
        else
            kn_matmul_kq_avx2(w, x, m, y, ldy, b0, b1);
    } else if (w->isa == KN_ISA_AVX512) {
        if (q)
            kn_matmul_q_avx512(w, x, m, y, ldy, b0, b1);
        else
            kn_matmul_f_avx512(w, x, m, y, ldy, b0, b1, scratch);
    } else {
        if (q)
            kn_matmul_q_avx2(w, x, m, y, ldy, b0, b1);
        else
            kn_matmul_f_avx2(w, x, m, y, ldy, b0, b1, scratch);
    }
#else
    (void)scratch;
#endif
}
