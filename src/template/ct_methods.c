/* SPDX-License-Identifier: MIT */
/*
 * ct_methods: what templates call with parentheses: Python's str, dict and list methods as jinja2's
 * ImmutableSandboxedEnvironment exposes them, and the globals of a Hugging Face chat-template
 * environment (range, namespace, dict, raise_exception, strftime_now).
 *
 * The sandbox rules are kept: methods that mutate a list or dict (append, pop, update, ...) are
 * "unsafe": looking them up yields an undefined value whose use raises jinja2's SecurityError
 * message, which is what real templates that try `list.append` get from Hugging Face. range() is
 * capped at 100000 items as in the sandbox. str.format follows Python's format-spec mini-language
 * for the common cases (fill, align, width, precision, s/d/f/e/g/x/o/b/%); "%" formatting likewise.
 * strftime_now formats the render's fixed instant (chat_render_opts.now_unix) in UTC with the C
 * locale's English names.
 */
#include "template/ct_int.h"

#include "base/err.h"
#include "base/mem.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    M_STARTSWITH,
    M_ENDSWITH,
    M_SPLIT,
    M_RSPLIT,
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_LOWER,
    M_UPPER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_RFIND,
    M_INDEX,
    M_RINDEX,
    M_COUNT,
    M_FORMAT,
    M_JOIN,
    M_SPLITLINES,
    M_ISDIGIT,
    M_ISALPHA,
    M_ISALNUM,
    M_ISSPACE,
    M_ISLOWER,
    M_ISUPPER,
    M_ISNUMERIC,
    M_ISDECIMAL,
    M_CENTER,
    M_LJUST,
    M_RJUST,
    M_ZFILL,
    M_PARTITION,
    M_RPARTITION,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_CASEFOLD,
    M_SWAPCASE,
    /* dict */
    M_GET,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_COPY,
    /* list / tuple (index and count are shared names with str) */
    M_LIST_INDEX,
    M_LIST_COUNT,
    M_LIST_COPY,
};

static const ct_named str_methods[] = {
    {"startswith", M_STARTSWITH},
    {"endswith", M_ENDSWITH},
    {"split", M_SPLIT},
    {"rsplit", M_RSPLIT},
    {"strip", M_STRIP},
    {"lstrip", M_LSTRIP},
    {"rstrip", M_RSTRIP},
    {"lower", M_LOWER},
    {"upper", M_UPPER},
    {"title", M_TITLE},
    {"capitalize", M_CAPITALIZE},
    {"replace", M_REPLACE},
    {"find", M_FIND},
    {"rfind", M_RFIND},
    {"index", M_INDEX},
    {"rindex", M_RINDEX},
    {"count", M_COUNT},
    {"format", M_FORMAT},
    {"join", M_JOIN},
    {"splitlines", M_SPLITLINES},
    {"isdigit", M_ISDIGIT},
    {"isalpha", M_ISALPHA},
    {"isalnum", M_ISALNUM},
    {"isspace", M_ISSPACE},
    {"islower", M_ISLOWER},
    {"isupper", M_ISUPPER},
    {"isnumeric", M_ISNUMERIC},
    {"isdecimal", M_ISDECIMAL},
    {"center", M_CENTER},
    {"ljust", M_LJUST},
    {"rjust", M_RJUST},
    {"zfill", M_ZFILL},
    {"partition", M_PARTITION},
    {"rpartition", M_RPARTITION},
    {"removeprefix", M_REMOVEPREFIX},
    {"removesuffix", M_REMOVESUFFIX},
    {"casefold", M_CASEFOLD},
    {"swapcase", M_SWAPCASE},
};

static int nomem(ct_rt *rt) {
    return ct_error(rt, ERR_NOMEM, "out of memory");
}

static int make_func(ct_rt *rt, int id, ct_val self, const char *name, ct_val *out) {
    ct_func *fn = arena_alloc(rt->a, sizeof *fn);
    if (!fn)
        return nomem(rt);
    fn->id = id;
    fn->self = self;
    fn->name = name;
    ct_val v = {.t = CT_FUNC};
    v.fn = fn;
    *out = v;
    return 0;
}

bool ct_method_lookup(ct_rt *rt, ct_val self, const char *name, size_t len, ct_val *out,
                      bool *unsafe) {
    *unsafe = false;
    const ct_named *m = NULL;
    if (self.t == CT_STR) {
        m = ct_named_find(str_methods, sizeof str_methods / sizeof *str_methods, name, len);
    } else if (self.t == CT_DICT) {
        static const ct_named dict_methods[] = {
            {"get", M_GET},       {"items", M_ITEMS}, {"keys", M_KEYS},
            {"values", M_VALUES}, {"copy", M_COPY},
        };
        m = ct_named_find(dict_methods, sizeof dict_methods / sizeof *dict_methods, name, len);
        static const char *const bad[] = {"pop",   "popitem",  "setdefault", "update",
                                          "clear", "fromkeys", NULL};
        for (int i = 0; bad[i]; i++)
            if (ct_name_is(name, len, bad[i]))
                *unsafe = true;
    } else if (self.t == CT_LIST && (self.kind == CT_SEQ_LIST || self.kind == CT_SEQ_TUPLE)) {
        static const ct_named list_methods[] = {
            {"index", M_LIST_INDEX}, {"count", M_LIST_COUNT}, {"copy", M_LIST_COPY}};
        /* copy is a list's, not a tuple's */
        m = ct_named_find(list_methods, self.kind == CT_SEQ_LIST ? 3 : 2, name, len);
        if (!m && self.kind == CT_SEQ_LIST) {
            static const char *const bad[] = {"append",  "extend", "insert", "pop", "remove",
                                              "reverse", "sort",   "clear",  NULL};
            for (int i = 0; bad[i]; i++)
                if (ct_name_is(name, len, bad[i]))
                    *unsafe = true;
        }
    }
    if (len >= 2 && name[0] == '_' && name[1] == '_')
        *unsafe = !m && (self.t == CT_STR || self.t == CT_DICT || self.t == CT_LIST);
    if (!m)
        return false;
    return make_func(rt, CT_FN_METHOD_BASE + m->id, self, m->name, out) == 0;
}

