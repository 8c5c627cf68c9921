/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer_ucx: the "ucx" transport: libucx's UCP (Debian's libucx0). UCX picks the wire itself:
 * shared memory (System V or POSIX) and cma (process_vm_readv) on one machine, tcp
 * between machines, RDMA where the hardware has it (UCX_TLS narrows the choice; UCX_LOG_LEVEL=info
 * or bench_xfer prints what was picked).
 *
 * Connections. A listener is a UCP listener on a sockaddr ("host:port"); a client endpoint is
 * created from the address, a server one from the listener's connection request. Each connection
 * then exchanges one HELLO message both ways (connect returns once the server's came back, accept
 * once the client's arrived), so a connect to a port nobody listens on is ERR_CONNECT from connect
 * itself, naming the address, rather than a failure at the first write.
 *
 * The byte stream, over UCP's tag API. Every write_all is one tagged message (DATA; DATA_BIG
 * above SMALL bytes, so a closing connection can take the small ones off its queue); the
 * reader probes for the next message (any tag, in the order they were sent: UCP matches one
 * sender's messages in order) and receives it straight into the caller's buffer when it fits in
 * what the read still wants, or into the connection's staging buffer otherwise, whose rest the
 * next reads consume; so any split of writes and reads is the same byte stream. Large messages go
 * by UCP's rendezvous: the receiver fetches the bytes from the sender's buffer (cma or shared
 * memory: one copy), which is why kv_xfer.c writes a BLOCK's header and its blob as two writes
 * (each read then lands in place). write_all returns once UCP completed the send (for a
 * rendezvous message: once the receiver fetched it), so the caller may reuse its buffer.
 *
 * Posted writes (write_held, flush; kv_xfer_int.h). Waiting for each rendezvous keeps one block in
 * flight per connection: the send, the receiver's copy and its checksum ran one after another,
 * each block paying the sender's wake-up. write_held sends the same tagged message and returns at
 * once, keeping its request on the connection's ring (at most max_posted: when full it waits for
 * the oldest, as write_all waits for its own); flush waits for every one. Order: the stream is the
 * same as write_all's in call order, because UCP matches one endpoint's tag messages in the order
 * they were sent whatever their protocol (its tag-matching ordering guarantee: an eager message
 * and a rendezvous RTS travel on the endpoint's one active-message lane in send order; the
 * rendezvous data follows its RTS), and the reader already takes messages in that order; the
 * posted_bound case of test_kv_xfer mixes the two and compares the bytes. A small eager write_all
 * (a frame header) copies its bytes out before its request completes, and write_all waits for
 * that, so its buffer is reusable at once, posted writes or not. A posted write that cannot
 * complete (the peer's FIN is here, the endpoint failed, a cut, or flush's deadline) is handled
 * as write_all's is: the endpoint is closed and the request cancelled and given back; every later
 * one then too, and the next flush returns ERR_CONNECT. A cancelled send's buffer is no longer
 * read by UCX here; a receiver that is still alive (a local cut or a deadline, not a closed peer)
 * could still fetch it by cma later from its queue, and would then verify whatever it read against
 * the checksum it received first (kv_xfer's head): a changed block fails there, never lands.
 *
 * End of stream. shutdown (and destroy) sends a FIN message after everything written, waits up
 * to FLUSH_MS for the endpoint to flush (the FIN and any posted write delivered), takes the small
 * messages nobody will read off the queue, then force-closes the endpoint and cancels the posted
 * writes still in flight, so none outlives the worker. The peer's read that reaches the FIN, or a
 * read with nothing left when the endpoint's error handler reported a failure (the peer process
 * died, the connection was reset), is ERR_CONNECT ("end of stream"); messages that arrived before
 * it are still read first. A write when the peer's FIN is queued or the endpoint failed is
 * ERR_CONNECT too (a peer that closed reads no more); a write still waiting for its rendezvous
 * when that happens first progresses the worker until idle (a receiver that fetched the message
 * and then closed sent its completion before its close, but the endpoint's reset, reported on
 * UCX's thread, can be seen first), then closes the endpoint and abandons the send (ucp_request_cancel, then
 * ucp_request_free: UCX keeps the request until its worker goes; nobody fetches the buffer from a
 * closed endpoint). Reads wait up to timeout_ms for a message to begin; a message that began
 * (probed) is received to its end (its bytes are on their way, or the endpoint fails).
 *
 * Error handling mode NONE: UCX 1.13's UCP_ERR_HANDLING_MODE_PEER leaves out shared memory and cma
 * (it would move every byte over tcp/lo); the error handler is still called in mode NONE when the
 * connection manager sees the peer go (observed: UCS_ERR_CONNECTION_RESET), and the FIN covers
 * every orderly end. A peer that vanishes without either is what kv_xfer's timeout_ms is for.
 *
 * Progress and threads. The process has one UCP context (created by the first listener or
 * connection, destroyed with the last; a mutex guards the count) with mt_workers_shared, and every
 * connection and listener has its own UCP worker in UCS_THREAD_MODE_SINGLE: a kv_xfer_conn belongs
 * to one thread at a time (kv_xfer.h), and the sender and the receiver of a transfer are different
 * connections in different threads or processes, so no worker is ever progressed by two threads.
 * The owning thread progresses its worker inside each call: a wait spins on ucp_worker_progress
 * for SPIN idle rounds, then sleeps in poll() on the worker's event fd (ucp_worker_arm) until an
 * event or the deadline, at most SLEEP_MAX_MS at a time (a safety net: a missed wakeup would cost
 * a second, not a hang; none was seen). The error handler and the listener's connection handler
 * may run on UCX's async thread: what they set is atomic or behind the listener's mutex.
 */
