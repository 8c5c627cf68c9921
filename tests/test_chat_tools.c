/* SPDX-License-Identifier: MIT */
/*
 * test_chat_tools: the streaming tool-call parser (chat/chat_tools.h), format by format.
 *   - realistic model outputs per format (one call, parallel calls, content before and after,
 *     no call, malformed JSON, unterminated calls, stray markup, the variants each parser also
 *     accepts), each fed whole, in every 2-piece split at every byte, in single bytes and in
 *     pseudo-random chunkings: content, calls and the outcome (return code and message) must be
 *     identical to the whole feed, and no marker of the format may ever appear in the content
 *     released so far;
 *   - the markers of every format: none is a substring of another (the scanner relies on it);
 *   - format names and chat_tool_param_is_string.
 * test_chat_tools_rt.c has detection over the shared templates and the template round trips.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "toolcall/chat_tools.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CALLS 6

typedef struct tc_call {
    const char *name;
    const char *args; /* compact JSON as json_write writes it */
} tc_call;

typedef struct tc_case {
    chat_tool_format f;
    const char *label;
    const char *text;
    int rc;              /* 0 or ERR_FORMAT */
    const char *content; /* expected content */
    int n_calls;
    tc_call calls[MAX_CALLS];
} tc_case;

/* What one way of feeding produced. */
typedef struct tc_result {
    int rc;
    char err[512];
    strbuf content;
    int n_calls;
    char *names[MAX_CALLS + 2];
    char *args[MAX_CALLS + 2];
} tc_result;

static void tc_result_free(tc_result *r) {
    strbuf_deinit(&r->content);
    for (int i = 0; i < r->n_calls && i < MAX_CALLS + 2; i++) {
        free(r->names[i]);
        free(r->args[i]);
    }
}

/* Fails when content holds a complete marker of f. */
static void tc_check_markers(chat_tool_format f, const strbuf *content, const char *label,
                             const char *how) {
    const char *const *m;
    int n = chat_tool_format_markers(f, &m);
    for (int k = 0; k < n; k++)
        T_CHECKF(!content->len || !memmem(content->data, content->len, m[k], strlen(m[k])),
                 "%s (%s): marker %s leaked into content \"%s\"", label, how, m[k], content->data);
}

/* Feeds text in the chunks given by cuts (offsets, ascending, ending at n). */
static void tc_feed(chat_tool_format f, const char *text, size_t n, const size_t *cuts, int n_cuts,
                    const char *label, const char *how, tc_result *r) {
    chat_tool_parser *p;
    T_OK(chat_tool_parser_create(f, &p));
    memset(r, 0, sizeof *r);
    strbuf_init(&r->content);
    size_t at = 0;
    for (int i = 0; i < n_cuts && !r->rc; i++) {
        r->rc = chat_tool_parser_feed(p, text + at, cuts[i] - at, &r->content);
        if (r->rc)
            snprintf(r->err, sizeof r->err, "%s", err_detail());
        at = cuts[i];
        tc_check_markers(f, &r->content, label, how);
    }
    int rc = chat_tool_parser_finish(p, &r->content);
    tc_check_markers(f, &r->content, label, how);
    if (!r->rc && rc) {
        r->rc = rc;
        snprintf(r->err, sizeof r->err, "%s", err_detail());
    } else if (r->rc) {
        /* a failure during feed is reported again by finish, with the same detail */
        T_CHECKF(rc == r->rc && !strcmp(err_detail(), r->err),
                 "%s (%s): finish returned %d \"%s\" after feed failed with %d \"%s\"", label, how,
                 rc, err_detail(), r->rc, r->err);
    }
    r->n_calls = chat_tool_parser_n_calls(p);
    for (int i = 0; i < r->n_calls && i < MAX_CALLS + 2; i++) {
        const chat_tool_call *c = chat_tool_parser_call(p, i);
        r->names[i] = strdup(c->name);
        r->args[i] = strdup(c->arguments);
        /* every call's arguments are a JSON object */
        arena *a = arena_create(0, 0);
        json_value *v;
        T_CHECKF(json_parse(a, c->arguments, strlen(c->arguments), &v) == 0 &&
                     v->type == JSON_OBJECT,
                 "%s: call %d arguments are not a JSON object: %s", label, i, c->arguments);
        arena_destroy(a);
    }
    chat_tool_parser_destroy(p);
}

static void tc_same(const tc_result *want, const tc_result *got, const char *label,
                    const char *how) {
    T_CHECKF(got->rc == want->rc, "%s (%s): rc %d, whole feed %d (%s)", label, how, got->rc,
             want->rc, got->rc ? got->err : want->err);
    T_CHECKF(!strcmp(got->err, want->err), "%s (%s): error \"%s\", whole feed \"%s\"", label, how,
             got->err, want->err);
    T_CHECKF(got->content.len == want->content.len &&
                 !memcmp(got->content.data, want->content.data, got->content.len),
             "%s (%s): content \"%s\", whole feed \"%s\"", label, how,
             got->content.len ? got->content.data : "",
             want->content.len ? want->content.data : "");
    T_CHECKF(got->n_calls == want->n_calls, "%s (%s): %d calls, whole feed %d", label, how,
             got->n_calls, want->n_calls);
    for (int i = 0; i < got->n_calls && i < MAX_CALLS + 2; i++)
        T_CHECKF(!strcmp(got->names[i], want->names[i]) && !strcmp(got->args[i], want->args[i]),
                 "%s (%s): call %d %s(%s), whole feed %s(%s)", label, how, i, got->names[i],
                 got->args[i], want->names[i], want->args[i]);
}

