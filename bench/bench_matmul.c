/* SPDX-License-Identifier: MIT */
/*
 * bench_matmul: kernel micro-benchmark for tuning (not a test): the roofline probe, then matmul
 * throughput on the synthetic 0.5b model's shapes for M = 1, 32, 256 and each weight type, as a
 * fraction of the measured roofline.
 *   make && cc -O2 -Isrc bench/bench_matmul.c build/release/libverity.a -lm -pthread -lpcre2-8 \
 *       -lcurl -lxxhash -lhiredis -o /tmp/bm
 *   /tmp/bm [threads [type]]
 * BM_05B=1: the forward pass's own matrices instead (Q+K+V 1152 x 896, O 896 x 896, gate+up
 * 9728 x 896, down 896 x 4864, activation rows K apart), for F16/F32/BF16 only.
 * BM_MS=1,2,3,...: these row counts M instead (the few-row verification steps of speculative
 * decoding), each with 20 repetitions. BM_CPU=1 (one thread only): time by the thread's CPU time,
 * not the wall clock, so a busy shared machine's preemptions do not count (its cache and memory
 * contention still do).
 */
#include "base/clock.h"
#include "base/pool.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "kernels/kn_roofline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    kn_mat *w[64];
    int nw;
    bool own_ldx; /* activation rows K apart (BM_05B) rather than 4864 */
    kn_act a;
    int64_t m;
    float *y;
    void *scratch[8];
    kn_isa isa;
} bm_ctx;

