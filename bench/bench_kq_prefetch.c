/* SPDX-License-Identifier: MIT */
/*
 * bench_kq_prefetch: A/B of a matmul toggle in one process (not a test), by default q6k-prefetch.
 * On a shared VM two commands a minute apart see different machines, so this makes two copies of
 * the same matrices, one with the toggle at A (default 0) and one at VALUE, in the 1b-kq shape's
 * layer shapes (16 layers of Q, K, V, O, gate, up, down: 1024/256/256/1024/2816/2816 x 1024 and
 * 1024 x 2816, more than the L2), and alternates one-row passes over each, ROUNDS times; it
 * prints each side's median GB/s and the median (and quartiles) of the per-round speed ratio.
 *   make && cc -O2 -Isrc bench/bench_kq_prefetch.c build/release/libverity.a -lm -pthread \
 *       -o /tmp/bkp
 *   /tmp/bkp q6_K 2048 40
 *   BKP_FLAG=kq-prefetch BKP_CPU=1 /tmp/bkp q4_K 2048 16      (one thread, by CPU time)
 * BKP_MODE_A / BKP_MODE_B: how side A / B splits each matrix between the threads (with BKP_A the
 * same value as VALUE, an A/B of the split alone): halves (the default: one pool_run, thread ith
 * takes half ith of every matrix), static:N (N chunks, thread ith takes chunks ith, ith + nth,
 * ...), range:N (N chunks, thread ith takes the contiguous ith range of them), for:N (one
 * pool_for of N chunks per matrix, as the forward pass's matmul phases). BKP_LAYERS=N: N layers
 * rather than 16 (160: about 1 GB of Q4_K per side, more than any L3, so every pass reads from
 * memory). BKP_MATS=N: the first N matrices only (1: attn_q's 1024 x 1024, L2-resident: the
 * kernel's instruction work rather than the memory stream). BKP_FLAG names another toggle
 * (kq-prefetch, q8-prefetch, mm-prefetch-l2, kq-q4k-pair, ...), BKP_A its value on side A.
 * BKP_CPU=1: one thread, timed by the process's CPU time, so a busy machine's preemptions do not
 * count (its cache and memory contention still do). TYPE may be Q8_0 too.
 */
