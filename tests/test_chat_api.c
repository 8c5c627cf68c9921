/* SPDX-License-Identifier: MIT */
/*
 * API, error and robustness tests for the chat-template engine: error codes and messages that
 * name the construct and line, raise_exception, the render variables, tool-call argument
 * normalisation, hostile templates (deep nesting, runaway loops, output and memory bombs, endless
 * recursion, unterminated tags) failing cleanly, and concurrent renders of one template.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Creates and renders src with no messages; returns the render (or create) code, output in sb. */
static int render_src(const char *src, const chat_render_opts *opts, strbuf *sb) {
    chat_template *t = NULL;
    int rc = chat_template_create(src, strlen(src), &t);
    if (rc)
        return rc;
    chat_render_opts o = {0};
    if (opts)
        o = *opts;
    rc = chat_template_render(t, &o, sb);
    chat_template_destroy(t);
    return rc;
}

static int render_code(const char *src) {
    strbuf sb;
    strbuf_init(&sb);
    int rc = render_src(src, NULL, &sb);
    strbuf_deinit(&sb);
    return rc;
}

static void expect_output(const char *src, const chat_render_opts *o, const char *want) {
    strbuf sb;
    strbuf_init(&sb);
    int rc = render_src(src, o, &sb);
    T_CHECKF(rc == 0, "%s: %s", src, err_detail());
    T_CHECKF(strcmp(sb.data, want) == 0, "%s: got '%s', want '%s'", src, sb.data, want);
    strbuf_deinit(&sb);
}

static void expect_error(const char *src, int code, const char *fragment) {
    int rc = render_code(src);
    T_CHECKF(rc == code, "%s: got %s (%s), want %s", src, err_name(rc), err_detail(),
             err_name(code));
    T_CHECKF(!fragment || strstr(err_detail(), fragment), "%s: detail '%s' lacks '%s'", src,
             err_detail(), fragment);
}

static void t_create_errors(void) {
    chat_template *t = NULL;
    T_EQ_INT(chat_template_create(NULL, 0, &t), ERR_INVAL);
    T_EQ_INT(chat_template_create("x", 1, NULL), ERR_INVAL);
    T_EQ_INT(chat_template_create("ab\xff", 3, &t), ERR_FORMAT);
    T_CHECK(strstr(err_detail(), "invalid UTF-8 at byte 2"));
    chat_template_destroy(NULL);
    expect_error("line1\n{% if x %}\n{{ 1 + }}", ERR_FORMAT, "template line 3:");
    expect_error("{% if x %}never closed", ERR_FORMAT, "unexpected end of template");
    expect_error("a\n\n{% include 'x' %}", ERR_UNSUPPORTED,
                 "template line 3: unsupported tag "
                 "'include'");
    expect_error("{% extends 'base' %}", ERR_UNSUPPORTED, "unsupported tag 'extends'");
    expect_error("{% call m() %}x{% endcall %}", ERR_UNSUPPORTED, "unsupported tag 'call'");
    expect_error("{% for x in y recursive %}{% endfor %}", ERR_UNSUPPORTED, "recursive");
    expect_error("{% do x %}", ERR_FORMAT, "unknown tag 'do'");
    expect_error("\n{{ x | nosuchfilter }}", ERR_FORMAT,
                 "template line 2: No filter named "
                 "'nosuchfilter'");
    expect_error("{{ 'a' }}\n{{ 'x' | wordwrap(3) }}", ERR_UNSUPPORTED,
                 "template line 2: unsupported filter 'wordwrap'");
    expect_error("{{ x is nosuchtest }}", ERR_FORMAT, "No test named 'nosuchtest'");
    /* inside an if, jinja2 defers unknown filters to run time */
    expect_output("{% if false %}{{ x | from_json }}{% endif %}ok", NULL, "ok");
    expect_error("{% if true %}{{ '{}' | from_json }}{% endif %}", ERR_INVAL,
                 "No filter named 'from_json' found.");
}

