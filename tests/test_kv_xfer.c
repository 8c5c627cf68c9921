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
 * thread is blocked writing: it sees end of stream, every block released exactly once.
 *
 * Then, over tcp once, the decode side's cancel (disagg.h "Cancel", disagg_rx_cancel) on a real
 * receiver with a timeout of 120 s (a case that waited it out would trip the backstop): before
 * the request is expected (a tombstone: the expect starts FAILED), while it waits, while its
 * transfer is being received (the connection is cut: the sender's block released once, the
 * receiver's transfer counted aborted), and after READY (left alone: the blocks are used).
 * Each checks the poll's answer and the rx_cancelled counter; states are reached by order of
 * calls and by polling the module's counters, never by a sleep.
 */
#include "test.h"

#include "base/err.h"
#include "base/flags.h"
#include "base/hash.h"
#include "disagg/disagg.h"
#include "disagg/kv_xfer.h"
#include "disagg/kv_xfer_int.h"
#include "kv/kv_block.h"
#include "kv/kv_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { NB = 8, BS = 4, POOL_BLOCKS = 32 };
#define IDENTITY 0x1234abcdULL

/* The transport the cases run over ("tcp" or "ucx"); main runs the list once per transport. */
static const kv_xfer_transport *tp;

typedef struct dialer {
    char addr[64];
    kv_xfer_conn *c;
    int rc;
} dialer;

static void *dial(void *arg) {
    dialer *d = arg;
    d->rc = tp->connect(d->addr, &d->c);
    return NULL;
}

/* A connected pair over tp through a loopback listener (connect in a thread: it waits for the
 * server's answer, which accept gives). */
static void conn_pair(kv_xfer_conn **cs, kv_xfer_conn **cr) {
    kv_xfer_listener *l = NULL;
    T_OK(tp->listen("127.0.0.1:0", &l));
    dialer d = {.c = NULL};
    snprintf(d.addr, sizeof d.addr, "127.0.0.1:%d", kv_xfer_listener_port(l));
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, dial, &d) == 0);
    int rc = tp->accept(l, 30000, cr);
    pthread_join(th, NULL);
    kv_xfer_listener_destroy(l);
    T_CHECKF(rc == 0 && d.rc == 0, "accept %s, connect %s: %s", err_name(rc), err_name(d.rc),
             err_detail());
    *cs = d.c;
}

/* ---- fixture: a sender pool with NB sealed blocks, a receiver pool, a connection pair ---- */

typedef struct fx {
    kv_pool *src, *dst;
    int32_t ids[NB];
    kv_block_meta meta[NB];
    int32_t toks[NB * BS + 3]; /* a partial tail block too */
    int releases[POOL_BLOCKS]; /* sender release callbacks per block id */
    int early;                 /* releases while a posted write was still on the connection */
    int fd_s, fd_r;            /* the socketpair ends (sender, receiver) */
    kv_xfer_conn *cs, *cr;
} fx;

/* Counts a release, and one made while the sender's connection still had a posted write (which
 * could still read the block: kv_xfer.c must flush first) in early. */
static void fx_release(void *ctx, int32_t id) {
    fx *f = ctx;
    f->releases[id]++;
    f->early += f->cs && f->cs->n_posted > 0;
}

/* The pools' layouts (kv-pool-block-major, "0" or "1") for the next fx_init: NULL for the flag's
 * value (how main runs every case), else the sender's and the receiver's, each its own. */
static const char *src_layout, *dst_layout;

static kv_pool *pool_make(const char *layout) {
    kv_pool_opts o = {.n_layer = 2, .kv_dim = 8, .block_size = BS, .n_blocks = POOL_BLOCKS};
    kv_pool *p = NULL;
    char keep[4];
    snprintf(keep, sizeof keep, "%s", flags_str(FLAG_KV_POOL_BLOCK_MAJOR));
    if (layout)
        T_OK(flags_set("kv-pool-block-major", layout));
    T_CHECK(kv_pool_create(&o, &p) == 0);
    T_OK(flags_set("kv-pool-block-major", keep));
    return p;
}