/* ---- globals --------------------------------------------------------------------------------- */

bool ct_global_lookup(ct_rt *rt, const char *name, size_t len, ct_val *out) {
    static const ct_named globals[] = {
        {"range", CT_FN_RANGE},
        {"namespace", CT_FN_NAMESPACE},
        {"dict", CT_FN_DICT},
        {"raise_exception", CT_FN_RAISE},
        {"strftime_now", CT_FN_STRFTIME},
        {"lipsum", -1},
        {"cycler", -1},
        {"joiner", -1},
    };
    const ct_named *g = ct_named_find(globals, sizeof globals / sizeof *globals, name, len);
    return g && make_func(rt, g->id, ct_none(), g->name, out) == 0;
}

/* ---- argument helpers ------------------------------------------------------------------------ */

static int want_args(ct_rt *rt, const char *fname, size_t n_args, size_t n_kw, size_t lo,
                     size_t hi) {
    if (n_kw)
        return ct_error(rt, ERR_INVAL, "%s() takes no keyword arguments", fname);
    if (n_args < lo || n_args > hi) {
        if (lo == hi)
            return ct_error(rt, ERR_INVAL, "%s() takes exactly %zu argument%s (%zu given)", fname,
                            lo, lo == 1 ? "" : "s", n_args);
        return ct_error(rt, ERR_INVAL, "%s() takes %s %zu argument%s (%zu given)", fname,
                        n_args < lo ? "at least" : "at most", n_args < lo ? lo : hi,
                        (n_args < lo ? lo : hi) == 1 ? "" : "s", n_args);
    }
    return 0;
}

static int str_arg(ct_rt *rt, ct_val v, const char *what) {
    if (v.t == CT_STR)
        return 0;
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    return ct_error(rt, ERR_INVAL, "%s must be str, not %s", what, ct_type_name(v));
}

static int int_arg(ct_rt *rt, ct_val v, int64_t *out) {
    if (v.t == CT_INT || v.t == CT_BOOL) {
        *out = v.t == CT_BOOL ? v.b : v.i;
        return 0;
    }
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    return ct_error(rt, ERR_INVAL, "'%s' object cannot be interpreted as an integer",
                    ct_type_name(v));
}

/* Code-point bounds [start, end) from optional start/end args, as byte offsets. */
static int span_args(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, size_t first,
                     size_t *b, size_t *e) {
    int64_t len = (int64_t)ct_utf8_count(s.s.p, s.s.n), st = 0, en = len;
    int rc;
    if (n_args > first && args[first].t != CT_NONE && (rc = int_arg(rt, args[first], &st)))
        return rc;
    if (n_args > first + 1 && args[first + 1].t != CT_NONE &&
        (rc = int_arg(rt, args[first + 1], &en)))
        return rc;
    if (st < 0)
        st = st + len < 0 ? 0 : st + len;
    if (en < 0)
        en = en + len < 0 ? 0 : en + len;
    if (st > len)
        st = len + 1; /* empty, and find("") past the end is -1 */
    if (en > len)
        en = len;
    *b = st > len ? s.s.n + 1 : ct_utf8_offset(s.s.p, s.s.n, (size_t)st);
    *e = ct_utf8_offset(s.s.p, s.s.n, (size_t)en);
    return 0;
}

/* ---- str methods ----------------------------------------------------------------------------- */

static int m_affix(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, bool ends, ct_val *out) {
    int rc;
    size_t b, e;
    if ((rc = span_args(rt, s, args, n_args, 1, &b, &e)))
        return rc;
    ct_val pre = args[0];
    const ct_val *cands = &pre;
    size_t nc = 1;
    if (pre.t == CT_LIST && pre.kind == CT_SEQ_TUPLE) {
        cands = pre.l->items;
        nc = pre.l->n;
    } else if (pre.t != CT_STR) {
        if (pre.t == CT_UNDEF)
            return ct_undef_fail(rt, pre);
        return ct_error(rt, ERR_INVAL, "%s first arg must be str or a tuple of str, not %s",
                        ends ? "endswith" : "startswith", ct_type_name(pre));
    }
    *out = ct_bool(false);
    if (b > s.s.n || e < b)
        return 0;
    for (size_t i = 0; i < nc; i++) {
        ct_val c = cands[i];
        if (c.t != CT_STR)
            return ct_error(rt, ERR_INVAL, "tuple for %s must only contain str, not %s",
                            ends ? "endswith" : "startswith", ct_type_name(c));
        if (c.s.n > e - b)
            continue;
        const char *at = ends ? s.s.p + e - c.s.n : s.s.p + b;
        if (memcmp(at, c.s.p, c.s.n) == 0) {
            *out = ct_bool(true);
            return 0;
        }
    }
    return 0;
}

