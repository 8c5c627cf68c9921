/* SPDX-License-Identifier: MIT */
/*
 * ct_json: the bridge between JSON and template values, and Python's json.dumps as Hugging Face's
 * tojson filter calls it (json.dumps(x, ensure_ascii=False, indent=..., separators=...,
 * sort_keys=...)).
 *
 * Incoming JSON (messages, tools, extra variables) becomes values once per render: objects become
 * dicts in document order, integers ints, other numbers floats, strings point into the caller's
 * tree (no copy). json.dumps is reproduced byte for byte: ", " and ": " separators (or "," with an
 * indent), Python's float repr (1.0, 1e+16, NaN, Infinity), dict keys coerced the way Python does
 * (True -> "true", 1 -> "1"), and the same TypeError for values JSON cannot hold.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_MAX_JSON_DEPTH 200

static int from_json_rec(ct_rt *rt, const json_value *j, ct_val *out, int depth) {
    if (depth > CT_MAX_JSON_DEPTH)
        return ct_error(rt, ERR_TOOLARGE, "JSON input nested deeper than %d", CT_MAX_JSON_DEPTH);
    int rc;
    switch (j->type) {
    case JSON_NULL:
        *out = ct_none();
        return 0;
    case JSON_BOOL:
        *out = ct_bool(j->b);
        return 0;
    case JSON_NUMBER:
        *out = j->num.is_int ? ct_int(j->num.i) : ct_float(j->num.d);
        if (!j->num.is_int && j->num.raw && !strpbrk(j->num.raw, ".eE")) {
            out->kind = 1; /* Python keeps big integers exact: print the digits */
            out->raw = j->num.raw;
        }
        return 0;
    case JSON_STRING:
        *out = ct_str(j->str.s, j->str.len);
        return 0;
    case JSON_ARRAY:
        if ((rc = ct_list_new(rt, j->arr.n, CT_SEQ_LIST, out)))
            return rc;
        for (size_t i = 0; i < j->arr.n; i++)
            if ((rc = from_json_rec(rt, j->arr.items[i], &out->l->items[i], depth + 1)))
                return rc;
        return ct_charge(rt, j->arr.n / 8);
    case JSON_OBJECT:
        if ((rc = ct_dict_new(rt, j->obj.n, out)))
            return rc;
        for (size_t i = 0; i < j->obj.n; i++) {
            ct_val v;
            if ((rc = from_json_rec(rt, j->obj.vals[i], &v, depth + 1)))
                return rc;
            /* json.h already merged duplicate keys, so appending keeps document order */
            out->d->keys[i] = ct_str(j->obj.keys[i], j->obj.key_lens[i]);
            out->d->vals[i] = v;
        }
        out->d->n = j->obj.n;
        return ct_charge(rt, j->obj.n / 8);
    }
    *out = ct_none();
    return 0;
}

int ct_from_json(ct_rt *rt, const json_value *j, ct_val *out) {
    if (!j) {
        *out = ct_none();
        return 0;
    }
    return from_json_rec(rt, j, out, 0);
}

/* ---- Python float repr ----------------------------------------------------------------------- */

