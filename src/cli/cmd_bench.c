/* SPDX-License-Identifier: MIT */
/*
 * cmd_bench: `verity bench [-m MODEL] [--shape 0.5b|1b-kq] [--type TYPE] [--batch 1,8,32]
 * [--prompt 256] [--gen 64] [-t N] [--reps R] [--cold] [--json]`.
 *
 * Measures this machine's roofline with the same number of threads (kn_roofline.h), interleaved
 * with the workload: a probe over a buffer larger than both the last-level cache and the model
 * (max(1 GiB, 2x the weights)) takes BENCH_ROOF_READS read samples and BENCH_ROOF_FMAS fp32 FMA
 * samples before the first phase and after every phase (prefill, decode) of every batch size; the
 * fractions use the median of all samples and the output prints their spread (min, max). On a
 * shared VM the read roof moved from 31 to 56 GB/s between runs minutes apart: a roof measured
 * once before and once after let one fast or slow moment set every fraction, while the median of
 * samples taken around every phase is the roof of the same minutes the workload ran in. In
 * between, for each batch size b, through the real forward pass:
 *   prefill: b prompts of P tokens, whole prompts per step (as many as fit in 4096 tokens);
 *            tokens/s and the fraction of the FMA peak the matmul FLOPs reach;
 *   decode:  b sequences advancing one token per step for G steps (next token = argmax);
 *            tokens/s from the median step time, the fraction of the read bandwidth the weight
 *            bytes per step reach, and the fraction of the FMA peak.
 * With --cold every decode step starts from caches that hold none of the weights: one untimed
 * read pass over the probe's buffer before each step (a model smaller than the last-level cache,
 * such as the 1b-kq shape's on a host with a 260 MB L3, otherwise decodes partly from the L3, and
 * its "of the read roof", a fraction of memory's bandwidth, passes 100%); the step's threads,
 * asleep during the pass, are woken before the clock starts (fwd_ctx_wake), as they are awake
 * between consecutive steps.
 * Prefill is repeated R times (median). Without -m it runs the synthetic model of --shape (0.5b,
 * the default, or 1b-kq) and --type (default f16; any synth type, q4_k_m or q5_k_m), made once and
 * cached under $XDG_CACHE_HOME/verity (or ~/.cache/verity).
 */
#include "base/clock.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/pool.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "cli/cli_model.h"
#include "gguf/gguf.h"
#include "kernels/kn_roofline.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/quantize.h"
#include "model/synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_BATCHES 16
#define BENCH_STEP_TOKENS 4096

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define BENCH_ROOF_READS      3       /* read samples per sampling point */
#define BENCH_ROOF_FMAS       2       /* FMA samples per sampling point */
#define BENCH_FLUSH_SETTLE_NS 500000  /* --cold: the pause after a read pass (> the pool's spin) */
#define BENCH_ROOF_ITERS      2000000 /* FMA iterations per sample per thread: ~10 ms */
#define BENCH_ROOF_MAX        (BENCH_ROOF_READS * (1 + 2 * BENCH_MAX_BATCHES))

/* The machine's roofline samples and the model's per-token costs. */
typedef struct bench_roof {
    pool *pool;
    kn_roof *probe;
    size_t bw_bytes, wbytes;
    double bw_s[BENCH_ROOF_MAX], fma_s[BENCH_ROOF_MAX]; /* samples, in the order taken */
    int n_bw, n_fma, n_points;
    int n_flush;                  /* --cold's read passes before decode steps (not samples) */
    double bw, bw_min, bw_max;    /* median and spread of bw_s */
    double fma, fma_min, fma_max; /* of fma_s */
    double flops_tok;
} bench_roof;

/* Makes the probe (a pool of `threads` threads and a buffer of rf->bw_bytes). Returns 0 or a
 * negative error code. */
static int bench_roof_open(bench_roof *rf, int threads, kn_isa isa) {
    int rc = pool_create(threads, &rf->pool);
    if (!rc)
        rc = kn_roof_create(rf->pool, rf->bw_bytes, isa, &rf->probe);
    return rc;
}

static void bench_roof_close(bench_roof *rf) {
    kn_roof_destroy(rf->probe);
    pool_destroy(rf->pool);
}

