/* SPDX-License-Identifier: MIT */
/*
 * tc_dsml: the DeepSeek V3.2 / V4 DSML family, DSML and DSML_V4: parser and grammar rows.
 *
 * A region is one <｜DSML｜function_calls> (or tool_calls) block; inside it, invokes are parsed
 * one by one as each </｜DSML｜invoke> arrives, so calls become visible before the block closes.
 * Between invokes only whitespace is allowed.
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define DSML            "｜DSML｜"
#define DSML_FC         "<" DSML "function_calls>"
#define DSML_TC         "<" DSML "tool_calls>"
#define DSML_FC_END     "</" DSML "function_calls>"
#define DSML_TC_END     "</" DSML "tool_calls>"
#define DSML_INVOKE     "<" DSML "invoke"
#define DSML_INVOKE_END "</" DSML "invoke>"
#define DSML_PARAM      "<" DSML "parameter"
#define DSML_PARAM_END  "</" DSML "parameter>"

static const char *const ctp_dsml_markers[] = {DSML_FC,     DSML_TC,       DSML_FC_END,
                                               DSML_TC_END, DSML_INVOKE,   DSML_INVOKE_END,
                                               DSML_PARAM,  DSML_PARAM_END};

/* Reads attributes up to '>' from s[*i..n): name="..." into *v and *vl, string="true|false" into
 * *is_string (-1 when absent). Returns 0, or -1 when malformed. */
static int ctp_dsml_attrs(const char *s, size_t n, size_t *i, const char **v, size_t *vl,
                          int *is_string) {
    *v = NULL;
    *vl = 0;
    *is_string = -1;
    size_t j = *i;
    for (;;) {
        j = ctp_skip_ws(s, n, j);
        if (j < n && s[j] == '>') {
            *i = j + 1;
            return 0;
        }
        size_t eq = j;
        while (eq < n && s[eq] != '=' && s[eq] != '>' && (unsigned char)s[eq] > ' ')
            eq++;
        if (eq == j || eq + 1 >= n || s[eq] != '=' || s[eq + 1] != '"')
            return -1;
        size_t q = ctp_find(s, n, eq + 2, "\"");
        if (q == n)
            return -1;
        const char *val = s + eq + 2;
        size_t len = q - (eq + 2);
        if (eq - j == 4 && !memcmp(s + j, "name", 4)) {
            *v = val;
            *vl = len;
        } else if (eq - j == 6 && !memcmp(s + j, "string", 6)) {
            if (len == 4 && !memcmp(val, "true", 4))
                *is_string = 1;
            else if (len == 5 && !memcmp(val, "false", 5))
                *is_string = 0;
            else
                return -1;
        }
        j = q + 1;
    }
}

/* One invoke: s[0..n) from "<｜DSML｜invoke" to just before "</｜DSML｜invoke>". */
static int ctp_dsml_invoke(chat_tool_parser *p, const char *s, size_t n) {
    char ex[256];
    size_t i = strlen(DSML_INVOKE);
    const char *nm;
    size_t nl;
    int unused;
    if (ctp_dsml_attrs(s, n, &i, &nm, &nl, &unused) || !nm || !ctp_name_ok(nm, nl))
        return ctp_fail(p, "DSML invoke without a valid name=\"...\": \"%s\"",
                        ctp_excerpt(ex, sizeof ex, s, n));
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    char *name = arena_strndup(a, nm, nl);
    json_value *obj = json_new_obj(a);
    int rc = name && obj ? 0 : err_set(ERR_NOMEM, "tool parser: out of memory");
    while (!rc && (i = ctp_skip_ws(s, n, i)) < n) {
        const char *k;
        size_t kl, v0 = i + strlen(DSML_PARAM), v1 = n;
        int is_string;
        if (ctp_starts(s + i, n - i, DSML_PARAM) != 1 ||
            ctp_dsml_attrs(s, n, &v0, &k, &kl, &is_string) || !k || kl == 0 ||
            (v1 = ctp_find(s, n, v0, DSML_PARAM_END)) == n) {
            rc =
                ctp_fail(p, "tool call \"%s\": expected a DSML parameter with name=\"...\": \"%s\"",
                         name, ctp_excerpt(ex, sizeof ex, s + i, n - i));
            break;
        }
        rc = ctp_set_raw(p, a, obj, name, k, kl, s + v0, v1 - v0, is_string);
        i = v1 + strlen(DSML_PARAM_END);
    }
    if (!rc)
        rc = ctp_add_call(p, name, nl, obj);
    arena_destroy(a);
    return rc;
}

