/* SPDX-License-Identifier: MIT */
/*
 * tok_encode: text -> ids (tokenizer_encode).
 *
 * 1. Partition. The text is cut around special tokens written in it: every token of the special
 *    list (longest piece first, then lower id) is searched in the raw text fragments that are
 *    left, and each occurrence becomes a token fragment. Control and unknown-type tokens take
 *    part only with parse_special; user-defined tokens always do. A bigram filter over the text
 *    skips tokens that cannot occur, so thousands of reserved tokens cost little.
 * 2. Each raw fragment is tokenized on its own:
 *    SPM: a space is prefixed when add_space_prefix is set and the fragment starts the text or
 *    follows a special token; spaces become U+2581; the text is cut into characters (a byte that
 *    starts no well-formed UTF-8 sequence is a character of its own); then the adjacent pair whose
 *    concatenation is a piece with the highest score is merged, repeatedly (ties: leftmost), with
 *    a priority queue whose stale entries are recognised by their length. Characters left that
 *    are not pieces become their byte tokens <0xXX>, or one unknown token.
 *    BPE: invalid UTF-8 bytes become U+FFFD; the pre-tokenizer splits the fragment into words;
 *    each word's bytes become GPT-2 byte characters, one symbol per byte, and merges are applied
 *    lowest rank first (ties: leftmost). With ignore_merges a word that is already a piece is
 *    emitted whole.
 * Pieces found during merging never include control or unknown-type tokens: those only come
 * from step 1.
 *
 * All working memory belongs to one call (tok_sess); nothing is shared, so calls are reentrant.
 * tokenizer_encode_counted runs the same code with a tokenizer_work in the session: the bigram
 * queue counts its pushes and pops, the partition the bytes it scans, the pre-tokenizer its
 * regex steps (tok_pre.c).
 */
#include "base/err.h"
#include "base/mem.h"
#include "base/utf8.h"
#include "tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

/* 256 MiB: keeps every offset and symbol count (normalised text is at most 3x) in 31 bits. */
#define TOK_MAX_TEXT ((size_t)1 << 28)

typedef struct tok_frag {
    int32_t token; /* TOKENIZER_NULL: raw text off..off+len */
    uint32_t off, len;
} tok_frag;

typedef struct tok_sym {
    uint32_t off, n; /* bytes in the session buffer; n == 0: merged away */
    int32_t prev, next;
} tok_sym;

typedef struct tok_bigram {
    double key; /* higher first: SPM score, BPE -rank */
    int32_t left, right;
    uint32_t size;
} tok_bigram;

typedef struct tok_sess {
    const tokenizer *t;
    int32_t *ids;
    size_t n_ids, cap_ids;
    tok_frag *frags, *frags2;
    size_t n_frags, cap_frags, cap_frags2;
    char *buf; /* normalised fragment text */
    size_t cap_buf;
    char *enc; /* byte-encoded BPE word */
    size_t cap_enc;
    tok_sym *sym;
    size_t cap_sym;
    tok_bigram *heap;
    size_t n_heap, cap_heap;
    tok_spans words, scratch;
    tokenizer_work *work; /* NULL unless counting (tokenizer_encode_counted) */
} tok_sess;

static int tok_emit(tok_sess *s, int32_t id) {
    int rc = mem_grow((void **)&s->ids, &s->cap_ids, s->n_ids + 1, sizeof *s->ids);
    if (rc)
        return rc;
    s->ids[s->n_ids++] = id;
    return 0;
}

/* ---- priority queue of bigrams ---- */

