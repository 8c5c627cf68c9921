/* SPDX-License-Identifier: MIT */
/*
 * tool_grammar: see tool_grammar.h. A recursive walk over the schema builds grammar AST nodes;
 * a context carries the limits, the root for $ref, the stack of $ref targets being expanded (to
 * refuse recursion), the path for error messages and cached nodes (one JSON string character,
 * the schema-less values per depth). A node is compiled once per use, so reusing a cached node
 * costs NFA states but no AST memory.
 *
 * Numbers are built from exact decimal ranges: [lo, hi] over non-negative integers becomes the
 * usual digit-by-digit alternation (lo's first digit with the rest of lo up to 99..9, the digits
 * in between followed by any digits, hi's first digit with 00..0 up to the rest of hi; one
 * alternative per extra length), so bounds are honoured exactly without leading zeros.
 *
 * The tool-call syntaxes live in tool_grammar_calls.c; the walk's context and the helpers both
 * files use are declared in tool_grammar_int.h.
 */
#include "toolcall/tc_registry.h"
#include "base/check.h"
#include "base/err.h"
#include "base/strbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tool_grammar_limits_default(tool_grammar_limits *l) {
    *l = (tool_grammar_limits){.string_chars = 64,
                               .max_string_chars = 256,
                               .items = 8,
                               .max_items = 32,
                               .int_digits = 15,
                               .frac_digits = 6,
                               .any_depth = 2,
                               .any_string_chars = 32,
                               .any_items = 0,
                               .bounded_states = 16384};
}

/* ---- context helpers ---- */

static size_t tg_vpush(tg_ctx *c, const char *fmt, va_list ap) {
    size_t mark = c->path_len;
    if (c->path_len < sizeof c->path - 1) {
        int n = vsnprintf(c->path + c->path_len, sizeof c->path - c->path_len, fmt, ap);
        if (n > 0)
            c->path_len += (size_t)n;
        if (c->path_len > sizeof c->path - 1)
            c->path_len = sizeof c->path - 1;
    }
    return mark;
}

size_t tg_push(tg_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t mark = tg_vpush(c, fmt, ap);
    va_end(ap);
    return mark;
}

void tg_pop(tg_ctx *c, size_t mark) {
    c->path_len = mark;
    c->path[mark] = 0;
}

int tg_fail(tg_ctx *c, int code, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(code, "%s: %s", c->path, msg);
}

int tg_nomem(tg_ctx *c) {
    return tg_fail(c, ERR_NOMEM, "out of memory building the grammar");
}

bool tg_is(const char *s, size_t n, const char *lit) {
    return strlen(lit) == n && !memcmp(s, lit, n);
}

/* A default bound: 0 means unbounded. */
int32_t tg_max(int32_t bound) {
    return bound > 0 ? bound : GRAMMAR_INF;
}

grammar_node *tg_str(tg_ctx *c, const char *s) {
    return grammar_ast_str(c->a, s);
}

grammar_node *tg_cat(tg_ctx *c, int n, ...) {
    grammar_node *items[8];
    CHECK(n <= 8);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++)
        items[i] = va_arg(ap, grammar_node *);
    va_end(ap);
    return grammar_ast_cat(c->a, items, n);
}

/* ---- canonical JSON text ---- */

/* A JSON string literal: strbuf_json_str's form, with '<' as \u003c when no_lt is set and '['
 * as \u005b when no_lb is set. */
void tg_json_str(const tg_ctx *c, strbuf *sb, const char *s, size_t n) {
    json_style st = {.escape_lt = c->no_lt, .escape_lb = c->no_lb};
    json_write_str(sb, s, n, &st);
}

/* Writes v as json.dumps does by default (", " and ": ", non-ASCII raw). */
static void tg_canon(const tg_ctx *c, strbuf *sb, const json_value *v) {
    json_style st = {.spaced = true, .escape_lt = c->no_lt, .escape_lb = c->no_lb};
    json_write_styled(sb, v, &st);
}

/* The literal of v's canonical text (followed by suffix, may be NULL). */
static grammar_node *tg_canon_lit(tg_ctx *c, const json_value *v, const char *suffix) {
    strbuf sb;
    strbuf_init(&sb);
    tg_canon(c, &sb, v);
    if (suffix)
        strbuf_puts(&sb, suffix);
    grammar_node *n = strbuf_failed(&sb) ? NULL : grammar_ast_lit(c->a, sb.data, sb.len);
    strbuf_deinit(&sb);
    return n;
}

/* The literal "key": (a property name as JSON followed by ": "). */
static grammar_node *tg_key_lit(tg_ctx *c, const char *k, size_t n) {
    strbuf sb;
    strbuf_init(&sb);
    tg_json_str(c, &sb, k, n);
    strbuf_puts(&sb, ": ");
    grammar_node *r = strbuf_failed(&sb) ? NULL : grammar_ast_lit(c->a, sb.data, sb.len);
    strbuf_deinit(&sb);
    return r;
}

/* ---- strings ---- */

/* The set of the bytes in chars. */
static void tg_set(uint8_t set[32], const char *chars) {
    memset(set, 0, 32);
    for (const unsigned char *p = (const unsigned char *)chars; *p; p++)
        set[*p >> 3] |= (uint8_t)(1u << (*p & 7));
}

/* A well-formed multi-byte UTF-8 character (2 to 4 bytes, no surrogates, nothing above
 * U+10FFFF), factored so that every branch needing the same number of further bytes shares those
 * bytes' states: (lead | lead-with-restricted-second ...) cont. */