static void fx_init(fx *f, bool pair) {
    memset(f, 0, sizeof *f);
    f->src = pool_make(src_layout);
    f->dst = pool_make(dst_layout);
    for (int i = 0; i < NB * BS + 3; i++)
        f->toks[i] = 100 + i * 7;
    size_t bb = kv_pool_block_bytes(f->src), st = kv_pool_kv_stride(f->src);
    uint64_t parent = IDENTITY;
    for (int b = 0; b < NB; b++) {
        int32_t id = kv_pool_alloc(f->src);
        T_CHECK(id >= 0);
        for (int l = 0; l < 2; l++) {
            unsigned char *k = (unsigned char *)kv_pool_k_base(f->src, l) + (size_t)id * st;
            unsigned char *v = (unsigned char *)kv_pool_v_base(f->src, l) + (size_t)id * st;
            for (size_t i = 0; i < bb; i++) {
                k[i] = (unsigned char)(i * 31 + b * 7 + l);
                v[i] = (unsigned char)(i * 17 + b * 5 + l + 1);
            }
        }
        uint64_t key = kv_block_key(parent, f->toks + b * BS, BS);
        f->ids[b] = id;
        f->meta[b] = (kv_block_meta){.identity = IDENTITY,
                                     .parent = parent,
                                     .key = key,
                                     .checksum = kv_block_checksum(f->src, id, key),
                                     .toks = f->toks + b * BS};
        parent = key;
    }
    if (pair && strcmp(tp->name, "tcp") != 0) {
        f->fd_s = f->fd_r = -1;
        conn_pair(&f->cs, &f->cr);
    } else if (pair) {
        int sv[2];
        T_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        f->fd_s = sv[0];
        f->fd_r = sv[1];
        T_CHECK(kv_xfer_conn_from_fd(sv[0], &f->cs) == 0);
        T_CHECK(kv_xfer_conn_from_fd(sv[1], &f->cr) == 0);
    }
}

static void fx_free(fx *f) {
    kv_xfer_conn_destroy(f->cs);
    kv_xfer_conn_destroy(f->cr);
    kv_pool_destroy(f->src);
    kv_pool_destroy(f->dst);
}

static kv_xfer_send *fx_sender(fx *f, kv_xfer_wire_hook hook, void *ctx) {
    kv_xfer_send_opts o = {.xfer_id = 7, .timeout_ms = -1, .wire_hook = hook, .wire_ctx = ctx};
    kv_xfer_send *s = NULL;
    T_CHECK(kv_xfer_send_create(f->cs, &o, &s) == 0);
    return s;
}

static kv_xfer_recv *fx_receiver(fx *f, int timeout_ms) {
    kv_xfer_recv_opts o = {.xfer_id = 7,
                           .identity = IDENTITY,
                           .toks = f->toks,
                           .n_toks = NB * BS + 3,
                           .timeout_ms = timeout_ms};
    kv_xfer_recv *r = NULL;
    T_CHECK(kv_xfer_recv_create(f->cr, f->dst, &o, &r) == 0);
    return r;
}

static int fx_send(fx *f, kv_xfer_send *s, int b, bool final) {
    return kv_xfer_send_block(s, f->src, f->ids[b], &f->meta[b], final, fx_release, f);
}

/* Each of the first n blocks released exactly once, the rest never. */
static void check_releases(const fx *f, int n) {
    T_CHECKF(f->early == 0, "%d blocks released while a posted write was in flight", f->early);
    for (int b = 0; b < NB; b++)
        T_CHECKF(f->releases[f->ids[b]] == (b < n ? 1 : 0), "block %d released %d times", b,
                 f->releases[f->ids[b]]);
}

static void check_dst_free(const fx *f) {
    T_CHECKF(kv_pool_n_free(f->dst) == POOL_BLOCKS, "receiver pool: %lld of %d free",
             (long long)kv_pool_n_free(f->dst), POOL_BLOCKS);
}

/* Ends a case: destroys both sides (a no-op cancel on ended transfers), checks each of the first n
 * blocks was released exactly once and the receiver's pool is all free, frees the fixture. */
static void fx_end(fx *f, kv_xfer_send *s, kv_xfer_recv *r, int n) {
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    check_releases(f, n);
    check_dst_free(f);
    fx_free(f);
}

/* The receiver's block holds exactly the sender's bytes. */
static void check_same_pools(const kv_pool *src, int32_t src_id, const kv_pool *dst,
                             int32_t dst_id, int b) {
    size_t n = kv_block_state_bytes(src);
    unsigned char *a = malloc(n), *c = malloc(n);
    kv_block_save(src, src_id, a);
    kv_block_save(dst, dst_id, c);
    int same = memcmp(a, c, n) == 0;
    free(a);
    free(c);
    T_CHECKF(same, "block %d differs after the transfer", b);
}