#include "disagg/kv_xfer_int.h"

#include "base/err.h"

#include <assert.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

/* Tags: DATA (a write of at most SMALL bytes) and DATA_BIG (longer) differ in bit 0 only, so a
 * read probes for either with TAG_DATA_MASK; FIN ends the stream; HELLO opens it. */
enum {
    TAG_DATA = 0x10,
    TAG_DATA_BIG = 0x11,
    TAG_FIN = 0x20,
    TAG_HELLO = 0x30,
    SMALL = 4096,
    HANDSHAKE_MS = 10000,
    FLUSH_MS = 1000,
    SPIN = 256,
    SLEEP_MAX_MS = 1000,
    QUEUE = 1024 /* pending connection requests; more are rejected (tcp: the SOMAXCONN backlog) */
};
#define TAG_ANY_MASK  0
#define TAG_ONE_MASK  ((ucp_tag_t)-1)
#define TAG_DATA_MASK (~(ucp_tag_t)1)
#define HELLO_MAGIC   0x31584355464b5856ULL /* "VKFUCX1" */

/* ---- the process's context ---- */

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static ucp_context_h ctx;
static int ctx_users;

/* Takes a reference to the process's UCP context, creating it first. Returns 0 or ERR_UNSUPPORTED
 * (UCX cannot start here). */
static int ctx_get(void) {
    int rc = 0;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_users == 0) {
        ucp_config_t *cfg = NULL;
        ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
        if (st == UCS_OK) {
            ucp_params_t p = {.field_mask =
                                  UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                              .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
                              .mt_workers_shared = 1};
            st = ucp_init(&p, cfg, &ctx);
            ucp_config_release(cfg);
        }
        if (st != UCS_OK)
            rc = err_set(ERR_UNSUPPORTED, "kv_xfer ucx: no UCX context here: %s",
                         ucs_status_string(st));
    }
    if (rc == 0)
        ctx_users++;
    pthread_mutex_unlock(&ctx_mu);
    return rc;
}

static void ctx_put(void) {
    pthread_mutex_lock(&ctx_mu);
    if (--ctx_users == 0) {
        ucp_cleanup(ctx);
        ctx = NULL;
    }
    pthread_mutex_unlock(&ctx_mu);
}

static int worker_create(ucp_worker_h *w, int *efd, const char *what) {
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucs_status_t st = ucp_worker_create(ctx, &wp, w);
    if (st == UCS_OK && (st = ucp_worker_get_efd(*w, efd)) != UCS_OK)
        ucp_worker_destroy(*w);
    if (st != UCS_OK)
        return err_set(ERR_CONNECT, "kv_xfer ucx: a worker for %s: %s", what,
                       ucs_status_string(st));
    return 0;
}

/* ---- waiting ---- */

typedef struct waiter {
    ucp_worker_h w;
    int efd, wake_fd, timeout_ms, spins; /* wake_fd: -1, or a connection's cut eventfd */
    struct timespec t0;
} waiter;

static waiter waiter_start(ucp_worker_h w, int efd, int timeout_ms) {
    waiter wt = {.w = w, .efd = efd, .wake_fd = -1, .timeout_ms = timeout_ms};
    clock_gettime(CLOCK_MONOTONIC, &wt.t0);
    return wt;
}

/* Milliseconds left before the deadline (-1: none). */
static int waiter_left(const waiter *wt) {
    if (wt->timeout_ms < 0)
        return -1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ms = (t.tv_sec - wt->t0.tv_sec) * 1000LL + (t.tv_nsec - wt->t0.tv_nsec) / 1000000;
    return ms >= wt->timeout_ms ? 0 : (int)(wt->timeout_ms - ms);
}

/* One round of waiting: progresses the worker; after SPIN idle rounds sleeps on its event fd
 * until an event or the deadline. Returns 0, or ERR_TIMEOUT once the deadline has passed (the
 * caller checks its condition before each round). */
static int waiter_round(waiter *wt) {
    if (ucp_worker_progress(wt->w)) {
        wt->spins = 0;
        return 0;
    }
    if (++wt->spins < SPIN)
        return 0;
    wt->spins = 0;
    int left = waiter_left(wt);
    if (left == 0)
        return ERR_TIMEOUT;
    if (ucp_worker_arm(wt->w) == UCS_ERR_BUSY)
        return 0;
    struct pollfd pf[2] = {{.fd = wt->efd, .events = POLLIN}, {.fd = wt->wake_fd, .events = POLLIN}};
    (void)poll(pf, wt->wake_fd >= 0 ? 2 : 1, left < 0 || left > SLEEP_MAX_MS ? SLEEP_MAX_MS : left);
    return 0;
}

