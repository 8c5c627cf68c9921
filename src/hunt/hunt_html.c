/* SPDX-License-Identifier: MIT */
/*
 * hunt_html: report.html, self-contained: one file with inline CSS and inline SVG, no scripts and
 * no external resources, so it can be attached to an issue or opened offline. See hunt_report.h.
 *
 * Plots are drawn directly as SVG primitives: points with Wilson-interval error bars over
 * categorical x positions (concurrency levels, padding levels), and a polyline timeline of the
 * server's batch size with corruption events as red marks. All text is HTML-escaped.
 */
#include "hunt/hunt_report.h"
#include "hunt/hunt_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PW 620.0 /* plot width */
#define PH 300.0
#define ML 64.0 /* margins */
#define MR 20.0
#define MT 34.0
#define MB 52.0

static double hunt_nice(double v) {
    static const double steps[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        if (v <= steps[i])
            return steps[i];
    return 1.0;
}

/* Formats v (a fraction) as a percentage with as few decimals as show it exactly (up to 3):
 * 0.125 -> "12.5%", 0.25 -> "25%", 0.0625 -> "6.25%". A tick label never rounds to a value the
 * tick is not at. */
static void hunt_pct_label(char *t, size_t cap, double v) {
    double p = 100 * v;
    int d = 0;
    while (d < 3 && fabs(p * pow(10, d) - round(p * pow(10, d))) > 1e-6)
        d++;
    snprintf(t, cap, "%.*f%%", d, p);
}

static void svg_vtext(strbuf *o, double x, double y, const char *text) {
    strbuf_printf(o,
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\" "
                  "transform=\"rotate(-90 %.1f %.1f)\">",
                  x, y, x, y);
    hunt_html_escape(o, text, strlen(text));
    strbuf_puts(o, "</text>\n");
}

static void svg_text(strbuf *o, double x, double y, const char *anchor, const char *cls,
                     const char *text) {
    strbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"%s\">", x, y, anchor,
                  cls);
    hunt_html_escape(o, text, strlen(text));
    strbuf_puts(o, "</text>\n");
}

/* Corruption rate with Wilson intervals over categorical x. */
static void svg_rates(strbuf *o, const char *title, const char *xlabel, int n,
                      const char *const *labels, const hunt_cell *cells) {
    double ymax = 0;
    for (int i = 0; i < n; i++)
        if (cells[i].n && cells[i].hi > ymax)
            ymax = cells[i].hi;
    ymax = hunt_nice(ymax > 0 ? ymax * 1.05 : 0.1);
    double w = PW - ML - MR, h = PH - MT - MB;
    strbuf_printf(o,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                  "viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n",
                  PW, PH, PW, PH);
    svg_text(o, PW / 2, 20, "middle", "title", title);
    for (int k = 0; k <= 4; k++) {
        double v = ymax * k / 4, y = MT + h - h * k / 4;
        strbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n",
                      ML, y, ML + w, y);
        char t[32];
        hunt_pct_label(t, sizeof t, v);
        svg_text(o, ML - 6, y + 4, "end", "tick", t);
    }
    strbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", ML,
                  MT + h, ML + w, MT + h);
    svg_text(o, ML + w / 2, PH - 10, "middle", "label", xlabel);
    svg_vtext(o, 16, MT + h / 2, "corrupt sessions");
    for (int i = 0; i < n; i++) {
        double x = ML + w * (i + 0.5) / n;
        svg_text(o, x, MT + h + 18, "middle", "tick", labels[i]);
        const hunt_cell *c = &cells[i];
        if (!c->n)
            continue;
        double rate = (double)c->corrupt / (double)c->n;
        double y = MT + h - h * rate / ymax, ylo = MT + h - h * c->lo / ymax,
               yhi = MT + h - h * (c->hi > ymax ? ymax : c->hi) / ymax;
        strbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"bar\"/>\n",
                      x, ylo, x, yhi);
        strbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"bar\"/>\n",
                      x - 6, ylo, x + 6, ylo);
        strbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"bar\"/>\n",
                      x - 6, yhi, x + 6, yhi);
        strbuf_printf(o,
                      "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" class=\"%s\"><title>%lld/%lld "
                      "corrupt, Wilson 95%% [%.3f, %.3f]</title></circle>\n",
                      x, y, c->corrupt ? "pt bad" : "pt", (long long)c->corrupt, (long long)c->n,
                      c->lo, c->hi);
    }
    strbuf_puts(o, "</svg>\n");
}