static void t_runtime_errors(void) {
    expect_error("a\nb\n{{ 'a' + 1 }}", ERR_INVAL,
                 "template line 3: can only concatenate str "
                 "(not \"int\") to str");
    expect_error("{{ x.y.z }}", ERR_INVAL, "'x' is undefined");
    expect_error("{{ [1,2].append(3) }}", ERR_INVAL,
                 "access to attribute 'append' of 'list' object is unsafe.");
    expect_error("{{ 1 / 0 }}", ERR_INVAL, "division by zero");
    expect_error("{{ range(100001) | length }}", ERR_INVAL, "Range too big");
    expect_error("{{ 9223372036854775807 + 1 }}", ERR_RANGE, "64 bits");
    expect_error("{{ strftime_now('%Q') }}", ERR_UNSUPPORTED, "strftime directive '%Q'");
    /* raise_exception: the detail is exactly the message */
    int rc = render_code("{% if true %}{{ raise_exception('Only user and assistant roles!') }}"
                         "{% endif %}");
    T_EQ_INT(rc, ERR_INVAL);
    T_CHECKF(strcmp(err_detail(), "Only user and assistant roles!") == 0, "detail '%s'",
             err_detail());
    /* nothing is appended on error */
    strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "keep");
    T_CHECK(render_src("partial {{ 1 / 0 }}", NULL, &sb) == ERR_INVAL);
    T_CHECK(strcmp(sb.data, "keep") == 0);
    strbuf_deinit(&sb);
}

static void t_variables(void) {
    arena *a = arena_create(0, 0);
    json_value *msgs = NULL, *extra = NULL, *tools = NULL;
    const char *mj = "[{\"role\":\"user\",\"content\":\"hi \\u00e9\"}]";
    const char *ej = "{\"enable_thinking\":false,\"n\":3,\"add_generation_prompt\":\"over\"}";
    const char *tj = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    T_OK(json_parse(a, mj, strlen(mj), &msgs));
    T_OK(json_parse(a, ej, strlen(ej), &extra));
    T_OK(json_parse(a, tj, strlen(tj), &tools));
    chat_render_opts o = {.messages = msgs, .bos_token = "<s>", .now_unix = 1741356309};
    expect_output("{{ bos_token }}|{{ eos_token is defined }}|{{ tools is none }}|"
                  "{{ documents is none }}|{{ messages[0].content }}|{{ add_generation_prompt }}",
                  &o, "<s>|False|True|True|hi \xc3\xa9|False");
    o.tools = tools;
    o.add_generation_prompt = true;
    o.extra = extra;
    expect_output("{{ tools[0].function.name }}|{{ enable_thinking }}|{{ n * 2 }}|"
                  "{{ add_generation_prompt }}|{{ strftime_now('%d %b %Y %H:%M') }}",
                  &o, "f|False|6|over|07 Mar 2025 14:05");
    chat_render_opts empty = {0};
    expect_output("{{ messages | length }}", &empty, "0");
    json_value *bad = NULL;
    T_OK(json_parse(a, "{}", 2, &bad));
    chat_render_opts ob = {.messages = bad};
    strbuf sb;
    strbuf_init(&sb);
    T_EQ_INT(render_src("x", &ob, &sb), ERR_INVAL);
    strbuf_deinit(&sb);
    arena_destroy(a);
}

