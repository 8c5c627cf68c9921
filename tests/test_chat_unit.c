/* SPDX-License-Identifier: MIT */
/*
 * Semantics tests for the chat-template engine against jinja2 as the oracle: every snippet of
 * tests/data/chat/unit_cases.json (written by scripts/gen_chat_unit.py) is created and rendered
 * with the file's context as extra variables, and must produce jinja2's exact bytes, or fail where
 * jinja2 failed: a syntax error where jinja2 had one, otherwise ERR_INVAL with jinja2's message
 * (after the "template line N: " prefix). The few documented deviations (the table below) must
 * produce exactly the engine's own documented outcome instead.
 *
 * CT_UNIT_VERBOSE=1 lists every mismatch instead of the first few.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Snippets whose outcome deliberately differs from jinja2's, with the reason, and exactly what
 * the engine does instead: either a failure (the return code and the whole err_detail()) or a
 * rendering (its exact bytes). A deviation is asserted like any other case, only against this
 * table instead of jinja2, and every entry must be met among the cases (a stale entry fails). */
static const struct {
    const char *src;
    int rc;             /* the engine's return code (create, then render); 0: it renders */
    const char *expect; /* the whole err_detail() when rc != 0, else the output */
    const char *why;
} deviations[] = {
    {"{% include 'x.html' %}", ERR_UNSUPPORTED, "template line 1: unsupported tag 'include'",
     "no template loader: the engine reports ERR_UNSUPPORTED at create time (jinja2 raises a "
     "TypeError when rendering)"},
    {"{{ l | select }}", 0, "<generator object select_or_reject at 0x7f0000000000>",
     "a generator's repr includes a memory address in Python; the engine prints a fixed one"},
    {"{{ n.bit_length() }}", ERR_INVAL,
     "template line 1: 'int object' has no attribute 'bit_length'",
     "int methods are not modelled"},
};
#define N_DEVIATIONS (sizeof deviations / sizeof deviations[0])

static int deviation(const char *src) {
    for (size_t i = 0; i < N_DEVIATIONS; i++)
        if (strcmp(deviations[i].src, src) == 0)
            return (int)i;
    return -1;
}