/* One sampling point: BENCH_ROOF_READS read samples and BENCH_ROOF_FMAS FMA samples (none if
 * the arrays are full). */
static void bench_roof_sample(bench_roof *rf) {
    if (rf->n_bw + BENCH_ROOF_READS > BENCH_ROOF_MAX ||
        rf->n_fma + BENCH_ROOF_FMAS > BENCH_ROOF_MAX)
        return;
    for (int i = 0; i < BENCH_ROOF_READS; i++)
        rf->bw_s[rf->n_bw++] = kn_roof_read_gbs(rf->probe);
    for (int i = 0; i < BENCH_ROOF_FMAS; i++)
        rf->fma_s[rf->n_fma++] = kn_roof_fma_gflops(rf->probe, BENCH_ROOF_ITERS);
    rf->n_points++;
}

/* Median, min and max of the n samples v (a copy is sorted). */
static void bench_spread(const double *v, int n, double *med, double *lo, double *hi) {
    double s[BENCH_ROOF_MAX];
    memcpy(s, v, (size_t)n * sizeof *s);
    *med = bench_median(s, n);
    *lo = s[0];
    *hi = s[n - 1];
}

/* Path of the cached synthetic model of shape and plan, creating it if absent. The 0.5b shape's
 * K = 896 rows are not multiples of 256, so K-quant plans use llama.cpp's fallback there
 * (model/quantize.h): q4_k gives Q5_0 matrices with Q4_K ffn_down (K = 4864), q6_k Q8_0 with Q6_K
 * ffn_down, as a llama.cpp quantization of a Qwen2-0.5B-shaped model does; the 1b-kq shape's rows
 * (1024, 2816) take every K-quant type with no fallback. */
static int bench_default_model(const char *shape, const quant_plan *plan, char *path, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[512];
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/verity", xdg);
    else
        snprintf(dir, sizeof dir, "%s/.cache/verity", home && *home ? home : "/tmp");
    char parent[512];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = 0;
        mkdir(parent, 0755);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return err_set(ERR_IO, "%s: cannot create cache directory: %s", dir, strerror(errno));
    snprintf(path, cap, "%s/synth%d-%s-%s-seed1.gguf", dir, SYNTH_FORMAT, shape, plan->name);
    if (access(path, R_OK) == 0)
        return 0;
    fprintf(stderr, "verity bench: making the synthetic %s %s model (once) at %s\n", shape,
            plan->name, path);
    /* written under a temporary name and renamed: a run killed half way leaves no truncated
     * model at the cached path */
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    synth_opts o = {.shape = shape, .type = plan->type, .mix = plan->mix, .seed = 1};
    int rc = synth_write(&o, tmp);
    if (!rc && rename(tmp, path) != 0)
        rc = err_set(ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

static int32_t bench_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

typedef struct bench_row {
    int b;
    double prefill_tok_s, prefill_fma;
    double decode_tok_s, decode_bw, decode_fma;
} bench_row;

/* What the command line asked for. */
typedef struct bench_opts {
    const char *model_path; /* -m, or NULL: $MODEL, else the cached synthetic model */
    const char *shape;      /* --shape of the synthetic model: "0.5b" or "1b-kq" */
    quant_plan plan;        /* --type of the synthetic model */
    int batches[BENCH_MAX_BATCHES];
    int n_batches;
    int64_t P, G, reps; /* --prompt, --gen, --reps */
    bool cold;          /* --cold: a read pass over the probe's buffer before every decode step */
    bool json;
} bench_opts;

/* One KV pool, forward context and set of buffers sized for the largest batch. */
typedef struct bench_run {
    const model_hparams *hp;
    int64_t blocks_per, step_tokens;
    kv_pool *kv;
    fwd_ctx *fc;
    int32_t *blocks; /* [max_b * blocks_per] */
    int32_t *toks;   /* [max_b, P] */
    fwd_seq *seqs;   /* [max_b] */
    int32_t *next;   /* [max_b] */
    double *times;   /* [max(G, reps)] */
} bench_run;

/* Parses --batch's comma list into o. Returns 0, or the exit status 2. */
static int bench_parse_batches(const char *v, bench_opts *o) {
    o->n_batches = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int64_t b;
        if (o->n_batches == BENCH_MAX_BATCHES ||
            cli_parse_i64("bench", "--batch", tok, 1, 1024, &b))
            return 2;
        o->batches[o->n_batches++] = (int)b;
    }
    if (!o->n_batches)
        return cli_usage_error("bench", "--batch: empty list");
    return 0;
}

/* Parses one option a with value v into o. Returns 0, or the exit status 2. */
static int bench_parse_option(const char *a, const char *v, bench_opts *o) {
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        o->model_path = v;
    } else if (!strcmp(a, "--shape")) {
        if (strcmp(v, "0.5b") && strcmp(v, "1b-kq"))
            return cli_usage_error("bench", "--shape: unknown shape '%s' (0.5b, 1b-kq)", v);
        o->shape = v;
    } else if (!strcmp(a, "--type")) {
        if (quant_plan_parse(v, &o->plan))
            return cli_usage_error("bench", "--type: %s", err_detail());
    } else if (!strcmp(a, "--batch")) {
        return bench_parse_batches(v, o);
    } else if (!strcmp(a, "--prompt")) {
        if (cli_parse_i64("bench", a, v, 1, BENCH_STEP_TOKENS, &o->P))
            return 2;
    } else if (!strcmp(a, "--gen")) {
        if (cli_parse_i64("bench", a, v, 1, 100000, &o->G))
            return 2;
    } else if (!strcmp(a, "--reps")) {
        if (cli_parse_i64("bench", a, v, 1, 100, &o->reps))
            return 2;
    } else if (!strcmp(a, "-t")) {
        if (flags_set("threads", v))
            return cli_usage_error("bench", "%s", err_detail());
    } else {
        return cli_usage_error("bench", "unknown option '%s'", a);
    }
    return 0;
}

