/* SPDX-License-Identifier: MIT */
/*
 * test_kv_xfer: the KV transfer library (disagg/kv_xfer.h) over real connections, once per
 * transport of the table ("tcp", then "ucx" with the real libucx; one SKIP line if UCX cannot
 * start here): a loopback transfer from a sender thread to a receiver thread, byte-identical on
 * arrival; and, over a connected pair driven one explicit step at a time (no timing: every edge is
 * reached by the order of calls, a wire hook that rewrites or repeats a frame, a shutdown, or a
 * zero timeout on an empty connection), each edge of the header's state machine: a corrupted block
 * or header, abort before, during and after (either side), either peer dying, a full receiver
 * pool, duplicate, foreign and late messages, the timeout. Every case counts the sender's release
 * callbacks per block (each exactly once) and checks the receiver's pool is back to all free
 * unless the consumer took the blocks. The tcp pair is a socketpair; the two cases that write raw
 * bytes onto its fds (a replayed ACK, garbage from the receiver) run over tcp only. Both
 * transports also run: a connect to a closed port (a clear ERR_CONNECT naming the address), and a
 * receiver destroyed mid-transfer of 256 KiB blocks (UCX's rendezvous path) while the sender's
 * thread is blocked writing: it sees end of stream, every block released exactly once. Every case
 * runs over the in-place path, then over the frame path ("kv_xfer.<transport>.frame.<case>").
 *
 * Then, over tcp once, the decode side's cancel (disagg.h "Cancel", disagg_rx_cancel) on a real
 * receiver with a timeout of 120 s (a case that waited it out would trip the backstop): before
 * the request is expected (a tombstone: the expect starts FAILED), while it waits, while its
 * transfer is being received (the connection is cut: the sender's block released once, the
 * receiver's transfer counted aborted), and after READY (left alone: the blocks are used).
 * Each checks the poll's answer and the rx_cancelled counter; states are reached by order of
 * calls and by polling the module's counters, never by a sleep.
 *
 * The fixture and the per-transport runner are kv_xfer_fx.h's; the posted writes
 * (kv-xfer-inflight) are test_kv_xfer_inflight.c's, the receiver's overlap
 * (kv-xfer-verify-overlap, off here: each block's verdict comes within its own step) is
 * test_kv_xfer_overlap.c's.
 */
#include "kv_xfer_fx.h"

#include "base/hash.h"
#include "disagg/disagg.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Duplicates the next message waiting on fd (peeked, not consumed) onto the other end. */
static void replay_next(int peek_fd, int write_fd) {
    unsigned char m[64];
    T_CHECK(recv(peek_fd, m, sizeof m, MSG_PEEK) == (ssize_t)sizeof m);
    T_CHECK(write(write_fd, m, sizeof m) == (ssize_t)sizeof m);
}

/* ---- cases ---- */

typedef struct xfer_rx {
    kv_xfer_listener *l;
    fx *f;
    int32_t got[NB];
    int n_got, state, error;
} xfer_rx;

static void *xfer_receiver(void *arg) {
    xfer_rx *t = arg;
    kv_xfer_conn *c = NULL;
    if (tp->accept(t->l, -1, &c))
        return NULL;
    kv_xfer_recv_opts o = {.xfer_id = 7,
                           .identity = IDENTITY,
                           .toks = t->f->toks,
                           .n_toks = NB * BS + 3,
                           .timeout_ms = -1};
    kv_xfer_recv *r = NULL;
    if (kv_xfer_recv_create(c, t->f->dst, &o, &r) == 0) {
        while (kv_xfer_recv_step(r) == KV_XFER_OPEN) {
        }
        t->state = kv_xfer_recv_state(r);
        t->error = kv_xfer_recv_error(r);
        t->n_got = kv_xfer_recv_take(r, t->got, NB);
        kv_xfer_recv_destroy(r);
    }
    kv_xfer_conn_destroy(c);
    return NULL;
}

static void t_transfer(void) {
    fx f;
    fx_init(&f, false);
    T_CHECK(kv_xfer_transport_find(tp->name) == tp && !kv_xfer_transport_find("carrier-pigeon"));
    xfer_rx t = {.f = &f, .n_got = -1};
    T_CHECK(tp->listen("127.0.0.1:0", &t.l) == 0);
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, xfer_receiver, &t) == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kv_xfer_listener_port(t.l));
    T_CHECK(tp->connect(addr, &f.cs) == 0);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    for (int b = 0; b < NB; b++) /* pipelined: every block before any ACK is read */
        T_CHECK(fx_send(&f, s, b, b == NB - 1) == 0);
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    pthread_join(th, NULL);
    kv_xfer_listener_destroy(t.l);
    T_CHECKF(kv_xfer_send_state(s) == KV_XFER_COMPLETE, "sender ended %d (%s)",
             kv_xfer_send_state(s), err_name(kv_xfer_send_error(s)));
    T_CHECKF(t.state == KV_XFER_COMPLETE && t.n_got == NB, "receiver ended %d (%s), took %d",
             t.state, err_name(t.error), t.n_got);
    kv_xfer_stats st = kv_xfer_send_stats(s);
    T_CHECK(st.n_sent == NB && st.n_acked == NB && st.n_released == NB && st.n_dropped == 0);
    check_releases(&f, NB);
    for (int b = 0; b < NB; b++)
        check_same(&f, b, t.got[b]);
    T_CHECK(kv_pool_n_free(f.dst) == POOL_BLOCKS - NB); /* the consumer owns them now */
    kv_xfer_send_destroy(s);
    check_releases(&f, NB);
    fx_free(&f);
}

