/* SPDX-License-Identifier: MIT */
/*
 * test_kv_xfer_overlap: the receiver's overlap (kv-xfer-verify-overlap; kv_xfer.c's verifier): a
 * block received in place is checksummed on a helper thread while the next one lands, when the
 * next message is already there, and its verdict (HELD and ACKed, or the transfer aborted) comes
 * before the next block's. On kv_xfer_fx.h's fixture, one thread driving both ends one step at a
 * time: the sender writes first, so what the receiver finds waiting is decided by the order of
 * calls, never by timing.
 *
 * Per transport ("tcp" over a socketpair, then "ucx"; one SKIP line if UCX cannot start here),
 * with kv-xfer-verify-overlap 2 (every transport), named "kv_xfer_overlap.<transport>.<case>":
 *   transfer          every block but the final one overlapped, each verdict one step later,
 *                     bytes identical, each checksum as verified (kv_xfer_recv_checksum);
 *   modes             how many blocks overlap under 0, 1 (ucx only), 2 and the frame path;
 *   corrupt_pending   a block that fails while the next lands: ERR_CHECKSUM naming it, the one
 *                     that landed behind it freed too, the sender released once each;
 *   alone_pending     a pending block with nothing behind it once a duplicate is dropped: its
 *                     verdict does not wait for another message (clean and corrupt);
 *   abort_pending     the sender's ABORT behind a pending block: every block freed once;
 *   destroy_pending   the receiver destroyed with a block pending: freed once, thread joined;
 *   full_pending      no pool block for the one behind a pending block: ERR_FULL, both freed.
 * A threaded transfer of 256 KiB blocks (UCX's rendezvous path) runs once per transport too
 * (big_transfer): whatever overlapped, it completes byte-identical.
 */
#include "kv_xfer_fx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Flips one byte of the sender's pool block b after its checksum was taken (fx_init): the bytes
 * sent then fail the checksum their head carries. */
static void corrupt_src(fx *f, int b) {
    unsigned char *k = (unsigned char *)kv_pool_k_base(f->src, 1) +
                       (size_t)f->ids[b] * kv_pool_kv_stride(f->src);
    k[3] ^= 0x10;
}

static void expect_stats(kv_xfer_recv *r, int64_t verified, int64_t overlapped, int64_t released,
                         const char *when) {
    kv_xfer_stats st = kv_xfer_recv_stats(r);
    T_CHECKF(st.n_verified == verified && st.n_overlapped == overlapped &&
                 st.n_released == released,
             "%s: verified %lld (want %lld), overlapped %lld (want %lld), released %lld "
             "(want %lld)",
             when, (long long)st.n_verified, (long long)verified, (long long)st.n_overlapped,
             (long long)overlapped, (long long)st.n_released, (long long)released);
}

/* A fixture with a sender and a receiver; the sender's block `corrupt` (-1: none) corrupted at
 * the source, then blocks 0..n-1 written, the last one final if `final`. */
static void begin(fx *f, kv_xfer_send **s, kv_xfer_recv **r, int n, bool final, int corrupt) {
    fx_init(f, true);
    if (corrupt >= 0)
        corrupt_src(f, corrupt);
    *s = fx_sender(f, NULL, NULL);
    *r = fx_receiver(f, -1);
    for (int b = 0; b < n; b++)
        T_OK(fx_send(f, *s, b, final && b == n - 1));
}

/* Takes the n blocks of r's completed transfer, checks each against the sender's and frees it. */
static void take_check(fx *f, kv_xfer_recv *r, int n) {
    int32_t got[NB];
    T_EQ_INT(kv_xfer_recv_take(r, got, NB), n);
    for (int b = 0; b < n; b++) {
        check_same(f, b, got[b]);
        kv_block_unref(f->dst, got[b]);
    }
}

