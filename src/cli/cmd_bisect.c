/* SPDX-License-Identifier: MIT */
/*
 * cmd_bisect: `verity bisect` decides which configuration toggle is behind the corruption that
 * `verity hunt` measures.
 *
 *   verity bisect --launch 'COMMAND WITH {flags}' --health URL --toggle NAME=OFF:ON ...
 *                 [--prior FILE] [--budget RESTARTS] [--hunt 'HUNT ARGS'] [--ledger FILE]
 *                 [--server-log FILE] [--health-timeout S] [--round N] [--baseline-sessions N]
 *                 [--max-sessions N] [--p0 P] [--p1 P] [--quiet]
 *
 * For each configuration it starts the target (hunt_launch.h: {flags}, {NAME} and {port}
 * placeholders, environment-variable toggles), waits for the health URL, runs hunt rounds at the
 * highest concurrency of the hunt arguments until the SPRT decides, and stops the target's process
 * group. The search is hunt_bisect.h's; the ledger (default verity-bisect-ledger.json, with a .md
 * beside it) is rewritten after every round, and a rerun with the same arguments resumes from it.
 *
 * The prior file is a JSON object {"NAME": {"likelihood": L, "cost": C}, ...} (or "NAME": L);
 * toggles are tried in order of L / C. Exit status: 0 a culprit (or culprit set) was named, 1 the
 * search ended without one (clean baseline, no culprit among the toggles, undecided, budget), 2
 * usage, launch or target error, or interrupted (rerun to resume).
 */
#include "base/arena.h"
#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "hunt/hunt_args.h"
#include "hunt/hunt_bisect.h"
#include "hunt/hunt_launch.h"
#include "hunt/hunt_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char bisect_help[] =
    "usage: verity bisect --launch 'COMMAND WITH {flags}' --health URL --toggle NAME=OFF:ON ...\n"
    "  --launch CMD            run by sh -c; {flags}, {NAME} and {port} are filled in\n"
    "  --health URL            polled until it answers 200\n"
    "  --toggle NAME=OFF:ON    baseline = every toggle ON; NAME in capitals = environment "
    "variable\n"
    "  --hunt 'ARGS'           verity hunt arguments (--url required; highest concurrency used)\n"
    "  --prior FILE            {\"NAME\": {\"likelihood\": L, \"cost\": C}, ...}\n"
    "  --budget RESTARTS       (2*ceil(log2 toggles)+4)\n"
    "  --ledger FILE           JSON ledger, resumed when it exists (verity-bisect-ledger.json)\n"
    "  --server-log FILE --health-timeout S --round N --baseline-sessions N --max-sessions N\n"
    "  --p0 P --p1 P --quiet\n"
    "exit status: 0 culprit named, 1 none named, 2 usage, launch or target error, interrupted\n";

typedef struct bisect_ctx {
    const char *launch, *health, *hunt_args, *ledger_path, *server_log;
    double health_timeout;
    bool quiet;
    int conc;
    bool uses_port;
    /* the configuration running now */
    hunt_proc *proc;
    hunt_run *run;
    char **hunt_argv; /* split hunt args (one block) */
} bisect_ctx;

/* Parses the hunt arguments for this launch (with the port substituted). */
static int bisect_hunt_config(bisect_ctx *c, const hunt_ledger *lg, uint64_t flipped, int port,
                              hunt_config *cfg, char *msg, size_t cap) {
    strbuf s;
    strbuf_init(&s);
    int rc = hunt_launch_expand(c->hunt_args, lg, flipped, port, &s);
    if (rc) {
        snprintf(msg, cap, "--hunt: %s", err_detail());
        strbuf_deinit(&s);
        return rc;
    }
    free(c->hunt_argv);
    c->hunt_argv = NULL;
    int argc;
    rc = hunt_args_split(s.data, &argc, &c->hunt_argv, msg, cap);
    strbuf_deinit(&s);
    if (rc)
        return rc;
    hunt_config_default(cfg);
    cfg->progress = 0;
    rc = hunt_args_parse(argc, c->hunt_argv, cfg, true, msg, cap);
    if (rc)
        return rc;
    cfg->stop = cli_stop_flag();
    int maxc = 0;
    for (int i = 0; i < cfg->n_conc; i++)
        if (cfg->conc[i] > maxc)
            maxc = cfg->conc[i];
    c->conc = maxc;
    return 0;
}

static void bisect_end(void *ud) {
    bisect_ctx *c = ud;
    hunt_run_destroy(c->run);
    c->run = NULL;
    hunt_proc_stop(c->proc, 10);
    c->proc = NULL;
}

