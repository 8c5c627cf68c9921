/* SPDX-License-Identifier: MIT */
/*
 * hunt_tools: built-in tool definitions, schema validation and the deterministic executor. See
 * hunt_tools.h. The built-in definitions are one JSON text parsed at creation; results are made
 * by a generator seeded with FNV-1a of (name, compact arguments), so reformatting whitespace in
 * the arguments does not change a result but any change of a value does.
 */
#include "hunt/hunt_tools.h"
#include "base/arena.h"
#include "base/err.h"
#include "base/file.h"
#include "hunt/hunt_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hunt_tools {
    arena *a;
    int n;
    const char **names;
    const json_value **params;
    char *json; /* the "tools" array */
    size_t json_len;
};

static const char hunt_builtin_json[] =
    "["
    "{\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"description\":\"Read a text "
    "file from the repository, optionally a range of lines.\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"Path relative to the "
    "repository root.\",\"minLength\":1},\"start_line\":{\"type\":\"integer\",\"minimum\":1},"
    "\"end_line\":{\"type\":\"integer\",\"minimum\":1}},\"required\":[\"path\"],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"description\":\"Create or "
    "overwrite a file with the given content.\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1},\"content\":{\"type\":"
    "\"string\"},\"mode\":{\"type\":\"string\",\"enum\":[\"overwrite\",\"append\",\"create\"]}},"
    "\"required\":[\"path\",\"content\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"edit_file\",\"description\":\"Replace exact "
    "text in a file.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":"
    "\"string\",\"minLength\":1},\"old_text\":{\"type\":\"string\",\"minLength\":1},"
    "\"new_text\":{\"type\":\"string\"},\"replace_all\":{\"type\":\"boolean\"}},\"required\":"
    "[\"path\",\"old_text\",\"new_text\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"list_dir\",\"description\":\"List the "
    "entries of a directory.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":"
    "{\"type\":\"string\"},\"depth\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},"
    "\"include_hidden\":{\"type\":\"boolean\"}},\"required\":[\"path\"],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"find_files\",\"description\":\"Find files "
    "whose path matches a glob.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"glob\":"
    "{\"type\":\"string\",\"minLength\":1},\"max_results\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":1000}},\"required\":[\"glob\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"grep\",\"description\":\"Search file "
    "contents with a regular expression.\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"pattern\":{\"type\":\"string\",\"minLength\":1},\"path\":{\"type\":\"string\"},"
    "\"case_sensitive\":{\"type\":\"boolean\"},\"context_lines\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":10}},\"required\":[\"pattern\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"run_shell\",\"description\":\"Run a shell "
    "command in the repository and return its output.\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"command\":{\"type\":\"string\",\"minLength\":1},\"timeout_s\":{\"type\":"
    "\"number\",\"exclusiveMinimum\":0,\"maximum\":600},\"env\":{\"type\":\"object\","
    "\"additionalProperties\":{\"type\":\"string\"}}},\"required\":[\"command\"],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"run_tests\",\"description\":\"Run the test "
    "suite or a subset of it.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"target\":"
    "{\"type\":\"string\"},\"filter\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"maxItems\":20},\"verbose\":{\"type\":\"boolean\"}},\"required\":[],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"git_diff\",\"description\":\"Show the "
    "working tree diff, optionally for one path or against a revision.\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"revision\":{\"type\":"
    "\"string\"},\"staged\":{\"type\":\"boolean\"}},\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"git_log\",\"description\":\"Show recent "
    "commits.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"max_count\":{\"type\":"
    "\"integer\",\"minimum\":1,\"maximum\":100},\"path\":{\"type\":\"string\"},\"author\":"
    "{\"type\":\"string\"}},\"required\":[\"max_count\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"http_get\",\"description\":\"Fetch a URL "
    "and return the response body.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"url\":"
    "{\"type\":\"string\",\"minLength\":8},\"headers\":{\"type\":\"object\","
    "\"additionalProperties\":{\"type\":\"string\"}},\"max_bytes\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":1048576}},\"required\":[\"url\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search_docs\",\"description\":\"Search the "
    "project documentation.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"query\":"
    "{\"type\":\"string\",\"minLength\":1},\"section\":{\"type\":\"string\",\"enum\":[\"api\","
    "\"guide\",\"design\",\"faq\"]},\"options\":{\"type\":\"object\",\"properties\":{\"limit\":"
    "{\"type\":\"integer\",\"minimum\":1,\"maximum\":50},\"fuzzy\":{\"type\":\"boolean\"}},"
    "\"additionalProperties\":false}},\"required\":[\"query\"],\"additionalProperties\":false}}}"
    "]";

