/* SPDX-License-Identifier: MIT */
/*
 * chat_tools: see chat_tools.h. The HERMES parser is a two-state machine over a pending buffer:
 * OUTSIDE it releases text up to the longest suffix that could begin "<tool_call>"; INSIDE it
 * waits for "</tool_call>" and parses the body as a JSON object {"name": string,
 * "arguments": object | JSON string of an object}. A body that does not parse moves it to FAILED,
 * where everything is held (never shown as content) and finish reports the error.
 */
#include "chat/chat_tools.h"
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"

#include <stdlib.h>
#include <string.h>

#define TOOL_OPEN "<tool_call>"
#define TOOL_CLOSE "</tool_call>"

enum tp_state { TP_OUTSIDE, TP_INSIDE, TP_FAILED };

struct chat_tool_parser {
    chat_tool_format f;
    enum tp_state st;
    strbuf pending;
    chat_tool_call *calls;
    int n_calls, cap_calls;
};

chat_tool_format chat_tool_format_detect(const char *src, size_t len) {
    if (src && memmem(src, len, TOOL_OPEN, strlen(TOOL_OPEN)))
        return CHAT_TOOL_FORMAT_HERMES;
    return CHAT_TOOL_FORMAT_NONE;
}

const char *chat_tool_format_name(chat_tool_format f) {
    switch (f) {
    case CHAT_TOOL_FORMAT_HERMES:
        return "hermes";
    default:
        return "none";
    }
}

int chat_tool_parser_create(chat_tool_format f, chat_tool_parser **out) {
    chat_tool_parser *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    p->f = f;
    strbuf_init(&p->pending);
    *out = p;
    return 0;
}

void chat_tool_parser_destroy(chat_tool_parser *p) {
    if (!p)
        return;
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    strbuf_deinit(&p->pending);
    free(p);
}

int chat_tool_parser_n_calls(const chat_tool_parser *p) {
    return p->n_calls;
}

const chat_tool_call *chat_tool_parser_call(const chat_tool_parser *p, int i) {
    return i >= 0 && i < p->n_calls ? &p->calls[i] : NULL;
}

/* Removes the first n bytes of the pending buffer. */
static void tp_consume(chat_tool_parser *p, size_t n) {
    memmove(p->pending.data, p->pending.data + n, p->pending.len - n);
    p->pending.len -= n;
    p->pending.data[p->pending.len] = 0;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t tp_partial(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (k <= n && memcmp(s + n - k, tag, k) == 0)
            return k;
    return 0;
}

/* Parses one call body; on success appends it. */
static int tp_add_call(chat_tool_parser *p, const char *body, size_t n) {
    arena *a = arena_create(0, 1 << 24);
    if (!a)
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    json_value *v;
    int rc = json_parse(a, body, n, &v);
    if (rc) {
        rc = err_wrap(ERR_FORMAT, "tool call body is not valid JSON");
        goto out;
    }
    const char *name;
    size_t nl;
    if (v->type != JSON_OBJECT || !json_as_str(json_get(v, "name"), &name, &nl) || nl == 0) {
        rc = err_set(ERR_FORMAT, "tool call has no \"name\" string");
        goto out;
    }
    const json_value *args = json_get(v, "arguments");
    if (!args)
        args = json_get(v, "parameters");
    strbuf sb;
    strbuf_init(&sb);
    if (!args) {
        strbuf_puts(&sb, "{}");
    } else if (args->type == JSON_OBJECT) {
        json_write(&sb, args);
    } else if (args->type == JSON_STRING) {
        json_value *inner;
        if (json_parse(a, args->str.s, args->str.len, &inner) || inner->type != JSON_OBJECT) {
            strbuf_deinit(&sb);
            rc = err_set(ERR_FORMAT, "tool call \"%.*s\": arguments string is not a JSON object",
                         (int)nl, name);
            goto out;
        }
        json_write(&sb, inner);
    } else {
        strbuf_deinit(&sb);
        rc = err_set(ERR_FORMAT, "tool call \"%.*s\": arguments must be an object", (int)nl, name);
        goto out;
    }
    if (p->n_calls == p->cap_calls) {
        int nc = p->cap_calls ? p->cap_calls * 2 : 4;
        chat_tool_call *c = realloc(p->calls, (size_t)nc * sizeof *c);
        if (!c) {
            strbuf_deinit(&sb);
            rc = err_set(ERR_NOMEM, "tool parser: out of memory");
            goto out;
        }
        p->calls = c;
        p->cap_calls = nc;
    }
    char *nm = strndup(name, nl);
    char *ar = strbuf_take(&sb, NULL);
    if (!nm || !ar) {
        free(nm);
        free(ar);
        rc = err_set(ERR_NOMEM, "tool parser: out of memory");
        goto out;
    }
    p->calls[p->n_calls].name = nm;
    p->calls[p->n_calls].arguments = ar;
    p->n_calls++;
out:
    arena_destroy(a);
    return rc;
}

int chat_tool_parser_feed(chat_tool_parser *p, const char *text, size_t n, strbuf *content) {
    if (p->f == CHAT_TOOL_FORMAT_NONE) {
        strbuf_append(content, text, n);
        return strbuf_failed(content) ? ERR_NOMEM : 0;
    }
    strbuf_append(&p->pending, text, n);
    if (strbuf_failed(&p->pending))
        return err_set(ERR_NOMEM, "tool parser: out of memory");
    for (;;) {
        if (p->st == TP_FAILED)
            return 0;
        if (p->st == TP_OUTSIDE) {
            char *at = memmem(p->pending.data, p->pending.len, TOOL_OPEN, strlen(TOOL_OPEN));
            if (!at) {
                size_t hold = tp_partial(p->pending.data, p->pending.len, TOOL_OPEN);
                strbuf_append(content, p->pending.data, p->pending.len - hold);
                tp_consume(p, p->pending.len - hold);
                return 0;
            }
            size_t pre = (size_t)(at - p->pending.data);
            strbuf_append(content, p->pending.data, pre);
            tp_consume(p, pre + strlen(TOOL_OPEN));
            p->st = TP_INSIDE;
            continue;
        }
        char *end = memmem(p->pending.data, p->pending.len, TOOL_CLOSE, strlen(TOOL_CLOSE));
        if (!end)
            return 0;
        size_t body = (size_t)(end - p->pending.data);
        int rc = tp_add_call(p, p->pending.data, body);
        if (rc) {
            p->st = TP_FAILED;
            return rc;
        }
        tp_consume(p, body + strlen(TOOL_CLOSE));
        p->st = TP_OUTSIDE;
    }
}

int chat_tool_parser_finish(chat_tool_parser *p, strbuf *content) {
    if (p->f == CHAT_TOOL_FORMAT_NONE)
        return 0;
    if (p->st == TP_OUTSIDE) {
        strbuf_append(content, p->pending.data, p->pending.len);
        tp_consume(p, p->pending.len);
        return strbuf_failed(content) ? ERR_NOMEM : 0;
    }
    if (p->st == TP_INSIDE)
        return err_set(ERR_FORMAT, "a tool call was started (%s) but not completed",
                       TOOL_OPEN);
    return err_set(ERR_FORMAT, "a tool call did not parse");
}