/* The batch-size timeline with corruption events. */
static void svg_timeline(strbuf *o, const hunt_results *res) {
    double tmax = res->client.wall_s > 0 ? res->client.wall_s : 1, bmax = 1;
    bool have[2] = {false, false}; /* batch, running: measured in at least one sample */
    for (int64_t i = 0; i < res->obs.n_samples; i++) {
        const hunt_metrics_sample *s = &res->obs.samples[i];
        have[0] |= !isnan(s->batch);
        have[1] |= !isnan(s->running);
        if (!isnan(s->batch) && s->batch > bmax)
            bmax = s->batch;
        if (!isnan(s->running) && s->running > bmax)
            bmax = s->running;
        if (s->t > tmax)
            tmax = s->t;
    }
    bmax = 4 * ceil(bmax * 1.05 / 4); /* integer ticks at quarters */
    double w = PW * 1.4 - ML - MR, h = PH - MT - MB;
    strbuf_printf(o,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                  "viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n",
                  PW * 1.4, PH, PW * 1.4, PH);
    svg_text(o, PW * 0.7, 20, "middle", "title",
             res->obs.metrics_flavor ? "Server batch size and corruption events over time"
                                     : "Corruption events over time (the target has no /metrics)");
    for (int k = 0; k <= 4; k++) {
        double y = MT + h - h * k / 4;
        char t[32];
        snprintf(t, sizeof t, "%.0f", bmax * k / 4);
        strbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n",
                      ML, y, ML + w, y);
        svg_text(o, ML - 6, y + 4, "end", "tick", t);
    }
    for (int k = 0; k <= 5; k++) {
        char t[32];
        snprintf(t, sizeof t, tmax < 10 ? "%.1fs" : "%.0fs", tmax * k / 5);
        svg_text(o, ML + w * k / 5, MT + h + 18, "middle", "tick", t);
    }
    svg_text(o, ML + w / 2, PH - 10, "middle", "label", "time since the run started");
    svg_vtext(o, 16, MT + h / 2, "requests");
    for (int64_t i = 0; i < res->obs.n_spans; i++) { /* test phases, shaded */
        const hunt_span *sp = &res->obs.spans[i];
        double x0 = ML + w * sp->t0 / tmax, x1 = ML + w * sp->t1 / tmax;
        strbuf_printf(o,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "class=\"span\"><title>test phase at concurrency %d, %.2f-%.2fs</title>"
                      "</rect>\n",
                      x0, MT, x1 - x0 > 1 ? x1 - x0 : 1, h, sp->conc, sp->t0, sp->t1);
        char lab[32];
        snprintf(lab, sizeof lab, "c=%d", sp->conc);
        svg_text(o, (x0 + x1) / 2, MT + h - 4, "middle", "tick", lab);
    }
    for (int series = 0; series < 2; series++) {
        if (!have[series])
            continue; /* not measured: no line at all, the legend says so */
        strbuf_printf(o, "<polyline class=\"%s\" points=\"", series ? "running" : "batch");
        for (int64_t i = 0; i < res->obs.n_samples; i++) {
            double v = series ? res->obs.samples[i].running : res->obs.samples[i].batch;
            if (isnan(v))
                continue;
            strbuf_printf(o, "%.1f,%.1f ", ML + w * res->obs.samples[i].t / tmax,
                          MT + h - h * v / bmax);
        }
        strbuf_puts(o, "\"/>\n");
    }
    for (int64_t i = 0; i < res->records.n_recs; i++) {
        const hunt_session_rec *r = res->records.recs[i];
        if (r->verdict != HUNT_V_CORRUPT || r->shown_turn < 0)
            continue;
        double t = r->turns[r->shown_turn].t_end, x = ML + w * t / tmax;
        strbuf_printf(o,
                      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"event\">"
                      "<title>session %lld corrupt at %.2fs (concurrency %d)</title></line>\n",
                      x, MT + h, x, MT + h - 10, (long long)r->index, t, r->conc);
    }
    /* legend: each entry's text is followed by the next at about 6 px per character */
    const char *lg_text[3] = {have[0] ? "batch size" : "batch size: not measured",
                              have[1] ? "running requests" : "running requests: not measured",
                              "corrupt session (its first corrupt turn); shaded: test phases"};
    static const char *const lg_cls[3] = {"lg-batch", "lg-run", "lg-event"};
    double lx = ML + 10;
    for (int k = 0; k < 3; k++) {
        if (k < 2)
            strbuf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" class=\"%s\"/>",
                          lx, MT + 6, lg_cls[k]);
        else
            strbuf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"3\" height=\"10\" class=\"%s\"/>",
                          lx, MT + 1, lg_cls[k]);
        svg_text(o, lx + (k < 2 ? 16 : 8), MT + 10, "start", "tick", lg_text[k]);
        lx += (k < 2 ? 16 : 8) + 6.0 * (double)strlen(lg_text[k]) + 18;
    }
    strbuf_puts(o, "</svg>\n");
}

