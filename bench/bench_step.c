/* SPDX-License-Identifier: MIT */
/*
 * bench_step: times forward-pass steps of one model through the library's public API only
 * (model_load, kv_pool_create, fwd_ctx_create, fwd_run), so the same file builds against any
 * revision of libverity; bench/ab.sh alternates two revisions' builds of it to compare them on a
 * noisy machine. Not a test.
 *
 *   bench_step MODEL.gguf prefill|decode BATCH PROMPT REPS [THREADS]
 *
 * prefill: each repetition prefills BATCH sequences of PROMPT tokens, as many whole sequences per
 * step as fit in 4096 tokens; decode: after one untimed prefill, each repetition is one step of
 * BATCH sequences advancing one token. Prints the median and best repetition, in ms and in GFLOP/s
 * of the weight matrices (2 x parameters per token, as `verity bench` counts).
 *
 * BS_CPU=1: times by the process's CPU time (all threads together) instead of the wall clock, so
 * the moments a busy shared machine takes a thread away do not count (the pool's spinning, and
 * cache and memory contention, still do), and adds the fraction of the FMA roof measured the same
 * way on this thread (AVX-512 machines): GFLOP per CPU-second over one thread's roof per
 * CPU-second. bench/ab.sh passes the variable through.
 *
 * BS_AB=NAME=A,B: an A/B of a forward-pass toggle (one read when a context is made: pool-ranges,
 * mm-even-split, mm-panel, attn-group...) in one process: two contexts over the same model and
 * KV pool, made with the toggle at A and at B, step in turn (A first in even repetitions, B first
 * in odd ones; both write the same KV bytes), so both see the same moments of a noisy machine;
 * prints each side's median and the median (and quartiles) of the per-repetition ratio A/B. Each
 * step starts 0.5 ms after the other context's (its threads spin, then sleep, pool.h), with its
 * own threads woken (fwd_ctx_wake).
 *
 * BS_FLUSH=MB: before every timed repetition, an untimed read of a buffer of MB megabytes (more
 * than the last-level cache: 1024 on a 260 MB L3), so each step reads its weights from memory as
 * `verity bench --cold` does, even for a model that fits in the L3.
 */
#include "base/clock.h"
#include "base/flags.h"
#include "kernels/kn.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/model.h"

#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#define BS_STEP_TOKENS 4096
#define BS_MAX_REPS    1000

static int bs_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* kn_roofline_avx512.c's probe: 12 independent chains of AVX-512 FMAs, iters times */
double kn_roofline_fma_avx512(int64_t iters);

/* Now, in ns: the wall clock, or with cpu the process's CPU time. */
static int64_t bs_now_ns(bool cpu) {
    if (!cpu)
        return clock_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The FMA roof of this thread per second of its CPU time: the best of 3 probe runs. */
static double bs_roof_cpu_gflops(void) {
    const int64_t iters = 10000000;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        kn_roofline_fma_avx512(iters);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        double dt = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        double g = (double)iters * 12 * 16 * 2 / dt * 1e-9; /* chains x lanes x 2 flops */
        if (g > best)
            best = g;
    }
    return best;
}

/* Runs sequences [s0, s0 + ns) of the batch through one step: their whole prompts (n = P) or one
 * token at position pos (decode). */