static int hunt_tools_from_json(const char *text, size_t len, const char *src, hunt_tools **out) {
    hunt_tools *t = calloc(1, sizeof *t);
    if (!t || !(t->a = arena_create(0, 0))) {
        free(t);
        return err_set(ERR_NOMEM, "out of memory loading tools");
    }
    json_value *root;
    int rc = json_parse(t->a, text, len, &root);
    if (rc) {
        rc = err_wrap(rc, "%s", src);
        goto fail;
    }
    if (root->type != JSON_ARRAY) {
        rc = err_set(ERR_FORMAT, "%s: expected a JSON array of tool definitions, got %s", src,
                     json_type_name(root->type));
        goto fail;
    }
    size_t n = root->arr.n;
    t->names = arena_calloc(t->a, n + 1, sizeof *t->names);
    t->params = arena_calloc(t->a, n + 1, sizeof *t->params);
    json_value *arr = json_new_arr(t->a);
    if (!t->names || !t->params || !arr) {
        rc = err_set(ERR_NOMEM, "out of memory loading tools");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        json_value *e = root->arr.items[i];
        const json_value *fn = json_get(e, "function");
        if (!fn)
            fn = e;
        const char *name;
        size_t nl;
        if (!json_as_str(json_get(fn, "name"), &name, &nl) || nl == 0) {
            rc = err_set(ERR_FORMAT, "%s: tool %zu has no \"name\"", src, i);
            goto fail;
        }
        if (hunt_tools_find(t, name) >= 0) {
            rc = err_set(ERR_FORMAT, "%s: tool %zu: duplicate name '%s'", src, i, name);
            goto fail;
        }
        const json_value *p = json_get(fn, "parameters");
        if (p && p->type != JSON_OBJECT) {
            rc = err_set(ERR_FORMAT, "%s: tool '%s': \"parameters\" must be an object", src, name);
            goto fail;
        }
        if (!p) {
            json_value *o = json_new_obj(t->a);
            if (!o || json_obj_set(t->a, o, "type", json_new_str(t->a, "object", 6))) {
                rc = err_set(ERR_NOMEM, "out of memory loading tools");
                goto fail;
            }
            p = o;
        }
        t->names[t->n] = name;
        t->params[t->n] = p;
        t->n++;
        json_value *def = e;
        if (fn == e) { /* bare definition: wrap it */
            def = json_new_obj(t->a);
            if (!def || json_obj_set(t->a, def, "type", json_new_str(t->a, "function", 8)) ||
                json_obj_set(t->a, def, "function", e)) {
                rc = err_set(ERR_NOMEM, "out of memory loading tools");
                goto fail;
            }
        }
        if (json_arr_push(t->a, arr, def)) {
            rc = err_set(ERR_NOMEM, "out of memory loading tools");
            goto fail;
        }
    }
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, arr);
    if (strbuf_failed(&sb)) {
        strbuf_deinit(&sb);
        rc = err_set(ERR_NOMEM, "out of memory loading tools");
        goto fail;
    }
    t->json = strbuf_take(&sb, &t->json_len);
    *out = t;
    return 0;
fail:
    hunt_tools_destroy(t);
    return rc;
}

