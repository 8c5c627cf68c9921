/* SPDX-License-Identifier: MIT */
/*
 * ct_filters: jinja2's builtin filters, as the chat-template engine implements them,
 * with Hugging Face's tojson (json.dumps with ensure_ascii=False by default, indent, separators,
 * sort_keys) in place of jinja2's HTML-safe one.
 *
 * Each filter follows jinja2 3.1's definition (jinja2/filters.py), including its quirks: select,
 * reject, map, unique and items return generators (always true, no length, print oddly), default
 * only replaces undefined values unless its second argument is true, replace and join drop Markup,
 * trim/upper/lower keep it, int("42.5") is 42, round(3) stays an int. Arguments bind by position
 * or by the parameter names jinja2 uses. Filters that jinja2 has but this engine does not
 * (groupby, wordwrap, urlize, ...) fail with ERR_UNSUPPORTED naming the filter when evaluated.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    F_ABS,
    F_ATTR,
    F_BATCH,
    F_CAPITALIZE,
    F_CENTER,
    F_COUNT,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORCEESCAPE,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
};

static const struct {
    const char *name;
    int id;
    const char *params[5]; /* parameter names after the input, for keyword binding */
} filters[] = {
    {"abs", F_ABS, {NULL}},
    {"attr", F_ATTR, {"name"}},
    {"batch", F_BATCH, {"linecount", "fill_with"}},
    {"capitalize", F_CAPITALIZE, {NULL}},
    {"center", F_CENTER, {"width"}},
    {"count", F_COUNT, {NULL}},
    {"d", F_DEFAULT, {"default_value", "boolean"}},
    {"default", F_DEFAULT, {"default_value", "boolean"}},
    {"dictsort", F_DICTSORT, {"case_sensitive", "by", "reverse"}},
    {"e", F_ESCAPE, {NULL}},
    {"escape", F_ESCAPE, {NULL}},
    {"first", F_FIRST, {NULL}},
    {"float", F_FLOAT, {"default"}},
    {"forceescape", F_FORCEESCAPE, {NULL}},
    {"format", F_FORMAT, {NULL}},
    {"indent", F_INDENT, {"width", "first", "blank"}},
    {"int", F_INT, {"default", "base"}},
    {"items", F_ITEMS, {NULL}},
    {"join", F_JOIN, {"d", "attribute"}},
    {"last", F_LAST, {NULL}},
    {"length", F_LENGTH, {NULL}},
    {"list", F_LIST, {NULL}},
    {"lower", F_LOWER, {NULL}},
    {"map", F_MAP, {NULL}},
    {"max", F_MAX, {"case_sensitive", "attribute"}},
    {"min", F_MIN, {"case_sensitive", "attribute"}},
    {"reject", F_REJECT, {NULL}},
    {"rejectattr", F_REJECTATTR, {NULL}},
    {"replace", F_REPLACE, {"old", "new", "count"}},
    {"reverse", F_REVERSE, {NULL}},
    {"round", F_ROUND, {"precision", "method"}},
    {"safe", F_SAFE, {NULL}},
    {"select", F_SELECT, {NULL}},
    {"selectattr", F_SELECTATTR, {NULL}},
    {"sort", F_SORT, {"reverse", "case_sensitive", "attribute"}},
    {"string", F_STRING, {NULL}},
    {"sum", F_SUM, {"attribute", "start"}},
    {"title", F_TITLE, {NULL}},
    {"tojson", F_TOJSON, {"ensure_ascii", "indent", "separators", "sort_keys"}},
    {"trim", F_TRIM, {"chars"}},
    {"unique", F_UNIQUE, {"case_sensitive", "attribute"}},
    {"upper", F_UPPER, {NULL}},
    {"wordcount", F_WORDCOUNT, {NULL}},
};

/* jinja2 filters this engine does not implement. */
static const char *const unsupported_filters[] = {
    "filesizeformat", "groupby",   "pprint", "random",   "slice",   "striptags",
    "truncate",       "urlencode", "urlize", "wordwrap", "xmlattr", NULL,
};

static int filter_index(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (ct_name_is(name, len, filters[i].name))
            return (int)i;
    return -1;
}

int ct_filter_id(const char *name, size_t len, bool *known_unsupported) {
    *known_unsupported = false;
    int i = filter_index(name, len);
    if (i >= 0)
        return i;
    for (int k = 0; unsupported_filters[k]; k++)
        if (ct_name_is(name, len, unsupported_filters[k]))
            *known_unsupported = true;
    return -1;
}

bool ct_filter_needs_context(int fid) {
    if (fid < 0 || (size_t)fid >= sizeof filters / sizeof filters[0])
        return false;
    int id = filters[fid].id;
    return id == F_SELECT || id == F_REJECT || id == F_SELECTATTR || id == F_REJECTATTR ||
           id == F_MAP;
}

static int nomem(ct_rt *rt) {
    return ct_error(rt, ERR_NOMEM, "out of memory");
}

/* ---- argument binding ------------------------------------------------------------------------ */

typedef struct bound {
    ct_val v[5];
    bool has[5];
} bound;

static int bind(ct_rt *rt, int fi, const ct_val *args, size_t n_args, const char **kw_names,
                const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, bound *b) {
    memset(b, 0, sizeof *b);
    int np = 0;
    while (np < 5 && filters[fi].params[np])
        np++;
    if (n_args > (size_t)np)
        return ct_error(rt, ERR_INVAL, "filter '%s' takes at most %d argument(s) (%zu given)",
                        filters[fi].name, np, n_args);
    for (size_t i = 0; i < n_args; i++) {
        b->v[i] = args[i];
        b->has[i] = true;
    }
    for (size_t k = 0; k < n_kw; k++) {
        int i;
        for (i = 0; i < np; i++)
            if (ct_name_is(kw_names[k], kw_lens[k], filters[fi].params[i]))
                break;
        if (i == np)
            return ct_error(rt, ERR_INVAL, "filter '%s' got an unexpected keyword argument '%.*s'",
                            filters[fi].name, (int)kw_lens[k], kw_names[k]);
        if (b->has[i])
            return ct_error(rt, ERR_INVAL, "filter '%s' got multiple values for argument '%s'",
                            filters[fi].name, filters[fi].params[i]);
        b->v[i] = kw_vals[k];
        b->has[i] = true;
    }
    return 0;
}

