/* SPDX-License-Identifier: MIT */
/*
 * srv_http: the event-driven HTTP/1.1 connection layer (contract and limits in srv_http.h).
 *
 * Structure. One event thread runs a level-triggered epoll loop over the listening socket, an
 * eventfd and every connection. A connection moves through states owned by that thread:
 *   CONN_HEAD     reading a request head (idle when its input buffer is empty)
 *   CONN_BODY     reading the body of a request the handler accepted
 *   CONN_HANDLER  the request is with the handler; input is not read (pipelined bytes wait in
 *                 the kernel), only a read EOF or hang-up is watched, and queued output is sent
 *   CONN_CLOSING  a final answer with "Connection: close" is being sent; then the write side is
 *                 shut and input drained for linger_ms so the close does not reset the answer
 * conn_step() advances a connection as far as it can after any event (flush output, finish an
 * answered request, parse the next pipelined head, consume body bytes) and recomputes its epoll
 * interest; deadlines are checked by a scan of all connections every SRV_HTTP_TICK_MS.
 *
 * Invariants.
 *   - Only the event thread calls recv/close on a connection's socket, and send except under
 *     cfg.direct_write: a stream's caller thread sets c->sending under s->mu on a connection not
 *     yet closed and sends without the lock; meanwhile the event thread does not send, move or
 *     free that output, and conn_close waits for the flag to clear before close(), so the
 *     descriptor cannot have been reused; only the event thread touches a connection's read-side
 *     fields (state, input buffer, timers, list links, the address table).
 *   - s->mu guards everything a caller thread touches: each connection's output buffer,
 *     close_after, closed, the wake list and the reference counts of connections and requests,
 *     a request's answer state, and the stats. Callbacks run without s->mu held.
 *   - A connection holds one reference for its open socket and one per request object alive on
 *     it; a request one for the layer (while it is the connection's current request) and one for
 *     the caller (from on_request to srv_http_req_release). Whoever drops the last frees.
 *   - Exactly one answer per request: answer moves NONE -> WHOLE or NONE -> STREAM -> DONE under
 *     s->mu; the layer's own error answers are queued only before on_request (or after an
 *     ANSWERED on_head that did not answer), so the status line is written once.
 *   - A closed connection is never on the wake list, so a caller's release may free it at once.
 */
#include "server/srv_http.h"

#include "base/clock.h"
#include "base/err.h"
#include "server/srv_http_parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SRV_HTTP_TICK_MS      50
#define SRV_HTTP_READ_EXTRA   4096
#define SRV_HTTP_ADDR_BUCKETS 1024
#define SRV_HTTP_LINGER_MAX   (1u << 20) /* input bytes drained at most while lingering */

enum { CONN_HEAD, CONN_BODY, CONN_HANDLER, CONN_CLOSING };
enum { ANSWER_NONE, ANSWER_WHOLE, ANSWER_STREAM, ANSWER_DONE };

typedef struct outbuf {
    char *p;
    size_t off, len, cap; /* unsent bytes are p[off, len) */
} outbuf;

typedef struct addr_entry {
    unsigned char key[16];
    int count;
    struct addr_entry *next;
} addr_entry;

typedef struct conn conn;

struct srv_http_req {
    srv_http *s;
    conn *c;
    int refs;       /* under s->mu */
    int answer;     /* ANSWER_*, under s->mu */
    bool chunked;   /* the stream uses chunked coding (else close-delimited) */
    bool body_done; /* the body was read (or there was none): set before on_request */
    bool handed;    /* on_request was called */
    atomic_bool gone;
    srv_http_head h; /* spans into head */
    char *head;      /* the head's bytes, each token NUL-terminated in place */
    char *body;
    size_t body_len, body_cap, body_limit, body_counted;
};

struct conn {
    srv_http *s;
    int fd;
    int refs; /* under s->mu */
    /* under s->mu */
    outbuf out;
    bool close_after, closed, in_wake;
    bool sending; /* a direct_write caller is in send() without s->mu: nobody else sends, moves
                     or frees out until it clears this (and broadcasts room) */
    bool out_blocked; /* a send found the socket full and output still waits: writes only
                         append (no send, no wake) until the event thread's flush drains it */
    conn *wake_next;
    pthread_cond_t room; /* signalled when output drains or the connection closes */
    /* event thread only */
    int state;
    char *in;
    size_t in_len, in_cap;
    int64_t t0_ns; /* idle since (HEAD, empty input), head's first byte, body start, linger start */
    int64_t t_sent_ns; /* under s->mu: when queued output last moved or began to wait */
    bool stall_armed;  /* under s->mu: output waits and t_sent_ns times it */
    uint64_t body_got;
    srv_http_chunk chunk;
    srv_http_req *req; /* the current request (the layer's reference) */
    bool peer_eof;     /* the client's read EOF; written under s->mu (answers read it) */
    bool shut_wr;
    size_t drained;
    uint32_t events;
    unsigned char key[16];
    char peer[INET6_ADDRSTRLEN];
    conn *prev, *next;
    conn *dead_next; /* on s->dead after its socket closed */
};

struct srv_http {
    srv_http_cfg cfg;
    int ep, evfd, lfd;
    pthread_t thread;
    bool thread_started, joined;
    pthread_mutex_t mu;
    /* under mu */
    conn *wake;
    bool stop;
    int64_t stop_deadline_ns;
    srv_http_stats stats;
    /* event thread only */
    conn *conns;
    conn *dead; /* closed this loop iteration; their socket reference is dropped after it */
    int n_conns;
    bool stopping, listen_on;
    int64_t listen_pause_until_ns, last_scan_ns;
    _Atomic size_t body_total; /* written by the event thread only; read by srv_http_stats_get */
    addr_entry *addrs[SRV_HTTP_ADDR_BUCKETS];
};

/* sentinels for epoll data */
static char tag_listen, tag_event;

/* ---- small helpers ---- */