grammar_node *tg_utf8(tg_ctx *c) {
    grammar_ast *a = c->a;
    grammar_node *cont = grammar_ast_range(a, 0x80, 0xbf);
    /* two bytes still to come after a 4-byte lead and its second byte ... */
    grammar_node *l4[3] = {
        grammar_ast_cat2(a, tg_str(c, "\xf0"), grammar_ast_range(a, 0x90, 0xbf)),
        grammar_ast_cat2(a, grammar_ast_range(a, 0xf1, 0xf3), cont),
        grammar_ast_cat2(a, tg_str(c, "\xf4"), grammar_ast_range(a, 0x80, 0x8f))};
    /* ... one byte still to come */
    grammar_node *l3[4] = {grammar_ast_cat2(a, tg_str(c, "\xe0"), grammar_ast_range(a, 0xa0, 0xbf)),
                           grammar_ast_cat2(a,
                                            grammar_ast_alt2(a, grammar_ast_range(a, 0xe1, 0xec),
                                                             grammar_ast_range(a, 0xee, 0xef)),
                                            cont),
                           grammar_ast_cat2(a, tg_str(c, "\xed"), grammar_ast_range(a, 0x80, 0x9f)),
                           grammar_ast_cat2(a, grammar_ast_alt(a, l4, 3), cont)};
    return grammar_ast_cat2(
        a, grammar_ast_alt2(a, grammar_ast_range(a, 0xc2, 0xdf), grammar_ast_alt(a, l3, 4)), cont);
}

/* One character of a JSON string's contents (see the header for the set). The alternatives are
 * factored (tg_utf8, and \uXXXX as u, a first hex digit restricted around the surrogates, hex
 * hex) so that the subset construction makes about 16 DFA states per character position
 * instead of 28. */
static grammar_node *tg_char(tg_ctx *c) {
    if (c->ch)
        return c->ch;
    grammar_ast *a = c->a;
    uint8_t plain[32] = {0};
    for (int b = 0x20; b <= 0x7e; b++)
        if (b != '"' && b != '\\' && !(b == '<' && c->no_lt) && !(b == '[' && c->no_lb))
            plain[b >> 3] |= (uint8_t)(1u << (b & 7));
    uint8_t esc1[32], hex[32], hex_ac[32], hex_ef[32], oct[32], dd[32];
    tg_set(esc1, "\"\\/bfnrt");
    tg_set(hex, "0123456789abcdefABCDEF");
    tg_set(hex_ac, "0123456789abcABC");
    tg_set(hex_ef, "efEF");
    tg_set(oct, "01234567");
    tg_set(dd, "Dd");
    grammar_node *hx = grammar_ast_bytes(a, hex);
    /* u then 4 hex digits outside D800-DFFF: ([0-9A-Ca-c] X | [Dd][0-7] | [EFef] X) X X */
    grammar_node *u2[3] = {grammar_ast_cat2(a, grammar_ast_bytes(a, hex_ac), hx),
                           grammar_ast_cat2(a, grammar_ast_bytes(a, dd), grammar_ast_bytes(a, oct)),
                           grammar_ast_cat2(a, grammar_ast_bytes(a, hex_ef), hx)};
    grammar_node *uesc = tg_cat(c, 4, tg_str(c, "u"), grammar_ast_alt(a, u2, 3), hx, hx);
    grammar_node *esc =
        grammar_ast_cat2(a, tg_str(c, "\\"), grammar_ast_alt2(a, grammar_ast_bytes(a, esc1), uesc));
    grammar_node *alts[3] = {grammar_ast_bytes(a, plain), esc, tg_utf8(c)};
    c->ch = grammar_ast_alt(a, alts, 3);
    return c->ch;
}

grammar_node *tg_string(tg_ctx *c, int32_t min, int32_t max) {
    return tg_cat(c, 3, tg_str(c, "\""), grammar_ast_repeat(c->a, tg_char(c), min, max),
                  tg_str(c, "\""));
}

/* ---- numbers ---- */

static const char tg_nines[] = "999999999999999999999";
static const char tg_zeros[] = "000000000000000000000";

/* Decimal strings lo..hi of the same length n (lo <= hi), leading zeros allowed. */
static grammar_node *tg_range_same(tg_ctx *c, const char *lo, const char *hi, int n) {
    grammar_ast *a = c->a;
    if (n == 0)
        return grammar_ast_empty(a);
    if (lo[0] == hi[0])
        return grammar_ast_cat2(a, grammar_ast_lit(a, lo, 1),
                                tg_range_same(c, lo + 1, hi + 1, n - 1));
    bool lo_zeros = !memcmp(lo + 1, tg_zeros, (size_t)(n - 1));
    bool hi_nines = !memcmp(hi + 1, tg_nines, (size_t)(n - 1));
    int first = lo[0], last = hi[0];
    grammar_node *alts[3];
    int k = 0;
    if (!lo_zeros) {
        alts[k++] = grammar_ast_cat2(a, grammar_ast_lit(a, lo, 1),
                                     tg_range_same(c, lo + 1, tg_nines, n - 1));
        first++;
    }
    grammar_node *top = NULL;
    if (!hi_nines) {
        top = grammar_ast_cat2(a, grammar_ast_lit(a, hi, 1),
                               tg_range_same(c, tg_zeros, hi + 1, n - 1));
        last--;
    }
    if (first <= last)
        alts[k++] =
            grammar_ast_cat2(a, grammar_ast_range(a, (uint8_t)first, (uint8_t)last),
                             grammar_ast_repeat(a, grammar_ast_range(a, '0', '9'), n - 1, n - 1));
    if (top)
        alts[k++] = top;
    return grammar_ast_alt(a, alts, k);
}