/* ---- connections ---- */

typedef struct ucx_conn {
    kv_xfer_conn base;
    ucp_worker_h w;
    ucp_ep_h ep; /* NULL once closed */
    int efd;
    atomic_int failed; /* the ucs_status_t the endpoint's error handler saw; 0 while fine */
    bool fin_seen;     /* the peer's FIN was read */
    bool closed;       /* shutdown ran here */
    /* Shutdown from another thread (ucx_shutdown): `use` is held by the owning thread for the
     * whole of each read or write; a shutdown that cannot take it sets `cut` and writes wake_fd,
     * which the owner's wait polls beside the worker's event fd: the owner's call then ends with
     * ERR_CONNECT, and its destroy sends the FIN and closes. */
    pthread_mutex_t use;
    atomic_bool cut;
    int wake_fd;
    uint8_t *stage;    /* the rest of a message longer than the read that took it */
    size_t stage_cap, stage_off, stage_len;
    uint8_t *gather; /* writev_all's parts, gathered into one message */
    size_t gather_cap;
    /* Posted writes (write_held): their requests, oldest first, a ring of base.n_posted from
     * posted_head; posted_rc: ERR_CONNECT once one of them failed or was cancelled, until flush
     * reports it. */
    ucs_status_ptr_t posted[KV_XFER_POSTED_MAX];
    int posted_head, posted_rc;
    char peer[80];
} ucx_conn;

static void conn_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st) {
    (void)ep;
    atomic_store(&((ucx_conn *)arg)->failed, (int)st);
}

static const char *conn_failure(ucx_conn *c) {
    int st = atomic_load(&c->failed);
    return st ? ucs_status_string((ucs_status_t)st) : "the connection is closed";
}

/* Closes the endpoint without waiting for the peer (outstanding requests complete cancelled). */
static void conn_close_ep(ucx_conn *c) {
    if (!c->ep)
        return;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &p);
    c->ep = NULL;
    if (r && !UCS_PTR_IS_ERR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(c->w);
        ucp_request_free(r);
    }
}

/* True when the peer will not read any more: its FIN is queued here or the endpoint failed. */
static bool conn_peer_gone(ucx_conn *c) {
    if (c->fin_seen || atomic_load(&c->failed))
        return true;
    ucp_tag_recv_info_t info;
    return ucp_tag_probe_nb(c->w, TAG_FIN, TAG_ONE_MASK, 0, &info) != NULL;
}

/* Notes that n sends of c are in flight at once (n_inflight_max). */
static void conn_note_inflight(ucx_conn *c, int n) {
    if (n > c->base.n_inflight_max)
        c->base.n_inflight_max = n;
}

/* Waits for request r of a send (or a flush) to complete. A request that cannot complete because
 * the peer is gone (its FIN is here, or the endpoint failed), or that is still waiting after
 * timeout_ms (-1: no limit), is cancelled by force-closing the endpoint. */
static int conn_send_wait(ucx_conn *c, ucs_status_ptr_t r, const char *what, int timeout_ms) {
    if (UCS_PTR_IS_ERR(r))
        return err_set(ERR_CONNECT, "kv_xfer ucx: %s to %s: %s", what, c->peer,
                       ucs_status_string(UCS_PTR_STATUS(r)));
    if (r == NULL)
        return 0;
    waiter wt = waiter_start(c->w, c->efd, timeout_ms);
    wt.wake_fd = c->wake_fd;
    ucs_status_t st;
    bool late = false;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        if (c->ep && (atomic_load(&c->cut) || conn_peer_gone(c))) {
            /* what the peer sent before it went is handled first: a receiver that fetched the
             * message and then closed sent its completion (rendezvous ATS) before the close, and
             * its endpoint's reset can be seen before that message is progressed */
            while (ucp_worker_progress(c->w)) {
            }
            if (ucp_request_check_status(r) != UCS_INPROGRESS)
                continue;
            conn_close_ep(c);
        }
        if (!c->ep) {
            /* closed: a rendezvous send the peer never fetched stays in progress; it is given
             * back (ucp_request_free) and abandoned: nobody fetches from a closed endpoint */
            ucp_worker_progress(c->w);
            if ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
                ucp_request_cancel(c->w, r);
                st = UCS_ERR_CANCELED;
            }
            break;
        }
        if (waiter_round(&wt) == ERR_TIMEOUT) {
            late = true;
            conn_close_ep(c);
        }
    }
    ucp_request_free(r);
    if (st != UCS_OK)
        return err_set(ERR_CONNECT, "kv_xfer ucx: %s to %s: %s", what, c->peer,
                       late                     ? "not taken in time; the connection is closed"
                       : st == UCS_ERR_CANCELED ? "the peer closed the connection"
                                                : ucs_status_string(st));
    return 0;
}