int hunt_tools_create_builtin(int n, hunt_tools **out) {
    if (n < 0 || n > HUNT_TOOLS_BUILTIN)
        return err_set(ERR_RANGE, "tools: %d built-in tools requested, there are %d", n,
                       HUNT_TOOLS_BUILTIN);
    hunt_tools *t;
    int rc =
        hunt_tools_from_json(hunt_builtin_json, sizeof hunt_builtin_json - 1, "built-in tools", &t);
    if (rc)
        return rc;
    if (n < t->n) {
        /* keep the first n: re-serialise the prefix of the array */
        arena *tmp = arena_create(0, 0);
        json_value *root;
        if (!tmp || json_parse(tmp, hunt_builtin_json, sizeof hunt_builtin_json - 1, &root)) {
            arena_destroy(tmp);
            hunt_tools_destroy(t);
            return err_set(ERR_NOMEM, "out of memory creating tools");
        }
        root->arr.n = (size_t)n;
        strbuf sb;
        strbuf_init(&sb);
        json_write(&sb, root);
        arena_destroy(tmp);
        free(t->json);
        t->json = strbuf_take(&sb, &t->json_len);
        t->n = n;
        if (!t->json) {
            hunt_tools_destroy(t);
            return err_set(ERR_NOMEM, "out of memory creating tools");
        }
    }
    *out = t;
    return 0;
}

int hunt_tools_load(const char *path, hunt_tools **out) {
    char *text;
    size_t len;
    int rc = file_read_all(path, 0, &text, &len);
    if (rc) /* a missing file too is ERR_IO here, as the contract says */
        return err_wrap(rc == ERR_NOTFOUND ? ERR_IO : rc, "tools file");
    rc = hunt_tools_from_json(text, len, path, out);
    free(text);
    return rc;
}

void hunt_tools_destroy(hunt_tools *t) {
    if (!t)
        return;
    arena_destroy(t->a);
    free(t->json);
    free(t);
}

int hunt_tools_count(const hunt_tools *t) {
    return t->n;
}

const char *hunt_tools_name(const hunt_tools *t, int i) {
    return t->names[i];
}

const json_value *hunt_tools_params(const hunt_tools *t, int i) {
    return t->params[i];
}

int hunt_tools_find(const hunt_tools *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0)
            return i;
    return -1;
}

const char *hunt_tools_json(const hunt_tools *t, size_t *len) {
    *len = t->json_len;
    return t->json;
}

/* ---- schema check ---- */

static bool hunt_type_is(const json_value *v, const char *type) {
    static const struct {
        const char *name;
        json_type type;
    } types[] = {{"object", JSON_OBJECT}, {"array", JSON_ARRAY}, {"string", JSON_STRING},
                 {"boolean", JSON_BOOL},  {"null", JSON_NULL},   {"number", JSON_NUMBER}};
    if (!strcmp(type, "integer"))
        return v->type == JSON_NUMBER && isfinite(v->num.d) && floor(v->num.d) == v->num.d;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++)
        if (!strcmp(type, types[k].name))
            return v->type == types[k].type;
    return true; /* unknown type names are not our business */
}

static int hunt_schema_fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int hunt_schema_fail(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (cap)
        vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return 2;
}

static size_t hunt_utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            k++;
    return k;
}

