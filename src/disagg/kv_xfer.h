/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer: moves one request's KV blocks from the server that computed them (the sender) to the
 * server that continues the request (the receiver), over one transport, every byte checked (P2).
 *
 * Transports. A transport is one file (kv_xfer_<name>.c) plus one row of the table in kv_xfer.c
 * (kv_xfer_transport_find): "tcp" (plain sockets, no dependency; kv_xfer_tcp.c) and "ucx"
 * (libucx's UCP, kv_xfer_ucx.c: UCX picks System V shared memory and cma on one machine, tcp
 * between machines, RDMA where the hardware has it; a HELLO each way opens a connection, a FIN
 * ends it). A connection (kv_xfer_conn) is a reliable, ordered byte stream; everything above it
 * (framing, checks, ownership) is transport-independent. A BLOCK is written as two writes (its
 * header, then its blob): the same bytes on the stream, and on ucx each lands in place. On ucx a
 * block's payload write may return before the receiver fetched it (toggle kv-xfer-inflight: up
 * to that many per connection on their way; see kv_xfer_send_flush): the block is HELD meanwhile,
 * and the sender waits for them all before it releases any block or reads.
 *
 * Wire. Every message is a 64-byte header plus a body (little-endian host assumed, packed):
 *   u32 magic "VKXF", u8 type, u8 flags, u16 zero, u64 transfer id, u32 seq, i32 code,
 *   i64 pos0, i64 pos1, u64 key, u64 body bytes, u64 header hash (hash64 of the 56 bytes before)
 * BLOCK (sender -> receiver): seq = block index in the transfer, positions [pos0, pos1), key = the
 *   block's chain name (kv_block_key), flags bit 0 = final; body = the block's blob exactly as
 *   kv_block_encode writes it (names, buffers, tokens, payload and the block's xxh3 checksum).
 * ACK (receiver -> sender): seq = the block index verified and held by the receiver.
 * ABORT (either way): code = the negative error that ended the transfer.
 * A header whose hash does not match, or an unknown type, is a protocol error (the stream can no
 * longer be trusted): the transfer aborts.
 *
 * Verification. The receiver knows the request's prompt tokens and the identity (model, element
 * type, block size), so it computes every block's name itself; it allocates a pool block, and
 * kv_block_decode restores the blob into it only if the blob names exactly that block and its
 * payload matches its checksum (and the pool block after the write does too). In place (toggle
 * kv-xfer-inplace, the default) the same bytes move without the blob buffers: the sender writes the
 * blob's head and then the block's segments straight from its pool (the block is HELD, so nobody
 * writes it meanwhile), and the receiver allocates the pool block first (RECEIVING: nobody else can
 * see it), reads the head into a buffer and the segments straight into the block, checks the head
 * (kv_block_check_head) and verifies the block's checksum once where it lies; only then is it HELD.
 * Where the pools are block-major (flag kv-pool-block-major) a block's segments are one piece on
 * each side: the sender writes the header and head, then the payload in one write from its pool,
 * and the receiver reads the payload in one read into its block (on ucx: one rendezvous, one cma
 * copy, then the one checksum pass). The bytes on the wire do not depend on either side's layout.
 * Overlap (toggle kv-xfer-verify-overlap; in place only): when a block has landed and the next
 * message is already waiting, the block's checksum is computed on the receiver's helper thread
 * (started at the first such block, joined by destroy) while the receiver reads the next block
 * into its own pool block; the first block's verdict is then taken before the second's, so blocks
 * still become HELD and are ACKed in order, one step later. A pending block with nothing behind it
 * gets its verdict at the start of the next step, before that step waits for a message. 1 (the
 * default) overlaps where the receiver's read moves the bytes (ucx); 2 on every transport.
 * A block that fails is freed, never seen. Block i must carry
 * positions [i*B, (i+1)*B). Only full blocks travel; a prompt's partial tail block is recomputed by
 * the receiver. Pipelining: the sender sends each block as soon as it is sealed (chunk-wise, so the
 * transfer overlaps the prefill's compute) and marks the last one final.
 *
 * Ownership (the state machine; every edge is tested in tests/test_kv_xfer.c).
 *
 *   A block on the sender side:
 *     HELD      kv_xfer_send_block sent it; the transfer holds the caller's reference (its
 *               release callback has not run). The caller must not reuse or free the block.
 *     RELEASED  the release callback ran, exactly once. Reached from HELD by
 *               (a) an ACK for its seq, or (b) the transfer aborting (local cancel, drain, peer
 *               ABORT, peer disconnect, timeout, protocol error). Terminal.
 *   A block on the receiver side:
 *     RECEIVING a pool block is allocated and the blob is being restored into it, or it has
 *               landed and its checksum is being computed (overlap); invisible.
 *     HELD      verified (kv_block_decode returned 0) and ACKed; held by the transfer, still
 *               invisible to the consumer.
 *     HANDED    the transfer completed and kv_xfer_recv_take gave the block to the consumer, who
 *               now owns its reference. Terminal for the transfer.
 *     FREED     the transfer unreferenced the pool block (kv_block_unref), exactly once: from
 *               RECEIVING when verification fails, from RECEIVING or HELD on abort. Terminal.
 *   A transfer (kv_xfer_state), either side:
 *     OPEN      -> OPEN       a block sent / verified (not the final one)
 *     OPEN      -> COMPLETE   sender: the final block sent and every block ACKed;
 *                             receiver: the final block verified (every block before it was)
 *     OPEN      -> ABORTED    local cancel or drain (kv_xfer_*_cancel), peer ABORT, peer
 *                             disconnect, no message within timeout_ms, a block failing
 *                             verification, a protocol error (bad header, gap in seq, size)
 *     COMPLETE  -> ABORTED    receiver only, while the consumer has not taken the blocks (a
 *                             cancel frees them); after kv_xfer_recv_take a cancel is a no-op
 *     COMPLETE, ABORTED       otherwise terminal: every later message is dropped and counted
 *   Messages carry the transfer id and seq: a BLOCK whose seq was already received (duplicate), any
 *   message for another transfer id, and any message after COMPLETE or ABORTED (late) is dropped
 *   and counted in n_dropped, never applied; a duplicate ACK likewise. A seq beyond the next
 *   expected one (a lost block) is a protocol error.
 *
 * Connections: one carries transfers one after another (each its own id). A transfer that aborted
 * on a protocol error, a timeout or a disconnect leaves the stream at an unknown point: close the
 * connection then, and open a new one for the next transfer.
 *
 * Threading: a kv_xfer_send or kv_xfer_recv, and its connection, belong to one thread at a time
 * (the sender and the receiver of one transfer run in different threads or processes: each end
 * blocks in its own reads and writes). Drain = the owner calls cancel on each open transfer.
 * Nothing here takes a lock but the receiver's own helper thread's (overlap), which reads only
 * the pending block's bytes. On ucx the owning thread is also the one that progresses the
 * connection's UCP worker (inside its reads and writes); nothing else does, so a connection must
 * not be used by two threads at once even for reading on one and writing on the other. The one
 * exception is kv_xfer_conn_shutdown, which any thread may call to cut the owner's blocked read or
 * write (both transports).
 */
