/* SPDX-License-Identifier: MIT */
/*
 * test_grammar: grammar-constrained decoding, bottom up.
 *   - the regex layer: patterns accepted and rejected, bounded repeats, alternation, the list
 *     and join operators, dead-end pruning, limits, parse errors; the DFA against the NFA
 *     reference (grammar_nfa_match) on every prefix of random strings;
 *   - token masks on a small hand-built vocabulary (multi-byte tokens crossing grammar
 *     boundaries, byte tokens, tokens that complete a literal and continue), each compared with
 *     a brute-force mask from the NFA reference;
 *   - JSON schema grammars (chat/tool_grammar.h): random walks that choose uniformly among the
 *     allowed tokens always end, parse with base/json.h and satisfy the schema (a validator for
 *     the supported subset below); refusals name the keyword;
 *   - tool-call grammars: the walk's text through the HERMES parser gives exactly one call with
 *     a valid name and schema-valid arguments;
 *   - the engine: constrained requests on a synthetic model finish with STOP and valid output,
 *     and the bytes do not change under preemption and recompute (P1);
 *   - the cost of a mask on the tiny vocabulary and on a 150k-token BPE vocabulary (printed).
 */
#include "test.h"

#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "chat/chat_tools.h"
#include "chat/tool_grammar.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/grammar.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- regex layer ---- */

static grammar *re_compile(const char *pattern) {
    grammar_ast *a;
    grammar_node *root;
    grammar *g;
    T_OK(grammar_ast_create(&a));
    T_OK(grammar_ast_parse(a, pattern, strlen(pattern), &root));
    T_OK(grammar_compile(a, root, NULL, &g));
    grammar_ast_destroy(a);
    return g;
}

/* 1: s is in the language, 0: a proper prefix, -1: neither -- through the DFA. */
static int dfa_match(grammar *g, const char *s, size_t n) {
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    int r = -1;
    if (grammar_accept_bytes(st, s, n))
        r = grammar_complete(st) ? 1 : 0;
    grammar_state_destroy(st);
    return r;
}

static void expect(grammar *g, const char *s, int want) {
    int d = dfa_match(g, s, strlen(s)), n = grammar_nfa_match(g, s, strlen(s));
    T_CHECKF(d == want && n == want, "\"%s\": dfa %d nfa %d, expected %d", s, d, n, want);
}

static void t_regex_basic(void) {
    grammar *g = re_compile("abc");
    expect(g, "abc", 1);
    expect(g, "ab", 0);
    expect(g, "", 0);
    expect(g, "abd", -1);
    expect(g, "abcd", -1);
    grammar_destroy(g);

    g = re_compile("a|bc|");
    expect(g, "", 1);
    expect(g, "a", 1);
    expect(g, "b", 0);
    expect(g, "bc", 1);
    expect(g, "ab", -1);
    grammar_destroy(g);

    g = re_compile("[a-c]*d");
    expect(g, "d", 1);
    expect(g, "abcabcd", 1);
    expect(g, "abca", 0);
    expect(g, "abe", -1);
    grammar_destroy(g);

    g = re_compile("[^a]\\x41\\d+\\.");
    expect(g, "zA1.", 1);
    expect(g, "zA123.", 1);
    expect(g, "zA.", -1);
    expect(g, "aA1.", -1);
    grammar_destroy(g);

    g = re_compile("(x|y)+z?");
    expect(g, "", 0);
    expect(g, "x", 1);
    expect(g, "xyxyz", 1);
    expect(g, "xyzz", -1);
    grammar_destroy(g);
}

static void t_regex_repeat(void) {
    grammar *g = re_compile("a{2,4}");
    expect(g, "a", 0);
    expect(g, "aa", 1);
    expect(g, "aaa", 1);
    expect(g, "aaaa", 1);
    expect(g, "aaaaa", -1);
    grammar_destroy(g);

    g = re_compile("(ab){0,3}c");
    expect(g, "c", 1);
    expect(g, "ababc", 1);
    expect(g, "abababc", 1);
    expect(g, "ababababc", -1);
    expect(g, "aba", 0);
    grammar_destroy(g);

    g = re_compile("x{3,}");
    expect(g, "xx", 0);
    expect(g, "xxx", 1);
    expect(g, "xxxxxxxxxx", 1);
    grammar_destroy(g);

    g = re_compile("(a|bb){2}");
    expect(g, "abb", 1);
    expect(g, "bba", 1);
    expect(g, "bbbb", 1);
    expect(g, "aaa", -1);
    grammar_destroy(g);

    /* a bounded string-like construct: the DFA has one state per position */
    g = re_compile("\"[a-z]{0,8}\"");
    expect(g, "\"\"", 1);
    expect(g, "\"abcdefgh\"", 1);
    expect(g, "\"abcdefghi", -1);
    grammar_destroy(g);
}

static void t_regex_must_end(void) {
    grammar *g = re_compile("ab*");
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    T_CHECK(!grammar_complete(st) && !grammar_must_end(st));
    T_CHECK(grammar_accept_bytes(st, "a", 1));
    T_CHECK(grammar_complete(st) && !grammar_must_end(st));
    T_CHECK(!grammar_accept_bytes(st, "c", 1));
    T_CHECK(grammar_accept_bytes(st, "bb", 2));
    T_CHECK(grammar_complete(st));
    grammar_state_reset(st);
    T_CHECK(!grammar_complete(st));
    grammar_state_destroy(st);
    grammar_destroy(g);

    g = re_compile("a(b|cd)");
    T_OK(grammar_state_create(g, &st));
    T_CHECK(grammar_accept_bytes(st, "acd", 3));
    T_CHECK(grammar_must_end(st));
    grammar_state_destroy(st);
    grammar_destroy(g);
}

static void t_regex_lists(void) {
    grammar_ast *a;
    T_OK(grammar_ast_create(&a));
    /* [x(, x)*] with at most 3 items, and an unbounded one */
    grammar_node *item = grammar_ast_alt2(a, grammar_ast_str(a, "x"), grammar_ast_str(a, "yy"));
    grammar_node *sep = grammar_ast_str(a, ", ");
    grammar_node *n3 = grammar_ast_cat(
        a, (grammar_node *[]){grammar_ast_str(a, "["), grammar_ast_list(a, item, sep, 0, 3),
                              grammar_ast_str(a, "]")},
        3);
    grammar_node *ninf = grammar_ast_cat(
        a, (grammar_node *[]){grammar_ast_str(a, "["), grammar_ast_list(a, item, sep, 2, GRAMMAR_INF),
                              grammar_ast_str(a, "]")},
        3);
    /* members a, b?, c?, d with ", " between the present ones */
    grammar_node *items[4] = {grammar_ast_str(a, "a"), grammar_ast_str(a, "b"),
                              grammar_ast_str(a, "c"), grammar_ast_str(a, "d")};
    bool opt[4] = {true, true, false, true};
    grammar_node *join = grammar_ast_join(a, items, opt, 4, sep);
    grammar *g3, *ginf, *gj;
    T_OK(grammar_compile(a, n3, NULL, &g3));
    T_OK(grammar_compile(a, ninf, NULL, &ginf));
    T_OK(grammar_compile(a, join, NULL, &gj));
    grammar_ast_destroy(a);
    expect(g3, "[]", 1);
    expect(g3, "[x]", 1);
    expect(g3, "[x, yy, x]", 1);
    expect(g3, "[x, yy, x, x]", -1);
    expect(g3, "[x,", 0);
    expect(g3, "[x,]", -1);
    expect(g3, "[, x]", -1);
    expect(ginf, "[x]", -1);
    expect(ginf, "[x, x]", 1);
    expect(ginf, "[x, yy, x, x, yy, x, x]", 1);
    expect(gj, "c", 1);
    expect(gj, "a, c", 1);
    expect(gj, "a, b, c, d", 1);
    expect(gj, "b, c, d", 1);
    expect(gj, "c, d", 1);
    expect(gj, "a, b", 0);
    expect(gj, "a, d", -1);
    expect(gj, ", c", -1);
    expect(gj, "a, c, ", 0);
    expect(gj, "b, a, c", -1);
    grammar_destroy(g3);
    grammar_destroy(ginf);
    grammar_destroy(gj);
}

