/* SPDX-License-Identifier: MIT */
/*
 * hunt_util: small deterministic helpers the harness modules share: FNV-1a hashing, a splitmix64
 * generator, and a pseudo-text generator over a fixed English-like word list (workload documents,
 * tool results). Everything here is a pure function of its inputs, so sessions and tool results
 * are reproducible from a seed. Also escaping for the report writers.
 */
#ifndef VERITY_HUNT_UTIL_H
#define VERITY_HUNT_UTIL_H

#include "base/strbuf.h"

#include <stddef.h>
#include <stdint.h>

#define HUNT_FNV_OFFSET 14695981039346656037ull

/* FNV-1a 64 of p[0..n) continuing from h (start with HUNT_FNV_OFFSET). */
uint64_t hunt_hash(uint64_t h, const void *p, size_t n);

/* FNV-1a 64 of a NUL-terminated string, continuing from h. */
uint64_t hunt_hash_str(uint64_t h, const char *s);

/* Mixes two 64-bit values into one well-spread seed (splitmix64 finaliser of a ^ rot(b)). */
uint64_t hunt_mix(uint64_t a, uint64_t b);

typedef struct hunt_rng {
    uint64_t s;
} hunt_rng;

/* Seeds a generator. */
void hunt_rng_seed(hunt_rng *r, uint64_t seed);

/* Next 64 random bits (splitmix64). */
uint64_t hunt_rng_next(hunt_rng *r);

/* Uniform integer in [0, n) (n >= 1). */
uint32_t hunt_rng_below(hunt_rng *r, uint32_t n);

/* Uniform double in [0, 1). */
double hunt_rng_unit(hunt_rng *r);

/* Number of words in the word list, and word i (0 <= i < n). */
int hunt_words_count(void);
const char *hunt_word(int i);

/* Appends n_words pseudo-English words (sentences of 6..14 words, capitalised, with periods) to
 * out. */
void hunt_text_prose(hunt_rng *r, int n_words, strbuf *out);

/* Appends an identifier built from words ("conn_open", "parse_header") to out. */
void hunt_text_ident(hunt_rng *r, strbuf *out);

/* Appends s[0..n) with &, <, >, " and ' escaped for HTML text and attribute values. Invalid UTF-8
 * is written as U+FFFD and control characters other than \n and \t as U+2400-style escapes. */
void hunt_html_escape(strbuf *out, const char *s, size_t n);

/* Appends s[0..n) for a markdown table cell or code span: '|' and '`' escaped, newlines as "\n",
 * at most max_bytes of input (then "..."). */
void hunt_md_escape(strbuf *out, const char *s, size_t n, size_t max_bytes);

#endif