static int m_split(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, const char **kw_names,
                   const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, bool right,
                   ct_val *out) {
    ct_val sep = ct_none();
    int64_t maxsplit = -1;
    int rc;
    if (n_args > 2)
        return ct_error(rt, ERR_INVAL, "split() takes at most 2 arguments (%zu given)", n_args);
    if (n_args > 0)
        sep = args[0];
    if (n_args > 1 && (rc = int_arg(rt, args[1], &maxsplit)))
        return rc;
    for (size_t k = 0; k < n_kw; k++) {
        if (ct_name_is(kw_names[k], kw_lens[k], "sep"))
            sep = kw_vals[k];
        else if (ct_name_is(kw_names[k], kw_lens[k], "maxsplit")) {
            if ((rc = int_arg(rt, kw_vals[k], &maxsplit)))
                return rc;
        } else
            return ct_error(rt, ERR_INVAL, "split() got an unexpected keyword argument '%.*s'",
                            (int)kw_lens[k], kw_names[k]);
    }
    if (sep.t != CT_NONE && (rc = str_arg(rt, sep, "must be str or None")))
        return rc;
    if (sep.t == CT_STR && sep.s.n == 0)
        return ct_error(rt, ERR_INVAL, "empty separator");
    /* collect [start, end) pieces */
    size_t cap = 0, n = 0;
    size_t(*pc)[2] = NULL;
    const char *p = s.s.p;
    size_t len = s.s.n;
#define PUSH(a, b)                                                                                 \
    do {                                                                                           \
        if (mem_grow((void **)&pc, &cap, n + 1, sizeof *pc)) {                                     \
            rc = nomem(rt);                                                                        \
            goto done;                                                                             \
        }                                                                                          \
        pc[n][0] = (a);                                                                            \
        pc[n][1] = (b);                                                                            \
        n++;                                                                                       \
    } while (0)
    rc = 0;
    if (sep.t == CT_STR) {
        if (!right) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                ptrdiff_t at = (maxsplit < 0 || done < maxsplit)
                                   ? ct_memfind(p, len, sep.s.p, sep.s.n, i)
                                   : -1;
                if (at < 0) {
                    PUSH(i, len);
                    break;
                }
                PUSH(i, (size_t)at);
                i = (size_t)at + sep.s.n;
                done++;
            }
        } else {
            size_t e = len;
            int64_t done = 0;
            for (;;) {
                ptrdiff_t at = -1;
                if ((maxsplit < 0 || done < maxsplit) && e >= sep.s.n) {
                    for (size_t k = e - sep.s.n + 1; k-- > 0;)
                        if (memcmp(p + k, sep.s.p, sep.s.n) == 0) {
                            at = (ptrdiff_t)k;
                            break;
                        }
                }
                if (at < 0) {
                    PUSH(0, e);
                    break;
                }
                PUSH((size_t)at + sep.s.n, e);
                e = (size_t)at;
                done++;
            }
        }
    } else if (!right) { /* whitespace runs, no empty strings */
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            while (i < len) {
                size_t k = i;
                if (!ct_py_isspace(ct_utf8_next(p, len, &k)))
                    break;
                i = k;
            }
            if (i >= len)
                break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t off, l2;
                ct_py_strip(p + i, len - i, NULL, 0, 2, &off, &l2);
                PUSH(i, i + l2);
                break;
            }
            size_t j = i;
            while (j < len) {
                size_t k = j;
                if (ct_py_isspace(ct_utf8_next(p, len, &k)))
                    break;
                j = k;
            }
            PUSH(i, j);
            done++;
            i = j;
        }
    } else {
        size_t e = len;
        int64_t done = 0;
        for (;;) {
            size_t off, l2;
            ct_py_strip(p, e, NULL, 0, 2, &off, &l2);
            e = l2;
            if (e == 0)
                break;
            if (maxsplit >= 0 && done >= maxsplit) {
                PUSH(0, e);
                break;
            }
            size_t j = e;
            while (j > 0) {
                size_t s0 = j - 1;
                while (s0 > 0 && ((unsigned char)p[s0] & 0xC0) == 0x80)
                    s0--;
                size_t k = s0;
                if (ct_py_isspace(ct_utf8_next(p, len, &k)))
                    break;
                j = s0;
            }
            PUSH(j, e);
            done++;
            e = j;
        }
    }
#undef PUSH
    if ((rc = ct_list_new(rt, n, CT_SEQ_LIST, out)))
        goto done;
    for (size_t i = 0; i < n; i++) {
        size_t k = right ? n - 1 - i : i;
        out->l->items[i] = ct_str(p + pc[k][0], pc[k][1] - pc[k][0]);
        out->l->items[i].kind = s.kind;
    }
    rc = ct_charge(rt, n);
done:
    free(pc);
    return rc;
}

static int m_strip(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, int which, ct_val *out) {
    ct_val chars = n_args ? args[0] : ct_none();
    if (chars.t != CT_NONE && chars.t != CT_STR) {
        if (chars.t == CT_UNDEF)
            return ct_undef_fail(rt, chars);
        return ct_error(rt, ERR_INVAL, "%s arg must be None or str",
                        which == 1   ? "lstrip"
                        : which == 2 ? "rstrip"
                                     : "strip");
    }
    size_t off, len;
    ct_py_strip(s.s.p, s.s.n, chars.t == CT_STR ? chars.s.p : NULL,
                chars.t == CT_STR ? chars.s.n : 0, which, &off, &len);
    *out = ct_str(s.s.p + off, len);
    out->kind = s.kind;
    return 0;
}