static bool arg_bool(const bound *b, int i, bool dflt) {
    return b->has[i] ? ct_truthy(b->v[i]) : dflt;
}

static int arg_int(ct_rt *rt, const bound *b, int i, int64_t dflt, const char *what, int64_t *out) {
    if (!b->has[i]) {
        *out = dflt;
        return 0;
    }
    ct_val v = b->v[i];
    if (v.t == CT_INT || v.t == CT_BOOL) {
        *out = v.t == CT_BOOL ? v.b : v.i;
        return 0;
    }
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    return ct_error(rt, ERR_INVAL, "%s must be an integer, not %s", what, ct_type_name(v));
}

/* ---- shared helpers -------------------------------------------------------------------------- */

/* soft_str(): str(value) keeping Markup. */
static int soft_str(ct_rt *rt, ct_val v, ct_val *out) {
    return ct_stringify(rt, v, out);
}

/* jinja2 make_attrgetter: dotted path, digit parts as ints, each step environment.getitem. */
static int attr_get(ct_rt *rt, ct_val item, ct_val attr, ct_val *out) {
    if (attr.t != CT_STR) {
        if (attr.t == CT_NONE) {
            *out = item;
            return 0;
        }
        return ct_getitem(rt, item, attr, out);
    }
    const char *p = attr.s.p;
    size_t n = attr.s.n, i = 0;
    ct_val cur = item;
    for (;;) {
        size_t j = i;
        while (j < n && p[j] != '.')
            j++;
        bool digits = j > i;
        for (size_t k = i; k < j; k++)
            if (p[k] < '0' || p[k] > '9')
                digits = false;
        ct_val key;
        if (digits && j - i < 18) {
            int64_t v = 0;
            for (size_t k = i; k < j; k++)
                v = v * 10 + (p[k] - '0');
            key = ct_int(v);
        } else {
            key = ct_str(p + i, j - i);
        }
        int rc = ct_getitem(rt, cur, key, &cur);
        if (rc)
            return rc;
        if (j >= n)
            break;
        i = j + 1;
    }
    *out = cur;
    return 0;
}

/* ignore_case: lower() strings, leave the rest. */
static int ignore_case(ct_rt *rt, ct_val v, ct_val *out) {
    if (v.t != CT_STR) {
        *out = v;
        return 0;
    }
    strbuf sb;
    strbuf_init(&sb);
    ct_py_lower(&sb, v.s.p, v.s.n);
    return ct_str_take(rt, &sb, v.kind, out);
}

/* Key for sort/min/max/unique: attribute path(s) (comma-separated for sort), then ignore_case. */
static int sort_key(ct_rt *rt, ct_val item, ct_val attr, bool multi, bool case_sensitive,
                    ct_val *out) {
    int rc;
    if (multi && attr.t == CT_STR && memchr(attr.s.p, ',', attr.s.n)) {
        size_t parts = 1;
        for (size_t i = 0; i < attr.s.n; i++)
            parts += attr.s.p[i] == ',';
        if ((rc = ct_list_new(rt, parts, CT_SEQ_LIST, out)))
            return rc;
        size_t start = 0, k = 0;
        for (size_t i = 0; i <= attr.s.n; i++) {
            if (i == attr.s.n || attr.s.p[i] == ',') {
                ct_val v;
                if ((rc = attr_get(rt, item, ct_str(attr.s.p + start, i - start), &v)))
                    return rc;
                if (!case_sensitive && (rc = ignore_case(rt, v, &v)))
                    return rc;
                out->l->items[k++] = v;
                start = i + 1;
            }
        }
        return 0;
    }
    ct_val v = item;
    if (attr.t != CT_NONE && attr.t != CT_UNDEF && (rc = attr_get(rt, item, attr, &v)))
        return rc;
    if (!case_sensitive)
        return ignore_case(rt, v, out);
    *out = v;
    return 0;
}

/* Stable merge sort of idx[0..n) by keys (Python's sorted: only '<' is used). */
static int merge_sort(ct_rt *rt, size_t *idx, size_t *tmp, size_t n, const ct_val *keys,
                      bool reverse) {
    if (n < 2)
        return 0;
    size_t h = n / 2;
    int rc;
    if ((rc = merge_sort(rt, idx, tmp, h, keys, reverse)) ||
        (rc = merge_sort(rt, idx + h, tmp, n - h, keys, reverse)))
        return rc;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        /* take from the right only when right < left (or left < right when reversed) */
        if (reverse)
            rc = ct_compare(rt, keys[idx[i]], keys[idx[j]], "<", &c);
        else
            rc = ct_compare(rt, keys[idx[j]], keys[idx[i]], "<", &c);
        if (rc)
            return rc;
        if (c == -1)
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return ct_charge(rt, n);
}

static int sorted_values(ct_rt *rt, const ct_val *items, size_t n, const ct_val *keys, bool reverse,
                         ct_val *out) {
    size_t *idx = arena_alloc(rt->a, (n ? n : 1) * sizeof *idx);
    size_t *tmp = arena_alloc(rt->a, (n ? n : 1) * sizeof *tmp);
    if (!idx || !tmp)
        return nomem(rt);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    int rc;
    if ((rc = merge_sort(rt, idx, tmp, n, keys, reverse)) ||
        (rc = ct_list_new(rt, n, CT_SEQ_LIST, out)))
        return rc;
    for (size_t i = 0; i < n; i++)
        out->l->items[i] = items[idx[i]];
    return 0;
}

