/* SPDX-License-Identifier: MIT */
/*
 * fuzz_chat_tools: libFuzzer target for the streaming tool-call parser (chat/chat_tools.h), which
 * reads model output, text no request validation has seen. The first byte picks the format (and
 * whether the parser gets a tools array for typing raw values), the second seeds the chunkings;
 * the rest is the generated text. It is fed whole, byte by byte and in two pseudo-random
 * chunkings, and every feeding must agree exactly (return code, content, calls: decisions depend
 * only on the bytes, never on the chunk boundaries). After every feed the content released so
 * far must not contain any of the format's markers; every call must have a non-empty name and
 * arguments that parse as a JSON object. A violated invariant aborts; a crash, a sanitizer report
 * or a leak is a bug.
 */
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "toolcall/chat_tools.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *fz_tools =
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"s\": {\"type\": \"string\"}, \"n\": {\"type\": "
    "\"integer\"}}}}}]";

typedef struct fz_result {
    int rc;
    strbuf content;
    strbuf calls; /* name NUL arguments NUL ... */
} fz_result;

static void fz_check_markers(chat_tool_format f, const strbuf *content) {
    const char *const *m;
    int n = chat_tool_format_markers(f, &m);
    for (int k = 0; k < n; k++)
        if (content->len && memmem(content->data, content->len, m[k], strlen(m[k])))
            abort();
}

/* Feeds text in chunks: step 0 whole, 1 bytes, else pseudo-random lengths from seed. */
static void fz_feed(chat_tool_format f, const json_value *tools, const char *text, size_t n,
                    int step, uint32_t seed, fz_result *r) {
    chat_tool_parser *p;
    strbuf_init(&r->content);
    strbuf_init(&r->calls);
    r->rc = 0;
    if (chat_tool_parser_create(f, &p))
        abort();
    if (tools && chat_tool_parser_set_tools(p, tools))
        abort();
    for (size_t i = 0; i < n && !r->rc;) {
        size_t k = n - i;
        if (step == 1)
            k = 1;
        else if (step > 1) {
            seed = seed * 1103515245u + 12345u;
            k = 1 + (seed >> 16) % 13;
        }
        if (k > n - i)
            k = n - i;
        r->rc = chat_tool_parser_feed(p, text + i, k, &r->content);
        i += k;
        fz_check_markers(f, &r->content);
    }
    int rc = chat_tool_parser_finish(p, &r->content);
    if (!r->rc)
        r->rc = rc;
    else if (rc != r->rc)
        abort();
    fz_check_markers(f, &r->content);
    arena *a = arena_create(0, 1 << 24);
    for (int i = 0; i < chat_tool_parser_n_calls(p); i++) {
        const chat_tool_call *c = chat_tool_parser_call(p, i);
        json_value *v;
        if (!c->name[0] || json_parse(a, c->arguments, strlen(c->arguments), &v) ||
            v->type != JSON_OBJECT)
            abort();
        strbuf_append(&r->calls, c->name, strlen(c->name) + 1);
        strbuf_append(&r->calls, c->arguments, strlen(c->arguments) + 1);
    }
    arena_destroy(a);
    chat_tool_parser_destroy(p);
}

static bool fz_same(const strbuf *a, const strbuf *b) {
    return a->len == b->len && (a->len == 0 || !memcmp(a->data, b->data, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 1 << 14)
        return 0;
    chat_tool_format f = (chat_tool_format)((data[0] & 0x7f) % CHAT_TOOL_FORMAT_COUNT);
    bool typed = data[0] & 0x80;
    uint32_t seed = data[1];
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    arena *a = arena_create(0, 1 << 20);
    json_value *tools = NULL;
    if (typed && json_parse(a, fz_tools, strlen(fz_tools), &tools))
        abort();
    fz_result want;
    fz_feed(f, tools, text, n, 0, seed, &want);
    for (int step = 1; step < 4; step++) {
        fz_result r;
        fz_feed(f, tools, text, n, step, seed + (uint32_t)step * 7919u, &r);
        if (r.rc != want.rc || !fz_same(&r.content, &want.content) ||
            !fz_same(&r.calls, &want.calls))
            abort();
        strbuf_deinit(&r.content);
        strbuf_deinit(&r.calls);
    }
    strbuf_deinit(&want.content);
    strbuf_deinit(&want.calls);
    arena_destroy(a);
    return 0;
}
