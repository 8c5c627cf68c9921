/* SPDX-License-Identifier: MIT */
/*
 * srv_http: verity's own event-driven HTTP/1.1 connection layer.
 *
 * One event thread owns every connection: it accepts on the caller's listening socket, reads and
 * parses request heads and bodies (srv_http_parse.h), enforces every deadline and limit, and
 * writes every byte to every socket. There is no thread per connection, so idle or trickling
 * clients cost memory (bounded, below) and a slot under the connection caps, never a thread.
 *
 * A request goes through the caller's two callbacks, both called on the event thread:
 *   on_head(user, req): the head is parsed (method, path, query, fields, peer). The handler either
 *     answers right there (srv_http_respond or srv_http_respond_error inside the callback: a
 *     refusal such as 401 before any body byte is read, or a cheap route such as /health and
 *     /metrics answered inline so it works while every worker is busy) and returns
 *     SRV_HTTP_HEAD_ANSWERED (a whole answer only: a stream begun there is cut, since nobody
 *     holds the request afterwards); or it returns SRV_HTTP_HEAD_READ_BODY, optionally after
 * lowering or raising the body limit for this request (srv_http_req_set_body_limit). For "Expect:
 * 100-continue" the layer sends "100 Continue" only on READ_BODY, so a refused request never has
 * its body sent. A body larger than the limit is a 413. on_request(user, req): the body is complete
 * (srv_http_req_body). Ownership of one reference to req passes to the caller, who answers from any
 * thread and then calls srv_http_req_release. The answer may also be given inside on_request.
 *
 * Answers: srv_http_respond (status, extra header lines, whole body) or a stream
 * (srv_http_stream_begin, srv_http_stream_write..., srv_http_stream_end): chunked transfer
 * coding for HTTP/1.1, close-delimited for HTTP/1.0. Each request gets exactly one answer; a
 * second is refused with ERR_STATE. Whatever the handler does, the status line is sent once: the
 * layer's own error answers (400, 408, 413, 431, 501, ...) are only sent before on_request and
 * only while the request has no answer (a body over the limit after on_head said READ_BODY, a
 * body too slow), or when on_head returned ANSWERED without answering (500).
 *
 * Backpressure: each connection has an output buffer of out_cap_bytes. srv_http_stream_write
 * BLOCKS the calling thread while the buffer holds out_cap_bytes or more unsent bytes, up to its
 * timeout_ms (0: never blocks), and then returns ERR_BUSY (retry later; nothing was queued). A
 * write is accepted whole once the buffer is below the cap, so the buffer holds at most
 * out_cap_bytes plus one write (plus chunk framing). A whole response (srv_http_respond) is
 * queued whole whatever its size: its size is the caller's choice. Never block on the event
 * thread: inside a callback use timeout_ms 0.
 *
 * Disconnects: srv_http_request_gone(req) becomes true when the event thread sees the client go
 * (EPOLLHUP or EPOLLERR, a failed read or write, a close by a deadline, the server's shutdown
 * deadline); writes after that return ERR_CANCELLED and the caller should stop work. A read EOF
 * alone does not mean gone: a client may shut down its writing side after the request and still
 * read the answer (legal in HTTP/1.1). So on EOF while the caller holds the request, an HTTP/1.1
 * request whose answer has not started is sent an interim "100 Continue" (RFC 9110 15.2: any
 * client accepts it), which a closed socket answers with a reset and thus a hang-up; a stream's
 * next write fails the same way. An HTTP/1.0 client cannot be probed: there EOF is gone.
 *
 * Limits (srv_http_cfg; a 0 field takes the default in brackets):
 *   head_timeout_ms [10000]   the head must be complete this long after its first byte: else 408
 *   idle_timeout_ms [30000]   a connection with no request in progress is closed after this (no
 *                             response: nothing was asked); so is one whose queued answer has
 *                             not moved for this long (a client that stopped reading: gone)
 *   body_grace_ms [5000], body_min_bytes_per_s [1024]   after the grace period a body must have
 *                             arrived at this average rate since its start: else 408 and close
 *   body_timeout_ms [0: none] an absolute bound on receiving a body (408)
 *   max_head_bytes [16384], max_headers [100]   beyond them: 431
 *   max_body_bytes [8 MiB]    the default per-request body limit (413)
 *   max_body_total_bytes [0: none]   bytes of request bodies being received at once by all
 *                             connections (a body of declared length takes all of it when its
 *                             head is parsed; a chunked one as it grows; given back when the body
 *                             is handed to on_request); a body that would pass it gets 503 with
 *                             Retry-After (every 503 of the layer carries Retry-After: 1)
 *   max_conns [1024]          connections at once; one more is answered 503 and closed
 *   max_conns_per_addr [64]   connections at once from one IPv4 or IPv6 address; beyond: 429
 *   out_cap_bytes [65536]     a stream's output buffer (backpressure above)
 *   nagle [false]             false: TCP_NODELAY on every accepted TCP connection, so each
 *                             write (an answer's head, a streamed event) leaves at once; true:
 *                             the kernel's default (Nagle's algorithm holds a small write until
 *                             the previous one is acknowledged, which a peer's delayed ACK can
 *                             make 40 ms on Linux)
 *   send_each_write [false]   false: once a send finds a connection's socket full, later writes
 *                             only append until the event thread's flush drains the output (it
 *                             waits for EPOLLOUT meanwhile); true: every write tries a send (and
 *                             a direct_write one wakes the event thread), which a slow reader
 *                             pays per write (srv_http_stats.send_full counts the failed sends)
 *   linger_ms [2000]          after a final answer with "Connection: close", unread input is
 *                             drained this long so the close does not reset the answer away
 *
 * Memory per connection (x86-64): 312 bytes of connection state and a kernel socket, plus while a
 * head is arriving an input buffer of max_head_bytes + 4 KiB (20 KiB by default; freed when the
 * connection goes idle), plus a request object (2,200 bytes and a copy of its head) while a
 * request is in progress, plus its body (at most its body limit: a body of declared length is
 * allocated whole when its head is parsed, address space the kernel backs as bytes arrive; a
 * chunked one grows by doubling, so at most twice what arrived), plus the output buffer (at most
 * out_cap_bytes plus one write for a stream; the whole answer for srv_http_respond). An idle
 * connection costs 312 bytes; one trickling a head about 21 KiB; max_conns bounds the count;
 * max_body_total_bytes bounds the bodies being received together.
 *
 * Threads and ownership: the event thread owns the sockets, the epoll set and the connections'
 * read side. One mutex (per srv_http) guards what the caller's threads touch: each connection's
 * output buffer and answer state, the gone flag, reference counts. Caller threads queue bytes and
 * wake the event thread through an eventfd; with cfg.direct_write a stream's caller thread first
 * sends what is queued itself (nonblocking; it marks the connection as sending under the mutex
 * and sends without it, while the event thread leaves that output and socket alone, so the bytes
 * stay in order) and wakes the event thread only for what remains. A connection is freed
 * when its socket is closed and no request object refers to it; a request object when the caller
 * released it (after on_request) or the layer finished with it (before).
 *
 * Shutdown: srv_http_shutdown stops accepting, closes connections that have no request in
 * progress, lets answers in progress finish up to its deadline, then closes the rest (their
 * requests become gone). srv_http_destroy shuts down with deadline 0, joins the thread and frees
 * everything; every request handed to the caller must have been released before it.
 */
