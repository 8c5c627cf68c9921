/* SPDX-License-Identifier: MIT */
/*
 * forward: one transformer step over a ragged batch. Any number of sequences, each adding any
 * number of new tokens at its own positions (prefill chunks and single decode tokens mixed in one
 * step), with K/V written to and read from the paged pool through each sequence's block table;
 * returns logits for the requested positions.
 *
 * Invariance (P1): every value a sequence's logits depend on is computed per token row (norms,
 * RoPE, activation quantization), per output element with K-determined order (matmul), or per
 * (token, head) over absolute positions (attention), so a sequence's logits are bitwise identical
 * whatever else is in the batch, in what order, how its prompt was chunked, how many threads
 * ran, and whether a position was computed in prefill or decode.
 *
 * A fwd_ctx owns the compute threads and every buffer a step needs, sized at creation for at most
 * max_tokens new tokens and max_outputs logit rows per step, so a step never allocates.
 * Threading: one fwd_ctx is driven by one thread at a time.
 */
#ifndef VERITY_MODEL_FORWARD_H
#define VERITY_MODEL_FORWARD_H

#include "kv/kv_pool.h"
#include "model/model.h"

#include <stdint.h>

typedef struct fwd_seq {
    const int32_t *tokens; /* the new tokens of this step */
    int32_t n_tokens;      /* >= 1 */
    int32_t pos0;          /* absolute position of tokens[0] */
    const int32_t *blocks; /* block table covering positions [0, pos0 + n_tokens) */
    int32_t n_blocks;
    int32_t n_logits; /* logits for the last n_logits new tokens (0..n_tokens) */
} fwd_seq;

typedef struct fwd_batch {
    const fwd_seq *seqs;
    int32_t n_seqs;
} fwd_batch;

typedef struct fwd_ctx fwd_ctx;

/* Creates a context for model m writing KV into pool kv (whose layer count and kv width must
 * match the model), with n_threads compute threads (>= 1). attn_chunk is the attention key chunk
 * (the attn-chunk toggle). Returns 0, ERR_INVAL, ERR_NOMEM. */
int fwd_ctx_create(model *m, kv_pool *kv, int64_t max_tokens, int64_t max_outputs, int n_threads,
                   int64_t attn_chunk, fwd_ctx **out);
void fwd_ctx_destroy(fwd_ctx *c);

/* Wakes c's compute threads and returns once every one is running, so that a step started within
 * the pool's spin time (pool.c: 200 us) finds them spinning rather than asleep, as consecutive
 * steps do. For a caller that left the threads idle on purpose: `verity bench --cold`'s read
 * pass between decode steps. Computes nothing; no-op with one thread. */
void fwd_ctx_wake(fwd_ctx *c);

/* Runs one step. On success *logits points to n_out rows of n_vocab floats, in batch order
 * (sequence by sequence, position by position), valid until the next run. Returns 0, or ERR_INVAL
 * (too many tokens or outputs, a token id outside the vocabulary, a block table too short, a
 * position past the model's context; the detail names the sequence) without computing anything. */
int fwd_run(fwd_ctx *c, const fwd_batch *b, const float **logits, int64_t *n_out);

int fwd_ctx_n_threads(const fwd_ctx *c);

/* Multi-token prediction (a model with MTP layers, deepseek4): one step of the model's first MTP
 * block instead of its layers. Token row r of b (in batch order) is the token at its position
 * and h_in[r] (fwd_hidden's width) the hidden state of the position before it (the trunk's, or
 * the MTP block's own for a guess); the block's K/V go to the pool's layer n_layer (a pool of
 * n_layer + 1 layers). Logits as fwd_run's, from the MTP head. Returns fwd_run's errors, or
 * ERR_UNSUPPORTED (no MTP layers). */
int fwd_run_mtp(fwd_ctx *c, const fwd_batch *b, const float *h_in, const float **logits,
                int64_t *n_out);

/* The hidden state of token row `row` of the last run (the trunk's final streams, or the MTP
 * block's), *width floats, valid until the next run; NULL if the architecture keeps none. */
const float *fwd_hidden(const fwd_ctx *c, int64_t row, int64_t *width);

#endif
