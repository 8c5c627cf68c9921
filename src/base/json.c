/* SPDX-License-Identifier: MIT */
/*
 * json: recursive-descent parser (depth bounded by JSON_MAX_DEPTH, so the C stack is bounded too)
 * and serialiser. See json.h for the contract. Arrays and objects, parsed or built, grow in the
 * arena by doubling their capacity (arena_grow): n items cost O(n) copies, and the garbage the
 * doubling leaves (the outgrown arrays, which die with the arena) is less than the final array,
 * so an arena holds O(size of the document) however many items an array has.
 */
#include "base/json.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jparser {
    arena *a;
    const char *s;
    size_t n;
    size_t i;
    int depth;
} jparser;

static int jp_fail(jparser *p, const char *what) {
    return err_set(ERR_FORMAT, "JSON: %s at byte %zu", what, p->i);
}

static int jp_nomem(jparser *p) {
    return err_set(ERR_NOMEM, "JSON: out of memory at byte %zu", p->i);
}

static void jp_ws(jparser *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            p->i++;
        else
            break;
    }
}

static int jp_hex4(jparser *p, uint32_t *out) {
    if (p->n - p->i < 4)
        return jp_fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = utf8_hex_digit(p->s[p->i + (size_t)k]);
        if (h < 0)
            return jp_fail(p, "bad hex digit in \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* Parses a string starting at the opening quote. */
static int jp_string(jparser *p, const char **out, size_t *out_len) {
    p->i++; /* opening quote */
    /* first pass: find the end and the decoded length upper bound (input length) */
    size_t start = p->i;
    size_t cap = 0;
    {
        size_t j = start;
        while (j < p->n && p->s[j] != '"') {
            if (p->s[j] == '\\')
                j++;
            j++;
        }
        if (j >= p->n)
            return jp_fail(p, "unterminated string");
        cap = j - start;
    }
    char *buf = arena_alloc(p->a, cap + 1);
    if (!buf)
        return jp_nomem(p);
    size_t o = 0;
    for (;;) {
        if (p->i >= p->n)
            return jp_fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20)
            return jp_fail(p, "control character in string");
        if (c == '\\') {
            p->i++;
            if (p->i >= p->n)
                return jp_fail(p, "unterminated escape");
            char e = p->s[p->i++];
            switch (e) {
            case '"':
                buf[o++] = '"';
                break;
            case '\\':
                buf[o++] = '\\';
                break;
            case '/':
                buf[o++] = '/';
                break;
            case 'b':
                buf[o++] = '\b';
                break;
            case 'f':
                buf[o++] = '\f';
                break;
            case 'n':
                buf[o++] = '\n';
                break;
            case 'r':
                buf[o++] = '\r';
                break;
            case 't':
                buf[o++] = '\t';
                break;
            case 'u': {
                uint32_t cp;
                size_t at = p->i - 2;
                int rc = jp_hex4(p, &cp);
                if (rc)
                    return rc;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                        p->i = at;
                        return jp_fail(p, "lone high surrogate in \\u escape");
                    }
                    p->i += 2;
                    rc = jp_hex4(p, &lo);
                    if (rc)
                        return rc;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        p->i = at;
                        return jp_fail(p, "high surrogate not followed by low surrogate");
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    p->i = at;
                    return jp_fail(p, "lone low surrogate in \\u escape");
                }
                /* a \u escape is 6+ input bytes and at most 4 output bytes: fits in cap */
                o += (size_t)utf8_encode(cp, buf + o);
                break;
            }
            default:
                p->i -= 2;
                return jp_fail(p, "invalid escape");
            }
            continue;
        }
        if (c < 0x80) {
            buf[o++] = (char)c;
            p->i++;
            continue;
        }
        uint32_t cp;
        int len = utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, &cp);
        if (len < 0)
            return jp_fail(p, "invalid UTF-8 in string");
        memcpy(buf + o, p->s + p->i, (size_t)len);
        o += (size_t)len;
        p->i += (size_t)len;
    }
    buf[o] = 0;
    *out = buf;
    *out_len = o;
    return 0;
}