/* Non-negative integers lo..hi (lo <= hi < 10^18) without leading zeros. */
static grammar_node *tg_uint_range(tg_ctx *c, uint64_t lo, uint64_t hi) {
    char ls[24], hs[24], one[24];
    int la = snprintf(ls, sizeof ls, "%llu", (unsigned long long)lo);
    int lb = snprintf(hs, sizeof hs, "%llu", (unsigned long long)hi);
    if (lo == 0 && !memcmp(hs, tg_nines, (size_t)lb)) /* 0..99..9: 0|[1-9][0-9]{0,lb-1} */
        return grammar_ast_alt2(
            c->a, tg_str(c, "0"),
            grammar_ast_cat2(
                c->a, grammar_ast_range(c->a, '1', '9'),
                grammar_ast_repeat(c->a, grammar_ast_range(c->a, '0', '9'), 0, lb - 1)));
    if (la == lb)
        return tg_range_same(c, ls, hs, la);
    grammar_node *alts[24];
    int k = 0;
    alts[k++] = tg_range_same(c, ls, tg_nines, la);
    for (int len = la + 1; len < lb; len++)
        alts[k++] = grammar_ast_cat2(
            c->a, grammar_ast_range(c->a, '1', '9'),
            grammar_ast_repeat(c->a, grammar_ast_range(c->a, '0', '9'), len - 1, len - 1));
    one[0] = '1';
    memset(one + 1, '0', (size_t)lb - 1);
    alts[k++] = tg_range_same(c, one, hs, lb);
    return grammar_ast_alt(c->a, alts, k);
}

/* Integers lo..hi (|lo|, |hi| < 10^18), as JSON writes them. */
static grammar_node *tg_int_range(tg_ctx *c, int64_t lo, int64_t hi) {
    grammar_node *alts[2];
    int k = 0;
    if (hi >= 0)
        alts[k++] = tg_uint_range(c, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi);
    if (lo < 0)
        alts[k++] = grammar_ast_cat2(c->a, tg_str(c, "-"),
                                     tg_uint_range(c, (uint64_t)(hi < 0 ? -hi : 1), (uint64_t)-lo));
    return grammar_ast_alt(c->a, alts, k);
}

/* Reads a bound: the keyword as a number, with draft 4's boolean exclusive* as a modifier. */
static int tg_bound(tg_ctx *c, const json_value *s, bool is_min, double *v, bool *excl,
                    bool *given) {
    const char *kw = is_min ? "minimum" : "maximum";
    const char *excl_kw = is_min ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_value *x = json_get(s, kw), *e = json_get(s, excl_kw);
    *given = false;
    *excl = false;
    if (x && x->type != JSON_NULL) {
        if (!json_as_double(x, v) || !isfinite(*v))
            return tg_fail(c, ERR_INVAL, "\"%s\" must be a number", kw);
        *given = true;
    }
    if (e && e->type == JSON_BOOL) {
        *excl = e->b && *given;
    } else if (e && e->type != JSON_NULL) {
        double ev;
        if (!json_as_double(e, &ev) || !isfinite(ev))
            return tg_fail(c, ERR_INVAL, "\"%s\" must be a number", excl_kw);
        bool tighter = !*given || (is_min ? ev >= *v : ev <= *v);
        if (tighter) {
            *v = ev;
            *excl = true;
            *given = true;
        }
    }
    return 0;
}

static grammar_node *tg_frac(tg_ctx *c) {
    return grammar_ast_cat2(
        c->a, tg_str(c, "."),
        grammar_ast_repeat(c->a, grammar_ast_range(c->a, '0', '9'), 1, c->lim.frac_digits));
}

/* integer (frac false) or number: see the header for the rule on fractions under bounds. */
static int tg_number(tg_ctx *c, const json_value *s, bool integer, grammar_node **out) {
    double lo = 0, hi = 0;
    bool lo_x, hi_x, lo_g, hi_g;
    int rc;
    if ((rc = tg_bound(c, s, true, &lo, &lo_x, &lo_g)) ||
        (rc = tg_bound(c, s, false, &hi, &hi_x, &hi_g)))
        return rc;
    const json_value *mo = json_get(s, "multipleOf");
    double mv;
    if (mo && mo->type != JSON_NULL && !(integer && json_as_double(mo, &mv) && mv == 1.0))
        return tg_fail(c, ERR_UNSUPPORTED,
                       "keyword \"multipleOf\" is not supported by "
                       "constrained decoding");
    int64_t big = 1;
    for (int i = 0; i < c->lim.int_digits; i++)
        big *= 10;
    big -= 1;
    /* the largest and smallest integers allowed, clamped to the digit bound */
    int64_t ilo = -big, ihi = big;
    if (lo_g && lo > (double)-big)
        ilo = lo >= (double)big ? big + 1 : (int64_t)(lo_x ? floor(lo) + 1 : ceil(lo));
    if (hi_g && hi < (double)big)
        ihi = hi <= (double)-big ? -big - 1 : (int64_t)(hi_x ? ceil(hi) - 1 : floor(hi));
    grammar_node *alts[3];
    int k = 0;
    if (!lo_g && !hi_g) {
        /* -?(0|[1-9][0-9]{0,d-1})(.[0-9]{1,f})? ("-0" included: JSON allows it) */
        grammar_node *mag = tg_uint_range(c, 0, (uint64_t)big);
        grammar_node *n = grammar_ast_cat2(c->a, grammar_ast_opt(c->a, tg_str(c, "-")), mag);
        if (!integer && c->lim.frac_digits > 0)
            n = grammar_ast_cat2(c->a, n, grammar_ast_opt(c->a, tg_frac(c)));
        *out = n;
        return 0;
    }
    if (ilo <= ihi)
        alts[k++] = tg_int_range(c, ilo, ihi);
    if (!integer && c->lim.frac_digits > 0) {
        /* k.ddd for k in [max(0, ilo), ihi - 1]; -m.ddd for m in [max(0, -ihi), -ilo - 1] */
        int64_t plo = ilo > 0 ? ilo : 0, phi = ihi - 1;
        if (plo <= phi)
            alts[k++] =
                grammar_ast_cat2(c->a, tg_uint_range(c, (uint64_t)plo, (uint64_t)phi), tg_frac(c));
        int64_t nlo = -ihi > 0 ? -ihi : 0, nhi = -ilo - 1;
        if (nlo <= nhi)
            alts[k++] = tg_cat(c, 3, tg_str(c, "-"), tg_uint_range(c, (uint64_t)nlo, (uint64_t)nhi),
                               tg_frac(c));
    }
    if (k == 0)
        return tg_fail(c, lo_g && hi_g && lo <= hi ? ERR_UNSUPPORTED : ERR_INVAL,
                       "no %s in the range given by minimum/maximum can be generated (bounds "
                       "%g..%g, at most %d digits)",
                       integer ? "integer" : "number", lo_g ? lo : -(double)big,
                       hi_g ? hi : (double)big, c->lim.int_digits);
    *out = grammar_ast_alt(c->a, alts, k);
    return 0;
}

