/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer_int: what a transport file implements (private to src/disagg/). A connection is a
 * reliable ordered byte stream with these operations; kv_xfer.c frames and checks messages on it.
 *
 * Posted writes (write_held, flush). A transport whose write of a big buffer waits for the peer to
 * fetch it (ucx's rendezvous: the receiver copies straight out of the sender's memory) can post
 * such a write and return before the peer took it, so a sender keeps several blocks on their way
 * instead of one. The caller then holds the buffer, unchanged, until flush (or shutdown, or
 * destroy) returns: kv_xfer.c posts only bytes of pool blocks its transfer holds (HELD: nobody
 * writes or reuses them until their release) and flushes before it releases any of them or reads
 * from the connection. The bytes on the stream are those of write_all calls in the same order,
 * whatever mix of writes and posted writes made them. A transport that has no use for it leaves
 * both NULL (tcp: kv_xfer.c writes with write_all instead).
 */
#ifndef VERITY_DISAGG_KV_XFER_INT_H
#define VERITY_DISAGG_KV_XFER_INT_H

#include "disagg/kv_xfer.h"

#include <sys/uio.h>

typedef struct kv_xfer_conn_ops {
    /* Writes all n bytes. Returns 0 or ERR_CONNECT (the peer is gone; detail says why). */
    int (*write_all)(kv_xfer_conn *c, const void *buf, size_t n);
    /* Reads exactly n bytes, waiting up to timeout_ms (-1: forever) for each part. Returns 0,
     * ERR_TIMEOUT, ERR_CONNECT (end of stream or an error). */
    int (*read_full)(kv_xfer_conn *c, void *buf, size_t n, int timeout_ms);
    /* Writes the n parts of iov in order: the same bytes on the stream as write_all of each
     * (tcp: straight from the parts, one sendmsg for many; ucx: gathered into one message, see
     * kv_xfer_ucx.c for why). Returns 0 or ERR_CONNECT. */
    int (*writev_all)(kv_xfer_conn *c, const struct iovec *iov, int n);
    /* Reads exactly the n parts of iov in order, as read_full of each would (tcp: straight into
     * the parts, one readv for many). Returns as read_full. */
    int (*readv_full)(kv_xfer_conn *c, const struct iovec *iov, int n, int timeout_ms);
    /* Posts the n bytes of buf as the next write: the same bytes on the stream as write_all, but
     * it may return before the peer took them. buf must stay valid and unchanged until the next
     * flush, shutdown or destroy returns. At most max_posted writes are posted at once (1..
     * KV_XFER_POSTED_MAX): when that many are, it first waits for the oldest. Returns 0 or
     * ERR_CONNECT (the peer is gone: this write or an earlier posted one failed; the caller
     * flushes, which then resolves every posted write). NULL where the transport has none. */
    int (*write_held)(kv_xfer_conn *c, const void *buf, size_t n, int max_posted);
    /* Waits until every posted write completed, up to timeout_ms (-1: forever) for each. Whatever
     * it returns, none is posted any more (one that cannot complete, the peer being gone or the
     * wait over, is cancelled: the connection is closed) and the callers' buffers are theirs
     * again. Returns 0, or ERR_CONNECT if any posted write since the last flush failed or was
     * cancelled. NULL where write_held is. */
    int (*flush)(kv_xfer_conn *c, int timeout_ms);
    /* Whether a read would find something now without waiting: bytes of a message, the end of
     * the stream or a failure (which the read then reports). Never blocks and takes nothing. NULL
     * where the transport cannot tell (the receiver then verifies every block before it reads
     * the next). */
    bool (*read_ready)(kv_xfer_conn *c);
    /* Whether the receiver's read moves the bytes and the sender's write does not copy them (ucx:
     * a rendezvous fetched by the receiver), so a helper thread beside the receiver has a core
     * the sender does not need (kv-xfer-verify-overlap 1). */
    bool receiver_moves;
    void (*shutdown)(kv_xfer_conn *c);
    void (*destroy)(kv_xfer_conn *c);
} kv_xfer_conn_ops;

enum { KV_XFER_POSTED_MAX = 64 /* the most posted writes per connection (kv-xfer-inflight) */ };

struct kv_xfer_conn {
    const kv_xfer_conn_ops *ops;
    /* Counted by the transport, read by tests (the owning thread's, like the connection):
     * n_posted = writes posted and not yet seen complete; n_inflight_max = the most sends of this
     * connection the transport had not completed at once (posted writes, plus a write_all's own
     * while it waits for it). */
    int n_posted, n_inflight_max;
};

/* A listener's operations (each transport's listener starts with a kv_xfer_listener). */
typedef struct kv_xfer_listener_ops {
    int (*port)(const kv_xfer_listener *l);
    void (*destroy)(kv_xfer_listener *l);
} kv_xfer_listener_ops;

struct kv_xfer_listener {
    const kv_xfer_listener_ops *ops;
};

/* The transports' table rows (kv_xfer_tcp.c, kv_xfer_ucx.c). */
extern const kv_xfer_transport kv_xfer_tcp;
extern const kv_xfer_transport kv_xfer_ucx;

#endif
