/* SPDX-License-Identifier: MIT */
/*
 * grammar: see grammar.h. This file holds the regex AST and its pattern parser, the Thompson
 * construction, the subset construction and the NFA reference matcher; grammar_vocab.c holds
 * the vocabulary tables, the per-sequence states and the masks.
 *
 * NFA: states live in one growing array. A fragment is (start, end) where end is an epsilon
 * state with no successor yet ("the hole"); gluing fragments fills holes. Epsilon states have up
 * to two successors. Byte states point into a deduplicated table of 256-bit sets (single bytes
 * of literals are cached per byte value), so the byte-class partition only looks at distinct
 * sets.
 *
 * DFA: a DFA state is the sorted list of "important" NFA states (byte tests and the match
 * state) in an epsilon closure. States are numbered in breadth-first discovery order from the
 * start (1; 0 is the empty set, dead), columns by byte class in order of each class's smallest
 * byte, so the same expression always compiles to the same tables. After construction a reverse
 * breadth-first search from the accepting states finds the live states; transitions into the
 * others are redirected to 0. Compilation runs once per request on the request's thread;
 * nothing here runs per decoding step.
 */
#include "sample/grammar_int.h"
#include "base/arena.h"
#include "base/check.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

/* ---- AST ---- */

enum gr_kind { GK_EMPTY, GK_NOTHING, GK_SET, GK_LIT, GK_CAT, GK_ALT, GK_REPEAT, GK_LIST, GK_JOIN };

struct grammar_node {
    uint8_t kind;
    int32_t n;           /* CAT, ALT, JOIN: items; LIT: bytes */
    int32_t min, max;    /* REPEAT, LIST */
    grammar_node **kids; /* CAT, ALT, JOIN: the items; REPEAT: {x}; LIST: {item, sep} */
    grammar_node *sep;   /* JOIN */
    bool *opt;           /* JOIN: [n] */
    uint8_t *bytes;      /* SET: 32-byte bitmap; LIT: the bytes */
};

struct grammar_ast {
    arena *ar;
    bool failed;
};

int grammar_ast_create(grammar_ast **out) {
    *out = NULL;
    grammar_ast *a = calloc(1, sizeof *a);
    if (!a || !(a->ar = arena_create(0, 0))) {
        free(a);
        return err_set(ERR_NOMEM, "grammar: out of memory creating an AST");
    }
    *out = a;
    return 0;
}

void grammar_ast_destroy(grammar_ast *a) {
    if (!a)
        return;
    arena_destroy(a->ar);
    free(a);
}

bool grammar_ast_failed(const grammar_ast *a) {
    return a->failed;
}

static grammar_node *gr_node(grammar_ast *a, uint8_t kind) {
    grammar_node *n = arena_calloc(a->ar, 1, sizeof *n);
    if (!n) {
        a->failed = true;
        return NULL;
    }
    n->kind = kind;
    return n;
}

grammar_node *grammar_ast_empty(grammar_ast *a) {
    return gr_node(a, GK_EMPTY);
}

grammar_node *grammar_ast_nothing(grammar_ast *a) {
    return gr_node(a, GK_NOTHING);
}

grammar_node *grammar_ast_bytes(grammar_ast *a, const uint8_t set[32]) {
    grammar_node *n = gr_node(a, GK_SET);
    if (!n || !(n->bytes = arena_alloc(a->ar, 32))) {
        a->failed = true;
        return NULL;
    }
    memcpy(n->bytes, set, 32);
    return n;
}

grammar_node *grammar_ast_range(grammar_ast *a, uint8_t lo, uint8_t hi) {
    uint8_t set[32] = {0};
    for (int b = lo; b <= hi; b++)
        set[b >> 3] |= (uint8_t)(1u << (b & 7));
    return grammar_ast_bytes(a, set);
}

grammar_node *grammar_ast_lit(grammar_ast *a, const char *s, size_t n) {
    if (n > INT32_MAX) {
        a->failed = true;
        return NULL;
    }
    grammar_node *nd = gr_node(a, GK_LIT);
    if (!nd || !(nd->bytes = arena_alloc(a->ar, n ? n : 1))) {
        a->failed = true;
        return NULL;
    }
    if (n)
        memcpy(nd->bytes, s, n);
    nd->n = (int32_t)n;
    return nd;
}

grammar_node *grammar_ast_str(grammar_ast *a, const char *s) {
    return grammar_ast_lit(a, s, strlen(s));
}

static grammar_node *gr_multi(grammar_ast *a, uint8_t kind, grammar_node *const *items, int n) {
    for (int i = 0; i < n; i++)
        if (!items[i]) {
            a->failed = true;
            return NULL;
        }
    grammar_node *nd = gr_node(a, kind);
    if (!nd || (n > 0 && !(nd->kids = arena_alloc(a->ar, (size_t)n * sizeof *nd->kids)))) {
        a->failed = true;
        return NULL;
    }
    if (n > 0)
        memcpy(nd->kids, items, (size_t)n * sizeof *items);
    nd->n = n;
    return nd;
}

grammar_node *grammar_ast_cat(grammar_ast *a, grammar_node *const *items, int n) {
    return gr_multi(a, GK_CAT, items, n);
}

grammar_node *grammar_ast_cat2(grammar_ast *a, grammar_node *x, grammar_node *y) {
    grammar_node *k[2] = {x, y};
    return gr_multi(a, GK_CAT, k, 2);
}

grammar_node *grammar_ast_alt(grammar_ast *a, grammar_node *const *items, int n) {
    return gr_multi(a, GK_ALT, items, n);
}

