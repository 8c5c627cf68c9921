/* SPDX-License-Identifier: MIT */
/*
 * ct_eval: evaluates the AST of a chat template: expressions with Python's operator semantics
 * and jinja2's sandboxed attribute/item access, and statements with jinja2's scoping.
 *
 * Scoping (verified against jinja2 3.1): a scope is a frame of (symbol, value) pairs with a parent.
 * Every for-loop iteration, macro call, set/filter block body, with block and generation block
 * runs in a fresh child frame, so `{% set %}` inside them is invisible outside (templates use
 * namespace() to carry state out); `if` does not open a frame. Lookups walk the frames outward,
 * then the render context (messages, tools, ...), then the globals (range, namespace, ...).
 * Macros close over the frame they were defined in and see its current values when called.
 *
 * Output goes to rt->out; macro calls and captured blocks point it at a private buffer for their
 * duration. Every frame of evaluation counts against CT_MAX_EVAL_DEPTH and every step against
 * CT_MAX_STEPS, and output against CT_MAX_OUTPUT, so no template can exhaust the stack, loop
 * forever or fill memory.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static int nomem(ct_rt *rt) {
    return ct_error(rt, ERR_NOMEM, "out of memory");
}

/* ---- scopes ---------------------------------------------------------------------------------- */

ct_scope *ct_scope_new(ct_rt *rt, ct_scope *parent) {
    ct_scope *s = arena_alloc(rt->a, sizeof *s);
    if (s) {
        s->parent = parent;
        s->syms = NULL;
        s->vals = NULL;
        s->n = 0;
        s->cap_syms = s->cap_vals = 0;
    }
    return s;
}

int ct_scope_set(ct_rt *rt, ct_scope *sc, int sym, ct_val v) {
    for (uint32_t i = 0; i < sc->n; i++)
        if (sc->syms[i] == sym) {
            sc->vals[i] = v;
            return 0;
        }
    if (arena_grow(rt->a, (void **)&sc->syms, &sc->cap_syms, sc->n + 1, sizeof *sc->syms) ||
        arena_grow(rt->a, (void **)&sc->vals, &sc->cap_vals, sc->n + 1, sizeof *sc->vals))
        return nomem(rt);
    sc->syms[sc->n] = sym;
    sc->vals[sc->n] = v;
    sc->n++;
    return 0;
}

static bool scope_get(const ct_scope *sc, int sym, ct_val *out) {
    for (; sc; sc = sc->parent)
        for (uint32_t i = 0; i < sc->n; i++)
            if (sc->syms[i] == sym) {
                *out = sc->vals[i];
                return true;
            }
    return false;
}

static int lookup(ct_rt *rt, ct_scope *sc, const ct_node *n, ct_val *out) {
    if (n->sym >= 0 && scope_get(sc, n->sym, out))
        return 0;
    if (ct_global_lookup(rt, n->str, n->len, out))
        return 0;
    *out = ct_undef_make(rt, CT_UNDEF_NAME, NULL, ct_str(n->str, n->len), NULL);
    return 0;
}

/* ---- output ---------------------------------------------------------------------------------- */

static int check_out(ct_rt *rt) {
    if (strbuf_failed(rt->out))
        return nomem(rt);
    if (rt->out->len > CT_MAX_OUTPUT)
        return ct_error(rt, ERR_TOOLARGE, "output exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    return 0;
}

/* Runs body with output captured into a string value. */
static int capture(ct_rt *rt, ct_node *const *body, uint32_t n, ct_scope *sc, ct_val *out) {
    strbuf buf;
    strbuf_init(&buf);
    strbuf *saved = rt->out;
    rt->out = &buf;
    int rc = ct_exec_body(rt, body, n, sc);
    rt->out = saved;
    rt->loop_ctl = 0;
    if (!rc)
        rc = ct_str_from_buf(rt, &buf, out);
    strbuf_deinit(&buf);
    return rc;
}

/* ---- attribute and item access (jinja2 sandbox semantics) ------------------------------------ */

static ct_val undef_attr(ct_rt *rt, ct_val obj, const char *name, size_t len) {
    return ct_undef_make(rt, CT_UNDEF_ATTR, ct_obj_type_repr(obj), ct_str(name, len), NULL);
}

static int method_or_undef(ct_rt *rt, ct_val obj, const char *name, size_t len, ct_val *out) {
    bool unsafe = false;
    if (ct_method_lookup(rt, obj, name, len, out, &unsafe))
        return 0;
    if (unsafe) {
        strbuf sb;
        strbuf_init(&sb);
        strbuf_printf(&sb, "access to attribute '%.*s' of '%s' object is unsafe.", (int)len, name,
                      ct_type_name(obj));
        ct_val msg;
        int rc = ct_str_from_buf(rt, &sb, &msg);
        strbuf_deinit(&sb);
        if (rc)
            return rc;
        char *hint = arena_strndup(rt->a, msg.s.p, msg.s.n);
        if (!hint)
            return nomem(rt);
        *out = ct_undef_make(rt, CT_UNDEF_UNSAFE, NULL, ct_none(), hint);
        return 0;
    }
    *out = undef_attr(rt, obj, name, len);
    return 0;
}

static int loop_attr(ct_rt *rt, ct_val obj, const char *name, size_t len, ct_val *out) {
    const ct_loop *l = obj.loop;
#define IS(s) (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)
    if (IS("index"))
        *out = ct_int((int64_t)l->i + 1);
    else if (IS("index0"))
        *out = ct_int((int64_t)l->i);
    else if (IS("revindex"))
        *out = ct_int((int64_t)(l->n - l->i));
    else if (IS("revindex0"))
        *out = ct_int((int64_t)(l->n - l->i - 1));
    else if (IS("first"))
        *out = ct_bool(l->i == 0);
    else if (IS("last"))
        *out = ct_bool(l->i + 1 == l->n);
    else if (IS("length"))
        *out = ct_int((int64_t)l->n);
    else if (IS("depth"))
        *out = ct_int(1);
    else if (IS("depth0"))
        *out = ct_int(0);
    else if (IS("previtem"))
        *out = l->i > 0
                   ? l->items[l->i - 1]
                   : ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(), "there is no previous item");
    else if (IS("nextitem"))
        *out = l->i + 1 < l->n
                   ? l->items[l->i + 1]
                   : ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(), "there is no next item");
    else if (IS("cycle") || IS("changed")) {
        ct_func *fn = arena_alloc(rt->a, sizeof *fn);
        if (!fn)
            return nomem(rt);
        fn->id = IS("cycle") ? CT_FN_LOOP_CYCLE : CT_FN_LOOP_CHANGED;
        fn->self = obj;
        fn->name = IS("cycle") ? "cycle" : "changed";
        ct_val v = {.t = CT_FUNC};
        v.fn = fn;
        *out = v;
    } else
        *out = undef_attr(rt, obj, name, len);