static int m_find(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, int id, ct_val *out) {
    int rc;
    if ((rc = str_arg(rt, args[0], "substring")))
        return rc;
    size_t b, e;
    if ((rc = span_args(rt, s, args, n_args, 1, &b, &e)))
        return rc;
    ct_val sub = args[0];
    ptrdiff_t at = -1;
    if (b <= s.s.n && e >= b && sub.s.n <= e - b) {
        if (id == M_FIND || id == M_INDEX) {
            at = ct_memfind(s.s.p, e, sub.s.p, sub.s.n, b);
        } else {
            for (size_t k = e - sub.s.n + 1; k-- > b;)
                if (memcmp(s.s.p + k, sub.s.p, sub.s.n) == 0) {
                    at = (ptrdiff_t)k;
                    break;
                }
        }
    }
    if (at < 0) {
        if (id == M_INDEX || id == M_RINDEX)
            return ct_error(rt, ERR_INVAL, "substring not found");
        *out = ct_int(-1);
        return 0;
    }
    *out = ct_int((int64_t)ct_utf8_count(s.s.p, (size_t)at));
    return 0;
}

int ct_str_replace(ct_rt *rt, ct_val s, ct_val old, ct_val nw, int64_t count, int kind,
                   ct_val *out) {
    strbuf sb;
    strbuf_init(&sb);
    size_t i = 0;
    int64_t done = 0;
    if (old.s.n == 0) {
        while (i <= s.s.n) {
            if (count < 0 || done < count) {
                strbuf_append(&sb, nw.s.p, nw.s.n);
                done++;
            }
            if (i == s.s.n)
                break;
            size_t k = i;
            ct_utf8_next(s.s.p, s.s.n, &k);
            strbuf_append(&sb, s.s.p + i, k - i);
            i = k;
        }
    } else {
        for (;;) {
            ptrdiff_t at =
                (count < 0 || done < count) ? ct_memfind(s.s.p, s.s.n, old.s.p, old.s.n, i) : -1;
            if (at < 0 || sb.len > CT_MAX_OUTPUT) {
                strbuf_append(&sb, s.s.p + i, s.s.n - i);
                break;
            }
            strbuf_append(&sb, s.s.p + i, (size_t)at - i);
            strbuf_append(&sb, nw.s.p, nw.s.n);
            i = (size_t)at + old.s.n;
            done++;
        }
    }
    if (sb.len > CT_MAX_OUTPUT) {
        strbuf_deinit(&sb);
        return ct_error(rt, ERR_TOOLARGE, "replace result exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    }
    return ct_str_take(rt, &sb, kind, out);
}

static int m_replace(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, ct_val *out) {
    int rc;
    if ((rc = str_arg(rt, args[0], "replace() argument 1")) ||
        (rc = str_arg(rt, args[1], "replace() argument 2")))
        return rc;
    int64_t count = -1;
    if (n_args > 2 && (rc = int_arg(rt, args[2], &count)))
        return rc;
    return ct_str_replace(rt, s, args[0], args[1], count, s.kind, out);
}

static int m_join(ct_rt *rt, ct_val s, ct_val seq, ct_val *out) {
    const ct_val *items;
    size_t n;
    int rc;
    if (seq.t == CT_UNDEF || (rc = ct_iterate(rt, seq, &items, &n))) {
        if (seq.t == CT_UNDEF) {
            items = NULL;
            n = 0;
        } else {
            return ct_error(rt, ERR_INVAL, "can only join an iterable");
        }
    }
    strbuf sb;
    strbuf_init(&sb);
    for (size_t i = 0; i < n; i++) {
        if (items[i].t != CT_STR) {
            strbuf_deinit(&sb);
            return ct_error(rt, ERR_INVAL, "sequence item %zu: expected str instance, %s found", i,
                            ct_type_name(items[i]));
        }
        if (i)
            strbuf_append(&sb, s.s.p, s.s.n);
        strbuf_append(&sb, items[i].s.p, items[i].s.n);
        if (sb.len > CT_MAX_OUTPUT) {
            strbuf_deinit(&sb);
            return ct_error(rt, ERR_TOOLARGE, "join result exceeds %u MiB", CT_MAX_OUTPUT >> 20);
        }
    }
    return ct_str_take(rt, &sb, s.kind, out);
}

static int m_splitlines(ct_rt *rt, ct_val s, bool keepends, ct_val *out) {
    size_t n = 0;
    int rc;
    for (int pass = 0; pass < 2; pass++) {
        size_t i = 0, start = 0, k = 0;
        while (i < s.s.n) {
            unsigned char c = (unsigned char)s.s.p[i];
            size_t bl = 0;
            if (c == '\r')
                bl = (i + 1 < s.s.n && s.s.p[i + 1] == '\n') ? 2 : 1;
            else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e)
                bl = 1;
            else if (c == 0xC2 && i + 1 < s.s.n && (unsigned char)s.s.p[i + 1] == 0x85)
                bl = 2;
            else if (c == 0xE2 && i + 2 < s.s.n && (unsigned char)s.s.p[i + 1] == 0x80 &&
                     ((unsigned char)s.s.p[i + 2] == 0xA8 || (unsigned char)s.s.p[i + 2] == 0xA9))
                bl = 3;
            if (!bl) {
                i++;
                continue;
            }
            if (pass) {
                out->l->items[k] = ct_str(s.s.p + start, i - start + (keepends ? bl : 0));
                out->l->items[k].kind = s.kind;
            }
            k++;
            i += bl;
            start = i;
        }
        if (start < s.s.n) {
            if (pass) {
                out->l->items[k] = ct_str(s.s.p + start, s.s.n - start);
                out->l->items[k].kind = s.kind;
            }
            k++;
        }
        if (!pass) {
            n = k;
            if ((rc = ct_list_new(rt, n, CT_SEQ_LIST, out)))
                return rc;
        }
    }
    return 0;
}

static int m_pad(ct_rt *rt, ct_val s, const ct_val *args, size_t n_args, int id, ct_val *out) {
    int64_t w;
    int rc;
    if ((rc = int_arg(rt, args[0], &w)))
        return rc;
    const char *fill = " ";
    size_t fill_n = 1;
    if (id != M_ZFILL && n_args > 1) {
        if (args[1].t != CT_STR || ct_utf8_count(args[1].s.p, args[1].s.n) != 1)
            return ct_error(rt, ERR_INVAL,
                            "The fill character must be exactly one character "
                            "long");
        fill = args[1].s.p;
        fill_n = args[1].s.n;
    }
    int64_t len = (int64_t)ct_utf8_count(s.s.p, s.s.n);
    if (w > (1 << 20))
        return ct_error(rt, ERR_TOOLARGE, "padding width too large");
    if (w <= len) {
        *out = s;
        return 0;
    }
    int64_t marg = w - len, left;
    if (id == M_LJUST)
        left = 0;
    else if (id == M_RJUST || id == M_ZFILL)
        left = marg;
    else
        left = marg / 2 + (marg & w & 1);
    strbuf sb;
    strbuf_init(&sb);
    size_t body = 0;
    if (id == M_ZFILL) {
        fill = "0";
        if (s.s.n && (s.s.p[0] == '+' || s.s.p[0] == '-')) {
            strbuf_putc(&sb, s.s.p[0]);
            body = 1;
        }
    }
    for (int64_t i = 0; i < left; i++)
        strbuf_append(&sb, fill, fill_n);
    strbuf_append(&sb, s.s.p + body, s.s.n - body);
    for (int64_t i = 0; i < marg - left; i++)
        strbuf_append(&sb, fill, fill_n);
    return ct_str_take(rt, &sb, s.kind, out);
}

static int m_partition(ct_rt *rt, ct_val s, ct_val sep, bool right, ct_val *out) {
    int rc;
    if ((rc = str_arg(rt, sep, "partition separator")))
        return rc;
    if (sep.s.n == 0)
        return ct_error(rt, ERR_INVAL, "empty separator");
    ptrdiff_t at = -1;
    if (!right) {
        at = ct_memfind(s.s.p, s.s.n, sep.s.p, sep.s.n, 0);
    } else if (s.s.n >= sep.s.n) {
        for (size_t k = s.s.n - sep.s.n + 1; k-- > 0;)
            if (memcmp(s.s.p + k, sep.s.p, sep.s.n) == 0) {
                at = (ptrdiff_t)k;
                break;
            }
    }
    if ((rc = ct_list_new(rt, 3, CT_SEQ_TUPLE, out)))
        return rc;
    ct_val *it = out->l->items;
    if (at < 0) {
        it[0] = right ? ct_str("", 0) : s;
        it[1] = ct_str("", 0);
        it[2] = right ? s : ct_str("", 0);
    } else {
        it[0] = ct_str(s.s.p, (size_t)at);
        it[1] = sep;
        it[2] = ct_str(s.s.p + at + sep.s.n, s.s.n - (size_t)at - sep.s.n);
    }
    for (int i = 0; i < 3; i++)
        it[i].kind = s.kind;
    return 0;
}

static int m_is(ct_val s, int id) {
    if (s.s.n == 0)
        return 0;
    if (id == M_ISLOWER || id == M_ISUPPER) {
        bool cased = false;
        size_t i = 0;
        while (i < s.s.n) {
            uint32_t cp = ct_utf8_next(s.s.p, s.s.n, &i);
            bool up = ct_is_upper_cp(cp), lo = ct_is_lower_cp(cp);
            if (id == M_ISLOWER ? up : lo)
                return 0;
            cased |= up || lo;
        }
        return cased;
    }
    size_t i = 0;
    while (i < s.s.n) {
        uint32_t cp = ct_utf8_next(s.s.p, s.s.n, &i);
        bool digit = cp >= '0' && cp <= '9';
        bool ok;
        switch (id) {
        case M_ISDIGIT:
        case M_ISNUMERIC:
        case M_ISDECIMAL:
            ok = digit;
            break;
        case M_ISALPHA:
            ok = ct_is_alpha_cp(cp);
            break;
        case M_ISALNUM:
            ok = digit || ct_is_alpha_cp(cp);
            break;
        default:
            ok = ct_py_isspace(cp);
            break;
        }
        if (!ok)
            return 0;
    }
    return 1;
}

static int str_method(ct_rt *rt, int id, ct_val s, const ct_val *args, size_t n_args,
                      const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                      size_t n_kw, const char *fname, ct_val *out) {
    int rc;
    strbuf sb;
    switch (id) {
    case M_STARTSWITH:
    case M_ENDSWITH:
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 3)))
            return rc;
        return m_affix(rt, s, args, n_args, id == M_ENDSWITH, out);
    case M_SPLIT:
    case M_RSPLIT:
        return m_split(rt, s, args, n_args, kw_names, kw_lens, kw_vals, n_kw, id == M_RSPLIT, out);
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        if ((rc = want_args(rt, fname, n_args, n_kw, 0, 1)))
            return rc;
        return m_strip(rt, s, args, n_args, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, out);
    case M_LOWER:
    case M_UPPER:
    case M_TITLE:
    case M_CAPITALIZE:
    case M_CASEFOLD:
    case M_SWAPCASE:
        if ((rc = want_args(rt, fname, n_args, n_kw, 0, 0)))
            return rc;
        strbuf_init(&sb);
        if (id == M_LOWER || id == M_CASEFOLD)
            ct_py_lower(&sb, s.s.p, s.s.n);
        else if (id == M_UPPER)
            ct_py_upper(&sb, s.s.p, s.s.n);
        else if (id == M_TITLE)
            ct_py_title(&sb, s.s.p, s.s.n);
        else if (id == M_CAPITALIZE)
            ct_py_capitalize(&sb, s.s.p, s.s.n);
        else {
            size_t i = 0;
            while (i < s.s.n) {
                size_t st = i;
                uint32_t cp = ct_utf8_next(s.s.p, s.s.n, &i);
                if (ct_is_upper_cp(cp))
                    ct_py_lower(&sb, s.s.p + st, i - st);
                else
                    ct_py_upper(&sb, s.s.p + st, i - st);
            }
        }
        return ct_str_take(rt, &sb, s.kind, out);
    case M_REPLACE:
        if ((rc = want_args(rt, fname, n_args, n_kw, 2, 3)))
            return rc;
        return m_replace(rt, s, args, n_args, out);
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 3)))
            return rc;
        return m_find(rt, s, args, n_args, id, out);
    case M_COUNT: {
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 3)) ||
            (rc = str_arg(rt, args[0], "substring")))
            return rc;
        size_t b, e;
        if ((rc = span_args(rt, s, args, n_args, 1, &b, &e)))
            return rc;
        int64_t c = 0;
        ct_val sub = args[0];
        if (b <= s.s.n && e >= b) {
            if (sub.s.n == 0) {
                c = (int64_t)ct_utf8_count(s.s.p + b, e - b) + 1;
            } else {
                size_t i = b;
                ptrdiff_t at;
                while ((at = ct_memfind(s.s.p, e, sub.s.p, sub.s.n, i)) >= 0) {
                    c++;
                    i = (size_t)at + sub.s.n;
                }
            }
        }
        *out = ct_int(c);
        return 0;
    }
    case M_FORMAT:
        return ct_str_format(rt, s, args, n_args, kw_names, kw_lens, kw_vals, n_kw, out);
    case M_JOIN:
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 1)))
            return rc;
        return m_join(rt, s, args[0], out);
    case M_SPLITLINES: {
        bool keep = false;
        if (n_args > 1 || (n_kw && !(n_kw == 1 && ct_name_is(kw_names[0], kw_lens[0], "keepends"))))
            return ct_error(rt, ERR_INVAL, "splitlines() takes at most 1 argument");
        if (n_args)
            keep = ct_truthy(args[0]);
        else if (n_kw)
            keep = ct_truthy(kw_vals[0]);
        return m_splitlines(rt, s, keep, out);
    }
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISALNUM:
    case M_ISSPACE:
    case M_ISLOWER:
    case M_ISUPPER:
    case M_ISNUMERIC:
    case M_ISDECIMAL:
        if ((rc = want_args(rt, fname, n_args, n_kw, 0, 0)))
            return rc;
        *out = ct_bool(m_is(s, id));
        return 0;
    case M_CENTER:
    case M_LJUST:
    case M_RJUST:
    case M_ZFILL:
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, id == M_ZFILL ? 1 : 2)))
            return rc;
        return m_pad(rt, s, args, n_args, id, out);
    case M_PARTITION:
    case M_RPARTITION:
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 1)))
            return rc;
        return m_partition(rt, s, args[0], id == M_RPARTITION, out);
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 1)) ||
            (rc = str_arg(rt, args[0], "argument")))
            return rc;
        ct_val a = args[0];
        *out = s;
        if (a.s.n <= s.s.n) {
            if (id == M_REMOVEPREFIX && memcmp(s.s.p, a.s.p, a.s.n) == 0) {
                out->s.p += a.s.n;
                out->s.n -= a.s.n;
            } else if (id == M_REMOVESUFFIX && a.s.n &&
                       memcmp(s.s.p + s.s.n - a.s.n, a.s.p, a.s.n) == 0) {
                out->s.n -= a.s.n;
            }
        }
        return 0;
    }
    default:
        return ct_error(rt, ERR_INTERNAL, "str method %d", id);
    }
}