static uint64_t tc_rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Runs one case every way and checks it against its expectations. */
static void tc_run_case(const tc_case *c) {
    const char *text = c->text;
    size_t n = strlen(text);
    char label[160];
    snprintf(label, sizeof label, "%s/%s", chat_tool_format_name(c->f), c->label);
    tc_result whole;
    size_t cut = n;
    tc_feed(c->f, text, n, &cut, 1, label, "whole", &whole);
    /* the expectations */
    T_CHECKF(whole.rc == c->rc, "%s: rc %d (%s), expected %d", label, whole.rc, whole.err, c->rc);
    const char *wc = whole.content.len ? whole.content.data : "";
    T_CHECKF(!strcmp(wc, c->content), "%s: content \"%s\", expected \"%s\"", label, wc, c->content);
    T_CHECKF(whole.n_calls == c->n_calls, "%s: %d calls, expected %d", label, whole.n_calls,
             c->n_calls);
    for (int i = 0; i < c->n_calls; i++)
        T_CHECKF(!strcmp(whole.names[i], c->calls[i].name) &&
                     !strcmp(whole.args[i], c->calls[i].args),
                 "%s: call %d is %s(%s), expected %s(%s)", label, i, whole.names[i], whole.args[i],
                 c->calls[i].name, c->calls[i].args);
    if (c->rc)
        T_CHECKF(whole.err[0], "%s: an error without a message", label);
    /* every 2-piece split */
    for (size_t k = 1; k < n; k++) {
        size_t cuts[2] = {k, n};
        char how[48];
        snprintf(how, sizeof how, "split at %zu", k);
        tc_result r;
        tc_feed(c->f, text, n, cuts, 2, label, how, &r);
        tc_same(&whole, &r, label, how);
        tc_result_free(&r);
    }
    /* single bytes, and single UTF-8 characters */
    size_t *cuts = calloc(n + 1, sizeof *cuts);
    for (size_t k = 0; k < n; k++)
        cuts[k] = k + 1;
    tc_result r;
    tc_feed(c->f, text, n, cuts, (int)n, label, "bytes", &r);
    tc_same(&whole, &r, label, "bytes");
    tc_result_free(&r);
    int m = 0;
    for (size_t k = 1; k <= n; k++)
        if (k == n || ((unsigned char)text[k] & 0xc0) != 0x80)
            cuts[m++] = k;
    tc_feed(c->f, text, n, cuts, m, label, "characters", &r);
    tc_same(&whole, &r, label, "characters");
    tc_result_free(&r);
    /* random chunkings */
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ n;
    for (int t = 0; t < 20; t++) {
        m = 0;
        for (size_t k = 0; k < n;) {
            k += 1 + tc_rng(&seed) % 9;
            cuts[m++] = k < n ? k : n;
        }
        char how[32];
        snprintf(how, sizeof how, "random %d", t);
        tc_feed(c->f, text, n, cuts, m, label, how, &r);
        tc_same(&whole, &r, label, how);
        tc_result_free(&r);
    }
    free(cuts);
    tc_result_free(&whole);
}

#define H   CHAT_TOOL_FORMAT_HERMES
#define Q   CHAT_TOOL_FORMAT_QWEN3_XML
#define G   CHAT_TOOL_FORMAT_GLM
#define L   CHAT_TOOL_FORMAT_LLAMA3
#define M   CHAT_TOOL_FORMAT_MISTRAL
#define MA  CHAT_TOOL_FORMAT_MISTRAL_ARGS
#define D3  CHAT_TOOL_FORMAT_DEEPSEEK_V3
#define D31 CHAT_TOOL_FORMAT_DEEPSEEK_V31
#define DS  CHAT_TOOL_FORMAT_DSML
#define DS4 CHAT_TOOL_FORMAT_DSML_V4
#define EF  ERR_FORMAT

#define WEATHER                                                                                    \
    { "get_weather", "{\"city\":\"Paris\",\"unit\":\"celsius\"}" }
#define WEATHER_JSON                                                                               \
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}"
#define TIME                                                                                       \
    { "get_time", "{\"tz\":\"Europe/Paris\"}" }
#define TIME_JSON "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}"

