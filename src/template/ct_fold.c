/* SPDX-License-Identifier: MIT */
/*
 * ct_fold: compile-time constant folding, reproducing jinja2's optimizer because it is observable.
 *
 * jinja2 evaluates constant subexpressions when it compiles a template (nodes.Expr.as_const):
 * literals, operators, attribute/item access, filters and tests over constants. Two things
 * follow that a plain evaluator would get wrong:
 *   - while folding, item access goes through the sandbox's getitem, so `{{ 0[:2] }}` renders
 *     as empty instead of raising "'int' object is not subscriptable";
 *   - a folded subexpression is replaced by its value only when that value has a "safe repr"
 *     (None, bool, int, float, str and lists/tuples/dicts of them), but every {{ }} output whose
 *     whole expression folds is turned into text, whatever the value.
 * Anything that fails to fold (names, calls, context filters like select/map, an exception while
 * evaluating) is left for run time, exactly as jinja2 leaves it. Folding is tried by evaluating:
 * in const mode the evaluator refuses names, calls and context filters.
 *
 * Folding evaluates with a private runtime in const mode over a scratch arena; results are deep
 * copied into the template's arena, so the folded AST stays read-only and shareable by threads.
 */
#include "template/ct_int.h"

#include "base/err.h"

#include <string.h>

#define FOLD_MAX_DEPTH 150

typedef struct folder {
    ct_tpl *t;
    arena *tmp;
} folder;

static bool safe_repr(ct_val v, int depth) {
    if (depth > 64)
        return false;
    switch (v.t) {
    case CT_NONE:
    case CT_BOOL:
    case CT_INT:
    case CT_FLOAT:
    case CT_STR:
        return true;
    case CT_LIST:
        if (v.kind != CT_SEQ_LIST && v.kind != CT_SEQ_TUPLE)
            return false;
        for (size_t i = 0; i < v.l->n; i++)
            if (!safe_repr(v.l->items[i], depth + 1))
                return false;
        return true;
    case CT_DICT:
        for (size_t i = 0; i < v.d->n; i++)
            if (!safe_repr(v.d->keys[i], depth + 1) || !safe_repr(v.d->vals[i], depth + 1))
                return false;
        return true;
    default:
        return false;
    }
}

/* Deep copy of a safe-repr value into a. */
static bool copy_val(arena *a, ct_val v, ct_val *out) {
    *out = v;
    switch (v.t) {
    case CT_STR: {
        char *p = arena_alloc(a, v.s.n ? v.s.n : 1);
        if (!p)
            return false;
        if (v.s.n)
            memcpy(p, v.s.p, v.s.n);
        out->s.p = p;
        return true;
    }
    case CT_LIST: {
        ct_list *l = arena_alloc(a, sizeof *l);
        ct_val *items = v.l->n ? arena_alloc(a, v.l->n * sizeof *items) : NULL;
        if (!l || (v.l->n && !items))
            return false;
        *l = *v.l;
        l->items = items;
        for (size_t i = 0; i < v.l->n; i++)
            if (!copy_val(a, v.l->items[i], &items[i]))
                return false;
        out->l = l;
        return true;
    }
    case CT_DICT: {
        ct_dict *d = arena_alloc(a, sizeof *d);
        size_t n = v.d->n;
        ct_val *k = n ? arena_alloc(a, n * sizeof *k) : NULL;
        ct_val *x = n ? arena_alloc(a, n * sizeof *x) : NULL;
        if (!d || (n && (!k || !x)))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!copy_val(a, v.d->keys[i], &k[i]) || !copy_val(a, v.d->vals[i], &x[i]))
                return false;
        d->keys = k;
        d->vals = x;
        d->n = d->cap_keys = d->cap_vals = n;
        out->d = d;
        return true;
    }
    default:
        return true;
    }
}

/* as_const: evaluates n with no variables in scope; false when jinja2 would raise Impossible. */
static bool const_eval(folder *f, const ct_node *n, ct_val *out) {
    strbuf sink;
    strbuf_init(&sink);
    ct_rt rt = {.a = f->tmp, .t = f->t, .out = &sink, .line = n->line, .const_mode = true};
    rt.block_input = ct_undef_val();
    int rc = ct_eval(&rt, n, NULL, out);
    strbuf_deinit(&sink);
    if (rc)
        err_clear();
    return rc == 0;
}

/* Folds the subtree at n; returns true when n itself is constant (as_const succeeds). Children
 * are folded first; then n is evaluated in const mode, where names, calls and context filters
 * fail (jinja2 raises Impossible for them), but short-circuiting and/or/if skip them as in
 * jinja2, whose as_const is lazy too. */
