/* SPDX-License-Identifier: MIT */
/* Unit tests for src/hunt: the SSE parser and chat-completion reply parsing, whole and streamed,
 * across every chunk boundary and byte by byte. */
#include "test.h"
#include "base/arena.h"
#include "base/err.h"
#include "base/strbuf.h"
#include "hunt/hunt_reply.h"
#include "hunt/hunt_sse.h"

#include <string.h>

typedef struct ev_log {
    strbuf s;
} ev_log;

static int log_event(void *ud, const char *event, const char *data, size_t len) {
    ev_log *l = ud;
    strbuf_printf(&l->s, "[%s|", event);
    strbuf_append(&l->s, data, len);
    strbuf_puts(&l->s, "]");
    T_CHECK(data[len] == 0);
    return 0;
}

/* Parses text fed in pieces of at most `step` bytes (0 = whole) starting with a first piece of
 * `first` bytes; returns the event log. */
static void sse_run(const char *text, size_t n, size_t first, size_t step, strbuf *out) {
    ev_log l;
    strbuf_init(&l.s);
    hunt_sse p;
    hunt_sse_init(&p, log_event, &l, 0);
    size_t i = 0;
    if (first) {
        T_OK(hunt_sse_feed(&p, text, first < n ? first : n));
        i = first < n ? first : n;
    }
    while (i < n) {
        size_t k = step ? (n - i < step ? n - i : step) : n - i;
        T_OK(hunt_sse_feed(&p, text + i, k));
        i += k;
    }
    T_OK(hunt_sse_end(&p));
    hunt_sse_deinit(&p);
    strbuf_reset(out);
    strbuf_append(out, l.s.data, l.s.len);
    strbuf_deinit(&l.s);
}

static const char sse_text[] = "\xEF\xBB\xBF: a comment\r\n"
                               "data: one\r\n\r\n"
                               "data:two\n"
                               "data:  three\n\n"
                               "event: custom\rdata: four\r\r"
                               "id: 7\nretry: 100\nunknown\ndata\n\n"
                               "data: {\"x\":\"\xC3\xA9\"}\n"
                               "\n"
                               ": keep-alive\n\n"
                               "data: [DONE]\n\n"
                               "data: tail without blank line";

static const char sse_expect[] = "[message|one][message|two\n three][custom|four][message|]"
                                 "[message|{\"x\":\"\xC3\xA9\"}][message|[DONE]]"
                                 "[message|tail without blank line]";

static void t_sse_whole_and_split(void) {
    size_t n = sizeof sse_text - 1;
    strbuf got;
    strbuf_init(&got);
    sse_run(sse_text, n, 0, 0, &got);
    T_CHECKF(strcmp(got.data, sse_expect) == 0, "whole: %s", got.data);
    for (size_t cut = 1; cut < n; cut++) {
        sse_run(sse_text, n, cut, 0, &got);
        T_CHECKF(strcmp(got.data, sse_expect) == 0, "split at %zu: %s", cut, got.data);
    }
    for (size_t step = 1; step <= 7; step++) {
        sse_run(sse_text, n, 0, step, &got);
        T_CHECKF(strcmp(got.data, sse_expect) == 0, "steps of %zu: %s", step, got.data);
    }
    strbuf_deinit(&got);
}

static void t_sse_crlf_split(void) {
    /* a CRLF whose CR ends one feed and LF starts the next is one line end, not two */
    strbuf got;
    strbuf_init(&got);
    const char t[] = "data: a\r\n\r\ndata: b\r\n\r\n";
    sse_run(t, sizeof t - 1, 8, 1, &got);
    T_CHECKF(strcmp(got.data, "[message|a][message|b]") == 0, "%s", got.data);
    strbuf_deinit(&got);
}

static int stop_event(void *ud, const char *event, const char *data, size_t len) {
    (void)ud;
    (void)event;
    (void)data;
    (void)len;
    return err_set(ERR_CANCELLED, "stop");
}