/* Python str.splitlines() boundaries. */
static size_t line_break(const char *p, size_t n, size_t i, size_t *brk_len) {
    unsigned char c = (unsigned char)p[i];
    if (c == '\r') {
        *brk_len = (i + 1 < n && p[i + 1] == '\n') ? 2 : 1;
        return 1;
    }
    if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
        *brk_len = 1;
        return 1;
    }
    if (c == 0xC2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) {
        *brk_len = 2;
        return 1;
    }
    if (c == 0xE2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
        ((unsigned char)p[i + 2] == 0xA8 || (unsigned char)p[i + 2] == 0xA9)) {
        *brk_len = 3;
        return 1;
    }
    return 0;
}

/* ---- individual filters ---------------------------------------------------------------------- */

static int f_indent(ct_rt *rt, ct_val s, const bound *b, ct_val *out) {
    int rc;
    ct_val ind;
    if (b->has[0] && b->v[0].t == CT_STR) {
        ind = b->v[0];
    } else {
        int64_t w;
        if ((rc = arg_int(rt, b, 0, 4, "indent width", &w)))
            return rc;
        if (w < 0)
            w = 0;
        if (w > 4096)
            return ct_error(rt, ERR_TOOLARGE, "indent width %" PRId64 " too large", w);
        char *sp = arena_alloc(rt->a, (size_t)w + 1);
        if (!sp)
            return nomem(rt);
        memset(sp, ' ', (size_t)w);
        ind = ct_str(sp, (size_t)w);
    }
    bool first = arg_bool(b, 1, false), blank = arg_bool(b, 2, false);
    /* jinja2 does `s += "\n"`: only strings are accepted */
    if (s.t == CT_UNDEF)
        return ct_undef_fail(rt, s);
    if (s.t == CT_LIST && s.kind == CT_SEQ_LIST) /* list += "\n" extends, then splitlines fails */
        return ct_error(rt, ERR_INVAL, "'list' object has no attribute 'splitlines'");
    if (s.t != CT_STR)
        return ct_error(rt, ERR_INVAL, "unsupported operand type(s) for +=: '%s' and 'str'",
                        ct_type_name(s));
    /* s += "\n"; lines = s.splitlines() */
    strbuf src;
    strbuf_init(&src);
    strbuf_append(&src, s.s.p, s.s.n);
    strbuf_putc(&src, '\n');
    strbuf sb;
    strbuf_init(&sb);
    if (first)
        strbuf_append(&sb, ind.s.p, ind.s.n);
    size_t i = 0, line_start = 0, line_no = 0;
    while (i < src.len) {
        size_t bl;
        if (line_break(src.data, src.len, i, &bl)) {
            size_t len = i - line_start;
            if (line_no > 0) {
                strbuf_putc(&sb, '\n');
                if (blank || len > 0)
                    strbuf_append(&sb, ind.s.p, ind.s.n);
            }
            strbuf_append(&sb, src.data + line_start, len);
            line_no++;
            i += bl;
            line_start = i;
        } else {
            i++;
        }
    }
    strbuf_deinit(&src);
    return ct_str_take(rt, &sb, s.kind, out);
}

static int f_replace(ct_rt *rt, ct_val s, const bound *b, ct_val *out) {
    int rc;
    ct_val old, nw;
    if (!b->has[0] || !b->has[1])
        return ct_error(rt, ERR_INVAL, "replace() missing required arguments 'old' and 'new'");
    int64_t count = -1;
    if (b->has[2] && b->v[2].t != CT_NONE && (rc = arg_int(rt, b, 2, -1, "count", &count)))
        return rc;
    if ((rc = ct_stringify(rt, s, &s)) || (rc = ct_stringify(rt, b->v[0], &old)) ||
        (rc = ct_stringify(rt, b->v[1], &nw)))
        return rc;
    return ct_str_replace(rt, s, old, nw, count, 0, out);
}

static int f_tojson(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    ct_dumps_opts o = {
        .ensure_ascii = arg_bool(b, 0, false), .sort_keys = arg_bool(b, 3, false), .indent = -1};
    int rc;
    if (b->has[1] && b->v[1].t != CT_NONE) {
        ct_val ind = b->v[1];
        if (ind.t == CT_STR) {
            o.indent_s = ind.s.p;
            o.indent_n = ind.s.n;
        } else if (ind.t == CT_INT || ind.t == CT_BOOL) {
            int64_t w = ind.t == CT_BOOL ? ind.b : ind.i;
            o.indent = w < 0 ? 0 : w > 256 ? 256 : (int)w;
        } else {
            return ct_error(rt, ERR_INVAL, "tojson indent must be an int or a string, not %s",
                            ct_type_name(ind));
        }
    }
    bool pretty = o.indent_s || o.indent >= 0;
    o.item_sep = pretty ? "," : ", ";
    o.item_sep_n = pretty ? 1 : 2;
    o.key_sep = ": ";
    o.key_sep_n = 2;
    if (b->has[2] && b->v[2].t != CT_NONE) {
        ct_val sep = b->v[2];
        if (sep.t != CT_LIST || sep.l->n != 2 || sep.l->items[0].t != CT_STR ||
            sep.l->items[1].t != CT_STR)
            return ct_error(rt, ERR_INVAL, "tojson separators must be a pair of strings");
        o.item_sep = sep.l->items[0].s.p;
        o.item_sep_n = sep.l->items[0].s.n;
        o.key_sep = sep.l->items[1].s.p;
        o.key_sep_n = sep.l->items[1].s.n;
    }
    strbuf sb;
    strbuf_init(&sb);
    if ((rc = ct_dumps(rt, v, &o, &sb))) {
        strbuf_deinit(&sb);
        return rc;
    }
    return ct_str_take(rt, &sb, 0, out);
}

