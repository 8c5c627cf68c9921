/* SPDX-License-Identifier: MIT */
/*
 * chat_tools_tag: the tag-delimited call regions (chat_tools_int.h says how regions plug in).
 *
 * <tool_call> (HERMES, QWEN3_XML, GLM): a region runs from <tool_call> to the first
 * </tool_call> (QWEN3_XML also takes a bare <function=...> up to its </function>), so nothing
 * inside a call may contain the closing tag; the grammar side writes '<' in JSON strings as
 * \u003c and keeps raw values free of '<' for that reason. The body is read by its shape, the
 * same for the three formats: '{' starts a JSON call, "<function=" a Qwen3-Coder XML call, and
 * anything else is GLM's NAME<arg_key>K</arg_key><arg_value>V</arg_value>....
 *
 * DSML: a region is one <｜DSML｜function_calls> (or tool_calls) block; inside it, invokes are
 * parsed one by one as each </｜DSML｜invoke> arrives, so calls become visible before the block
 * closes. Between invokes only whitespace is allowed.
 */
#include "toolcall/chat_tools_int.h"
#include "base/err.h"

#include <string.h>

#define TAG_OPEN      "<tool_call>"
#define TAG_CLOSE     "</tool_call>"
#define FN_OPEN       "<function="
#define FN_CLOSE      "</function>"
#define PARAM_OPEN    "<parameter="
#define PARAM_CLOSE   "</parameter>"
#define ARG_KEY       "<arg_key>"
#define ARG_KEY_END   "</arg_key>"
#define ARG_VALUE     "<arg_value>"
#define ARG_VALUE_END "</arg_value>"

#define DSML            "｜DSML｜"
#define DSML_FC         "<" DSML "function_calls>"
#define DSML_TC         "<" DSML "tool_calls>"
#define DSML_FC_END     "</" DSML "function_calls>"
#define DSML_TC_END     "</" DSML "tool_calls>"
#define DSML_INVOKE     "<" DSML "invoke"
#define DSML_INVOKE_END "</" DSML "invoke>"
#define DSML_PARAM      "<" DSML "parameter"
#define DSML_PARAM_END  "</" DSML "parameter>"

static const char *const ctp_hermes_markers[] = {TAG_OPEN, TAG_CLOSE};
static const char *const ctp_qwen3_markers[] = {TAG_OPEN, FN_OPEN, TAG_CLOSE};
static const char *const ctp_dsml_markers[] = {DSML_FC,     DSML_TC,       DSML_FC_END,
                                               DSML_TC_END, DSML_INVOKE,   DSML_INVOKE_END,
                                               DSML_PARAM,  DSML_PARAM_END};

/* ---- <tool_call> bodies ---- */

/* A name as the XML forms write it: non-empty, at most 256 bytes, no markup or whitespace. */
static bool ctp_name_ok(const char *s, size_t n) {
    if (n == 0 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<' || s[i] == '>' || s[i] == '"' || (unsigned char)s[i] <= ' ')
            return false;
    return true;
}

/* Sets key k[0..kl) of obj to the typed raw value. */
static int ctp_set_raw(chat_tool_parser *p, arena *a, json_value *obj, const char *tool,
                       const char *k, size_t kl, const char *v, size_t vl, int is_string) {
    char *key = arena_strndup(a, k, kl);
    json_value *val;
    if (!key)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    int rc = ctp_raw_value(p, a, tool, key, v, vl, is_string, &val);
    if (!rc && json_obj_set(a, obj, key, val))
        rc = err_set(ERR_NOMEM, "tool parser: out of memory");
    return rc;
}

/* <function=NAME> (<parameter=K>\nV\n</parameter>)* [</function>], s trimmed. */
static int ctp_xml_call(chat_tool_parser *p, arena *a, const char *s, size_t n) {
    char ex[256];
    size_t i = strlen(FN_OPEN), gt = ctp_find(s, n, i, ">");
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
        if (i == n || ctp_starts(s + i, n - i, FN_CLOSE) == 1)
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
        i += strlen(FN_CLOSE);
        if (ctp_skip_ws(s, n, i) != n)
            return ctp_fail(p, "tool call \"%s\": text after </function>: \"%s\"", name,
                            ctp_excerpt(ex, sizeof ex, s + i, n - i));
    }
    return ctp_add_call(p, name, nl, obj);
}

/* NAME (<arg_key>K</arg_key><arg_value>V</arg_value>)*, s trimmed. */
static int ctp_glm_call(chat_tool_parser *p, arena *a, const char *s, size_t n) {
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
    int rc = ctp_starts(s, n, FN_OPEN) == 1 ? ctp_xml_call(p, a, s, n) : ctp_glm_call(p, a, s, n);
    arena_destroy(a);
    return rc;
}

static int ctp_tag_region(chat_tool_parser *p, strbuf *content, bool eof) {
    const char *s = p->pending.data;
    size_t n = p->pending.len;
    bool bare = ctp_starts(s, n, FN_OPEN) == 1; /* QWEN3_XML without the wrapper */
    const char *close = bare ? FN_CLOSE : TAG_CLOSE;
    size_t ol = bare ? 0 : strlen(TAG_OPEN), cl = strlen(close);
    size_t at = ctp_find(s, n, p->scan > ol ? p->scan : ol, close);
    if (at == n) {
        p->scan = n >= cl ? n - cl + 1 : 0;
        if (eof)
            return ctp_fail(p, "a tool call was started (%s) but %s never came",
                            bare ? FN_OPEN : TAG_OPEN, close);
        return CTP_NEED;
    }
    int rc = ctp_tag_body(p, s + ol, bare ? at + cl : at - ol);
    if (rc)
        return rc;
    ctp_consume(p, at + cl);
    (void)content;
    return CTP_DONE;
}

const ctp_syntax ctp_hermes = {ctp_hermes_markers, 2, 1, ctp_tag_region, NULL};
const ctp_syntax ctp_qwen3_xml = {ctp_qwen3_markers, 3, 2, ctp_tag_region, NULL};
const ctp_syntax ctp_glm = {ctp_hermes_markers, 2, 1, ctp_tag_region, NULL};

/* ---- DSML ---- */

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

const ctp_syntax ctp_dsml = {ctp_dsml_markers, 8, 2, ctp_dsml_region, NULL};
