/* SPDX-License-Identifier: MIT */
/*
 * chat_tools_json: the call regions whose calls are JSON delimited by bracket matching or by
 * special markers (chat_tools_int.h says how regions plug in).
 *
 * LLAMA3 has no opening marker for its usual form: the lead rule (ctp_llama3_lead) looks at the
 * start of the output, and again right after each call, and holds the text while it could still
 * be `{"name"` or `{"type"` (whitespace, one ';' after a call, '{', whitespace, '"', a prefix of
 * the key). Once the key is known the object is delimited by bracket matching (ctp_span_scan)
 * and parsed whole. <|python_tag|> is a marker and opens the same region anywhere.
 *
 * MISTRAL: after [TOOL_CALLS] comes either a JSON array (or one object) of calls, delimited by
 * bracket matching, or NAME[ARGS]{...} / NAME[CALL_ID]ID[ARGS]{...}, where the name runs to the
 * first '[' and the arguments are bracket-matched.
 *
 * DEEPSEEK and KIMI_K2 share one section reader (ctp_section_region). DEEPSEEK: a region is one
 * <｜tool▁calls▁begin｜> section (or a call that starts without it); each call is parsed when its
 * <｜tool▁call▁end｜> arrives; the body is V3's
 * TYPE<｜tool▁sep｜>NAME\n```json\n{...}\n``` or V3.1's NAME<｜tool▁sep｜>{...}, told apart by
 * what follows the separator. KIMI_K2: <|tool_calls_section_begin|> sections whose calls are
 * functions.NAME:IDX<|tool_call_argument_begin|>{...} between <|tool_call_begin|> and
 * <|tool_call_end|>.
 */
#include "toolcall/chat_tools_int.h"
#include "base/err.h"

#include <string.h>

/* ---- LLAMA3 ---- */

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
    int rc = json_parse(a, s, end, &v);
    if (rc && rc != ERR_NOMEM)
        rc = ctp_fail(p, "JSON tool call is not valid JSON (%s): \"%s\"", err_detail(),
                      ctp_excerpt(ex, sizeof ex, s, end));
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

const ctp_syntax ctp_llama3 = {ctp_llama3_markers, 1, 1, ctp_llama3_region, ctp_llama3_lead};

/* ---- MISTRAL ---- */

#define M_CALLS   "[TOOL_CALLS]"
#define M_ARGS    "[ARGS]"
#define M_CALL_ID "[CALL_ID]"

static const char *const ctp_mistral_markers[] = {M_CALLS, M_ARGS, M_CALL_ID};

/* A JSON array of calls (or one call object) in s[0..n). */
static int ctp_mistral_json(chat_tool_parser *p, const char *s, size_t n) {
    char ex[256];
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    json_value *v;
    int rc = json_parse(a, s, n, &v);
    if (rc && rc != ERR_NOMEM)
        rc = ctp_fail(p, "%s calls are not valid JSON (%s): \"%s\"", M_CALLS, err_detail(),
                      ctp_excerpt(ex, sizeof ex, s, n));
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
    arena *ar = ctp_arena();
    if (!ar)
        return ERR_NOMEM;
    const json_value *args;
    int rc = ctp_parse_args(p, ar, s, p->r0, s + p->r1, end, &args);
    if (!rc)
        rc = ctp_add_call(p, s, p->r0, args);
    arena_destroy(ar);
    if (rc)
        return rc;
    ctp_consume(p, p->r1 + end);
    return CTP_DONE;
}

const ctp_syntax ctp_mistral = {ctp_mistral_markers, 3, 1, ctp_mistral_region, NULL};

/* ---- DEEPSEEK ---- */

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
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    const json_value *args;
    int rc = ctp_parse_args(p, a, nm, nl, js, jn, &args);
    if (!rc)
        rc = ctp_add_call(p, nm, nl, args);
    arena_destroy(a);
    return rc;
}

/* A section of calls: [begin] (call_begin BODY call_end)* end, whitespace between; body parses
 * one call. The section may also start with call_begin directly, and at the end of the output
 * a section with at least one call needs no end marker. */
typedef struct ctp_section {
    const char *family; /* for messages */
    const char *begin, *call_begin, *call_end, *end;
    int (*body)(chat_tool_parser *p, const char *s, size_t n);
} ctp_section;

static int ctp_section_region(chat_tool_parser *p, bool eof, const ctp_section *sec) {
    char ex[256];
    if (p->sub == 0) {
        if (ctp_starts(p->pending.data, p->pending.len, sec->begin) == 1)
            ctp_consume(p, strlen(sec->begin));
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
            return ctp_fail(p, "a %s tool-call section was opened but holds no complete call",
                            sec->family);
        }
        int c = ctp_starts(s + i, n - i, sec->call_begin);
        if (c == 1) {
            size_t from = i + strlen(sec->call_begin), el = strlen(sec->call_end);
            size_t at = ctp_find(s, n, p->scan > from ? p->scan : from, sec->call_end);
            if (at == n) {
                p->scan = n - from >= el ? n - el + 1 : from;
                if (eof)
                    return ctp_fail(p, "a %s tool call was started but %s never came: \"%s\"",
                                    sec->family, sec->call_end,
                                    ctp_excerpt(ex, sizeof ex, s + i, n - i));
                return CTP_NEED;
            }
            int rc = sec->body(p, s + from, at - from);
            if (rc)
                return rc;
            ctp_consume(p, at + el);
            p->scan = 0;
            continue;
        }
        int e = ctp_starts(s + i, n - i, sec->end);
        if (e == 1) {
            ctp_consume(p, i + strlen(sec->end));
            return CTP_DONE;
        }
        if ((c == 0 || e == 0) && !eof)
            return CTP_NEED;
        return ctp_fail(p, "unexpected %s in a %s tool-call section (expected %s or %s)",
                        ctp_byte(ex, s[i]), sec->family, sec->call_begin, sec->end);
    }
}

static const ctp_section ctp_deepseek_section = {"DeepSeek",  DS_CALLS,     DS_CALL,
                                                 DS_CALL_END, DS_CALLS_END, ctp_deepseek_call};

static int ctp_deepseek_region(chat_tool_parser *p, strbuf *content, bool eof) {
    (void)content;
    return ctp_section_region(p, eof, &ctp_deepseek_section);
}

const ctp_syntax ctp_deepseek = {ctp_deepseek_markers, 5, 2, ctp_deepseek_region, NULL};

/* ---- KIMI_K2 ---- */

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
    arena *a = ctp_arena();
    if (!a)
        return ERR_NOMEM;
    const json_value *args;
    int rc = ctp_parse_args(p, a, nm, nl, js, jn, &args);
    if (!rc)
        rc = ctp_add_call(p, nm, nl, args);
    arena_destroy(a);
    return rc;
}

static const ctp_section ctp_kimi_section = {"Kimi",        KIMI_CALLS,     KIMI_CALL,
                                             KIMI_CALL_END, KIMI_CALLS_END, ctp_kimi_call};

static int ctp_kimi_region(chat_tool_parser *p, strbuf *content, bool eof) {
    (void)content;
    return ctp_section_region(p, eof, &ctp_kimi_section);
}

const ctp_syntax ctp_kimi_k2 = {ctp_kimi_markers, 5, 2, ctp_kimi_region, NULL};