grammar_node *grammar_ast_alt2(grammar_ast *a, grammar_node *x, grammar_node *y) {
    grammar_node *k[2] = {x, y};
    return gr_multi(a, GK_ALT, k, 2);
}

grammar_node *grammar_ast_repeat(grammar_ast *a, grammar_node *x, int32_t min, int32_t max) {
    grammar_node *nd = gr_multi(a, GK_REPEAT, &x, 1);
    if (nd) {
        nd->min = min;
        nd->max = max;
    }
    return nd;
}

grammar_node *grammar_ast_opt(grammar_ast *a, grammar_node *x) {
    return grammar_ast_repeat(a, x, 0, 1);
}

grammar_node *grammar_ast_list(grammar_ast *a, grammar_node *item, grammar_node *sep, int32_t min,
                               int32_t max) {
    grammar_node *k[2] = {item, sep};
    grammar_node *nd = gr_multi(a, GK_LIST, k, 2);
    if (nd) {
        nd->min = min;
        nd->max = max;
    }
    return nd;
}

grammar_node *grammar_ast_join(grammar_ast *a, grammar_node *const *items, const bool *optional,
                               int n, grammar_node *sep) {
    if (!sep) {
        a->failed = true;
        return NULL;
    }
    grammar_node *nd = gr_multi(a, GK_JOIN, items, n);
    if (!nd || (n > 0 && !(nd->opt = arena_calloc(a->ar, (size_t)n, sizeof *nd->opt)))) {
        a->failed = true;
        return NULL;
    }
    for (int i = 0; i < n && optional; i++)
        nd->opt[i] = optional[i];
    nd->sep = sep;
    return nd;
}

/* ---- pattern parser ---- */

typedef struct gr_parser {
    grammar_ast *a;
    const unsigned char *s;
    size_t n, i;
    int depth;
    int err;
} gr_parser;

static grammar_node *gr_p_fail(gr_parser *p, const char *what) {
    if (!p->err)
        p->err = err_set(ERR_FORMAT, "grammar pattern: %s at byte %zu", what, p->i);
    return NULL;
}

static void gr_set_add(uint8_t set[32], int lo, int hi) {
    for (int b = lo; b <= hi; b++)
        set[b >> 3] |= (uint8_t)(1u << (b & 7));
}

/* Parses the escape after a backslash (p->i at the escaped byte). Returns a byte value, or -1
 * with *set filled for a class escape (\d \s \w), or -2 on error. */
static int gr_p_escape(gr_parser *p, uint8_t set[32]) {
    if (p->i >= p->n) {
        gr_p_fail(p, "pattern ends after a backslash");
        return -2;
    }
    int c = p->s[p->i++];
    switch (c) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    case 'd':
        gr_set_add(set, '0', '9');
        return -1;
    case 's':
        gr_set_add(set, '\t', '\r');
        gr_set_add(set, ' ', ' ');
        return -1;
    case 'w':
        gr_set_add(set, '0', '9');
        gr_set_add(set, 'A', 'Z');
        gr_set_add(set, 'a', 'z');
        gr_set_add(set, '_', '_');
        return -1;
    case 'x': {
        int h1 = p->i < p->n ? utf8_hex_digit(p->s[p->i]) : -1;
        int h2 = p->i + 1 < p->n ? utf8_hex_digit(p->s[p->i + 1]) : -1;
        if (h1 < 0 || h2 < 0) {
            gr_p_fail(p, "\\x needs two hex digits");
            return -2;
        }
        p->i += 2;
        return h1 * 16 + h2;
    }
    default:
        if (c && strchr("\\.[]()|*+?{}^$-/\"", c))
            return c;
        gr_p_fail(p, "unknown escape");
        return -2;
    }
}

static grammar_node *gr_p_class(gr_parser *p) {
    uint8_t set[32] = {0};
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    bool first = true;
    for (;;) {
        if (p->i >= p->n)
            return gr_p_fail(p, "unterminated [ class");
        int c = p->s[p->i];
        if (c == ']' && !first) {
            p->i++;
            break;
        }
        first = false;
        p->i++;
        if (c == '\\') {
            c = gr_p_escape(p, set);
            if (c == -2)
                return NULL;
            if (c == -1)
                continue;
        }
        int hi = c;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = p->s[p->i++];
            if (hi == '\\') {
                uint8_t dummy[32] = {0};
                hi = gr_p_escape(p, dummy);
                if (hi == -2)
                    return NULL;
                if (hi == -1)
                    return gr_p_fail(p, "a class escape cannot end a range");
            }
            if (hi < c)
                return gr_p_fail(p, "range out of order");
        }
        gr_set_add(set, c, hi);
    }
    if (neg)
        for (int k = 0; k < 32; k++)
            set[k] = (uint8_t)~set[k];
    return grammar_ast_bytes(p->a, set);
}

static grammar_node *gr_p_alt(gr_parser *p);

static grammar_node *gr_p_atom(gr_parser *p) {
    int c = p->s[p->i];
    if (c == '(') {
        if (++p->depth > 200)
            return gr_p_fail(p, "groups nested too deeply");
        p->i++;
        grammar_node *x = gr_p_alt(p);
        if (!x)
            return NULL;
        if (p->i >= p->n || p->s[p->i] != ')')
            return gr_p_fail(p, "missing )");
        p->i++;
        p->depth--;
        return x;
    }
    if (c == '[') {
        p->i++;
        return gr_p_class(p);
    }
    if (c == '.') {
        p->i++;
        return grammar_ast_range(p->a, 0, 255);
    }
    if (c == '\\') {
        p->i++;
        uint8_t set[32] = {0};
        int b = gr_p_escape(p, set);
        if (b == -2)
            return NULL;
        if (b == -1)
            return grammar_ast_bytes(p->a, set);
        char ch = (char)b;
        return grammar_ast_lit(p->a, &ch, 1);
    }
    if (c && strchr("*+?{}]^$", c))
        return gr_p_fail(p, "unexpected special character");
    p->i++;
    char ch = (char)c;
    return grammar_ast_lit(p->a, &ch, 1);
}