static int hunt_schema_at(const json_value *sc, const json_value *v, char *path, size_t path_cap,
                          char *why, size_t cap, int depth) {
    if (!sc || sc->type != JSON_OBJECT || depth > 32)
        return 0;
    const json_value *ty = json_get(sc, "type");
    if (ty && ty->type == JSON_STRING && !hunt_type_is(v, ty->str.s))
        return hunt_schema_fail(why, cap, "%s: expected %s, got %s", path, ty->str.s,
                                json_type_name(v->type));
    if (ty && ty->type == JSON_ARRAY) {
        bool ok = false;
        for (size_t i = 0; i < ty->arr.n && !ok; i++)
            if (ty->arr.items[i]->type == JSON_STRING && hunt_type_is(v, ty->arr.items[i]->str.s))
                ok = true;
        if (!ok)
            return hunt_schema_fail(why, cap, "%s: %s is none of the allowed types", path,
                                    json_type_name(v->type));
    }
    const json_value *en = json_get(sc, "enum");
    if (en && en->type == JSON_ARRAY) {
        bool ok = false;
        for (size_t i = 0; i < en->arr.n && !ok; i++)
            ok = json_equal(en->arr.items[i], v);
        if (!ok) {
            strbuf sb;
            strbuf_init(&sb);
            json_write(&sb, v);
            int r = hunt_schema_fail(why, cap, "%s: %.80s is not one of the enum values", path,
                                     sb.data);
            strbuf_deinit(&sb);
            return r;
        }
    }
    const json_value *cn = json_get(sc, "const");
    if (cn && !json_equal(cn, v))
        return hunt_schema_fail(why, cap, "%s: differs from the schema's const", path);
    double lim;
    if (v->type == JSON_NUMBER) {
        if (json_as_double(json_get(sc, "minimum"), &lim) && v->num.d < lim)
            return hunt_schema_fail(why, cap, "%s: %s below minimum %g", path, v->num.raw, lim);
        if (json_as_double(json_get(sc, "maximum"), &lim) && v->num.d > lim)
            return hunt_schema_fail(why, cap, "%s: %s above maximum %g", path, v->num.raw, lim);
        if (json_as_double(json_get(sc, "exclusiveMinimum"), &lim) && v->num.d <= lim)
            return hunt_schema_fail(why, cap, "%s: %s not above %g", path, v->num.raw, lim);
        if (json_as_double(json_get(sc, "exclusiveMaximum"), &lim) && v->num.d >= lim)
            return hunt_schema_fail(why, cap, "%s: %s not below %g", path, v->num.raw, lim);
    }
    if (v->type == JSON_STRING) {
        size_t nch = hunt_utf8_count(v->str.s, v->str.len);
        if (json_as_double(json_get(sc, "minLength"), &lim) && (double)nch < lim)
            return hunt_schema_fail(why, cap, "%s: string shorter than minLength %g", path, lim);
        if (json_as_double(json_get(sc, "maxLength"), &lim) && (double)nch > lim)
            return hunt_schema_fail(why, cap, "%s: string longer than maxLength %g", path, lim);
    }
    size_t plen = strlen(path);
    if (v->type == JSON_ARRAY) {
        if (json_as_double(json_get(sc, "minItems"), &lim) && (double)v->arr.n < lim)
            return hunt_schema_fail(why, cap, "%s: fewer than %g items", path, lim);
        if (json_as_double(json_get(sc, "maxItems"), &lim) && (double)v->arr.n > lim)
            return hunt_schema_fail(why, cap, "%s: more than %g items", path, lim);
        const json_value *it = json_get(sc, "items");
        for (size_t i = 0; it && i < v->arr.n; i++) {
            snprintf(path + plen, path_cap - plen, "[%zu]", i);
            int r = hunt_schema_at(it, v->arr.items[i], path, path_cap, why, cap, depth + 1);
            path[plen] = 0;
            if (r)
                return r;
        }
    }
    if (v->type == JSON_OBJECT) {
        const json_value *req = json_get(sc, "required");
        for (size_t i = 0; req && req->type == JSON_ARRAY && i < req->arr.n; i++) {
            const json_value *k = req->arr.items[i];
            if (k->type == JSON_STRING && !json_get(v, k->str.s))
                return hunt_schema_fail(why, cap, "%s: required property '%s' missing", path,
                                        k->str.s);
        }
        const json_value *props = json_get(sc, "properties");
        const json_value *addl = json_get(sc, "additionalProperties");
        for (size_t i = 0; i < v->obj.n; i++) {
            const char *key = v->obj.keys[i];
            const json_value *psc =
                props && props->type == JSON_OBJECT ? json_get(props, key) : NULL;
            snprintf(path + plen, path_cap - plen, ".%s", key);
            int r = 0;
            if (psc)
                r = hunt_schema_at(psc, v->obj.vals[i], path, path_cap, why, cap, depth + 1);
            else if (addl && addl->type == JSON_BOOL && !addl->b)
                r = hunt_schema_fail(why, cap, "%s: property not allowed by the schema", path);
            else if (addl && addl->type == JSON_OBJECT)
                r = hunt_schema_at(addl, v->obj.vals[i], path, path_cap, why, cap, depth + 1);
            path[plen] = 0;
            if (r)
                return r;
        }
    }
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (int a = 0; a < 2; a++) {
        const json_value *any = json_get(sc, alts[a]);
        if (!any || any->type != JSON_ARRAY || any->arr.n == 0)
            continue;
        bool ok = false;
        char tmp[16];
        for (size_t i = 0; i < any->arr.n && !ok; i++)
            ok = hunt_schema_at(any->arr.items[i], v, path, path_cap, tmp, sizeof tmp, depth + 1) ==
                 0;
        if (!ok)
            return hunt_schema_fail(why, cap, "%s: matches none of the %s alternatives", path,
                                    alts[a]);
    }
    return 0;
}