static int f_int(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    int64_t base = 10;
    int rc;
    if ((rc = arg_int(rt, b, 1, 10, "base", &base)))
        return rc;
    ct_val dflt = b->has[0] ? b->v[0] : ct_int(0);
    switch (v.t) {
    case CT_INT:
        *out = v;
        return 0;
    case CT_BOOL:
        *out = ct_int(v.b);
        return 0;
    case CT_FLOAT:
        if (isnan(v.f)) {
            *out = dflt;
            return 0;
        }
        if (isinf(v.f) || fabs(v.f) >= 9.2e18)
            return ct_error(rt, ERR_RANGE, "cannot convert float %g to integer", v.f);
        *out = ct_int((int64_t)v.f);
        return 0;
    case CT_UNDEF:
        return ct_undef_fail(rt, v);
    case CT_STR: {
        char buf[128];
        size_t off, len;
        ct_py_strip(v.s.p, v.s.n, NULL, 0, 3, &off, &len);
        if (len == 0 || len >= sizeof buf) {
            *out = dflt;
            return 0;
        }
        size_t k = 0;
        const char *p = v.s.p + off;
        for (size_t i = 0; i < len; i++) {
            if (p[i] == '_') {
                if (i == 0 || i + 1 == len || p[i + 1] == '_')
                    goto try_float;
                continue;
            }
            buf[k++] = p[i];
        }
        buf[k] = 0;
        {
            char *end;
            errno = 0;
            const char *q = buf;
            if (base == 10 && (strchr(q, 'x') || strchr(q, 'X')))
                goto try_float;
            long long r = strtoll(q, &end, (int)base);
            if (*end == 0 && end != q && !errno) {
                *out = ct_int(r);
                return 0;
            }
        }
    try_float:
        if (len < sizeof buf && !memchr(v.s.p + off, 'x', len) && !memchr(v.s.p + off, 'X', len)) {
            memcpy(buf, v.s.p + off, len);
            buf[len] = 0;
            char *end;
            double d = strtod(buf, &end);
            if (*end == 0 && end != buf && isfinite(d) && fabs(d) < 9.2e18) {
                *out = ct_int((int64_t)d);
                return 0;
            }
        }
        *out = dflt;
        return 0;
    }
    default:
        *out = dflt;
        return 0;
    }
}

static int f_float(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    ct_val dflt = b->has[0] ? b->v[0] : ct_float(0.0);
    switch (v.t) {
    case CT_FLOAT:
        *out = v;
        return 0;
    case CT_INT:
        *out = ct_float((double)v.i);
        return 0;
    case CT_BOOL:
        *out = ct_float(v.b);
        return 0;
    case CT_UNDEF:
        return ct_undef_fail(rt, v);
    case CT_STR: {
        char buf[128];
        size_t off, len;
        ct_py_strip(v.s.p, v.s.n, NULL, 0, 3, &off, &len);
        if (len == 0 || len >= sizeof buf || memchr(v.s.p + off, 'x', len) ||
            memchr(v.s.p + off, 'X', len)) {
            *out = dflt;
            return 0;
        }
        memcpy(buf, v.s.p + off, len);
        buf[len] = 0;
        char *end;
        double d = strtod(buf, &end);
        if (*end == 0 && end != buf) {
            *out = ct_float(d);
            return 0;
        }
        *out = dflt;
        return 0;
    }
    default:
        *out = dflt;
        return 0;
    }
}

static int f_round(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    int64_t prec;
    int rc;
    if ((rc = arg_int(rt, b, 0, 0, "precision", &prec)))
        return rc;
    const char *method = "common";
    if (b->has[1]) {
        ct_val m = b->v[1];
        if (m.t == CT_STR && ct_name_is(m.s.p, m.s.n, "ceil"))
            method = "ceil";
        else if (m.t == CT_STR && ct_name_is(m.s.p, m.s.n, "floor"))
            method = "floor";
        else if (!(m.t == CT_STR && ct_name_is(m.s.p, m.s.n, "common")))
            return ct_error(rt, ERR_INVAL, "method must be common, ceil or floor");
    }
    if (!ct_is_num(v))
        return ct_error(rt, ERR_INVAL, "type %s doesn't define __round__ method", ct_type_name(v));
    if (method[0] == 'c' && method[1] == 'o') {
        if (v.t != CT_FLOAT) {
            *out = ct_int(v.t == CT_BOOL ? v.b : v.i); /* round(int, n) stays an int */
            return 0;
        }
        if (!isfinite(v.f) || prec > 300 || prec < -300) {
            *out = v;
            return 0;
        }
        if (prec >= 0) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, v.f);
            *out = ct_float(strtod(buf, NULL));
        } else {
            double m = pow(10.0, (double)-prec);
            *out = ct_float(nearbyint(v.f / m) * m);
        }
        return 0;
    }
    double x = v.t == CT_FLOAT ? v.f : (double)(v.t == CT_BOOL ? v.b : v.i);
    double m = pow(10.0, (double)prec);
    *out = ct_float((method[0] == 'c' ? ceil(x * m) : floor(x * m)) / m);
    return 0;
}

static int f_join(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    ct_val d = ct_str("", 0);
    if (b->has[0] && (rc = ct_stringify(rt, b->v[0], &d)))
        return rc;
    strbuf sb;
    strbuf_init(&sb);
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            strbuf_append(&sb, d.s.p, d.s.n);
        ct_val item = items[i];
        if (b->has[1] && b->v[1].t != CT_NONE)
            rc = attr_get(rt, item, b->v[1], &item);
        if (!rc)
            rc = ct_to_str(rt, item, &sb);
        if (!rc && sb.len > CT_MAX_OUTPUT)
            rc = ct_error(rt, ERR_TOOLARGE, "join result exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    }
    if (rc) {
        strbuf_deinit(&sb);
        return rc;
    }
    return ct_str_take(rt, &sb, 0, out);
}

/* select / reject / selectattr / rejectattr */
static int f_select(ct_rt *rt, int id, ct_val v, const ct_val *args, size_t n_args,
                    const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                    size_t n_kw, ct_val *out) {
    bool attr = id == F_SELECTATTR || id == F_REJECTATTR;
    bool want = id == F_SELECT || id == F_SELECTATTR;
    int rc;
    (void)kw_names;
    (void)kw_lens;
    (void)kw_vals;
    if (n_kw)
        return ct_error(rt, ERR_UNSUPPORTED, "keyword arguments to select/reject filters");
    if (!ct_truthy(v))
        return ct_list_new(rt, 0, CT_SEQ_GEN, out);
    if (attr && n_args < 1)
        return ct_error(rt, ERR_INVAL, "Missing parameter for attribute name");
    size_t off = attr ? 1 : 0;
    const ct_val *items;
    size_t n;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    ct_val *kept = arena_alloc(rt->a, (n ? n : 1) * sizeof *kept);
    if (!kept)
        return nomem(rt);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        ct_val x = items[i];
        if (attr && (rc = attr_get(rt, x, args[0], &x)))
            return rc;
        bool r;
        if (n_args > off) {
            ct_val tn = args[off];
            if (tn.t != CT_STR)
                return ct_error(rt, ERR_INVAL, "test name must be a string");
            if ((rc = ct_test_by_name(rt, tn.s.p, tn.s.n, x, args + off + 1, n_args - off - 1, &r)))
                return rc;
        } else {
            r = ct_truthy(x);
        }
        if (r == want)
            kept[k++] = items[i];
    }
    if ((rc = ct_list_new(rt, k, CT_SEQ_GEN, out)))
        return rc;
    if (k)
        memcpy(out->l->items, kept, k * sizeof *kept);
    return ct_charge(rt, n);
}

