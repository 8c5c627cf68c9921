/* SPDX-License-Identifier: MIT */
/*
 * tool_grammar_calls: the tool-call grammars of tool_grammar_calls (tool_grammar.h), built from
 * the syntax row (tg_syntax, tool_grammar_int.h) each format's family file registers
 * (tc_registry.h). A call is pre NAME mid ARGS post and the output is open CALL close, where NAME
 * is a JSON string literal or, for the syntaxes that write it bare, the raw name, and ARGS is
 * either one JSON object (tool_grammar.c's tg_object) or the parameters one by one in the syntax's
 * XML style: QWEN3_XML  <parameter=K>\nV\n</parameter>\n GLM
 * <arg_key>K</arg_key><arg_value>V</arg_value> DSML       <｜DSML｜parameter name="K"
 * string="true|false">V</｜DSML｜parameter>\n V is raw text when chat_tool_param_is_string says the
 * parameter is a string (the rule the parser types values by) and the JSON text of the value
 * otherwise. Raw text never contains '<' (so no closing tag can appear inside it) nor control
 * characters other than tab and newline; JSON strings never contain a raw '<' either (written
 * \u003c). Names and keys written bare must be 1 to 256 bytes without whitespace, quotes, brackets,
 * braces, commas or angle brackets (what every parser reads as a name), else ERR_UNSUPPORTED names
 * the tool.
 *
 * Every output is exactly the text chat_tools parses back into one call with those arguments
 * (tests/test_grammar_tools.c walks every syntax through its parser).
 */
#include "toolcall/tc_registry.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DSML "｜DSML｜"

/* A name or key the XML-style and bare-name syntaxes can write (see the header note). */
static bool tg_bare_ok(const char *s, size_t n) {
    if (n == 0 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b <= ' ' || b == 0x7f || strchr("<>\"[]{},", b))
            return false;
    }
    return true;
}

/* One character of raw text: printable ASCII but '<', tab, newline, or a multi-byte UTF-8
 * character. */
static grammar_node *tg_raw_char(tg_ctx *c) {
    uint8_t set[32] = {0};
    for (int b = 0x20; b <= 0x7e; b++)
        if (b != '<')
            set[b >> 3] |= (uint8_t)(1u << (b & 7));
    set['\t' >> 3] |= (uint8_t)(1u << ('\t' & 7));
    set['\n' >> 3] |= (uint8_t)(1u << ('\n' & 7));
    return grammar_ast_alt2(c->a, grammar_ast_bytes(c->a, set), tg_utf8(c));
}

/* The raw text of a string parameter with schema s (chat_tool_param_is_string holds). */
static int tg_raw_value(tg_ctx *c, const json_value *s, grammar_node *raw_ch, grammar_node **out) {
    int rc = tg_check_keywords(c, s);
    if (rc)
        return rc;
    const json_value *v = json_get(s, "const");
    const json_value *e = json_get(s, "enum");
    if (v || (e && e->type == JSON_ARRAY && e->arr.n > 0)) {
        size_t n = v ? 1 : e->arr.n;
        grammar_node **alts = calloc(n, sizeof *alts);
        if (!alts)
            return tg_nomem(c);
        for (size_t i = 0; i < n && !rc; i++) {
            const json_value *x = v ? v : e->arr.items[i];
            if (x->type != JSON_STRING)
                continue; /* a non-string value of "type": "string" matches nothing */
            if (memchr(x->str.s, '<', x->str.len))
                rc = tg_fail(c, ERR_UNSUPPORTED,
                             "the value \"%.*s\" contains '<', which this tool-call syntax "
                             "cannot carry in a parameter",
                             (int)(x->str.len > 40 ? 40 : x->str.len), x->str.s);
            alts[i] = grammar_ast_lit(c->a, x->str.s, x->str.len);
        }
        int k = 0;
        for (size_t i = 0; i < n; i++)
            if (alts[i])
                alts[k++] = alts[i];
        if (!rc && k == 0)
            rc = tg_fail(c, ERR_INVAL, "no string value in \"%s\"", v ? "const" : "enum");
        if (!rc)
            *out = grammar_ast_alt(c->a, alts, k);
        free(alts);
        return rc;
    }
    int32_t lo, hi;
    rc = tg_counts(c, s, "minLength", "maxLength", c->lim.string_chars, c->lim.max_string_chars,
                   &lo, &hi);
    if (!rc)
        *out = grammar_ast_repeat(c->a, raw_ch, lo, hi);
    return rc;
}