static void t_regex_dead_ends(void) {
    /* "a" followed by nothing is a dead end: the DFA prunes it, the NFA reference too */
    grammar_ast *a;
    T_OK(grammar_ast_create(&a));
    grammar_node *root = grammar_ast_alt2(
        a, grammar_ast_cat2(a, grammar_ast_str(a, "a"), grammar_ast_nothing(a)),
        grammar_ast_str(a, "b"));
    grammar *g;
    T_OK(grammar_compile(a, root, NULL, &g));
    expect(g, "a", -1);
    expect(g, "b", 1);
    grammar_destroy(g);
    /* a language with no strings is refused */
    T_EQ_INT(grammar_compile(a, grammar_ast_nothing(a), NULL, &g), ERR_INVAL);
    T_EQ_INT(grammar_compile(a, grammar_ast_cat2(a, grammar_ast_str(a, "x"),
                                                  grammar_ast_alt(a, NULL, 0)),
                             NULL, &g),
             ERR_INVAL);
    /* bounds */
    T_EQ_INT(grammar_compile(a, grammar_ast_repeat(a, grammar_ast_str(a, "x"), 0, 5000), NULL, &g),
             ERR_TOOLARGE);
    T_EQ_INT(grammar_compile(a, grammar_ast_repeat(a, grammar_ast_str(a, "x"), 3, 2), NULL, &g),
             ERR_INVAL);
    /* an NFA over the state limit: 4096 x 4096 copies */
    grammar_node *big = grammar_ast_repeat(
        a, grammar_ast_repeat(a, grammar_ast_str(a, "x"), 4096, 4096), 4096, 4096);
    T_EQ_INT(grammar_compile(a, big, NULL, &g), ERR_TOOLARGE);
    T_CHECK(strstr(err_detail(), "NFA states"));
    /* a failed builder poisons the AST */
    T_CHECK(grammar_ast_cat2(a, NULL, grammar_ast_str(a, "x")) == NULL);
    T_CHECK(grammar_ast_failed(a));
    T_EQ_INT(grammar_compile(a, grammar_ast_str(a, "x"), NULL, &g), ERR_NOMEM);
    grammar_ast_destroy(a);
}

static void t_regex_parse_errors(void) {
    const char *bad[] = {"(ab", "a{2", "*a", "[z-a]", "a)", "[abc", "a{,3}", "\\q", "^a", "\\x4"};
    grammar_ast *a;
    T_OK(grammar_ast_create(&a));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        grammar_node *root;
        int rc = grammar_ast_parse(a, bad[i], strlen(bad[i]), &root);
        T_CHECKF(rc == ERR_FORMAT, "pattern \"%s\" gave %d", bad[i], rc);
        T_CHECKF(strstr(err_detail(), "at byte"), "no offset in: %s", err_detail());
    }
    grammar_ast_destroy(a);
}

/* The DFA and the NFA reference agree on every prefix of random strings over an alphabet that
 * exercises the patterns. */
static void t_regex_dfa_vs_nfa(void) {
    static const char *pats[] = {
        "(a|ab)(c|bcd)(d*)",    "[ab]{1,5}c{0,2}|(ba)+", "((a|b)(a|b)){2,3}b?",
        "a*b*a*|bba{2,}",       "(abc|a(b|c){0,3})*d",   "x?(\\d{1,3}(\\.\\d{1,2})?|-\\d)",
        "\"([^\"\\\\]|\\\\[\"\\\\n])*\"",
    };
    const char alpha[] = "abcd1.-\"\\nx";
    uint64_t seed = 12345;
    int rounds = (int)(400 * test_scale());
    for (size_t pi = 0; pi < sizeof pats / sizeof *pats; pi++) {
        grammar *g = re_compile(pats[pi]);
        for (int r = 0; r < rounds; r++) {
            char s[16];
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t n = (size_t)(seed >> 60);
            for (size_t i = 0; i < n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                s[i] = alpha[(seed >> 33) % (sizeof alpha - 1)];
            }
            for (size_t k = 0; k <= n; k++) {
                int d = dfa_match(g, s, k), nf = grammar_nfa_match(g, s, k);
                T_CHECKF(d == nf, "pattern %s, input \"%.*s\": dfa %d nfa %d", pats[pi], (int)k, s,
                         d, nf);
            }
        }
        grammar_destroy(g);
    }
}


/* ---- token masks on a hand-built vocabulary ---- */

/* Tokens: specials, multi-byte pieces that cross grammar boundaries, then the 256 byte tokens
 * (byte fallback, so everything can be spelled). */
static const char *hand_pieces[] = {
    "<eos>", "<ctl>", "", "a", "b", "ab", "abc", "ba", "{", "{\"", "\"", "\":", "x\"",
    "\xC3", "\xA9", "\xC3\xA9", "true", "tr", "ue", "1", "12", "}", "\"}", " ", ": ", "c",
    "e", "abce", "d", "cd", "dc", "e!", "\"name\": ", "\", \"", "<tool_call>", "<tool", "_call>",
};
#define HAND_N_PIECES ((int32_t)(sizeof hand_pieces / sizeof *hand_pieces))
#define HAND_N (HAND_N_PIECES + 256)

static grammar_vocab *hand_vocab(void) {
    static char bytes[256];
    const char *texts[HAND_N];
    size_t lens[HAND_N];
    uint8_t kinds[HAND_N];
    for (int32_t i = 0; i < HAND_N_PIECES; i++) {
        texts[i] = hand_pieces[i];
        lens[i] = strlen(hand_pieces[i]);
        kinds[i] = GRAMMAR_TOKEN_TEXT;
    }
    kinds[0] = GRAMMAR_TOKEN_EOG;
    kinds[1] = GRAMMAR_TOKEN_NEVER;
    for (int b = 0; b < 256; b++) {
        bytes[b] = (char)b;
        texts[HAND_N_PIECES + b] = &bytes[b];
        lens[HAND_N_PIECES + b] = 1;
        kinds[HAND_N_PIECES + b] = GRAMMAR_TOKEN_TEXT;
    }
    grammar_vocab *v;
    T_OK(grammar_vocab_create_raw(HAND_N, texts, lens, kinds, &v));
    return v;
}

static size_t hand_text(int32_t t, const char **p) {
    if (t < HAND_N_PIECES) {
        *p = hand_pieces[t];
        return strlen(hand_pieces[t]);
    }
    static char bytes[256];
    bytes[t - HAND_N_PIECES] = (char)(t - HAND_N_PIECES);
    *p = &bytes[t - HAND_N_PIECES];
    return 1;
}

static bool mask_has(const uint64_t *m, int32_t t) {
    return (m[t >> 6] >> (t & 63)) & 1;
}

/* Compares grammar_allowed after prefix with a brute-force mask from the NFA reference. */
static void check_mask(grammar *g, grammar_state *st, const char *prefix, size_t np) {
    uint64_t mask[(HAND_N + 63) / 64];
    int32_t n = grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask);
    int32_t count = 0;
    char buf[512];
    T_CHECK(np + 64 < sizeof buf);
    memcpy(buf, prefix, np);
    int whole = grammar_nfa_match(g, prefix, np);
    for (int32_t t = 0; t < HAND_N; t++) {
        bool want;
        if (t == 0) {
            want = whole == 1;
        } else if (t == 1 || t == 2) {
            want = false;
        } else {
            const char *p;
            size_t l = hand_text(t, &p);
            memcpy(buf + np, p, l);
            want = grammar_nfa_match(g, buf, np + l) >= 0;
        }
        T_CHECKF(mask_has(mask, t) == want, "after \"%.*s\": token %d (\"%s\") is %s, expected %s",
                 (int)np, prefix, t, t < HAND_N_PIECES ? hand_pieces[t] : "<byte>",
                 mask_has(mask, t) ? "allowed" : "refused", want ? "allowed" : "refused");
        count += want;
    }
    T_EQ_INT(n, count);
}

