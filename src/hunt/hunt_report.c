/* SPDX-License-Identifier: MIT */
/* hunt_report: results.json and report.md, and the file plumbing. See hunt_report.h. */
#include "hunt/hunt_report.h"
#include "base/err.h"
#include "hunt/hunt_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void jcell(strbuf *o, const hunt_cell *c) {
    strbuf_printf(o,
                  "\"n\":%lld,\"corrupt\":%lld,\"benign\":%lld,\"clean\":%lld,\"errors\":%lld,"
                  "\"rate\":",
                  (long long)c->n, (long long)c->corrupt, (long long)c->benign, (long long)c->clean,
                  (long long)c->errors);
    strbuf_json_num(o, c->n ? (double)c->corrupt / (double)c->n : 0);
    strbuf_puts(o, ",\"wilson95\":[");
    strbuf_json_num(o, c->lo);
    strbuf_putc(o, ',');
    strbuf_json_num(o, c->hi);
    strbuf_putc(o, ']');
}

static void jmask(strbuf *o, unsigned m) {
    strbuf_putc(o, '[');
    int n = 0;
    for (int k = 0; k < HUNT_F_COUNT; k++)
        if (m & (1u << k)) {
            strbuf_puts(o, n++ ? "," : "");
            strbuf_json_cstr(o, hunt_finding_name(k));
        }
    strbuf_putc(o, ']');
}

double hunt_results_mean_prompt(const hunt_results *res, int p) {
    double sum = 0;
    int64_t n = 0;
    for (int64_t i = 0; i < res->records.n_recs; i++)
        if (res->records.recs[i]->pad_slot == p && res->records.recs[i]->max_prompt_tokens >= 0) {
            sum += (double)res->records.recs[i]->max_prompt_tokens;
            n++;
        }
    return n ? sum / (double)n : -1;
}

/* "evidence" of session record r: the turn shown, what diverged where, and both texts. */
static void report_json_evidence(strbuf *o, const hunt_session_rec *r) {
    const hunt_eval *e = &r->eval;
    strbuf_printf(o, ",\"evidence\":{\"turn\":%d,\"diverged\":%s,\"where\":", r->shown_turn,
                  e->diverged ? "true" : "false");
    strbuf_json_cstr(o, e->diverged ? e->where : NULL);
    strbuf_printf(o, ",\"offset\":%ld,\"token\":%d,\"near_tie\":\"%s\",\"tie_gap\":", e->div_offset,
                  e->div_token, hunt_neartie_name(e->neartie));
    if (e->tie_gap < 0)
        strbuf_puts(o, "null");
    else
        strbuf_json_num(o, e->tie_gap);
    strbuf_puts(o, ",\"findings\":");
    jmask(o, e->found);
    strbuf_puts(o, ",\"model_level\":");
    jmask(o, e->model_level);
    strbuf_puts(o, ",\"why\":");
    strbuf_json_cstr(o, e->why);
    strbuf_puts(o, ",\"test\":");
    strbuf_json_cstr(o, r->test_text);
    strbuf_puts(o, ",\"reference\":");
    strbuf_json_cstr(o, r->ref_text);
    strbuf_putc(o, '}');
}