/* The parameters of an object schema par (NULL: none) in the XML style of syn. */
static int tg_xml_params(tg_ctx *c, chat_tool_format f, const tg_syntax *syn, const json_value *par,
                         grammar_node **out) {
    *out = grammar_ast_empty(c->a);
    if (!par)
        return 0;
    if (json_get(par, "anyOf") || json_get(par, "oneOf") || json_get(par, "allOf") ||
        json_get(par, "$ref"))
        return tg_fail(c, ERR_UNSUPPORTED,
                       "anyOf / oneOf / allOf / $ref at the top of the parameters cannot be "
                       "written in the %s tool-call syntax",
                       chat_tool_format_name(f));
    int rc = tg_check_keywords(c, par);
    if (rc)
        return rc;
    const json_value *props, *req;
    if ((rc = tg_object_members(c, par, &props, &req)))
        return rc;
    for (size_t i = 0; req && i < req->arr.n; i++) {
        const json_value *r = req->arr.items[i];
        if (!json_get(props, r->str.s))
            return tg_fail(c, ERR_UNSUPPORTED,
                           "required \"%.*s\" is not among the properties; the %s tool-call "
                           "syntax can only write declared parameters",
                           (int)(r->str.len > 40 ? 40 : r->str.len), r->str.s,
                           chat_tool_format_name(f));
    }
    const json_value *mp = json_get(par, "minProperties");
    int64_t mn;
    if (mp && json_as_int(mp, &mn) && mn > (int64_t)(req ? req->arr.n : 0))
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"minProperties\" above the number of required properties is not "
                       "supported by constrained decoding");
    size_t n = props ? props->obj.n : 0;
    if (n == 0)
        return 0;
    grammar_node **items = calloc(n, sizeof *items);
    if (!items)
        return tg_nomem(c);
    grammar_node *raw_ch = tg_raw_char(c);
    for (size_t i = 0; i < n && !rc; i++) {
        const char *key = props->obj.keys[i];
        size_t kl = props->obj.key_lens[i];
        const json_value *ps = props->obj.vals[i];
        size_t m = tg_push(c, ".properties.%.*s", (int)(kl > 64 ? 64 : kl), key);
        bool required = false;
        for (size_t r = 0; req && r < req->arr.n; r++)
            required |=
                req->arr.items[r]->str.len == kl && !memcmp(req->arr.items[r]->str.s, key, kl);
        bool raw = chat_tool_param_is_string(ps);
        grammar_node *val = NULL;
        if (!tg_bare_ok(key, kl))
            rc = tg_fail(c, ERR_UNSUPPORTED,
                         "the parameter name cannot be written bare in the %s tool-call syntax",
                         chat_tool_format_name(f));
        else
            rc = raw ? tg_raw_value(c, ps, raw_ch, &val) : tg_schema(c, ps, &val);
        tg_pop(c, m);
        if (rc)
            break;
        strbuf sb;
        strbuf_init(&sb);
        const char *tail;
        if (syn->params == TG_PARAMS_QWEN3) {
            strbuf_printf(&sb, "<parameter=%.*s>\n", (int)kl, key);
            tail = "\n</parameter>\n";
        } else if (syn->params == TG_PARAMS_GLM) {
            strbuf_printf(&sb, "<arg_key>%.*s</arg_key><arg_value>", (int)kl, key);
            tail = "</arg_value>";
        } else {
            strbuf_printf(&sb, "<" DSML "parameter name=\"%.*s\" string=\"%s\">", (int)kl, key,
                          raw ? "true" : "false");
            tail = "</" DSML "parameter>\n";
        }
        grammar_node *head = strbuf_failed(&sb) ? NULL : grammar_ast_lit(c->a, sb.data, sb.len);
        strbuf_deinit(&sb);
        grammar_node *item = tg_cat(c, 3, head, val, tg_str(c, tail));
        items[i] = required ? item : grammar_ast_opt(c->a, item);
    }
    if (!rc)
        *out = grammar_ast_cat(c->a, items, (int)n);
    free(items);
    return rc;
}