/* Random walks choosing uniformly among allowed tokens; checks every mask on the way. */
static void walk_check(const char *pattern, int walks, uint64_t seed) {
    grammar_vocab *v = hand_vocab();
    grammar_ast *a;
    grammar_node *root;
    grammar *g;
    T_OK(grammar_ast_create(&a));
    T_OK(grammar_ast_parse(a, pattern, strlen(pattern), &root));
    T_OK(grammar_compile(a, root, v, &g));
    grammar_ast_destroy(a);
    grammar_vocab_destroy(v); /* the grammar keeps its reference */
    for (int w = 0; w < walks; w++) {
        grammar_state *st;
        T_OK(grammar_state_create(g, &st));
        char text[400];
        size_t n = 0;
        for (int step = 0; step < 60; step++) {
            check_mask(g, st, text, n);
            uint64_t mask[(HAND_N + 63) / 64];
            int32_t k = grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask);
            T_CHECKF(k > 0, "pattern %s: no token allowed after \"%.*s\"", pattern, (int)n, text);
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int32_t pick = (int32_t)((seed >> 33) % (uint64_t)k), t = -1;
            for (int32_t i = 0; i < HAND_N && pick >= 0; i++)
                if (mask_has(mask, i) && pick-- == 0)
                    t = i;
            T_CHECK(grammar_accept(st, t));
            if (t == 0)
                break;
            const char *p;
            size_t l = hand_text(t, &p);
            T_CHECK(n + l < sizeof text - 64);
            memcpy(text + n, p, l);
            n += l;
            if (grammar_must_end(st))
                break;
        }
        T_CHECKF(grammar_complete(st) || n > 200, "pattern %s: walk ended incomplete", pattern);
        grammar_state_destroy(st);
    }
    grammar_destroy(g);
}

static void t_mask_hand(void) {
    grammar_vocab *v = hand_vocab();
    grammar_ast *a;
    grammar_node *root;
    grammar *g;
    T_OK(grammar_ast_create(&a));
    T_OK(grammar_ast_parse(a, "ab(c|d)*e", 9, &root));
    T_OK(grammar_compile(a, root, v, &g));
    grammar_ast_destroy(a);
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    uint64_t mask[(HAND_N + 63) / 64];
    /* at the start: "a", "ab", "abc" (crosses into the star), "abce" (completes it), byte 'a' */
    T_EQ_INT(grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask), 5);
    T_CHECK(mask_has(mask, 3) && mask_has(mask, 5) && mask_has(mask, 6) && mask_has(mask, 27));
    T_CHECK(mask_has(mask, HAND_N_PIECES + 'a'));
    T_CHECK(!mask_has(mask, 0) && !mask_has(mask, 1) && !mask_has(mask, 2));
    T_CHECK(grammar_accept(st, 27)); /* "abce" */
    T_CHECK(grammar_must_end(st));
    T_EQ_INT(grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask), 1); /* only EOG */
    T_CHECK(mask_has(mask, 0));
    T_EQ_INT(grammar_allowed(st, false, GRAMMAR_NO_BUDGET, mask), 0);
    T_CHECK(!grammar_accept(st, 3));
    T_CHECK(grammar_accept(st, 0));
    T_EQ_INT(grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask), 0);
    T_CHECK(grammar_complete(st) && grammar_must_end(st));
    /* refused tokens leave the state alone */
    grammar_state_reset(st);
    T_CHECK(!grammar_accept(st, 4));  /* "b" */
    T_CHECK(!grammar_accept(st, 0));  /* EOG before the text is complete */
    T_CHECK(!grammar_accept(st, 1));  /* NEVER */
    T_CHECK(!grammar_accept(st, -1) && !grammar_accept(st, HAND_N));
    T_CHECK(grammar_accept(st, 5));   /* "ab" */
    T_CHECK(grammar_accept(st, 29));  /* "cd" */
    T_CHECK(grammar_accept(st, 30));  /* "dc" */
    T_CHECK(!grammar_accept(st, 31)); /* "e!" runs past the end */
    T_CHECK(grammar_accept(st, 26));  /* "e" */
    T_CHECK(grammar_must_end(st));

    /* grammar_apply: a model row longer than the vocabulary; all allowed logits -inf */
    grammar_state_reset(st);
    float logits[HAND_N + 7];
    for (int i = 0; i < HAND_N + 7; i++)
        logits[i] = (float)i;
    T_EQ_INT(grammar_apply(st, logits, HAND_N + 7, true, GRAMMAR_NO_BUDGET), 5);
    for (int i = 0; i < HAND_N + 7; i++) {
        bool ok = i == 3 || i == 5 || i == 6 || i == 27 || i == HAND_N_PIECES + 'a';
        T_CHECKF(ok ? logits[i] == (float)i : logits[i] == -INFINITY, "logit %d = %g", i,
                 (double)logits[i]);
    }
    for (int i = 0; i < HAND_N + 7; i++)
        logits[i] = -INFINITY;
    logits[6] = 0.0f / 0.0f; /* NaN counts as -inf */
    T_EQ_INT(grammar_apply(st, logits, HAND_N + 7, true, GRAMMAR_NO_BUDGET), 5);
    T_CHECK(logits[3] == 0.0f && isnan(logits[6])); /* allowed logits are left as they are */
    grammar_state_destroy(st);
    grammar_destroy(g);
    grammar_vocab_destroy(v);
}

static void t_mask_walks(void) {
    int walks = (int)(30 * test_scale()) + 1;
    walk_check("ab(c|d)*e", walks, 1);
    walk_check("\\{\"[a-z]{1,3}\": (true|1\\d?)\\}", walks, 2);
    walk_check("\"(\\xC3\\xA9|[a-e]){0,6}\"", walks, 3);
    walk_check("<tool_call>\\n?\\{\"name\": \"(ab|abc|ba)\", \"x\": [0-9]{1,4}\\}", walks, 4);
    walk_check("(a|b)*", walks, 5);
}

/* ---- JSON schema grammars ---- */

/* A JSON-flavoured vocabulary: EOG, a control token, structural pieces that cross value
 * boundaries, words, multi-byte characters, then all 256 byte tokens. */
static const char *json_pieces[] = {
    "<eos>", "<ctl>", "{\"", "\"}", "\": ", "\", \"", ", \"", "[\"", "\"]", "true", "false",
    "null", "12", "0.", "-1", "ab", "abc", "\\n", "\\u00", "\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC",
    " ", "\"", "}}", "]}", "<tool_call>", "</tool_call>", "{\"name\": \"", "\", \"arguments\": {",
    "}</tool_call>", "city", "unit", "celsius", "\": \"", "\": [", "}, {\"", "], \"", "99",
    "1.5", "e", "get_weather", "search", "\n", "\": {\"", "\"x\": ", "\"y\": ",
};
#define JSON_N_PIECES ((int32_t)(sizeof json_pieces / sizeof *json_pieces))
#define JSON_N (JSON_N_PIECES + 256)

typedef struct jvocab {
    grammar_vocab *v;
    const char *texts[JSON_N];
    size_t lens[JSON_N];
    char bytes[256];
} jvocab;

static jvocab *json_vocab(void) {
    jvocab *jv = calloc(1, sizeof *jv);
    uint8_t kinds[JSON_N];
    for (int32_t i = 0; i < JSON_N_PIECES; i++) {
        jv->texts[i] = json_pieces[i];
        jv->lens[i] = strlen(json_pieces[i]);
        kinds[i] = GRAMMAR_TOKEN_TEXT;
    }
    kinds[0] = GRAMMAR_TOKEN_EOG;
    kinds[1] = GRAMMAR_TOKEN_NEVER;
    for (int b = 0; b < 256; b++) {
        jv->bytes[b] = (char)b;
        jv->texts[JSON_N_PIECES + b] = &jv->bytes[b];
        jv->lens[JSON_N_PIECES + b] = 1;
        kinds[JSON_N_PIECES + b] = GRAMMAR_TOKEN_TEXT;
    }
    T_OK(grammar_vocab_create_raw(JSON_N, jv->texts, jv->lens, kinds, &jv->v));
    return jv;
}

static void json_vocab_free(jvocab *jv) {
    grammar_vocab_destroy(jv->v);
    free(jv);
}

/* One random walk choosing uniformly among the allowed tokens (EOG included when the text is
 * complete) until the grammar must end or EOG is picked. Returns the steps taken; the text goes
 * to out. */
static int random_walk(grammar *g, const jvocab *jv, uint64_t seed, int64_t budget, strbuf *out) {
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    uint64_t mask[(JSON_N + 63) / 64];
    int steps = 0;
    strbuf_reset(out);
    for (;;) {
        T_CHECKF(steps < 20000, "walk does not end: %.200s", out->data);
        int64_t left = budget == GRAMMAR_NO_BUDGET ? budget : budget - steps;
        int32_t k = grammar_allowed(st, true, left, mask);
        T_CHECKF(k > 0, "no token allowed after: %s", out->data ? out->data : "");
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int32_t pick = (int32_t)((seed >> 33) % (uint64_t)k), t = -1;
        for (int32_t i = 0; i < JSON_N && pick >= 0; i++)
            if ((mask[i >> 6] >> (i & 63)) & 1 && pick-- == 0)
                t = i;
        T_CHECK(grammar_accept(st, t));
        steps++;
        if (t == 0)
            break;
        strbuf_append(out, jv->texts[t], jv->lens[t]);
        if (grammar_must_end(st))
            break;
    }
    T_CHECK(grammar_complete(st));
    grammar_state_destroy(st);
    return steps;
}

