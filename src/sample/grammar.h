/* SPDX-License-Identifier: MIT */
/*
 * grammar: byte-level regular-language constraints for decoding. A constraint is a regular
 * expression over bytes; at every step it says which vocabulary tokens may come next so that
 * the generated text stays a prefix of some string of the language, and when the text is
 * complete. Grammar-constrained decoding (tool calls, JSON output) is built on it
 * (chat/tool_grammar.h turns JSON schemas into such expressions).
 *
 * Pipeline:
 *   1. AST       a small regex tree built in code (grammar_ast_*) or parsed from a pattern
 *                (grammar_ast_parse, mostly for tests): byte sets, literals, concatenation,
 *                alternation, repetition {m,n} and Kleene star, plus two list operators that
 *                compile without duplicating their items (grammar_ast_list, grammar_ast_join).
 *   2. NFA       Thompson construction: one state per byte test, epsilon states for structure.
 *                A bounded repetition x{m,n} becomes n copies of x, the optional ones nested
 *                (x(x(x)?)?) so an epsilon closure stays small. The NFA is kept as the reference:
 *                grammar_nfa_match simulates it with state bitsets.
 *   3. DFA       subset construction over byte classes (bytes that no byte test in the NFA tells
 *                apart share a column), done once at compile time, then pruned: states from which
 *                no accepting state is reachable become the dead state 0. So "the state after
 *                these bytes is not dead" means exactly "these bytes can still be completed to a
 *                string of the language", and decoding can never walk into a dead end (as long as
 *                the vocabulary can spell every byte, which byte-level BPE and SentencePiece with
 *                byte fallback can). A sequence's whole grammar state is one DFA state id.
 *   4. masks     a token is allowed iff feeding its bytes from the current state reaches a state
 *                that is not dead. The vocabulary (grammar_vocab, built once per tokenizer) keeps
 *                the tokens' bytes sorted, grouped by first byte, with the common prefix length of
 *                each token and the previous one; the mask walk skips every first-byte group whose
 *                first byte is dead and reuses the states of the shared prefix, so it costs about
 *                one table lookup per node of the vocabulary's byte trie that is still alive
 *                (tests/test_grammar_engine.c measures it: about a microsecond at structural
 *                positions at any vocabulary size; inside a JSON string, where nearly every
 *                token is allowed, about 1.5 ms for a 102k-token BPE vocabulary and 3 ms for a
 *                152k one, on one core of the development machine).
 *
 * Tokens: every token is TEXT (its bytes are tokenizer_token_text without special rendering),
 * EOG (end of generation: allowed only when the text so far is a complete string of the
 * language) or NEVER (control, unknown and unused tokens, and tokens with no bytes: they would
 * advance nothing, so a constrained sequence could loop on them forever).
 *
 * Why JSON schemas fit: a finite JSON schema without recursive $ref, with bounded string
 * lengths, bounded number digits and bounded nesting describes a regular language -- every
 * construct is a finite combination of literals, alternatives and bounded or starred repetitions
 * of smaller regular pieces, and only recursion (an object that may contain itself to any depth)
 * needs a stack. The bounds also make the constrained output finite.
 *
 * Limits: an NFA of more than GRAMMAR_MAX_NFA_STATES states, a DFA whose transition table would
 * exceed GRAMMAR_MAX_TABLE_BYTES, a subset construction of more than GRAMMAR_MAX_WORK steps, or a
 * repetition bound above GRAMMAR_MAX_REPEAT is refused with ERR_TOOLARGE, so one request cannot
 * make the server build an arbitrarily large automaton or spend long building one.
 *
 * Ownership and threads: a grammar_ast belongs to one thread and dies with grammar_ast_destroy
 * (its nodes live in its arena). A grammar_vocab and a grammar are immutable after creation and
 * reference counted (atomically): any thread may use them, each grammar_state holds a reference
 * to its grammar and each grammar to its vocabulary, and the memory goes when the last reference
 * is dropped. A grammar_state belongs to one sequence and one thread at a time; it may be created
 * on one thread and handed to another through a queue. Stepping a state (mask, accept) never
 * allocates.
 *
 * Determinism (P1): the allowed set is a function of the grammar, the vocabulary and the state,
 * which is a function of the bytes the sequence itself generated; nothing depends on other
 * sequences or on timing.
 */
