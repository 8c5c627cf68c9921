/* SPDX-License-Identifier: MIT */
/*
 * kn: the compute kernels of the forward pass: matmul over packed weights, activation
 * quantization, RMSNorm, RoPE, SiLU-gated FFN, softmax and exp, attention over paged KV, and the
 * mixture-of-experts routers.
 *
 * Invariance (P1) is a property of every kernel here, not of the callers:
 *   - Each output element is computed by one canonical sequence of IEEE-754 single-precision
 *     operations that depends only on the problem shape that element belongs to (K for a matmul,
 *     the row length for a norm, the absolute position for attention), never on M (how many rows
 *     are in the batch), on which thread computes it, or on the instruction set.
 *   - Matmul, float weights: y[m][n] = fma chain over k = 0..K-1, starting from +0.
 *     Quantized weights: activations are quantized per row per 32-block b (kn_act_quantize: codes
 *     x_i in -127..127, scale d_x, sum s = sum x_i, and the sum s_lo of the block's first 16
 * codes); each block's dot product with the weight codes is an exact integer isum; blocks are
 * folded into y (starting from +0) in order b = 0..K/32-1, per block: Q8_0, Q4_0, Q5_0:  y =
 * fma((float)isum, d_w * d_x, y)       (isum over the signed values q, q - 8, q - 16) Q4_1, Q5_1:
 * y = fma((float)isum, d_w * d_x, y);  y = fma(m_w, d_x * (float)s, y) (isum over the unsigned
 * codes; x = d_w q + m_w) Q4_K, Q5_K:        sub-block j of super-block i is block b = 8i + j, with
 * s_j = d * sc_j and m_j = dmin * min_j (both exact in f32: 11-bit x 6-bit): y = fma((float)isum,
 * s_j * d_x, y);  y = fma(-m_j, d_x * (float)s, y) Q6_K:              the block's two 16-element
 * sub-blocks, int8 scales a, b: isum = a * isum_lo + b * isum_hi (integer, over the values q - 32),
 *                          y = fma((float)isum, d * d_x, y)
 *     Every product of two floats above is one rounded f32 multiply, every fma one rounding.
 *     Exactness: |x_i| <= 127, so |isum| <= 32 * 32 * 127 (Q5_x) < 2^24 is exact as float; for
 *     Q6_K |isum| <= 2 * 128 * 16 * 32 * 127 = 16,646,144 < 2^24 as well.
 *   - Row reductions (sum of squares, dot products over a head) use the "lane-16" order: element
 *     i goes to lane i mod 16 (sequentially within a lane), then lanes are combined by a fixed
 *     tree (j += j+8, j += j+4, j += j+2, j += j+1).
 *   - exp is kn_expf below: a fixed range reduction and polynomial, not libm.
 * Because the scalar references implement exactly these sequences, the SIMD kernels are tested
 * against them with memcmp, and the `isa` toggle changes speed only.
 *
 * Dimension letters: M rows of activations (tokens), N output features, K input features.
 * Threading: kernels take (ith, nth) and compute a slice; callers run them inside pool_run and
 * separate dependent phases with pool_barrier. Nothing here allocates after creation.
 */
#ifndef VERITY_KERNELS_KN_H
#define VERITY_KERNELS_KN_H

#include "kernels/kn_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kn_isa { KN_ISA_SCALAR = 0, KN_ISA_AVX2 = 1, KN_ISA_AVX512 = 2 } kn_isa;

/* The instruction set to use: the `isa` toggle if set (ERR_UNSUPPORTED if this CPU lacks it),
 * else the best the CPU has. Returns 0 and *out. */
int kn_isa_select(kn_isa *out);

/* "scalar", "avx2", "avx512". */
const char *kn_isa_name(kn_isa isa);

/* True if this CPU can run isa. */
bool kn_isa_available(kn_isa isa);

/* ---- matmul ---- */

typedef struct kn_mat kn_mat;

