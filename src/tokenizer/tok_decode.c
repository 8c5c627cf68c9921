/* SPDX-License-Identifier: MIT */
/*
 * tok_decode: ids -> text. Each token's bytes were computed at load (tok_load.c), so decoding is
 * concatenation plus one UTF-8 repair pass, done by a small streaming state machine: bytes of an
 * incomplete character are held (at most 3); a byte that cannot continue the held prefix turns the
 * prefix into one U+FFFD and is then looked at afresh; a byte that can start nothing is one
 * U+FFFD. The machine only sees bytes, never token boundaries, which is why decoding all ids at
 * once equals decoding them one at a time, whatever the split.
 */
#include "base/err.h"
#include "base/utf8.h"
#include "tokenizer/tok_int.h"

#include <string.h>

#define TOK_REPLACEMENT "\xef\xbf\xbd"

const char *tokenizer_token_text(const tokenizer *t, int32_t id, bool render_special, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    const tok_token *k = &t->tok[id];
    if (!render_special && (k->attr & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN))) {
        *len = 0;
        return t->pool + k->text_off;
    }
    *len = k->text_len;
    return t->pool + k->text_off;
}

int tokenizer_token_to_text(const tokenizer *t, int32_t id, bool render_special, char *buf,
                            size_t cap, size_t *len_out) {
    size_t n;
    const char *s = tokenizer_token_text(t, id, render_special, &n);
    *len_out = 0;
    if (!s)
        return err_set(ERR_RANGE, "tokenizer: token id %d is outside the vocabulary (%d tokens)",
                       id, t->n_vocab);
    *len_out = n;
    if (cap < n)
        return err_set(ERR_FULL, "tokenizer: token %d needs %zu bytes, buffer has %zu", id, n, cap);
    if (n)
        memcpy(buf, s, n);
    if (cap > n)
        buf[n] = 0;
    return 0;
}

/* Feeds bytes p[0..n) through the repair machine. */
static void tok_stream_bytes(tokenizer_stream *s, const unsigned char *p, size_t n, strbuf *out) {
    size_t i = 0;
    while (i < n) {
        if (s->n_held == 0) {
            /* fast path: a run of ASCII */
            size_t j = i;
            while (j < n && p[j] < 0x80)
                j++;
            if (j > i) {
                strbuf_append(out, p + i, j - i);
                i = j;
                continue;
            }
            int len = utf8_seq_len(p[i]);
            if (len == 0) {
                strbuf_append(out, TOK_REPLACEMENT, 3);
            } else {
                s->held[0] = p[i];
                s->n_held = 1;
                s->need = (uint8_t)len;
            }
            i++;
            continue;
        }
        unsigned char c = p[i], lo = 0x80, hi = 0xBF;
        if (s->n_held == 1) {
            switch (s->held[0]) {
            case 0xE0:
                lo = 0xA0;
                break; /* no overlongs */
            case 0xED:
                hi = 0x9F;
                break; /* no surrogates */
            case 0xF0:
                lo = 0x90;
                break;
            case 0xF4:
                hi = 0x8F;
                break; /* nothing above U+10FFFF */
            default:
                break;
            }
        }
        if (c < lo || c > hi) {
            /* the held prefix can never complete: one replacement, then c afresh */
            strbuf_append(out, TOK_REPLACEMENT, 3);
            s->n_held = 0;
            continue;
        }
        s->held[s->n_held++] = c;
        i++;
        if (s->n_held == s->need) {
            strbuf_append(out, s->held, s->n_held);
            s->n_held = 0;
        }
    }
}

void tokenizer_stream_init(tokenizer_stream *s, const tokenizer *t, bool skip_special) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->skip_special = skip_special;
}

int tokenizer_stream_push(tokenizer_stream *s, int32_t id, strbuf *out) {
    size_t n;
    const char *p = tokenizer_token_text(s->t, id, !s->skip_special, &n);
    if (!p)
        return err_set(ERR_RANGE, "tokenizer: token id %d is outside the vocabulary (%d tokens)",
                       id, s->t->n_vocab);
    tok_stream_bytes(s, (const unsigned char *)p, n, out);
    return strbuf_failed(out) ? err_set(ERR_NOMEM, "tokenizer: out of memory for decoded text") : 0;
}

int tokenizer_stream_flush(tokenizer_stream *s, strbuf *out) {
    if (s->n_held) {
        strbuf_append(out, TOK_REPLACEMENT, 3);
        s->n_held = 0;
    }
    return strbuf_failed(out) ? err_set(ERR_NOMEM, "tokenizer: out of memory for decoded text") : 0;
}

size_t tokenizer_stream_pending(const tokenizer_stream *s) {
    return s->n_held;
}

void tokenizer_stream_deinit(tokenizer_stream *s) {
    s->n_held = 0;
    s->t = NULL;
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool render_special,
                     strbuf *out) {
    tokenizer_stream s;
    tokenizer_stream_init(&s, t, !render_special);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            tokenizer_stream_flush(&s, out);
            return err_set(ERR_RANGE,
                           "tokenizer: ids[%zu] = %d is outside the vocabulary (%d tokens)", i,
                           ids[i], t->n_vocab);
        }
        int rc = tokenizer_stream_push(&s, ids[i], out);
        if (rc)
            return rc;
    }
    return tokenizer_stream_flush(&s, out);
}
