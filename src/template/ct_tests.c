/* SPDX-License-Identifier: MIT */
/*
 * ct_tests: jinja2's builtin tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...) for
 * the chat-template engine, with jinja2 3.1's definitions (jinja2/tests.py): `sequence` is true
 * for dicts and for undefined values, `number` for booleans, `callable` for undefined values,
 * `odd`/`divisibleby` on a string run Python's "%" formatting, and so on. select/reject reach
 * them by name through ct_test_by_name.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <math.h>
#include <string.h>

enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOAT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
};

static const ct_named tests[] = {
    {"boolean", T_BOOLEAN},
    {"callable", T_CALLABLE},
    {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"==", T_EQ},
    {"escaped", T_ESCAPED},
    {"even", T_EVEN},
    {"false", T_FALSE},
    {"filter", T_FILTER},
    {"float", T_FLOAT},
    {"ge", T_GE},
    {">=", T_GE},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {">", T_GT},
    {"in", T_IN},
    {"integer", T_INTEGER},
    {"iterable", T_ITERABLE},
    {"le", T_LE},
    {"<=", T_LE},
    {"lower", T_LOWER},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"<", T_LT},
    {"mapping", T_MAPPING},
    {"ne", T_NE},
    {"!=", T_NE},
    {"none", T_NONE},
    {"number", T_NUMBER},
    {"odd", T_ODD},
    {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE},
    {"string", T_STRING},
    {"test", T_TEST},
    {"true", T_TRUE},
    {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

int ct_test_id(const char *name, size_t len, bool *known_unsupported) {
    *known_unsupported = false;
    const ct_named *t = ct_named_find(tests, sizeof tests / sizeof *tests, name, len);
    return t ? t->id : -1;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static int test_mod(ct_rt *rt, ct_val v, ct_val m, int64_t *out) {
    if (v.t == CT_STR) { /* value % num formats the string; the result never equals 0 or 1 */
        ct_val r;
        int rc = ct_str_percent(rt, v, m, &r);
        *out = 2;
        return rc;
    }
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    if ((v.t == CT_INT || v.t == CT_BOOL) && (m.t == CT_INT || m.t == CT_BOOL)) {
        return ct_int_mod(rt, v.t == CT_BOOL ? v.b : v.i, m.t == CT_BOOL ? m.b : m.i, out);
    }
    if (ct_is_num(v) && ct_is_num(m)) {
        double x = v.t == CT_FLOAT ? v.f : (double)(v.t == CT_BOOL ? v.b : v.i);
        double y = m.t == CT_FLOAT ? m.f : (double)(m.t == CT_BOOL ? m.b : m.i);
        if (y == 0)
            return ct_error(rt, ERR_INVAL, "float modulo");
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0)))
            r += y;
        *out = r == 0 ? 0 : (r == 1 ? 1 : 2);
        return 0;
    }
    return ct_error(rt, ERR_INVAL, "unsupported operand type(s) for %%: '%s' and '%s'",
                    ct_type_name(v), ct_type_name(m));
}

static bool str_case_test(ct_val v, bool want_lower) {
    /* str.islower(): at least one cased char and no cased char of the other case */
    size_t i = 0;
    bool cased = false;
    while (i < v.s.n) {
        uint32_t cp = ct_utf8_next(v.s.p, v.s.n, &i);
        bool up = ct_is_upper_cp(cp), lo = ct_is_lower_cp(cp);
        if (want_lower ? up : lo)
            return false;
        if (up || lo)
            cased = true;
    }
    return cased;
}