/* Prepares weight matrix W [N][K] (GGUF layout: row n holds the K inputs of output n, ne[0] = K)
 * of gguf type `type` for isa. SIMD ISAs repack W into column panels (a copy; `data` may be
 * unmapped afterwards); the scalar ISA keeps a pointer to `data`, which must then outlive the
 * matrix. Returns 0, ERR_UNSUPPORTED (type), ERR_INVAL (K not a multiple of the block size),
 * ERR_NOMEM. */
int kn_mat_create(int type, const void *data, int64_t n, int64_t k, kn_isa isa, kn_mat **out);
void kn_mat_destroy(kn_mat *w);

int64_t kn_mat_n(const kn_mat *w);
/* The units kn_matmul divides among its nth callers: thread ith computes units
 * [u*ith/nth, u*(ith+1)/nth) of the u returned here (column blocks of 32 or 64 columns; groups of
 * 16 columns on the scalar ISA). */
int64_t kn_mat_n_units(const kn_mat *w);
int64_t kn_mat_k(const kn_mat *w);
int kn_mat_type(const kn_mat *w);
/* Bytes of packed weight data (what a pass over the matrix reads). */
size_t kn_mat_bytes(const kn_mat *w);
/* Where the weights of units [u0, u1) lie, for a prefetch hint: sets *p and *bytes and returns
 * true when they are one contiguous span (every SIMD layout: a column block's bytes follow the
 * previous block's); false (nothing set) for an empty or out-of-range range, or the scalar ISA's
 * GGUF layout. */
bool kn_mat_units_span(const kn_mat *w, int64_t u0, int64_t u1, const void **p, size_t *bytes);
/* True if the matrix consumes quantized activations (kn_act_quantize before kn_matmul). */
bool kn_mat_wants_q8(const kn_mat *w);
/* True if the matrix also needs the per-16 activation sums (kn_act.qs16). */
bool kn_mat_wants_q16(const kn_mat *w);

/* Activations for a matmul: M rows of K floats, and (for quantized weights) their per-row Q8
 * quantization. All arrays are caller-owned. */
typedef struct kn_act {
    const float *x; /* [M][ldx] */
    int64_t ldx;
    int8_t *q;     /* [M][K]    quantized values, if quantized */
    float *qd;     /* [M][K/32] block scales */
    int32_t *qs;   /* [M][K/32] block sums of q */
    int32_t *qs16; /* [M][K/32] sums of the first 16 q of each block; required by Q6_K weights
                    * (kn_mat_wants_q16), may be NULL otherwise */
} kn_act;

/* Quantizes rows [m0, m1) of a->x into a->q/qd/qs (K a multiple of 32), per row and per block:
 * d = amax / 127, id = d ? 1 / d : 0, q = round-half-even(x * id), s = sum of q; and, if a->qs16
 * is not NULL, the sums of the first 16 q of each block. */
void kn_act_quantize(const kn_act *a, int64_t k, int64_t m0, int64_t m1, kn_isa isa);

/* The row count up to which AVX-512 F16/BF16 matmuls convert weights in registers (the direct
 * path) rather than converting each K chunk once into an f32 panel: flag (the mm-direct-rows
 * toggle) when it is 0 or more, else the CPU's default: 32 when amd (Zen 4 converts on pipes
 * beside its FMAs, so converting in every row tile costs little), 12 otherwise (on Intel a 512-bit
 * vcvtph2ps takes both FMA ports: at 32 rows the direct path spends about a quarter of them on
 * conversions and the panel path a few percent). Only speed depends on it, never the bits. */
int kn_matmul_direct_rows(int64_t flag, bool amd);

/* The K chunk of the float matmuls' f32 panel (F16/BF16 converted once per chunk and column block,
 * then swept by every row tile; F32 read in place): flag (the mm-kc toggle, default 128) rounded
 * down to a multiple of 16, within 16..1024. 128's panel (32 KiB) fits L1 beside the streaming
 * rows; longer chunks store and reload the accumulators less often but keep the panel in L2 (no
 * gain beyond this VM's noise at 256 to 1024: BENCHMARKS.md, "## Engine"). The chunk only decides
 * where the accumulators are stored and reloaded, which is exact: never the bits. */
int kn_matmul_kc(int64_t flag);

/* Per-thread scratch bytes kn_matmul needs (panel conversion buffer). */
size_t kn_matmul_scratch_bytes(void);