/* "config": what the run was asked to do (opens the report object). */
static void report_json_config(const hunt_results *res, strbuf *o) {
    strbuf_puts(o, "{\"verity_hunt\":1,\"config\":{\"url\":");
    strbuf_json_cstr(o, res->cfg.url);
    strbuf_puts(o, ",\"model\":");
    strbuf_json_cstr(o, res->cfg.model);
    strbuf_puts(o, ",\"reference\":");
    strbuf_json_cstr(o, res->cfg.ref_url);
    strbuf_printf(o, ",\"reference_concurrency\":%d,\"concurrency\":[", res->cfg.ref_conc);
    for (int i = 0; i < res->cfg.n_conc; i++)
        strbuf_printf(o, "%s%d", i ? "," : "", res->cfg.conc[i]);
    strbuf_puts(o, "],\"context_pad\":[");
    for (int i = 0; i < res->cfg.n_pads; i++)
        strbuf_printf(o, "%s%d", i ? "," : "", res->cfg.pads[i]);
    strbuf_printf(o,
                  "],\"sessions\":%d,\"turns\":%d,\"tools\":%d,\"max_tokens\":%d,"
                  "\"temperature\":",
                  res->cfg.sessions, res->cfg.turns, res->cfg.n_tools, res->cfg.max_tokens);
    strbuf_json_num(o, res->cfg.temperature);
    strbuf_printf(o,
                  ",\"seed\":%llu,\"stream\":%s,\"logprobs\":%s,\"skip_special_tokens\":%s,"
                  "\"tie_threshold\":",
                  (unsigned long long)res->cfg.seed, res->cfg.stream ? "true" : "false",
                  res->cfg.logprobs ? "true" : "false", res->cfg.skip_special ? "true" : "false");
    strbuf_json_num(o, res->cfg.tie_threshold);
    strbuf_puts(o, ",\"context_pad_bytes_per_token\":");
    strbuf_json_num(o, res->cfg.pad_bytes_per_token > 0 ? res->cfg.pad_bytes_per_token : NAN);
    strbuf_putc(o, '}');
}

/* "summary", "per_concurrency", "per_context_pad" and "grid": the verdict counts and intervals. */
static void report_json_breakdowns(const hunt_results *res, strbuf *o) {
    strbuf_puts(o, ",\"summary\":{");
    jcell(o, &res->agg.total);
    strbuf_printf(o, ",\"verdict\":\"%s\",\"interrupted\":%s}",
                  res->agg.total.corrupt ? "corruption found" : "clean",
                  res->client.interrupted ? "true" : "false");
    strbuf_puts(o, ",\"per_concurrency\":[");
    for (int i = 0; i < res->cfg.n_conc; i++) {
        strbuf_printf(o, "%s{\"concurrency\":%d,", i ? "," : "", res->cfg.conc[i]);
        jcell(o, &res->agg.per_level[i]);
        strbuf_putc(o, '}');
    }
    strbuf_puts(o, "],\"per_context_pad\":[");
    for (int p = 0; p < res->cfg.n_pads; p++) {
        strbuf_printf(o, "%s{\"context_pad\":%d,\"mean_prompt_tokens\":", p ? "," : "",
                      res->cfg.pads[p]);
        double m = hunt_results_mean_prompt(res, p);
        if (m < 0)
            strbuf_puts(o, "null");
        else
            strbuf_json_num(o, m);
        strbuf_putc(o, ',');
        jcell(o, &res->agg.per_pad[p]);
        strbuf_putc(o, '}');
    }
    strbuf_puts(o, "],\"grid\":[");
    int g = 0;
    for (int i = 0; i < res->cfg.n_conc; i++)
        for (int p = 0; p < res->cfg.n_pads; p++) {
            strbuf_printf(o, "%s{\"concurrency\":%d,\"context_pad\":%d,", g++ ? "," : "",
                          res->cfg.conc[i], res->cfg.pads[p]);
            jcell(o, &res->agg.grid[i][p]);
            strbuf_putc(o, '}');
        }
    strbuf_putc(o, ']');
}

/* "confound" and "oracles": what each oracle counted. */
static void report_json_oracles(const hunt_results *res, strbuf *o) {
    strbuf_puts(o, ",\"confound\":");
    strbuf_json_cstr(o, res->agg.confound);
    strbuf_printf(o,
                  ",\"oracles\":{\"exact\":{\"diverged_sessions\":%lld},\"near_tie\":{"
                  "\"threshold\":",
                  (long long)res->agg.diverged);
    strbuf_json_num(o, res->cfg.tie_threshold);
    strbuf_printf(o, ",\"benign_sessions\":%lld,\"corrupt_sessions\":%lld},\"structural\":{",
                  (long long)res->agg.neartie_benign, (long long)res->agg.neartie_corrupt);
    for (int k = 0, n = 0; k < HUNT_F_COUNT; k++)
        if ((1u << k) & HUNT_F_STRUCTURAL_MASK)
            strbuf_printf(o, "%s\"%s\":%lld", n++ ? "," : "", hunt_finding_name(k),
                          (long long)res->agg.finding[k]);
    strbuf_puts(o, "},\"degeneration\":{");
    for (int k = 0, n = 0; k < HUNT_F_COUNT; k++)
        if ((1u << k) & HUNT_F_DEGEN_MASK)
            strbuf_printf(o, "%s\"%s\":%lld", n++ ? "," : "", hunt_finding_name(k),
                          (long long)res->agg.finding[k]);
    strbuf_puts(o, "},\"model_level_turns\":{");
    for (int k = 0; k < HUNT_F_COUNT; k++)
        strbuf_printf(o, "%s\"%s\":%lld", k ? "," : "", hunt_finding_name(k),
                      (long long)res->agg.model_level[k]);
    strbuf_puts(o, "}}");
}