static void t_tool_args(void) {
    arena *a = arena_create(0, 0);
    const char *mj =
        "[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"tool_calls\":["
        "{\"id\":\"1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": [1, 2]}\"}},"
        "{\"id\":\"2\",\"function\":{\"name\":\"g\",\"arguments\":{\"b\":true}}},"
        "{\"id\":\"3\",\"function\":{\"name\":\"h\",\"arguments\":\"not json\"}}]}]";
    json_value *msgs = NULL;
    T_OK(json_parse(a, mj, strlen(mj), &msgs));
    const json_value *objs = NULL, *strs = NULL;
    T_OK(chat_messages_normalize_tool_args(a, msgs, true, &objs));
    T_OK(chat_messages_normalize_tool_args(a, msgs, false, &strs));
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, objs);
    T_CHECKF(strstr(sb.data, "\"arguments\":{\"a\":[1,2]}") &&
                 strstr(sb.data, "\"arguments\":{\"b\":true}") &&
                 strstr(sb.data, "\"arguments\":\"not json\""),
             "%s", sb.data);
    strbuf_reset(&sb);
    json_write(&sb, strs);
    T_CHECKF(strstr(sb.data, "\"arguments\":\"{\\\"a\\\": [1, 2]}\"") &&
                 strstr(sb.data, "\"arguments\":\"{\\\"b\\\":true}\""),
             "%s", sb.data);
    /* the input is untouched */
    strbuf_reset(&sb);
    json_write(&sb, msgs);
    T_CHECK(strstr(sb.data, "\"arguments\":{\"b\":true}"));
    strbuf_deinit(&sb);
    T_EQ_INT(
        chat_messages_normalize_tool_args(a, json_get(msgs->arr.items[0], "content"), true, &objs),
        ERR_INVAL);
    /* render-time modes */
    chat_render_opts o = {.messages = msgs, .tool_args = CHAT_TOOL_ARGS_OBJECT};
    const char *src = "{% for m in messages %}{% for c in m.tool_calls | default([]) %}"
                      "{{ c.function.arguments is mapping }},{% endfor %}{% endfor %}";
    expect_output(src, &o, "True,True,False,");
    o.tool_args = CHAT_TOOL_ARGS_STRING;
    expect_output(src, &o, "False,False,False,");
    o.tool_args = CHAT_TOOL_ARGS_AS_GIVEN;
    expect_output(src, &o, "False,True,False,");
    /* AUTO follows the probe: |tojson wants objects, printing as is does not */
    chat_template *t = NULL;
    const char *tj = "{% for m in messages %}{% for c in m.tool_calls | default([]) %}"
                     "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}";
    T_OK(chat_template_create(tj, strlen(tj), &t));
    T_CHECK(chat_template_wants_object_args(t));
    chat_template_destroy(t);
    const char *pj = "{% for m in messages %}{% for c in m.tool_calls | default([]) %}"
                     "{{ c.function.arguments }}{% endfor %}{% endfor %}";
    T_OK(chat_template_create(pj, strlen(pj), &t));
    T_CHECK(!chat_template_wants_object_args(t));
    chat_template_destroy(t);
    T_OK(chat_template_create("no tools here", 13, &t));
    T_CHECK(!chat_template_wants_object_args(t));
    chat_template_destroy(t);
    arena_destroy(a);
}

static char *repeat(const char *a, int n, const char *mid, const char *b) {
    size_t la = strlen(a), lm = strlen(mid), lb = strlen(b);
    char *s = malloc(la * (size_t)n + lm + lb * (size_t)n + 1), *p = s;
    for (int i = 0; i < n; i++, p += la)
        memcpy(p, a, la);
    memcpy(p, mid, lm);
    p += lm;
    for (int i = 0; i < n; i++, p += lb)
        memcpy(p, b, lb);
    *p = 0;
    return s;
}

static void expect_fails(char *src, int code) {
    strbuf sb;
    strbuf_init(&sb);
    int rc = render_src(src, NULL, &sb);
    T_CHECKF(rc == code, "got %s (%s), want %s", err_name(rc), err_detail(), err_name(code));
    strbuf_deinit(&sb);
    free(src);
}

static const char *repeat_once_text(void) {
    return "((1))";
}