#undef IS
    return 0;
}

int ct_getattr(ct_rt *rt, ct_val obj, const char *name, size_t len, ct_val *out) {
    switch (obj.t) {
    case CT_UNDEF:
        return ct_undef_fail(rt, obj);
    case CT_DICT: {
        bool unsafe = false;
        if (ct_method_lookup(rt, obj, name, len, out, &unsafe))
            return 0;
        if (unsafe)
            return method_or_undef(rt, obj, name, len, out);
        if (ct_dict_get_str(obj.d, name, len, out))
            return 0;
        *out = undef_attr(rt, obj, name, len);
        return 0;
    }
    case CT_NS:
        if (ct_dict_get_str(obj.d, name, len, out))
            return 0;
        *out = undef_attr(rt, obj, name, len);
        return 0;
    case CT_LOOP:
        return loop_attr(rt, obj, name, len, out);
    default:
        return method_or_undef(rt, obj, name, len, out);
    }
}

static ct_val undef_elem(ct_rt *rt, ct_val obj, ct_val key) {
    return ct_undef_make(rt, key.t == CT_STR ? CT_UNDEF_ATTR : CT_UNDEF_ELEM, ct_obj_type_repr(obj),
                         key, NULL);
}

int ct_getitem(ct_rt *rt, ct_val obj, ct_val key, ct_val *out) {
    if (obj.t == CT_UNDEF)
        return ct_undef_fail(rt, obj);
    if (obj.t == CT_DICT) {
        bool hashable =
            !(key.t == CT_LIST && key.kind != CT_SEQ_TUPLE) && key.t != CT_DICT && key.t != CT_NS;
        if (hashable && ct_dict_get(rt, obj.d, key, out))
            return 0;
    } else if (obj.t == CT_LIST &&
               (obj.kind == CT_SEQ_LIST || obj.kind == CT_SEQ_TUPLE || obj.kind == CT_SEQ_RANGE)) {
        if (key.t == CT_INT || key.t == CT_BOOL) {
            int64_t i = key.t == CT_BOOL ? key.b : key.i;
            int64_t n = (int64_t)obj.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                *out = obj.l->items[i];
                return 0;
            }
            *out = undef_elem(rt, obj, key);
            return 0;
        }
    } else if (obj.t == CT_STR) {
        if (key.t == CT_INT || key.t == CT_BOOL) {
            int64_t i = key.t == CT_BOOL ? key.b : key.i;
            int64_t n = (int64_t)ct_utf8_count(obj.s.p, obj.s.n);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t b = ct_utf8_offset(obj.s.p, obj.s.n, (size_t)i), e = b;
                ct_utf8_next(obj.s.p, obj.s.n, &e);
                *out = ct_str(obj.s.p + b, e - b);
                out->kind = obj.kind;
                return 0;
            }
            *out = undef_elem(rt, obj, key);
            return 0;
        }
    } else if (obj.t == CT_NS && key.t == CT_STR) {
        return ct_getattr(rt, obj, key.s.p, key.s.n, out);
    }
    if (key.t == CT_STR) {
        if (obj.t == CT_DICT || obj.t == CT_NS) {
            bool unsafe = false;
            if (ct_method_lookup(rt, obj, key.s.p, key.s.n, out, &unsafe))
                return 0;
            if (unsafe)
                return method_or_undef(rt, obj, key.s.p, key.s.n, out);
            *out = undef_elem(rt, obj, key);
            return 0;
        }
        if (obj.t == CT_LOOP)
            return loop_attr(rt, obj, key.s.p, key.s.n, out);
        return method_or_undef(rt, obj, key.s.p, key.s.n, out);
    }
    *out = undef_elem(rt, obj, key);
    return 0;
}

/* Python slice index adjustment (PySlice_AdjustIndices). */
static int64_t slice_adjust(int64_t len, int64_t *start, int64_t *stop, int64_t step, bool has_a,
                            bool has_b) {
    if (!has_a)
        *start = step < 0 ? len - 1 : 0;
    else if (*start < 0) {
        *start += len;
        if (*start < 0)
            *start = step < 0 ? -1 : 0;
    } else if (*start >= len)
        *start = step < 0 ? len - 1 : len;
    if (!has_b)
        *stop = step < 0 ? -1 : len;
    else if (*stop < 0) {
        *stop += len;
        if (*stop < 0)
            *stop = step < 0 ? -1 : 0;
    } else if (*stop >= len)
        *stop = step < 0 ? len - 1 : len;
    if (step < 0)
        return *stop < *start ? (*start - *stop - 1) / (-step) + 1 : 0;
    return *start < *stop ? (*stop - *start - 1) / step + 1 : 0;
}

/* Converts an evaluated slice bound (int, bool or None) into *v / *has. */
static int slice_bound(ct_rt *rt, ct_val x, int64_t *v, bool *has) {
    *has = false;
    if (x.t == CT_NONE)
        return 0;
    if (x.t == CT_INT || x.t == CT_BOOL) {
        *v = x.t == CT_BOOL ? x.b : x.i;
        *has = true;
        return 0;
    }
    if (x.t == CT_UNDEF)
        return ct_undef_fail(rt, x);
    return ct_error(rt, ERR_INVAL,
                    "slice indices must be integers or None or have an __index__ "
                    "method");
}

/* x[a:b:c]: jinja2 compiles slices to a plain Python subscript (no sandbox getitem), so objects
 * that cannot be sliced raise TypeError instead of yielding undefined, except while folding
 * constants at parse time (rt->const_mode): jinja2's optimizer goes through the sandbox's
 * getitem, which turns the TypeError into an undefined value. */
