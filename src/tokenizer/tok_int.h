/* SPDX-License-Identifier: MIT */
/*
 * tok_int: declarations shared inside src/tokenizer only (tokenizer.h is the contract).
 *
 * Layout of a loaded tokenizer: every token's raw piece and its decoded text live in one byte pool
 * (pieces NUL-terminated); per-token records hold offsets into it. Two open-addressing hash tables
 * index the pool: piece -> id, and for BPE (left piece, right piece) -> merge rank. The compiled
 * pre-tokenizer regexes (PCRE2 codes, read-only after compilation and so shareable between
 * threads) hang off the tokenizer too. Nothing here changes after tokenizer_load returns.
 */
#ifndef VERITY_TOKENIZER_TOK_INT_H
#define VERITY_TOKENIZER_TOK_INT_H

#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A token record. */
typedef struct tok_token {
    uint32_t piece_off; /* raw piece in the pool */
    uint32_t piece_len;
    uint32_t text_off; /* decoded bytes (tokenizer_token_text) in the pool */
    uint32_t text_len;
    float score;
    uint32_t attr; /* enum tokenizer_attr bits */
} tok_token;

/* A BPE merge: both parts in the merge pool. Its rank is its index. */
typedef struct tok_merge {
    uint32_t left_off, left_len;
    uint32_t right_off, right_len;
} tok_merge;

/* Pre-tokenizer description: the regexes applied in sequence and the flags llama.cpp attaches to
 * the type. Defined in tok_pre.c. */
#define TOK_PRE_MAX_RX 6
typedef struct tok_pre {
    const char *name;               /* canonical name, e.g. "llama3" */
    const char *rx[TOK_PRE_MAX_RX]; /* NULL-terminated */
    bool ignore_merges;             /* a word that is a whole token skips merging */
    bool add_bos;                   /* default of add_bos_token */
    bool no_bos;                    /* type has no BOS (chatglm) */
} tok_pre;

struct tokenizer {
    enum tokenizer_kind kind;
    int32_t n_vocab;
    tok_token *tok; /* [n_vocab] */
    char *pool;     /* pieces and texts */
    size_t pool_len;

    int32_t *map; /* piece -> id, open addressing, TOKENIZER_NULL = empty slot */
    size_t map_mask;

    tok_merge *merges; /* [n_merges] */
    char *merge_pool;
    int32_t n_merges;
    int32_t *merge_map; /* (left, right) -> rank */
    size_t merge_mask;

    int32_t special[TOKENIZER_SPECIAL_COUNT];
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    uint8_t *eog; /* [n_vocab] 1 = end of generation */

    int32_t *specials; /* control / user-defined / unknown ids, longest piece first */
    size_t n_specials;

    int32_t byte_token[256]; /* SPM byte fallback: id of <0xXX> (or the 1-byte piece), or -1 */

    char byte_enc[256][2]; /* BPE: UTF-8 of the character standing for each byte (GPT-2 table) */
    uint8_t byte_enc_len[256];

    const tok_pre *pre;
    void *rx[TOK_PRE_MAX_RX]; /* pcre2_code_8 * */
    int n_rx;

    char pre_name[64]; /* tokenizer.ggml.pre as given ("default" if absent); "" for SPM */
    char name[256];    /* file name, for messages */
};

/* FNV-1a over bytes, continuing from h (start with TOK_HASH_SEED). */
#define TOK_HASH_SEED 0xcbf29ce484222325ull
uint64_t tok_hash(uint64_t h, const void *p, size_t n);

/* The id whose piece is s[0..n), or TOKENIZER_NULL. With ordinary_only, control and
 * unknown-type tokens are not found (they are never produced from ordinary text). */
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n, bool ordinary_only);

/* The rank of merging left + right, or -1. */
int32_t tok_merge_rank(const tokenizer *t, const char *l, size_t ln, const char *r, size_t rn);

/* GPT-2 byte-to-unicode mapping, inverse direction: the byte that code point cp stands for, or -1.
 * (The forward direction is the table t->byte_enc.) */
int tok_byte_decode(uint32_t cp);

/* Looks up a pre-tokenizer by its tokenizer.ggml.pre name ("" or NULL: default). NULL if the name
 * is unknown or not implemented; *known is set when llama.cpp knows the name but we do not
 * implement it. */
const tok_pre *tok_pre_find(const char *name, size_t len, bool *known);

/* Compiles t->pre's regexes into t->rx. Returns 0, ERR_INTERNAL (a regex failed to compile: a bug;
 * the detail has PCRE2's message), ERR_NOMEM. */
int tok_pre_compile(tokenizer *t);

/* Frees t->rx. */
void tok_pre_free(tokenizer *t);

/* A half-open byte range of a text. */
typedef struct tok_span {
    uint32_t off, len;
} tok_span;

/* A growable array of spans. */
typedef struct tok_spans {
    tok_span *v;
    size_t n, cap;
} tok_spans;

/* Appends; returns 0 or ERR_NOMEM. */
int tok_spans_push(tok_spans *s, uint32_t off, uint32_t len);

/* Splits text[0..len) (valid UTF-8) into words with t's pre-tokenizer regexes; replaces the
 * contents of *words with spans relative to text. scratch is working space. With work (NULL
 * normally) the split runs on instrumented copies of the regexes and adds its rx_steps and
 * rx_calls to *work (tokenizer_encode_counted). Returns 0, ERR_NOMEM, ERR_TOOLARGE (PCRE2 match
 * limit), or ERR_INTERNAL (an instrumented copy failed to compile). */
int tok_pre_split(const tokenizer *t, const char *text, size_t len, tok_spans *words,
                  tok_spans *scratch, tokenizer_work *work);

#endif
