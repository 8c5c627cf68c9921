/* SPDX-License-Identifier: MIT */
/*
 * ct_pystr: Python str semantics over UTF-8 bytes, for the chat-template engine.
 *
 * jinja2 runs on Python str, a sequence of code points; verity keeps strings as UTF-8 bytes. These
 * helpers give the Python behaviour where it shows in output: len() and indexing count code
 * points, strip() and split() use str.isspace(), lower()/upper()/title() map case, repr() picks
 * quotes and escapes like Python.
 *
 * Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth Latin
 * (with 'ß'.upper() == 'SS'); other scripts are left unchanged, where Python would map a few more
 * (Armenian, Georgian, Deseret, ...). repr() treats as non-printable the control, format,
 * separator, surrogate and private-use ranges Python does; unassigned code points count as
 * printable (Python escapes them). Both gaps only matter for unusual text printed inside a
 * list/dict repr or case-mapped.
 */
#include "template/ct_int.h"

#include <string.h>

bool ct_py_isspace(uint32_t cp) {
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    if (cp < 0x85)
        return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t ct_utf8_next(const char *p, size_t n, size_t *i) {
    const unsigned char *s = (const unsigned char *)p;
    size_t k = *i;
    unsigned char c = s[k];
    if (c < 0x80 || k + 1 >= n + 1) {
        *i = k + 1;
        return c;
    }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (k + (size_t)len > n) {
        *i = k + 1;
        return 0xFFFD;
    }
    uint32_t cp;
    if (len == 2)
        cp = (uint32_t)(c & 0x1F) << 6 | (s[k + 1] & 0x3F);
    else if (len == 3)
        cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[k + 1] & 0x3F) << 6 | (s[k + 2] & 0x3F);
    else if (len == 4)
        cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[k + 1] & 0x3F) << 12 |
             (uint32_t)(s[k + 2] & 0x3F) << 6 | (s[k + 3] & 0x3F);
    else
        cp = 0xFFFD;
    *i = k + (size_t)len;
    return cp;
}

void ct_utf8_put(strbuf *sb, uint32_t cp) {
    char b[4];
    if (cp < 0x80) {
        strbuf_putc(sb, (char)cp);
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        strbuf_append(sb, b, 2);
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        strbuf_append(sb, b, 3);
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        strbuf_append(sb, b, 4);
    }
}

size_t ct_utf8_count(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

size_t ct_utf8_offset(const char *p, size_t n, size_t ci) {
    size_t i = 0, c = 0;
    while (i < n && c < ci) {
        i++;
        while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80)
            i++;
        c++;
    }
    return i;
}

/* ---- case ---------------------------------------------------------------------------------- */

uint32_t ct_lower_cp(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)
        return cp + 32;
    if (cp >= 0x100 && cp <= 0x137)
        return cp == 0x130 ? 0x69 : (cp | 1);
    if (cp >= 0x139 && cp <= 0x148)
        return (cp & 1) ? cp + 1 : cp;
    if (cp >= 0x14A && cp <= 0x177)
        return cp | 1;
    if (cp == 0x178)
        return 0xFF;
    if (cp >= 0x179 && cp <= 0x17E)
        return (cp & 1) ? cp + 1 : cp;
    if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2)
        return cp + 32;
    if (cp == 0x386)
        return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A)
        return cp + 37;
    if (cp == 0x38C)
        return 0x3CC;
    if (cp == 0x38E || cp == 0x38F)
        return cp + 63;
    if (cp >= 0x410 && cp <= 0x42F)
        return cp + 32;
    if (cp >= 0x400 && cp <= 0x40F)
        return cp + 80;
    if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) ||
        (cp >= 0x4D0 && cp <= 0x52F))
        return cp | 1;
    if (cp >= 0xFF21 && cp <= 0xFF3A)
        return cp + 32;
    return cp;
}

uint32_t ct_upper_cp(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)
        return cp - 32;
    if (cp == 0xFF)
        return 0x178;
    if (cp == 0xB5)
        return 0x39C;
    if (cp >= 0x100 && cp <= 0x137)
        return cp == 0x131 ? 0x49 : (cp & ~1u);
    if (cp >= 0x139 && cp <= 0x148)
        return (cp & 1) ? cp : cp - 1;
    if (cp >= 0x14A && cp <= 0x177)
        return cp & ~1u;
    if (cp >= 0x179 && cp <= 0x17E)
        return (cp & 1) ? cp : cp - 1;
    if (cp == 0x17F)
        return 0x53;
    if (cp >= 0x3B1 && cp <= 0x3CB && cp != 0x3C2)
        return cp - 32;
    if (cp == 0x3C2)
        return 0x3A3;
    if (cp == 0x3AC)
        return 0x386;
    if (cp >= 0x3AD && cp <= 0x3AF)
        return cp - 37;
    if (cp == 0x3CC)
        return 0x38C;
    if (cp == 0x3CD || cp == 0x3CE)
        return cp - 63;
    if (cp >= 0x430 && cp <= 0x44F)
        return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F)
        return cp - 80;
    if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) ||
        (cp >= 0x4D0 && cp <= 0x52F))
        return cp & ~1u;
    if (cp >= 0xFF41 && cp <= 0xFF5A)
        return cp - 32;
    return cp;
}

bool ct_is_upper_cp(uint32_t cp) {
    return ct_lower_cp(cp) != cp;
}
bool ct_is_lower_cp(uint32_t cp) {
    return ct_upper_cp(cp) != cp || cp == 0xDF;
}