static int eval_slice(ct_rt *rt, ct_val obj, const ct_node *sl, ct_scope *sc, ct_val *out) {
    int64_t start = 0, stop = 0, step = 1;
    bool has_a, has_b, has_c;
    ct_val parts[3];
    const ct_node *pn[3] = {sl->a, sl->b, sl->c};
    int rc;
    for (int i = 0; i < 3; i++) {
        parts[i] = ct_none();
        if (pn[i] && (rc = ct_eval(rt, pn[i], sc, &parts[i])))
            return rc;
    }
    rt->line = sl->line;
    bool seq = obj.t == CT_STR ||
               (obj.t == CT_LIST &&
                (obj.kind == CT_SEQ_LIST || obj.kind == CT_SEQ_TUPLE || obj.kind == CT_SEQ_RANGE));
    if (obj.t == CT_UNDEF)
        return ct_undef_fail(rt, obj);
    if (!seq && rt->const_mode) {
        strbuf sb;
        strbuf_init(&sb);
        strbuf_printf(&sb, "%s has no element slice(", ct_obj_type_repr(obj));
        for (int i = 0; i < 3; i++) {
            if (i)
                strbuf_append(&sb, ", ", 2);
            ct_to_repr(rt, parts[i], &sb);
        }
        strbuf_putc(&sb, ')');
        char *hint = strbuf_failed(&sb) ? NULL : arena_strndup(rt->a, sb.data, sb.len);
        strbuf_deinit(&sb);
        if (!hint)
            return nomem(rt);
        *out = ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(), hint);
        return 0;
    }
    if (obj.t == CT_DICT)
        return ct_error(rt, ERR_INVAL, "unhashable type: 'slice'");
    if (!seq)
        return ct_error(rt, ERR_INVAL, "'%s' object is not subscriptable", ct_type_name(obj));
    if ((rc = slice_bound(rt, parts[0], &start, &has_a)) ||
        (rc = slice_bound(rt, parts[1], &stop, &has_b)) ||
        (rc = slice_bound(rt, parts[2], &step, &has_c)))
        return rc;
    if (!has_c)
        step = 1;
    if (step == 0)
        return ct_error(rt, ERR_INVAL, "slice step cannot be zero");
    if (obj.t == CT_STR) {
        size_t nc = ct_utf8_count(obj.s.p, obj.s.n);
        int64_t cnt = slice_adjust((int64_t)nc, &start, &stop, step, has_a, has_b);
        if (step == 1) {
            size_t b = ct_utf8_offset(obj.s.p, obj.s.n, (size_t)start);
            size_t e = cnt > 0 ? ct_utf8_offset(obj.s.p, obj.s.n, (size_t)(start + cnt)) : b;
            *out = ct_str(obj.s.p + b, e - b);
            out->kind = obj.kind;
            return 0;
        }
        /* general step: collect code point offsets */
        size_t *offs = arena_alloc(rt->a, (nc + 1) * sizeof *offs);
        if (!offs)
            return nomem(rt);
        size_t i = 0, k = 0;
        while (i < obj.s.n) {
            offs[k++] = i;
            ct_utf8_next(obj.s.p, obj.s.n, &i);
        }
        offs[k] = obj.s.n;
        strbuf sb;
        strbuf_init(&sb);
        for (int64_t j = 0, ci = start; j < cnt; j++, ci += step)
            strbuf_append(&sb, obj.s.p + offs[ci], offs[ci + 1] - offs[ci]);
        rc = ct_str_from_buf(rt, &sb, out);
        strbuf_deinit(&sb);
        out->kind = obj.kind;
        return rc;
    }
    if (obj.t == CT_LIST &&
        (obj.kind == CT_SEQ_LIST || obj.kind == CT_SEQ_TUPLE || obj.kind == CT_SEQ_RANGE)) {
        int64_t cnt = slice_adjust((int64_t)obj.l->n, &start, &stop, step, has_a, has_b);
        if ((rc = ct_list_new(rt, (size_t)cnt,
                              obj.kind == CT_SEQ_TUPLE ? CT_SEQ_TUPLE : CT_SEQ_LIST, out)))
            return rc;
        for (int64_t j = 0, ci = start; j < cnt; j++, ci += step)
            out->l->items[j] = obj.l->items[ci];
        return ct_charge(rt, (uint64_t)cnt / 8);
    }
    return ct_error(rt, ERR_INTERNAL, "unreachable slice case");
}

/* ---- operators ---------------------------------------------------------------------------------
 */

static int64_t as_i(ct_val v) {
    return v.t == CT_BOOL ? v.b : v.i;
}
static double as_d(ct_val v) {
    return v.t == CT_FLOAT ? v.f : (double)as_i(v);
}

static int type_err_op(ct_rt *rt, const char *op, ct_val a, ct_val b) {
    return ct_error(rt, ERR_INVAL, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                    ct_type_name(a), ct_type_name(b));
}

static int repeat_seq(ct_rt *rt, ct_val seq, int64_t times, ct_val *out) {
    if (times < 0)
        times = 0;
    if (seq.t == CT_STR) {
        if (seq.s.n && (uint64_t)times > CT_MAX_OUTPUT / seq.s.n)
            return ct_error(rt, ERR_TOOLARGE, "string repetition exceeds %u MiB",
                            CT_MAX_OUTPUT >> 20);
        size_t total = seq.s.n * (size_t)times;
        char *d = arena_alloc(rt->a, total ? total : 1);
        if (!d)
            return nomem(rt);
        for (int64_t i = 0; i < times; i++)
            memcpy(d + (size_t)i * seq.s.n, seq.s.p, seq.s.n);
        *out = ct_str(d, total);
        out->kind = seq.kind;
        return ct_charge(rt, total / 64);
    }
    if (seq.l->n && (uint64_t)times > (CT_MAX_OUTPUT / 16) / seq.l->n)
        return ct_error(rt, ERR_TOOLARGE, "list repetition too large");
    size_t total = seq.l->n * (size_t)times;
    int rc = ct_list_new(rt, total, seq.kind, out);
    if (rc)
        return rc;
    for (size_t i = 0; i < total; i++)
        out->l->items[i] = seq.l->items[i % seq.l->n];
    return ct_charge(rt, total / 8);
}

/* Markup + str escapes the plain side (markupsafe). */
static int add_strings(ct_rt *rt, ct_val a, ct_val b, ct_val *out) {
    if (a.kind == b.kind) {
        int rc = ct_str_cat(rt, a, b, out);
        out->kind = a.kind;
        return rc;
    }
    strbuf sb;
    strbuf_init(&sb);
    if (a.kind)
        strbuf_append(&sb, a.s.p, a.s.n);
    else
        ct_html_escape(&sb, a.s.p, a.s.n);
    if (b.kind)
        strbuf_append(&sb, b.s.p, b.s.n);
    else
        ct_html_escape(&sb, b.s.p, b.s.n);
    return ct_str_take(rt, &sb, 1, out);
}

int ct_int_mod(ct_rt *rt, int64_t x, int64_t y, int64_t *out) {
    if (y == 0)
        return ct_error(rt, ERR_INVAL, "integer modulo by zero");
    int64_t m = y == -1 ? 0 : x % y;
    if (m != 0 && ((m < 0) != (y < 0)))
        m += y;
    *out = m;
    return 0;
}

