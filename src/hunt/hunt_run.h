/* SPDX-License-Identifier: MIT */
/*
 * hunt_run: `verity hunt` as a library. A run measures, for the configured sessions, how often a
 * target's answers under concurrency differ harmfully from its answers to the very same requests
 * without concurrency.
 *
 * One batch of sessions (hunt_run_batch) at concurrency C goes through three phases:
 *   1. reference walk: each session is played at the reference concurrency (1 by default, or on
 *      a reference server), every request and reply going into the reference cache, keyed by an
 *      FNV-1a hash of the exact request body. Sessions already walked hit the cache and cost
 *      nothing, so levels that replay the same sessions share one reference.
 *   2. test: the sessions run C at a time (with filler sessions keeping C in flight until the
 *      last counted session ends, so every counted session sees the full load; the fillers then
 *      finish the requests they have in flight, so none still runs on the server when the next
 *      phase starts). A turn whose
 *      request is in the cache is judged at once (hunt_oracle_judge); a turn whose history
 *      diverged from the reference's (after a benign divergence) is pending.
 *   3. resolve: pending turns are judged in order against references for the exact requests the
 *      session sent, asked at the reference concurrency: the reference is built turn by turn from
 *      the same history.
 * A session's verdict is corrupt if any turn is, else benign if any turn diverged benignly, else
 * clean; error if the target failed it (after retries of 429/502/503/504 and dropped
 * connections). Sessions end at their first corrupt turn.
 *
 * While a batch runs, the target's /metrics is scraped (hunt_metrics.h), and once more after the
 * run (hunt_run_finish); a progress line is printed on stderr. Everything is single-threaded and
 * event-driven (hunt_client).
 *
 * The results (hunt_results) keep every session's verdict and evidence and are what the report
 * writers read (hunt_report.h).
 */
#ifndef VERITY_HUNT_RUN_H
#define VERITY_HUNT_RUN_H

#include "hunt/hunt_metrics.h"
#include "hunt/hunt_oracle.h"
#include "hunt/hunt_workload.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#define HUNT_MAX_LEVELS 32

typedef struct hunt_config {
    const char *url;     /* target: base URL, .../v1, or .../v1/chat/completions */
    const char *api_key; /* NULL: none */
    const char *model;   /* NULL: the first of /v1/models, else "default" */
    int conc[HUNT_MAX_LEVELS];
    int n_conc;
    int sessions; /* per concurrency level */
    int turns;
    int n_tools;             /* built-in tools offered (0..12) */
    const char *tools_file;  /* replaces the built-in tools */
    int pads[HUNT_MAX_PADS]; /* context padding levels, tokens */
    int n_pads;
    double temperature;
    uint64_t seed;
    const char *ref_url; /* NULL: the target itself */
    int ref_conc;        /* reference concurrency (1) */
    bool stream;
    double duration_s; /* per level and phase: no new session after this (0 = no limit) */
    int max_tokens;
    double timeout_s;     /* per request */
    double tie_threshold; /* nats */
    bool logprobs;
    int top_logprobs;
    bool skip_special;           /* send skip_special_tokens, alternating by session */
    int scrape_ms;               /* /metrics period; 0 = do not scrape */
    bool fill;                   /* filler sessions keep the concurrency up */
    int retries;                 /* per request, for 429/5xx/dropped connections */
    int progress;                /* 0 none, 1 a line every few seconds, 2 a live \r line (a tty) */
    volatile sig_atomic_t *stop; /* set asynchronously to stop early (SIGINT); may be NULL */
    const char *out_dir;         /* reports (the command's business; the run ignores it) */
    bool json;                   /* print the results JSON on stdout (likewise) */
} hunt_config;

/* Fills a config with the defaults of `verity hunt`. */
void hunt_config_default(hunt_config *c);

typedef struct hunt_turn_rec {
    hunt_verdict verdict;
    double t_start, t_end; /* seconds since the run started (test request) */
    int64_t prompt_tokens; /* usage, -1 unknown */
    int64_t completion_tokens;
    unsigned found;       /* findings (hunt_eval.found) */
    unsigned model_level; /* findings shared with the reference (hunt_eval.model_level) */
    hunt_neartie neartie;
} hunt_turn_rec;

typedef struct hunt_session_rec {
    int64_t index; /* session index (seed derivation) */
    int level;     /* index into the concurrency list (or the batch's caller tag) */
    int conc;      /* concurrency it ran at */
    int pad;       /* context padding, tokens */
    int pad_slot;
    uint64_t seed;
    int skip_special; /* skip_special_tokens it sent: 0, 1, or -1 (not sent) */
    hunt_verdict verdict;
    int n_turns;          /* turns run */
    hunt_turn_rec *turns; /* [n_turns] (malloc'd) */
    int shown_turn;       /* the first corrupt turn, else the first benign one; -1 */
    hunt_eval eval;       /* of shown_turn */
    char *test_text;      /* shown turn rendered, test and reference (malloc'd) */
    char *ref_text;
    char *error; /* what failed, for verdict error (malloc'd) */
    int64_t max_prompt_tokens;
    void *priv; /* the runner's retained state until the verdict is final */
} hunt_session_rec;

typedef struct hunt_cell {
    int64_t n; /* sessions with a verdict (clean + benign + corrupt) */
    int64_t corrupt, benign, clean, errors;
    double lo, hi; /* Wilson 95% interval of corrupt / n */
} hunt_cell;

