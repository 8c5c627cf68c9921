/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the HTTP/1.1 connection layer (server/srv_http.h) and its parser
 * (server/srv_http_parse.h). The parser cases call the pure functions directly; the layer cases
 * start srv_http in-process on a loopback port 0 with a tiny echo handler and drive it with raw
 * sockets: plain, keep-alive, pipelined, chunked, HEAD, HTTP/1.0 and 100-continue requests; every
 * malformed input of issue 11 item 11 answered with exactly one status line and a JSON error
 * body; 1,000 idle connections while a normal client is served; the per-address and global caps;
 * the head, idle and body-rate deadlines (small configured deadlines, the close awaited with a
 * generous backstop, never a sleep used as synchronisation); an answer from another thread; a
 * stream under backpressure; the gone flag of a client that leaves mid-stream; a half-closed
 * client still answered; graceful shutdown finishing an answer in progress.
 */
#include "test.h"

#include "base/err.h"
#include "server/srv_http.h"
#include "server/srv_http_parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BACKSTOP_MS 10000

/* ---- the handler ---- */

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cv = PTHREAD_COND_INITIALIZER;
static srv_http_req *held; /* a request parked by /hold or /stream for the test to answer */
static atomic_int n_requests;
/* answer_thread's still running: a client may have read the answer before the thread released
 * its request, and srv_http_destroy wants every request released first (stop waits for them) */
static atomic_int n_answering;

static int on_head(void *user, srv_http_req *req) {
    const char *path = srv_http_req_path(req);
    if (strcmp(path, "/health") == 0) {
        srv_http_respond(req, 200, "Content-Type: text/plain\r\n", "ok", 2);
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (strcmp(path, "/peer") == 0) {
        const char *p = srv_http_req_peer(req);
        srv_http_respond(req, 200, NULL, p, strlen(p));
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (strcmp(path, "/reject") == 0) {
        srv_http_respond_error(req, 401, "no key");
        return SRV_HTTP_HEAD_ANSWERED;
    }
    if (strcmp(path, "/small") == 0)
        srv_http_req_set_body_limit(req, 10);
    return SRV_HTTP_HEAD_READ_BODY;
}

static void *answer_thread(void *arg) {
    srv_http_req *req = arg;
    size_t n;
    const char *b = srv_http_req_body(req, &n);
    char out[256];
    int len = snprintf(out, sizeof out, "thread:%.*s", (int)(n > 200 ? 200 : n), b);
    srv_http_respond(req, 200, NULL, out, (size_t)len);
    srv_http_req_release(req);
    atomic_fetch_sub(&n_answering, 1);
    return NULL;
}

static void on_request(void *user, srv_http_req *req) {
    atomic_fetch_add(&n_requests, 1);
    const char *path = srv_http_req_path(req);
    if (strcmp(path, "/thread") == 0) {
        pthread_t t;
        atomic_fetch_add(&n_answering, 1);
        if (pthread_create(&t, NULL, answer_thread, req) == 0) {
            pthread_detach(t);
        } else {
            atomic_fetch_sub(&n_answering, 1);
            srv_http_req_release(req);
        }
        return;
    }
    if (strcmp(path, "/hold") == 0 || strcmp(path, "/stream") == 0) {
        pthread_mutex_lock(&held_mu);
        held = req;
        pthread_cond_broadcast(&held_cv);
        pthread_mutex_unlock(&held_mu);
        return;
    }
    if (strcmp(path, "/big") == 0) {
        size_t big = 8u << 20;
        char *out = malloc(big);
        memset(out, 'b', big);
        srv_http_respond(req, 200, NULL, out, big);
        free(out);
        srv_http_req_release(req);
        return;
    }
    size_t n;
    const char *b = srv_http_req_body(req, &n);
    char *out = malloc(n + 256);
    int len =
        snprintf(out, 256, "%s %s %s|", srv_http_req_method(req), path, srv_http_req_query(req));
    memcpy(out + len, b, n);
    srv_http_respond(req, 200, "Content-Type: text/plain\r\n", out, (size_t)len + n);
    free(out);
    srv_http_req_release(req);
}

static srv_http_req *wait_held(void) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += BACKSTOP_MS / 1000;
    pthread_mutex_lock(&held_mu);
    while (!held && pthread_cond_timedwait(&held_cv, &held_mu, &until) == 0)
        ;
    srv_http_req *r = held;
    held = NULL;
    pthread_mutex_unlock(&held_mu);
    return r;
}

/* ---- the server under test ---- */

static int port;
static srv_http *srv;

static void start(srv_http_cfg *cfg, int sndbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    T_CHECK(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sndbuf)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    T_CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    T_CHECK(listen(fd, 4096) == 0);
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    port = ntohs(a.sin_port);
    cfg->listen_fd = fd;
    cfg->on_head = on_head;
    cfg->on_request = on_request;
    T_OK(srv_http_create(cfg, &srv));
}

static void stop(void) {
    while (atomic_load(&n_answering) > 0) /* each ends right after its release */
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    srv_http_destroy(srv);
    srv = NULL;
}

static int dial(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    T_CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    T_CHECKF(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
    return fd;
}

static void put(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        T_CHECKF(w > 0, "send: %s", strerror(errno));
        s += w;
        n -= (size_t)w;
    }
}
#define PUTS(fd, s) put(fd, s, strlen(s))

/* Reads until the peer closes (or the backstop), returning the bytes (caller frees). */
static char *read_to_close(int fd, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, BACKSTOP_MS) <= 0)
            break;
        if (n == cap)
            b = realloc(b, (cap *= 2) + 1);
        ssize_t r = recv(fd, b + n, cap - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Reads exactly n bytes (or fails the case). */
static void read_n(int fd, char *b, size_t n) {
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        T_CHECKF(poll(&p, 1, BACKSTOP_MS) > 0, "no answer within the backstop");
        ssize_t r = recv(fd, b + got, n - got, 0);
        T_CHECKF(r > 0, "connection closed after %zu of %zu bytes", got, n);
        got += (size_t)r;
    }
}