/* ---- schema-less values ---- */

/* Any JSON value with containers nested at most d deep. */
static grammar_node *tg_any(tg_ctx *c, int d) {
    if (d > TG_MAX_ANY_DEPTH)
        d = TG_MAX_ANY_DEPTH;
    if (c->any[d])
        return c->any[d];
    grammar_ast *a = c->a;
    grammar_node *num = NULL;
    json_value none = {.type = JSON_OBJECT}; /* no bounds: cannot fail */
    if (tg_number(c, &none, false, &num))
        num = NULL;
    grammar_node *alts[7] = {tg_string(c, 0, tg_max(c->lim.any_string_chars)), num,
                             tg_str(c, "true"), tg_str(c, "false"), tg_str(c, "null")};
    int k = 5;
    if (d > 0) {
        grammar_node *inner = tg_any(c, d - 1);
        if (!c->any_key)
            c->any_key = grammar_ast_cat2(a, tg_string(c, 0, tg_max(c->lim.any_string_chars)),
                                          tg_str(c, ": "));
        grammar_node *sep = tg_str(c, ", ");
        int32_t max = c->lim.any_items > 0 ? c->lim.any_items : GRAMMAR_INF;
        alts[k++] =
            tg_cat(c, 3, tg_str(c, "["), grammar_ast_list(a, inner, sep, 0, max), tg_str(c, "]"));
        alts[k++] = tg_cat(c, 3, tg_str(c, "{"),
                           grammar_ast_list(a, grammar_ast_cat2(a, c->any_key, inner), sep, 0, max),
                           tg_str(c, "}"));
    }
    c->any[d] = grammar_ast_alt(a, alts, k);
    return c->any[d];
}

/* ---- schemas ---- */

/* Keywords whose omission could admit values the schema rejects. */
static const char *const tg_refused[] = {
    "pattern",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "if",
    "then",
    "else",
    "not",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
};

/* Keywords that only describe. */
static const char *const tg_annotations[] = {
    "title",         "description", "default",     "examples",        "format",
    "$schema",       "$id",         "$comment",    "$defs",           "definitions",
    "readOnly",      "writeOnly",   "deprecated",  "contentEncoding", "contentMediaType",
    "contentSchema", "$anchor",     "$vocabulary", "nullable",
};

static bool tg_in(const char *k, size_t n, const char *const *list, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (tg_is(k, n, list[i]))
            return true;
    return false;
}

/* The first keyword of s that constrains values besides the allowed ones (NULL if none). */
static const char *tg_other_keyword(const json_value *s, const char *const *allowed, size_t n) {
    for (size_t i = 0; i < s->obj.n; i++) {
        const char *k = s->obj.keys[i];
        size_t kl = s->obj.key_lens[i];
        if (!tg_in(k, kl, allowed, n) &&
            !tg_in(k, kl, tg_annotations, sizeof tg_annotations / sizeof *tg_annotations))
            return k;
    }
    return NULL;
}

int tg_check_keywords(tg_ctx *c, const json_value *s) {
    for (size_t i = 0; i < s->obj.n; i++) {
        const char *k = s->obj.keys[i];
        size_t kl = s->obj.key_lens[i];
        const json_value *v = s->obj.vals[i];
        if (tg_in(k, kl, tg_refused, sizeof tg_refused / sizeof *tg_refused))
            return tg_fail(c, ERR_UNSUPPORTED,
                           "keyword \"%.*s\" is not supported by constrained decoding", (int)kl, k);
        if (tg_is(k, kl, "uniqueItems") && !(v->type == JSON_BOOL && !v->b) && v->type != JSON_NULL)
            return tg_fail(c, ERR_UNSUPPORTED,
                           "keyword \"uniqueItems\" is not supported by "
                           "constrained decoding");
        if (tg_is(k, kl, "items") && v->type == JSON_ARRAY)
            return tg_fail(c, ERR_UNSUPPORTED,
                           "\"items\" as an array (tuple validation) is not "
                           "supported by constrained decoding");
    }
    return 0;
}

/* Reads an optional non-negative integer keyword. */
static int tg_count(tg_ctx *c, const json_value *s, const char *kw, int64_t *v, bool *given) {
    const json_value *x = json_get(s, kw);
    *given = false;
    if (!x || x->type == JSON_NULL)
        return 0;
    if (!json_as_int(x, v) || *v < 0)
        return tg_fail(c, ERR_INVAL, "\"%s\" must be a non-negative integer", kw);
    *given = true;
    return 0;
}

/* [lo, hi] from min/max keywords with a default and a cap on the maximum. */
int tg_counts(tg_ctx *c, const json_value *s, const char *min_kw, const char *max_kw, int32_t def,
              int32_t cap, int32_t *lo, int32_t *hi) {
    int64_t mn = 0, mx = def > 0 ? def : GRAMMAR_INF;
    bool g1, g2;
    int rc;
    if ((rc = tg_count(c, s, min_kw, &mn, &g1)) || (rc = tg_count(c, s, max_kw, &mx, &g2)))
        return rc;
    if (g1 && g2 && mn > mx)
        return tg_fail(c, ERR_INVAL, "\"%s\" %lld is above \"%s\" %lld", min_kw, (long long)mn,
                       max_kw, (long long)mx);
    if (mn > cap)
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"%s\" %lld is above the %d that constrained decoding "
                       "generates",
                       min_kw, (long long)mn, cap);
    if (!g2 && mx != GRAMMAR_INF && mx < mn)
        mx = mn;
    if (mx > cap)
        mx = cap;
    *lo = (int32_t)mn;
    *hi = (int32_t)mx;
    return 0;
}