/* y[m][n] (row stride ldy) = sum_k x[m][k] * W[n][k] for m < M, for the columns owned by thread
 * ith of nth (a contiguous range of column blocks; every thread must call it for the whole
 * product to be computed). scratch: kn_matmul_scratch_bytes() bytes, 64-byte aligned, private to
 * the thread. */
void kn_matmul(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy, int ith, int nth,
               void *scratch);

/* kn_matmul for the columns of units [u0, u1) of kn_mat_n_units(w) (column blocks, or 16-column
 * groups at the scalar ISA; clamped to them, an empty range does nothing): thread ith of nth in
 * kn_matmul owns units [units * ith / nth, units * (ith + 1) / nth). */
void kn_matmul_units(const kn_mat *w, const kn_act *x, int64_t m, float *y, int64_t ldy, int64_t u0,
                     int64_t u1, void *scratch);

/* The scalar reference, straight from GGUF-layout data, for tests and the scalar ISA: computes
 * columns [n0, n1) of all M rows. For quantized types x must carry q/qd/qs (qs16 is not read). */
void kn_matmul_ref(int type, const void *data, int64_t k, const kn_act *x, int64_t m, int64_t n0,
                   int64_t n1, float *y, int64_t ldy);

/* ---- element-wise and row kernels (scalar; see kn_ops.c) ---- */

/* The canonical exp: 0 below -87.0, +inf above 88.5 (and for +inf), NaN for NaN; else a fixed
 * Cody-Waite reduction x = n ln2 + r and a degree-6 polynomial in r, all in float with fma. */