static int filter_call(ct_rt *rt, int fi, ct_val v, const ct_val *args, size_t n_args,
                       const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                       size_t n_kw, ct_val *out);

static int f_map(ct_rt *rt, ct_val v, const ct_val *args, size_t n_args, const char **kw_names,
                 const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if ((rc = ct_iterate(rt, v, &items, &n)) || (rc = ct_list_new(rt, n, CT_SEQ_GEN, out)))
        return rc;
    if (n_args == 0) {
        ct_val attr = ct_none(), dflt = ct_none();
        bool has_attr = false;
        for (size_t k = 0; k < n_kw; k++) {
            if (ct_name_is(kw_names[k], kw_lens[k], "attribute")) {
                attr = kw_vals[k];
                has_attr = true;
            } else if (ct_name_is(kw_names[k], kw_lens[k], "default")) {
                dflt = kw_vals[k];
            } else {
                return ct_error(rt, ERR_INVAL, "Unexpected keyword argument '%.*s'",
                                (int)kw_lens[k], kw_names[k]);
            }
        }
        if (!has_attr)
            return ct_error(rt, ERR_INVAL, "map requires a filter argument");
        for (size_t i = 0; i < n; i++) {
            ct_val x;
            if ((rc = attr_get(rt, items[i], attr, &x)))
                return rc;
            if (dflt.t != CT_NONE && x.t == CT_UNDEF)
                x = dflt;
            out->l->items[i] = x;
        }
        return ct_charge(rt, n);
    }
    if (args[0].t != CT_STR)
        return ct_error(rt, ERR_INVAL, "map filter name must be a string");
    int fi = filter_index(args[0].s.p, args[0].s.n);
    if (fi < 0)
        return ct_error(rt, ERR_INVAL, "No filter named '%.*s'.", (int)args[0].s.n, args[0].s.p);
    for (size_t i = 0; i < n; i++)
        if ((rc = filter_call(rt, fi, items[i], args + 1, n_args - 1, kw_names, kw_lens, kw_vals,
                              n_kw, &out->l->items[i])))
            return rc;
    return ct_charge(rt, n);
}

static int f_minmax(ct_rt *rt, ct_val v, const bound *b, bool is_max, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    if (n == 0) {
        *out = ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(),
                             "No aggregated item, sequence was empty.");
        return 0;
    }
    bool cs = arg_bool(b, 0, false);
    ct_val attr = b->has[1] ? b->v[1] : ct_none();
    size_t best = 0;
    ct_val best_key;
    if ((rc = sort_key(rt, items[0], attr, false, cs, &best_key)))
        return rc;
    for (size_t i = 1; i < n; i++) {
        ct_val k;
        int c;
        if ((rc = sort_key(rt, items[i], attr, false, cs, &k)))
            return rc;
        /* Python's max replaces when item > best, min when item < best (first one wins) */
        rc = ct_compare(rt, k, best_key, is_max ? ">" : "<", &c);
        if (rc)
            return rc;
        if (c == (is_max ? 1 : -1)) {
            best = i;
            best_key = k;
        }
    }
    *out = items[best];
    return ct_charge(rt, n);
}

static int f_unique(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    bool cs = arg_bool(b, 0, false);
    ct_val attr = b->has[1] ? b->v[1] : ct_none();
    ct_val *keys = arena_alloc(rt->a, (n ? n : 1) * sizeof *keys);
    ct_val *kept = arena_alloc(rt->a, (n ? n : 1) * sizeof *kept);
    if (!keys || !kept)
        return nomem(rt);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        ct_val key;
        if ((rc = sort_key(rt, items[i], attr, false, cs, &key)) || (rc = ct_hash_check(rt, key)))
            return rc;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            if ((rc = ct_equal(rt, keys[j], key, &seen)))
                return rc;
        if (!seen) {
            keys[k] = key;
            kept[k++] = items[i];
        }
        if ((rc = ct_charge(rt, k)))
            return rc;
    }
    if ((rc = ct_list_new(rt, k, CT_SEQ_GEN, out)))
        return rc;
    if (k)
        memcpy(out->l->items, kept, k * sizeof *kept);
    return 0;
}

static int f_dictsort(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    int rc;
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    if (v.t != CT_DICT)
        return ct_error(rt, ERR_INVAL, "'%s' object has no attribute 'items'", ct_type_name(v));
    bool cs = arg_bool(b, 0, false), rev = arg_bool(b, 2, false);
    int pos = 0;
    if (b->has[1]) {
        ct_val by = b->v[1];
        if (by.t == CT_STR && ct_name_is(by.s.p, by.s.n, "value"))
            pos = 1;
        else if (!(by.t == CT_STR && ct_name_is(by.s.p, by.s.n, "key")))
            return ct_error(rt, ERR_INVAL, "You can only sort by either \"key\" or \"value\"");
    }
    size_t n = v.d->n;
    ct_val *pairs = arena_alloc(rt->a, (n ? n : 1) * sizeof *pairs);
    ct_val *keys = arena_alloc(rt->a, (n ? n : 1) * sizeof *keys);
    if (!pairs || !keys)
        return nomem(rt);
    for (size_t i = 0; i < n; i++) {
        if ((rc = ct_list_new(rt, 2, CT_SEQ_TUPLE, &pairs[i])))
            return rc;
        pairs[i].l->items[0] = v.d->keys[i];
        pairs[i].l->items[1] = v.d->vals[i];
        keys[i] = pos ? v.d->vals[i] : v.d->keys[i];
        if (!cs && (rc = ignore_case(rt, keys[i], &keys[i])))
            return rc;
    }
    return sorted_values(rt, pairs, n, keys, rev, out);
}