#ifndef VERITY_DISAGG_KV_XFER_H
#define VERITY_DISAGG_KV_XFER_H

#include "kv/kv_block.h"
#include "kv/kv_pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- transports ---- */

typedef struct kv_xfer_conn kv_xfer_conn;
typedef struct kv_xfer_listener kv_xfer_listener;

typedef struct kv_xfer_transport {
    const char *name;
    /* Listens on addr ("host:port"; port 0 picks a free one, see kv_xfer_listener_port). */
    int (*listen)(const char *addr, kv_xfer_listener **out);
    /* Waits up to timeout_ms (-1: forever) for one connection. */
    int (*accept)(kv_xfer_listener *l, int timeout_ms, kv_xfer_conn **out);
    /* Connects to addr ("host:port"). */
    int (*connect)(const char *addr, kv_xfer_conn **out);
} kv_xfer_transport;

/* The transport named name ("tcp", "ucx"), or NULL (err_set ERR_NOTFOUND names it and the known
 * ones). The ucx transport's listen and connect return ERR_UNSUPPORTED when UCX cannot create a
 * context on this machine. */
const kv_xfer_transport *kv_xfer_transport_find(const char *name);

/* The port a listener bound (for "host:0"). */
int kv_xfer_listener_port(const kv_xfer_listener *l);