/* Every block written before the receiver reads: each non-final one finds the next waiting. */
static void t_transfer(void) {
    fx f;
    kv_xfer_send *s;
    kv_xfer_recv *r;
    begin(&f, &s, &r, NB, true, -1);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    expect_stats(r, 0, 1, 0, "after block 0"); /* pending: no verdict, no ACK yet */
    T_EQ_INT(kv_xfer_recv_block(r, 0), -1);
    T_CHECK(kv_xfer_recv_checksum(r, 0) == 0);
    for (int b = 1; b < NB - 1; b++) {
        T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
        expect_stats(r, b, b + 1, 0, "a middle block"); /* the one before: HELD */
        T_CHECK(kv_xfer_recv_stats(r).n_acked == b);
    }
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_COMPLETE); /* the last pending one, then the final */
    expect_stats(r, NB, NB - 1, 0, "at the end");
    for (int b = 0; b < NB; b++)
        T_CHECKF(kv_xfer_recv_checksum(r, (uint32_t)b) == f.meta[b].checksum,
                 "block %d: checksum as verified differs from the sender's", b);
    T_CHECK(kv_xfer_recv_checksum(r, NB) == 0);
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    T_CHECK(kv_xfer_send_state(s) == KV_XFER_COMPLETE);
    take_check(&f, r, NB);
    fx_end(&f, s, r, NB);
}

/* Blocks overlapped in a whole transfer of NB blocks under the current flags. */
static int64_t overlapped_now(void) {
    fx f;
    kv_xfer_send *s;
    kv_xfer_recv *r;
    begin(&f, &s, &r, NB, true, -1);
    while (kv_xfer_recv_step(r) == KV_XFER_OPEN) {
    }
    T_CHECK(kv_xfer_recv_state(r) == KV_XFER_COMPLETE);
    int64_t n = kv_xfer_recv_stats(r).n_overlapped;
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    take_check(&f, r, NB);
    fx_end(&f, s, r, NB);
    return n;
}

static void t_modes(void) {
    bool ucx = strcmp(tp->name, "ucx") == 0;
    T_OK(flags_set("kv-xfer-verify-overlap", "0"));
    T_EQ_INT(overlapped_now(), 0);
    T_OK(flags_set("kv-xfer-verify-overlap", "1")); /* the receiver moves the bytes: ucx */
    T_EQ_INT(overlapped_now(), ucx ? NB - 1 : 0);
    T_OK(flags_set("kv-xfer-verify-overlap", "2"));
    T_EQ_INT(overlapped_now(), NB - 1);
    T_OK(flags_set("kv-xfer-inplace", "0")); /* the frame path verifies as it decodes */
    T_EQ_INT(overlapped_now(), 0);
    T_OK(flags_set("kv-xfer-inplace", "1"));
}

/* Block 2 corrupted at the source: it fails while block 3 lands behind it. */
static void t_corrupt_pending(void) {
    fx f;
    kv_xfer_send *s;
    kv_xfer_recv *r;
    begin(&f, &s, &r, 5, true, 2);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    expect_stats(r, 2, 3, 0, "block 2 pending");
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED); /* block 3 landed, then 2's verdict */
    T_CHECKF(kv_xfer_recv_error(r) == ERR_CHECKSUM, "error %s", err_name(kv_xfer_recv_error(r)));
    T_CHECKF(strstr(err_detail(), "block 2") != NULL, "detail: %s", err_detail());
    expect_stats(r, 2, 3, 4, "after the abort"); /* 0 and 1 HELD, 2 and 3 RECEIVING: all freed */
    check_dst_free(&f);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN);
    check_releases(&f, 2);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_CHECKSUM);
    check_releases(&f, 5);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED); /* block 4, late: dropped */
    fx_end(&f, s, r, 5);
}

/* Block 0 written twice (the sender's frame path): it is pending while its copy waits; once the
 * copy is dropped nothing is behind it, and its verdict comes in the next step without waiting
 * for a message (the receiver's timeout would end a wait: 5 s, never reached when it works). */