int hunt_schema_check(const json_value *schema, const json_value *instance, const char *path,
                      char *why, size_t why_cap) {
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    return hunt_schema_at(schema, instance, p, sizeof p, why, why_cap, 0);
}

int hunt_tools_check_args(const hunt_tools *t, int i, const char *args, size_t len, char *why,
                          size_t why_cap) {
    arena *a = arena_create(8192, 16u << 20);
    if (!a)
        return 0;
    json_value *v;
    int r = 0;
    if (json_parse(a, args, len, &v) != 0) {
        if (why_cap)
            snprintf(why, why_cap, "arguments are not valid JSON (%s)", err_detail());
        r = 1;
    } else if (v->type != JSON_OBJECT) {
        if (why_cap)
            snprintf(why, why_cap, "arguments are a JSON %s, not an object",
                     json_type_name(v->type));
        r = 1;
    } else {
        r = hunt_schema_check(t->params[i], v, "arguments", why, why_cap);
    }
    arena_destroy(a);
    return r;
}

/* ---- executor ---- */

static void hunt_exec_lines(hunt_rng *r, int n, strbuf *out) {
    for (int i = 0; i < n; i++) {
        strbuf sb_id;
        strbuf_init(&sb_id);
        hunt_text_ident(r, &sb_id);
        switch (hunt_rng_below(r, 4)) {
        case 0:
            strbuf_printf(out, "static int %s(struct %s *p, size_t n) {\n", sb_id.data,
                          hunt_word(39 + (int)hunt_rng_below(r, 100)));
            break;
        case 1:
            strbuf_printf(out, "    if (p->%s > %u)\n        return -%u;\n",
                          hunt_word(39 + (int)hunt_rng_below(r, 100)), hunt_rng_below(r, 4096),
                          1 + hunt_rng_below(r, 20));
            break;
        case 2:
            strbuf_puts(out, "    /* ");
            hunt_text_prose(r, 6 + (int)hunt_rng_below(r, 8), out);
            strbuf_puts(out, " */\n");
            break;
        default:
            strbuf_printf(out, "    %s(p, n + %u);\n}\n", sb_id.data, hunt_rng_below(r, 64));
        }
        strbuf_deinit(&sb_id);
    }
}

static void hunt_exec_path(hunt_rng *r, strbuf *out) {
    static const char *const dirs[] = {"src", "src/net", "src/core", "lib", "tests", "docs"};
    static const char *const exts[] = {".c", ".h", ".py", ".md", ".rs", ".go"};
    strbuf_printf(out, "%s/", dirs[hunt_rng_below(r, 6)]);
    hunt_text_ident(r, out);
    strbuf_puts(out, exts[hunt_rng_below(r, 6)]);
}

