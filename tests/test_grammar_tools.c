/* SPDX-License-Identifier: MIT */
/*
 * test_grammar_tools: constrained decoding in every tool-call syntax (chat/tool_grammar.h with
 * chat/chat_tools.h), without a model.
 *   - for each format, random walks through the grammar of tool_choice "required" and of a named
 *     function (choosing uniformly among the allowed tokens of the JSON-flavoured vocabulary of
 *     test_grammar_util.h, whose byte tokens can spell any marker) are fed to that format's
 *     parser, whole and in pseudo-random chunks: exactly one call, no content, the right name,
 *     arguments valid under the tool's schema (the validator of test_grammar_util.h); the tools
 *     cover strings (raw in the XML-style syntaxes), bounded integers, numbers, booleans, string
 *     enums, arrays, nested objects, nullable strings, anyOf and a tool without parameters;
 *   - tool_choice "auto" with a JSON response_format in every syntax: content valid under the
 *     schema, or one call, never a misread;
 *   - what the bare-name syntaxes refuse: names and keys they cannot write, '<' in a raw enum
 *     value, top-level anyOf in XML-style parameters.
 * GT_VERBOSE=1 prints the first walk of each run.
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *rich_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"book\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":12},\"n\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":9},\"price\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"},"
    "\"kind\":{\"enum\":[\"a\",\"b c\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\",\"maxLength\":4},\"maxItems\":3},\"opt\":{\"type\":\"object\",\"properties\":{"
    "\"k\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"k\"]},\"maybe\":{\"type\":"
    "[\"string\",\"null\"],\"maxLength\":5},\"either\":{\"anyOf\":[{\"type\":\"string\","
    "\"maxLength\":3},{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}]}},"
    "\"required\":[\"title\",\"n\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":null}}]";

/* Walks the calls grammar of format f over tools (only: the named function, or NULL) and
 * checks every output through the parser. */
static void walks(chat_tool_format f, const char *tools_json, const char *only, int n_walks,
                  uint64_t seed) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    json_value *tools = parse_json(a, tools_json);
    grammar *g;
    T_OK(tool_grammar_compile_calls(f, tools, only, NULL, jv->v, &g));
    strbuf out;
    strbuf_init(&out);
    uint64_t rs = seed * 2654435761u + 1;
    for (int w = 0; w < n_walks; w++) {
        random_walk(g, jv, (seed + (uint64_t)w) * 0x9e3779b97f4a7c15ull, GRAMMAR_NO_BUDGET, &out);
        if (w == 0 && getenv("GT_VERBOSE"))
            printf("--- %s\n%s\n", chat_tool_format_name(f), out.data);
        for (int chunked = 0; chunked < 2; chunked++) {
            chat_tool_parser *p;
            T_OK(chat_tool_parser_create(f, &p));
            T_OK(chat_tool_parser_set_tools(p, tools));
            strbuf content;
            strbuf_init(&content);
            int rc = 0;
            for (size_t i = 0; i < out.len && !rc;) {
                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                size_t k = chunked ? 1 + (size_t)((rs >> 33) % 7) : out.len;
                if (k > out.len - i)
                    k = out.len - i;
                rc = chat_tool_parser_feed(p, out.data + i, k, &content);
                i += k;
            }
            if (!rc)
                rc = chat_tool_parser_finish(p, &content);
            T_CHECKF(rc == 0, "%s: the parser refused the grammar's output (%s): %s",
                     chat_tool_format_name(f), err_detail(), out.data);
            T_CHECKF(content.len == 0, "%s: content \"%s\" from %s", chat_tool_format_name(f),
                     content.data, out.data);
            T_CHECKF(chat_tool_parser_n_calls(p) == 1, "%s: %d calls from %s",
                     chat_tool_format_name(f), chat_tool_parser_n_calls(p), out.data);
            const chat_tool_call *call = chat_tool_parser_call(p, 0);
            T_CHECKF(!only || !strcmp(call->name, only), "called %s, expected %s", call->name,
                     only);
            const json_value *params = tool_params(tools, call->name);
            bool known = false;
            for (size_t i = 0; i < tools->arr.n; i++)
                known |= !strcmp(json_get(json_get(tools->arr.items[i], "function"), "name")->str.s,
                                 call->name);
            T_CHECKF(known, "%s: unknown tool %s", chat_tool_format_name(f), call->name);
            if (params && params->type == JSON_NULL)
                params = NULL;
            arena *va = arena_create(0, 0);
            json_value *args = parse_json(va, call->arguments);
            T_CHECKF(valid(params, params, args, 0), "%s: %s arguments do not validate: %s from %s",
                     chat_tool_format_name(f), call->name, call->arguments, out.data);
            if (!params)
                T_CHECK(args->type == JSON_OBJECT && args->obj.n == 0);
            arena_destroy(va);
            strbuf_deinit(&content);
            chat_tool_parser_destroy(p);
        }
    }
    strbuf_deinit(&out);
    grammar_destroy(g);
    arena_destroy(a);
    json_vocab_free(jv);
}

