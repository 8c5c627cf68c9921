/* SPDX-License-Identifier: MIT */
/*
 * cmd_hunt: `verity hunt` finds concurrency-dependent corruption in any OpenAI-compatible server.
 *
 *   verity hunt --url URL [--api-key K] [--model M] [--concurrency 1,8,32,64] [--sessions N]
 *               [--turns T] [--tools N | --tools-file FILE] [--context-pad TOKENS,...]
 *               [--temperature T] [--seed S] [--reference URL | --reference-concurrency 1]
 *               [--stream] [--duration S] [--out DIR] [--json] [--max-tokens N] [--timeout S]
 *               [--tie-threshold NATS] [--no-logprobs] [--top-logprobs K]
 *               [--no-skip-special-tokens] [--scrape-ms MS] [--no-fill] [--retries N] [--quiet]
 *
 * Runs the sessions at every concurrency level (hunt_run.h), prints a progress line on stderr,
 * then a summary on stdout (the results JSON with --json) and, with --out, results.json,
 * report.md and report.html. Exit status: 0 no corruption, 1 corruption found, 2 usage or target
 * error (one line on stderr). SIGINT stops early; what was measured is still reported.
 */
#include "base/err.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "hunt/hunt_args.h"
#include "hunt/hunt_report.h"
#include "hunt/hunt_run.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char hunt_help[] =
    "usage: verity hunt --url URL [options]\n"
    "  --url URL                   OpenAI-compatible server (base, .../v1 or "
    ".../chat/completions)\n"
    "  --api-key K                 bearer token (or VERITY_API_KEY)\n"
    "  --model M                   model name (default: the first of /v1/models)\n"
    "  --concurrency 1,8,32,64     concurrency levels\n"
    "  --sessions N                sessions per level (64)\n"
    "  --turns T                   model requests per session (4)\n"
    "  --tools N | --tools-file F  built-in tools offered (10 of 12) or your own definitions\n"
    "  --context-pad TOKENS,...    context padding levels (0)\n"
    "  --temperature T --seed S    sampling (0, 1)\n"
    "  --reference URL             reference server (default: the target at concurrency 1)\n"
    "  --reference-concurrency N   reference concurrency (1)\n"
    "  --stream                    streaming requests\n"
    "  --duration S                per level: no new session after S seconds\n"
    "  --max-tokens N --timeout S  per request (128, 120)\n"
    "  --tie-threshold NATS        near-tie threshold (0.5)\n"
    "  --no-logprobs --top-logprobs K\n"
    "  --no-skip-special-tokens    do not send skip_special_tokens (default: true on even\n"
    "                              sessions, false on odd ones, so batches mix the two)\n"
    "  --scrape-ms MS              /metrics period, 0 = off (250)\n"
    "  --no-fill --retries N       no filler sessions; retries per request (3)\n"
    "  --out DIR --json --quiet    reports; results JSON on stdout; no progress line\n"
    "exit status: 0 clean, 1 corruption found, 2 usage or target error\n";

static void hunt_print_summary(const hunt_results *res) {
    printf("verity hunt: %s (model %s)\n", res->cfg.url, res->cfg.model);
    printf("%12s %9s %8s %7s %7s %7s %8s  %s\n", "concurrency", "sessions", "corrupt", "benign",
           "clean", "errors", "rate", "Wilson 95%");
    for (int i = 0; i < res->cfg.n_conc; i++) {
        const hunt_cell *c = &res->agg.per_level[i];
        printf("%12d %9lld %8lld %7lld %7lld %7lld %7.1f%%  [%.1f%%, %.1f%%]\n", res->cfg.conc[i],
               (long long)c->n, (long long)c->corrupt, (long long)c->benign, (long long)c->clean,
               (long long)c->errors, c->n ? 100.0 * (double)c->corrupt / (double)c->n : 0.0,
               100 * c->lo, 100 * c->hi);
    }
    if (res->cfg.n_pads > 1) {
        printf("%12s\n", "by padding:");
        for (int p = 0; p < res->cfg.n_pads; p++) {
            const hunt_cell *c = &res->agg.per_pad[p];
            printf("%12d %9lld %8lld %7lld %7lld %7lld %7.1f%%  [%.1f%%, %.1f%%]\n",
                   res->cfg.pads[p], (long long)c->n, (long long)c->corrupt, (long long)c->benign,
                   (long long)c->clean, (long long)c->errors,
                   c->n ? 100.0 * (double)c->corrupt / (double)c->n : 0.0, 100 * c->lo,
                   100 * c->hi);
        }
    }
    printf("confound: %s\n", res->agg.confound);
    int64_t reqs = res->client.requests + res->client.ref_requests;
    printf("verdict: %s; %lld requests, peak %d in flight, %.1f s, harness CPU %.3f ms/request\n",
           res->agg.total.corrupt ? "CORRUPTION FOUND" : "clean", (long long)reqs,
           res->client.peak_in_flight, res->client.wall_s,
           reqs ? 1000.0 * res->client.cpu_s / (double)reqs : 0.0);
}

int cmd_hunt(int argc, char **argv) {
    hunt_config cfg;
    hunt_config_default(&cfg);
    cfg.progress = isatty(2) ? 2 : 1;
    char msg[512];
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(hunt_help, stdout);
            return 0;
        }
    if (hunt_args_parse(argc - 1, argv + 1, &cfg, true, msg, sizeof msg))
        return cli_usage_error("hunt", "%s", msg);
    cfg.stop = cli_stop_flag();
    cli_stop_catch();
    hunt_run *run;
    int rc = hunt_run_create(&cfg, &run);
    if (rc) {
        fprintf(stderr, "verity hunt: %s\n", err_detail()[0] ? err_detail() : err_str(rc));
        return 2;
    }
    hunt_run_set_plan(run, (int64_t)cfg.n_conc * cfg.sessions);
    int status = 0;
    for (int i = 0; i < cfg.n_conc && !rc; i++)
        rc = hunt_run_batch(run, i, cfg.conc[i], 0, cfg.sessions);
    hunt_run_finish(run);
    hunt_results *res = hunt_run_results(run);
    hunt_results_aggregate(res);
    char fail[1024] = "";
    if (rc)
        snprintf(fail, sizeof fail, "%s", err_detail()[0] ? err_detail() : err_str(rc));
    if (cfg.out_dir) {
        int wrc = hunt_report_write(res, cfg.out_dir);
        if (wrc && !fail[0])
            snprintf(fail, sizeof fail, "%s", err_detail());
        if (wrc)
            rc = wrc;
    }
    if (cfg.json) {
        strbuf sb;
        strbuf_init(&sb);
        hunt_report_json(res, &sb);
        fwrite(sb.data, 1, sb.len, stdout);
        strbuf_deinit(&sb);
    } else if (res->records.n_recs) {
        hunt_print_summary(res);
    }
    if (res->agg.total.corrupt)
        status = 1;
    else if (rc)
        status = 2;
    if (rc)
        fprintf(stderr, "verity hunt: %s\n", fail);
    hunt_run_destroy(run);
    return status;
}