static int arith(ct_rt *rt, int op, ct_val a, ct_val b, ct_val *out) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
    if (op == CT_OP_MOD && a.t == CT_STR) /* str.__mod__ runs before any reflected method */
        return ct_str_percent(rt, a, b, out);
    if (a.t == CT_UNDEF)
        return ct_undef_fail(rt, a);
    if (b.t == CT_UNDEF)
        return ct_undef_fail(rt, b);
    bool na = ct_is_num(a), nb = ct_is_num(b);
    if (na && nb) {
        bool ints = a.t != CT_FLOAT && b.t != CT_FLOAT;
        int64_t x = as_i(a), y = as_i(b), r = 0;
        double dx = as_d(a), dy = as_d(b);
        switch (op) {
        case CT_OP_ADD:
        case CT_OP_SUB:
        case CT_OP_MUL:
            if (!ints) {
                *out = ct_float(op == CT_OP_ADD ? dx + dy : op == CT_OP_SUB ? dx - dy : dx * dy);
                return 0;
            }
            if (op == CT_OP_ADD   ? __builtin_add_overflow(x, y, &r)
                : op == CT_OP_SUB ? __builtin_sub_overflow(x, y, &r)
                                  : __builtin_mul_overflow(x, y, &r))
                goto overflow;
            *out = ct_int(r);
            return 0;
        case CT_OP_DIV:
            if (dy == 0)
                return ct_error(rt, ERR_INVAL,
                                ints ? "division by zero" : "float division by zero");
            *out = ct_float(dx / dy);
            return 0;
        case CT_OP_FLOORDIV:
            if (ints) {
                if (y == 0)
                    return ct_error(rt, ERR_INVAL, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1)
                    goto overflow;
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0)))
                    q--;
                *out = ct_int(q);
            } else {
                if (dy == 0)
                    return ct_error(rt, ERR_INVAL, "float floor division by zero");
                double m = fmod(dx, dy);
                double div = (dx - m) / dy;
                if (m != 0 && ((dy < 0) != (m < 0)))
                    div -= 1.0;
                double fl = floor(div);
                if (div - fl > 0.5)
                    fl += 1.0;
                *out = ct_float(div != 0 ? fl : copysign(0.0, dx / dy));
            }
            return 0;
        case CT_OP_MOD:
            if (ints) {
                int rc = ct_int_mod(rt, x, y, &r);
                if (rc)
                    return rc;
                *out = ct_int(r);
            } else {
                if (dy == 0)
                    return ct_error(rt, ERR_INVAL, "float modulo");
                double m = fmod(dx, dy);
                if (m != 0) {
                    if ((dy < 0) != (m < 0))
                        m += dy;
                } else {
                    m = copysign(0.0, dy);
                }
                *out = ct_float(m);
            }
            return 0;
        case CT_OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                int64_t e = y;
                while (e > 0) {
                    if (e & 1)
                        if (__builtin_mul_overflow(acc, base, &acc))
                            goto overflow;
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base))
                        goto overflow;
                }
                *out = ct_int(acc);
            } else {
                if (dx == 0 && dy < 0)
                    return ct_error(rt, ERR_INVAL, "0.0 cannot be raised to a negative power");
                *out = ct_float(pow(dx, dy));
            }
            return 0;
        }
    }
    if (op == CT_OP_ADD) {
        if (a.t == CT_STR && b.t == CT_STR)
            return add_strings(rt, a, b, out);
        if (a.t == CT_LIST && b.t == CT_LIST && a.kind == b.kind &&
            (a.kind == CT_SEQ_LIST || a.kind == CT_SEQ_TUPLE)) {
            int rc = ct_list_new(rt, a.l->n + b.l->n, a.kind, out);
            if (rc)
                return rc;
            if (a.l->n)
                memcpy(out->l->items, a.l->items, a.l->n * sizeof(ct_val));
            if (b.l->n)
                memcpy(out->l->items + a.l->n, b.l->items, b.l->n * sizeof(ct_val));
            return ct_charge(rt, (a.l->n + b.l->n) / 8);
        }
        if ((a.t == CT_STR && !a.kind) ||
            (a.t == CT_LIST && (a.kind == CT_SEQ_LIST || a.kind == CT_SEQ_TUPLE)))
            return ct_error(rt, ERR_INVAL, "can only concatenate %s (not \"%s\") to %s",
                            ct_type_name(a), ct_type_name(b), ct_type_name(a));
        return type_err_op(rt, "+", a, b);
    }
    if (op == CT_OP_MUL) {
        bool seq_a =
            a.t == CT_STR || (a.t == CT_LIST && (a.kind == CT_SEQ_LIST || a.kind == CT_SEQ_TUPLE));
        bool seq_b =
            b.t == CT_STR || (b.t == CT_LIST && (b.kind == CT_SEQ_LIST || b.kind == CT_SEQ_TUPLE));
        if (seq_a && (b.t == CT_INT || b.t == CT_BOOL))
            return repeat_seq(rt, a, as_i(b), out);
        if (seq_b && (a.t == CT_INT || a.t == CT_BOOL))
            return repeat_seq(rt, b, as_i(a), out);
        if (seq_a || seq_b)
            return ct_error(rt, ERR_INVAL, "can't multiply sequence by non-int of type '%s'",
                            ct_type_name(seq_a ? b : a));
    }
    return type_err_op(rt, names[op], a, b);
overflow:
    return ct_error(rt, ERR_RANGE, "integer result of '%s' does not fit in 64 bits",
                    op == CT_OP_POW ? "**" : names[op]);
}

static int contains(ct_rt *rt, ct_val item, ct_val seq, bool *out) {
    *out = false;
    switch (seq.t) {
    case CT_UNDEF:
        return 0;
    case CT_STR:
        if (item.t != CT_STR)
            return ct_error(rt, ERR_INVAL,
                            "'in <string>' requires string as left operand, not "
                            "%s",
                            ct_type_name(item));
        *out = ct_memfind(seq.s.p, seq.s.n, item.s.p, item.s.n, 0) >= 0;
        return ct_charge(rt, seq.s.n / 64);
    case CT_LIST:
        if (seq.l->pending)
            return err_set(ERR_INVAL, "%s", seq.l->pending);
        for (size_t i = 0; i < seq.l->n; i++) {
            bool eq;
            int rc = ct_equal(rt, seq.l->items[i], item, &eq);
            if (rc)
                return rc;
            if (eq) {
                *out = true;
                break;
            }
        }
        return ct_charge(rt, seq.l->n / 4);
    case CT_DICT: {
        int rc = ct_hash_check(rt, item);
        if (rc)
            return rc;
        ct_val dummy;
        *out = ct_dict_get(rt, seq.d, item, &dummy);
        return 0;
    }
    default:
        return ct_error(rt, ERR_INVAL, "argument of type '%s' is not iterable", ct_type_name(seq));
    }
}

