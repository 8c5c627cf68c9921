/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http: libFuzzer target for the HTTP/1.1 request parser under the connection layer
 * (server/srv_http_parse.h), which reads bytes straight from the network before anything else.
 * The first input byte picks a split step (1..32) so read boundaries are fuzzed too; the rest is
 * what a client sent. Checked, with abort() on a violation so the fuzzer reports it:
 *   - a parsed head's spans, fields and framing lie inside head_len, and head_len inside the input;
 *   - an error status is one of the statuses the parser documents;
 *   - incrementality: when the whole input parses, every shorter prefix (cut at the step) is
 *     "need more" (ERR_BUSY), never an error or a different head, so the layer may parse after
 *     every read;
 *   - the chunked decoder fed the bytes after the head (or the whole input) in step-sized pieces
 *     gives the same result as one call over everything, and on success the same data and
 *     consumed count.
 */
#include "base/err.h"
#include "server/srv_http_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void span_ok(srv_http_span s, size_t head_len) {
    if ((size_t)s.off + s.len > head_len)
        abort();
}

/* Decodes in[0, n) in pieces of step bytes into out (cap bytes); returns the decoder's result,
 * the data length and the bytes consumed. */
static int chunk_run(const char *in, size_t n, size_t step, char *out, size_t cap, size_t *olen,
                     size_t *used_total) {
    srv_http_chunk c;
    srv_http_chunk_init(&c);
    size_t i = 0, o = 0;
    int rc = 0;
    const char *why;
    while (i < n) {
        size_t take = n - i < step ? n - i : step, used, got;
        rc = srv_http_chunk_decode(&c, in + i, take, &used, out + o, cap - o, &got, &why);
        if (used > take || got > cap - o)
            abort();
        o += got;
        i += used;
        if (rc != 0)
            break;
        if (used == 0 && o == cap)
            break; /* out full: the layer would answer 413 here */
        if (used == 0)
            abort(); /* no progress with room left and input given */
    }
    *olen = o;
    *used_total = i;
    return rc;
}

static void check_chunked(const char *in, size_t n, size_t step) {
    enum { CAP = 1 << 16 };
    static char a[CAP], b[CAP];
    size_t la, lb, ua, ub;
    int ra = chunk_run(in, n, n ? n : 1, a, CAP, &la, &ua);
    int rb = chunk_run(in, n, step, b, CAP, &lb, &ub);
    /* on an error the data decoded so far does not matter (the layer answers 400) */
    if (la < CAP && lb < CAP &&
        (ra != rb || (ra >= 0 && (la != lb || memcmp(a, b, la) != 0)) || (ra == 1 && ua != ub)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    size_t step = (size_t)(data[0] % 32) + 1;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    srv_http_parse_limits lim = {4096, 32};
    static srv_http_head h, h2;
    int status = 0;
    const char *why = NULL;
    int rc = srv_http_parse_head(in, n, &lim, &h, &status, &why);
    if (rc == ERR_PROTOCOL) {
        static const int ok[] = {400, 413, 417, 431, 501, 505};
        bool known = false;
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
            known |= status == ok[i];
        if (!known || !why || !*why)
            abort();
    } else if (rc == 0) {
        if (h.head_len > n || h.head_len > lim.max_head_bytes || h.n_fields > lim.max_fields ||
            (h.minor != 0 && h.minor != 1) || h.body < 0 || h.body > SRV_HTTP_BODY_CHUNKED)
            abort();
        span_ok(h.method, h.head_len);
        span_ok(h.target, h.head_len);
        span_ok(h.path, h.head_len);
        span_ok(h.query, h.head_len);
        for (int i = 0; i < h.n_fields; i++) {
            span_ok(h.fields[i].name, h.head_len);
            span_ok(h.fields[i].value, h.head_len);
        }
        for (size_t cut = step; cut < h.head_len; cut += step) {
            int st2;
            if (srv_http_parse_head(in, cut, &lim, &h2, &st2, &why) != ERR_BUSY)
                abort();
        }
        if (h.body == SRV_HTTP_BODY_CHUNKED)
            check_chunked(in + h.head_len, n - h.head_len, step);
    } else if (rc != ERR_BUSY) {
        abort();
    }
    check_chunked(in, n, step);
    return 0;
}