/* Parses the command line into o (defaults first). Returns 0, or the exit status 2. */
static int bench_parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){
        .shape = "0.5b", .batches = {1, 8, 32}, .n_batches = 3, .P = 256, .G = 64, .reps = 3};
    quant_plan_parse("f16", &o->plan);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--cold")) {
            o->cold = true;
            continue;
        }
        if (!(v = cli_next("bench", argc, argv, &i)))
            return 2;
        int status = bench_parse_option(a, v, o);
        if (status)
            return status;
    }
    return 0;
}

/* Frees what bench_run_create made (any part may be NULL). */
static void bench_run_destroy(bench_run *r) {
    free(r->blocks);
    free(r->toks);
    free(r->seqs);
    free(r->next);
    free(r->times);
    fwd_ctx_destroy(r->fc);
    kv_pool_destroy(r->kv);
}

/* Makes the KV pool, forward context and buffers for batches up to max_b, and fills the prompts.
 * Returns 0 or a negative error code; r is to be destroyed either way. */
static int bench_run_create(const cli_model *cm, const bench_opts *o, int max_b, int threads,
                            bench_run *r) {
    const model_hparams *hp = model_get_hparams(cm->m);
    int64_t P = o->P, G = o->G;
    int64_t bs = flags_int(FLAG_KV_BLOCK);
    *r = (bench_run){.hp = hp, .blocks_per = (P + G + bs - 1) / bs};
    kv_pool_opts ko;
    model_kv_pool_opts(cm->m, strcmp(flags_str(FLAG_KV_DTYPE), "f16") == 0, bs,
                       r->blocks_per * max_b, &ko);
    r->step_tokens = P > BENCH_STEP_TOKENS ? P : BENCH_STEP_TOKENS;
    if (r->step_tokens < max_b)
        r->step_tokens = max_b;
    int rc = kv_pool_create(&ko, &r->kv);
    if (!rc)
        rc = fwd_ctx_create(cm->m, r->kv, r->step_tokens, max_b, threads,
                            flags_int(FLAG_ATTN_CHUNK), &r->fc);
    r->blocks = malloc((size_t)(r->blocks_per * max_b) * sizeof(int32_t));
    r->toks = malloc((size_t)(P * max_b) * sizeof(int32_t));
    r->seqs = malloc((size_t)max_b * sizeof(fwd_seq));
    r->next = malloc((size_t)max_b * sizeof(int32_t));
    r->times = malloc((size_t)(G > o->reps ? G : o->reps) * sizeof(double));
    if (!rc && (!r->blocks || !r->toks || !r->seqs || !r->next || !r->times))
        rc = err_set(ERR_NOMEM, "bench: out of memory");
    for (int64_t i = 0; !rc && i < r->blocks_per * max_b; i++)
        r->blocks[i] = (int32_t)i;
    for (int64_t i = 0; !rc && i < P * max_b; i++)
        r->toks[i] = (int32_t)((i * 7919 + 13) % hp->n_vocab);
    return rc;
}

