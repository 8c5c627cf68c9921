/* SPDX-License-Identifier: MIT */
/*
 * mock_stream: a backend that costs almost nothing, so a benchmark of `verity router` measures
 * the router and not the engine behind it (bench/router.sh BACKEND=mock). Not part of verity.
 *
 *   mock_stream [--host 127.0.0.1] [--port P] [--tokens N] [--gap-us US]
 *
 * Prints "listening on http://HOST:PORT" on stdout once it accepts (the line bench/lib.bash
 * waits for). One thread, one epoll loop, nonblocking sockets, HTTP/1.1 keep-alive: it holds
 * thousands of concurrent streams for a few hundred bytes each.
 *
 * Routes:
 *   POST /v1/completions, /v1/chat/completions: with "stream":true an SSE stream (chunked) of
 *     max_tokens (or max_completion_tokens; else --tokens, default 64) token events, the first
 *     --gap-us (default 3000) after the request's body arrived and each next one --gap-us after
 *     the previous one's due time (an absolute schedule: no drift), each event its own chunk and
 *     its own send; the last token has finish_reason "length", then a usage event when
 *     stream_options.include_usage is true, then "data: [DONE]". Without "stream" the whole
 *     answer at once. Every token's text is " tok".
 *   GET /v1/status: {"running":STREAMS,"waiting":0,"kv_used":0,"kv_total":0,"draining":false,
 *     "connections_accepted":N} (what the router's health thread polls, and how many connections
 *     were opened to it: a test of the router's connection reuse), GET /health, GET /v1/models.
 *   Anything else: 404. A client that closes drops its stream.
 */
#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MS_MAX_HEAD (64 * 1024)
#define MS_MAX_BODY (8 * 1024 * 1024)

typedef struct ms_conn {
    int fd;
    strbuf in;   /* unparsed request bytes */
    strbuf out;  /* unsent answer bytes, out.data[off, len) */
    size_t off;
    bool want_out; /* EPOLLOUT armed */
    /* the stream in progress (one per connection: requests are answered in order) */
    bool streaming, chat, usage;
    int n_tokens, sent;
    int64_t due_ns;
    struct ms_conn *prev, *next; /* the list of streaming connections */
} ms_conn;

static int g_gap_us = 3000, g_tokens = 64, g_ep = -1, g_streams = 0;
static long g_accepted; /* connections accepted since start */
static ms_conn *g_head; /* streaming connections */
static volatile sig_atomic_t g_stop;

static int64_t ms_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void ms_on_signal(int s) {
    (void)s;
    g_stop = 1;
}

static void ms_set_events(ms_conn *c, bool out) {
    if (c->want_out == out)
        return;
    struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &e);
    c->want_out = out;
}

/* Sends what is queued; false when the socket failed. */
static bool ms_flush(ms_conn *c) {
    while (c->off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->off, c->out.len - c->off, MSG_NOSIGNAL);
        if (n > 0) {
            c->off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ms_set_events(c, true);
            return true;
        } else {
            return false;
        }
    }
    strbuf_reset(&c->out);
    c->off = 0;
    ms_set_events(c, false);
    return true;
}

static void ms_unlist(ms_conn *c) {
    if (!c->streaming)
        return;
    c->streaming = false;
    g_streams--;
    if (c->prev)
        c->prev->next = c->next;
    else
        g_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void ms_close(ms_conn *c) {
    ms_unlist(c);
    epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    strbuf_deinit(&c->in);
    strbuf_deinit(&c->out);
    free(c);
}

static void ms_whole(ms_conn *c, int status, const char *reason, const char *body) {
    strbuf_printf(&c->out,
                  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                  "Connection: keep-alive\r\n\r\n%s",
                  status, reason, strlen(body), body);
}

/* Appends one SSE event as one chunk. */
static void ms_chunk(strbuf *o, const char *ev, size_t n) {
    strbuf_printf(o, "%zx\r\n", n);
    strbuf_append(o, ev, n);
    strbuf_puts(o, "\r\n");
}

/* The stream's next token event (and, after the last, usage, [DONE] and the end of the coding). */
static void ms_token(ms_conn *c) {
    char ev[512];
    bool last = ++c->sent == c->n_tokens;
    const char *fin = last ? "\"length\"" : "null";
    int n = c->chat ? snprintf(ev, sizeof ev,
                               "data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\","
                               "\"created\":0,\"model\":\"mock\",\"choices\":[{\"index\":0,"
                               "\"delta\":{\"content\":\" tok\"},\"finish_reason\":%s}]}\n\n",
                               fin)
                    : snprintf(ev, sizeof ev,
                               "data: {\"id\":\"cmpl-mock\",\"object\":\"text_completion\","
                               "\"created\":0,\"model\":\"mock\",\"choices\":[{\"index\":0,"
                               "\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
                               fin);
    ms_chunk(&c->out, ev, (size_t)n);
    if (!last)
        return;
    if (c->usage) {
        n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"cmpl-mock\",\"object\":\"%s\",\"created\":0,\"model\":\"mock\","
                     "\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":%d,"
                     "\"total_tokens\":%d}}\n\n",
                     c->chat ? "chat.completion.chunk" : "text_completion", c->n_tokens,
                     c->n_tokens + 4);
        ms_chunk(&c->out, ev, (size_t)n);
    }
    ms_chunk(&c->out, "data: [DONE]\n\n", 14);
    strbuf_puts(&c->out, "0\r\n\r\n");
    ms_unlist(c);
}

