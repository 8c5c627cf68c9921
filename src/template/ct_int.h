/* SPDX-License-Identifier: MIT */
/*
 * ct_int: declarations shared by the files of the chat-template engine (src/template/ct_*.c) and by
 * nothing else. The public contract is chat_template.h.
 *
 * The engine is a tree-walking interpreter for the subset of Jinja2 that chat templates use, with
 * Python's semantics where the output depends on them (jinja2 runs on Python objects: str, int,
 * float, list, dict, None, its Undefined, Markup from |safe). Pieces:
 *
 *   ct_lex.c     source text -> tokens, exactly as jinja2's lexer (trim_blocks, lstrip_blocks,
 *                whitespace control, raw blocks, comments, newline normalisation)
 *   ct_parse.c   tokens -> AST (ct_node), a port of jinja2's recursive-descent parser
 *   ct_value.c   the value model: constructors, truthiness, equality, ordering, str()/repr()
 *   ct_pystr.c   Python string helpers over UTF-8: code points, isspace, case mapping, repr
 *   ct_json.c    JSON <-> values, json.dumps formatting (|tojson), Python float repr
 *   ct_fold.c    compile-time constant folding, as jinja2's optimizer does it
 *   ct_eval.c    expressions and statements, scopes, macros, loops, limits
 *   ct_filters.c filters
 *   ct_tests.c   tests (`is defined`, `is string`, ...)
 *   ct_methods.c str/dict/list methods, globals (range, namespace, dict, strftime_now)
 *   ct_format.c  str.format() and printf-style "%" formatting
 *
 * Memory: a template's tokens and AST live in the template's arena (read-only after create, so
 * one template may be rendered by many threads at once). Everything a render creates (values,
 * scopes, strings) lives in that render's own arena and dies with it. Values are small structs
 * passed by value; strings point either into the template, into the caller's JSON tree or into
 * the render arena, and are never mutated.
 */
#ifndef VERITY_TEMPLATE_CT_INT_H
#define VERITY_TEMPLATE_CT_INT_H

#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits (a hostile template fails with ERR_TOOLARGE, never crashes) -----------------------
 */

#define CT_MAX_PARSE_DEPTH 96           /* nesting of expressions and blocks in the source */
#define CT_MAX_CALL_DEPTH  48           /* nested macro calls at render time */
#define CT_MAX_EVAL_DEPTH  1000         /* nested evaluation frames (bounds C stack use) */
#define CT_MAX_OUTPUT      (16u << 20)  /* bytes of rendered output (and of any one string) */
#define CT_MAX_STEPS       20000000ull  /* evaluation steps per render (loop turns, element ops) */
#define CT_MAX_ARENA       (512u << 20) /* bytes a render may allocate */
#define CT_MAX_SOURCE      (4u << 20)   /* bytes of template source */

/* ---- values ------------------------------------------------------------------------------------
 */

typedef enum ct_type {
    CT_UNDEF,
    CT_NONE,
    CT_BOOL,
    CT_INT,
    CT_FLOAT,
    CT_STR,
    CT_LIST, /* list, tuple, generator, dict views: see ct_seq_kind */
    CT_DICT,
    CT_NS, /* jinja2 namespace(): a mutable attribute map */
    CT_MACRO,
    CT_FUNC, /* a builtin callable: a global function or a bound method */
    CT_LOOP, /* the `loop` object of a for loop */
} ct_type;

/* Kinds of CT_LIST. They differ in repr, truthiness, len() and subscripting, as in Python. */
typedef enum ct_seq_kind {
    CT_SEQ_LIST,
    CT_SEQ_TUPLE,
    CT_SEQ_GEN,    /* a generator (select, map, items filter...): always true, no len */
    CT_SEQ_ITEMS,  /* dict_items */
    CT_SEQ_KEYS,   /* dict_keys */
    CT_SEQ_VALUES, /* dict_values */
    CT_SEQ_RANGE,  /* range(a, b, c): a list that prints as range(...) */
} ct_seq_kind;

typedef struct ct_list ct_list;
typedef struct ct_dict ct_dict;
typedef struct ct_undef ct_undef;
typedef struct ct_func ct_func;
typedef struct ct_macro ct_macro;
typedef struct ct_loop ct_loop;