/* A validator for the schema subset of tool_grammar.h (what the grammar promises). */
static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static bool json_equal(const json_value *a, const json_value *b) {
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case JSON_NULL: return true;
    case JSON_BOOL: return a->b == b->b;
    case JSON_NUMBER: return a->num.d == b->num.d;
    case JSON_STRING: return a->str.len == b->str.len && !memcmp(a->str.s, b->str.s, a->str.len);
    case JSON_ARRAY:
        if (a->arr.n != b->arr.n)
            return false;
        for (size_t i = 0; i < a->arr.n; i++)
            if (!json_equal(a->arr.items[i], b->arr.items[i]))
                return false;
        return true;
    case JSON_OBJECT:
        if (a->obj.n != b->obj.n)
            return false;
        for (size_t i = 0; i < a->obj.n; i++) {
            const json_value *o = json_get(b, a->obj.keys[i]);
            if (!o || !json_equal(a->obj.vals[i], o))
                return false;
        }
        return true;
    }
    return false;
}

static bool type_ok(const char *t, const json_value *v) {
    if (!strcmp(t, "object")) return v->type == JSON_OBJECT;
    if (!strcmp(t, "array")) return v->type == JSON_ARRAY;
    if (!strcmp(t, "string")) return v->type == JSON_STRING;
    if (!strcmp(t, "integer")) return v->type == JSON_NUMBER && v->num.d == floor(v->num.d);
    if (!strcmp(t, "number")) return v->type == JSON_NUMBER;
    if (!strcmp(t, "boolean")) return v->type == JSON_BOOL;
    if (!strcmp(t, "null")) return v->type == JSON_NULL;
    return false;
}

static bool valid(const json_value *s, const json_value *root, const json_value *v, int depth);

static const json_value *resolve_ref(const json_value *root, const char *ref) {
    const json_value *x = root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ref + 1);
    for (char *tok = strtok(buf, "/"); tok && x; tok = strtok(NULL, "/"))
        x = json_get(x, tok);
    return x;
}

static bool valid(const json_value *s, const json_value *root, const json_value *v, int depth) {
    if (!s || s->type == JSON_BOOL)
        return depth < 64;
    const json_value *k;
    double d, lim;
    int64_t n;
    if ((k = json_get(s, "$ref")))
        return valid(resolve_ref(root, k->str.s), root, v, depth + 1);
    if ((k = json_get(s, "nullable")) && k->b && v->type == JSON_NULL)
        return true;
    if ((k = json_get(s, "const")) && !json_equal(k, v))
        return false;
    if ((k = json_get(s, "enum"))) {
        bool any = false;
        for (size_t i = 0; i < k->arr.n; i++)
            any |= json_equal(k->arr.items[i], v);
        if (!any)
            return false;
    }
    if ((k = json_get(s, "anyOf")) || (k = json_get(s, "oneOf"))) {
        bool any = false;
        for (size_t i = 0; i < k->arr.n; i++)
            any |= valid(k->arr.items[i], root, v, depth + 1);
        if (!any)
            return false;
    }
    if ((k = json_get(s, "allOf")))
        for (size_t i = 0; i < k->arr.n; i++)
            if (!valid(k->arr.items[i], root, v, depth + 1))
                return false;
    if ((k = json_get(s, "type"))) {
        bool any = false;
        if (k->type == JSON_STRING)
            any = type_ok(k->str.s, v);
        for (size_t i = 0; k->type == JSON_ARRAY && i < k->arr.n; i++)
            any |= type_ok(k->arr.items[i]->str.s, v);
        if (!any)
            return false;
    }
    if (v->type == JSON_NUMBER) {
        if ((k = json_get(s, "minimum")) && json_as_double(k, &lim) && v->num.d < lim)
            return false;
        if ((k = json_get(s, "maximum")) && json_as_double(k, &lim) && v->num.d > lim)
            return false;
        if ((k = json_get(s, "exclusiveMinimum")) && json_as_double(k, &lim) && v->num.d <= lim)
            return false;
        if ((k = json_get(s, "exclusiveMaximum")) && json_as_double(k, &lim) && v->num.d >= lim)
            return false;
        (void)d;
    }
    if (v->type == JSON_STRING) {
        size_t c = utf8_chars(v->str.s, v->str.len);
        if ((k = json_get(s, "minLength")) && json_as_int(k, &n) && (int64_t)c < n)
            return false;
        if ((k = json_get(s, "maxLength")) && json_as_int(k, &n) && (int64_t)c > n)
            return false;
    }
    if (v->type == JSON_ARRAY) {
        if ((k = json_get(s, "minItems")) && json_as_int(k, &n) && (int64_t)v->arr.n < n)
            return false;
        if ((k = json_get(s, "maxItems")) && json_as_int(k, &n) && (int64_t)v->arr.n > n)
            return false;
        const json_value *it = json_get(s, "items");
        for (size_t i = 0; it && i < v->arr.n; i++)
            if (!valid(it, root, v->arr.items[i], depth + 1))
                return false;
    }
    if (v->type == JSON_OBJECT) {
        const json_value *props = json_get(s, "properties"), *req = json_get(s, "required");
        const json_value *ap = json_get(s, "additionalProperties");
        for (size_t i = 0; req && i < req->arr.n; i++)
            if (!json_get(v, req->arr.items[i]->str.s))
                return false;
        if ((k = json_get(s, "maxProperties")) && json_as_int(k, &n) && (int64_t)v->obj.n > n)
            return false;
        if ((k = json_get(s, "minProperties")) && json_as_int(k, &n) && (int64_t)v->obj.n < n)
            return false;
        for (size_t i = 0; i < v->obj.n; i++) {
            const json_value *ps = props ? json_get(props, v->obj.keys[i]) : NULL;
            if (ps) {
                if (!valid(ps, root, v->obj.vals[i], depth + 1))
                    return false;
            } else if (ap && ap->type == JSON_BOOL && !ap->b) {
                return false;
            } else if (ap && ap->type == JSON_OBJECT && !valid(ap, root, v->obj.vals[i], depth + 1)) {
                return false;
            }
        }
    }
    return true;
}

static json_value *parse_json(arena *a, const char *text) {
    json_value *v;
    T_OK(json_parse(a, text, strlen(text), &v));
    return v;
}

static const char *test_schemas[] = {
    /* a typical tool: strings, enum, bounded integer, optional properties */
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":20},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":14}},\"required\":[\"city\"]}",
    /* numbers under bounds */
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":3},"
    "\"y\":{\"type\":\"integer\",\"exclusiveMinimum\":-10,\"exclusiveMaximum\":1000},"
    "\"z\":{\"type\":\"number\"},\"w\":{\"type\":\"integer\",\"minimum\":-123456,\"maximum\":-99}},"
    "\"required\":[\"x\",\"y\",\"z\",\"w\"]}",
    /* arrays */
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},"
    "\"minItems\":1,\"maxItems\":4}",
    /* $ref, anyOf, const, type arrays, nullable */
    "{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},"
    "\"y\":{\"type\":\"integer\"}},\"required\":[\"x\",\"y\"]}},\"type\":\"object\","
    "\"properties\":{\"a\":{\"$ref\":\"#/$defs/pt\"},\"b\":{\"anyOf\":[{\"type\":\"string\"},"
    "{\"type\":\"null\"}]},\"c\":{\"const\":{\"k\":[1,\"two\",null]}},\"d\":{\"type\":"
    "[\"boolean\",\"null\"]},\"e\":{\"type\":\"string\",\"nullable\":true,\"maxLength\":3}},"
    "\"required\":[\"a\",\"c\"]}",
    /* a map */
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":9},\"maxProperties\":3}",
    /* no schema */
    "{}",
    /* nesting */
    "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"},\"maxItems\":3}},\"required\":[\"id\"]},\"maxItems\":3}}}",
    /* all optional, additionalProperties false, allOf of one, annotations */
    "{\"title\":\"t\",\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
    "\"p\":{\"allOf\":[{\"type\":\"boolean\"}],\"description\":\"d\"},\"q\":{\"type\":\"string\","
    "\"format\":\"date\"},\"r\":{\"type\":\"null\"}}}",
};