static void check_same(const fx *f, int b, int32_t dst_id) {
    check_same_pools(f->src, f->ids[b], f->dst, dst_id, b);
}

/* Duplicates the next message waiting on fd (peeked, not consumed) onto the other end. */
static void replay_next(int peek_fd, int write_fd) {
    unsigned char m[64];
    T_CHECK(recv(peek_fd, m, sizeof m, MSG_PEEK) == (ssize_t)sizeof m);
    T_CHECK(write(write_fd, m, sizeof m) == (ssize_t)sizeof m);
}

/* ---- wire hooks ---- */

typedef struct hook_cfg {
    int seq;      /* the frame to act on */
    long flip_at; /* byte offset to flip (-1: none) */
    int copies;   /* copies of that frame to write */
} hook_cfg;

static int hook_fn(void *ctx, uint32_t seq, uint8_t *frame, size_t n) {
    hook_cfg *h = ctx;
    if ((int)seq != h->seq)
        return 1;
    if (h->flip_at >= 0 && (size_t)h->flip_at < n)
        frame[h->flip_at] ^= 0x40;
    return h->copies;
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

typedef struct big_tx {
    fx *f;
    kv_pool *src;
    int32_t ids[NB];
    kv_block_meta meta[NB];
    int rc_block, at_block, state, error;
} big_tx;

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

/* 256 KiB blocks: the sender's thread writes all 8 (each write waits until the receiver fetched a
 * rendezvous message, or, posted, until kv-xfer-inflight are on their way; over tcp the socket
 * buffer fills); the receiver takes 2, then its process "dies" (shutdown, no ABORT, connection
 * destroyed). The sender's write of block 2 fails (ERR_CONNECT; posted: a later block's, or the
 * flush before it reads an ACK), every block it sent is released exactly once (ACKed or on the
 * abort), the later ones were never taken; the receiver freed its 2 blocks. Deterministic: the
 * receiver never reads past block 1, so the sender cannot get past block 2 (posted: 2 +
 * kv-xfer-inflight, the writes of blocks 2.. that cannot complete and the one waiting). */
static const kv_pool_opts big_opts = {
    .n_layer = 4, .kv_dim = 2048, .block_size = BS, .n_blocks = NB};

/* The sender's big pool with NB sealed blocks named by f's tokens, each of its own bytes. */
static void big_make(big_tx *t, fx *f) {
    t->f = f;
    T_OK(kv_pool_create(&big_opts, &t->src));
    T_CHECK(kv_block_blob_bytes(t->src) >= 256 * 1024);
    size_t bb = kv_pool_block_bytes(t->src), st = kv_pool_kv_stride(t->src);
    uint64_t parent = IDENTITY;
    for (int b = 0; b < NB; b++) {
        t->ids[b] = kv_pool_alloc(t->src);
        for (int l = 0; l < big_opts.n_layer; l++) {
            unsigned char *k = (unsigned char *)kv_pool_k_base(t->src, l) + (size_t)t->ids[b] * st;
            unsigned char *v = (unsigned char *)kv_pool_v_base(t->src, l) + (size_t)t->ids[b] * st;
            for (size_t i = 0; i < bb; i++) {
                k[i] = (unsigned char)(i * 13 + b * 3 + l);
                v[i] = (unsigned char)(i * 29 + b * 11 + l + 5);
            }
        }
        uint64_t key = kv_block_key(parent, f->toks + b * BS, BS);
        t->meta[b] = (kv_block_meta){IDENTITY, parent, key,
                                     kv_block_checksum(t->src, t->ids[b], key), f->toks + b * BS};
        parent = key;
    }
}

/* A big-block case's start: f with a connected pair, t's sender pool, and an empty receiver pool
 * of the same geometry (returned). */
static kv_pool *big_begin(fx *f, big_tx *t) {
    fx_init(f, true);
    memset(t, 0, sizeof *t);
    big_make(t, f);
    kv_pool *dst = NULL;
    T_OK(kv_pool_create(&big_opts, &dst));
    return dst;
}

/* How many of a sender's block payloads may be on their way at once over tp with the current flags
 * and a source pool like src: kv-xfer-inflight where the sender posts them (ucx, in place, a
 * block-major pool's one-piece payload), else 1. */
static int payloads_in_flight(const kv_pool *src) {
    bool posting = strcmp(tp->name, "ucx") == 0 && flags_int(FLAG_KV_XFER_INPLACE) &&
                   kv_pool_block_major(src);
    return posting ? (int)flags_int(FLAG_KV_XFER_INFLIGHT) : 1;
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

/* ---- posted writes (kv-xfer-inflight, kv_xfer_int.h's write_held and flush) ---- */

/* A receiver thread that starts reading when told to (gate_open), or after GATE_MS anyway: a
 * sender that does not post, and so waits for its first block to be fetched, makes the case fail
 * (its counts are wrong), not hang. */
enum { GATE_MS = 10000 };

/* A one-way signal between two threads: set once, waited for with a deadline. */
typedef struct latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set;
} latch;

static void latch_init(latch *l) {
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->set = false;
}

static void latch_deinit(latch *l) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

static void latch_set(latch *l) {
    pthread_mutex_lock(&l->mu);
    l->set = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Waits up to GATE_MS for the latch; returns whether it was set. */
static bool latch_wait(latch *l) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GATE_MS / 1000;
    pthread_mutex_lock(&l->mu);
    while (!l->set && pthread_cond_timedwait(&l->cv, &l->mu, &until) == 0) {
    }
    bool set = l->set;
    pthread_mutex_unlock(&l->mu);
    return set;
}

typedef struct gated_rx {
    kv_xfer_recv *r;
    latch go;
    kv_xfer_state st;
    int32_t got[NB];
    int n_got;
} gated_rx;

static void *gated_reader(void *arg) {
    gated_rx *g = arg;
    (void)latch_wait(&g->go);
    while ((g->st = kv_xfer_recv_step(g->r)) == KV_XFER_OPEN) {
    }
    g->n_got = kv_xfer_recv_take(g->r, g->got, NB);
    return NULL;
}

/* kv-xfer-inflight n, 256 KiB blocks (rendezvous on ucx). The receiver is held back until the
 * sender has sent as many blocks as it may post, so a sender that posts has exactly that many on
 * their way (n_posted) before any was fetched; then the receiver reads everything. Every block
 * arrives byte-identical, each is released once, none while a posted write was left, and the
 * connection's n_inflight_max is n (plus at most one header write waiting for its own send) where
 * the sender posts, 1 over ucx where it does not (each write waits until the receiver fetched it:
 * today's behaviour), 0 over tcp (no write waits for the peer). */
static void inflight(const char *n) {
    char keep[8];
    snprintf(keep, sizeof keep, "%s", flags_str(FLAG_KV_XFER_INFLIGHT));
    T_OK(flags_set("kv-xfer-inflight", n));
    fx f;
    big_tx t;
    kv_pool *dst = big_begin(&f, &t);
    int most = payloads_in_flight(t.src);
    kv_xfer_send *s = fx_sender(&f, NULL, NULL);
    T_OK(flags_set("kv-xfer-inflight", keep));
    kv_xfer_recv_opts o = {
        .xfer_id = 7, .identity = IDENTITY, .toks = f.toks, .n_toks = NB * BS, .timeout_ms = -1};
    gated_rx g = {.n_got = -1};
    latch_init(&g.go);
    T_OK(kv_xfer_recv_create(f.cr, dst, &o, &g.r));
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, gated_reader, &g) == 0);
    int pre = most > 1 ? most : 0, posted_at_gate = -1, rc = 0;
    for (int b = 0; b < NB && rc == 0; b++) {
        if (b == pre) {
            posted_at_gate = f.cs->n_posted;
            latch_set(&g.go);
        }
        rc = kv_xfer_send_block(s, t.src, t.ids[b], &t.meta[b], b == NB - 1, fx_release, &f);
    }
    latch_set(&g.go);
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    pthread_join(th, NULL);
    latch_deinit(&g.go);
    T_CHECKF(rc == 0 && kv_xfer_send_state(s) == KV_XFER_COMPLETE, "sender: %s, ended %d (%s)",
             err_name(rc), kv_xfer_send_state(s), err_name(kv_xfer_send_error(s)));
    T_CHECKF(g.st == KV_XFER_COMPLETE && g.n_got == NB, "receiver ended %d (%s), took %d", g.st,
             err_name(kv_xfer_recv_error(g.r)), g.n_got);
    T_CHECKF(posted_at_gate == pre, "%d writes posted before the receiver read, %d expected",
             posted_at_gate, pre);
    for (int b = 0; b < NB; b++)
        check_same_pools(t.src, t.ids[b], dst, g.got[b], b);
    T_CHECKF(f.early == 0, "%d blocks released while a posted write was in flight", f.early);
    for (int b = 0; b < NB; b++)
        T_CHECKF(f.releases[t.ids[b]] == 1, "block %d released %d times", b,
                 f.releases[t.ids[b]]);
    int mx = f.cs->n_inflight_max;
    if (strcmp(tp->name, "tcp") == 0)
        T_CHECKF(mx == 0, "tcp: %d sends in flight", mx);
    else if (most > 1)
        T_CHECKF(mx >= most && mx <= most + 1, "%d sends in flight at most, %d expected", mx, most);
    else
        T_CHECKF(mx == 1, "%d sends in flight at most, 1 expected", mx);
    T_CHECK(f.cs->n_posted == 0);
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(g.r);
    for (int b = 0; b < NB; b++)
        kv_block_unref(dst, g.got[b]);
    T_CHECK(kv_pool_n_free(dst) == NB);
    kv_pool_destroy(t.src);
    kv_pool_destroy(dst);
    fx_free(&f);
}

