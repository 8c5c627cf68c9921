/* SPDX-License-Identifier: MIT */
/*
 * tc_qwen3_xml: the Qwen3-Coder XML family, QWEN3_XML (Qwen3-Coder, Qwen3.5, Nemotron 3,
 * Step 3.5): the call body parser and the grammar row. Regions are tc_hermes.c's <tool_call>
 * reader (which also takes a bare <function=...>...</function>).
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define PARAM_OPEN  "<parameter="
#define PARAM_CLOSE "</parameter>"

static const char *const ctp_qwen3_markers[] = {TC_TAG_OPEN, TC_FN_OPEN, TC_TAG_CLOSE};

/* <function=NAME> (<parameter=K>\nV\n</parameter>)* [</function>], s trimmed. */
int ctp_qwen3_xml_call(chat_tool_parser *p, arena *a, const char *s, size_t n) {
    char ex[256];
    size_t i = strlen(TC_FN_OPEN), gt = ctp_find(s, n, i, ">");
    const char *nm;
    size_t nl = gt < n ? ctp_trim(s + i, gt - i, &nm) : 0;
    if (gt == n || !ctp_name_ok(nm, nl))
        return ctp_fail(p, "<function=...> has no valid function name: \"%s\"",
                        ctp_excerpt(ex, sizeof ex, s, n));
    char *name = arena_strndup(a, nm, nl);
    json_value *obj = json_new_obj(a);
    if (!name || !obj)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    i = gt + 1;
    for (;;) {
        i = ctp_skip_ws(s, n, i);
        if (i == n || ctp_starts(s + i, n - i, TC_FN_CLOSE) == 1)
            break;
        if (ctp_starts(s + i, n - i, PARAM_OPEN) != 1)
            return ctp_fail(p, "tool call \"%s\": expected <parameter=...> or </function>: \"%s\"",
                            name, ctp_excerpt(ex, sizeof ex, s + i, n - i));
        size_t k0 = i + strlen(PARAM_OPEN), kgt = ctp_find(s, n, k0, ">");
        const char *k;
        size_t kl = kgt < n ? ctp_trim(s + k0, kgt - k0, &k) : 0;
        size_t end = kgt < n ? ctp_find(s, n, kgt + 1, PARAM_CLOSE) : n;
        if (kgt == n || kl == 0 || end == n)
            return ctp_fail(p, "tool call \"%s\": unterminated or unnamed <parameter=...>: \"%s\"",
                            name, ctp_excerpt(ex, sizeof ex, s + i, n - i));
        size_t v0 = kgt + 1, v1 = end;
        if (v0 < v1 && s[v0] == '\n')
            v0++;
        if (v1 > v0 && s[v1 - 1] == '\n')
            v1--;
        int rc = ctp_set_raw(p, a, obj, name, k, kl, s + v0, v1 - v0, -1);
        if (rc)
            return rc;
        i = end + strlen(PARAM_CLOSE);
    }
    if (i < n) {
        i += strlen(TC_FN_CLOSE);
        if (ctp_skip_ws(s, n, i) != n)
            return ctp_fail(p, "tool call \"%s\": text after </function>: \"%s\"", name,
                            ctp_excerpt(ex, sizeof ex, s + i, n - i));
    }
    return ctp_add_call(p, name, nl, obj);
}

static const ctp_syntax ctp_qwen3_xml = {ctp_qwen3_markers, 3, 2, ctp_tag_region, NULL, NULL};

static const tg_syntax tg_qwen3_xml = {true,          TG_PARAMS_QWEN3, "<function=",     ">\n",
                                       "</function>", "<tool_call>\n", "\n</tool_call>", false};

static int tc_qwen3_xml_detect(const char *src, size_t len) {
    return tc_has(src, len, "<tool_call>") && tc_has(src, len, "<function=")
               ? CHAT_TOOL_FORMAT_QWEN3_XML
               : -1;
}

static const tc_format tc_qwen3_xml_formats[] = {
    {CHAT_TOOL_FORMAT_QWEN3_XML, "qwen3_xml", &ctp_qwen3_xml, &tg_qwen3_xml, false},
};

const tc_family tc_family_qwen3_xml = {"qwen3_xml", tc_qwen3_xml_detect, tc_qwen3_xml_formats, 1};