static grammar *schema_grammar(const char *schema_text, grammar_vocab *v, arena *a) {
    grammar_ast *ast;
    grammar_node *root;
    grammar *g;
    json_value *schema = parse_json(a, schema_text);
    T_OK(grammar_ast_create(&ast));
    T_OK(tool_grammar_schema(ast, schema, schema, "schema", NULL, &root));
    T_OK(grammar_compile(ast, root, v, &g));
    grammar_ast_destroy(ast);
    return g;
}

static void t_schema_walks(void) {
    jvocab *jv = json_vocab();
    int walks = (int)(60 * test_scale()) + 2;
    strbuf out;
    strbuf_init(&out);
    for (size_t si = 0; si < sizeof test_schemas / sizeof *test_schemas; si++) {
        arena *a = arena_create(0, 0);
        json_value *schema = parse_json(a, test_schemas[si]);
        grammar *g = schema_grammar(test_schemas[si], jv->v, a);
        for (int w = 0; w < walks; w++) {
            random_walk(g, jv, 1000 * si + (uint64_t)w, GRAMMAR_NO_BUDGET, &out);
            json_value *v;
            arena *va = arena_create(0, 0);
            int rc = json_parse(va, out.data, out.len, &v);
            T_CHECKF(rc == 0, "schema %zu: output does not parse (%s): %s", si, err_detail(),
                     out.data);
            T_CHECKF(valid(schema, schema, v, 0), "schema %zu: output does not validate: %s", si,
                     out.data);
            arena_destroy(va);
        }
        grammar_destroy(g);
        arena_destroy(a);
    }
    strbuf_deinit(&out);
    json_vocab_free(jv);
}

/* With a budget, walks end complete within it even where the unconstrained walk would not. */
static void t_schema_budget(void) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    grammar *g = schema_grammar(test_schemas[6], jv->v, a);
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    int32_t shortest = grammar_distance(st); /* {} */
    T_EQ_INT(shortest, 2);
    grammar_state_destroy(st);
    strbuf out;
    strbuf_init(&out);
    for (int budget = 2; budget < 40; budget += 3)
        for (int w = 0; w < 5; w++) {
            int steps = random_walk(g, jv, (uint64_t)(budget * 10 + w), budget, &out);
            T_CHECKF(steps <= budget, "budget %d: %d steps: %s", budget, steps, out.data);
        }
    strbuf_deinit(&out);
    grammar_destroy(g);
    arena_destroy(a);
    json_vocab_free(jv);
}

static void t_schema_refusals(void) {
    static const struct {
        const char *schema;
        int code;
        const char *needle;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", ERR_UNSUPPORTED, "\"pattern\""},
        {"{\"type\":\"object\",\"properties\":{\"kid\":{\"$ref\":\"#\"}}}", ERR_UNSUPPORTED,
         "recursive"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", ERR_UNSUPPORTED, "uniqueItems"},
        {"{\"prefixItems\":[{}]}", ERR_UNSUPPORTED, "prefixItems"},
        {"{\"not\":{}}", ERR_UNSUPPORTED, "\"not\""},
        {"{\"type\":\"integer\",\"multipleOf\":2}", ERR_UNSUPPORTED, "multipleOf"},
        {"{\"type\":\"string\",\"minLength\":100000}", ERR_UNSUPPORTED, "minLength"},
        {"{\"$ref\":\"#/$defs/missing\"}", ERR_INVAL, "does not resolve"},
        {"{\"type\":\"frobnicate\"}", ERR_INVAL, "frobnicate"},
        {"{\"enum\":[]}", ERR_INVAL, "enum"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", ERR_INVAL, "minimum"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}",
         ERR_UNSUPPORTED, "schema.properties.a: keyword \"pattern\""},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"minLength\":2}", ERR_UNSUPPORTED, "minLength"},
        {"false", ERR_INVAL, "false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        arena *a = arena_create(0, 0);
        json_value *schema = parse_json(a, cases[i].schema);
        grammar_ast *ast;
        grammar_node *root;
        T_OK(grammar_ast_create(&ast));
        int rc = tool_grammar_schema(ast, schema, schema, "schema", NULL, &root);
        T_CHECKF(rc == cases[i].code, "%s: returned %d (%s), expected %d", cases[i].schema, rc,
                 err_detail(), cases[i].code);
        T_CHECKF(strstr(err_detail(), cases[i].needle), "%s: detail \"%s\" lacks \"%s\"",
                 cases[i].schema, err_detail(), cases[i].needle);
        grammar_ast_destroy(ast);
        arena_destroy(a);
    }
}

/* ---- tool calls ---- */

static const char *test_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":"
    "[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"q\":{\"type\":\"string\",\"minLength\":1},\"k\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":50}},\"required\":[\"q\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

static const json_value *tool_params(const json_value *tools, const char *name) {
    for (size_t i = 0; i < tools->arr.n; i++) {
        const json_value *f = json_get(tools->arr.items[i], "function");
        if (!strcmp(json_get(f, "name")->str.s, name))
            return json_get(f, "parameters");
    }
    return NULL;
}

static void tool_walks(const char *only) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    json_value *tools = parse_json(a, test_tools);
    grammar *g;
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, tools, only, NULL, jv->v, &g));
    int walks = (int)(80 * test_scale()) + 2;
    strbuf out;
    strbuf_init(&out);
    bool seen[3] = {false, false, false};
    for (int w = 0; w < walks; w++) {
        random_walk(g, jv, 77 + (uint64_t)w, GRAMMAR_NO_BUDGET, &out);
        chat_tool_parser *p;
        T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_HERMES, &p));
        strbuf content;
        strbuf_init(&content);
        T_OK(chat_tool_parser_feed(p, out.data, out.len, &content));
        T_OK(chat_tool_parser_finish(p, &content));
        T_CHECKF(content.len == 0, "content leaked: %s", content.data);
        T_EQ_INT(chat_tool_parser_n_calls(p), 1);
        const chat_tool_call *call = chat_tool_parser_call(p, 0);
        T_CHECKF(!only || !strcmp(call->name, only), "called %s, expected %s", call->name, only);
        const json_value *params = tool_params(tools, call->name);
        T_CHECKF(params || !strcmp(call->name, "now"), "unknown tool %s", call->name);
        arena *va = arena_create(0, 0);
        json_value *args = parse_json(va, call->arguments);
        T_CHECKF(valid(params, params, args, 0), "%s arguments do not validate: %s", call->name,
                 call->arguments);
        if (!params)
            T_CHECK(args->type == JSON_OBJECT && args->obj.n == 0);
        seen[!strcmp(call->name, "get_weather") ? 0 : !strcmp(call->name, "search") ? 1 : 2] = true;
        arena_destroy(va);
        strbuf_deinit(&content);
        chat_tool_parser_destroy(p);
    }
    if (!only && walks >= 20)
        T_CHECK(seen[0] && seen[1] && seen[2]);
    strbuf_deinit(&out);
    grammar_destroy(g);
    arena_destroy(a);
    json_vocab_free(jv);
}

static void t_tool_required(void) {
    tool_walks(NULL);
}

static void t_tool_named(void) {
    tool_walks("search");
}

static void t_tool_errors(void) {
    arena *a = arena_create(0, 0);
    json_value *tools = parse_json(a, test_tools);
    grammar *g;
    T_EQ_INT(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, tools, "nope", NULL, NULL, &g),
             ERR_NOTFOUND);
    T_EQ_INT(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_NONE, tools, NULL, NULL, NULL, &g),
             ERR_UNSUPPORTED);
    json_value *bad = parse_json(
        a, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
           "\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"[a-z]+\"}}}}}]");
    T_EQ_INT(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, bad, NULL, NULL, NULL, &g),
             ERR_UNSUPPORTED);
    T_CHECKF(strstr(err_detail(), "tools[0].function.parameters.properties.s: keyword \"pattern\""),
             "%s", err_detail());
    json_value *notobj = parse_json(
        a, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"string\"}}}]");
    T_EQ_INT(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, notobj, NULL, NULL, NULL, &g),
             ERR_INVAL);
    arena_destroy(a);
}

