/* SPDX-License-Identifier: MIT */
/* srv_metrics: see srv_metrics.h. */
#include "server/srv_metrics.h"
#include "base/flags.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SRV_MAX_BUCKETS 24

typedef struct srv_histo {
    const char *name, *help;
    int n_bounds;
    double bounds[SRV_MAX_BUCKETS];
    pthread_mutex_t mu;
    uint64_t counts[SRV_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last is +Inf */
    uint64_t count;
    double sum;
} srv_histo;

struct srv_metrics {
    _Atomic int64_t finish[SRV_FINISH_COUNT];
    _Atomic int64_t reject[SRV_REJECT_COUNT];
    _Atomic int64_t cancelled, tool_fail, prompt_tokens, gen_tokens;
    srv_histo h[SRV_H_COUNT];
};

static const char *srv_finish_names[SRV_FINISH_COUNT] = {"stop", "length", "tool_calls"};
static const char *srv_reject_names[SRV_REJECT_COUNT] = {
    "queue_full", "draining",     "loading",   "invalid_request",
    "too_long",   "unauthorized", "too_large", "body_budget"};

static void srv_histo_init(srv_histo *h, const char *name, const char *help, const double *b,
                           int n) {
    h->name = name;
    h->help = help;
    h->n_bounds = n;
    memcpy(h->bounds, b, (size_t)n * sizeof *b);
    pthread_mutex_init(&h->mu, NULL);
}

srv_metrics *srv_metrics_create(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    static const double lat[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25, 0.5,
                                 0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
    static const double itl[] = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                 0.075, 0.1,    0.15,  0.2,  0.3,   0.4,  0.5,   1.0,  2.5};
    static const double e2e[] = {0.1,  0.25, 0.5,  1.0,  2.5,   5.0,   10.0,  15.0, 20.0,
                                 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};
    static const double bsz[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
    srv_histo_init(&m->h[SRV_H_TTFT], "verity_time_to_first_token_seconds",
                   "Time from request arrival to its first generated token.", lat,
                   (int)(sizeof lat / sizeof *lat));
    srv_histo_init(&m->h[SRV_H_ITL], "verity_inter_token_latency_seconds",
                   "Time between consecutive generated tokens of a request.", itl,
                   (int)(sizeof itl / sizeof *itl));
    srv_histo_init(&m->h[SRV_H_E2E], "verity_e2e_request_latency_seconds",
                   "Time from request arrival to its last token.", e2e,
                   (int)(sizeof e2e / sizeof *e2e));
    srv_histo_init(&m->h[SRV_H_BATCH], "verity_batch_size", "Sequences in one engine step.", bsz,
                   (int)(sizeof bsz / sizeof *bsz));
    srv_histo_init(&m->h[SRV_H_STEP], "verity_engine_step_seconds",
                   "Duration of one engine step (one forward pass and sampling).", lat,
                   (int)(sizeof lat / sizeof *lat));
    return m;
}

void srv_metrics_destroy(srv_metrics *m) {
    if (!m)
        return;
    for (int i = 0; i < SRV_H_COUNT; i++)
        pthread_mutex_destroy(&m->h[i].mu);
    free(m);
}

void srv_metrics_finish(srv_metrics *m, enum srv_finish f) {
    atomic_fetch_add(&m->finish[f], 1);
}
void srv_metrics_reject(srv_metrics *m, enum srv_reject r) {
    atomic_fetch_add(&m->reject[r], 1);
}
void srv_metrics_cancelled(srv_metrics *m) {
    atomic_fetch_add(&m->cancelled, 1);
}
void srv_metrics_tool_parse_failure(srv_metrics *m) {
    atomic_fetch_add(&m->tool_fail, 1);
}
void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t generated) {
    atomic_fetch_add(&m->prompt_tokens, prompt);
    atomic_fetch_add(&m->gen_tokens, generated);
}

void srv_metrics_observe(srv_metrics *m, enum srv_hist which, double v) {
    srv_histo *h = &m->h[which];
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b])
        b++;
    pthread_mutex_lock(&h->mu);
    h->counts[b]++;
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&h->mu);
}

