/* SPDX-License-Identifier: MIT */
/*
 * ct_value: the value model of the chat-template engine, with Python's semantics for what templates
 * can observe: truthiness, ==, ordering, str() and repr(), len() and iteration, and jinja2's
 * Undefined (renders empty, is false, has length 0, iterates as empty; using it any other way
 * raises an UndefinedError naming what was missing).
 *
 * Values are plain structs; containers are arena-allocated and immutable once built, except
 * namespaces (CT_NS), which `{% set ns.attr = ... %}` updates in place. Namespaces are the only way
 * to build a cycle, so every recursive walk (repr, ==) carries a depth bound.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CT_MAX_VALUE_DEPTH 200

int ct_error(ct_rt *rt, int code, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(code, "template line %d: %s", rt->line, msg);
}

int ct_charge(ct_rt *rt, uint64_t steps) {
    rt->steps += steps;
    if (rt->steps > CT_MAX_STEPS)
        return ct_error(rt, ERR_TOOLARGE, "render exceeded %llu evaluation steps",
                        (unsigned long long)CT_MAX_STEPS);
    return 0;
}

static int ct_nomem(ct_rt *rt) {
    return ct_error(rt, ERR_NOMEM, "out of memory (render arena limit %u MiB)", CT_MAX_ARENA >> 20);
}

/* ---- undefined ------------------------------------------------------------------------------- */

ct_val ct_undef_make(ct_rt *rt, int why, const char *obj_type, ct_val name, const char *hint) {
    ct_val v = ct_undef_val();
    ct_undef *u = arena_alloc(rt->a, sizeof *u);
    if (u) { /* on OOM the value stays a plain undefined; the next allocation reports it */
        u->why = why;
        u->obj_type = obj_type;
        u->name = name;
        u->hint = hint;
        v.u = u;
    }
    return v;
}

int ct_undef_fail(ct_rt *rt, ct_val v) {
    const ct_undef *u = v.u;
    strbuf sb;
    strbuf_init(&sb);
    if (!u) {
        strbuf_puts(&sb, "value is undefined");
    } else if (u->why == CT_UNDEF_HINT || u->why == CT_UNDEF_UNSAFE) {
        strbuf_puts(&sb, u->hint);
    } else if (u->why == CT_UNDEF_NAME) {
        ct_to_repr(rt, u->name, &sb);
        strbuf_puts(&sb, " is undefined");
    } else if (u->why == CT_UNDEF_ATTR) {
        ct_py_repr_str(&sb, u->obj_type, strlen(u->obj_type));
        strbuf_puts(&sb, " has no attribute ");
        ct_to_repr(rt, u->name, &sb);
    } else {
        strbuf_puts(&sb, u->obj_type);
        strbuf_puts(&sb, " has no element ");
        ct_to_repr(rt, u->name, &sb);
    }
    int rc = ct_error(rt, ERR_INVAL, "%s", sb.data);
    strbuf_deinit(&sb);
    return rc;
}

/* ---- containers ------------------------------------------------------------------------------ */

int ct_list_new(ct_rt *rt, size_t n, int kind, ct_val *out) {
    ct_list *l = arena_alloc(rt->a, sizeof *l);
    ct_val *items = n ? arena_calloc(rt->a, n, sizeof *items) : NULL;
    if (!l || (n && !items))
        return ct_nomem(rt);
    l->items = items;
    l->n = n;
    l->range[0] = l->range[1] = 0;
    l->range[2] = 1;
    l->pending = NULL;
    l->gen_type = l->gen_func = NULL;
    ct_val v = {.t = CT_LIST, .kind = (uint8_t)kind};
    v.l = l;
    *out = v;
    return 0;
}

int ct_dict_new(ct_rt *rt, size_t cap, ct_val *out) {
    ct_dict *d = arena_alloc(rt->a, sizeof *d);
    if (!d)
        return ct_nomem(rt);
    d->n = 0;
    d->cap_keys = d->cap_vals = cap;
    d->keys = cap ? arena_alloc(rt->a, cap * sizeof *d->keys) : NULL;
    d->vals = cap ? arena_alloc(rt->a, cap * sizeof *d->vals) : NULL;
    if (cap && (!d->keys || !d->vals))
        return ct_nomem(rt);
    ct_val v = {.t = CT_DICT};
    v.d = d;
    *out = v;
    return 0;
}