static const tc_case tc_hermes_cases[] = {
    {H, "single", "<tool_call>\n" WEATHER_JSON "\n</tool_call>", 0, "", 1, {WEATHER}},
    {H,
     "content_before",
     "Let me check the weather for you.\n\n<tool_call>\n" WEATHER_JSON "\n</tool_call>",
     0,
     "Let me check the weather for you.\n\n",
     1,
     {WEATHER}},
    {H,
     "parallel",
     "<tool_call>\n" WEATHER_JSON "\n</tool_call>\n<tool_call>\n" TIME_JSON "\n</tool_call>",
     0,
     "\n",
     2,
     {WEATHER, TIME}},
    {H,
     "content_after",
     "<tool_call>" WEATHER_JSON "</tool_call>\nI asked for the weather.",
     0,
     "\nI asked for the weather.",
     1,
     {WEATHER}},
    {H,
     "no_call",
     "The answer is 42; in HTML write <b>bold</b>, and a < b <tool or <tool_cal.",
     0,
     "The answer is 42; in HTML write <b>bold</b>, and a < b <tool or <tool_cal.",
     0,
     {{0, 0}}},
    {H, "partial_marker_at_end", "Fine <tool_ca", 0, "Fine <tool_ca", 0, {{0, 0}}},
    {H,
     "malformed_json",
     "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>",
     EF,
     "Sure.",
     0,
     {{0, 0}}},
    {H, "unterminated", "Sure.<tool_call>\n" WEATHER_JSON "\n", EF, "Sure.", 0, {{0, 0}}},
    {H, "no_name", "<tool_call>{\"arguments\": {}}</tool_call>", EF, "", 0, {{0, 0}}},
    {H, "stray_close", "done </tool_call> here", EF, "done ", 0, {{0, 0}}},
    {H,
     "string_arguments",
     "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
     0,
     "",
     1,
     {{"f", "{\"a\":1}"}}},
    {H,
     "parameters_key",
     "<tool_call>{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}</tool_call>",
     0,
     "",
     1,
     {{"f", "{\"a\":[1,2]}"}}},
    {H, "no_arguments", "<tool_call>{\"name\": \"now\"}</tool_call>", 0, "", 1, {{"now", "{}"}}},
    {H,
     "unicode",
     "東京の天気は？<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"東京 天気 ☀\"}}"
     "</tool_call>",
     0,
     "東京の天気は？",
     1,
     {{"search", "{\"q\":\"東京 天気 ☀\"}"}}},
    {H,
     "second_call_broken",
     "<tool_call>" WEATHER_JSON "</tool_call><tool_call>{\"name\": \"x\", \"arguments\": [1]}"
     "</tool_call>after",
     EF,
     "",
     1,
     {WEATHER}},
    {H,
     "marker_split_around_call",
     "<too<tool_call>{\"name\": \"f\"}</tool_call>l_call>",
     EF,
     "<too",
     1,
     {{"f", "{}"}}},
    {H,
     "partial_marker_around_call",
     "<too<tool_call>{\"name\": \"f\"}</tool_call>ls",
     0,
     "<tools",
     1,
     {{"f", "{}"}}},
    {H,
     "xml_body_accepted",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
     0,
     "",
     1,
     {WEATHER}},
};

static const tc_case tc_qwen3_cases[] = {
    {Q,
     "single",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     0,
     "",
     1,
     {{"get_weather", "{\"city\":\"Paris\",\"days\":3}"}}},
    {Q,
     "content_before_parallel",
     "I'll check both.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
     "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
     "<parameter=tz>\nEurope/Paris\n</parameter>\n</function>\n</tool_call>",
     0,
     "I'll check both.\n\n\n",
     2,
     {{"get_weather", "{\"city\":\"Paris\"}"}, TIME}},
    {Q,
     "multiline_and_json_values",
     "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
     "<parameter=content>\ndef f():\n    return 1\n\n</parameter>\n<parameter=opts>\n"
     "{\"mode\": \"w\", \"flags\": [1, 2]}\n</parameter>\n<parameter=force>\ntrue\n</parameter>\n"
     "<parameter=note>\nnull-ish text\n</parameter>\n</function>\n</tool_call>",
     0,
     "",
     1,
     {{"write_file", "{\"path\":\"/tmp/a.py\",\"content\":\"def f():\\n    return 1\\n\","
                     "\"opts\":{\"mode\":\"w\",\"flags\":[1,2]},\"force\":true,"
                     "\"note\":\"null-ish text\"}"}}},
    {Q,
     "bare_function",
     "Calling now.\n<function=get_time>\n<parameter=tz>\nEurope/Paris\n</parameter>\n</function>",
     0,
     "Calling now.\n",
     1,
     {TIME}},
    {Q,
     "no_parameters",
     "<tool_call>\n<function=now>\n</function>\n</tool_call>",
     0,
     "",
     1,
     {{"now", "{}"}}},
    {Q, "json_body_accepted", "<tool_call>\n" WEATHER_JSON "\n</tool_call>", 0, "", 1, {WEATHER}},
    {Q,
     "unterminated_parameter",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
     EF,
     "",
     0,
     {{0, 0}}},
    {Q,
     "unterminated_call",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
     EF,
     "",
     0,
     {{0, 0}}},
    {Q,
     "no_call",
     "Use a <function> keyword, or <tool> tags.",
     0,
     "Use a <function> keyword, or <tool> tags.",
     0,
     {{0, 0}}},
};