static int bisect_begin(void *ud, const hunt_ledger *lg, uint64_t flipped) {
    bisect_ctx *c = ud;
    int port = -1;
    if (c->uses_port && (port = hunt_free_port()) < 0)
        return port;
    strbuf cmd, health;
    strbuf_init(&cmd);
    strbuf_init(&health);
    char msg[512];
    hunt_config cfg;
    int rc = hunt_launch_expand(c->launch, lg, flipped, port, &cmd);
    if (!rc)
        rc = hunt_launch_expand(c->health, lg, flipped, port, &health);
    if (!rc && (rc = bisect_hunt_config(c, lg, flipped, port, &cfg, msg, sizeof msg)))
        err_set(rc, "%s", msg);
    if (!rc)
        rc = hunt_proc_start(cmd.data, lg, flipped, c->server_log, &c->proc);
    if (!rc)
        rc = hunt_proc_wait_healthy(c->proc, health.data, c->health_timeout, cli_stop_flag());
    if (!rc)
        rc = hunt_run_create(&cfg, &c->run);
    if (rc && rc != ERR_CANCELLED)
        err_wrap(rc, "launch '%s'", cmd.data);
    strbuf_deinit(&cmd);
    strbuf_deinit(&health);
    return rc;
}

static int bisect_round(void *ud, int64_t first, int n, hunt_verdict *out, int *n_out) {
    bisect_ctx *c = ud;
    hunt_results *res = hunt_run_results(c->run);
    int64_t before = res->records.n_recs;
    int rc = hunt_run_batch(c->run, 0, c->conc, first, n);
    int k = 0;
    for (int64_t i = before; i < res->records.n_recs && k < n; i++)
        out[k++] = res->records.recs[i]->verdict;
    *n_out = k;
    return rc;
}

static int bisect_save(void *ud, const hunt_ledger *lg) {
    bisect_ctx *c = ud;
    return hunt_ledger_save(lg, c->ledger_path);
}

static void bisect_note(void *ud, const char *line) {
    bisect_ctx *c = ud;
    if (!c->quiet)
        fprintf(stderr, "%s\n", line);
}

/* NAME=OFF:ON */
static int bisect_parse_toggle(hunt_ledger *lg, const char *s) {
    const char *eq = strchr(s, '=');
    const char *colon = eq ? strchr(eq + 1, ':') : NULL;
    if (!eq || !colon || eq == s || colon == eq + 1 || !colon[1])
        return cli_usage_error("bisect", "--toggle '%s': expected NAME=OFF:ON", s);
    if (lg->n_toggles >= HUNT_MAX_TOGGLES)
        return cli_usage_error("bisect", "at most %d toggles", HUNT_MAX_TOGGLES);
    for (int i = 0; i < lg->n_toggles; i++)
        if (strlen(lg->toggles[i].name) == (size_t)(eq - s) &&
            !memcmp(lg->toggles[i].name, s, (size_t)(eq - s)))
            return cli_usage_error("bisect", "--toggle '%s': %.*s given twice", s, (int)(eq - s),
                                   s);
    hunt_toggle *t = &lg->toggles[lg->n_toggles++];
    t->name = strndup(s, (size_t)(eq - s));
    t->off = strndup(eq + 1, (size_t)(colon - eq - 1));
    t->on = strdup(colon + 1);
    t->likelihood = 1;
    t->cost = 1;
    return 0;
}

static int bisect_load_prior(hunt_ledger *lg, const char *path) {
    char *text;
    size_t len;
    if (file_read_all(path, 0, &text, &len))
        return cli_usage_error("bisect", "--prior %s: cannot read (%s)", path, err_detail());
    arena *a = arena_create(0, 0);
    json_value *v;
    int status = 0;
    if (!a || json_parse(a, text, len, &v) || v->type != JSON_OBJECT) {
        status = cli_usage_error("bisect",
                                 "--prior %s: expected a JSON object of toggle names "
                                 "(%s)",
                                 path, err_detail());
        goto out;
    }
    for (size_t i = 0; i < v->obj.n; i++) {
        int t = -1;
        for (int k = 0; k < lg->n_toggles; k++)
            if (!strcmp(lg->toggles[k].name, v->obj.keys[i]))
                t = k;
        if (t < 0) {
            status = cli_usage_error("bisect", "--prior %s: '%s' is not a --toggle", path,
                                     v->obj.keys[i]);
            goto out;
        }
        const json_value *e = v->obj.vals[i];
        double l = 1, c = 1;
        if (!json_as_double(e, &l)) {
            json_as_double(json_get(e, "likelihood"), &l);
            json_as_double(json_get(e, "cost"), &c);
        }
        if (!(l > 0) || !(c > 0)) {
            status = cli_usage_error("bisect",
                                     "--prior %s: '%s' needs a positive likelihood "
                                     "and cost",
                                     path, v->obj.keys[i]);
            goto out;
        }
        lg->toggles[t].likelihood = l;
        lg->toggles[t].cost = c;
    }
out:
    arena_destroy(a);
    free(text);
    return status;
}

