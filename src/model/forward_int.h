/* SPDX-License-Identifier: MIT */
/*
 * forward_int: the forward context and its phase machinery, shared by forward.c (the step: ctx,
 * embedding, output) and the architectures' layer code (arch_dense.c, moe.c, arch_<name>.c).
 *
 * A step is a sequence of phases; each phase is one pool_for over chunks that whichever thread is
 * free claims. A row phase runs a function over units [u0, u1) of a chunk (token rows, attention
 * units, expert slots); a matmul phase runs up to FWD_MM_MAX products, each over its own rows,
 * split by column blocks (and row panels). No phase divides a value's computation, so the bits
 * never depend on the chunking (forward.c's note).
 *
 * What a layer finds and leaves (model_arch.forward_layer): the step's tokens are in tok_id /
 * tok_pos / tok_seq (n_tok rows). Entering layer 0 nothing is computed; its first row phase must
 * embed (fwd_rows_residual_norm with embed). Entering layer l > 0, x holds the residual stream and
 * y the previous layer's last output, not yet added: the layer's first phase folds it in. A layer
 * leaves its last output in y, again not added (the next layer, or the output norm, adds it).
 */
#ifndef VERITY_MODEL_FORWARD_INT_H
#define VERITY_MODEL_FORWARD_INT_H

#include "base/pool.h"
#include "model/forward.h"
#include "model/model_int.h"

#include <stdatomic.h>

typedef struct fwd_moe fwd_moe;

/* One thread's mm-warm target, alone on its cache lines: the owner publishes [lo, hi) (the
 * weights the thread runs first in the next matmul phase) and bumps gen; the thread, while it
 * waits (pool_set_idle), prefetches the span from its own cursor. A hint only: a torn read of lo
 * and hi costs a few useless prefetches (the cursor never runs more than mm-warm bytes). */
typedef struct fwd_warm {
    _Alignas(64) _Atomic uintptr_t lo, hi;
    _Atomic uint32_t gen;
    _Alignas(64) uint32_t seen; /* the thread's own: the gen its cursor is for */
    uintptr_t cur, end;
} fwd_warm;

struct fwd_ctx {
    model *m;
    kv_pool *kv;
    pool *threads;
    int n_threads;
    int64_t max_tokens, max_outputs, attn_chunk;
    /* mm-panel: matmuls over more rows run panel by panel, every thread sweeping the columns of
     * one panel before the next: a panel's activations (under 1 MiB at K = 896) stay in the L2
     * across the sweep, where a whole 4096-row prefill step's would stream from L3 for every
     * column block; each panel converts the weights again, a cost amortised over its 256 rows as
     * at batch 1. 0: one panel of all rows. */
    int64_t mm_panel;
    bool mm_even_split;    /* the mm-even-split toggle */
    int64_t mm_tail_split; /* the mm-tail-split toggle */
    int64_t mm_warm;       /* the mm-warm toggle: bytes per thread, 0 = none */
    fwd_warm *warm;        /* [n_threads] with mm_warm */
    const kn_mat *warm_w;  /* the first matrix of the phase the published targets are for */
    int64_t attn_group;    /* most query heads per attention unit (attn-group, <= the GQA group) */
    bool attn_per_row;     /* attn-group 0: kn_attn_row per head, one head per unit */
    bool attn_prefetch;    /* the attn-prefetch toggle */
    bool attn_v_once;      /* the attn-v-once toggle */
    int64_t attn_per_unit; /* the step being run: heads per attention unit */
    int64_t q_dim, kv_dim, act_k; /* act_k: widest matmul input */
    int64_t n_ff_max;             /* widest dense or shared-expert FFN (g, u) */
    /* [max_tokens][...] */
    float *x, *xn, *q, *k, *v, *att, *y, *g, *u;
    /* [act_rows][act_k]: quantized activations of a matmul's input rows (act_rows: the most rows
     * any matmul of a step has, tokens, outputs or expert slots) */
    int8_t *aq;
    float *aqd;
    int32_t *aqs;
    int32_t *aqs16;  /* per-16 sums (Q6_K weights) */
    float *rope;     /* [max_tokens][n_rot/2][2] */
    int32_t *tok_id; /* per token row */
    int32_t *tok_pos;
    int32_t *tok_seq;
    /* [max_outputs][...] */
    int64_t *out_row;
    float *out_x;
    float *logits;
    void **mm_scratch;    /* per thread */
    float **attn_scratch; /* per thread */
    /* per thread: the first unit of the chunk after the one its row phase function is running, in
     * claim order (with pool-ranges most often the thread's next; -1: none). A hint only (the
     * attention's prefetch of the next unit's keys): the next chunk may go to another thread. */
    int64_t *chunk_next_unit;
    fwd_moe *moe;                             /* MoE buffers (moe.c), or NULL */
    void *arch_ctx;                           /* the architecture's buffers, or NULL */
    bool fault_attn_offsets, fault_big_batch; /* FAULT (b), (d): fault build only */
    /* an MTP step (fwd_run_mtp): the hidden state before each token row, and the output norm
     * and head the architecture sets for it (NULL: the model's) */
    const float *mtp_h;
    const float *out_norm_w;
    const kn_mat *out_w;
    /* the step being run */
    const fwd_batch *b;
    int64_t n_tok, n_out;
};