/* Reads one response with a Content-Length or chunked body from a keep-alive connection.
 * Returns its status; the body in body[0, *blen) (NUL-terminated), the head in head. */
static int read_response(int fd, char *head, size_t head_cap, char *body, size_t body_cap,
                         size_t *blen, bool no_body) {
    size_t n = 0;
    while (n < 4 || memcmp(head + n - 4, "\r\n\r\n", 4) != 0) {
        T_CHECK(n + 1 < head_cap);
        read_n(fd, head + n, 1);
        n++;
    }
    head[n] = 0;
    int status = atoi(head + 9);
    *blen = 0;
    const char *cl = strcasestr(head, "\r\nContent-Length: ");
    if (no_body) {
    } else if (cl) {
        size_t len = strtoul(cl + 18, NULL, 10);
        T_CHECK(len < body_cap);
        read_n(fd, body, len);
        *blen = len;
    } else if (strcasestr(head, "Transfer-Encoding: chunked")) {
        for (;;) {
            char line[64];
            size_t k = 0;
            do {
                T_CHECK(k + 1 < sizeof line);
                read_n(fd, line + k, 1);
            } while (line[k++] != '\n');
            line[k] = 0;
            size_t len = strtoul(line, NULL, 16);
            if (len == 0) {
                read_n(fd, line, 2);
                break;
            }
            T_CHECK(*blen + len < body_cap);
            read_n(fd, body + *blen, len);
            *blen += len;
            read_n(fd, line, 2);
        }
    }
    body[*blen] = 0;
    return status;
}

static int count_status_lines(const char *b) {
    int n = 0;
    for (const char *p = b; (p = strstr(p, "HTTP/1.")); p++)
        if (p == b || p[-1] == '\n')
            n++;
    return n;
}

/* cfg.direct_write for the cases run twice (the stream cases: main) */
static bool g_direct_write;

/* cfg.send_each_write for the case run with it (stream_blocked_appends) */
static bool g_send_each_write;

static void base_cfg(srv_http_cfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->max_body_bytes = 1 << 20;
    cfg->direct_write = g_direct_write;
    cfg->send_each_write = g_send_each_write;
}

/* ---- parser cases ---- */

static int parse_status(const char *req) {
    srv_http_head h;
    srv_http_parse_limits lim = {16384, 100};
    int status = 0;
    const char *why = NULL;
    int rc = srv_http_parse_head(req, strlen(req), &lim, &h, &status, &why);
    if (rc == 0)
        return 0;
    if (rc == ERR_BUSY)
        return 1;
    return status;
}