/* Reads a decimal number (at most GRAMMAR_MAX_REPEAT + 1, saturating). */
static int32_t gr_p_num(gr_parser *p, bool *any) {
    int64_t v = 0;
    *any = false;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > GRAMMAR_MAX_REPEAT + 1)
            v = GRAMMAR_MAX_REPEAT + 1;
        *any = true;
    }
    return (int32_t)v;
}

static grammar_node *gr_p_rep(gr_parser *p) {
    grammar_node *x = gr_p_atom(p);
    while (x && p->i < p->n) {
        int c = p->s[p->i];
        if (c == '*' || c == '+' || c == '?') {
            p->i++;
            x = grammar_ast_repeat(p->a, x, c == '+' ? 1 : 0, c == '?' ? 1 : GRAMMAR_INF);
        } else if (c == '{') {
            p->i++;
            bool any;
            int32_t lo = gr_p_num(p, &any), hi = lo;
            if (!any)
                return gr_p_fail(p, "{ needs a number");
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                hi = gr_p_num(p, &any);
                if (!any)
                    hi = GRAMMAR_INF;
            }
            if (p->i >= p->n || p->s[p->i] != '}')
                return gr_p_fail(p, "missing } of a repetition");
            p->i++;
            x = grammar_ast_repeat(p->a, x, lo, hi);
        } else {
            break;
        }
    }
    return x;
}

static grammar_node *gr_p_cat(gr_parser *p) {
    grammar_node *x = grammar_ast_empty(p->a);
    while (x && p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        grammar_node *y = gr_p_rep(p);
        if (!y)
            return NULL;
        x = grammar_ast_cat2(p->a, x, y);
    }
    return x;
}

static grammar_node *gr_p_alt(gr_parser *p) {
    grammar_node *x = gr_p_cat(p);
    while (x && p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        grammar_node *y = gr_p_cat(p);
        if (!y)
            return NULL;
        x = grammar_ast_alt2(p->a, x, y);
    }
    return x;
}

int grammar_ast_parse(grammar_ast *a, const char *pattern, size_t n, grammar_node **out) {
    gr_parser p = {.a = a, .s = (const unsigned char *)pattern, .n = n};
    *out = NULL;
    grammar_node *x = gr_p_alt(&p);
    if (p.err)
        return p.err;
    if (!x)
        return err_set(ERR_NOMEM, "grammar pattern: out of memory");
    if (p.i < p.n)
        return err_set(ERR_FORMAT, "grammar pattern: unbalanced ) at byte %zu", p.i);
    *out = x;
    return 0;
}

/* ---- Thompson construction ---- */

typedef struct gr_build {
    gr_nfa_state *st;
    int32_t n;
    size_t cap;
    uint8_t (*sets)[32];
    int32_t n_sets;
    size_t cap_sets;
    int32_t single[256]; /* set index of {b}, or -1 */
    int32_t max_states;  /* NFA cap */
    int err;
} gr_build;

typedef struct gr_frag {
    int32_t start, end; /* end: an epsilon state without successors */
} gr_frag;

static int32_t gr_new(gr_build *b, uint8_t kind) {
    if (b->err)
        return 0;
    if (b->n >= b->max_states) {
        b->err = err_set(ERR_TOOLARGE, "grammar: the expression needs more than %d NFA states",
                         b->max_states);
        return 0;
    }
    if (mem_grow((void **)&b->st, &b->cap, (size_t)b->n + 1, sizeof *b->st)) {
        b->err = err_set(ERR_NOMEM, "grammar: out of memory (%d NFA states)", b->n + 1);
        return 0;
    }
    b->st[b->n] = (gr_nfa_state){.out0 = -1, .out1 = -1, .set = -1, .kind = kind};
    return b->n++;
}

static int32_t gr_set_index(gr_build *b, const uint8_t set[32]) {
    int single = -1, count = 0;
    for (int i = 0; i < 256; i++)
        if (set[i >> 3] & (1u << (i & 7))) {
            single = i;
            count++;
        }
    if (count == 1 && b->single[single] >= 0)
        return b->single[single];
    for (int32_t i = 0; count != 1 && i < b->n_sets; i++)
        if (!memcmp(b->sets[i], set, 32))
            return i;
    if (mem_grow((void **)&b->sets, &b->cap_sets, (size_t)b->n_sets + 1, sizeof *b->sets)) {
        b->err = err_set(ERR_NOMEM, "grammar: out of memory (byte sets)");
        return 0;
    }
    memcpy(b->sets[b->n_sets], set, 32);
    if (count == 1)
        b->single[single] = b->n_sets;
    return b->n_sets++;
}

static int32_t gr_byte_state(gr_build *b, const uint8_t set[32]) {
    int32_t si = gr_set_index(b, set);
    int32_t s = gr_new(b, GN_BYTE);
    if (!b->err)
        b->st[s].set = si;
    return s;
}

static void gr_patch(gr_build *b, int32_t hole, int32_t target) {
    if (b->err)
        return;
    CHECK(b->st[hole].kind == GN_EPS && b->st[hole].out0 < 0);
    b->st[hole].out0 = target;
}

/* An epsilon state with up to two successors. */
static int32_t gr_split(gr_build *b, int32_t o0, int32_t o1) {
    int32_t s = gr_new(b, GN_EPS);
    if (!b->err) {
        b->st[s].out0 = o0;
        b->st[s].out1 = o1;
    }
    return s;
}