static void t_inflight_1(void) {
    inflight("1");
}

static void t_inflight_4(void) {
    inflight("4");
}

/* Shuts connection c down (kv_xfer_conn_shutdown: any thread may) unless told within GATE_MS
 * that the writes it guards returned: a sender that waits for a receiver its own thread drives
 * would hang, and ends with ERR_CONNECT instead. */
typedef struct watchdog {
    kv_xfer_conn *c;
    pthread_t th;
    latch done;
} watchdog;

static void *watchdog_main(void *arg) {
    watchdog *w = arg;
    if (!latch_wait(&w->done))
        kv_xfer_conn_shutdown(w->c);
    return NULL;
}

static void watchdog_start(watchdog *w, kv_xfer_conn *c) {
    w->c = c;
    latch_init(&w->done);
    T_CHECK(pthread_create(&w->th, NULL, watchdog_main, w) == 0);
}

static void watchdog_stop(watchdog *w) {
    latch_set(&w->done);
    pthread_join(w->th, NULL);
    latch_deinit(&w->done);
}

/* The release callback of the abort cases: counted (fx_release: once each, none while a posted
 * write is left) and the block given back to the sender's pool. */
typedef struct give_back {
    fx *f;
    kv_pool *src;
} give_back;

static void give_back_release(void *ctx, int32_t id) {
    give_back *g = ctx;
    fx_release(g->f, id);
    kv_block_unref(g->src, id);
}