bool ct_is_alpha_cp(uint32_t cp) {
    if (cp < 0x80)
        return (cp | 32) >= 'a' && (cp | 32) <= 'z';
    if (ct_is_upper_cp(cp) || ct_is_lower_cp(cp))
        return true;
    /* letters without case: CJK, kana, hangul, Arabic, Hebrew, Thai, Devanagari ... */
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0x5D0 && cp <= 0x5EA) ||
           (cp >= 0x620 && cp <= 0x64A) || (cp >= 0xE01 && cp <= 0xE30) ||
           (cp >= 0x905 && cp <= 0x939) || cp == 0xAA || cp == 0xBA;
}

static void put_upper(strbuf *sb, uint32_t cp) {
    if (cp == 0xDF)
        strbuf_append(sb, "SS", 2);
    else
        ct_utf8_put(sb, ct_upper_cp(cp));
}

static void put_lower(strbuf *sb, uint32_t cp) {
    if (cp == 0x130)
        strbuf_append(sb, "i\xCC\x87", 3);
    else
        ct_utf8_put(sb, ct_lower_cp(cp));
}

void ct_py_lower(strbuf *sb, const char *p, size_t n) {
    size_t i = 0;
    while (i < n)
        put_lower(sb, ct_utf8_next(p, n, &i));
}

void ct_py_upper(strbuf *sb, const char *p, size_t n) {
    size_t i = 0;
    while (i < n)
        put_upper(sb, ct_utf8_next(p, n, &i));
}

/* str.title(): a cased character after an uncased one starts a word. */
void ct_py_title(strbuf *sb, const char *p, size_t n) {
    size_t i = 0;
    bool prev_cased = false;
    while (i < n) {
        uint32_t cp = ct_utf8_next(p, n, &i);
        bool cased = ct_is_upper_cp(cp) || ct_is_lower_cp(cp);
        if (prev_cased)
            put_lower(sb, cp);
        else
            put_upper(sb, cp);
        prev_cased = cased;
    }
}

void ct_py_capitalize(strbuf *sb, const char *p, size_t n) {
    size_t i = 0;
    bool first = true;
    while (i < n) {
        uint32_t cp = ct_utf8_next(p, n, &i);
        if (first)
            put_upper(sb, cp);
        else
            put_lower(sb, cp);
        first = false;
    }
}

/* ---- strip ----------------------------------------------------------------------------------- */

static bool in_chars(uint32_t cp, const char *chars, size_t n_chars) {
    if (!chars)
        return ct_py_isspace(cp);
    size_t i = 0;
    while (i < n_chars)
        if (ct_utf8_next(chars, n_chars, &i) == cp)
            return true;
    return false;
}

void ct_py_strip(const char *p, size_t n, const char *chars, size_t n_chars, int which, size_t *off,
                 size_t *len) {
    size_t b = 0, e = n;
    if (which & 1) {
        while (b < e) {
            size_t k = b;
            uint32_t cp = ct_utf8_next(p, n, &k);
            if (!in_chars(cp, chars, n_chars))
                break;
            b = k;
        }
    }
    if (which & 2) {
        while (e > b) {
            size_t s = e - 1;
            while (s > b && ((unsigned char)p[s] & 0xC0) == 0x80)
                s--;
            size_t k = s;
            uint32_t cp = ct_utf8_next(p, n, &k);
            if (!in_chars(cp, chars, n_chars))
                break;
            e = s;
        }
    }
    *off = b;
    *len = e - b;
}

/* ---- repr ------------------------------------------------------------------------------------ */

static bool py_printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F)
        return false;
    if (cp < 0x7F)
        return true;
    if (cp <= 0xA0 || cp == 0xAD)
        return false;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x8E2 ||
        cp == 0x1680 || cp == 0x180E)
        return false;
    if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000)
        return false;
    if ((cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) ||
        cp == 0xFFFE || cp == 0xFFFF)
        return false;
    if (cp == 0x110BD || cp == 0x110CD || (cp >= 0x1BCA0 && cp <= 0x1BCA3) ||
        (cp >= 0x1D173 && cp <= 0x1D17A) || cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F) ||
        cp >= 0xF0000)
        return false;
    return true;
}

void ct_py_repr_str(strbuf *sb, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    strbuf_putc(sb, q);
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp = ct_utf8_next(p, n, &i);
        if (cp == (uint32_t)q || cp == '\\') {
            strbuf_putc(sb, '\\');
            strbuf_putc(sb, (char)cp);
        } else if (cp == '\t') {
            strbuf_append(sb, "\\t", 2);
        } else if (cp == '\n') {
            strbuf_append(sb, "\\n", 2);
        } else if (cp == '\r') {
            strbuf_append(sb, "\\r", 2);
        } else if (!py_printable(cp)) {
            if (cp < 0x100)
                strbuf_printf(sb, "\\x%02x", cp);
            else if (cp < 0x10000)
                strbuf_printf(sb, "\\u%04x", cp);
            else
                strbuf_printf(sb, "\\U%08x", cp);
        } else {
            strbuf_append(sb, p + start, i - start);
        }
    }
    strbuf_putc(sb, q);
}

void ct_html_escape(strbuf *sb, const char *p, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (p[i]) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        case '"':
            rep = "&#34;";
            break;
        default:
            continue;
        }
        strbuf_append(sb, p + run, i - run);
        strbuf_puts(sb, rep);
        run = i + 1;
    }
    strbuf_append(sb, p + run, n - run);
}

ptrdiff_t ct_memfind(const char *hay, size_t n, const char *needle, size_t m, size_t from) {
    if (from > n || m > n - from)
        return -1;
    if (m == 0)
        return (ptrdiff_t)from;
    const char *r = memmem(hay + from, n - from, needle, m);
    return r ? r - hay : -1;
}

bool ct_name_is(const char *s, size_t n, const char *lit) {
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

const ct_named *ct_named_find(const ct_named *t, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (ct_name_is(name, len, t[i].name))
            return &t[i];
    return NULL;
}