static void case_parse_head(void) {
    static const struct {
        const char *req;
        int status; /* 0 ok, 1 incomplete */
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0},
        {"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\n", 1},
        {"GET / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
        {"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000000000000000000000\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 0},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
         "chunked\r\n\r\n",
         400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", 0},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: "
         "5\r\n\r\n",
         400},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", 0},
        {"POST / HTTP/1.1\r\nHost: a\r\nExpect: teapot\r\n\r\n", 417},
        {"G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
        {"GET http://h/x?q HTTP/1.1\r\nHost: h\r\n\r\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECKF(parse_status(cases[i].req) == cases[i].status, "case %zu: got %d, want %d", i,
                 parse_status(cases[i].req), cases[i].status);
    /* fields, path and query, keep-alive */
    const char *r =
        "GET /a/b?x=1&y HTTP/1.1\r\nHost: h\r\nConnection: close\r\nX-K:  v v \r\n\r\nrest";
    srv_http_head h;
    srv_http_parse_limits lim = {16384, 100};
    int st;
    const char *why;
    T_OK(srv_http_parse_head(r, strlen(r), &lim, &h, &st, &why));
    T_EQ_INT(h.head_len, strlen(r) - 4);
    T_CHECK(h.path.len == 4 && memcmp(r + h.path.off, "/a/b", 4) == 0);
    T_CHECK(h.query.len == 5 && memcmp(r + h.query.off, "x=1&y", 5) == 0);
    T_CHECK(!h.keep_alive);
    const srv_http_field *f = srv_http_head_field(&h, r, "x-k");
    T_CHECK(f && f->value.len == 3 && memcmp(r + f->value.off, "v v", 3) == 0);
    /* limits: a head over the byte limit, too many fields */
    char big[20000];
    int n = snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
    memset(big + n, 'a', sizeof big - (size_t)n - 1);
    big[sizeof big - 1] = 0;
    T_EQ_INT(parse_status(big), 431);
    char many[4096];
    n = snprintf(many, sizeof many, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int k = 0; k < 101; k++)
        n += snprintf(many + n, sizeof many - (size_t)n, "X%d: 1\r\n", k);
    snprintf(many + n, sizeof many - (size_t)n, "\r\n");
    T_EQ_INT(parse_status(many), 431);
}

static int chunk_all(const char *in, size_t step, char *out, size_t *out_len) {
    srv_http_chunk c;
    srv_http_chunk_init(&c);
    size_t n = strlen(in), i = 0, o = 0;
    const char *why;
    while (i < n) {
        size_t take = n - i < step ? n - i : step, used, got;
        int rc = srv_http_chunk_decode(&c, in + i, take, &used, out + o, 256 - o, &got, &why);
        o += got;
        i += used;
        if (rc != 0) {
            *out_len = o;
            return rc == 1 ? (int)i : rc;
        }
    }
    *out_len = o;
    return 0;
}

static void case_parse_chunked(void) {
    const char *ok = "5;ext=1\r\nhello\r\n6 \r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    for (size_t step = 1; step <= strlen(ok); step++) {
        char out[256];
        size_t n;
        int rc = chunk_all(ok, step, out, &n);
        T_CHECKF(rc == (int)strlen(ok) - 4, "step %zu: rc %d", step, rc);
        T_CHECK(n == 11 && memcmp(out, "hello world", 11) == 0);
    }
    static const char *bad[] = {
        "zz\r\nhello\r\n0\r\n\r\n",
        "-5\r\nhello\r\n0\r\n\r\n",
        "5\nhello\r\n0\r\n\r\n",
        "5\r\nhelloX\r\n0\r\n\r\n",
        "1000000000000000\r\n",
        "0x5\r\nhello\r\n0\r\n\r\n",
        "5\r\nhello\r\n0\r\n folded\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[256];
        size_t n;
        T_CHECKF(chunk_all(bad[i], 3, out, &n) == ERR_PROTOCOL, "bad case %zu accepted", i);
    }
}

/* ---- layer cases ---- */

static void case_simple(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /echo?x=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    char head[4096], body[4096];
    size_t bl;
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "GET /echo x=1|") == 0, "body %s", body);
    T_CHECK(strcasestr(head, "Connection: keep-alive"));
    /* keep-alive: a second request on the same connection, with a body */
    PUTS(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "POST /echo |hello") == 0, "body %s", body);
    /* inline answer on the event thread */
    PUTS(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECK(strcmp(body, "ok") == 0);
    close(fd);
    stop();
}

static void case_pipelined(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /echo?1 HTTP/1.1\r\nHost: t\r\n\r\n"
             "POST /thread HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
             "3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n"
             "GET /echo?3 HTTP/1.1\r\nHost: t\r\n\r\n"
             "HEAD /echo?4 HTTP/1.1\r\nHost: t\r\n\r\n"
             "GET /echo?5 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    char head[4096], body[4096];
    size_t bl;
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "GET /echo 1|") == 0, "body %s", body);
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "thread:abcde") == 0, "body %s", body);
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "GET /echo 3|") == 0, "body %s", body);
    /* HEAD: a Content-Length but no body bytes; the next response follows at once */
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, true), 200);
    T_CHECK(strcasestr(head, "Content-Length: 13"));
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "GET /echo 5|") == 0, "body %s", body);
    T_CHECK(strcasestr(head, "Connection: close"));
    size_t n;
    char *rest = read_to_close(fd, &n);
    T_EQ_INT(n, 0);
    free(rest);
    close(fd);
    stop();
}