int tg_object_members(tg_ctx *c, const json_value *s, const json_value **props,
                      const json_value **req) {
    *props = json_get(s, "properties");
    *req = json_get(s, "required");
    if (*props && (*props)->type == JSON_NULL)
        *props = NULL;
    if (*req && (*req)->type == JSON_NULL)
        *req = NULL;
    if (*props && (*props)->type != JSON_OBJECT)
        return tg_fail(c, ERR_INVAL, "\"properties\" must be an object");
    if (*req && (*req)->type != JSON_ARRAY)
        return tg_fail(c, ERR_INVAL, "\"required\" must be an array of strings");
    for (size_t i = 0; *req && i < (*req)->arr.n; i++)
        if ((*req)->arr.items[i]->type != JSON_STRING)
            return tg_fail(c, ERR_INVAL, "\"required\"[%zu] must be a string", i);
    return 0;
}

int tg_object(tg_ctx *c, const json_value *s, grammar_node **out) {
    const json_value *props, *req;
    int rc = tg_object_members(c, s, &props, &req);
    if (rc)
        return rc;
    size_t n_req = req ? req->arr.n : 0, n_props = props ? props->obj.n : 0;
    size_t n = n_props;
    for (size_t i = 0; i < n_req; i++)
        if (!json_get(props, req->arr.items[i]->str.s))
            n++;
    grammar_ast *a = c->a;
    if (n == 0) {
        /* no declared members: a map */
        const json_value *ap = json_get(s, "additionalProperties");
        if (ap && ap->type == JSON_BOOL && !ap->b) {
            *out = tg_str(c, "{}");
            return 0;
        }
        int32_t lo, hi;
        rc = tg_counts(c, s, "minProperties", "maxProperties", c->lim.items, c->lim.max_items, &lo,
                       &hi);
        if (rc)
            return rc;
        grammar_node *val;
        if ((rc = tg_schema_at(c, ap && ap->type == JSON_OBJECT ? ap : NULL, &val,
                               ".additionalProperties")))
            return rc;
        grammar_node *member =
            tg_cat(c, 3, tg_string(c, 1, tg_max(c->lim.string_chars)), tg_str(c, ": "), val);
        *out = tg_cat(c, 3, tg_str(c, "{"), grammar_ast_list(a, member, tg_str(c, ", "), lo, hi),
                      tg_str(c, "}"));
        return 0;
    }
    int64_t mn, mx;
    bool g;
    if ((rc = tg_count(c, s, "minProperties", &mn, &g)))
        return rc;
    if (g && (size_t)mn > n_req)
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"minProperties\" above the number of required "
                       "properties is not supported by constrained decoding");
    if ((rc = tg_count(c, s, "maxProperties", &mx, &g)))
        return rc;
    if (g && (size_t)mx < n)
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"maxProperties\" below the number of properties is "
                       "not supported by constrained decoding");
    grammar_node **items = calloc(n, sizeof *items);
    bool *opt = calloc(n, sizeof *opt);
    if (!items || !opt) {
        free(items);
        free(opt);
        return tg_nomem(c);
    }
    size_t k = 0;
    for (size_t i = 0; i < n_props && !rc; i++) {
        const char *key = props->obj.keys[i];
        size_t kl = props->obj.key_lens[i];
        bool required = false;
        for (size_t r = 0; r < n_req; r++)
            required |=
                tg_is(key, kl, req->arr.items[r]->str.s) && req->arr.items[r]->str.len == kl;
        grammar_node *val;
        rc = tg_schema_at(c, props->obj.vals[i], &val, ".properties.%.*s", (int)(kl > 64 ? 64 : kl),
                          key);
        opt[k] = !required;
        items[k++] = grammar_ast_cat2(a, tg_key_lit(c, key, kl), val);
    }
    for (size_t r = 0; r < n_req && !rc; r++) {
        const json_value *name = req->arr.items[r];
        if (json_get(props, name->str.s))
            continue;
        opt[k] = false;
        items[k++] = grammar_ast_cat2(a, tg_key_lit(c, name->str.s, name->str.len),
                                      tg_any(c, c->lim.any_depth));
    }
    if (!rc)
        *out = tg_cat(c, 3, tg_str(c, "{"),
                      grammar_ast_join(a, items, opt, (int)k, tg_str(c, ", ")), tg_str(c, "}"));
    free(items);
    free(opt);
    return rc;
}

static int tg_array(tg_ctx *c, const json_value *s, grammar_node **out) {
    int32_t lo, hi;
    int rc = tg_counts(c, s, "minItems", "maxItems", c->lim.items, c->lim.max_items, &lo, &hi);
    if (rc)
        return rc;
    const json_value *it = json_get(s, "items");
    grammar_node *item;
    if ((rc = tg_schema_at(c, it && it->type != JSON_NULL ? it : NULL, &item, ".items")))
        return rc;
    *out = tg_cat(c, 3, tg_str(c, "["), grammar_ast_list(c->a, item, tg_str(c, ", "), lo, hi),
                  tg_str(c, "]"));
    return 0;
}