static const tc_case tc_glm_cases[] = {
    {G,
     "single",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days"
     "</arg_key><arg_value>3</arg_value></tool_call>",
     0,
     "",
     1,
     {{"get_weather", "{\"city\":\"Paris\",\"days\":3}"}}},
    {G,
     "newlines_parallel",
     "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "</tool_call>\n<tool_call>get_time\n<arg_key>tz</arg_key>\n<arg_value>Europe/Paris"
     "</arg_value>\n</tool_call>",
     0,
     "Checking.\n\n",
     2,
     {{"get_weather", "{\"city\":\"Paris\"}"}, TIME}},
    {G, "no_arguments", "<tool_call>now</tool_call>", 0, "", 1, {{"now", "{}"}}},
    {G,
     "json_value",
     "<tool_call>f<arg_key>xs</arg_key><arg_value>[1, 2, 3]</arg_value></tool_call>",
     0,
     "",
     1,
     {{"f", "{\"xs\":[1,2,3]}"}}},
    {G,
     "bad_name",
     "<tool_call>get weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
     "</tool_call>",
     EF,
     "",
     0,
     {{0, 0}}},
    {G, "missing_value", "<tool_call>f<arg_key>city</arg_key></tool_call>", EF, "", 0, {{0, 0}}},
};

static const tc_case tc_llama3_cases[] = {
    {L,
     "single",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
     "\"celsius\"}}",
     0,
     "",
     1,
     {WEATHER}},
    {L,
     "python_tag",
     "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": "
     "\"Paris\", \"unit\": \"celsius\"}}",
     0,
     "",
     1,
     {WEATHER}},
    {L,
     "leading_whitespace",
     "\n\n {\"name\": \"get_time\", \"parameters\": {\"tz\": "
     "\"Europe/Paris\"}}",
     0,
     "\n\n ",
     1,
     {TIME}},
    {L,
     "parallel_semicolon",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}; "
     "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}",
     0,
     "",
     2,
     {WEATHER, TIME}},
    {L,
     "parallel_newline",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
     "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}",
     0,
     "\n",
     2,
     {WEATHER, TIME}},
    {L,
     "type_first",
     "{\"type\": \"function\", \"name\": \"now\", \"parameters\": {}}",
     0,
     "",
     1,
     {{"now", "{}"}}},
    {L,
     "content_with_braces",
     "Use {\"name\": \"x\"} as the body; {\"name\": 1}.",
     0,
     "Use {\"name\": \"x\"} as the body; {\"name\": 1}.",
     0,
     {{0, 0}}},
    {L,
     "json_content",
     "{\"answer\": 42, \"name\": \"x\"}",
     0,
     "{\"answer\": 42, \"name\": \"x\"}",
     0,
     {{0, 0}}},
    {L,
     "object_not_a_call",
     "{\"name\": \"Bob\", \"age\": 3} is a person.",
     0,
     "{\"name\": \"Bob\", \"age\": 3} is a person.",
     0,
     {{0, 0}}},
    {L,
     "content_after",
     "{\"name\": \"now\", \"parameters\": {}}\nDone.",
     0,
     "\nDone.",
     1,
     {{"now", "{}"}}},
    {L,
     "content_then_tag",
     "Checking.<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}",
     0,
     "Checking.",
     1,
     {TIME}},
    {L,
     "braces_in_strings",
     "{\"name\": \"run\", \"parameters\": {\"code\": \"if (a) { b(\\\"}\\\"); }\"}}",
     0,
     "",
     1,
     {{"run", "{\"code\":\"if (a) { b(\\\"}\\\"); }\"}"}}},
    {L,
     "separator_then_object",
     "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"Bob\"}",
     0,
     "; {\"name\": \"Bob\"}",
     1,
     {{"a", "{}"}}},
    {L, "marker_in_object", "{\"name\": \"x<|python_tag|>y\"}", EF, "{\"name\": \"x", 0, {{0, 0}}},
    {L, "lone_brace", "{", 0, "{", 0, {{0, 0}}},
    {L, "partial_key", "  {\"nam", 0, "  {\"nam", 0, {{0, 0}}},
    {L,
     "malformed",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": }}",
     EF,
     "",
     0,
     {{0, 0}}},
    {L,
     "unterminated",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}",
     EF,
     "",
     0,
     {{0, 0}}},
    {L, "builtin_tool", "<|python_tag|>brave_search.call(query=\"weather\")", EF, "", 0, {{0, 0}}},
    {L, "tag_not_a_call", "<|python_tag|>{\"query\": \"x\"}", EF, "", 0, {{0, 0}}},
};