static void html_cell_row(strbuf *o, const char *label, const hunt_cell *c) {
    strbuf_puts(o, "<tr><td>");
    hunt_html_escape(o, label, strlen(label));
    strbuf_printf(o,
                  "</td><td>%lld</td><td class=\"%s\">%lld</td><td>%lld</td><td>%lld</td>"
                  "<td>%lld</td><td>%.1f%%</td><td>[%.1f%%, %.1f%%]</td></tr>\n",
                  (long long)c->n, c->corrupt ? "bad" : "", (long long)c->corrupt,
                  (long long)c->benign, (long long)c->clean, (long long)c->errors,
                  c->n ? 100.0 * (double)c->corrupt / (double)c->n : 0.0, 100 * c->lo, 100 * c->hi);
}

static const char html_head[] =
    "<thead><tr><th>%s</th><th>sessions</th><th>corrupt</th><th>benign</th><th>clean</th>"
    "<th>errors</th><th>rate</th><th>Wilson 95%%</th></tr></thead>\n";

/* Escapes s, marking everything from byte d on (first difference from the other side). */
static void html_marked(strbuf *o, const char *s, size_t d) {
    size_t n = strlen(s);
    if (n > 6000)
        n = 6000;
    if (d > n)
        d = n;
    while (d > 0 && d < n && ((unsigned char)s[d] & 0xC0) == 0x80)
        d--; /* do not split a UTF-8 sequence */
    hunt_html_escape(o, s, d);
    if (d < n) {
        strbuf_puts(o, "<mark>");
        hunt_html_escape(o, s + d, n - d);
        strbuf_puts(o, "</mark>");
    }
}

