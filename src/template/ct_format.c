/* SPDX-License-Identifier: MIT */
/*
 * ct_format: Python's two string-formatting languages for the chat-template engine:
 * str.format() (through jinja2's sandboxed formatter: field access goes through the same
 * attribute/item rules as the template) and printf-style "fmt % args" (also the |format filter).
 *
 * Covered: auto and manual field numbering, keyword fields, .attr and [key] accessors, !r/!s
 * conversions, and the format-spec mini-language [[fill]align][sign][#][0][width][,|_][.prec][type]
 * for str, int, float and bool; %-formatting with (name) keys, flags, width, precision and the
 * s r d i u f F e E g G x X o c % conversions. Nested replacement fields inside a format spec and
 * '*' widths are reported as ERR_UNSUPPORTED.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nomem(ct_rt *rt) {
    return ct_error(rt, ERR_NOMEM, "out of memory");
}

typedef struct spec {
    uint32_t fill;
    char align; /* 0, '<', '>', '=', '^' */
    char sign;  /* 0, '+', '-', ' ' */
    bool alt, zero;
    int64_t width, prec; /* -1 when absent */
    char group;          /* 0, ',', '_' */
    char type;           /* 0 or the type letter */
} spec;

static int parse_spec(ct_rt *rt, const char *p, size_t n, spec *s) {
    memset(s, 0, sizeof *s);
    s->fill = ' ';
    s->width = s->prec = -1;
    size_t i = 0;
    size_t k = 0;
    uint32_t first = n ? ct_utf8_next(p, n, &k) : 0;
    if (k < n && strchr("<>=^", p[k]) && p[k]) {
        s->fill = first;
        s->align = p[k];
        i = k + 1;
    } else if (n && strchr("<>=^", p[0]) && p[0]) {
        s->align = p[0];
        i = 1;
    }
    if (i < n && (p[i] == '+' || p[i] == '-' || p[i] == ' '))
        s->sign = p[i++];
    if (i < n && p[i] == '#') {
        s->alt = true;
        i++;
    }
    if (i < n && p[i] == '0') {
        s->zero = true;
        i++;
    }
    if (i < n && p[i] >= '0' && p[i] <= '9') {
        s->width = 0;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            if (s->width < 100000)
                s->width = s->width * 10 + (p[i] - '0');
    }
    if (i < n && (p[i] == ',' || p[i] == '_'))
        s->group = p[i++];
    if (i < n && p[i] == '.') {
        i++;
        s->prec = 0;
        if (i >= n || p[i] < '0' || p[i] > '9')
            return ct_error(rt, ERR_INVAL, "Format specifier missing precision");
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            if (s->prec < 100000)
                s->prec = s->prec * 10 + (p[i] - '0');
    }
    if (i < n)
        s->type = p[i++];
    if (i < n)
        return ct_error(rt, ERR_INVAL, "Invalid format specifier '%.*s'", (int)n, p);
    if (s->width > 4096 || s->prec > 1000)
        return ct_error(rt, ERR_TOOLARGE, "format width or precision too large");
    if (s->zero && !s->align) {
        s->fill = '0';
        s->align = '=';
    }
    return 0;
}

/* Pads body (sign prefix already split out) to the width with the spec's fill and alignment. */
static void pad(strbuf *sb, const spec *s, const char *prefix, size_t pre_n, const char *body,
                size_t n, char default_align) {
    int64_t len = (int64_t)(ct_utf8_count(prefix, pre_n) + ct_utf8_count(body, n));
    int64_t marg = s->width > len ? s->width - len : 0;
    char align = s->align ? s->align : default_align;
    int64_t left = align == '>' ? marg : align == '^' ? marg / 2 : align == '=' ? 0 : 0;
    int64_t right = align == '<' ? marg : align == '^' ? marg - marg / 2 : 0;
    for (int64_t i = 0; i < left; i++)
        ct_utf8_put(sb, s->fill);
    strbuf_append(sb, prefix, pre_n);
    if (align == '=')
        for (int64_t i = 0; i < marg; i++)
            ct_utf8_put(sb, s->fill);
    strbuf_append(sb, body, n);
    for (int64_t i = 0; i < right; i++)
        ct_utf8_put(sb, s->fill);
}