typedef struct hunt_span {
    double t0, t1; /* a test phase, seconds since the run started */
    int conc;
} hunt_span;

/* What the run was asked to do, as run. Written once by hunt_run_create (copied from the
 * hunt_config, with logprobs and skip_special as the target's probe left them, the model as the
 * target named it, and pad_bytes_per_token from the calibration); read-only afterwards. */
typedef struct hunt_results_config {
    char *url, *model, *ref_url;
    int conc[HUNT_MAX_LEVELS];
    int n_conc;
    int pads[HUNT_MAX_PADS];
    int n_pads;
    int sessions, turns, n_tools, max_tokens, ref_conc;
    bool stream, logprobs;
    bool skip_special; /* skip_special_tokens sent (alternating by session) */
    double temperature, tie_threshold;
    uint64_t seed;
    double pad_bytes_per_token; /* padding bytes per token (measured, else 4; 0: no padding) */
} hunt_results_config;

/* The per-session records (verdicts and evidence), in the order they were finalised. Appended by
 * hunt_run_batch as each session's verdict becomes final; the records are owned here. */
typedef struct hunt_results_records {
    hunt_session_rec **recs; /* [n_recs] (malloc'd, each malloc'd) */
    int64_t n_recs;
    size_t cap_recs;
} hunt_results_records;

/* Figures computed from the records. Written only by hunt_results_aggregate (which recomputes
 * them all); stale until it is called after the last batch. */
typedef struct hunt_aggregates {
    hunt_cell per_level[HUNT_MAX_LEVELS];
    hunt_cell per_pad[HUNT_MAX_PADS];
    hunt_cell grid[HUNT_MAX_LEVELS][HUNT_MAX_PADS];
    hunt_cell total;
    int64_t diverged;                  /* exact oracle: sessions with any divergence */
    int64_t neartie_benign;            /* sessions whose divergences were all near ties */
    int64_t neartie_corrupt;           /* sessions with a divergence that was not a near tie */
    int64_t finding[HUNT_F_COUNT];     /* sessions with each finding (load-dependent) */
    int64_t model_level[HUNT_F_COUNT]; /* turns with each finding in both test and reference */
    char confound[512];                /* the confound split's conclusion */
} hunt_aggregates;

/* What was seen of the server over time. Samples are appended by the run's /metrics scraper
 * while batches run (and once more by hunt_run_finish); spans by hunt_run_batch, one per batch. */
typedef struct hunt_results_observed {
    hunt_metrics_sample *samples; /* [n_samples] (malloc'd) */
    int64_t n_samples;
    size_t cap_samples;
    char *metrics_flavor; /* NULL: no /metrics (malloc'd) */
    hunt_span *spans;     /* test phases, for the timeline [n_spans] (malloc'd) */
    int64_t n_spans;
    size_t cap_spans;
} hunt_results_observed;

/* The load generator's own figures. requests, ref_requests and retries are counted by the run as
 * requests complete; the rest are set once by hunt_run_finish. */
typedef struct hunt_results_client {
    int peak_in_flight;
    int64_t requests, ref_requests, retries, bytes;
    double wall_s, cpu_s;
    bool interrupted;
} hunt_results_client;

typedef struct hunt_results {
    hunt_results_config cfg;
    hunt_results_records records;
    hunt_aggregates agg;
    hunt_results_observed obs;
    hunt_results_client client;
} hunt_results;

typedef struct hunt_run hunt_run;

/* Creates a run: loads the tools, builds the workload, creates the client and checks the target:
 * GET /v1/models (which also names the model when none was given). Returns 0; ERR_CONNECT (the
 * target cannot be reached; detail names the URL), ERR_AUTH (401/403), ERR_IO/ERR_FORMAT (tools
 * file), ERR_RANGE (a configuration value), ERR_NOMEM, ERR_INTERNAL. */
int hunt_run_create(const hunt_config *cfg, hunt_run **out);

/* Frees the run and its results. NULL is a no-op. */
void hunt_run_destroy(hunt_run *r);

/* Runs sessions first_index .. first_index + n - 1 at concurrency conc (reference walk, test,
 * resolve) and appends their records to the results, tagged with `level`. Returns 0; ERR_PROTOCOL
 * when the target failed most sessions (detail quotes the first failure: a target error, not
 * corruption); ERR_CANCELLED when *cfg->stop was set (the records of sessions finished so far are
 * kept); ERR_NOMEM; ERR_INTERNAL. */
int hunt_run_batch(hunt_run *r, int level, int conc, int64_t first_index, int n);

/* Tells the progress line how many sessions the whole run will test (for its ETA). */
void hunt_run_set_plan(hunt_run *r, int64_t sessions_total);

/* The results so far (owned by the run). Call hunt_results_aggregate before reading aggregates. */
hunt_results *hunt_run_results(hunt_run *r);

/* Ends the run: unless it was interrupted, takes one last /metrics sample (when scraping is on)
 * after all traffic, then stops the clocks: wall and CPU time, client figures. */
void hunt_run_finish(hunt_run *r);

/* Computes the aggregates and the confound conclusion from the records. */
void hunt_results_aggregate(hunt_results *res);

/* Renders a reply for reports: content, then one line per tool call "[tool_call NAME ARGS]",
 * then "[finish_reason X]". Returns a malloc'd string or NULL. */
char *hunt_reply_render(const hunt_reply *r);

#endif