void hunt_tools_execute(const hunt_tools *t, const char *name, const char *args, size_t len,
                        strbuf *out) {
    arena *a = arena_create(8192, 16u << 20);
    json_value *v = NULL;
    if (!a || json_parse(a, args, len, &v) != 0 || v->type != JSON_OBJECT) {
        strbuf_puts(out, "{\"error\":\"invalid arguments: not a JSON object\"}");
        arena_destroy(a);
        return;
    }
    if (t && hunt_tools_find(t, name) < 0) {
        strbuf_puts(out, "{\"error\":\"unknown tool ");
        strbuf_json_str(out, name, strlen(name), false);
        strbuf_puts(out, "\"}");
        arena_destroy(a);
        return;
    }
    strbuf canon;
    strbuf_init(&canon);
    json_write(&canon, v);
    hunt_rng r;
    hunt_rng_seed(&r, hunt_hash(hunt_hash_str(HUNT_FNV_OFFSET, name), canon.data, canon.len));
    strbuf_deinit(&canon);
    const char *s;
    size_t sl;
    const char *path = json_as_str(json_get(v, "path"), &s, &sl) ? s : ".";
    if (!strcmp(name, "read_file")) {
        strbuf_printf(out, "// %s\n", path);
        hunt_exec_lines(&r, 12 + (int)hunt_rng_below(&r, 20), out);
    } else if (!strcmp(name, "write_file") || !strcmp(name, "edit_file")) {
        strbuf_printf(out, "{\"ok\":true,\"path\":");
        strbuf_json_str(out, path, strlen(path), false);
        strbuf_printf(out, ",\"%s\":%u}", name[0] == 'w' ? "bytes_written" : "replacements",
                      name[0] == 'w' ? 40 + hunt_rng_below(&r, 4000) : 1 + hunt_rng_below(&r, 3));
    } else if (!strcmp(name, "list_dir") || !strcmp(name, "find_files")) {
        int n = 3 + (int)hunt_rng_below(&r, 12);
        for (int i = 0; i < n; i++) {
            hunt_exec_path(&r, out);
            strbuf_putc(out, '\n');
        }
    } else if (!strcmp(name, "grep")) {
        int n = (int)hunt_rng_below(&r, 8);
        for (int i = 0; i < n; i++) {
            hunt_exec_path(&r, out);
            strbuf_printf(out, ":%u: ", 1 + hunt_rng_below(&r, 900));
            hunt_text_prose(&r, 5 + (int)hunt_rng_below(&r, 6), out);
            strbuf_putc(out, '\n');
        }
        if (n == 0)
            strbuf_puts(out, "(no matches)\n");
    } else if (!strcmp(name, "run_shell")) {
        const char *cmd = json_as_str(json_get(v, "command"), &s, &sl) ? s : "";
        strbuf_printf(out, "$ %.200s\n", cmd);
        hunt_text_prose(&r, 10 + (int)hunt_rng_below(&r, 30), out);
        strbuf_printf(out, "\nexit code %u\n", hunt_rng_below(&r, 4) == 0 ? 1u : 0u);
    } else if (!strcmp(name, "run_tests")) {
        unsigned total = 20 + hunt_rng_below(&r, 300), failed = hunt_rng_below(&r, 3);
        for (unsigned i = 0; i < failed; i++) {
            strbuf_puts(out, "FAIL ");
            hunt_text_ident(&r, out);
            strbuf_puts(out, ": ");
            hunt_text_prose(&r, 8, out);
            strbuf_putc(out, '\n');
        }
        strbuf_printf(out, "%u passed, %u failed\n", total - failed, failed);
    } else if (!strcmp(name, "git_diff")) {
        strbuf_printf(out, "--- a/%s\n+++ b/%s\n@@ -%u,4 +%u,5 @@\n", path, path,
                      1 + hunt_rng_below(&r, 300), 1 + hunt_rng_below(&r, 300));
        hunt_exec_lines(&r, 4 + (int)hunt_rng_below(&r, 6), out);
    } else if (!strcmp(name, "git_log")) {
        int n = 2 + (int)hunt_rng_below(&r, 6);
        for (int i = 0; i < n; i++) {
            strbuf_printf(out, "%016llx ", (unsigned long long)hunt_rng_next(&r));
            hunt_text_prose(&r, 4 + (int)hunt_rng_below(&r, 6), out);
            strbuf_putc(out, '\n');
        }
    } else if (!strcmp(name, "http_get")) {
        strbuf_printf(out, "HTTP/1.1 %s\ncontent-type: text/html\n\n",
                      hunt_rng_below(&r, 5) ? "200 OK" : "404 Not Found");
        hunt_text_prose(&r, 20 + (int)hunt_rng_below(&r, 40), out);
    } else if (!strcmp(name, "search_docs")) {
        int n = 1 + (int)hunt_rng_below(&r, 5);
        for (int i = 0; i < n; i++) {
            strbuf_printf(out, "%d. docs/", i + 1);
            hunt_text_ident(&r, out);
            strbuf_puts(out, ".md: ");
            hunt_text_prose(&r, 10 + (int)hunt_rng_below(&r, 10), out);
            strbuf_putc(out, '\n');
        }
    } else {
        /* a user-defined tool: a generic deterministic result */
        strbuf_puts(out, "{\"ok\":true,\"result\":\"");
        hunt_text_prose(&r, 12 + (int)hunt_rng_below(&r, 20), out);
        strbuf_puts(out, "\"}");
    }
    arena_destroy(a);
}
