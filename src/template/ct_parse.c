/* SPDX-License-Identifier: MIT */
/*
 * ct_parse: tokens -> AST for the chat-template engine. A port of jinja2's recursive-descent
 * parser (jinja2/parser.py), so precedence and the odd corners match: `-x | f` filters x before
 * negating it, `a is b c` takes one argument, adjacent string literals concatenate, `x.0` is an
 * item, `**` is left-associative, a conditional expression without `else` yields undefined.
 *
 * Supported statements: if/elif/else, for (else, tuple targets, inline `if`), set (also block set
 * and namespace attributes), macro (defaults), filter blocks, with, print, break/continue
 * (jinja2.ext.loopcontrols) and Hugging Face's {% generation %}. Template inheritance, includes,
 * imports, call blocks and recursive loops are reported as ERR_UNSUPPORTED naming the tag and line.
 *
 * Unknown filters and tests follow jinja2 3.x: an error when the template is created, unless the
 * use sits inside an `if` or a conditional expression (a "soft" frame), where jinja2 defers the
 * error to the moment it is evaluated. Nesting is bounded (CT_MAX_PARSE_DEPTH) so hostile input
 * cannot exhaust the stack.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

typedef struct vec {
    ct_node **v;
    uint32_t n;
    size_t cap;
} vec;

typedef struct parser {
    ct_tpl *t;
    const ct_tok *toks;
    size_t n, pos;
    int depth;
    int loop_depth;
    int n_macros; /* macros parsed so far: a for loop whose body defines one must not reuse frames
                   */
    bool soft;
    vec unknown; /* N_FILTER / N_TEST nodes naming a filter/test jinja2 does not have */
    /* symbol hash (name -> id), open addressing, power-of-two size */
    int *hash;
    size_t hash_cap;
} parser;

/* ---- helpers ------------------------------------------------------------------------------- */

static int p_nomem(void) {
    return err_set(ERR_NOMEM, "template: out of memory while parsing");
}

static const ct_tok *cur(const parser *p) {
    return &p->toks[p->pos];
}
static const ct_tok *look(const parser *p) {
    return &p->toks[p->pos + 1 < p->n ? p->pos + 1 : p->pos];
}
static void advance(parser *p) {
    if (p->pos + 1 < p->n)
        p->pos++;
}

static bool tok_is_name(const ct_tok *t, const char *name) {
    size_t n = strlen(name);
    return t->type == TK_NAME && t->n == n && memcmp(t->p, name, n) == 0;
}
static bool tok_is_op(const ct_tok *t, int op) {
    return t->type == TK_OP && t->op == op;
}

static const char *describe(const ct_tok *t, char *buf, size_t cap) {
    switch (t->type) {
    case TK_EOF:
        return "end of template";
    case TK_DATA:
        return "template data / text";
    case TK_VAR_BEGIN:
        return "begin of print statement";
    case TK_VAR_END:
        return "end of print statement";
    case TK_BLOCK_BEGIN:
        return "begin of statement block";
    case TK_BLOCK_END:
        return "end of statement block";
    case TK_STRING:
        return "string";
    case TK_INT:
        return "integer";
    case TK_FLOAT:
        return "float";
    default:
        break;
    }
    size_t n = t->n < cap - 1 ? t->n : cap - 1;
    memcpy(buf, t->p, n);
    buf[n] = 0;
    return buf;
}

static int fail_at(const parser *p, const ct_tok *t, const char *what) {
    char buf[64];
    (void)p;
    return err_set(ERR_FORMAT, "template line %d: %s, got '%s'", t->line, what,
                   describe(t, buf, sizeof buf));
}

static int expect_op(parser *p, int op, const char *what) {
    if (!tok_is_op(cur(p), op))
        return fail_at(p, cur(p), what);
    advance(p);
    return 0;
}

static int expect_type(parser *p, int type, const char *what) {
    if (cur(p)->type != type)
        return fail_at(p, cur(p), what);
    advance(p);
    return 0;
}

static int vec_push(parser *p, vec *v, ct_node *x) {
    if (arena_grow(p->t->a, (void **)&v->v, &v->cap, (size_t)v->n + 1, sizeof *v->v))
        return p_nomem();
    v->v[v->n++] = x;
    return 0;
}

static ct_node *mk(parser *p, int kind, int line) {
    ct_node *n = arena_calloc(p->t->a, 1, sizeof *n);
    if (n) {
        n->kind = (uint8_t)kind;
        n->line = line;
        n->sym = -1;
        n->fid = -1;
    }
    return n;
}

#define MK(var, kind, line)                                                                        \
    ct_node *var = mk(p, kind, line);                                                              \
    if (!var)                                                                                      \
        return p_nomem();

static int enter(parser *p) {
    if (++p->depth > CT_MAX_PARSE_DEPTH)
        return err_set(ERR_TOOLARGE, "template line %d: nested deeper than %d levels", cur(p)->line,
                       CT_MAX_PARSE_DEPTH);
    return 0;
}

/* ---- symbols ------------------------------------------------------------------------------- */

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

int ct_sym_find(const ct_syms *s, const char *name, size_t len) {
    for (int i = 0; i < s->n; i++)
        if (s->lens[i] == len && memcmp(s->names[i], name, len) == 0)
            return i;
    return -1;
}