static void srv_family(strbuf *sb, const char *name, const char *type, const char *help) {
    strbuf_printf(sb, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Escapes a label value (backslash, quote, newline). */
static void srv_label(strbuf *sb, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            strbuf_putc(sb, '\\'), strbuf_putc(sb, *v);
        else if (*v == '\n')
            strbuf_puts(sb, "\\n");
        else
            strbuf_putc(sb, *v);
    }
}

/* One counter family of the KV cache hierarchy: the value for l1, then for each open tier. */
static void srv_cache_family(strbuf *sb, const eloop_stats *st, const char *name, const char *type,
                             const char *help, int64_t l1,
                             int64_t (*tier)(const kv_hier_tier_stats *)) {
    srv_family(sb, name, type, help);
    strbuf_printf(sb, "%s{tier=\"l1\"} %lld\n", name, (long long)l1);
    for (int i = 0; i < KV_TIER_COUNT; i++)
        if (st->e.tiers[i].open)
            strbuf_printf(sb, "%s{tier=\"%s\"} %lld\n", name, kv_tiers_tier_name(i),
                          (long long)tier(&st->e.tiers[i]));
}

static int64_t tier_lookups(const kv_hier_tier_stats *t) {
    return t->io.hits + t->io.misses;
}
static int64_t tier_hits(const kv_hier_tier_stats *t) {
    return t->io.hits;
}
static int64_t tier_misses(const kv_hier_tier_stats *t) {
    return t->io.misses;
}
static int64_t tier_blocks(const kv_hier_tier_stats *t) {
    return t->io.blocks;
}
static int64_t tier_bytes(const kv_hier_tier_stats *t) {
    return t->io.bytes;
}
static int64_t tier_evictions(const kv_hier_tier_stats *t) {
    return t->io.evictions;
}
static int64_t tier_failures(const kv_hier_tier_stats *t) {
    return t->failures;
}
static int64_t tier_restored(const kv_hier_tier_stats *t) {
    return t->restored;
}
static int64_t tier_stored(const kv_hier_tier_stats *t) {
    return t->io.puts;
}
static int64_t tier_stored_bytes(const kv_hier_tier_stats *t) {
    return t->io.put_bytes;
}
static int64_t tier_dropped(const kv_hier_tier_stats *t) {
    return t->io.puts_dropped;
}
static int64_t tier_errors(const kv_hier_tier_stats *t) {
    return t->io.errors;
}

/* The tiers' load latency, as one Prometheus histogram per open tier. */
static void srv_cache_load_hist(strbuf *sb, const eloop_stats *st) {
    srv_family(sb, "verity_kv_tier_load_seconds", "histogram",
               "Time a tier took to return a block it held.");
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        const kv_tier_stats *io = &st->e.tiers[i].io;
        if (!st->e.tiers[i].open)
            continue;
        const char *tn = kv_tiers_tier_name(i);
        int64_t cum = 0;
        for (int b = 0; b < KV_TIER_LOAD_BUCKETS; b++) {
            cum += io->load_counts[b];
            strbuf_printf(sb, "verity_kv_tier_load_seconds_bucket{tier=\"%s\",le=\"%g\"} %lld\n",
                          tn, kv_tier_load_bounds_s[b], (long long)cum);
        }
        strbuf_printf(sb, "verity_kv_tier_load_seconds_bucket{tier=\"%s\",le=\"+Inf\"} %lld\n", tn,
                      (long long)io->load_count);
        strbuf_printf(sb, "verity_kv_tier_load_seconds_sum{tier=\"%s\"} %.6f\n", tn,
                      io->load_sum_s);
        strbuf_printf(sb, "verity_kv_tier_load_seconds_count{tier=\"%s\"} %lld\n", tn,
                      (long long)io->load_count);
    }
    srv_family(sb, "verity_kv_tier_reload_seconds_total", "counter",
               "Wall time of reloads from a tier, from a queued request's first lookup to its "
               "blocks verified in memory (I/O, waits, decoding), shared among tiers by blocks.");
    for (int i = 0; i < KV_TIER_COUNT; i++)
        if (st->e.tiers[i].open)
            strbuf_printf(sb, "verity_kv_tier_reload_seconds_total{tier=\"%s\"} %.6f\n",
                          kv_tiers_tier_name(i), st->e.tiers[i].reload_s);
}