void hunt_report_html(const hunt_results *res, strbuf *o) {
    const hunt_cell *t = &res->agg.total;
    strbuf_puts(o,
                "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<title>verity hunt report</title>\n<style>\n"
                "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;"
                "color:#222;padding:0 1em}\n"
                "table{border-collapse:collapse;margin:.5em 0 1.5em}"
                "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}"
                "th{background:#f3f3f3}td:first-child{text-align:left}\n"
                ".bad{color:#b00020;font-weight:600}.ok{color:#1b5e20;font-weight:600}\n"
                ".side{width:100%;table-layout:fixed}.side td{text-align:left;vertical-align:top;"
                "white-space:pre-wrap;word-break:break-all;font:12px/1.35 monospace}\n"
                "mark{background:#ffd6d6}\nsvg{display:block;margin:.5em 0 1.5em}\n"
                "svg .title{font-weight:600;font-size:14px}svg .tick{font-size:11px;fill:#444}"
                "svg .label{font-size:12px;fill:#222}\n"
                "\nsvg .grid{stroke:#e4e4e4}svg .axis{stroke:#888}svg .bar{stroke:#333;"
                "stroke-width:1.5}\nsvg .pt{fill:#1b5e20}svg .pt.bad{fill:#b00020}\n"
                "svg .batch{fill:none;stroke:#1565c0;stroke-width:1.5}svg .running{fill:none;"
                "stroke:#999;stroke-dasharray:4 3}\nsvg .event{stroke:#b00020;stroke-width:2}"
                "svg .span{fill:#fff3c4;opacity:.7}svg .lg-batch{fill:#1565c0}svg "
                ".lg-run{fill:#999}svg .lg-event{fill:#b00020}\n"
                "code{background:#f3f3f3;padding:0 .2em}\n</style></head><body>\n");
    strbuf_puts(o, "<h1>verity hunt report</h1>\n<p>Target <code>");
    hunt_html_escape(o, res->cfg.url, strlen(res->cfg.url));
    strbuf_puts(o, "</code>, model <code>");
    hunt_html_escape(o, res->cfg.model, strlen(res->cfg.model));
    strbuf_puts(o, "</code>; reference: ");
    if (res->cfg.ref_url) {
        strbuf_puts(o, "the server at <code>");
        hunt_html_escape(o, res->cfg.ref_url, strlen(res->cfg.ref_url));
        strbuf_printf(o, "</code>, concurrency %d.", res->cfg.ref_conc);
    } else {
        strbuf_printf(o, "the same server at concurrency %d.", res->cfg.ref_conc);
    }
    strbuf_putc(o, ' ');
    hunt_report_workload(res, o); /* numbers and fixed words: nothing to escape */
    strbuf_puts(o, ".</p>\n");
    strbuf_printf(o, "<p class=\"%s\">Verdict: %s: ", t->corrupt ? "bad" : "ok",
                  t->corrupt ? "corruption found" : "clean");
    hunt_report_verdict(res, o);
    strbuf_printf(o, "%s</p>\n", res->client.interrupted ? " Interrupted: partial results." : "");
    /* rate vs concurrency */
    char lab[HUNT_MAX_LEVELS > HUNT_MAX_PADS ? HUNT_MAX_LEVELS : HUNT_MAX_PADS][48];
    const char *labels[HUNT_MAX_LEVELS > HUNT_MAX_PADS ? HUNT_MAX_LEVELS : HUNT_MAX_PADS];
    for (int i = 0; i < res->cfg.n_conc; i++) {
        snprintf(lab[i], sizeof lab[i], "%d", res->cfg.conc[i]);
        labels[i] = lab[i];
    }
    strbuf_puts(o, "<h2>Corruption rate by concurrency</h2>\n");
    svg_rates(o, "Corrupt sessions by concurrency (Wilson 95% intervals)", "concurrent sessions",
              res->cfg.n_conc, labels, res->agg.per_level);
    strbuf_printf(o, "<table>");
    strbuf_printf(o, html_head, "concurrency");
    for (int i = 0; i < res->cfg.n_conc; i++)
        html_cell_row(o, labels[i], &res->agg.per_level[i]);
    strbuf_puts(o, "</table>\n<h2>Corruption rate by context length</h2>\n");
    for (int p = 0; p < res->cfg.n_pads; p++) {
        double m = hunt_results_mean_prompt(res, p);
        if (m >= 0)
            snprintf(lab[p], sizeof lab[p], "pad %d (~%.0f tok)", res->cfg.pads[p], m);
        else
            snprintf(lab[p], sizeof lab[p], "pad %d", res->cfg.pads[p]);
        labels[p] = lab[p];
    }
    svg_rates(o, "Corrupt sessions by context padding (Wilson 95% intervals)",
              "context padding (mean prompt tokens in parentheses)", res->cfg.n_pads, labels,
              res->agg.per_pad);
    strbuf_printf(o, "<table>");
    strbuf_printf(o, html_head, "padding");
    for (int p = 0; p < res->cfg.n_pads; p++)
        html_cell_row(o, labels[p], &res->agg.per_pad[p]);
    strbuf_puts(o, "</table>\n<h2>Confound split</h2>\n<p>");
    hunt_html_escape(o, res->agg.confound, strlen(res->agg.confound));
    strbuf_puts(o, "</p>\n<h2>Server observation</h2>\n");
    svg_timeline(o, res);
    strbuf_puts(o, "<h2>Oracles</h2>\n<table><thead><tr><th>oracle</th><th>sessions</th></tr>"
                   "</thead>\n");
    char row[96];
    int64_t n;
    bool finding;
    for (int k = 0; hunt_report_oracle_row(res, k, row, sizeof row, &n, &finding); k++)
        if (finding)
            strbuf_printf(o, "<tr><td>%s</td><td class=\"%s\">%lld</td></tr>\n", row,
                          n ? "bad" : "", (long long)n);
        else
            strbuf_printf(o, "<tr><td>%s</td><td>%lld</td></tr>\n", row, (long long)n);
    strbuf_puts(o, "</table>\n");
    strbuf_puts(o, "<h2>Harness</h2>\n<p>");
    hunt_report_harness(res, o);
    strbuf_puts(o, "</p>\n");
    int shown = 0;
    const hunt_session_rec *r;
    for (int64_t i = 0; shown < 50 && (r = hunt_report_next_corrupt(res, &i)); shown++) {
        if (!shown)
            strbuf_puts(o,
                        "<h2>Corrupt sessions: first divergent turn beside its reference</h2>\n");
        strbuf_printf(o, "<h3>Session %lld: concurrency %d, padding %d, turn %d</h3>\n<p>",
                      (long long)r->index, r->conc, r->pad, r->shown_turn);
        hunt_html_escape(o, r->eval.why, strlen(r->eval.why));
        strbuf_puts(o, "</p>\n<table class=\"side\"><thead><tr><th>under load</th><th>reference"
                       "</th></tr></thead><tr><td>");
        const char *a = r->test_text ? r->test_text : "", *b = r->ref_text ? r->ref_text : "";
        size_t d = 0;
        while (a[d] && a[d] == b[d])
            d++;
        html_marked(o, a, d);
        strbuf_puts(o, "</td><td>");
        html_marked(o, b, d);
        strbuf_puts(o, "</td></tr></table>\n");
    }
    strbuf_puts(o, "</body></html>\n");
}