/* Key equality for dict lookup: Python ==, with a fast path for the common string keys. */
static bool key_eq(ct_rt *rt, ct_val a, ct_val b) {
    if (a.t == CT_STR && b.t == CT_STR)
        return a.s.n == b.s.n && memcmp(a.s.p, b.s.p, a.s.n) == 0;
    bool eq = false;
    if (ct_equal(rt, a, b, &eq))
        return false;
    return eq;
}

static ptrdiff_t dict_find(ct_rt *rt, const ct_dict *d, ct_val key) {
    if (rt && d->n > 8)
        ct_charge(rt, d->n / 8);
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(rt, d->keys[i], key))
            return (ptrdiff_t)i;
    return -1;
}

int ct_dict_set(ct_rt *rt, ct_dict *d, ct_val key, ct_val val) {
    ptrdiff_t i = dict_find(rt, d, key);
    if (i >= 0) {
        d->vals[i] = val;
        return 0;
    }
    if (arena_grow(rt->a, (void **)&d->keys, &d->cap_keys, d->n + 1, sizeof *d->keys) ||
        arena_grow(rt->a, (void **)&d->vals, &d->cap_vals, d->n + 1, sizeof *d->vals))
        return ct_nomem(rt);
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return 0;
}

bool ct_dict_get(ct_rt *rt, const ct_dict *d, ct_val key, ct_val *out) {
    ptrdiff_t i = dict_find(rt, d, key);
    if (i < 0)
        return false;
    *out = d->vals[i];
    return true;
}

bool ct_dict_get_str(const ct_dict *d, const char *k, size_t n, ct_val *out) {
    for (size_t i = 0; i < d->n; i++) {
        ct_val key = d->keys[i];
        if (key.t == CT_STR && key.s.n == n && memcmp(key.s.p, k, n) == 0) {
            *out = d->vals[i];
            return true;
        }
    }
    return false;
}

int ct_str_new(ct_rt *rt, const char *p, size_t n, ct_val *out) {
    if (n > CT_MAX_OUTPUT)
        return ct_error(rt, ERR_TOOLARGE, "string of %zu bytes exceeds the %u MiB limit", n,
                        CT_MAX_OUTPUT >> 20);
    char *d = arena_alloc(rt->a, n ? n : 1);
    if (!d)
        return ct_nomem(rt);
    if (n)
        memcpy(d, p, n);
    *out = ct_str(d, n);
    return ct_charge(rt, n / 64);
}

int ct_str_cat(ct_rt *rt, ct_val a, ct_val b, ct_val *out) {
    if (a.s.n == 0) {
        *out = b;
        return 0;
    }
    if (b.s.n == 0) {
        *out = a;
        return 0;
    }
    size_t n = a.s.n + b.s.n;
    if (n > CT_MAX_OUTPUT)
        return ct_error(rt, ERR_TOOLARGE, "string of %zu bytes exceeds the %u MiB limit", n,
                        CT_MAX_OUTPUT >> 20);
    char *d = arena_alloc(rt->a, n);
    if (!d)
        return ct_nomem(rt);
    memcpy(d, a.s.p, a.s.n);
    memcpy(d + a.s.n, b.s.p, b.s.n);
    *out = ct_str(d, n);
    return ct_charge(rt, n / 64);
}

int ct_str_from_buf(ct_rt *rt, strbuf *sb, ct_val *out) {
    if (strbuf_failed(sb))
        return ct_nomem(rt);
    int rc = ct_str_new(rt, sb->data, sb->len, out);
    strbuf_reset(sb);
    return rc;
}

int ct_str_take(ct_rt *rt, strbuf *sb, int kind, ct_val *out) {
    int rc = ct_str_from_buf(rt, sb, out);
    strbuf_deinit(sb);
    out->kind = (uint8_t)kind;
    return rc;
}

/* ---- truth, equality, order ------------------------------------------------------------------ */

bool ct_truthy(ct_val v) {
    switch (v.t) {
    case CT_UNDEF:
    case CT_NONE:
        return false;
    case CT_BOOL:
        return v.b;
    case CT_INT:
        return v.i != 0;
    case CT_FLOAT:
        return v.f != 0.0;
    case CT_STR:
        return v.s.n != 0;
    case CT_LIST:
        return v.kind == CT_SEQ_GEN || v.l->n != 0;
    case CT_DICT:
        return v.d->n != 0;
    default:
        return true;
    }
}