static void t_sse_limits(void) {
    hunt_sse p;
    ev_log l;
    strbuf_init(&l.s);
    hunt_sse_init(&p, log_event, &l, 16);
    T_EQ_INT(hunt_sse_feed(&p, "data: 0123456789abcdef0123\n", 27), ERR_TOOLARGE);
    hunt_sse_deinit(&p);
    hunt_sse_init(&p, stop_event, NULL, 0);
    T_EQ_INT(hunt_sse_feed(&p, "data: x\n\n", 9), ERR_CANCELLED);
    hunt_sse_deinit(&p);
    strbuf_deinit(&l.s);
}

/* A streamed tool-calling reply, as vLLM/OpenAI send it. */
static const char stream_text[] =
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
    "\"content\":\"Let me \"},\"logprobs\":{\"content\":[{\"token\":\"Let\",\"logprob\":-0.1,"
    "\"top_logprobs\":[{\"token\":\"Let\",\"logprob\":-0.1},{\"token\":\"I\",\"logprob\":-2.5}]},"
    "{\"token\":\" me \",\"logprob\":-0.2,\"top_logprobs\":[]}]},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"look.\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
    "\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
    "{\"arguments\":\"{\\\"path\\\": \"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
    "{\"arguments\":\"\\\"a.c\\\"}\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\","
    "\"type\":\"function\",\"function\":{\"name\":\"list_dir\",\"arguments\":\"{\\\"path\\\":"
    "\\\".\\\"}\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":42,\"completion_tokens\":17}}\n\n"
    "data: [DONE]\n\n";

static void check_stream_reply(const hunt_reply *r) {
    T_CHECKF(strcmp(r->content, "Let me look.") == 0, "content '%s'", r->content);
    T_EQ_INT(r->n_calls, 2);
    T_CHECK(strcmp(r->calls[0].id, "call_1") == 0);
    T_CHECK(strcmp(r->calls[0].name, "read_file") == 0);
    T_CHECKF(strcmp(r->calls[0].args, "{\"path\": \"a.c\"}") == 0, "args '%s'", r->calls[0].args);
    T_CHECK(strcmp(r->calls[1].name, "list_dir") == 0);
    T_CHECK(strcmp(r->finish, "tool_calls") == 0);
    T_CHECK(r->has_logprobs);
    T_EQ_INT(r->n_toks, 2);
    T_EQ_INT(r->toks[0].n_top, 2);
    T_CHECK(strcmp(r->toks[0].top[1].text, "I") == 0);
    T_EQ_INT(r->prompt_tokens, 42);
    T_EQ_INT(r->completion_tokens, 17);
    T_CHECK(r->stream_issue == NULL);
}

static void stream_parse(const char *text, size_t n, size_t first, size_t step, arena *a,
                         hunt_reply *r) {
    hunt_stream *s;
    T_OK(hunt_stream_create(a, &s));
    size_t i = 0;
    if (first) {
        T_OK(hunt_stream_feed(s, text, first));
        i = first;
    }
    while (i < n) {
        size_t k = step ? (n - i < step ? n - i : step) : n - i;
        T_OK(hunt_stream_feed(s, text + i, k));
        i += k;
    }
    int rc = hunt_stream_finish(s, r);
    bool done = hunt_stream_done(s);
    hunt_stream_destroy(s);
    T_OK(rc);
    T_CHECK(done);
}

static void t_stream_reply(void) {
    arena *a = arena_create(0, 0);
    size_t n = sizeof stream_text - 1;
    hunt_reply r, whole;
    stream_parse(stream_text, n, 0, 0, a, &whole);
    check_stream_reply(&whole);
    stream_parse(stream_text, n, 0, 1, a, &r);
    check_stream_reply(&r);
    T_CHECK(hunt_reply_same(&r, &whole));
    for (size_t cut = 1; cut < n; cut += 3) {
        arena_reset(a);
        stream_parse(stream_text, n, cut, 0, a, &r);
        check_stream_reply(&r);
    }
    arena_destroy(a);
}

