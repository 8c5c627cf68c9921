/* SPDX-License-Identifier: MIT */
/*
 * tc_llama3: the Llama 3.x JSON family, LLAMA3 (Llama 3.1-3.3): parser and grammar row.
 *
 * LLAMA3 has no opening marker for its usual form: the lead rule (ctp_llama3_lead) looks at the
 * start of the output, and again right after each call, and holds the text while it could still
 * be `{"name"` or `{"type"` (whitespace, one ';' after a call, '{', whitespace, '"', a prefix of
 * the key). Once the key is known the object is delimited by bracket matching (ctp_span_scan)
 * and parsed whole. <|python_tag|> is a marker and opens the same region anywhere.
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define PYTHON_TAG "<|python_tag|>"

static const char *const ctp_llama3_markers[] = {PYTHON_TAG};

static int ctp_llama3_lead(chat_tool_parser *p, bool eof, size_t *skip, size_t *sep) {
    const char *s = p->pending.data;
    size_t n = p->pending.len, i = ctp_skip_ws(s, n, 0);
    *skip = i;
    *sep = 0;
    if (p->after_call && i < n && s[i] == ';') {
        i = ctp_skip_ws(s, n, i + 1);
        *sep = i - *skip;
    }
    (void)eof;
    if (i == n)
        return CTP_NEED;
    if (s[i] != '{')
        return CTP_TEXT;
    size_t j = ctp_skip_ws(s, n, i + 1);
    if (j == n)
        return CTP_NEED;
    int a = ctp_starts(s + j, n - j, "\"name\""), b = ctp_starts(s + j, n - j, "\"type\"");
    if (a == 1 || b == 1)
        return CTP_REGION;
    return a == 0 || b == 0 ? CTP_NEED : CTP_TEXT;
}

static int ctp_llama3_region(chat_tool_parser *p, strbuf *content, bool eof) {
    char ex[256];
    (void)content;
    (void)eof;
    if (p->sub == 0) {
        /* sub 1: after <|python_tag|> (markup: a non-call is an error); 2: a bare object at
         * p->r0, after the separator the lead rule found */
        bool tag = ctp_starts(p->pending.data, p->pending.len, PYTHON_TAG) == 1;
        if (tag)
            ctp_consume(p, strlen(PYTHON_TAG));
        p->sub = tag ? 1 : 2;
    }
    if (!p->span.started && p->sub == 1) {
        size_t i = ctp_skip_ws(p->pending.data, p->pending.len, 0);
        if (i == p->pending.len)
            return CTP_NEED;
        if (p->pending.data[i] != '{')
            return ctp_fail(p,
                            "%s is followed by %s, not by a JSON function call (built-in tools "
                            "are not supported)",
                            PYTHON_TAG, ctp_byte(ex, p->pending.data[i]));
        ctp_consume(p, i);
    }
    const char *s = p->pending.data + p->r0;
    size_t n = p->pending.len - p->r0, end;
    int r = ctp_span_scan(&p->span, s, n, &end);
    if (r == 0)
        return CTP_NEED;
    if (r < 0)
        return ctp_fail(p, "malformed JSON tool call: \"%s\"", ctp_excerpt(ex, sizeof ex, s, n));
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    json_value *v;
    int rc = ctp_parse_json(p, a, s, end, "JSON tool call", &v);
    bool is_call = !rc && (json_get(v, "parameters") || json_get(v, "arguments"));
    if (!rc && !is_call && p->sub == 2) {
        /* a JSON object that merely starts like a call: content, separator included, released
         * by the generic scanner (which still stops at a marker inside it) */
        arena_destroy(a);
        return CTP_TEXT;
    }
    if (!rc)
        rc = ctp_add_json_call(p, a, v, "JSON tool call");
    arena_destroy(a);
    if (rc)
        return rc;
    ctp_consume(p, p->r0 + end);
    return CTP_DONE;
}

static const ctp_syntax ctp_llama3 = {ctp_llama3_markers, 1,   1, ctp_llama3_region,
                                      ctp_llama3_lead,    NULL};

static const tg_syntax tg_llama3 = {
    false, TG_PARAMS_JSON, "{\"name\": ", ", \"parameters\": ", "}", "", "", false};

/* "<|start_header_id|>" with a JSON call example ("\"parameters\": ", "{\"name\": \""), unless
 * the template writes "functools[" or "<function=" (FireFunction, Functionary). */
static int tc_llama3_detect(const char *src, size_t len) {
    if (tc_has(src, len, "<|start_header_id|>") && tc_has(src, len, "\"parameters\": ") &&
        tc_has(src, len, "{\"name\": \"") && !tc_has(src, len, "functools[") &&
        !tc_has(src, len, "<function="))
        return CHAT_TOOL_FORMAT_LLAMA3;
    return -1;
}

static const tc_format tc_llama3_formats[] = {
    {CHAT_TOOL_FORMAT_LLAMA3, "llama3", &ctp_llama3, &tg_llama3, false},
};

const tc_family tc_family_llama3 = {"llama3", tc_llama3_detect, tc_llama3_formats, 1};