static void group_digits(strbuf *out, const char *digits, size_t n, char sep, int every) {
    size_t first = n % (size_t)every;
    if (first == 0)
        first = (size_t)every;
    strbuf_append(out, digits, first);
    for (size_t i = first; i < n; i += (size_t)every) {
        strbuf_putc(out, sep);
        strbuf_append(out, digits + i, (size_t)every);
    }
}

/* vsnprintf of one int precision and one double under a format built from a fixed set
 * ("%.*e", "%#.*g", ...; see format_num). The compiler cannot check a built format in a printf
 * call; through a va_list it does not try. */
static void format_double(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static int format_num(ct_rt *rt, ct_val v, const spec *s, strbuf *sb) {
    char type = s->type;
    bool is_float = v.t == CT_FLOAT || (type && strchr("eEfFgG%", type));
    char prefix[4] = {0};
    size_t pre_n = 0;
    strbuf body;
    strbuf_init(&body);
    if (!is_float) {
        int64_t x = v.t == CT_BOOL ? v.b : v.i;
        uint64_t mag = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
        if (x < 0)
            prefix[pre_n++] = '-';
        else if (s->sign == '+' || s->sign == ' ')
            prefix[pre_n++] = s->sign;
        char digits[80];
        int nd;
        switch (type) {
        case 0:
        case 'd':
        case 'n':
        case 'x':
        case 'X':
        case 'o':
            nd = snprintf(digits, sizeof digits,
                          type == 'x'   ? "%" PRIx64
                          : type == 'X' ? "%" PRIX64
                          : type == 'o' ? "%" PRIo64
                                        : "%" PRIu64,
                          mag);
            break;
        case 'b': {
            nd = 0;
            char tmp[70];
            do {
                tmp[nd++] = (char)('0' + (mag & 1));
                mag >>= 1;
            } while (mag);
            for (int i = 0; i < nd; i++)
                digits[i] = tmp[nd - 1 - i];
            digits[nd] = 0;
            break;
        }
        case 'c':
            if (x < 0 || x > 0x10FFFF)
                return ct_error(rt, ERR_INVAL, "%%c arg not in range(0x110000)");
            ct_utf8_put(&body, (uint32_t)x);
            pad(sb, s, "", 0, body.data, body.len, '<');
            strbuf_deinit(&body);
            return 0;
        default:
            strbuf_deinit(&body);
            return ct_error(rt, ERR_INVAL, "Unknown format code '%c' for object of type '%s'", type,
                            ct_type_name(v));
        }
        if (s->alt && (type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
            prefix[pre_n++] = '0';
            prefix[pre_n++] = type == 'X' ? 'X' : type;
        }
        if (s->group)
            group_digits(&body, digits, (size_t)nd, s->group,
                         (type == 'x' || type == 'X' || type == 'o' || type == 'b') ? 4 : 3);
        else
            strbuf_append(&body, digits, (size_t)nd);
    } else {
        double d = v.t == CT_FLOAT ? v.f : (double)(v.t == CT_BOOL ? v.b : v.i);
        if (signbit(d) && !isnan(d)) {
            prefix[pre_n++] = '-';
            d = -d;
        } else if (s->sign == '+' || s->sign == ' ') {
            prefix[pre_n++] = s->sign;
        }
        char buf[1200];
        int prec = s->prec >= 0 ? (int)s->prec : 6;
        if (!isfinite(d)) {
            snprintf(buf, sizeof buf, "%s", isnan(d) ? "nan" : "inf");
            if (type == 'E' || type == 'F' || type == 'G')
                for (char *q = buf; *q; q++)
                    *q = (char)(*q - 32);
        } else if (type == 0 && s->prec < 0) {
            strbuf tmp;
            strbuf_init(&tmp);
            ct_float_repr(&tmp, d);
            snprintf(buf, sizeof buf, "%s", tmp.data);
            strbuf_deinit(&tmp);
        } else if (type == '%') {
            snprintf(buf, sizeof buf, "%.*f%%", prec, d * 100);
        } else if (type == 0) {
            snprintf(buf, sizeof buf, "%.*g", prec ? prec : 1, d);
            if (!strpbrk(buf, ".e"))
                strcat(buf, ".0");
        } else {
            char conv = type && strchr("eEfFG", type) ? type : 'g'; /* 'n' is 'g' */
            char f[8] = {'%'}, *q = f + 1;
            if (s->alt)
                *q++ = '#';
            memcpy(q, ".*", 2);
            q[2] = conv;
            format_double(buf, sizeof buf, f, prec, d);
        }
        char *dot = strpbrk(buf, ".eE%");
        size_t int_len = dot ? (size_t)(dot - buf) : strlen(buf);
        if (s->group && isfinite(d)) {
            group_digits(&body, buf, int_len, s->group, 3);
            strbuf_puts(&body, buf + int_len);
        } else {
            strbuf_puts(&body, buf);
        }
    }
    pad(sb, s, prefix, pre_n, body.data, body.len, '>');
    int rc = strbuf_failed(&body) ? nomem(rt) : 0;
    strbuf_deinit(&body);
    return rc;
}

/* format(value, spec) */
static int format_value(ct_rt *rt, ct_val v, const char *sp, size_t sn, strbuf *sb) {
    if (sn == 0)
        return ct_to_str(rt, v, sb);
    spec s;
    int rc = parse_spec(rt, sp, sn, &s);
    if (rc)
        return rc;
    if (v.t == CT_UNDEF)
        return ct_to_str(rt, v, sb); /* Undefined.__format__ formats "" */
    if (v.t == CT_STR) {
        if (s.type && s.type != 's')
            return ct_error(rt, ERR_INVAL, "Unknown format code '%c' for object of type 'str'",
                            s.type);
        size_t n = v.s.n;
        if (s.prec >= 0)
            n = ct_utf8_offset(v.s.p, v.s.n, (size_t)s.prec);
        pad(sb, &s, "", 0, v.s.p, n, '<');
        return 0;
    }
    if (ct_is_num(v))
        return format_num(rt, v, &s, sb);
    return ct_error(rt, ERR_INVAL, "unsupported format string passed to %s.__format__",
                    ct_type_name(v));
}

int ct_str_format(ct_rt *rt, ct_val fmt, const ct_val *args, size_t n_args, const char **kw_names,
                  const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, ct_val *out) {
    const char *p = fmt.s.p;
    size_t n = fmt.s.n, i = 0;
    int auto_idx = 0; /* 0 unknown, >0 automatic, <0 manual */
    size_t next = 0;
    int rc = 0;
    strbuf sb;
    strbuf_init(&sb);
    while (i < n && !rc) {
        char c = p[i];
        if (c == '}') {
            if (i + 1 < n && p[i + 1] == '}') {
                strbuf_putc(&sb, '}');
                i += 2;
                continue;
            }
            rc = ct_error(rt, ERR_INVAL, "Single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            strbuf_putc(&sb, c);
            i++;
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            strbuf_putc(&sb, '{');
            i += 2;
            continue;
        }
        /* replacement field */
        size_t j = i + 1, depth = 1;
        while (j < n && depth) {
            if (p[j] == '{')
                depth++;
            else if (p[j] == '}')
                depth--;
            if (depth)
                j++;
        }
        if (j >= n) {
            rc = ct_error(rt, ERR_INVAL, "expected '}' before end of string");
            break;
        }
        const char *f = p + i + 1;
        size_t fn = j - i - 1;
        i = j + 1;
        /* split field_name[!conv][:spec] */
        size_t name_end = 0;
        while (name_end < fn && f[name_end] != '!' && f[name_end] != ':') {
            if (f[name_end] == '[')
                while (name_end < fn && f[name_end] != ']')
                    name_end++;
            name_end++;
        }
        if (name_end > fn)
            name_end = fn;
        char conv = 0;
        size_t spec_at = name_end;
        if (spec_at < fn && f[spec_at] == '!') {
            if (spec_at + 1 >= fn) {
                rc = ct_error(rt, ERR_INVAL,
                              "end of string while looking for conversion "
                              "specifier");
                break;
            }
            conv = f[spec_at + 1];
            spec_at += 2;
        }
        const char *sp = "";
        size_t sn = 0;
        if (spec_at < fn) {
            if (f[spec_at] != ':') {
                rc = ct_error(rt, ERR_INVAL, "expected ':' after conversion specifier");
                break;
            }
            sp = f + spec_at + 1;
            sn = fn - spec_at - 1;
            if (memchr(sp, '{', sn)) {
                rc = ct_error(rt, ERR_UNSUPPORTED, "nested replacement fields in a format spec");
                break;
            }
        }
        /* first part of the field name: index or keyword */
        size_t k = 0;
        while (k < name_end && f[k] != '.' && f[k] != '[')
            k++;
        ct_val v;
        if (k == 0) {
            if (auto_idx < 0) {
                rc = ct_error(rt, ERR_INVAL,
                              "cannot switch from manual field specification to "
                              "automatic field numbering");
                break;
            }
            auto_idx = 1;
            if (next >= n_args) {
                rc = ct_error(rt, ERR_INVAL, "tuple index out of range");
                break;
            }
            v = args[next++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            if (auto_idx > 0) {
                rc = ct_error(rt, ERR_INVAL,
                              "cannot switch from automatic field numbering to "
                              "manual field specification");
                break;
            }
            auto_idx = -1;
            size_t idx = 0;
            for (size_t q = 0; q < k && idx < 1000000; q++)
                idx = idx * 10 + (size_t)(f[q] - '0');
            if (idx >= n_args) {
                rc = ct_error(rt, ERR_INVAL, "tuple index out of range");
                break;
            }
            v = args[idx];
        } else {
            size_t q;
            for (q = 0; q < n_kw; q++)
                if (kw_lens[q] == k && memcmp(kw_names[q], f, k) == 0)
                    break;
            if (q == n_kw) {
                rc = ct_error(rt, ERR_INVAL, "'%.*s'", (int)k, f);
                break;
            }
            v = kw_vals[q];
        }
        /* accessors */
        while (k < name_end && !rc) {
            if (f[k] == '.') {
                size_t a = ++k;
                while (k < name_end && f[k] != '.' && f[k] != '[')
                    k++;
                rc = ct_getattr(rt, v, f + a, k - a, &v);
            } else if (f[k] == '[') {
                size_t a = ++k;
                while (k < name_end && f[k] != ']')
                    k++;
                bool digits = k > a;
                int64_t iv = 0;
                for (size_t q = a; q < k; q++) {
                    if (f[q] < '0' || f[q] > '9')
                        digits = false;
                    else if (iv < 100000000)
                        iv = iv * 10 + (f[q] - '0');
                }
                rc = ct_getitem(rt, v, digits ? ct_int(iv) : ct_str(f + a, k - a), &v);
                k++;
            } else {
                rc = ct_error(rt, ERR_INVAL,
                              "Only '.' or '[' may follow ']' in format field "
                              "specifier");
            }
        }
        if (rc)
            break;
        if (conv == 'r' || conv == 's') {
            strbuf tmp;
            strbuf_init(&tmp);
            rc = conv == 'r' ? ct_to_repr(rt, v, &tmp) : ct_to_str(rt, v, &tmp);
            if (!rc)
                rc = ct_str_from_buf(rt, &tmp, &v);
            strbuf_deinit(&tmp);
            if (rc)
                break;
        } else if (conv) {
            rc = ct_error(rt, conv == 'a' ? ERR_UNSUPPORTED : ERR_INVAL,
                          "Unknown conversion specifier %c", conv);
            break;
        }
        rc = format_value(rt, v, sp, sn, &sb);
        if (!rc && sb.len > CT_MAX_OUTPUT)
            rc = ct_error(rt, ERR_TOOLARGE, "format result exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    }
    if (rc) {
        strbuf_deinit(&sb);
        return rc;
    }
    return ct_str_take(rt, &sb, fmt.kind, out);
}

/* ---- printf-style ---------------------------------------------------------------------------- */

/* The right operand of `fmt % args` and how far through it the conversions are. */
typedef struct pct_args {
    ct_val args;
    const ct_val *pos; /* the positional values: a tuple's items, else args itself */
    size_t n_pos, next;
    bool mapping, used_mapping;
} pct_args;

/* Reads a "(key)" at p[*i] == '(' and looks the key up in the mapping argument; leaves *i past
 * the ')'. */
static int pct_read_key(ct_rt *rt, pct_args *pa, const char *p, size_t n, size_t *ip, ct_val *v) {
    size_t i = *ip;
    size_t a = ++i;
    while (i < n && p[i] != ')')
        i++;
    if (i >= n)
        return ct_error(rt, ERR_INVAL, "incomplete format key");
    if (pa->args.t == CT_UNDEF)
        return ct_undef_fail(rt, pa->args);
    if (!pa->mapping)
        return ct_error(rt, ERR_INVAL, "format requires a mapping");
    if (!ct_dict_get(rt, pa->args.d, ct_str(p + a, i - a), v))
        return ct_error(rt, ERR_INVAL, "'%.*s'", (int)(i - a), p + a);
    pa->used_mapping = true;
    *ip = i + 1;
    return 0;
}

/* Reads the flags, width, precision and length modifier of a conversion into s (and *left for
 * '-'); leaves *i at the conversion type, which it checks is there. */
static int pct_read_spec(ct_rt *rt, const char *p, size_t n, size_t *ip, spec *s, bool *left) {
    size_t i = *ip;
    memset(s, 0, sizeof *s);
    s->fill = ' ';
    s->width = s->prec = -1;
    *left = false;
    while (i < n && strchr("-+ #0", p[i]) && p[i]) {
        if (p[i] == '-')
            *left = true;
        else if (p[i] == '+')
            s->sign = '+';
        else if (p[i] == ' ' && s->sign != '+')
            s->sign = ' ';
        else if (p[i] == '#')
            s->alt = true;
        else if (p[i] == '0')
            s->zero = true;
        i++;
    }
    if (i < n && p[i] == '*')
        return ct_error(rt, ERR_UNSUPPORTED, "'*' width in %% formatting");
    /* digits beyond the caps only make the value larger: it is rejected below */
    while (i < n && p[i] >= '0' && p[i] <= '9') {
        int64_t w = s->width < 0 ? 0 : s->width;
        s->width = w < 100000 ? w * 10 + (p[i] - '0') : w;
        i++;
    }
    if (i < n && p[i] == '.') {
        i++;
        s->prec = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            s->prec = s->prec < 100000 ? s->prec * 10 + (p[i] - '0') : s->prec;
            i++;
        }
    }
    while (i < n && (p[i] == 'h' || p[i] == 'l' || p[i] == 'L'))
        i++;
    *ip = i;
    if (i >= n)
        return ct_error(rt, ERR_INVAL, "incomplete format");
    if (s->width > 4096 || s->prec > 1000)
        return ct_error(rt, ERR_TOOLARGE, "format width or precision too large");
    return 0;
}

/* Formats a number for %d %i %u %x %X %o %e %E %f %F %g %G %c, converting as Python does. */
static int pct_format_num(ct_rt *rt, ct_val v, spec *s, char type, strbuf *sb) {
    int rc = 0;
    if (v.t == CT_UNDEF)
        return ct_undef_fail(rt, v);
    if (!ct_is_num(v))
        return ct_error(rt, ERR_INVAL, "%%%c format: a %s is required, not %s", type,
                        strchr("xXoc", type) ? "integer" : "real number", ct_type_name(v));
    if ((type == 'd' || type == 'i' || type == 'u') && v.t == CT_FLOAT) {
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18)
            rc = ct_error(rt, ERR_RANGE, "cannot convert float to integer");
        else
            v = ct_int((int64_t)v.f);
    }
    if (!rc && (type == 'x' || type == 'X' || type == 'o' || type == 'c') && v.t == CT_FLOAT)
        rc = ct_error(rt, ERR_INVAL, "%%%c format: an integer is required, not float", type);
    if (!rc) {
        if (strchr("eEfFgG", type) && s->prec < 0)
            s->prec = 6;
        s->type = (type == 'i' || type == 'u') ? 'd' : type;
        if (s->type == 'd' && s->prec >= 0)
            s->prec = -1;
        rc = format_num(rt, v, s, sb);
    }
    return rc;
}

/* Formats v for conversion type (at index at of the format) onto sb, which stays under
 * CT_MAX_OUTPUT. */
static int pct_format_value(ct_rt *rt, ct_val v, spec *s, char type, size_t at, strbuf *sb) {
    int rc;
    strbuf tmp;
    strbuf_init(&tmp);
    if (type == 's' || type == 'r' || type == 'a') {
        rc = type == 's' ? ct_to_str(rt, v, &tmp) : ct_to_repr(rt, v, &tmp);
        size_t len = tmp.len;
        if (!rc && s->prec >= 0)
            len = ct_utf8_offset(tmp.data, tmp.len, (size_t)s->prec);
        if (!rc)
            pad(sb, s, "", 0, tmp.data, len, '>');
    } else if (strchr("diuxXoeEfFgGc", type)) {
        rc = pct_format_num(rt, v, s, type, sb);
    } else {
        rc = ct_error(rt, ERR_INVAL, "unsupported format character '%c' (0x%x) at index %zu", type,
                      (unsigned)(unsigned char)type, at);
    }
    strbuf_deinit(&tmp);
    if (!rc && sb->len > CT_MAX_OUTPUT)
        rc = ct_error(rt, ERR_TOOLARGE, "format result exceeds %u MiB", CT_MAX_OUTPUT >> 20);
    return rc;
}

/* Formats one conversion, p[*i] just past its '%' (and not at the end): the optional key, the
 * spec, the type, the value it takes. Leaves *i past the type. */
static int pct_convert(ct_rt *rt, pct_args *pa, const char *p, size_t n, size_t *i, strbuf *sb) {
    int rc;
    ct_val v;
    bool have_v = false;
    if (p[*i] == '(') {
        if ((rc = pct_read_key(rt, pa, p, n, i, &v)))
            return rc;
        have_v = true;
    }
    spec s;
    bool left;
    if ((rc = pct_read_spec(rt, p, n, i, &s, &left)))
        return rc;
    char type = p[(*i)++];
    if (type == '%') {
        strbuf_putc(sb, '%');
        return 0;
    }
    if (!have_v) {
        if (pa->mapping && pa->n_pos == 1 && pa->pos == &pa->args) {
            v = pa->args; /* "%s" % {...} formats the dict itself */
        } else if (pa->next >= pa->n_pos) {
            return ct_error(rt, ERR_INVAL, "not enough arguments for format string");
        } else {
            v = pa->pos[pa->next];
        }
        pa->next++;
    }
    s.align = left ? '<' : (s.zero && strchr("diouxXeEfFgG", type) ? '=' : '>');
    if (s.zero && !left && strchr("diouxXeEfFgG", type))
        s.fill = '0';
    return pct_format_value(rt, v, &s, type, *i - 1, sb);
}

int ct_str_percent(ct_rt *rt, ct_val fmt, ct_val args, ct_val *out) {
    pct_args pa = {.args = args, .n_pos = 1, .mapping = args.t == CT_DICT};
    pa.pos = &pa.args;
    /* Python treats any subscriptable non-tuple, non-str argument as a possible mapping and then
     * never complains about unused arguments */
    bool lenient = pa.mapping || args.t == CT_UNDEF ||
                   (args.t == CT_LIST && (args.kind == CT_SEQ_LIST || args.kind == CT_SEQ_RANGE));
    if (args.t == CT_LIST && args.kind == CT_SEQ_TUPLE) {
        pa.pos = args.l->items;
        pa.n_pos = args.l->n;
    }
    const char *p = fmt.s.p;
    size_t n = fmt.s.n, i = 0;
    int rc = 0;
    strbuf sb;
    strbuf_init(&sb);
    while (i < n && !rc) {
        if (p[i] != '%') {
            strbuf_putc(&sb, p[i++]);
            continue;
        }
        i++;
        if (i >= n) {
            rc = ct_error(rt, ERR_INVAL, "incomplete format");
            break;
        }
        rc = pct_convert(rt, &pa, p, n, &i, &sb);
    }
    if (!rc && !pa.used_mapping && !lenient && pa.next < pa.n_pos)
        rc = ct_error(rt, ERR_INVAL, "not all arguments converted during string formatting");
    if (rc) {
        strbuf_deinit(&sb);
        return rc;
    }
    return ct_str_take(rt, &sb, fmt.kind, out);
}
