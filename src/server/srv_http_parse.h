/* SPDX-License-Identifier: MIT */
/*
 * srv_http_parse: the strict HTTP/1.1 request parser under srv_http (the connection layer), as
 * pure functions over bytes: no sockets, no allocation, no global state, so the fuzzer
 * (fuzz/fuzz_http.c) and the unit tests drive exactly the code the server runs.
 *
 * Two parts:
 *   - srv_http_parse_head: a request line and its header fields, complete up to the blank line,
 *     into a srv_http_head of offsets into the caller's buffer, with the framing decided (no body,
 *     Content-Length, chunked) and every malformed input mapped to the status the client must get
 *     (400, 413, 417, 431, 501, 505). Incomplete input is "need more", never an error, so the
 *     layer calls it again after each read on the bytes it holds.
 *   - srv_http_chunk_decode: the chunked transfer coding as a state machine fed any split of the
 *     input (one byte at a time included), copying chunk data out, ignoring chunk extensions and
 *     consuming trailer fields, with every line and the trailer section bounded.
 *
 * Rules (RFC 9110 / 9112, the strict reading): the request line is `method SP target SP
 * HTTP/1.x CRLF`, lines end in CRLF (a bare LF is a 400), leading empty lines are skipped, a field
 * line beginning with whitespace (obs-fold) is a 400, whitespace between a field name and its
 * colon is a 400, field names are matched case-insensitively. Content-Length is digits only (a
 * sign, a space inside, a comma list or an empty value is a 400; a numeral beyond 2^62, such as
 * 10^23, is a 413: a valid length larger than any body limit); two Content-Length fields with
 * different values are a 400. Transfer-Encoding, over all its fields, must be exactly `chunked`:
 * an unknown coding is a 501, `chunked` twice, an empty list, Transfer-Encoding with
 * Content-Length, or any Transfer-Encoding in an HTTP/1.0 request is a 400. HTTP/1.1 requires
 * exactly one Host field. Expect: 100-continue is reported; any other expectation is a 417.
 * Versions other than 1.0 and 1.1 are a 505. A head longer than the limit, or with more fields
 * than the limit, is a 431.
 *
 * Thread safety: none needed; every function works on the caller's structures only.
 */
#ifndef VERITY_SERVER_SRV_HTTP_PARSE_H
#define VERITY_SERVER_SRV_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most header fields a head may carry whatever the configuration (srv_http_head's array). */
#define SRV_HTTP_MAX_HEADERS 128

/* How a request's body is framed. */
enum {
    SRV_HTTP_BODY_NONE = 0,
    SRV_HTTP_BODY_LENGTH = 1,
    SRV_HTTP_BODY_CHUNKED = 2,
};

/* A piece of the parsed buffer: bytes [off, off + len). */
typedef struct srv_http_span {
    uint32_t off, len;
} srv_http_span;

typedef struct srv_http_field {
    srv_http_span name, value; /* value without leading or trailing whitespace */
} srv_http_field;

/* A parsed request head. Spans point into the buffer given to srv_http_parse_head. */
typedef struct srv_http_head {
    size_t head_len;      /* bytes of the head, blank line (and skipped empty lines) included */
    srv_http_span method; /* "GET" */
    srv_http_span target; /* "/v1/models?x=1" as sent (origin or absolute form, or "*") */
    srv_http_span path;   /* "/v1/models" */
    srv_http_span query;  /* "x=1" (len 0 when there is no '?') */
    int minor;            /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
    int n_fields;
    srv_http_field fields[SRV_HTTP_MAX_HEADERS];
    int body;                /* SRV_HTTP_BODY_* */
    uint64_t content_length; /* when body == SRV_HTTP_BODY_LENGTH */
    bool keep_alive;         /* the connection may carry another request after this one */
    bool expect_continue;    /* Expect: 100-continue (HTTP/1.1 only) */
    bool is_head;            /* method HEAD: the response has no body */
} srv_http_head;

/* Limits the head parser enforces. */
typedef struct srv_http_parse_limits {
    size_t max_head_bytes; /* head including the blank line; beyond it: 431 */
    int max_fields;        /* at most SRV_HTTP_MAX_HEADERS; beyond it: 431 */
} srv_http_parse_limits;

/* Parses the request head at the start of buf[0, len).
 * Returns 0 when a complete, valid head was parsed into *h (h->head_len bytes of buf; the body
 * or the next request starts after them); ERR_BUSY when the head is not complete yet and may
 * still become valid (read more and call again with all the bytes); ERR_PROTOCOL when the input
 * is malformed or over a limit: then *status is the HTTP status to answer (400, 413, 417, 431,
 * 501 or 505) and *why a static one-line reason for the client, and the connection must be closed
 * after the answer. ERR_INVAL for NULL arguments. buf need not be NUL-terminated. */
int srv_http_parse_head(const char *buf, size_t len, const srv_http_parse_limits *lim,
                        srv_http_head *h, int *status, const char **why);

/* Returns the value span of the first field named name (case-insensitive) in h, or NULL. */
const srv_http_field *srv_http_head_field(const srv_http_head *h, const char *buf,
                                          const char *name);

/* The chunked decoder's state; zero it (or srv_http_chunk_init) before the first chunk. */
typedef struct srv_http_chunk {
    int state;
    uint64_t remaining;  /* data bytes left in the current chunk */
    uint32_t line_bytes; /* bytes of the current size or trailer line so far */
    uint32_t n_digits;
    uint32_t trailer_bytes;
} srv_http_chunk;

/* Longest chunk-size line (digits, extensions, CRLF) and trailer section accepted. */
#define SRV_HTTP_CHUNK_LINE_MAX    4096
#define SRV_HTTP_CHUNK_TRAILER_MAX 16384
/* A chunk size has at most this many hex digits (leading zeros included): 2^60 - 1 at most. */
#define SRV_HTTP_CHUNK_DIGITS_MAX 15

/* Resets c for a new body. */
void srv_http_chunk_init(srv_http_chunk *c);

/* Decodes chunked bytes in[0, in_len), copying chunk data to out[0, out_cap).
 * *consumed is set to the input bytes used and *out_len to the data bytes written; decoding stops
 * early when out is full (call again with the rest and more room). Returns 1 when the last chunk
 * and its trailers are complete (bytes after *consumed belong to the next request), 0 when more
 * input (or more room) is needed, ERR_PROTOCOL for malformed input (a non-hex or overlong size,
 * a bare LF, data not followed by CRLF, a line or trailer section over its bound) with *why a
 * static reason (the status is 400). */
int srv_http_chunk_decode(srv_http_chunk *c, const char *in, size_t in_len, size_t *consumed,
                          char *out, size_t out_cap, size_t *out_len, const char **why);

/* Returns the standard reason phrase of an HTTP status ("Not Found"), "Unknown" otherwise. */
const char *srv_http_reason(int status);

#endif