static int jp_number(jparser *p, json_value *v) {
    size_t st = p->i;
    bool is_int = true;
    if (p->s[p->i] == '-')
        p->i++;
    if (p->i >= p->n)
        return jp_fail(p, "truncated number");
    if (p->s[p->i] == '0') {
        p->i++;
    } else if (p->s[p->i] >= '1' && p->s[p->i] <= '9') {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    } else {
        return jp_fail(p, "invalid number");
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        is_int = false;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return jp_fail(p, "digit expected after decimal point");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_int = false;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return jp_fail(p, "digit expected in exponent");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    }
    char *raw = arena_strndup(p->a, p->s + st, p->i - st);
    if (!raw)
        return jp_nomem(p);
    v->type = JSON_NUMBER;
    v->num.raw = raw;
    v->num.d = strtod(raw, NULL);
    v->num.is_int = false;
    v->num.i = 0;
    if (is_int) {
        errno = 0;
        long long ll = strtoll(raw, NULL, 10);
        if (errno == 0) {
            v->num.is_int = true;
            v->num.i = ll;
        }
    }
    return 0;
}

static int jp_value(jparser *p, json_value **out);

static int jp_grow(jparser *p, void **arr, size_t elem, size_t n, size_t *cap) {
    return arena_grow(p->a, arr, cap, n + 1, elem) ? jp_nomem(p) : 0;
}

/* Duplicate keys are found by comparing with every earlier key while an object is small, and
 * through a hash index of its keys (open addressing, rebuilt at twice the size when half full)
 * from JP_KEYSET_MIN keys on: an object of n keys costs O(n) key comparisons, not O(n^2) (a 1 MB
 * body of 100,000 keys took a minute). The seed comes from the arena's address, which ASLR makes
 * differ between runs, so colliding keys cannot be precomputed cheaply. */
#define JP_KEYSET_MIN 16

static _Thread_local size_t jp_key_compares; /* json_key_compares() */

size_t json_key_compares(void) {
    return jp_key_compares;
}

typedef struct jp_keyset {
    uint32_t *slots; /* index of a key + 1, 0 empty */
    size_t cap;      /* a power of two, or 0 while the object is small */
    uint64_t seed;
} jp_keyset;

static size_t jp_keyset_slot(const jp_keyset *ks, const char *key, size_t klen) {
    return (size_t)hash64(ks->seed, key, klen) & (ks->cap - 1);
}

/* Adds key k of v (known absent) to the index. */
static void jp_keyset_put(jp_keyset *ks, const json_value *v, size_t k) {
    size_t i = jp_keyset_slot(ks, v->obj.keys[k], v->obj.key_lens[k]);
    while (ks->slots[i])
        i = (i + 1) & (ks->cap - 1);
    ks->slots[i] = (uint32_t)(k + 1);
}

/* Sets *k to the index of key in v's members so far, or v->obj.n when absent. */
static int jp_key_find(jparser *p, const json_value *v, jp_keyset *ks, const char *key, size_t klen,
                       size_t *k) {
    size_t n = v->obj.n;
    if (n < JP_KEYSET_MIN) {
        for (*k = 0; *k < n; (*k)++) {
            jp_key_compares++;
            if (v->obj.key_lens[*k] == klen && memcmp(v->obj.keys[*k], key, klen) == 0)
                return 0;
        }
        return 0;
    }
    if (n >= UINT32_MAX - 1)
        return jp_nomem(p);
    if ((n + 1) * 2 > ks->cap) {
        size_t cap = ks->cap ? ks->cap * 2 : 4 * JP_KEYSET_MIN;
        uint32_t *slots = arena_calloc(p->a, cap, sizeof *slots);
        if (!slots)
            return jp_nomem(p);
        ks->slots = slots;
        ks->cap = cap;
        ks->seed = (uint64_t)(uintptr_t)p->a;
        for (size_t i = 0; i < n; i++)
            jp_keyset_put(ks, v, i);
    }
    for (size_t i = jp_keyset_slot(ks, key, klen); ks->slots[i]; i = (i + 1) & (ks->cap - 1)) {
        size_t j = ks->slots[i] - 1;
        jp_key_compares++;
        if (v->obj.key_lens[j] == klen && memcmp(v->obj.keys[j], key, klen) == 0) {
            *k = j;
            return 0;
        }
    }
    *k = n;
    return 0;
}

