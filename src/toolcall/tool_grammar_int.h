/* SPDX-License-Identifier: MIT */
/*
 * tool_grammar_int: declarations shared by tool_grammar.c (schemas, response formats, compiling)
 * and tool_grammar_calls.c (the tool-call syntaxes), inside src/toolcall only.
 *
 * A tg_ctx is one walk's state: the AST being built, the limits, the root for $ref, the $ref
 * stack and memo, the path named in errors (tg_push / tg_pop around each step down), cached
 * nodes, and the bytes JSON strings must not contain raw. It lives on the caller's stack for one
 * builder call; nothing in it outlives the AST.
 */
#ifndef VERITY_TOOLCALL_TOOL_GRAMMAR_INT_H
#define VERITY_TOOLCALL_TOOL_GRAMMAR_INT_H

#include "base/strbuf.h"
#include "toolcall/tool_grammar.h"

#include <stdbool.h>
#include <stdint.h>

/* How a tool-call format writes calls (one row per format, registered by its family file in
 * tc_registry.h; tool_grammar_calls.c's header note explains the fields). */
enum tg_params { TG_PARAMS_JSON, TG_PARAMS_QWEN3, TG_PARAMS_GLM, TG_PARAMS_DSML };

typedef struct tg_syntax {
    bool raw_name;         /* NAME written bare, not as a JSON string */
    enum tg_params params; /* how ARGS are written */
    const char *pre, *mid, *post;
    const char *open, *close;
    bool opt_nl; /* an optional newline after open and before close (HERMES) */
} tg_syntax;

#define TG_MAX_DEPTH     64
#define TG_MAX_REFS      32
#define TG_MAX_ANY_DEPTH 8
#define TG_MAX_MEMO      256
#define TG_MAX_VISITS    100000

typedef struct tg_ctx {
    grammar_ast *a;
    tool_grammar_limits lim;
    const json_value *root;
    const json_value *refs[TG_MAX_REFS]; /* $ref targets being expanded */
    int n_refs;
    /* $ref targets already built: a reference used again reuses the node, so a schema whose
     * definitions refer to each other several times cannot make the AST exponential */
    struct {
        const json_value *target;
        grammar_node *node;
    } memo[TG_MAX_MEMO];
    int n_memo;
    int64_t visits; /* schemas walked, bounded by TG_MAX_VISITS */
    int depth;
    char path[640];
    size_t path_len;
    grammar_node *ch;                        /* one JSON string character */
    grammar_node *any[TG_MAX_ANY_DEPTH + 1]; /* any value with containers nested <= d */
    grammar_node *any_key;                   /* a key of a schema-less object */
    bool no_lt; /* strings never contain a raw '<' (written \u003c): a call's closing tag
                   must not appear inside a call, and content beside calls must not start one */
    bool no_lb; /* strings never contain a raw '[' (written \u005b): content beside MISTRAL
                   calls must not start one */
} tg_ctx;

/* Starts a walk: limits (lim NULL: the defaults, clamped), root, and the path where. */
void tg_init(tg_ctx *c, grammar_ast *a, const json_value *root, const char *where,
             const tool_grammar_limits *lim);

/* Appends to the error path; returns the mark tg_pop restores. */
size_t tg_push(tg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tg_pop(tg_ctx *c, size_t mark);

/* err_set(code, "<path>: <message>"); returns code. tg_nomem: ERR_NOMEM the same way. */
int tg_fail(tg_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int tg_nomem(tg_ctx *c);

/* s[0..n) equals the NUL-terminated lit. */
bool tg_is(const char *s, size_t n, const char *lit);

/* A default bound as a repeat maximum: 0 means GRAMMAR_INF. */
int32_t tg_max(int32_t bound);

/* Literal and concatenation nodes (n at most 8). NULL when the AST has failed. */
grammar_node *tg_str(tg_ctx *c, const char *s);
grammar_node *tg_cat(tg_ctx *c, int n, ...);

/* Appends s[0..n) as a JSON string literal in canonical form, honouring no_lt / no_lb. */
void tg_json_str(const tg_ctx *c, strbuf *sb, const char *s, size_t n);

/* One well-formed multi-byte UTF-8 character. */
grammar_node *tg_utf8(tg_ctx *c);

/* A JSON string of min..max characters (max GRAMMAR_INF: unbounded). */
grammar_node *tg_string(tg_ctx *c, int32_t min, int32_t max);

/* ERR_UNSUPPORTED for a keyword of schema s outside the subset (tool_grammar.h). */
int tg_check_keywords(tg_ctx *c, const json_value *s);

/* [lo, hi] from the integer keywords min_kw / max_kw of s, with def as the maximum when absent
 * and cap as the highest maximum; ERR_INVAL / ERR_UNSUPPORTED as tool_grammar.h says. */
int tg_counts(tg_ctx *c, const json_value *s, const char *min_kw, const char *max_kw, int32_t def,
              int32_t cap, int32_t *lo, int32_t *hi);

/* The "properties" (*props: an object, or NULL) and "required" (*req: an array of strings, or
 * NULL) of object schema s, JSON null counting as absent. Returns 0, or ERR_INVAL through tg_fail
 * when either has another type. */
int tg_object_members(tg_ctx *c, const json_value *s, const json_value **props,
                      const json_value **req);

/* The expression of a JSON object valid under object schema s (keywords already checked). */
int tg_object(tg_ctx *c, const json_value *s, grammar_node **out);

/* The expression of a JSON value valid under schema s (NULL: any value). */
int tg_schema(tg_ctx *c, const json_value *s, grammar_node **out);

/* tg_schema of sub-schema s, with fmt's text appended to the error path meanwhile; s NULL: any
 * value up to the limits' any_depth (nothing is pushed). */
int tg_schema_at(tg_ctx *c, const json_value *s, grammar_node **out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
