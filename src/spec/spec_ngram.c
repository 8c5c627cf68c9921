/* SPDX-License-Identifier: MIT */
/*
 * spec_ngram: prompt lookup. A sequence's tokens (prompt and output) are kept in a suffix
 * automaton, extended token by token as they come (amortized constant time per token). The
 * automaton's state for the whole text has a suffix link to the state of the longest suffix that
 * also occurs earlier; that state remembers where its first occurrence ends (first[]). If the
 * suffix is at least ngram_min tokens long, the drafts are the tokens that followed that
 * occurrence: T[p+1], T[p+2], ... where p is its end. A continuation that runs into the end of
 * the text carries on with the drafts themselves (T extended by what it proposes), so a text that
 * repeats a period proposes the period again ("a b a b a" -> "b a b ...").
 *
 * The automaton: states with their longest length (len), suffix link and first end position, and
 * transitions kept as edges (token, target, next edge of the same state) found through one
 * open-addressing hash table keyed by (state, token). A text of n tokens has at most 2n states
 * and 3n edges. Arrays grow by doubling up to the sequence's capacity; a failed allocation turns
 * the sequence's drafting off (its output is unaffected: drafts only ever save time).
 *
 * The first occurrence, not the latest, is what a code-editing answer wants (the prompt holds the
 * file being rewritten, and it comes first).
 */
#include "base/err.h"
#include "spec/spec_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct ng_impl {
    int32_t min_match;
} ng_impl;

typedef struct ng_seq {
    int32_t cap;    /* most tokens the sequence will hold */
    int32_t n_seen; /* tokens in the automaton */
    int32_t room;   /* tokens the arrays have room for */
    bool off;       /* an allocation failed: drafts nothing */
    int32_t last;   /* the state of the whole text */
    int32_t n_st;
    int32_t *len, *link, *first, *edge0; /* [2 * room + 1] per state */
    int32_t n_ed;
    int32_t *ed_tok, *ed_to, *ed_next; /* [3 * room + 4] per edge */
    uint64_t *hk;                      /* [h_mask + 1] keys ((state + 1) << 32 | token), 0: empty */
    int32_t *hv;                       /* [h_mask + 1] edge index */
    uint32_t h_mask;
} ng_seq;

static uint64_t ng_key(int32_t st, int32_t tok) {
    return ((uint64_t)(uint32_t)(st + 1) << 32) | (uint32_t)tok;
}