static const tc_case tc_mistral_cases[] = {
    {M, "single", "[TOOL_CALLS][" WEATHER_JSON "]", 0, "", 1, {WEATHER}},
    {M,
     "parallel_with_ids",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
     "\"celsius\"}, \"id\": \"a1b2c3d4e\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": "
     "\"Europe/Paris\"}, \"id\": \"f5g6h7i8j\"}]",
     0,
     "",
     2,
     {WEATHER, TIME}},
    {M,
     "content_before",
     "Sure, checking.[TOOL_CALLS] [" TIME_JSON "]",
     0,
     "Sure, checking.",
     1,
     {TIME}},
    {M,
     "string_arguments",
     "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1]}\", \"id\": \"abcdefghi\"}]",
     0,
     "",
     1,
     {{"f", "{\"a\":[1]}"}}},
    {M, "single_object", "[TOOL_CALLS]" TIME_JSON, 0, "", 1, {TIME}},
    {M,
     "args_form_accepted",
     "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"Europe/Paris\"}",
     0,
     "",
     1,
     {TIME}},
    {M,
     "no_call",
     "Arrays like [1, 2] and [TOOL] tags are content.",
     0,
     "Arrays like [1, 2] and [TOOL] tags are content.",
     0,
     {{0, 0}}},
    {M,
     "malformed",
     "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}]",
     EF,
     "",
     0,
     {{0, 0}}},
    {M, "unterminated", "[TOOL_CALLS][" WEATHER_JSON, EF, "", 0, {{0, 0}}},
    {M, "empty_array", "[TOOL_CALLS][]", EF, "", 0, {{0, 0}}},
    {M, "stray_args", "text [ARGS] more", EF, "text ", 0, {{0, 0}}},
};

static const tc_case tc_mistral_args_cases[] = {
    {MA,
     "single",
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}",
     0,
     "",
     1,
     {WEATHER}},
    {MA,
     "parallel",
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}[TOOL_CALLS]"
     "get_time[ARGS]{\"tz\": \"Europe/Paris\"}",
     0,
     "",
     2,
     {WEATHER, TIME}},
    {MA,
     "call_id",
     "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{\"tz\": \"Europe/Paris\"}",
     0,
     "",
     1,
     {TIME}},
    {MA,
     "content_around",
     "One moment.[TOOL_CALLS]get_time[ARGS] {\"tz\": \"Europe/Paris\"}\nAnything else?",
     0,
     "One moment.\nAnything else?",
     1,
     {TIME}},
    {MA,
     "string_arguments",
     "[TOOL_CALLS]f[ARGS]\"{\\\"a\\\": 1}\"",
     0,
     "",
     1,
     {{"f", "{\"a\":1}"}}},
    {MA, "array_form_accepted", "[TOOL_CALLS][" TIME_JSON "]", 0, "", 1, {TIME}},
    {MA, "bad_name", "[TOOL_CALLS]get weather[ARGS]{}", EF, "", 0, {{0, 0}}},
    {MA, "args_not_json", "[TOOL_CALLS]f[ARGS]city=Paris", EF, "", 0, {{0, 0}}},
    {MA, "unterminated", "[TOOL_CALLS]f[ARGS]{\"a\": {\"b\": 1}", EF, "", 0, {{0, 0}}},
    {MA, "name_only", "[TOOL_CALLS]get_time", EF, "", 0, {{0, 0}}},
    {MA, "args_array", "[TOOL_CALLS]f[ARGS][1, 2]", EF, "", 0, {{0, 0}}},
};

#define DS_CALLS     "<｜tool▁calls▁begin｜>"
#define DS_CALL      "<｜tool▁call▁begin｜>"
#define DS_SEP       "<｜tool▁sep｜>"
#define DS_CALL_END  "<｜tool▁call▁end｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define V3_WEATHER                                                                                 \
    DS_CALL "function" DS_SEP "get_weather\n```json\n{\"city\": \"Paris\", \"unit\": "             \
            "\"celsius\"}\n```" DS_CALL_END
#define V3_TIME                                                                                    \
    DS_CALL "function" DS_SEP "get_time\n```json\n{\"tz\": \"Europe/Paris\"}\n```" DS_CALL_END
#define V31_WEATHER                                                                                \
    DS_CALL "get_weather" DS_SEP "{\"city\": \"Paris\", \"unit\": \"celsius\"}" DS_CALL_END
#define V31_TIME DS_CALL "get_time" DS_SEP "{\"tz\": \"Europe/Paris\"}" DS_CALL_END

