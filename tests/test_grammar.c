/* SPDX-License-Identifier: MIT */
/*
 * test_grammar: grammar-constrained decoding without a model (test_grammar_engine.c has the
 * engine, the costs and the server-response checker).
 *   - the regex layer: patterns accepted and rejected, bounded repeats, alternation, the list
 *     and join operators, dead-end pruning, limits, parse errors; the DFA against the NFA
 *     reference (grammar_nfa_match) on every prefix of random strings;
 *   - token masks on a small hand-built vocabulary (multi-byte tokens crossing grammar
 *     boundaries, byte tokens, tokens that complete a literal and continue), each compared with
 *     a brute-force mask from the NFA reference;
 *   - JSON schema grammars (chat/tool_grammar.h): random walks that choose uniformly among the
 *     allowed tokens always end, parse with base/json.h and satisfy the schema (the validator
 *     in test_grammar_util.h); with a token budget they end within it; refusals name the
 *     keyword and its place;
 *   - tool-call grammars: the walk's text through the HERMES parser gives exactly one call with
 *     a valid name and schema-valid arguments; response_format json_object / json_schema; and
 *     content-or-call for tool_choice "auto" with a JSON response_format.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "toolcall/chat_tools.h"
#include "toolcall/tool_grammar.h"
#include "sample/grammar.h"
#include "test_grammar_util.h"

#include <math.h>
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
    grammar_node *n3 = grammar_ast_cat(a,
                                       (grammar_node *[]){grammar_ast_str(a, "["),
                                                          grammar_ast_list(a, item, sep, 0, 3),
                                                          grammar_ast_str(a, "]")},
                                       3);
    grammar_node *ninf = grammar_ast_cat(
        a,
        (grammar_node *[]){grammar_ast_str(a, "["), grammar_ast_list(a, item, sep, 2, GRAMMAR_INF),
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
    grammar_node *root =
        grammar_ast_alt2(a, grammar_ast_cat2(a, grammar_ast_str(a, "a"), grammar_ast_nothing(a)),
                         grammar_ast_str(a, "b"));
    grammar *g;
    T_OK(grammar_compile(a, root, NULL, &g));
    expect(g, "a", -1);
    expect(g, "b", 1);
    grammar_destroy(g);
    /* a language with no strings is refused */
    T_EQ_INT(grammar_compile(a, grammar_ast_nothing(a), NULL, &g), ERR_INVAL);
    T_EQ_INT(
        grammar_compile(
            a, grammar_ast_cat2(a, grammar_ast_str(a, "x"), grammar_ast_alt(a, NULL, 0)), NULL, &g),
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
        "(a|ab)(c|bcd)(d*)",
        "[ab]{1,5}c{0,2}|(ba)+",
        "((a|b)(a|b)){2,3}b?",
        "a*b*a*|bba{2,}",
        "(abc|a(b|c){0,3})*d",
        "x?(\\d{1,3}(\\.\\d{1,2})?|-\\d)",
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
    "<eos>",  "<ctl>", "",    "a",   "b",    "ab",         "abc",      "ba",          "{",
    "{\"",    "\"",    "\":", "x\"", "\xC3", "\xA9",       "\xC3\xA9", "true",        "tr",
    "ue",     "1",     "12",  "}",   "\"}",  " ",          ": ",       "c",           "e",
    "abce",   "d",     "cd",  "dc",  "e!",   "\"name\": ", "\", \"",   "<tool_call>", "<tool",
    "_call>",
};
#define HAND_N_PIECES ((int32_t)(sizeof hand_pieces / sizeof *hand_pieces))
#define HAND_N        (HAND_N_PIECES + 256)

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
    T_CHECK(!grammar_accept(st, 4)); /* "b" */
    T_CHECK(!grammar_accept(st, 0)); /* EOG before the text is complete */
    T_CHECK(!grammar_accept(st, 1)); /* NEVER */
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

static const char *test_schemas[] = {
    /* a typical tool: strings, enum, bounded integer, optional properties */
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":20},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":14}},\"required\":[\"city\"]}",
    /* numbers under bounds */
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":"
    "3},"
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
        /* exponential $ref fan-out: memoized, then the NFA limit (not hours of AST building) */
        {"{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/b\"},"
         "\"minItems\":30,\"maxItems\":30},\"b\":{\"type\":\"array\",\"items\":{\"$ref\":"
         "\"#/$defs/c\"},\"minItems\":30,\"maxItems\":30},\"c\":{\"type\":\"array\","
         "\"items\":{\"type\":\"string\"},\"minItems\":30,\"maxItems\":30}},\"type\":"
         "\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"},\"y\":{\"$ref\":"
         "\"#/$defs/a\"}}}",
         ERR_TOOLARGE, "states"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        arena *a = arena_create(0, 0);
        json_value *schema = parse_json(a, cases[i].schema);
        grammar_ast *ast;
        grammar_node *root;
        T_OK(grammar_ast_create(&ast));
        int rc = tool_grammar_schema(ast, schema, schema, "schema", NULL, &root);
        grammar *g = NULL;
        if (rc == 0)
            rc = grammar_compile(ast, root, NULL, &g);
        grammar_destroy(g);
        T_CHECKF(rc == cases[i].code, "%s: returned %d (%s), expected %d", cases[i].schema, rc,
                 err_detail(), cases[i].code);
        T_CHECKF(strstr(err_detail(), cases[i].needle), "%s: detail \"%s\" lacks \"%s\"",
                 cases[i].schema, err_detail(), cases[i].needle);
        grammar_ast_destroy(ast);
        arena_destroy(a);
    }
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
        a,
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"[a-z]+\"}}}}}]");
    T_EQ_INT(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, bad, NULL, NULL, NULL, &g),
             ERR_UNSUPPORTED);
    T_CHECKF(strstr(err_detail(), "tools[0].function.parameters.properties.s: keyword \"pattern\""),
             "%s", err_detail());
    json_value *notobj = parse_json(a, "[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                       "\"parameters\":{\"type\":\"string\"}}}]");
    T_EQ_INT(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, notobj, NULL, NULL, NULL, &g),
             ERR_INVAL);
    arena_destroy(a);
}