/* Prefills b prompts of P tokens, whole prompts per step, reps times; sets *tok_s from the median
 * time and the first generated tokens in r->next. Returns 0 or a negative error code. */
static int bench_prefill(bench_run *r, int b, int64_t P, int64_t reps, double *tok_s) {
    const model_hparams *hp = r->hp;
    const float *lg;
    int64_t no;
    int rc = 0;
    int per_step = (int)(r->step_tokens / P);
    if (per_step > b)
        per_step = b;
    for (int64_t rep = 0; rep < reps && !rc; rep++) {
        int64_t t0 = clock_now_ns();
        for (int s0 = 0; s0 < b && !rc; s0 += per_step) {
            int ns = b - s0 < per_step ? b - s0 : per_step;
            for (int s = 0; s < ns; s++)
                r->seqs[s] = (fwd_seq){.tokens = r->toks + (s0 + s) * P,
                                       .n_tokens = (int32_t)P,
                                       .pos0 = 0,
                                       .blocks = r->blocks + (s0 + s) * r->blocks_per,
                                       .n_blocks = (int32_t)r->blocks_per,
                                       .n_logits = 1};
            fwd_batch fb = {.seqs = r->seqs, .n_seqs = ns};
            rc = fwd_run(r->fc, &fb, &lg, &no);
            for (int s = 0; !rc && s < ns; s++)
                r->next[s0 + s] = bench_argmax(lg + s * hp->n_vocab, hp->n_vocab);
        }
        r->times[rep] = (double)(clock_now_ns() - t0) * 1e-9;
    }
    if (!rc)
        *tok_s = (double)b * (double)P / bench_median(r->times, (int)reps);
    return rc;
}

/* Advances b sequences one token per step for G steps after their P-token prompts; sets *tok_s
 * from the median step time. With flush (--cold), one untimed read pass over its buffer before
 * every step, counted in *flushes. Returns 0 or a negative error code. */
static int bench_decode(bench_run *r, int b, int64_t P, int64_t G, kn_roof *flush, int *flushes,
                        double *tok_s) {
    const model_hparams *hp = r->hp;
    const float *lg;
    int64_t no;
    int rc = 0;
    for (int64_t g = 0; g < G && !rc; g++) {
        for (int s = 0; s < b; s++)
            r->seqs[s] = (fwd_seq){.tokens = &r->next[s],
                                   .n_tokens = 1,
                                   .pos0 = (int32_t)(P + g),
                                   .blocks = r->blocks + s * r->blocks_per,
                                   .n_blocks = (int32_t)r->blocks_per,
                                   .n_logits = 1};
        fwd_batch fb = {.seqs = r->seqs, .n_seqs = b};
        if (flush) {
            kn_roof_read_gbs(flush);
            (*flushes)++;
            /* the probe's worker spins up to pool.c's 200 us before it sleeps: not beside the
             * step's own threads */
            nanosleep(&(struct timespec){.tv_nsec = BENCH_FLUSH_SETTLE_NS}, NULL);
            /* and the step's threads, asleep since the pass began, awake as between steps */
            fwd_ctx_wake(r->fc);
        }
        int64_t t0 = clock_now_ns();
        rc = fwd_run(r->fc, &fb, &lg, &no);
        r->times[g] = (double)(clock_now_ns() - t0) * 1e-9;
        for (int s = 0; !rc && s < b; s++)
            r->next[s] = bench_argmax(lg + s * hp->n_vocab, hp->n_vocab);
    }
    if (!rc)
        *tok_s = (double)b / bench_median(r->times, (int)G);
    return rc;
}