#ifndef VERITY_SERVER_SRV_HTTP_H
#define VERITY_SERVER_SRV_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_http srv_http;
typedef struct srv_http_req srv_http_req;

/* What on_head decided. */
enum {
    SRV_HTTP_HEAD_READ_BODY = 0, /* read the body (if any), then call on_request */
    SRV_HTTP_HEAD_ANSWERED = 1,  /* the handler answered inside on_head; the body is not read */
};

/* Called on the event thread with a parsed head; req is borrowed for the call. Returns
 * SRV_HTTP_HEAD_*. Must not block. */
typedef int (*srv_http_on_head)(void *user, srv_http_req *req);

/* Called on the event thread when req's body is complete; the callee owns one reference to req
 * and must answer it (now or later, from any thread) and release it. Must not block. */
typedef void (*srv_http_on_request)(void *user, srv_http_req *req);

typedef struct srv_http_cfg {
    int listen_fd; /* bound and listening; the layer makes it nonblocking and closes it at
                      destroy */
    srv_http_on_head on_head;       /* NULL: read every body */
    srv_http_on_request on_request; /* required */
    void *user;
    int head_timeout_ms, idle_timeout_ms, body_grace_ms, body_timeout_ms, linger_ms;
    size_t body_min_bytes_per_s;
    size_t max_head_bytes;
    int max_headers;
    size_t max_body_bytes, max_body_total_bytes;
    int max_conns, max_conns_per_addr;
    size_t out_cap_bytes;
    /* true: srv_http_stream_begin and srv_http_stream_write send on the socket themselves, on the
     * caller's thread (nonblocking, outside the layer's lock), and wake the event thread only for
     * what the socket did not take; false: the event thread sends every byte (one wake-up per
     * write). Same bytes, same order either way: only who calls send() differs. */
    bool direct_write;
    bool nagle; /* keep Nagle's algorithm on accepted connections (above; flag http-nodelay 0) */
    bool send_each_write; /* above; flag http-append-blocked 0 */
    /* the messages of the layer's 413 (body over its limit) and 503 (no room in
     * max_body_total_bytes) answers, so they can name the caller's settings; NULL: generic */
    const char *too_large_msg, *budget_msg;
} srv_http_cfg;