static int tg_typed(tg_ctx *c, const json_value *s, const char *t, size_t tl, grammar_node **out) {
    if (tg_is(t, tl, "object"))
        return tg_object(c, s, out);
    if (tg_is(t, tl, "array"))
        return tg_array(c, s, out);
    if (tg_is(t, tl, "string")) {
        int32_t lo, hi;
        int rc = tg_counts(c, s, "minLength", "maxLength", c->lim.string_chars,
                           c->lim.max_string_chars, &lo, &hi);
        if (!rc)
            *out = tg_string(c, lo, hi);
        return rc;
    }
    if (tg_is(t, tl, "integer"))
        return tg_number(c, s, true, out);
    if (tg_is(t, tl, "number"))
        return tg_number(c, s, false, out);
    if (tg_is(t, tl, "boolean")) {
        *out = grammar_ast_alt2(c->a, tg_str(c, "true"), tg_str(c, "false"));
        return 0;
    }
    if (tg_is(t, tl, "null")) {
        *out = tg_str(c, "null");
        return 0;
    }
    return tg_fail(c, ERR_INVAL, "unknown type '%.*s'", (int)(tl > 40 ? 40 : tl), t);
}

/* Resolves a local $ref (a JSON pointer into the root). */
static int tg_resolve(tg_ctx *c, const char *ref, size_t n, const json_value **out) {
    if (n == 0 || ref[0] != '#')
        return tg_fail(c, ERR_UNSUPPORTED, "$ref '%.*s' is not a local reference (#...)",
                       (int)(n > 80 ? 80 : n), ref);
    const json_value *v = c->root;
    size_t i = 1;
    while (i < n) {
        if (ref[i] != '/')
            return tg_fail(c, ERR_INVAL, "$ref '%.*s' is not a JSON pointer",
                           (int)(n > 80 ? 80 : n), ref);
        i++;
        char tok[256];
        size_t tl = 0;
        while (i < n && ref[i] != '/' && tl < sizeof tok - 1) {
            char ch = ref[i++];
            if (ch == '~' && i < n && (ref[i] == '0' || ref[i] == '1'))
                ch = ref[i++] == '0' ? '~' : '/';
            tok[tl++] = ch;
        }
        tok[tl] = 0;
        const json_value *next = NULL;
        if (v && v->type == JSON_OBJECT) {
            for (size_t k = 0; k < v->obj.n; k++)
                if (v->obj.key_lens[k] == tl && !memcmp(v->obj.keys[k], tok, tl))
                    next = v->obj.vals[k];
        } else if (v && v->type == JSON_ARRAY) {
            char *end;
            unsigned long idx = strtoul(tok, &end, 10);
            if (tl && !*end && idx < v->arr.n)
                next = v->arr.items[idx];
        }
        if (!next)
            return tg_fail(c, ERR_INVAL, "$ref '%.*s' does not resolve", (int)(n > 80 ? 80 : n),
                           ref);
        v = next;
    }
    *out = v;
    return 0;
}

/* A schema {"$ref": v} (nothing beside it): the target's grammar, built once per target and
 * memoized; a recursive $ref is refused. */
static int tg_schema_ref(tg_ctx *c, const json_value *s, const json_value *v, grammar_node **out) {
    int rc;
    static const char *const ok[] = {"$ref"};
    const char *other = tg_other_keyword(s, ok, 1);
    if (other)
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"%s\" beside \"$ref\" is not supported by "
                       "constrained decoding",
                       other);
    const json_value *target;
    if (v->type != JSON_STRING)
        return tg_fail(c, ERR_INVAL, "\"$ref\" must be a string");
    if ((rc = tg_resolve(c, v->str.s, v->str.len, &target)))
        return rc;
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo[i].target == target) {
            *out = c->memo[i].node;
            return 0;
        }
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i] == target)
            return tg_fail(c, ERR_UNSUPPORTED,
                           "$ref '%.*s' is recursive; a recursive schema "
                           "is not a regular language and cannot be "
                           "enforced",
                           (int)(v->str.len > 80 ? 80 : v->str.len), v->str.s);
    if (c->n_refs == TG_MAX_REFS)
        return tg_fail(c, ERR_TOOLARGE, "more than %d nested $ref", TG_MAX_REFS);
    c->refs[c->n_refs++] = target;
    rc = tg_schema_at(c, target, out, "($ref %.*s)", (int)(v->str.len > 80 ? 80 : v->str.len),
                      v->str.s);
    c->n_refs--;
    if (!rc && c->n_memo < TG_MAX_MEMO) {
        c->memo[c->n_memo].target = target;
        c->memo[c->n_memo++].node = *out;
    }
    return rc;
}

/* "enum": v: one alternative per value, each in its canonical JSON text. */
static int tg_schema_enum(tg_ctx *c, const json_value *v, grammar_node **base) {
    if (v->type != JSON_ARRAY || v->arr.n == 0)
        return tg_fail(c, ERR_INVAL, "\"enum\" must be a non-empty array");
    grammar_node **alts = calloc(v->arr.n, sizeof *alts);
    if (!alts)
        return tg_nomem(c);
    for (size_t i = 0; i < v->arr.n; i++)
        alts[i] = tg_canon_lit(c, v->arr.items[i], NULL);
    *base = grammar_ast_alt(c->a, alts, (int)v->arr.n);
    free(alts);
    return 0;
}

/* "anyOf" or "oneOf": v (nothing beside it): one alternative per subschema (oneOf is enforced
 * as anyOf). */
static int tg_schema_anyof(tg_ctx *c, const json_value *s, const json_value *v,
                           grammar_node **base) {
    int rc = 0;
    const char *kw = json_get(s, "anyOf") == v ? "anyOf" : "oneOf";
    static const char *const ok[] = {"anyOf", "oneOf"};
    const char *other = tg_other_keyword(s, ok, 2);
    if (other)
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"%s\" beside \"%s\" is not supported by "
                       "constrained decoding",
                       other, kw);
    if (json_get(s, "anyOf") && json_get(s, "oneOf"))
        return tg_fail(c, ERR_UNSUPPORTED,
                       "\"anyOf\" with \"oneOf\" is not supported by "
                       "constrained decoding");
    if (v->type != JSON_ARRAY || v->arr.n == 0)
        return tg_fail(c, ERR_INVAL, "\"%s\" must be a non-empty array of schemas", kw);
    grammar_node **alts = calloc(v->arr.n, sizeof *alts);
    if (!alts)
        return tg_nomem(c);
    for (size_t i = 0; i < v->arr.n && !rc; i++) {
        rc = tg_schema_at(c, v->arr.items[i], &alts[i], ".%s[%zu]", kw, i);
    }
    if (!rc)
        *base = grammar_ast_alt(c->a, alts, (int)v->arr.n);
    free(alts);
    return rc;
}

