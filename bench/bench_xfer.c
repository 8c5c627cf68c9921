/* SPDX-License-Identifier: MIT */
/*
 * bench_xfer: KV transfer throughput (disagg/kv_xfer.h) over each transport on loopback, as a
 * fraction of memcpy bandwidth measured in the same run, and the latency of a 1-block transfer.
 * Not part of the test suite. Build, run:
 *
 *   make && cc -O2 -Isrc bench/bench_xfer.c build/release/libverity.a -lm -pthread -lxxhash \
 *       -lucp -lucs -o build/release/bench_xfer && build/release/bench_xfer [transfers] [tcp,ucx]
 *
 * Throughput: a sender (this thread) and a receiver (another thread, its own connection per
 * phase) move `transfers` transfers of 64 blocks each; a block is 16 positions x 16 layers x
 * kv_dim 1024 in F16 for K and V (1 MiB). kv_xfer_send_block writes each block (in place, the
 * default: straight from the pool; block-major pools: the payload as one write) and the receiver
 * lands it in its pool block and verifies it (in place: once, where it lies; the frame path:
 * through a blob, kv_block_decode) before the ACK; the consumer takes and frees the blocks.
 * Throughput = payload
 * bytes moved / wall time. The memcpy figure copies the same number of bytes between two buffers
 * of one transfer's size, in the same process. Each of the 5 rounds measures memcpy, then each
 * transport in turn (interleaved, so load drifts hit all of them alike); the medians are printed.
 *
 * Pools: both are created with the layout the flag kv-pool-block-major selects (environment
 * VERITY_KV_POOL_BLOCK_MAJOR=0|1; the line after the heading says which), and the transfer path
 * with kv-xfer-inplace (VERITY_KV_XFER_INPLACE).
 *
 * Latency: 200 transfers of 1 block each, one after another on one connection (send, the
 * receiver verifies and ACKs, the sender sees COMPLETE), for the 1 MiB block and for a 4 KiB block
 * (1 layer x kv_dim 64); the median and the 90th percentile per transfer are printed.
 *
 * CPU: the process's CPU time (every thread) per GB moved, beside memcpy's: on a machine where
 * other work takes the cores, wall-clock bandwidth mostly measures the share of CPU the two
 * threads got; CPU per GB measures the work a transfer costs (a wait that spins on UCX's progress
 * counts too).
 *
 * What UCX picked is in its log: run with UCX_LOG_LEVEL=info and read the "ep_cfg" lines
 * ("tag(sysv/memory cma/memory)": eager messages through System V shared memory, rendezvous by
 * cma, one copy by process_vm_readv). Wall time: on a machine shared with other work, every figure
 * and the ratios move.
 */
#include "base/err.h"
#include "base/flags.h"
#include "disagg/kv_xfer.h"
#include "kv/kv_block.h"
#include "kv/kv_pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NB = 64, BS = 16, RUNS = 5, LAT_N = 200 };
#define IDENTITY 42ULL