/* Runs prefill and decode for every batch size into rows. Returns 0 or a negative error code. */
static int bench_measure(const cli_model *cm, const bench_opts *o, int threads, bench_roof *rf,
                         bench_row *rows) {
    int max_b = 1;
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] > max_b)
            max_b = o->batches[i];
    bench_run r;
    int rc = bench_run_create(cm, o, max_b, threads, &r);
    for (int bi = 0; !rc && bi < o->n_batches; bi++) {
        int b = o->batches[bi];
        rows[bi].b = b;
        rc = bench_prefill(&r, b, o->P, o->reps, &rows[bi].prefill_tok_s);
        bench_roof_sample(rf);
        if (!rc)
            rc = bench_decode(&r, b, o->P, o->G, o->cold ? rf->probe : NULL, &rf->n_flush,
                              &rows[bi].decode_tok_s);
        bench_roof_sample(rf);
        if (!rc && !o->json)
            fprintf(stderr, "verity bench: batch %d done\n", b);
    }
    bench_run_destroy(&r);
    return rc;
}

/* Sets each row's fractions of the roofline. */
static void bench_rows_fractions(const bench_roof *rf, bench_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        rows[i].prefill_fma = rf->flops_tok * rows[i].prefill_tok_s / (rf->fma * 1e9);
        rows[i].decode_bw = (double)rf->wbytes * rows[i].decode_tok_s / rows[i].b / (rf->bw * 1e9);
        rows[i].decode_fma = rf->flops_tok * rows[i].decode_tok_s / (rf->fma * 1e9);
    }
}

/* Prints the table. */
static void bench_print_text(const cli_model *cm, int threads, const bench_roof *rf,
                             const bench_row *rows, int n) {
    const model_hparams *hp = model_get_hparams(cm->m);
    printf("machine: %s, isa %s, %d threads\n", cpu_model_name(), kn_isa_name(cm->isa), threads);
    printf("roofline: read %.1f GB/s (%.2f GB buffer), fp32 FMA %.1f GFLOP/s: medians of %d and %d "
           "samples taken before the first phase and after every phase (%d points); read %.1f-%.1f "
           "GB/s, FMA %.1f-%.1f GFLOP/s\n",
           rf->bw, (double)rf->bw_bytes / 1e9, rf->fma, rf->n_bw, rf->n_fma, rf->n_points,
           rf->bw_min, rf->bw_max, rf->fma_min, rf->fma_max);
    printf("model: %s %s, %lld layers, embd %lld, %.1f MB of matmul weights, %.3f GFLOP/token\n",
           hp->arch_name, kn_type_name(hp->weight_type), (long long)hp->n_layer,
           (long long)hp->n_embd, (double)rf->wbytes / 1e6, rf->flops_tok / 1e9);
    if (rf->n_flush)
        printf("decode: every step after a read pass over the buffer (--cold, %d passes): the "
               "weights come from memory\n",
               rf->n_flush);
    printf("%6s %14s %9s %14s %9s %9s\n", "batch", "prefill tok/s", "of FMA", "decode tok/s",
           "of BW", "of FMA");
    for (int i = 0; i < n; i++)
        printf("%6d %14.1f %8.1f%% %14.1f %8.1f%% %8.1f%%\n", rows[i].b, rows[i].prefill_tok_s,
               100 * rows[i].prefill_fma, rows[i].decode_tok_s, 100 * rows[i].decode_bw,
               100 * rows[i].decode_fma);
}