static int f_sort(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    bool rev = arg_bool(b, 0, false), cs = arg_bool(b, 1, false);
    ct_val attr = b->has[2] ? b->v[2] : ct_none();
    ct_val *keys = arena_alloc(rt->a, (n ? n : 1) * sizeof *keys);
    if (!keys)
        return nomem(rt);
    for (size_t i = 0; i < n; i++)
        if ((rc = sort_key(rt, items[i], attr, true, cs, &keys[i])))
            return rc;
    return sorted_values(rt, items, n, keys, rev, out);
}

static int f_items(ct_rt *rt, ct_val v, ct_val *out) {
    if (v.t == CT_UNDEF)
        return ct_list_new(rt, 0, CT_SEQ_GEN, out);
    if (v.t != CT_DICT)
        return ct_error(rt, ERR_INVAL, "Can only get item pairs from a mapping.");
    int rc = ct_list_new(rt, v.d->n, CT_SEQ_GEN, out);
    for (size_t i = 0; i < v.d->n && !rc; i++) {
        ct_val pair;
        if (!(rc = ct_list_new(rt, 2, CT_SEQ_TUPLE, &pair))) {
            pair.l->items[0] = v.d->keys[i];
            pair.l->items[1] = v.d->vals[i];
            out->l->items[i] = pair;
        }
    }
    return rc;
}

static int f_sum(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    ct_val acc = b->has[1] ? b->v[1] : ct_int(0);
    for (size_t i = 0; i < n; i++) {
        ct_val x = items[i];
        if (b->has[0] && b->v[0].t != CT_NONE && (rc = attr_get(rt, x, b->v[0], &x)))
            return rc;
        /* sum() is repeated `+`; reuse the operator through a tiny expression-free path */
        if (ct_is_num(acc) && ct_is_num(x)) {
            if (acc.t != CT_FLOAT && x.t != CT_FLOAT) {
                int64_t r;
                if (__builtin_add_overflow(acc.t == CT_BOOL ? acc.b : acc.i,
                                           x.t == CT_BOOL ? x.b : x.i, &r))
                    return ct_error(rt, ERR_RANGE, "integer sum does not fit in 64 bits");
                acc = ct_int(r);
            } else {
                double a = acc.t == CT_FLOAT ? acc.f : (double)(acc.t == CT_BOOL ? acc.b : acc.i);
                double c = x.t == CT_FLOAT ? x.f : (double)(x.t == CT_BOOL ? x.b : x.i);
                acc = ct_float(a + c);
            }
        } else if (x.t == CT_UNDEF) {
            return ct_undef_fail(rt, x);
        } else {
            return ct_error(rt, ERR_INVAL, "unsupported operand type(s) for +: '%s' and '%s'",
                            ct_type_name(acc), ct_type_name(x));
        }
    }
    *out = acc;
    return 0;
}

static int f_batch(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    int64_t cnt;
    int rc;
    if (!b->has[0])
        return ct_error(rt, ERR_INVAL, "batch() missing required argument 'linecount'");
    if ((rc = arg_int(rt, b, 0, 1, "linecount", &cnt)))
        return rc;
    if (cnt <= 0)
        return ct_error(rt, ERR_INVAL, "batch linecount must be positive");
    const ct_val *items;
    size_t n;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return rc;
    size_t groups = (n + (size_t)cnt - 1) / (size_t)cnt;
    if ((rc = ct_list_new(rt, groups, CT_SEQ_GEN, out)))
        return rc;
    bool fill = b->has[1] && b->v[1].t != CT_NONE;
    for (size_t g = 0; g < groups; g++) {
        size_t start = g * (size_t)cnt, len = n - start < (size_t)cnt ? n - start : (size_t)cnt;
        size_t total = fill ? (size_t)cnt : len;
        ct_val row;
        if ((rc = ct_list_new(rt, total, CT_SEQ_LIST, &row)))
            return rc;
        for (size_t i = 0; i < total; i++)
            row.l->items[i] = i < len ? items[start + i] : b->v[1];
        out->l->items[g] = row;
    }
    return ct_charge(rt, n);
}

static int f_case(ct_rt *rt, int id, ct_val v, ct_val *out) {
    int rc;
    if ((rc = soft_str(rt, v, &v)))
        return rc;
    strbuf sb;
    strbuf_init(&sb);
    switch (id) {
    case F_LOWER:
        ct_py_lower(&sb, v.s.p, v.s.n);
        break;
    case F_UPPER:
        ct_py_upper(&sb, v.s.p, v.s.n);
        break;
    case F_CAPITALIZE:
        ct_py_capitalize(&sb, v.s.p, v.s.n);
        break;
    default: { /* title: split on [-\s({\[<]+ runs, first char upper, rest lower */
        size_t i = 0;
        bool start = true;
        while (i < v.s.n) {
            size_t s = i;
            uint32_t cp = ct_utf8_next(v.s.p, v.s.n, &i);
            bool sep =
                ct_py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            if (sep) {
                strbuf_append(&sb, v.s.p + s, i - s);
                start = true;
            } else if (start) {
                ct_py_upper(&sb, v.s.p + s, i - s);
                start = false;
            } else {
                ct_py_lower(&sb, v.s.p + s, i - s);
            }
        }
    }
    }
    return ct_str_take(rt, &sb, v.kind, out);
}