/* ---- dict and list methods ------------------------------------------------------------------- */

static int dict_view(ct_rt *rt, const ct_dict *d, int kind, ct_val *out) {
    int rc = ct_list_new(rt, d->n, kind, out);
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (kind == CT_SEQ_KEYS) {
            out->l->items[i] = d->keys[i];
        } else if (kind == CT_SEQ_VALUES) {
            out->l->items[i] = d->vals[i];
        } else {
            ct_val pair;
            if (!(rc = ct_list_new(rt, 2, CT_SEQ_TUPLE, &pair))) {
                pair.l->items[0] = d->keys[i];
                pair.l->items[1] = d->vals[i];
                out->l->items[i] = pair;
            }
        }
    }
    return rc ? rc : ct_charge(rt, d->n / 4);
}

static int other_method(ct_rt *rt, int id, ct_val self, const ct_val *args, size_t n_args,
                        size_t n_kw, const char *fname, ct_val *out) {
    int rc;
    switch (id) {
    case M_GET:
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, 2)) || (rc = ct_hash_check(rt, args[0])))
            return rc;
        if (!ct_dict_get(rt, self.d, args[0], out))
            *out = n_args > 1 ? args[1] : ct_none();
        return 0;
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES:
        if ((rc = want_args(rt, fname, n_args, n_kw, 0, 0)))
            return rc;
        return dict_view(rt, self.d,
                         id == M_ITEMS  ? CT_SEQ_ITEMS
                         : id == M_KEYS ? CT_SEQ_KEYS
                                        : CT_SEQ_VALUES,
                         out);
    case M_COPY: {
        if ((rc = want_args(rt, fname, n_args, n_kw, 0, 0)) ||
            (rc = ct_dict_new(rt, self.d->n, out)))
            return rc;
        memcpy(out->d->keys, self.d->keys, self.d->n * sizeof(ct_val));
        memcpy(out->d->vals, self.d->vals, self.d->n * sizeof(ct_val));
        out->d->n = self.d->n;
        return 0;
    }
    case M_LIST_COPY:
        if ((rc = want_args(rt, fname, n_args, n_kw, 0, 0)) ||
            (rc = ct_list_new(rt, self.l->n, CT_SEQ_LIST, out)))
            return rc;
        if (self.l->n)
            memcpy(out->l->items, self.l->items, self.l->n * sizeof(ct_val));
        return 0;
    case M_LIST_INDEX:
    case M_LIST_COUNT: {
        if ((rc = want_args(rt, fname, n_args, n_kw, 1, id == M_LIST_INDEX ? 3 : 1)))
            return rc;
        int64_t c = 0;
        for (size_t i = 0; i < self.l->n; i++) {
            bool eq;
            if ((rc = ct_equal(rt, self.l->items[i], args[0], &eq)))
                return rc;
            if (eq && id == M_LIST_INDEX) {
                *out = ct_int((int64_t)i);
                return 0;
            }
            c += eq;
        }
        if (id == M_LIST_INDEX && self.kind == CT_SEQ_TUPLE)
            return ct_error(rt, ERR_INVAL, "tuple.index(x): x not in tuple");
        if (id == M_LIST_INDEX) {
            strbuf sb;
            strbuf_init(&sb);
            rc = ct_to_repr(rt, args[0], &sb);
            if (!rc)
                rc = ct_error(rt, ERR_INVAL, "%s is not in list", sb.data);
            strbuf_deinit(&sb);
            return rc;
        }
        *out = ct_int(c);
        return 0;
    }
    default:
        return ct_error(rt, ERR_INTERNAL, "method %d", id);
    }
}