static double num_d(ct_val v) {
    return v.t == CT_FLOAT ? v.f : v.t == CT_BOOL ? (double)v.b : (double)v.i;
}

static int num_cmp(ct_val a, ct_val b) {
    if (a.t != CT_FLOAT && b.t != CT_FLOAT) {
        int64_t x = a.t == CT_BOOL ? a.b : a.i, y = b.t == CT_BOOL ? b.b : b.i;
        return x < y ? -1 : x > y;
    }
    double x = num_d(a), y = num_d(b);
    if (x < y)
        return -1;
    if (x > y)
        return 1;
    return x == y ? 0 : 2; /* 2: unordered (NaN) */
}

static bool seq_kind_comparable(int a, int b) {
    if (a == CT_SEQ_RANGE)
        a = CT_SEQ_LIST;
    if (b == CT_SEQ_RANGE)
        b = CT_SEQ_LIST;
    return a == b && (a == CT_SEQ_LIST || a == CT_SEQ_TUPLE || a == CT_SEQ_KEYS ||
                      a == CT_SEQ_ITEMS || a == CT_SEQ_VALUES);
}

static int equal_rec(ct_rt *rt, ct_val a, ct_val b, bool *out, int depth) {
    if (depth > CT_MAX_VALUE_DEPTH)
        return ct_error(rt, ERR_TOOLARGE, "values nested deeper than %d", CT_MAX_VALUE_DEPTH);
    *out = false;
    if (ct_is_num(a) && ct_is_num(b)) {
        *out = num_cmp(a, b) == 0;
        return 0;
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case CT_UNDEF:
    case CT_NONE:
        *out = true;
        return 0;
    case CT_STR:
        *out = a.s.n == b.s.n && memcmp(a.s.p, b.s.p, a.s.n) == 0;
        return 0;
    case CT_LIST:
        if (a.l == b.l) {
            *out = true;
            return 0;
        }
        if (!seq_kind_comparable(a.kind, b.kind) || a.kind == CT_SEQ_VALUES || a.l->n != b.l->n)
            return 0;
        for (size_t i = 0; i < a.l->n; i++) {
            bool e;
            int rc = equal_rec(rt, a.l->items[i], b.l->items[i], &e, depth + 1);
            if (rc)
                return rc;
            if (!e)
                return 0;
        }
        *out = true;
        return 0;
    case CT_DICT:
        if (a.d == b.d) {
            *out = true;
            return 0;
        }
        if (a.d->n != b.d->n)
            return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            ct_val bv;
            if (!ct_dict_get(rt, b.d, a.d->keys[i], &bv))
                return 0;
            bool e;
            int rc = equal_rec(rt, a.d->vals[i], bv, &e, depth + 1);
            if (rc)
                return rc;
            if (!e)
                return 0;
        }
        *out = true;
        return 0;
    case CT_NS:
        *out = a.d == b.d;
        return 0;
    case CT_MACRO:
        *out = a.m == b.m;
        return 0;
    case CT_FUNC:
        *out = a.fn == b.fn;
        return 0;
    case CT_LOOP:
        *out = a.loop == b.loop;
        return 0;
    default:
        return 0;
    }
}

int ct_equal(ct_rt *rt, ct_val a, ct_val b, bool *out) {
    return equal_rec(rt, a, b, out, 0);
}

