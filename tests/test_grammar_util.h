/* SPDX-License-Identifier: MIT */
/*
 * test_grammar_util: helpers shared by test_grammar.c and test_grammar_engine.c (a header of
 * static inline functions, so each test binary stays one file): a JSON-flavoured hand-made
 * vocabulary, random walks that choose uniformly among the allowed tokens, a validator for the
 * JSON Schema subset of chat/tool_grammar.h, and the tools used by the tool-call tests.
 */
#ifndef VERITY_TESTS_TEST_GRAMMAR_UTIL_H
#define VERITY_TESTS_TEST_GRAMMAR_UTIL_H

#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "sample/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON schema grammars ---- */

/* A JSON-flavoured vocabulary: EOG, a control token, structural pieces that cross value
 * boundaries, words, multi-byte characters, then all 256 byte tokens. */
static const char *json_pieces[] = {
    "<eos>",
    "<ctl>",
    "{\"",
    "\"}",
    "\": ",
    "\", \"",
    ", \"",
    "[\"",
    "\"]",
    "true",
    "false",
    "null",
    "12",
    "0.",
    "-1",
    "ab",
    "abc",
    "\\n",
    "\\u00",
    "\xC3\xA9",
    "\xE6\x97\xA5\xE6\x9C\xAC",
    " ",
    "\"",
    "}}",
    "]}",
    "<tool_call>",
    "</tool_call>",
    "{\"name\": \"",
    "\", \"arguments\": {",
    "}</tool_call>",
    "city",
    "unit",
    "celsius",
    "\": \"",
    "\": [",
    "}, {\"",
    "], \"",
    "99",
    "1.5",
    "e",
    "get_weather",
    "search",
    "\n",
    "\": {\"",
    "\"x\": ",
    "\"y\": ",
};
#define JSON_N_PIECES ((int32_t)(sizeof json_pieces / sizeof *json_pieces))
#define JSON_N        (JSON_N_PIECES + 256)

typedef struct jvocab {
    grammar_vocab *v;
    const char *texts[JSON_N];
    size_t lens[JSON_N];
    char bytes[256];
} jvocab;

static inline jvocab *json_vocab(void) {
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

static inline void json_vocab_free(jvocab *jv) {
    grammar_vocab_destroy(jv->v);
    free(jv);
}

/* One random walk choosing uniformly among the allowed tokens (EOG included when the text is
 * complete) until the grammar must end or EOG is picked. Returns the steps taken; the text goes
 * to out. */
static inline int random_walk(grammar *g, const jvocab *jv, uint64_t seed, int64_t budget,
                              strbuf *out) {
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
static inline size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static inline bool type_ok(const char *t, const json_value *v) {
    if (!strcmp(t, "object"))
        return v->type == JSON_OBJECT;
    if (!strcmp(t, "array"))
        return v->type == JSON_ARRAY;
    if (!strcmp(t, "string"))
        return v->type == JSON_STRING;
    if (!strcmp(t, "integer"))
        return v->type == JSON_NUMBER && v->num.d == floor(v->num.d);
    if (!strcmp(t, "number"))
        return v->type == JSON_NUMBER;
    if (!strcmp(t, "boolean"))
        return v->type == JSON_BOOL;
    if (!strcmp(t, "null"))
        return v->type == JSON_NULL;
    return false;
}

static inline bool valid(const json_value *s, const json_value *root, const json_value *v,
                         int depth);

static inline const json_value *resolve_ref(const json_value *root, const char *ref) {
    const json_value *x = root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ref + 1);
    for (char *tok = strtok(buf, "/"); tok && x; tok = strtok(NULL, "/"))
        x = json_get(x, tok);
    return x;
}

static inline bool valid(const json_value *s, const json_value *root, const json_value *v,
                         int depth) {
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
            } else if (ap && ap->type == JSON_OBJECT &&
                       !valid(ap, root, v->obj.vals[i], depth + 1)) {
                return false;
            }
        }
    }
    return true;
}

static inline json_value *parse_json(arena *a, const char *text) {
    json_value *v;
    T_OK(json_parse(a, text, strlen(text), &v));
    return v;
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

static inline const json_value *tool_params(const json_value *tools, const char *name) {
    for (size_t i = 0; i < tools->arr.n; i++) {
        const json_value *f = json_get(tools->arr.items[i], "function");
        if (!strcmp(json_get(f, "name")->str.s, name))
            return json_get(f, "parameters");
    }
    return NULL;
}

#endif