/* "client": the load generator's own counters and costs. */
static void report_json_client(const hunt_results *res, strbuf *o) {
    int64_t reqs = res->client.requests + res->client.ref_requests;
    strbuf_printf(o,
                  ",\"client\":{\"peak_in_flight\":%d,\"requests\":%lld,"
                  "\"reference_requests\":%lld,\"retries\":%lld,\"bytes\":%lld,\"wall_s\":",
                  res->client.peak_in_flight, (long long)res->client.requests,
                  (long long)res->client.ref_requests, (long long)res->client.retries,
                  (long long)res->client.bytes);
    strbuf_json_num(o, res->client.wall_s);
    strbuf_puts(o, ",\"cpu_s\":");
    strbuf_json_num(o, res->client.cpu_s);
    strbuf_puts(o, ",\"cpu_ms_per_request\":");
    strbuf_json_num(o, reqs ? 1000.0 * res->client.cpu_s / (double)reqs : 0);
    strbuf_puts(o, ",\"requests_per_s\":");
    strbuf_json_num(o, res->client.wall_s > 0 ? (double)reqs / res->client.wall_s : 0);
    strbuf_putc(o, '}');
}

/* "metrics", "test_phases" and "events": the server's samples, the phases of the test, and the
 * corruptions over time. */
static void report_json_timeline(const hunt_results *res, strbuf *o) {
    strbuf_puts(o, ",\"metrics\":{\"flavor\":");
    strbuf_json_cstr(o, res->obs.metrics_flavor);
    strbuf_puts(o, ",\"samples\":[");
    for (int64_t i = 0; i < res->obs.n_samples; i++) {
        const hunt_metrics_sample *s = &res->obs.samples[i];
        strbuf_puts(o, i ? ",[" : "[");
        strbuf_json_num(o, s->t);
        strbuf_putc(o, ',');
        strbuf_json_num(o, s->running);
        strbuf_putc(o, ',');
        strbuf_json_num(o, s->waiting);
        strbuf_putc(o, ',');
        strbuf_json_num(o, s->batch);
        strbuf_putc(o, ']');
    }
    strbuf_puts(o, "]},\"test_phases\":[");
    for (int64_t i = 0; i < res->obs.n_spans; i++) {
        strbuf_puts(o, i ? ",[" : "[");
        strbuf_json_num(o, res->obs.spans[i].t0);
        strbuf_putc(o, ',');
        strbuf_json_num(o, res->obs.spans[i].t1);
        strbuf_printf(o, ",%d]", res->obs.spans[i].conc);
    }
    strbuf_puts(o, "],\"events\":[");
    int ne = 0;
    const hunt_session_rec *r;
    for (int64_t i = 0; (r = hunt_report_next_corrupt(res, &i));) {
        strbuf_puts(o, ne++ ? ",{\"t\":" : "{\"t\":");
        strbuf_json_num(o, r->turns[r->shown_turn].t_end);
        strbuf_printf(o, ",\"session\":%lld,\"concurrency\":%d,\"turn\":%d}", (long long)r->index,
                      r->conc, r->shown_turn);
    }
    strbuf_putc(o, ']');
}

