/* SPDX-License-Identifier: MIT */
/*
 * srv_http_parse: the strict HTTP/1.1 head parser and chunked decoder (rules in srv_http_parse.h).
 *
 * The head parser first finds the blank line (CRLF CRLF) within the limit, so it never judges a
 * head before it is whole, except for what can never become valid (a bare LF, a head already over
 * the limit); then it walks the request line and each field line once, byte classes checked by
 * table-free predicates. Framing fields are collected while walking (Content-Length values
 * compared, Transfer-Encoding codings counted across all its fields) and decided at the end, so
 * the status does not depend on field order beyond what the rules say.
 *
 * The chunked decoder is a byte-driven state machine; it keeps counters only (no buffered line),
 * so its state is a few words whatever the input, and each input byte is looked at once.
 */
#include "server/srv_http_parse.h"

#include "base/err.h"
#include "base/utf8.h"

#include <string.h>

static bool is_tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, SP, HTAB or obs-text */
static bool is_value_char(unsigned char c) {
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static char lower(char c) {
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool span_ieq(const char *buf, srv_http_span s, const char *lit) {
    size_t n = strlen(lit);
    if (s.len != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(buf[s.off + i]) != lit[i])
            return false;
    return true;
}

static int fail(int *status, const char **why, int st, const char *msg) {
    *status = st;
    *why = msg;
    return ERR_PROTOCOL;
}

/* Walks a comma-separated list in v[0, n), calling back for each trimmed, non-empty element;
 * counts empty elements in *n_empty. */
typedef void (*list_fn)(const char *e, size_t n, void *ctx);
static void list_each(const char *v, size_t n, list_fn fn, void *ctx, int *n_empty) {
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && v[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && (v[a] == ' ' || v[a] == '\t'))
            a++;
        while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
            b--;
        if (b > a)
            fn(v + a, b - a, ctx);
        else if (n_empty)
            (*n_empty)++;
        i = j + 1;
    }
}

static bool elem_ieq(const char *e, size_t n, const char *lit) {
    if (strlen(lit) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(e[i]) != lit[i])
            return false;
    return true;
}

typedef struct te_count {
    int chunked, other;
} te_count;

static void te_elem(const char *e, size_t n, void *ctx) {
    te_count *t = ctx;
    if (elem_ieq(e, n, "chunked"))
        t->chunked++;
    else
        t->other++;
}

typedef struct conn_opts {
    bool close, keep_alive;
} conn_opts;

static void conn_elem(const char *e, size_t n, void *ctx) {
    conn_opts *c = ctx;
    if (elem_ieq(e, n, "close"))
        c->close = true;
    else if (elem_ieq(e, n, "keep-alive"))
        c->keep_alive = true;
}

/* Finds the end of the head: the index just past CRLF CRLF, or 0 if not within buf[0, len). A
 * bare LF sets *bare_lf. Leading empty lines (CRLF) are skipped first. */
static size_t head_end(const char *buf, size_t len, size_t start, bool *bare_lf) {
    for (size_t i = start; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i == 0 || buf[i - 1] != '\r') {
            *bare_lf = true;
            return 0;
        }
        if (i >= start + 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return i + 1;
    }
    return 0;
}

static int parse_request_line(const char *buf, size_t a, size_t eol, srv_http_head *h, int *status,
                              const char **why) {
    size_t i = a;
    while (i < eol && is_tchar((unsigned char)buf[i]))
        i++;
    if (i == a || i >= eol || buf[i] != ' ' || i - a > 32)
        return fail(status, why, 400, "malformed request line (method)");
    h->method = (srv_http_span){(uint32_t)a, (uint32_t)(i - a)};
    size_t t = ++i;
    while (i < eol && (unsigned char)buf[i] > 0x20 && (unsigned char)buf[i] < 0x7f)
        i++;
    if (i == t || i >= eol || buf[i] != ' ')
        return fail(status, why, 400, "malformed request line (target)");
    h->target = (srv_http_span){(uint32_t)t, (uint32_t)(i - t)};
    size_t v = i + 1;
    if (eol - v != 8 || memcmp(buf + v, "HTTP/", 5) != 0 || buf[v + 6] != '.' || buf[v + 5] < '0' ||
        buf[v + 5] > '9' || buf[v + 7] < '0' || buf[v + 7] > '9')
        return fail(status, why, 400, "malformed request line (version)");
    if (buf[v + 5] != '1' || (buf[v + 7] != '0' && buf[v + 7] != '1'))
        return fail(status, why, 505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)");
    h->minor = buf[v + 7] - '0';
    /* path and query: origin form "/p?q", asterisk form "*", absolute form "http://host/p?q" */
    size_t p = t, pe = t + h->target.len;
    if (buf[p] != '/' && !(h->target.len == 1 && buf[p] == '*')) {
        size_t s = p;
        while (s < pe && buf[s] != ':')
            s++;
        if (s + 2 >= pe || buf[s + 1] != '/' || buf[s + 2] != '/')
            return fail(status, why, 400, "malformed request target");
        p = s + 3;
        while (p < pe && buf[p] != '/' && buf[p] != '?')
            p++;
    }
    size_t q = p;
    while (q < pe && buf[q] != '?')
        q++;
    h->path = (srv_http_span){(uint32_t)p, (uint32_t)(q - p)};
    h->query = q < pe ? (srv_http_span){(uint32_t)(q + 1), (uint32_t)(pe - q - 1)}
                      : (srv_http_span){(uint32_t)pe, 0};
    h->is_head = h->method.len == 4 && memcmp(buf + h->method.off, "HEAD", 4) == 0;
    return 0;
}

int srv_http_parse_head(const char *buf, size_t len, const srv_http_parse_limits *lim,
                        srv_http_head *h, int *status, const char **why) {
    if (!buf || !lim || !h || !status || !why)
        return ERR_INVAL;
    size_t start = 0;
    while (start + 1 < len && buf[start] == '\r' && buf[start + 1] == '\n' && start < 64)
        start += 2;
    bool bare_lf = false;
    size_t end = head_end(buf, len, start, &bare_lf);
    if (bare_lf)
        return fail(status, why, 400, "bare LF in request head (lines must end in CRLF)");
    if ((end == 0 && len > lim->max_head_bytes) || end > lim->max_head_bytes)
        return fail(status, why, 431, "request head too large");
    if (end == 0)
        return ERR_BUSY;
    memset(h, 0, offsetof(srv_http_head, fields));
    h->body = SRV_HTTP_BODY_NONE;
    h->content_length = 0;
    h->keep_alive = h->expect_continue = h->is_head = false;
    h->head_len = end;
    size_t eol = start;
    while (buf[eol] != '\r')
        eol++;
    int rc = parse_request_line(buf, start, eol, h, status, why);
    if (rc)
        return rc;

    int n_cl = 0, n_host = 0, n_te = 0;
    uint64_t cl = 0;
    bool cl_bad = false, cl_big = false, cl_differ = false, expect_other = false;
    te_count te = {0, 0};
    int te_empty = 0;
    conn_opts conn = {false, false};
    int max_fields =
        lim->max_fields < SRV_HTTP_MAX_HEADERS ? lim->max_fields : SRV_HTTP_MAX_HEADERS;

    size_t i = eol + 2;
    while (i < end - 2) {
        size_t le = i;
        while (buf[le] != '\r')
            le++;
        if (buf[i] == ' ' || buf[i] == '\t')
            return fail(status, why, 400, "obsolete line folding in a header field");
        size_t n = i;
        while (n < le && is_tchar((unsigned char)buf[n]))
            n++;
        if (n == i || n >= le || buf[n] != ':')
            return fail(status, why, 400, "malformed header field name");
        size_t va = n + 1, vb = le;
        for (size_t k = va; k < vb; k++)
            if (!is_value_char((unsigned char)buf[k]))
                return fail(status, why, 400, "invalid character in a header field value");
        while (va < vb && (buf[va] == ' ' || buf[va] == '\t'))
            va++;
        while (vb > va && (buf[vb - 1] == ' ' || buf[vb - 1] == '\t'))
            vb--;
        if (h->n_fields >= max_fields)
            return fail(status, why, 431, "too many header fields");
        srv_http_field *f = &h->fields[h->n_fields++];
        f->name = (srv_http_span){(uint32_t)i, (uint32_t)(n - i)};
        f->value = (srv_http_span){(uint32_t)va, (uint32_t)(vb - va)};
        const char *v = buf + va;
        size_t vn = vb - va;
        if (span_ieq(buf, f->name, "content-length")) {
            uint64_t x = 0;
            bool big = false;
            if (vn == 0)
                cl_bad = true;
            for (size_t k = 0; k < vn; k++) {
                if (v[k] < '0' || v[k] > '9') {
                    cl_bad = true;
                    break;
                }
                if (x > ((uint64_t)1 << 62) / 10)
                    big = true;
                else
                    x = x * 10 + (uint64_t)(v[k] - '0');
            }
            if (big || x > ((uint64_t)1 << 62))
                cl_big = true;
            if (n_cl > 0 && x != cl)
                cl_differ = true;
            cl = x;
            n_cl++;
        } else if (span_ieq(buf, f->name, "transfer-encoding")) {
            n_te++;
            list_each(v, vn, te_elem, &te, &te_empty);
        } else if (span_ieq(buf, f->name, "host")) {
            n_host++;
        } else if (span_ieq(buf, f->name, "connection")) {
            list_each(v, vn, conn_elem, &conn, NULL);
        } else if (span_ieq(buf, f->name, "expect")) {
            if (elem_ieq(v, vn, "100-continue"))
                h->expect_continue = h->minor == 1;
            else
                expect_other = true;
        }
        i = le + 2;
    }

    if (h->minor == 1 && n_host != 1)
        return fail(status, why, 400, n_host ? "more than one Host header" : "missing Host header");
    if (n_te > 0) {
        if (h->minor == 0)
            return fail(status, why, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (te.other > 0)
            return fail(status, why, 501, "unsupported transfer coding (only chunked is)");
        if (te.chunked != 1 || te_empty > 0)
            return fail(status, why, 400, "Transfer-Encoding must be exactly \"chunked\"");
        if (n_cl > 0)
            return fail(status, why, 400, "both Transfer-Encoding and Content-Length");
        h->body = SRV_HTTP_BODY_CHUNKED;
    } else if (n_cl > 0) {
        if (cl_bad)
            return fail(status, why, 400, "Content-Length must be decimal digits only");
        if (cl_differ)
            return fail(status, why, 400, "conflicting Content-Length headers");
        if (cl_big)
            return fail(status, why, 413, "Content-Length too large");
        h->body = cl > 0 ? SRV_HTTP_BODY_LENGTH : SRV_HTTP_BODY_NONE;
        h->content_length = cl;
    }
    if (expect_other)
        return fail(status, why, 417, "unsupported expectation (only 100-continue is)");
    h->keep_alive = h->minor == 1 ? !conn.close : (conn.keep_alive && !conn.close);
    return 0;
}

const srv_http_field *srv_http_head_field(const srv_http_head *h, const char *buf,
                                          const char *name) {
    for (int i = 0; i < h->n_fields; i++) {
        srv_http_span s = h->fields[i].name;
        size_t n = strlen(name);
        if (s.len != n)
            continue;
        size_t k = 0;
        while (k < n && lower(buf[s.off + k]) == lower(name[k]))
            k++;
        if (k == n)
            return &h->fields[i];
    }
    return NULL;
}

/* ---- chunked transfer coding ---- */

enum {
    CH_SIZE = 0,     /* hex digits of a chunk size */
    CH_SIZE_WS,      /* whitespace after the digits */
    CH_EXT,          /* a chunk extension: skipped up to CR */
    CH_SIZE_LF,      /* LF ending the size line */
    CH_DATA,         /* chunk data */
    CH_DATA_CR,      /* CR after the data */
    CH_DATA_LF,      /* LF after the data */
    CH_TRAILER,      /* start of a trailer line (or the final CRLF) */
    CH_TRAILER_LINE, /* inside a trailer line */
    CH_TRAILER_LF,   /* LF ending a trailer line */
    CH_END_LF,       /* LF of the final CRLF */
    CH_DONE,
};

void srv_http_chunk_init(srv_http_chunk *c) {
    memset(c, 0, sizeof *c);
}

static int chunk_fail(srv_http_chunk *c, const char **why, const char *msg) {
    c->state = CH_DONE + 1;
    *why = msg;
    return ERR_PROTOCOL;
}

int srv_http_chunk_decode(srv_http_chunk *c, const char *in, size_t in_len, size_t *consumed,
                          char *out, size_t out_cap, size_t *out_len, const char **why) {
    size_t i = 0, o = 0;
    *consumed = 0;
    *out_len = 0;
    if (c->state == CH_DONE)
        return 1;
    if (c->state > CH_DONE)
        return chunk_fail(c, why, "malformed chunked body");
    while (i < in_len) {
        char ch = in[i];
        switch (c->state) {
        case CH_SIZE: {
            int hv = utf8_hex_digit((unsigned char)ch);
            if (hv >= 0) {
                if (++c->n_digits > SRV_HTTP_CHUNK_DIGITS_MAX)
                    return chunk_fail(c, why, "chunk size too large");
                c->remaining = c->remaining * 16 + (uint64_t)hv;
            } else if (c->n_digits == 0) {
                return chunk_fail(c, why, "chunk size is not hexadecimal");
            } else if (ch == ' ' || ch == '\t') {
                c->state = CH_SIZE_WS;
            } else if (ch == ';') {
                c->state = CH_EXT;
            } else if (ch == '\r') {
                c->state = CH_SIZE_LF;
            } else {
                return chunk_fail(c, why, "chunk size is not hexadecimal");
            }
            break;
        }
        case CH_SIZE_WS:
            if (ch == ';')
                c->state = CH_EXT;
            else if (ch == '\r')
                c->state = CH_SIZE_LF;
            else if (ch != ' ' && ch != '\t')
                return chunk_fail(c, why, "chunk size is not hexadecimal");
            break;
        case CH_EXT:
            if (ch == '\r')
                c->state = CH_SIZE_LF;
            else if (ch == '\n' || (ch != '\t' && ((unsigned char)ch < 0x20 || ch == 0x7f)))
                return chunk_fail(c, why, "invalid character in a chunk extension");
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                return chunk_fail(c, why, "chunk size line not ended by CRLF");
            c->line_bytes = 0;
            c->n_digits = 0;
            c->state = c->remaining ? CH_DATA : CH_TRAILER;
            i++;
            continue;
        case CH_DATA: {
            if (o == out_cap)
                goto out;
            size_t n = in_len - i;
            if (n > c->remaining)
                n = (size_t)c->remaining;
            if (n > out_cap - o)
                n = out_cap - o;
            memcpy(out + o, in + i, n);
            o += n;
            i += n;
            c->remaining -= n;
            if (c->remaining == 0)
                c->state = CH_DATA_CR;
            continue;
        }
        case CH_DATA_CR:
            if (ch != '\r')
                return chunk_fail(c, why, "chunk data not followed by CRLF");
            c->state = CH_DATA_LF;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                return chunk_fail(c, why, "chunk data not followed by CRLF");
            c->state = CH_SIZE;
            i++;
            continue;
        case CH_TRAILER:
            if (ch == '\r') {
                c->state = CH_END_LF;
            } else if (ch == ' ' || ch == '\t' || ch == ':' || !is_tchar((unsigned char)ch)) {
                return chunk_fail(c, why, "malformed trailer field");
            } else {
                c->state = CH_TRAILER_LINE;
            }
            break;
        case CH_TRAILER_LINE:
            if (ch == '\r')
                c->state = CH_TRAILER_LF;
            else if (ch == '\n' || (ch != '\t' && ((unsigned char)ch < 0x20 || ch == 0x7f)))
                return chunk_fail(c, why, "invalid character in a trailer field");
            break;
        case CH_TRAILER_LF:
            if (ch != '\n')
                return chunk_fail(c, why, "trailer field not ended by CRLF");
            c->state = CH_TRAILER;
            break;
        case CH_END_LF:
            if (ch != '\n')
                return chunk_fail(c, why, "chunked body not ended by CRLF");
            c->state = CH_DONE;
            *consumed = i + 1;
            *out_len = o;
            return 1;
        default:
            return chunk_fail(c, why, "malformed chunked body");
        }
        /* bytes of size lines and trailers are bounded */
        if (c->state == CH_SIZE || c->state == CH_SIZE_WS || c->state == CH_EXT ||
            c->state == CH_SIZE_LF) {
            if (++c->line_bytes > SRV_HTTP_CHUNK_LINE_MAX)
                return chunk_fail(c, why, "chunk size line too long");
        } else if (c->state >= CH_TRAILER && c->state <= CH_END_LF) {
            if (++c->trailer_bytes > SRV_HTTP_CHUNK_TRAILER_MAX)
                return chunk_fail(c, why, "chunk trailer section too large");
        }
        i++;
    }
out:
    *consumed = i;
    *out_len = o;
    return 0;
}

const char *srv_http_reason(int status) {
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}