/* Work per chunk below which a phase is not split further: a chunk should cost well above a
 * claim (tens of nanoseconds) and a wake-up; a tiny model's phases run on the caller alone. */
#define FWD_CHUNK_WORK    32768
#define FWD_MM_CHUNK_WORK 262144

/* The mm-even-split chunk count of one matrix in a matmul phase: the count nearest `want` (the
 * work-based count) that is a multiple of the thread count nt, so threads of equal speed take
 * equal numbers of chunks, and divides `units` (kn_mat_n_units; kn_matmul gives chunk i of n the
 * units [u*i/n, u*(i+1)/n)), so the chunks are equal; failing a divisor within want/2 + nt of
 * want, the nearest multiple of nt. Returns want unchanged if nt <= 1 or units < nt. E.g.
 * 1b-kq at batch 1 on 2 threads: ffn_down's 32 column blocks in 8 chunks of 4 rather than 11 of
 * 2-3 (one thread ran 6 chunks, the other 5), attn_k/attn_v's 8 in 2 rather than 1, the
 * output's 12 in 2 rather than 1. Only the division changes, never an element's operations. */
int64_t fwd_mm_chunks_even(int64_t want, int64_t units, int64_t nt);

typedef struct fwd_phase fwd_phase;

/* A row phase's work on units [u0, u1), run by thread `thread`. */
typedef void (*fwd_rows_fn)(fwd_ctx *c, const fwd_phase *ph, int64_t u0, int64_t u1, int thread);

/* One matrix product of a matmul phase: y[row0 + r] = x[row0 + r] W^T for r < rows, x quantized
 * beforehand (into c->aq etc. at the same rows, row stride K) if W wants it. */
typedef struct fwd_mm {
    const kn_mat *w;
    const float *x; /* [..][K] */
    float *y;       /* [..][N] */
    int64_t row0, rows;
    int64_t chunks, panels; /* set by fwd_phase_matmul */
} fwd_mm;

struct fwd_phase {
    fwd_ctx *c;
    fwd_rows_fn fn; /* row phases */
    int64_t layer;
    int64_t units;   /* rows, outputs, attention units or expert slots */
    bool quant;      /* quantize the rows the phase produces for a Q8 matmul */
    bool embed;      /* fwd_rows_residual_norm: embed instead of adding the residual */
    bool uneven;     /* units differ in cost: more chunks, claimed from the last */
    const void *arg; /* the phase function's argument (a norm weight, a layer's MoE) */
    fwd_mm *mm;      /* matmul phases */
    int n_mm;
    /* matmul phases: the products' chunks, and the pieces the last chunk of each thread's range is
     * cut into (mm-tail-split; 1: none). With pieces, pool chunk ci is piece or chunk j of range t
     * (ci = t * (k + mm_tail - 1) + j, k = mm_chunks / threads): j < k - 1 is the range's chunk j,
     * the rest the pieces of its last. */
    int64_t mm_chunks, mm_tail;
};

/* Most products in one matmul phase. */
#define FWD_MM_MAX 1024

/* Runs a row phase ph (c, fn, layer, units and whatever fn reads set) of about unit_work
 * operations per unit, chunked by the total work; ph->uneven: units differ in cost (attention:
 * later tokens attend to more keys), so more, smaller chunks, the heaviest claimed first. */
