/* SPDX-License-Identifier: MIT */
/*
 * tc_dsml: the DeepSeek V3.2 / V4 DSML family, DSML and DSML_V4: parser and grammar rows.
 *
 * A region is one <｜DSML｜function_calls> (or tool_calls) block, read by chat_tools.c's section
 * reader; inside it, invokes are parsed one by one as each </｜DSML｜invoke> arrives, so calls
 * become visible before the block closes. Between invokes only whitespace is allowed.
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

/* One invoke: s[0..n) from just after "<｜DSML｜invoke" to just before "</｜DSML｜invoke>". */
static int ctp_dsml_invoke(chat_tool_parser *p, const char *s, size_t n) {
    char ex[256];
    size_t i = 0;
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

static const ctp_section ctp_dsml_section = {"DSML",      DSML_FC,         DSML_TC,
                                             DSML_INVOKE, DSML_INVOKE_END, DSML_FC_END,
                                             DSML_TC_END, ctp_dsml_invoke};

static const ctp_syntax ctp_dsml = {ctp_dsml_markers, 8, 2, NULL, NULL, &ctp_dsml_section};

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