static int conn_send(ucx_conn *c, const void *buf, size_t n, ucp_tag_t tag, const char *what) {
    if (!c->ep)
        return err_set(ERR_CONNECT, "kv_xfer ucx: %s to %s: %s", what, c->peer, conn_failure(c));
    ucp_request_param_t p = {0};
    ucs_status_ptr_t r = ucp_tag_send_nbx(c->ep, buf, n, tag, &p);
    if (r && !UCS_PTR_IS_ERR(r))
        conn_note_inflight(c, c->base.n_posted + 1); /* this one, and the posted ones */
    return conn_send_wait(c, r, what, -1);
}

/* Receives the probed message m (length n) into buf and waits for it to land. */
static int conn_recv_msg(ucx_conn *c, ucp_tag_message_h m, void *buf, size_t n) {
    ucp_request_param_t p = {0};
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(c->w, buf, n, m, &p);
    ucs_status_t st = UCS_OK;
    if (UCS_PTR_IS_ERR(r)) {
        st = UCS_PTR_STATUS(r);
    } else if (r) {
        waiter wt = waiter_start(c->w, c->efd, -1);
        while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS)
            (void)waiter_round(&wt);
        ucp_request_free(r);
    }
    if (st != UCS_OK)
        return err_set(ERR_CONNECT, "kv_xfer ucx: receive from %s: %s", c->peer,
                       ucs_status_string(st));
    return 0;
}

/* Waits up to timeout_ms for the next message matching tag/mask and removes it from the queue. */
static int conn_probe(ucx_conn *c, ucp_tag_t tag, ucp_tag_t mask, int timeout_ms,
                      ucp_tag_message_h *m, ucp_tag_recv_info_t *info) {
    waiter wt = waiter_start(c->w, c->efd, timeout_ms);
    wt.wake_fd = c->wake_fd;
    for (int last = 0;;) {
        if (atomic_load(&c->cut))
            return err_set(ERR_CONNECT, "kv_xfer ucx: read from %s: shut down by another thread",
                           c->peer);
        if ((*m = ucp_tag_probe_nb(c->w, tag, mask, 1, info)) != NULL)
            return 0;
        if (last)
            return err_set(ERR_CONNECT, "kv_xfer ucx: read from %s: end of stream (%s)", c->peer,
                           conn_failure(c));
        if (atomic_load(&c->failed) || !c->ep) {
            ucp_worker_progress(c->w); /* what arrived before the failure is still read */
            last = 1;
            continue;
        }
        if (waiter_round(&wt))
            return err_set(ERR_TIMEOUT, "kv_xfer ucx: nothing from %s in %d ms", c->peer,
                           timeout_ms);
    }
}

/* Whether a write may start: not after shutdown, nor once the peer closed. Returns 0 or
 * ERR_CONNECT. */
static int conn_write_check(ucx_conn *c) {
    if (c->closed || atomic_load(&c->cut))
        return err_set(ERR_CONNECT, "kv_xfer ucx: write to %s after shutdown", c->peer);
    ucp_worker_progress(c->w);
    if (conn_peer_gone(c))
        return err_set(ERR_CONNECT, "kv_xfer ucx: write to %s: the peer closed the connection (%s)",
                       c->peer, c->fin_seen || !atomic_load(&c->failed) ? "FIN" : conn_failure(c));
    if (!c->ep)
        return err_set(ERR_CONNECT, "kv_xfer ucx: write to %s: %s", c->peer, conn_failure(c));
    return 0;
}

static int conn_write_all(ucx_conn *c, const void *buf, size_t n) {
    int rc = conn_write_check(c);
    return rc ? rc : conn_send(c, buf, n, n <= SMALL ? TAG_DATA : TAG_DATA_BIG, "write");
}

static int ucx_write_all(kv_xfer_conn *base, const void *buf, size_t n) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    int rc = conn_write_all(c, buf, n);
    pthread_mutex_unlock(&c->use);
    return rc;
}

/* Takes the oldest posted write off the ring and waits for it as conn_send_wait does (a gone
 * peer, a cut or the deadline closes the endpoint and cancels it). Returns 0 or ERR_CONNECT, which
 * stays in posted_rc for the next flush. */
static int conn_posted_wait(ucx_conn *c, int timeout_ms) {
    ucs_status_ptr_t r = c->posted[c->posted_head];
    c->posted_head = (c->posted_head + 1) % KV_XFER_POSTED_MAX;
    c->base.n_posted--;
    int rc = conn_send_wait(c, r, "posted write", timeout_ms);
    if (rc && !c->posted_rc)
        c->posted_rc = rc;
    return rc;
}

/* Posts a write (write_held's contract in kv_xfer_int.h). The posted writes that completed by now
 * leave the ring first, from the oldest on (one still in flight keeps any later one on the ring
 * until it completes: n_posted may count a completed write, never misses one in flight); only
 * when max_posted are still posted does it wait, for the oldest. */