/* The KV cache hierarchy: the prefix cache in memory (tier "l1") and the tiers below it. */
static void srv_metrics_write_cache(const eloop_stats *st, strbuf *sb) {
    const kv_prefix_stats *px = &st->e.prefix;
    srv_family(sb, "verity_cached_prompt_tokens_total", "counter",
               "Known positions taken from the KV cache instead of computed.");
    strbuf_printf(sb, "verity_cached_prompt_tokens_total %lld\n",
                  (long long)st->e.cached_positions);
    srv_cache_family(sb, st, "verity_kv_cache_lookups_total", "counter",
                     "Full blocks looked up in a KV cache tier.", px->lookups, tier_lookups);
    srv_cache_family(sb, st, "verity_kv_cache_hits_total", "counter",
                     "Blocks a KV cache tier had when asked.", px->hits, tier_hits);
    srv_cache_family(sb, st, "verity_kv_cache_misses_total", "counter",
                     "Block lookups a tier could not serve.", px->lookups - px->hits, tier_misses);
    srv_family(sb, "verity_kv_cache_hit_rate", "gauge", "Hits over lookups since start, per tier.");
    strbuf_printf(sb, "verity_kv_cache_hit_rate{tier=\"l1\"} %.6f\n",
                  px->lookups ? (double)px->hits / (double)px->lookups : 0.0);
    for (int i = 0; i < KV_TIER_COUNT; i++) {
        const kv_hier_tier_stats *t = &st->e.tiers[i];
        if (t->open)
            strbuf_printf(sb, "verity_kv_cache_hit_rate{tier=\"%s\"} %.6f\n", kv_tiers_tier_name(i),
                          tier_lookups(t) ? (double)t->io.hits / (double)tier_lookups(t) : 0.0);
    }
    srv_cache_family(sb, st, "verity_kv_cache_blocks", "gauge",
                     "Blocks a KV cache tier holds (0 for a shared Redis, which cannot tell).",
                     px->cached, tier_blocks);
    srv_cache_family(sb, st, "verity_kv_cache_bytes", "gauge", "Bytes a KV cache tier holds.",
                     px->cached * st->e.kv_block_bytes, tier_bytes);
    srv_family(
        sb, "verity_kv_cache_evictable_blocks", "gauge",
        "Cached blocks in memory that no request holds (evicted first when room is needed).");
    strbuf_printf(sb, "verity_kv_cache_evictable_blocks %lld\n", (long long)px->evictable);
    srv_cache_family(sb, st, "verity_kv_cache_evictions_total", "counter",
                     "Blocks evicted from a tier for room.", px->evictions, tier_evictions);
    srv_cache_family(sb, st, "verity_kv_checksum_failures_total", "counter",
                     "KV blocks refused because their bytes did not match their checksum or name "
                     "(dropped and recomputed, never used).",
                     px->checksum_failures, tier_failures);
    srv_cache_family(sb, st, "verity_kv_cache_restored_blocks_total", "counter",
                     "Blocks restored into memory from a tier (l1: taken from the prefix cache).",
                     px->hits, tier_restored);
    srv_cache_family(sb, st, "verity_kv_cache_stored_blocks_total", "counter",
                     "Blocks written to a tier (l1: sealed into the prefix cache).", px->inserted,
                     tier_stored);
    srv_cache_family(sb, st, "verity_kv_cache_stored_bytes_total", "counter",
                     "Bytes written to a tier.", px->inserted * st->e.kv_block_bytes,
                     tier_stored_bytes);
    srv_cache_family(sb, st, "verity_kv_cache_dropped_writes_total", "counter",
                     "Writes to a tier dropped because its queue was full.", 0, tier_dropped);
    srv_cache_family(sb, st, "verity_kv_cache_errors_total", "counter",
                     "Failed tier operations (each read among them counted as a miss).", 0,
                     tier_errors);
    srv_cache_load_hist(sb, st);
}

/* A histogram of small counts from per-value counts (counts[v] for v in 0..n-1), with the given
 * upper bounds. */