static int bs_step(fwd_ctx *fc, fwd_seq *seqs, int s0, int ns, const int32_t *toks, int P,
                   int32_t *blocks, int per, bool decode, int pos) {
    for (int s = 0; s < ns; s++)
        seqs[s] = (fwd_seq){.tokens = toks + (s0 + s) * P,
                            .n_tokens = decode ? 1 : P,
                            .pos0 = decode ? pos : 0,
                            .blocks = blocks + (s0 + s) * per,
                            .n_blocks = per,
                            .n_logits = 1};
    fwd_batch fb = {.seqs = seqs, .n_seqs = ns};
    const float *lg;
    int64_t no;
    return fwd_run(fc, &fb, &lg, &no);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_step MODEL prefill|decode BATCH PROMPT REPS [THREADS]\n");
        return 2;
    }
    const char *path = argv[1];
    bool decode = strcmp(argv[2], "decode") == 0;
    int B = atoi(argv[3]), P = atoi(argv[4]), reps = atoi(argv[5]);
    int threads = argc > 6 ? atoi(argv[6]) : 2;
    if ((!decode && strcmp(argv[2], "prefill") != 0) || B < 1 || B > 256 || P < 1 ||
        P > BS_STEP_TOKENS || reps < 1 || reps > BS_MAX_REPS || threads < 1) {
        fprintf(stderr, "bench_step: bad arguments\n");
        return 2;
    }
    const bool cpu = getenv("BS_CPU") && strcmp(getenv("BS_CPU"), "1") == 0;
    kn_isa isa;
    model *m;
    if (kn_isa_select(&isa) || model_load(path, isa, &m)) {
        fprintf(stderr, "bench_step: cannot load %s\n", path);
        return 2;
    }
    const model_hparams *hp = model_get_hparams(m);
    int per = (P + 64 + 15) / 16; /* blocks of 16 positions per sequence, room for decode */
    kv_pool_opts ko;
    model_kv_pool_opts(m, true, 16, (int64_t)per * B, &ko);
    kv_pool *kv;
    fwd_ctx *fc;
    int32_t *blocks = malloc((size_t)per * (size_t)B * sizeof(int32_t));
    int32_t *toks = malloc((size_t)P * (size_t)B * sizeof(int32_t));
    fwd_seq *seqs = malloc((size_t)B * sizeof(fwd_seq));
    double *t = malloc(BS_MAX_REPS * sizeof(double));
    /* BS_AB: the toggle's name and its two values */
    char ab_name[64] = "", ab_val[2][32] = {"", ""};
    const char *ab = getenv("BS_AB");
    fwd_ctx *fc2 = NULL;
    double *t2 = malloc(BS_MAX_REPS * sizeof(double)),
           *ratio = malloc(BS_MAX_REPS * sizeof(double));
    if (ab && (sscanf(ab, "%63[^=]=%31[^,],%31s", ab_name, ab_val[0], ab_val[1]) != 3 ||
               flags_set(ab_name, ab_val[0]))) {
        fprintf(stderr, "bench_step: BS_AB must be NAME=A,B with a toggle of `verity flags`\n");
        return 2;
    }
    if (!blocks || !toks || !seqs || !t || !t2 || !ratio || kv_pool_create(&ko, &kv) ||
        fwd_ctx_create(m, kv, BS_STEP_TOKENS, B, threads, 64, &fc) ||
        (ab && (flags_set(ab_name, ab_val[1]) ||
                fwd_ctx_create(m, kv, BS_STEP_TOKENS, B, threads, 64, &fc2)))) {
        fprintf(stderr, "bench_step: out of memory (or a bad BS_AB value)\n");
        return 2;
    }
    for (int i = 0; i < per * B; i++)
        blocks[i] = i;
    for (int i = 0; i < P * B; i++)
        toks[i] = (int32_t)(((int64_t)i * 7919 + 13) % hp->n_vocab);
    int fit = BS_STEP_TOKENS / P; /* whole prompts per prefill step */
    int rc = 0;
    if (decode) /* the prompts, once */
        for (int s0 = 0; s0 < B && !rc; s0 += fit)
            rc = bs_step(fc, seqs, s0, B - s0 < fit ? B - s0 : fit, toks, P, blocks, per, false, 0);
    const int64_t flush_mb = getenv("BS_FLUSH") ? atoll(getenv("BS_FLUSH")) : 0;
    size_t flush_n = flush_mb > 0 ? (size_t)flush_mb * (1 << 20) / sizeof(int64_t) : 0;
    int64_t *flush = flush_n ? malloc(flush_n * sizeof(int64_t)) : NULL;
    if (flush_n && !flush) {
        fprintf(stderr, "bench_step: out of memory\n");
        return 2;
    }
    for (size_t i = 0; i < flush_n; i++)
        flush[i] = (int64_t)i;
    volatile int64_t flush_sum = 0;
    for (int r = 0; r < reps && !rc; r++) {
        for (int side = 0; side < (fc2 ? 2 : 1) && !rc; side++) {
            /* with BS_AB, A first in even repetitions, B first in odd ones */
            fwd_ctx *f = fc2 && (side ^ (r & 1)) ? fc2 : fc;
            double *tt = f == fc ? t : t2;
            int64_t fs = 0;
            for (size_t i = 0; i < flush_n; i += 8) /* one load per 64-byte line */
                fs += flush[i];
            flush_sum += fs;
            if (fc2 && !flush_n) /* the other context's threads spin for pool.c's 200 us */
                nanosleep(&(struct timespec){.tv_nsec = 500000}, NULL);
            if (flush_n || fc2)
                fwd_ctx_wake(f); /* asleep during the read: awake, as between steps */
            int64_t t0 = bs_now_ns(cpu);
            if (decode)
                rc = bs_step(f, seqs, 0, B, toks, P, blocks, per, true, P + r % 64);
            else
                for (int s0 = 0; s0 < B && !rc; s0 += fit)
                    rc = bs_step(f, seqs, s0, B - s0 < fit ? B - s0 : fit, toks, P, blocks, per,
                                 false, 0);
            tt[r] = (double)(bs_now_ns(cpu) - t0) * 1e-9;
        }
        if (fc2)
            ratio[r] = t[r] / t2[r];
    }
    if (rc) {
        fprintf(stderr, "bench_step: forward pass failed (%d)\n", rc);
        return 1;
    }
    double tokens = decode ? B : (double)B * P;
    double flop = model_flops_per_token(m) * tokens;
    if (fc2) {
        qsort(t2, (size_t)reps, sizeof *t2, bs_cmp);
        qsort(ratio, (size_t)reps, sizeof *ratio, bs_cmp);
        printf("%s=%s: median %.2f ms (%.1f GFLOP/s); speed ratio %s/%s per repetition: median "
               "%.3f (quartiles %.3f-%.3f)\n",
               ab_name, ab_val[1], t2[reps / 2] * 1e3, flop / t2[reps / 2] * 1e-9, ab_val[1],
               ab_val[0], ratio[reps / 2], ratio[reps / 4], ratio[3 * reps / 4]);
        printf("%s=%s: ", ab_name, ab_val[0]);
    }
    qsort(t, (size_t)reps, sizeof *t, bs_cmp);
    printf("%s batch %d prompt %d: median %.2f ms (%.1f GFLOP/s), best %.2f ms (%.1f GFLOP/s)\n",
           decode ? "decode" : "prefill", B, P, t[reps / 2] * 1e3, flop / t[reps / 2] * 1e-9,
           t[0] * 1e3, flop / t[0] * 1e-9);
    if (cpu && isa == KN_ISA_AVX512) {
        double roof = bs_roof_cpu_gflops();
        printf("  CPU time: median %.1f%%, best %.1f%% of one thread's FMA roof per CPU-second "
               "(%.1f GFLOP/s)\n",
               100 * flop / t[reps / 2] * 1e-9 / roof, 100 * flop / t[0] * 1e-9 / roof, roof);
    }
    fwd_ctx_destroy(fc);
    fwd_ctx_destroy(fc2);
    kv_pool_destroy(kv);
    model_destroy(m);
    free(blocks);
    free(toks);
    free(seqs);
    free(t);
    free(t2);
    free(ratio);
    free(flush);
    return 0;
}