/* ---- globals --------------------------------------------------------------------------------- */

static int g_range(ct_rt *rt, const ct_val *args, size_t n_args, size_t n_kw, ct_val *out) {
    int rc;
    if ((rc = want_args(rt, "range", n_args, n_kw, 1, 3)))
        return rc;
    int64_t a = 0, b, c = 1;
    if (n_args == 1) {
        if ((rc = int_arg(rt, args[0], &b)))
            return rc;
    } else {
        if ((rc = int_arg(rt, args[0], &a)) || (rc = int_arg(rt, args[1], &b)))
            return rc;
        if (n_args == 3 && (rc = int_arg(rt, args[2], &c)))
            return rc;
    }
    if (c == 0)
        return ct_error(rt, ERR_INVAL, "range() arg 3 must not be zero");
    int64_t n = 0;
    if (c > 0 && a < b)
        n = (int64_t)(((uint64_t)b - (uint64_t)a - 1) / (uint64_t)c) + 1;
    else if (c < 0 && a > b)
        n = (int64_t)(((uint64_t)a - (uint64_t)b - 1) / (uint64_t)(-(c + 1) + 1)) + 1;
    if (n > 100000)
        return ct_error(rt, ERR_INVAL,
                        "Range too big. The sandbox blocks ranges larger than "
                        "MAX_RANGE (100000).");
    if ((rc = ct_list_new(rt, (size_t)n, CT_SEQ_RANGE, out)))
        return rc;
    for (int64_t i = 0; i < n; i++)
        out->l->items[i] = ct_int(a + i * c);
    out->l->range[0] = a;
    out->l->range[1] = b;
    out->l->range[2] = c;
    return ct_charge(rt, (uint64_t)n / 4);
}

