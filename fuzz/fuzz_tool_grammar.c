/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tool_grammar: libFuzzer target for constrained decoding's outside input: JSON schemas,
 * tools arrays and response_format objects from requests (chat/tool_grammar.h), and grammar
 * patterns (sample/grammar.h). The first byte picks the reading of the rest: 0 a schema, 1 a
 * tools array (HERMES calls), 2 a response_format object, 3 a pattern. Whatever compiles (small
 * bounds and a state cap keep each input cheap) is then walked over the input's own bytes, and
 * the DFA's verdict on every prefix of up to 24 bytes is compared with the NFA reference; a
 * disagreement aborts. Errors are the expected outcome for most inputs; a crash, a sanitizer
 * report, a leak or a disagreement is a bug.
 */
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "toolcall/tool_grammar.h"
#include "sample/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_walk(grammar *g, const uint8_t *s, size_t n) {
    grammar_state *st;
    if (grammar_state_create(g, &st))
        return;
    size_t k = n < 24 ? n : 24;
    for (size_t i = 0; i <= k; i++) {
        grammar_state_reset(st);
        int dfa =
            grammar_accept_bytes(st, (const char *)s, i) ? (grammar_complete(st) ? 1 : 0) : -1;
        if (dfa != grammar_nfa_match(g, (const char *)s, i))
            abort();
        (void)grammar_must_end(st);
        (void)grammar_distance(st);
    }
    grammar_state_reset(st);
    for (size_t i = 0; i < n; i++)
        if (!grammar_accept_bytes(st, (const char *)s + i, 1))
            break;
    grammar_state_destroy(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 14)
        return 0;
    int mode = data[0] & 3;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    tool_grammar_limits lim;
    tool_grammar_limits_default(&lim);
    lim.string_chars = 6;
    lim.max_string_chars = 12;
    lim.items = 3;
    lim.max_items = 4;
    lim.any_string_chars = 4;
    lim.bounded_states = 2000;
    arena *a = arena_create(0, 1 << 24);
    grammar_ast *ast = NULL;
    grammar *g = NULL;
    json_value *v = NULL;
    if (!a || grammar_ast_create(&ast))
        goto out;
    if (mode == 3) {
        grammar_node *root;
        if (grammar_ast_parse(ast, text, n, &root) == 0)
            grammar_compile_capped(ast, root, NULL, 20000, &g);
    } else if (json_parse(a, text, n, &v) == 0) {
        tool_grammar_spec spec = {.format = CHAT_TOOL_FORMAT_HERMES};
        if (mode == 0) {
            grammar_node *root;
            if (tool_grammar_schema(ast, v, v, "schema", &lim, &root) == 0)
                grammar_compile_capped(ast, root, NULL, 20000, &g);
        } else {
            if (mode == 1 && v->type == JSON_ARRAY) {
                /* the server only passes tools whose entries have a function name */
                for (size_t i = 0; i < v->arr.n; i++)
                    if (!json_get(json_get(v->arr.items[i], "function"), "name"))
                        goto out;
                spec.tools = v;
            } else if (mode == 2) {
                spec.response_format = v;
            } else {
                goto out;
            }
            tool_grammar_compile(&spec, &lim, NULL, &g);
        }
    }
    if (g)
        fz_walk(g, data + 1, n);
out:
    grammar_destroy(g);
    grammar_ast_destroy(ast);
    arena_destroy(a);
    return 0;
}
