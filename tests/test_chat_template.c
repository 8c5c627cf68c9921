/* SPDX-License-Identifier: MIT */
/*
 * Golden tests for the chat-template engine: every template in ../shared/templates, rendered
 * against every conversation in tests/data/chat/cases.json, must produce exactly the bytes
 * jinja2 produced (tests/data/chat/expected/NAME.json, written by scripts/gen_chat_cases.py), or
 * fail where jinja2 failed, with the same message. One PASS/FAIL line per template. The golden
 * file and cases.json must agree on the conversations: a conversation without a golden entry, a
 * golden entry for no conversation, or a golden file with nothing compared is a failure, and so is
 * a run that finds no golden file at all.
 *
 * CT_GOLDEN_ONLY=substring limits the run to matching template names; CT_GOLDEN_VERBOSE=1 prints
 * the full expected and actual text of the first mismatch.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA_DIR "tests/data/chat"

static arena *g_arena;
static const json_value *g_cases; /* cases.json "cases" */
static int64_t g_now;
static char g_expected_path[512];
static int g_total, g_matched;

/* Compares actual output to expected; on mismatch describes the first difference. */
static void describe_diff(const char *exp, size_t en, const char *act, size_t an, char *msg,
                          size_t cap) {
    size_t i = 0;
    while (i < en && i < an && exp[i] == act[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    int el = (int)((en - from) < 80 ? en - from : 80),
        al = (int)((an - from) < 80 ? an - from : 80);
    snprintf(msg, cap,
             "first difference at byte %zu (expected %zu bytes, got %zu)\n"
             "      expected: ...%.*s...\n      actual:   ...%.*s...",
             i, en, an, el, exp + from, al, act + from);
}

static void t_golden_one(void) {
    size_t len = 0;
    char *text = test_read_file(g_expected_path, &len);
    T_CHECKF(text, "cannot read %s", g_expected_path);
    json_value *exp = NULL;
    int rc = json_parse(g_arena, text, len, &exp);
    T_CHECKF(rc == 0, "%s: %s", g_expected_path, err_detail());
    const char *tname;
    size_t tlen;
    T_CHECK(json_as_str(json_get(exp, "template"), &tname, &tlen));
    char rel[300];
    snprintf(rel, sizeof rel, "templates/%s", tname);
    const char *path = test_shared_file(rel);
    size_t slen = 0;
    char *src = test_read_file(path, &slen);
    T_CHECKF(src, "cannot read %s", path);
    chat_template *t = NULL;
    rc = chat_template_create(src, slen, &t);
    free(src);
    free(text);
    T_CHECKF(rc == 0, "%s: create failed: %s", tname, err_detail());
    const char *bos = NULL, *eos = NULL;
    size_t n;
    json_as_str(json_get(exp, "bos_token"), &bos, &n);
    json_as_str(json_get(exp, "eos_token"), &eos, &n);
    const json_value *cases = json_get(exp, "cases");
    char first_fail[8192] = "";
    int fails = 0;
    bool want_obj = false;
    json_as_bool(json_get(exp, "wants_object_args"), &want_obj);
    if (chat_template_wants_object_args(t) != want_obj) {
        snprintf(first_fail, sizeof first_fail,
                 "wants_object_args is %d, the probe under jinja2 "
                 "says %d",
                 !want_obj, want_obj);
        fails++;
    }
    bool verbose = getenv("CT_GOLDEN_VERBOSE") != NULL;
    T_CHECKF(cases && cases->type == JSON_OBJECT, "%s: no \"cases\" object", g_expected_path);
    /* every golden entry must be a conversation of cases.json (a stale or misspelled entry would
     * otherwise never be compared) */
    for (size_t gi = 0; gi < cases->obj.n; gi++) {
        const char *gname = cases->obj.keys[gi];
        bool known = false;
        for (size_t ci = 0; ci < g_cases->arr.n && !known; ci++) {
            const char *cname;
            known = json_as_str(json_get(g_cases->arr.items[ci], "name"), &cname, &n) &&
                    strcmp(cname, gname) == 0;
        }
        if (!known) {
            if (!fails)
                snprintf(first_fail, sizeof first_fail,
                         "golden entry '%s' matches no conversation of cases.json", gname);
            fails++;
        }
    }
    int compared = 0;
    for (size_t ci = 0; ci < g_cases->arr.n; ci++) {
        const json_value *c = g_cases->arr.items[ci];
        const char *cname;
        json_as_str(json_get(c, "name"), &cname, &n);
        const json_value *want = json_get(cases, cname);
        if (!want) {
            if (!fails)
                snprintf(first_fail, sizeof first_fail,
                         "conversation '%s' has no golden entry (regenerate with "
                         "scripts/gen_chat_cases.py)",
                         cname);
            fails++;
            continue;
        }
        compared++;
        chat_render_opts o = {0};
        o.messages = json_get(c, "messages");
        const json_value *tools = json_get(c, "tools");
        o.tools = tools && tools->type != JSON_NULL ? tools : NULL;
        json_as_bool(json_get(c, "add_generation_prompt"), &o.add_generation_prompt);
        o.bos_token = bos;
        o.eos_token = eos;
        o.extra = json_get(c, "extra");
        o.now_unix = g_now;
        strbuf sb;
        strbuf_init(&sb);
        err_clear();
        rc = chat_template_render(t, &o, &sb);
        const char *ws, *etype = "";
        size_t wn, tn;
        char msg[4096] = "";
        g_total++;
        if (json_as_str(json_get(want, "output"), &ws, &wn)) {
            if (rc != 0)
                snprintf(msg, sizeof msg, "render failed (%s): %s", err_name(rc), err_detail());
            else if (sb.len != wn || memcmp(sb.data, ws, wn) != 0) {
                describe_diff(ws, wn, sb.data, sb.len, msg, sizeof msg);
                if (verbose && !fails)
                    fprintf(stderr, "=== %s/%s expected:\n%.*s\n=== actual:\n%s\n===\n", tname,
                            cname, (int)wn, ws, sb.data);
            }
        } else {
            json_as_str(json_get(want, "error"), &ws, &wn);
            json_as_str(json_get(want, "error_type"), &etype, &tn);
            const char *d = err_detail();
            size_t dn = strlen(d);
            if (rc == 0) {
                snprintf(msg, sizeof msg, "rendered, but jinja2 failed with %s: %.*s", etype,
                         (int)wn, ws);
            } else if (rc != ERR_INVAL) {
                snprintf(msg, sizeof msg, "failed with %s (%s), jinja2 with %s: %.*s", err_name(rc),
                         d, etype, (int)wn, ws);
            } else {
                /* raise_exception keeps its message verbatim; other errors carry a
                 * "template line N: " prefix before jinja2's message */
                bool ok = strcmp(etype, "TemplateError") == 0
                              ? (dn == wn && memcmp(d, ws, wn) == 0)
                              : (dn >= wn && memcmp(d + dn - wn, ws, wn) == 0 &&
                                 (dn == wn || strncmp(d, "template line ", 14) == 0));
                if (!ok)
                    snprintf(msg, sizeof msg, "error message differs: got '%s', jinja2 %s: '%.*s'",
                             d, etype, (int)wn, ws);
            }
        }
        strbuf_deinit(&sb);
        if (msg[0]) {
            if (!fails)
                snprintf(first_fail, sizeof first_fail, "case %s: %s", cname, msg);
            fails++;
        } else {
            g_matched++;
        }
    }
    /* CHAT_TOOL_ARGS_AUTO: the string-arguments conversation must render like the object one for
     * templates that want objects, and as given for the others. */
    const json_value *str_case = NULL;
    for (size_t ci = 0; ci < g_cases->arr.n; ci++) {
        const char *cname;
        json_as_str(json_get(g_cases->arr.items[ci], "name"), &cname, &n);
        if (strcmp(cname, "tool_call_str") == 0)
            str_case = g_cases->arr.items[ci];
    }
    const json_value *want = json_get(cases, want_obj ? "tool_call_obj" : "tool_call_str");
    if (str_case && want) {
        chat_render_opts o = {0};
        o.messages = json_get(str_case, "messages");
        o.tools = json_get(str_case, "tools");
        o.bos_token = bos;
        o.eos_token = eos;
        o.now_unix = g_now;
        o.tool_args = CHAT_TOOL_ARGS_AUTO;
        strbuf sb;
        strbuf_init(&sb);
        rc = chat_template_render(t, &o, &sb);
        const char *ws;
        size_t wn;
        bool ok = json_as_str(json_get(want, "output"), &ws, &wn)
                      ? rc == 0 && sb.len == wn && memcmp(sb.data, ws, wn) == 0
                      : rc != 0;
        if (!ok) {
            if (!fails)
                snprintf(first_fail, sizeof first_fail,
                         "CHAT_TOOL_ARGS_AUTO on tool_call_str does "
                         "not render like %s (rc %d: %s)",
                         want_obj ? "tool_call_obj" : "tool_call_str", rc, rc ? err_detail() : "");
            fails++;
        }
        strbuf_deinit(&sb);
    }
    chat_template_destroy(t);
    T_CHECKF(compared > 0, "%s: nothing compared (no conversation of cases.json has a golden entry)",
             tname);
    T_CHECKF(fails == 0, "%s: %d case(s) differ; first: %s", tname, fails, first_fail);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(void) {
    g_arena = arena_create(0, 0);
    size_t len = 0;
    char *text = test_read_file(DATA_DIR "/cases.json", &len);
    json_value *root = NULL;
    if (!text || json_parse(g_arena, text, len, &root) != 0) {
        printf("FAIL chat_golden_cases: cannot read %s/cases.json: %s\n", DATA_DIR, err_detail());
        return 1;
    }
    free(text);
    g_cases = json_get(root, "cases");
    if (!g_cases || g_cases->type != JSON_ARRAY || g_cases->arr.n == 0) {
        printf("FAIL chat_golden_cases: %s/cases.json holds no conversation\n", DATA_DIR);
        arena_destroy(g_arena);
        return 1;
    }
    json_as_int(json_get(root, "now_unix"), &g_now);
    DIR *d = opendir(DATA_DIR "/expected");
    if (!d) {
        printf("FAIL chat_golden: cannot open %s/expected\n", DATA_DIR);
        return 1;
    }
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    const char *only = getenv("CT_GOLDEN_ONLY");
    int ran = 0;
    for (int i = 0; i < n; i++) {
        if (!only || strstr(names[i], only)) {
            ran++;
            char tname[300];
            snprintf(g_expected_path, sizeof g_expected_path, DATA_DIR "/expected/%s", names[i]);
            snprintf(tname, sizeof tname, "chat_golden_%.*s", (int)(strlen(names[i]) - 5),
                     names[i]);
            test_run(tname, t_golden_one);
        }
        free(names[i]);
    }
    if (ran == 0) {
        printf("FAIL chat_golden: no golden file in %s/expected%s%s\n", DATA_DIR,
               only ? " matches CT_GOLDEN_ONLY=" : "", only ? only : "");
        arena_destroy(g_arena);
        return 1;
    }
    fprintf(stderr, "chat golden: %d of %d template x case renders match jinja2\n", g_matched,
            g_total);
    arena_destroy(g_arena);
    return test_summary();
}