static int jp_array(jparser *p, json_value *v) {
    p->i++;
    v->type = JSON_ARRAY;
    v->arr.items = NULL;
    v->arr.n = 0;
    v->arr.cap = 0;
    jp_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return 0;
    }
    for (;;) {
        json_value *item;
        int rc = jp_value(p, &item);
        if (rc)
            return rc;
        rc = jp_grow(p, (void **)&v->arr.items, sizeof(json_value *), v->arr.n, &v->arr.cap);
        if (rc)
            return rc;
        v->arr.items[v->arr.n++] = item;
        jp_ws(p);
        if (p->i >= p->n)
            return jp_fail(p, "unterminated array");
        char c = p->s[p->i++];
        if (c == ']')
            return 0;
        if (c != ',') {
            p->i--;
            return jp_fail(p, "',' or ']' expected in array");
        }
    }
}

static int jp_object(jparser *p, json_value *v) {
    p->i++;
    v->type = JSON_OBJECT;
    v->obj.keys = NULL;
    v->obj.key_lens = NULL;
    v->obj.vals = NULL;
    v->obj.n = 0;
    v->obj.cap = 0;
    size_t cap_k = 0, cap_l = 0, cap_v = 0;
    jp_keyset ks = {0};
    jp_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return 0;
    }
    for (;;) {
        jp_ws(p);
        if (p->i >= p->n || p->s[p->i] != '"')
            return jp_fail(p, "string key expected in object");
        const char *key;
        size_t klen;
        int rc = jp_string(p, &key, &klen);
        if (rc)
            return rc;
        jp_ws(p);
        if (p->i >= p->n || p->s[p->i] != ':')
            return jp_fail(p, "':' expected after object key");
        p->i++;
        json_value *val;
        rc = jp_value(p, &val);
        if (rc)
            return rc;
        size_t k = v->obj.n;
        if ((rc = jp_key_find(p, v, &ks, key, klen, &k)))
            return rc;
        if (k < v->obj.n) {
            v->obj.vals[k] = val;
        } else {
            if ((rc = jp_grow(p, (void **)&v->obj.keys, sizeof(char *), v->obj.n, &cap_k)) ||
                (rc = jp_grow(p, (void **)&v->obj.key_lens, sizeof(size_t), v->obj.n, &cap_l)) ||
                (rc = jp_grow(p, (void **)&v->obj.vals, sizeof(json_value *), v->obj.n, &cap_v)))
                return rc;
            v->obj.keys[v->obj.n] = key;
            v->obj.key_lens[v->obj.n] = klen;
            v->obj.vals[v->obj.n] = val;
            v->obj.n++;
            v->obj.cap = cap_k; /* the three grow in step */
            if (ks.cap)
                jp_keyset_put(&ks, v, v->obj.n - 1);
        }
        jp_ws(p);
        if (p->i >= p->n)
            return jp_fail(p, "unterminated object");
        char c = p->s[p->i++];
        if (c == '}')
            return 0;
        if (c != ',') {
            p->i--;
            return jp_fail(p, "',' or '}' expected in object");
        }
    }
}

static int jp_lit(jparser *p, const char *lit) {
    size_t l = strlen(lit);
    if (p->n - p->i < l || memcmp(p->s + p->i, lit, l) != 0)
        return jp_fail(p, "invalid literal");
    p->i += l;
    return 0;
}