/* A bucket for key: the splitmix64 finalizer spreads (state, token) pairs over the table. */
static uint32_t ng_slot(uint64_t key, uint32_t mask) {
    key = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ull;
    key = (key ^ (key >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(key ^ (key >> 31)) & mask;
}

/* The edge of state st on tok, or -1. */
static int32_t ng_find(const ng_seq *q, int32_t st, int32_t tok) {
    uint64_t key = ng_key(st, tok);
    for (uint32_t i = ng_slot(key, q->h_mask);; i = (i + 1) & q->h_mask) {
        if (q->hk[i] == key)
            return q->hv[i];
        if (q->hk[i] == 0)
            return -1;
    }
}

static void ng_hash_put(ng_seq *q, uint64_t key, int32_t edge) {
    uint32_t i = ng_slot(key, q->h_mask);
    while (q->hk[i] != 0)
        i = (i + 1) & q->h_mask;
    q->hk[i] = key;
    q->hv[i] = edge;
}

static void ng_add_edge(ng_seq *q, int32_t st, int32_t tok, int32_t to) {
    int32_t e = q->n_ed++;
    q->ed_tok[e] = tok;
    q->ed_to[e] = to;
    q->ed_next[e] = q->edge0[st];
    q->edge0[st] = e;
    ng_hash_put(q, ng_key(st, tok), e);
}

static int32_t ng_new_state(ng_seq *q, int32_t len, int32_t first) {
    int32_t s = q->n_st++;
    q->len[s] = len;
    q->link[s] = -1;
    q->first[s] = first;
    q->edge0[s] = -1;
    return s;
}

static int ng_grow_arr(void *pp, size_t elem, size_t n) {
    void *p = realloc(*(void **)pp, n * elem);
    if (!p)
        return ERR_NOMEM;
    *(void **)pp = p;
    return 0;
}

/* Makes room for `want` tokens (at most cap): arrays grown, the hash table rebuilt larger. */
static int ng_reserve(ng_seq *q, int32_t want) {
    if (want <= q->room)
        return 0;
    int64_t room = q->room ? (int64_t)q->room * 2 : 256;
    if (room < want)
        room = want;
    if (room > q->cap)
        room = q->cap;
    size_t ns = (size_t)room * 2 + 1, ne = (size_t)room * 3 + 4;
    if (ng_grow_arr(&q->len, sizeof(int32_t), ns) || ng_grow_arr(&q->link, sizeof(int32_t), ns) ||
        ng_grow_arr(&q->first, sizeof(int32_t), ns) ||
        ng_grow_arr(&q->edge0, sizeof(int32_t), ns) ||
        ng_grow_arr(&q->ed_tok, sizeof(int32_t), ne) ||
        ng_grow_arr(&q->ed_to, sizeof(int32_t), ne) ||
        ng_grow_arr(&q->ed_next, sizeof(int32_t), ne))
        return ERR_NOMEM;
    /* the hash table: a power of two at least twice the most edges */
    uint32_t slots = 1;
    while (slots < ne * 2)
        slots <<= 1;
    uint64_t *hk = calloc(slots, sizeof *hk);
    int32_t *hv = malloc(slots * sizeof *hv);
    if (!hk || !hv) {
        free(hk);
        free(hv);
        return ERR_NOMEM;
    }
    free(q->hk);
    free(q->hv);
    q->hk = hk;
    q->hv = hv;
    q->h_mask = slots - 1;
    for (int32_t s = 0; s < q->n_st; s++)
        for (int32_t e = q->edge0[s]; e >= 0; e = q->ed_next[e])
            ng_hash_put(q, ng_key(s, q->ed_tok[e]), e);
    q->room = (int32_t)room;
    return 0;
}

/* Appends token c (at text position i) to the automaton: the standard online construction. */
static void ng_extend(ng_seq *q, int32_t c, int32_t i) {
    int32_t cur = ng_new_state(q, q->len[q->last] + 1, i);
    int32_t p = q->last;
    while (p >= 0 && ng_find(q, p, c) < 0) {
        ng_add_edge(q, p, c, cur);
        p = q->link[p];
    }
    if (p < 0) {
        q->link[cur] = 0;
    } else {
        int32_t qs = q->ed_to[ng_find(q, p, c)];
        if (q->len[p] + 1 == q->len[qs]) {
            q->link[cur] = qs;
        } else {
            int32_t clone = ng_new_state(q, q->len[p] + 1, q->first[qs]);
            for (int32_t e = q->edge0[qs]; e >= 0; e = q->ed_next[e])
                ng_add_edge(q, clone, q->ed_tok[e], q->ed_to[e]);
            q->link[clone] = q->link[qs];
            for (int32_t e; p >= 0 && (e = ng_find(q, p, c)) >= 0 && q->ed_to[e] == qs;
                 p = q->link[p])
                q->ed_to[e] = clone;
            q->link[qs] = clone;
            q->link[cur] = clone;
        }
    }
    q->last = cur;
}

static void ng_seq_free(ng_seq *q) {
    free(q->len);
    free(q->link);
    free(q->first);
    free(q->edge0);
    free(q->ed_tok);
    free(q->ed_to);
    free(q->ed_next);
    free(q->hk);
    free(q->hv);
    memset(q, 0, sizeof *q);
}

static int ng_create(const spec_opts *o, void **impl) {
    ng_impl *g = calloc(1, sizeof *g);
    if (!g)
        return err_set(ERR_NOMEM, "spec ngram: out of memory");
    g->min_match = o->ngram_min;
    *impl = g;
    return 0;
}

static void ng_destroy(void *impl) {
    free(impl);
}

static int ng_seq_create(void *impl, int32_t cap, void **st) {
    ng_seq *q = calloc(1, sizeof *q);
    if (!q)
        return err_set(ERR_NOMEM, "spec ngram: out of memory");
    q->cap = cap > 1 ? cap : 1;
    *st = q;
    return 0;
}

static void ng_seq_destroy(void *impl, void *st) {
    ng_seq *q = st;
    ng_seq_free(q);
    free(q);
}

/* Brings the automaton up to the sequence's tokens and proposes the continuation. */
static void ng_draft_one(const ng_impl *g, spec_req *r) {
    ng_seq *q = (ng_seq *)r->seq;
    if (q->off || r->n_toks < q->n_seen || r->n_toks > q->cap)
        return;
    if (r->n_toks > q->n_seen) {
        if (ng_reserve(q, r->n_toks)) {
            ng_seq_free(q);
            q->off = true;
            return;
        }
        if (q->n_st == 0)
            q->last = ng_new_state(q, 0, -1);
        for (int32_t i = q->n_seen; i < r->n_toks; i++)
            ng_extend(q, r->toks[i], i);
        q->n_seen = r->n_toks;
    }
    int32_t v = q->link[q->last];
    if (v <= 0 || q->len[v] < g->min_match)
        return;
    int32_t p = q->first[v], n = r->n_toks; /* p < n - 1: the suffix occurs at least twice */
    for (int32_t j = 1; j <= r->k; j++)
        r->out[j - 1] = p + j < n ? r->toks[p + j] : r->out[p + j - n];
    r->n_out = r->k;
}

static int ng_draft(void *impl, spec_req *reqs, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        ng_draft_one(impl, &reqs[i]);
    return 0;
}

const spec_drafter spec_ngram_drafter = {
    .name = "ngram",
    .create = ng_create,
    .destroy = ng_destroy,
    .seq_create = ng_seq_create,
    .seq_destroy = ng_seq_destroy,
    .seq_park = NULL,
    .draft = ng_draft,
};