static bool tok_bigram_before(const tok_bigram *a, const tok_bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static int tok_heap_push(tok_sess *s, tok_bigram b) {
    int rc = mem_grow((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap);
    if (rc)
        return rc;
    if (s->work)
        s->work->merge_steps++;
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!tok_bigram_before(&b, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = b;
    return 0;
}

static tok_bigram tok_heap_pop(tok_sess *s) {
    if (s->work)
        s->work->merge_steps++;
    tok_bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && tok_bigram_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!tok_bigram_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* Merges right into left (adjacent, both alive). */
static void tok_sym_merge(tok_sym *sym, int32_t left, int32_t right) {
    sym[left].n += sym[right].n;
    sym[right].n = 0;
    sym[left].next = sym[right].next;
    if (sym[right].next >= 0)
        sym[sym[right].next].prev = left;
}

/* ---- SPM ---- */

static int tok_spm_try(tok_sess *s, const char *text, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return 0;
    const tok_sym *l = &s->sym[left], *r = &s->sym[right];
    uint32_t size = l->n + r->n;
    int32_t id = tok_lookup(s->t, text + l->off, size, true);
    if (id == TOKENIZER_NULL)
        return 0;
    tok_bigram b = {.key = s->t->tok[id].score, .left = left, .right = right, .size = size};
    return tok_heap_push(s, b);
}

static int tok_spm_symbol_out(tok_sess *s, const char *p, uint32_t n) {
    const tokenizer *t = s->t;
    int32_t id = tok_lookup(t, p, n, true);
    if (id != TOKENIZER_NULL)
        return tok_emit(s, id);
    bool all = true;
    for (uint32_t i = 0; i < n; i++)
        all = all && t->byte_token[(unsigned char)p[i]] != TOKENIZER_NULL;
    if (all) {
        for (uint32_t i = 0; i < n; i++) {
            int rc = tok_emit(s, t->byte_token[(unsigned char)p[i]]);
            if (rc)
                return rc;
        }
        return 0;
    }
    /* no byte fallback for this character: one unknown token, or nothing without one */
    int32_t unk = t->special[TOKENIZER_SPECIAL_UNK];
    return unk != TOKENIZER_NULL ? tok_emit(s, unk) : 0;
}

/* Tokenizes text[0..n) (already normalised: U+2581 for spaces). */
static int tok_spm_run(tok_sess *s, const char *text, size_t n) {
    if (n == 0)
        return 0;
    int rc = mem_grow((void **)&s->sym, &s->cap_sym, n, sizeof *s->sym);
    if (rc)
        return rc;
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cp;
        int l = utf8_decode((const unsigned char *)text + off, n - off, &cp);
        if (l < 1)
            l = 1;
        s->sym[ns] =
            (tok_sym){.off = (uint32_t)off, .n = (uint32_t)l, .prev = ns - 1, .next = ns + 1};
        off += (size_t)l;
        ns++;
    }
    s->sym[ns - 1].next = -1;
    s->n_heap = 0;
    for (int32_t i = 1; i < ns; i++)
        if ((rc = tok_spm_try(s, text, i - 1, i)))
            return rc;
    while (s->n_heap) {
        tok_bigram b = tok_heap_pop(s);
        tok_sym *l = &s->sym[b.left], *r = &s->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side was merged since */
        tok_sym_merge(s->sym, b.left, b.right);
        if ((rc = tok_spm_try(s, text, s->sym[b.left].prev, b.left)) ||
            (rc = tok_spm_try(s, text, b.left, s->sym[b.left].next)))
            return rc;
    }
    for (int32_t i = 0; i != -1; i = s->sym[i].next)
        if ((rc = tok_spm_symbol_out(s, text + s->sym[i].off, s->sym[i].n)))
            return rc;
    return 0;
}

static int tok_spm_fragment(tok_sess *s, const char *text, size_t len, bool prefix_space) {
    /* each byte becomes at most 3 (a space becomes U+2581) */
    int rc = mem_grow((void **)&s->buf, &s->cap_buf, 3 * (len + 1), 1);
    if (rc)
        return rc;
    size_t n = 0;
    if (prefix_space) {
        memcpy(s->buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            s->buf[n++] = text[i];
        }
    }
    return tok_spm_run(s, s->buf, n);
}

/* ---- BPE ---- */

static int tok_bpe_try(tok_sess *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return 0;
    const tok_sym *l = &s->sym[left], *r = &s->sym[right];
    int32_t rank = tok_merge_rank(s->t, s->enc + l->off, l->n, s->enc + r->off, r->n);
    if (rank < 0)
        return 0;
    tok_bigram b = {.key = -(double)rank, .left = left, .right = right, .size = l->n + r->n};
    return tok_heap_push(s, b);
}

static int tok_bpe_word(tok_sess *s, const char *word, size_t len) {
    const tokenizer *t = s->t;
    int rc = mem_grow((void **)&s->enc, &s->cap_enc, 2 * len, 1);
    if (!rc)
        rc = mem_grow((void **)&s->sym, &s->cap_sym, len, sizeof *s->sym);
    if (rc)
        return rc;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)word[i];
        int l = t->byte_enc_len[b];
        memcpy(s->enc + n, t->byte_enc[b], 2);
        s->sym[i] = (tok_sym){
            .off = (uint32_t)n, .n = (uint32_t)l, .prev = (int32_t)i - 1, .next = (int32_t)i + 1};
        n += (size_t)l;
    }
    s->sym[len - 1].next = -1;
    if (t->ignore_merges) {
        int32_t id = tok_lookup(t, s->enc, n, true);
        if (id != TOKENIZER_NULL)
            return tok_emit(s, id);
    }
    s->n_heap = 0;
    for (int32_t i = 1; i < (int32_t)len; i++)
        if ((rc = tok_bpe_try(s, i - 1, i)))
            return rc;
    while (s->n_heap) {
        tok_bigram b = tok_heap_pop(s);
        tok_sym *l = &s->sym[b.left], *r = &s->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;
        tok_sym_merge(s->sym, b.left, b.right);
        if ((rc = tok_bpe_try(s, s->sym[b.left].prev, b.left)) ||
            (rc = tok_bpe_try(s, b.left, s->sym[b.left].next)))
            return rc;
    }
    for (int32_t i = 0; i != -1; i = s->sym[i].next) {
        const char *p = s->enc + s->sym[i].off;
        uint32_t m = s->sym[i].n;
        int32_t id = tok_lookup(t, p, m, true);
        if (id != TOKENIZER_NULL) {
            if ((rc = tok_emit(s, id)))
                return rc;
            continue;
        }
        /* a merge produced a string that is not a piece (a malformed vocabulary): keep what
         * single-byte pieces there are, as llama.cpp does */
        for (uint32_t j = 0; j < m; j++)
            if ((id = tok_lookup(t, p + j, 1, true)) != TOKENIZER_NULL && (rc = tok_emit(s, id)))
                return rc;
    }
    return 0;
}

static int tok_bpe_fragment(tok_sess *s, const char *text, size_t len) {
    /* invalid bytes become U+FFFD (3 bytes) */
    int rc = mem_grow((void **)&s->buf, &s->cap_buf, 3 * len + 1, 1);
    if (rc)
        return rc;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x80) {
            s->buf[n++] = (char)c;
            i++;
            continue;
        }
        uint32_t cp;
        int l = utf8_decode((const unsigned char *)text + i, len - i, &cp);
        if (l > 0) {
            memcpy(s->buf + n, text + i, (size_t)l);
            n += (size_t)l;
            i += (size_t)l;
        } else {
            memcpy(s->buf + n, "\xef\xbf\xbd", 3);
            n += 3;
            i++;
        }
    }
    if ((rc = tok_pre_split(s->t, s->buf, n, &s->words, &s->scratch, s->work)))
        return rc;
    for (size_t w = 0; w < s->words.n; w++)
        if ((rc = tok_bpe_word(s, s->buf + s->words.v[w].off, s->words.v[w].len)))
            return rc;
    return 0;
}