static int jp_value(jparser *p, json_value **out) {
    jp_ws(p);
    if (p->i >= p->n)
        return jp_fail(p, "value expected");
    json_value *v = arena_alloc(p->a, sizeof *v);
    if (!v)
        return jp_nomem(p);
    memset(v, 0, sizeof *v);
    *out = v;
    char c = p->s[p->i];
    int rc;
    switch (c) {
    case '{':
    case '[':
        if (++p->depth > JSON_MAX_DEPTH)
            return err_set(ERR_RANGE, "JSON: nesting deeper than %d at byte %zu", JSON_MAX_DEPTH,
                           p->i);
        rc = c == '{' ? jp_object(p, v) : jp_array(p, v);
        p->depth--;
        return rc;
    case '"':
        v->type = JSON_STRING;
        return jp_string(p, &v->str.s, &v->str.len);
    case 't':
        v->type = JSON_BOOL;
        v->b = true;
        return jp_lit(p, "true");
    case 'f':
        v->type = JSON_BOOL;
        v->b = false;
        return jp_lit(p, "false");
    case 'n':
        v->type = JSON_NULL;
        return jp_lit(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return jp_number(p, v);
        return jp_fail(p, "unexpected character");
    }
}

int json_parse(arena *a, const char *text, size_t len, json_value **out) {
    jparser p = {.a = a, .s = text, .n = len, .i = 0, .depth = 0};
    /* a UTF-8 byte order mark is not JSON; reject it explicitly with a clear message */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return err_set(ERR_FORMAT, "JSON: byte order mark at byte 0");
    json_value *v;
    int rc = jp_value(&p, &v);
    if (rc)
        return rc;
    jp_ws(&p);
    if (p.i != p.n)
        return jp_fail(&p, "trailing characters after JSON value");
    *out = v;
    return 0;
}

const json_value *json_get(const json_value *v, const char *key) {
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < v->obj.n; i++)
        if (v->obj.key_lens[i] == kl && memcmp(v->obj.keys[i], key, kl) == 0)
            return v->obj.vals[i];
    return NULL;
}

static const json_value *json_get_n(const json_value *v, const char *key, size_t kl) {
    for (size_t i = 0; i < v->obj.n; i++)
        if (v->obj.key_lens[i] == kl && memcmp(v->obj.keys[i], key, kl) == 0)
            return v->obj.vals[i];
    return NULL;
}

bool json_equal(const json_value *a, const json_value *b) {
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case JSON_NULL:
        return true;
    case JSON_BOOL:
        return a->b == b->b;
    case JSON_NUMBER:
        return a->num.d == b->num.d;
    case JSON_STRING:
        return a->str.len == b->str.len && memcmp(a->str.s, b->str.s, a->str.len) == 0;
    case JSON_ARRAY:
        if (a->arr.n != b->arr.n)
            return false;
        for (size_t i = 0; i < a->arr.n; i++)
            if (!json_equal(a->arr.items[i], b->arr.items[i]))
                return false;
        return true;
    case JSON_OBJECT: /* keys are unique (json_parse keeps the last of duplicates) */
        if (a->obj.n != b->obj.n)
            return false;
        for (size_t i = 0; i < a->obj.n; i++) {
            const json_value *bv = json_get_n(b, a->obj.keys[i], a->obj.key_lens[i]);
            if (!bv || !json_equal(a->obj.vals[i], bv))
                return false;
        }
        return true;
    }
    return false;
}

const char *json_type_name(const json_type t) {
    switch (t) {
    case JSON_NULL:
        return "null";
    case JSON_BOOL:
        return "boolean";
    case JSON_NUMBER:
        return "number";
    case JSON_STRING:
        return "string";
    case JSON_ARRAY:
        return "array";
    case JSON_OBJECT:
        return "object";
    }
    return "?";
}

int json_as_bool(const json_value *v, bool *out) {
    if (!v || v->type != JSON_BOOL)
        return 0;
    *out = v->b;
    return 1;
}

int json_as_double(const json_value *v, double *out) {
    if (!v || v->type != JSON_NUMBER)
        return 0;
    *out = v->num.d;
    return 1;
}