static const tc_case tc_deepseek_cases[] = {
    {D3, "single", DS_CALLS V3_WEATHER DS_CALLS_END, 0, "", 1, {WEATHER}},
    {D3, "parallel", DS_CALLS V3_WEATHER "\n" V3_TIME DS_CALLS_END, 0, "", 2, {WEATHER, TIME}},
    {D3,
     "content_around",
     "Let me look.\n\n" DS_CALLS V3_TIME DS_CALLS_END "\n",
     0,
     "Let me look.\n\n\n",
     1,
     {TIME}},
    {D3,
     "pretty_json",
     DS_CALLS DS_CALL
     "function" DS_SEP
     "get_time\n```json\n{\n  \"tz\": \"Europe/Paris\"\n}\n```" DS_CALL_END DS_CALLS_END,
     0,
     "",
     1,
     {TIME}},
    {D3, "no_section_end", DS_CALLS V3_WEATHER, 0, "", 1, {WEATHER}},
    {D3, "no_section_begin", V3_TIME DS_CALLS_END, 0, "", 1, {TIME}},
    {D3, "v31_body_accepted", DS_CALLS V31_TIME DS_CALLS_END, 0, "", 1, {TIME}},
    {D3,
     "malformed",
     DS_CALLS DS_CALL "function" DS_SEP "f\n```json\n{\"a\": tru}\n```" DS_CALL_END DS_CALLS_END,
     EF,
     "",
     0,
     {{0, 0}}},
    {D3,
     "unterminated",
     DS_CALLS DS_CALL "function" DS_SEP "get_time\n```json\n{\"tz\":",
     EF,
     "",
     0,
     {{0, 0}}},
    {D3, "empty_section", "Hmm " DS_CALLS, EF, "Hmm ", 0, {{0, 0}}},
    {D3, "text_in_section", DS_CALLS V3_TIME "and then" DS_CALLS_END, EF, "", 1, {TIME}},
    {D31, "single", DS_CALLS V31_WEATHER DS_CALLS_END, 0, "", 1, {WEATHER}},
    {D31, "parallel", DS_CALLS V31_WEATHER V31_TIME DS_CALLS_END, 0, "", 2, {WEATHER, TIME}},
    {D31, "content_before", "Sure." DS_CALLS V31_TIME DS_CALLS_END, 0, "Sure.", 1, {TIME}},
    {D31,
     "string_arguments",
     DS_CALLS DS_CALL "f" DS_SEP "\"{\\\"a\\\": 1}\"" DS_CALL_END DS_CALLS_END,
     0,
     "",
     1,
     {{"f", "{\"a\":1}"}}},
    {D31, "v3_body_accepted", DS_CALLS V3_TIME DS_CALLS_END, 0, "", 1, {TIME}},
    {D31, "stray_sep", "a " DS_SEP " b", EF, "a ", 0, {{0, 0}}},
    {D31, "no_sep", DS_CALLS DS_CALL "get_time{}" DS_CALL_END DS_CALLS_END, EF, "", 0, {{0, 0}}},
    {D31,
     "no_call",
     "Plain text with ｜ bars ▁ and <｜tool ideas.",
     0,
     "Plain text with ｜ bars ▁ and <｜tool ideas.",
     0,
     {{0, 0}}},
};

#define DSML_T     "｜DSML｜"
#define FC_OPEN    "<" DSML_T "function_calls>"
#define FC_CLOSE   "</" DSML_T "function_calls>"
#define TC_OPEN    "<" DSML_T "tool_calls>"
#define TC_CLOSE   "</" DSML_T "tool_calls>"
#define INVOKE(n)  "<" DSML_T "invoke name=\"" n "\">\n"
#define INVOKE_END "</" DSML_T "invoke>\n"
#define PARAM(k, s, v)                                                                             \
    "<" DSML_T "parameter name=\"" k "\" string=\"" s "\">" v "</" DSML_T "parameter>\n"

static const tc_case tc_dsml_cases[] = {
    {DS,
     "single",
     "\n\n" FC_OPEN "\n" INVOKE("get_weather") PARAM("city", "true", "Paris")
         PARAM("days", "false", "3") INVOKE_END FC_CLOSE,
     0,
     "\n\n",
     1,
     {{"get_weather", "{\"city\":\"Paris\",\"days\":3}"}}},
    {DS,
     "parallel_content",
     "Checking both.\n\n" FC_OPEN "\n" INVOKE("get_weather") PARAM("city", "true", "Paris")
         PARAM("unit", "true", "celsius") INVOKE_END INVOKE("get_time")
             PARAM("tz", "true", "Europe/Paris") INVOKE_END FC_CLOSE,
     0,
     "Checking both.\n\n",
     2,
     {WEATHER, TIME}},
    {DS,
     "typed_values",
     FC_OPEN "\n" INVOKE("f") PARAM("s", "true", "123") PARAM("n", "false", "1.5")
         PARAM("o", "false", "{\"k\": [true, null]}") PARAM("t", "true", "line1\nline2 <b>")
             INVOKE_END FC_CLOSE,
     0,
     "",
     1,
     {{"f", "{\"s\":\"123\",\"n\":1.5,\"o\":{\"k\":[true,null]},\"t\":\"line1\\nline2 <b>\"}"}}},
    {DS,
     "no_parameters",
     FC_OPEN "\n" INVOKE("now") INVOKE_END FC_CLOSE,
     0,
     "",
     1,
     {{"now", "{}"}}},
    {DS,
     "v4_wrapper_accepted",
     TC_OPEN "\n" INVOKE("get_time") PARAM("tz", "true", "Europe/Paris") INVOKE_END TC_CLOSE,
     0,
     "",
     1,
     {TIME}},
    {DS,
     "no_block_end",
     FC_OPEN "\n" INVOKE("get_time") PARAM("tz", "true", "Europe/Paris") INVOKE_END,
     0,
     "",
     1,
     {TIME}},
    {DS,
     "bad_json_value",
     FC_OPEN "\n" INVOKE("f") PARAM("n", "false", "three") INVOKE_END FC_CLOSE,
     EF,
     "",
     0,
     {{0, 0}}},
    {DS, "unterminated", FC_OPEN "\n" INVOKE("f") PARAM("n", "false", "3"), EF, "", 0, {{0, 0}}},
    {DS, "no_name", FC_OPEN "\n<" DSML_T "invoke>\n" INVOKE_END FC_CLOSE, EF, "", 0, {{0, 0}}},
    {DS, "stray_invoke", "x " INVOKE("f") INVOKE_END, EF, "x ", 0, {{0, 0}}},
    {DS4,
     "single",
     "\n\n" TC_OPEN "\n" INVOKE("get_time") PARAM("tz", "true", "Europe/Paris") INVOKE_END TC_CLOSE,
     0,
     "\n\n",
     1,
     {TIME}},
    {DS4, "text_in_block", TC_OPEN "\nhello" INVOKE_END TC_CLOSE, EF, "", 0, {{0, 0}}},
};