static void t_response_format(void) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    grammar *g;
    T_OK(tool_grammar_compile_response_format(parse_json(a, "{\"type\":\"text\"}"), NULL, jv->v, &g));
    T_CHECK(g == NULL);
    T_EQ_INT(tool_grammar_compile_response_format(parse_json(a, "{\"type\":\"xml\"}"), NULL, jv->v, &g),
             ERR_UNSUPPORTED);
    T_EQ_INT(tool_grammar_compile_response_format(parse_json(a, "{\"type\":\"json_schema\"}"), NULL,
                                                  jv->v, &g),
             ERR_INVAL);
    strbuf out;
    strbuf_init(&out);
    int walks = (int)(40 * test_scale()) + 2;
    T_OK(tool_grammar_compile_response_format(parse_json(a, "{\"type\":\"json_object\"}"), NULL,
                                              jv->v, &g));
    for (int w = 0; w < walks; w++) {
        random_walk(g, jv, 5 + (uint64_t)w, GRAMMAR_NO_BUDGET, &out);
        arena *va = arena_create(0, 0);
        json_value *v;
        T_CHECKF(json_parse(va, out.data, out.len, &v) == 0 && v->type == JSON_OBJECT,
                 "json_object output: %s", out.data);
        arena_destroy(va);
    }
    grammar_destroy(g);
    json_value *rf = parse_json(
        a, "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":"
           "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,"
           "\"maximum\":3}},\"required\":[\"n\"],\"additionalProperties\":false}}}");
    T_OK(tool_grammar_compile_response_format(rf, NULL, jv->v, &g));
    const json_value *schema = json_get(json_get(rf, "json_schema"), "schema");
    for (int w = 0; w < walks; w++) {
        random_walk(g, jv, 9 + (uint64_t)w, GRAMMAR_NO_BUDGET, &out);
        arena *va = arena_create(0, 0);
        json_value *v = parse_json(va, out.data);
        T_CHECKF(valid(schema, schema, v, 0), "json_schema output: %s", out.data);
        arena_destroy(va);
    }
    grammar_destroy(g);
    strbuf_deinit(&out);
    arena_destroy(a);
    json_vocab_free(jv);
}

/* tool_choice "auto" with a JSON response_format: content valid under the schema, or one call;
 * content strings never hold a raw '<', so the parser never mistakes content for a call. */
static void t_content_or_call(void) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    json_value *tools = parse_json(a, test_tools);
    json_value *rf = parse_json(
        a, "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\","
           "\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":12},\"e\":{\"enum\":[\"a<b\"]}},"
           "\"required\":[\"s\",\"e\"]}}}");
    const json_value *schema = json_get(json_get(rf, "json_schema"), "schema");
    tool_grammar_spec spec = {.tools = tools, .format = CHAT_TOOL_FORMAT_HERMES,
                              .response_format = rf};
    grammar *g;
    T_OK(tool_grammar_compile(&spec, NULL, jv->v, &g));
    strbuf out;
    strbuf_init(&out);
    int n_calls = 0, n_content = 0, walks = (int)(60 * test_scale()) + 4;
    for (int w = 0; w < walks; w++) {
        random_walk(g, jv, 300 + (uint64_t)w, GRAMMAR_NO_BUDGET, &out);
        chat_tool_parser *p;
        strbuf content;
        strbuf_init(&content);
        T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_HERMES, &p));
        T_OK(chat_tool_parser_feed(p, out.data, out.len, &content));
        T_OK(chat_tool_parser_finish(p, &content));
        arena *va = arena_create(0, 0);
        if (chat_tool_parser_n_calls(p)) {
            T_EQ_INT(chat_tool_parser_n_calls(p), 1);
            T_CHECK(content.len == 0);
            n_calls++;
        } else {
            T_CHECKF(!memchr(content.data, '<', content.len), "raw '<' in content: %s", content.data);
            T_CHECKF(valid(schema, schema, parse_json(va, content.data), 0), "content: %s",
                     content.data);
            n_content++;
        }
        arena_destroy(va);
        strbuf_deinit(&content);
        chat_tool_parser_destroy(p);
    }
    T_CHECKF(n_calls > 0 && n_content > 0, "%d calls, %d contents", n_calls, n_content);
    strbuf_deinit(&out);
    grammar_destroy(g);
    arena_destroy(a);
    json_vocab_free(jv);
}

/* ---- the engine ---- */

typedef struct eng_out {
    int32_t toks[600];
    int n;
    engine_finish fin;
    int events_after_finish;
} eng_out;

static void eng_on_event(void *ud, const engine_event *ev) {
    eng_out *o = ud;
    if (o->fin != ENGINE_FINISH_NONE)
        o->events_after_finish++;
    if (ev->token >= 0 && o->n < 600)
        o->toks[o->n++] = ev->token;
    if (ev->finish != ENGINE_FINISH_NONE)
        o->fin = ev->finish;
}

typedef struct eng_env {
    model *m;
    tokenizer *tok;
    grammar_vocab *v;
    grammar *g;
    arena *a;
} eng_env;

static void eng_env_open(eng_env *env) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-grammar.gguf", test_tmpdir());
    synth_opts so = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 17};
    T_OK(synth_write(&so, path));
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    T_OK(model_load(path, isa, &env->m));
    T_OK(tokenizer_load(model_get_gguf(env->m), &env->tok));
    T_OK(grammar_vocab_create(env->tok, &env->v));
    env->a = arena_create(0, 0);
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, parse_json(env->a, test_tools), NULL,
                                    NULL, env->v, &env->g));
}

static void eng_env_close(eng_env *env) {
    grammar_destroy(env->g);
    grammar_vocab_destroy(env->v);
    tokenizer_destroy(env->tok);
    model_destroy(env->m);
    arena_destroy(env->a);
}

/* Runs n constrained requests (every fourth greedy) to the end; returns the preemptions. */
static int64_t eng_run(eng_env *env, int64_t kv_blocks, int max_batch, int chunk, eng_out *outs,
                       int n) {
    engine_opts o = {.max_batch = max_batch, .chunk = chunk, .kv_blocks = kv_blocks,
                     .block_size = 16, .threads = 1, .attn_chunk = 64};
    engine *e;
    T_OK(engine_create(env->m, env->tok, &o, &e));
    for (int i = 0; i < n; i++) {
        char text[128];
        snprintf(text, sizeof text, "<|im_start|>user\nweather in city %d?<|im_end|>\n"
                                    "<|im_start|>assistant\n", i * 37);
        int32_t ids[256];
        size_t n_ids;
        T_OK(tokenizer_encode(env->tok, text, strlen(text), true, true, ids, 256, &n_ids));
        sample_params sp = sample_params_default();
        sp.seed = (uint64_t)i;
        if (i % 4 == 0)
            sp.temperature = 0;
        grammar_state *st;
        T_OK(grammar_state_create(env->g, &st));
        memset(&outs[i], 0, sizeof outs[i]);
        engine_req r = {.id = (uint64_t)i + 1, .prompt = ids, .n_prompt = (int32_t)n_ids, .sp = sp,
                        .max_tokens = 300, .constraint = st, .cb = eng_on_event, .ud = &outs[i]};
        T_OK(engine_submit(e, &r));
    }
    while (engine_busy(e))
        T_OK(engine_step(e));
    int64_t pre = engine_n_preemptions(e);
    engine_destroy(e);
    return pre;
}

static void t_engine(void) {
    eng_env env;
    eng_env_open(&env);
    enum { N = 12 };
    static eng_out gold[N], out[N];
    T_EQ_INT(eng_run(&env, 4096, 1, 512, gold, N), 0);
    arena *a = arena_create(0, 0);
    const json_value *tools = parse_json(a, test_tools);
    for (int i = 0; i < N; i++) {
        T_CHECKF(gold[i].fin == ENGINE_FINISH_STOP, "request %d finished with %d", i, gold[i].fin);
        T_EQ_INT(gold[i].events_after_finish, 0);
        strbuf text, content;
        strbuf_init(&text);
        strbuf_init(&content);
        T_OK(tokenizer_decode(env.tok, gold[i].toks, (size_t)gold[i].n, false, &text));
        chat_tool_parser *p;
        T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_HERMES, &p));
        T_OK(chat_tool_parser_feed(p, text.data, text.len, &content));
        T_OK(chat_tool_parser_finish(p, &content));
        T_EQ_INT(chat_tool_parser_n_calls(p), 1);
        const chat_tool_call *call = chat_tool_parser_call(p, 0);
        const json_value *params = tool_params(tools, call->name);
        arena *va = arena_create(0, 0);
        T_CHECKF(valid(params, params, parse_json(va, call->arguments), 0), "%s(%s)", call->name,
                 call->arguments);
        arena_destroy(va);
        chat_tool_parser_destroy(p);
        strbuf_deinit(&text);
        strbuf_deinit(&content);
    }
    /* batched, chunked, and with a pool so small that sequences are preempted and recomputed:
     * the same tokens (P1; the grammar state must follow the sequence through it all) */
    int64_t pre = eng_run(&env, 24, 8, 16, out, N);
    T_CHECKF(pre > 0, "no preemption happened");
    for (int i = 0; i < N; i++) {
        T_CHECKF(out[i].n == gold[i].n && !memcmp(out[i].toks, gold[i].toks,
                                                  (size_t)gold[i].n * sizeof(int32_t)) &&
                     out[i].fin == gold[i].fin,
                 "request %d differs under batching/preemption (%d vs %d tokens)", i, out[i].n,
                 gold[i].n);
    }
    printf("INFO grammar.engine: %d constrained requests, %lld preemptions, identical\n", N,
           (long long)pre);
    arena_destroy(a);
    eng_env_close(&env);
}