static int f_escape(ct_rt *rt, ct_val v, bool force, ct_val *out) {
    int rc;
    if (v.t == CT_STR && v.kind && !force) {
        *out = v;
        return 0;
    }
    if ((rc = ct_stringify(rt, v, &v)))
        return rc;
    strbuf sb;
    strbuf_init(&sb);
    ct_html_escape(&sb, v.s.p, v.s.n);
    return ct_str_take(rt, &sb, 1, out);
}

static int f_center(ct_rt *rt, ct_val v, const bound *b, ct_val *out) {
    int64_t w;
    int rc;
    if ((rc = arg_int(rt, b, 0, 80, "width", &w)) || (rc = soft_str(rt, v, &v)))
        return rc;
    int64_t len = (int64_t)ct_utf8_count(v.s.p, v.s.n);
    if (w > 1 << 20)
        return ct_error(rt, ERR_TOOLARGE, "center width too large");
    if (w <= len) {
        *out = v;
        return 0;
    }
    int64_t marg = w - len, left = marg / 2 + (marg & w & 1);
    strbuf sb;
    strbuf_init(&sb);
    for (int64_t i = 0; i < left; i++)
        strbuf_putc(&sb, ' ');
    strbuf_append(&sb, v.s.p, v.s.n);
    for (int64_t i = 0; i < marg - left; i++)
        strbuf_putc(&sb, ' ');
    return ct_str_take(rt, &sb, v.kind, out);
}

static int f_wordcount(ct_rt *rt, ct_val v, ct_val *out) {
    int rc;
    if ((rc = soft_str(rt, v, &v)))
        return rc;
    int64_t words = 0;
    bool in_word = false;
    size_t i = 0;
    while (i < v.s.n) {
        uint32_t cp = ct_utf8_next(v.s.p, v.s.n, &i);
        bool w = cp == '_' || (cp >= '0' && cp <= '9') || ct_is_alpha_cp(cp);
        if (w && !in_word)
            words++;
        in_word = w;
    }
    *out = ct_int(words);
    return 0;
}

static int f_reverse(ct_rt *rt, ct_val v, ct_val *out) {
    int rc;
    if (v.t == CT_STR) {
        strbuf sb;
        strbuf_init(&sb);
        size_t e = v.s.n;
        while (e > 0) {
            size_t s = e - 1;
            while (s > 0 && ((unsigned char)v.s.p[s] & 0xC0) == 0x80)
                s--;
            strbuf_append(&sb, v.s.p + s, e - s);
            e = s;
        }
        return ct_str_take(rt, &sb, v.kind, out);
    }
    const ct_val *items;
    size_t n;
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return ct_error(rt, ERR_INVAL, "argument must be iterable");
    int kind = (v.t == CT_LIST && v.kind == CT_SEQ_GEN) ? CT_SEQ_LIST : CT_SEQ_GEN;
    if ((rc = ct_list_new(rt, n, kind, out)))
        return rc;
    for (size_t i = 0; i < n; i++)
        out->l->items[i] = items[n - 1 - i];
    return 0;
}

/* jinja2's select/reject/map/unique/items/batch are generators: a TypeError or UndefinedError in
 * them surfaces only when the result is consumed. They are computed eagerly here (they have no
 * side effects), and such an error is parked in an empty generator that raises it when iterated. */
static int lazy(ct_rt *rt, int rc, ct_val *out) {
    if (rc != ERR_INVAL)
        return rc;
    const char *d = err_detail();
    char *msg = arena_strndup(rt->a, d, strlen(d));
    if (!msg || (rc = ct_list_new(rt, 0, CT_SEQ_GEN, out)))
        return msg ? rc : nomem(rt);
    out->l->pending = msg;
    err_clear();
    return 0;
}

static int filter_call_inner(ct_rt *rt, int fi, ct_val v, const ct_val *args, size_t n_args,
                             const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                             size_t n_kw, ct_val *out);

/* Names the Python generator or iterator a filter returns, for repr() and error messages. */
static int filter_call(ct_rt *rt, int fi, ct_val v, const ct_val *args, size_t n_args,
                       const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                       size_t n_kw, ct_val *out) {
    int rc = filter_call_inner(rt, fi, v, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out);
    if (rc || out->t != CT_LIST || out->kind != CT_SEQ_GEN || out->l->gen_type)
        return rc;
    const char *func = NULL, *type = "generator";
    switch (filters[fi].id) {
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR:
        func = "select_or_reject";
        break;
    case F_MAP:
        func = "sync_do_map";
        break;
    case F_UNIQUE:
        func = "sync_do_unique";
        break;
    case F_ITEMS:
        func = "do_items";
        break;
    case F_BATCH:
        func = "do_batch";
        break;
    case F_REVERSE:
        type = v.t == CT_DICT                              ? "dict_reversekeyiterator"
               : (v.t == CT_LIST && v.kind == CT_SEQ_LIST) ? "list_reverseiterator"
                                                           : "reversed";
        break;
    default:
        break;
    }
    out->l->gen_type = type;
    out->l->gen_func = func;
    return 0;
}