/* The search's own options; 0 (or -1 for budget) means "derive from the rest". */
typedef struct bisect_opts {
    const char *prior; /* --prior FILE, or NULL */
    int64_t budget, round, baseline, maxs;
    double p0, p1;
} bisect_opts;

/* Parses one option o with value v into c, lg and bo. Returns 0, or the exit status 2. */
static int bisect_parse_option(const char *o, const char *v, bisect_ctx *c, hunt_ledger *lg,
                               bisect_opts *bo) {
    if (!strcmp(o, "--launch"))
        c->launch = v;
    else if (!strcmp(o, "--health"))
        c->health = v;
    else if (!strcmp(o, "--toggle"))
        return bisect_parse_toggle(lg, v);
    else if (!strcmp(o, "--prior"))
        bo->prior = v;
    else if (!strcmp(o, "--budget"))
        return cli_parse_i64("bisect", o, v, 1, 10000, &bo->budget);
    else if (!strcmp(o, "--hunt"))
        c->hunt_args = v;
    else if (!strcmp(o, "--ledger"))
        c->ledger_path = v;
    else if (!strcmp(o, "--server-log"))
        c->server_log = v;
    else if (!strcmp(o, "--health-timeout"))
        return cli_parse_f64("bisect", o, v, 0.1, 86400, &c->health_timeout);
    else if (!strcmp(o, "--round"))
        return cli_parse_i64("bisect", o, v, 1, 1000000, &bo->round);
    else if (!strcmp(o, "--baseline-sessions"))
        return cli_parse_i64("bisect", o, v, 1, 10000000, &bo->baseline);
    else if (!strcmp(o, "--max-sessions"))
        return cli_parse_i64("bisect", o, v, 1, 10000000, &bo->maxs);
    else if (!strcmp(o, "--p0"))
        return cli_parse_f64("bisect", o, v, 1e-9, 0.999, &bo->p0);
    else if (!strcmp(o, "--p1"))
        return cli_parse_f64("bisect", o, v, 1e-9, 0.999, &bo->p1);
    else
        return cli_usage_error("bisect", "unknown option '%s'", o);
    return 0;
}

/* Parses the command line into c, lg (the toggles) and bo; on -h prints the help and sets *help.
 * Returns 0, or the exit status 2. */
static int bisect_parse_args(int argc, char **argv, bisect_ctx *c, hunt_ledger *lg, bisect_opts *bo,
                             bool *help) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            fputs(bisect_help, stdout);
            *help = true;
            return 0;
        }
        if (!strcmp(o, "--quiet")) {
            c->quiet = true;
            continue;
        }
        if (!(v = cli_next("bisect", argc, argv, &i)))
            return 2;
        int status = bisect_parse_option(o, v, c, lg, bo);
        if (status)
            return status;
    }
    return 0;
}

/* Checks the required options, the templates and the hunt arguments before starting anything;
 * loads the prior into lg and sets c->uses_port. Returns 0, or the exit status 2. */
static int bisect_validate(bisect_ctx *c, hunt_ledger *lg, const char *prior) {
    if (!c->launch || !c->health || lg->n_toggles == 0)
        return cli_usage_error("bisect", "--launch, --health and at least one --toggle are "
                                         "required");
    int status;
    if (prior && (status = bisect_load_prior(lg, prior)))
        return status;
    strbuf s;
    strbuf_init(&s);
    int rc = hunt_launch_expand(c->launch, lg, 0, 1, &s);
    if (!rc)
        rc = hunt_launch_expand(c->health, lg, 0, 1, &s);
    strbuf_deinit(&s);
    if (rc)
        return cli_usage_error("bisect", "%s", err_detail());
    hunt_config cfg;
    char msg[512];
    if (bisect_hunt_config(c, lg, 0, 1, &cfg, msg, sizeof msg))
        return cli_usage_error("bisect", "--hunt: %s", msg);
    c->uses_port = strstr(c->launch, "{port}") || strstr(c->health, "{port}") ||
                   strstr(c->hunt_args, "{port}");
    return 0;
}

/* Resumes from the ledger at c->ledger_path when there is one for this same bisection (the prior
 * given now wins), replacing *lg. Returns 0, or the exit status 2. */