/* Closes a listener (NULL is a no-op). */
void kv_xfer_listener_destroy(kv_xfer_listener *l);

/* Wraps a connected stream socket fd (a socketpair end, say) as a tcp-transport connection that
 * owns the fd. Returns 0 or ERR_NOMEM. */
int kv_xfer_conn_from_fd(int fd, kv_xfer_conn **out);

/* Shuts the connection down both ways without freeing it (the peer sees end of stream; a test's
 * "the peer died"). Any thread may call it: a read or write running in the owning thread then
 * ends with ERR_CONNECT. On tcp the peer sees end of stream at once; on ucx, when the owner is in
 * a call, the FIN and the endpoint's close wait for the owner's kv_xfer_conn_destroy (only the
 * owner progresses the connection's worker); when it is not, they happen here. */
void kv_xfer_conn_shutdown(kv_xfer_conn *c);

/* Closes and frees a connection (NULL is a no-op). */
void kv_xfer_conn_destroy(kv_xfer_conn *c);

/* ---- transfers ---- */

typedef enum kv_xfer_state {
    KV_XFER_OPEN = 0,
    KV_XFER_COMPLETE = 1,
    KV_XFER_ABORTED = 2,
} kv_xfer_state;

typedef struct kv_xfer_stats {
    int64_t n_sent;     /* sender: BLOCK messages written (receiver: 0) */
    int64_t n_verified; /* receiver: blocks that passed kv_block_decode */
    int64_t n_acked;    /* sender: ACKs applied; receiver: ACKs written */
    int64_t n_released; /* sender: release callbacks run; receiver: pool blocks unreferenced */
    int64_t n_dropped;  /* duplicate, foreign or late messages dropped */
    int64_t n_handed;   /* receiver: blocks given to the consumer */
    int64_t n_overlapped; /* receiver: blocks checksummed while the next one landed
                           * (kv-xfer-verify-overlap) */
} kv_xfer_stats;

/* Test hook on the sender: sees each BLOCK frame (header and body, n bytes, writable) just before
 * it is written and returns how many times to write it (1 normally; 0 drops it, 2 duplicates it).
 */
typedef int (*kv_xfer_wire_hook)(void *ctx, uint32_t seq, uint8_t *frame, size_t n);

typedef struct kv_xfer_send kv_xfer_send;
typedef struct kv_xfer_recv kv_xfer_recv;

/* Releases the caller's reference to a sent block (kv_block_unref on the engine's thread, say). */
typedef void (*kv_xfer_release_fn)(void *ctx, int32_t block);

typedef struct kv_xfer_send_opts {
    uint64_t xfer_id;
    int timeout_ms;              /* kv_xfer_send_step: no message for this long aborts */
    kv_xfer_wire_hook wire_hook; /* NULL in production */
    void *wire_ctx;
} kv_xfer_send_opts;

/* Creates the sending side of one transfer over conn (borrowed: the caller destroys it after the
 * transfer). Returns 0, ERR_INVAL, ERR_NOMEM. */
int kv_xfer_send_create(kv_xfer_conn *conn, const kv_xfer_send_opts *o, kv_xfer_send **out);

/* Cancels the transfer if it is open (as kv_xfer_send_cancel) and frees it. NULL is a no-op. */
void kv_xfer_send_destroy(kv_xfer_send *s);

/* Sends pool block id (named by m, as kv_block_encode takes it) as the next block of the transfer;
 * final marks the last one. With kv-xfer-inflight above 1 over ucx it may return while the block's
 * payload is still on its way (kv_xfer_send_flush). Returns 0 or ERR_CONNECT (the peer is gone: the transfer aborted), and
 * from then on the block is HELD: release(ctx, id) runs exactly once, on its ACK or on abort (for
 * ERR_CONNECT before this returns). ERR_STATE (the transfer is not open, or final was already
 * sent): the block was not taken, release does not run, the caller keeps its reference. */
int kv_xfer_send_block(kv_xfer_send *s, const kv_pool *p, int32_t id, const kv_block_meta *m,
                       bool final, kv_xfer_release_fn release, void *ctx);