/* A byte of block 2's payload flipped on the wire: ERR_CHECKSUM, nothing handed on. */
static void t_corrupt_block(void) {
    fx f;
    fx_init(&f, true);
    hook_cfg h = {.seq = 2, .flip_at = 64 + (long)kv_block_blob_bytes(f.src) - 5, .copies = 1};
    kv_xfer_send *s = fx_sender(&f, hook_fn, &h);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    for (int b = 0; b < 5; b++)
        T_CHECK(fx_send(&f, s, b, b == 4) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECKF(kv_xfer_recv_error(r) == ERR_CHECKSUM, "error %s", err_name(kv_xfer_recv_error(r)));
    int32_t got[NB];
    T_CHECK(kv_xfer_recv_take(r, got, NB) == ERR_STATE);
    kv_xfer_stats rs = kv_xfer_recv_stats(r);
    T_CHECK(rs.n_verified == 2 && rs.n_released == 3 && rs.n_handed == 0);
    check_dst_free(&f);
    /* the sender: two ACKs, then the receiver's ABORT releases the other three */
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    check_releases(&f, 2);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_CHECKSUM);
    check_releases(&f, 5);
    /* blocks 3 and 4 arriving after the abort are late: dropped, nothing allocated */
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_stats(r).n_dropped == 2);
    fx_end(&f, s, r, 5);
}

/* A header byte flipped: the header hash fails, a protocol error; nothing allocated. */
static void t_corrupt_header(void) {
    fx f;
    fx_init(&f, true);
    hook_cfg h = {.seq = 0, .flip_at = 30, .copies = 1};
    kv_xfer_send *s = fx_sender(&f, hook_fn, &h);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_error(r) == ERR_PROTOCOL);
    check_dst_free(&f);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    check_releases(&f, 1);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    fx_free(&f);
}

/* A token of block 1's blob head flipped on the wire (the message header intact): the receiver
 * sees a blob of another block (ERR_NOTFOUND); nothing handed on. */
static void t_corrupt_blob_head(void) {
    fx f;
    fx_init(&f, true);
    hook_cfg h = {.seq = 1, .flip_at = 64 + 56 + 2 * 16 + 1, .copies = 1};
    kv_xfer_send *s = fx_sender(&f, hook_fn, &h);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(fx_send(&f, s, 1, true) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECKF(kv_xfer_recv_error(r) == ERR_NOTFOUND, "error %s", err_name(kv_xfer_recv_error(r)));
    check_dst_free(&f);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN); /* block 0's ACK */
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    check_releases(&f, 2);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    fx_free(&f);
}

/* The in-place and the frame paths (kv-xfer-inplace) write the same bytes: a sender of one and a
 * receiver of the other move every block intact, both ways round. */
static void mixed(const char *send_mode, const char *recv_mode) {
    const char *was = flags_str(FLAG_KV_XFER_INPLACE);
    char keep[4];
    snprintf(keep, sizeof keep, "%s", was);
    fx f;
    fx_init(&f, true);
    T_OK(flags_set("kv-xfer-inplace", send_mode));
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    T_OK(flags_set("kv-xfer-inplace", recv_mode));
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_OK(flags_set("kv-xfer-inplace", keep));
    for (int b = 0; b < NB; b++)
        T_CHECK(fx_send(&f, s, b, b == NB - 1) == 0);
    for (int b = 0; b < NB; b++)
        T_CHECKF(kv_xfer_recv_step(r) == (b == NB - 1 ? KV_XFER_COMPLETE : KV_XFER_OPEN),
                 "block %d: %s", b, err_name(kv_xfer_recv_error(r)));
    int32_t got[NB];
    T_CHECK(kv_xfer_recv_take(r, got, NB) == NB);
    for (int b = 0; b < NB; b++)
        check_same(&f, b, got[b]);
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    T_CHECK(kv_xfer_send_state(s) == KV_XFER_COMPLETE);
    check_releases(&f, NB);
    for (int b = 0; b < NB; b++)
        kv_block_unref(f.dst, got[b]);
    fx_end(&f, s, r, NB);
}

static void t_mixed_inplace_to_frame(void) {
    mixed("1", "0");
}

static void t_mixed_frame_to_inplace(void) {
    mixed("0", "1");
}

/* The wire does not depend on the pools' layouts (kv-pool-block-major): a sender of one layout and
 * a receiver of the other move every block intact, both ways round, over the current path. */
static void mixed_layout(const char *src, const char *dst) {
    char mode[4];
    snprintf(mode, sizeof mode, "%s", flags_str(FLAG_KV_XFER_INPLACE));
    src_layout = src, dst_layout = dst;
    mixed(mode, mode);
    src_layout = dst_layout = NULL;
}

static void t_layout_block_to_layer(void) {
    mixed_layout("1", "0");
}

static void t_layout_layer_to_block(void) {
    mixed_layout("0", "1");
}

/* Another prompt on the receiver: block 0's name is not the one it computes from its tokens. */
static void t_wrong_prompt(void) {
    fx f;
    fx_init(&f, true);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    int32_t other[NB * BS];
    memcpy(other, f.toks, sizeof other);
    other[1]++;
    kv_xfer_recv_opts o = {
        .xfer_id = 7, .identity = IDENTITY, .toks = other, .n_toks = NB * BS, .timeout_ms = -1};
    kv_xfer_recv *r = NULL;
    T_CHECK(kv_xfer_recv_create(f.cr, f.dst, &o, &r) == 0);
    T_CHECK(fx_send(&f, s, 0, true) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_error(r) == ERR_PROTOCOL);
    fx_end(&f, s, r, 1);
}