void fwd_phase_run(fwd_ctx *c, fwd_phase *ph, int64_t unit_work);

/* fwd_phase_run of fn over `units` units, with layer, quant and arg handed to fn in the phase. */
void fwd_phase_rows(fwd_ctx *c, fwd_rows_fn fn, int64_t layer, int64_t units, int64_t unit_work,
                    bool quant, const void *arg);

/* The residual fold and a norm: for rows [u0, u1), x += y (or, with ph->embed, x = the token's
 * embedding and its RoPE angles), then xn = rmsnorm(x) * (const float *)ph->arg, quantized if
 * ph->quant. */
void fwd_rows_residual_norm(fwd_ctx *c, const fwd_phase *ph, int64_t u0, int64_t u1, int thread);

/* One fwd_rows_residual_norm phase over the step's tokens. */
void fwd_phase_residual_norm(fwd_ctx *c, int64_t layer, const float *w, bool embed, bool quant);

/* y = x W^T for n_mm products (<= FWD_MM_MAX; products sharing an input share its
 * quantization), one chunk per group of 64 columns at most; fills each mm's chunks and panels. */
void fwd_phase_matmul(fwd_ctx *c, int n_mm, fwd_mm *mm);

/* Publishes the matmul phase about to come (the same n_mm and mm as its fwd_phase_matmul, whose
 * chunks and panels this fills) as every thread's mm-warm target: the start of the weights the
 * thread runs first (its pool-ranges range's front, within one matrix and the first panel), up
 * to mm-warm bytes, which it prefetches into L2 while it waits between now and that phase (a
 * matmul phase in between keeps it: its last chunks' waits warm the phase after it). That phase
 * clears the targets when it starts, so no thread prefetches weights already being run. No-op
 * with mm-warm 0 or one thread, and when the targets already are that phase's (mm[0].w). */
void fwd_warm_matmul(fwd_ctx *c, int n_mm, fwd_mm *mm);

/* Quantizes rows [r0, r1) of x (row stride k) into c->aq etc. at the same rows. */
void fwd_quantize_rows(fwd_ctx *c, const float *x, int64_t k, int64_t r0, int64_t r1);

/* ---- the dense transformer's layer (arch_dense.c) ---- */

/* Attention of layer l: the residual fold (or embedding) and attn_norm, Q/K/V, biases, Q/K norms,
 * RoPE, the KV write, attention, the output projection into y. */
void arch_dense_forward_attn(fwd_ctx *c, int64_t l);

/* The dense SwiGLU FFN of layer l: the residual fold and ffn_norm, gate and up, SwiGLU, down
 * into y. */
void arch_dense_forward_ffn(fwd_ctx *c, int64_t l);

/* Attention then the dense FFN. */
void arch_dense_forward_layer(fwd_ctx *c, int64_t l);

/* The attention phase alone: c->q (n_head rows of head_dim per token, RoPE applied) against the
 * KV pool's layer l (n_head_kv heads of head_dim per position) into c->att, scores times scale;
 * v_is_k: the values are the keys' rows (MLA's latent cache: the output's first value_length
 * elements are the latent result). */
void arch_dense_phase_attention(fwd_ctx *c, int64_t l, float scale, bool v_is_k);

/* ---- the mixture-of-experts FFN (moe.c) ---- */

/* Creates the MoE buffers of c for its model (max_tokens rows, n_expert_used slots each) when the
 * model has experts; no-op otherwise. Returns 0 or ERR_NOMEM. */
int moe_ctx_create(fwd_ctx *c);
void moe_ctx_destroy(fwd_ctx *c);

/* Rows of matmul input the MoE of a model with hp needs (max_tokens * n_expert_used, 0 if
 * dense), for sizing c->aq. */
int64_t moe_act_rows(const model_hparams *hp, int64_t max_tokens);

/* The MoE FFN of layer l (m->layers[l].moe): the residual fold and ffn_norm, the router, each
 * token's experts, the routed experts over their gathered rows, the shared experts, and their
 * weighted sum into y. */
void moe_forward_ffn(fwd_ctx *c, int64_t l);

/* moe_forward_ffn of L, a block outside m->layers (an MTP block), l naming its phases. */
void moe_forward_ffn_layer(fwd_ctx *c, int64_t l, const model_layer *L);

#endif