/* dict(...) / namespace(...): an optional mapping or iterable of pairs, then keywords. */
static int build_dict(ct_rt *rt, const char *fname, const ct_val *args, size_t n_args,
                      const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                      size_t n_kw, ct_val *out) {
    int rc;
    if (n_args > 1)
        return ct_error(rt, ERR_INVAL, "%s expected at most 1 argument, got %zu", fname, n_args);
    if ((rc = ct_dict_new(rt, n_kw + 4, out)))
        return rc;
    if (n_args == 1) {
        ct_val src = args[0];
        if (src.t == CT_DICT || src.t == CT_NS) {
            for (size_t i = 0; i < src.d->n; i++)
                if ((rc = ct_dict_set(rt, out->d, src.d->keys[i], src.d->vals[i])))
                    return rc;
        } else {
            const ct_val *items;
            size_t n;
            if ((rc = ct_iterate(rt, src, &items, &n)))
                return rc;
            for (size_t i = 0; i < n; i++) {
                const ct_val *pair;
                size_t pn;
                if (items[i].t == CT_UNDEF || items[i].t == CT_STR ||
                    ct_iterate(rt, items[i], &pair, &pn) || pn != 2)
                    return ct_error(rt, ERR_INVAL,
                                    "dictionary update sequence element #%zu has "
                                    "the wrong length or type",
                                    i);
                if ((rc = ct_hash_check(rt, pair[0])) ||
                    (rc = ct_dict_set(rt, out->d, pair[0], pair[1])))
                    return rc;
            }
        }
    }
    for (size_t k = 0; k < n_kw; k++)
        if ((rc = ct_dict_set(rt, out->d, ct_str(kw_names[k], kw_lens[k]), kw_vals[k])))
            return rc;
    return 0;
}