static int compare_op(ct_rt *rt, int op, ct_val a, ct_val b, bool *out) {
    switch (op) {
    case CT_CMP_EQ:
    case CT_CMP_NE: {
        int rc = ct_equal(rt, a, b, out);
        if (op == CT_CMP_NE)
            *out = !*out;
        return rc;
    }
    case CT_CMP_IN:
    case CT_CMP_NOTIN: {
        int rc = contains(rt, a, b, out);
        if (op == CT_CMP_NOTIN)
            *out = !*out;
        return rc;
    }
    default: {
        static const char *const names[] = {"", "", "<", "<=", ">", ">="};
        int c;
        int rc = ct_compare(rt, a, b, names[op], &c);
        if (rc)
            return rc;
        if (c == 2) { /* NaN */
            *out = false;
            return 0;
        }
        *out = op == CT_CMP_LT   ? c < 0
               : op == CT_CMP_LE ? c <= 0
               : op == CT_CMP_GT ? c > 0
                                 : c >= 0;
        return 0;
    }
    }
}

/* ---- calls -------------------------------------------------------------------------------------
 */

static int call_macro(ct_rt *rt, const ct_macro *m, const ct_val *args, size_t n_args,
                      const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                      size_t n_kw, ct_val *out) {
    const ct_node *def = m->def;
    const char *mname = def->str ? def->str : "caller";
    int mlen = def->str ? (int)def->len : 6;
    if (n_args > def->n_kids2)
        return ct_error(rt, ERR_INVAL, "macro '%.*s' takes not more than %u argument(s)", mlen,
                        mname, def->n_kids2);
    if (rt->call_depth >= CT_MAX_CALL_DEPTH)
        return ct_error(rt, ERR_TOOLARGE, "macro calls nested deeper than %d (macro '%.*s')",
                        CT_MAX_CALL_DEPTH, mlen, mname);
    ct_scope *sc = ct_scope_new(rt, m->closure);
    if (!sc)
        return nomem(rt);
    bool *set = arena_calloc(rt->a, def->n_kids2 ? def->n_kids2 : 1, sizeof *set);
    if (!set)
        return nomem(rt);
    int rc;
    for (size_t i = 0; i < n_args; i++) {
        if ((rc = ct_scope_set(rt, sc, def->kids2[i]->sym, args[i])))
            return rc;
        set[i] = true;
    }
    for (size_t k = 0; k < n_kw; k++) {
        uint32_t i;
        for (i = 0; i < def->n_kids2; i++)
            if (def->kids2[i]->len == kw_lens[k] &&
                memcmp(def->kids2[i]->str, kw_names[k], kw_lens[k]) == 0)
                break;
        if (i == def->n_kids2 || set[i]) /* jinja2 says the same for a duplicate */
            return ct_error(rt, ERR_INVAL, "macro '%.*s' takes no keyword argument '%.*s'", mlen,
                            mname, (int)kw_lens[k], kw_names[k]);
        if ((rc = ct_scope_set(rt, sc, def->kids2[i]->sym, kw_vals[k])))
            return rc;
        set[i] = true;
    }
    for (uint32_t i = 0; i < def->n_kids2; i++) {
        if (set[i])
            continue;
        const ct_node *param = def->kids2[i];
        ct_val v;
        if (param->a) {
            if ((rc = ct_eval(rt, param->a, sc, &v)))
                return rc;
        } else {
            char *hint = arena_alloc(rt->a, param->len + 40);
            if (!hint)
                return nomem(rt);
            memcpy(hint, "parameter '", 11);
            memcpy(hint + 11, param->str, param->len);
            memcpy(hint + 11 + param->len, "' was not provided", 19);
            v = ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(), hint);
        }
        if ((rc = ct_scope_set(rt, sc, param->sym, v)))
            return rc;
    }
    rt->call_depth++;
    rc = capture(rt, def->kids, def->n_kids, sc, out);
    rt->call_depth--;
    return rc;
}

int ct_call_value(ct_rt *rt, ct_val fn, const ct_val *args, size_t n_args, const char **kw_names,
                  const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, ct_val *out) {
    switch (fn.t) {
    case CT_MACRO:
        return call_macro(rt, fn.m, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out);
    case CT_FUNC:
        return ct_func_call(rt, fn.fn, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out);
    case CT_UNDEF:
        return ct_undef_fail(rt, fn);
    default:
        return ct_error(rt, ERR_INVAL, "'%s' object is not callable", ct_type_name(fn));
    }
}

typedef struct argv {
    ct_val *args;
    size_t n_args;
    const char **kw_names;
    size_t *kw_lens;
    ct_val *kw_vals;
    size_t n_kw;
} argv;

/* Evaluates the arguments of a call, filter or test node (kids, kids2, *c, **d). */
static int eval_args(ct_rt *rt, const ct_node *n, ct_scope *sc, argv *av) {
    int rc;
    const ct_val *star = NULL;
    size_t n_star = 0;
    ct_val kwd = ct_none();
    if (n->c) {
        ct_val v;
        if ((rc = ct_eval(rt, n->c, sc, &v)) || (rc = ct_iterate(rt, v, &star, &n_star)))
            return rc;
    }
    if (n->d) {
        if ((rc = ct_eval(rt, n->d, sc, &kwd)))
            return rc;
        if (kwd.t != CT_DICT)
            return ct_error(rt, ERR_INVAL, "argument after ** must be a mapping, not %s",
                            ct_type_name(kwd));
    }
    size_t na = n->n_kids + n_star, nk = n->n_kids2 + (kwd.t == CT_DICT ? kwd.d->n : 0);
    av->args = arena_alloc(rt->a, (na ? na : 1) * sizeof *av->args);
    av->kw_names = arena_alloc(rt->a, (nk ? nk : 1) * sizeof *av->kw_names);
    av->kw_lens = arena_alloc(rt->a, (nk ? nk : 1) * sizeof *av->kw_lens);
    av->kw_vals = arena_alloc(rt->a, (nk ? nk : 1) * sizeof *av->kw_vals);
    if (!av->args || !av->kw_names || !av->kw_lens || !av->kw_vals)
        return nomem(rt);
    for (uint32_t i = 0; i < n->n_kids; i++)
        if ((rc = ct_eval(rt, n->kids[i], sc, &av->args[i])))
            return rc;
    for (size_t i = 0; i < n_star; i++)
        av->args[n->n_kids + i] = star[i];
    av->n_args = na;
    for (uint32_t i = 0; i < n->n_kids2; i++) {
        av->kw_names[i] = n->kids2[i]->str;
        av->kw_lens[i] = n->kids2[i]->len;
        if ((rc = ct_eval(rt, n->kids2[i]->a, sc, &av->kw_vals[i])))
            return rc;
    }
    size_t k = n->n_kids2;
    if (kwd.t == CT_DICT)
        for (size_t i = 0; i < kwd.d->n; i++, k++) {
            if (kwd.d->keys[i].t != CT_STR)
                return ct_error(rt, ERR_INVAL, "keywords must be strings");
            av->kw_names[k] = kwd.d->keys[i].s.p;
            av->kw_lens[k] = kwd.d->keys[i].s.n;
            av->kw_vals[k] = kwd.d->vals[i];
        }
    av->n_kw = k;
    rt->line = n->line;
    return 0;
}