#define K           CHAT_TOOL_FORMAT_KIMI_K2
#define K_CALLS     "<|tool_calls_section_begin|>"
#define K_CALL      "<|tool_call_begin|>"
#define K_ARGS      "<|tool_call_argument_begin|>"
#define K_END       "<|tool_call_end|>"
#define K_CALLS_END "<|tool_calls_section_end|>"

static const tc_case tc_kimi_cases[] = {
    {K,
     "single",
     K_CALLS K_CALL "functions.get_weather:0" K_ARGS
                    "{\"city\": \"Paris\", \"unit\": \"celsius\"}" K_END K_CALLS_END,
     0,
     "",
     1,
     {WEATHER}},
    {K,
     "parallel_content",
     "Checking." K_CALLS K_CALL "functions.get_weather:0" K_ARGS
     "{\"city\": \"Paris\", \"unit\": \"celsius\"}" K_END K_CALL "functions.get_time:1" K_ARGS
     "{\"tz\": \"Europe/Paris\"}" K_END K_CALLS_END,
     0,
     "Checking.",
     2,
     {WEATHER, TIME}},
    {K,
     "bare_id",
     K_CALLS K_CALL "get_time" K_ARGS "{\"tz\": \"Europe/Paris\"}" K_END K_CALLS_END,
     0,
     "",
     1,
     {TIME}},
    {K,
     "no_section_end",
     K_CALLS K_CALL "functions.now:0" K_ARGS "{}" K_END,
     0,
     "",
     1,
     {{"now", "{}"}}},
    {K,
     "malformed",
     K_CALLS K_CALL "functions.f:0" K_ARGS "{\"a\": }" K_END K_CALLS_END,
     EF,
     "",
     0,
     {{0, 0}}},
    {K, "no_args_marker", K_CALLS K_CALL "functions.f:0{}" K_END K_CALLS_END, EF, "", 0, {{0, 0}}},
    {K,
     "unterminated",
     "x" K_CALLS K_CALL "functions.f:0" K_ARGS "{\"a\": 1}",
     EF,
     "x",
     0,
     {{0, 0}}},
    {K, "stray_end", "a " K_END, EF, "a ", 0, {{0, 0}}},
};

static const tc_case tc_none_cases[] = {
    {CHAT_TOOL_FORMAT_NONE,
     "everything_is_content",
     "<tool_call>{\"name\": 1}</tool_call>",
     0,
     "<tool_call>{\"name\": 1}</tool_call>",
     0,
     {{0, 0}}},
};

static void tc_run_all(const tc_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++)
        tc_run_case(&cases[i]);
}

#define RUN_CASES(arr) tc_run_all(arr, sizeof arr / sizeof *arr)

static void t_hermes(void) {
    RUN_CASES(tc_hermes_cases);
}
static void t_qwen3_xml(void) {
    RUN_CASES(tc_qwen3_cases);
}
static void t_glm(void) {
    RUN_CASES(tc_glm_cases);
}
static void t_llama3(void) {
    RUN_CASES(tc_llama3_cases);
}
static void t_mistral(void) {
    RUN_CASES(tc_mistral_cases);
}
static void t_mistral_args(void) {
    RUN_CASES(tc_mistral_args_cases);
}
static void t_deepseek(void) {
    RUN_CASES(tc_deepseek_cases);
}
static void t_dsml(void) {
    RUN_CASES(tc_dsml_cases);
}
static void t_kimi_k2(void) {
    RUN_CASES(tc_kimi_cases);
}
static void t_none(void) {
    RUN_CASES(tc_none_cases);
}

/* No marker is a substring of another; the openers come first; names round-trip. */
static void t_markers(void) {
    for (int f = 0; f < CHAT_TOOL_FORMAT_COUNT; f++) {
        const char *const *m;
        int n = chat_tool_format_markers((chat_tool_format)f, &m);
        T_CHECKF((n == 0) == (f == CHAT_TOOL_FORMAT_NONE), "%s: %d markers",
                 chat_tool_format_name((chat_tool_format)f), n);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                T_CHECKF(i == j || !strstr(m[i], m[j]), "%s: marker %s contains %s",
                         chat_tool_format_name((chat_tool_format)f), m[i], m[j]);
        for (int g = 0; g < f; g++)
            T_CHECK(strcmp(chat_tool_format_name((chat_tool_format)f),
                           chat_tool_format_name((chat_tool_format)g)));
    }
    T_CHECK(!strcmp(chat_tool_format_name(CHAT_TOOL_FORMAT_COUNT), "none"));
    chat_tool_parser *p;
    T_EQ_INT(chat_tool_parser_create(CHAT_TOOL_FORMAT_COUNT, &p), ERR_INVAL);
    T_CHECK(p == NULL);
}