/* Counters since create, for /metrics and tests. */
typedef struct srv_http_stats {
    uint64_t accepted;     /* connections accepted (and served or refused) */
    uint64_t refused_cap;  /* answered 503 at max_conns */
    uint64_t refused_addr; /* answered 429 at max_conns_per_addr */
    uint64_t timed_out;    /* closed by the head, body or idle deadline */
    uint64_t bad_requests; /* answered 4xx/5xx by the parser or a limit */
    uint64_t requests;     /* heads handed to on_head */
    int open_conns;        /* connections open now */
    size_t body_bytes;     /* bytes of request bodies being received now (the budget's use) */
    uint64_t send_full;    /* send() calls that found a client's socket full (a slow reader's
                              cost: once per blocking, then once per EPOLLOUT, not per write) */
} srv_http_stats;

/* Binds and listens on the IPv4 address host and port (0: any free port), with SO_REUSEADDR and
 * a backlog of 1024: the socket a front gives srv_http_cfg.listen_fd. Returns 0 with *fd (the
 * caller's until srv_http_create takes it) and *bound_port (the port actually bound); ERR_INVAL
 * when host is not an IPv4 address, ERR_IO when the socket cannot listen (the detail names the
 * address and the reason). */
int srv_http_listen(const char *host, int port, int *fd, int *bound_port);

/* Sets cfg's deadlines from one timeout (a front's --timeout, seconds; 0: 600): a connection may
 * stay idle, and take to send its body, that long; its head must arrive within head_max_s or the
 * timeout if shorter. */
void srv_http_cfg_timeouts(srv_http_cfg *cfg, int timeout_s, int head_max_s);

/* Starts the layer on cfg->listen_fd with its event thread.
 * Returns 0 and *out (destroy with srv_http_destroy), ERR_INVAL for a bad configuration
 * (listen_fd < 0, no on_request, max_headers above SRV_HTTP_MAX_HEADERS), ERR_NOMEM, or ERR_IO
 * when epoll, the eventfd or the thread cannot be created (err_detail names which). On error
 * listen_fd is left open. */
int srv_http_create(const srv_http_cfg *cfg, srv_http **out);

/* Graceful shutdown: stops accepting, closes idle connections, waits up to deadline_ms for
 * answers in progress to be sent, then closes every connection (their requests become gone) and
 * stops the event thread. Blocks until done. Idempotent. Must not be called from a callback. */
void srv_http_shutdown(srv_http *s, int deadline_ms);

/* srv_http_shutdown(s, 0) if not yet shut down, then frees s and closes the listening socket.
 * Every request handed to on_request must have been released. NULL is a no-op. */
void srv_http_destroy(srv_http *s);

/* Fills *st with the counters. Any thread. */
void srv_http_stats_get(srv_http *s, srv_http_stats *st);

/* ---- the request: its head and body, immutable while the caller holds it ---- */

/* Method ("GET"), path ("/v1/chat/completions", no query), query ("" when none), each
 * NUL-terminated and valid until the request is released. */
const char *srv_http_req_method(const srv_http_req *req);
const char *srv_http_req_path(const srv_http_req *req);
const char *srv_http_req_query(const srv_http_req *req);

