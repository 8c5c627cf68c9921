/* SPDX-License-Identifier: MIT */
/* utf8: see utf8.h. */
#include "base/utf8.h"

int utf8_hex_digit(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int utf8_seq_len(unsigned char c) {
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0)
        return -1;
    unsigned char c = s[0];
    int len = utf8_seq_len(c);
    if (len == 0 || (size_t)len > n)
        return -1;
    if (len == 1) {
        *cp = c;
        return 1;
    }
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
        return -1;
    if (v >= 0xD800 && v <= 0xDFFF)
        return -1;
    *cp = v;
    return len;
}

int utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

int utf8_valid(const char *s, size_t n, size_t *bad_off) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int len = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (len < 0) {
            if (bad_off)
                *bad_off = i;
            return 0;
        }
        i += (size_t)len;
    }
    return 1;
}

size_t utf8_incomplete_tail(const char *s, size_t n) {
    /* Look back at most 3 bytes for a lead byte whose sequence runs past the end. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation: keep looking for the lead */
        int len = utf8_seq_len(c);
        if (len > (int)back) {
            /* the bytes present must be valid continuations so far */
            for (size_t j = n - back + 1; j < n; j++)
                if (((unsigned char)s[j] & 0xC0) != 0x80)
                    return 0;
            /* second-byte range checks that make the prefix already invalid */
            if (back >= 2) {
                unsigned char c1 = (unsigned char)s[n - back + 1];
                if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) ||
                    (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
                    return 0;
            }
            return back;
        }
        return 0;
    }
    return 0;
}
