/* SPDX-License-Identifier: MIT */
/*
 * ct_render: a developer tool for scripts/diff_chat_jinja.py (not part of the build). Reads a JSON
 * file {"now_unix": N, "cases": [{"t": template, "ctx": {...}}, ...]} and writes to stdout a JSON
 * array with, per case, {"output": "..."} or {"error": "...", "code": "ERR_..."}.
 *
 * Build: cc -std=c11 -D_GNU_SOURCE -Isrc -O1 -g scripts/ct_render.c build/release/libverity.a -lm
 */
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ct_render cases.json\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n)
        return 2;
    fclose(f);
    arena *a = arena_create(0, 0);
    json_value *root = NULL;
    if (json_parse(a, text, (size_t)n, &root)) {
        fprintf(stderr, "%s\n", err_detail());
        return 2;
    }
    int64_t now = 0;
    json_as_int(json_get(root, "now_unix"), &now);
    const json_value *cases = json_get(root, "cases");
    strbuf out;
    strbuf_init(&out);
    strbuf_putc(&out, '[');
    for (size_t i = 0; i < cases->arr.n; i++) {
        const json_value *c = cases->arr.items[i];
        const char *src;
        size_t sn;
        json_as_str(json_get(c, "t"), &src, &sn);
        chat_template *t = NULL;
        strbuf sb;
        strbuf_init(&sb);
        err_clear();
        int rc = chat_template_create(src, sn, &t);
        if (!rc) {
            chat_render_opts o = {.extra = json_get(c, "ctx"), .now_unix = now};
            rc = chat_template_render(t, &o, &sb);
        }
        if (i)
            strbuf_append(&out, ",\n", 2);
        if (rc) {
            const char *d = err_detail();
            strbuf_puts(&out, "{\"error\":");
            strbuf_json_str(&out, d, strlen(d), false);
            strbuf_printf(&out, ",\"code\":\"%s\"}", err_name(rc));
        } else {
            strbuf_puts(&out, "{\"output\":");
            strbuf_json_str(&out, sb.data, sb.len, false);
            strbuf_putc(&out, '}');
        }
        strbuf_deinit(&sb);
        chat_template_destroy(t);
    }
    strbuf_puts(&out, "]\n");
    fwrite(out.data, 1, out.len, stdout);
    strbuf_deinit(&out);
    arena_destroy(a);
    free(text);
    return 0;
}