static void ms_generate(ms_conn *c, bool chat, const char *body, size_t len) {
    arena *a = arena_create(16 * 1024, 64 << 20);
    json_value *v = NULL;
    if (!a || json_parse(a, body, len, &v) || v->type != JSON_OBJECT) {
        ms_whole(c, 400, "Bad Request",
                 "{\"error\":{\"message\":\"not a JSON object\",\"type\":\"invalid_request_error\","
                 "\"param\":null,\"code\":null}}");
        arena_destroy(a);
        return;
    }
    bool stream = false, usage = false;
    int64_t n = g_tokens;
    json_as_bool(json_get(v, "stream"), &stream);
    json_as_bool(json_get(json_get(v, "stream_options"), "include_usage"), &usage);
    if (!json_as_int(json_get(v, "max_tokens"), &n))
        json_as_int(json_get(v, "max_completion_tokens"), &n);
    arena_destroy(a);
    n = n < 1 ? 1 : n > 1000000 ? 1000000 : n;
    if (!stream) {
        strbuf b;
        strbuf_init(&b);
        strbuf_printf(&b, "{\"id\":\"cmpl-mock\",\"object\":\"%s\",\"created\":0,\"model\":\"mock\","
                          "\"choices\":[{\"index\":0,",
                      chat ? "chat.completion" : "text_completion");
        strbuf_puts(&b, chat ? "\"message\":{\"role\":\"assistant\",\"content\":\"" : "\"text\":\"");
        for (int64_t i = 0; i < n; i++)
            strbuf_puts(&b, " tok");
        strbuf_printf(&b, "\"%s,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":4,"
                          "\"completion_tokens\":%lld,\"total_tokens\":%lld}}",
                      chat ? "}" : "", (long long)n, (long long)n + 4);
        ms_whole(c, 200, "OK", b.data);
        strbuf_deinit(&b);
        return;
    }
    strbuf_puts(&c->out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: "
                         "no-cache\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n");
    c->streaming = true;
    c->chat = chat;
    c->usage = usage;
    c->n_tokens = (int)n;
    c->sent = 0;
    c->due_ns = ms_now_ns() + (int64_t)g_gap_us * 1000;
    c->prev = NULL;
    c->next = g_head;
    if (g_head)
        g_head->prev = c;
    g_head = c;
    g_streams++;
}

static void ms_answer(ms_conn *c, const char *method, const char *path, const char *body,
                      size_t len) {
    char buf[256];
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!strcmp(method, "POST") && !strcmp(path, "/v1/completions"))
        ms_generate(c, false, body, len);
    else if (!strcmp(method, "POST") && !strcmp(path, "/v1/chat/completions"))
        ms_generate(c, true, body, len);
    else if (get && !strcmp(path, "/v1/status")) {
        snprintf(buf, sizeof buf,
                 "{\"running\":%d,\"waiting\":0,\"kv_used\":0,\"kv_total\":0,\"draining\":false,"
                 "\"connections_accepted\":%ld}",
                 g_streams, g_accepted);
        ms_whole(c, 200, "OK", buf);
    } else if (get && !strcmp(path, "/health"))
        ms_whole(c, 200, "OK", "{\"status\":\"ok\"}");
    else if (get && !strcmp(path, "/v1/models"))
        ms_whole(c, 200, "OK", "{\"object\":\"list\",\"data\":[{\"id\":\"mock\",\"object\":\"model\","
                               "\"owned_by\":\"mock\"}]}");
    else
        ms_whole(c, 404, "Not Found",
                 "{\"error\":{\"message\":\"no such route\",\"type\":\"invalid_request_error\","
                 "\"param\":null,\"code\":null}}");
}