int ct_test_apply(ct_rt *rt, int tid, const char *name, ct_val v, const ct_val *args, size_t n_args,
                  bool *out) {
    int rc;
    (void)name;
    const char *tname = "?";
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tests[i].id == tid) {
            tname = tests[i].name;
            break;
        }
    bool need_arg = tid == T_DIVISIBLEBY || tid == T_EQ || tid == T_NE || tid == T_LT ||
                    tid == T_LE || tid == T_GT || tid == T_GE || tid == T_IN || tid == T_SAMEAS;
    if (need_arg && n_args < 1)
        return ct_error(rt, ERR_INVAL, "test '%s' needs an argument", tname);
    switch (tid) {
    case T_BOOLEAN:
        *out = v.t == CT_BOOL;
        return 0;
    case T_CALLABLE:
        *out = v.t == CT_MACRO || v.t == CT_FUNC || v.t == CT_UNDEF;
        return 0;
    case T_DEFINED:
        *out = v.t != CT_UNDEF;
        return 0;
    case T_UNDEFINED:
        *out = v.t == CT_UNDEF;
        return 0;
    case T_NONE:
        *out = v.t == CT_NONE;
        return 0;
    case T_FALSE:
        *out = v.t == CT_BOOL && !v.b;
        return 0;
    case T_TRUE:
        *out = v.t == CT_BOOL && v.b;
        return 0;
    case T_INTEGER:
        *out = v.t == CT_INT || (v.t == CT_FLOAT && v.kind == 1);
        return 0;
    case T_FLOAT:
        *out = v.t == CT_FLOAT && v.kind != 1;
        return 0;
    case T_NUMBER:
        *out = ct_is_num(v);
        return 0;
    case T_STRING:
        *out = v.t == CT_STR;
        return 0;
    case T_MAPPING:
        *out = v.t == CT_DICT;
        return 0;
    case T_ESCAPED:
        *out = v.t == CT_STR && v.kind;
        return 0;
    case T_SEQUENCE:
        *out = v.t == CT_STR || v.t == CT_DICT || v.t == CT_UNDEF ||
               (v.t == CT_LIST &&
                (v.kind == CT_SEQ_LIST || v.kind == CT_SEQ_TUPLE || v.kind == CT_SEQ_RANGE));
        return 0;
    case T_ITERABLE:
        *out =
            v.t == CT_STR || v.t == CT_DICT || v.t == CT_UNDEF || v.t == CT_LIST || v.t == CT_LOOP;
        return 0;
    case T_ODD:
    case T_EVEN: {
        int64_t r;
        if ((rc = test_mod(rt, v, ct_int(2), &r)))
            return rc;
        *out = tid == T_ODD ? r == 1 : r == 0;
        return 0;
    }
    case T_DIVISIBLEBY: {
        int64_t r;
        if ((rc = test_mod(rt, v, args[0], &r)))
            return rc;
        *out = r == 0;
        return 0;
    }
    case T_EQ:
    case T_NE:
        if ((rc = ct_equal(rt, v, args[0], out)))
            return rc;
        if (tid == T_NE)
            *out = !*out;
        return 0;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        static const char *const ops[] = {[T_LT] = "<", [T_LE] = "<=", [T_GT] = ">", [T_GE] = ">="};
        int c;
        if ((rc = ct_compare(rt, v, args[0], ops[tid], &c)))
            return rc;
        *out = c == 2        ? false
               : tid == T_LT ? c < 0
               : tid == T_LE ? c <= 0
               : tid == T_GT ? c > 0
                             : c >= 0;
        return 0;
    }
    case T_IN: {
        ct_val seq = args[0];
        if (seq.t == CT_STR) {
            if (v.t != CT_STR)
                return ct_error(rt, ERR_INVAL,
                                "'in <string>' requires string as left operand, "
                                "not %s",
                                ct_type_name(v));
            *out = ct_memfind(seq.s.p, seq.s.n, v.s.p, v.s.n, 0) >= 0;
            return 0;
        }
        if (seq.t == CT_DICT) {
            ct_val d;
            if ((rc = ct_hash_check(rt, v)))
                return rc;
            *out = ct_dict_get(rt, seq.d, v, &d);
            return 0;
        }
        const ct_val *items;
        size_t n;
        if (seq.t != CT_LIST && seq.t != CT_UNDEF)
            return ct_error(rt, ERR_INVAL, "argument of type '%s' is not iterable",
                            ct_type_name(seq));
        if ((rc = ct_iterate(rt, seq, &items, &n)))
            return rc;
        *out = false;
        for (size_t i = 0; i < n && !*out; i++)
            if ((rc = ct_equal(rt, items[i], v, out)))
                return rc;
        return 0;
    }
    case T_SAMEAS: {
        ct_val o = args[0];
        if (v.t != o.t) {
            *out = false;
        } else if (v.t == CT_NONE || v.t == CT_UNDEF) {
            *out = v.t == CT_NONE;
        } else if (v.t == CT_BOOL || v.t == CT_INT) {
            *out = v.i == o.i || (v.t == CT_BOOL && v.b == o.b);
        } else if (v.t == CT_STR) {
            *out = v.s.p == o.s.p && v.s.n == o.s.n;
        } else {
            *out = v.l == o.l;
        }
        return 0;
    }
    case T_LOWER:
    case T_UPPER: {
        ct_val s;
        if ((rc = ct_stringify(rt, v, &s)))
            return rc;
        *out = str_case_test(s, tid == T_LOWER);
        return 0;
    }
    case T_FILTER:
    case T_TEST: {
        bool unsupported;
        *out = v.t == CT_STR && (tid == T_FILTER ? ct_filter_id(v.s.p, v.s.n, &unsupported)
                                                 : ct_test_id(v.s.p, v.s.n, &unsupported)) >= 0;
        return 0;
    }
    default:
        return ct_error(rt, ERR_INTERNAL, "test id %d", tid);
    }
}

int ct_test_by_name(ct_rt *rt, const char *name, size_t len, ct_val input, const ct_val *args,
                    size_t n_args, bool *out) {
    bool unsupported;
    int tid = ct_test_id(name, len, &unsupported);
    if (tid < 0) /* jinja2's environment.call_test wording (no "found") */
        return ct_error(rt, ERR_INVAL, "No test named '%.*s'.", (int)len, name);
    return ct_test_apply(rt, tid, name, input, args, n_args, out);
}
