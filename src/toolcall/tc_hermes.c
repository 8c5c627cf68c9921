/* SPDX-License-Identifier: MIT */
/*
 * tc_hermes: the <tool_call> family, HERMES (Hermes, Qwen 2.5 / 3, Granite 4, ...): parser and
 * grammar row (tc_registry.h says how a family plugs in).
 *
 * A <tool_call> region runs from <tool_call> to the first </tool_call> (QWEN3_XML also takes a
 * bare <function=...> up to its </function>), so nothing inside a call may contain the closing
 * tag; the grammar side writes '<' in JSON strings as \u003c and keeps raw values free of '<' for
 * that reason. The region reader here is shared by the three <tool_call> formats (HERMES,
 * QWEN3_XML in tc_qwen3_xml.c, GLM in tc_glm.c): the body is read by its shape, the same for all
 * three: '{' starts a JSON call, "<function=" a Qwen3-Coder XML call, and anything else is GLM's
 * NAME<arg_key>K</arg_key><arg_value>V</arg_value>....
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

static const char *const ctp_hermes_markers[] = {TC_TAG_OPEN, TC_TAG_CLOSE};

static int ctp_tag_body(chat_tool_parser *p, const char *body, size_t n) {
    const char *s;
    n = ctp_trim(body, n, &s);
    if (n == 0)
        return ctp_fail(p, "empty <tool_call></tool_call>");
    if (s[0] == '{')
        return ctp_add_json_text(p, s, n, "<tool_call> body");
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    int rc = ctp_starts(s, n, TC_FN_OPEN) == 1 ? ctp_qwen3_xml_call(p, a, s, n)
                                               : ctp_glm_call(p, a, s, n);
    arena_destroy(a);
    return rc;
}

int ctp_tag_region(chat_tool_parser *p, strbuf *content, bool eof) {
    const char *s = p->pending.data;
    size_t n = p->pending.len;
    bool bare = ctp_starts(s, n, TC_FN_OPEN) == 1; /* QWEN3_XML without the wrapper */
    const char *close = bare ? TC_FN_CLOSE : TC_TAG_CLOSE;
    size_t ol = bare ? 0 : strlen(TC_TAG_OPEN), cl = strlen(close);
    size_t at = ctp_find(s, n, p->scan > ol ? p->scan : ol, close);
    if (at == n) {
        p->scan = n >= cl ? n - cl + 1 : 0;
        if (eof)
            return ctp_fail(p, "a tool call was started (%s) but %s never came",
                            bare ? TC_FN_OPEN : TC_TAG_OPEN, close);
        return CTP_NEED;
    }
    int rc = ctp_tag_body(p, s + ol, bare ? at + cl : at - ol);
    if (rc)
        return rc;
    ctp_consume(p, at + cl);
    (void)content;
    return CTP_DONE;
}

static const ctp_syntax ctp_hermes = {ctp_hermes_markers, 2, 1, ctp_tag_region, NULL, NULL};

static const tg_syntax tg_hermes = {false, TG_PARAMS_JSON, "{\"name\": ",  ", \"arguments\": ",
                                    "}",   "<tool_call>",  "</tool_call>", true};

/* "<tool_call>" in a template that is neither GLM nor Qwen3-Coder (tc_registry.c tries those
 * first): HERMES, but MiniMax ("<invoke ") and Apriel ("<tool_calls>[") mention <tool_call> for
 * other syntaxes this module does not parse, so NONE. */
static int tc_hermes_detect(const char *src, size_t len) {
    if (!tc_has(src, len, "<tool_call>"))
        return -1;
    if (tc_has(src, len, "<invoke ") || tc_has(src, len, "<tool_calls>["))
        return CHAT_TOOL_FORMAT_NONE;
    return CHAT_TOOL_FORMAT_HERMES;
}

static const tc_format tc_hermes_formats[] = {
    {CHAT_TOOL_FORMAT_HERMES, "hermes", &ctp_hermes, &tg_hermes, false},
};

const tc_family tc_family_hermes = {"hermes", tc_hermes_detect, tc_hermes_formats, 1};