/* A pipelined transfer ended under its posted writes (ucx, in place, block-major pools,
 * kv-xfer-inflight 4; one thread drives both ends, which only posting allows): the sender posts
 * blocks 0..3 (none fetched yet). ABORT_PEER_GONE: the receiver takes block 0 and goes (its
 * transfer destroyed: ABORT; its connection destroyed: FIN); the sender's next step flushes
 * first: block 0's write completed, blocks 1..3's cannot (the peer is gone) and are cancelled, the
 * flush fails and the transfer aborts with ERR_CONNECT. ABORT_STALLED: the receiver just stops
 * reading: the sender's flush (timeout_ms 300 each) gives up on block 0, closes the connection and
 * cancels the rest: ERR_CONNECT too. ABORT_CANCEL: the receiver takes block 0, then the sender
 * cancels (drain) with 1..3 still posted: the abort flushes before it releases (300 ms, then
 * cancelled as above); ERR_CANCELLED. Each way blocks 0..3 are released exactly once, none while
 * a posted write was left, and given back: the sender's pool has 4 free blocks again (it had none
 * after big_make), nothing is posted any more. */
enum { ABORT_PEER_GONE, ABORT_STALLED, ABORT_CANCEL };

static void inflight_abort(int how) {
    char keep_n[8], keep_ip[4], keep_bm[4];
    snprintf(keep_n, sizeof keep_n, "%s", flags_str(FLAG_KV_XFER_INFLIGHT));
    snprintf(keep_ip, sizeof keep_ip, "%s", flags_str(FLAG_KV_XFER_INPLACE));
    snprintf(keep_bm, sizeof keep_bm, "%s", flags_str(FLAG_KV_POOL_BLOCK_MAJOR));
    T_OK(flags_set("kv-xfer-inflight", "4"));
    T_OK(flags_set("kv-xfer-inplace", "1"));
    T_OK(flags_set("kv-pool-block-major", "1"));
    fx f;
    big_tx t;
    kv_pool *dst = big_begin(&f, &t);
    kv_xfer_send_opts so = {.xfer_id = 7, .timeout_ms = how == ABORT_PEER_GONE ? -1 : 300};
    kv_xfer_send *s = NULL;
    T_OK(kv_xfer_send_create(f.cs, &so, &s));
    kv_xfer_recv_opts o = {
        .xfer_id = 7, .identity = IDENTITY, .toks = f.toks, .n_toks = NB * BS, .timeout_ms = -1};
    kv_xfer_recv *r = NULL;
    T_OK(kv_xfer_recv_create(f.cr, dst, &o, &r));
    T_OK(flags_set("kv-xfer-inflight", keep_n));
    T_OK(flags_set("kv-xfer-inplace", keep_ip));
    T_OK(flags_set("kv-pool-block-major", keep_bm));
    T_CHECK(kv_pool_n_free(t.src) == 0);
    give_back gb = {&f, t.src};
    watchdog w;
    watchdog_start(&w, f.cs);
    int rc = 0;
    for (int b = 0; b < 4 && rc == 0; b++)
        rc = kv_xfer_send_block(s, t.src, t.ids[b], &t.meta[b], false, give_back_release, &gb);
    watchdog_stop(&w);
    T_CHECKF(rc == 0 && f.cs->n_posted == 4, "4 blocks sent: %s, %d posted", err_name(rc),
             f.cs->n_posted);
    if (how != ABORT_STALLED)
        T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN); /* block 0 fetched and verified */
    if (how == ABORT_PEER_GONE) {
        kv_xfer_recv_destroy(r);
        r = NULL;
        kv_xfer_conn_destroy(f.cr);
        f.cr = NULL;
        T_CHECK(kv_pool_n_free(dst) == NB);
    }
    if (how == ABORT_CANCEL)
        kv_xfer_send_cancel(s, ERR_CANCELLED);
    else
        T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    int want = how == ABORT_CANCEL ? ERR_CANCELLED : ERR_CONNECT;
    T_CHECKF(kv_xfer_send_state(s) == KV_XFER_ABORTED && kv_xfer_send_error(s) == want,
             "sender ended %d, error %s (%s)", kv_xfer_send_state(s),
             err_name(kv_xfer_send_error(s)), err_detail());
    T_EQ_INT(f.cs->n_posted, 0);
    T_CHECKF(f.early == 0, "%d blocks released while a posted write was in flight", f.early);
    for (int b = 0; b < NB; b++)
        T_CHECKF(f.releases[t.ids[b]] == (b < 4 ? 1 : 0), "block %d released %d times", b,
                 f.releases[t.ids[b]]);
    T_EQ_INT(kv_pool_n_free(t.src), 4);
    kv_xfer_send_destroy(s); /* ended: releases nothing more */
    T_EQ_INT(kv_pool_n_free(t.src), 4);
    kv_xfer_recv_destroy(r);
    T_CHECK(kv_pool_n_free(dst) == NB);
    kv_pool_destroy(t.src);
    kv_pool_destroy(dst);
    fx_free(&f);
}

