/* SPDX-License-Identifier: MIT */
/*
 * tc_glm: the GLM family, GLM (GLM 4.5-4.7, Laguna): the call body parser
 * NAME<arg_key>K</arg_key><arg_value>V</arg_value>... and the grammar row. Regions are
 * tc_hermes.c's <tool_call> reader.
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define ARG_KEY       "<arg_key>"
#define ARG_KEY_END   "</arg_key>"
#define ARG_VALUE     "<arg_value>"
#define ARG_VALUE_END "</arg_value>"

static const char *const ctp_glm_markers[] = {TC_TAG_OPEN, TC_TAG_CLOSE};

/* NAME (<arg_key>K</arg_key><arg_value>V</arg_value>)*, s trimmed. */
int ctp_glm_call(chat_tool_parser *p, arena *a, const char *s, size_t n) {
    char ex[256];
    size_t k = ctp_find(s, n, 0, ARG_KEY);
    const char *nm;
    size_t nl = ctp_trim(s, k, &nm);
    if (!ctp_name_ok(nm, nl))
        return ctp_fail(p,
                        "<tool_call> body is neither JSON nor a function name with "
                        "arguments: \"%s\"",
                        ctp_excerpt(ex, sizeof ex, s, n));
    char *name = arena_strndup(a, nm, nl);
    json_value *obj = json_new_obj(a);
    if (!name || !obj)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    size_t i = k;
    while ((i = ctp_skip_ws(s, n, i)) < n) {
        size_t k0 = i + strlen(ARG_KEY);
        size_t k1 = ctp_starts(s + i, n - i, ARG_KEY) == 1 ? ctp_find(s, n, k0, ARG_KEY_END) : n;
        size_t v = k1 < n ? ctp_skip_ws(s, n, k1 + strlen(ARG_KEY_END)) : n;
        size_t v0 = v + strlen(ARG_VALUE);
        size_t v1 = v < n && ctp_starts(s + v, n - v, ARG_VALUE) == 1
                        ? ctp_find(s, n, v0, ARG_VALUE_END)
                        : n;
        const char *key;
        size_t kl = k1 < n ? ctp_trim(s + k0, k1 - k0, &key) : 0;
        if (v1 == n || kl == 0)
            return ctp_fail(p,
                            "tool call \"%s\": expected <arg_key>K</arg_key><arg_value>V"
                            "</arg_value>: \"%s\"",
                            name, ctp_excerpt(ex, sizeof ex, s + i, n - i));
        int rc = ctp_set_raw(p, a, obj, name, key, kl, s + v0, v1 - v0, -1);
        if (rc)
            return rc;
        i = v1 + strlen(ARG_VALUE_END);
    }
    return ctp_add_call(p, name, nl, obj);
}

static const ctp_syntax ctp_glm = {ctp_glm_markers, 2, 1, ctp_tag_region, NULL, NULL};

static const tg_syntax tg_glm = {true,          TG_PARAMS_GLM,  "",   "", "",
                                 "<tool_call>", "</tool_call>", false};

static int tc_glm_detect(const char *src, size_t len) {
    return tc_has(src, len, "<tool_call>") && tc_has(src, len, "<arg_key>") ? CHAT_TOOL_FORMAT_GLM
                                                                            : -1;
}

static const tc_format tc_glm_formats[] = {
    {CHAT_TOOL_FORMAT_GLM, "glm", &ctp_glm, &tg_glm, false},
};

const tc_family tc_family_glm = {"glm", tc_glm_detect, tc_glm_formats, 1};