/* ---- expressions -------------------------------------------------------------------------------
 */

/* [a, b] and (a, b): a new list or tuple of the evaluated items. */
static int eval_node_list(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    if ((rc = ct_list_new(rt, n->n_kids, n->kind == N_LIST ? CT_SEQ_LIST : CT_SEQ_TUPLE, out)))
        return rc;
    for (uint32_t i = 0; i < n->n_kids; i++)
        if ((rc = ct_eval(rt, n->kids[i], sc, &out->l->items[i])))
            return rc;
    return 0;
}

/* {k: v, ...}: a new dict, keys checked hashable, later keys replacing earlier ones. */
static int eval_node_dict(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a, b, d;
    if ((rc = ct_dict_new(rt, n->n_kids, &d)))
        return rc;
    for (uint32_t i = 0; i < n->n_kids; i++) {
        if ((rc = ct_eval(rt, n->kids[i], sc, &a)) || (rc = ct_eval(rt, n->kids2[i], sc, &b)))
            return rc;
        rt->line = n->line;
        if ((rc = ct_hash_check(rt, a)) || (rc = ct_dict_set(rt, d.d, a, b)))
            return rc;
    }
    *out = d;
    return 0;
}

/* f(args...): calls the evaluated callee with the evaluated arguments (never constant). */
static int eval_node_call(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a;
    if (rt->const_mode)
        return ct_error(rt, ERR_INVAL, "not constant");
    if ((rc = ct_eval(rt, n->a, sc, &a)))
        return rc;
    argv av;
    if ((rc = eval_args(rt, n, sc, &av)))
        return rc;
    return ct_call_value(rt, a, av.args, av.n_args, av.kw_names, av.kw_lens, av.kw_vals, av.n_kw,
                         out);
}

/* The arguments of filter or test node n (what: "filter", "test"), once n names a known one:
 * ERR_UNSUPPORTED for one jinja2 has and this engine does not (n->op set), ERR_INVAL for none. */
static int eval_callee_args(ct_rt *rt, const ct_node *n, ct_scope *sc, const char *what, argv *av) {
    if (n->fid < 0) {
        if (n->op)
            return ct_error(rt, ERR_UNSUPPORTED, "unsupported %s '%.*s'", what, (int)n->len,
                            n->str);
        return ct_error(rt, ERR_INVAL, "No %s named '%.*s' found.", what, (int)n->len, n->str);
    }
    return eval_args(rt, n, sc, av);
}

/* x | f(args...), or a {% filter %} block's input when n->a is NULL. */
static int eval_node_filter(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a;
    if (rt->const_mode && (!n->a || ct_filter_needs_context(n->fid)))
        return ct_error(rt, ERR_INVAL, "not constant");
    if (n->a) {
        if ((rc = ct_eval(rt, n->a, sc, &a)))
            return rc;
    } else {
        a = rt->block_input;
    }
    rt->line = n->line;
    argv av;
    if ((rc = eval_callee_args(rt, n, sc, "filter", &av)))
        return rc;
    return ct_filter_apply(rt, n, a, av.args, av.n_args, av.kw_names, av.kw_lens, av.kw_vals,
                           av.n_kw, out);
}

/* x is t(args...): a bool. */
static int eval_node_test(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a;
    if ((rc = ct_eval(rt, n->a, sc, &a)))
        return rc;
    rt->line = n->line;
    argv av;
    if ((rc = eval_callee_args(rt, n, sc, "test", &av)))
        return rc;
    bool r;
    if ((rc = ct_test_apply(rt, n->fid, n->str, a, av.args, av.n_args, &r)))
        return rc;
    *out = ct_bool(r);
    return 0;
}

/* -x and +x on numbers (bools count as ints); -INT64_MIN is a range error. */
static int eval_node_unary(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a;
    if ((rc = ct_eval(rt, n->a, sc, &a)))
        return rc;
    rt->line = n->line;
    if (a.t == CT_UNDEF)
        return ct_undef_fail(rt, a);
    if (a.t == CT_FLOAT)
        *out = ct_float(n->kind == N_NEG ? -a.f : a.f);
    else if (a.t == CT_INT || a.t == CT_BOOL) {
        int64_t i = as_i(a);
        if (n->kind == N_NEG && i == INT64_MIN)
            return ct_error(rt, ERR_RANGE, "integer negation overflows 64 bits");
        *out = ct_int(n->kind == N_NEG ? -i : i);
    } else
        return ct_error(rt, ERR_INVAL, "bad operand type for unary %c: '%s'",
                        n->kind == N_NEG ? '-' : '+', ct_type_name(a));
    return 0;
}