static gr_frag gr_compile(gr_build *b, const grammar_node *x);

/* x{min,max} (or item (sep item)... when sep is not NULL: the list form). */
static gr_frag gr_compile_repeat(gr_build *b, const grammar_node *x, const grammar_node *sep,
                                 int32_t min, int32_t max) {
    gr_frag none = {0, 0};
    if (min < 0 || (max != GRAMMAR_INF && max < min))
        return b->err = err_set(ERR_INVAL, "grammar: repetition {%d,%d} has max < min", min, max),
               none;
    if (min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT)
        return b->err = err_set(ERR_TOOLARGE, "grammar: repetition bound %d is above %d",
                                min > max ? min : max, GRAMMAR_MAX_REPEAT),
               none;
    int32_t start = gr_new(b, GN_EPS), cur = start;
    int32_t exit = gr_new(b, GN_EPS);
    if (b->err)
        return none;
    if (sep && min == 0) {
        /* empty, or the list with at least one item */
        if (max == 0) {
            gr_patch(b, cur, exit);
            return (gr_frag){start, exit};
        }
        gr_frag inner = gr_compile_repeat(b, x, sep, 1, max);
        if (b->err)
            return none;
        b->st[start].out0 = inner.start;
        b->st[start].out1 = exit;
        gr_patch(b, inner.end, exit);
        return (gr_frag){start, exit};
    }
    /* the mandatory copies (for a list: item, then sep item ...) */
    for (int32_t i = 0; i < min; i++) {
        if (sep && i > 0) {
            gr_frag s = gr_compile(b, sep);
            gr_patch(b, cur, s.start);
            cur = s.end;
        }
        if (max == GRAMMAR_INF && sep && i == min - 1)
            break; /* the last mandatory item doubles as the loop's item below */
        gr_frag f = gr_compile(b, x);
        gr_patch(b, cur, f.start);
        cur = f.end;
        if (b->err)
            return none;
    }
    if (max == GRAMMAR_INF) {
        if (sep) {
            /* item, then (sep back to the same item) or exit: one copy of item and sep */
            gr_frag f = gr_compile(b, x);
            gr_patch(b, cur, f.start);
            gr_frag s = gr_compile(b, sep);
            int32_t loop = gr_split(b, s.start, exit);
            gr_patch(b, f.end, loop);
            gr_patch(b, s.end, f.start);
        } else {
            gr_frag f = gr_compile(b, x);
            int32_t loop = gr_split(b, f.start, exit);
            gr_patch(b, cur, loop);
            gr_patch(b, f.end, loop);
        }
        return b->err ? none : (gr_frag){start, exit};
    }
    /* optional copies, nested: (x (x (x)?)?)? so a closure reaches at most one of them */
    for (int32_t i = min; i < max; i++) {
        int32_t entry;
        gr_frag f;
        if (sep && i > 0) {
            gr_frag s = gr_compile(b, sep);
            f = gr_compile(b, x);
            gr_patch(b, s.end, f.start);
            entry = s.start;
        } else {
            f = gr_compile(b, x);
            entry = f.start;
        }
        int32_t split = gr_split(b, entry, exit);
        gr_patch(b, cur, split);
        cur = f.end;
        if (b->err)
            return none;
    }
    gr_patch(b, cur, exit);
    return b->err ? none : (gr_frag){start, exit};
}

/* items in order, optional ones skippable, sep between present ones. For item i there are two
 * entries: first[i] (nothing emitted yet: no separator) and rest[i] (something emitted: a
 * separator first); both lead into the single copy of item i, which continues at rest[i + 1]. */
static gr_frag gr_compile_join(gr_build *b, const grammar_node *x) {
    gr_frag none = {0, 0};
    int32_t exit = gr_new(b, GN_EPS);
    int32_t next_first = exit, next_rest = exit;
    for (int32_t i = x->n - 1; i >= 0 && !b->err; i--) {
        gr_frag f = gr_compile(b, x->kids[i]);
        gr_frag s = gr_compile(b, x->sep);
        gr_patch(b, f.end, next_rest);
        gr_patch(b, s.end, f.start);
        int32_t first = gr_split(b, f.start, x->opt[i] ? next_first : -1);
        int32_t rest = gr_split(b, s.start, x->opt[i] ? next_rest : -1);
        next_first = first;
        next_rest = rest;
    }
    return b->err ? none : (gr_frag){next_first, exit};
}

