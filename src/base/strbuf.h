/* SPDX-License-Identifier: MIT */
/*
 * strbuf: a growable byte buffer, always NUL-terminated, for building output text (JSON lines,
 * HTTP bodies, reports). Appends never fail silently: on allocation failure the buffer enters a
 * sticky failed state, further appends are ignored, and strbuf_failed() reports it, so a caller can
 * build a whole message and check once at the end.
 *
 * Caller-owned storage: strbuf_init(&sb) / strbuf_deinit(&sb). Not thread-safe.
 */
#ifndef VERITY_BASE_STRBUF_H
#define VERITY_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strbuf {
    char *data;  /* NUL-terminated; never NULL after init */
    size_t len;  /* bytes used, excluding the terminator */
    size_t cap;  /* bytes allocated */
    bool failed; /* an allocation failed; contents are truncated */
} strbuf;

/* Initialises an empty buffer (no allocation until the first append). */
void strbuf_init(strbuf *sb);

/* Frees the buffer's memory and leaves it empty and reusable. */
void strbuf_deinit(strbuf *sb);

/* Empties the buffer, keeping its capacity and clearing the failed state. */
void strbuf_reset(strbuf *sb);

/* Ensures room for n more bytes. Returns 0 or ERR_NOMEM (and marks the buffer failed). */
int strbuf_reserve(strbuf *sb, size_t n);

void strbuf_append(strbuf *sb, const void *data, size_t n);
void strbuf_puts(strbuf *sb, const char *s);
void strbuf_putc(strbuf *sb, char c);
void strbuf_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s[0..n) as a JSON string literal with quotes. Control characters, '"' and '\\' are
 * escaped; with ascii_only, every non-ASCII code point becomes \uXXXX (surrogate pairs above
 * U+FFFF), otherwise UTF-8 is copied as is. Invalid UTF-8 bytes are written as U+FFFD. */
void strbuf_json_str(strbuf *sb, const char *s, size_t n, bool ascii_only);

/* Appends the NUL-terminated s as strbuf_json_str(sb, s, strlen(s), false) does, or null when s
 * is NULL (a field that may be absent). */
void strbuf_json_cstr(strbuf *sb, const char *s);

/* Appends a double the way JSON writers that round-trip do: the shortest decimal that reads back
 * as the same double ("%.17g" trimmed), integers without exponent up to 1e16, and "NaN"/"Infinity"
 * never (non-finite values become null). */
void strbuf_json_num(strbuf *sb, double v);

/* Returns true if any append failed since init/reset. */
bool strbuf_failed(const strbuf *sb);

/* Transfers ownership of the bytes to the caller (free() them) and leaves sb empty. Returns NULL if
 * the buffer failed. */
char *strbuf_take(strbuf *sb, size_t *len_out);

#endif