static int compare_rec(ct_rt *rt, ct_val a, ct_val b, const char *op, int *out, int depth) {
    if (depth > CT_MAX_VALUE_DEPTH)
        return ct_error(rt, ERR_TOOLARGE, "values nested deeper than %d", CT_MAX_VALUE_DEPTH);
    if (a.t == CT_UNDEF)
        return ct_undef_fail(rt, a);
    if (b.t == CT_UNDEF)
        return ct_undef_fail(rt, b);
    if (ct_is_num(a) && ct_is_num(b)) {
        int c = num_cmp(a, b);
        *out = c == 2 ? 2 : c;
        return 0;
    }
    if (a.t == CT_STR && b.t == CT_STR) {
        size_t m = a.s.n < b.s.n ? a.s.n : b.s.n;
        int c = memcmp(a.s.p, b.s.p, m);
        *out = c < 0 ? -1 : c > 0 ? 1 : a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
        return 0;
    }
    if (a.t == CT_LIST && b.t == CT_LIST && seq_kind_comparable(a.kind, b.kind) &&
        (a.kind == CT_SEQ_LIST || a.kind == CT_SEQ_TUPLE || a.kind == CT_SEQ_RANGE)) {
        size_t m = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t i = 0; i < m; i++) {
            bool e;
            int rc = equal_rec(rt, a.l->items[i], b.l->items[i], &e, depth + 1);
            if (rc)
                return rc;
            if (!e)
                return compare_rec(rt, a.l->items[i], b.l->items[i], op, out, depth + 1);
        }
        *out = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
        return 0;
    }
    return ct_error(rt, ERR_INVAL, "'%s' not supported between instances of '%s' and '%s'", op,
                    ct_type_name(a), ct_type_name(b));
}

int ct_compare(ct_rt *rt, ct_val a, ct_val b, const char *op, int *out) {
    return compare_rec(rt, a, b, op, out, 0);
}

int ct_hash_check(ct_rt *rt, ct_val key) {
    if (key.t == CT_LIST && key.kind != CT_SEQ_TUPLE && key.kind != CT_SEQ_GEN)
        return ct_error(rt, ERR_INVAL, "unhashable type: '%s'", ct_type_name(key));
    if (key.t == CT_DICT)
        return ct_error(rt, ERR_INVAL, "unhashable type: 'dict'");
    if (key.t == CT_LIST && key.kind == CT_SEQ_TUPLE)
        for (size_t i = 0; i < key.l->n; i++) {
            int rc = ct_hash_check(rt, key.l->items[i]);
            if (rc)
                return rc;
        }
    return 0;
}

/* ---- names ----------------------------------------------------------------------------------- */

/* Each kind of value's Python type name (type(x).__name__) and how jinja2 names an instance in
 * an undefined's message ("'dict object' has no attribute 'x'"). */
typedef struct type_names {
    const char *name, *obj;
} type_names;

static const type_names type_rows[] = {
    [CT_UNDEF] = {"Undefined", "jinja2.runtime.Undefined object"},
    [CT_NONE] = {"NoneType", "None"},
    [CT_BOOL] = {"bool", "bool object"},
    [CT_INT] = {"int", "int object"},
    [CT_FLOAT] = {"float", "float object"},
    [CT_STR] = {"str", "str object"},
    [CT_LIST] = {"list", "list object"},
    [CT_DICT] = {"dict", "dict object"},
    [CT_NS] = {"Namespace", "jinja2.utils.Namespace object"},
    [CT_MACRO] = {"Macro", "jinja2.runtime.Macro object"},
    [CT_FUNC] = {"builtin_function_or_method", "builtin_function_or_method object"},
    [CT_LOOP] = {"LoopContext", "jinja2.runtime.LoopContext object"},
};

/* CT_LIST by ct_seq_kind. */
static const type_names seq_rows[] = {
    [CT_SEQ_LIST] = {"list", "list object"},
    [CT_SEQ_TUPLE] = {"tuple", "tuple object"},
    [CT_SEQ_GEN] = {"generator", "generator object"},
    [CT_SEQ_ITEMS] = {"dict_items", "dict_items object"},
    [CT_SEQ_KEYS] = {"dict_keys", "dict_keys object"},
    [CT_SEQ_VALUES] = {"dict_values", "dict_values object"},
    [CT_SEQ_RANGE] = {"range", "range object"},
};

static const type_names *type_row(ct_val v) {
    static const type_names markup = {"Markup", "markupsafe.Markup object"};
    static const type_names other = {"object", "object"};
    if (v.t == CT_FLOAT && v.kind == 1) /* a JSON integer too large for int64: still an int */
        return &type_rows[CT_INT];
    if (v.t == CT_STR && v.kind)
        return &markup;
    if (v.t == CT_LIST)
        return &seq_rows[v.kind < sizeof seq_rows / sizeof *seq_rows ? v.kind : CT_SEQ_LIST];
    if ((size_t)v.t < sizeof type_rows / sizeof *type_rows)
        return &type_rows[v.t];
    return &other;
}