static gr_frag gr_compile(gr_build *b, const grammar_node *x) {
    gr_frag none = {0, 0};
    if (b->err)
        return none;
    switch (x->kind) {
    case GK_EMPTY: {
        int32_t s = gr_new(b, GN_EPS);
        return (gr_frag){s, s};
    }
    case GK_NOTHING: {
        int32_t s = gr_new(b, GN_EPS);
        int32_t e = gr_new(b, GN_EPS); /* s has no successor: nothing passes; e is unreachable */
        return (gr_frag){s, e};
    }
    case GK_SET: {
        int32_t s = gr_byte_state(b, x->bytes);
        int32_t e = gr_new(b, GN_EPS);
        if (!b->err)
            b->st[s].out0 = e;
        return (gr_frag){s, e};
    }
    case GK_LIT: {
        int32_t start = gr_new(b, GN_EPS), cur = start;
        for (int32_t i = 0; i < x->n && !b->err; i++) {
            uint8_t set[32] = {0};
            set[x->bytes[i] >> 3] = (uint8_t)(1u << (x->bytes[i] & 7));
            int32_t s = gr_byte_state(b, set);
            gr_patch(b, cur, s);
            cur = gr_new(b, GN_EPS);
            if (!b->err)
                b->st[s].out0 = cur;
        }
        return b->err ? none : (gr_frag){start, cur};
    }
    case GK_CAT: {
        if (x->n == 0) {
            int32_t s = gr_new(b, GN_EPS);
            return (gr_frag){s, s};
        }
        gr_frag f = gr_compile(b, x->kids[0]);
        for (int32_t i = 1; i < x->n && !b->err; i++) {
            gr_frag g = gr_compile(b, x->kids[i]);
            gr_patch(b, f.end, g.start);
            f.end = g.end;
        }
        return b->err ? none : f;
    }
    case GK_ALT: {
        if (x->n == 0) {
            grammar_node nothing = {.kind = GK_NOTHING};
            return gr_compile(b, &nothing);
        }
        if (x->n == 1)
            return gr_compile(b, x->kids[0]);
        int32_t exit = gr_new(b, GN_EPS);
        int32_t next = -1;
        for (int32_t i = x->n - 1; i >= 0 && !b->err; i--) {
            gr_frag f = gr_compile(b, x->kids[i]);
            gr_patch(b, f.end, exit);
            next = next < 0 ? f.start : gr_split(b, f.start, next);
        }
        return b->err ? none : (gr_frag){next, exit};
    }
    case GK_REPEAT:
        return gr_compile_repeat(b, x->kids[0], NULL, x->min, x->max);
    case GK_LIST:
        return gr_compile_repeat(b, x->kids[0], x->kids[1], x->min, x->max);
    case GK_JOIN:
        return gr_compile_join(b, x);
    default:
        CHECK(!"unknown grammar node kind");
        return none;
    }
}

/* ---- byte classes ---- */

/* Partitions the bytes into classes no byte set tells apart: starting from one class, each set
 * splits every class into its members inside and outside the set. Classes are numbered by their
 * smallest byte. */
static void gr_classes(grammar *g) {
    uint8_t cls[256] = {0};
    int n = 1;
    for (int32_t si = 0; si < g->n_sets; si++) {
        int16_t map[256][2];
        for (int c = 0; c < n; c++)
            map[c][0] = map[c][1] = -1;
        int nn = 0;
        uint8_t next[256];
        for (int b = 0; b < 256; b++) {
            int in = (g->sets[si][b >> 3] >> (b & 7)) & 1;
            if (map[cls[b]][in] < 0)
                map[cls[b]][in] = (int16_t)nn++;
            next[b] = (uint8_t)map[cls[b]][in];
        }
        memcpy(cls, next, sizeof cls);
        n = nn;
    }
    memcpy(g->cls, cls, sizeof cls);
    g->n_cls = n;
}

/* ---- subset construction ---- */

typedef struct gr_dfa_build {
    const grammar *g;
    int32_t *mark; /* [n_nfa] closure stamp */
    int32_t stamp;
    int32_t *stack; /* [n_nfa] */
    int32_t *buf;   /* [n_nfa] the closure being built */
    int32_t n_buf;
    int32_t *pool; /* every DFA state's NFA set, concatenated */
    size_t n_pool, cap_pool;
    size_t *off;  /* [cap_dfa] offset in pool */
    int32_t *len; /* [cap_dfa] */
    int32_t *ht;  /* open addressing over DFA ids, -1 empty */
    size_t ht_cap;
    int32_t n_dfa, cap_dfa;
    int32_t max_dfa; /* 0: only the table-size limit */
    int64_t work;    /* NFA states visited so far (GRAMMAR_MAX_WORK) */
    int32_t *trans;
    int err;
} gr_dfa_build;

/* Adds the epsilon closure of s (its important states) to buf, under the current stamp. */
static void gr_close(gr_dfa_build *d, int32_t s) {
    const gr_nfa_state *st = d->g->nfa;
    int32_t sp = 0;
    if (s < 0 || d->mark[s] == d->stamp)
        return;
    d->mark[s] = d->stamp;
    d->stack[sp++] = s;
    while (sp) {
        int32_t x = d->stack[--sp];
        d->work++;
        if (st[x].kind != GN_EPS) {
            d->buf[d->n_buf++] = x;
            continue;
        }
        int32_t o[2] = {st[x].out0, st[x].out1};
        for (int k = 1; k >= 0; k--)
            if (o[k] >= 0 && d->mark[o[k]] != d->stamp) {
                d->mark[o[k]] = d->stamp;
                d->stack[sp++] = o[k];
            }
    }
}