static inline float kn_expf(float x) {
    if (!(x >= -87.0f)) /* also NaN -> handled below */
        return x != x ? x : 0.0f;
    if (x > 88.5f)
        return INFINITY;
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.38888889e-3f;
    p = fmaf(p, r, 8.33333333e-3f);
    p = fmaf(p, r, 4.16666667e-2f);
    p = fmaf(p, r, 1.66666667e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    /* scale by 2^n in two steps so n = 128 does not overflow the exponent field */
    int32_t ni = (int32_t)n;
    int32_t h = ni >> 1; /* floor(n / 2); gcc and clang shift signed values arithmetically */
    float s1 = kn_bits_f32((uint32_t)(h + 127) << 23);
    float s2 = kn_bits_f32((uint32_t)(ni - h + 127) << 23);
    return (p * s1) * s2;
}

/* The lane-16 sum of squares of x[0..n). */
float kn_sumsq_ref(const float *x, int64_t n);

/* The lane-16 dot product of a[0..n) and b[0..n): acc[i % 16] = fma(a[i], b[i], acc[i % 16]) in
 * element order, then the lanes folded as kn_lane16_tree. */
float kn_dot_ref(const float *a, const float *b, int64_t n);
/* kn_dot_ref's bits, with the instruction set isa (AVX2 and AVX-512 machines: the AVX2 kernel). */
float kn_dot(const float *a, const float *b, int64_t n, kn_isa isa);

/* y[i] = (x[i] * r) * w[i] with r = 1 / sqrt(sumsq(x) / n + eps). w may be NULL (no weight).
 * y may alias x. */
void kn_rmsnorm(const float *x, const float *w, float eps, int64_t n, float *y, kn_isa isa);

/* RoPE on one head vector x[0..head_dim) in place, rotating n_rot dims (pairs) with the angle
 * table cs[i] = {cos, sin} of pair i; neox selects pairs (i, i + n_rot/2) instead of (2i, 2i+1).
 * x0' = x0*c - x1*s; x1' = x0*s + x1*c (plain multiplies and one add each, no fma). */
void kn_rope(float *x, int64_t n_rot, const float *cs, bool neox);

/* h[i] = silu(g[i]) * u[i] with silu(g) = g / (1 + kn_expf(-g)). h may alias g or u. */
void kn_swiglu(const float *g, const float *u, int64_t n, float *h, kn_isa isa);

/* y[i] += x[i]. */
void kn_add(float *y, const float *x, int64_t n);

/* ---- attention ---- */

/* One query row's attention over its own keys, read through a block table. K and V of position p
 * live in block table[p / block_size] at slot p % block_size; block b's K rows start at
 * k_base + b * block_bytes (likewise V), each slot holding kv_stride elements (all KV heads). */
typedef struct kn_attn_kv {
    const void *k_base;
    const void *v_base;
    size_t block_bytes;   /* distance between consecutive blocks */
    const int32_t *table; /* block ids of the sequence, in position order */
    int64_t block_size;
    int64_t kv_stride; /* elements per position: n_kv_heads * head_dim */
    bool f16;          /* element type: F16 if true, else F32 */
    int64_t window;    /* sliding window: a query at position p sees keys > p - window (0: all) */
    /* Prefetch hints for kn_attn_rows (speed only, the bits never change): with prefetch set, the
     * AVX-512 and AVX2 grouped kernels prefetch each chunk's successor while scoring the chunk,
     * spread over its score blocks, and during the last chunk the first chunk of the unit the
     * caller runs next: next_table (NULL: none), kv head next_kvh over next_n_pos positions, in
     * the same k_base / v_base. */
    bool prefetch;
    const int32_t *next_table;
    int64_t next_kvh, next_n_pos;
    /* AVX-512 grouped kernel, F16 values: when more than one value pass of heads reads a chunk's
     * values (more than 4 heads), convert them to f32 once (attn-v-once; speed only) */
    bool v_once;
} kn_attn_kv;

/* Address of the K (or V) row of position p for kv head kvh. */
static inline const void *kn_attn_row_ptr(const kn_attn_kv *kv, const void *base, int64_t p,
                                          int64_t kvh, int64_t head_dim) {
    size_t esz = kv->f16 ? 2 : 4;
    return (const char *)base + (size_t)kv->table[p / kv->block_size] * kv->block_bytes +
           (size_t)((p % kv->block_size) * kv->kv_stride + kvh * head_dim) * esz;
}

/* The longest head row the attention kernels take (MLA's latent rows: 512 + 64 in DeepSeek-V3). */
#define KN_ATTN_HEAD_MAX 1024

/* out[0..head_dim) = softmax(q . K[start..n_pos) * scale) V for kv head kvh, causal over positions
 * start..n_pos-1, where start = max(0, n_pos - window) with a sliding window, else 0. Keys are read
 * in position order in chunks [c*chunk, (c+1)*chunk) (boundaries fixed in absolute position; the
 * first chunk begins at start) merged by online softmax in chunk order; the result depends on
 * (q, keys, values, chunk, window) only. scratch holds `chunk` floats. */
void kn_attn_row(const float *q, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim, int64_t n_pos,
                 float scale, int64_t chunk, float *scratch, float *out, kn_isa isa);

/* Most query heads kn_attn_rows takes at once. */
#define KN_ATTN_GROUP_MAX 16

/* Floats of scratch kn_attn_rows needs for up to g heads (>= the `chunk` kn_attn_row needs). */
size_t kn_attn_scratch_floats(int64_t g, int64_t head_dim, int64_t chunk);

/* kn_attn_row for g query heads that share kv head kvh: q and out hold g rows of head_dim; out
 * row h is bitwise kn_attn_row(q + h * head_dim, ...)'s result (for finite scores), whatever g,
 * while each key row is read and converted once per KN_ATTN_GROUP_MAX heads. scratch:
 * kn_attn_scratch_floats(min(g, KN_ATTN_GROUP_MAX), head_dim, chunk) floats. */
void kn_attn_rows(const float *q, int64_t g, const kn_attn_kv *kv, int64_t kvh, int64_t head_dim,
                  int64_t n_pos, float scale, int64_t chunk, float *scratch, float *out,
                  kn_isa isa);

/* ---- Mixture-of-experts routing (kn_route.c) ----
 *
 * Per token row, scalar only (a router row is n_expert values, a few hundred at most): the gate
 * function over the router logits, an optional selection bias, optional group limiting, top-k,
 * and the weights of the selected experts, in the order llama.cpp's build_moe_ffn defines (the
 * reference these models are checked against). Each function reads only its own row, so the
 * routing of a token never depends on the batch. exp is kn_expf; log1p and sqrt are libm's
 * (fixed for a build). */

/* Gate functions, numbered as GGUF's <arch>.expert_gating_func. */
typedef enum kn_gating {
    KN_GATING_NONE = 0,
    KN_GATING_SOFTMAX = 1,        /* p = softmax(logits) over all experts */
    KN_GATING_SIGMOID = 2,        /* p = 1 / (1 + exp(-logit)) */
    KN_GATING_SOFTMAX_WEIGHT = 3, /* p = logit; the k selected weights are then softmaxed */
    KN_GATING_SQRT_SOFTPLUS = 4,  /* p = sqrt(softplus(logit)), softplus(x) = x above 20 */
} kn_gating;

/* A router's configuration (one per MoE layer; pointers are borrowed). */
typedef struct kn_router {
    int64_t n_expert;     /* experts (>= 1) */
    int64_t n_used;       /* k: experts per token, 1..n_expert */
    kn_gating gating;     /* SOFTMAX .. SQRT_SOFTPLUS */
    const float *bias;    /* [n_expert] added to p for the selection only (exp_probs_b), or NULL */
    int64_t n_group;      /* expert groups for group-limited routing (<= 1: none); divides
                           * n_expert into groups of at least 2 */
    int64_t n_group_used; /* groups kept, 1..n_group */
    bool norm;            /* normalise the k weights by their sum (clamped >= KN_ROUTE_SUM_MIN) */
    float scale;          /* multiply the weights by it, unless it is 0 or 1 */
} kn_router;

/* The smallest weight sum the normalisation divides by (the smallest normal F16). */
#define KN_ROUTE_SUM_MIN 6.103515625e-5f

/* p[e] = gate(logits)[e] for e < n. SOFTMAX: m = max, e_i = kn_expf(l_i - m), s = e_0 + e_1 + ...
 * in index order, p_i = e_i * (1 / s). SIGMOID: 1 / (1 + kn_expf(-l)). SOFTMAX_WEIGHT: p = l.
 * SQRT_SOFTPLUS: sqrtf(l > 20 ? l : log1pf(kn_expf(l))). p may alias logits. */
void kn_route_gate(kn_gating g, const float *logits, int64_t n, float *p);

/* sel[0..k) = the indices of the k largest s[0..n) in descending order of s; equal values go
 * lower index first, and NaN ranks below every number. 1 <= k <= n. */
void kn_route_topk(const float *s, int64_t n, int64_t k, int32_t *sel);

/* Group limiting (DeepSeek-V3): s[0..n) is n_group groups of n / n_group consecutive experts; a
 * group's score is the sum of its two largest s (largest first); every expert outside the
 * n_group_used best groups (kn_route_topk over the group scores) is set to -INFINITY. */
void kn_route_group_mask(float *s, int64_t n, int64_t n_group, int64_t n_group_used);

/* Weights of the k selected experts: w[r] = p[sel[r]]; for SOFTMAX_WEIGHT then the softmax of
 * the k values (as kn_route_gate); if norm, w[r] = w[r] / max(w[0] + ... + w[k-1],
 * KN_ROUTE_SUM_MIN) (sum in rank order); then w[r] *= scale unless scale is 0 or 1. */
void kn_route_weights(const kn_router *r, const float *p, const int32_t *sel, float *w);

/* Routes one token from its router logits [n_expert]: p = gate(logits); the selection scores are
 * p + bias (or p), group-masked if n_group > 1; sel = top-k of them; w = kn_route_weights from the
 * unbiased p. scratch: 2 * n_expert floats. */
void kn_route(const kn_router *r, const float *logits, float *scratch, int32_t *sel, float *w);

/* Hash routing (DeepSeek-V4's leading layers): sel[0..k) = table[token * k + r], the expert ids
 * the model file lists for this token id. Returns false (sel untouched) if any id is outside
 * [0, n_expert). */
bool kn_route_hash(const int32_t *table, int64_t k, int64_t n_expert, int32_t token, int32_t *sel);

/* ---- DeepSeek sparse attention (kn_index.c) ----
 *
 * Scalar, one query or key row per call, fixed order over absolute positions (P1). */

/* Element types of the indexer's key cache (the index-kv-dtype toggle). */
typedef enum kn_ik_type { KN_IK_F32 = 0, KN_IK_F16, KN_IK_BF16, KN_IK_FP8 } kn_ik_type;

/* The KV pool's name of an index-key buffer of type t ("ik-f32", "ik-f16", "ik-bf16", "ik-fp8"),
 * and back (-1 for another name). */
const char *kn_ik_name(kn_ik_type t);
int kn_ik_type_from_name(const char *name);

/* The type a value of the index-kv-dtype toggle names ("f32", "f16", "bf16", "fp8"); any other
 * ("auto") follows the KV's element type: f16 if kv_f16, else f32. */
kn_ik_type kn_ik_type_parse(const char *value, bool kv_f16);

/* Bytes of one key row of d elements: 4d, 2d, 2d, or 4 + d (fp8: an f32 scale, then the codes). */
size_t kn_ik_row_bytes(kn_ik_type t, int64_t d);

/* Stores the key row k[0..d) as type t (f16 and bf16 rounded to nearest-even; fp8: scale s =
 * max|k| / 448 (1 if all are 0), codes e4m3(k[i] / s)); loads it back (fp8: e4m3 value * s). */
void kn_ik_store(void *dst, const float *k, int64_t d, kn_ik_type t);
void kn_ik_load(const void *src, int64_t d, kn_ik_type t, float *out);

/* FP8 e4m3 ("fn": bias 7, no infinities, 0x7f NaN, largest 448): round to nearest-even,
 * saturating at +-448; and exact decoding. */
uint8_t kn_f32_to_e4m3(float x);
float kn_e4m3_to_f32(uint8_t b);

/* LayerNorm with weight and bias (either may be NULL): mean and variance summed in double in
 * index order, y = (x - mean) * (1 / sqrtf(var + eps)) * w + b. y may alias x. */
void kn_layernorm(const float *x, const float *w, const float *b, float eps, int64_t n, float *y);

/* The lightning indexer's score of one key row k[0..d) for a query of n_head heads q[h * d ..]
 * with weights w[h]: s = +0, then for h in order, s = fma(w[h], dot, s) where dot = kn_dot_ref
 * (q_h, k) is positive (relu). The same bits for every isa. */
float kn_index_score(const float *q, const float *w, int64_t n_head, int64_t d, const float *k,
                     kn_isa isa);

/* Top-k selection, streaming: a heap of at most k (score, position) items keeps the k best
 * pushed so far, best meaning a higher score, or an equal score at a lower position (NaN counts
 * as -infinity); the result depends only on the set of pairs pushed, not their order. */
typedef struct kn_topk_item {
    float score;
    int32_t pos;
} kn_topk_item;
void kn_topk_push(kn_topk_item *heap, int64_t *n, int64_t k, float score, int32_t pos);
/* The heap's n positions into pos[0..n), ascending. */
void kn_topk_positions(const kn_topk_item *heap, int64_t n, int32_t *pos);

/* MLA attention of one query row over the selected positions pos[0..n) (ascending, n >= 1) of
 * kv head 0, values being the rows of kv->v_base. With F16 keys the query is first rounded to
 * F16 (the reference engine multiplies F16 keys by an F16 query; its greedy outputs follow that
 * rounding). scores[i] = kn_dot_ref(q, K[pos[i]]) * scale,
 * m = their max, p_i = kn_expf(scores[i] - m), out = (sum_i fma p_i V[pos[i]]) / (sum_i p_i),
 * in position order. scores: n floats of scratch. head_dim <= KN_ATTN_HEAD_MAX. The same bits
 * for every isa. */
void kn_attn_sparse_row(const float *q, const kn_attn_kv *kv, int64_t head_dim, const int32_t *pos,
                        int64_t n, float scale, float *scores, float *out, kn_isa isa);

/* Converts n floats to F16 (kn_f32_to_f16 semantics) or copies them (f16 false). */
void kn_store_kv(void *dst, const float *src, int64_t n, bool f16, kn_isa isa);

#endif