static void t_inflight_peer_gone(void) {
    inflight_abort(ABORT_PEER_GONE);
}

static void t_inflight_stalled(void) {
    inflight_abort(ABORT_STALLED);
}

static void t_inflight_cancel(void) {
    inflight_abort(ABORT_CANCEL);
}

/* write_held's bound and the stream's order, on a bare ucx connection: with max_posted 2, the
 * third posted write returns only once the first was fetched. The reader (another thread) pauses,
 * then marks that it starts reading; the writer checks the mark once its third posted write
 * returned (a bound not kept returns at once, before the mark). The three 256 KiB buffers (each
 * its own bytes) and a small write_all between the first two arrive in call order, byte-identical
 * (eager and rendezvous messages of one endpoint are matched in send order). */
enum { BIG_MSG = 256 * 1024 };

typedef struct bound_rx {
    kv_xfer_conn *c;
    atomic_int started;
    unsigned char *got; /* [3 * BIG_MSG + 64] */
    int rc;
} bound_rx;

static void *bound_reader(void *arg) {
    bound_rx *b = arg;
    struct timespec pause_ts = {0, 200 * 1000000L};
    nanosleep(&pause_ts, NULL);
    atomic_store(&b->started, 1);
    b->rc = b->c->ops->read_full(b->c, b->got, 3 * BIG_MSG + 64, 30000);
    return NULL;
}