static void t_stream_identity_change(void) {
    static const char t[] =
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
        "\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":"
        "\"write_file\",\"arguments\":\"th\\\":\\\"x\\\"}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
        "data: [DONE]\n\n";
    arena *a = arena_create(0, 0);
    hunt_reply r;
    stream_parse(t, sizeof t - 1, 0, 5, a, &r);
    T_CHECK(r.stream_issue != NULL);
    T_CHECKF(strstr(r.stream_issue, "name changed") != NULL, "%s", r.stream_issue);
    T_CHECK(strcmp(r.calls[0].name, "read_file") == 0);
    static const char t2[] =
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"A\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"B\"}]}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"A\","
        "\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n"
        "data: [DONE]\n\n";
    stream_parse(t2, sizeof t2 - 1, 0, 0, a, &r);
    T_CHECK(r.stream_issue && strstr(r.stream_issue, "id changed"));
    arena_destroy(a);
}

static void t_stream_errors(void) {
    arena *a = arena_create(0, 0);
    hunt_stream *s;
    hunt_reply r;
    T_OK(hunt_stream_create(a, &s));
    static const char e[] = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";
    T_EQ_INT(hunt_stream_feed(s, e, sizeof e - 1), ERR_PROTOCOL);
    T_CHECK(strstr(err_detail(), "overloaded"));
    T_EQ_INT(hunt_stream_finish(s, &r), ERR_PROTOCOL);
    hunt_stream_destroy(s);
    T_OK(hunt_stream_create(a, &s));
    T_EQ_INT(hunt_stream_feed(s, "data: {nope\n\n", 13), ERR_PROTOCOL);
    hunt_stream_destroy(s);
    T_OK(hunt_stream_create(a, &s));
    T_OK(hunt_stream_feed(s, "data: [DONE]\n\n", 14));
    T_EQ_INT(hunt_stream_finish(s, &r), ERR_PROTOCOL); /* no choices at all */
    hunt_stream_destroy(s);
    arena_destroy(a);
}

static void t_json_reply(void) {
    arena *a = arena_create(0, 0);
    static const char b[] =
        "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":"
        "\"function\",\"function\":{\"name\":\"grep\",\"arguments\":{\"pattern\":\"x\"}}}]},"
        "\"logprobs\":{\"content\":[{\"token\":\"<tool_call>\",\"logprob\":0,\"top_logprobs\":"
        "[{\"token\":\"<tool_call>\",\"logprob\":0}]}]},\"finish_reason\":\"tool_calls\"}],"
        "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}";
    hunt_reply r;
    T_OK(hunt_reply_parse_json(a, b, sizeof b - 1, &r));
    T_CHECK(r.content_null && r.content_len == 0);
    T_EQ_INT(r.n_calls, 1);
    T_CHECKF(strcmp(r.calls[0].args, "{\"pattern\":\"x\"}") == 0, "%s", r.calls[0].args);
    T_EQ_INT(r.n_toks, 1);
    T_EQ_INT(r.prompt_tokens, 5);
    hunt_reply c;
    T_OK(hunt_reply_copy(a, &r, &c));
    T_CHECK(hunt_reply_same(&r, &c));
    T_EQ_INT(hunt_reply_parse_json(a, "<html>502</html>", 16, &r), ERR_PROTOCOL);
    T_CHECK(strstr(err_detail(), "<html>"));
    T_EQ_INT(hunt_reply_parse_json(a, "{\"error\":{\"message\":\"no such model\"}}", 38, &r),
             ERR_PROTOCOL);
    T_CHECK(strstr(err_detail(), "no such model"));
    T_EQ_INT(hunt_reply_parse_json(a, "{\"choices\":[]}", 14, &r), ERR_PROTOCOL);
    arena_destroy(a);
}

int main(void) {
    test_run("hunt_sse.whole_and_every_split", t_sse_whole_and_split);
    test_run("hunt_sse.crlf_across_feeds", t_sse_crlf_split);
    test_run("hunt_sse.limits_and_callback_stop", t_sse_limits);
    test_run("hunt_reply.stream_tool_calls_any_chunking", t_stream_reply);
    test_run("hunt_reply.stream_identity_change", t_stream_identity_change);
    test_run("hunt_reply.stream_errors", t_stream_errors);
    test_run("hunt_reply.json_reply", t_json_reply);
    return test_summary();
}