static int bisect_resume(const bisect_ctx *c, hunt_ledger *lg) {
    hunt_ledger old;
    hunt_ledger_init(&old);
    int lrc = hunt_ledger_load(c->ledger_path, &old);
    if (lrc != 0) {
        hunt_ledger_deinit(&old);
        return lrc != ERR_NOTFOUND ? cli_usage_error("bisect", "%s", err_detail()) : 0;
    }
    if (hunt_ledger_check_same(&old, lg)) {
        int status = cli_usage_error("bisect",
                                     "%s belongs to a different bisection: %s (use "
                                     "another --ledger)",
                                     c->ledger_path, err_detail());
        hunt_ledger_deinit(&old);
        return status;
    }
    for (int i = 0; i < lg->n_toggles; i++) { /* the prior given now wins */
        old.toggles[i].likelihood = lg->toggles[i].likelihood;
        old.toggles[i].cost = lg->toggles[i].cost;
    }
    hunt_ledger_deinit(lg);
    *lg = old;
    if (!c->quiet)
        fprintf(stderr, "bisect: resuming from %s (%d entries, %d restarts used)\n", c->ledger_path,
                lg->n_entries, hunt_ledger_restarts(lg));
    return 0;
}

/* The search's configuration: the options given, else a budget of 2 log2(toggles) + 4 restarts,
 * rounds of max(8, the hunt's concurrency) sessions, a baseline of 2 rounds and 25 at most. */
static hunt_bisect_cfg bisect_cfg_make(const bisect_ctx *c, const hunt_ledger *lg,
                                       const bisect_opts *bo) {
    int lg2 = 0;
    while ((1 << lg2) < lg->n_toggles)
        lg2++;
    hunt_bisect_cfg bc = {
        .budget = bo->budget > 0 ? (int)bo->budget : 2 * lg2 + 4,
        .round = bo->round > 0 ? (int)bo->round : (c->conc > 8 ? c->conc : 8),
    };
    bc.baseline_sessions = bo->baseline > 0 ? (int)bo->baseline : 2 * bc.round;
    bc.max_sessions = bo->maxs > 0 ? (int)bo->maxs : 25 * bc.round;
    bc.p0 = bo->p0;
    bc.p1 = bo->p1;
    return bc;
}

/* Runs the search with SIGINT/SIGTERM stopping it between rounds, and prints the ledger. Returns
 * the exit status: 0 culprit found, 1 none, 2 interrupted or failed. */
static int bisect_search(bisect_ctx *c, hunt_ledger *lg, const hunt_bisect_cfg *bc) {
    cli_stop_catch();
    hunt_bisect_ops ops = {bisect_begin, bisect_round, bisect_end, bisect_save, bisect_note, c};
    int rc = hunt_bisect_run(lg, bc, &ops);
    bisect_end(c);
    if (rc == ERR_CANCELLED) {
        fprintf(stderr,
                "verity bisect: interrupted; the ledger %s is saved: rerun the same "
                "command to resume\n",
                c->ledger_path);
        return 2;
    }
    if (rc) {
        fprintf(stderr, "verity bisect: %s\n", err_detail()[0] ? err_detail() : err_str(rc));
        return 2;
    }
    strbuf md;
    strbuf_init(&md);
    hunt_ledger_md(lg, &md);
    fwrite(md.data, 1, md.len, stdout);
    strbuf_deinit(&md);
    return !strcmp(lg->state, "culprit") || !strcmp(lg->state, "culprit_set") ? 0 : 1;
}

int cmd_bisect(int argc, char **argv) {
    bisect_ctx c = {
        .hunt_args = "", .ledger_path = "verity-bisect-ledger.json", .health_timeout = 120};
    hunt_ledger lg;
    hunt_ledger_init(&lg);
    bisect_opts bo = {.budget = -1};
    bool help = false;
    int status = bisect_parse_args(argc, argv, &c, &lg, &bo, &help);
    if (!status && !help)
        status = bisect_validate(&c, &lg, bo.prior);
    char logbuf[4200];
    if (!status && !help) {
        lg.launch = strdup(c.launch);
        lg.health = strdup(c.health);
        lg.hunt = strdup(c.hunt_args);
        if (!c.server_log) {
            snprintf(logbuf, sizeof logbuf, "%s.server.log", c.ledger_path);
            c.server_log = logbuf;
        }
        status = bisect_resume(&c, &lg);
    }
    if (!status && !help) {
        hunt_bisect_cfg bc = bisect_cfg_make(&c, &lg, &bo);
        status = bisect_search(&c, &lg, &bc);
    }
    free(c.hunt_argv);
    hunt_ledger_deinit(&lg);
    return status;
}