/* a ~ b ~ ...: the operands' string forms joined, at most CT_MAX_OUTPUT bytes. */
static int eval_node_concat(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc = 0;
    ct_val a;
    strbuf sb;
    strbuf_init(&sb);
    for (uint32_t i = 0; i < n->n_kids && !rc; i++) {
        if (!(rc = ct_eval(rt, n->kids[i], sc, &a)))
            rc = ct_to_str(rt, a, &sb);
        if (!rc && sb.len > CT_MAX_OUTPUT)
            rc = ct_error(rt, ERR_TOOLARGE, "string exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    }
    if (!rc)
        rc = ct_str_from_buf(rt, &sb, out);
    strbuf_deinit(&sb);
    return rc;
}

/* a < b <= c ...: chained comparisons, stopping at the first false one. */
static int eval_node_compare(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a, b;
    if ((rc = ct_eval(rt, n->a, sc, &a)))
        return rc;
    bool r = true;
    for (uint32_t i = 0; i < n->n_kids && r; i++) {
        if ((rc = ct_eval(rt, n->kids[i]->a, sc, &b)))
            return rc;
        rt->line = n->line;
        if ((rc = compare_op(rt, n->kids[i]->op, a, b, &r)))
            return rc;
        a = b;
    }
    *out = ct_bool(r);
    return 0;
}

/* b if a else c; without an else, an undefined with Jinja2's hint. */
static int eval_node_condexpr(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a;
    if ((rc = ct_eval(rt, n->a, sc, &a)))
        return rc;
    if (ct_truthy(a))
        return ct_eval(rt, n->b, sc, out);
    if (n->c)
        return ct_eval(rt, n->c, sc, out);
    if (rt->const_mode) /* nodes.CondExpr.as_const: leave the undefined for run time */
        return ct_error(rt, ERR_INVAL, "not constant");
    *out = ct_undef_make(rt, CT_UNDEF_HINT, NULL, ct_none(),
                         "the inline if-expression evaluated to false and no else section "
                         "was defined.");
    return 0;
}

static int eval_inner(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    int rc;
    ct_val a, b;
    switch (n->kind) {
    case N_CONST:
        *out = n->lit;
        return 0;
    case N_NAME:
        if (rt->const_mode)
            return ct_error(rt, ERR_INVAL, "not constant");
        return lookup(rt, sc, n, out);
    case N_LIST:
    case N_TUPLE:
        return eval_node_list(rt, n, sc, out);
    case N_DICT:
        return eval_node_dict(rt, n, sc, out);
    case N_GETATTR:
        if ((rc = ct_eval(rt, n->a, sc, &a)))
            return rc;
        rt->line = n->line;
        return ct_getattr(rt, a, n->str, n->len, out);
    case N_GETITEM:
        if ((rc = ct_eval(rt, n->a, sc, &a)))
            return rc;
        if (n->b->kind == N_SLICE)
            return eval_slice(rt, a, n->b, sc, out);
        if ((rc = ct_eval(rt, n->b, sc, &b)))
            return rc;
        rt->line = n->line;
        return ct_getitem(rt, a, b, out);
    case N_SLICE:
        return ct_error(rt, ERR_INTERNAL, "slice outside subscript");
    case N_CALL:
        return eval_node_call(rt, n, sc, out);
    case N_FILTER:
        return eval_node_filter(rt, n, sc, out);
    case N_TEST:
        return eval_node_test(rt, n, sc, out);
    case N_NOT:
        if ((rc = ct_eval(rt, n->a, sc, &a)))
            return rc;
        *out = ct_bool(!ct_truthy(a));
        return 0;
    case N_NEG:
    case N_POS:
        return eval_node_unary(rt, n, sc, out);
    case N_BINOP:
        if ((rc = ct_eval(rt, n->a, sc, &a)) || (rc = ct_eval(rt, n->b, sc, &b)))
            return rc;
        rt->line = n->line;
        return arith(rt, n->op, a, b, out);
    case N_AND:
    case N_OR:
        /* short-circuit: the left operand when it decides, else the right one */
        if ((rc = ct_eval(rt, n->a, sc, &a)))
            return rc;
        if (ct_truthy(a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        return ct_eval(rt, n->b, sc, out);
    case N_CONCAT:
        return eval_node_concat(rt, n, sc, out);
    case N_COMPARE:
        return eval_node_compare(rt, n, sc, out);
    case N_CONDEXPR:
        return eval_node_condexpr(rt, n, sc, out);
    default:
        return ct_error(rt, ERR_INTERNAL, "node kind %d is not an expression", n->kind);
    }
}

int ct_eval(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out) {
    rt->line = n->line;
    if (++rt->eval_depth > CT_MAX_EVAL_DEPTH) {
        rt->eval_depth--;
        return ct_error(rt, ERR_TOOLARGE, "evaluation nested deeper than %d levels",
                        CT_MAX_EVAL_DEPTH);
    }
    int rc = ct_charge(rt, 1);
    if (!rc)
        rc = eval_inner(rt, n, sc, out);
    rt->eval_depth--;
    return rc;
}

/* ---- statements --------------------------------------------------------------------------------
 */

static int assign(ct_rt *rt, const ct_node *target, ct_val v, ct_scope *sc) {
    int rc;
    if (target->kind == N_NAME)
        return ct_scope_set(rt, sc, target->sym, v);
    if (target->kind == N_NSREF) {
        ct_val ns;
        if (!scope_get(sc, target->sym, &ns))
            ns = ct_undef_val();
        if (ns.t != CT_NS)
            return ct_error(rt, ERR_INVAL, "cannot assign attribute on non-namespace object");
        return ct_dict_set(rt, ns.d, ct_str(target->str2, target->len2), v);
    }
    /* tuple unpacking */
    const ct_val *items;
    size_t n;
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    if ((rc = ct_iterate(rt, v, &items, &n)))
        return ct_error(rt, ERR_INVAL, "cannot unpack non-iterable %s object", ct_type_name(v));
    if (n < target->n_kids)
        return ct_error(rt, ERR_INVAL, "not enough values to unpack (expected %u, got %zu)",
                        target->n_kids, n);
    if (n > target->n_kids)
        return ct_error(rt, ERR_INVAL, "too many values to unpack (expected %u)", target->n_kids);
    for (uint32_t i = 0; i < target->n_kids; i++)
        if ((rc = assign(rt, target->kids[i], items[i], sc)))
            return rc;
    return 0;
}

static int exec_output(ct_rt *rt, const ct_node *n, ct_scope *sc) {
    int rc;
    for (uint32_t i = 0; i < n->n_kids; i++) {
        const ct_node *k = n->kids[i];
        if (k->kind == N_DATA) {
            strbuf_append(rt->out, k->str, k->len);
        } else {
            ct_val v;
            if ((rc = ct_eval(rt, k, sc, &v)))
                return rc;
            if (v.t == CT_STR)
                strbuf_append(rt->out, v.s.p, v.s.n);
            else if ((rc = ct_to_str(rt, v, rt->out)))
                return rc;
        }
        if ((rc = check_out(rt)))
            return rc;
    }
    return 0;
}

/* The scope of a loop iteration under sc: prev emptied when reuse allows, else a new one. NULL
 * when out of memory. */
static ct_scope *for_scope(ct_rt *rt, ct_scope *sc, ct_scope *prev, bool reuse) {
    if (prev && reuse) {
        prev->n = 0;
        return prev;
    }
    return ct_scope_new(rt, sc);
}

static int exec_for(ct_rt *rt, const ct_node *n, ct_scope *sc) {
    ct_val it;
    int rc;
    if ((rc = ct_eval(rt, n->b, sc, &it)))
        return rc;
    rt->line = n->line;
    const ct_val *items;
    size_t cnt;
    if ((rc = ct_iterate(rt, it, &items, &cnt)))
        return rc;
    /* Frames are reused from one iteration to the next unless the body defines a macro (whose
     * closure would keep the frame): memory stays flat however long the loop runs. The loop
     * object is one per loop, as jinja2's LoopContext is. */
    bool reuse = !n->op;
    ct_scope *is = NULL;
    if (n->c && cnt) { /* inline filter: `for x in xs if cond` */
        ct_val *kept = arena_alloc(rt->a, cnt * sizeof *kept);
        if (!kept)
            return nomem(rt);
        size_t k = 0;
        for (size_t i = 0; i < cnt; i++) {
            if ((rc = ct_charge(rt, 1)))
                return rc;
            if (!(is = for_scope(rt, sc, is, reuse)))
                return nomem(rt);
            ct_val keep;
            if ((rc = assign(rt, n->a, items[i], is)) || (rc = ct_eval(rt, n->c, is, &keep)))
                return rc;
            if (ct_truthy(keep))
                kept[k++] = items[i];
        }
        items = kept;
        cnt = k;
    }
    if (cnt == 0) {
        if (!n->n_kids2)
            return 0;
        ct_scope *es = ct_scope_new(rt, sc);
        if (!es)
            return nomem(rt);
        return ct_exec_body(rt, n->kids2, n->n_kids2, es);
    }
    int loop_sym = rt->t->sym_loop;
    ct_loop *l = NULL;
    if (loop_sym >= 0) {
        if (!(l = arena_alloc(rt->a, sizeof *l)))
            return nomem(rt);
        l->items = items;
        l->n = cnt;
    }
    is = NULL;
    for (size_t i = 0; i < cnt; i++) {
        if ((rc = ct_charge(rt, 1)))
            return rc;
        if (!(is = for_scope(rt, sc, is, reuse)))
            return nomem(rt);
        rt->line = n->line;
        if ((rc = assign(rt, n->a, items[i], is)))
            return rc;
        if (l) {
            l->i = i;
            ct_val lv = {.t = CT_LOOP};
            lv.loop = l;
            if ((rc = ct_scope_set(rt, is, loop_sym, lv)))
                return rc;
        }
        if ((rc = ct_exec_body(rt, n->kids, n->n_kids, is)))
            return rc;
        if (rt->loop_ctl == N_BREAK) {
            rt->loop_ctl = 0;
            break;
        }
        rt->loop_ctl = 0;
    }
    return 0;
}

/* Applies the filter chain of a filter/set block to the captured body. */
static int apply_block_filter(ct_rt *rt, const ct_node *chain, ct_val body, ct_scope *sc,
                              ct_val *out) {
    if (!chain) {
        *out = body;
        return 0;
    }
    ct_val saved = rt->block_input;
    rt->block_input = body;
    int rc = ct_eval(rt, chain, sc, out);
    rt->block_input = saved;
    return rc;
}

static int exec_stmt(ct_rt *rt, const ct_node *n, ct_scope *sc) {
    int rc;
    ct_val v;
    rt->line = n->line;
    switch (n->kind) {
    case N_OUTPUT:
        return exec_output(rt, n, sc);
    case N_IF:
        if ((rc = ct_eval(rt, n->a, sc, &v)))
            return rc;
        if (ct_truthy(v))
            return ct_exec_body(rt, n->kids, n->n_kids, sc);
        return ct_exec_body(rt, n->kids2, n->n_kids2, sc);
    case N_FOR:
        return exec_for(rt, n, sc);
    case N_SET:
        if ((rc = ct_eval(rt, n->b, sc, &v)))
            return rc;
        rt->line = n->line;
        return assign(rt, n->a, v, sc);
    case N_SETBLOCK:
    case N_FILTERBLOCK: {
        ct_scope *bs = ct_scope_new(rt, sc);
        if (!bs)
            return nomem(rt);
        ct_val body;
        if ((rc = capture(rt, n->kids, n->n_kids, bs, &body)) ||
            (rc = apply_block_filter(rt, n->b, body, bs, &v)))
            return rc;
        rt->line = n->line;
        if (n->kind == N_SETBLOCK)
            return assign(rt, n->a, v, sc);
        if ((rc = ct_to_str(rt, v, rt->out)))
            return rc;
        return check_out(rt);
    }
    case N_MACRO: {
        ct_macro *m = arena_alloc(rt->a, sizeof *m);
        if (!m)
            return nomem(rt);
        m->def = n;
        m->closure = sc;
        ct_val mv = {.t = CT_MACRO};
        mv.m = m;
        return ct_scope_set(rt, sc, n->sym, mv);
    }
    case N_GENERATION: {
        ct_scope *gs = ct_scope_new(rt, sc);
        if (!gs)
            return nomem(rt);
        rc = ct_exec_body(rt, n->kids, n->n_kids, gs);
        rt->loop_ctl = 0;
        return rc;
    }
    case N_WITH: {
        ct_scope *ws = ct_scope_new(rt, sc);
        if (!ws)
            return nomem(rt);
        for (uint32_t i = 0; i < n->n_kids2; i++) {
            if ((rc = ct_eval(rt, n->kids2[i]->b, sc, &v)) ||
                (rc = assign(rt, n->kids2[i]->a, v, ws)))
                return rc;
        }
        return ct_exec_body(rt, n->kids, n->n_kids, ws);
    }
    case N_BREAK:
    case N_CONTINUE:
        rt->loop_ctl = n->kind;
        return 0;
    default:
        return ct_error(rt, ERR_INTERNAL, "node kind %d is not a statement", n->kind);
    }
}

int ct_exec_body(ct_rt *rt, ct_node *const *body, uint32_t n, ct_scope *sc) {
    if (++rt->eval_depth > CT_MAX_EVAL_DEPTH) {
        rt->eval_depth--;
        return ct_error(rt, ERR_TOOLARGE, "evaluation nested deeper than %d levels",
                        CT_MAX_EVAL_DEPTH);
    }
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        if ((rc = ct_charge(rt, 1)))
            break;
        rc = exec_stmt(rt, body[i], sc);
        if (rt->loop_ctl)
            break;
    }
    rt->eval_depth--;
    return rc;
}
