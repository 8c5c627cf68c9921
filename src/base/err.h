/* SPDX-License-Identifier: MIT */
/*
 * err: the one list of error codes, and the detail message that goes with the last error.
 *
 * Every fallible function in verity returns 0 or one of the negative codes below. The code says
 * what kind of failure it was; the detail says which thing failed ("model.gguf: tensor
 * 'blk.3.attn_q.weight': data offset 123 past end of file (size 100) at byte 456"). The detail is
 * kept per thread, so a worker thread's failure never overwrites another thread's message; the
 * function that first detects a failure sets it with err_set(), callers above it may prefix
 * context with err_wrap(), and the edge (main, an HTTP handler) prints err_detail().
 */
#ifndef VERITY_BASE_ERR_H
#define VERITY_BASE_ERR_H

#include <stdarg.h>

/* X(NAME, value, short description) */
#define ERR_LIST(X)                                                                                \
    X(NOMEM, -1, "out of memory")                                                                  \
    X(INVAL, -2, "invalid argument")                                                               \
    X(IO, -3, "input/output error")                                                                \
    X(FORMAT, -4, "malformed input")                                                               \
    X(UNSUPPORTED, -5, "not supported")                                                            \
    X(RANGE, -6, "value out of range")                                                             \
    X(NOTFOUND, -7, "not found")                                                                   \
    X(FULL, -8, "capacity exhausted")                                                              \
    X(BUSY, -9, "busy, try again")                                                                 \
    X(TIMEOUT, -10, "timed out")                                                                   \
    X(CANCELLED, -11, "cancelled")                                                                 \
    X(CHECKSUM, -12, "checksum mismatch")                                                          \
    X(OVERFLOW, -13, "arithmetic overflow")                                                        \
    X(TOOLARGE, -14, "too large")                                                                  \
    X(STATE, -15, "invalid state")                                                                 \
    X(PROTOCOL, -16, "protocol error")                                                             \
    X(CONNECT, -17, "connection failed")                                                           \
    X(AUTH, -18, "unauthorized")                                                                   \
    X(EXISTS, -19, "already exists")                                                               \
    X(INTERNAL, -20, "internal error")

enum {
#define ERR_ENUM(name, value, desc) ERR_##name = value,
    ERR_LIST(ERR_ENUM)
#undef ERR_ENUM
};

/* Returns the short description of an error code ("out of memory"); "unknown error" for a code not
 * in the list; "ok" for 0. The string is static. */
const char *err_str(int code);

/* Returns the symbolic name of an error code ("ERR_NOMEM"), "OK" for 0. The string is static. */
const char *err_name(int code);

/* Records a formatted detail message for this thread and returns code, so a function can write
 * `return err_set(ERR_FORMAT, "%s: bad magic at byte 0", path);`. The message is truncated to
 * 1 KiB. Never fails. */
int err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like err_set, from a va_list. */
int err_vset(int code, const char *fmt, va_list ap);

/* Prefixes this thread's current detail with formatted context and ": ", returning code. Use it
 * when an error passes up through a layer that knows something the lower one did not (a file name).
 */
int err_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returns this thread's last detail message, or the empty string if none was set since
 * err_clear(). Valid until the next err_* call on this thread. */
const char *err_detail(void);

/* Forgets this thread's detail message. */
void err_clear(void);

#endif