/* Abort before any block: either side's cancel. */
static void t_abort_before(void) {
    fx f;
    fx_init(&f, true);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    kv_xfer_send_cancel(s, ERR_CANCELLED);
    T_CHECK(kv_xfer_send_state(s) == KV_XFER_ABORTED);
    T_CHECK(fx_send(&f, s, 0, false) == ERR_STATE); /* not taken: never released */
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_error(r) == ERR_CANCELLED);
    check_releases(&f, 0);
    check_dst_free(&f);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    fx_free(&f);

    /* the receiver cancels first; the sender's block already on the wire is late */
    fx_init(&f, true);
    s = fx_sender(&f, NULL, NULL);
    r = fx_receiver(&f, -1);
    kv_xfer_recv_cancel(r, ERR_CANCELLED);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_stats(r).n_dropped == 1);
    check_dst_free(&f);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_CANCELLED);
    check_releases(&f, 1);
    fx_end(&f, s, r, 1);
}

/* Abort during: 3 of 6 blocks sent and verified, 2 ACKed; then each side cancels. */
static void t_abort_during(void) {
    for (int side = 0; side < 2; side++) {
        fx f;
        fx_init(&f, true);
        kv_xfer_send *s = fx_sender(&f, NULL, NULL);
        kv_xfer_recv *r = fx_receiver(&f, -1);
        for (int b = 0; b < 3; b++) {
            T_CHECK(fx_send(&f, s, b, false) == 0);
            T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
        }
        T_CHECK(kv_xfer_recv_stats(r).n_verified == 3);
        T_CHECK(kv_pool_n_free(f.dst) == POOL_BLOCKS - 3);
        T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
        T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
        check_releases(&f, 2);
        if (side == 0) { /* the sender (its request was cancelled, or the server drains) */
            kv_xfer_send_cancel(s, ERR_CANCELLED);
            check_releases(&f, 3);
            T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED); /* the ABORT */
        } else { /* the receiver (its client went away) */
            kv_xfer_recv_cancel(r, ERR_CANCELLED);
            T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);    /* ACK 2 */
            T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED); /* the ABORT */
            check_releases(&f, 3);
        }
        T_CHECK(kv_xfer_recv_stats(r).n_released == 3);
        check_dst_free(&f);
        kv_xfer_send_cancel(s, ERR_CANCELLED); /* again: a no-op */
        kv_xfer_recv_cancel(r, ERR_CANCELLED);
        T_CHECK(kv_xfer_recv_stats(r).n_released == 3);
        kv_xfer_send_destroy(s);
        kv_xfer_recv_destroy(r);
        check_releases(&f, 3);
        check_dst_free(&f);
        fx_free(&f);
    }
}

/* Abort after: complete; a cancel before the take frees the blocks, after it is a no-op. */
static void t_abort_after(void) {
    for (int taken = 0; taken < 2; taken++) {
        fx f;
        fx_init(&f, true);
        kv_xfer_send *s = fx_sender(&f, NULL, NULL);
        kv_xfer_recv *r = fx_receiver(&f, -1);
        for (int b = 0; b < 4; b++) {
            T_CHECK(fx_send(&f, s, b, b == 3) == 0);
            T_CHECK(kv_xfer_recv_step(r) == (b == 3 ? KV_XFER_COMPLETE : KV_XFER_OPEN));
        }
        for (int b = 0; b < 4; b++)
            T_CHECK(kv_xfer_send_step(s) == (b == 3 ? KV_XFER_COMPLETE : KV_XFER_OPEN));
        check_releases(&f, 4);
        T_CHECK(fx_send(&f, s, 4, false) == ERR_STATE);
        int32_t got[NB];
        if (taken) {
            T_CHECK(kv_xfer_recv_take(r, got, NB) == 4);
            T_CHECK(kv_xfer_recv_take(r, got, NB) == ERR_STATE);
            for (int b = 0; b < 4; b++)
                check_same(&f, b, got[b]);
        }
        kv_xfer_send_cancel(s, ERR_CANCELLED);
        T_CHECK(kv_xfer_send_state(s) == KV_XFER_COMPLETE);
        kv_xfer_recv_cancel(r, ERR_CANCELLED);
        T_CHECK(kv_xfer_recv_state(r) == (taken ? KV_XFER_COMPLETE : KV_XFER_ABORTED));
        T_CHECK(kv_xfer_recv_stats(r).n_released == (taken ? 0 : 4));
        T_CHECK(kv_pool_n_free(f.dst) == POOL_BLOCKS - (taken ? 4 : 0));
        /* the receiver's ABORT (not taken) reaches a COMPLETE sender late: dropped */
        if (!taken) {
            T_CHECK(kv_xfer_send_step(s) == KV_XFER_COMPLETE);
            T_CHECK(kv_xfer_send_stats(s).n_dropped == 1);
        }
        kv_xfer_send_destroy(s);
        kv_xfer_recv_destroy(r);
        check_releases(&f, 4);
        if (taken)
            for (int b = 0; b < 4; b++)
                kv_block_unref(f.dst, got[b]);
        check_dst_free(&f);
        fx_free(&f);
    }
}

/* The sender dies mid-transfer: the receiver's ACK write or its read fails; it frees what it held.
 */