typedef struct ct_val {
    uint8_t t;    /* ct_type */
    uint8_t kind; /* CT_STR: 1 if Markup (|safe); CT_LIST: ct_seq_kind; CT_FLOAT: 1 for a JSON
                     integer too large for int64 (computed as a double, printed from raw) */
    union {
        bool b;
        int64_t i;
        struct {
            double f;
            const char *raw; /* CT_FLOAT kind 1: the integer's digits */
        };
        struct {
            const char *p; /* UTF-8, not NUL-terminated */
            size_t n;
        } s;
        ct_list *l;
        ct_dict *d; /* CT_DICT and CT_NS */
        ct_undef *u;
        ct_func *fn;
        ct_macro *m;
        ct_loop *loop;
    };
} ct_val;

struct ct_list {
    ct_val *items;
    size_t n;
    int64_t range[3];     /* CT_SEQ_RANGE: start, stop, step */
    const char *pending;  /* CT_SEQ_GEN: the error consuming this generator raises (jinja2's
                             select/map/... are lazy: their errors surface only when iterated) */
    const char *gen_type; /* CT_SEQ_GEN: Python type name ("generator", "list_reverseiterator") */
    const char *gen_func; /* CT_SEQ_GEN of type generator: the function ("select_or_reject") */
};

struct ct_dict {
    ct_val *keys;
    ct_val *vals;
    size_t n, cap_keys, cap_vals;
};

/* Why a value is undefined, for jinja2's error message when it is used. */
enum {
    CT_UNDEF_NAME,   /* 'x' is undefined */
    CT_UNDEF_ATTR,   /* 'dict object' has no attribute 'x' */
    CT_UNDEF_ELEM,   /* list object has no element 3 */
    CT_UNDEF_HINT,   /* a fixed message */
    CT_UNDEF_UNSAFE, /* sandbox: access to attribute 'append' of 'list' object is unsafe. */
};

struct ct_undef {
    int why;
    const char *obj_type; /* "dict object", "None", ... */
    ct_val name;          /* the name, attribute or index */
    const char *hint;
};

struct ct_func {
    int id;      /* CT_FN_* (ct_methods.c) */
    ct_val self; /* bound object, or CT_NONE for globals */
    const char *name;
};

/* ---- AST ---------------------------------------------------------------------------------------
 */

typedef enum ct_nkind {
    /* expressions */
    N_CONST,    /* lit */
    N_NAME,     /* str: name, sym */
    N_LIST,     /* kids */
    N_TUPLE,    /* kids */
    N_DICT,     /* kids: keys, kids2: values */
    N_GETATTR,  /* a: object, str: attribute */
    N_GETITEM,  /* a: object, b: index (may be N_SLICE) */
    N_SLICE,    /* a, b, c: start, stop, step (each may be NULL); d: the sliced object */
    N_CALL,     /* a: callee, kids: args, kids2: N_KW, c: *args, d: **kwargs */
    N_KW,       /* str: keyword, a: value */
    N_FILTER,   /* a: input (NULL in filter/set blocks), str: name, fid, kids, kids2, c, d */
    N_TEST,     /* a: input, str: name, fid, kids, kids2 */
    N_NOT,      /* a */
    N_NEG,      /* a */
    N_POS,      /* a */
    N_BINOP,    /* op: CT_OP_*, a, b */
    N_AND,      /* a, b */
    N_OR,       /* a, b */
    N_CONCAT,   /* kids */
    N_COMPARE,  /* a: first, kids: N_OPERAND */
    N_OPERAND,  /* op: CT_CMP_*, a */
    N_CONDEXPR, /* a: test, b: value if true, c: value if false (may be NULL) */
    N_NSREF,    /* str: namespace name, sym, str2: attribute (assignment targets only) */
    /* statements */
    N_DATA,        /* str: template text */
    N_OUTPUT,      /* kids: N_DATA or expressions */
    N_IF,          /* a: test, kids: body, kids2: else body (an elif is an N_IF alone in it) */
    N_FOR,         /* a: target, b: iterable, c: filter test, kids: body, kids2: else;
                      op: 1 when the body defines a macro (frames may be captured) */
    N_SET,         /* a: target, b: value */
    N_SETBLOCK,    /* a: target, b: filter chain or NULL, kids: body */
    N_MACRO,       /* str: name, sym, kids: body, kids2: params (N_NAME, a: default or NULL) */
    N_GENERATION,  /* kids: body (HF's {% generation %}: rendered as a caller macro) */
    N_FILTERBLOCK, /* b: filter chain, kids: body */
    N_WITH,        /* kids2: N_SET assignments, kids: body */
    N_BREAK,
    N_CONTINUE,
} ct_nkind;

