/* SPDX-License-Identifier: MIT */
/*
 * json: a strict RFC 8259 parser into an arena-allocated tree, and lookup helpers. Output is
 * written with strbuf_json_str / strbuf_json_num (strbuf.h).
 *
 * The tree is plain data (the fields are public: every layer walks it) and lives exactly as long
 * as the arena it was parsed into. Objects keep their keys in document order (templates and tool
 * schemas are re-serialised in that order); a duplicate key keeps the last value, as Python and
 * JavaScript do, but the order of first appearance. Strings are decoded UTF-8 with explicit
 * lengths (they may contain NUL from \u0000). Numbers keep their source text, a double, and an
 * int64 when the text is an integer that fits. Invalid UTF-8, lone surrogate escapes, trailing
 * garbage and nesting deeper than JSON_MAX_DEPTH are errors naming the byte offset.
 */
#ifndef VERITY_BASE_JSON_H
#define VERITY_BASE_JSON_H

#include "base/arena.h"
#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 128

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    union {
        bool b;
        struct {
            double d;
            int64_t i;
            bool is_int;     /* integer text that fits int64 */
            const char *raw; /* source text of the number (NUL-terminated copy) */
        } num;
        struct {
            const char *s; /* NUL-terminated, may contain NULs before len */
            size_t len;
        } str;
        struct {
            json_value **items;
            size_t n;
            size_t cap; /* slots at items; cap <= n means full (a value filled in by hand) */
        } arr;
        struct {
            const char **keys;
            size_t *key_lens;
            json_value **vals;
            size_t n;
            size_t cap; /* slots at keys, key_lens and vals each; as arr.cap */
        } obj;
    };
};

/* Parses text[0..len) into a tree allocated in a. On success *out is the root. Errors:
 * ERR_FORMAT (syntax, invalid UTF-8, bad escape; detail names the byte offset), ERR_RANGE (deeper
 * than JSON_MAX_DEPTH), ERR_NOMEM (arena exhausted or over its limit). */
int json_parse(arena *a, const char *text, size_t len, json_value **out);

/* Key comparisons json_parse has made on this thread to find duplicate keys (for tests: an object
 * of n keys costs O(n) of them). */
size_t json_key_compares(void);

/* Returns the value of key in an object, or NULL if v is not an object or has no such key. */
const json_value *json_get(const json_value *v, const char *key);

/* Deep equality: same type and value, arrays element by element, objects with the same keys
 * (compared with their lengths) mapping to equal values in any order. Numbers compare as doubles
 * (so 1 and 1.0 are equal). Parsed objects have unique keys; built ones must too. */
bool json_equal(const json_value *a, const json_value *b);

/* Returns v's type name for messages: "null", "boolean", "number", "string", "array", "object". */
const char *json_type_name(const json_type t);

/* Accessors that return 1 and set *out if v is non-NULL and of the right type, else 0. json_get_int
 * accepts numbers that are integers (also 3.0). */
int json_as_bool(const json_value *v, bool *out);
int json_as_double(const json_value *v, double *out);
int json_as_int(const json_value *v, int64_t *out);
int json_as_str(const json_value *v, const char **s, size_t *len);

/* Serialises v compactly (no spaces) into sb: the form used for re-emitting parsed input. */
void json_write(strbuf *sb, const json_value *v);

/* How json_write_styled lays text out. spaced: ", " and ": " between items, as Python's
 * json.dumps does by default (else none); escape_lt / escape_lb: '<' and '[' inside strings as
 * \u003c / \u005b (for output that must not open a tool-call tag or list marker). Strings are
 * otherwise strbuf_json_str's form (non-ASCII raw). */
typedef struct json_style {
    bool spaced, escape_lt, escape_lb;
} json_style;

/* json_write in the given style (NULL: json_write's). */
void json_write_styled(strbuf *sb, const json_value *v, const json_style *st);

/* One string literal in the given style (NULL: strbuf_json_str's). */
void json_write_str(strbuf *sb, const char *s, size_t n, const json_style *st);

/* Builders for trees made in code (arena-allocated; NULL on failure). json_obj_set appends or
 * replaces (it compares key with every existing key: meant for objects of a few keys);
 * json_arr_push appends. Both grow their arrays geometrically (capacity doubles), so building n
 * items costs O(n) time and at most about 4x the final arrays' bytes in the arena, whatever n
 * is. Strings are copied. Two values that share one items array (a struct copy) must not both be
 * pushed to: use json_obj_clone for an object to change. */
json_value *json_new_null(arena *a);
json_value *json_new_bool(arena *a, bool b);
json_value *json_new_num(arena *a, double d);
json_value *json_new_int(arena *a, int64_t i);
json_value *json_new_str(arena *a, const char *s, size_t len);
json_value *json_new_arr(arena *a);
json_value *json_new_obj(arena *a);
int json_arr_push(arena *a, json_value *arr, json_value *item);
int json_obj_set(arena *a, json_value *obj, const char *key, json_value *val);

/* A shallow copy of object obj with its own key and value arrays (keys and values are shared
 * with obj): O(n), for code that copies an object to replace some of its values in place
 * (clone->obj.vals[i] = ...). NULL if obj is not an object or the arena ran out. */
json_value *json_obj_clone(arena *a, const json_value *obj);

#endif