static bool fold_expr(folder *f, ct_node *n, int depth) {
    if (!n || depth > FOLD_MAX_DEPTH)
        return false;
    fold_expr(f, n->a, depth + 1);
    fold_expr(f, n->b, depth + 1);
    fold_expr(f, n->c, depth + 1);
    if (n->kind != N_SLICE) /* a slice's d is the sliced object, owned by the subscript */
        fold_expr(f, n->d, depth + 1);
    for (uint32_t i = 0; i < n->n_kids; i++)
        fold_expr(f, n->kids[i], depth + 1);
    for (uint32_t i = 0; i < n->n_kids2; i++)
        fold_expr(f, n->kids2[i], depth + 1);
    switch (n->kind) {
    case N_CONST:
        return true;
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
    case N_GETATTR:
    case N_GETITEM:
    case N_NOT:
    case N_NEG:
    case N_POS:
    case N_BINOP:
    case N_AND:
    case N_OR:
    case N_CONCAT:
    case N_COMPARE:
    case N_CONDEXPR:
    case N_FILTER:
    case N_TEST:
        break;
    default:
        return false; /* names, calls, and parts (slices, operands, keywords) */
    }
    ct_val v;
    if (!const_eval(f, n, &v))
        return false;
    ct_val copy;
    if (safe_repr(v, 0) && copy_val(f->t->a, v, &copy)) {
        n->kind = N_CONST;
        n->lit = copy;
        n->a = n->b = n->c = n->d = NULL;
        n->kids = n->kids2 = NULL;
        n->n_kids = n->n_kids2 = 0;
    }
    return true;
}

static void fold_body(folder *f, ct_node *const *body, uint32_t n, int depth);

static void fold_output(folder *f, ct_node *n, int depth) {
    for (uint32_t i = 0; i < n->n_kids; i++) {
        ct_node *k = n->kids[i];
        if (k->kind == N_DATA || !fold_expr(f, k, depth + 1))
            continue;
        /* jinja2 renders a constant output child at compile time, whatever its value */
        ct_val v;
        if (k->kind == N_CONST)
            v = k->lit;
        else if (!const_eval(f, k, &v))
            continue;
        strbuf sb;
        strbuf_init(&sb);
        ct_rt rt = {.a = f->tmp, .t = f->t, .line = k->line, .const_mode = true};
        char *text = NULL;
        if (ct_to_str(&rt, v, &sb) == 0 && !strbuf_failed(&sb))
            text = arena_strndup(f->t->a, sb.data, sb.len);
        else
            err_clear();
        if (text) {
            k->kind = N_DATA;
            k->str = text;
            k->len = sb.len;
            k->a = k->b = k->c = k->d = NULL;
            k->kids = k->kids2 = NULL;
            k->n_kids = k->n_kids2 = 0;
        }
        strbuf_deinit(&sb);
    }
}

static void fold_stmt(folder *f, ct_node *n, int depth) {
    if (depth > FOLD_MAX_DEPTH)
        return;
    switch (n->kind) {
    case N_OUTPUT:
        fold_output(f, n, depth);
        return;
    case N_IF:
        fold_expr(f, n->a, depth + 1);
        break;
    case N_FOR: /* n->a is the loop target */
        fold_expr(f, n->b, depth + 1);
        fold_expr(f, n->c, depth + 1);
        break;
    case N_SET:
        fold_expr(f, n->b, depth + 1);
        return;
    case N_SETBLOCK:
    case N_FILTERBLOCK:
        fold_expr(f, n->b, depth + 1);
        break;
    case N_MACRO:
        for (uint32_t i = 0; i < n->n_kids2; i++)
            fold_expr(f, n->kids2[i]->a, depth + 1);
        break;
    case N_WITH:
        for (uint32_t i = 0; i < n->n_kids2; i++)
            fold_expr(f, n->kids2[i]->b, depth + 1);
        break;
    default:
        break;
    }
    fold_body(f, n->kids, n->n_kids, depth + 1);
    if (n->kind == N_IF || n->kind == N_FOR)
        fold_body(f, n->kids2, n->n_kids2, depth + 1);
}

static void fold_body(folder *f, ct_node *const *body, uint32_t n, int depth) {
    for (uint32_t i = 0; i < n; i++)
        fold_stmt(f, body[i], depth);
}

void ct_fold(ct_tpl *t) {
    folder f = {.t = t, .tmp = arena_create(0, 64u << 20)};
    if (!f.tmp)
        return;
    fold_body(&f, t->root->kids, t->root->n_kids, 0);
    arena_destroy(f.tmp);
    err_clear();
}
