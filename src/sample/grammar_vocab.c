/* SPDX-License-Identifier: MIT */
/*
 * grammar_vocab: the vocabulary side of grammar.h -- per-tokenizer tables, per-sequence states
 * and the allowed-token masks.
 *
 * The mask walk. TEXT tokens are sorted by their bytes, so tokens sharing a prefix are adjacent
 * and lcp[i] says how many leading bytes token i shares with token i - 1. Walking them in order
 * with a stack of DFA states (stack[d] = the state after the first d bytes of the current
 * token) is a depth-first walk of the vocabulary's byte trie: token i starts from depth
 * min(lcp[i], the depth the previous token reached alive), so a shared prefix is stepped once,
 * and a token whose prefix already died costs one lookup. Before a first-byte group is entered
 * its first byte is checked once, so a structural position (after `{`, say, where only `"` and
 * `}` can follow) skips all but a few groups. Everything the walk touches is read-only shared
 * data plus the state's own stack and mask: no allocation, no locks.
 *
 * End-of-generation tokens are never in the sorted table; they are allowed exactly when the
 * current DFA state is accepting (and the caller allows them). NEVER tokens are in no table.
 */
#include "sample/grammar_int.h"
#include "base/check.h"
#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct grammar_state {
    grammar *g;
    int32_t cur;    /* DFA state */
    bool ended;     /* an EOG token was accepted */
    int32_t *stack; /* [max_len + 1] walk stack */
    uint64_t *mask; /* [(n_vocab + 63) / 64] scratch for grammar_apply */
};

/* ---- vocabulary ---- */

typedef struct gv_sort_item {
    const unsigned char *p;
    uint32_t len;
    int32_t id;
} gv_sort_item;

static int gv_cmp(const void *a, const void *b) {
    const gv_sort_item *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void grammar_vocab_destroy(grammar_vocab *v) {
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
        return;
    free(v->kind);
    free(v->tok_off);
    free(v->tok_len);
    free(v->text);
    free(v->eog);
    free(v->sorted);
    free(v->s_off);
    free(v->s_len);
    free(v->lcp);
    free(v);
}

int grammar_vocab_create_raw(int32_t n, const char *const *texts, const size_t *lens,
                             const uint8_t *kinds, grammar_vocab **out) {
    *out = NULL;
    if (n < 1)
        return err_set(ERR_INVAL, "grammar vocabulary: %d tokens", n);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (kinds[i] > GRAMMAR_TOKEN_EOG)
            return err_set(ERR_INVAL, "grammar vocabulary: token %d has kind %u", i, kinds[i]);
        if (kinds[i] == GRAMMAR_TOKEN_TEXT)
            total += lens[i];
    }
    if (total >= UINT32_MAX)
        return err_set(ERR_TOOLARGE, "grammar vocabulary: %zu bytes of token text", total);
    grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return err_set(ERR_NOMEM, "grammar vocabulary: out of memory");
    atomic_init(&v->refs, 1);
    v->n_vocab = n;
    v->kind = malloc((size_t)n);
    v->tok_off = calloc((size_t)n, sizeof *v->tok_off);
    v->tok_len = calloc((size_t)n, sizeof *v->tok_len);
    v->text = malloc(total ? total : 1);
    v->eog = malloc((size_t)n * sizeof *v->eog);
    v->sorted = malloc((size_t)n * sizeof *v->sorted);
    v->s_off = malloc((size_t)n * sizeof *v->s_off);
    v->s_len = malloc((size_t)n * sizeof *v->s_len);
    v->lcp = malloc((size_t)n);
    gv_sort_item *items = malloc((size_t)n * sizeof *items);
    if (!v->kind || !v->tok_off || !v->tok_len || !v->text || !v->eog || !v->sorted || !v->s_off ||
        !v->s_len || !v->lcp || !items) {
        free(items);
        grammar_vocab_destroy(v);
        return err_set(ERR_NOMEM, "grammar vocabulary: out of memory (%d tokens)", n);
    }
    uint32_t off = 0;
    int32_t ns = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t k = kinds[i];
        if (k == GRAMMAR_TOKEN_TEXT && lens[i] == 0)
            k = GRAMMAR_TOKEN_NEVER;
        v->kind[i] = k;
        if (k == GRAMMAR_TOKEN_EOG)
            v->eog[v->n_eog++] = i;
        if (k != GRAMMAR_TOKEN_TEXT)
            continue;
        memcpy(v->text + off, texts[i], lens[i]);
        v->tok_off[i] = off;
        v->tok_len[i] = (uint32_t)lens[i];
        if (v->tok_len[i] > v->max_len)
            v->max_len = v->tok_len[i];
        items[ns++] = (gv_sort_item){(const unsigned char *)v->text + off, (uint32_t)lens[i], i};
        off += (uint32_t)lens[i];
    }
    qsort(items, (size_t)ns, sizeof *items, gv_cmp);
    v->n_sorted = ns;
    int b = 0;
    for (int32_t i = 0; i < ns; i++) {
        v->sorted[i] = items[i].id;
        v->s_off[i] = v->tok_off[items[i].id];
        v->s_len[i] = items[i].len;
        uint32_t l = 0;
        if (i > 0) {
            uint32_t m = items[i].len < items[i - 1].len ? items[i].len : items[i - 1].len;
            while (l < m && l < 255 && items[i].p[l] == items[i - 1].p[l])
                l++;
        }
        v->lcp[i] = (uint8_t)l;
        while (b <= items[i].p[0])
            v->group[b++] = i;
    }
    while (b <= 256)
        v->group[b++] = ns;
    free(items);
    *out = v;
    return 0;
}

