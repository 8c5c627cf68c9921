/* SPDX-License-Identifier: MIT */
/*
 * grammar_int: the compiled grammar and vocabulary layouts, shared by grammar.c (AST, NFA, DFA)
 * and grammar_vocab.c (vocabulary tables, per-sequence states, masks). Nothing outside
 * src/sample/grammar*.c includes it.
 */
#ifndef VERITY_SAMPLE_GRAMMAR_INT_H
#define VERITY_SAMPLE_GRAMMAR_INT_H

#include "sample/grammar.h"

#include <stdatomic.h>

/* NFA state kinds. */
enum { GN_EPS = 0, GN_BYTE = 1, GN_MATCH = 2 };

typedef struct gr_nfa_state {
    int32_t out0, out1; /* successors (-1: none); GN_BYTE uses out0 only */
    int32_t set;        /* GN_BYTE: index into the byte-set table */
    uint8_t kind;
} gr_nfa_state;

/* DFA state flags. */
enum { GD_ACCEPT = 1, GD_CONT = 2 };

struct grammar {
    atomic_int refs;
    grammar_vocab *v; /* may be NULL */
    /* the NFA, kept as the reference for grammar_nfa_match */
    gr_nfa_state *nfa; /* [n_nfa] */
    int32_t n_nfa;
    int32_t nfa_start;
    uint8_t (*sets)[32]; /* [n_sets] byte sets of GN_BYTE states */
    int32_t n_sets;
    uint8_t *nfa_live; /* [n_nfa] 1 if an accepting state is reachable from it */
    /* the DFA: state 0 is dead, state 1 the start */
    int32_t n_dfa;
    int32_t n_cls;
    uint8_t cls[256]; /* byte -> class */
    int32_t *trans;   /* [n_dfa][n_cls] next state, 0 = dead */
    uint8_t *flags;   /* [n_dfa] GD_* */
    int32_t *dist;    /* [n_dfa] fewest bytes to an accepting state (INT32_MAX: dead) */
};

struct grammar_vocab {
    atomic_int refs;
    int32_t n_vocab;
    uint8_t *kind;     /* [n_vocab] enum grammar_token_kind */
    uint32_t *tok_off; /* [n_vocab] offset of token bytes in text (TEXT tokens) */
    uint32_t *tok_len; /* [n_vocab] their length (0 for others) */
    char *text;        /* every TEXT token's bytes, by id */
    int32_t *eog;      /* [n_eog] EOG token ids, ascending */
    int32_t n_eog;
    /* TEXT tokens sorted by bytes (memcmp order, ties by id), with their bytes' place in text
     * repeated in that order so the mask walk reads memory sequentially */
    int32_t n_sorted;
    int32_t *sorted;    /* [n_sorted] token ids */
    uint32_t *s_off;    /* [n_sorted] tok_off of sorted[i] */
    uint32_t *s_len;    /* [n_sorted] tok_len of sorted[i] */
    uint8_t *lcp;       /* [n_sorted] common prefix with the previous one, capped at 255 */
    int32_t group[257]; /* sorted[group[b] .. group[b + 1]) start with byte b */
    uint32_t max_len;   /* longest TEXT token */
};

/* The DFA state after feeding s[0..n) from state d (0 if it dies). */
static inline int32_t gr_dfa_run(const grammar *g, int32_t d, const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n && d; i++)
        d = g->trans[(size_t)d * (size_t)g->n_cls + g->cls[s[i]]];
    return d;
}

#endif
