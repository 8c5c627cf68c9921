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
#include "base/err.h"
#include "base/json.h"
#include "sample/grammar.h"

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

int main(void) {
    test_run("grammar.regex_basic", t_regex_basic);
    test_run("grammar.regex_repeat", t_regex_repeat);
    test_run("grammar.regex_must_end", t_regex_must_end);
    test_run("grammar.regex_lists", t_regex_lists);
    test_run("grammar.regex_dead_ends", t_regex_dead_ends);
    test_run("grammar.regex_parse_errors", t_regex_parse_errors);
    test_run("grammar.regex_dfa_vs_nfa", t_regex_dfa_vs_nfa);
    return test_summary();
}