/* The arguments of one tool as a JSON object (par NULL: "{}"). */
static int tg_json_args(tg_ctx *c, const json_value *par, grammar_node **out) {
    const json_value *ty = json_get(par, "type");
    if (!par) {
        *out = tg_str(c, "{}");
        return 0;
    }
    if (ty || !(json_get(par, "anyOf") || json_get(par, "oneOf") || json_get(par, "allOf") ||
                json_get(par, "$ref"))) {
        /* an object schema, "type" given or implied */
        int rc = tg_check_keywords(c, par);
        return rc ? rc : tg_object(c, par, out);
    }
    return tg_schema(c, par, out);
}

int tool_grammar_calls(grammar_ast *a, chat_tool_format f, const json_value *tools,
                       const char *name, const tool_grammar_limits *lim, grammar_node **out) {
    *out = NULL;
    const tc_format *fmt = tc_format_of(f);
    const tg_syntax *syn = fmt ? fmt->grammar : NULL;
    if (!syn)
        return err_set(ERR_UNSUPPORTED,
                       "tool-call format '%s' has no grammar for constrained "
                       "decoding",
                       chat_tool_format_name(f));
    if (!tools || tools->type != JSON_ARRAY)
        return err_set(ERR_INVAL, "tools: not an array");
    grammar_node **alts = calloc(tools->arr.n ? tools->arr.n : 1, sizeof *alts);
    if (!alts)
        return err_set(ERR_NOMEM, "tools: out of memory building the grammar");
    int k = 0, rc = 0;
    for (size_t i = 0; i < tools->arr.n && !rc; i++) {
        const json_value *fn = json_get(tools->arr.items[i], "function");
        const char *nm;
        size_t nl;
        if (!json_as_str(json_get(fn, "name"), &nm, &nl))
            continue;
        if (name && !(strlen(name) == nl && !memcmp(name, nm, nl)))
            continue;
        char where[64];
        snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
        tg_ctx c;
        const json_value *par = json_get(fn, "parameters");
        if (par && par->type == JSON_NULL)
            par = NULL;
        tg_init(&c, a, par, where, lim);
        c.no_lt = true;
        grammar_node *args = NULL;
        const json_value *ty = par && par->type == JSON_OBJECT ? json_get(par, "type") : NULL;
        if (par && par->type != JSON_OBJECT) {
            rc = tg_fail(&c, ERR_INVAL, "must be an object (a JSON schema)");
        } else if (ty && !(ty->type == JSON_STRING && tg_is(ty->str.s, ty->str.len, "object"))) {
            rc = tg_fail(&c, ERR_INVAL, "must describe an object (\"type\": \"object\")");
        } else if (syn->raw_name && !tg_bare_ok(nm, nl)) {
            rc = err_set(ERR_UNSUPPORTED,
                         "tools[%zu].function.name: \"%.*s\" cannot be written in the %s "
                         "tool-call syntax (1 to 256 bytes without spaces, quotes, brackets, "
                         "braces, commas or angle brackets)",
                         i, (int)(nl > 64 ? 64 : nl), nm, chat_tool_format_name(f));
        } else if (syn->params == TG_PARAMS_JSON) {
            rc = tg_json_args(&c, par, &args);
        } else {
            rc = tg_xml_params(&c, f, syn, par, &args);
        }
        if (rc)
            break;
        strbuf sb;
        strbuf_init(&sb);
        if (syn->raw_name)
            strbuf_append(&sb, nm, nl);
        else
            tg_json_str(&c, &sb, nm, nl);
        grammar_node *lit = strbuf_failed(&sb) ? NULL : grammar_ast_lit(a, sb.data, sb.len);
        strbuf_deinit(&sb);
        alts[k++] = tg_cat(&c, 5, tg_str(&c, syn->pre), lit, tg_str(&c, syn->mid), args,
                           tg_str(&c, syn->post));
        if (grammar_ast_failed(a))
            rc = tg_nomem(&c);
    }
    if (!rc && k == 0)
        rc = name ? err_set(ERR_NOTFOUND, "tool_choice: no function named '%s' in tools", name)
                  : err_set(ERR_INVAL, "tools: no function to call");
    if (!rc) {
        tg_ctx c;
        tg_init(&c, a, NULL, "tools", lim);
        grammar_node *nl =
            syn->opt_nl ? grammar_ast_opt(a, tg_str(&c, "\n")) : grammar_ast_empty(a);
        *out = tg_cat(&c, 5, tg_str(&c, syn->open), nl, grammar_ast_alt(a, alts, k), nl,
                      tg_str(&c, syn->close));
        if (!*out)
            rc = tg_nomem(&c);
    }
    free(alts);
    return rc;
}
