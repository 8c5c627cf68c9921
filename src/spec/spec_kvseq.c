/* SPDX-License-Identifier: MIT */
/*
 * spec_kvseq: what the drafters that run a model over their own KV pool (spec_draft.c: a draft
 * model; spec_mtp.c: the target's multi-token-prediction layers) share: a sequence's private block
 * table and the tokens whose K/V it holds, the room each call reserves for the guesses, and the
 * greedy pick. The drafter decides what n_done means after a reconcile (spec_draft keeps the
 * accepted prefix, spec_mtp only ever grows); everything here is bookkeeping on one pool owned by
 * the engine thread.
 */
#include "base/err.h"
#include "spec/spec_int.h"

#include <stdlib.h>
#include <string.h>

int spec_kvseq_init(spec_kvseq *q, int32_t cap, int32_t bs, const char *who) {
    memset(q, 0, sizeof *q);
    q->cap = cap;
    q->cap_ids = (int32_t)(((int64_t)cap + SPEC_MAX_K + bs - 1) / bs);
    q->toks = malloc(((size_t)cap + SPEC_MAX_K) * sizeof *q->toks);
    q->ids = malloc((size_t)q->cap_ids * sizeof *q->ids);
    if (!q->toks || !q->ids) {
        free(q->toks);
        free(q->ids);
        q->toks = NULL;
        q->ids = NULL;
        return err_set(ERR_NOMEM, "spec %s: out of memory", who);
    }
    return 0;
}

void spec_kvseq_release(spec_kvseq *q, kv_pool *kv) {
    while (q->n_ids > 0)
        kv_block_unref(kv, q->ids[--q->n_ids]);
    q->n_done = 0;
}

void spec_kvseq_free(spec_kvseq *q, kv_pool *kv) {
    spec_kvseq_release(q, kv);
    free(q->toks);
    free(q->ids);
    q->toks = NULL;
    q->ids = NULL;
}

void spec_kvseq_park(spec_kvseq *q, kv_pool *kv) {
    spec_kvseq_release(q, kv);
    q->off = false; /* a fresh start when it runs again */
}

int32_t spec_kvseq_reserve(spec_kvseq *q, kv_pool *kv, int32_t bs, int64_t n_ctx, int32_t n,
                           int64_t k) {
    if ((int64_t)n - 1 + k - 1 >= n_ctx) /* positions fed: up to n - 1 + (k - 1) */
        k = n_ctx - n + 1;
    if (k <= 0)
        return 0;
    int64_t need = ((int64_t)n + k - 1 + bs - 1) / bs;
    while (q->n_ids < need && q->n_ids < q->cap_ids) {
        int32_t id = kv_pool_alloc(kv);
        if (id < 0)
            break;
        q->ids[q->n_ids++] = id;
    }
    int64_t room = (int64_t)q->n_ids * bs; /* positions the blocks hold */
    if (room < n) {
        spec_kvseq_release(q, kv); /* not even the known tokens fit: give up on this sequence */
        q->off = true;
        return 0;
    }
    if (n - 1 + k > room)
        k = room - n + 1;
    return (int32_t)k;
}

int32_t spec_argmax(const float *row, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return (int32_t)best;
}