/* Prints the JSON report. */
static void bench_print_json(const cli_model *cm, const bench_opts *o, int threads,
                             const bench_roof *rf, const bench_row *rows) {
    const model_hparams *hp = model_get_hparams(cm->m);
    strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb, "{\"machine\":{\"cpu\":");
    strbuf_json_str(&sb, cpu_model_name(), strlen(cpu_model_name()), false);
    strbuf_printf(&sb,
                  ",\"isa\":\"%s\",\"threads\":%d,\"read_gbs\":%.3f,\"read_buffer_bytes\":%zu,"
                  "\"fma_gflops\":%.3f,\"roof_points\":%d,\"read_samples\":[",
                  kn_isa_name(cm->isa), threads, rf->bw, rf->bw_bytes, rf->fma, rf->n_points);
    for (int i = 0; i < rf->n_bw; i++)
        strbuf_printf(&sb, "%s%.3f", i ? "," : "", rf->bw_s[i]);
    strbuf_puts(&sb, "],\"fma_samples\":[");
    for (int i = 0; i < rf->n_fma; i++)
        strbuf_printf(&sb, "%s%.3f", i ? "," : "", rf->fma_s[i]);
    strbuf_puts(&sb, "]},");
    const char *mpath = o->model_path ? o->model_path : getenv("MODEL") ? getenv("MODEL") : "";
    strbuf_puts(&sb, "\"model\":{\"path\":");
    strbuf_json_str(&sb, mpath, strlen(mpath), false);
    strbuf_printf(&sb,
                  ",\"arch\":\"%s\",\"type\":\"%s\",\"layers\":%lld,\"embd\":%lld,"
                  "\"weight_bytes\":%zu,\"gflop_per_token\":%.6f},",
                  hp->arch_name, kn_type_name(hp->weight_type), (long long)hp->n_layer,
                  (long long)hp->n_embd, rf->wbytes, rf->flops_tok / 1e9);
    strbuf_printf(&sb, "\"prompt\":%lld,\"gen\":%lld,\"cold\":%s,\"flush_passes\":%d,\"results\":[",
                  (long long)o->P, (long long)o->G, o->cold ? "true" : "false", rf->n_flush);
    for (int i = 0; i < o->n_batches; i++)
        strbuf_printf(&sb,
                      "%s{\"batch\":%d,\"prefill_tok_s\":%.3f,\"prefill_fma_frac\":%.4f,"
                      "\"decode_tok_s\":%.3f,\"decode_bw_frac\":%.4f,\"decode_fma_frac\":%.4f}",
                      i ? "," : "", rows[i].b, rows[i].prefill_tok_s, rows[i].prefill_fma,
                      rows[i].decode_tok_s, rows[i].decode_bw, rows[i].decode_fma);
    strbuf_puts(&sb, "]}\n");
    fwrite(sb.data, 1, sb.len, stdout);
    strbuf_deinit(&sb);
}

/* Samples the roofline, runs every batch (sampling it again after every phase), and prints.
 * Returns the exit status. */
static int bench_model(const cli_model *cm, const bench_opts *o) {
    int threads = (int)flags_int(FLAG_THREADS);
    if (threads <= 0)
        threads = cpu_count_online();
    /* the probe: a pool of the same size as the forward pass's (idle while the forward pass runs:
     * its threads sleep after pool.c's short spin) and a buffer larger than the L3 and the model */
    bench_roof rf = {.wbytes = model_weight_bytes(cm->m), .bw_bytes = (size_t)1 << 30};
    if (2 * rf.wbytes > rf.bw_bytes)
        rf.bw_bytes = 2 * rf.wbytes;
    int rc = bench_roof_open(&rf, threads, cm->isa);
    if (!rc) {
        bench_roof_sample(&rf);
        rf.flops_tok = model_flops_per_token(cm->m);
    }
    bench_row rows[BENCH_MAX_BATCHES];
    if (!rc)
        rc = bench_measure(cm, o, threads, &rf, rows);
    bench_roof_close(&rf);
    if (rc)
        return cli_fail("bench", rc);
    bench_spread(rf.bw_s, rf.n_bw, &rf.bw, &rf.bw_min, &rf.bw_max);
    bench_spread(rf.fma_s, rf.n_fma, &rf.fma, &rf.fma_min, &rf.fma_max);
    bench_rows_fractions(&rf, rows, o->n_batches);
    if (o->json)
        bench_print_json(cm, o, threads, &rf, rows);
    else
        bench_print_text(cm, threads, &rf, rows, o->n_batches);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int status = bench_parse_args(argc, argv, &o);
    if (status)
        return status;
    char cached[1024];
    if (!o.model_path && !getenv("MODEL")) {
        int rc = bench_default_model(o.shape, &o.plan, cached, sizeof cached);
        if (rc)
            return cli_fail("bench", rc);
        o.model_path = cached;
    }
    cli_model cm;
    status = cli_model_open("bench", o.model_path, &cm);
    if (status)
        return status;
    status = bench_model(&cm, &o);
    cli_model_close(&cm);
    return status;
}