static void t_unit_snippets(void) {
    size_t len = 0;
    char *text = test_read_file("tests/data/chat/unit_cases.json", &len);
    T_CHECKF(text, "cannot read tests/data/chat/unit_cases.json");
    arena *a = arena_create(0, 0);
    json_value *root = NULL;
    int rc = json_parse(a, text, len, &root);
    T_CHECKF(rc == 0, "unit_cases.json: %s", err_detail());
    int64_t now = 0;
    json_as_int(json_get(root, "now_unix"), &now);
    const json_value *ctx = json_get(root, "context");
    const json_value *cases = json_get(root, "cases");
    T_CHECKF(cases && cases->type == JSON_ARRAY && cases->arr.n > 0,
             "unit_cases.json holds no \"cases\" array, or an empty one");
    bool verbose = getenv("CT_UNIT_VERBOSE") != NULL;
    int fails = 0, passed = 0, deviated = 0;
    bool dev_seen[N_DEVIATIONS] = {0};
    char first[2048] = "";
    for (size_t i = 0; i < cases->arr.n; i++) {
        const json_value *c = cases->arr.items[i];
        const char *src, *want = NULL, *werr = NULL, *wtype = "";
        size_t sn, wn = 0, en = 0, tn;
        json_as_str(json_get(c, "t"), &src, &sn);
        bool want_ok = json_as_str(json_get(c, "output"), &want, &wn);
        json_as_str(json_get(c, "error"), &werr, &en);
        json_as_str(json_get(c, "error_type"), &wtype, &tn);
        int dev = deviation(src);
        char msg[1536] = "";
        chat_template *t = NULL;
        err_clear();
        rc = chat_template_create(src, sn, &t);
        strbuf sb;
        strbuf_init(&sb);
        if (rc == 0) {
            chat_render_opts o = {.extra = ctx, .now_unix = now};
            rc = chat_template_render(t, &o, &sb);
        }
        const char *d = err_detail();
        size_t dn = strlen(d);
        bool syntax = strcmp(wtype, "TemplateSyntaxError") == 0 ||
                      strcmp(wtype, "SyntaxError") == 0 ||
                      strcmp(wtype, "TemplateAssertionError") == 0;
        if (dev >= 0) {
            /* the documented deviation, exactly: the same code, the same detail or bytes */
            const char *ex = deviations[dev].expect;
            size_t xn = strlen(ex);
            dev_seen[dev] = true;
            if (rc != deviations[dev].rc)
                snprintf(msg, sizeof msg, "deviation (%s): returned %s (%s), expected %s",
                         deviations[dev].why, rc ? err_name(rc) : "0", rc ? d : sb.data,
                         deviations[dev].rc ? err_name(deviations[dev].rc) : "0");
            else if (rc != 0 && strcmp(d, ex) != 0)
                snprintf(msg, sizeof msg, "deviation (%s): error '%s', expected '%s'",
                         deviations[dev].why, d, ex);
            else if (rc == 0 && (sb.len != xn || memcmp(sb.data, ex, xn) != 0))
                snprintf(msg, sizeof msg, "deviation (%s): got '%.*s', expected '%s'",
                         deviations[dev].why, (int)(sb.len > 400 ? 400 : sb.len), sb.data, ex);
            else
                deviated++;
        } else if (want_ok) {
            if (rc != 0)
                snprintf(msg, sizeof msg, "failed (%s): %s; jinja2 rendered '%.*s'", err_name(rc),
                         d, (int)(wn > 200 ? 200 : wn), want);
            else if (sb.len != wn || memcmp(sb.data, want, wn) != 0)
                snprintf(msg, sizeof msg, "got '%.*s'\n      want '%.*s'",
                         (int)(sb.len > 400 ? 400 : sb.len), sb.data, (int)(wn > 400 ? 400 : wn),
                         want);
        } else if (rc == 0) {
            snprintf(msg, sizeof msg, "rendered '%.*s', jinja2 failed: %s: %.*s",
                     (int)(sb.len > 200 ? 200 : sb.len), sb.data, wtype, (int)en, werr);
        } else if (syntax) {
            if (rc != ERR_FORMAT && rc != ERR_UNSUPPORTED && rc != ERR_TOOLARGE)
                snprintf(msg, sizeof msg, "jinja2 syntax error (%.*s) but got %s: %s", (int)en,
                         werr, err_name(rc), d);
        } else if (rc != ERR_INVAL) {
            snprintf(msg, sizeof msg, "failed with %s (%s), jinja2 %s: %.*s", err_name(rc), d,
                     wtype, (int)en, werr);
        } else {
            bool ok = strcmp(wtype, "TemplateError") == 0
                          ? (dn == en && memcmp(d, werr, en) == 0)
                          : (dn >= en && memcmp(d + dn - en, werr, en) == 0);
            if (!ok)
                snprintf(msg, sizeof msg, "error '%s', jinja2 %s: '%.*s'", d, wtype, (int)en, werr);
        }
        strbuf_deinit(&sb);
        chat_template_destroy(t);
        if (msg[0]) {
            if (verbose)
                fprintf(stderr, "MISMATCH #%zu %s\n    %s\n", i, src, msg);
            if (!fails)
                snprintf(first, sizeof first, "#%zu %.200s: %s", i, src, msg);
            fails++;
        } else {
            passed++;
        }
    }
    fprintf(stderr, "chat unit: %d of %zu snippets match jinja2 (%d documented deviations)\n",
            passed - deviated, cases->arr.n, deviated);
    for (size_t i = 0; i < N_DEVIATIONS; i++)
        if (!dev_seen[i]) {
            if (!fails)
                snprintf(first, sizeof first, "the deviation '%s' is no case of unit_cases.json",
                         deviations[i].src);
            fails++;
        }
    free(text);
    arena_destroy(a);
    T_CHECKF(fails == 0, "%d snippet(s) differ from jinja2 or from their documented deviation; "
             "first: %s", fails, first);
}

int main(void) {
    test_run("chat_unit_snippets", t_unit_snippets);
    return test_summary();
}