#include "base/clock.h"
#include "base/flags.h"
#include "base/pool.h"
#include "kernels/kn.h"
#include "kernels/kn_type_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* the wall clock, or with BKP_CPU the process's CPU time */
static int64_t bkp_now_ns(bool cpu) {
    if (!cpu)
        return clock_now_ns();
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

#define BKP_LAYERS 16
#define BKP_MATS   (BKP_LAYERS * 7)
#define BKP_MAX    (160 * 7) /* BKP_LAYERS=160: about 1 GB of Q4_K per side */
#define BKP_K      2816

typedef struct bkp_ctx {
    kn_mat *w[BKP_MAX];
    int chunks;      /* BKP_MODE static:N / range:N: chunks per matrix (0: halves) */
    bool interleave; /* static:N: thread ith takes chunks ith, ith + nth, ... */
    int n_mats;      /* BKP_MATS: the first n of the matrices (1: attn_q alone, L2-resident) */
    kn_act a;
    float *y; /* [2816] */
} bkp_ctx;

static void bkp_run(void *v, int ith, int nth) {
    bkp_ctx *c = v;
    for (int i = 0; i < c->n_mats; i++) {
        int n = c->chunks;
        if (!n) /* halves */
            kn_matmul(c->w[i], &c->a, 1, c->y, kn_mat_n(c->w[i]), ith, nth, NULL);
        else if (c->interleave) /* every nth chunk, no atomics */
            for (int ch = ith; ch < n; ch += nth)
                kn_matmul(c->w[i], &c->a, 1, c->y, kn_mat_n(c->w[i]), ch, n, NULL);
        else /* a contiguous range of chunks */
            for (int ch = ith * n / nth; ch < (ith + 1) * n / nth; ch++)
                kn_matmul(c->w[i], &c->a, 1, c->y, kn_mat_n(c->w[i]), ch, n, NULL);
    }
}

/* BKP_MODE for:N: one pool_for per matrix, as the forward pass's matmul phases */
typedef struct bkp_mat_arg {
    bkp_ctx *c;
    int i;
} bkp_mat_arg;

static void bkp_chunk(void *v, int64_t ci, int64_t n, int thread) {
    bkp_mat_arg *a = v;
    (void)thread;
    kn_matmul(a->c->w[a->i], &a->c->a, 1, a->c->y, kn_mat_n(a->c->w[a->i]), (int)ci, (int)n, NULL);
}

static void bkp_run_phases(pool *p, bkp_ctx *c, int chunks) {
    for (int i = 0; i < c->n_mats; i++) {
        bkp_mat_arg a = {c, i};
        int64_t n = chunks < kn_mat_n_units(c->w[i]) ? chunks : kn_mat_n_units(c->w[i]);
        pool_for(p, n, bkp_chunk, &a);
    }
}

/* One pass over c's matrices in mode: halves (the default), static:N, range:N or for:N. */
static void bkp_pass(pool *p, bkp_ctx *c, const char *mode) {
    int n = 0;
    if (mode && sscanf(mode, "for:%d", &n) == 1 && n > 0) {
        bkp_run_phases(p, c, n);
        return;
    }
    c->chunks = 0;
    if (mode && (sscanf(mode, "static:%d", &n) == 1 || sscanf(mode, "range:%d", &n) == 1)) {
        c->chunks = n > 0 ? n : 0;
        c->interleave = mode[0] == 's';
    }
    pool_run(p, bkp_run, c);
}

static int bkp_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *flag = getenv("BKP_FLAG") ? getenv("BKP_FLAG") : "q6k-prefetch";
    const char *val_a = getenv("BKP_A") ? getenv("BKP_A") : "0";
    const bool cpu = getenv("BKP_CPU") != NULL;
    if (argc < 3) {
        fprintf(stderr, "usage: bench_kq_prefetch TYPE PF [ROUNDS]\n");
        return 2;
    }
    int type = kn_type_from_name(argv[1]);
    int rounds = argc > 3 ? atoi(argv[3]) : 40;
    if (type < 0 || (kn_type_block_size(type) != 256 && type != GGUF_TYPE_Q8_0) || rounds < 4 ||
        rounds > 1000 || flags_set(flag, argv[2]) || flags_set(flag, val_a)) {
        fprintf(stderr,
                "bench_kq_prefetch: a K-quant type or q8_0, a value of %s, 4-1000 "
                "rounds\n",
                flag);
        return 2;
    }
    kn_isa isa;
    kn_isa_select(&isa);
    pool *p;
    if (pool_create(cpu ? 1 : 2, &p))
        return 1;
    static const int64_t shapes[7][2] = {{1024, 1024}, {256, 1024},  {256, 1024}, {1024, 1024},
                                         {2816, 1024}, {2816, 1024}, {1024, 2816}};
    static bkp_ctx ca, cb;
    size_t bytes = 0;
    const char *mode_a = getenv("BKP_MODE_A"), *mode_b = getenv("BKP_MODE_B");
    int layers = getenv("BKP_LAYERS") ? atoi(getenv("BKP_LAYERS")) : BKP_LAYERS;
    if (layers < 1 || layers * 7 > BKP_MAX)
        layers = BKP_LAYERS;
    int n_mats = getenv("BKP_MATS") ? atoi(getenv("BKP_MATS")) : layers * 7;
    if (n_mats < 1 || n_mats > layers * 7)
        n_mats = layers * 7;
    ca.n_mats = cb.n_mats = n_mats;
    unsigned char *data[7];
    for (int i = 0; i < 7; i++) { /* each layer shape quantized once, packed into every copy */
        int64_t n = shapes[i][0], k = shapes[i][1];
        int64_t rb = kn_type_row_bytes(type, k);
        data[i] = malloc((size_t)(rb * n));
        float *f = malloc((size_t)k * sizeof(float));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t j = 0; j < k; j++)
                f[j] = (float)((r * 31 + j * 17 + i) % 97) * 0.001f - 0.05f;
            kn_quantize_rows(type, f, 1, k, data[i] + r * rb);
        }
        free(f);
    }
    for (int i = 0; i < n_mats; i++) {
        int64_t n = shapes[i % 7][0], k = shapes[i % 7][1];
        flags_set(flag, val_a);
        kn_mat_create(type, data[i % 7], n, k, isa, &ca.w[i]);
        flags_set(flag, argv[2]);
        kn_mat_create(type, data[i % 7], n, k, isa, &cb.w[i]);
        bytes += kn_mat_bytes(ca.w[i]);
    }
    for (int i = 0; i < 7; i++)
        free(data[i]);
    float *x = calloc(BKP_K, sizeof(float));
    for (int i = 0; i < BKP_K; i++)
        x[i] = (float)(i % 13) * 0.1f - 0.6f;
    kn_act a = {.x = x,
                .ldx = BKP_K,
                .q = calloc(BKP_K, 1),
                .qd = calloc(BKP_K / 32, sizeof(float)),
                .qs = calloc(BKP_K / 32, sizeof(int32_t)),
                .qs16 = calloc(BKP_K / 32, sizeof(int32_t))};
    kn_act_quantize(&a, BKP_K, 0, 1, isa);
    ca.a = cb.a = a;
    ca.y = cb.y = calloc(BKP_K, sizeof(float));
    double *ta = malloc((size_t)rounds * sizeof(double)),
           *tb = malloc((size_t)rounds * sizeof(double));
    double *ratio = malloc((size_t)rounds * sizeof(double));
    for (int r = -2; r < rounds; r++) { /* two warm-up rounds */
        int64_t t0 = bkp_now_ns(cpu);
        bkp_pass(p, &ca, mode_a);
        int64_t t1 = bkp_now_ns(cpu);
        bkp_pass(p, &cb, mode_b);
        int64_t t2 = bkp_now_ns(cpu);
        if (r >= 0) {
            ta[r] = (double)(t1 - t0) * 1e-9;
            tb[r] = (double)(t2 - t1) * 1e-9;
            ratio[r] = ta[r] / tb[r];
        }
    }
    qsort(ta, (size_t)rounds, sizeof(double), bkp_cmp);
    qsort(tb, (size_t)rounds, sizeof(double), bkp_cmp);
    qsort(ratio, (size_t)rounds, sizeof(double), bkp_cmp);
    printf("%s, %.1f MB, one row, %s, %d rounds: %s %s %.2f GB/s, %s %s "
           "%.2f GB/s (medians); speed ratio per round %.3f (quartiles %.3f-%.3f)\n",
           argv[1], (double)bytes / 1e6, cpu ? "1 thread, CPU time" : "2 threads", rounds, flag,
           val_a, (double)bytes / ta[rounds / 2] * 1e-9, flag, argv[2],
           (double)bytes / tb[rounds / 2] * 1e-9, ratio[rounds / 2], ratio[rounds / 4],
           ratio[3 * rounds / 4]);
    return 0;
}