/* "type": v, a name or a non-empty array of names (one alternative each). */
static int tg_schema_type(tg_ctx *c, const json_value *s, const json_value *v,
                          grammar_node **base) {
    int rc = 0;
    if (v->type == JSON_STRING) {
        rc = tg_typed(c, s, v->str.s, v->str.len, base);
    } else if (v->type == JSON_ARRAY && v->arr.n > 0) {
        grammar_node **alts = calloc(v->arr.n, sizeof *alts);
        if (!alts)
            return tg_nomem(c);
        for (size_t i = 0; i < v->arr.n && !rc; i++) {
            const json_value *t = v->arr.items[i];
            if (t->type != JSON_STRING)
                rc = tg_fail(c, ERR_INVAL, "\"type\"[%zu] must be a string", i);
            else
                rc = tg_typed(c, s, t->str.s, t->str.len, &alts[i]);
        }
        if (!rc)
            *base = grammar_ast_alt(c->a, alts, (int)v->arr.n);
        free(alts);
    } else {
        rc = tg_fail(c, ERR_INVAL, "\"type\" must be a string or a non-empty array of strings");
    }
    return rc;
}

/* No type: infers it from the keywords, else any value. */
static int tg_schema_untyped(tg_ctx *c, const json_value *s, grammar_node **base) {
    static const struct {
        const char *kw, *type;
    } infer[] = {{"properties", "object"},
                 {"required", "object"},
                 {"additionalProperties", "object"},
                 {"minProperties", "object"},
                 {"maxProperties", "object"},
                 {"items", "array"},
                 {"minItems", "array"},
                 {"maxItems", "array"},
                 {"minLength", "string"},
                 {"maxLength", "string"},
                 {"minimum", "number"},
                 {"maximum", "number"},
                 {"exclusiveMinimum", "number"},
                 {"exclusiveMaximum", "number"}};
    const char *t = NULL;
    for (size_t i = 0; i < sizeof infer / sizeof *infer && !t; i++)
        if (json_get(s, infer[i].kw))
            t = infer[i].type;
    if (t)
        return tg_typed(c, s, t, strlen(t), base);
    *base = tg_any(c, c->lim.any_depth);
    return 0;
}

static int tg_schema_inner(tg_ctx *c, const json_value *s, grammar_node **out) {
    if (!s) {
        *out = tg_any(c, c->lim.any_depth);
        return 0;
    }
    if (s->type == JSON_BOOL) {
        if (!s->b)
            return tg_fail(c, ERR_INVAL, "the schema false allows no value");
        *out = tg_any(c, c->lim.any_depth);
        return 0;
    }
    if (s->type != JSON_OBJECT)
        return tg_fail(c, ERR_INVAL, "a schema must be an object or a boolean, not %s",
                       json_type_name(s->type));
    int rc = tg_check_keywords(c, s);
    if (rc)
        return rc;
    const json_value *v;
    if ((v = json_get(s, "$ref")) && v->type != JSON_NULL)
        return tg_schema_ref(c, s, v, out);
    const json_value *nullable = json_get(s, "nullable");
    bool add_null = nullable && nullable->type == JSON_BOOL && nullable->b;
    grammar_node *base = NULL;
    if ((v = json_get(s, "const"))) {
        base = tg_canon_lit(c, v, NULL);
    } else if ((v = json_get(s, "enum")) && v->type != JSON_NULL) {
        rc = tg_schema_enum(c, v, &base);
    } else if (((v = json_get(s, "anyOf")) && v->type != JSON_NULL) ||
               ((v = json_get(s, "oneOf")) && v->type != JSON_NULL)) {
        rc = tg_schema_anyof(c, s, v, &base);
    } else if ((v = json_get(s, "allOf")) && v->type != JSON_NULL) {
        static const char *const ok[] = {"allOf"};
        if (v->type != JSON_ARRAY || v->arr.n != 1 || tg_other_keyword(s, ok, 1))
            return tg_fail(c, ERR_UNSUPPORTED,
                           "\"allOf\" is supported by constrained decoding "
                           "only with a single schema and nothing beside it");
        rc = tg_schema_at(c, v->arr.items[0], &base, ".allOf[0]");
    } else if ((v = json_get(s, "type")) && v->type != JSON_NULL) {
        rc = tg_schema_type(c, s, v, &base);
    } else {
        rc = tg_schema_untyped(c, s, &base);
    }
    if (rc)
        return rc;
    *out = add_null ? grammar_ast_alt2(c->a, base, tg_str(c, "null")) : base;
    return 0;
}

int tg_schema(tg_ctx *c, const json_value *s, grammar_node **out) {
    if (c->depth >= TG_MAX_DEPTH)
        return tg_fail(c, ERR_TOOLARGE, "schema nested deeper than %d levels", TG_MAX_DEPTH);
    if (++c->visits > TG_MAX_VISITS)
        return tg_fail(c, ERR_TOOLARGE, "schema has more than %d subschemas (with $ref expanded)",
                       TG_MAX_VISITS);
    c->depth++;
    int rc = tg_schema_inner(c, s, out);
    c->depth--;
    if (!rc && (grammar_ast_failed(c->a) || !*out))
        rc = tg_nomem(c);
    return rc;
}

int tg_schema_at(tg_ctx *c, const json_value *s, grammar_node **out, const char *fmt, ...) {
    if (!s) {
        *out = tg_any(c, c->lim.any_depth);
        return 0;
    }
    va_list ap;
    va_start(ap, fmt);
    size_t mark = tg_vpush(c, fmt, ap);
    va_end(ap);
    int rc = tg_schema(c, s, out);
    tg_pop(c, mark);
    return rc;
}

