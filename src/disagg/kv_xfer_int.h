/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer_int: what a transport file implements (private to src/disagg/). A connection is a
 * reliable ordered byte stream with these operations; kv_xfer.c frames and checks messages on it.
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
    void (*shutdown)(kv_xfer_conn *c);
    void (*destroy)(kv_xfer_conn *c);
} kv_xfer_conn_ops;

struct kv_xfer_conn {
    const kv_xfer_conn_ops *ops;
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