#ifndef VERITY_SAMPLE_GRAMMAR_H
#define VERITY_SAMPLE_GRAMMAR_H

#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The max of an unbounded repetition (Kleene star). */
#define GRAMMAR_INF (-1)
/* Largest finite repetition bound (x{0,4096}). */
#define GRAMMAR_MAX_REPEAT 4096
/* Largest NFA, in states (each about 16 bytes). */
#define GRAMMAR_MAX_NFA_STATES (1 << 20)
/* Largest DFA transition table (states x byte classes x 4 bytes). */
#define GRAMMAR_MAX_TABLE_BYTES ((size_t)64 << 20)
/* Most work of one subset construction, in NFA states visited (bounds compile time: well under a
 * second; typical tool grammars need a few million). */
#define GRAMMAR_MAX_WORK ((int64_t)1 << 27)

/* ---- regex AST ---- */

typedef struct grammar_ast grammar_ast;
typedef struct grammar_node grammar_node;

/* Creates an empty AST. Returns 0 and *out (free with grammar_ast_destroy) or ERR_NOMEM. */
int grammar_ast_create(grammar_ast **out);

/* Frees the AST and every node built in it. NULL is a no-op. */
void grammar_ast_destroy(grammar_ast *a);

/* Node builders. Each returns a node owned by a, or NULL when an allocation failed or a child is
 * NULL; a NULL marks the AST failed, so callers may nest builders freely and check once
 * (grammar_ast_failed, or grammar_compile, which then returns ERR_NOMEM). A node may be used as
 * a child of several parents: it is compiled once per use. */
bool grammar_ast_failed(const grammar_ast *a);

/* Matches the empty string. */
grammar_node *grammar_ast_empty(grammar_ast *a);

/* Matches nothing (an alternation of zero branches). */
grammar_node *grammar_ast_nothing(grammar_ast *a);

/* One byte whose bit is set in set[0..32) (bit b is set[b >> 3] & (1 << (b & 7))). */
grammar_node *grammar_ast_bytes(grammar_ast *a, const uint8_t set[32]);

/* One byte in [lo, hi] (nothing if lo > hi). */
grammar_node *grammar_ast_range(grammar_ast *a, uint8_t lo, uint8_t hi);

/* Exactly the bytes s[0..n) (copied). */
grammar_node *grammar_ast_lit(grammar_ast *a, const char *s, size_t n);

/* grammar_ast_lit of a NUL-terminated string. */
grammar_node *grammar_ast_str(grammar_ast *a, const char *s);

/* items[0] items[1] ... items[n-1]; n == 0 is the empty string. The array is copied. */
grammar_node *grammar_ast_cat(grammar_ast *a, grammar_node *const *items, int n);

/* x y. */
grammar_node *grammar_ast_cat2(grammar_ast *a, grammar_node *x, grammar_node *y);

/* items[0] | ... | items[n-1]; n == 0 matches nothing. The array is copied. */
grammar_node *grammar_ast_alt(grammar_ast *a, grammar_node *const *items, int n);

/* x | y. */
grammar_node *grammar_ast_alt2(grammar_ast *a, grammar_node *x, grammar_node *y);

/* x{min,max}: 0 <= min, max >= min or GRAMMAR_INF (x{min,}: min copies then a star). Bounds
 * above GRAMMAR_MAX_REPEAT or max < min are reported by grammar_compile (ERR_TOOLARGE /
 * ERR_INVAL). */
grammar_node *grammar_ast_repeat(grammar_ast *a, grammar_node *x, int32_t min, int32_t max);

/* x? (x{0,1}). */
grammar_node *grammar_ast_opt(grammar_ast *a, grammar_node *x);

/* Between min and max items separated by sep: item (sep item){min-1,max-1}, or the empty
 * string as well when min == 0 (max may be GRAMMAR_INF). Compiled with one copy of item for the
 * unbounded part, where the regex item (sep item)* would need two. */
grammar_node *grammar_ast_list(grammar_ast *a, grammar_node *item, grammar_node *sep, int32_t min,
                               int32_t max);

/* items[0..n) in this order, where items with optional[i] set may be left out, and sep between
 * every two items that are present: the shape of a JSON object's members when some properties
 * are optional. Compiled with one copy of each item (the regex form needs a number of copies
 * quadratic in the optional items before the first required one). Arrays are copied;
 * optional == NULL means every item is required. */