static const char *const wday_short[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const wday_long[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday"};
static const char *const mon_short[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const mon_long[] = {"January",   "February", "March",    "April",
                                       "May",       "June",     "July",     "August",
                                       "September", "October",  "November", "December"};

static int g_strftime(ct_rt *rt, const ct_val *args, size_t n_args, size_t n_kw, ct_val *out) {
    int rc;
    if ((rc = want_args(rt, "strftime_now", n_args, n_kw, 1, 1)) ||
        (rc = str_arg(rt, args[0], "strftime format")))
        return rc;
    time_t t = (time_t)rt->now_unix;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return ct_error(rt, ERR_RANGE, "time %" PRId64 " out of range", rt->now_unix);
    const char *f = args[0].s.p;
    size_t n = args[0].s.n;
    strbuf sb;
    strbuf_init(&sb);
    for (size_t i = 0; i < n; i++) {
        if (f[i] != '%' || i + 1 >= n) {
            strbuf_putc(&sb, f[i]);
            continue;
        }
        char c = f[++i];
        int hour12 = tm.tm_hour % 12 ? tm.tm_hour % 12 : 12;
        switch (c) {
        case 'a':
            strbuf_puts(&sb, wday_short[tm.tm_wday]);
            break;
        case 'A':
            strbuf_puts(&sb, wday_long[tm.tm_wday]);
            break;
        case 'b':
        case 'h':
            strbuf_puts(&sb, mon_short[tm.tm_mon]);
            break;
        case 'B':
            strbuf_puts(&sb, mon_long[tm.tm_mon]);
            break;
        case 'd':
            strbuf_printf(&sb, "%02d", tm.tm_mday);
            break;
        case 'e':
            strbuf_printf(&sb, "%2d", tm.tm_mday);
            break;
        case 'H':
            strbuf_printf(&sb, "%02d", tm.tm_hour);
            break;
        case 'I':
            strbuf_printf(&sb, "%02d", hour12);
            break;
        case 'j':
            strbuf_printf(&sb, "%03d", tm.tm_yday + 1);
            break;
        case 'm':
            strbuf_printf(&sb, "%02d", tm.tm_mon + 1);
            break;
        case 'M':
            strbuf_printf(&sb, "%02d", tm.tm_min);
            break;
        case 'p':
            strbuf_puts(&sb, tm.tm_hour < 12 ? "AM" : "PM");
            break;
        case 'S':
            strbuf_printf(&sb, "%02d", tm.tm_sec);
            break;
        case 'u':
            strbuf_printf(&sb, "%d", tm.tm_wday ? tm.tm_wday : 7);
            break;
        case 'w':
            strbuf_printf(&sb, "%d", tm.tm_wday);
            break;
        case 'y':
            strbuf_printf(&sb, "%02d", tm.tm_year % 100);
            break;
        case 'Y':
            strbuf_printf(&sb, "%d", tm.tm_year + 1900);
            break;
        case 'F':
            strbuf_printf(&sb, "%d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
            break;
        case 'T':
            strbuf_printf(&sb, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
            break;
        case 'D':
            strbuf_printf(&sb, "%02d/%02d/%02d", tm.tm_mon + 1, tm.tm_mday, tm.tm_year % 100);
            break;
        case 'Z':
        case 'z':
            break; /* a naive datetime has no zone */
        case '%':
            strbuf_putc(&sb, '%');
            break;
        default:
            strbuf_deinit(&sb);
            return ct_error(rt, ERR_UNSUPPORTED, "unsupported strftime directive '%%%c'", c);
        }
    }
    return ct_str_take(rt, &sb, 0, out);
}

int ct_func_call(ct_rt *rt, const ct_func *fn, const ct_val *args, size_t n_args,
                 const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw,
                 ct_val *out) {
    int rc;
    switch (fn->id) {
    case CT_FN_RANGE:
        return g_range(rt, args, n_args, n_kw, out);
    case CT_FN_DICT:
        return build_dict(rt, "dict", args, n_args, kw_names, kw_lens, kw_vals, n_kw, out);
    case CT_FN_NAMESPACE:
        if ((rc = build_dict(rt, "namespace", args, n_args, kw_names, kw_lens, kw_vals, n_kw, out)))
            return rc;
        out->t = CT_NS;
        return 0;
    case CT_FN_RAISE: {
        if (n_args < 1)
            return ct_error(rt, ERR_INVAL,
                            "raise_exception() missing 1 required positional "
                            "argument: 'message'");
        ct_val msg;
        if ((rc = ct_stringify(rt, args[0], &msg)))
            return rc;
        return err_set(ERR_INVAL, "%.*s", (int)(msg.s.n > 900 ? 900 : msg.s.n), msg.s.p);
    }
    case CT_FN_STRFTIME:
        return g_strftime(rt, args, n_args, n_kw, out);
    case CT_FN_LOOP_CYCLE:
        if (n_args == 0)
            return ct_error(rt, ERR_INVAL, "no items for cycling given");
        *out = args[fn->self.loop->i % n_args];
        return 0;
    case CT_FN_LOOP_CHANGED:
        return ct_error(rt, ERR_UNSUPPORTED, "unsupported construct 'loop.changed'");
    default:
        break;
    }
    if (fn->id < CT_FN_METHOD_BASE)
        return ct_error(rt, ERR_UNSUPPORTED, "unsupported global function '%s'",
                        fn->name ? fn->name : "?");
    int id = fn->id - CT_FN_METHOD_BASE;
    if (fn->self.t == CT_STR)
        return str_method(rt, id, fn->self, args, n_args, kw_names, kw_lens, kw_vals, n_kw,
                          fn->name, out);
    return other_method(rt, id, fn->self, args, n_args, n_kw, fn->name, out);
}