static void t_sender_dies(void) {
    for (int variant = 0; variant < 2; variant++) {
        fx f;
        fx_init(&f, true);
        kv_xfer_send *s = fx_sender(&f, NULL, NULL);
        kv_xfer_recv *r = fx_receiver(&f, -1);
        T_CHECK(fx_send(&f, s, 0, false) == 0);
        if (variant == 0) /* block 1 is on the wire: it verifies, but its ACK cannot be written */
            T_CHECK(fx_send(&f, s, 1, false) == 0);
        T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
        kv_xfer_conn_shutdown(f.cs);
        T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED); /* variant 1: end of stream */
        T_CHECKF(kv_xfer_recv_error(r) == ERR_CONNECT, "%s", err_name(kv_xfer_recv_error(r)));
        T_CHECK(kv_xfer_recv_stats(r).n_verified == 2 - variant);
        T_CHECK(kv_xfer_recv_stats(r).n_released == 2 - variant);
        check_dst_free(&f);
        fx_end(&f, s, r, 2 - variant);
    }
}

/* The receiver dies: the sender's next read, or its next write, aborts and releases all. */
static void t_receiver_dies(void) {
    fx f;
    fx_init(&f, true);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(fx_send(&f, s, 1, false) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    kv_xfer_conn_shutdown(f.cr); /* the process dies (its pool goes with it): no ABORT sent */
    kv_xfer_recv_destroy(r);
    kv_xfer_conn_destroy(f.cr);
    f.cr = NULL;
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN); /* ACK 0 */
    check_releases(&f, 1);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_CONNECT);
    check_releases(&f, 2);
    kv_xfer_send_destroy(s);
    check_releases(&f, 2);
    fx_free(&f);

    /* dead before the sender reads anything: the write itself fails and releases that block */
    fx_init(&f, true);
    s = fx_sender(&f, NULL, NULL);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    kv_xfer_conn_destroy(f.cr);
    f.cr = NULL;
    T_CHECK(fx_send(&f, s, 1, false) == ERR_CONNECT);
    T_CHECK(kv_xfer_send_state(s) == KV_XFER_ABORTED);
    check_releases(&f, 2);
    T_CHECK(fx_send(&f, s, 2, false) == ERR_STATE);
    kv_xfer_send_destroy(s);
    check_releases(&f, 2);
    fx_free(&f);
}

/* Duplicates: a BLOCK written twice, an ACK replayed, a foreign transfer id; late ones after the
 * end. Each dropped and counted, never applied. */
static void t_duplicate_late(void) {
    fx f;
    fx_init(&f, true);
    hook_cfg h = {.seq = 1, .flip_at = -1, .copies = 2};
    kv_xfer_send *s = fx_sender(&f, hook_fn, &h);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(fx_send(&f, s, 1, false) == 0); /* written twice */
    for (int i = 0; i < 3; i++)
        T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    kv_xfer_stats rs = kv_xfer_recv_stats(r);
    T_CHECK(rs.n_verified == 2 && rs.n_dropped == 1 && rs.n_acked == 2);
    T_CHECK(kv_pool_n_free(f.dst) == POOL_BLOCKS - 2);
    /* ACK 0 replayed: applied once, the copy dropped */
    replay_next(f.fd_s, f.fd_r);
    for (int i = 0; i < 3; i++) /* ACK 0, ACK 1, the copy of ACK 0 */
        T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_send_stats(s).n_dropped == 1 && kv_xfer_send_stats(s).n_acked == 2);
    check_releases(&f, 2);
    /* a block of another transfer on the same connection */
    kv_xfer_send_opts fo = {.xfer_id = 99, .timeout_ms = -1};
    kv_xfer_send *other = NULL;
    T_CHECK(kv_xfer_send_create(f.cs, &fo, &other) == 0);
    T_CHECK(kv_xfer_send_block(other, f.src, f.ids[2], &f.meta[2], true, fx_release, &f) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_stats(r).n_dropped == 2);
    /* the final block, written twice: the second copy arrives after COMPLETE */
    h.seq = 2;
    T_CHECK(fx_send(&f, s, 2, true) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_COMPLETE);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_COMPLETE);
    rs = kv_xfer_recv_stats(r);
    T_CHECK(rs.n_verified == 3 && rs.n_dropped == 3);
    T_CHECK(kv_pool_n_free(f.dst) == POOL_BLOCKS - 3);
    /* ACK 2 (COMPLETE), then ACK 2 replayed late */
    replay_next(f.fd_s, f.fd_r);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_COMPLETE);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_COMPLETE);
    T_CHECK(kv_xfer_send_stats(s).n_dropped == 2);
    /* block 2 went out twice (this transfer and the foreign one): released once by each */
    T_CHECK(f.releases[f.ids[2]] == 1);
    kv_xfer_send_destroy(other); /* its block was never ACKed: released now */
    T_CHECK(f.releases[f.ids[2]] == 2);
    f.releases[f.ids[2]] = 1;
    check_releases(&f, 3);
    int32_t got[NB];
    T_CHECK(kv_xfer_recv_take(r, got, NB) == 3);
    for (int b = 0; b < 3; b++)
        check_same(&f, b, got[b]);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    for (int b = 0; b < 3; b++)
        kv_block_unref(f.dst, got[b]);
    check_dst_free(&f);
    fx_free(&f);
}

/* Garbage from the receiver's side: the sender's header check fails, it aborts with
 * ERR_PROTOCOL, releases its blocks and tells the receiver, which frees what it held. */
