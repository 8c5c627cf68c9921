/* SPDX-License-Identifier: MIT */
/*
 * hunt_results: aggregates over session records: per concurrency level, per context-padding level
 * and per (level, padding) cell, with Wilson 95% intervals, the per-oracle counts, and the
 * confound split's conclusion. See hunt_run.h.
 *
 * Rates count sessions with a verdict (clean + benign + corrupt); sessions the target failed
 * (error) are reported but excluded, so an overloaded server's 503s do not dilute or inflate the
 * corruption rate.
 */
#include "hunt/hunt_run.h"
#include "hunt/hunt_stats.h"

#include <stdio.h>
#include <string.h>

static void hunt_cell_add(hunt_cell *c, hunt_verdict v) {
    switch (v) {
    case HUNT_V_CORRUPT:
        c->corrupt++;
        c->n++;
        break;
    case HUNT_V_BENIGN:
        c->benign++;
        c->n++;
        break;
    case HUNT_V_CLEAN:
        c->clean++;
        c->n++;
        break;
    default:
        c->errors++;
    }
}

static void hunt_cell_close(hunt_cell *c) {
    hunt_wilson(c->corrupt, c->n, HUNT_Z95, &c->lo, &c->hi);
}

static void hunt_confound(hunt_results *res) {
    char *o = res->agg.confound;
    size_t cap = sizeof res->agg.confound;
    if (res->cfg.n_conc < 2 || res->cfg.n_pads < 2) {
        snprintf(o, cap,
                 "confound split not measured: run with at least two concurrency levels "
                 "(e.g. 1,64) and two context paddings (e.g. --context-pad 0,4000)");
        return;
    }
    int lo_c = 0, hi_c = 0, lo_p = 0, hi_p = 0;
    for (int i = 1; i < res->cfg.n_conc; i++) {
        if (res->cfg.conc[i] < res->cfg.conc[lo_c])
            lo_c = i;
        if (res->cfg.conc[i] > res->cfg.conc[hi_c])
            hi_c = i;
    }
    for (int i = 1; i < res->cfg.n_pads; i++) {
        if (res->cfg.pads[i] < res->cfg.pads[lo_p])
            lo_p = i;
        if (res->cfg.pads[i] > res->cfg.pads[hi_p])
            hi_p = i;
    }
    const hunt_cell *a = &res->agg.grid[lo_c][hi_p]; /* low concurrency, long context */
    const hunt_cell *b = &res->agg.grid[hi_c][lo_p]; /* high concurrency, short context */
    char sa[160], sb[160];
    snprintf(sa, sizeof sa, "concurrency %d at context pad %d: %lld/%lld corrupt [%.3f, %.3f]",
             res->cfg.conc[lo_c], res->cfg.pads[hi_p], (long long)a->corrupt, (long long)a->n,
             a->lo, a->hi);
    snprintf(sb, sizeof sb, "concurrency %d at context pad %d: %lld/%lld corrupt [%.3f, %.3f]",
             res->cfg.conc[hi_c], res->cfg.pads[lo_p], (long long)b->corrupt, (long long)b->n,
             b->lo, b->hi);
    if (a->n == 0 || b->n == 0)
        snprintf(o, cap, "confound split incomplete (%s; %s)", sa, sb);
    else if (a->corrupt && b->corrupt)
        snprintf(o, cap,
                 "both: corruption at low concurrency with long context (%s) and at high "
                 "concurrency with short context (%s); context length matters, and the "
                 "bug may not need concurrency at all",
                 sa, sb);
    else if (a->corrupt)
        snprintf(o, cap, "context-length dependent, not concurrency: %s; %s", sa, sb);
    else if (b->corrupt)
        snprintf(o, cap, "concurrency-dependent, not context length: %s; %s", sb, sa);
    else
        snprintf(o, cap, "no corruption in either confound cell (%s; %s)", sa, sb);
}

void hunt_results_aggregate(hunt_results *res) {
    memset(res->agg.per_level, 0, sizeof res->agg.per_level);
    memset(res->agg.per_pad, 0, sizeof res->agg.per_pad);
    memset(res->agg.grid, 0, sizeof res->agg.grid);
    memset(&res->agg.total, 0, sizeof res->agg.total);
    memset(res->agg.finding, 0, sizeof res->agg.finding);
    memset(res->agg.model_level, 0, sizeof res->agg.model_level);
    res->agg.diverged = res->agg.neartie_benign = res->agg.neartie_corrupt = 0;
    for (int64_t i = 0; i < res->records.n_recs; i++) {
        const hunt_session_rec *rec = res->records.recs[i];
        int l = rec->level >= 0 && rec->level < HUNT_MAX_LEVELS ? rec->level : 0;
        int p = rec->pad_slot >= 0 && rec->pad_slot < HUNT_MAX_PADS ? rec->pad_slot : 0;
        hunt_cell_add(&res->agg.per_level[l], rec->verdict);
        hunt_cell_add(&res->agg.per_pad[p], rec->verdict);
        hunt_cell_add(&res->agg.grid[l][p], rec->verdict);
        hunt_cell_add(&res->agg.total, rec->verdict);
        unsigned found = 0;
        bool diverged = false;
        for (int t = 0; t < rec->n_turns; t++) {
            const hunt_turn_rec *tr = &rec->turns[t];
            found |= tr->found;
            for (int k = 0; k < HUNT_F_COUNT; k++)
                if (tr->model_level & (1u << k))
                    res->agg.model_level[k]++;
            diverged |= tr->verdict == HUNT_V_BENIGN ||
                        (tr->verdict == HUNT_V_CORRUPT && tr->neartie != HUNT_NT_NONE);
        }
        if (rec->verdict == HUNT_V_ERROR)
            continue;
        for (int k = 0; k < HUNT_F_COUNT; k++)
            if (found & (1u << k))
                res->agg.finding[k]++;
        if (diverged)
            res->agg.diverged++;
        if (rec->verdict == HUNT_V_BENIGN)
            res->agg.neartie_benign++;
        if (rec->verdict == HUNT_V_CORRUPT && rec->shown_turn >= 0 &&
            (rec->eval.neartie == HUNT_NT_NOT_TIE || rec->eval.neartie == HUNT_NT_SAME_TOKENS ||
             rec->eval.neartie == HUNT_NT_NO_LOGPROBS))
            res->agg.neartie_corrupt++;
    }
    for (int l = 0; l < HUNT_MAX_LEVELS; l++) {
        hunt_cell_close(&res->agg.per_level[l]);
        for (int p = 0; p < HUNT_MAX_PADS; p++)
            hunt_cell_close(&res->agg.grid[l][p]);
    }
    for (int p = 0; p < HUNT_MAX_PADS; p++)
        hunt_cell_close(&res->agg.per_pad[p]);
    hunt_cell_close(&res->agg.total);
    hunt_confound(res);
}