/* ---- special-token partition ---- */

static int tok_frag_push(tok_frag **v, size_t *n, size_t *cap, tok_frag f) {
    int rc = mem_grow((void **)v, cap, *n + 1, sizeof **v);
    if (rc)
        return rc;
    (*v)[(*n)++] = f;
    return 0;
}

static bool tok_isspace(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Presence of byte pairs in the text: a token can only occur if all its byte pairs do. */
typedef struct tok_pairs {
    uint64_t pair[65536 / 64];
    uint64_t byte[256 / 64];
} tok_pairs;

static void tok_pairs_build(tok_pairs *p, const unsigned char *s, size_t n) {
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < n; i++) {
        p->byte[s[i] >> 6] |= 1ull << (s[i] & 63);
        if (i + 1 < n) {
            unsigned k = (unsigned)s[i] << 8 | s[i + 1];
            p->pair[k >> 6] |= 1ull << (k & 63);
        }
    }
}

static bool tok_pairs_may_contain(const tok_pairs *p, const unsigned char *s, size_t n) {
    if (n == 1)
        return p->byte[s[0] >> 6] >> (s[0] & 63) & 1;
    for (size_t i = 0; i + 1 < n; i++) {
        unsigned k = (unsigned)s[i] << 8 | s[i + 1];
        if (!(p->pair[k >> 6] >> (k & 63) & 1))
            return false;
    }
    return true;
}