static int conn_write_held(ucx_conn *c, const void *buf, size_t n, int max_posted) {
    max_posted = max_posted < 1 ? 1 : max_posted > KV_XFER_POSTED_MAX ? KV_XFER_POSTED_MAX
                                                                      : max_posted;
    int rc = conn_write_check(c);
    while (rc == 0 && c->base.n_posted > 0 &&
           ucp_request_check_status(c->posted[c->posted_head]) != UCS_INPROGRESS)
        rc = conn_posted_wait(c, -1); /* returns at once: it completed */
    while (rc == 0 && c->base.n_posted >= max_posted)
        rc = conn_posted_wait(c, -1);
    if (rc == 0 && c->posted_rc)
        rc = err_set(ERR_CONNECT, "kv_xfer ucx: write to %s: an earlier posted write failed",
                     c->peer);
    if (rc)
        return rc;
    ucp_request_param_t p = {0};
    ucs_status_ptr_t r = ucp_tag_send_nbx(c->ep, buf, n, n <= SMALL ? TAG_DATA : TAG_DATA_BIG, &p);
    if (UCS_PTR_IS_ERR(r))
        return err_set(ERR_CONNECT, "kv_xfer ucx: write to %s: %s", c->peer,
                       ucs_status_string(UCS_PTR_STATUS(r)));
    if (r == NULL)
        return 0; /* done already (an eager message UCP copied out) */
    c->posted[(c->posted_head + c->base.n_posted) % KV_XFER_POSTED_MAX] = r;
    c->base.n_posted++;
    conn_note_inflight(c, c->base.n_posted);
    return 0;
}

static int ucx_write_held(kv_xfer_conn *base, const void *buf, size_t n, int max_posted) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    int rc = conn_write_held(c, buf, n, max_posted);
    pthread_mutex_unlock(&c->use);
    return rc;
}

/* Resolves every posted write: waited for, or cancelled where it cannot complete. Returns 0 or
 * ERR_CONNECT if any failed since the last flush. */
static int conn_flush(ucx_conn *c, int timeout_ms) {
    while (c->base.n_posted > 0)
        (void)conn_posted_wait(c, timeout_ms);
    int rc = c->posted_rc;
    c->posted_rc = 0;
    return rc ? err_wrap(rc, "kv_xfer ucx: flush to %s", c->peer) : 0;
}

static int ucx_flush(kv_xfer_conn *base, int timeout_ms) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    int rc = conn_flush(c, timeout_ms);
    pthread_mutex_unlock(&c->use);
    return rc;
}

/* The parts of iov gathered into the connection's gather buffer and written as one message (one
 * copy here; the reader's rendezvous fetches it in one piece, and its readv_full copies the parts
 * out of its staging buffer). Measured on shared memory (bench_xfer, 1 MiB blocks of 32 parts of
 * 32 KiB), this beats both other ways UCX 1.13 offers: a message per part costs a rendezvous each
 * (about 1.3 times the CPU per byte of this), and one message of UCX's iov datatype goes by a
 * fragmented protocol (20 times slower). A block-major pool's block does not come here: kv_xfer.c
 * writes its payload, one piece, with write_all straight from the pool (no gather copy), and the
 * receiver's read of it takes the rendezvous straight into its pool block. */
static int conn_writev_all(ucx_conn *c, const struct iovec *iov, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (total > c->gather_cap) {
        uint8_t *g = realloc(c->gather, total);
        if (!g)
            return err_set(ERR_CONNECT, "kv_xfer ucx: write to %s: no memory for %zu bytes",
                           c->peer, total);
        c->gather = g;
        c->gather_cap = total;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        memcpy(c->gather + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    return conn_write_all(c, c->gather, total);
}

static int ucx_writev_all(kv_xfer_conn *base, const struct iovec *iov, int n) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    int rc = conn_writev_all(c, iov, n);
    pthread_mutex_unlock(&c->use);
    return rc;
}

static int conn_read_full(ucx_conn *c, void *buf, size_t n, int timeout_ms) {
    uint8_t *p = buf;
    while (n > 0) {
        if (c->stage_off < c->stage_len) {
            size_t k = c->stage_len - c->stage_off;
            k = k < n ? k : n;
            memcpy(p, c->stage + c->stage_off, k);
            c->stage_off += k;
            p += k;
            n -= k;
            continue;
        }
        if (c->closed || c->fin_seen || atomic_load(&c->cut))
            return err_set(ERR_CONNECT, "kv_xfer ucx: read from %s: end of stream (%s)", c->peer,
                           c->fin_seen ? "the peer closed the connection" : "shut down here");
        ucp_tag_message_h m;
        ucp_tag_recv_info_t info;
        int rc = conn_probe(c, 0, TAG_ANY_MASK, timeout_ms, &m, &info);
        if (rc)
            return rc;
        if ((info.sender_tag & TAG_DATA_MASK) != TAG_DATA) {
            /* FIN, or a message no kv_xfer peer sends (taken off the queue; a longer one ends
             * truncated): either way the stream ends here */
            uint64_t junk;
            (void)conn_recv_msg(c, m, &junk, info.length < sizeof junk ? info.length : sizeof junk);
            c->fin_seen = true;
            return err_set(ERR_CONNECT, "kv_xfer ucx: read from %s: %s", c->peer,
                           info.sender_tag == TAG_FIN
                               ? "end of stream (the peer closed the connection)"
                               : "a message that is not DATA; the stream ends");
        }
        if (info.length <= n) {
            if ((rc = conn_recv_msg(c, m, p, info.length)))
                return rc;
            p += info.length;
            n -= info.length;
            continue;
        }
        if (info.length > c->stage_cap) {
            uint8_t *s = realloc(c->stage, info.length);
            if (!s) {
                uint64_t junk; /* taken off the queue, truncated: the stream is lost */
                (void)conn_recv_msg(c, m, &junk, sizeof junk);
                c->fin_seen = true;
                return err_set(ERR_CONNECT,
                               "kv_xfer ucx: read from %s: no memory for a %zu-byte message; "
                               "the stream ends",
                               c->peer, info.length);
            }
            c->stage = s;
            c->stage_cap = info.length;
        }
        if ((rc = conn_recv_msg(c, m, c->stage, info.length)))
            return rc;
        c->stage_off = 0;
        c->stage_len = info.length;
    }
    return 0;
}

static int ucx_read_full(kv_xfer_conn *base, void *buf, size_t n, int timeout_ms) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    int rc = conn_read_full(c, buf, n, timeout_ms);
    pthread_mutex_unlock(&c->use);
    return rc;
}