static void alone_pending(bool corrupt) {
    fx f;
    fx_init(&f, true);
    hook_cfg h = {.seq = 0, .flip_at = -1, .copies = 2};
    if (corrupt)
        corrupt_src(&f, 0);
    kv_xfer_send *s = fx_sender(&f, hook_fn, &h);
    kv_xfer_recv *r = fx_receiver(&f, 5000);
    T_OK(fx_send(&f, s, 0, false));
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    expect_stats(r, 0, 1, 0, "block 0 pending");
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN); /* the copy: a duplicate, dropped */
    T_EQ_INT(kv_xfer_recv_stats(r).n_dropped, 1);
    expect_stats(r, 0, 1, 0, "the copy dropped");
    kv_xfer_state st = kv_xfer_recv_step(r);
    if (corrupt) {
        T_CHECKF(st == KV_XFER_ABORTED && kv_xfer_recv_error(r) == ERR_CHECKSUM, "state %d (%s)",
                 st, err_name(kv_xfer_recv_error(r)));
        expect_stats(r, 0, 1, 1, "block 0 failed");
        T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
        fx_end(&f, s, r, 1);
        return;
    }
    T_CHECKF(st == KV_XFER_OPEN, "state %d (%s)", st, err_name(kv_xfer_recv_error(r)));
    expect_stats(r, 1, 1, 0, "block 0 verified alone");
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_OPEN); /* its ACK */
    check_releases(&f, 1);
    T_OK(fx_send(&f, s, 1, true));
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_COMPLETE);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_COMPLETE);
    take_check(&f, r, 2);
    fx_end(&f, s, r, 2);
}

static void t_alone_pending(void) {
    alone_pending(false);
}

static void t_alone_pending_corrupt(void) {
    alone_pending(true);
}

/* Blocks 0 and 1, then the sender's ABORT: block 1 is pending when the ABORT is read. */
static void t_abort_pending(void) {
    fx f;
    kv_xfer_send *s;
    kv_xfer_recv *r;
    begin(&f, &s, &r, 2, false, -1);
    kv_xfer_send_cancel(s, ERR_CANCELLED);
    check_releases(&f, 2);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    expect_stats(r, 1, 2, 0, "block 1 pending");
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_recv_error(r) == ERR_CANCELLED);
    expect_stats(r, 1, 2, 2, "after the ABORT");
    fx_end(&f, s, r, 2);
}

/* The receiver destroyed while block 0 is pending (block 1 behind it, never read). */
static void t_destroy_pending(void) {
    fx f;
    kv_xfer_send *s;
    kv_xfer_recv *r;
    begin(&f, &s, &r, 2, false, -1);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    expect_stats(r, 0, 1, 0, "block 0 pending");
    T_CHECK(kv_pool_n_free(f.dst) == POOL_BLOCKS - 1);
    kv_xfer_recv_destroy(r); /* cancels: the pending block freed once, the ABORT sent */
    check_dst_free(&f);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_CANCELLED);
    fx_end(&f, s, NULL, 2);
}

/* The receiver's pool has one free block: block 0 pending takes it, block 1 finds none. */
static void t_full_pending(void) {
    fx f;
    kv_xfer_send *s;
    kv_xfer_recv *r;
    begin(&f, &s, &r, 3, true, -1);
    int32_t taken[POOL_BLOCKS];
    int n_taken = 0;
    while (kv_pool_n_free(f.dst) > 1)
        taken[n_taken++] = kv_pool_alloc(f.dst);
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_OPEN);
    expect_stats(r, 0, 1, 0, "block 0 pending");
    T_CHECK(kv_xfer_recv_step(r) == KV_XFER_ABORTED);
    T_CHECKF(kv_xfer_recv_error(r) == ERR_FULL, "error %s", err_name(kv_xfer_recv_error(r)));
    expect_stats(r, 0, 1, 1, "after ERR_FULL");
    T_EQ_INT(kv_pool_n_free(f.dst), 1);
    T_CHECK(kv_xfer_send_step(s) == KV_XFER_ABORTED);
    T_CHECK(kv_xfer_send_error(s) == ERR_FULL);
    for (int i = 0; i < n_taken; i++)
        kv_block_unref(f.dst, taken[i]);
    fx_end(&f, s, r, 3);
}