void ct_float_repr(strbuf *sb, double d) {
    if (isnan(d)) {
        strbuf_puts(sb, "nan");
        return;
    }
    if (isinf(d)) {
        strbuf_puts(sb, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        strbuf_puts(sb, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    /* buf: [-]D[.DDD]e[+-]XX */
    const char *p = buf;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < 23)
            digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    if (neg)
        strbuf_putc(sb, '-');
    if (decpt <= -4 || decpt > 16) {
        strbuf_putc(sb, digits[0]);
        if (nd > 1) {
            strbuf_putc(sb, '.');
            strbuf_append(sb, digits + 1, (size_t)nd - 1);
        }
        int e = decpt - 1;
        strbuf_printf(sb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        strbuf_append(sb, "0.", 2);
        for (int i = 0; i < -decpt; i++)
            strbuf_putc(sb, '0');
        strbuf_append(sb, digits, (size_t)nd);
    } else if (decpt >= nd) {
        strbuf_append(sb, digits, (size_t)nd);
        for (int i = nd; i < decpt; i++)
            strbuf_putc(sb, '0');
        strbuf_append(sb, ".0", 2);
    } else {
        strbuf_append(sb, digits, (size_t)decpt);
        strbuf_putc(sb, '.');
        strbuf_append(sb, digits + decpt, (size_t)(nd - decpt));
    }
}

/* ---- json.dumps ------------------------------------------------------------------------------ */

static void dumps_float(strbuf *sb, double d) {
    if (isnan(d))
        strbuf_puts(sb, "NaN");
    else if (isinf(d))
        strbuf_puts(sb, d < 0 ? "-Infinity" : "Infinity");
    else
        ct_float_repr(sb, d);
}

static void dumps_newline(strbuf *sb, const ct_dumps_opts *o, int level) {
    strbuf_putc(sb, '\n');
    for (int i = 0; i < level; i++) {
        if (o->indent_s)
            strbuf_append(sb, o->indent_s, o->indent_n);
        else
            for (int k = 0; k < o->indent; k++)
                strbuf_putc(sb, ' ');
    }
}

static bool pretty(const ct_dumps_opts *o) {
    return o->indent_s || o->indent >= 0;
}

bool ct_scalar_write(strbuf *sb, ct_val v, bool python) {
    switch (v.t) {
    case CT_NONE:
        strbuf_puts(sb, python ? "None" : "null");
        return true;
    case CT_BOOL:
        strbuf_puts(sb, v.b ? (python ? "True" : "true") : (python ? "False" : "false"));
        return true;
    case CT_INT:
        strbuf_printf(sb, "%" PRId64, v.i);
        return true;
    case CT_FLOAT:
        if (v.kind == 1)
            strbuf_puts(sb, v.raw);
        else if (python)
            ct_float_repr(sb, v.f);
        else
            dumps_float(sb, v.f);
        return true;
    default:
        return false;
    }
}

/* Python converts non-string dict keys: True -> "true", None -> "null", 1 -> "1", 1.5 -> "1.5". */
static int dumps_key(ct_rt *rt, ct_val k, const ct_dumps_opts *o, strbuf *sb) {
    if (k.t == CT_STR) {
        strbuf_json_str(sb, k.s.p, k.s.n, o->ensure_ascii);
        return 0;
    }
    if (k.t != CT_NONE && k.t != CT_BOOL && k.t != CT_INT && k.t != CT_FLOAT)
        return ct_error(rt, ERR_INVAL, "keys must be str, int, float, bool or None, not %s",
                        ct_type_name(k));
    strbuf_putc(sb, '"');
    ct_scalar_write(sb, k, false);
    strbuf_putc(sb, '"');
    return 0;
}

static int dumps_rec(ct_rt *rt, ct_val v, const ct_dumps_opts *o, strbuf *sb, int level);

static int dumps_dict(ct_rt *rt, const ct_dict *d, const ct_dumps_opts *o, strbuf *sb, int level) {
    if (d->n == 0) {
        strbuf_append(sb, "{}", 2);
        return 0;
    }
    size_t *order = arena_alloc(rt->a, d->n * sizeof *order);
    if (!order)
        return ct_error(rt, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->n; i++)
        order[i] = i;
    if (o->sort_keys) { /* insertion sort: stable, and dicts in templates are small */
        for (size_t i = 1; i < d->n; i++) {
            size_t x = order[i], j = i;
            while (j > 0) {
                int c;
                int rc = ct_compare(rt, d->keys[order[j - 1]], d->keys[x], "<", &c);
                if (rc)
                    return rc;
                if (c <= 0)
                    break;
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
        int rc = ct_charge(rt, d->n * d->n / 16);
        if (rc)
            return rc;
    }
    strbuf_putc(sb, '{');
    if (pretty(o))
        dumps_newline(sb, o, level + 1);
    for (size_t i = 0; i < d->n; i++) {
        size_t k = order[i];
        if (i) {
            strbuf_append(sb, o->item_sep, o->item_sep_n);
            if (pretty(o))
                dumps_newline(sb, o, level + 1);
        }
        int rc = dumps_key(rt, d->keys[k], o, sb);
        if (rc)
            return rc;
        strbuf_append(sb, o->key_sep, o->key_sep_n);
        if ((rc = dumps_rec(rt, d->vals[k], o, sb, level + 1)))
            return rc;
    }
    if (pretty(o))
        dumps_newline(sb, o, level);
    strbuf_putc(sb, '}');
    return 0;
}

static int dumps_rec(ct_rt *rt, ct_val v, const ct_dumps_opts *o, strbuf *sb, int level) {
    if (level > CT_MAX_JSON_DEPTH)
        return ct_error(rt, ERR_TOOLARGE, "values nested deeper than %d", CT_MAX_JSON_DEPTH);
    if (sb->len > CT_MAX_OUTPUT)
        return ct_error(rt, ERR_TOOLARGE, "tojson output exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    int rc = ct_charge(rt, 1);
    if (rc)
        return rc;
    if (ct_scalar_write(sb, v, false))
        return 0;
    switch (v.t) {
    case CT_STR:
        strbuf_json_str(sb, v.s.p, v.s.n, o->ensure_ascii);
        return 0;
    case CT_LIST:
        if (v.kind != CT_SEQ_LIST && v.kind != CT_SEQ_TUPLE)
            break;
        if (v.l->n == 0) {
            strbuf_append(sb, "[]", 2);
            return 0;
        }
        strbuf_putc(sb, '[');
        if (pretty(o))
            dumps_newline(sb, o, level + 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) {
                strbuf_append(sb, o->item_sep, o->item_sep_n);
                if (pretty(o))
                    dumps_newline(sb, o, level + 1);
            }
            if ((rc = dumps_rec(rt, v.l->items[i], o, sb, level + 1)))
                return rc;
        }
        if (pretty(o))
            dumps_newline(sb, o, level);
        strbuf_putc(sb, ']');
        return 0;
    case CT_DICT:
        return dumps_dict(rt, v.d, o, sb, level);
    default:
        break;
    }
    return ct_error(rt, ERR_INVAL, "Object of type %s is not JSON serializable", ct_type_name(v));
}

int ct_dumps(ct_rt *rt, ct_val v, const ct_dumps_opts *o, strbuf *sb) {
    int rc = dumps_rec(rt, v, o, sb, 0);
    if (!rc && strbuf_failed(sb))
        rc = ct_error(rt, ERR_NOMEM, "out of memory in tojson");
    return rc;
}
