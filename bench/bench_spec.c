/* SPDX-License-Identifier: MIT */
/*
 * bench_spec: the measurements of bench/spec.sh, through the library's engine (engine.h). Not a
 * test.
 *
 *   bench_spec rows MODEL.gguf THREADS REPS
 *     the cost of verification: one sequence at position 256 feeding r tokens with r logit rows
 *     (r = 1, 2, 3, 4, 5, 7, 9, 13, 17), REPS steps each, interleaved; prints one JSON line per r
 *     with the median step time and its ratio to r = 1.
 *   bench_spec run MODEL.gguf THREADS PROMPTS.jsonl BATCH SPEC [DRAFT.gguf] [K]
 *     runs every prompt ({"prompt":TEXT,"n":N,"temperature":T,"seed":S} per line) through one
 *     engine with --max-batch BATCH and speculation SPEC (off, ngram, draft); at BATCH 1 one
 *     request at a time. Prints one JSON line: decode tokens/s (the median over requests of
 *     (tokens - 1) / (time of the last token - time of the first), which leaves prefill out), the
 *     whole run's tokens/s (prefill included: for BATCH > 1), tokens generated, guesses drafted
 *     and accepted, tokens per decoding step, and an FNV-1a hash of every generated token (equal
 *     for every SPEC: speculation changes no token).
 *
 * BSP_CLOCK=cpu (THREADS 1 only): every time above is the calling thread's CPU time instead of
 * the wall clock. With one thread the forward pass runs on the calling thread, so this is the
 * work's own time and a busy shared machine's preemptions do not count (its cache and memory
 * contention still do). The engine's own controller (spec-adapt) still times its steps by the
 * wall clock.
 */
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "engine/engine.h"
#include "kernels/kn.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BSP_MAX_REQ 512
#define BSP_MAX_TOK 8192

static bool bsp_cpu; /* BSP_CLOCK=cpu */