int json_as_int(const json_value *v, int64_t *out) {
    if (!v || v->type != JSON_NUMBER)
        return 0;
    if (v->num.is_int) {
        *out = v->num.i;
        return 1;
    }
    double d = v->num.d;
    if (d >= -9.2e18 && d <= 9.2e18 && d == (double)(int64_t)d) {
        *out = (int64_t)d;
        return 1;
    }
    return 0;
}

int json_as_str(const json_value *v, const char **s, size_t *len) {
    if (!v || v->type != JSON_STRING)
        return 0;
    *s = v->str.s;
    if (len)
        *len = v->str.len;
    return 1;
}

void json_write_str(strbuf *sb, const char *s, size_t n, const json_style *st) {
    bool lt = st && st->escape_lt && memchr(s, '<', n),
         lb = st && st->escape_lb && memchr(s, '[', n);
    if (!lt && !lb) {
        strbuf_json_str(sb, s, n, false);
        return;
    }
    strbuf tmp;
    strbuf_init(&tmp);
    strbuf_json_str(&tmp, s, n, false);
    for (size_t i = 0; i < tmp.len; i++) {
        if (tmp.data[i] == '<' && lt)
            strbuf_puts(sb, "\\u003c");
        else if (tmp.data[i] == '[' && lb)
            strbuf_puts(sb, "\\u005b");
        else
            strbuf_putc(sb, tmp.data[i]);
    }
    if (strbuf_failed(&tmp))
        sb->failed = true; /* callers check sb: a truncated literal must not be used */
    strbuf_deinit(&tmp);
}

void json_write_styled(strbuf *sb, const json_value *v, const json_style *st) {
    const char *comma = st && st->spaced ? ", " : ",", *colon = st && st->spaced ? ": " : ":";
    switch (v->type) {
    case JSON_NULL:
        strbuf_puts(sb, "null");
        break;
    case JSON_BOOL:
        strbuf_puts(sb, v->b ? "true" : "false");
        break;
    case JSON_NUMBER:
        if (v->num.raw)
            strbuf_puts(sb, v->num.raw);
        else
            strbuf_json_num(sb, v->num.d);
        break;
    case JSON_STRING:
        json_write_str(sb, v->str.s, v->str.len, st);
        break;
    case JSON_ARRAY:
        strbuf_putc(sb, '[');
        for (size_t i = 0; i < v->arr.n; i++) {
            if (i)
                strbuf_puts(sb, comma);
            json_write_styled(sb, v->arr.items[i], st);
        }
        strbuf_putc(sb, ']');
        break;
    case JSON_OBJECT:
        strbuf_putc(sb, '{');
        for (size_t i = 0; i < v->obj.n; i++) {
            if (i)
                strbuf_puts(sb, comma);
            json_write_str(sb, v->obj.keys[i], v->obj.key_lens[i], st);
            strbuf_puts(sb, colon);
            json_write_styled(sb, v->obj.vals[i], st);
        }
        strbuf_putc(sb, '}');
        break;
    }
}

void json_write(strbuf *sb, const json_value *v) {
    json_write_styled(sb, v, NULL);
}

static json_value *json_new(arena *a, json_type t) {
    json_value *v = arena_calloc(a, 1, sizeof *v);
    if (v)
        v->type = t;
    return v;
}

json_value *json_new_null(arena *a) {
    return json_new(a, JSON_NULL);
}

json_value *json_new_bool(arena *a, bool b) {
    json_value *v = json_new(a, JSON_BOOL);
    if (v)
        v->b = b;
    return v;
}

json_value *json_new_num(arena *a, double d) {
    json_value *v = json_new(a, JSON_NUMBER);
    if (v)
        v->num.d = d;
    return v;
}

json_value *json_new_int(arena *a, int64_t i) {
    json_value *v = json_new(a, JSON_NUMBER);
    if (v) {
        v->num.d = (double)i;
        v->num.i = i;
        v->num.is_int = true;
        char buf[24];
        int n = snprintf(buf, sizeof buf, "%lld", (long long)i);
        v->num.raw = arena_strndup(a, buf, (size_t)n);
        if (!v->num.raw)
            return NULL;
    }
    return v;
}