static int gr_cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint64_t gr_hash_set(const int32_t *s, int32_t n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int gr_dfa_grow(gr_dfa_build *d) {
    size_t row = (size_t)d->g->n_cls * sizeof(int32_t);
    int32_t nc = d->cap_dfa ? d->cap_dfa * 2 : 256;
    if ((size_t)nc * row > GRAMMAR_MAX_TABLE_BYTES) {
        nc = (int32_t)(GRAMMAR_MAX_TABLE_BYTES / row);
        if (nc <= d->cap_dfa)
            return d->err = err_set(ERR_TOOLARGE,
                                    "grammar: the automaton needs more than %d states x %d byte "
                                    "classes (over %zu MiB); use smaller bounds or fewer options",
                                    d->cap_dfa, d->g->n_cls, GRAMMAR_MAX_TABLE_BYTES >> 20);
    }
    int32_t *t = realloc(d->trans, (size_t)nc * row);
    size_t *off = realloc(d->off, (size_t)nc * sizeof *off);
    if (t)
        d->trans = t;
    if (off)
        d->off = off;
    int32_t *len = t && off ? realloc(d->len, (size_t)nc * sizeof *len) : NULL;
    if (!len)
        return d->err = err_set(ERR_NOMEM, "grammar: out of memory (%d DFA states)", nc);
    d->len = len;
    d->cap_dfa = nc;
    return 0;
}

static int gr_ht_rehash(gr_dfa_build *d, size_t cap) {
    int32_t *ht = malloc(cap * sizeof *ht);
    if (!ht)
        return d->err = err_set(ERR_NOMEM, "grammar: out of memory (DFA hash)");
    for (size_t i = 0; i < cap; i++)
        ht[i] = -1;
    for (int32_t id = 1; id < d->n_dfa; id++) {
        size_t h = (size_t)gr_hash_set(d->pool + d->off[id], d->len[id]) & (cap - 1);
        while (ht[h] >= 0)
            h = (h + 1) & (cap - 1);
        ht[h] = id;
    }
    free(d->ht);
    d->ht = ht;
    d->ht_cap = cap;
    return 0;
}

/* The DFA id of the set in buf (sorted here), adding it if new; 0 for the empty set. */
static int32_t gr_dfa_intern(gr_dfa_build *d) {
    int32_t n = d->n_buf;
    if (n == 0)
        return 0;
    if (n < 16) {
        for (int32_t i = 1; i < n; i++)
            for (int32_t j = i; j > 0 && d->buf[j - 1] > d->buf[j]; j--) {
                int32_t t = d->buf[j];
                d->buf[j] = d->buf[j - 1];
                d->buf[j - 1] = t;
            }
    } else {
        qsort(d->buf, (size_t)n, sizeof *d->buf, gr_cmp_i32);
    }
    uint64_t hv = gr_hash_set(d->buf, n);
    size_t h = (size_t)hv & (d->ht_cap - 1);
    while (d->ht[h] >= 0) {
        int32_t id = d->ht[h];
        if (d->len[id] == n && !memcmp(d->pool + d->off[id], d->buf, (size_t)n * sizeof *d->buf))
            return id;
        h = (h + 1) & (d->ht_cap - 1);
    }
    if (d->max_dfa > 0 && d->n_dfa >= d->max_dfa)
        return d->err = err_set(ERR_TOOLARGE, "grammar: the automaton needs more than %d states",
                                d->max_dfa),
               0;
    if (d->n_dfa == d->cap_dfa && gr_dfa_grow(d))
        return 0;
    if (mem_grow((void **)&d->pool, &d->cap_pool, d->n_pool + (size_t)n, sizeof *d->pool))
        return d->err = err_set(ERR_NOMEM, "grammar: out of memory (DFA sets)"), 0;
    int32_t id = d->n_dfa++;
    memcpy(d->pool + d->n_pool, d->buf, (size_t)n * sizeof *d->buf);
    d->off[id] = d->n_pool;
    d->len[id] = n;
    d->n_pool += (size_t)n;
    d->ht[h] = id;
    if ((size_t)d->n_dfa * 2 > d->ht_cap && gr_ht_rehash(d, d->ht_cap * 2))
        return 0;
    return id;
}

/* Marks live DFA states (an accepting state is reachable) by a reverse breadth-first search that
 * also yields each state's distance to acceptance, redirects transitions into dead states to 0,
 * and sets the flags. */
static int gr_dfa_prune(grammar *g) {
    int32_t n = g->n_dfa, nc = g->n_cls;
    int32_t *cnt = calloc((size_t)n + 1, sizeof *cnt);
    uint8_t *live = calloc((size_t)n, 1);
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    size_t n_edges = 0;
    for (int32_t s = 1; s < n; s++)
        for (int32_t c = 0; c < nc; c++)
            if (g->trans[(size_t)s * nc + c])
                n_edges++;
    int32_t *src = malloc((n_edges ? n_edges : 1) * sizeof *src);
    if (!cnt || !live || !queue || !src) {
        free(cnt), free(live), free(queue), free(src);
        return err_set(ERR_NOMEM, "grammar: out of memory (pruning %d DFA states)", n);
    }
    /* reverse edges in CSR form: cnt[t + 1] counts edges into t */
    for (int32_t s = 1; s < n; s++)
        for (int32_t c = 0; c < nc; c++) {
            int32_t t = g->trans[(size_t)s * nc + c];
            if (t)
                cnt[t + 1]++;
        }
    for (int32_t t = 0; t < n; t++)
        cnt[t + 1] += cnt[t];
    int32_t *fill = malloc((size_t)n * sizeof *fill);
    if (!fill) {
        free(cnt), free(live), free(queue), free(src);
        return err_set(ERR_NOMEM, "grammar: out of memory (pruning %d DFA states)", n);
    }
    memcpy(fill, cnt, (size_t)n * sizeof *fill);
    for (int32_t s = 1; s < n; s++)
        for (int32_t c = 0; c < nc; c++) {
            int32_t t = g->trans[(size_t)s * nc + c];
            if (t)
                src[fill[t]++] = s;
        }
    free(fill);
    /* breadth first from every accepting state at once: the level is the distance */
    int32_t qh = 0, qt = 0;
    for (int32_t s = 0; s < n; s++)
        g->dist[s] = INT32_MAX;
    for (int32_t s = 1; s < n; s++)
        if (g->flags[s] & GD_ACCEPT) {
            live[s] = 1;
            g->dist[s] = 0;
            queue[qt++] = s;
        }
    while (qh < qt) {
        int32_t t = queue[qh++];
        for (int32_t k = cnt[t]; k < cnt[t + 1]; k++)
            if (!live[src[k]]) {
                live[src[k]] = 1;
                g->dist[src[k]] = g->dist[t] + 1;
                queue[qt++] = src[k];
            }
    }
    for (int32_t s = 0; s < n; s++) {
        bool cont = false;
        for (int32_t c = 0; c < nc; c++) {
            int32_t *t = &g->trans[(size_t)s * nc + c];
            if (!live[s] || !live[*t])
                *t = 0;
            cont |= *t != 0;
        }
        if (cont)
            g->flags[s] |= GD_CONT;
        if (!live[s])
            g->flags[s] = 0;
    }
    bool start_live = n > 1 && live[1];
    free(cnt), free(live), free(queue), free(src);
    if (!start_live)
        return err_set(ERR_INVAL, "grammar: the expression matches no string");
    return 0;
}

static int gr_dfa_build_all(grammar *g, int32_t match, int32_t max_dfa) {
    gr_dfa_build d = {.g = g, .max_dfa = max_dfa};
    int rc = 0;
    d.mark = calloc((size_t)g->n_nfa, sizeof *d.mark);
    d.stack = malloc((size_t)g->n_nfa * sizeof *d.stack);
    d.buf = malloc((size_t)g->n_nfa * sizeof *d.buf);
    if (!d.mark || !d.stack || !d.buf) {
        rc = err_set(ERR_NOMEM, "grammar: out of memory (%d NFA states)", g->n_nfa);
        goto out;
    }
    if ((rc = gr_dfa_grow(&d)) || (rc = gr_ht_rehash(&d, 1024)))
        goto out;
    /* state 0: the empty set (dead), with an all-zero row */
    d.off[0] = 0;
    d.len[0] = 0;
    d.n_dfa = 1;
    memset(d.trans, 0, (size_t)g->n_cls * sizeof *d.trans);
    d.stamp = 1;
    d.n_buf = 0;
    gr_close(&d, g->nfa_start);
    if (gr_dfa_intern(&d) != 1 && !d.err) {
        rc = err_set(ERR_INVAL, "grammar: the expression matches no string");
        goto out;
    }
    uint8_t rep[256];
    for (int b = 255; b >= 0; b--)
        rep[g->cls[b]] = (uint8_t)b;
    for (int32_t s = 1; s < d.n_dfa && !d.err; s++) {
        for (int32_t c = 0; c < g->n_cls && !d.err; c++) {
            int b = rep[c];
            d.stamp++;
            d.n_buf = 0;
            d.work += d.len[s];
            if (d.work > GRAMMAR_MAX_WORK) {
                d.err = err_set(ERR_TOOLARGE,
                                "grammar: building the automaton takes more than "
                                "%lld steps (%d states so far); use fewer or "
                                "simpler alternatives",
                                (long long)GRAMMAR_MAX_WORK, d.n_dfa);
                break;
            }
            for (int32_t k = 0; k < d.len[s]; k++) {
                const gr_nfa_state *x = &g->nfa[d.pool[d.off[s] + (size_t)k]];
                if (x->kind == GN_BYTE && (g->sets[x->set][b >> 3] >> (b & 7)) & 1)
                    gr_close(&d, x->out0);
            }
            int32_t t = gr_dfa_intern(&d);
            /* the table may have moved while interning */
            d.trans[(size_t)s * g->n_cls + c] = t;
        }
    }
    if (d.err) {
        rc = d.err;
        goto out;
    }
    g->n_dfa = d.n_dfa;
    g->trans = d.trans;
    d.trans = NULL;
    g->flags = calloc((size_t)g->n_dfa, 1);
    g->dist = malloc((size_t)g->n_dfa * sizeof *g->dist);
    if (!g->flags || !g->dist) {
        rc = err_set(ERR_NOMEM, "grammar: out of memory (%d DFA states)", g->n_dfa);
        goto out;
    }
    for (int32_t s = 1; s < g->n_dfa; s++)
        for (int32_t k = 0; k < d.len[s]; k++)
            if (d.pool[d.off[s] + (size_t)k] == match)
                g->flags[s] |= GD_ACCEPT;
    rc = gr_dfa_prune(g);
out:
    free(d.mark);
    free(d.stack);
    free(d.buf);
    free(d.pool);
    free(d.off);
    free(d.len);
    free(d.ht);
    free(d.trans);
    return rc;
}

/* NFA states from which the match state is reachable (for the reference matcher). */
static int gr_nfa_liveness(grammar *g, int32_t match) {
    int32_t n = g->n_nfa;
    int32_t *cnt = calloc((size_t)n + 1, sizeof *cnt);
    int32_t *src = malloc((size_t)n * 2 * sizeof *src);
    int32_t *fill = malloc((size_t)n * sizeof *fill);
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    g->nfa_live = calloc((size_t)n, 1);
    int rc = 0;
    if (!cnt || !src || !fill || !queue || !g->nfa_live) {
        rc = err_set(ERR_NOMEM, "grammar: out of memory (%d NFA states)", n);
        goto out;
    }
    for (int32_t s = 0; s < n; s++) {
        const gr_nfa_state *x = &g->nfa[s];
        if (x->out0 >= 0)
            cnt[x->out0 + 1]++;
        if (x->kind == GN_EPS && x->out1 >= 0)
            cnt[x->out1 + 1]++;
    }
    for (int32_t t = 0; t < n; t++)
        cnt[t + 1] += cnt[t];
    memcpy(fill, cnt, (size_t)n * sizeof *fill);
    for (int32_t s = 0; s < n; s++) {
        const gr_nfa_state *x = &g->nfa[s];
        if (x->out0 >= 0)
            src[fill[x->out0]++] = s;
        if (x->kind == GN_EPS && x->out1 >= 0)
            src[fill[x->out1]++] = s;
    }
    int32_t qh = 0, qt = 0;
    g->nfa_live[match] = 1;
    queue[qt++] = match;
    while (qh < qt) {
        int32_t t = queue[qh++];
        for (int32_t k = cnt[t]; k < cnt[t + 1]; k++)
            if (!g->nfa_live[src[k]]) {
                g->nfa_live[src[k]] = 1;
                queue[qt++] = src[k];
            }
    }
out:
    free(cnt);
    free(src);
    free(fill);
    free(queue);
    return rc;
}

int grammar_compile(const grammar_ast *a, const grammar_node *root, grammar_vocab *v,
                    grammar **out) {
    return grammar_compile_capped(a, root, v, 0, out);
}

int grammar_compile_capped(const grammar_ast *a, const grammar_node *root, grammar_vocab *v,
                           int32_t max_dfa_states, grammar **out) {
    *out = NULL;
    if (!a || a->failed)
        return err_set(ERR_NOMEM, "grammar: the expression could not be built (out of memory)");
    if (!root)
        return err_set(ERR_INVAL, "grammar: no expression to compile");
    gr_build b = {.max_states = GRAMMAR_MAX_NFA_STATES};
    if (max_dfa_states > 0 && max_dfa_states < GRAMMAR_MAX_NFA_STATES / 8)
        b.max_states = max_dfa_states * 8;
    for (int i = 0; i < 256; i++)
        b.single[i] = -1;
    gr_frag f = gr_compile(&b, root);
    int32_t match = gr_new(&b, GN_MATCH);
    gr_patch(&b, f.end, match);
    grammar *g = NULL;
    int rc = b.err;
    if (!rc && !(g = calloc(1, sizeof *g)))
        rc = err_set(ERR_NOMEM, "grammar: out of memory");
    if (rc) {
        free(b.st);
        free(b.sets);
        return rc;
    }
    atomic_init(&g->refs, 1);
    g->nfa = b.st;
    g->n_nfa = b.n;
    g->nfa_start = f.start;
    g->sets = b.sets;
    g->n_sets = b.n_sets;
    gr_classes(g);
    if ((rc = gr_nfa_liveness(g, match)) || (rc = gr_dfa_build_all(g, match, max_dfa_states))) {
        grammar_destroy(g);
        return rc;
    }
    if (v) {
        atomic_fetch_add(&v->refs, 1);
        g->v = v;
    }
    *out = g;
    return 0;
}

void grammar_destroy(grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    grammar_vocab_destroy(g->v);
    free(g->nfa);
    free(g->sets);
    free(g->nfa_live);
    free(g->trans);
    free(g->flags);
    free(g->dist);
    free(g);
}

int32_t grammar_n_nfa_states(const grammar *g) {
    return g->n_nfa;
}

int32_t grammar_n_dfa_states(const grammar *g) {
    return g->n_dfa;
}

int32_t grammar_n_classes(const grammar *g) {
    return g->n_cls;
}

size_t grammar_table_bytes(const grammar *g) {
    return (size_t)g->n_dfa * ((size_t)g->n_cls * sizeof(int32_t) + 1 + sizeof(int32_t));
}

/* ---- the reference matcher ---- */

/* Adds the live epsilon closure of s to the bitset. */
static void gr_nfa_close(const grammar *g, int32_t s, uint64_t *set, int32_t *stack) {
    int32_t sp = 0;
    if (s < 0 || !g->nfa_live[s] || (set[s >> 6] >> (s & 63)) & 1)
        return;
    set[s >> 6] |= 1ull << (s & 63);
    stack[sp++] = s;
    while (sp) {
        const gr_nfa_state *x = &g->nfa[stack[--sp]];
        if (x->kind != GN_EPS)
            continue;
        int32_t o[2] = {x->out0, x->out1};
        for (int k = 0; k < 2; k++)
            if (o[k] >= 0 && g->nfa_live[o[k]] && !((set[o[k] >> 6] >> (o[k] & 63)) & 1)) {
                set[o[k] >> 6] |= 1ull << (o[k] & 63);
                stack[sp++] = o[k];
            }
    }
}

int grammar_nfa_match(const grammar *g, const char *s, size_t n) {
    size_t words = ((size_t)g->n_nfa + 63) / 64;
    uint64_t *cur = calloc(words, sizeof *cur), *next = calloc(words, sizeof *next);
    int32_t *stack = malloc((size_t)g->n_nfa * sizeof *stack);
    int result = -1;
    CHECK(cur && next && stack);
    gr_nfa_close(g, g->nfa_start, cur, stack);
    for (size_t i = 0; i < n; i++) {
        int b = (unsigned char)s[i];
        memset(next, 0, words * sizeof *next);
        for (size_t w = 0; w < words; w++)
            for (uint64_t m = cur[w]; m; m &= m - 1) {
                int32_t x = (int32_t)(w * 64 + (size_t)__builtin_ctzll(m));
                const gr_nfa_state *st = &g->nfa[x];
                if (st->kind == GN_BYTE && (g->sets[st->set][b >> 3] >> (b & 7)) & 1)
                    gr_nfa_close(g, st->out0, next, stack);
            }
        bool any = false;
        for (size_t w = 0; w < words; w++)
            any |= next[w] != 0;
        uint64_t *t = cur;
        cur = next;
        next = t;
        if (!any)
            goto out;
    }
    result = 0;
    for (int32_t x = 0; x < g->n_nfa; x++)
        if ((cur[x >> 6] >> (x & 63)) & 1 && g->nfa[x].kind == GN_MATCH)
            result = 1;
out:
    free(cur);
    free(next);
    free(stack);
    return result;
}