static int64_t bsp_now(void) {
    if (!bsp_cpu)
        return clock_now_ns();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int bsp_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bsp_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bsp_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static model *bsp_load(const char *path) {
    kn_isa isa;
    model *m;
    if (kn_isa_select(&isa) || model_load(path, isa, &m)) {
        fprintf(stderr, "bench_spec: cannot load %s\n", path);
        exit(2);
    }
    return m;
}

static int bsp_rows(const char *path, int threads, int reps) {
    model *m = bsp_load(path);
    const model_hparams *hp = model_get_hparams(m);
    enum { POS = 256, BS = 16, NR = 9 };
    static const int rows[NR] = {1, 2, 3, 4, 5, 7, 9, 13, 17};
    kv_pool_opts ko = {.n_layer = hp->n_layer,
                       .kv_dim = model_kv_dim(m),
                       .block_size = BS,
                       .n_blocks = (POS + 32) / BS + 1,
                       .f16 = true};
    kv_pool *kv;
    fwd_ctx *fc;
    if (kv_pool_create(&ko, &kv) || fwd_ctx_create(m, kv, POS + 32, 32, threads, 64, &fc)) {
        fprintf(stderr, "bench_spec: out of memory\n");
        return 2;
    }
    int32_t blocks[(POS + 32) / BS + 1], toks[POS + 32];
    int32_t nb = (int32_t)ko.n_blocks;
    for (int32_t i = 0; i < nb; i++)
        blocks[i] = kv_pool_alloc(kv);
    for (int i = 0; i < POS + 32; i++)
        toks[i] = 3 + (i * 7) % (int)(hp->n_vocab - 3);
    const float *lg;
    int64_t no;
    fwd_seq s = {.tokens = toks, .n_tokens = POS, .pos0 = 0, .blocks = blocks, .n_blocks = nb,
                 .n_logits = 1};
    fwd_batch b = {.seqs = &s, .n_seqs = 1};
    if (fwd_run(fc, &b, &lg, &no))
        return 2;
    double *t = calloc((size_t)NR * (size_t)reps, sizeof *t);
    for (int rep = 0; rep < reps; rep++)
        for (int r = 0; r < NR; r++) {
            s = (fwd_seq){.tokens = toks + POS, .n_tokens = rows[r], .pos0 = POS,
                          .blocks = blocks, .n_blocks = nb, .n_logits = rows[r]};
            int64_t t0 = bsp_now();
            if (fwd_run(fc, &b, &lg, &no))
                return 2;
            t[r * reps + rep] = (double)(bsp_now() - t0) * 1e-6;
        }
    double base = bsp_median(t, reps);
    for (int r = 0; r < NR; r++) {
        double med = bsp_median(t + r * reps, reps);
        printf("{\"rows\":%d,\"ms\":%.3f,\"ratio\":%.4f}\n", rows[r], med, med / base);
    }
    free(t);
    fwd_ctx_destroy(fc);
    kv_pool_destroy(kv);
    model_destroy(m);
    return 0;
}

typedef struct bsp_req {
    int32_t *prompt;
    int32_t n_prompt, n;
    sample_params sp;
    int64_t t_first, t_last;
    int32_t n_out;
    uint64_t hash;
    bool done;
} bsp_req;

static void bsp_on_event(void *ud, const engine_event *ev) {
    bsp_req *r = ud;
    int64_t now = bsp_now();
    if (ev->token >= 0) {
        if (r->n_out == 0)
            r->t_first = now;
        r->t_last = now;
        r->n_out++;
        for (int k = 0; k < 4; k++)
            r->hash = (r->hash ^ (uint8_t)(ev->token >> (8 * k))) * 1099511628211ull;
    }
    if (ev->finish != ENGINE_FINISH_NONE)
        r->done = true;
}

static char *bsp_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

static int bsp_run(int argc, char **argv) {
    const char *path = argv[2], *file = argv[4], *spec = argv[6];
    int threads = atoi(argv[3]), batch = atoi(argv[5]);
    const char *draft = argc > 7 ? argv[7] : "";
    int k = argc > 8 ? atoi(argv[8]) : 8;
    model *m = bsp_load(path);
    tokenizer *tok;
    if (tokenizer_load(model_get_gguf(m), &tok))
        return 2;
    char *text = bsp_read(file);
    if (!text) {
        fprintf(stderr, "bench_spec: cannot read %s\n", file);
        return 2;
    }
    static bsp_req reqs[BSP_MAX_REQ];
    int nr = 0;
    int64_t max_need = 0;
    arena *a = arena_create(0, 0);
    for (char *line = strtok(text, "\n"); line && nr < BSP_MAX_REQ; line = strtok(NULL, "\n")) {
        json_value *v;
        if (json_parse(a, line, strlen(line), &v)) {
            fprintf(stderr, "bench_spec: bad line %d\n", nr);
            return 2;
        }
        const char *ps;
        size_t pl;
        bsp_req *r = &reqs[nr++];
        r->prompt = malloc(BSP_MAX_TOK * sizeof *r->prompt);
        size_t n;
        if (!json_as_str(json_get(v, "prompt"), &ps, &pl) ||
            tokenizer_encode(tok, ps, pl, true, true, r->prompt, BSP_MAX_TOK, &n)) {
            fprintf(stderr, "bench_spec: line %d: no prompt\n", nr);
            return 2;
        }
        r->n_prompt = (int32_t)n;
        int64_t ni = 64, seed = 0;
        double temp = 0;
        if (json_get(v, "n"))
            json_as_int(json_get(v, "n"), &ni);
        if (json_get(v, "seed"))
            json_as_int(json_get(v, "seed"), &seed);
        if (json_get(v, "temperature"))
            json_as_double(json_get(v, "temperature"), &temp);
        r->n = (int32_t)ni;
        r->sp = sample_params_default();
        r->sp.temperature = temp;
        r->sp.seed = (uint64_t)seed;
        r->hash = 1469598103934665603ull;
        if (r->n_prompt + r->n > max_need)
            max_need = r->n_prompt + r->n;
    }
    engine_opts o;
    engine_opts_from_flags(&o, m);
    o.max_batch = batch;
    o.threads = threads;
    o.kv_blocks = ((max_need + 32 + o.block_size - 1) / o.block_size + 1) * batch;
    o.prefix_cache = false; /* every repetition computes the same */
    o.spec = spec;
    o.spec_k = k;
    o.draft_model = draft;
    engine *e;
    if (engine_create(m, tok, &o, &e)) {
        fprintf(stderr, "bench_spec: engine: %s\n", err_detail());
        return 2;
    }
    int64_t t0 = bsp_now();
    for (int i = 0; i < nr; i++) {
        engine_req q = {.id = (uint64_t)i + 1,
                        .prompt = reqs[i].prompt,
                        .n_prompt = reqs[i].n_prompt,
                        .sp = reqs[i].sp,
                        .max_tokens = reqs[i].n,
                        .ignore_eog = true,
                        .cb = bsp_on_event,
                        .ud = &reqs[i]};
        if (engine_submit(e, &q))
            return 2;
        if (batch == 1)
            while (engine_busy(e))
                if (engine_step(e))
                    return 2;
    }
    while (engine_busy(e))
        if (engine_step(e))
            return 2;
    double wall = (double)(bsp_now() - t0) * 1e-9;
    double rates[BSP_MAX_REQ];
    int64_t gen = 0;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < nr; i++) {
        bsp_req *r = &reqs[i];
        double dt = (double)(r->t_last - r->t_first) * 1e-9;
        rates[i] = dt > 0 ? (double)(r->n_out - 1) / dt : 0;
        gen += r->n_out;
        h = (h ^ r->hash) * 1099511628211ull;
    }
    engine_stats st;
    engine_stats_get(e, &st);
    int64_t steps = 0, kept = 0;
    for (int t = 0; t <= SPEC_MAX_K + 1; t++) {
        steps += st.step_tokens_hist[t];
        kept += (int64_t)t * st.step_tokens_hist[t];
    }
    printf("{\"spec\":\"%s\",\"clock\":\"%s\",\"batch\":%d,\"requests\":%d,\"decode_tok_s\":%.3f,"
           "\"run_tok_s\":%.3f,"
           "\"generated\":%lld,\"drafted\":%lld,\"accepted\":%lld,\"decode_steps\":%lld,"
           "\"tokens_per_step\":%.4f,\"tokens_hash\":\"%016llx\"}\n",
           spec, bsp_cpu ? "cpu" : "wall", batch, nr, bsp_median(rates, nr), (double)gen / wall,
           (long long)gen, (long long)st.spec_drafted, (long long)st.spec_accepted,
           (long long)steps, steps ? (double)kept / (double)steps : 0.0, (unsigned long long)h);
    engine_destroy(e);
    for (int i = 0; i < nr; i++)
        free(reqs[i].prompt);
    arena_destroy(a);
    free(text);
    tokenizer_destroy(tok);
    model_destroy(m);
    return 0;
}

int main(int argc, char **argv) {
    const char *clk = getenv("BSP_CLOCK");
    bsp_cpu = clk && !strcmp(clk, "cpu");
    if (bsp_cpu && argc >= 4 && atoi(argv[3]) != 1) {
        fprintf(stderr, "bench_spec: BSP_CLOCK=cpu needs THREADS 1 (got %s)\n", argv[3]);
        return 2;
    }
    if (argc >= 5 && !strcmp(argv[1], "rows"))
        return bsp_rows(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc >= 7 && !strcmp(argv[1], "run"))
        return bsp_run(argc, argv);
    fprintf(stderr, "usage: bench_spec rows MODEL THREADS REPS\n"
                    "       bench_spec run MODEL THREADS PROMPTS.jsonl BATCH off|ngram|draft "
                    "[DRAFT] [K]\n");
    return 2;
}