grammar_node *grammar_ast_join(grammar_ast *a, grammar_node *const *items, const bool *optional,
                               int n, grammar_node *sep);

/* Parses a pattern into *out. Syntax (bytes, no anchors, no backreferences): a literal byte;
 * `.` (any byte); `[...]` / `[^...]` with ranges a-z and escapes; `\` before any of
 * `\.[]()|*+?{}^$-` for that byte; `\n \r \t \f \v \0`, `\xHH`, `\d` ([0-9]), `\s` ([ \t\n\r\f\v]),
 * `\w` ([0-9A-Za-z_]); grouping `( )`; alternation `|`; postfix `* + ?`, `{m}`, `{m,}`, `{m,n}`.
 * Returns 0, ERR_FORMAT (the detail names the byte offset), ERR_NOMEM. */
int grammar_ast_parse(grammar_ast *a, const char *pattern, size_t n, grammar_node **out);

/* ---- vocabulary ---- */

typedef struct grammar_vocab grammar_vocab;

enum grammar_token_kind {
    GRAMMAR_TOKEN_NEVER = 0, /* never allowed under a constraint */
    GRAMMAR_TOKEN_TEXT = 1,  /* allowed when its bytes keep the text completable */
    GRAMMAR_TOKEN_EOG = 2,   /* allowed when the text is complete */
};

/* Builds the vocabulary tables of tok: each token's kind (EOG from tokenizer_is_eog; NEVER for
 * control, unknown and unused tokens and tokens whose text is empty; TEXT otherwise) and the
 * TEXT tokens' bytes in sorted order. tok may be destroyed afterwards. About 30 bytes per token
 * plus the text. Returns 0 and *out (one reference, dropped with grammar_vocab_destroy) or
 * ERR_NOMEM. */
int grammar_vocab_create(const tokenizer *tok, grammar_vocab **out);

/* Builds the tables from plain arrays (hand-made vocabularies in tests): token i has bytes
 * texts[i][0..lens[i]) and kind kinds[i] (enum grammar_token_kind; a TEXT token with no bytes
 * is made NEVER). Returns 0 and *out, ERR_INVAL (n < 1 or a kind out of range; the detail names
 * the token), ERR_NOMEM. */
int grammar_vocab_create_raw(int32_t n, const char *const *texts, const size_t *lens,
                             const uint8_t *kinds, grammar_vocab **out);

/* Drops a reference; the last one frees. NULL is a no-op. */
void grammar_vocab_destroy(grammar_vocab *v);

/* Number of tokens. */
int32_t grammar_vocab_n(const grammar_vocab *v);

/* ---- compiled grammars ---- */

typedef struct grammar grammar;

/* Compiles the expression rooted at root (a node of a) into an automaton for vocabulary v (may
 * be NULL for a grammar used only on bytes: then the token functions below are unavailable);
 * the grammar takes a reference to v. a may be destroyed afterwards. Returns 0 and *out (one
 * reference, dropped with grammar_destroy), or:
 *   ERR_NOMEM    the AST failed while being built, or memory ran out;
 *   ERR_INVAL    root is NULL, a repetition has max < min, or the expression matches no string
 *                at all;
 *   ERR_TOOLARGE a repetition bound above GRAMMAR_MAX_REPEAT, or the NFA, the DFA table or the
 *                construction work over its limit (the detail gives the sizes). */
int grammar_compile(const grammar_ast *a, const grammar_node *root, grammar_vocab *v,
                    grammar **out);

/* grammar_compile with a size cap: if max_dfa_states > 0, returns ERR_TOOLARGE as soon as the
 * DFA would have more states than that (or the NFA more than 8 times as many), so a caller can
 * fall back to a cheaper expression without paying for the large one. */
int grammar_compile_capped(const grammar_ast *a, const grammar_node *root, grammar_vocab *v,
                           int32_t max_dfa_states, grammar **out);

/* Drops a reference; the last one frees (and drops the grammar's reference to its vocabulary).
 * NULL is a no-op. */
void grammar_destroy(grammar *g);

/* Sizes, for logs and tests: NFA states, DFA states (the dead state included), byte classes,
 * and the bytes of the DFA tables. */