static void t_required(void) {
    int n = (int)(30 * test_scale()) + 2;
    for (int f = CHAT_TOOL_FORMAT_NONE + 1; f < CHAT_TOOL_FORMAT_COUNT; f++) {
        walks((chat_tool_format)f, test_tools, NULL, n, 1000 + (uint64_t)f * 100);
        walks((chat_tool_format)f, rich_tools, NULL, n, 5000 + (uint64_t)f * 100);
    }
}

static void t_named(void) {
    int n = (int)(20 * test_scale()) + 2;
    for (int f = CHAT_TOOL_FORMAT_NONE + 1; f < CHAT_TOOL_FORMAT_COUNT; f++) {
        walks((chat_tool_format)f, test_tools, "search", n, 9000 + (uint64_t)f * 100);
        walks((chat_tool_format)f, rich_tools, "book", n, 13000 + (uint64_t)f * 100);
        walks((chat_tool_format)f, rich_tools, "ping", 2, 17000 + (uint64_t)f * 100);
    }
}

/* tool_choice "auto" with a JSON response_format: content or one call, in every syntax. The
 * enum value holds '<' and '[', the first bytes of the formats' markers. Then for LLAMA3, content
 * whose first key is "name" like a call's: still content (calls are too rare a walk there to
 * require one). */
static void content_or_call(chat_tool_format f, const char *rf_json, bool need_calls) {
    jvocab *jv = json_vocab();
    arena *a = arena_create(0, 0);
    json_value *tools = parse_json(a, test_tools);
    json_value *rf = parse_json(a, rf_json);
    const json_value *schema = json_get(json_get(rf, "json_schema"), "schema");
    strbuf out;
    strbuf_init(&out);
    int walks_n = (int)(30 * test_scale()) + 4;
    tool_grammar_spec spec = {.tools = tools, .format = f, .response_format = rf};
    grammar *g;
    T_OK(tool_grammar_compile(&spec, NULL, jv->v, &g));
    int n_calls = 0, n_content = 0;
    for (int w = 0; w < walks_n; w++) {
        /* scrambled seeds: the walk's first pick from consecutive seeds is nearly constant */
        random_walk(g, jv, ((uint64_t)w + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)f,
                    GRAMMAR_NO_BUDGET, &out);
        chat_tool_parser *p;
        strbuf content;
        strbuf_init(&content);
        T_OK(chat_tool_parser_create(f, &p));
        T_OK(chat_tool_parser_set_tools(p, tools));
        int rc = chat_tool_parser_feed(p, out.data, out.len, &content);
        if (!rc)
            rc = chat_tool_parser_finish(p, &content);
        T_CHECKF(rc == 0, "%s: %s from %s", chat_tool_format_name(f), err_detail(), out.data);
        arena *va = arena_create(0, 0);
        if (chat_tool_parser_n_calls(p)) {
            T_EQ_INT(chat_tool_parser_n_calls(p), 1);
            T_CHECK(content.len == 0);
            n_calls++;
        } else {
            T_CHECKF(content.len && valid(schema, schema, parse_json(va, content.data), 0),
                     "%s: content %s", chat_tool_format_name(f), content.data);
            n_content++;
        }
        arena_destroy(va);
        strbuf_deinit(&content);
        chat_tool_parser_destroy(p);
    }
    T_CHECKF(n_content > 0 && (n_calls > 0 || !need_calls), "%s: %d calls, %d contents",
             chat_tool_format_name(f), n_calls, n_content);
    grammar_destroy(g);
    strbuf_deinit(&out);
    arena_destroy(a);
    json_vocab_free(jv);
}

