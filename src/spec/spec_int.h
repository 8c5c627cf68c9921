/* SPDX-License-Identifier: MIT */
/*
 * spec_int: what a drafter file provides (one spec_drafter each) and the table of spec.c lists.
 * The state pointers are the drafter's own: `impl` from create, `st` from seq_create; spec.c
 * passes them through unchanged (spec_req.seq carries st).
 */
#ifndef VERITY_SPEC_SPEC_INT_H
#define VERITY_SPEC_SPEC_INT_H

#include "kv/kv_pool.h"
#include "spec/spec.h"

#include <stdbool.h>

typedef struct spec_drafter {
    const char *name;
    int (*create)(const spec_opts *o, void **impl);
    void (*destroy)(void *impl);
    int (*seq_create)(void *impl, int32_t cap, void **st);
    void (*seq_destroy)(void *impl, void *st);
    void (*seq_park)(void *impl, void *st); /* NULL: nothing to drop */
    int (*draft)(void *impl, spec_req *reqs, int32_t n);
} spec_drafter;

/* ---- spec_kvseq.c: for drafters that run a model over their own KV pool ---- */

/* One sequence's private blocks and the tokens whose K/V they hold (then the guesses). */
typedef struct spec_kvseq {
    int32_t cap;    /* most tokens of the sequence */
    int32_t *toks;  /* [cap + SPEC_MAX_K] */
    int32_t n_done; /* positions with K/V */
    int32_t *ids;   /* [cap_ids] its blocks */
    int32_t n_ids, cap_ids;
    bool off; /* the pool had no room for it: drafts nothing until it is parked */
} spec_kvseq;

/* Allocates q's arrays for a sequence of at most cap tokens (blocks of bs positions). Returns 0 or
 * ERR_NOMEM (the detail names drafter `who`); on failure q holds nothing. */
int spec_kvseq_init(spec_kvseq *q, int32_t cap, int32_t bs, const char *who);
/* Gives every block back to kv and forgets the K/V (n_done 0). */
void spec_kvseq_release(spec_kvseq *q, kv_pool *kv);
/* spec_kvseq_release, then frees the arrays. */
void spec_kvseq_free(spec_kvseq *q, kv_pool *kv);
/* A preempted sequence: spec_kvseq_release, and it may draft again when it runs. */
void spec_kvseq_park(spec_kvseq *q, kv_pool *kv);
/* For a sequence of n known tokens that wants k guesses: clips k to the model's context n_ctx
 * (positions up to n - 1 + k - 1 are fed) and to the blocks q holds after taking free ones from kv
 * (up to what n + k - 1 positions need). Returns the guesses to draft (0: none); when not even the
 * n known tokens fit, q gives its blocks back and is off (drafts nothing until parked). */
int32_t spec_kvseq_reserve(spec_kvseq *q, kv_pool *kv, int32_t bs, int64_t n_ctx, int32_t n,
                           int64_t k);
/* The greedy token of a logits row of n: the highest, ties to the lowest id. */
int32_t spec_argmax(const float *row, int64_t n);

extern const spec_drafter spec_ngram_drafter; /* spec_ngram.c */
extern const spec_drafter spec_draft_drafter; /* spec_draft.c */
extern const spec_drafter spec_mtp_drafter;   /* spec_mtp.c */

#endif