int grammar_vocab_create(const tokenizer *tok, grammar_vocab **out) {
    int32_t n = tokenizer_n_vocab(tok);
    const char **texts = malloc((size_t)(n > 0 ? n : 1) * sizeof *texts);
    size_t *lens = malloc((size_t)(n > 0 ? n : 1) * sizeof *lens);
    uint8_t *kinds = malloc((size_t)(n > 0 ? n : 1));
    *out = NULL;
    if (!texts || !lens || !kinds) {
        free(texts), free(lens), free(kinds);
        return err_set(ERR_NOMEM, "grammar vocabulary: out of memory (%d tokens)", n);
    }
    const uint32_t never = TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN | TOKENIZER_ATTR_UNUSED;
    for (int32_t i = 0; i < n; i++) {
        texts[i] = tokenizer_token_text(tok, i, false, &lens[i]);
        if (tokenizer_is_eog(tok, i))
            kinds[i] = GRAMMAR_TOKEN_EOG;
        else if ((tokenizer_token_attr(tok, i) & never) || !lens[i])
            kinds[i] = GRAMMAR_TOKEN_NEVER;
        else
            kinds[i] = GRAMMAR_TOKEN_TEXT;
    }
    int rc = grammar_vocab_create_raw(n, texts, lens, kinds, out);
    free(texts), free(lens), free(kinds);
    return rc;
}

int32_t grammar_vocab_n(const grammar_vocab *v) {
    return v->n_vocab;
}

/* ---- states ---- */

int grammar_state_create(grammar *g, grammar_state **out) {
    *out = NULL;
    grammar_state *st = calloc(1, sizeof *st);
    size_t depth = g->v ? (size_t)g->v->max_len + 2 : 2;
    size_t words = g->v ? ((size_t)g->v->n_vocab + 63) / 64 : 1;
    if (st) {
        st->stack = malloc(depth * sizeof *st->stack);
        st->mask = malloc(words * sizeof *st->mask);
    }
    if (!st || !st->stack || !st->mask) {
        if (st) {
            free(st->stack);
            free(st->mask);
        }
        free(st);
        return err_set(ERR_NOMEM, "grammar state: out of memory");
    }
    atomic_fetch_add(&g->refs, 1);
    st->g = g;
    st->cur = 1;
    *out = st;
    return 0;
}

void grammar_state_destroy(grammar_state *st) {
    if (!st)
        return;
    grammar_destroy(st->g);
    free(st->stack);
    free(st->mask);
    free(st);
}

void grammar_state_reset(grammar_state *st) {
    st->cur = 1;
    st->ended = false;
}

grammar *grammar_state_grammar(const grammar_state *st) {
    return st->g;
}

bool grammar_complete(const grammar_state *st) {
    return st->ended || (st->g->flags[st->cur] & GD_ACCEPT);
}

bool grammar_must_end(const grammar_state *st) {
    return st->ended || (st->g->flags[st->cur] & (GD_ACCEPT | GD_CONT)) == GD_ACCEPT;
}

bool grammar_accept_bytes(grammar_state *st, const char *s, size_t n) {
    if (st->ended)
        return n == 0;
    int32_t d = gr_dfa_run(st->g, st->cur, (const unsigned char *)s, n);
    if (!d)
        return false;
    st->cur = d;
    return true;
}