static void t_response_format(void) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    grammar *g;
    T_OK(tool_grammar_compile_response_format(parse_json(a, "{\"type\":\"text\"}"), NULL, jv->v,
                                              &g));
    T_CHECK(g == NULL);
    T_EQ_INT(
        tool_grammar_compile_response_format(parse_json(a, "{\"type\":\"xml\"}"), NULL, jv->v, &g),
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
        a,
        "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\","
        "\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":12},\"e\":{\"enum\":[\"a<b\"]}},"
        "\"required\":[\"s\",\"e\"]}}}");
    const json_value *schema = json_get(json_get(rf, "json_schema"), "schema");
    tool_grammar_spec spec = {
        .tools = tools, .format = CHAT_TOOL_FORMAT_HERMES, .response_format = rf};
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
            T_CHECKF(!memchr(content.data, '<', content.len), "raw '<' in content: %s",
                     content.data);
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

/* Small schemas keep the default bounds; a request whose bounded automaton would exceed
 * bounded_states gets the default bounds lifted (explicit maxLength still holds) and stays
 * valid. */
static void t_adaptive_bounds(void) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    char long_s[200];
    memset(long_s, 'x', sizeof long_s);
    /* one tool with one string: bounded at 64 characters */
    json_value *one = parse_json(
        a,
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"s\":{\"type\":\"string\"},\"t\":{\"type\":\"string\",\"maxLength\":3}},"
        "\"required\":[\"s\",\"t\"]}}}]");
    grammar *g;
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, one, NULL, NULL, jv->v, &g));
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    const char *pre = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"";
    T_CHECK(grammar_accept_bytes(st, pre, strlen(pre)));
    T_CHECK(grammar_accept_bytes(st, long_s, 64));
    T_CHECK(!grammar_accept_bytes(st, long_s, 1));
    grammar_state_destroy(st);
    int32_t small = grammar_n_dfa_states(g);
    grammar_destroy(g);
    /* forty tools with four strings each: over the cap, so the defaults are lifted */
    strbuf tools;
    strbuf_init(&tools);
    strbuf_putc(&tools, '[');
    for (int i = 0; i < 40; i++)
        strbuf_printf(&tools,
                      "%s{\"type\":\"function\",\"function\":{\"name\":\"tool%d\",\"parameters\":{"
                      "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{"
                      "\"type\":\"string\"},\"c\":{\"type\":\"string\",\"maxLength\":3},\"d\":{"
                      "\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"a\","
                      "\"c\"]}}}",
                      i ? "," : "", i);
    strbuf_putc(&tools, ']');
    json_value *many = parse_json(a, tools.data);
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, many, NULL, NULL, jv->v, &g));
    printf("INFO grammar.adaptive_bounds: 1 tool %d DFA states; 40 tools %d DFA states (bounds "
           "lifted)\n",
           small, grammar_n_dfa_states(g));
    T_CHECK(grammar_n_dfa_states(g) < 16384);
    T_OK(grammar_state_create(g, &st));
    pre = "<tool_call>{\"name\": \"tool7\", \"arguments\": {\"a\": \"";
    T_CHECK(grammar_accept_bytes(st, pre, strlen(pre)));
    T_CHECK(grammar_accept_bytes(st, long_s, sizeof long_s)); /* no default bound any more */
    T_CHECK(grammar_accept_bytes(st, "\", \"c\": \"", 9));
    T_CHECK(!grammar_accept_bytes(st, long_s, 4)); /* maxLength 3 still holds */
    grammar_state_destroy(st);
    strbuf out;
    strbuf_init(&out);
    int walks = (int)(20 * test_scale()) + 2;
    for (int w = 0; w < walks; w++) {
        random_walk(g, jv, 4000 + (uint64_t)w, GRAMMAR_NO_BUDGET, &out);
        chat_tool_parser *p;
        strbuf content;
        strbuf_init(&content);
        T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_HERMES, &p));
        T_OK(chat_tool_parser_feed(p, out.data, out.len, &content));
        T_OK(chat_tool_parser_finish(p, &content));
        T_EQ_INT(chat_tool_parser_n_calls(p), 1);
        const chat_tool_call *call = chat_tool_parser_call(p, 0);
        const json_value *params = tool_params(many, call->name);
        arena *va = arena_create(0, 0);
        T_CHECKF(params && valid(params, params, parse_json(va, call->arguments), 0), "%s(%s)",
                 call->name, call->arguments);
        arena_destroy(va);
        strbuf_deinit(&content);
        chat_tool_parser_destroy(p);
    }
    strbuf_deinit(&out);
    strbuf_deinit(&tools);
    grammar_destroy(g);
    arena_destroy(a);
    json_vocab_free(jv);
}

int main(void) {
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
    test_run("grammar.adaptive_bounds", t_adaptive_bounds);
    return test_summary();
}