static void srv_count_hist(strbuf *sb, const char *name, const char *help, const int64_t *counts,
                           int n, const int *bounds, int n_bounds) {
    srv_family(sb, name, "histogram", help);
    int64_t cum = 0, total = 0, sum = 0;
    int v = 0;
    for (int b = 0; b < n_bounds; b++) {
        for (; v < n && v <= bounds[b]; v++)
            cum += counts[v];
        strbuf_printf(sb, "%s_bucket{le=\"%d\"} %lld\n", name, bounds[b], (long long)cum);
    }
    for (int i = 0; i < n; i++) {
        total += counts[i];
        sum += (int64_t)i * counts[i];
    }
    strbuf_printf(sb, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %lld\n%s_count %lld\n", name,
                  (long long)total, name, (long long)sum, name, (long long)total);
}

/* Speculative decoding (engine.h): guesses fed and kept, and how many a step keeps. */
static void srv_metrics_write_spec(const eloop_stats *st, strbuf *sb) {
    srv_family(sb, "verity_spec_drafted_tokens_total", "counter",
               "Drafted tokens fed to the model for verification (speculative decoding).");
    strbuf_printf(sb, "verity_spec_drafted_tokens_total %lld\n", (long long)st->e.spec_drafted);
    srv_family(sb, "verity_spec_accepted_tokens_total", "counter",
               "Drafted tokens the request's own sampler picked, and so kept.");
    strbuf_printf(sb, "verity_spec_accepted_tokens_total %lld\n", (long long)st->e.spec_accepted);
    srv_family(sb, "verity_spec_acceptance_ratio", "gauge",
               "Accepted over drafted tokens since start.");
    strbuf_printf(sb, "verity_spec_acceptance_ratio %.6f\n",
                  st->e.spec_drafted ? (double)st->e.spec_accepted / (double)st->e.spec_drafted
                                     : 0.0);
    static const int acc[] = {0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32};
    srv_count_hist(sb, "verity_spec_acceptance_length",
                   "Drafted tokens accepted in one verification (a decoding sequence's step that "
                   "fed drafted tokens).",
                   st->e.spec_accept_hist, SPEC_MAX_K + 1, acc, (int)(sizeof acc / sizeof *acc));
    static const int per[] = {0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 33};
    srv_count_hist(sb, "verity_spec_tokens_per_step",
                   "Tokens a decoding sequence kept from one engine step (1 without speculation, "
                   "0 when it ended on an end-of-generation token).",
                   st->e.step_tokens_hist, SPEC_MAX_K + 2, per, (int)(sizeof per / sizeof *per));
}