enum { CT_OP_ADD, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV, CT_OP_FLOORDIV, CT_OP_MOD, CT_OP_POW };
enum { CT_CMP_EQ, CT_CMP_NE, CT_CMP_LT, CT_CMP_LE, CT_CMP_GT, CT_CMP_GE, CT_CMP_IN, CT_CMP_NOTIN };

typedef struct ct_node ct_node;
struct ct_node {
    uint8_t kind; /* ct_nkind */
    uint8_t op;
    bool soft; /* N_FILTER/N_TEST with unknown name: jinja2 defers the error to run time */
    int line;
    int sym; /* N_NAME, N_NSREF, N_MACRO: symbol id */
    int fid; /* N_FILTER/N_TEST: builtin id, -1 unknown */
    ct_node *a, *b, *c, *d;
    ct_node **kids, **kids2;
    uint32_t n_kids, n_kids2;
    const char *str, *str2;
    size_t len, len2;
    ct_val lit;
};

/* ---- tokens ------------------------------------------------------------------------------------
 */

typedef enum ct_tkind {
    TK_EOF,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
} ct_tkind;

/* Operator token codes (TK_OP). */
enum {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GTEQ,
    OP_LT,
    OP_LTEQ,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON,
};

typedef struct ct_tok {
    uint8_t type; /* ct_tkind */
    uint8_t op;   /* TK_OP */
    int line;
    const char *p; /* TK_DATA, TK_NAME: source text; TK_STRING: decoded value (arena) */
    size_t n;
    int64_t i; /* TK_INT */
    double f;  /* TK_FLOAT */
} ct_tok;

/* Tokenises src[0..n) (valid UTF-8) into an arena array. Returns 0, ERR_FORMAT (message names the
 * line), ERR_TOOLARGE or ERR_NOMEM. The normalised source is kept in the arena; tokens point
 * into it. */
int ct_lex(arena *a, const char *src, size_t n, ct_tok **toks, size_t *n_toks);

/* ---- the parsed template -----------------------------------------------------------------------
 */

/* The names a template mentions, interned at parse time: scopes key variables by symbol id. */
typedef struct ct_syms {
    const char **names;
    size_t *lens;
    int n;
    size_t cap_names, cap_lens;
} ct_syms;

typedef struct ct_tpl {
    arena *a;
    ct_node *root; /* an N_OUTPUT node whose kids are the top-level statements */
    ct_syms syms;
    int sym_loop;    /* symbol of `loop`, -1 when the template never mentions it */
    int object_args; /* cached probe result, see chat_template.c */
} ct_tpl;

/* Folds constant subexpressions the way jinja2's optimizer does (ct_fold.c). Never fails: a
 * subexpression that cannot be folded is left for run time. */
void ct_fold(ct_tpl *t);

/* Parses tokens into t->root. Errors: ERR_FORMAT (syntax), ERR_UNSUPPORTED (a construct the
 * engine does not implement), ERR_TOOLARGE (nesting), ERR_NOMEM. Messages name the line. */
int ct_parse(ct_tpl *t, const ct_tok *toks, size_t n_toks);

/* Returns the symbol id of name, or -1 if the template never mentions it. */
int ct_sym_find(const ct_syms *s, const char *name, size_t len);

/* Builtin filter and test ids by name (ct_filters.c); -1 when jinja2 has no such filter/test.
 * *known_unsupported is set when jinja2 has it but this engine does not. */
int ct_filter_id(const char *name, size_t len, bool *known_unsupported);
/* True for filters jinja2 runs with the render context (select, reject, selectattr, rejectattr,
 * map): they are never folded at compile time. */
bool ct_filter_needs_context(int fid);
int ct_test_id(const char *name, size_t len, bool *known_unsupported);

/* ---- render state ------------------------------------------------------------------------------
 */