/* Waits until the blocks sent so far have left: with kv-xfer-inflight above 1, a transport that
 * can (ucx) still moves up to that many of them when kv_xfer_send_block returns; this waits for
 * them (up to timeout_ms each). For a caller about to wait for something else (the engine's next
 * block), so a transport that needs this thread to move them (ucx between machines) is not
 * stalled meanwhile; kv_xfer_send_step and every abort do it themselves. Returns 0, or
 * ERR_CONNECT: the transfer aborted (every HELD block released once). 0 at once when nothing is
 * on its way. */
int kv_xfer_send_flush(kv_xfer_send *s);

/* Reads and applies one message from the receiver (waiting up to timeout_ms): an ACK releases its
 * block; an ABORT, end of stream or the timeout aborts the transfer (releasing every HELD block).
 * Returns the state after it; on ABORTED, kv_xfer_send_error says why. */
kv_xfer_state kv_xfer_send_step(kv_xfer_send *s);

/* Aborts an open transfer with code (ERR_CANCELLED: local cancel or drain): releases every HELD
 * block once and tells the peer (best effort). A no-op on a COMPLETE or ABORTED transfer. */
void kv_xfer_send_cancel(kv_xfer_send *s, int code);

kv_xfer_state kv_xfer_send_state(const kv_xfer_send *s);
/* 0 unless ABORTED; then the negative code that ended it. */
int kv_xfer_send_error(const kv_xfer_send *s);
kv_xfer_stats kv_xfer_send_stats(const kv_xfer_send *s);

typedef struct kv_xfer_recv_opts {
    uint64_t xfer_id;
    uint64_t identity;   /* the key of block -1 (model, element type, block size) */
    const int32_t *toks; /* the request's prompt tokens (borrowed for the transfer's life) */
    int64_t n_toks;
    int timeout_ms; /* kv_xfer_recv_step: no message for this long aborts */
} kv_xfer_recv_opts;

/* Creates the receiving side of one transfer into pool p over conn (both borrowed). Returns 0,
 * ERR_INVAL (no full block in n_toks), ERR_NOMEM. */
int kv_xfer_recv_create(kv_xfer_conn *conn, kv_pool *p, const kv_xfer_recv_opts *o,
                        kv_xfer_recv **out);

/* Cancels (frees any block not handed on) and frees it. NULL is a no-op. */
void kv_xfer_recv_destroy(kv_xfer_recv *r);

/* Reads and applies one message (waiting up to timeout_ms): a BLOCK is restored into a fresh pool
 * block and verified, then ACKed and held (with kv-xfer-verify-overlap, a block with a message
 * behind it gets its verdict in the next step, before the next block's; a step that finds such a
 * block and nothing to read only settles it); a block that fails verification, an ABORT, end of
 * stream, a protocol error or the timeout aborts the transfer, freeing every block it holds.
 * Returns the state after it; on ABORTED, kv_xfer_recv_error says why. */
kv_xfer_state kv_xfer_recv_step(kv_xfer_recv *r);

/* Aborts with code unless the blocks were taken: frees every block the transfer holds, exactly
 * once, and tells the peer (best effort). */
void kv_xfer_recv_cancel(kv_xfer_recv *r, int code);

/* On a COMPLETE transfer, gives the consumer the verified blocks in position order (ids[cap]):
 * the consumer now owns one reference to each. Returns the count; ERR_STATE if the transfer is not
 * COMPLETE or they were already taken; ERR_RANGE if cap is too small. */
int kv_xfer_recv_take(kv_xfer_recv *r, int32_t *ids, int cap);

/* The pool block holding verified block i (HELD, or HANDED once taken), or -1 if block i was not
 * verified (yet). For a consumer that records what it verified (a checksum) before the end. */
int32_t kv_xfer_recv_block(const kv_xfer_recv *r, uint32_t i);

/* The checksum verified block i was verified against (kv_block_checksum of its bytes then), or 0
 * if block i was not verified (yet): a consumer that records it need not hash the block again. */
uint64_t kv_xfer_recv_checksum(const kv_xfer_recv *r, uint32_t i);

kv_xfer_state kv_xfer_recv_state(const kv_xfer_recv *r);
int kv_xfer_recv_error(const kv_xfer_recv *r);
kv_xfer_stats kv_xfer_recv_stats(const kv_xfer_recv *r);

#endif