void srv_metrics_write(srv_metrics *m, const eloop_stats *st, const char *model_name,
                       int64_t body_bytes, strbuf *sb) {
    srv_family(sb, "verity_requests_running", "gauge", "Requests in the running batch.");
    strbuf_printf(sb, "verity_requests_running %lld\n", (long long)st->e.running);
    srv_family(sb, "verity_requests_waiting", "gauge", "Requests waiting for admission.");
    strbuf_printf(sb, "verity_requests_waiting %lld\n", (long long)st->e.waiting);
    srv_family(sb, "verity_request_body_bytes", "gauge",
               "Bytes of request bodies being received (or announced by Content-Length) and not "
               "yet parsed, all connections together (bounded by --max-body-total).");
    strbuf_printf(sb, "verity_request_body_bytes %lld\n", (long long)body_bytes);
    srv_family(sb, "verity_engine_paused", "gauge",
               "1 while the engine is held between steps (POST /admin/pause).");
    strbuf_printf(sb, "verity_engine_paused %d\n", st->paused ? 1 : 0);
    srv_family(sb, "verity_kv_usage_ratio", "gauge", "Fraction of KV cache blocks in use.");
    strbuf_printf(sb, "verity_kv_usage_ratio %.6f\n",
                  st->e.kv_total ? (double)st->e.kv_used / (double)st->e.kv_total : 0.0);
    srv_family(sb, "verity_kv_blocks", "gauge", "KV cache blocks in the pool.");
    strbuf_printf(sb, "verity_kv_blocks %lld\n", (long long)st->e.kv_total);
    srv_family(sb, "verity_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.");
    strbuf_printf(sb, "verity_prompt_tokens_total %lld\n",
                  (long long)atomic_load(&m->prompt_tokens));
    srv_family(sb, "verity_generation_tokens_total", "counter",
               "Generated tokens delivered to clients.");
    strbuf_printf(sb, "verity_generation_tokens_total %lld\n",
                  (long long)atomic_load(&m->gen_tokens));
    srv_family(sb, "verity_engine_prompt_tokens_total", "counter",
               "Known tokens the engine computed (prefill, and recomputation after preemption).");
    strbuf_printf(sb, "verity_engine_prompt_tokens_total %lld\n", (long long)st->e.prompt_computed);
    srv_family(
        sb, "verity_shared_prompt_tokens_total", "counter",
        "Prompt positions the choices of an n > 1 request took from each other (not computed).");
    strbuf_printf(sb, "verity_shared_prompt_tokens_total %lld\n",
                  (long long)st->e.shared_positions);
    srv_metrics_write_cache(st, sb);
    srv_metrics_write_spec(st, sb);
    srv_family(sb, "verity_engine_steps_total", "counter", "Engine steps run.");
    strbuf_printf(sb, "verity_engine_steps_total %lld\n", (long long)st->steps);
    srv_family(sb, "verity_request_success_total", "counter",
               "Requests finished, by finish reason.");
    for (int i = 0; i < SRV_FINISH_COUNT; i++)
        strbuf_printf(sb, "verity_request_success_total{finish_reason=\"%s\"} %lld\n",
                      srv_finish_names[i], (long long)atomic_load(&m->finish[i]));
    srv_family(sb, "verity_requests_rejected_total", "counter", "Requests refused, by reason.");
    for (int i = 0; i < SRV_REJECT_COUNT; i++)
        strbuf_printf(sb, "verity_requests_rejected_total{reason=\"%s\"} %lld\n",
                      srv_reject_names[i], (long long)atomic_load(&m->reject[i]));
    srv_family(sb, "verity_requests_cancelled_total", "counter",
               "Requests cancelled before they finished: the client went away, or the server's "
               "shutdown cut them (--drain-timeout).");
    strbuf_printf(sb, "verity_requests_cancelled_total %lld\n",
                  (long long)atomic_load(&m->cancelled));
    srv_family(sb, "verity_preemptions_total", "counter",
               "Sequences preempted (KV freed, recomputed later).");
    strbuf_printf(sb, "verity_preemptions_total %lld\n", (long long)st->e.preemptions);
    srv_family(sb, "verity_tool_parse_failures_total", "counter",
               "Tool calls in model output that did not parse.");
    strbuf_printf(sb, "verity_tool_parse_failures_total %lld\n",
                  (long long)atomic_load(&m->tool_fail));
    for (int i = 0; i < SRV_H_COUNT; i++) {
        srv_histo *h = &m->h[i];
        srv_family(sb, h->name, "histogram", h->help);
        pthread_mutex_lock(&h->mu);
        uint64_t cum = 0;
        for (int b = 0; b < h->n_bounds; b++) {
            cum += h->counts[b];
            strbuf_printf(sb, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[b],
                          (unsigned long long)cum);
        }
        cum += h->counts[h->n_bounds];
        strbuf_printf(sb, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h->name,
                      (unsigned long long)cum, h->name, h->sum, h->name,
                      (unsigned long long)h->count);
        pthread_mutex_unlock(&h->mu);
    }
    srv_family(sb, "verity_flag_info", "gauge",
               "The toggle registry: one series per toggle with its current value.");
    for (int i = 0; i < FLAG_COUNT; i++) {
        const flag_info *f = flags_get(i);
        strbuf_puts(sb, "verity_flag_info{name=\"");
        srv_label(sb, f->name);
        strbuf_puts(sb, "\",value=\"");
        srv_label(sb, f->secret ? "(set)" : f->value);
        strbuf_puts(sb, "\"} 1\n");
    }
    srv_family(sb, "verity_model_info", "gauge", "The served model.");
    strbuf_puts(sb, "verity_model_info{model=\"");
    srv_label(sb, model_name);
    strbuf_puts(sb, "\"} 1\n");
}
