/* SPDX-License-Identifier: MIT */
/*
 * bench_xfer: KV transfer throughput (disagg/kv_xfer.h, tcp transport) over TCP loopback, as a
 * fraction of memcpy bandwidth measured in the same run. Not part of the test suite. Build, run:
 *
 *   make && cc -O2 -Isrc bench/bench_xfer.c build/release/libverity.a -lm -pthread -lxxhash \
 *       -o build/release/bench_xfer && build/release/bench_xfer [transfers]
 *
 * A sender (this thread) and a receiver (another thread) move R transfers of 64 blocks each over
 * one loopback connection; a block is 16 positions x 16 layers x kv_dim 1024 in F16 for K and V
 * (1 MiB). The sender encodes each block's blob (kv_block_encode) and writes it; the receiver
 * reads it, restores it into its pool and verifies both checksums (kv_block_decode) before the
 * ACK; the consumer takes and frees the blocks. Throughput = payload bytes moved / wall time. The
 * memcpy figure copies the same number of bytes between two buffers of the transfer's size, in
 * the same process, right before. Wall time: on a machine shared with other work, both figures
 * and their ratio move; the median of 5 runs of each is printed.
 */
#include "base/err.h"
#include "disagg/kv_xfer.h"
#include "kv/kv_block.h"
#include "kv/kv_pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NB = 64, BS = 16, RUNS = 5 };
#define IDENTITY 42ULL

static kv_pool_opts popts = {
    .n_layer = 16, .kv_dim = 1024, .block_size = BS, .n_blocks = NB, .f16 = true};
static int32_t toks[NB * BS];
static int n_transfers = 4;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc) {
    fprintf(stderr, "bench_xfer: %s: %s (%s)\n", what, err_name(rc), err_detail());
    exit(2);
}

static void no_release(void *ctx, int32_t id) {
    (void)ctx;
    (void)id;
}

typedef struct rx {
    kv_xfer_listener *l;
    kv_pool *dst;
    int rc;
} rx;

