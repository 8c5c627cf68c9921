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
 *
 * BA_SEQS=N (attn-prefetch's A/B): the grouped kernel at the best ISA over N sequences of N_POS
 * positions each (3000 x 272: 418 MB of F16 KV in 16-position blocks, beyond the L3), as a forward
 * pass's attention phase runs them: pool_for over the sequences on BA_THREADS threads (default 2),
 * each sequence's two KV heads in turn. Three modes alternate in one process, BA_REPS (9) times:
 * no prefetch hints, kv.prefetch (each chunk's successor), and kv.prefetch with the next unit's
 * table (its first chunk too); medians in ns per (query head, position) of wall time.
 * VERITY_ATTN_V_ONCE=0: the grouped kernel converts F16 values in every value pass (attn-v-once).
 */
#include "base/clock.h"
#include "base/flags.h"
#include "base/mem.h"
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

/* ---- BA_SEQS: many sequences' KV from memory, prefetch hints off / on / on with the next ---- */

typedef struct ba_seqs {
    int64_t n_seq, n_pos, nb;
    const int32_t *tables; /* n_seq tables of nb blocks */
    kn_attn_kv kv;
    int mode; /* 0: no hints, 1: prefetch, 2: prefetch and the next unit */
    const float *q;
    float *out[2], *scratch[2];
    kn_isa isa;
} ba_seqs;

static void ba_seqs_chunk(void *arg, int64_t i, int64_t n, int thread) {
    (void)n;
    ba_seqs *b = arg;
    kn_attn_kv kv = b->kv;
    kv.table = b->tables + i * b->nb;
    kv.prefetch = b->mode > 0;
    for (int64_t h = 0; h < NKV; h++) {
        kv.next_table = NULL;
        if (b->mode == 2 && (h + 1 < NKV || i + 1 < b->n_seq)) {
            kv.next_table = h + 1 < NKV ? kv.table : kv.table + b->nb;
            kv.next_kvh = (h + 1) % NKV;
            kv.next_n_pos = b->n_pos;
        }
        kn_attn_rows(b->q + h * (NQ / NKV) * HD, NQ / NKV, &kv, h, HD, b->n_pos, 0.125f, CHUNK,
                     b->scratch[thread], b->out[thread] + h * (NQ / NKV) * HD, b->isa);
    }
}

static int ba_seqs_run(int64_t n_seq, int64_t n_pos) {
    int nth = getenv("BA_THREADS") ? atoi(getenv("BA_THREADS")) : 2;
    int reps = getenv("BA_REPS") ? atoi(getenv("BA_REPS")) : 9;
    if (nth < 1 || nth > 2 || reps < 1 || reps > 99 || n_seq < 1 || n_seq > 1 << 20) {
        fprintf(stderr, "bench_attn: BA_THREADS 1..2, BA_REPS 1..99, BA_SEQS 1..1048576\n");
        return 2;
    }
    kn_isa isa = kn_isa_available(KN_ISA_AVX512) ? KN_ISA_AVX512 : KN_ISA_AVX2;
    int64_t nb = (n_pos + BS - 1) / BS, stride = NKV * HD, nbt = nb * n_seq;
    size_t bb = (size_t)(BS * stride) * 2;
    ba_seqs b = {.n_seq = n_seq, .n_pos = n_pos, .nb = nb, .isa = isa};
    unsigned char *kp = mem_alloc_large((size_t)nbt * bb), *vp = mem_alloc_large((size_t)nbt * bb);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)nbt);
    float *q = malloc(sizeof(float) * NQ * HD);
    pool *p = NULL;
    if (!kp || !vp || !tables || !q || pool_create(nth, &p) < 0) {
        fprintf(stderr, "bench_attn: out of memory for %lld sequences\n", (long long)n_seq);
        return 2;
    }
    for (int64_t i = 0; i < nbt; i++)
        tables[i] = (int32_t)i; /* a pool's blocks in order, as a fresh KV pool hands them out */
    for (size_t i = 0; i < (size_t)nbt * bb / 2; i++) {
        ((uint16_t *)(void *)kp)[i] = kn_f32_to_f16(ba_rnd());
        ((uint16_t *)(void *)vp)[i] = kn_f32_to_f16(ba_rnd());
    }
    for (int i = 0; i < NQ * HD; i++)
        q[i] = ba_rnd();
    b.tables = tables;
    b.q = q;
    b.kv = (kn_attn_kv){.k_base = kp,
                        .v_base = vp,
                        .block_bytes = bb,
                        .block_size = BS,
                        .kv_stride = stride,
                        .f16 = true,
                        .v_once = flags_int(FLAG_ATTN_V_ONCE) != 0};
    for (int t = 0; t < 2; t++) {
        b.out[t] = malloc(sizeof(float) * NQ * HD);
        b.scratch[t] = malloc(sizeof(float) * kn_attn_scratch_floats(NQ / NKV, HD, CHUNK));
        if (!b.out[t] || !b.scratch[t]) {
            fprintf(stderr, "bench_attn: out of memory\n");
            return 2;
        }
    }
    double pairs = (double)n_seq * NQ * (double)n_pos, ns[3][99];
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < 3; m++) {
            b.mode = m;
            double t0 = clock_now_s();
            pool_for(p, n_seq, ba_seqs_chunk, &b);
            ns[m][r] = (clock_now_s() - t0) / pairs * 1e9;
        }
    printf("bench_attn: %lld sequences x %lld positions (%.0f MB of F16 KV), %s, %d threads, "
           "medians of %d\n",
           (long long)n_seq, (long long)n_pos, (double)nbt * (double)bb * 2 / 1e6, kn_isa_name(isa),
           nth, reps);
    const char *names[3] = {"no prefetch", "prefetch", "prefetch + next unit"};
    double med[3];
    for (int m = 0; m < 3; m++) {
        double *x = ns[m];
        for (int i = 0; i < reps; i++)
            for (int j = i + 1; j < reps; j++)
                if (x[j] < x[i]) {
                    double t = x[i];
                    x[i] = x[j];
                    x[j] = t;
                }
        med[m] = x[reps / 2];
        printf("%-20s | %6.3f ns/pair | %5.2f GB/s of KV | %.3fx\n", names[m], med[m],
               (double)(4 * HD) / (NQ / NKV) / med[m], med[0] / med[m]);
    }
    pool_destroy(p);
    mem_free_large(kp, (size_t)nbt * bb);
    mem_free_large(vp, (size_t)nbt * bb);
    free(tables);
    free(q);
    for (int t = 0; t < 2; t++) {
        free(b.out[t]);
        free(b.scratch[t]);
    }
    return 0;
}

int main(int argc, char **argv) {
    int64_t n_pos = argc > 1 ? atoll(argv[1]) : 2048;
    if (n_pos < 1 || n_pos > 1 << 20) {
        fprintf(stderr, "bench_attn: N_POS %s out of range 1..1048576\n", argv[1]);
        return 2;
    }
    if (getenv("BA_SEQS"))
        return ba_seqs_run(atoll(getenv("BA_SEQS")), n_pos);
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
                             .window = 0,
                             .v_once = flags_int(FLAG_ATTN_V_ONCE) != 0};
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