static void t_posted_bound(void) {
    fx f;
    fx_init(&f, true);
    unsigned char *buf = malloc(3 * BIG_MSG + 64), *small = buf + 3 * BIG_MSG;
    bound_rx b = {.c = f.cr, .got = malloc(3 * BIG_MSG + 64)};
    T_CHECK(buf && b.got);
    for (size_t i = 0; i < 3 * BIG_MSG + 64; i++)
        buf[i] = (unsigned char)(i * 7 + i / BIG_MSG * 13);
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, bound_reader, &b) == 0);
    kv_xfer_conn *c = f.cs;
    T_OK(c->ops->write_held(c, buf, BIG_MSG, 2));
    T_OK(c->ops->write_all(c, small, 64));
    T_OK(c->ops->write_held(c, buf + BIG_MSG, BIG_MSG, 2));
    int posted = c->n_posted;
    T_OK(c->ops->write_held(c, buf + 2 * BIG_MSG, BIG_MSG, 2));
    int started = atomic_load(&b.started);
    T_OK(c->ops->flush(c, -1));
    pthread_join(th, NULL);
    T_EQ_INT(posted, 2);
    T_CHECKF(started, "the third posted write returned before the receiver read anything");
    T_EQ_INT(c->n_posted, 0);
    T_CHECKF(c->n_inflight_max <= 3, "%d sends in flight (2 posted, 1 header)",
             c->n_inflight_max);
    T_OK(b.rc);
    T_CHECK(memcmp(b.got, buf, BIG_MSG) == 0);
    T_CHECK(memcmp(b.got + BIG_MSG, small, 64) == 0);
    T_CHECK(memcmp(b.got + BIG_MSG + 64, buf + BIG_MSG, 2 * BIG_MSG) == 0);
    free(buf);
    free(b.got);
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

typedef struct tcase {
    const char *name;
    void (*fn)(void);
    bool fd_only; /* needs the socketpair's fds (tcp only) */
} tcase;

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
    {"inflight_1", t_inflight_1, false},
    {"inflight_4", t_inflight_4, false},
};

static char ucx_skip[256];

static void t_ucx_missing(void) {
    test_skip("%s", ucx_skip);
}

int main(void) {
    const char *names[] = {"tcp", "ucx"};
    for (int t = 0; t < 2; t++) {
        tp = kv_xfer_transport_find(names[t]);
        char full[96];
        if (t == 1) { /* UCX may not start here (no usable transport): one SKIP line */
            kv_xfer_listener *l = NULL;
            int rc = tp->listen("127.0.0.1:0", &l);
            kv_xfer_listener_destroy(l);
            if (rc) {
                snprintf(ucx_skip, sizeof ucx_skip, "UCX cannot start here: %s", err_detail());
                test_run("kv_xfer.ucx", t_ucx_missing);
                break;
            }
        }
        /* every case over the in-place path (the default), then over the frame path */
        for (int mode = 0; mode < 2; mode++) {
            if (flags_set("kv-xfer-inplace", mode == 0 ? "1" : "0")) {
                fprintf(stderr, "test_kv_xfer: %s\n", err_detail());
                return 1;
            }
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                if (t == 1 && cases[i].fd_only)
                    continue;
                snprintf(full, sizeof full, "kv_xfer.%s.%s%s", names[t], mode ? "frame." : "",
                         cases[i].name);
                test_run(full, cases[i].fn);
            }
        }
        flags_set("kv-xfer-inplace", "1");
        if (t == 1) { /* posted writes, whatever the flags (each case sets what it needs) */
            test_run("kv_xfer.ucx.inflight_peer_gone", t_inflight_peer_gone);
            test_run("kv_xfer.ucx.inflight_stalled", t_inflight_stalled);
            test_run("kv_xfer.ucx.inflight_cancel", t_inflight_cancel);
            test_run("kv_xfer.ucx.posted_bound", t_posted_bound);
        }
    }
    tp = kv_xfer_transport_find("tcp");
    test_run("kv_xfer.cancel.before_expect", t_cancel_before_expect);
    test_run("kv_xfer.cancel.waiting", t_cancel_waiting);
    test_run("kv_xfer.cancel.receiving", t_cancel_receiving);
    test_run("kv_xfer.cancel.after_ready", t_cancel_after_ready);
    return test_summary();
}