static void t_sender_protocol(void) {
    fx f;
    fx_init(&f, true);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(fx_send(&f, s, 1, false) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    unsigned char junk[64];
    memset(junk, 0x5a, sizeof junk);
    T_CHECK(recv(f.fd_s, junk, sizeof junk, 0) == (ssize_t)sizeof junk); /* take ACK 0 away */
    memset(junk, 0x5a, sizeof junk);
    T_CHECK(write(f.fd_r, junk, sizeof junk) == (ssize_t)sizeof junk);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_PROTOCOL);
    check_releases(&f, 2);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);    /* block 1, already on the wire */
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED); /* the sender's ABORT */
    T_CHECK(kv_xfer_recv_error(r) == ERR_PROTOCOL);
    T_CHECK(kv_xfer_recv_stats(r).n_released == 2);
    fx_end(&f, s, r, 2);
}

/* A gap (a lost block): block 1 never written, block 2 arrives: a protocol error. */
static void t_gap(void) {
    fx f;
    fx_init(&f, true);
    hook_cfg h = {.seq = 1, .flip_at = -1, .copies = 0};
    kv_xfer_send *s = fx_sender(&f, hook_fn, &h);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    for (int b = 0; b < 3; b++)
        T_CHECK(fx_send(&f, s, b, b == 2) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_error(r) == ERR_PROTOCOL);
    check_dst_free(&f);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    check_releases(&f, 3);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    fx_free(&f);
}

/* The receiver's pool has one free block: block 0 lands, block 1 finds none (ERR_FULL); the
 * abort frees block 0 and the blocks held by others stay untouched. */
static void t_pool_full(void) {
    fx f;
    fx_init(&f, true);
    int32_t others[POOL_BLOCKS];
    int n_others = 0;
    while (kv_pool_n_free(f.dst) > 1)
        others[n_others++] = kv_pool_alloc(f.dst);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    kv_xfer_recv *r = fx_receiver(&f, -1);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(fx_send(&f, s, 1, false) == 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_error(r) == ERR_FULL);
    T_CHECK(kv_pool_n_free(f.dst) == 1);
    for (int i = 0; i < n_others; i++)
        T_CHECK(kv_block_refcount(f.dst, others[i]) == 1);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_FULL);
    check_releases(&f, 2);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    for (int i = 0; i < n_others; i++)
        kv_block_unref(f.dst, others[i]);
    check_dst_free(&f);
    fx_free(&f);
}

/* The timeout: nothing on the socket and timeout_ms 0, so the wait ends at once on both sides. */
static void t_timeout(void) {
    fx f;
    fx_init(&f, true);
    kv_xfer_send_opts o = {.xfer_id = 7, .timeout_ms = 0};
    kv_xfer_send *s = NULL;
    T_CHECK(kv_xfer_send_create(f.cs, &o, &s) == 0);
    kv_xfer_recv *r = fx_receiver(&f, 0);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED); /* nothing sent yet */
    T_CHECK(kv_xfer_recv_error(r) == ERR_TIMEOUT);
    check_dst_free(&f);
    /* the receiver's ABORT is on the wire now; the sender reads it */
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_TIMEOUT);
    check_releases(&f, 1);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    fx_free(&f);

    /* a sender whose receiver never answers */
    fx_init(&f, true);
    T_CHECK(kv_xfer_send_create(f.cs, &o, &s) == 0);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(fx_send(&f, s, 1, false) == 0);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_TIMEOUT);
    check_releases(&f, 2);
    kv_xfer_send_destroy(s);
    check_releases(&f, 2);
    fx_free(&f);
}

/* Another thread cuts a receiver blocked in its read (kv_xfer_conn_shutdown from a thread that
 * does not own the connection, as the decode server does when a request ends first): the read ends
 * with ERR_CONNECT, never a hang (the read has no timeout), and every block is released once. */
typedef struct cut_rx {
    kv_xfer_recv *r;
    kv_xfer_state st;
} cut_rx;

static void *cut_reader(void *arg) {
    cut_rx *c = arg;
    while ((c->st = kv_xfer_recv_step(c->r)) == KV_XFER_OPEN) {
    }
    return NULL;
}

static void t_cut_by_other_thread(void) {
    fx f;
    fx_init(&f, true);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    cut_rx c = {.r = fx_receiver(&f, -1)};
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, cut_reader, &c) == 0);
    T_CHECK(fx_send(&f, s, 0, false) == 0);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN); /* block 0's ACK: the reader reads on */
    kv_xfer_conn_shutdown(f.cr);
    pthread_join(th, NULL);
    T_CHECK(c.st == KV_XFER_ABORTED);
    T_CHECKF(kv_xfer_recv_error(c.r) == ERR_CONNECT, "receiver error %d",
             kv_xfer_recv_error(c.r));
    kv_xfer_recv_destroy(c.r);
    check_dst_free(&f);
    kv_xfer_conn_destroy(f.cr); /* the owner's destroy: the sender sees end of stream */
    f.cr = NULL;
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    fx_end(&f, s, NULL, 1);
}

/* A connect to a port nobody listens on (a listener that was closed) is ERR_CONNECT from connect
 * itself, naming the address. */
static void t_closed_port(void) {
    kv_xfer_listener *l = NULL;
    T_OK(tp->listen("127.0.0.1:0", &l));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kv_xfer_listener_port(l));
    kv_xfer_listener_destroy(l);
    kv_xfer_conn *c = NULL;
    int rc = tp->connect(addr, &c);
    T_CHECKF(rc == ERR_CONNECT && c == NULL, "connect to a closed port: %s", err_name(rc));
    T_CHECKF(strstr(err_detail(), addr) != NULL, "the error does not name %s: %s", addr,
             err_detail());
    T_CHECK(tp->connect("no-colon", &c) == ERR_INVAL);
}