static int32_t toks[NB * BS];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds used by the whole process (every thread: the sender, the receiver, UCX's). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

/* A source pool with NB sealed blocks and an empty destination pool of one geometry. */
typedef struct pools {
    kv_pool *src, *dst;
    int32_t ids[NB];
    kv_block_meta meta[NB];
} pools;

static void pools_make(pools *p, const kv_pool_opts *o) {
    int rc = kv_pool_create(o, &p->src);
    if (rc || (rc = kv_pool_create(o, &p->dst)))
        die("pool", rc);
    kv_pool_prefault(p->src); /* as a server's pools are: no page faults in the measured copies */
    kv_pool_prefault(p->dst);
    size_t bb = kv_pool_block_bytes(p->src), st = kv_pool_kv_stride(p->src);
    uint64_t parent = IDENTITY;
    for (int b = 0; b < NB; b++) {
        p->ids[b] = kv_pool_alloc(p->src);
        for (int l = 0; l < o->n_layer; l++) {
            unsigned char *k = (unsigned char *)kv_pool_k_base(p->src, l) + (size_t)p->ids[b] * st;
            unsigned char *v = (unsigned char *)kv_pool_v_base(p->src, l) + (size_t)p->ids[b] * st;
            for (size_t i = 0; i < bb; i++) {
                k[i] = (unsigned char)(i * 31 + b + l);
                v[i] = (unsigned char)(i * 7 + b * 3 + l);
            }
        }
        uint64_t key = kv_block_key(parent, toks + b * BS, BS);
        p->meta[b] = (kv_block_meta){IDENTITY, parent, key,
                                     kv_block_checksum(p->src, p->ids[b], key), toks + b * BS};
        parent = key;
    }
}

/* One phase: n_transfers transfers of n_blocks blocks over a fresh connection of transport tp. */
typedef struct phase {
    const kv_xfer_transport *tp;
    kv_xfer_listener *l;
    pools *p;
    int n_transfers, n_blocks, rc;
    int64_t n_verified, n_overlapped; /* the receiver's, over the phase */
} phase;

static void *receiver(void *arg) {
    phase *x = arg;
    kv_xfer_conn *c = NULL;
    x->rc = x->tp->accept(x->l, 30000, &c);
    for (int t = 0; x->rc == 0 && t < x->n_transfers; t++) {
        kv_xfer_recv_opts o = {.xfer_id = (uint64_t)t + 1,
                               .identity = IDENTITY,
                               .toks = toks,
                               .n_toks = (int64_t)x->n_blocks * BS,
                               .timeout_ms = 30000};
        kv_xfer_recv *r = NULL;
        x->rc = kv_xfer_recv_create(c, x->p->dst, &o, &r);
        if (x->rc)
            break;
        while (kv_xfer_recv_step(r) == KV_XFER_OPEN) {
        }
        int32_t ids[NB];
        int n = kv_xfer_recv_take(r, ids, NB);
        if (n != x->n_blocks)
            x->rc = n < 0 ? n : kv_xfer_recv_error(r);
        for (int i = 0; i < n; i++)
            kv_block_unref(x->p->dst, ids[i]);
        kv_xfer_stats st = kv_xfer_recv_stats(r);
        x->n_verified += st.n_verified;
        x->n_overlapped += st.n_overlapped;
        if (x->rc)
            fprintf(stderr, "bench_xfer: receiver: %s (%s)\n", err_name(x->rc), err_detail());
        kv_xfer_recv_destroy(r);
    }
    kv_xfer_conn_destroy(c);
    return NULL;
}

/* Runs a phase; returns its wall time (connection set-up excluded); the process's CPU seconds in
 * that time into *cpu; each transfer's time into per (NULL: not kept); the fraction of blocks
 * the receiver checksummed while the next one landed (kv-xfer-verify-overlap) into *overlap
 * (NULL: not kept). */
static double phase_run(const kv_xfer_transport *tp, pools *p, int n_transfers, int n_blocks,
                        double *per, double *cpu, double *overlap) {
    phase x = {.tp = tp, .p = p, .n_transfers = n_transfers, .n_blocks = n_blocks};
    int rc = tp->listen("127.0.0.1:0", &x.l);
    if (rc)
        die("listen", rc);
    pthread_t th;
    pthread_create(&th, NULL, receiver, &x);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", kv_xfer_listener_port(x.l));
    kv_xfer_conn *conn = NULL;
    if ((rc = tp->connect(addr, &conn)))
        die("connect", rc);
    double t0 = now_s(), c0 = cpu_s();
    for (int t = 0; t < n_transfers; t++) {
        double t1 = now_s();
        kv_xfer_send_opts o = {.xfer_id = (uint64_t)t + 1, .timeout_ms = 30000};
        kv_xfer_send *s = NULL;
        if ((rc = kv_xfer_send_create(conn, &o, &s)))
            die("send_create", rc);
        for (int b = 0; b < n_blocks; b++)
            if ((rc = kv_xfer_send_block(s, p->src, p->ids[b], &p->meta[b], b == n_blocks - 1,
                                         no_release, NULL)))
                die("send_block", rc);
        while (kv_xfer_send_step(s) == KV_XFER_OPEN) {
        }
        if (kv_xfer_send_state(s) != KV_XFER_COMPLETE)
            die("transfer", kv_xfer_send_error(s));
        kv_xfer_send_destroy(s);
        if (per)
            per[t] = now_s() - t1;
    }
    double dt = now_s() - t0;
    if (cpu)
        *cpu = cpu_s() - c0;
    pthread_join(th, NULL);
    if (x.rc)
        die("receiver", x.rc);
    if (overlap)
        *overlap = x.n_verified ? (double)x.n_overlapped / (double)x.n_verified : 0;
    kv_xfer_conn_destroy(conn);
    kv_xfer_listener_destroy(x.l);
    return dt;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { MAX_TP = 4 };

int main(int argc, char **argv) {
    int n_transfers = argc > 1 ? atoi(argv[1]) : 4;
    if (n_transfers < 1)
        n_transfers = 1;
    char list[64];
    snprintf(list, sizeof list, "%s", argc > 2 ? argv[2] : "tcp,ucx");
    const kv_xfer_transport *tps[MAX_TP];
    int n_tp = 0;
    for (char *save = NULL, *n = strtok_r(list, ",", &save); n && n_tp < MAX_TP;
         n = strtok_r(NULL, ",", &save))
        if (!(tps[n_tp++] = kv_xfer_transport_find(n)))
            die("transport", ERR_NOTFOUND);
    for (int i = 0; i < NB * BS; i++)
        toks[i] = 1000 + i;
    kv_pool_opts big = {
        .n_layer = 16, .kv_dim = 1024, .block_size = BS, .n_blocks = NB, .f16 = true};
    kv_pool_opts small = {
        .n_layer = 1, .kv_dim = 64, .block_size = BS, .n_blocks = NB, .f16 = true};
    pools pb, ps;
    pools_make(&pb, &big);
    pools_make(&ps, &small);
    size_t state = kv_block_state_bytes(pb.src), span = (size_t)NB * state;
    size_t bytes = span * (size_t)n_transfers;
    unsigned char *a = malloc(span), *c = malloc(span);
    if (!a || !c)
        die("memcpy buffers", ERR_NOMEM);
    memset(a, 1, span);
    memset(c, 2, span);
    double mc[RUNS], mc_cpu[RUNS], xf[MAX_TP][RUNS], ratio[MAX_TP][RUNS], xcpu[MAX_TP][RUNS];
    double ovl[MAX_TP][RUNS];
    for (int run = 0; run < RUNS; run++) {
        double t0 = now_s(), c0 = cpu_s();
        for (int t = 0; t < n_transfers; t++) {
            memcpy(c, a, span);
            a[t % span] ^= c[(t * 7919) % span]; /* keeps each copy live */
        }
        mc[run] = bytes / (now_s() - t0) / 1e9;
        mc_cpu[run] = (cpu_s() - c0) / (bytes / 1e9);
        for (int k = 0; k < n_tp; k++) {
            double cpu = 0;
            xf[k][run] =
                bytes / phase_run(tps[k], &pb, n_transfers, NB, NULL, &cpu, &ovl[k][run]) / 1e9;
            ratio[k][run] = xf[k][run] / mc[run];
            xcpu[k][run] = cpu / (bytes / 1e9);
        }
    }
    qsort(mc, RUNS, sizeof mc[0], cmp_d);
    qsort(mc_cpu, RUNS, sizeof mc_cpu[0], cmp_d);
    printf("bench_xfer: %d transfers x %d blocks x %zu KiB (%.1f MiB per round), median of %d "
           "rounds\n",
           n_transfers, NB, state / 1024, bytes / 1048576.0, RUNS);
    printf("  pool layout %s (kv-pool-block-major), kv-xfer-inplace %d\n",
           kv_pool_block_major(pb.src) ? "block-major" : "layer-major",
           (int)flags_int(FLAG_KV_XFER_INPLACE));
    printf("  memcpy            %7.2f GB/s  CPU %6.3f s/GB\n", mc[RUNS / 2], mc_cpu[RUNS / 2]);
    for (int k = 0; k < n_tp; k++) {
        qsort(xf[k], RUNS, sizeof xf[k][0], cmp_d);
        qsort(ratio[k], RUNS, sizeof ratio[k][0], cmp_d);
        qsort(xcpu[k], RUNS, sizeof xcpu[k][0], cmp_d);
        printf("  kv_xfer %-9s %7.2f GB/s  (%.1f%% of memcpy, median of the rounds' ratios "
               "%.1f%%..%.1f%%..%.1f%%)\n",
               tps[k]->name, xf[k][RUNS / 2], 100.0 * xf[k][RUNS / 2] / mc[RUNS / 2],
               100.0 * ratio[k][0], 100.0 * ratio[k][RUNS / 2], 100.0 * ratio[k][RUNS - 1]);
        printf("    CPU %6.3f s/GB (sender + receiver + library threads; memcpy's CPU per GB is "
               "%.1f%% of it)\n",
               xcpu[k][RUNS / 2], 100.0 * mc_cpu[RUNS / 2] / xcpu[k][RUNS / 2]);
        qsort(ovl[k], RUNS, sizeof ovl[k][0], cmp_d);
        printf("    kv-xfer-verify-overlap %d: %.1f%% of blocks checksummed while the next one "
               "landed (median round)\n",
               (int)flags_int(FLAG_KV_XFER_VERIFY_OVERLAP), 100.0 * ovl[k][RUNS / 2]);
    }
    static double per[LAT_N];
    pools *lp[2] = {&pb, &ps};
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < n_tp; k++) {
            phase_run(tps[k], lp[g], LAT_N, 1, per, NULL, NULL);
            qsort(per, LAT_N, sizeof per[0], cmp_d);
            printf("  1-block transfer  %-4s %6zu KiB block: median %8.1f us, p90 %8.1f us\n",
                   tps[k]->name, kv_block_state_bytes(lp[g]->src) / 1024, per[LAT_N / 2] * 1e6,
                   per[LAT_N * 9 / 10] * 1e6);
        }
    kv_pool_destroy(pb.src);
    kv_pool_destroy(pb.dst);
    kv_pool_destroy(ps.src);
    kv_pool_destroy(ps.dst);
    free(a);
    free(c);
    return 0;
}