/* Reads the parts of iov in order, as read_full of each (a writev_all's message is staged once and
 * its parts copied out). */
static int conn_readv_full(ucx_conn *c, const struct iovec *iov, int n, int timeout_ms) {
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = conn_read_full(c, iov[i].iov_base, iov[i].iov_len, timeout_ms);
    return rc;
}

static int ucx_readv_full(kv_xfer_conn *base, const struct iovec *iov, int n, int timeout_ms) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    int rc = conn_readv_full(c, iov, n, timeout_ms);
    pthread_mutex_unlock(&c->use);
    return rc;
}

/* Whether a read would return now: the rest of a staged message, a message on the queue, or the
 * end (FIN read, failed, cut, closed). Progresses the worker once; takes nothing. */
static bool ucx_read_ready(kv_xfer_conn *base) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use);
    bool ready = c->stage_off < c->stage_len || c->closed || c->fin_seen ||
                 atomic_load(&c->cut) || atomic_load(&c->failed) || !c->ep;
    if (!ready) {
        ucp_tag_recv_info_t info;
        ucp_worker_progress(c->w);
        ready = ucp_tag_probe_nb(c->w, 0, TAG_ANY_MASK, 0, &info) != NULL;
    }
    pthread_mutex_unlock(&c->use);
    return ready;
}

/* Takes the small messages nobody will read off the queue (the peer's FIN, ACKs, an ABORT), so
 * the worker is destroyed with none pending. A rendezvous message stays: receiving it would tell
 * its sender it was delivered. */
static void conn_drain(ucx_conn *c) {
    static const ucp_tag_t tags[] = {TAG_DATA, TAG_FIN, TAG_HELLO};
    uint8_t junk[SMALL];
    ucp_worker_progress(c->w);
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        ucp_tag_recv_info_t info;
        ucp_tag_message_h m;
        while ((m = ucp_tag_probe_nb(c->w, tags[i], TAG_ONE_MASK, 1, &info)) != NULL)
            (void)conn_recv_msg(c, m, junk, info.length < sizeof junk ? info.length : sizeof junk);
    }
}

/* The close itself: the caller holds c->use (it is the owner, or the owner is in no call). The
 * FIN goes after the posted writes and the endpoint's flush waits for them too (up to FLUSH_MS);
 * once the endpoint is closed, the posted writes still in flight are cancelled (the next flush
 * reports it), so none is left when this returns. */
static void conn_shutdown(ucx_conn *c) {
    if (c->closed)
        return;
    c->closed = true;
    if (c->ep && !atomic_load(&c->failed)) {
        ucp_request_param_t p = {0};
        if (conn_send(c, NULL, 0, TAG_FIN, "FIN") == 0 && c->ep)
            (void)conn_send_wait(c, ucp_ep_flush_nbx(c->ep, &p), "flush", FLUSH_MS);
    }
    if (c->ep) {
        conn_drain(c);
        conn_close_ep(c);
    }
    while (c->base.n_posted > 0)
        (void)conn_posted_wait(c, 0);
}

/* From any thread: closes now if no read or write is running, else cuts the running one (it
 * returns ERR_CONNECT soon after; the FIN goes with the owner's destroy). */
static void ucx_shutdown(kv_xfer_conn *base) {
    ucx_conn *c = (ucx_conn *)base;
    if (pthread_mutex_trylock(&c->use) == 0) {
        conn_shutdown(c);
        pthread_mutex_unlock(&c->use);
        return;
    }
    atomic_store(&c->cut, true);
    uint64_t one = 1;
    (void)!write(c->wake_fd, &one, sizeof one);
}

static void conn_free(ucx_conn *c) {
    assert(c->base.n_posted == 0); /* conn_shutdown resolved them before the worker goes */
    if (c->w) {
        conn_drain(c);
        ucp_worker_destroy(c->w);
    }
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    pthread_mutex_destroy(&c->use);
    free(c->stage);
    free(c->gather);
    free(c);
    ctx_put();
}

