/* SPDX-License-Identifier: MIT */
/*
 * bench_sample: median time per sampled token for a few sampler configurations at vocabulary
 * sizes 32000 (llama) and 152064 (qwen2). Not part of the test suite. Build and run:
 *
 *   make && cc -O2 -Isrc bench/bench_sample.c build/release/libverity.a -lm -pthread \
 *       -o build/bench_sample && build/bench_sample
 *
 * Logits are synthetic but shaped like a language model's: a Gaussian bulk (sd 2.5) with a few
 * dozen boosted tokens on top, 16 different rows used in turn. "flat" is the adversarial case
 * for top-p: a narrow Gaussian with no head, so the nucleus holds most of the vocabulary.
 * Penalized configurations carry a 64-token repetition window and 256 generated tokens.
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so other processes on a shared
 * machine inflate them less than wall time would; the median over 400 tokens is printed.
 */
#include "base/err.h"
#include "sample/rng.h"
#include "sample/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_ROWS   16
#define N_TOKENS 400

static double gaussian(uint64_t seed, uint64_t i) {
    double u1 = rng_uniform(seed, 2 * i) + 0x1.0p-54, u2 = rng_uniform(seed, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void make_rows(float *rows, int n_vocab, bool flat) {
    for (int r = 0; r < N_ROWS; r++) {
        float *row = rows + (size_t)r * n_vocab;
        for (int i = 0; i < n_vocab; i++)
            row[i] = (float)(gaussian(1000 + r, (uint64_t)i) * (flat ? 0.3 : 2.5));
        if (!flat)
            for (int h = 0; h < 40; h++) /* the head: a few plausible continuations */
                row[rng_u64(2000 + r, (uint64_t)h) % (uint64_t)n_vocab] +=
                    (float)(20.0 - h * 0.35 + gaussian(3000 + r, (uint64_t)h));
    }
}

static int64_t cpu_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double bench_one(const sample_params *p, int n_vocab, const float *rows, bool with_res) {
    sampler *s;
    if (sampler_create(p, n_vocab, &s)) {
        fprintf(stderr, "sampler_create: %s\n", err_detail());
        exit(1);
    }
    if (p->repetition_penalty != 1.0 || p->frequency_penalty != 0.0) {
        int32_t prompt[64];
        for (int i = 0; i < 64; i++)
            prompt[i] = (int32_t)(rng_u64(77, (uint64_t)i) % (uint64_t)n_vocab);
        sampler_accept_prompt(s, prompt, 64);
        for (int i = 0; i < 256; i++)
            sampler_accept(s, (int32_t)(rng_u64(78, (uint64_t)i) % (uint64_t)n_vocab));
    }
    static double times[N_TOKENS];
    sample_result res;
    unsigned sink = 0;
    for (int t = 0; t < N_TOKENS; t++) {
        const float *row = rows + (size_t)(t % N_ROWS) * n_vocab;
        int64_t t0 = cpu_now_ns();
        sink += (unsigned)sampler_sample(s, row, t, with_res ? &res : NULL);
        times[t] = (double)(cpu_now_ns() - t0) * 1e-3;
    }
    sampler_destroy(s);
    qsort(times, N_TOKENS, sizeof times[0], cmp_double);
    if (sink == 0xFFFFFFFFu)
        printf("(unlikely)\n");
    return times[N_TOKENS / 2];
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL; /* run only configs whose name contains this */
    static const int vocabs[] = {32000, 152064};
    printf("%-44s %12s %12s\n", "config (median CPU us/token)", "32000", "152064");
    struct {
        const char *name;
        sample_params p;
        bool flat, with_res;
    } cfg[12];
    int n_cfg = 0;
    sample_params d = sample_params_default();
#define ADD(nm, fl, wr, ...)                                                                       \
    do {                                                                                           \
        cfg[n_cfg].name = nm;                                                                      \
        cfg[n_cfg].p = d;                                                                          \
        __VA_ARGS__;                                                                               \
        cfg[n_cfg].flat = fl;                                                                      \
        cfg[n_cfg].with_res = wr;                                                                  \
        n_cfg++;                                                                                   \
    } while (0)
    ADD("greedy", false, false, cfg[n_cfg].p.temperature = 0);
    ADD("greedy + logprobs(5)", false, true, cfg[n_cfg].p.temperature = 0;
        cfg[n_cfg].p.n_logprobs = 5);
    ADD("T=0.8 top_p=0.9", false, false, cfg[n_cfg].p.temperature = 0.8; cfg[n_cfg].p.top_p = 0.9);
    ADD("T=0.8 top_p=0.9 + logprobs(5)", false, true, cfg[n_cfg].p.temperature = 0.8;
        cfg[n_cfg].p.top_p = 0.9; cfg[n_cfg].p.n_logprobs = 5);
    ADD("T=0.8 top_k=40 top_p=0.95 min_p=0.05", false, false, cfg[n_cfg].p.temperature = 0.8;
        cfg[n_cfg].p.top_k = 40; cfg[n_cfg].p.top_p = 0.95; cfg[n_cfg].p.min_p = 0.05);
    ADD("T=1 no truncation", false, false, (void)0);
    ADD("T=0.8 top_p=0.9 rep=1.1 freq=0.5 pres=0.5", false, false, cfg[n_cfg].p.temperature = 0.8;
        cfg[n_cfg].p.top_p = 0.9; cfg[n_cfg].p.repetition_penalty = 1.1;
        cfg[n_cfg].p.frequency_penalty = 0.5; cfg[n_cfg].p.presence_penalty = 0.5);
    ADD("flat logits, T=1 top_p=0.9 (worst case)", true, false, cfg[n_cfg].p.top_p = 0.9);
    ADD("flat logits, T=1 no truncation", true, false, (void)0);
#undef ADD
    double us[12][2];
    for (int v = 0; v < 2; v++) {
        int n_vocab = vocabs[v];
        float *rows = malloc(sizeof(float) * (size_t)N_ROWS * n_vocab);
        float *flat = malloc(sizeof(float) * (size_t)N_ROWS * n_vocab);
        if (!rows || !flat)
            return 1;
        make_rows(rows, n_vocab, false);
        make_rows(flat, n_vocab, true);
        for (int c = 0; c < n_cfg; c++)
            us[c][v] =
                only && !strstr(cfg[c].name, only)
                    ? 0.0
                    : bench_one(&cfg[c].p, n_vocab, cfg[c].flat ? flat : rows, cfg[c].with_res);
        free(rows);
        free(flat);
    }
    for (int c = 0; c < n_cfg; c++)
        if (!only || strstr(cfg[c].name, only))
            printf("%-44s %12.1f %12.1f\n", cfg[c].name, us[c][0], us[c][1]);
    return 0;
}
