/* SPDX-License-Identifier: MIT */
/*
 * strbuf: see strbuf.h. Growth doubles the capacity so appends are amortised O(1). An empty
 * buffer points at a static "" so data is always a valid C string.
 */
#include "base/strbuf.h"
#include "base/err.h"
#include "base/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char strbuf_empty[1];

void strbuf_init(strbuf *sb) {
    sb->data = strbuf_empty;
    sb->len = 0;
    sb->cap = 0;
    sb->failed = false;
}

void strbuf_deinit(strbuf *sb) {
    if (sb->cap)
        free(sb->data);
    strbuf_init(sb);
}

void strbuf_reset(strbuf *sb) {
    sb->len = 0;
    if (sb->cap)
        sb->data[0] = 0;
    sb->failed = false;
}

int strbuf_reserve(strbuf *sb, size_t n) {
    if (sb->failed)
        return ERR_NOMEM;
    if (n > SIZE_MAX / 2 - sb->len - 1) {
        sb->failed = true;
        return ERR_NOMEM;
    }
    size_t need = sb->len + n + 1;
    if (need <= sb->cap)
        return 0;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = sb->cap ? realloc(sb->data, cap) : malloc(cap);
    if (!p) {
        sb->failed = true;
        return ERR_NOMEM;
    }
    if (!sb->cap)
        p[0] = 0;
    sb->data = p;
    sb->cap = cap;
    return 0;
}

void strbuf_append(strbuf *sb, const void *data, size_t n) {
    if (n == 0 || strbuf_reserve(sb, n))
        return;
    memcpy(sb->data + sb->len, data, n);
    sb->len += n;
    sb->data[sb->len] = 0;
}

void strbuf_puts(strbuf *sb, const char *s) {
    strbuf_append(sb, s, strlen(s));
}

void strbuf_putc(strbuf *sb, char c) {
    strbuf_append(sb, &c, 1);
}

void strbuf_printf(strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        strbuf_append(sb, small, (size_t)n);
        return;
    }
    if (strbuf_reserve(sb, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

static void strbuf_put_u16_escape(strbuf *sb, unsigned v) {
    static const char hex[] = "0123456789abcdef";
    char e[6] = {'\\',       'u', hex[(v >> 12) & 15], hex[(v >> 8) & 15], hex[(v >> 4) & 15],
                 hex[v & 15]};
    strbuf_append(sb, e, 6);
}

void strbuf_json_str(strbuf *sb, const char *s, size_t n, bool ascii_only) {
    /* the two-character escapes; other control bytes (and DEL when ascii_only) become \u00XX */
    static const char *const esc[0x80] = {
        ['"'] = "\\\"", ['\\'] = "\\\\", ['\n'] = "\\n", ['\r'] = "\\r",
        ['\t'] = "\\t", ['\b'] = "\\b",  ['\f'] = "\\f"};
    strbuf_putc(sb, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            if (esc[c])
                strbuf_append(sb, esc[c], 2);
            else if (c < 0x20 || (c == 0x7f && ascii_only))
                strbuf_put_u16_escape(sb, c);
            else
                strbuf_putc(sb, (char)c);
            i++;
            continue;
        }
        uint32_t cp;
        int len = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (len <= 0) {
            /* invalid byte: U+FFFD */
            if (ascii_only)
                strbuf_put_u16_escape(sb, 0xFFFD);
            else
                strbuf_append(sb, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        if (ascii_only) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                strbuf_put_u16_escape(sb, 0xD800 + (v >> 10));
                strbuf_put_u16_escape(sb, 0xDC00 + (v & 0x3FF));
            } else {
                strbuf_put_u16_escape(sb, cp);
            }
        } else {
            strbuf_append(sb, s + i, (size_t)len);
        }
        i += (size_t)len;
    }
    strbuf_putc(sb, '"');
}

void strbuf_json_cstr(strbuf *sb, const char *s) {
    if (s)
        strbuf_json_str(sb, s, strlen(s), false);
    else
        strbuf_puts(sb, "null");
}

void strbuf_json_num(strbuf *sb, double v) {
    if (!isfinite(v)) {
        strbuf_puts(sb, "null");
        return;
    }
    if (v == (double)(int64_t)v && fabs(v) < 1e16) {
        strbuf_printf(sb, "%lld", (long long)(int64_t)v);
        return;
    }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    strbuf_puts(sb, buf);
}

bool strbuf_failed(const strbuf *sb) {
    return sb->failed;
}

char *strbuf_take(strbuf *sb, size_t *len_out) {
    if (sb->failed) {
        strbuf_deinit(sb);
        return NULL;
    }
    char *p;
    if (!sb->cap) {
        p = malloc(1);
        if (!p)
            return NULL;
        p[0] = 0;
    } else {
        p = sb->data;
    }
    if (len_out)
        *len_out = sb->len;
    strbuf_init(sb);
    return p;
}
