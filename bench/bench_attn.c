/* SPDX-License-Identifier: MIT */
/*
 * bench_attn: one thread's attention kernels (kn_attn_row per query head, kn_attn_rows per KV
 * head's group) over a paged KV cache, per ISA, as a fraction of the same thread's measured fp32
 * FMA peak at that ISA (P5; kn_roofline with a one-thread pool). Not part of the test suite.
 * Build, run:
 *
 *   make && cc -O2 -Isrc bench/bench_attn.c build/release/libverity.a -lm -pthread -lxxhash \
 *       -lcurl -lhiredis -lpcre2-8 -o build/release/bench_attn && build/release/bench_attn [N_POS]
 *
 * The geometry is the synthetic 0.5b model's (head_dim 64, 14 query heads over 2 KV heads, F16
 * KV in 16-position blocks; F32 KV too), one query row per head attending over N_POS (2048)
 * positions, chunk 64. Work = 2 FMAs per element of a head row per position (the score's and the
 * value pass's), 4 * head_dim flops per (query head, position). Each case runs REPS times; the
 * best is printed (a shared machine only ever slows a run down), in ns per (query head,
 * position) and GFLOP/s, then the ratios per-head / grouped. Linked against an older
 * libverity.a, the same source times that revision's kernels (kn_attn_rows falls back to per-head
 * kn_attn_row where a revision has no grouped kernel for the ISA).
 */
#include "base/clock.h"
#include "base/pool.h"
#include "kernels/kn.h"
#include "kernels/kn_roofline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HD = 64, NQ = 14, NKV = 2, BS = 16, CHUNK = 64, REPS = 15 };

static uint64_t ba_state = 0x9E3779B97F4A7C15ULL;
static float ba_rnd(void) {
    ba_state = ba_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((ba_state >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
}

/* Best-of-REPS seconds of all query heads' attention: grouped (kn_attn_rows per KV head) or per
 * head (kn_attn_row). */
static double ba_time(const float *q, const kn_attn_kv *kv, int64_t n_pos, bool grouped, kn_isa isa,
                      float *scratch, float *out) {
    const int64_t g = NQ / NKV;
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = clock_now_s();
        for (int64_t kvh = 0; kvh < NKV; kvh++) {
            if (grouped)
                kn_attn_rows(q + kvh * g * HD, g, kv, kvh, HD, n_pos, 0.125f, CHUNK, scratch,
                             out + kvh * g * HD, isa);
            else
                for (int64_t h = 0; h < g; h++)
                    kn_attn_row(q + (kvh * g + h) * HD, kv, kvh, HD, n_pos, 0.125f, CHUNK, scratch,
                                out + (kvh * g + h) * HD, isa);
        }
        double t = clock_now_s() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int64_t n_pos = argc > 1 ? atoll(argv[1]) : 2048;
    if (n_pos < 1 || n_pos > 1 << 20) {
        fprintf(stderr, "bench_attn: N_POS %s out of range 1..1048576\n", argv[1]);
        return 2;
    }
    int64_t nb = (n_pos + BS - 1) / BS, stride = NKV * HD;
    float *q = malloc(sizeof(float) * NQ * HD), *out = malloc(sizeof(float) * NQ * HD);
    float *scratch = malloc(sizeof(float) * kn_attn_scratch_floats(NQ / NKV, HD, CHUNK));
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
    float *row = malloc(sizeof(float) * (size_t)stride);
    pool *p1 = NULL;
    if (!q || !out || !scratch || !table || !row || pool_create(1, &p1) < 0) {
        fprintf(stderr, "bench_attn: out of memory\n");
        return 2;
    }
    for (int64_t i = 0; i < NQ * HD; i++)
        q[i] = ba_rnd();
    for (int64_t b = 0; b < nb; b++) /* blocks out of order, as a pool hands them out */
        table[b] = (int32_t)((b * 7) % nb);
    if (nb % 7 == 0)
        for (int64_t b = 0; b < nb; b++)
            table[b] = (int32_t)b;
    printf("bench_attn: head_dim %d, %d query heads / %d KV heads, %lld positions, chunk %d, 1 "
           "thread, best of %d\n",
           HD, NQ, NKV, (long long)n_pos, CHUNK, REPS);
    printf(
        "isa    | kv  | per-head ns/pair | GFLOP/s | of FMA | grouped ns/pair | GFLOP/s | of FMA "
        "| per-head/grouped\n");
    const kn_isa isas[] = {KN_ISA_SCALAR, KN_ISA_AVX2, KN_ISA_AVX512};
    for (int ii = 0; ii < 3; ii++) {
        kn_isa isa = isas[ii];
        if (!kn_isa_available(isa))
            continue;
        double peak = 0; /* the best of 5 measurements: contention only lowers it */
        for (int k = 0; k < 5; k++) {
            double pk = kn_roofline_fma_gflops(p1, 10, isa);
            if (pk > peak)
                peak = pk;
        }
        for (int f16 = 1; f16 >= 0; f16--) {
            size_t esz = f16 ? 2 : 4, block_bytes = (size_t)(BS * stride) * esz;
            unsigned char *kp = malloc((size_t)nb * block_bytes),
                          *vp = malloc((size_t)nb * block_bytes);
            if (!kp || !vp) {
                fprintf(stderr, "bench_attn: out of memory\n");
                return 2;
            }
            for (int64_t pos = 0; pos < n_pos; pos++) {
                size_t off =
                    (size_t)table[pos / BS] * block_bytes + (size_t)((pos % BS) * stride) * esz;
                for (int64_t e = 0; e < stride; e++)
                    row[e] = ba_rnd();
                kn_store_kv(kp + off, row, stride, f16, KN_ISA_SCALAR);
                for (int64_t e = 0; e < stride; e++)
                    row[e] = ba_rnd();
                kn_store_kv(vp + off, row, stride, f16, KN_ISA_SCALAR);
            }
            kn_attn_kv kv = {.k_base = kp,
                             .v_base = vp,
                             .block_bytes = block_bytes,
                             .table = table,
                             .block_size = BS,
                             .kv_stride = stride,
                             .f16 = f16,
                             .window = 0};
            double pairs = (double)NQ * (double)n_pos, flops = pairs * 4.0 * HD;
            double tr = ba_time(q, &kv, n_pos, false, isa, scratch, out);
            double tg = ba_time(q, &kv, n_pos, true, isa, scratch, out);
            printf("%-6s | %s | %16.2f | %7.2f | %5.1f%% | %15.2f | %7.2f | %5.1f%% | %.2fx\n",
                   kn_isa_name(isa), f16 ? "f16" : "f32", tr / pairs * 1e9, flops / tr * 1e-9,
                   100.0 * flops / tr * 1e-9 / peak, tg / pairs * 1e9, flops / tg * 1e-9,
                   100.0 * flops / tg * 1e-9 / peak, tr / tg);
            free(kp);
            free(vp);
        }
        printf("       (one thread's measured fp32 FMA peak at %s: %.1f GFLOP/s)\n",
               kn_isa_name(isa), peak);
    }
    pool_destroy(p1);
    free(q);
    free(out);
    free(scratch);
    free(table);
    free(row);
    return 0;
}