static int64_t bm_now_ns(bool cpu) {
    if (!cpu)
        return clock_now_ns();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void bm_run(void *vctx, int ith, int nth) {
    bm_ctx *c = vctx;
    for (int i = 0; i < c->nw; i++) {
        kn_act a = c->a;
        if (c->own_ldx)
            a.ldx = kn_mat_k(c->w[i]);
        kn_matmul(c->w[i], &a, c->m, c->y, kn_mat_n(c->w[i]), ith, nth, c->scratch[ith]);
    }
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    pool *p;
    pool_create(nt, &p);
    kn_isa isa;
    kn_isa_select(&isa);
    double bw = kn_roofline_read_gbs(p, (size_t)1 << 30, 5, isa);
    double fl = kn_roofline_fma_gflops(p, 3, isa);
    printf("isa %s threads %d: read %.1f GB/s, fma %.1f GFLOP/s\n", kn_isa_name(isa), nt, bw, fl);
    int types[] = {GGUF_TYPE_F16,  GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0,
                   GGUF_TYPE_Q5_1, GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K, GGUF_TYPE_F32};
    int n_types = (int)(sizeof types / sizeof *types);
    /* a type name after the thread count restricts the run to that type */
    const char *only = argc > 2 ? argv[2] : NULL;
    /* K-quant rows must be multiples of 256: the 0.5b shapes with K = 896 become K = 1024 for
     * every type, so all types run the same shapes (qwen2-0.5b's K = 896 uses the Q5_0 / Q8_0
     * fallback in real files) */
    int64_t shapes[4][2] = {{4864, 1024}, {1024, 4864}, {1024, 1024}, {0, 0}};
    int n_shapes = 3;
    bool own = getenv("BM_05B") != NULL;
    if (own) {
        int64_t s05[4][2] = {{1152, 896}, {896, 896}, {9728, 896}, {896, 4864}};
        memcpy(shapes, s05, sizeof shapes);
        n_shapes = 4;
    }
    for (int ti = 0; ti < n_types; ti++) {
        if (only && kn_type_from_name(only) != types[ti])
            continue;
        bm_ctx c;
        memset(&c, 0, sizeof c);
        c.isa = isa;
        size_t bytes = 0;
        double flop_per_row = 0;
        /* BM_MATS matrices (default 4, L3-resident on this machine class; 36 or more exceed its
         * 260 MB L3, which is what decode at batch 1 sees) */
        if (own && types[ti] != GGUF_TYPE_F16 && types[ti] != GGUF_TYPE_F32 &&
            types[ti] != GGUF_TYPE_BF16)
            continue;
        c.own_ldx = own;
        int n_mats = getenv("BM_MATS") ? atoi(getenv("BM_MATS")) : 4;
        if (n_mats < 1 || n_mats > 64)
            n_mats = 4;
        for (int l = 0; l < n_mats; l++) {
            int64_t n = shapes[l % n_shapes][0], k = shapes[l % n_shapes][1];
            int64_t rb = kn_type_row_bytes(types[ti], k);
            void *d = calloc((size_t)(rb * n), 1);
            float *f = malloc((size_t)k * 4);
            for (int64_t r = 0; r < n; r++) {
                for (int64_t j = 0; j < k; j++)
                    f[j] = (float)((r * 31 + j * 17) % 97) * 0.001f - 0.05f;
                kn_quantize_rows(types[ti], f, 1, k, (char *)d + r * rb);
            }
            free(f);
            kn_mat_create(types[ti], d, n, k, isa, &c.w[c.nw]);
            free(d);
            bytes += kn_mat_bytes(c.w[c.nw]);
            flop_per_row += 2.0 * (double)n * (double)k;
            c.nw++;
        }
        printf("type %s: %.1f MB of weights per pass\n", kn_type_name(types[ti]), bytes / 1e6);
        int64_t ms[32] = {1, 32, 256};
        int n_ms = getenv("BM_M1") ? 1 : 3;
        if (getenv("BM_MS")) {
            n_ms = 0;
            for (const char *s = getenv("BM_MS"); *s && n_ms < 32;) {
                char *e;
                long v = strtol(s, &e, 10);
                if (e == s || v < 1 || v > 256)
                    break;
                ms[n_ms++] = v;
                s = *e == ',' ? e + 1 : e;
            }
        }
        for (int mi = 0; mi < n_ms; mi++) {
            c.m = ms[mi];
            int64_t kmax = 4864, nmax = own ? 9728 : 4864; /* widest K and N */
            c.a.x = calloc((size_t)(c.m * kmax), 4);
            for (int64_t i = 0; i < c.m * kmax; i++)
                ((float *)c.a.x)[i] = (float)(i % 13) * 0.1f;
            c.a.ldx = kmax;
            c.y = calloc((size_t)(c.m * nmax), 4);
            for (int t = 0; t < nt; t++)
                c.scratch[t] = aligned_alloc(64, kn_matmul_scratch_bytes());
            /* quantized activations are per matrix K; quantize with the largest K for timing */
            c.a.q = calloc((size_t)(c.m * kmax), 1);
            c.a.qd = calloc((size_t)(c.m * kmax / 32), 4);
            c.a.qs = calloc((size_t)(c.m * kmax / 32), 4);
            c.a.qs16 = calloc((size_t)(c.m * kmax / 32), 4);
            kn_act_quantize(&c.a, kmax, 0, c.m, isa);
            c.a.ldx = kmax;
            int reps = getenv("BM_MS") ? 20 : c.m == 1 ? 50 : c.m == 32 ? 10 : 3;
            double best = 1e9;
            for (int r = 0; r < reps; r++) {
                bool cpu = nt == 1 && getenv("BM_CPU") != NULL;
                int64_t t0 = bm_now_ns(cpu);
                pool_run(p, bm_run, &c);
                double dt = (double)(bm_now_ns(cpu) - t0) * 1e-9;
                if (dt < best)
                    best = dt;
            }
            double gbs = bytes / best * 1e-9, gfl = flop_per_row * (double)c.m / best * 1e-9;
            printf(
                "  M=%4lld: %7.3f ms  %6.1f GB/s (%3.0f%% of bw)  %6.1f GFLOP/s (%3.0f%% of fma)\n",
                (long long)c.m, best * 1e3, gbs, 100 * gbs / bw, gfl, 100 * gfl / fl);
            free((void *)c.a.x);
            free(c.y);
            free(c.a.q);
            free(c.a.qd);
            free(c.a.qs);
            free(c.a.qs16);
            for (int t = 0; t < nt; t++)
                free(c.scratch[t]);
        }
        for (int i = 0; i < c.nw; i++)
            kn_mat_destroy(c.w[i]);
    }
    pool_destroy(p);
    return 0;
}