void tg_init(tg_ctx *c, grammar_ast *a, const json_value *root, const char *where,
             const tool_grammar_limits *lim) {
    memset(c, 0, sizeof *c);
    c->a = a;
    c->root = root;
    if (lim)
        c->lim = *lim;
    else
        tool_grammar_limits_default(&c->lim);
    if (c->lim.int_digits < 1)
        c->lim.int_digits = 1;
    if (c->lim.int_digits > 18)
        c->lim.int_digits = 18;
    if (c->lim.frac_digits > 18)
        c->lim.frac_digits = 18;
    tg_push(c, "%s", where ? where : "schema");
}

int tool_grammar_schema(grammar_ast *a, const json_value *schema, const json_value *root,
                        const char *where, const tool_grammar_limits *lim, grammar_node **out) {
    tg_ctx c;
    tg_init(&c, a, root ? root : schema, where, lim);
    *out = NULL;
    return tg_schema(&c, schema, out);
}

/* The response_format expression; no_lt / no_lb: strings never contain a raw '<' / '['. */
static int tg_response_format(grammar_ast *a, const json_value *rf, const tool_grammar_limits *lim,
                              bool no_lt, bool no_lb, grammar_node **out) {
    *out = NULL;
    const char *t;
    size_t tl;
    if (!rf || rf->type != JSON_OBJECT || !json_as_str(json_get(rf, "type"), &t, &tl))
        return err_set(ERR_INVAL, "response_format: must be an object with a \"type\" string");
    if (tg_is(t, tl, "text"))
        return 0;
    tg_ctx c;
    if (tg_is(t, tl, "json_object")) {
        tg_init(&c, a, NULL, "response_format", lim);
        c.no_lt = no_lt;
        c.no_lb = no_lb;
        json_value obj = {.type = JSON_OBJECT}; /* {"type": "object"} without members: a map */
        int rc = tg_object(&c, &obj, out);
        if (!rc && (grammar_ast_failed(a) || !*out))
            rc = tg_nomem(&c);
        return rc;
    }
    if (!tg_is(t, tl, "json_schema"))
        return err_set(ERR_UNSUPPORTED,
                       "response_format: type '%.*s' is not supported (text, "
                       "json_object, json_schema)",
                       (int)(tl > 40 ? 40 : tl), t);
    const json_value *js = json_get(rf, "json_schema");
    if (!js || js->type != JSON_OBJECT)
        return err_set(ERR_INVAL, "response_format.json_schema: must be an object");
    const json_value *schema = json_get(js, "schema");
    if (!schema || (schema->type != JSON_OBJECT && schema->type != JSON_BOOL))
        return err_set(ERR_INVAL, "response_format.json_schema.schema: must be a JSON schema "
                                  "object");
    tg_init(&c, a, schema, "response_format.json_schema.schema", lim);
    c.no_lt = no_lt;
    c.no_lb = no_lb;
    return tg_schema(&c, schema, out);
}

int tool_grammar_response_format(grammar_ast *a, const json_value *rf,
                                 const tool_grammar_limits *lim, grammar_node **out) {
    return tg_response_format(a, rf, lim, false, false, out);
}

static int tg_compile_once(const tool_grammar_spec *spec, const tool_grammar_limits *lim,
                           grammar_vocab *v, int32_t cap, grammar **out) {
    grammar_ast *a;
    grammar_node *content = NULL, *calls = NULL, *root;
    int rc = grammar_ast_create(&a);
    if (rc)
        return rc;
    if (spec->response_format)
        /* beside calls, content strings never hold the first byte of a call's markers */
        rc = tg_response_format(a, spec->response_format, lim, spec->tools != NULL,
                                spec->tools != NULL && tc_format_of(spec->format) &&
                                    tc_format_of(spec->format)->content_no_bracket,
                                &content);
    if (!rc && spec->tools)
        rc = tool_grammar_calls(a, spec->format, spec->tools, spec->name, lim, &calls);
    root = content && calls ? grammar_ast_alt2(a, content, calls) : content ? content : calls;
    if (!rc && root)
        rc = grammar_compile_capped(a, root, v, cap, out);
    grammar_ast_destroy(a);
    return rc;
}

/* The adaptive bounds (tool_grammar_limits_default). */
int tool_grammar_compile(const tool_grammar_spec *spec, const tool_grammar_limits *lim,
                         grammar_vocab *v, grammar **out) {
    tool_grammar_limits l;
    if (lim)
        l = *lim;
    else
        tool_grammar_limits_default(&l);
    *out = NULL;
    bool bounded = l.string_chars > 0 || l.items > 0 || l.any_string_chars > 0;
    int rc = tg_compile_once(spec, &l, v, bounded ? l.bounded_states : 0, out);
    if (rc != ERR_TOOLARGE || !bounded || l.bounded_states <= 0)
        return rc;
    l.string_chars = l.items = l.any_string_chars = 0;
    return tg_compile_once(spec, &l, v, 0, out);
}

int tool_grammar_compile_calls(chat_tool_format f, const json_value *tools, const char *name,
                               const tool_grammar_limits *lim, grammar_vocab *v, grammar **out) {
    tool_grammar_spec spec = {.tools = tools, .format = f, .name = name};
    if (!tools) {
        *out = NULL;
        return err_set(ERR_INVAL, "tools: not an array");
    }
    return tool_grammar_compile(&spec, lim, v, out);
}

int tool_grammar_compile_response_format(const json_value *rf, const tool_grammar_limits *lim,
                                         grammar_vocab *v, grammar **out) {
    tool_grammar_spec spec = {.response_format = rf};
    if (!rf) {
        *out = NULL;
        return err_set(ERR_INVAL, "response_format: must be an object with a \"type\" string");
    }
    return tool_grammar_compile(&spec, lim, v, out);
}
