/* SPDX-License-Identifier: MIT */
/*
 * tc_mistral: the Mistral [TOOL_CALLS] family, MISTRAL and MISTRAL_ARGS: parser and grammar
 * rows.
 *
 * After [TOOL_CALLS] comes either a JSON array (or one object) of calls, delimited by bracket
 * matching, or NAME[ARGS]{...} / NAME[CALL_ID]ID[ARGS]{...}, where the name runs to the first '['
 * and the arguments are bracket-matched. Both formats read both forms.
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <string.h>

#define M_CALLS   "[TOOL_CALLS]"
#define M_ARGS    "[ARGS]"
#define M_CALL_ID "[CALL_ID]"

static const char *const ctp_mistral_markers[] = {M_CALLS, M_ARGS, M_CALL_ID};

/* A JSON array of calls (or one call object) in s[0..n). */
static int ctp_mistral_json(chat_tool_parser *p, const char *s, size_t n) {
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    json_value *v;
    int rc = ctp_parse_json(p, a, s, n, M_CALLS " calls", &v);
    if (!rc && v->type == JSON_ARRAY) {
        if (v->arr.n == 0)
            rc = ctp_fail(p, "%s is followed by an empty array", M_CALLS);
        for (size_t i = 0; i < v->arr.n && !rc; i++)
            rc = ctp_add_json_call(p, a, v->arr.items[i], M_CALLS " array element");
    } else if (!rc) {
        rc = ctp_add_json_call(p, a, v, M_CALLS " object");
    }
    arena_destroy(a);
    return rc;
}

static bool ctp_mistral_name_byte(char c) {
    return (unsigned char)c > ' ' && !strchr("{}\"<>[],", c);
}

static int ctp_mistral_region(chat_tool_parser *p, strbuf *content, bool eof) {
    char ex[256];
    (void)content;
    (void)eof;
    if (p->sub == 0) {
        ctp_consume(p, strlen(M_CALLS));
        p->sub = 1;
    }
    const char *s = p->pending.data;
    size_t n = p->pending.len, end;
    if (p->sub == 1) { /* which form */
        size_t i = ctp_skip_ws(s, n, 0);
        if (i == n)
            return CTP_NEED;
        ctp_consume(p, i);
        s = p->pending.data;
        n = p->pending.len;
        p->sub = s[0] == '[' || s[0] == '{' ? 2 : 3;
        p->scan = 0;
    }
    if (p->sub == 2) { /* JSON array or object */
        int r = ctp_span_scan(&p->span, s, n, &end);
        if (r == 0)
            return CTP_NEED;
        int rc = r < 0 ? ctp_fail(p, "malformed JSON after %s: \"%s\"", M_CALLS,
                                  ctp_excerpt(ex, sizeof ex, s, n))
                       : ctp_mistral_json(p, s, end);
        if (rc)
            return rc;
        ctp_consume(p, end);
        return CTP_DONE;
    }
    if (p->sub == 3) { /* NAME up to [ARGS] or [CALL_ID]; r0 = name length */
        size_t i = p->scan;
        while (i < n && ctp_mistral_name_byte(s[i]) && i <= 256)
            i++;
        p->scan = i;
        if (i == n)
            return CTP_NEED;
        int a = ctp_starts(s + i, n - i, M_ARGS), c = ctp_starts(s + i, n - i, M_CALL_ID);
        if (i > 0 && i <= 256 && (a == 0 || c == 0))
            return CTP_NEED;
        if (i > 256)
            return ctp_fail(p, "%s is followed by a function name longer than 256 bytes", M_CALLS);
        if (i == 0 || (a != 1 && c != 1))
            return ctp_fail(p,
                            "%s is followed by neither a JSON array nor NAME%s: \"%.*s\" then %s",
                            M_CALLS, M_ARGS, (int)i, s, ctp_byte(ex, s[i]));
        p->r0 = i;
        p->r1 = i + strlen(a == 1 ? M_ARGS : M_CALL_ID);
        p->sub = a == 1 ? 5 : 4;
        p->scan = p->r1;
    }
    if (p->sub == 4) { /* the call id: name bytes up to [ARGS] */
        size_t i = p->scan;
        while (i < n && ctp_mistral_name_byte(s[i]) && i - p->r1 <= 128)
            i++;
        p->scan = i;
        if (i - p->r1 > 128)
            return ctp_fail(p, "the %s of %s\"%.*s\" is longer than 128 bytes", M_CALL_ID, M_CALLS,
                            (int)p->r0, s);
        int a = i < n ? ctp_starts(s + i, n - i, M_ARGS) : 0;
        if (a == 0)
            return CTP_NEED;
        if (a < 0)
            return ctp_fail(p, "the %s of %s\"%.*s\" is followed by %s, not by %s", M_CALL_ID,
                            M_CALLS, (int)p->r0, s, ctp_byte(ex, s[i]), M_ARGS);
        p->r1 = i + strlen(M_ARGS);
        p->sub = 5;
    }
    /* sub 5: the arguments from r1 */
    if (!p->span.started) {
        size_t i = ctp_skip_ws(s, n, p->r1);
        if (i == n)
            return CTP_NEED;
        p->r1 = i;
    }
    int r = ctp_span_scan(&p->span, s + p->r1, n - p->r1, &end);
    if (r == 0)
        return CTP_NEED;
    if (r < 0)
        return ctp_fail(p, "the arguments of %s\"%.*s\" start with %s, not a JSON object", M_CALLS,
                        (int)p->r0, s, ctp_byte(ex, s[p->r1]));
    int rc = ctp_add_args_text(p, s, p->r0, s + p->r1, end);
    if (rc)
        return rc;
    ctp_consume(p, p->r1 + end);
    return CTP_DONE;
}

static const ctp_syntax ctp_mistral = {ctp_mistral_markers, 3, 1, ctp_mistral_region, NULL, NULL};

static const tg_syntax tg_mistral = {
    false, TG_PARAMS_JSON, "{\"name\": ", ", \"arguments\": ", "}", "[TOOL_CALLS][", "]", false};

static const tg_syntax tg_mistral_args = {true, TG_PARAMS_JSON, "", "[ARGS]",
                                          "",   "[TOOL_CALLS]", "", false};

/* "[TOOL_CALLS]": MISTRAL_ARGS when the template writes "[ARGS]", else MISTRAL. */
static int tc_mistral_detect(const char *src, size_t len) {
    if (!tc_has(src, len, "[TOOL_CALLS]"))
        return -1;
    return tc_has(src, len, "[ARGS]") ? CHAT_TOOL_FORMAT_MISTRAL_ARGS : CHAT_TOOL_FORMAT_MISTRAL;
}

/* Content beside calls never holds '[' (the first byte of [TOOL_CALLS]). */
static const tc_format tc_mistral_formats[] = {
    {CHAT_TOOL_FORMAT_MISTRAL, "mistral", &ctp_mistral, &tg_mistral, true},
    {CHAT_TOOL_FORMAT_MISTRAL_ARGS, "mistral_args", &ctp_mistral, &tg_mistral_args, true},
};

const tc_family tc_family_mistral = {"mistral", tc_mistral_detect, tc_mistral_formats, 2};
