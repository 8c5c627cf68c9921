/* SPDX-License-Identifier: MIT */
/*
 * spec: speculative drafters behind one interface. A drafter guesses the next tokens of a
 * sequence; the engine feeds the guesses to the target model in the same step as the sequence's
 * last token and keeps each one only if the target's own sampler picks exactly it (engine.h,
 * "Speculative decoding"). A drafter therefore changes speed only, never output: a wrong guess
 * costs a row of compute and is thrown away.
 *
 * Drafters, one file each, one row each in the table of spec.c:
 *   ngram  (spec_ngram.c) prompt lookup: the longest suffix of the sequence's tokens (prompt and
 *          output) that occurred earlier in them, found with a suffix automaton, proposes what
 *          followed that earlier occurrence. No model; costs nothing when nothing matches.
 *   draft  (spec_draft.c) a second, smaller model with the same vocabulary (--draft-model),
 *          run batched over all drafting sequences with its own KV pool and forward context;
 *          proposes its greedy continuation.
 *   mtp    (spec_mtp.c) a model's own multi-token-prediction layers (deepseek4's nextn
 *          blocks): the MTP block, fed the trunk's hidden state and the newest token, guesses the
 *          next one, then its own guesses in turn. The drafter recomputes the trunk's hidden
 *          states in its own forward context (the engine does not share them yet). A model without
 *          such layers is refused at creation, naming why.
 *
 * Per-sequence state (spec_seq) is created with the engine's sequence and destroyed with it. It
 * may hold a copy of what the drafter has seen, but the engine's tokens are the truth: each
 * spec_draft call passes them in full, and a drafter reconciles with them (tokens are only ever
 * appended; what a drafter guessed and the target refused never becomes a token).
 *
 * Threading: one engine thread drives a spec and all its sequences.
 */
#ifndef VERITY_SPEC_SPEC_H
#define VERITY_SPEC_SPEC_H

#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

/* Most tokens drafted for one sequence in one step (the spec-k toggle's maximum). */
#define SPEC_MAX_K 32

typedef struct spec_opts {
    const char *kind;       /* a row of the table: "ngram", "draft", "mtp" */
    model *target;          /* the target model (its instruction set, vocabulary and file) */
    const char *draft_path; /* draft: the draft model's GGUF */
    int32_t max_seqs;       /* most sequences in one spec_draft call */
    int32_t max_k;          /* most tokens drafted per sequence (1..SPEC_MAX_K) */
    int32_t ngram_min;      /* ngram: shortest suffix match that proposes anything (>= 1) */
    int threads;            /* draft: compute threads */
    int64_t attn_chunk;     /* draft: attention key chunk */
    int32_t block_size;     /* draft: positions per KV block */
    int64_t kv_blocks;      /* draft: the target's pool size in blocks (the draft's pool gets as
                               many, plus room for max_k guesses per sequence) */
    bool kv_f16;            /* draft: KV element type */
    int64_t max_tokens;     /* draft: most tokens in one forward run (the engine's budget) */
} spec_opts;

typedef struct spec_ctx spec_ctx;
typedef struct spec_seq spec_seq;

/* One sequence's draft request. */
typedef struct spec_req {
    spec_seq *seq;       /* its state (spec_seq_create) */
    const int32_t *toks; /* its tokens, prompt then output */
    int32_t n_toks;      /* >= 1 */
    int32_t k;           /* most tokens to draft, 1..max_k */
    int32_t *out;        /* [k]: the drafted tokens */
    int32_t n_out;       /* set by spec_draft: 0..k */
} spec_req;

/* Names of the table's rows, "|"-separated ("ngram|draft|mtp"), for messages. */
const char *spec_kinds(void);

/* Creates the drafter o->kind. Returns 0, ERR_INVAL (unknown kind, bad options; a draft model
 * whose vocabulary differs from the target's, the detail naming the first differing token),
 * ERR_UNSUPPORTED (mtp without MTP layers), the draft model's load error (ERR_IO, ERR_FORMAT, ...),
 * ERR_NOMEM. */
int spec_create(const spec_opts *o, spec_ctx **out);
void spec_destroy(spec_ctx *sp);

/* The drafter's name (its row). */
const char *spec_name(const spec_ctx *sp);

/* Creates the state of a sequence that will hold at most cap tokens. Memory proportional to the
 * tokens is allocated as they come (a failed allocation only stops the sequence's drafting).
 * Returns 0 or ERR_NOMEM. */
int spec_seq_create(spec_ctx *sp, int32_t cap, spec_seq **out);
void spec_seq_destroy(spec_ctx *sp, spec_seq *q);

/* The sequence left the running batch (preempted): the drafter drops what is costly to hold
 * (the draft model's KV blocks); a later spec_draft starts over from the tokens. */
void spec_seq_park(spec_ctx *sp, spec_seq *q);

/* Drafts for n sequences at once (n <= max_seqs): sets each reqs[i].n_out and fills out. A
 * drafter that cannot guess (no match, no room) sets n_out = 0; that is not an error. Returns 0,
 * or the draft model's forward error. */
int spec_draft(spec_ctx *sp, spec_req *reqs, int32_t n);

#endif