const char *ct_type_name(ct_val v) {
    if (v.t == CT_LIST && v.kind == CT_SEQ_GEN && v.l->gen_type)
        return v.l->gen_type;
    return type_row(v)->name;
}

const char *ct_obj_type_repr(ct_val v) {
    return type_row(v)->obj;
}

/* ---- str / repr ------------------------------------------------------------------------------ */

static int repr_rec(ct_rt *rt, ct_val v, strbuf *sb, int depth);

static int repr_items(ct_rt *rt, const ct_list *l, strbuf *sb, int depth) {
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            strbuf_append(sb, ", ", 2);
        int rc = repr_rec(rt, l->items[i], sb, depth + 1);
        if (rc)
            return rc;
    }
    return 0;
}

static int repr_dict(ct_rt *rt, const ct_dict *d, strbuf *sb, int depth) {
    strbuf_putc(sb, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i)
            strbuf_append(sb, ", ", 2);
        int rc = repr_rec(rt, d->keys[i], sb, depth + 1);
        if (!rc) {
            strbuf_append(sb, ": ", 2);
            rc = repr_rec(rt, d->vals[i], sb, depth + 1);
        }
        if (rc)
            return rc;
    }
    strbuf_putc(sb, '}');
    return 0;
}

static int str_rec(ct_rt *rt, ct_val v, strbuf *sb, int depth) {
    if (ct_scalar_write(sb, v, true))
        return 0;
    switch (v.t) {
    case CT_UNDEF:
        return 0;
    case CT_STR:
        strbuf_append(sb, v.s.p, v.s.n);
        return 0;
    default:
        return repr_rec(rt, v, sb, depth);
    }
}

static int repr_rec(ct_rt *rt, ct_val v, strbuf *sb, int depth) {
    if (depth > CT_MAX_VALUE_DEPTH)
        return ct_error(rt, ERR_TOOLARGE, "values nested deeper than %d", CT_MAX_VALUE_DEPTH);
    int rc = 0;
    switch (v.t) {
    case CT_UNDEF:
        strbuf_puts(sb, "Undefined");
        return 0;
    case CT_STR:
        if (v.kind) {
            strbuf_puts(sb, "Markup(");
            ct_py_repr_str(sb, v.s.p, v.s.n);
            strbuf_putc(sb, ')');
        } else {
            ct_py_repr_str(sb, v.s.p, v.s.n);
        }
        return 0;
    case CT_LIST:
        switch (v.kind) {
        case CT_SEQ_TUPLE:
            strbuf_putc(sb, '(');
            rc = repr_items(rt, v.l, sb, depth);
            if (v.l->n == 1)
                strbuf_putc(sb, ',');
            strbuf_putc(sb, ')');
            return rc;
        case CT_SEQ_GEN:
            /* the address differs from Python's, the shape (words, length) does not */
            if (v.l->gen_func)
                strbuf_printf(sb, "<generator object %s at 0x7f0000000000>", v.l->gen_func);
            else
                strbuf_printf(sb, "<%s object at 0x7f0000000000>", ct_type_name(v));
            return 0;
        case CT_SEQ_RANGE:
            if (v.l->range[2] == 1)
                strbuf_printf(sb, "range(%" PRId64 ", %" PRId64 ")", v.l->range[0], v.l->range[1]);
            else
                strbuf_printf(sb, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")", v.l->range[0],
                              v.l->range[1], v.l->range[2]);
            return 0;
        case CT_SEQ_ITEMS:
        case CT_SEQ_KEYS:
        case CT_SEQ_VALUES:
            strbuf_puts(sb, type_row(v)->name);
            strbuf_append(sb, "([", 2);
            rc = repr_items(rt, v.l, sb, depth);
            strbuf_append(sb, "])", 2);
            return rc;
        default:
            strbuf_putc(sb, '[');
            rc = repr_items(rt, v.l, sb, depth);
            strbuf_putc(sb, ']');
            return rc;
        }
    case CT_DICT:
        return repr_dict(rt, v.d, sb, depth);
    case CT_NS:
        strbuf_puts(sb, "<Namespace ");
        rc = repr_dict(rt, v.d, sb, depth);
        strbuf_putc(sb, '>');
        return rc;
    case CT_MACRO:
        strbuf_puts(sb, "<Macro ");
        if (v.m->def->str)
            ct_py_repr_str(sb, v.m->def->str, v.m->def->len);
        else
            strbuf_puts(sb, "'caller'");
        strbuf_putc(sb, '>');
        return 0;
    case CT_FUNC: /* the address differs from Python's, the shape does not */
        if (v.fn->self.t != CT_NONE)
            strbuf_printf(sb, "<built-in method %s of %s object at 0x7f0000000000>",
                          v.fn->name ? v.fn->name : "?", ct_type_name(v.fn->self));
        else
            strbuf_printf(sb, "<function %s at 0x7f0000000000>", v.fn->name ? v.fn->name : "?");
        return 0;
    case CT_LOOP:
        strbuf_printf(sb, "<LoopContext %zu/%zu>", v.loop->i + 1, v.loop->n);
        return 0;
    default:
        return str_rec(rt, v, sb, depth);
    }
}