/* ---- a peer destroyed mid-transfer, with blocks big enough for UCX's rendezvous ---- */

static void *big_sender(void *arg) {
    big_tx *t = arg;
    kv_xfer_send_opts o = {.xfer_id = 7, .timeout_ms = -1};
    kv_xfer_send *s = NULL;
    if (kv_xfer_send_create(t->f->cs, &o, &s))
        return NULL;
    t->at_block = -1;
    for (int b = 0; b < NB && t->rc_block == 0; b++) {
        t->rc_block =
            kv_xfer_send_block(s, t->src, t->ids[b], &t->meta[b], b == NB - 1, fx_release, t->f);
        t->at_block = b;
    }
    while (kv_xfer_send_state(s) == KV_XFER_OPEN && kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    t->state = kv_xfer_send_state(s);
    t->error = kv_xfer_send_error(s);
    kv_xfer_send_destroy(s);
    return NULL;
}

/* After the receiver died: the sender aborted with ERR_CONNECT and released every block it sent
 * exactly once, the others never. */
static void big_check(const big_tx *t) {
    T_CHECKF(t->state == KV_XFER_ABORTED && t->error == ERR_CONNECT,
             "sender ended %d (%s) at block %d (%s)", t->state, err_name(t->error), t->at_block,
             err_name(t->rc_block));
    for (int b = 0; b < NB; b++)
        T_CHECKF(t->f->releases[t->ids[b]] == (b <= t->at_block ? 1 : 0),
                 "block %d released %d times", b, t->f->releases[t->ids[b]]);
}

/* 256 KiB blocks: the sender's thread writes all 8 (each write waits until the receiver fetched a
 * rendezvous message, or, posted, until kv-xfer-inflight are on their way; over tcp the socket
 * buffer fills); the receiver takes 2, then its process "dies" (shutdown, no ABORT, connection
 * destroyed). The sender's write of block 2 fails (ERR_CONNECT; posted: a later block's, or the
 * flush before it reads an ACK), every block it sent is released exactly once (ACKed or on the
 * abort), the later ones were never taken; the receiver freed its 2 blocks. Deterministic: the
 * receiver never reads past block 1, so the sender cannot get past block 2 (posted: 2 +
 * kv-xfer-inflight, the writes of blocks 2.. that cannot complete and the one waiting). */
static void t_peer_destroyed(void) {
    fx f;
    big_tx t;
    kv_pool *dst = big_begin(&f, &t);
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, big_sender, &t) == 0);
    kv_xfer_recv_opts o = {
        .xfer_id = 7, .identity = IDENTITY, .toks = f.toks, .n_toks = NB * BS, .timeout_ms = -1};
    kv_xfer_recv *r = NULL;
    T_OK(kv_xfer_recv_create(f.cr, dst, &o, &r));
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_pool_n_free(dst) == NB - 2);
    kv_xfer_conn_shutdown(f.cr);
    kv_xfer_recv_destroy(r);
    kv_xfer_conn_destroy(f.cr);
    f.cr = NULL;
    T_CHECK(kv_pool_n_free(dst) == NB);
    pthread_join(th, NULL);
    big_check(&t);
    int most = payloads_in_flight(t.src) > 1 ? 2 + payloads_in_flight(t.src) : 2;
    if (strcmp(tp->name, "ucx") == 0 && most < NB - 1) /* tcp: the socket buffers hold more */
        T_CHECKF(t.at_block >= 2 && t.at_block <= most && t.rc_block == ERR_CONNECT,
                 "the write of block %d: %s (blocks 2..%d may be sent)", t.at_block,
                 err_name(t.rc_block), most);
    kv_pool_destroy(t.src);
    kv_pool_destroy(dst);
    fx_free(&f);
}

/* The receiver is another process, killed (SIGKILL) after it verified 2 blocks, while this
 * process's sender thread is blocked writing block 2 (or a later one over tcp, whose socket
 * buffers take a few): no FIN, no ABORT; the sender must see the connection fail (ERR_CONNECT)
 * and release every block it sent exactly once. The child connects only after the fork (this
 * process holds no UCX context then: every earlier case destroyed its connections). */
