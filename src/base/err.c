/* SPDX-License-Identifier: MIT */
/*
 * err: error code strings and the per-thread detail message. See err.h.
 * The detail lives in a thread-local fixed buffer: setting it never allocates, so it works when
 * the failure being reported is an allocation failure.
 */
#include "base/err.h"

#include <stdio.h>
#include <string.h>

#define ERR_DETAIL_MAX 1024

static _Thread_local char err_buf[ERR_DETAIL_MAX];

const char *err_str(int code) {
    switch (code) {
    case 0:
        return "ok";
#define ERR_CASE(name, value, desc)                                                                \
    case value:                                                                                    \
        return desc;
        ERR_LIST(ERR_CASE)
#undef ERR_CASE
    default:
        return "unknown error";
    }
}

const char *err_name(int code) {
    switch (code) {
    case 0:
        return "OK";
#define ERR_CASE(name, value, desc)                                                                \
    case value:                                                                                    \
        return "ERR_" #name;
        ERR_LIST(ERR_CASE)
#undef ERR_CASE
    default:
        return "ERR_UNKNOWN";
    }
}

int err_vset(int code, const char *fmt, va_list ap) {
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    return code;
}

int err_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(code, fmt, ap);
    va_end(ap);
    return code;
}

int err_wrap(int code, const char *fmt, ...) {
    char out[ERR_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof out, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len > sizeof out - 1)
        len = sizeof out - 1;
    const char *rest = err_buf[0] ? err_buf : err_str(code);
    size_t rl = strlen(rest);
    if (len + 2 < sizeof out) {
        out[len++] = ':';
        out[len++] = ' ';
        if (rl > sizeof out - 1 - len)
            rl = sizeof out - 1 - len;
        memcpy(out + len, rest, rl);
        len += rl;
    }
    out[len] = 0;
    memcpy(err_buf, out, len + 1);
    return code;
}

const char *err_detail(void) {
    return err_buf;
}

void err_clear(void) {
    err_buf[0] = 0;
}
