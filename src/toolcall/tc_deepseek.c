/* SPDX-License-Identifier: MIT */
/*
 * tc_deepseek: the DeepSeek V3 / V3.1 family, DEEPSEEK_V3 and DEEPSEEK_V31: parser and grammar
 * rows.
 *
 * A region is one <｜tool▁calls▁begin｜> section (or a call that starts without it), read by
 * chat_tools.c's section reader; each call is parsed when its <｜tool▁call▁end｜> arrives. The
 * body is V3's TYPE<｜tool▁sep｜>NAME\n```json\n{...}\n``` or V3.1's NAME<｜tool▁sep｜>{...},
 * told apart by what follows the separator.
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define DS_CALLS     "<｜tool▁calls▁begin｜>"
#define DS_CALL      "<｜tool▁call▁begin｜>"
#define DS_SEP       "<｜tool▁sep｜>"
#define DS_CALL_END  "<｜tool▁call▁end｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"

static const char *const ctp_deepseek_markers[] = {DS_CALLS, DS_CALL, DS_SEP, DS_CALL_END,
                                                   DS_CALLS_END};

/* One call body, between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>. */
static int ctp_deepseek_call(chat_tool_parser *p, const char *s, size_t n) {
    char ex[256];
    size_t sep = ctp_find(s, n, 0, DS_SEP);
    if (sep == n)
        return ctp_fail(p, "DeepSeek tool call without %s: \"%s\"", DS_SEP,
                        ctp_excerpt(ex, sizeof ex, s, n));
    const char *r = s + sep + strlen(DS_SEP), *nm, *js;
    size_t rn = n - sep - strlen(DS_SEP), nl, jn;
    size_t rs = ctp_skip_ws(r, rn, 0);
    if (rs < rn && (r[rs] == '{' || r[rs] == '"')) { /* V3.1: NAME<sep>{...} */
        nl = ctp_trim(s, sep, &nm);
        jn = ctp_trim(r, rn, &js);
    } else { /* V3: TYPE<sep>NAME\n```json\n{...}\n``` */
        size_t eol = ctp_find(r, rn, 0, "\n");
        nl = ctp_trim(r, eol, &nm);
        jn = ctp_trim(r + (eol < rn ? eol : rn), rn - (eol < rn ? eol : rn), &js);
        if (jn >= 3 && !memcmp(js, "```", 3)) {
            size_t e = ctp_find(js, jn, 0, "\n");
            jn = ctp_trim(js + e, jn - e, &js);
        }
        if (jn >= 3 && !memcmp(js + jn - 3, "```", 3))
            jn = ctp_trim(js, jn - 3, &js);
    }
    if (nl == 0 || jn == 0)
        return ctp_fail(p, "DeepSeek tool call without a name or arguments: \"%s\"",
                        ctp_excerpt(ex, sizeof ex, s, n));
    return ctp_add_args_text(p, nm, nl, js, jn);
}

static const ctp_section ctp_deepseek_section = {
    "DeepSeek", DS_CALLS, NULL, DS_CALL, DS_CALL_END, DS_CALLS_END, NULL, ctp_deepseek_call};

static const ctp_syntax ctp_deepseek = {ctp_deepseek_markers, 5, 2, NULL, NULL,
                                        &ctp_deepseek_section};

static const tg_syntax tg_deepseek_v3 = {true,
                                         TG_PARAMS_JSON,
                                         DS_CALL "function" DS_SEP,
                                         "\n```json\n",
                                         "\n```" DS_CALL_END,
                                         "<｜tool▁calls▁begin｜>",
                                         "<｜tool▁calls▁end｜>",
                                         false};

static const tg_syntax tg_deepseek_v31 = {true,
                                          TG_PARAMS_JSON,
                                          DS_CALL,
                                          DS_SEP,
                                          DS_CALL_END,
                                          "<｜tool▁calls▁begin｜>",
                                          "<｜tool▁calls▁end｜>",
                                          false};

/* "<｜tool▁calls▁begin｜>" or "<｜tool▁call▁begin｜>": DEEPSEEK_V3 with a "```json" fence, else
 * DEEPSEEK_V31. */
static int tc_deepseek_detect(const char *src, size_t len) {
    if (!tc_has(src, len, DS_CALLS) && !tc_has(src, len, DS_CALL))
        return -1;
    return tc_has(src, len, "```json") ? CHAT_TOOL_FORMAT_DEEPSEEK_V3
                                       : CHAT_TOOL_FORMAT_DEEPSEEK_V31;
}

static const tc_format tc_deepseek_formats[] = {
    {CHAT_TOOL_FORMAT_DEEPSEEK_V3, "deepseek_v3", &ctp_deepseek, &tg_deepseek_v3, false},
    {CHAT_TOOL_FORMAT_DEEPSEEK_V31, "deepseek_v31", &ctp_deepseek, &tg_deepseek_v31, false},
};

const tc_family tc_family_deepseek = {"deepseek", tc_deepseek_detect, tc_deepseek_formats, 2};