static void ucx_destroy(kv_xfer_conn *base) {
    ucx_conn *c = (ucx_conn *)base;
    pthread_mutex_lock(&c->use); /* the owner's call, if a shutdown cut it, has returned */
    conn_shutdown(c);
    pthread_mutex_unlock(&c->use);
    conn_free(c);
}

static const kv_xfer_conn_ops ucx_ops = {.write_all = ucx_write_all,
                                         .read_full = ucx_read_full,
                                         .writev_all = ucx_writev_all,
                                         .readv_full = ucx_readv_full,
                                         .write_held = ucx_write_held,
                                         .flush = ucx_flush,
                                         .read_ready = ucx_read_ready,
                                         .receiver_moves = true,
                                         .shutdown = ucx_shutdown,
                                         .destroy = ucx_destroy};

/* A connection with its worker, no endpoint yet. */
static int conn_new(const char *peer, ucx_conn **out) {
    int rc = ctx_get();
    if (rc)
        return rc;
    ucx_conn *c = calloc(1, sizeof *c);
    if (!c) {
        ctx_put();
        return err_set(ERR_NOMEM, "kv_xfer ucx: connection to %s", peer);
    }
    c->base.ops = &ucx_ops;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->wake_fd = -1;
    pthread_mutex_init(&c->use, NULL);
    if ((c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        conn_free(c);
        return err_set(ERR_NOMEM, "kv_xfer ucx: connection to %s: eventfd failed", peer);
    }
    if ((rc = worker_create(&c->w, &c->efd, peer))) {
        c->w = NULL;
        conn_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* The HELLO exchange: the client sends first, the server answers. */
static int conn_hello(ucx_conn *c, bool client) {
    uint64_t mine = HELLO_MAGIC, theirs = 0;
    int rc = client ? conn_send(c, &mine, sizeof mine, TAG_HELLO, "hello") : 0;
    ucp_tag_message_h m;
    ucp_tag_recv_info_t info;
    if (rc == 0)
        rc = conn_probe(c, TAG_HELLO, TAG_ONE_MASK, HANDSHAKE_MS, &m, &info);
    if (rc == 0 && info.length != sizeof theirs) {
        uint8_t junk[64];
        (void)conn_recv_msg(c, m, junk, info.length <= sizeof junk ? info.length : 0);
        return err_set(ERR_PROTOCOL, "kv_xfer ucx: %s sent a %zu-byte hello", c->peer, info.length);
    }
    if (rc == 0)
        rc = conn_recv_msg(c, m, &theirs, sizeof theirs);
    if (rc == 0 && theirs != HELLO_MAGIC)
        return err_set(ERR_PROTOCOL, "kv_xfer ucx: %s is not a kv_xfer ucx peer", c->peer);
    if (rc == 0 && !client)
        rc = conn_send(c, &mine, sizeof mine, TAG_HELLO, "hello");
    return rc;
}

/* Parses "host:port" into a socket address. */
static int ucx_resolve(const char *addr, bool passive, struct sockaddr_storage *ss,
                       socklen_t *len) {
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    char host[256];
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return err_set(ERR_INVAL, "kv_xfer ucx: address '%s' is not host:port", addr ? addr : "");
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *res;
    int g = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
    if (g)
        return err_set(ERR_CONNECT, "kv_xfer ucx: '%s': %s", addr, gai_strerror(g));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int ucx_connect(const char *addr, kv_xfer_conn **out) {
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = ucx_resolve(addr, false, &ss, &len);
    ucx_conn *c = NULL;
    if (rc || (rc = conn_new(addr, &c)))
        return rc;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {.addr = (const struct sockaddr *)&ss, .addrlen = len},
                          .err_mode = UCP_ERR_HANDLING_MODE_NONE,
                          .err_handler = {.cb = conn_err_cb, .arg = c}};
    ucs_status_t st = ucp_ep_create(c->w, &ep, &c->ep);
    if (st != UCS_OK) {
        c->ep = NULL;
        rc = err_set(ERR_CONNECT, "kv_xfer ucx: connect to '%s': %s", addr, ucs_status_string(st));
    } else if ((rc = conn_hello(c, true))) {
        rc = atomic_load(&c->failed)
                 ? err_set(ERR_CONNECT, "kv_xfer ucx: connect to '%s': %s", addr, conn_failure(c))
                 : err_wrap(ERR_CONNECT, "kv_xfer ucx: connect to '%s'", addr);
    }
    if (rc) {
        c->closed = true;
        conn_close_ep(c);
        conn_free(c);
        return rc;
    }
    *out = &c->base;
    return 0;
}

/* ---- listeners ---- */

typedef struct ucx_listener {
    kv_xfer_listener base;
    ucp_worker_h w;
    ucp_listener_h l;
    int efd, port;
    pthread_mutex_t mu; /* guards q, n_q (the connection handler may run on UCX's thread) */
    ucp_conn_request_h q[QUEUE];
    int n_q;
} ucx_listener;

static void listener_conn_cb(ucp_conn_request_h req, void *arg) {
    ucx_listener *l = arg;
    pthread_mutex_lock(&l->mu);
    if (l->n_q < QUEUE)
        l->q[l->n_q++] = req;
    else
        ucp_listener_reject(l->l, req);
    pthread_mutex_unlock(&l->mu);
}

static const kv_xfer_listener_ops ucx_listener_ops;

static void listener_free(ucx_listener *l) {
    if (l->l) {
        pthread_mutex_lock(&l->mu);
        for (int i = 0; i < l->n_q; i++)
            ucp_listener_reject(l->l, l->q[i]);
        l->n_q = 0;
        pthread_mutex_unlock(&l->mu);
        ucp_listener_destroy(l->l);
    }
    if (l->w)
        ucp_worker_destroy(l->w);
    pthread_mutex_destroy(&l->mu);
    free(l);
    ctx_put();
}

static int ucx_listen(const char *addr, kv_xfer_listener **out) {
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = ucx_resolve(addr, true, &ss, &len);
    if (rc || (rc = ctx_get()))
        return rc;
    ucx_listener *l = calloc(1, sizeof *l);
    if (!l) {
        ctx_put();
        return err_set(ERR_NOMEM, "kv_xfer ucx: listener on '%s'", addr);
    }
    l->base.ops = &ucx_listener_ops;
    pthread_mutex_init(&l->mu, NULL);
    if ((rc = worker_create(&l->w, &l->efd, addr))) {
        l->w = NULL;
        listener_free(l);
        return rc;
    }
    ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                              UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                .sockaddr = {.addr = (const struct sockaddr *)&ss, .addrlen = len},
                                .conn_handler = {.cb = listener_conn_cb, .arg = l}};
    ucs_status_t st = ucp_listener_create(l->w, &lp, &l->l);
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    if (st == UCS_OK)
        st = ucp_listener_query(l->l, &la);
    else
        l->l = NULL;
    if (st != UCS_OK) {
        listener_free(l);
        return err_set(ERR_CONNECT, "kv_xfer ucx: listen on '%s': %s", addr, ucs_status_string(st));
    }
    const struct sockaddr *sa = (const struct sockaddr *)&la.sockaddr;
    l->port = ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                                              : ((const struct sockaddr_in *)sa)->sin_port);
    *out = &l->base;
    return 0;
}

static int ucx_accept(kv_xfer_listener *base, int timeout_ms, kv_xfer_conn **out) {
    ucx_listener *l = (ucx_listener *)base;
    waiter wt = waiter_start(l->w, l->efd, timeout_ms);
    ucp_conn_request_h req = NULL;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        if (l->n_q > 0) {
            req = l->q[0];
            memmove(l->q, l->q + 1, (size_t)--l->n_q * sizeof l->q[0]);
        }
        pthread_mutex_unlock(&l->mu);
        if (req)
            break;
        if (waiter_round(&wt))
            return err_set(ERR_TIMEOUT, "kv_xfer ucx: no connection on port %d in %d ms", l->port,
                           timeout_ms);
    }
    char peer[80];
    ucp_conn_request_attr_t ra = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    snprintf(peer, sizeof peer, "a client of port %d", l->port);
    if (ucp_conn_request_query(req, &ra) == UCS_OK) {
        char host[64], serv[16];
        const struct sockaddr *sa = (const struct sockaddr *)&ra.client_address;
        socklen_t sl =
            sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        if (getnameinfo(sa, sl, host, sizeof host, serv, sizeof serv,
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            snprintf(peer, sizeof peer, "%s:%s", host, serv);
    }
    ucx_conn *c = NULL;
    int rc = conn_new(peer, &c);
    if (rc) {
        ucp_listener_reject(l->l, req);
        return rc;
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .conn_request = req,
                          .err_mode = UCP_ERR_HANDLING_MODE_NONE,
                          .err_handler = {.cb = conn_err_cb, .arg = c}};
    ucs_status_t st = ucp_ep_create(c->w, &ep, &c->ep);
    if (st != UCS_OK) {
        c->ep = NULL;
        rc = err_set(ERR_CONNECT, "kv_xfer ucx: accept %s: %s", peer, ucs_status_string(st));
    } else if ((rc = conn_hello(c, false))) {
        rc = err_wrap(ERR_CONNECT, "kv_xfer ucx: accept %s", peer);
    }
    if (rc) {
        c->closed = true;
        conn_close_ep(c);
        conn_free(c);
        return rc;
    }
    *out = &c->base;
    return 0;
}

static int ucx_listener_port(const kv_xfer_listener *l) {
    return ((const ucx_listener *)l)->port;
}

static void ucx_listener_destroy(kv_xfer_listener *l) {
    listener_free((ucx_listener *)l);
}

static const kv_xfer_listener_ops ucx_listener_ops = {ucx_listener_port, ucx_listener_destroy};

const kv_xfer_transport kv_xfer_ucx = {"ucx", ucx_listen, ucx_accept, ucx_connect};