int ct_to_str(ct_rt *rt, ct_val v, strbuf *sb) {
    return str_rec(rt, v, sb, 0);
}
int ct_to_repr(ct_rt *rt, ct_val v, strbuf *sb) {
    return repr_rec(rt, v, sb, 0);
}

int ct_stringify(ct_rt *rt, ct_val v, ct_val *out) {
    if (v.t == CT_STR) {
        *out = v;
        return 0;
    }
    if (v.t == CT_UNDEF) {
        *out = ct_str("", 0);
        return 0;
    }
    char tmp[64];
    if (v.t == CT_INT || v.t == CT_BOOL || v.t == CT_NONE) {
        int n = v.t == CT_INT    ? snprintf(tmp, sizeof tmp, "%" PRId64, v.i)
                : v.t == CT_NONE ? snprintf(tmp, sizeof tmp, "None")
                                 : snprintf(tmp, sizeof tmp, "%s", v.b ? "True" : "False");
        return ct_str_new(rt, tmp, (size_t)n, out);
    }
    strbuf sb;
    strbuf_init(&sb);
    int rc = ct_to_str(rt, v, &sb);
    if (!rc)
        rc = ct_str_from_buf(rt, &sb, out);
    strbuf_deinit(&sb);
    return rc;
}

/* ---- iteration and length -------------------------------------------------------------------- */

int ct_iterate(ct_rt *rt, ct_val v, const ct_val **items, size_t *n) {
    switch (v.t) {
    case CT_UNDEF:
        *items = NULL;
        *n = 0;
        return 0;
    case CT_LIST:
        if (v.l->pending)
            return err_set(ERR_INVAL, "%s", v.l->pending);
        *items = v.l->items;
        *n = v.l->n;
        return ct_charge(rt, v.l->n / 4);
    case CT_DICT:
        *items = v.d->keys;
        *n = v.d->n;
        return ct_charge(rt, v.d->n / 4);
    case CT_STR: {
        size_t cnt = ct_utf8_count(v.s.p, v.s.n);
        ct_val *arr = cnt ? arena_alloc(rt->a, cnt * sizeof *arr) : NULL;
        if (cnt && !arr)
            return ct_nomem(rt);
        size_t i = 0, k = 0;
        while (i < v.s.n) {
            size_t s = i;
            ct_utf8_next(v.s.p, v.s.n, &i);
            arr[k] = ct_str(v.s.p + s, i - s);
            arr[k].kind = v.kind;
            k++;
        }
        *items = arr;
        *n = cnt;
        return ct_charge(rt, cnt / 4);
    }
    default:
        return ct_error(rt, ERR_INVAL, "'%s' object is not iterable", ct_type_name(v));
    }
}

int ct_length(ct_rt *rt, ct_val v, int64_t *out) {
    switch (v.t) {
    case CT_UNDEF:
        *out = 0;
        return 0;
    case CT_STR:
        *out = (int64_t)ct_utf8_count(v.s.p, v.s.n);
        return 0;
    case CT_LIST:
        if (v.kind == CT_SEQ_GEN)
            break;
        *out = (int64_t)v.l->n;
        return 0;
    case CT_DICT:
        *out = (int64_t)v.d->n;
        return 0;
    default:
        break;
    }
    return ct_error(rt, ERR_INVAL, "object of type '%s' has no len()", ct_type_name(v));
}