typedef struct ct_scope ct_scope;
struct ct_scope {
    ct_scope *parent;
    int *syms;
    ct_val *vals;
    uint32_t n;
    size_t cap_syms, cap_vals;
};

struct ct_macro {
    const ct_node *def; /* N_MACRO or N_GENERATION */
    ct_scope *closure;
};

struct ct_loop {
    const ct_val *items; /* the (filtered) sequence being iterated */
    size_t n;
    size_t i;
};

typedef struct ct_rt {
    arena *a;
    const ct_tpl *t;
    strbuf *out; /* where output statements write now */
    ct_scope *root;
    int64_t now_unix;
    uint64_t steps;
    int call_depth;
    int eval_depth;     /* nesting of ct_eval/ct_exec frames: bounds C stack use */
    ct_val block_input; /* the captured body that a filter/set block's filter chain starts from */
    int line;           /* line of the node being evaluated, for messages */
    /* loop control signal while unwinding a body: 0, N_BREAK or N_CONTINUE */
    int loop_ctl;
    bool const_mode; /* folding constants at parse time (ct_fold.c) */
} ct_rt;

/* Runtime errors: every one names the template line. raise_exception's message is kept verbatim
 * (the detail is the message alone). */
int ct_error(ct_rt *rt, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ct_charge(ct_rt *rt, uint64_t steps);

/* ---- ct_value.c --------------------------------------------------------------------------------
 */

static inline ct_val ct_undef_val(void) {
    ct_val v = {.t = CT_UNDEF};
    v.u = NULL;
    return v;
}
static inline ct_val ct_none(void) {
    ct_val v = {.t = CT_NONE};
    v.i = 0;
    return v;
}
static inline ct_val ct_bool(bool b) {
    ct_val v = {.t = CT_BOOL};
    v.b = b;
    return v;
}
static inline ct_val ct_int(int64_t i) {
    ct_val v = {.t = CT_INT};
    v.i = i;
    return v;
}
static inline ct_val ct_float(double f) {
    ct_val v = {.t = CT_FLOAT};
    v.f = f;
    v.raw = NULL;
    return v;
}
static inline ct_val ct_str(const char *p, size_t n) {
    ct_val v = {.t = CT_STR};
    v.s.p = p;
    v.s.n = n;
    return v;
}
static inline ct_val ct_cstr(const char *p);
static inline bool ct_is_num(ct_val v) {
    return v.t == CT_INT || v.t == CT_FLOAT || v.t == CT_BOOL;
}

ct_val ct_undef_make(ct_rt *rt, int why, const char *obj_type, ct_val name, const char *hint);
int ct_undef_fail(ct_rt *rt, ct_val u); /* raises the UndefinedError this undefined carries */
int ct_list_new(ct_rt *rt, size_t n, int kind, ct_val *out); /* items zeroed (undefined) */
int ct_dict_new(ct_rt *rt, size_t cap, ct_val *out);
/* Inserts or replaces key (Python equality). */
int ct_dict_set(ct_rt *rt, ct_dict *d, ct_val key, ct_val val);
/* Looks key up; returns true and *out if found. */
bool ct_dict_get(ct_rt *rt, const ct_dict *d, ct_val key, ct_val *out);
bool ct_dict_get_str(const ct_dict *d, const char *k, size_t n, ct_val *out);
int ct_str_new(ct_rt *rt, const char *p, size_t n, ct_val *out); /* copies into the arena */
int ct_str_cat(ct_rt *rt, ct_val a, ct_val b, ct_val *out);      /* strings only */

bool ct_truthy(ct_val v);
/* Python ==. Never fails except on the step budget. */
int ct_equal(ct_rt *rt, ct_val a, ct_val b, bool *out);
/* Python <, for sort/min/max and the comparison operators; TypeError for unorderable pairs.
 * *out is -1, 0 or 1. */
int ct_compare(ct_rt *rt, ct_val a, ct_val b, const char *op, int *out);
/* Python's type name ("int", "str", "NoneType", "Undefined", ...). */
const char *ct_type_name(ct_val v);
/* jinja2's object_type_repr ("dict object", "None", "jinja2.utils.Namespace object"). */
const char *ct_obj_type_repr(ct_val v);
/* Appends str(v) / repr(v) to sb. */
int ct_to_str(ct_rt *rt, ct_val v, strbuf *sb);
int ct_to_repr(ct_rt *rt, ct_val v, strbuf *sb);
/* str(v) as a value (strings pass through; Markup stays Markup). */
int ct_stringify(ct_rt *rt, ct_val v, ct_val *out);
/* Materialises an iterable (list kinds, dict keys, string chars) into items; TypeError otherwise;
 * an undefined iterates as empty. */
int ct_iterate(ct_rt *rt, ct_val v, const ct_val **items, size_t *n);
/* len(v) or TypeError. */
int ct_length(ct_rt *rt, ct_val v, int64_t *out);
/* Copies sb into the render arena as a string value and resets sb. */
int ct_str_from_buf(ct_rt *rt, strbuf *sb, ct_val *out);
/* The same as a string of kind `kind` (1: Markup), and deinits sb: how a builder's text becomes
 * its result. */
int ct_str_take(ct_rt *rt, strbuf *sb, int kind, ct_val *out);
int ct_hash_check(ct_rt *rt, ct_val key); /* TypeError: unhashable type */

static inline ct_val ct_cstr(const char *p) {
    size_t n = 0;
    while (p[n])
        n++;
    return ct_str(p, n);
}

/* ---- ct_pystr.c --------------------------------------------------------------------------------
 */

bool ct_py_isspace(uint32_t cp);
size_t ct_utf8_count(const char *p, size_t n);
/* Byte offset of code point index ci (0..count) in p[0..n). */
size_t ct_utf8_offset(const char *p, size_t n, size_t ci);
/* Decodes the code point at p[*i] (valid UTF-8) and advances *i. */
uint32_t ct_utf8_next(const char *p, size_t n, size_t *i);
void ct_utf8_put(strbuf *sb, uint32_t cp);
uint32_t ct_lower_cp(uint32_t cp);
uint32_t ct_upper_cp(uint32_t cp);
bool ct_is_alpha_cp(uint32_t cp);
bool ct_is_upper_cp(uint32_t cp);
bool ct_is_lower_cp(uint32_t cp);
/* Python str methods; results into sb. */
void ct_py_lower(strbuf *sb, const char *p, size_t n);
void ct_py_upper(strbuf *sb, const char *p, size_t n);
void ct_py_title(strbuf *sb, const char *p, size_t n);
void ct_py_capitalize(strbuf *sb, const char *p, size_t n);
/* Python strip/lstrip/rstrip: chars NULL means whitespace. which: 1 left, 2 right, 3 both. */
void ct_py_strip(const char *p, size_t n, const char *chars, size_t n_chars, int which, size_t *off,
                 size_t *len);
/* Python repr() of a str. */
void ct_py_repr_str(strbuf *sb, const char *p, size_t n);
/* Appends Markup-escaped text (& < > ' "). */
void ct_html_escape(strbuf *sb, const char *p, size_t n);
/* Finds needle in hay from byte offset from; returns the byte offset or -1. */
ptrdiff_t ct_memfind(const char *hay, size_t n, const char *needle, size_t m, size_t from);
/* True when s[0..n) is the C string lit. */
bool ct_name_is(const char *s, size_t n, const char *lit);
/* A name and the id it stands for: the tables of methods, globals and tests. */
typedef struct ct_named {
    const char *name;
    int id;
} ct_named;
/* The row of t[0..n) (names unique) named name[0..len), or NULL. */
const ct_named *ct_named_find(const ct_named *t, size_t n, const char *name, size_t len);

/* ---- ct_json.c ---------------------------------------------------------------------------------
 */

/* Converts a JSON tree into values (deep, into the render arena). */
int ct_from_json(ct_rt *rt, const json_value *j, ct_val *out);
/* Appends Python's repr(float). */
void ct_float_repr(strbuf *sb, double d);
/* Appends the scalar v (None, a bool, an int or a float) as Python's str() writes it (python:
 * None, True, 1.5, nan) or as json.dumps does (null, true, 1.5, NaN). Returns false, appending
 * nothing, when v is of another type. */
bool ct_scalar_write(strbuf *sb, ct_val v, bool python);

typedef struct ct_dumps_opts {
    bool ensure_ascii;
    bool sort_keys;
    int indent;           /* -1: none */
    const char *indent_s; /* string indent (when not NULL) */
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} ct_dumps_opts;

/* json.dumps(v, ...) into sb. TypeError for values JSON cannot hold. */
int ct_dumps(ct_rt *rt, ct_val v, const ct_dumps_opts *o, strbuf *sb);

/* ---- ct_eval.c ---------------------------------------------------------------------------------
 */

int ct_eval(ct_rt *rt, const ct_node *n, ct_scope *sc, ct_val *out);
int ct_exec_body(ct_rt *rt, ct_node *const *body, uint32_t n, ct_scope *sc);
ct_scope *ct_scope_new(ct_rt *rt, ct_scope *parent);
int ct_scope_set(ct_rt *rt, ct_scope *sc, int sym, ct_val v);
/* Python's x % y of integers (the sign of y; no overflow for y == -1): 0 and *out, or ERR_INVAL
 * ("integer modulo by zero") when y is 0. The % operator's and the divisibleby test's. */
int ct_int_mod(ct_rt *rt, int64_t x, int64_t y, int64_t *out);
/* jinja2 environment.getattr / getitem semantics (sandboxed). */
int ct_getattr(ct_rt *rt, ct_val obj, const char *name, size_t len, ct_val *out);
int ct_getitem(ct_rt *rt, ct_val obj, ct_val key, ct_val *out);
/* Calls a callable value with evaluated arguments. */
int ct_call_value(ct_rt *rt, ct_val fn, const ct_val *args, size_t n_args, const char **kw_names,
                  const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, ct_val *out);

/* ---- ct_filters.c, ct_tests.c ------------------------------------------------------------------
 */

/* Applies filter fid to input with evaluated arguments. */
int ct_filter_apply(ct_rt *rt, const ct_node *n, ct_val input, const ct_val *args, size_t n_args,
                    const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals,
                    size_t n_kw, ct_val *out);
int ct_test_apply(ct_rt *rt, int tid, const char *name, ct_val input, const ct_val *args,
                  size_t n_args, bool *out);
int ct_test_by_name(ct_rt *rt, const char *name, size_t len, ct_val input, const ct_val *args,
                    size_t n_args, bool *out);

/* ---- ct_methods.c ------------------------------------------------------------------------------
 */

/* Global function ids. */
enum {
    CT_FN_RANGE = 1,
    CT_FN_NAMESPACE,
    CT_FN_DICT,
    CT_FN_RAISE,
    CT_FN_STRFTIME,
    CT_FN_LOOP_CYCLE,
    CT_FN_LOOP_CHANGED,
    CT_FN_METHOD_BASE = 100, /* bound methods: CT_FN_METHOD_BASE + method id */
};

/* Looks up a method of a str/dict/list value; returns true and a bound CT_FUNC value if the
 * attribute names a safe method, sets *unsafe when it names a method the sandbox forbids. */
bool ct_method_lookup(ct_rt *rt, ct_val self, const char *name, size_t len, ct_val *out,
                      bool *unsafe);
int ct_func_call(ct_rt *rt, const ct_func *fn, const ct_val *args, size_t n_args,
                 const char **kw_names, const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw,
                 ct_val *out);
/* Returns the global function named by sym, if any. */
bool ct_global_lookup(ct_rt *rt, const char *name, size_t len, ct_val *out);
/* Python's s.replace(old, nw, count) of strings s, old and nw (count < 0: every occurrence), the
 * str method's and the replace filter's: a new string of kind `kind` in *out. Returns 0,
 * ERR_TOOLARGE when the result passes CT_MAX_OUTPUT, ERR_NOMEM. */
int ct_str_replace(ct_rt *rt, ct_val s, ct_val old, ct_val nw, int64_t count, int kind,
                   ct_val *out);
/* Python str.format(*args, **kwargs) with jinja2's sandboxed formatter. */
int ct_str_format(ct_rt *rt, ct_val fmt, const ct_val *args, size_t n_args, const char **kw_names,
                  const size_t *kw_lens, const ct_val *kw_vals, size_t n_kw, ct_val *out);
/* Python's "fmt % args" for strings. */
int ct_str_percent(ct_rt *rt, ct_val fmt, ct_val args, ct_val *out);

#endif