/* The engine owns a constraint from engine_submit on: refused, cancelled and destroyed requests
 * free it (ASan's leak check sees it otherwise). */
static void t_engine_ownership(void) {
    eng_env env;
    eng_env_open(&env);
    engine_opts o = {.max_batch = 4, .chunk = 64, .kv_blocks = 256, .block_size = 16,
                     .threads = 1, .attn_chunk = 64};
    engine *e;
    T_OK(engine_create(env.m, env.tok, &o, &e));
    grammar_state *st;
    eng_out out;
    memset(&out, 0, sizeof out);
    int32_t bad[2] = {5, 1 << 30};
    T_OK(grammar_state_create(env.g, &st));
    engine_req r = {.id = 1, .prompt = bad, .n_prompt = 2, .sp = sample_params_default(),
                    .max_tokens = 10, .constraint = st, .cb = eng_on_event, .ud = &out};
    T_EQ_INT(engine_submit(e, &r), ERR_INVAL);
    int32_t ok[3] = {1, 40, 41};
    for (uint64_t id = 2; id < 5; id++) {
        T_OK(grammar_state_create(env.g, &st));
        r = (engine_req){.id = id, .prompt = ok, .n_prompt = 3, .sp = sample_params_default(),
                         .max_tokens = 200, .constraint = st, .cb = eng_on_event, .ud = &out};
        T_OK(engine_submit(e, &r));
    }
    T_OK(engine_step(e));
    T_OK(engine_cancel(e, 2));
    T_OK(engine_step(e));
    engine_destroy(e); /* 3 and 4 still running */
    eng_env_close(&env);
}

/* ---- mask cost ---- */

/* Average microseconds of grammar_allowed at the state after prefix (and the allowed count). */
static double mask_us(grammar *g, const char *prefix, int reps, int32_t *count, int32_t n_vocab) {
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    T_CHECKF(grammar_accept_bytes(st, prefix, strlen(prefix)), "prefix \"%s\" refused", prefix);
    uint64_t *mask = malloc(((size_t)n_vocab + 63) / 64 * sizeof *mask);
    int64_t t0 = clock_now_ns();
    for (int r = 0; r < reps; r++)
        *count = grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask);
    double us = (double)(clock_now_ns() - t0) / 1e3 / reps;
    free(mask);
    grammar_state_destroy(st);
    return us;
}

static const char *speed_points[][2] = {
    {"start", ""},
    {"after {\"name\": ", "<tool_call>{\"name\": "},
    {"in a string", "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"wea"},
    {"in an integer", "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"x\", \"k\": 1"},
};

static void report_speed(const char *what, grammar *g, int32_t n_vocab, int reps) {
    for (size_t i = 0; i < sizeof speed_points / sizeof *speed_points; i++) {
        int32_t count = 0;
        double us = mask_us(g, speed_points[i][1], reps, &count, n_vocab);
        printf("INFO grammar.mask_cost: %s vocabulary (%d tokens), %s: %.1f us per mask, %d allowed\n",
               what, n_vocab, speed_points[i][0], us, count);
        if (i == 2)
            T_CHECKF(count > n_vocab / 2, "only %d tokens allowed inside a string", count);
        if (i == 1)
            T_CHECKF(count < 100, "%d tokens allowed before a name", count);
    }
    /* what the engine pays per constrained step inside a string: mask, -inf pass, plus the copy */
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    T_CHECK(grammar_accept_bytes(st, speed_points[2][1], strlen(speed_points[2][1])));
    float *row = malloc((size_t)n_vocab * sizeof *row), *copy = malloc((size_t)n_vocab * sizeof *row);
    for (int32_t i = 0; i < n_vocab; i++)
        row[i] = (float)(i % 97) * 0.01f;
    int64_t t0 = clock_now_ns();
    for (int r = 0; r < reps; r++) {
        memcpy(copy, row, (size_t)n_vocab * sizeof *row);
        grammar_apply(st, copy, n_vocab, true, 1000);
    }
    printf("INFO grammar.mask_cost: %s vocabulary (%d tokens), engine step in a string (copy, "
           "mask, -inf pass): %.1f us\n",
           what, n_vocab, (double)(clock_now_ns() - t0) / 1e3 / reps);
    free(row);
    free(copy);
    grammar_state_destroy(st);
}

static void t_mask_cost(void) {
    eng_env env;
    eng_env_open(&env);
    report_speed("tiny", env.g, tokenizer_n_vocab(env.tok), (int)(2000 * test_scale()) + 1);
    eng_env_close(&env);

    const char *path = test_shared_file("vocab/ggml-vocab-deepseek-llm.gguf");
    gguf *gf;
    tokenizer *tok;
    grammar_vocab *v;
    grammar *g;
    T_OK(gguf_open(path, &gf));
    T_OK(tokenizer_load(gf, &tok));
    gguf_close(gf);
    int64_t t0 = clock_now_ns();
    T_OK(grammar_vocab_create(tok, &v));
    int64_t t1 = clock_now_ns();
    arena *a = arena_create(0, 0);
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, parse_json(a, test_tools), NULL, NULL, v,
                                    &g));
    int64_t t2 = clock_now_ns();
    printf("INFO grammar.mask_cost: %d-token vocabulary tables built in %.1f ms; tool grammar "
           "(%d DFA states, %d byte classes, %.0f KiB) compiled in %.1f ms\n",
           tokenizer_n_vocab(tok), (double)(t1 - t0) / 1e6, grammar_n_dfa_states(g),
           grammar_n_classes(g), (double)grammar_table_bytes(g) / 1024, (double)(t2 - t1) / 1e6);
    report_speed("BPE", g, tokenizer_n_vocab(tok), (int)(100 * test_scale()) + 1);
    grammar_destroy(g);

    /* a Qwen-sized vocabulary (152064): these tokens plus joined pairs of them */
    enum { BIG = 152064 };
    int32_t n0 = tokenizer_n_vocab(tok);
    const char **texts = malloc(BIG * sizeof *texts);
    size_t *lens = malloc(BIG * sizeof *lens);
    uint8_t *kinds = malloc(BIG);
    char *pool = malloc((size_t)(BIG - n0) * 64), *pp = pool;
    uint64_t seed = 99;
    for (int32_t i = 0; i < BIG; i++) {
        if (i < n0) {
            texts[i] = tokenizer_token_text(tok, i, false, &lens[i]);
            kinds[i] = tokenizer_is_eog(tok, i) ? GRAMMAR_TOKEN_EOG
                       : lens[i]                ? GRAMMAR_TOKEN_TEXT
                                                : GRAMMAR_TOKEN_NEVER;
            continue;
        }
        size_t la, lb;
        const char *ta, *tb;
        do {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            ta = tokenizer_token_text(tok, (int32_t)((seed >> 20) % (uint64_t)n0), false, &la);
            tb = tokenizer_token_text(tok, (int32_t)((seed >> 40) % (uint64_t)n0), false, &lb);
        } while (la + lb > 63 || la + lb == 0);
        memcpy(pp, ta, la);
        memcpy(pp + la, tb, lb);
        texts[i] = pp;
        lens[i] = la + lb;
        kinds[i] = GRAMMAR_TOKEN_TEXT;
        pp += 64;
    }
    grammar_vocab *big;
    T_OK(grammar_vocab_create_raw(BIG, texts, lens, kinds, &big));
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, parse_json(a, test_tools), NULL, NULL,
                                    big, &g));
    report_speed("BPE + joined pairs", g, BIG, (int)(100 * test_scale()) + 1);
    grammar_destroy(g);
    grammar_vocab_destroy(big);
    free(texts);
    free(lens);
    free(kinds);
    free(pool);
    grammar_vocab_destroy(v);
    tokenizer_destroy(tok);
    arena_destroy(a);
}