static void t_hostile(void) {
    expect_output(repeat_once_text(), NULL, "((1))");
    char *inner = repeat("[", 20000, "1", "]");
    expect_fails(repeat("{{ ", 1, inner, " }}"), ERR_TOOLARGE);
    free(inner);
    inner = repeat("(", 5000, "1", ")");
    expect_fails(repeat("{{ ", 1, inner, " }}"), ERR_TOOLARGE);
    free(inner);
    expect_fails(repeat("{% if true %}", 5000, "x", "{% endif %}"), ERR_TOOLARGE);
    inner = repeat("not ", 20000, "1", "");
    expect_fails(repeat("{{ ", 1, inner, " }}"), ERR_TOOLARGE);
    free(inner);
    inner = repeat("- ", 20000, "1", "");
    expect_fails(repeat("{{ ", 1, inner, " }}"), ERR_TOOLARGE);
    free(inner);
    inner = repeat("x.", 20000, "y", "");
    expect_fails(repeat("{{ ", 1, inner, " }}"), ERR_TOOLARGE); /* bounded, no crash */
    free(inner);
    /* a long left-deep chain parses iteratively; evaluating it is bounded */
    strbuf big;
    strbuf_init(&big);
    strbuf_puts(&big, "{{ x");
    for (int i = 0; i < 30000; i++)
        strbuf_puts(&big, " ~ x");
    strbuf_puts(&big, " }}{{ y");
    for (int i = 0; i < 30000; i++)
        strbuf_puts(&big, " + 1");
    strbuf_puts(&big, " }}");
    int rc = render_code(big.data);
    T_CHECKF(rc == ERR_TOOLARGE || rc == ERR_INVAL, "chain: %s", err_detail());
    strbuf_reset(&big);
    strbuf_puts(&big, "{{ 'a'");
    for (int i = 0; i < 30000; i++)
        strbuf_puts(&big, " | lower");
    strbuf_puts(&big, " }}");
    rc = render_code(big.data);
    T_CHECKF(rc == ERR_TOOLARGE || rc == 0, "filters: %d %s", rc, err_detail());
    strbuf_deinit(&big);
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                 "{% endfor %}",
                 ERR_TOOLARGE, "evaluation steps");
    expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", ERR_TOOLARGE,
                 "output exceeds");
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(100) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 ERR_TOOLARGE, NULL);
    /* quadratic copying: stopped by the step budget or the render arena's bound */
    rc = render_code("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                     "{% set ns.l = ns.l + [i] %}{% endfor %}");
    T_CHECKF(rc == ERR_TOOLARGE || rc == ERR_NOMEM, "list growth: %s", err_detail());
    expect_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", ERR_TOOLARGE,
                 "macro calls nested deeper");
    expect_error("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}", ERR_TOOLARGE,
                 "nested deeper");
    expect_error("{{ 'ab' * 100000000 }}", ERR_TOOLARGE, NULL);
    expect_error("{{ x", ERR_FORMAT, NULL);
    expect_error("{% if", ERR_FORMAT, NULL);
    expect_error("{# never closed", ERR_FORMAT, "missing end of comment");
    expect_error("{% raw %} never closed", ERR_FORMAT, "missing end of raw");
    expect_error("{{ 'unterminated }}", ERR_FORMAT, NULL);
    expect_error("{{ ) }}", ERR_FORMAT, NULL);
    expect_error("{{ (] }}", ERR_FORMAT, NULL);
    expect_error("{{ 99999999999999999999999 }}", ERR_UNSUPPORTED, "out of range");
    expect_error("{{ '\\N{DASH}' }}", ERR_UNSUPPORTED, NULL);
    expect_error("{{ '\\x4' }}", ERR_FORMAT, "truncated");
    /* found by fuzzing: huge widths in %-formatting overflowed */
    expect_error("{{ '%99999999999999999999999d|%.99999999999999999999f' % (1, 2.0) }}",
                 ERR_TOOLARGE, "too large");
    expect_error("{{ '{:99999999999999999999}'.format(1) }}", ERR_TOOLARGE, "too large");
}

typedef struct thread_arg {
    const chat_template *t;
    const chat_render_opts *o;
    const char *want;
    int ok;
} thread_arg;

static void *render_thread(void *p) {
    thread_arg *ta = p;
    ta->ok = 1;
    for (int i = 0; i < 200; i++) {
        strbuf sb;
        strbuf_init(&sb);
        if (chat_template_render(ta->t, ta->o, &sb) != 0 || strcmp(sb.data, ta->want) != 0)
            ta->ok = 0;
        strbuf_deinit(&sb);
    }
    return NULL;
}

static void t_threads(void) {
    const char *src =
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "<{{ m.role }}:{{ m.content | upper }}>{% endfor %}{{ ns.n }}{{ [1, 2] }}";
    arena *a = arena_create(0, 0);
    json_value *msgs = NULL;
    const char *mj =
        "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]";
    T_OK(json_parse(a, mj, strlen(mj), &msgs));
    chat_template *t = NULL;
    T_OK(chat_template_create(src, strlen(src), &t));
    chat_render_opts o = {.messages = msgs};
    thread_arg ta[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        ta[i] = (thread_arg){.t = t, .o = &o, .want = "<user:A><assistant:B>2[1, 2]"};
        T_CHECK(pthread_create(&th[i], NULL, render_thread, &ta[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        T_CHECKF(ta[i].ok, "thread %d rendered something else", i);
    }
    chat_template_destroy(t);
    arena_destroy(a);
}

int main(void) {
    test_run("chat_api_create_errors", t_create_errors);
    test_run("chat_api_runtime_errors", t_runtime_errors);
    test_run("chat_api_variables", t_variables);
    test_run("chat_api_tool_args", t_tool_args);
    test_run("chat_api_hostile", t_hostile);
    test_run("chat_api_threads", t_threads);
    return test_summary();
}
