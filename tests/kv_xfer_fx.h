/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer_fx: the fixture the KV transfer tests share (test_kv_xfer.c, the state machine per
 * transport and disagg's cancel; test_kv_xfer_inflight.c, the posted writes;
 * test_kv_xfer_overlap.c, the receiver's overlap): the transport the cases run over (tp), a
 * connected pair over it (a socketpair over tcp, a loopback listener's accepted connection
 * otherwise), a sender pool with NB sealed blocks and an empty receiver pool (fx_*), the checks
 * every case ends with (each block released exactly once, none while a posted write was left; the
 * receiver's pool all free; bytes identical), a wire hook that flips or repeats a frame (hook_fn),
 * the 256 KiB blocks of UCX's rendezvous path (big_*), and the runner that runs a list of cases
 * once per transport and path under the names "kv_xfer.<transport>[.frame].<case>" that
 * tests/run.sh and CI logs key on.
 *
 * Header-only, static inline (as test_grammar_util.h and test_isa.h): the Makefile links each
 * tests/test_*.c with tests/test_util.c only, and not every includer uses every helper. Its
 * static variables (tp, the layouts, the SKIP reason) are each includer's own: one per binary.
 */
#ifndef VERITY_TESTS_KV_XFER_FX_H
#define VERITY_TESTS_KV_XFER_FX_H

#include "test.h"

#include "base/err.h"
#include "base/flags.h"
#include "disagg/kv_xfer.h"
#include "disagg/kv_xfer_int.h"
#include "kv/kv_block.h"
#include "kv/kv_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum { NB = 8, BS = 4, POOL_BLOCKS = 32 };
#define IDENTITY 0x1234abcdULL

/* The transport the cases run over ("tcp" or "ucx"); fx_run_cases runs the list once per
 * transport. */
static const kv_xfer_transport *tp;

typedef struct dialer {
    char addr[64];
    kv_xfer_conn *c;
    int rc;
} dialer;

static inline void *dial(void *arg) {
    dialer *d = arg;
    d->rc = tp->connect(d->addr, &d->c);
    return NULL;
}

/* A connected pair over tp through a loopback listener (connect in a thread: it waits for the
 * server's answer, which accept gives). */
static inline void conn_pair(kv_xfer_conn **cs, kv_xfer_conn **cr) {
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
static inline void fx_release(void *ctx, int32_t id) {
    fx *f = ctx;
    f->releases[id]++;
    f->early += f->cs && f->cs->n_posted > 0;
}

/* The pools' layouts (kv-pool-block-major, "0" or "1") for the next fx_init: NULL for the flag's
 * value (how main runs every case), else the sender's and the receiver's, each its own. */
static const char *src_layout, *dst_layout;

static inline kv_pool *pool_make(const char *layout) {
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

static inline void fx_init(fx *f, bool pair) {
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

static inline void fx_free(fx *f) {
    kv_xfer_conn_destroy(f->cs);
    kv_xfer_conn_destroy(f->cr);
    kv_pool_destroy(f->src);
    kv_pool_destroy(f->dst);
}

static inline kv_xfer_send *fx_sender(fx *f, kv_xfer_wire_hook hook, void *ctx) {
    kv_xfer_send_opts o = {.xfer_id = 7, .timeout_ms = -1, .wire_hook = hook, .wire_ctx = ctx};
    kv_xfer_send *s = NULL;
    T_CHECK(kv_xfer_send_create(f->cs, &o, &s) == 0);
    return s;
}

static inline kv_xfer_recv *fx_receiver(fx *f, int timeout_ms) {
    kv_xfer_recv_opts o = {.xfer_id = 7,
                           .identity = IDENTITY,
                           .toks = f->toks,
                           .n_toks = NB * BS + 3,
                           .timeout_ms = timeout_ms};
    kv_xfer_recv *r = NULL;
    T_CHECK(kv_xfer_recv_create(f->cr, f->dst, &o, &r) == 0);
    return r;
}

static inline int fx_send(fx *f, kv_xfer_send *s, int b, bool final) {
    return kv_xfer_send_block(s, f->src, f->ids[b], &f->meta[b], final, fx_release, f);
}

/* Each of the first n blocks released exactly once, the rest never. */
static inline void check_releases(const fx *f, int n) {
    T_CHECKF(f->early == 0, "%d blocks released while a posted write was in flight", f->early);
    for (int b = 0; b < NB; b++)
        T_CHECKF(f->releases[f->ids[b]] == (b < n ? 1 : 0), "block %d released %d times", b,
                 f->releases[f->ids[b]]);
}

static inline void check_dst_free(const fx *f) {
    T_CHECKF(kv_pool_n_free(f->dst) == POOL_BLOCKS, "receiver pool: %lld of %d free",
             (long long)kv_pool_n_free(f->dst), POOL_BLOCKS);
}

/* Ends a case: destroys both sides (a no-op cancel on ended transfers), checks each of the first n
 * blocks was released exactly once and the receiver's pool is all free, frees the fixture. */
static inline void fx_end(fx *f, kv_xfer_send *s, kv_xfer_recv *r, int n) {
    kv_xfer_send_destroy(s);
    kv_xfer_recv_destroy(r);
    check_releases(f, n);
    check_dst_free(f);
    fx_free(f);
}

/* The receiver's block holds exactly the sender's bytes. */
static inline void check_same_pools(const kv_pool *src, int32_t src_id, const kv_pool *dst,
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

static inline void check_same(const fx *f, int b, int32_t dst_id) {
    check_same_pools(f->src, f->ids[b], f->dst, dst_id, b);
}

/* ---- a wire hook (kv_xfer_send_opts.wire_hook: the sender's frame path) ---- */

typedef struct hook_cfg {
    int seq;      /* the frame to act on */
    long flip_at; /* byte offset to flip (-1: none) */
    int copies;   /* copies of that frame to write */
} hook_cfg;

/* Frame seq written `copies` times (0 drops it), its byte flip_at flipped first (-1: none); every
 * other frame once. ctx is a hook_cfg. */
static inline int hook_fn(void *ctx, uint32_t seq, uint8_t *frame, size_t n) {
    hook_cfg *h = ctx;
    if ((int)seq != h->seq)
        return 1;
    if (h->flip_at >= 0 && (size_t)h->flip_at < n)
        frame[h->flip_at] ^= 0x40;
    return h->copies;
}

/* ---- blocks big enough for UCX's rendezvous (256 KiB) ---- */

/* A sender thread's transfer of big blocks (big_sender in test_kv_xfer.c), or a posted-writes
 * case's sender pool: the pool, its NB sealed blocks, and how the sending ended. */
typedef struct big_tx {
    fx *f;
    kv_pool *src;
    int32_t ids[NB];
    kv_block_meta meta[NB];
    int rc_block, at_block, state, error;
} big_tx;

/* The big pools' geometry: a blob of at least 256 KiB per block (big_make checks). */
static const kv_pool_opts big_opts = {
    .n_layer = 4, .kv_dim = 2048, .block_size = BS, .n_blocks = NB};

/* The sender's big pool with NB sealed blocks named by f's tokens, each of its own bytes. */
static inline void big_make(big_tx *t, fx *f) {
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
static inline kv_pool *big_begin(fx *f, big_tx *t) {
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
static inline int payloads_in_flight(const kv_pool *src) {
    bool posting = strcmp(tp->name, "ucx") == 0 && flags_int(FLAG_KV_XFER_INPLACE) &&
                   kv_pool_block_major(src);
    return posting ? (int)flags_int(FLAG_KV_XFER_INFLIGHT) : 1;
}

/* ---- the runner ---- */

/* A case of a per-transport list. */
typedef struct tcase {
    const char *name;
    void (*fn)(void);
    bool fd_only; /* needs the socketpair's fds (tcp only) */
} tcase;

static char ucx_skip[256];

static inline void t_ucx_missing(void) {
    test_skip("%s", ucx_skip);
}

/* Whether UCX starts here (a listener on loopback); if not (no usable transport), one SKIP line
 * named `name` saying why, and false. */
static inline bool fx_ucx_starts(const char *name) {
    kv_xfer_listener *l = NULL;
    int rc = kv_xfer_transport_find("ucx")->listen("127.0.0.1:0", &l);
    kv_xfer_listener_destroy(l);
    if (rc == 0)
        return true;
    snprintf(ucx_skip, sizeof ucx_skip, "UCX cannot start here: %s", err_detail());
    test_run(name, t_ucx_missing);
    return false;
}

/* Runs cases[0..n) once per transport, "tcp" then "ucx" (one SKIP line "kv_xfer.ucx" instead if
 * UCX cannot start here): every case over the in-place path (the default) as
 * "kv_xfer.<transport>.<name>", then over the frame path as "kv_xfer.<transport>.frame.<name>",
 * the fd_only ones over tcp only; then, over ucx with the in-place flag back on,
 * ucx_after[0..n_after) once each as "kv_xfer.ucx.<name>" (posted writes, whatever the flags:
 * each case sets what it needs). Returns 0, or 1 when a flag could not be set (printed to stderr
 * after prog, the binary's name): main returns it. Leaves tp at the last transport run. */
static inline int fx_run_cases(const char *prog, const tcase *cases, size_t n,
                               const tcase *ucx_after, size_t n_after) {
    const char *names[] = {"tcp", "ucx"};
    for (int t = 0; t < 2; t++) {
        tp = kv_xfer_transport_find(names[t]);
        char full[96];
        if (t == 1 && !fx_ucx_starts("kv_xfer.ucx"))
            break;
        /* every case over the in-place path (the default), then over the frame path */
        for (int mode = 0; mode < 2; mode++) {
            if (flags_set("kv-xfer-inplace", mode == 0 ? "1" : "0")) {
                fprintf(stderr, "%s: %s\n", prog, err_detail());
                return 1;
            }
            for (size_t i = 0; i < n; i++) {
                if (t == 1 && cases[i].fd_only)
                    continue;
                snprintf(full, sizeof full, "kv_xfer.%s.%s%s", names[t], mode ? "frame." : "",
                         cases[i].name);
                test_run(full, cases[i].fn);
            }
        }
        flags_set("kv-xfer-inplace", "1");
        for (size_t i = 0; t == 1 && i < n_after; i++) {
            snprintf(full, sizeof full, "kv_xfer.ucx.%s", ucx_after[i].name);
            test_run(full, ucx_after[i].fn);
        }
    }
    return 0;
}

#endif
