/* SPDX-License-Identifier: MIT */
/*
 * chat_tools_int: declarations shared by the tool-call parser's files inside src/toolcall.
 *
 *   chat_tools.c        the parser object, the generic outside-a-call scanner and the helpers
 *                       below (calls, JSON spans, raw-value typing, errors)
 *   tc_registry.c       the one table of families: detection, names, markers, syntaxes
 *   tc_<family>.c       one file per family (tc_registry.h lists them): its call regions, its
 *                       grammar rows, its detection rule
 *
 * How a format plugs in (ctp_syntax): its markers (the first n_open open a call), a region
 * function that consumes a call region from the start of the pending buffer (or a ctp_section,
 * whose regions the generic section reader consumes), and, for LLAMA3
 * only, a lead function: the rule for a call that starts without a marker at the beginning of
 * the output. The generic scanner (chat_tools.c) does everything outside calls.
 *
 * A region function sees p->pending starting at the region (the opening marker, or the '{' the
 * lead rule found) and returns CTP_NEED (wait for more text; with eof set there is none, so
 * it must finish or fail), CTP_DONE (the region is over and consumed: back outside), CTP_TEXT
 * (LLAMA3: the region was not a call after all; nothing is consumed, the lead rule no longer
 * applies and the generic scanner reads the same text as content) or a negative error (ERR_FORMAT
 * through ctp_fail, ERR_NOMEM). It may consume completed calls as it goes and keeps its own state
 * in p->sub, p->scan, p->span, p->r0, p->r1 and p->region_calls, which are zero when a region
 * starts.
 */
#ifndef VERITY_TOOLCALL_CHAT_TOOLS_INT_H
#define VERITY_TOOLCALL_CHAT_TOOLS_INT_H

#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "toolcall/chat_tools.h"

#include <stdbool.h>
#include <stddef.h>

/* region / lead results */
#define CTP_NEED   0
#define CTP_DONE   1
#define CTP_TEXT   2 /* lead: not a call, the text is content */
#define CTP_REGION 3 /* lead: a call region starts after *skip bytes */

/* Incremental scanner for the end of one JSON object, array or string (the bytes only: the
 * value is validated by json_parse once complete). */
typedef struct ctp_span {
    size_t pos; /* bytes of the text already scanned */
    int depth;  /* open containers */
    bool in_str, esc, started;
} ctp_span;

/* A section of calls (DEEPSEEK, KIMI_K2, DSML): [begin] (call_begin BODY call_end)* end,
 * whitespace between; body parses one call, BODY being the text between the two markers. The
 * section may also start with call_begin directly, and at the end of the output a section with at
 * least one call needs no end marker. begin2 and end2, when not NULL, are a second spelling of
 * begin and end (DSML's function_calls and tool_calls). chat_tools.c reads sections for every
 * format whose ctp_syntax names one. */
typedef struct ctp_section {
    const char *family; /* for messages */
    const char *begin, *begin2, *call_begin, *call_end, *end, *end2;
    int (*body)(chat_tool_parser *p, const char *s, size_t n);
} ctp_section;

typedef struct ctp_syntax {
    const char *const *markers;
    int n_markers;
    int n_open;
    int (*region)(chat_tool_parser *p, strbuf *content, bool eof);
    /* Called outside a call while p->lead is set: CTP_NEED, CTP_TEXT, or CTP_REGION with *skip
     * bytes of content (whitespace) before the region, which starts with *sep bytes of
     * separator (LLAMA3's ';'): the region gets them in p->r0 and consumes them with a call. */
    int (*lead)(chat_tool_parser *p, bool eof, size_t *skip, size_t *sep);
    const ctp_section *section; /* region NULL: the regions are sections of calls */
} ctp_syntax;

enum ctp_state { CTP_OUTSIDE, CTP_INSIDE, CTP_FAILED };

struct chat_tool_parser {
    chat_tool_format f;
    const ctp_syntax *syn;
    enum ctp_state st;
    bool lead;        /* the format's lead rule applies at the start of pending */
    bool after_call;  /* at least one call has completed */
    int sub;          /* region state */
    size_t scan;      /* region: bytes of pending already searched for a closing marker */
    ctp_span span;    /* region: the JSON value being delimited */
    size_t r0, r1;    /* region: offsets it remembers */
    int region_calls; /* region: calls completed in it */
    strbuf pending;   /* text not yet released or consumed */
    char tail[64];    /* the longest suffix of the content released so far that is a proper */
    size_t tail_len;  /* prefix of a marker (non-empty only right before a call region) */
    chat_tool_call *calls;
    int n_calls;
    size_t cap_calls;
    arena *tools_a;          /* owns tools */
    const json_value *tools; /* set_tools's copy, or NULL */
    char error[384];         /* the failure, for finish */
    int fail_rc;             /* its code (ERR_FORMAT, ERR_NOMEM) */
};

/* ---- shared between family files ---- */

#define TC_TAG_OPEN  "<tool_call>"
#define TC_TAG_CLOSE "</tool_call>"
#define TC_FN_OPEN   "<function="
#define TC_FN_CLOSE  "</function>"