/* "sessions": one object per record, and the closing of the report object. */
static void report_json_sessions(const hunt_results *res, strbuf *o) {
    strbuf_puts(o, ",\"sessions\":[");
    for (int64_t i = 0; i < res->records.n_recs; i++) {
        const hunt_session_rec *r = res->records.recs[i];
        strbuf_printf(o,
                      "%s\n{\"index\":%lld,\"seed\":%llu,\"concurrency\":%d,\"context_pad\":%d,"
                      "\"skip_special_tokens\":%s,\"verdict\":\"%s\",\"turns\":%d,"
                      "\"max_prompt_tokens\":%lld,\"turn_verdicts\":[",
                      i ? "," : "", (long long)r->index, (unsigned long long)r->seed, r->conc,
                      r->pad,
                      r->skip_special < 0 ? "null"
                      : r->skip_special   ? "true"
                                          : "false",
                      hunt_verdict_name(r->verdict), r->n_turns, (long long)r->max_prompt_tokens);
        for (int t = 0; t < r->n_turns; t++)
            strbuf_printf(o, "%s\"%s\"", t ? "," : "", hunt_verdict_name(r->turns[t].verdict));
        strbuf_putc(o, ']');
        if (r->shown_turn >= 0)
            report_json_evidence(o, r);
        if (r->error) {
            strbuf_puts(o, ",\"error\":");
            strbuf_json_cstr(o, r->error);
        }
        strbuf_putc(o, '}');
    }
    strbuf_puts(o, "]}\n");
}

void hunt_report_json(const hunt_results *res, strbuf *o) {
    report_json_config(res, o);
    report_json_breakdowns(res, o);
    report_json_oracles(res, o);
    report_json_client(res, o);
    report_json_timeline(res, o);
    report_json_sessions(res, o);
}

static void md_cell_row(strbuf *o, const char *label, const hunt_cell *c) {
    strbuf_printf(o, "| %s | %lld | %lld | %lld | %lld | %lld | %.1f%% | [%.1f%%, %.1f%%] |\n",
                  label, (long long)c->n, (long long)c->corrupt, (long long)c->benign,
                  (long long)c->clean, (long long)c->errors,
                  c->n ? 100.0 * (double)c->corrupt / (double)c->n : 0.0, 100 * c->lo, 100 * c->hi);
}

void hunt_report_workload(const hunt_results *res, strbuf *o) {
    strbuf_printf(o,
                  "%d sessions per level, %d turns, %d tools, max_tokens %d, temperature %g, "
                  "seed %llu, %s, logprobs %s (near-tie threshold %g nats), skip_special_tokens %s",
                  res->cfg.sessions, res->cfg.turns, res->cfg.n_tools, res->cfg.max_tokens,
                  res->cfg.temperature, (unsigned long long)res->cfg.seed,
                  res->cfg.stream ? "streaming" : "not streaming", res->cfg.logprobs ? "on" : "off",
                  res->cfg.tie_threshold,
                  res->cfg.skip_special ? "true on even sessions, false on odd ones" : "not sent");
}

void hunt_report_verdict(const hunt_results *res, strbuf *o) {
    const hunt_cell *t = &res->agg.total;
    strbuf_printf(o,
                  "%lld of %lld sessions corrupt (%.1f%%, Wilson 95%% [%.1f%%, %.1f%%]); %lld "
                  "benign divergences; %lld target errors.",
                  (long long)t->corrupt, (long long)t->n,
                  t->n ? 100.0 * (double)t->corrupt / (double)t->n : 0.0, 100 * t->lo, 100 * t->hi,
                  (long long)t->benign, (long long)t->errors);
}

void hunt_report_harness(const hunt_results *res, strbuf *o) {
    int64_t reqs = res->client.requests + res->client.ref_requests;
    strbuf_printf(o,
                  "%lld test and %lld reference requests (%lld retries) in %.1f s; peak %d "
                  "requests in flight; harness CPU %.2f s (%.3f ms per request).",
                  (long long)res->client.requests, (long long)res->client.ref_requests,
                  (long long)res->client.retries, res->client.wall_s, res->client.peak_in_flight,
                  res->client.cpu_s, reqs ? 1000.0 * res->client.cpu_s / (double)reqs : 0.0);
}