static int tok_partition(tok_sess *s, const char *text, size_t len, bool parse_special) {
    const tokenizer *t = s->t;
    s->n_frags = 0;
    if (len == 0)
        return 0;
    int rc = tok_frag_push(&s->frags, &s->n_frags, &s->cap_frags,
                           (tok_frag){TOKENIZER_NULL, 0, (uint32_t)len});
    if (rc || t->n_specials == 0)
        return rc;
    tok_pairs *pairs = malloc(sizeof *pairs);
    if (!pairs)
        return err_set(ERR_NOMEM, "tokenizer: out of memory");
    tok_pairs_build(pairs, (const unsigned char *)text, len);
    if (s->work)
        s->work->special_bytes += len;
    for (size_t k = 0; k < t->n_specials && rc == 0; k++) {
        int32_t id = t->specials[k];
        const tok_token *tk = &t->tok[id];
        if (!parse_special && (tk->attr & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN)))
            continue;
        const char *p = t->pool + tk->piece_off;
        size_t pn = tk->piece_len;
        if (pn > len || !tok_pairs_may_contain(pairs, (const unsigned char *)p, pn))
            continue;
        size_t n2 = 0;
        bool changed = false;
        for (size_t f = 0; f < s->n_frags && rc == 0; f++) {
            tok_frag fr = s->frags[f];
            if (fr.token != TOKENIZER_NULL) {
                rc = tok_frag_push(&s->frags2, &n2, &s->cap_frags2, fr);
                continue;
            }
            size_t off = fr.off, flen = fr.len;
            while (flen > 0 && rc == 0) {
                const char *m = memmem(text + off, flen, p, pn);
                if (s->work) /* memmem looked at most up to the end of the match */
                    s->work->special_bytes += m ? (size_t)(m - (text + off)) + pn : flen;
                if (!m) {
                    rc = tok_frag_push(&s->frags2, &n2, &s->cap_frags2,
                                       (tok_frag){TOKENIZER_NULL, (uint32_t)off, (uint32_t)flen});
                    break;
                }
                changed = true;
                size_t mpos = (size_t)(m - text), left = mpos - off;
                if (tk->attr & TOKENIZER_ATTR_LSTRIP)
                    while (left > 0 && tok_isspace(text[off + left - 1]))
                        left--;
                if (left > 0)
                    rc = tok_frag_push(&s->frags2, &n2, &s->cap_frags2,
                                       (tok_frag){TOKENIZER_NULL, (uint32_t)off, (uint32_t)left});
                if (rc == 0)
                    rc = tok_frag_push(&s->frags2, &n2, &s->cap_frags2, (tok_frag){id, 0, 0});
                size_t roff = mpos + pn, rlen = off + flen - roff;
                if (tk->attr & TOKENIZER_ATTR_RSTRIP)
                    while (rlen > 0 && tok_isspace(text[roff])) {
                        roff++;
                        rlen--;
                    }
                off = roff;
                flen = rlen;
            }
        }
        if (rc == 0 && changed) {
            tok_frag *tmp = s->frags;
            size_t tcap = s->cap_frags;
            s->frags = s->frags2;
            s->cap_frags = s->cap_frags2;
            s->n_frags = n2;
            s->frags2 = tmp;
            s->cap_frags2 = tcap;
        }
    }
    free(pairs);
    return rc;
}