/* The <tool_call> region reader of HERMES, QWEN3_XML and GLM (tc_hermes.c). */
int ctp_tag_region(chat_tool_parser *p, strbuf *content, bool eof);

/* One <tool_call> body of each shape, s[0..n) trimmed, values in a: <function=NAME>...
 * (tc_qwen3_xml.c) and NAME<arg_key>... (tc_glm.c). Return 0, ERR_FORMAT (through ctp_fail),
 * ERR_NOMEM. */
int ctp_qwen3_xml_call(chat_tool_parser *p, arena *a, const char *s, size_t n);
int ctp_glm_call(chat_tool_parser *p, arena *a, const char *s, size_t n);

/* ---- helpers (chat_tools.c) ---- */

/* Removes the first n bytes of p->pending. */
void ctp_consume(chat_tool_parser *p, size_t n);

/* 1 when s[0..n) starts with lit, 0 when s is a proper prefix of lit (more text could decide),
 * -1 otherwise. */
int ctp_starts(const char *s, size_t n, const char *lit);

/* Index of the first non-whitespace byte of s[from..n) (space, tab, CR, LF), or n. */
size_t ctp_skip_ws(const char *s, size_t n, size_t from);

/* s[0..n) without leading and trailing whitespace: *b is the first kept byte, returns the
 * length. */
size_t ctp_trim(const char *s, size_t n, const char **b);

/* Finds lit in s[from..n): its offset, or n when absent. */
size_t ctp_find(const char *s, size_t n, size_t from, const char *lit);

/* Advances sp over t[0..n) (sp->pos is where it resumes; t[0] must be '{', '[' or '"'). Returns
 * 1 and *end (one past the value's last byte) when the value is complete, 0 when more text is
 * needed, -1 when t does not start a JSON object, array or string, or closes more than it
 * opened. */
int ctp_span_scan(ctp_span *sp, const char *t, size_t n, size_t *end);

/* Writes byte c for a message into buf (8 bytes): 'c' when printable ASCII, else \xNN. Messages
 * about text that was rejected as soon as one byte ruled it out name that byte only, so they do
 * not depend on how much text had arrived. */
const char *ctp_byte(char *buf, char c);

/* Fails the parser: records the message (also for finish) and returns ERR_FORMAT. */
int ctp_fail(chat_tool_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes a printable excerpt of s[0..n) (at most 48 bytes, control bytes as \xNN, "..." when
 * cut) into buf. */
const char *ctp_excerpt(char *buf, size_t cap, const char *s, size_t n);

/* Appends a call named name[0..nl) with arguments args (an object; NULL means {}). Returns 0,
 * ERR_FORMAT (empty name), ERR_NOMEM. */
int ctp_add_call(chat_tool_parser *p, const char *name, size_t nl, const json_value *args);

/* Appends the call held by a JSON object {"name": N, "arguments" | "parameters": object or a
 * JSON string of an object} (other members are ignored). what names the text in errors
 * ("<tool_call> body"). Returns 0, ERR_FORMAT, ERR_NOMEM. */
int ctp_add_json_call(chat_tool_parser *p, arena *a, const json_value *v, const char *what);

/* Parses text[0..n) as JSON into *v (values in a). Returns 0, ERR_FORMAT through ctp_fail ("<what>
 * is not valid JSON (<why>): <excerpt>"), ERR_NOMEM. */
int ctp_parse_json(chat_tool_parser *p, arena *a, const char *text, size_t n, const char *what,
                   json_value **v);

/* Parses text[0..n) as such an object and appends the call. */
int ctp_add_json_text(chat_tool_parser *p, const char *text, size_t n, const char *what);

/* Appends a call named name[0..nl) whose arguments are text[0..n), parsed by ctp_parse_args.
 * Returns 0, ERR_FORMAT (through ctp_fail), ERR_NOMEM. */
int ctp_add_args_text(chat_tool_parser *p, const char *name, size_t nl, const char *text, size_t n);

/* Parses a call's arguments text (an object, or a JSON string holding one) into *out. */
int ctp_parse_args(chat_tool_parser *p, arena *a, const char *name, size_t nl, const char *text,
                   size_t n, const json_value **out);

/* The value of a raw parameter text of tool `tool`: is_string 1 keeps the text, 0 parses it as
 * JSON (ERR_FORMAT naming the parameter when it does not parse), -1 decides by the tools given to
 * set_tools or, without them, the heuristic of chat_tools.h. Returns 0 and *out, ERR_FORMAT,
 * ERR_NOMEM. */
int ctp_raw_value(chat_tool_parser *p, arena *a, const char *tool, const char *key, const char *raw,
                  size_t n, int is_string, json_value **out);

/* A name as the XML forms write it: non-empty, at most 256 bytes, no markup or whitespace. */
bool ctp_name_ok(const char *s, size_t n);

/* Sets key k[0..kl) of obj to the typed raw value (ctp_raw_value). Returns 0, ERR_FORMAT,
 * ERR_NOMEM. */
int ctp_set_raw(chat_tool_parser *p, arena *a, json_value *obj, const char *tool, const char *k,
                size_t kl, const char *v, size_t vl, int is_string);

/* A fresh arena for one call's values. NULL when out of memory (after ctp_fail-style err_set). */
arena *ctp_arena(void);

#endif