json_value *json_new_str(arena *a, const char *s, size_t len) {
    json_value *v = json_new(a, JSON_STRING);
    if (!v)
        return NULL;
    char *c = arena_strndup(a, s, len);
    if (!c)
        return NULL;
    v->str.s = c;
    v->str.len = len;
    return v;
}

json_value *json_new_arr(arena *a) {
    return json_new(a, JSON_ARRAY);
}

json_value *json_new_obj(arena *a) {
    return json_new(a, JSON_OBJECT);
}

/* The builders grow by doubling (arena_grow), so n pushes cost O(n): a request's messages are
 * copied one push at a time, and a copy per push would be quadratic in time and arena bytes. */
int json_arr_push(arena *a, json_value *arr, json_value *item) {
    if (!arr || arr->type != JSON_ARRAY || !item)
        return ERR_INVAL;
    if (arena_grow(a, (void **)&arr->arr.items, &arr->arr.cap, arr->arr.n + 1,
                   sizeof *arr->arr.items))
        return ERR_NOMEM;
    arr->arr.items[arr->arr.n++] = item;
    return 0;
}

/* Grows the three arrays of obj to hold one more member (they share obj.cap). */
static int json_obj_grow(arena *a, json_value *obj) {
    size_t n = obj->obj.n;
    if (n < obj->obj.cap)
        return 0;
    size_t ck = obj->obj.cap, cl = obj->obj.cap, cv = obj->obj.cap;
    const char **keys = obj->obj.keys;
    size_t *lens = obj->obj.key_lens;
    json_value **vals = obj->obj.vals;
    if (arena_grow(a, (void **)&keys, &ck, n + 1, sizeof *keys) ||
        arena_grow(a, (void **)&lens, &cl, n + 1, sizeof *lens) ||
        arena_grow(a, (void **)&vals, &cv, n + 1, sizeof *vals))
        return ERR_NOMEM;
    obj->obj.keys = keys;
    obj->obj.key_lens = lens;
    obj->obj.vals = vals;
    obj->obj.cap = ck;
    return 0;
}

int json_obj_set(arena *a, json_value *obj, const char *key, json_value *val) {
    if (!obj || obj->type != JSON_OBJECT || !val)
        return ERR_INVAL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < obj->obj.n; i++) {
        if (obj->obj.key_lens[i] == kl && memcmp(obj->obj.keys[i], key, kl) == 0) {
            obj->obj.vals[i] = val;
            return 0;
        }
    }
    char *kc = arena_strndup(a, key, kl);
    if (!kc || json_obj_grow(a, obj))
        return ERR_NOMEM;
    size_t n = obj->obj.n;
    obj->obj.keys[n] = kc;
    obj->obj.key_lens[n] = kl;
    obj->obj.vals[n] = val;
    obj->obj.n = n + 1;
    return 0;
}

json_value *json_obj_clone(arena *a, const json_value *obj) {
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    json_value *c = json_new_obj(a);
    size_t n = obj->obj.n, slots = n ? n : 1;
    if (!c || !(c->obj.keys = arena_alloc(a, slots * sizeof *c->obj.keys)) ||
        !(c->obj.key_lens = arena_alloc(a, slots * sizeof *c->obj.key_lens)) ||
        !(c->obj.vals = arena_alloc(a, slots * sizeof *c->obj.vals)))
        return NULL;
    if (n) {
        memcpy(c->obj.keys, obj->obj.keys, n * sizeof *c->obj.keys);
        memcpy(c->obj.key_lens, obj->obj.key_lens, n * sizeof *c->obj.key_lens);
        memcpy(c->obj.vals, obj->obj.vals, n * sizeof *c->obj.vals);
    }
    c->obj.n = n;
    c->obj.cap = slots;
    return c;
}