static int sym_intern(parser *p, const char *name, size_t len, int *out) {
    ct_syms *s = &p->t->syms;
    if ((size_t)s->n * 2 >= p->hash_cap) {
        size_t cap = p->hash_cap ? p->hash_cap * 2 : 256;
        int *h = malloc(cap * sizeof *h);
        if (!h)
            return p_nomem();
        for (size_t i = 0; i < cap; i++)
            h[i] = -1;
        for (int i = 0; i < s->n; i++) {
            size_t k = name_hash(s->names[i], s->lens[i]) & (cap - 1);
            while (h[k] >= 0)
                k = (k + 1) & (cap - 1);
            h[k] = i;
        }
        free(p->hash);
        p->hash = h;
        p->hash_cap = cap;
    }
    size_t k = name_hash(name, len) & (p->hash_cap - 1);
    while (p->hash[k] >= 0) {
        int i = p->hash[k];
        if (s->lens[i] == len && memcmp(s->names[i], name, len) == 0) {
            *out = i;
            return 0;
        }
        k = (k + 1) & (p->hash_cap - 1);
    }
    if (arena_grow(p->t->a, (void **)&s->names, &s->cap_names, (size_t)s->n + 1,
                   sizeof *s->names) ||
        arena_grow(p->t->a, (void **)&s->lens, &s->cap_lens, (size_t)s->n + 1, sizeof *s->lens))
        return p_nomem();
    s->names[s->n] = name;
    s->lens[s->n] = len;
    p->hash[k] = s->n;
    *out = s->n++;
    return 0;
}

/* ---- expressions --------------------------------------------------------------------------- */

static int parse_expression(parser *p, bool with_condexpr, ct_node **out);
static int parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *const *extra_end,
                       bool explicit_parens, bool with_namespace, ct_node **out);
static int parse_unary(parser *p, bool with_filter, ct_node **out);
static int parse_postfix(parser *p, ct_node **node);
static int parse_filter_expr(parser *p, ct_node **node);
static int parse_filter(parser *p, ct_node **node, bool start_inline);

static int parse_primary(parser *p, bool with_namespace, ct_node **out) {
    const ct_tok *t = cur(p);
    int rc;
    if (t->type == TK_NAME) {
        advance(p);
        if (tok_is_name(t, "true") || tok_is_name(t, "false") || tok_is_name(t, "True") ||
            tok_is_name(t, "False")) {
            MK(n, N_CONST, t->line);
            n->lit = ct_bool(t->p[0] == 't' || t->p[0] == 'T');
            *out = n;
            return 0;
        }
        if (tok_is_name(t, "none") || tok_is_name(t, "None")) {
            MK(n, N_CONST, t->line);
            n->lit = ct_none();
            *out = n;
            return 0;
        }
        if (with_namespace && tok_is_op(cur(p), OP_DOT)) {
            advance(p);
            const ct_tok *attr = cur(p);
            if ((rc = expect_type(p, TK_NAME, "expected name")))
                return rc;
            MK(n, N_NSREF, t->line);
            n->str = t->p;
            n->len = t->n;
            n->str2 = attr->p;
            n->len2 = attr->n;
            if ((rc = sym_intern(p, t->p, t->n, &n->sym)))
                return rc;
            *out = n;
            return 0;
        }
        MK(n, N_NAME, t->line);
        n->str = t->p;
        n->len = t->n;
        if ((rc = sym_intern(p, t->p, t->n, &n->sym)))
            return rc;
        *out = n;
        return 0;
    }
    if (t->type == TK_STRING) {
        advance(p);
        MK(n, N_CONST, t->line);
        if (cur(p)->type != TK_STRING) {
            n->lit = ct_str(t->p, t->n);
        } else {
            strbuf sb;
            strbuf_init(&sb);
            strbuf_append(&sb, t->p, t->n);
            while (cur(p)->type == TK_STRING) {
                strbuf_append(&sb, cur(p)->p, cur(p)->n);
                advance(p);
            }
            char *s = strbuf_failed(&sb) ? NULL : arena_strndup(p->t->a, sb.data, sb.len);
            size_t len = sb.len;
            strbuf_deinit(&sb);
            if (!s)
                return p_nomem();
            n->lit = ct_str(s, len);
        }
        *out = n;
        return 0;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        advance(p);
        MK(n, N_CONST, t->line);
        n->lit = t->type == TK_INT ? ct_int(t->i) : ct_float(t->f);
        *out = n;
        return 0;
    }
    if (tok_is_op(t, OP_LPAREN)) {
        advance(p);
        if ((rc = parse_tuple(p, false, true, NULL, true, false, out)))
            return rc;
        return expect_op(p, OP_RPAREN, "expected ')'");
    }
    if (tok_is_op(t, OP_LBRACKET)) {
        advance(p);
        MK(n, N_LIST, t->line);
        vec items = {0};
        while (!tok_is_op(cur(p), OP_RBRACKET)) {
            if (items.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
                return rc;
            if (tok_is_op(cur(p), OP_RBRACKET))
                break;
            ct_node *e = NULL;
            if ((rc = parse_expression(p, true, &e)) || (rc = vec_push(p, &items, e)))
                return rc;
        }
        if ((rc = expect_op(p, OP_RBRACKET, "expected ']'")))
            return rc;
        n->kids = items.v;
        n->n_kids = items.n;
        *out = n;
        return 0;
    }
    if (tok_is_op(t, OP_LBRACE)) {
        advance(p);
        MK(n, N_DICT, t->line);
        vec keys = {0}, vals = {0};
        while (!tok_is_op(cur(p), OP_RBRACE)) {
            if (keys.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
                return rc;
            if (tok_is_op(cur(p), OP_RBRACE))
                break;
            ct_node *k = NULL, *v = NULL;
            if ((rc = parse_expression(p, true, &k)) ||
                (rc = expect_op(p, OP_COLON, "expected ':'")) ||
                (rc = parse_expression(p, true, &v)) || (rc = vec_push(p, &keys, k)) ||
                (rc = vec_push(p, &vals, v)))
                return rc;
        }
        if ((rc = expect_op(p, OP_RBRACE, "expected '}'")))
            return rc;
        n->kids = keys.v;
        n->n_kids = keys.n;
        n->kids2 = vals.v;
        n->n_kids2 = vals.n;
        *out = n;
        return 0;
    }
    char buf[64];
    return err_set(ERR_FORMAT, "template line %d: unexpected '%s'", t->line,
                   describe(t, buf, sizeof buf));
}

static bool is_tuple_end(const parser *p, const char *const *extra_end) {
    const ct_tok *t = cur(p);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || tok_is_op(t, OP_RPAREN))
        return true;
    if (extra_end)
        for (int i = 0; extra_end[i]; i++)
            if (tok_is_name(t, extra_end[i]))
                return true;
    return false;
}

static int parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *const *extra_end,
                       bool explicit_parens, bool with_namespace, ct_node **out) {
    int line = cur(p)->line, rc;
    vec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
            return rc;
        if (is_tuple_end(p, extra_end))
            break;
        ct_node *e = NULL;
        rc = simplified ? parse_primary(p, with_namespace, &e)
                        : parse_expression(p, with_condexpr, &e);
        if (rc || (rc = vec_push(p, &args, e)))
            return rc;
        if (tok_is_op(cur(p), OP_COMMA))
            is_tuple = true;
        else
            break;
        line = cur(p)->line;
    }
    if (!is_tuple) {
        if (args.n) {
            *out = args.v[0];
            return 0;
        }
        if (!explicit_parens)
            return fail_at(p, cur(p), "expected an expression");
    }
    MK(n, N_TUPLE, line);
    n->kids = args.v;
    n->n_kids = args.n;
    *out = n;
    return 0;
}