static void case_http10_and_continue(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /echo HTTP/1.0\r\n\r\n");
    size_t n;
    char *b = read_to_close(fd, &n);
    T_CHECK(strncmp(b, "HTTP/1.1 200 OK\r\n", 17) == 0 && strcasestr(b, "Connection: close"));
    free(b);
    close(fd);
    /* Expect: 100-continue on an accepted request: 100 first, then the body, then 200 */
    fd = dial();
    PUTS(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    char c100[25];
    read_n(fd, c100, 25);
    T_CHECK(memcmp(c100, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0);
    PUTS(fd, "abc");
    char head[4096], body[4096];
    size_t bl;
    T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECK(strcmp(body, "POST /echo |abc") == 0);
    close(fd);
    /* refused on the head: no 100, one final answer, closed */
    fd = dial();
    PUTS(fd,
         "POST /reject HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 401 ", 13) == 0 && count_status_lines(b) == 1, "got %s", b);
    T_CHECK(strstr(b, "\"message\":\"no key\""));
    free(b);
    close(fd);
    stop();
}

static void case_malformed(void) {
    static const struct {
        const char *name, *req;
        int status;
    } cases[] = {
        {"cl_minus_one", "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400},
        {"cl_1e23",
         "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000000000000000000\r\n\r\n", 413},
        {"cl_plus", "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello", 400},
        {"cl_two",
         "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
         400},
        {"te_twice",
         "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, "
         "chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
         400},
        {"te_gzip", "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nxx", 501},
        {"te_and_cl",
         "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: "
         "5\r\n\r\n",
         400},
        {"bad_chunk",
         "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
         "chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
         400},
        {"obs_fold", "GET /echo HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n", 400},
        {"bare_lf", "GET /echo HTTP/1.1\nHost: t\n\n", 400},
        {"version", "GET /echo HTTP/3.0\r\nHost: t\r\n\r\n", 505},
        {"no_host", "GET /echo HTTP/1.1\r\n\r\n", 400},
        {"body_limit", "POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world",
         413},
        {"chunked_limit",
         "POST /small HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nhello "
         "wo\r\n8\r\nrld hell\r\n0\r\n\r\n",
         413},
    };
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = dial();
        PUTS(fd, cases[i].req);
        size_t n;
        char *b = read_to_close(fd, &n);
        char want[32];
        snprintf(want, sizeof want, "HTTP/1.1 %d ", cases[i].status);
        T_CHECKF(strncmp(b, want, strlen(want)) == 0, "%s: got %.40s", cases[i].name, b);
        T_CHECKF(count_status_lines(b) == 1, "%s: %d status lines", cases[i].name,
                 count_status_lines(b));
        T_CHECKF(strstr(b, "\r\n\r\n{\"error\":{\"message\":\"") &&
                     strstr(b, "\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}"),
                 "%s: body %s", cases[i].name, b);
        T_CHECKF(strcasestr(b, "Connection: close"), "%s: not closing", cases[i].name);
        free(b);
        close(fd);
    }
    /* an overlong head, sent in full: 431, one status line */
    int fd = dial();
    char big[40000];
    int k = snprintf(big, sizeof big, "GET /echo HTTP/1.1\r\nHost: t\r\nX: ");
    memset(big + k, 'a', sizeof big - (size_t)k - 5);
    memcpy(big + sizeof big - 5, "\r\n\r\n", 5);
    PUTS(fd, big);
    size_t n;
    char *b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 431 ", 13) == 0 && count_status_lines(b) == 1, "got %.40s", b);
    T_CHECK(strstr(b, "{\"error\":{"));
    free(b);
    close(fd);
    stop();
}

static bool wait_open(int want) {
    for (int i = 0; i < BACKSTOP_MS / 5; i++) {
        srv_http_stats st;
        srv_http_stats_get(srv, &st);
        if (st.open_conns == want)
            return true;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void case_idle_thousand(void) {
    enum { N = 1000 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2 * N + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < 2 * N + 64)
            test_skip("RLIMIT_NOFILE %llu is below %d", (unsigned long long)rl.rlim_cur,
                      2 * N + 64);
    }
    srv_http_cfg cfg;
    base_cfg(&cfg);
    cfg.max_conns = N + 16;
    cfg.max_conns_per_addr = N + 16;
    start(&cfg, 0);
    static int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = dial();
    /* 200 of them are trickling a head (part sent, the rest never comes): each holds an input
     * buffer and its head deadline (10 s by default) has not run out */
    for (int i = 0; i < 200; i++)
        PUTS(fds[i], "GET /echo HTTP/1.1\r\n");
    T_CHECKF(wait_open(N), "the layer did not take %d connections", N);
    for (int r = 0; r < 20; r++) {
        int fd = dial();
        PUTS(fd, r % 2 ? "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
                       : "POST /thread HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
        char head[4096], body[4096];
        size_t bl;
        T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
        close(fd);
    }
    for (int i = 0; i < N; i++)
        close(fds[i]);
    T_CHECK(wait_open(0));
    stop();
}

static void case_caps(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    cfg.max_conns_per_addr = 3;
    start(&cfg, 0);
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = dial();
    T_CHECK(wait_open(3));
    int fd = dial();
    size_t n;
    char *b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 429 ", 13) == 0 && strstr(b, "{\"error\":{"), "got %.40s", b);
    free(b);
    close(fd);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    T_CHECK(wait_open(0));
    stop();
    base_cfg(&cfg);
    cfg.max_conns = 2;
    start(&cfg, 0);
    for (int i = 0; i < 2; i++)
        fds[i] = dial();
    T_CHECK(wait_open(2));
    fd = dial();
    b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 503 ", 13) == 0 && strstr(b, "\"server_error\""), "got %.40s", b);
    free(b);
    close(fd);
    srv_http_stats st;
    srv_http_stats_get(srv, &st);
    T_EQ_INT(st.refused_cap, 1);
    for (int i = 0; i < 2; i++)
        close(fds[i]);
    stop();
}

