/* SPDX-License-Identifier: MIT */
/*
 * bench_tokenize: encode and decode speed of tokenizer_encode on ../shared vocabularies, for
 * 100 KB of English-like prose and for pathological runs (100 KB of one character class followed
 * by a CJK character, the input that makes backtracking pre-tokenizer regexes quadratic). Not
 * part of the test suite: the tests check that the work grows linearly by counting it
 * (tokenizer_encode_counted in tests/test_tokenizer.c and tests/test_tokenizer_synth.c); speed
 * belongs here. Build and run from the repository root:
 *
 *   make && cc -O2 -Isrc bench/bench_tokenize.c build/release/libverity.a -lm -pthread \
 *       -lpcre2-8 -lcurl -o build/bench_tokenize && build/bench_tokenize
 *
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), the best of 5 runs, so other
 * processes on a shared machine inflate them less than wall time would.
 */
#include "base/err.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_RUNS     5
#define TEXT_BYTES 102400

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* cap bytes (at most) of English-like prose from a fixed word pool and a fixed generator (the
 * generator of tests/test_tokenizer.c, with a smaller pool). */
static char *english_text(size_t cap, size_t *len) {
    static const char *const words[] = {
        "the",  "of",     "and",    "to",        "in",      "is",      "that",  "for",   "it",
        "as",   "was",    "with",   "be",        "by",      "on",      "not",   "he",    "I",
        "this", "are",    "or",     "his",       "from",    "at",      "which", "but",   "have",
        "an",   "had",    "they",   "you",       "were",    "their",   "one",   "all",   "we",
        "can",  "her",    "has",    "there",     "been",    "if",      "more",  "when",  "will",
        "time", "world",  "people", "would",     "between", "through", "don't", "we'll", "1984",
        "3.14", "e-mail", "U.S.",   "well-known"};
    char *s = malloc(cap + 64);
    if (!s)
        return NULL;
    size_t n = 0;
    unsigned seed = 7;
    int in_sentence = 0;
    while (n < cap) {
        seed = seed * 1664525u + 1013904223u;
        const char *w = words[(seed >> 8) % (sizeof words / sizeof *words)];
        size_t wl = strlen(w);
        if (n + wl + 3 > cap)
            break;
        memcpy(s + n, w, wl);
        n += wl;
        in_sentence++;
        if (in_sentence > 8 && (seed >> 20) % 5 == 0) {
            s[n++] = (seed >> 24) % 3 ? '.' : ',';
            if ((seed >> 26) % 7 == 0)
                s[n++] = '\n';
            in_sentence = 0;
        }
        s[n++] = ' ';
    }
    *len = n;
    return s;
}

/* Encodes (and decodes) text[0..len) N_RUNS times; prints the best times. Returns 0 or an error. */
static int bench_one(const tokenizer *t, const char *vocab, const char *what, const char *text,
                     size_t len) {
    size_t cap = tokenizer_max_tokens(len), n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return ERR_NOMEM;
    double best_enc = 1e30, best_dec = 1e30;
    strbuf sb;
    strbuf_init(&sb);
    int rc = 0;
    for (int r = 0; r < N_RUNS && rc == 0; r++) {
        double t0 = cpu_s();
        rc = tokenizer_encode(t, text, len, true, false, ids, cap, &n);
        double t1 = cpu_s();
        strbuf_reset(&sb);
        if (rc == 0)
            rc = tokenizer_decode(t, ids, n, false, &sb);
        double t2 = cpu_s();
        if (t1 - t0 < best_enc)
            best_enc = t1 - t0;
        if (t2 - t1 < best_dec)
            best_dec = t2 - t1;
    }
    if (rc == 0)
        printf("%-14s %-22s %7zu bytes -> %6zu tokens: encode %8.2f ms (%6.1f MB/s), decode "
               "%6.2f ms\n",
               vocab, what, len, n, best_enc * 1e3, (double)len / best_enc / 1e6, best_dec * 1e3);
    strbuf_deinit(&sb);
    free(ids);
    return rc;
}

int main(void) {
    static const char *const vocabs[] = {"gpt-2", "llama-spm", "deepseek-llm", "llama-bpe"};
    static const char fill[] = {' ', 'A', '1', '\n', '!'};
    size_t elen;
    char *english = english_text(TEXT_BYTES, &elen);
    char *patho = malloc(TEXT_BYTES + 8);
    if (!english || !patho) {
        fprintf(stderr, "bench_tokenize: out of memory\n");
        return 2;
    }
    int status = 0;
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        char path[512];
        snprintf(path, sizeof path, "../shared/vocab/ggml-vocab-%s.gguf", vocabs[v]);
        gguf *g;
        tokenizer *t;
        if (gguf_open(path, &g) != 0) {
            fprintf(stderr, "bench_tokenize: skipping %s: %s\n", vocabs[v], err_detail());
            continue;
        }
        int rc = tokenizer_load(g, &t);
        gguf_close(g);
        if (rc != 0) {
            fprintf(stderr, "bench_tokenize: %s: %s\n", path, err_detail());
            status = 2;
            continue;
        }
        rc = bench_one(t, vocabs[v], "english", english, elen);
        for (size_t f = 0; f < sizeof fill && rc == 0; f++) {
            char what[32];
            memset(patho, fill[f], TEXT_BYTES);
            memcpy(patho + TEXT_BYTES, "\xe4\xb8\xad", 3);
            snprintf(what, sizeof what, "run of 0x%02x + CJK", (unsigned)(unsigned char)fill[f]);
            rc = bench_one(t, vocabs[v], what, patho, TEXT_BYTES + 3);
        }
        if (rc != 0) {
            fprintf(stderr, "bench_tokenize: %s: %s\n", vocabs[v], err_detail());
            status = 2;
        }
        tokenizer_destroy(t);
    }
    free(english);
    free(patho);
    return status;
}