static int parse_call_args(parser *p, ct_node *call) {
    int rc;
    if ((rc = expect_op(p, OP_LPAREN, "expected '('")))
        return rc;
    vec args = {0}, kws = {0};
    bool require_comma = false;
    int line = cur(p)->line;
    while (!tok_is_op(cur(p), OP_RPAREN)) {
        if (require_comma) {
            if ((rc = expect_op(p, OP_COMMA, "expected ','")))
                return rc;
            if (tok_is_op(cur(p), OP_RPAREN))
                break;
        }
        if (tok_is_op(cur(p), OP_MUL)) {
            if (call->c || call->d)
                return err_set(ERR_FORMAT,
                               "template line %d: invalid syntax for function call "
                               "expression",
                               line);
            advance(p);
            if ((rc = parse_expression(p, true, &call->c)))
                return rc;
        } else if (tok_is_op(cur(p), OP_POW)) {
            if (call->d)
                return err_set(ERR_FORMAT,
                               "template line %d: invalid syntax for function call "
                               "expression",
                               line);
            advance(p);
            if ((rc = parse_expression(p, true, &call->d)))
                return rc;
        } else if (cur(p)->type == TK_NAME && tok_is_op(look(p), OP_ASSIGN)) {
            if (call->d)
                return err_set(ERR_FORMAT,
                               "template line %d: invalid syntax for function call "
                               "expression",
                               line);
            const ct_tok *key = cur(p);
            advance(p);
            advance(p);
            MK(kw, N_KW, key->line);
            kw->str = key->p;
            kw->len = key->n;
            if ((rc = parse_expression(p, true, &kw->a)) || (rc = vec_push(p, &kws, kw)))
                return rc;
        } else {
            if (call->c || call->d || kws.n)
                return err_set(ERR_FORMAT,
                               "template line %d: invalid syntax for function call "
                               "expression",
                               line);
            ct_node *e = NULL;
            if ((rc = parse_expression(p, true, &e)) || (rc = vec_push(p, &args, e)))
                return rc;
        }
        require_comma = true;
    }
    advance(p);
    call->kids = args.v;
    call->n_kids = args.n;
    call->kids2 = kws.v;
    call->n_kids2 = kws.n;
    return 0;
}

static int parse_subscribed(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *parts[3] = {NULL, NULL, NULL};
    if (tok_is_op(cur(p), OP_COLON)) {
        advance(p);
    } else {
        ct_node *e = NULL;
        if ((rc = parse_expression(p, true, &e)))
            return rc;
        if (!tok_is_op(cur(p), OP_COLON)) {
            *out = e;
            return 0;
        }
        advance(p);
        parts[0] = e;
    }
    if (!tok_is_op(cur(p), OP_COLON) && !tok_is_op(cur(p), OP_RBRACKET) &&
        !tok_is_op(cur(p), OP_COMMA)) {
        if ((rc = parse_expression(p, true, &parts[1])))
            return rc;
    }
    if (tok_is_op(cur(p), OP_COLON)) {
        advance(p);
        if (!tok_is_op(cur(p), OP_RBRACKET) && !tok_is_op(cur(p), OP_COMMA))
            if ((rc = parse_expression(p, true, &parts[2])))
                return rc;
    }
    MK(n, N_SLICE, line);
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    *out = n;
    return 0;
}