static void case_deadlines(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    cfg.head_timeout_ms = 200;
    cfg.idle_timeout_ms = 300;
    cfg.body_grace_ms = 300;
    cfg.body_min_bytes_per_s = 1000;
    start(&cfg, 0);
    /* a head that never completes: 408 */
    int fd = dial();
    PUTS(fd, "GET /echo HTTP/1.1\r\nHost: t\r\n");
    size_t n;
    char *b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 408 ", 13) == 0 && count_status_lines(b) == 1, "got %.40s", b);
    free(b);
    close(fd);
    /* an idle connection: closed without an answer */
    fd = dial();
    b = read_to_close(fd, &n);
    T_EQ_INT(n, 0);
    free(b);
    close(fd);
    /* a body trickling at ~10 bytes/s: 408 once the grace period is over */
    fd = dial();
    PUTS(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    bool closed = false;
    for (int i = 0; i < BACKSTOP_MS / 100 && !closed; i++) {
        send(fd, "x", 1, MSG_NOSIGNAL);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        closed = poll(&p, 1, 100) > 0;
    }
    T_CHECK(closed);
    b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 408 ", 13) == 0 && count_status_lines(b) == 1, "got %.40s", b);
    free(b);
    close(fd);
    srv_http_stats st;
    srv_http_stats_get(srv, &st);
    T_EQ_INT(st.timed_out, 3);
    stop();
}

typedef struct reader {
    int fd;
    size_t got;
    bool ok;
} reader;

static void *reader_main(void *arg) {
    reader *rd = arg;
    char head[4096];
    size_t cap = 1 << 22;
    char *body = malloc(cap);
    size_t bl = 0;
    int st = read_response(rd->fd, head, sizeof head, body, cap, &bl, false);
    rd->got = bl;
    rd->ok = st == 200;
    for (size_t i = 0; i < bl; i++)
        if (body[i] != (char)('a' + i % 26))
            rd->ok = false;
    free(body);
    return NULL;
}

/* A server with out_cap_bytes cap and a 4 KiB send buffer, a client with a 4 KiB receive buffer
 * that reads nothing yet, and its /stream request's stream begun: *fd is the client's socket. */
static srv_http_req *slow_stream_begin(size_t cap, int *fd) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    cfg.out_cap_bytes = cap;
    start(&cfg, 4096);
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    int rcv = 4096;
    setsockopt(*fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    T_CHECK(connect(*fd, (struct sockaddr *)&a, sizeof a) == 0);
    PUTS(*fd, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
    srv_http_req *req = wait_held();
    T_CHECK(req);
    T_OK(srv_http_stream_begin(req, 200, "Content-Type: text/event-stream\r\n"));
    return req;
}

/* The stream's next n bytes (byte i of the stream is 'a' + i % 26) into chunk. */
static void fill_chunk(char *chunk, size_t n, size_t sent) {
    for (size_t i = 0; i < n; i++)
        chunk[i] = (char)('a' + (sent + i) % 26);
}

/* Then a reader drains fd while 300 more chunks of n bytes go out with blocking writes; every byte
 * must arrive, in order; the request, the client and the server end. */
static void slow_stream_finish(srv_http_req *req, int fd, size_t sent, size_t n) {
    reader rd = {fd, 0, false};
    pthread_t t;
    T_CHECK(pthread_create(&t, NULL, reader_main, &rd) == 0);
    char chunk[1000];
    for (int k = 0; k < 300; k++) {
        fill_chunk(chunk, n, sent);
        T_OK(srv_http_stream_write(req, chunk, n, BACKSTOP_MS));
        sent += n;
    }
    T_OK(srv_http_stream_end(req));
    pthread_join(t, NULL);
    T_CHECK(rd.ok);
    T_EQ_INT(rd.got, sent);
    T_CHECK(!srv_http_request_gone(req));
    srv_http_req_release(req);
    close(fd);
    stop();
}

static void case_stream_backpressure(void) {
    int fd;
    srv_http_req *req = slow_stream_begin(4096, &fd);
    T_EQ_INT(srv_http_stream_begin(req, 200, NULL), ERR_STATE);
    char chunk[1000];
    size_t sent = 0;
    int rc = 0, writes = 0;
    /* the client reads nothing: the buffer fills and a non-blocking write is told to retry */
    for (; writes < 100000; writes++) {
        fill_chunk(chunk, sizeof chunk, sent);
        rc = srv_http_stream_write(req, chunk, sizeof chunk, 100);
        if (rc)
            break;
        sent += sizeof chunk;
    }
    /* full for 100 ms with nobody reading: the buffered total is bounded (kernel buffers plus
     * out_cap_bytes plus one write), and a non-blocking write is refused too */
    T_EQ_INT(rc, ERR_BUSY);
    T_CHECKF(sent < (8u << 20), "%zu bytes accepted with nobody reading", sent);
    T_EQ_INT(srv_http_stream_write(req, chunk, sizeof chunk, 0), ERR_BUSY);
    /* now a reader drains it; blocking writes go through */
    slow_stream_finish(req, fd, sent, sizeof chunk);
}

/* A client that reads nothing, and a handler that keeps writing small events while the server's
 * output buffer has room: once a send has found the socket full, the writes only append. Each
 * write before this fix cost a failing send() (the caller's, under direct_write) and a wake-up
 * of the event thread with its own failing send(); srv_http_stats.send_full counts those sends.
 * Then a reader drains it and every byte arrives in order. */
static void case_stream_blocked_appends(void) {
    int fd;
    srv_http_req *req = slow_stream_begin(64 * 1024, &fd);
    char chunk[100];
    size_t sent = 0;
    srv_http_stats st;
    /* first fill the kernel's buffers a little at a time, so the output that waits when a send
     * first finds the socket full is small and the cap leaves room for many writes after it */
    for (int k = 0;; k++) {
        srv_http_stats_get(srv, &st);
        if (st.send_full > 0)
            break;
        T_CHECKF(k < BACKSTOP_MS, "no send found the socket full after %zu bytes", sent);
        fill_chunk(chunk, sizeof chunk, sent);
        if (srv_http_stream_write(req, chunk, sizeof chunk, 0) == 0)
            sent += sizeof chunk;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    uint64_t full0 = st.send_full;
    int rc = 0, writes = 0;
    for (; writes < 100000; writes++) {
        fill_chunk(chunk, sizeof chunk, sent);
        if ((rc = srv_http_stream_write(req, chunk, sizeof chunk, 0)))
            break;
        sent += sizeof chunk;
    }
    T_EQ_INT(rc, ERR_BUSY);
    srv_http_stats_get(srv, &st);
    /* the writes after the socket was full (hundreds, unless the output waiting then was near the
     * cap) cost no send(); a spurious EPOLLOUT may cost one more. With send_each_write and
     * direct_write (the toggle off) each of them tries its own send, which fails (nearly all:
     * the kernel may take a few bytes now and then) */
    T_CHECKF(writes >= 10, "only %d writes after the socket was full", writes);
    if (g_send_each_write)
        T_CHECKF(st.send_full - full0 >= (uint64_t)writes / 2,
                 "send_each_write: %llu more sends found the socket full over %d writes",
                 (unsigned long long)(st.send_full - full0), writes);
    else
        T_CHECKF(st.send_full - full0 <= 4, "%llu more sends found the socket full over %d writes",
                 (unsigned long long)(st.send_full - full0), writes);
    slow_stream_finish(req, fd, sent, sizeof chunk);
}

static void case_gone_mid_stream(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
    srv_http_req *req = wait_held();
    T_CHECK(req);
    T_OK(srv_http_stream_begin(req, 200, NULL));
    T_OK(srv_http_stream_write(req, "data: 1\n\n", 9, 1000));
    char b[64];
    T_CHECK(recv(fd, b, sizeof b, 0) > 0);
    close(fd);
    int rc = 0;
    for (int i = 0; i < BACKSTOP_MS / 20 && rc == 0; i++) {
        rc = srv_http_stream_write(req, "data: 2\n\n", 9, 1000);
        if (rc == 0) {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
    }
    T_EQ_INT(rc, ERR_CANCELLED);
    T_CHECK(srv_http_request_gone(req));
    srv_http_req_release(req);
    stop();
}

static void case_half_close(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    srv_http_req *req = wait_held();
    T_CHECK(req);
    shutdown(fd, SHUT_WR);
    /* the layer saw the EOF: it probes with an interim answer, which a live client accepts */
    char c100[25];
    read_n(fd, c100, 25);
    T_CHECK(memcmp(c100, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0);
    T_CHECK(!srv_http_request_gone(req));
    T_OK(srv_http_respond(req, 200, NULL, "late", 4));
    srv_http_req_release(req);
    size_t n;
    char *b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 200 ", 13) == 0 && strstr(b, "\r\n\r\nlate"), "got %s", b);
    free(b);
    close(fd);
    stop();
}

static void case_write_stall(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    cfg.idle_timeout_ms = 300;
    start(&cfg, 4096);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int rcv = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    T_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    PUTS(fd, "GET /big HTTP/1.1\r\nHost: t\r\n\r\n");
    /* the client never reads its 8 MiB answer: the connection is closed as stalled */
    T_CHECK(wait_open(1));
    T_CHECKF(wait_open(0), "a client that stopped reading was not closed");
    srv_http_stats st;
    srv_http_stats_get(srv, &st);
    T_EQ_INT(st.timed_out, 1);
    close(fd);
    stop();
}

static void case_stream_http10(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /stream HTTP/1.0\r\n\r\n");
    srv_http_req *req = wait_held();
    T_CHECK(req);
    T_OK(srv_http_stream_begin(req, 200, "Content-Type: text/event-stream\r\n"));
    T_OK(srv_http_stream_write(req, "data: a\n\n", 9, 1000));
    T_OK(srv_http_stream_write(req, "data: b\n\n", 9, 1000));
    T_OK(srv_http_stream_end(req));
    T_EQ_INT(srv_http_stream_write(req, "x", 1, 0), ERR_STATE);
    T_EQ_INT(srv_http_respond(req, 200, NULL, "x", 1), ERR_STATE);
    srv_http_req_release(req);
    size_t n;
    char *b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 200 ", 13) == 0 && strcasestr(b, "Connection: close") &&
                 !strcasestr(b, "Transfer-Encoding") &&
                 strstr(b, "\r\n\r\ndata: a\n\ndata: b\n\n") && count_status_lines(b) == 1,
             "got %s", b);
    free(b);
    close(fd);
    stop();
}

static void case_ipv6_per_addr(void) {
    int lfd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 64) != 0) {
        if (lfd >= 0)
            close(lfd);
        test_skip("no IPv6 loopback here");
    }
    socklen_t sl = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &sl);
    srv_http_cfg cfg;
    base_cfg(&cfg);
    cfg.max_conns_per_addr = 2;
    cfg.listen_fd = lfd;
    cfg.on_head = on_head;
    cfg.on_request = on_request;
    T_OK(srv_http_create(&cfg, &srv));
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = socket(AF_INET6, SOCK_STREAM, 0);
        T_CHECK(connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0);
        if (i == 1)
            T_CHECK(wait_open(2));
    }
    size_t n;
    char *b = read_to_close(fds[2], &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 429 ", 13) == 0, "got %.40s", b);
    free(b);
    PUTS(fds[0], "GET /peer HTTP/1.1\r\nHost: t\r\n\r\n");
    char head[4096], body[4096];
    size_t bl;
    T_EQ_INT(read_response(fds[0], head, sizeof head, body, sizeof body, &bl, false), 200);
    T_CHECKF(strcmp(body, "::1") == 0, "peer %s", body);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    stop();
}

static void case_shutdown_deadline(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int fd = dial();
    PUTS(fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    srv_http_req *req = wait_held();
    T_CHECK(req);
    /* nobody answers: at the deadline the connection is closed and the request is gone */
    srv_http_shutdown(srv, 200);
    T_CHECK(srv_http_request_gone(req));
    T_EQ_INT(srv_http_respond(req, 200, NULL, "late", 4), ERR_CANCELLED);
    srv_http_req_release(req);
    size_t n;
    char *b = read_to_close(fd, &n);
    T_EQ_INT(n, 0);
    free(b);
    close(fd);
    stop();
}

static void *shutdown_main(void *arg) {
    srv_http_shutdown(arg, BACKSTOP_MS);
    return NULL;
}

static void case_shutdown(void) {
    srv_http_cfg cfg;
    base_cfg(&cfg);
    start(&cfg, 0);
    int idle = dial();
    int fd = dial();
    PUTS(fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    srv_http_req *req = wait_held();
    T_CHECK(req);
    T_CHECK(wait_open(2));
    pthread_t t;
    T_CHECK(pthread_create(&t, NULL, shutdown_main, srv) == 0);
    /* the idle connection is closed; the one in progress still gets its answer */
    size_t n;
    char *b = read_to_close(idle, &n);
    T_EQ_INT(n, 0);
    free(b);
    T_OK(srv_http_respond(req, 200, NULL, "bye", 3));
    srv_http_req_release(req);
    b = read_to_close(fd, &n);
    T_CHECKF(strncmp(b, "HTTP/1.1 200 ", 13) == 0 && strcasestr(b, "Connection: close") &&
                 strstr(b, "\r\n\r\nbye"),
             "got %s", b);
    free(b);
    pthread_join(t, NULL);
    close(fd);
    close(idle);
    stop();
}

/* The server's end of the connection whose client end is fd: found among this process's
 * descriptors as the socket whose peer is fd's local address; -1 if none. */
static int server_end(int fd) {
    struct sockaddr_in me;
    socklen_t sl = sizeof me;
    T_CHECK(getsockname(fd, (struct sockaddr *)&me, &sl) == 0);
    for (int i = 3; i < 4096; i++) {
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        if (i != fd && getpeername(i, (struct sockaddr *)&peer, &pl) == 0 &&
            peer.sin_family == AF_INET && peer.sin_port == me.sin_port &&
            peer.sin_addr.s_addr == me.sin_addr.s_addr)
            return i;
    }
    return -1;
}

/* Accepted connections get TCP_NODELAY (an answer's head and each streamed event leave at once,
 * not after the peer's delayed ACK of the previous write); cfg.nagle keeps the kernel's default. */
static void case_nodelay(void) {
    for (int nagle = 0; nagle <= 1; nagle++) {
        srv_http_cfg cfg;
        base_cfg(&cfg);
        cfg.nagle = nagle;
        start(&cfg, 0);
        int fd = dial();
        /* an answered request: the connection has been accepted and set up by now */
        PUTS(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
        char head[4096], body[4096];
        size_t bl;
        T_EQ_INT(read_response(fd, head, sizeof head, body, sizeof body, &bl, false), 200);
        int s = server_end(fd), v = -1;
        socklen_t vl = sizeof v;
        T_CHECKF(s >= 0, "the server's end of the connection not found");
        T_CHECK(getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0);
        T_CHECKF((v != 0) == !nagle, "nagle %d: TCP_NODELAY is %d on the accepted connection",
                 nagle, v);
        close(fd);
        stop();
    }
}

int main(void) {
    test_run("srv_http.parse_head", case_parse_head);
    test_run("srv_http.parse_chunked", case_parse_chunked);
    test_run("srv_http.simple_keepalive", case_simple);
    test_run("srv_http.tcp_nodelay", case_nodelay);
    test_run("srv_http.pipelined_chunked_head", case_pipelined);
    test_run("srv_http.http10_expect_continue", case_http10_and_continue);
    test_run("srv_http.malformed_one_status_line", case_malformed);
    test_run("srv_http.idle_1000_plus_client", case_idle_thousand);
    test_run("srv_http.caps_429_503", case_caps);
    test_run("srv_http.deadlines_head_idle_body_rate", case_deadlines);
    test_run("srv_http.stream_backpressure", case_stream_backpressure);
    test_run("srv_http.stream_blocked_appends", case_stream_blocked_appends);
    test_run("srv_http.gone_mid_stream", case_gone_mid_stream);
    test_run("srv_http.half_close_answered", case_half_close);
    test_run("srv_http.write_stall_closed", case_write_stall);
    test_run("srv_http.stream_http10_close_delimited", case_stream_http10);
    test_run("srv_http.graceful_shutdown", case_shutdown);
    test_run("srv_http.shutdown_deadline_gone", case_shutdown_deadline);
    test_run("srv_http.ipv6_per_address_limit", case_ipv6_per_addr);
    /* the stream cases again with the caller's thread sending (srv_http_cfg.direct_write) */
    g_direct_write = true;
    test_run("srv_http.direct_write.stream_backpressure", case_stream_backpressure);
    test_run("srv_http.direct_write.stream_blocked_appends", case_stream_blocked_appends);
    g_send_each_write = true; /* the toggle off: each write tries its send */
    test_run("srv_http.direct_write.send_each_write", case_stream_blocked_appends);
    g_send_each_write = false;
    test_run("srv_http.direct_write.gone_mid_stream", case_gone_mid_stream);
    test_run("srv_http.direct_write.write_stall_closed", case_write_stall);
    test_run("srv_http.direct_write.stream_http10_close_delimited", case_stream_http10);
    test_run("srv_http.direct_write.shutdown_deadline_gone", case_shutdown_deadline);
    g_direct_write = false;
    return test_summary();
}