/* ---- entry ---- */

size_t tokenizer_max_tokens(size_t len) {
    /* Every id comes from at least one input byte, except BOS, EOS and the SPM prefix space.
     * The worst case is BPE: an invalid byte becomes U+FFFD (3 bytes, 3 symbols), and a symbol
     * that is no piece (malformed vocabulary) falls back to one id per encoded byte (2 per
     * symbol). */
    return 6 * len + 4;
}

static void tok_sess_free(tok_sess *s) {
    free(s->ids);
    free(s->frags);
    free(s->frags2);
    free(s->buf);
    free(s->enc);
    free(s->sym);
    free(s->heap);
    free(s->words.v);
    free(s->scratch.v);
}

static int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, size_t cap, size_t *n_out,
                      tokenizer_work *work) {
    *n_out = 0;
    if (len > TOK_MAX_TEXT)
        return err_set(ERR_TOOLARGE, "tokenizer: text of %zu bytes exceeds the limit of %zu", len,
                       TOK_MAX_TEXT);
    if (len && !text)
        return err_set(ERR_INVAL, "tokenizer: NULL text with length %zu", len);
    tok_sess s = {.t = t, .work = work};
    int rc = tok_partition(&s, text, len, parse_special);
    bool bos = add_special && t->add_bos && t->special[TOKENIZER_SPECIAL_BOS] != TOKENIZER_NULL;
    bool eos = add_special && t->add_eos && t->special[TOKENIZER_SPECIAL_EOS] != TOKENIZER_NULL;
    if (rc == 0 && bos)
        rc = tok_emit(&s, t->special[TOKENIZER_SPECIAL_BOS]);
    bool prev_special = true; /* SPM: the first fragment gets the prefix space */
    for (size_t f = 0; f < s.n_frags && rc == 0; f++) {
        tok_frag fr = s.frags[f];
        if (fr.token != TOKENIZER_NULL) {
            rc = tok_emit(&s, fr.token);
            prev_special = true;
        } else if (t->kind == TOKENIZER_SPM) {
            rc = tok_spm_fragment(&s, text + fr.off, fr.len, t->add_space_prefix && prev_special);
            prev_special = false;
        } else {
            rc = tok_bpe_fragment(&s, text + fr.off, fr.len);
        }
    }
    if (rc == 0 && eos)
        rc = tok_emit(&s, t->special[TOKENIZER_SPECIAL_EOS]);
    if (rc == 0) {
        size_t n = s.n_ids < cap ? s.n_ids : cap;
        if (n)
            memcpy(out, s.ids, n * sizeof *out);
        *n_out = s.n_ids;
        if (s.n_ids > cap)
            rc = err_set(ERR_FULL, "tokenizer: %zu tokens do not fit in a buffer of %zu", s.n_ids,
                         cap);
    }
    tok_sess_free(&s);
    return rc;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, size_t cap, size_t *n_out) {
    return tok_encode(t, text, len, add_special, parse_special, out, cap, n_out, NULL);
}

int tokenizer_encode_counted(const tokenizer *t, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t *out, size_t cap, size_t *n_out,
                             tokenizer_work *work) {
    *work = (tokenizer_work){0};
    return tok_encode(t, text, len, add_special, parse_special, out, cap, n_out, work);
}