const hunt_session_rec *hunt_report_next_corrupt(const hunt_results *res, int64_t *i) {
    while (*i < res->records.n_recs) {
        const hunt_session_rec *r = res->records.recs[(*i)++];
        if (r->verdict == HUNT_V_CORRUPT && r->shown_turn >= 0)
            return r;
    }
    return NULL;
}

bool hunt_report_oracle_row(const hunt_results *res, int k, char *label, size_t cap, int64_t *n,
                            bool *finding) {
    static const char *const divergence[3] = {"exact: diverged from the reference",
                                              "near-tie: benign divergence only",
                                              "near-tie: divergence not at a near tie"};
    const int64_t counts[3] = {res->agg.diverged, res->agg.neartie_benign,
                               res->agg.neartie_corrupt};
    *finding = k >= 3;
    if (k < 3) {
        snprintf(label, cap, "%s", divergence[k]);
        *n = counts[k];
        return true;
    }
    if ((k -= 3) >= HUNT_F_COUNT)
        return false;
    snprintf(label, cap, "%s: %s",
             ((1u << k) & HUNT_F_STRUCTURAL_MASK) ? "structural" : "degeneration",
             hunt_finding_name(k));
    *n = res->agg.finding[k];
    return true;
}

void hunt_report_md(const hunt_results *res, strbuf *o) {
    const hunt_cell *t = &res->agg.total;
    strbuf_puts(o, "# verity hunt report\n\n");
    strbuf_printf(o, "- target: `%s`, model `%s`\n", res->cfg.url, res->cfg.model);
    if (res->cfg.ref_url)
        strbuf_printf(o, "- reference: the server at `%s`, concurrency %d\n", res->cfg.ref_url,
                      res->cfg.ref_conc);
    else
        strbuf_printf(o, "- reference: the same server at concurrency %d\n", res->cfg.ref_conc);
    strbuf_puts(o, "- workload: ");
    hunt_report_workload(res, o);
    strbuf_printf(o, "\n\n**Verdict: %s**: ", t->corrupt ? "corruption found" : "clean");
    hunt_report_verdict(res, o);
    strbuf_printf(o, "%s\n", res->client.interrupted ? " (interrupted: partial results)" : "");
    const char *hdr = "| sessions | corrupt | benign | clean | errors | rate | Wilson 95% |\n"
                      "|---|---|---|---|---|---|---|---|\n";
    strbuf_printf(o, "\n## Corruption rate by concurrency\n\n| concurrency %s", hdr);
    for (int i = 0; i < res->cfg.n_conc; i++) {
        char l[32];
        snprintf(l, sizeof l, "%d", res->cfg.conc[i]);
        md_cell_row(o, l, &res->agg.per_level[i]);
    }
    strbuf_printf(o,
                  "\n## Corruption rate by context padding\n\n| padding (tokens; mean "
                  "prompt tokens) %s",
                  hdr);
    for (int p = 0; p < res->cfg.n_pads; p++) {
        char l[64];
        double m = hunt_results_mean_prompt(res, p);
        if (m >= 0)
            snprintf(l, sizeof l, "%d (%.0f)", res->cfg.pads[p], m);
        else
            snprintf(l, sizeof l, "%d", res->cfg.pads[p]);
        md_cell_row(o, l, &res->agg.per_pad[p]);
    }
    strbuf_printf(o, "\n## Confound split\n\n%s\n", res->agg.confound);
    strbuf_puts(o, "\n## Oracles\n\n| oracle | sessions |\n|---|---|\n");
    char row[96];
    int64_t n;
    bool finding;
    for (int k = 0; hunt_report_oracle_row(res, k, row, sizeof row, &n, &finding); k++)
        strbuf_printf(o, "| %s | %lld |\n", row, (long long)n);
    int64_t ml = 0;
    for (int k = 0; k < HUNT_F_COUNT; k++)
        ml += res->agg.model_level[k];
    if (ml)
        strbuf_printf(o,
                      "\n%lld turn findings also appear in the reference (model behaviour, not "
                      "load-dependent; not counted as corruption).\n",
                      (long long)ml);
    strbuf_puts(o, "\n## Server observation\n\n");
    if (res->obs.metrics_flavor) {
        double maxb = NAN, maxr = NAN;
        for (int64_t i = 0; i < res->obs.n_samples; i++) {
            if (!isnan(res->obs.samples[i].batch) && !(res->obs.samples[i].batch <= maxb))
                maxb = res->obs.samples[i].batch;
            if (!isnan(res->obs.samples[i].running) && !(res->obs.samples[i].running <= maxr))
                maxr = res->obs.samples[i].running;
        }
        strbuf_printf(o, "/metrics (%s names): %lld samples; largest batch seen: ",
                      res->obs.metrics_flavor, (long long)res->obs.n_samples);
        if (isnan(maxb))
            strbuf_puts(o, "not measured (the target has no batch-size metric)");
        else
            strbuf_printf(o, "%.0f", maxb);
        strbuf_puts(o, "; most running requests: ");
        if (isnan(maxr))
            strbuf_puts(o, "not measured");
        else
            strbuf_printf(o, "%.0f", maxr);
        strbuf_puts(o, ". The timeline is in report.html and results.json.\n");
    } else {
        strbuf_puts(o, "The target exposes no known /metrics; no batch timeline.\n");
    }
    strbuf_puts(o, "\n## Harness\n\n");
    hunt_report_harness(res, o);
    strbuf_putc(o, '\n');
    int shown = 0;
    const hunt_session_rec *r;
    for (int64_t i = 0; shown < 50 && (r = hunt_report_next_corrupt(res, &i)); shown++) {
        if (!shown)
            strbuf_puts(o, "\n## Corrupt sessions: first divergent turn\n");
        strbuf_printf(o, "\n### Session %lld (concurrency %d, padding %d), turn %d\n\n",
                      (long long)r->index, r->conc, r->pad, r->shown_turn);
        strbuf_puts(o, r->eval.why);
        strbuf_puts(o, "\n\n| test | reference |\n|---|---|\n| `");
        hunt_md_escape(o, r->test_text ? r->test_text : "", r->test_text ? strlen(r->test_text) : 0,
                       600);
        strbuf_puts(o, "` | `");
        hunt_md_escape(o, r->ref_text ? r->ref_text : "", r->ref_text ? strlen(r->ref_text) : 0,
                       600);
        strbuf_puts(o, "` |\n");
    }
    if (shown == 50)
        strbuf_puts(o, "\n(first 50 corrupt sessions shown; all are in results.json)\n");
    int errs = 0;
    for (int64_t i = 0; i < res->records.n_recs && errs < 10; i++)
        if (res->records.recs[i]->verdict == HUNT_V_ERROR && res->records.recs[i]->error) {
            if (!errs++)
                strbuf_puts(o, "\n## Target errors (first 10)\n\n");
            strbuf_printf(o, "- session %lld: ", (long long)res->records.recs[i]->index);
            hunt_md_escape(o, res->records.recs[i]->error, strlen(res->records.recs[i]->error),
                           300);
            strbuf_putc(o, '\n');
        }
}

int hunt_write_file(const char *path, const char *data, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return err_set(ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    bool ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return err_set(ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    return 0;
}

int hunt_report_write(const hunt_results *res, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return err_set(ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    static const char *const names[] = {"results.json", "report.md", "report.html"};
    for (int k = 0; k < 3; k++) {
        strbuf sb;
        strbuf_init(&sb);
        if (k == 0)
            hunt_report_json(res, &sb);
        else if (k == 1)
            hunt_report_md(res, &sb);
        else
            hunt_report_html(res, &sb);
        if (strbuf_failed(&sb)) {
            strbuf_deinit(&sb);
            return err_set(ERR_NOMEM, "out of memory writing %s", names[k]);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        int rc = hunt_write_file(path, sb.data, sb.len);
        strbuf_deinit(&sb);
        if (rc)
            return rc;
    }
    return 0;
}