static void *receiver(void *arg) {
    rx *x = arg;
    kv_xfer_conn *c = NULL;
    x->rc = kv_xfer_transport_find("tcp")->accept(x->l, -1, &c);
    for (int t = 0; x->rc == 0 && t < n_transfers * RUNS; t++) {
        kv_xfer_recv_opts o = {.xfer_id = (uint64_t)t + 1,
                               .identity = IDENTITY,
                               .toks = toks,
                               .n_toks = NB * BS,
                               .timeout_ms = 30000};
        kv_xfer_recv *r = NULL;
        x->rc = kv_xfer_recv_create(c, x->dst, &o, &r);
        if (x->rc)
            break;
        while (kv_xfer_recv_step(r) == KV_XFER_OPEN) {
        }
        int32_t ids[NB];
        int n = kv_xfer_recv_take(r, ids, NB);
        if (n != NB)
            x->rc = n < 0 ? n : kv_xfer_recv_error(r);
        for (int i = 0; i < n; i++)
            kv_block_unref(x->dst, ids[i]);
        kv_xfer_recv_destroy(r);
    }
    kv_xfer_conn_destroy(c);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc > 1)
        n_transfers = atoi(argv[1]);
    if (n_transfers < 1)
        n_transfers = 1;
    kv_pool *src, *dst;
    int rc = kv_pool_create(&popts, &src);
    if (rc || (rc = kv_pool_create(&popts, &dst)))
        die("pool", rc);
    size_t bb = kv_pool_block_bytes(src), state = kv_block_state_bytes(src);
    for (int i = 0; i < NB * BS; i++)
        toks[i] = 1000 + i;
    int32_t ids[NB];
    kv_block_meta meta[NB];
    uint64_t parent = IDENTITY;
    for (int b = 0; b < NB; b++) {
        ids[b] = kv_pool_alloc(src);
        for (int l = 0; l < popts.n_layer; l++) {
            unsigned char *k = (unsigned char *)kv_pool_k_base(src, l) + (size_t)ids[b] * bb;
            unsigned char *v = (unsigned char *)kv_pool_v_base(src, l) + (size_t)ids[b] * bb;
            for (size_t i = 0; i < bb; i++) {
                k[i] = (unsigned char)(i * 31 + b + l);
                v[i] = (unsigned char)(i * 7 + b * 3 + l);
            }
        }
        uint64_t key = kv_block_key(parent, toks + b * BS, BS);
        meta[b] = (kv_block_meta){IDENTITY, parent, key, kv_block_checksum(src, ids[b], key),
                                  toks + b * BS};
        parent = key;
    }
    size_t bytes = (size_t)NB * state * (size_t)n_transfers;

    /* memcpy: the same bytes, buffer to buffer (one transfer's worth, n_transfers times) */
    size_t span = (size_t)NB * state;
    unsigned char *a = malloc(span), *c = malloc(span);
    if (!a || !c)
        die("memcpy buffers", ERR_NOMEM);
    memset(a, 1, span);
    memset(c, 2, span);
    double mc[RUNS], xf[RUNS];
    for (int run = 0; run < RUNS; run++) {
        double t0 = now_s();
        for (int t = 0; t < n_transfers; t++) {
            memcpy(c, a, span);
            a[t % span] ^= c[(t * 7919) % span]; /* keeps each copy live */
        }
        mc[run] = bytes / (now_s() - t0) / 1e9;
    }

    const kv_xfer_transport *tcp = kv_xfer_transport_find("tcp");
    rx x = {.dst = dst};
    if ((rc = tcp->listen("127.0.0.1:0", &x.l)))
        die("listen", rc);
    pthread_t th;
    pthread_create(&th, NULL, receiver, &x);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kv_xfer_listener_port(x.l));
    kv_xfer_conn *conn = NULL;
    if ((rc = tcp->connect(addr, &conn)))
        die("connect", rc);
    uint64_t xid = 0;
    for (int run = 0; run < RUNS; run++) {
        double t0 = now_s();
        for (int t = 0; t < n_transfers; t++) {
            kv_xfer_send_opts o = {.xfer_id = ++xid, .timeout_ms = 30000};
            kv_xfer_send *s = NULL;
            if ((rc = kv_xfer_send_create(conn, &o, &s)))
                die("send_create", rc);
            for (int b = 0; b < NB; b++)
                if ((rc = kv_xfer_send_block(s, src, ids[b], &meta[b], b == NB - 1, no_release,
                                             NULL)))
                    die("send_block", rc);
            while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
            }
            if (kv_xfer_send_state(s) != KV_XFER_COMPLETE)
                die("transfer", kv_xfer_send_error(s));
            kv_xfer_send_destroy(s);
        }
        xf[run] = bytes / (now_s() - t0) / 1e9;
    }
    pthread_join(th, NULL);
    if (x.rc)
        die("receiver", x.rc);
    qsort(mc, RUNS, sizeof mc[0], cmp_d);
    qsort(xf, RUNS, sizeof xf[0], cmp_d);
    printf("bench_xfer: %d transfers x %d blocks x %zu KiB (%.1f MiB per run), median of %d\n",
           n_transfers, NB, state / 1024, bytes / 1048576.0, RUNS);
    printf("  memcpy            %7.2f GB/s\n", mc[RUNS / 2]);
    printf("  kv_xfer tcp       %7.2f GB/s  (%.1f%% of memcpy; encode + send + recv + decode + "
           "verify)\n",
           xf[RUNS / 2], 100.0 * xf[RUNS / 2] / mc[RUNS / 2]);
    kv_xfer_conn_destroy(conn);
    kv_xfer_listener_destroy(x.l);
    kv_pool_destroy(src);
    kv_pool_destroy(dst);
    free(a);
    free(c);
    return 0;
}