static void t_content_or_call(void) {
    for (int f = CHAT_TOOL_FORMAT_NONE + 1; f < CHAT_TOOL_FORMAT_COUNT; f++)
        content_or_call(
            (chat_tool_format)f,
            "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
            "\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":12},"
            "\"e\":{\"enum\":[\"a<b\",\"[TOOL_CALLS]\"]}},\"required\":[\"s\",\"e\"]}}}",
            true);
    content_or_call(CHAT_TOOL_FORMAT_LLAMA3,
                    "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
                    "\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
                    "\"e\":{\"enum\":[\"a<b\",\"x\"]}},\"required\":[\"name\",\"e\"]}}}",
                    false);
}

static void t_refusals(void) {
    struct {
        const char *tools;
        const char *needle;
    } cases[] = {
        {"[{\"type\":\"function\",\"function\":{\"name\":\"get weather\"}}]", "get weather"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
         "\"object\",\"properties\":{\"a b\":{\"type\":\"string\"}}}}}]",
         "properties.a b"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
         "\"object\",\"properties\":{\"k\":{\"enum\":[\"x<y\"]}}}}}]",
         "x<y"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"anyOf\":[{"
         "\"type\":\"object\"}]}}}]",
         "anyOf"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
         "\"object\",\"required\":[\"z\"]}}}]",
         "\"z\""},
    };
    arena *a = arena_create(0, 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_value *tools = parse_json(a, cases[i].tools);
        grammar *g = NULL;
        /* the JSON-argument syntaxes take what the XML ones refuse, except bare names */
        int rc = tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, tools, NULL, NULL, NULL, &g);
        T_CHECKF(rc == 0, "hermes: %s: %s", cases[i].tools, err_detail());
        grammar_destroy(g);
        for (chat_tool_format f = CHAT_TOOL_FORMAT_QWEN3_XML; f < CHAT_TOOL_FORMAT_COUNT; f++) {
            bool xml = f == CHAT_TOOL_FORMAT_QWEN3_XML || f == CHAT_TOOL_FORMAT_GLM ||
                       f == CHAT_TOOL_FORMAT_DSML || f == CHAT_TOOL_FORMAT_DSML_V4;
            bool bare = f != CHAT_TOOL_FORMAT_LLAMA3 && f != CHAT_TOOL_FORMAT_MISTRAL;
            bool refused = i == 0 ? bare : xml;
            g = NULL;
            rc = tool_grammar_compile_calls(f, tools, NULL, NULL, NULL, &g);
            grammar_destroy(g);
            if (!refused) {
                T_CHECKF(rc == 0, "%s: %s: %s", chat_tool_format_name(f), cases[i].tools,
                         err_detail());
                continue;
            }
            T_CHECKF(rc == ERR_UNSUPPORTED, "%s: %s returned %d (%s)", chat_tool_format_name(f),
                     cases[i].tools, rc, err_detail());
            T_CHECKF(strstr(err_detail(), cases[i].needle), "%s: detail \"%s\" lacks \"%s\"",
                     chat_tool_format_name(f), err_detail(), cases[i].needle);
        }
    }
    arena_destroy(a);
}

int main(void) {
    test_run("grammar_tools.required", t_required);
    test_run("grammar_tools.named", t_named);
    test_run("grammar_tools.content_or_call", t_content_or_call);
    test_run("grammar_tools.refusals", t_refusals);
    return test_summary();
}