static void t_param_is_string(void) {
    struct {
        const char *schema;
        bool want;
    } cases[] = {
        {"{\"type\": \"string\"}", true},
        {"{\"type\": \"string\", \"enum\": [\"a\", \"b\"]}", true},
        {"{\"type\": [\"string\", \"null\"]}", true},
        {"{\"type\": [\"string\", \"integer\"]}", false},
        {"{\"type\": \"integer\"}", false},
        {"{\"enum\": [\"a\", \"b\"]}", true},
        {"{\"enum\": [\"a\", 1]}", false},
        {"{\"const\": \"x\"}", true},
        {"{\"anyOf\": [{\"type\": \"string\"}]}", false},
        {"{}", false},
        {"\"string\"", false},
    };
    arena *a = arena_create(0, 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_value *v;
        T_OK(json_parse(a, cases[i].schema, strlen(cases[i].schema), &v));
        T_CHECKF(chat_tool_param_is_string(v) == cases[i].want, "%s", cases[i].schema);
    }
    T_CHECK(!chat_tool_param_is_string(NULL));
    arena_destroy(a);
}

/* Raw values typed by the tools' schemas once set_tools has them. */
static void t_set_tools(void) {
    const char *tools =
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"s\": {\"type\": \"string\"}, \"n\": {\"type\": "
        "\"integer\"}, \"e\": {\"enum\": [\"1\", \"2\"]}, \"b\": {\"type\": \"boolean\"}, \"x\": "
        "{\"type\": \"number\"}}}}}, {\"bogus\": 1}]";
    const char *text = "<tool_call>\n<function=f>\n<parameter=s>\n123\n</parameter>\n"
                       "<parameter=n>\n7\n</parameter>\n<parameter=e>\n2\n</parameter>\n"
                       "<parameter=b>\nfalse\n</parameter>\n<parameter=x>\nabc\n</parameter>\n"
                       "<parameter=u>\n4\n</parameter>\n</function>\n</tool_call>";
    arena *a = arena_create(0, 0);
    json_value *tv;
    T_OK(json_parse(a, tools, strlen(tools), &tv));
    for (int with = 0; with < 2; with++) {
        chat_tool_parser *p;
        strbuf content;
        strbuf_init(&content);
        T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_QWEN3_XML, &p));
        if (with)
            T_OK(chat_tool_parser_set_tools(p, tv));
        T_OK(chat_tool_parser_feed(p, text, strlen(text), &content));
        T_OK(chat_tool_parser_finish(p, &content));
        T_EQ_INT(chat_tool_parser_n_calls(p), 1);
        const char *want = with ? "{\"s\":\"123\",\"n\":7,\"e\":\"2\",\"b\":false,\"x\":\"abc\","
                                  "\"u\":4}"
                                : "{\"s\":123,\"n\":7,\"e\":2,\"b\":false,\"x\":\"abc\",\"u\":4}";
        T_CHECKF(!strcmp(chat_tool_parser_call(p, 0)->arguments, want), "%s tools: %s",
                 with ? "with" : "without", chat_tool_parser_call(p, 0)->arguments);
        T_OK(chat_tool_parser_set_tools(p, NULL));
        chat_tool_parser_destroy(p);
        strbuf_deinit(&content);
    }
    arena_destroy(a);
}

/* A failed call stops the parser: later text is neither parsed nor released. */
static void t_after_failure(void) {
    chat_tool_parser *p;
    strbuf content;
    strbuf_init(&content);
    T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_HERMES, &p));
    const char *t1 = "ok <tool_call>{bad}</tool_call>";
    T_EQ_INT(chat_tool_parser_feed(p, t1, strlen(t1), &content), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "not valid JSON"));
    const char *t2 = " more <tool_call>{\"name\": \"f\"}</tool_call>";
    T_OK(chat_tool_parser_feed(p, t2, strlen(t2), &content));
    T_EQ_INT(chat_tool_parser_finish(p, &content), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "not valid JSON"));
    T_EQ_INT(chat_tool_parser_n_calls(p), 0);
    T_CHECK(content.len == 3 && !memcmp(content.data, "ok ", 3));
    chat_tool_parser_destroy(p);
    strbuf_deinit(&content);
}

int main(void) {
    test_run("chat_tools.hermes", t_hermes);
    test_run("chat_tools.qwen3_xml", t_qwen3_xml);
    test_run("chat_tools.glm", t_glm);
    test_run("chat_tools.llama3", t_llama3);
    test_run("chat_tools.mistral", t_mistral);
    test_run("chat_tools.mistral_args", t_mistral_args);
    test_run("chat_tools.deepseek", t_deepseek);
    test_run("chat_tools.dsml", t_dsml);
    test_run("chat_tools.kimi_k2", t_kimi_k2);
    test_run("chat_tools.none", t_none);
    test_run("chat_tools.markers", t_markers);
    test_run("chat_tools.param_is_string", t_param_is_string);
    test_run("chat_tools.set_tools", t_set_tools);
    test_run("chat_tools.after_failure", t_after_failure);
    return test_summary();
}