/* Value of the first header field named name (case-insensitive), trimmed and NUL-terminated, or
 * NULL when absent. Valid until the request is released. */
const char *srv_http_req_header(const srv_http_req *req, const char *name);

/* Number of header fields, and the i-th (0 <= i < count) name and value; false when out of range.
 */
int srv_http_req_header_count(const srv_http_req *req);
bool srv_http_req_header_at(const srv_http_req *req, int i, const char **name, const char **value);

/* Whether req may pass an API key check: true when key is NULL or empty (no key required), else
 * whether its Authorization field is exactly "Bearer " followed by key. The comparison takes the
 * same time whatever the first differing byte (the length is compared the same way). */
bool srv_http_req_bearer_ok(const srv_http_req *req, const char *key);

/* The client's address as text ("127.0.0.1", "::1"). */
const char *srv_http_req_peer(const srv_http_req *req);

/* HTTP minor version (0 or 1), and whether the method is HEAD (answers carry no body bytes). */
int srv_http_req_minor(const srv_http_req *req);
bool srv_http_req_is_head(const srv_http_req *req);

/* The body, complete once on_request is called (empty before, and for a bodiless request), with
 * *len its length; a NUL follows the last byte. Valid until the request is released. */
const char *srv_http_req_body(const srv_http_req *req, size_t *len);

/* Inside on_head only: sets this request's body limit in bytes (default cfg max_body_bytes). */
void srv_http_req_set_body_limit(srv_http_req *req, size_t max_bytes);

/* ---- answering; any thread ---- */

/* Queues a whole answer: status line and Date, then headers (extra header lines, each ending in
 * CRLF, such as "Content-Type: application/json\r\n"; NULL for none; never Content-Length,
 * Transfer-Encoding or Connection, which the layer adds), then body[0, len) (omitted for HEAD).
 * Returns 0; ERR_STATE if req was already answered; ERR_CANCELLED if the client is gone (nothing
 * sent); ERR_NOMEM. */
int srv_http_respond(srv_http_req *req, int status, const char *headers, const char *body,
                     size_t len);

/* srv_http_respond with a JSON body in the OpenAI error shape:
 * {"error":{"message":message,"type":"invalid_request_error","param":null,"code":null}}
 * (type "server_error" for 500 and 503). Same returns. */
int srv_http_respond_error(srv_http_req *req, int status, const char *message);

/* Starts a streamed answer with status and headers as for srv_http_respond (no Content-Length;
 * the layer adds Transfer-Encoding: chunked for HTTP/1.1, or Connection: close for HTTP/1.0).
 * Returns 0, ERR_STATE if already answered, ERR_CANCELLED if gone, ERR_NOMEM. */
int srv_http_stream_begin(srv_http_req *req, int status, const char *headers);

/* Queues data[0, len) on a begun stream (one chunk), waiting up to timeout_ms while the
 * connection's output buffer is full. Returns 0; ERR_BUSY when still full after timeout_ms
 * (nothing queued; retry); ERR_CANCELLED if the client is gone; ERR_STATE if no stream is open.
 * An empty write is a no-op. For HEAD nothing is sent but the same returns apply. */
int srv_http_stream_write(srv_http_req *req, const void *data, size_t len, int timeout_ms);

/* Ends a begun stream (the last chunk for chunked coding; the close for HTTP/1.0). Returns 0,
 * ERR_STATE if no stream is open, ERR_CANCELLED if gone. */
int srv_http_stream_end(srv_http_req *req);

/* Whether the client went away (see the design note). Any thread; cheap (one atomic load). */
bool srv_http_request_gone(const srv_http_req *req);

/* Whether the client's read side has ended (a half-close, or a close not yet known as one) while
 * the caller holds req. The layer probes a request with no answer yet itself (interim 100); a
 * begun stream's next write fails if the client closed, so a stream that may sit without writing
 * can write something its client ignores (an SSE comment) once this turns true, and a closed
 * client then shows as gone. Any thread. */
bool srv_http_request_eof(const srv_http_req *req);

/* Releases the caller's reference (the one on_request gave). An unanswered request is answered
 * 500 first (a begun stream is cut: its connection closed). NULL is a no-op. */
void srv_http_req_release(srv_http_req *req);

#endif