static int ctp_dsml_region(chat_tool_parser *p, strbuf *content, bool eof) {
    char ex[256];
    (void)content;
    if (p->sub == 0) {
        bool fc = ctp_starts(p->pending.data, p->pending.len, DSML_FC) == 1;
        ctp_consume(p, strlen(fc ? DSML_FC : DSML_TC));
        p->sub = 1;
    }
    for (;;) {
        const char *s = p->pending.data;
        size_t n = p->pending.len, i = ctp_skip_ws(s, n, 0);
        if (i == n) {
            if (!eof)
                return CTP_NEED;
            if (p->region_calls > 0) {
                ctp_consume(p, n);
                return CTP_DONE;
            }
            return ctp_fail(p, "a DSML tool-call block was opened but holds no complete invoke");
        }
        int inv = ctp_starts(s + i, n - i, DSML_INVOKE);
        if (inv == 1) {
            size_t from = i + strlen(DSML_INVOKE);
            size_t at = ctp_find(s, n, p->scan > from ? p->scan : from, DSML_INVOKE_END);
            if (at == n) {
                size_t el = strlen(DSML_INVOKE_END);
                p->scan = n - from >= el ? n - el + 1 : from;
                if (eof)
                    return ctp_fail(p, "a DSML invoke was started but never closed: \"%s\"",
                                    ctp_excerpt(ex, sizeof ex, s + i, n - i));
                return CTP_NEED;
            }
            int rc = ctp_dsml_invoke(p, s + i, at - i);
            if (rc)
                return rc;
            ctp_consume(p, at + strlen(DSML_INVOKE_END));
            p->scan = 0;
            continue;
        }
        int e1 = ctp_starts(s + i, n - i, DSML_FC_END), e2 = ctp_starts(s + i, n - i, DSML_TC_END);
        if (e1 == 1 || e2 == 1) {
            ctp_consume(p, i + strlen(e1 == 1 ? DSML_FC_END : DSML_TC_END));
            return CTP_DONE;
        }
        if ((inv == 0 || e1 == 0 || e2 == 0) && !eof)
            return CTP_NEED;
        return ctp_fail(p, "unexpected %s in a DSML tool-call block (expected %s or its end)",
                        ctp_byte(ex, s[i]), DSML_INVOKE);
    }
}

static const ctp_syntax ctp_dsml = {ctp_dsml_markers, 8, 2, ctp_dsml_region, NULL};

static const tg_syntax tg_dsml = {true,
                                  TG_PARAMS_DSML,
                                  "<" DSML "invoke name=\"",
                                  "\">\n",
                                  "</" DSML "invoke>\n",
                                  "<" DSML "function_calls>\n",
                                  "</" DSML "function_calls>",
                                  false};

static const tg_syntax tg_dsml_v4 = {true,
                                     TG_PARAMS_DSML,
                                     "<" DSML "invoke name=\"",
                                     "\">\n",
                                     "</" DSML "invoke>\n",
                                     "<" DSML "tool_calls>\n",
                                     "</" DSML "tool_calls>",
                                     false};

/* "｜DSML｜": DSML when the template writes "function_calls>", else DSML_V4 (tool_calls). */
static int tc_dsml_detect(const char *src, size_t len) {
    if (!tc_has(src, len, "｜DSML｜"))
        return -1;
    return tc_has(src, len, "function_calls>") ? CHAT_TOOL_FORMAT_DSML : CHAT_TOOL_FORMAT_DSML_V4;
}

static const tc_format tc_dsml_formats[] = {
    {CHAT_TOOL_FORMAT_DSML, "dsml", &ctp_dsml, &tg_dsml, false},
    {CHAT_TOOL_FORMAT_DSML_V4, "dsml_v4", &ctp_dsml, &tg_dsml_v4, false},
};

const tc_family tc_family_dsml = {"dsml", tc_dsml_detect, tc_dsml_formats, 2};