/* ---- 256 KiB blocks, the sender in a thread ---- */

static void *big_send_main(void *arg) {
    big_tx *t = arg;
    kv_xfer_send *s = fx_sender(t->f, NULL, NULL);
    for (int b = 0; b < NB && t->rc_block == 0; b++)
        t->rc_block = kv_xfer_send_block(s, t->src, t->ids[b], &t->meta[b], b == NB - 1,
                                         fx_release, t->f);
    while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
    }
    t->state = kv_xfer_send_state(s);
    t->error = kv_xfer_send_error(s);
    kv_xfer_send_destroy(s);
    return NULL;
}

static void t_big_transfer(void) {
    fx f;
    big_tx t;
    kv_pool *dst = big_begin(&f, &t);
    kv_xfer_recv_opts o = {.xfer_id = 7,
                           .identity = IDENTITY,
                           .toks = f.toks,
                           .n_toks = NB * BS,
                           .timeout_ms = 30000};
    kv_xfer_recv *r = NULL;
    T_OK(kv_xfer_recv_create(f.cr, dst, &o, &r));
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, big_send_main, &t) == 0);
    while (kv_xfer_recv_step(r) == KV_XFER_OPEN) {
    }
    pthread_join(th, NULL);
    T_CHECKF(kv_xfer_recv_state(r) == KV_XFER_COMPLETE && t.state == KV_XFER_COMPLETE,
             "receiver %d (%s), sender %d (%s)", kv_xfer_recv_state(r),
             err_name(kv_xfer_recv_error(r)), t.state, err_name(t.error));
    int32_t got[NB];
    T_EQ_INT(kv_xfer_recv_take(r, got, NB), NB);
    for (int b = 0; b < NB; b++) {
        check_same_pools(t.src, t.ids[b], dst, got[b], b);
        T_CHECK(kv_xfer_recv_checksum(r, (uint32_t)b) == t.meta[b].checksum);
        kv_block_unref(dst, got[b]);
        T_EQ_INT(f.releases[t.ids[b]], 1);
    }
    T_EQ_INT(kv_pool_n_free(dst), big_opts.n_blocks);
    kv_xfer_recv_destroy(r);
    kv_pool_destroy(dst);
    kv_pool_destroy(t.src);
    fx_free(&f);
}

static const tcase cases[] = {
    {"transfer", t_transfer, false},
    {"modes", t_modes, false},
    {"corrupt_pending", t_corrupt_pending, false},
    {"alone_pending", t_alone_pending, false},
    {"alone_pending_corrupt", t_alone_pending_corrupt, false},
    {"abort_pending", t_abort_pending, false},
    {"destroy_pending", t_destroy_pending, false},
    {"full_pending", t_full_pending, false},
    {"big_transfer", t_big_transfer, false},
};

int main(void) {
    const char *names[] = {"tcp", "ucx"};
    for (int i = 0; i < 2; i++) {
        tp = kv_xfer_transport_find(names[i]);
        if (i == 1 && !fx_ucx_starts("kv_xfer_overlap.ucx"))
            break;
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            if (flags_set("kv-xfer-verify-overlap", "2") || flags_set("kv-xfer-inplace", "1")) {
                fprintf(stderr, "test_kv_xfer_overlap: %s\n", err_detail());
                return 1;
            }
            char full[96];
            snprintf(full, sizeof full, "kv_xfer_overlap.%s.%s", names[i], cases[k].name);
            test_run(full, cases[k].fn);
        }
    }
    return test_summary();
}