int32_t grammar_n_nfa_states(const grammar *g);
int32_t grammar_n_dfa_states(const grammar *g);
int32_t grammar_n_classes(const grammar *g);
size_t grammar_table_bytes(const grammar *g);

/* The reference matcher: simulates the NFA with state bitsets over s[0..n). Returns 1 if s is
 * in the language, 0 if s is a proper prefix of a string of the language (the set of live NFA
 * states is not empty), -1 if it is neither. Allocates; for tests, not for decoding. */
int grammar_nfa_match(const grammar *g, const char *s, size_t n);

/* ---- per-sequence state ---- */

typedef struct grammar_state grammar_state;

/* Creates a state at the start of g's language, taking a reference to g, and allocates the
 * mask scratch (n_vocab bits) and the walk stack. Returns 0 and *out (free with
 * grammar_state_destroy) or ERR_NOMEM. */
int grammar_state_create(grammar *g, grammar_state **out);

/* Frees the state and drops its grammar reference. NULL is a no-op. */
void grammar_state_destroy(grammar_state *st);

/* Back to the start of the language (nothing accepted yet). */
void grammar_state_reset(grammar_state *st);

/* The grammar the state follows (borrowed). */
grammar *grammar_state_grammar(const grammar_state *st);

/* "No limit" for the budget arguments below. */
#define GRAMMAR_NO_BUDGET INT64_MAX

/* Marks in mask (bit t of mask[t / 64], (grammar_vocab_n + 63) / 64 words, cleared first) every
 * token that may come next: TEXT tokens whose bytes keep the text completable, and, if allow_eog
 * and the text is complete, EOG tokens.
 *
 * budget is the number of tokens that may still be generated, this one included (the request's
 * max_tokens or context left), or GRAMMAR_NO_BUDGET. With a budget, a TEXT token is allowed only
 * if the text after it can still be completed in budget - 1 tokens, counting one token per byte
 * of the shortest completion (a vocabulary that spells every byte as a token can always do it);
 * so a constrained sequence given at least the shortest string of its language in tokens always
 * ends complete, however the model chooses. If the budget is already too small for any
 * completion, or the filter would leave no token, it is ignored.
 *
 * Returns the number of tokens marked (0 after an accepted EOG token, or if the vocabulary cannot
 * continue). The grammar must have a vocabulary (CHECK). Never allocates. */
int32_t grammar_allowed(grammar_state *st, bool allow_eog, int64_t budget, uint64_t *mask);

/* Masks a logits row for sampling: computes the allowed set as grammar_allowed does (into the
 * state's own scratch) and sets logits[t] = -INFINITY for every t in [0, n_logits) that is not
 * allowed (ids at or above the vocabulary size included); allowed logits are left as they are.
 * If every allowed token's logit is -inf or NaN, the lowest allowed id gets 0.0f, so a sampler
 * that never picks -inf (sample.h) still picks an allowed token. Returns the number of allowed
 * tokens below n_logits; with 0 the row is all -inf and the caller must stop the sequence.
 * Never allocates. */
int32_t grammar_apply(grammar_state *st, float *logits, int32_t n_logits, bool allow_eog,
                      int64_t budget);

/* The fewest bytes that complete the text from the current state (0 when it is complete). */
int32_t grammar_distance(const grammar_state *st);

/* Advances over one token. Returns true and moves the state if the token is allowed (a TEXT
 * token whose bytes keep the text completable, or an EOG token when the text is complete, after
 * which nothing more is allowed); false, leaving the state unchanged, otherwise (also for ids out
 * of range and NEVER tokens). Never allocates. */
bool grammar_accept(grammar_state *st, int32_t token);

/* Advances over bytes s[0..n) (no vocabulary needed). Returns true and moves the state if the
 * text stays completable; false, leaving the state unchanged, otherwise. */
bool grammar_accept_bytes(grammar_state *st, const char *s, size_t n);

/* True if the text so far is a complete string of the language (an EOG token would be
 * allowed), or an EOG token was accepted. */
bool grammar_complete(const grammar_state *st);

/* True if the text is complete and cannot be continued (no byte can follow), or an EOG token was
 * accepted: the sequence must end now. */
bool grammar_must_end(const grammar_state *st);

#endif