/* Parses and answers complete requests in c->in while no stream is in progress. False: close. */
static bool ms_parse(ms_conn *c) {
    while (!c->streaming && c->in.len) {
        char *end = memmem(c->in.data, c->in.len, "\r\n\r\n", 4);
        if (!end)
            return c->in.len < MS_MAX_HEAD;
        size_t head = (size_t)(end - c->in.data) + 4, clen = 0;
        char method[16], path[512];
        if (sscanf(c->in.data, "%15s %511s", method, path) != 2)
            return false;
        char *q = strchr(path, '?');
        if (q)
            *q = 0;
        for (char *p = c->in.data; p < end; p++) {
            if (*p == '\n' && !strncasecmp(p + 1, "content-length:", 15))
                clen = strtoul(p + 16, NULL, 10);
        }
        if (clen > MS_MAX_BODY)
            return false;
        if (c->in.len < head + clen)
            return true;
        char saved = c->in.data[head + clen];
        c->in.data[head + clen] = 0;
        ms_answer(c, method, path, c->in.data + head, clen);
        c->in.data[head + clen] = saved;
        memmove(c->in.data, c->in.data + head + clen, c->in.len - head - clen);
        c->in.len -= head + clen;
    }
    return true;
}

static bool ms_read(ms_conn *c) {
    char buf[16384];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            strbuf_append(&c->in, buf, (size_t)n);
            if (strbuf_failed(&c->in))
                return false;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return ms_parse(c) && ms_flush(c);
        return false; /* EOF or error */
    }
}

/* Sends every due token; returns the ms until the next one is due (-1: no stream). */
static int ms_tick(void) {
    int64_t now = ms_now_ns(), next = INT64_MAX;
    for (ms_conn *c = g_head, *nx; c; c = nx) {
        nx = c->next;
        if (c->due_ns <= now) {
            ms_token(c);
            c->due_ns += (int64_t)g_gap_us * 1000;
            if (!ms_flush(c) || (!c->streaming && !ms_parse(c)) || !ms_flush(c)) {
                ms_close(c);
                continue;
            }
        }
        if (c->streaming && c->due_ns < next)
            next = c->due_ns;
    }
    if (next == INT64_MAX)
        return -1;
    return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--host"))
            host = argv[i + 1];
        else if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens"))
            g_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gap-us"))
            g_gap_us = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: mock_stream [--host H] [--port P] [--tokens N] [--gap-us US]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, ms_on_signal);
    signal(SIGINT, ms_on_signal);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t sl = sizeof sa;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 4096) ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl)) {
        fprintf(stderr, "mock_stream: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
        return 1;
    }
    g_ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(g_ep, EPOLL_CTL_ADD, lfd, &le);
    printf("mock_stream: listening on http://%s:%d (%d tokens, %d us apart)\n", host,
           ntohs(sa.sin_port), g_tokens, g_gap_us);
    fflush(stdout);
    struct epoll_event evs[256];
    int wait_ms = -1;
    while (!g_stop) {
        int n = epoll_wait(g_ep, evs, 256, wait_ms);
        for (int i = 0; i < n; i++) {
            ms_conn *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    ms_conn *nc = calloc(1, sizeof *nc);
                    if (!nc) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    g_accepted++;
                    strbuf_init(&nc->in);
                    strbuf_init(&nc->out);
                    struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = nc};
                    epoll_ctl(g_ep, EPOLL_CTL_ADD, fd, &e);
                }
                continue;
            }
            bool ok = !(evs[i].events & (EPOLLERR | EPOLLHUP));
            if (ok && (evs[i].events & EPOLLOUT))
                ok = ms_flush(c) && ms_parse(c) && ms_flush(c);
            if (ok && (evs[i].events & (EPOLLIN | EPOLLRDHUP)))
                ok = ms_read(c);
            if (!ok)
                ms_close(c);
        }
        wait_ms = ms_tick();
    }
    close(lfd);
    return 0;
}