static void t_peer_killed(void) {
    int up[2], down[2];
    T_CHECK(pipe(up) == 0 && pipe(down) == 0);
    fflush(NULL);
    pid_t pid = fork();
    T_CHECK(pid >= 0);
    if (pid == 0) { /* the receiver: connect, verify 2 blocks, say so, wait to be killed */
        close(up[0]);
        close(down[1]);
        char addr[64] = {0};
        kv_xfer_conn *c = NULL;
        kv_pool *dst = NULL;
        kv_xfer_recv *r = NULL;
        int32_t tk[NB * BS];
        for (int i = 0; i < NB * BS; i++)
            tk[i] = 100 + i * 7; /* fx_init's tokens */
        kv_xfer_recv_opts o = {
            .xfer_id = 7, .identity = IDENTITY, .toks = tk, .n_toks = NB * BS, .timeout_ms = -1};
        char ok = 0;
        if (read(down[0], addr, sizeof addr - 1) > 0 && tp->connect(addr, &c) == 0 &&
            kv_pool_create(&big_opts, &dst) == 0 && kv_xfer_recv_create(c, dst, &o, &r) == 0 &&
            kv_xfer_recv_step(r) == KV_XFER_OPEN && kv_xfer_recv_step(r) == KV_XFER_OPEN)
            ok = 1;
        if (write(up[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(up[1]);
    close(down[0]);
    fx f;
    fx_init(&f, false);
    big_tx t;
    memset(&t, 0, sizeof t);
    big_make(&t, &f);
    kv_xfer_listener *l = NULL;
    T_OK(tp->listen("127.0.0.1:0", &l));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kv_xfer_listener_port(l));
    T_CHECK(write(down[1], addr, strlen(addr)) == (ssize_t)strlen(addr));
    int rc = tp->accept(l, 30000, &f.cs);
    kv_xfer_listener_destroy(l);
    if (rc)
        kill(pid, SIGKILL);
    T_CHECKF(rc == 0, "accept: %s", err_detail());
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, big_sender, &t) == 0);
    char ok = 0;
    ssize_t got = read(up[0], &ok, 1);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    pthread_join(th, NULL);
    close(up[0]);
    close(down[1]);
    T_CHECKF(got == 1 && ok == 1, "the receiver process did not verify 2 blocks");
    big_check(&t);
    kv_pool_destroy(t.src);
    fx_free(&f);
}

/* ---- disagg_rx_cancel (disagg.h) over a real receiver ---- */

#define RX_TIMEOUT_MS 120000

static disagg_rx *rx_make(void) {
    disagg_rx_opts o = {.transport = "tcp",
                        .listen = "127.0.0.1:0",
                        .pool = {.n_layer = 2, .kv_dim = 8, .block_size = BS,
                                 .n_blocks = POOL_BLOCKS},
                        .identity = IDENTITY,
                        .timeout_ms = RX_TIMEOUT_MS};
    disagg_rx *rx = NULL;
    T_OK(disagg_rx_create(&o, &rx));
    return rx;
}

static int32_t rx_poll(const engine_kv_in *h) {
    const void *const *blobs = NULL;
    size_t bytes = 0;
    return h->poll(h->ctx, &blobs, &bytes);
}

/* Waits (polling, 30 s backstop for a hang) until field of the module's counters reaches want. */
static void stats_wait(size_t off, int64_t want, const char *what) {
    for (int i = 0; i < 30000; i++) {
        disagg_stats st;
        disagg_stats_get(&st);
        if (*(int64_t *)((char *)&st + off) == want)
            return;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    T_CHECKF(false, "%s never reached %lld", what, (long long)want);
}
#define STATS_WAIT(field, want) stats_wait(offsetof(disagg_stats, field), (want), #field)

static int64_t n_cancelled(void) {
    disagg_stats st;
    disagg_stats_get(&st);
    return st.rx_cancelled;
}

/* A sender connected to rx for transfer id, its hello written (disagg.c's wire format: magic
 * "VKXH", zero, the id, hash64 of those 16 bytes). */
static kv_xfer_send *rx_dial(disagg_rx *rx, uint64_t id, kv_xfer_conn **conn) {
    T_OK(tp->connect(disagg_rx_addr(rx), conn));
    uint8_t b[24];
    uint32_t magic = 0x484b5856u, zero = 0;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &zero, 4);
    memcpy(b + 8, &id, 8);
    uint64_t h = hash64(magic, b, 16);
    memcpy(b + 16, &h, 8);
    T_OK((*conn)->ops->write_all(*conn, b, sizeof b));
    kv_xfer_send_opts o = {.xfer_id = id, .timeout_ms = -1};
    kv_xfer_send *s = NULL;
    T_OK(kv_xfer_send_create(*conn, &o, &s));
    return s;
}

static void t_cancel_before_expect(void) {
    disagg_rx *rx = rx_make();
    int64_t c0 = n_cancelled();
    T_EQ_INT(disagg_rx_cancel(rx, 0x51), DISAGG_CANCEL_PENDING);
    T_EQ_INT(disagg_rx_cancel(rx, 0x51), DISAGG_CANCEL_IGNORED); /* one tombstone */
    int32_t toks[NB * BS];
    for (int i = 0; i < NB * BS; i++)
        toks[i] = 100 + i * 7;
    engine_kv_in h = {0};
    T_OK(disagg_rx_expect(rx, 0x51, toks, NB * BS, &h));
    T_EQ_INT(rx_poll(&h), 0); /* FAILED at once: computed here, no wait */
    T_EQ_INT(n_cancelled(), c0 + 1);
    h.done(h.ctx, 0, 0);
    /* another id is not touched by the tombstone */
    T_OK(disagg_rx_expect(rx, 0x52, toks, NB * BS, &h));
    T_EQ_INT(rx_poll(&h), -1);
    h.done(h.ctx, 0, 0);
    disagg_rx_destroy(rx);
}

static void t_cancel_waiting(void) {
    disagg_rx *rx = rx_make();
    int64_t c0 = n_cancelled();
    int32_t toks[NB * BS];
    for (int i = 0; i < NB * BS; i++)
        toks[i] = 100 + i * 7;
    engine_kv_in h = {0};
    T_OK(disagg_rx_expect(rx, 0x61, toks, NB * BS, &h));
    T_EQ_INT(rx_poll(&h), -1); /* waiting for the prefill server */
    T_EQ_INT(disagg_rx_cancel(rx, 0x61), DISAGG_CANCEL_DONE);
    T_EQ_INT(rx_poll(&h), 0);
    T_EQ_INT(n_cancelled(), c0 + 1);
    T_EQ_INT(disagg_rx_cancel(rx, 0x61), DISAGG_CANCEL_IGNORED); /* already FAILED */
    T_EQ_INT(n_cancelled(), c0 + 1);
    h.done(h.ctx, 0, 0);
    disagg_rx_destroy(rx);
}

/* A receiving case: the fixture's blocks, a receiver expecting transfer id, a sender connected
 * to it (hello written), the counters before. */
typedef struct cx {
    fx f;
    disagg_rx *rx;
    disagg_stats s0;
    engine_kv_in h;
    kv_xfer_conn *conn;
    kv_xfer_send *s;
} cx;

static void cx_begin(cx *c, uint64_t id) {
    fx_init(&c->f, false);
    c->rx = rx_make();
    disagg_stats_get(&c->s0);
    c->h = (engine_kv_in){0};
    T_OK(disagg_rx_expect(c->rx, id, c->f.toks, NB * BS + 3, &c->h));
    c->s = rx_dial(c->rx, id, &c->conn);
}

/* Runs the sender until it ends, checks it ended in state want, the first n blocks each released
 * once, and frees everything. */
static void cx_end(cx *c, kv_xfer_state want, int n) {
    while (kv_xfer_send_state(c->s) == KV_XFER_OPEN)
        kv_xfer_send_step(c->s);
    T_EQ_INT(kv_xfer_send_state(c->s), want);
    kv_xfer_send_destroy(c->s);
    check_releases(&c->f, n);
    c->h.done(c->h.ctx, 0, 0);
    kv_xfer_conn_destroy(c->conn);
    disagg_rx_destroy(c->rx);
    fx_free(&c->f);
}

static void t_cancel_receiving(void) {
    cx c;
    cx_begin(&c, 0x71);
    T_OK(fx_send(&c.f, c.s, 0, false));
    STATS_WAIT(rx_blocks_verified, c.s0.rx_blocks_verified + 1); /* receiving */
    T_EQ_INT(rx_poll(&c.h), -1);
    T_EQ_INT(disagg_rx_cancel(c.rx, 0x71), DISAGG_CANCEL_DONE);
    T_EQ_INT(rx_poll(&c.h), 0);
    STATS_WAIT(rx_transfers_aborted, c.s0.rx_transfers_aborted + 1); /* the connection was cut */
    STATS_WAIT(rx_open, 0);
    T_EQ_INT(n_cancelled(), c.s0.rx_cancelled + 1);
    cx_end(&c, KV_XFER_ABORTED, 1); /* the sender hears it; its block released once */
}

static void t_cancel_after_ready(void) {
    cx c;
    cx_begin(&c, 0x81);
    for (int b = 0; b < NB; b++)
        T_OK(fx_send(&c.f, c.s, b, b == NB - 1));
    STATS_WAIT(rx_transfers_ok, c.s0.rx_transfers_ok + 1);
    STATS_WAIT(rx_open, 0);
    T_EQ_INT(rx_poll(&c.h), NB); /* READY */
    T_EQ_INT(disagg_rx_cancel(c.rx, 0x81), DISAGG_CANCEL_IGNORED);
    T_EQ_INT(rx_poll(&c.h), NB); /* still READY: the blocks are used */
    T_EQ_INT(n_cancelled(), c.s0.rx_cancelled);
    cx_end(&c, KV_XFER_COMPLETE, NB);
}

static const tcase cases[] = {
    {"transfer", t_transfer, false},
    {"corrupt_block", t_corrupt_block, false},
    {"corrupt_header", t_corrupt_header, false},
    {"corrupt_blob_head", t_corrupt_blob_head, false},
    {"mixed_inplace_to_frame", t_mixed_inplace_to_frame, false},
    {"mixed_frame_to_inplace", t_mixed_frame_to_inplace, false},
    {"layout_block_to_layer", t_layout_block_to_layer, false},
    {"layout_layer_to_block", t_layout_layer_to_block, false},
    {"wrong_prompt", t_wrong_prompt, false},
    {"abort_before", t_abort_before, false},
    {"abort_during", t_abort_during, false},
    {"abort_after", t_abort_after, false},
    {"sender_dies", t_sender_dies, false},
    {"receiver_dies", t_receiver_dies, false},
    {"duplicate_late", t_duplicate_late, true},
    {"sender_protocol", t_sender_protocol, true},
    {"gap", t_gap, false},
    {"pool_full", t_pool_full, false},
    {"timeout", t_timeout, false},
    {"closed_port", t_closed_port, false},
    {"peer_destroyed", t_peer_destroyed, false},
    {"peer_killed", t_peer_killed, false},
    {"cut_by_other_thread", t_cut_by_other_thread, false},
};

int main(void) {
    /* every edge here is reached one step at a time, each BLOCK verified within its own step: the
     * overlap (a block checksummed while the next lands) is test_kv_xfer_overlap.c's */
    if (flags_set("kv-xfer-verify-overlap", "0")) {
        fprintf(stderr, "test_kv_xfer: %s\n", err_detail());
        return 1;
    }
    if (fx_run_cases("test_kv_xfer", cases, sizeof cases / sizeof cases[0], NULL, 0))
        return 1;
    tp = kv_xfer_transport_find("tcp");
    test_run("kv_xfer.cancel.before_expect", t_cancel_before_expect);
    test_run("kv_xfer.cancel.waiting", t_cancel_waiting);
    test_run("kv_xfer.cancel.receiving", t_cancel_receiving);
    test_run("kv_xfer.cancel.after_ready", t_cancel_after_ready);
    return test_summary();
}