bool grammar_accept(grammar_state *st, int32_t token) {
    const grammar_vocab *v = st->g->v;
    if (!v || st->ended || token < 0 || token >= v->n_vocab)
        return false;
    if (v->kind[token] == GRAMMAR_TOKEN_EOG) {
        if (!(st->g->flags[st->cur] & GD_ACCEPT))
            return false;
        st->ended = true;
        return true;
    }
    if (v->kind[token] != GRAMMAR_TOKEN_TEXT)
        return false;
    return grammar_accept_bytes(st, v->text + v->tok_off[token], v->tok_len[token]);
}

/* ---- masks ---- */

int32_t grammar_distance(const grammar_state *st) {
    return st->ended ? 0 : st->g->dist[st->cur];
}

/* The walk (see the design note); a token whose final state needs more than limit bytes to
 * complete is left out. */
static int32_t gv_walk(grammar_state *st, int64_t limit, uint64_t *mask) {
    const grammar *g = st->g;
    const grammar_vocab *v = g->v;
    const int32_t *trans = g->trans, *dist = g->dist;
    const size_t nc = (size_t)g->n_cls;
    const uint8_t *cls = g->cls;
    const int32_t *row = trans + (size_t)st->cur * nc;
    const unsigned char *text = (const unsigned char *)v->text;
    int32_t *stack = st->stack;
    int32_t count = 0;
    for (int b = 0; b < 256; b++) {
        int32_t lo = v->group[b], hi = v->group[b + 1];
        if (lo == hi || !(stack[1] = row[cls[b]]))
            continue;
        uint32_t top = 1; /* stack[0..top] is valid for the previous token's prefix */
        for (int32_t i = lo; i < hi; i++) {
            uint32_t len = v->s_len[i];
            const unsigned char *p = text + v->s_off[i];
            uint32_t d = v->lcp[i];
            if (d > top)
                d = top;
            if (d < 1)
                d = 1;
            while (d < len) {
                int32_t ns = trans[(size_t)stack[d] * nc + cls[p[d]]];
                if (!ns)
                    break;
                stack[++d] = ns;
            }
            top = d;
            if (d == len && dist[stack[d]] <= limit) {
                int32_t id = v->sorted[i];
                mask[id >> 6] |= 1ull << (id & 63);
                count++;
            }
        }
    }
    return count;
}

int32_t grammar_allowed(grammar_state *st, bool allow_eog, int64_t budget, uint64_t *mask) {
    const grammar *g = st->g;
    const grammar_vocab *v = g->v;
    CHECK(v);
    size_t words = ((size_t)v->n_vocab + 63) / 64;
    memset(mask, 0, words * sizeof *mask);
    if (st->ended)
        return 0;
    int32_t count = 0;
    if (allow_eog && (g->flags[st->cur] & GD_ACCEPT))
        for (int32_t k = 0; k < v->n_eog; k++) {
            mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
            count++;
        }
    /* after this token budget - 1 remain; a budget that cannot complete the text is ignored */
    bool limited = budget != GRAMMAR_NO_BUDGET && budget > 0 && g->dist[st->cur] <= budget;
    int32_t n = gv_walk(st, limited ? budget - 1 : INT64_MAX, mask);
    if (n == 0 && limited)
        n = gv_walk(st, INT64_MAX, mask);
    return count + n;
}

int32_t grammar_apply(grammar_state *st, float *logits, int32_t n_logits, bool allow_eog,
                      int64_t budget) {
    const grammar_vocab *v = st->g->v;
    grammar_allowed(st, allow_eog, budget, st->mask);
    int32_t n_words = (v->n_vocab + 63) / 64;
    int32_t count = 0, first = -1;
    bool finite = false;
    for (int32_t base = 0; base < n_logits; base += 64) {
        int32_t end = base + 64 < n_logits ? base + 64 : n_logits;
        uint64_t m = base / 64 < n_words ? st->mask[base / 64] : 0;
        if (!m) {
            for (int32_t i = base; i < end; i++)
                logits[i] = -INFINITY;
            continue;
        }
        for (int32_t i = base; i < end; i++) {
            if (!((m >> (i - base)) & 1)) {
                logits[i] = -INFINITY;
                continue;
            }
            count++;
            if (first < 0)
                first = i;
            if (logits[i] > -INFINITY) /* false for -inf and NaN */
                finite = true;
        }
    }
    if (count > 0 && !finite)
        logits[first] = 0.0f;
    return count;
}