static int parse_subscript(parser *p, ct_node **node) {
    const ct_tok *t = cur(p);
    int rc;
    advance(p);
    if (tok_is_op(t, OP_DOT)) {
        const ct_tok *attr = cur(p);
        advance(p);
        if (attr->type == TK_NAME) {
            MK(n, N_GETATTR, t->line);
            n->a = *node;
            n->str = attr->p;
            n->len = attr->n;
            *node = n;
            return 0;
        }
        if (attr->type != TK_INT)
            return err_set(ERR_FORMAT, "template line %d: expected name or number", attr->line);
        MK(k, N_CONST, attr->line);
        k->lit = ct_int(attr->i);
        MK(n, N_GETITEM, t->line);
        n->a = *node;
        n->b = k;
        *node = n;
        return 0;
    }
    /* '[' */
    vec args = {0};
    while (!tok_is_op(cur(p), OP_RBRACKET)) {
        if (args.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
            return rc;
        ct_node *e = NULL;
        if ((rc = parse_subscribed(p, &e)) || (rc = vec_push(p, &args, e)))
            return rc;
    }
    if ((rc = expect_op(p, OP_RBRACKET, "expected ']'")))
        return rc;
    MK(n, N_GETITEM, t->line);
    n->a = *node;
    if (args.n == 1) {
        n->b = args.v[0];
        if (n->b->kind == N_SLICE)
            n->b->d = *node; /* the sliced object, for constant folding (ct_eval.c) */
    } else {
        MK(tup, N_TUPLE, t->line);
        tup->kids = args.v;
        tup->n_kids = args.n;
        n->b = tup;
    }
    *node = n;
    return 0;
}

static int parse_postfix(parser *p, ct_node **node) {
    int rc;
    for (;;) {
        const ct_tok *t = cur(p);
        if (tok_is_op(t, OP_DOT) || tok_is_op(t, OP_LBRACKET)) {
            if ((rc = parse_subscript(p, node)))
                return rc;
        } else if (tok_is_op(t, OP_LPAREN)) {
            MK(n, N_CALL, t->line);
            n->a = *node;
            if ((rc = parse_call_args(p, n)))
                return rc;
            *node = n;
        } else {
            return 0;
        }
    }
}

/* Reads a possibly dotted filter/test name. */
static int parse_dotted_name(parser *p, const char **name, size_t *len, int *line) {
    const ct_tok *t = cur(p);
    int rc;
    if ((rc = expect_type(p, TK_NAME, "expected a filter or test name")))
        return rc;
    *name = t->p;
    *len = t->n;
    *line = t->line;
    while (tok_is_op(cur(p), OP_DOT)) {
        advance(p);
        const ct_tok *part = cur(p);
        if ((rc = expect_type(p, TK_NAME, "expected name")))
            return rc;
        *len = (size_t)(part->p + part->n - *name); /* contiguous only when written "a.b" */
    }
    return 0;
}

static int note_unknown(parser *p, ct_node *n) {
    n->soft = p->soft;
    return vec_push(p, &p->unknown, n);
}

static int parse_filter(parser *p, ct_node **node, bool start_inline) {
    int rc;
    while (tok_is_op(cur(p), OP_PIPE) || start_inline) {
        if (!start_inline)
            advance(p);
        start_inline = false;
        const char *name;
        size_t len;
        int line;
        if ((rc = parse_dotted_name(p, &name, &len, &line)))
            return rc;
        MK(n, N_FILTER, line);
        n->a = *node;
        n->str = name;
        n->len = len;
        bool unsupported = false;
        n->fid = ct_filter_id(name, len, &unsupported);
        if (n->fid < 0 && !unsupported && (rc = note_unknown(p, n)))
            return rc;
        if (unsupported)
            n->op = 1;
        if (tok_is_op(cur(p), OP_LPAREN) && (rc = parse_call_args(p, n)))
            return rc;
        *node = n;
    }
    return 0;
}

static int parse_test(parser *p, ct_node **node) {
    int line = cur(p)->line, rc;
    advance(p); /* 'is' */
    bool negated = false;
    if (tok_is_name(cur(p), "not")) {
        advance(p);
        negated = true;
    }
    const char *name;
    size_t len;
    int nl;
    if ((rc = parse_dotted_name(p, &name, &len, &nl)))
        return rc;
    MK(n, N_TEST, line);
    n->a = *node;
    n->str = name;
    n->len = len;
    bool unsupported = false;
    n->fid = ct_test_id(name, len, &unsupported);
    if (n->fid < 0 && !unsupported && (rc = note_unknown(p, n)))
        return rc;
    if (unsupported)
        n->op = 1;
    const ct_tok *t = cur(p);
    if (tok_is_op(t, OP_LPAREN)) {
        if ((rc = parse_call_args(p, n)))
            return rc;
    } else if ((t->type == TK_NAME || t->type == TK_STRING || t->type == TK_INT ||
                t->type == TK_FLOAT || tok_is_op(t, OP_LPAREN) || tok_is_op(t, OP_LBRACKET) ||
                tok_is_op(t, OP_LBRACE)) &&
               !tok_is_name(t, "else") && !tok_is_name(t, "or") && !tok_is_name(t, "and")) {
        if (tok_is_name(t, "is"))
            return err_set(ERR_FORMAT,
                           "template line %d: You cannot chain multiple tests with "
                           "is",
                           t->line);
        ct_node *arg = NULL;
        if ((rc = enter(p)) || (rc = parse_primary(p, false, &arg)) ||
            (rc = parse_postfix(p, &arg)))
            return rc;
        p->depth--;
        ct_node **kids = arena_alloc(p->t->a, sizeof *kids);
        if (!kids)
            return p_nomem();
        kids[0] = arg;
        n->kids = kids;
        n->n_kids = 1;
    }
    *node = n;
    if (negated) {
        MK(neg, N_NOT, line);
        neg->a = n;
        *node = neg;
    }
    return 0;
}

static int parse_filter_expr(parser *p, ct_node **node) {
    int rc;
    for (;;) {
        const ct_tok *t = cur(p);
        if (tok_is_op(t, OP_PIPE)) {
            if ((rc = parse_filter(p, node, false)))
                return rc;
        } else if (tok_is_name(t, "is")) {
            if ((rc = parse_test(p, node)))
                return rc;
        } else if (tok_is_op(t, OP_LPAREN)) {
            MK(n, N_CALL, t->line);
            n->a = *node;
            if ((rc = parse_call_args(p, n)))
                return rc;
            *node = n;
        } else {
            return 0;
        }
    }
}

static int parse_unary(parser *p, bool with_filter, ct_node **out) {
    const ct_tok *t = cur(p);
    int rc;
    if ((rc = enter(p)))
        return rc;
    ct_node *node = NULL;
    if (tok_is_op(t, OP_SUB) || tok_is_op(t, OP_ADD)) {
        advance(p);
        MK(n, tok_is_op(t, OP_SUB) ? N_NEG : N_POS, t->line);
        if ((rc = parse_unary(p, false, &n->a)))
            return rc;
        node = n;
    } else if ((rc = parse_primary(p, false, &node))) {
        return rc;
    }
    if ((rc = parse_postfix(p, &node)))
        return rc;
    if (with_filter && (rc = parse_filter_expr(p, &node)))
        return rc;
    p->depth--;
    *out = node;
    return 0;
}

static int binop(parser *p, int kind, int op, int line, ct_node *a, ct_node *b, ct_node **out) {
    MK(n, kind, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    *out = n;
    return 0;
}

static int parse_pow(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *left = NULL;
    if ((rc = parse_unary(p, true, &left)))
        return rc;
    while (tok_is_op(cur(p), OP_POW)) {
        advance(p);
        ct_node *right = NULL;
        if ((rc = parse_unary(p, true, &right)) ||
            (rc = binop(p, N_BINOP, CT_OP_POW, line, left, right, &left)))
            return rc;
        line = cur(p)->line;
    }
    *out = left;
    return 0;
}

static int parse_math2(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *left = NULL;
    if ((rc = parse_pow(p, &left)))
        return rc;
    for (;;) {
        const ct_tok *t = cur(p);
        int op = tok_is_op(t, OP_MUL)        ? CT_OP_MUL
                 : tok_is_op(t, OP_DIV)      ? CT_OP_DIV
                 : tok_is_op(t, OP_FLOORDIV) ? CT_OP_FLOORDIV
                 : tok_is_op(t, OP_MOD)      ? CT_OP_MOD
                                             : -1;
        if (op < 0)
            break;
        advance(p);
        ct_node *right = NULL;
        if ((rc = parse_pow(p, &right)) || (rc = binop(p, N_BINOP, op, line, left, right, &left)))
            return rc;
        line = cur(p)->line;
    }
    *out = left;
    return 0;
}

static int parse_concat(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *first = NULL;
    if ((rc = parse_math2(p, &first)))
        return rc;
    if (!tok_is_op(cur(p), OP_TILDE)) {
        *out = first;
        return 0;
    }
    vec args = {0};
    if ((rc = vec_push(p, &args, first)))
        return rc;
    while (tok_is_op(cur(p), OP_TILDE)) {
        advance(p);
        ct_node *e = NULL;
        if ((rc = parse_math2(p, &e)) || (rc = vec_push(p, &args, e)))
            return rc;
    }
    MK(n, N_CONCAT, line);
    n->kids = args.v;
    n->n_kids = args.n;
    *out = n;
    return 0;
}

static int parse_math1(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *left = NULL;
    if ((rc = parse_concat(p, &left)))
        return rc;
    for (;;) {
        const ct_tok *t = cur(p);
        int op = tok_is_op(t, OP_ADD) ? CT_OP_ADD : tok_is_op(t, OP_SUB) ? CT_OP_SUB : -1;
        if (op < 0)
            break;
        advance(p);
        ct_node *right = NULL;
        if ((rc = parse_concat(p, &right)) ||
            (rc = binop(p, N_BINOP, op, line, left, right, &left)))
            return rc;
        line = cur(p)->line;
    }
    *out = left;
    return 0;
}

static int parse_compare(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *expr = NULL;
    if ((rc = parse_math1(p, &expr)))
        return rc;
    vec ops = {0};
    for (;;) {
        const ct_tok *t = cur(p);
        int op = -1;
        if (t->type == TK_OP) {
            switch (t->op) {
            case OP_EQ:
                op = CT_CMP_EQ;
                break;
            case OP_NE:
                op = CT_CMP_NE;
                break;
            case OP_LT:
                op = CT_CMP_LT;
                break;
            case OP_LTEQ:
                op = CT_CMP_LE;
                break;
            case OP_GT:
                op = CT_CMP_GT;
                break;
            case OP_GTEQ:
                op = CT_CMP_GE;
                break;
            default:
                break;
            }
            if (op >= 0)
                advance(p);
        } else if (tok_is_name(t, "in")) {
            op = CT_CMP_IN;
            advance(p);
        } else if (tok_is_name(t, "not") && tok_is_name(look(p), "in")) {
            op = CT_CMP_NOTIN;
            advance(p);
            advance(p);
        }
        if (op < 0)
            break;
        MK(o, N_OPERAND, t->line);
        o->op = (uint8_t)op;
        if ((rc = parse_math1(p, &o->a)) || (rc = vec_push(p, &ops, o)))
            return rc;
        line = cur(p)->line;
    }
    if (!ops.n) {
        *out = expr;
        return 0;
    }
    MK(n, N_COMPARE, line);
    n->a = expr;
    n->kids = ops.v;
    n->n_kids = ops.n;
    *out = n;
    return 0;
}

static int parse_not(parser *p, ct_node **out) {
    int rc;
    if (tok_is_name(cur(p), "not")) {
        int line = cur(p)->line;
        advance(p);
        if ((rc = enter(p)))
            return rc;
        MK(n, N_NOT, line);
        if ((rc = parse_not(p, &n->a)))
            return rc;
        p->depth--;
        *out = n;
        return 0;
    }
    return parse_compare(p, out);
}

static int parse_and(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *left = NULL;
    if ((rc = parse_not(p, &left)))
        return rc;
    while (tok_is_name(cur(p), "and")) {
        advance(p);
        ct_node *right = NULL;
        if ((rc = parse_not(p, &right)) || (rc = binop(p, N_AND, 0, line, left, right, &left)))
            return rc;
        line = cur(p)->line;
    }
    *out = left;
    return 0;
}

static int parse_or(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    ct_node *left = NULL;
    if ((rc = parse_and(p, &left)))
        return rc;
    while (tok_is_name(cur(p), "or")) {
        advance(p);
        ct_node *right = NULL;
        if ((rc = parse_and(p, &right)) || (rc = binop(p, N_OR, 0, line, left, right, &left)))
            return rc;
        line = cur(p)->line;
    }
    *out = left;
    return 0;
}

static int parse_condexpr(parser *p, ct_node **out) {
    int line = cur(p)->line, rc;
    uint32_t unknown_mark = p->unknown.n;
    ct_node *expr1 = NULL;
    if ((rc = parse_or(p, &expr1)))
        return rc;
    while (tok_is_name(cur(p), "if")) {
        advance(p);
        MK(n, N_CONDEXPR, line);
        n->b = expr1;
        if ((rc = parse_or(p, &n->a)))
            return rc;
        if (tok_is_name(cur(p), "else")) {
            advance(p);
            if ((rc = parse_condexpr(p, &n->c)))
                return rc;
        }
        /* jinja2 evaluates all three parts in a soft frame */
        for (uint32_t i = unknown_mark; i < p->unknown.n; i++)
            p->unknown.v[i]->soft = true;
        expr1 = n;
        line = cur(p)->line;
    }
    *out = expr1;
    return 0;
}

static int parse_expression(parser *p, bool with_condexpr, ct_node **out) {
    int rc;
    if ((rc = enter(p)))
        return rc;
    rc = with_condexpr ? parse_condexpr(p, out) : parse_or(p, out);
    p->depth--;
    return rc;
}

/* ---- statements ---------------------------------------------------------------------------- */

static int subparse(parser *p, const char *const *end_tokens, vec *body);

/* Parses `[:] %}` body up to one of end_tokens; leaves the stream on the end tag's name (or past
 * it with drop_needle). */
static int parse_statements(parser *p, const char *const *end_tokens, bool drop_needle, vec *body) {
    int rc;
    if (tok_is_op(cur(p), OP_COLON))
        advance(p);
    if ((rc = expect_type(p, TK_BLOCK_END, "expected end of statement block")))
        return rc;
    if ((rc = subparse(p, end_tokens, body)))
        return rc;
    if (cur(p)->type == TK_EOF) {
        return err_set(ERR_FORMAT,
                       "template line %d: unexpected end of template, expected "
                       "'%s'",
                       cur(p)->line, end_tokens[0]);
    }
    if (drop_needle)
        advance(p);
    return 0;
}

static int can_assign(const ct_node *n) {
    if (n->kind == N_NAME || n->kind == N_NSREF)
        return 1;
    if (n->kind == N_TUPLE) {
        for (uint32_t i = 0; i < n->n_kids; i++)
            if (!can_assign(n->kids[i]) || n->kids[i]->kind == N_NSREF)
                return 0;
        return 1;
    }
    return 0;
}

static int parse_assign_target(parser *p, bool name_only, const char *const *extra_end,
                               bool with_namespace, ct_node **out) {
    int rc;
    if (name_only) {
        const ct_tok *t = cur(p);
        if ((rc = expect_type(p, TK_NAME, "expected name")))
            return rc;
        MK(n, N_NAME, t->line);
        n->str = t->p;
        n->len = t->n;
        if ((rc = sym_intern(p, t->p, t->n, &n->sym)))
            return rc;
        *out = n;
        return 0;
    }
    if ((rc = parse_tuple(p, true, true, extra_end, false, with_namespace, out)))
        return rc;
    if (!can_assign(*out))
        return err_set(ERR_FORMAT, "template line %d: can't assign to this target", (*out)->line);
    return 0;
}

static int parse_signature(parser *p, ct_node *n) {
    int rc;
    if ((rc = expect_op(p, OP_LPAREN, "expected '('")))
        return rc;
    vec params = {0};
    bool defaults = false;
    while (!tok_is_op(cur(p), OP_RPAREN)) {
        if (params.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
            return rc;
        ct_node *arg = NULL;
        if ((rc = parse_assign_target(p, true, NULL, false, &arg)))
            return rc;
        if (tok_is_op(cur(p), OP_ASSIGN)) {
            advance(p);
            if ((rc = parse_expression(p, true, &arg->a)))
                return rc;
            defaults = true;
        } else if (defaults) {
            return err_set(ERR_FORMAT,
                           "template line %d: non-default argument follows default "
                           "argument",
                           arg->line);
        }
        if ((rc = vec_push(p, &params, arg)))
            return rc;
    }
    advance(p);
    n->kids2 = params.v;
    n->n_kids2 = params.n;
    return 0;
}

static void set_body(ct_node *n, const vec *b) {
    n->kids = b->v;
    n->n_kids = b->n;
}

static int parse_for(parser *p, int line, ct_node **out) {
    static const char *const in_end[] = {"in", NULL};
    static const char *const rec_end[] = {"recursive", NULL};
    static const char *const body_end[] = {"endfor", "else", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    int rc;
    MK(n, N_FOR, line);
    if ((rc = parse_assign_target(p, false, in_end, false, &n->a)))
        return rc;
    if (n->a->kind == N_NSREF)
        return err_set(ERR_FORMAT,
                       "template line %d: can't assign to a namespace attribute "
                       "in a for loop",
                       line);
    if (!tok_is_name(cur(p), "in"))
        return fail_at(p, cur(p), "expected 'in'");
    advance(p);
    if ((rc = parse_tuple(p, false, false, rec_end, false, false, &n->b)))
        return rc;
    bool soft = p->soft;
    p->soft = false;
    if (tok_is_name(cur(p), "if")) {
        advance(p);
        if ((rc = parse_expression(p, true, &n->c)))
            return rc;
    }
    if (tok_is_name(cur(p), "recursive"))
        return err_set(ERR_UNSUPPORTED,
                       "template line %d: unsupported construct 'for ... "
                       "recursive'",
                       line);
    vec body = {0}, els = {0};
    int macros_before = p->n_macros;
    p->loop_depth++;
    if ((rc = parse_statements(p, body_end, false, &body)))
        return rc;
    p->loop_depth--;
    n->op = p->n_macros != macros_before; /* closures may capture the iteration frame */
    bool has_else = tok_is_name(cur(p), "else");
    advance(p);
    if (has_else && (rc = parse_statements(p, else_end, true, &els)))
        return rc;
    p->soft = soft;
    set_body(n, &body);
    n->kids2 = els.v;
    n->n_kids2 = els.n;
    *out = n;
    return 0;
}

static int parse_if(parser *p, int line, ct_node **out) {
    static const char *const body_end[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    int rc;
    bool soft = p->soft;
    p->soft = true;
    MK(result, N_IF, line);
    ct_node *node = result;
    for (;;) {
        if ((rc = parse_tuple(p, false, false, NULL, false, false, &node->a)))
            return rc;
        vec body = {0};
        if ((rc = parse_statements(p, body_end, false, &body)))
            return rc;
        set_body(node, &body);
        const ct_tok *t = cur(p);
        advance(p);
        if (tok_is_name(t, "elif")) {
            MK(elif, N_IF, t->line);
            ct_node **kids = arena_alloc(p->t->a, sizeof *kids);
            if (!kids)
                return p_nomem();
            kids[0] = elif;
            node->kids2 = kids;
            node->n_kids2 = 1;
            node = elif;
            continue;
        }
        if (tok_is_name(t, "else")) {
            vec els = {0};
            if ((rc = parse_statements(p, else_end, true, &els)))
                return rc;
            node->kids2 = els.v;
            node->n_kids2 = els.n;
        }
        break;
    }
    p->soft = soft;
    *out = result;
    return 0;
}

static int parse_set(parser *p, int line, ct_node **out) {
    static const char *const end[] = {"endset", NULL};
    int rc;
    ct_node *target = NULL;
    if ((rc = parse_assign_target(p, false, NULL, true, &target)))
        return rc;
    if (tok_is_op(cur(p), OP_ASSIGN)) {
        advance(p);
        MK(n, N_SET, line);
        n->a = target;
        if ((rc = parse_tuple(p, false, true, NULL, false, false, &n->b)))
            return rc;
        *out = n;
        return 0;
    }
    MK(n, N_SETBLOCK, line);
    n->a = target;
    bool soft = p->soft;
    p->soft = false;
    if (tok_is_op(cur(p), OP_PIPE) && (rc = parse_filter(p, &n->b, false)))
        return rc;
    vec body = {0};
    if ((rc = parse_statements(p, end, true, &body)))
        return rc;
    p->soft = soft;
    set_body(n, &body);
    *out = n;
    return 0;
}

/* Parses a body whose loop/soft context resets (macro, generation, filter and with blocks). */
static int parse_inner_body(parser *p, const char *const *end, vec *body) {
    bool soft = p->soft;
    int loops = p->loop_depth;
    p->soft = false;
    p->loop_depth = 0;
    int rc = parse_statements(p, end, true, body);
    p->soft = soft;
    p->loop_depth = loops;
    return rc;
}

static int parse_statement(parser *p, ct_node **out) {
    static const char *const endmacro[] = {"endmacro", NULL};
    static const char *const endgen[] = {"endgeneration", NULL};
    static const char *const endfilter[] = {"endfilter", NULL};
    static const char *const endwith[] = {"endwith", NULL};
    const ct_tok *t = cur(p);
    int line = t->line, rc;
    if (t->type != TK_NAME)
        return fail_at(p, t, "tag name expected");
    char name[32];
    size_t nl = t->n < sizeof name - 1 ? t->n : sizeof name - 1;
    memcpy(name, t->p, nl);
    name[nl] = 0;
    advance(p);
    if (!strcmp(name, "for"))
        return parse_for(p, line, out);
    if (!strcmp(name, "if"))
        return parse_if(p, line, out);
    if (!strcmp(name, "set"))
        return parse_set(p, line, out);
    if (!strcmp(name, "macro")) {
        p->n_macros++;
        MK(n, N_MACRO, line);
        const ct_tok *mn = cur(p);
        if ((rc = expect_type(p, TK_NAME, "expected macro name")))
            return rc;
        n->str = mn->p;
        n->len = mn->n;
        if ((rc = sym_intern(p, mn->p, mn->n, &n->sym)) || (rc = parse_signature(p, n)))
            return rc;
        vec body = {0};
        if ((rc = parse_inner_body(p, endmacro, &body)))
            return rc;
        set_body(n, &body);
        *out = n;
        return 0;
    }
    if (!strcmp(name, "generation")) {
        MK(n, N_GENERATION, line);
        vec body = {0};
        if ((rc = parse_inner_body(p, endgen, &body)))
            return rc;
        set_body(n, &body);
        *out = n;
        return 0;
    }
    if (!strcmp(name, "filter")) {
        MK(n, N_FILTERBLOCK, line);
        bool soft = p->soft;
        p->soft = false;
        rc = parse_filter(p, &n->b, true);
        p->soft = soft;
        if (rc)
            return rc;
        vec body = {0};
        if ((rc = parse_inner_body(p, endfilter, &body)))
            return rc;
        set_body(n, &body);
        *out = n;
        return 0;
    }
    if (!strcmp(name, "with")) {
        MK(n, N_WITH, line);
        vec sets = {0};
        while (cur(p)->type != TK_BLOCK_END) {
            if (sets.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
                return rc;
            MK(s, N_SET, cur(p)->line);
            if ((rc = parse_assign_target(p, false, NULL, false, &s->a)) ||
                (rc = expect_op(p, OP_ASSIGN, "expected '='")) ||
                (rc = parse_expression(p, true, &s->b)) || (rc = vec_push(p, &sets, s)))
                return rc;
        }
        n->kids2 = sets.v;
        n->n_kids2 = sets.n;
        vec body = {0};
        bool soft = p->soft;
        p->soft = false;
        rc = parse_statements(p, endwith, true, &body);
        p->soft = soft;
        if (rc)
            return rc;
        set_body(n, &body);
        *out = n;
        return 0;
    }
    if (!strcmp(name, "print")) {
        MK(n, N_OUTPUT, line);
        vec items = {0};
        while (cur(p)->type != TK_BLOCK_END) {
            if (items.n && (rc = expect_op(p, OP_COMMA, "expected ','")))
                return rc;
            ct_node *e = NULL;
            if ((rc = parse_expression(p, true, &e)) || (rc = vec_push(p, &items, e)))
                return rc;
        }
        set_body(n, &items);
        *out = n;
        return 0;
    }
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (p->loop_depth == 0)
            return err_set(ERR_FORMAT, "template line %d: '%s' outside of a loop", line, name);
        MK(n, name[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        *out = n;
        return 0;
    }
    static const char *const unsupported[] = {"call",   "block", "extends",    "include",
                                              "import", "from",  "autoescape", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (!strcmp(name, unsupported[i]))
            return err_set(ERR_UNSUPPORTED, "template line %d: unsupported tag '%s'", line, name);
    return err_set(ERR_FORMAT, "template line %d: Encountered unknown tag '%s'.", line, name);
}

static bool is_end_token(const parser *p, const char *const *end_tokens) {
    if (!end_tokens)
        return false;
    for (int i = 0; end_tokens[i]; i++)
        if (tok_is_name(cur(p), end_tokens[i]))
            return true;
    return false;
}

static int flush_output(parser *p, vec *data, vec *body) {
    if (!data->n)
        return 0;
    MK(n, N_OUTPUT, data->v[0]->line);
    set_body(n, data);
    *data = (vec){0};
    return vec_push(p, body, n);
}

static int subparse(parser *p, const char *const *end_tokens, vec *body) {
    int rc;
    if ((rc = enter(p)))
        return rc;
    vec data = {0};
    for (;;) {
        const ct_tok *t = cur(p);
        if (t->type == TK_EOF)
            break;
        if (t->type == TK_DATA) {
            MK(d, N_DATA, t->line);
            d->str = t->p;
            d->len = t->n;
            if ((rc = vec_push(p, &data, d)))
                return rc;
            advance(p);
        } else if (t->type == TK_VAR_BEGIN) {
            advance(p);
            ct_node *e = NULL;
            if ((rc = parse_tuple(p, false, true, NULL, false, false, &e)) ||
                (rc = vec_push(p, &data, e)))
                return rc;
            if ((rc = expect_type(p, TK_VAR_END, "expected end of print statement")))
                return rc;
        } else if (t->type == TK_BLOCK_BEGIN) {
            if ((rc = flush_output(p, &data, body)))
                return rc;
            advance(p);
            if (is_end_token(p, end_tokens)) {
                p->depth--;
                return 0;
            }
            if (!end_tokens || !is_end_token(p, end_tokens)) {
                static const char *const stray[] = {
                    "endfor",        "endif", "endset", "endmacro", "endfilter", "endwith",
                    "endgeneration", "else",  "elif",   "endraw",   NULL};
                for (int i = 0; stray[i]; i++)
                    if (tok_is_name(cur(p), stray[i]))
                        return err_set(ERR_FORMAT, "template line %d: unexpected '%s'",
                                       cur(p)->line, stray[i]);
            }
            ct_node *s = NULL;
            if ((rc = parse_statement(p, &s)) || (rc = vec_push(p, body, s)))
                return rc;
            if ((rc = expect_type(p, TK_BLOCK_END, "expected end of statement block")))
                return rc;
        } else {
            return fail_at(p, t, "unexpected token");
        }
    }
    if ((rc = flush_output(p, &data, body)))
        return rc;
    p->depth--;
    return 0;
}

int ct_parse(ct_tpl *t, const ct_tok *toks, size_t n_toks) {
    parser p = {.t = t, .toks = toks, .n = n_toks};
    vec body = {0};
    int rc = subparse(&p, NULL, &body);
    if (!rc && cur(&p)->type != TK_EOF)
        rc = fail_at(&p, cur(&p), "unexpected token");
    if (!rc) {
        for (uint32_t i = 0; i < p.unknown.n; i++) {
            const ct_node *n = p.unknown.v[i];
            if (!n->soft) {
                rc = err_set(ERR_FORMAT, "template line %d: No %s named '%.*s'.", n->line,
                             n->kind == N_FILTER ? "filter" : "test", (int)n->len, n->str);
                break;
            }
        }
    }
    if (!rc) {
        ct_node *root = mk(&p, N_OUTPUT, 1);
        if (!root) {
            rc = p_nomem();
        } else {
            set_body(root, &body);
            t->root = root;
            ct_fold(t);
        }
    }
    free(p.hash);
    return rc;
}