/* ---- the response checker for tests/cli/serve_tools.sh ----
 *
 * test_grammar --check-response RESPONSE REQUEST tools|json|either [NAME]
 * RESPONSE is a /v1/chat/completions or /v1/completions body, or an SSE stream of chunks;
 * REQUEST the request body. "tools": every choice finished with "tool_calls" and carries exactly
 * one call to a function of the request's tools (NAME if given) whose arguments are valid under
 * its parameters. "json": every choice's text parses and is valid under the request's
 * response_format (json_schema's schema, or any object for json_object); "either": each choice
 * is one or the other (tool_choice "auto" with a JSON response_format). Prints why and exits 1
 * on the first problem, exits 0 silently otherwise. */

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    strbuf sb;
    strbuf_init(&sb);
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        strbuf_append(&sb, buf, k);
    fclose(f);
    return strbuf_take(&sb, n);
}

typedef struct ck_choice {
    strbuf text;       /* content / text, concatenated over chunks */
    strbuf name, args; /* the first call */
    int n_calls;
    char finish[32];
} ck_choice;

static int ck_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ck_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    return 1;
}

/* Folds one response object (a whole body or one chunk) into the choices. */
static void ck_fold(const json_value *body, ck_choice *ch, int *n_ch) {
    const json_value *cs = json_get(body, "choices");
    for (size_t i = 0; cs && cs->type == JSON_ARRAY && i < cs->arr.n; i++) {
        const json_value *c = cs->arr.items[i];
        int64_t idx = 0;
        json_as_int(json_get(c, "index"), &idx);
        if (idx < 0 || idx >= 16)
            continue;
        if (idx + 1 > *n_ch)
            *n_ch = (int)idx + 1;
        ck_choice *k = &ch[idx];
        const json_value *m = json_get(c, "message");
        if (!m)
            m = json_get(c, "delta");
        const char *t;
        size_t tl;
        if (json_as_str(json_get(m, "content"), &t, &tl) || json_as_str(json_get(c, "text"), &t, &tl))
            strbuf_append(&k->text, t, tl);
        const json_value *calls = json_get(m, "tool_calls");
        for (size_t j = 0; calls && calls->type == JSON_ARRAY && j < calls->arr.n; j++) {
            const json_value *f = json_get(calls->arr.items[j], "function");
            if (k->n_calls++ == 0) {
                if (json_as_str(json_get(f, "name"), &t, &tl))
                    strbuf_append(&k->name, t, tl);
                if (json_as_str(json_get(f, "arguments"), &t, &tl))
                    strbuf_append(&k->args, t, tl);
            }
        }
        if (json_as_str(json_get(c, "finish_reason"), &t, &tl))
            snprintf(k->finish, sizeof k->finish, "%.*s", (int)tl, t);
    }
}

static int check_response(int argc, char **argv) {
    if (argc < 5)
        return ck_fail("usage: test_grammar --check-response RESPONSE REQUEST tools|json|either "
                       "[NAME]");
    bool either = !strcmp(argv[4], "either");
    const char *want = argc > 5 ? argv[5] : NULL;
    size_t rn, qn;
    char *resp = read_file(argv[2], &rn), *req = read_file(argv[3], &qn);
    if (!resp || !req)
        return ck_fail("cannot read %s or %s", argv[2], argv[3]);
    arena *a = arena_create(0, 0);
    json_value *rq;
    if (json_parse(a, req, qn, &rq))
        return ck_fail("the request is not JSON: %s", err_detail());
    ck_choice ch[16];
    memset(ch, 0, sizeof ch);
    for (int i = 0; i < 16; i++) {
        strbuf_init(&ch[i].text);
        strbuf_init(&ch[i].name);
        strbuf_init(&ch[i].args);
    }
    int n_ch = 0;
    if (rn >= 6 && !memcmp(resp, "data: ", 6)) {
        for (char *line = strtok(resp, "\n"); line; line = strtok(NULL, "\n")) {
            if (strncmp(line, "data: ", 6) || !strcmp(line + 6, "[DONE]"))
                continue;
            json_value *v;
            if (json_parse(a, line + 6, strlen(line + 6), &v))
                return ck_fail("a chunk is not JSON: %s", line);
            ck_fold(v, ch, &n_ch);
        }
    } else {
        json_value *v;
        if (json_parse(a, resp, rn, &v))
            return ck_fail("the response is not JSON: %s", resp);
        ck_fold(v, ch, &n_ch);
    }
    if (n_ch == 0)
        return ck_fail("no choices in the response: %.300s", resp);
    const json_value *tools = json_get(rq, "tools");
    const json_value *rf = json_get(rq, "response_format");
    const json_value *schema = json_get(json_get(rf, "json_schema"), "schema");
    for (int i = 0; i < n_ch; i++) {
        ck_choice *k = &ch[i];
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        bool tools_mode = !strcmp(argv[4], "tools") || (either && k->n_calls > 0);
        if (tools_mode) {
            if (strcmp(k->finish, "tool_calls"))
                return ck_fail("choice %s: finish_reason \"%s\", expected tool_calls", idx, k->finish);
            if (k->n_calls != 1)
                return ck_fail("choice %s: %d calls, expected one", idx, k->n_calls);
            if (want && strcmp(k->name.data, want))
                return ck_fail("called %s, expected %s", k->name.data, want);
            const json_value *params = NULL;
            bool found = false;
            for (size_t t = 0; tools && t < tools->arr.n; t++) {
                const json_value *f = json_get(tools->arr.items[t], "function");
                if (!strcmp(json_get(f, "name")->str.s, k->name.data)) {
                    found = true;
                    params = json_get(f, "parameters");
                }
            }
            if (!found)
                return ck_fail("called %s, which is not among the tools", k->name.data);
            json_value *args;
            if (json_parse(a, k->args.data, k->args.len, &args) || args->type != JSON_OBJECT)
                return ck_fail("arguments are not a JSON object: %s", k->args.data);
            if (params && !valid(params, params, args, 0))
                return ck_fail("arguments do not follow the %s schema: %s", k->name.data,
                               k->args.data);
        } else {
            if (strcmp(k->finish, "stop"))
                return ck_fail("choice %s: finish_reason \"%s\", expected stop", idx, k->finish);
            json_value *v;
            if (json_parse(a, k->text.data, k->text.len, &v))
                return ck_fail("the output is not JSON: %s", k->text.data);
            if (schema ? !valid(schema, schema, v, 0) : v->type != JSON_OBJECT)
                return ck_fail("the output does not follow the schema: %s", k->text.data);
        }
    }
    for (int i = 0; i < 16; i++) {
        strbuf_deinit(&ch[i].text);
        strbuf_deinit(&ch[i].name);
        strbuf_deinit(&ch[i].args);
    }
    arena_destroy(a);
    free(resp);
    free(req);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--check-response"))
        return check_response(argc, argv);
    test_run("grammar.regex_basic", t_regex_basic);
    test_run("grammar.regex_repeat", t_regex_repeat);
    test_run("grammar.regex_must_end", t_regex_must_end);
    test_run("grammar.regex_lists", t_regex_lists);
    test_run("grammar.regex_dead_ends", t_regex_dead_ends);
    test_run("grammar.regex_parse_errors", t_regex_parse_errors);
    test_run("grammar.regex_dfa_vs_nfa", t_regex_dfa_vs_nfa);
    test_run("grammar.mask_hand_vocab", t_mask_hand);
    test_run("grammar.mask_walks", t_mask_walks);
    test_run("grammar.schema_walks", t_schema_walks);
    test_run("grammar.schema_budget", t_schema_budget);
    test_run("grammar.schema_refusals", t_schema_refusals);
    test_run("grammar.tool_required", t_tool_required);
    test_run("grammar.tool_named", t_tool_named);
    test_run("grammar.tool_errors", t_tool_errors);
    test_run("grammar.response_format", t_response_format);
    test_run("grammar.content_or_call", t_content_or_call);
    test_run("grammar.engine", t_engine);
    test_run("grammar.engine_ownership", t_engine_ownership);
    test_run("grammar.mask_cost", t_mask_cost);
    return test_summary();
}
