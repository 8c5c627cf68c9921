/* SPDX-License-Identifier: MIT */
/*
 * tc_kimi: the Kimi K2 family, KIMI_K2: parser and grammar row. Sections
 * <|tool_calls_section_begin|> ... <|tool_calls_section_end|> are read by chat_tools.c's section
 * reader; each call is functions.NAME:IDX<|tool_call_argument_begin|>{...} between
 * <|tool_call_begin|> and <|tool_call_end|>.
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define KIMI_CALLS     "<|tool_calls_section_begin|>"
#define KIMI_CALL      "<|tool_call_begin|>"
#define KIMI_ARGS      "<|tool_call_argument_begin|>"
#define KIMI_CALL_END  "<|tool_call_end|>"
#define KIMI_CALLS_END "<|tool_calls_section_end|>"

static const char *const ctp_kimi_markers[] = {KIMI_CALLS, KIMI_CALL, KIMI_ARGS, KIMI_CALL_END,
                                               KIMI_CALLS_END};

/* functions.NAME:IDX<|tool_call_argument_begin|>{...}: the name is the id without the
 * "functions." prefix and the ":IDX" suffix. */
static int ctp_kimi_call(chat_tool_parser *p, const char *s, size_t n) {
    char ex[256];
    size_t sep = ctp_find(s, n, 0, KIMI_ARGS);
    if (sep == n)
        return ctp_fail(p, "Kimi tool call without %s: \"%s\"", KIMI_ARGS,
                        ctp_excerpt(ex, sizeof ex, s, n));
    const char *nm, *js;
    size_t nl = ctp_trim(s, sep, &nm);
    size_t jn = ctp_trim(s + sep + strlen(KIMI_ARGS), n - sep - strlen(KIMI_ARGS), &js);
    if (nl > 10 && !memcmp(nm, "functions.", 10)) {
        nm += 10;
        nl -= 10;
    }
    size_t d = nl;
    while (d > 0 && nm[d - 1] >= '0' && nm[d - 1] <= '9')
        d--;
    if (d > 1 && d < nl && nm[d - 1] == ':')
        nl = d - 1;
    if (nl == 0 || jn == 0)
        return ctp_fail(p, "Kimi tool call without a name or arguments: \"%s\"",
                        ctp_excerpt(ex, sizeof ex, s, n));
    return ctp_add_args_text(p, nm, nl, js, jn);
}

static const ctp_section ctp_kimi_section = {"Kimi",        KIMI_CALLS,     NULL, KIMI_CALL,
                                             KIMI_CALL_END, KIMI_CALLS_END, NULL, ctp_kimi_call};

static const ctp_syntax ctp_kimi_k2 = {ctp_kimi_markers, 5, 2, NULL, NULL, &ctp_kimi_section};

static const tg_syntax tg_kimi_k2 = {true,
                                     TG_PARAMS_JSON,
                                     "<|tool_call_begin|>functions.",
                                     ":0<|tool_call_argument_begin|>",
                                     "<|tool_call_end|>",
                                     "<|tool_calls_section_begin|>",
                                     "<|tool_calls_section_end|>",
                                     false};

static int tc_kimi_detect(const char *src, size_t len) {
    return tc_has(src, len, KIMI_CALLS) ? CHAT_TOOL_FORMAT_KIMI_K2 : -1;
}

static const tc_format tc_kimi_formats[] = {
    {CHAT_TOOL_FORMAT_KIMI_K2, "kimi_k2", &ctp_kimi_k2, &tg_kimi_k2, false},
};

const tc_family tc_family_kimi = {"kimi", tc_kimi_detect, tc_kimi_formats, 1};