static int out_reserve(outbuf *b, size_t n) {
    if (b->off > 0 && b->off == b->len)
        b->off = b->len = 0;
    if (b->len + n <= b->cap)
        return 0;
    if (b->off > 0) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->len + n <= b->cap)
            return 0;
    }
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return ERR_NOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int out_put(outbuf *b, const void *data, size_t n) {
    if (out_reserve(b, n))
        return ERR_NOMEM;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static int out_printf(outbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int out_printf(outbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return ERR_INVAL;
    return out_put(b, tmp, (size_t)n);
}

static size_t out_pending(const outbuf *b) {
    return b->len - b->off;
}

/* Appends "HTTP/1.1 <status> <reason>\r\nDate: <IMF-fixdate>\r\n" (RFC 9110 6.6.1: an origin
 * server with a clock sends Date). Day and month names are spelled here, not by the locale. */
static int out_status(outbuf *b, int status) {
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    return out_printf(b, "HTTP/1.1 %d %s\r\nDate: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", status,
                      srv_http_reason(status), days[tm.tm_wday % 7], tm.tm_mday,
                      months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* Appends the OpenAI error JSON for message to b: type "server_error" for 500 and 503 (the server's
 * state), "invalid_request_error" for everything the request itself caused (501 and 505 too). */
static int json_error(outbuf *b, int status, const char *message) {
    int rc = out_printf(b, "{\"error\":{\"message\":\"");
    for (const unsigned char *p = (const unsigned char *)message; !rc && *p; p++) {
        if (*p == '"' || *p == '\\')
            rc = out_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            rc = out_printf(b, "\\u%04x", *p);
        else
            rc = out_put(b, p, 1);
    }
    if (!rc)
        rc = out_printf(b, "\",\"type\":\"%s\",\"param\":null,\"code\":null}}",
                        status == 500 || status == 503 ? "server_error" : "invalid_request_error");
    return rc;
}

static int64_t ms_ns(int ms) {
    return (int64_t)ms * 1000000;
}

static void wake_event_thread(srv_http *s) {
    uint64_t one = 1;
    ssize_t r = write(s->evfd, &one, sizeof one);
    (void)r;
}

/* Starts the stall clock of c's output if it is not running (s->mu held). */
static void conn_arm_stall_locked(conn *c) {
    if (!c->stall_armed) {
        c->stall_armed = true;
        c->t_sent_ns = clock_now_ns();
    }
}

/* Puts c on the wake list (s->mu held) and wakes the event thread. While c's output is blocked
 * (out_blocked) the event thread already waits for EPOLLOUT on it, or is about to step it (the
 * send that set the flag woke it), and its flush sends whatever was appended since: nothing to
 * do but keep the stall clock running. */
static void conn_wake_locked(conn *c) {
    if (c->closed)
        return;
    conn_arm_stall_locked(c);
    if (c->out_blocked)
        return;
    if (!c->in_wake) {
        c->in_wake = true;
        c->wake_next = c->s->wake;
        c->s->wake = c;
    }
    wake_event_thread(c->s);
}

/* cfg.direct_write: sends c's queued output on the caller's thread (called with s->mu held; the
 * send itself runs without it, nonblocking, with c->sending set) and wakes the event thread only
 * if some remains (a full socket, an error: the event thread's own flush then sees the error and
 * closes). A send that finds the socket full sets out_blocked: until the event thread's flush
 * drains the output, later writes only append (a slow reader costs no failing send and no wake
 * per write). Without direct_write: conn_wake_locked. */
static void conn_send_or_wake_locked(conn *c) {
    srv_http *s = c->s;
    if (c->closed)
        return;
    while (s->cfg.direct_write && !c->sending && !c->closed && !c->out_blocked &&
           out_pending(&c->out) > 0) {
        /* send without the lock: only this thread appends to a stream's output, and the event
         * thread leaves out and the socket alone while `sending` is set */
        const char *p = c->out.p + c->out.off;
        size_t len = out_pending(&c->out);
        c->sending = true;
        pthread_mutex_unlock(&s->mu);
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        int e = errno;
        pthread_mutex_lock(&s->mu);
        c->sending = false;
        pthread_cond_broadcast(&c->room); /* conn_close may wait for the send to end */
        if (n > 0) {
            c->out.off += (size_t)n;
            c->t_sent_ns = clock_now_ns();
        } else if (!(n < 0 && e == EINTR)) {
            if (n < 0 && (e == EAGAIN || e == EWOULDBLOCK)) {
                s->stats.send_full++;
                conn_wake_locked(c); /* the event thread takes over the output ... */
                c->out_blocked = !s->cfg.send_each_write; /* ... and until it drains it,
                                                             writes only append */
                return;
            }
            break;
        }
    }
    if (c->closed)
        return;
    if (out_pending(&c->out) > 0) {
        conn_wake_locked(c);
        return;
    }
    c->out.off = c->out.len = 0; /* drained: the buffer starts over */
    c->stall_armed = false;
}

static void conn_unref_locked(conn *c) {
    if (--c->refs > 0)
        return;
    free(c->out.p);
    free(c->in);
    pthread_cond_destroy(&c->room);
    free(c);
}

static void req_unref_locked(srv_http_req *r) {
    if (--r->refs > 0)
        return;
    conn_unref_locked(r->c);
    free(r->head);
    free(r->body);
    free(r);
}

/* ---- answers (s->mu held) ---- */

/* Whether the answer to r must close the connection. */
static bool answer_closes(srv_http_req *r) {
    conn *c = r->c;
    return !r->h.keep_alive || !r->body_done || c->close_after || c->s->stop || c->peer_eof;
}

static int respond_locked(srv_http_req *r, int status, const char *headers, const char *body,
                          size_t len) {
    conn *c = r->c;
    if (r->answer != ANSWER_NONE)
        return err_set(ERR_STATE, "request already answered");
    if (atomic_load(&r->gone) || c->closed) {
        r->answer = ANSWER_DONE;
        return ERR_CANCELLED;
    }
    bool close = answer_closes(r);
    size_t mark = c->out.len;
    int rc = out_status(&c->out, status);
    if (!rc && headers)
        rc = out_put(&c->out, headers, strlen(headers));
    if (!rc)
        rc = out_printf(&c->out, "Content-Length: %zu\r\nConnection: %s\r\n\r\n", len,
                        close ? "close" : "keep-alive");
    if (!rc && !r->h.is_head && len)
        rc = out_put(&c->out, body, len);
    if (rc) {
        c->out.len = mark;
        return err_set(ERR_NOMEM, "out of memory queueing a %zu-byte answer", len);
    }
    r->answer = ANSWER_DONE;
    if (close)
        c->close_after = true;
    conn_wake_locked(c);
    return 0;
}

static int respond_error_locked(srv_http_req *r, int status, const char *message) {
    outbuf b = {0};
    if (json_error(&b, status, message)) {
        free(b.p);
        return ERR_NOMEM;
    }
    /* a 503 is the server's state, not the request's: the client may retry */
    int rc = respond_locked(r, status,
                            status == 503 ? "Content-Type: application/json\r\nRetry-After: 1\r\n"
                                          : "Content-Type: application/json\r\n",
                            b.p, b.len);
    free(b.p);
    return rc;
}

/* ---- public request API ---- */

const char *srv_http_req_method(const srv_http_req *r) {
    return r->head + r->h.method.off;
}
const char *srv_http_req_path(const srv_http_req *r) {
    return r->head + r->h.path.off;
}
const char *srv_http_req_query(const srv_http_req *r) {
    return r->head + r->h.query.off;
}
bool srv_http_req_bearer_ok(const srv_http_req *req, const char *key) {
    if (!key || !key[0])
        return true;
    const char *h = srv_http_req_header(req, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return false;
    const char *tok = h + 7;
    size_t a = strlen(tok), b = strlen(key);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)((i < a ? (unsigned char)tok[i] : 0) ^ (unsigned char)key[i]);
    return diff == 0;
}

const char *srv_http_req_peer(const srv_http_req *r) {
    return r->c->peer;
}
int srv_http_req_minor(const srv_http_req *r) {
    return r->h.minor;
}
bool srv_http_req_is_head(const srv_http_req *r) {
    return r->h.is_head;
}
int srv_http_req_header_count(const srv_http_req *r) {
    return r->h.n_fields;
}

const char *srv_http_req_header(const srv_http_req *r, const char *name) {
    const srv_http_field *f = srv_http_head_field(&r->h, r->head, name);
    return f ? r->head + f->value.off : NULL;
}

bool srv_http_req_header_at(const srv_http_req *r, int i, const char **name, const char **value) {
    if (i < 0 || i >= r->h.n_fields)
        return false;
    *name = r->head + r->h.fields[i].name.off;
    *value = r->head + r->h.fields[i].value.off;
    return true;
}

const char *srv_http_req_body(const srv_http_req *r, size_t *len) {
    *len = r->body ? r->body_len : 0;
    return r->body ? r->body : "";
}

void srv_http_req_set_body_limit(srv_http_req *r, size_t max_bytes) {
    r->body_limit = max_bytes;
}

bool srv_http_request_gone(const srv_http_req *r) {
    return atomic_load((atomic_bool *)&r->gone);
}

int srv_http_respond(srv_http_req *r, int status, const char *headers, const char *body,
                     size_t len) {
    if (!r || status < 200 || status > 999 || (len && !body))
        return ERR_INVAL;
    pthread_mutex_lock(&r->s->mu);
    int rc = respond_locked(r, status, headers, body, len);
    pthread_mutex_unlock(&r->s->mu);
    return rc;
}

int srv_http_respond_error(srv_http_req *r, int status, const char *message) {
    if (!r || status < 400 || status > 599 || !message)
        return ERR_INVAL;
    pthread_mutex_lock(&r->s->mu);
    int rc = respond_error_locked(r, status, message);
    pthread_mutex_unlock(&r->s->mu);
    return rc;
}

int srv_http_stream_begin(srv_http_req *r, int status, const char *headers) {
    if (!r || status < 200 || status > 999)
        return ERR_INVAL;
    srv_http *s = r->s;
    pthread_mutex_lock(&s->mu);
    conn *c = r->c;
    int rc = 0;
    if (r->answer != ANSWER_NONE) {
        rc = err_set(ERR_STATE, "request already answered");
    } else if (atomic_load(&r->gone) || c->closed) {
        r->answer = ANSWER_DONE;
        rc = ERR_CANCELLED;
    } else {
        r->chunked = r->h.minor == 1;
        bool close = !r->chunked || answer_closes(r);
        size_t mark = c->out.len;
        rc = out_status(&c->out, status);
        if (!rc && headers)
            rc = out_put(&c->out, headers, strlen(headers));
        if (!rc && r->chunked)
            rc = out_printf(&c->out, "Transfer-Encoding: chunked\r\n");
        if (!rc)
            rc = out_printf(&c->out, "Connection: %s\r\n\r\n", close ? "close" : "keep-alive");
        if (rc) {
            c->out.len = mark;
            rc = ERR_NOMEM;
        } else {
            r->answer = ANSWER_STREAM;
            if (close)
                c->close_after = true;
            conn_send_or_wake_locked(c);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int wait_room_locked(srv_http_req *r, int timeout_ms) {
    conn *c = r->c;
    struct timespec until;
    bool timed = false;
    while (!atomic_load(&r->gone) && !c->closed &&
           out_pending(&c->out) >= r->s->cfg.out_cap_bytes) {
        if (timeout_ms <= 0)
            return ERR_BUSY;
        if (!timed) {
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += timeout_ms / 1000;
            until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            timed = true;
        }
        if (pthread_cond_timedwait(&c->room, &r->s->mu, &until) == ETIMEDOUT &&
            out_pending(&c->out) >= r->s->cfg.out_cap_bytes && !atomic_load(&r->gone))
            return ERR_BUSY;
    }
    return atomic_load(&r->gone) || c->closed ? ERR_CANCELLED : 0;
}

int srv_http_stream_write(srv_http_req *r, const void *data, size_t len, int timeout_ms) {
    if (!r || (len && !data))
        return ERR_INVAL;
    srv_http *s = r->s;
    pthread_mutex_lock(&s->mu);
    conn *c = r->c;
    int rc = 0;
    if (r->answer != ANSWER_STREAM)
        rc = err_set(ERR_STATE, "no stream open on this request");
    else if (atomic_load(&r->gone) || c->closed)
        rc = ERR_CANCELLED;
    else if (len == 0 || r->h.is_head)
        rc = 0;
    else if ((rc = wait_room_locked(r, timeout_ms)) == 0) {
        size_t mark = c->out.len;
        if (r->chunked)
            rc = out_printf(&c->out, "%zx\r\n", len);
        if (!rc)
            rc = out_put(&c->out, data, len);
        if (!rc && r->chunked)
            rc = out_put(&c->out, "\r\n", 2);
        if (rc) {
            c->out.len = mark;
            rc = ERR_NOMEM;
        } else {
            conn_send_or_wake_locked(c);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int srv_http_stream_end(srv_http_req *r) {
    if (!r)
        return ERR_INVAL;
    srv_http *s = r->s;
    pthread_mutex_lock(&s->mu);
    conn *c = r->c;
    int rc = 0;
    if (r->answer != ANSWER_STREAM) {
        rc = err_set(ERR_STATE, "no stream open on this request");
    } else {
        r->answer = ANSWER_DONE;
        if (atomic_load(&r->gone) || c->closed)
            rc = ERR_CANCELLED;
        else {
            if (r->chunked && !r->h.is_head && out_put(&c->out, "0\r\n\r\n", 5))
                c->close_after = true; /* cannot terminate the coding: the close ends it */
            conn_wake_locked(c);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void srv_http_req_release(srv_http_req *r) {
    if (!r)
        return;
    srv_http *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (r->answer == ANSWER_NONE) {
        respond_error_locked(r, 500, "the request was not answered");
        r->answer = ANSWER_DONE;
    } else if (r->answer == ANSWER_STREAM) {
        r->answer = ANSWER_DONE;
        r->c->close_after = true; /* cut: the close tells the client */
        conn_wake_locked(r->c);
    }
    req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

/* ---- per-address connection counts (event thread) ---- */

static addr_entry **addr_slot(srv_http *s, const unsigned char key[16]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    addr_entry **pp = &s->addrs[h % SRV_HTTP_ADDR_BUCKETS];
    while (*pp && memcmp((*pp)->key, key, 16) != 0)
        pp = &(*pp)->next;
    return pp;
}

static int addr_count(srv_http *s, const unsigned char key[16]) {
    addr_entry **pp = addr_slot(s, key);
    return *pp ? (*pp)->count : 0;
}

static int addr_add(srv_http *s, const unsigned char key[16]) {
    addr_entry **pp = addr_slot(s, key);
    if (!*pp) {
        addr_entry *e = calloc(1, sizeof *e);
        if (!e)
            return ERR_NOMEM;
        memcpy(e->key, key, 16);
        *pp = e;
    }
    (*pp)->count++;
    return 0;
}

static void addr_del(srv_http *s, const unsigned char key[16]) {
    addr_entry **pp = addr_slot(s, key);
    addr_entry *e = *pp;
    if (e && --e->count == 0) {
        *pp = e->next;
        free(e);
    }
}

/* ---- connections (event thread) ---- */

static void conn_set_events(conn *c, uint32_t ev) {
    if (ev == c->events)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(c->s->ep, EPOLL_CTL_MOD, c->fd, &e) == 0)
        c->events = ev;
}

/* Closes c's socket; its request (if any) becomes gone. c stays allocated until conns_bury, but
 * only its closed flag may be looked at after this. */
static void conn_close(conn *c) {
    srv_http *s = c->s;
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    addr_del(s, c->key);
    if (c->req && !c->req->handed)
        s->body_total -= c->req->body_counted;
    free(c->in);
    c->in = NULL;
    pthread_mutex_lock(&s->mu);
    s->stats.open_conns = s->n_conns;
    c->closed = true;
    if (c->in_wake) {
        for (conn **pp = &s->wake; *pp; pp = &(*pp)->wake_next)
            if (*pp == c) {
                *pp = c->wake_next;
                break;
            }
        c->in_wake = false;
    }
    pthread_cond_broadcast(&c->room);
    if (c->req) {
        atomic_store(&c->req->gone, true);
        req_unref_locked(c->req);
        c->req = NULL;
    }
    while (c->sending) /* a direct_write caller's send() on this socket must end first */
        pthread_cond_wait(&c->room, &s->mu);
    pthread_mutex_unlock(&s->mu);
    close(c->fd); /* only now: a direct_write sender checks `closed` under s->mu before send() */
    /* the socket's reference goes after this loop iteration: an event for c may still be in the
     * batch epoll_wait returned */
    c->dead_next = s->dead;
    s->dead = c;
}

static void conns_bury(srv_http *s) {
    pthread_mutex_lock(&s->mu);
    while (s->dead) {
        conn *c = s->dead;
        s->dead = c->dead_next;
        conn_unref_locked(c);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Queues the layer's own error answer and moves c to CLOSING. Only before on_request. */
static void conn_fail(conn *c, int status, const char *why) {
    srv_http *s = c->s;
    pthread_mutex_lock(&s->mu);
    s->stats.bad_requests++;
    if (c->req && c->req->answer == ANSWER_NONE) {
        c->close_after = true;
        respond_error_locked(c->req, status, why);
    } else if (!c->req) {
        outbuf b = {0};
        if (json_error(&b, status, why) == 0 && out_status(&c->out, status) == 0 &&
            out_printf(&c->out,
                       "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: "
                       "close\r\n\r\n",
                       b.len) == 0)
            out_put(&c->out, b.p, b.len);
        free(b.p);
    }
    c->close_after = true;
    pthread_mutex_unlock(&s->mu);
    c->state = CONN_CLOSING;
    c->t0_ns = clock_now_ns();
}

/* Sends queued output. Returns false if the socket failed (the caller closes c). */
static bool conn_flush(conn *c, bool *drained) {
    srv_http *s = c->s;
    bool ok = true;
    pthread_mutex_lock(&s->mu);
    if (c->sending) { /* a direct_write caller is sending; it wakes us for what it leaves */
        *drained = false;
        pthread_mutex_unlock(&s->mu);
        return true;
    }
    while (out_pending(&c->out) > 0) {
        ssize_t n =
            send(c->fd, c->out.p + c->out.off, out_pending(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out.off += (size_t)n;
            c->t_sent_ns = clock_now_ns();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            s->stats.send_full++;
            /* conn_step arms EPOLLOUT: writes only append till then */
            c->out_blocked = !s->cfg.send_each_write;
            break;
        }
        ok = false;
        break;
    }
    if (out_pending(&c->out) < s->cfg.out_cap_bytes)
        pthread_cond_broadcast(&c->room);
    *drained = out_pending(&c->out) == 0;
    if (*drained) {
        c->stall_armed = false; /* the stall clock runs only while output waits */
        c->out_blocked = false;
    }
    if (*drained && c->out.cap > 4 * s->cfg.out_cap_bytes) {
        free(c->out.p);
        c->out = (outbuf){0};
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Takes a parsed head at the start of c->in into a new request (tokens NUL-terminated in a copy;
 * each token is followed by a delimiter inside the head, which the copy overwrites). */
static srv_http_req *req_from_head(conn *c, const srv_http_head *h) {
    srv_http_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->head = malloc(h->head_len + 1);
    if (!r->head) {
        free(r);
        return NULL;
    }
    r->s = c->s;
    r->c = c;
    r->refs = 1;
    atomic_init(&r->gone, false);
    r->body_limit = c->s->cfg.max_body_bytes;
    r->h = *h;
    memcpy(r->head, c->in, h->head_len);
    r->head[h->head_len] = 0;
    r->head[h->method.off + h->method.len] = 0;
    r->head[h->path.off + h->path.len] = 0;
    r->head[h->query.off + h->query.len] = 0;
    for (int i = 0; i < h->n_fields; i++) {
        r->head[h->fields[i].name.off + h->fields[i].name.len] = 0;
        r->head[h->fields[i].value.off + h->fields[i].value.len] = 0;
    }
    pthread_mutex_lock(&c->s->mu);
    c->refs++;
    pthread_mutex_unlock(&c->s->mu);
    return r;
}

/* Grows r's body buffer to hold want bytes (and a NUL), within the global budget. */
static int body_grow(srv_http *s, srv_http_req *r, size_t want) {
    /* the budget counts the bytes the body needs (at most its limit: a chunked body is decoded
     * into room for one byte more, to notice an excess, which must be a 413, not a 503), the
     * allocation may be up to twice that (doubling) */
    size_t need = want < r->body_limit ? want : r->body_limit;
    if (need > r->body_counted && s->cfg.max_body_total_bytes &&
        s->body_total + (need - r->body_counted) > s->cfg.max_body_total_bytes)
        return ERR_FULL;
    if (want + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < want + 1)
            cap *= 2;
        if (cap > r->body_limit + 1 && want + 1 <= r->body_limit + 1)
            cap = r->body_limit + 1;
        char *p = realloc(r->body, cap);
        if (!p)
            return ERR_NOMEM;
        r->body = p;
        r->body_cap = cap;
    }
    if (need > r->body_counted) {
        s->body_total += need - r->body_counted;
        r->body_counted = need;
    }
    return 0;
}

/* Allocates r's body for exactly n bytes (and the NUL), counting n against the budget. Returns 0,
 * ERR_FULL (the budget has no room), ERR_NOMEM. */
static int body_reserve(srv_http *s, srv_http_req *r, size_t n) {
    if (s->cfg.max_body_total_bytes && s->body_total + n > s->cfg.max_body_total_bytes)
        return ERR_FULL;
    char *p = realloc(r->body, n + 1);
    if (!p)
        return ERR_NOMEM;
    s->body_total += n - r->body_counted;
    r->body_counted = n;
    r->body = p;
    r->body_cap = n + 1;
    return 0;
}

static void conn_consume(conn *c, size_t n) {
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

/* Hands the complete request to the caller. */
static void conn_deliver(conn *c) {
    srv_http *s = c->s;
    srv_http_req *r = c->req;
    if (r->body)
        r->body[r->body_len] = 0;
    s->body_total -= r->body_counted;
    r->body_counted = 0;
    r->body_done = true;
    r->handed = true;
    pthread_mutex_lock(&s->mu);
    r->refs++; /* the caller's */
    pthread_mutex_unlock(&s->mu);
    c->state = CONN_HANDLER;
    s->cfg.on_request(s->cfg.user, r);
}

/* Parses a head from c->in. Returns false when nothing more can be done now. */
static bool conn_parse_head(conn *c) {
    srv_http *s = c->s;
    srv_http_head *h = malloc(sizeof *h);
    if (!h) {
        conn_fail(c, 503, "out of memory");
        return true;
    }
    srv_http_parse_limits lim = {s->cfg.max_head_bytes, s->cfg.max_headers};
    int status = 0;
    const char *why = "";
    int rc = srv_http_parse_head(c->in, c->in_len, &lim, h, &status, &why);
    if (rc == ERR_BUSY) {
        free(h);
        return false;
    }
    if (rc) {
        free(h);
        conn_fail(c, status, why);
        return true;
    }
    srv_http_req *r = req_from_head(c, h);
    free(h);
    if (!r) {
        conn_fail(c, 503, "out of memory");
        return true;
    }
    conn_consume(c, r->h.head_len);
    c->req = r;
    r->body_done = r->h.body == SRV_HTTP_BODY_NONE;
    pthread_mutex_lock(&s->mu);
    s->stats.requests++;
    pthread_mutex_unlock(&s->mu);
    int act = s->cfg.on_head ? s->cfg.on_head(s->cfg.user, r) : SRV_HTTP_HEAD_READ_BODY;
    if (act == SRV_HTTP_HEAD_ANSWERED) {
        pthread_mutex_lock(&s->mu);
        if (r->answer == ANSWER_NONE) {
            respond_error_locked(r, 500, "the request was not answered");
        } else if (r->answer == ANSWER_STREAM) {
            /* a stream begun in on_head cannot be continued (nobody holds req): cut it */
            r->answer = ANSWER_DONE;
            c->close_after = true;
        }
        if (!r->body_done)
            c->close_after = true;
        pthread_mutex_unlock(&s->mu);
        c->state = CONN_HANDLER;
        return true;
    }
    if (r->h.body == SRV_HTTP_BODY_LENGTH && r->h.content_length > r->body_limit) {
        conn_fail(c, 413, s->cfg.too_large_msg);
        return true;
    }
    /* a body of declared length takes its whole room of the budget now, before any byte of it
     * arrives: what the head announced fits when it comes, and a client holding a half-sent
     * body holds what it announced */
    if (r->h.body == SRV_HTTP_BODY_LENGTH && r->h.content_length > 0) {
        int rr = body_reserve(s, r, (size_t)r->h.content_length);
        if (rr) {
            conn_fail(c, 503, rr == ERR_FULL ? s->cfg.budget_msg : "out of memory");
            return true;
        }
    }
    c->state = CONN_BODY;
    c->t0_ns = clock_now_ns();
    c->body_got = 0;
    srv_http_chunk_init(&c->chunk);
    if (r->h.body == SRV_HTTP_BODY_NONE) {
        conn_deliver(c);
        return true;
    }
    if (r->h.expect_continue && c->in_len == 0) {
        pthread_mutex_lock(&s->mu);
        out_put(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        pthread_mutex_unlock(&s->mu);
    }
    return true;
}

/* Consumes body bytes from c->in. Returns false when more input is needed. */
static bool conn_read_body(conn *c) {
    srv_http *s = c->s;
    srv_http_req *r = c->req;
    if (c->in_len == 0)
        return false;
    if (r->h.body == SRV_HTTP_BODY_LENGTH) {
        size_t left = (size_t)r->h.content_length - r->body_len;
        size_t n = c->in_len < left ? c->in_len : left;
        int rc = body_grow(s, r, r->body_len + n);
        if (rc) {
            conn_fail(c, 503, rc == ERR_FULL ? s->cfg.budget_msg : "out of memory");
            return true;
        }
        memcpy(r->body + r->body_len, c->in, n);
        r->body_len += n;
        c->body_got += n;
        conn_consume(c, n);
        if (r->body_len == r->h.content_length)
            conn_deliver(c);
        return true;
    }
    /* chunked: decode into room up to the limit plus one byte, to notice an excess */
    size_t want = r->body_len + c->in_len;
    if (want > r->body_limit + 1)
        want = r->body_limit + 1;
    int rc = body_grow(s, r, want);
    if (rc) {
        conn_fail(c, 503, rc == ERR_FULL ? s->cfg.budget_msg : "out of memory");
        return true;
    }
    size_t used = 0, got = 0;
    const char *why = "";
    size_t room = r->body_limit + 1 - r->body_len;
    if (room > r->body_cap - 1 - r->body_len)
        room = r->body_cap - 1 - r->body_len;
    rc = srv_http_chunk_decode(&c->chunk, c->in, c->in_len, &used, r->body + r->body_len, room,
                               &got, &why);
    if (rc < 0) {
        conn_fail(c, 400, why);
        return true;
    }
    r->body_len += got;
    c->body_got += used;
    conn_consume(c, used);
    if (r->body_len > r->body_limit) {
        conn_fail(c, 413, s->cfg.too_large_msg);
        return true;
    }
    if (rc == 1)
        conn_deliver(c);
    return used > 0 || rc == 1;
}

/* Advances c as far as possible and sets its epoll interest. c may be closed (and freed). */
static void conn_step(conn *c) {
    srv_http *s = c->s;
    for (;;) { /* every pass makes progress or leaves */
        bool drained = true;
        if (!conn_flush(c, &drained)) {
            conn_close(c);
            return;
        }
        if (c->state == CONN_HANDLER && drained) {
            pthread_mutex_lock(&s->mu);
            bool done = c->req->answer == ANSWER_DONE && out_pending(&c->out) == 0;
            bool close = c->close_after;
            if (done) {
                req_unref_locked(c->req);
                c->req = NULL;
            }
            pthread_mutex_unlock(&s->mu);
            if (!done)
                break;
            if (close) {
                c->state = CONN_CLOSING;
                c->t0_ns = clock_now_ns();
                continue;
            }
            c->state = CONN_HEAD;
            c->t0_ns = clock_now_ns();
            if (s->stopping) {
                conn_close(c);
                return;
            }
            if (c->in_len == 0) { /* idle: an idle connection holds no input buffer */
                free(c->in);
                c->in = NULL;
                c->in_cap = 0;
            }
            continue;
        }
        if (c->state == CONN_CLOSING) {
            if (drained && c->peer_eof) {
                conn_close(c);
                return;
            }
            if (drained && !c->shut_wr) {
                shutdown(c->fd, SHUT_WR);
                c->shut_wr = true;
                c->t0_ns = clock_now_ns();
            }
            break;
        }
        if (c->state == CONN_HEAD && c->in_len > 0) {
            if (!drained)
                break; /* answer before reading the next pipelined request */
            if (conn_parse_head(c))
                continue;
            break;
        }
        if (c->state == CONN_BODY && conn_read_body(c))
            continue;
        break;
    }
    uint32_t ev = 0;
    bool pending;
    pthread_mutex_lock(&s->mu);
    pending = out_pending(&c->out) > 0;
    pthread_mutex_unlock(&s->mu);
    if (pending)
        ev |= EPOLLOUT;
    if (c->state == CONN_HANDLER) {
        if (!c->peer_eof)
            ev |= EPOLLRDHUP;
    } else if (c->state == CONN_CLOSING) {
        if (!c->peer_eof)
            ev |= EPOLLIN;
    } else if (!(c->state == CONN_HEAD && pending) && (!c->in || c->in_len < c->in_cap)) {
        ev |= EPOLLIN;
    }
    conn_set_events(c, ev);
}

/* Reads what the socket has. Returns false when c was closed. */
static bool conn_read(conn *c) {
    srv_http *s = c->s;
    if (c->state == CONN_CLOSING) {
        char tmp[4096];
        ssize_t n = recv(c->fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (n > 0 && (c->drained += (size_t)n) < SRV_HTTP_LINGER_MAX)
            return true;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        if (n == 0 && !c->shut_wr) {
            pthread_mutex_lock(&s->mu);
            c->peer_eof = true; /* still sending our answer: finish it, then close */
            pthread_mutex_unlock(&s->mu);
            return true;
        }
        conn_close(c);
        return false;
    }
    size_t cap = s->cfg.max_head_bytes + SRV_HTTP_READ_EXTRA;
    if (c->in_len >= cap)
        return true; /* full: the parser or the body reader makes room */
    if (!c->in) {
        c->in = malloc(cap);
        if (!c->in) {
            conn_close(c);
            return false;
        }
        c->in_cap = cap;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
    if (n > 0) {
        if (c->state == CONN_HEAD && c->in_len == 0)
            c->t0_ns = clock_now_ns(); /* the head deadline runs from its first byte */
        c->in_len += (size_t)n;
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    /* EOF or error before a request reached the handler: nothing to answer */
    conn_close(c);
    return false;
}

/* The client's read EOF while its request is with the handler (see srv_http.h). */
static bool conn_peer_eof(conn *c) {
    srv_http *s = c->s;
    pthread_mutex_lock(&s->mu);
    c->peer_eof = true;
    c->close_after = true;
    bool gone = false;
    if (c->req && c->req->answer == ANSWER_NONE) {
        if (c->req->h.minor == 1) {
            out_put(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
            conn_arm_stall_locked(c);
        } else
            gone = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (gone) {
        conn_close(c);
        return false;
    }
    return true;
}

static void refuse(int fd, int status, const char *why) {
    outbuf b = {0}, body = {0};
    if (json_error(&body, status, why) == 0 && out_status(&b, status) == 0 &&
        out_printf(&b,
                   "Content-Type: application/json\r\nContent-Length: %zu\r\nRetry-After: "
                   "1\r\nConnection: close\r\n\r\n",
                   body.len) == 0 &&
        out_put(&b, body.p, body.len) == 0) {
        ssize_t n = send(fd, b.p, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
    }
    free(b.p);
    free(body.p);
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void accept_all(srv_http *s) {
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(s->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: stop listening for a moment instead of spinning */
                struct epoll_event e = {.events = 0, .data.ptr = &tag_listen};
                epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &e);
                s->listen_on = false;
                s->listen_pause_until_ns = clock_now_ns() + ms_ns(100);
            }
            return;
        }
        if (!s->cfg.nagle && (sa.ss_family == AF_INET || sa.ss_family == AF_INET6)) {
            int one = 1; /* best effort: an answer still goes out without it, only later */
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        unsigned char key[16] = {0};
        char peer[INET6_ADDRSTRLEN] = "?";
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *a4 = (struct sockaddr_in *)&sa;
            key[10] = key[11] = 0xff;
            memcpy(key + 12, &a4->sin_addr, 4);
            inet_ntop(AF_INET, &a4->sin_addr, peer, sizeof peer);
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&sa;
            memcpy(key, &a6->sin6_addr, 16);
            inet_ntop(AF_INET6, &a6->sin6_addr, peer, sizeof peer);
        }
        pthread_mutex_lock(&s->mu);
        s->stats.accepted++;
        bool cap = s->n_conns >= s->cfg.max_conns;
        bool per = !cap && addr_count(s, key) >= s->cfg.max_conns_per_addr;
        if (cap)
            s->stats.refused_cap++;
        if (per)
            s->stats.refused_addr++;
        pthread_mutex_unlock(&s->mu);
        if (cap) {
            refuse(fd, 503, "server at its connection limit");
            continue;
        }
        if (per) {
            refuse(fd, 429, "too many connections from this address");
            continue;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c || addr_add(s, key)) {
            free(c);
            refuse(fd, 503, "out of memory");
            continue;
        }
        c->s = s;
        c->fd = fd;
        c->refs = 1;
        c->state = CONN_HEAD;
        c->t0_ns = clock_now_ns();
        memcpy(c->key, key, 16);
        memcpy(c->peer, peer, sizeof peer);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->room, &ca);
        pthread_condattr_destroy(&ca);
        c->events = EPOLLIN;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
            addr_del(s, key);
            pthread_cond_destroy(&c->room);
            free(c);
            close(fd);
            continue;
        }
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->n_conns++;
        pthread_mutex_lock(&s->mu);
        s->stats.open_conns = s->n_conns;
        pthread_mutex_unlock(&s->mu);
    }
}

/* Checks every connection's deadline. */
static void scan_deadlines(srv_http *s, int64_t now) {
    const srv_http_cfg *g = &s->cfg;
    conn *next;
    for (conn *c = s->conns; c; c = next) {
        next = c->next;
        int64_t el = now - c->t0_ns;
        bool timeout = false;
        if (c->state == CONN_HEAD && c->in_len == 0) {
            if (el > ms_ns(g->idle_timeout_ms) || s->stopping) {
                pthread_mutex_lock(&s->mu);
                s->stats.timed_out += !s->stopping;
                pthread_mutex_unlock(&s->mu);
                conn_close(c); /* nothing was asked: nothing to answer */
                continue;
            }
        } else if (c->state == CONN_HEAD) {
            if (s->stopping) {
                conn_close(c);
                continue;
            }
            if (el > ms_ns(g->head_timeout_ms)) {
                timeout = true;
                conn_fail(c, 408, "request head not received in time");
            }
        } else if (c->state == CONN_BODY) {
            double secs = (double)el * 1e-9;
            if ((g->body_timeout_ms > 0 && el > ms_ns(g->body_timeout_ms)) ||
                (el > ms_ns(g->body_grace_ms) &&
                 (double)c->body_got < (double)g->body_min_bytes_per_s * secs)) {
                timeout = true;
                conn_fail(c, 408, "request body too slow");
            }
        } else if (c->state == CONN_CLOSING) {
            if ((c->shut_wr && el > ms_ns(g->linger_ms)) ||
                el > ms_ns(g->linger_ms) + ms_ns(g->head_timeout_ms)) {
                conn_close(c);
                continue;
            }
        } else if (c->state == CONN_HANDLER) {
            /* a client that stops reading an answer: after idle_timeout_ms without progress
             * the connection is closed and the request becomes gone */
            pthread_mutex_lock(&s->mu);
            bool stalled = out_pending(&c->out) > 0 && c->stall_armed &&
                           now - c->t_sent_ns > ms_ns(g->idle_timeout_ms);
            s->stats.timed_out += stalled;
            pthread_mutex_unlock(&s->mu);
            if (stalled) {
                conn_close(c);
                continue;
            }
        }
        if (timeout) {
            pthread_mutex_lock(&s->mu);
            s->stats.timed_out++;
            pthread_mutex_unlock(&s->mu);
            conn_step(c);
        }
    }
}

static void *event_main(void *arg) {
    srv_http *s = arg;
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(s->ep, evs, 256, SRV_HTTP_TICK_MS);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            uint32_t ev = evs[i].events;
            if (p == &tag_listen) {
                if (!s->stopping)
                    accept_all(s);
                continue;
            }
            if (p == &tag_event) {
                uint64_t v;
                ssize_t r = read(s->evfd, &v, sizeof v);
                (void)r;
                for (;;) { /* a closed connection is never on the list (conn_close) */
                    pthread_mutex_lock(&s->mu);
                    conn *c = s->wake;
                    if (c) {
                        s->wake = c->wake_next;
                        c->in_wake = false;
                    }
                    pthread_mutex_unlock(&s->mu);
                    if (!c)
                        break;
                    conn_step(c);
                }
                continue;
            }
            conn *c = p;
            if (c->closed) /* closed earlier in this batch */
                continue;
            if (ev & (EPOLLERR | EPOLLHUP)) {
                conn_close(c);
                continue;
            }
            if ((ev & EPOLLIN) && !conn_read(c))
                continue;
            if ((ev & EPOLLRDHUP) && c->state == CONN_HANDLER && !c->peer_eof && !conn_peer_eof(c))
                continue;
            conn_step(c);
        }
        int64_t now = clock_now_ns();
        pthread_mutex_lock(&s->mu);
        bool stop = s->stop;
        int64_t deadline = s->stop_deadline_ns;
        pthread_mutex_unlock(&s->mu);
        if (stop && !s->stopping) {
            s->stopping = true;
            epoll_ctl(s->ep, EPOLL_CTL_DEL, s->lfd, NULL);
            s->last_scan_ns = 0;
        }
        if (!s->listen_on && !s->stopping && now >= s->listen_pause_until_ns) {
            struct epoll_event e = {.events = EPOLLIN, .data.ptr = &tag_listen};
            epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &e);
            s->listen_on = true;
        }
        if (now - s->last_scan_ns >= ms_ns(SRV_HTTP_TICK_MS)) {
            s->last_scan_ns = now;
            scan_deadlines(s, now);
        }
        bool done = s->stopping && (s->n_conns == 0 || now >= deadline);
        if (done)
            while (s->conns)
                conn_close(s->conns);
        conns_bury(s);
        if (done)
            break;
    }
    return NULL;
}

/* ---- lifetime ---- */

int srv_http_listen(const char *host, int port, int *fd, int *bound_port) {
    *fd = -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return err_set(ERR_INVAL, "host '%s' is not an IPv4 address", host);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s, (struct sockaddr *)&sa, sizeof sa) || listen(s, 1024)) {
        int en = errno;
        if (s >= 0)
            close(s);
        return err_set(ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(en));
    }
    socklen_t sl = sizeof sa;
    getsockname(s, (struct sockaddr *)&sa, &sl);
    *bound_port = ntohs(sa.sin_port);
    *fd = s;
    return 0;
}

void srv_http_cfg_timeouts(srv_http_cfg *cfg, int timeout_s, int head_max_s) {
    int t_ms = timeout_s > 0 ? timeout_s * 1000 : 600 * 1000;
    cfg->head_timeout_ms = t_ms < head_max_s * 1000 ? t_ms : head_max_s * 1000;
    cfg->idle_timeout_ms = t_ms;
    cfg->body_timeout_ms = t_ms;
}

int srv_http_create(const srv_http_cfg *cfg, srv_http **out) {
    if (!cfg || !out || cfg->listen_fd < 0 || !cfg->on_request ||
        cfg->max_headers > SRV_HTTP_MAX_HEADERS || cfg->max_headers < 0)
        return err_set(ERR_INVAL, "srv_http_create: bad configuration");
    srv_http *s = calloc(1, sizeof *s);
    if (!s)
        return ERR_NOMEM;
    s->cfg = *cfg;
    srv_http_cfg *g = &s->cfg;
    if (!g->head_timeout_ms)
        g->head_timeout_ms = 10000;
    if (!g->idle_timeout_ms)
        g->idle_timeout_ms = 30000;
    if (!g->body_grace_ms)
        g->body_grace_ms = 5000;
    if (!g->linger_ms)
        g->linger_ms = 2000;
    if (!g->body_min_bytes_per_s)
        g->body_min_bytes_per_s = 1024;
    if (!g->max_head_bytes)
        g->max_head_bytes = 16384;
    if (!g->max_headers)
        g->max_headers = 100;
    if (!g->max_body_bytes)
        g->max_body_bytes = 8u << 20;
    if (!g->max_conns)
        g->max_conns = 1024;
    if (!g->max_conns_per_addr)
        g->max_conns_per_addr = 64;
    if (!g->out_cap_bytes)
        g->out_cap_bytes = 65536;
    if (!g->too_large_msg)
        g->too_large_msg = "request body too large";
    if (!g->budget_msg)
        g->budget_msg = "server busy: too many request bodies in flight";
    s->lfd = cfg->listen_fd;
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&s->mu, NULL);
    int rc = 0;
    if (s->ep < 0 || s->evfd < 0) {
        rc = err_set(ERR_IO, "srv_http_create: epoll or eventfd: %s", strerror(errno));
        goto fail;
    }
    int fl = fcntl(s->lfd, F_GETFL);
    if (fl < 0 || fcntl(s->lfd, F_SETFL, fl | O_NONBLOCK) < 0) {
        rc = err_set(ERR_IO, "srv_http_create: listening socket %d: %s", s->lfd, strerror(errno));
        goto fail;
    }
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = &tag_listen};
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = &tag_event};
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, s->lfd, &e1) ||
        epoll_ctl(s->ep, EPOLL_CTL_ADD, s->evfd, &e2)) {
        rc = err_set(ERR_IO, "srv_http_create: epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    s->listen_on = true;
    if (pthread_create(&s->thread, NULL, event_main, s) != 0) {
        rc = err_set(ERR_IO, "srv_http_create: cannot start the event thread");
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return 0;
fail:
    if (s->ep >= 0)
        close(s->ep);
    if (s->evfd >= 0)
        close(s->evfd);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rc;
}

void srv_http_shutdown(srv_http *s, int deadline_ms) {
    if (!s || s->joined)
        return;
    pthread_mutex_lock(&s->mu);
    if (!s->stop) {
        s->stop = true;
        s->stop_deadline_ns = clock_now_ns() + ms_ns(deadline_ms > 0 ? deadline_ms : 0);
    }
    pthread_mutex_unlock(&s->mu);
    wake_event_thread(s);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    s->joined = true;
}

void srv_http_destroy(srv_http *s) {
    if (!s)
        return;
    srv_http_shutdown(s, 0);
    for (int i = 0; i < SRV_HTTP_ADDR_BUCKETS; i++)
        while (s->addrs[i]) {
            addr_entry *e = s->addrs[i];
            s->addrs[i] = e->next;
            free(e);
        }
    close(s->ep);
    close(s->evfd);
    close(s->lfd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

bool srv_http_request_eof(const srv_http_req *r) {
    srv_http *s = r->c->s;
    pthread_mutex_lock(&s->mu);
    bool eof = r->c->peer_eof;
    pthread_mutex_unlock(&s->mu);
    return eof;
}

void srv_http_stats_get(srv_http *s, srv_http_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    pthread_mutex_unlock(&s->mu);
    st->body_bytes = atomic_load(&s->body_total);
}