static int filter_call_inner(ct_rt *rt, int fi, ct_val v, const ct_val *args, size_t n_args,
                             const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                             size_t n_kw, ct_val *out) {
    int id = filters[fi].id;
    int rc;
    switch (id) {
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR:
        return lazy(rt, f_select(rt, id, v, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out),
                    out);
    case F_MAP:
        if (!ct_truthy(v))
            return ct_list_new(rt, 0, CT_SEQ_GEN, out);
        return lazy(rt, f_map(rt, v, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out), out);
    case F_FORMAT: {
        if (n_args && n_kw)
            return ct_error(rt, ERR_INVAL,
                            "can't handle positional and keyword arguments at "
                            "the same time");
        if (n_kw)
            return ct_error(rt, ERR_UNSUPPORTED, "format filter with keyword arguments");
        ct_val tup;
        if ((rc = soft_str(rt, v, &v)) || (rc = ct_list_new(rt, n_args, CT_SEQ_TUPLE, &tup)))
            return rc;
        for (size_t i = 0; i < n_args; i++)
            tup.l->items[i] = args[i];
        return ct_str_percent(rt, v, tup, out);
    }
    default:
        break;
    }
    bound b;
    if ((rc = bind(rt, fi, args, n_args, kw_names, kw_lens, kw_vals, n_kw, &b)))
        return rc;
    switch (id) {
    case F_ABS:
        if (v.t == CT_INT || v.t == CT_BOOL) {
            int64_t i = v.t == CT_BOOL ? v.b : v.i;
            if (i == INT64_MIN)
                return ct_error(rt, ERR_RANGE, "abs() overflows 64 bits");
            *out = ct_int(i < 0 ? -i : i);
        } else if (v.t == CT_FLOAT) {
            *out = ct_float(fabs(v.f));
        } else {
            return ct_error(rt, ERR_INVAL, "bad operand type for abs(): '%s'", ct_type_name(v));
        }
        return 0;
    case F_ATTR: {
        /* Python getattr only: dict keys are not attributes */
        if (!b.has[0] || b.v[0].t != CT_STR)
            return ct_error(rt, ERR_INVAL, "attr filter needs an attribute name");
        if (v.t == CT_NS || v.t == CT_LOOP || v.t == CT_UNDEF)
            return ct_getattr(rt, v, b.v[0].s.p, b.v[0].s.n, out);
        bool unsafe = false;
        if (ct_method_lookup(rt, v, b.v[0].s.p, b.v[0].s.n, out, &unsafe) && !unsafe)
            return 0;
        *out = ct_undef_make(rt, CT_UNDEF_ATTR, ct_obj_type_repr(v), b.v[0], NULL);
        return 0;
    }
    case F_BATCH:
        return lazy(rt, f_batch(rt, v, &b, out), out);
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE:
        return f_case(rt, id, v, out);
    case F_CENTER:
        return f_center(rt, v, &b, out);
    case F_COUNT:
    case F_LENGTH: {
        int64_t n;
        if ((rc = ct_length(rt, v, &n)))
            return rc;
        *out = ct_int(n);
        return 0;
    }
    case F_DEFAULT: {
        bool boolean = arg_bool(&b, 1, false);
        if (v.t == CT_UNDEF || (boolean && !ct_truthy(v)))
            *out = b.has[0] ? b.v[0] : ct_str("", 0);
        else
            *out = v;
        return 0;
    }
    case F_DICTSORT:
        return f_dictsort(rt, v, &b, out);
    case F_ESCAPE:
        return f_escape(rt, v, false, out);
    case F_FORCEESCAPE:
        return f_escape(rt, v, true, out);
    case F_FIRST:
    case F_LAST: {
        const ct_val *items;
        size_t n;
        /* last is next(reversed(seq)): generators and scalars are not reversible */
        if (id == F_LAST && !(v.t == CT_STR || v.t == CT_DICT || v.t == CT_UNDEF ||
                              (v.t == CT_LIST && v.kind != CT_SEQ_GEN)))
            return ct_error(rt, ERR_INVAL, "'%s' object is not reversible", ct_type_name(v));
        if ((rc = ct_iterate(rt, v, &items, &n)))
            return rc;
        if (n == 0) {
            *out = ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(),
                                 id == F_FIRST ? "No first item, sequence was empty."
                                               : "No last item, sequence was empty.");
            return 0;
        }
        *out = items[id == F_FIRST ? 0 : n - 1];
        return 0;
    }
    case F_FLOAT:
        return f_float(rt, v, &b, out);
    case F_INDENT:
        return f_indent(rt, v, &b, out);
    case F_INT:
        return f_int(rt, v, &b, out);
    case F_ITEMS:
        return lazy(rt, f_items(rt, v, out), out);
    case F_JOIN:
        return f_join(rt, v, &b, out);
    case F_LIST: {
        const ct_val *items;
        size_t n;
        if ((rc = ct_iterate(rt, v, &items, &n)) || (rc = ct_list_new(rt, n, CT_SEQ_LIST, out)))
            return rc;
        if (n)
            memcpy(out->l->items, items, n * sizeof *items);
        return 0;
    }
    case F_MAX:
    case F_MIN:
        return f_minmax(rt, v, &b, id == F_MAX, out);
    case F_REPLACE:
        return f_replace(rt, v, &b, out);
    case F_REVERSE:
        return f_reverse(rt, v, out);
    case F_ROUND:
        return f_round(rt, v, &b, out);
    case F_SAFE:
        if ((rc = ct_stringify(rt, v, out)))
            return rc;
        out->kind = 1;
        return 0;
    case F_SORT:
        return f_sort(rt, v, &b, out);
    case F_STRING:
        return soft_str(rt, v, out);
    case F_SUM:
        return f_sum(rt, v, &b, out);
    case F_TOJSON:
        return f_tojson(rt, v, &b, out);
    case F_TRIM: {
        if ((rc = soft_str(rt, v, &v)))
            return rc;
        ct_val chars = b.has[0] ? b.v[0] : ct_none();
        if (chars.t != CT_NONE && chars.t != CT_STR)
            return ct_error(rt, ERR_INVAL, "strip arg must be None or str");
        size_t off, len;
        ct_py_strip(v.s.p, v.s.n, chars.t == CT_STR ? chars.s.p : NULL,
                    chars.t == CT_STR ? chars.s.n : 0, 3, &off, &len);
        *out = ct_str(v.s.p + off, len);
        out->kind = v.kind;
        return 0;
    }
    case F_UNIQUE:
        return lazy(rt, f_unique(rt, v, &b, out), out);
    case F_WORDCOUNT:
        return f_wordcount(rt, v, out);
    default:
        return ct_error(rt, ERR_INTERNAL, "filter id %d", id);
    }
}

int ct_filter_apply(ct_rt *rt, const ct_node *n, ct_val input, const ct_val *args, size_t n_args,
                    const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                    size_t n_kw, ct_val *out) {
    return filter_call(rt, n->fid, input, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out);
}
