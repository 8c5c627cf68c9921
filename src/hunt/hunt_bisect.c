/* SPDX-License-Identifier: MIT */
/*
 * hunt_bisect: the search. See hunt_bisect.h for the method and its assumptions.
 *
 * hunt_bisect_measure decides one configuration (memoised in the ledger); the search functions
 * only ask it for verdicts, so a resumed run walks the same path and restarts nothing that was
 * decided. Outcomes: OUT_CLEAN, OUT_CORRUPT, OUT_UNDECIDED (SPRT ran out of sessions or the target
 * failed), OUT_BUDGET (no restart left).
 */
#include "hunt/hunt_bisect.h"
#include "base/clock.h"
#include "base/err.h"
#include "hunt/hunt_stats.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OUT_CLEAN, OUT_CORRUPT, OUT_UNDECIDED, OUT_BUDGET };

typedef struct hunt_bctx {
    hunt_ledger *lg;
    const hunt_bisect_cfg *cfg;
    const hunt_bisect_ops *ops;
    int order[HUNT_MAX_TOGGLES]; /* toggles by prior, most likely first */
    int n;
} hunt_bctx;

static void hunt_bnote(hunt_bctx *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hunt_bnote(hunt_bctx *b, const char *fmt, ...) {
    if (!b->ops->note)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    b->ops->note(b->ops->ud, line);
}

static int hunt_bsave(hunt_bctx *b) {
    return b->ops->save ? b->ops->save(b->ops->ud, b->lg) : 0;
}

static int hunt_outcome_of(const char *verdict) {
    if (!strcmp(verdict, "clean"))
        return OUT_CLEAN;
    if (!strcmp(verdict, "corrupt") || !strcmp(verdict, "baseline"))
        return OUT_CORRUPT;
    return OUT_UNDECIDED;
}

static bool hunt_final(const char *verdict) {
    return strcmp(verdict, "running") != 0;
}

static uint64_t hunt_mask(const hunt_bctx *b, const int *idx, int n) {
    uint64_t m = 0;
    for (int i = 0; i < n; i++)
        m |= (uint64_t)1 << idx[i];
    return m;
}

/* Decides one configuration: the baseline, or the toggles in `flipped` OFF. */
static int hunt_bisect_measure(hunt_bctx *b, bool baseline, uint64_t flipped, int *outcome) {
    hunt_ledger *lg = b->lg;
    const hunt_bisect_cfg *cfg = b->cfg;
    hunt_ledger_entry *e = hunt_ledger_find(lg, baseline, flipped);
    if (e && hunt_final(e->verdict)) {
        *outcome = hunt_outcome_of(e->verdict);
        return 0;
    }
    if (hunt_ledger_restarts(lg) >= cfg->budget) {
        *outcome = OUT_BUDGET;
        return 0;
    }
    strbuf names;
    strbuf_init(&names);
    hunt_ledger_names(lg, flipped, &names);
    if (!e) {
        if (!(e = hunt_ledger_add(lg))) {
            strbuf_deinit(&names);
            return err_set(ERR_NOMEM, "out of memory growing the ledger");
        }
        e->baseline = baseline;
        e->flipped = flipped;
        if (baseline)
            snprintf(e->hypothesis, sizeof e->hypothesis,
                     "baseline: every toggle ON; how often are sessions corrupt?");
        else
            snprintf(e->hypothesis, sizeof e->hypothesis, "flip %s OFF: does the corruption stop?",
                     names.data);
    }
    int id = e->id;
    e->restarts++;
    hunt_bnote(b, "bisect: [%d] %s (restart %d of %d)", id, e->hypothesis, hunt_ledger_restarts(lg),
               cfg->budget);
    strbuf_deinit(&names);
    int rc = hunt_bsave(b);
    if (rc)
        return rc;
    rc = b->ops->begin(b->ops->ud, lg, flipped);
    e = hunt_ledger_find(lg, baseline, flipped); /* begin may not touch lg, but be safe */
    if (rc == ERR_CANCELLED) {                   /* interrupted while starting: resumed next time */
        b->ops->end(b->ops->ud);
        hunt_bsave(b);
        return rc;
    }
    if (rc) {
        snprintf(e->note, sizeof e->note, "could not start the target: %s", err_detail());
        snprintf(e->verdict, sizeof e->verdict, "error");
        b->ops->end(b->ops->ud);
        hunt_bsave(b);
        return rc;
    }
    hunt_sprt t;
    memset(&t, 0, sizeof t);
    if (!baseline) {
        if ((rc = hunt_sprt_init(&t, lg->p0, lg->p1, 0.05, 0.05))) {
            b->ops->end(b->ops->ud);
            return rc;
        }
        hunt_sprt_add_counts(&t, e->sessions, e->corrupt); /* resuming */
    }
    hunt_verdict *v = malloc((size_t)cfg->round * sizeof *v);
    if (!v) {
        b->ops->end(b->ops->ud);
        return err_set(ERR_NOMEM, "out of memory");
    }
    rc = 0;
    for (;;) {
        if (baseline ? e->sessions >= cfg->baseline_sessions
                     : (t.decision != HUNT_SPRT_CONTINUE || e->sessions >= cfg->max_sessions))
            break;
        int got = 0;
        double r0 = clock_now_s();
        rc = b->ops->round(b->ops->ud, e->next_index, cfg->round, v, &got);
        e = hunt_ledger_find(lg, baseline, flipped);
        e->next_index += got;
        for (int i = 0; i < got; i++) {
            if (v[i] == HUNT_V_ERROR) {
                e->errors++;
                continue;
            }
            e->sessions++;
            if (v[i] == HUNT_V_CORRUPT)
                e->corrupt++;
            if (!baseline && hunt_sprt_add(&t, v[i] == HUNT_V_CORRUPT) != HUNT_SPRT_CONTINUE)
                break; /* later sessions of this round are not looked at (Wald's guarantee) */
        }
        e->llr = t.llr;
        e->wall_s += clock_now_s() - r0;
        if (rc) {
            snprintf(e->note, sizeof e->note, "%s", err_detail());
            break;
        }
        if (got == 0) {
            rc = err_set(ERR_PROTOCOL, "a round ran no session");
            snprintf(e->note, sizeof e->note, "%s", err_detail());
            break;
        }
        int src = hunt_bsave(b);
        if (src) {
            rc = src;
            break;
        }
    }
    free(v);
    b->ops->end(b->ops->ud);
    e = hunt_ledger_find(lg, baseline, flipped);
    if (rc == ERR_CANCELLED) {
        hunt_bsave(b); /* stays "running": resumed next time */
        return rc;
    }
    if (rc) {
        /* the target failed this configuration: undecided, the search works around it */
        snprintf(e->verdict, sizeof e->verdict, "error");
        *outcome = OUT_UNDECIDED;
        hunt_bnote(b, "bisect: [%d] target error: %s", id, e->note);
        return hunt_bsave(b);
    }
    double lo, hi;
    hunt_wilson(e->corrupt, e->sessions, HUNT_Z95, &lo, &hi);
    if (baseline) {
        snprintf(e->verdict, sizeof e->verdict, "baseline");
        *outcome = OUT_CORRUPT;
    } else if (t.decision == HUNT_SPRT_CLEAN) {
        snprintf(e->verdict, sizeof e->verdict, "clean");
        *outcome = OUT_CLEAN;
    } else if (t.decision == HUNT_SPRT_CORRUPT) {
        snprintf(e->verdict, sizeof e->verdict, "corrupt");
        *outcome = OUT_CORRUPT;
    } else {
        snprintf(e->verdict, sizeof e->verdict, "undecided");
        *outcome = OUT_UNDECIDED;
    }
    hunt_bnote(b,
               "bisect: [%d] %s: %lld/%lld sessions corrupt (%.1f%%, Wilson 95%% [%.1f%%, "
               "%.1f%%]), LLR %.2f",
               id, e->verdict, (long long)e->corrupt, (long long)e->sessions,
               e->sessions ? 100.0 * (double)e->corrupt / (double)e->sessions : 0.0, 100 * lo,
               100 * hi, e->llr);
    return hunt_bsave(b);
}

static void hunt_conclude(hunt_bctx *b, const char *state, uint64_t culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void hunt_conclude(hunt_bctx *b, const char *state, uint64_t culprit, const char *fmt, ...) {
    hunt_ledger *lg = b->lg;
    snprintf(lg->state, sizeof lg->state, "%s", state);
    lg->culprit = culprit;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lg->conclusion, sizeof lg->conclusion, fmt, ap);
    va_end(ap);
    hunt_bnote(b, "bisect: %s", lg->conclusion);
}

typedef struct hunt_ddctx {
    hunt_bctx *b;
    int budget_hit;
} hunt_ddctx;

static int hunt_dd_test(void *ud, const int *set, int n) {
    hunt_ddctx *d = ud;
    hunt_bctx *b = d->b;
    int idx[HUNT_MAX_TOGGLES];
    for (int i = 0; i < n; i++)
        idx[i] = b->order[set[i]];
    int out;
    int rc = hunt_bisect_measure(b, false, hunt_mask(b, idx, n), &out);
    if (rc)
        return rc;
    if (out == OUT_BUDGET) {
        d->budget_hit = 1;
        return err_set(ERR_FULL, "restart budget exhausted");
    }
    return out == OUT_CLEAN ? HUNT_DD_FAIL : out == OUT_CORRUPT ? HUNT_DD_PASS : HUNT_DD_UNRESOLVED;
}

static double hunt_weight(const hunt_toggle *t) {
    double c = t->cost > 0 ? t->cost : 1;
    return (t->likelihood > 0 ? t->likelihood : 1e-9) / c;
}

static void hunt_budget_conclusion(hunt_bctx *b) {
    hunt_conclude(b, "budget", 0,
                  "restart budget of %d exhausted before a decision; rerun with a larger "
                  "--budget and the same --ledger to continue",
                  b->cfg->budget);
}

/* Orders b->order by prior weight (likelihood / cost), most likely first, ties in ledger order. */
static void hunt_bisect_order(hunt_bctx *b) {
    const hunt_ledger *lg = b->lg;
    for (int i = 0; i < b->n; i++)
        b->order[i] = i;
    for (int i = 1; i < b->n; i++) { /* stable insertion sort by weight, descending */
        int x = b->order[i], j = i;
        while (j > 0 &&
               hunt_weight(&lg->toggles[b->order[j - 1]]) < hunt_weight(&lg->toggles[x])) {
            b->order[j] = b->order[j - 1];
            j--;
        }
        b->order[j] = x;
    }
}

/* Measures the baseline (baseline true) or the configuration flipping mask; when the restart budget
 * runs out, writes the budget conclusion and sets *done. Returns 0 or a negative error code. */
static int hunt_bisect_try(hunt_bctx *b, bool baseline, uint64_t mask, int *out, bool *done) {
    int rc = hunt_bisect_measure(b, baseline, mask, out);
    if (!rc && *out == OUT_BUDGET) {
        hunt_budget_conclusion(b);
        *done = true;
    }
    return rc;
}

/* Phase 1: measures the baseline and picks the SPRT rates from it. Sets *done with a conclusion
 * when there is nothing to bisect (error, clean baseline, no budget). Returns 0 or an error. */
static int hunt_bisect_baseline(hunt_bctx *b, bool *done) {
    hunt_ledger *lg = b->lg;
    const hunt_bisect_cfg *cfg = b->cfg;
    int out, rc;
    if ((rc = hunt_bisect_try(b, true, 0, &out, done)) || *done)
        return rc;
    hunt_ledger_entry *base = hunt_ledger_find(lg, true, 0);
    if (!strcmp(base->verdict, "error")) {
        hunt_conclude(b, "inconclusive", 0, "the baseline could not be measured: %s", base->note);
        *done = true;
        return 0;
    }
    if (base->corrupt == 0) {
        double lo, hi;
        hunt_wilson(0, base->sessions, HUNT_Z95, &lo, &hi);
        hunt_conclude(b, "baseline_clean", 0,
                      "the baseline showed no corruption in %lld sessions (Wilson 95%% upper bound "
                      "%.1f%%): nothing to bisect; raise the load or the session count",
                      (long long)base->sessions, 100 * hi);
        *done = true;
        return 0;
    }
    lg->base_rate = (double)base->corrupt / (double)base->sessions;
    hunt_sprt_pick(lg->base_rate, &lg->p0, &lg->p1);
    if (cfg->p1 > 0)
        lg->p1 = cfg->p1;
    if (cfg->p0 > 0)
        lg->p0 = cfg->p0;
    if (!(lg->p0 < lg->p1))
        return err_set(ERR_RANGE, "SPRT needs p0 < p1, got %g and %g", lg->p0, lg->p1);
    hunt_bnote(b, "bisect: baseline rate %.3f; SPRT H0 rate <= %.4f vs H1 rate >= %.4f",
               lg->base_rate, lg->p0, lg->p1);
    return hunt_bsave(b);
}

/* Phase 2: the premise, every toggle flipped OFF must be clean. Sets *done with a conclusion when
 * it is not (or undecided, or no budget). Returns 0 or a negative error code. */
static int hunt_bisect_premise(hunt_bctx *b, bool *done) {
    int out, rc;
    uint64_t all = hunt_mask(b, b->order, b->n);
    if ((rc = hunt_bisect_try(b, false, all, &out, done)) || *done)
        return rc;
    if (out == OUT_CORRUPT) {
        hunt_conclude(b, "no_culprit", 0,
                      "flipping every toggle OFF still corrupts sessions: the cause is not among "
                      "these toggles (or needs a value other than OFF); all are ruled out");
        *done = true;
    } else if (out == OUT_UNDECIDED) {
        hunt_conclude(b, "inconclusive", 0,
                      "flipping every toggle OFF gave no decision (see the ledger); raise "
                      "--max-sessions or check the target");
        *done = true;
    }
    return 0;
}

/* Phase 3a: weighted bisection of the candidates cand[0..*m) down to one, each step flipping the
 * prefix holding about half the prior weight (and the other half when that is undecided). Sets
 * *inconclusive when neither half decides, *done when the budget ran out. Returns 0 or an error. */
static int hunt_bisect_halve(hunt_bctx *b, int *cand, int *m, bool *inconclusive, bool *done) {
    const hunt_ledger *lg = b->lg;
    int out, rc;
    while (*m > 1) {
        double total = 0, acc = 0;
        for (int i = 0; i < *m; i++)
            total += hunt_weight(&lg->toggles[cand[i]]);
        int k = 0; /* the prefix holding about half the prior weight, 1..m-1 toggles */
        while (k < *m - 1) {
            acc += hunt_weight(&lg->toggles[cand[k]]);
            k++;
            if (acc >= total / 2)
                break;
        }
        uint64_t ma = hunt_mask(b, cand, k), mb = hunt_mask(b, cand + k, *m - k);
        if ((rc = hunt_bisect_try(b, false, ma, &out, done)) || *done)
            return rc;
        if (out == OUT_UNDECIDED) { /* ask the other half */
            if ((rc = hunt_bisect_try(b, false, mb, &out, done)) || *done)
                return rc;
            if (out == OUT_UNDECIDED) {
                *inconclusive = true;
                return 0;
            }
            out = out == OUT_CLEAN ? OUT_CORRUPT : OUT_CLEAN; /* as if asked of the first half */
        }
        if (out == OUT_CLEAN) {
            *m = k;
        } else {
            memmove(cand, cand + k, (size_t)(*m - k) * sizeof *cand);
            *m -= k;
        }
    }
    return 0;
}

/* Phase 3: a single culprit by weighted bisection, confirmed by flipping it alone. Sets *done with
 * a conclusion when found (or no budget). Returns 0 or a negative error code. */
static int hunt_bisect_single(hunt_bctx *b, bool *done) {
    hunt_ledger *lg = b->lg;
    int cand[HUNT_MAX_TOGGLES], m = b->n, out, rc;
    memcpy(cand, b->order, sizeof cand);
    bool inconclusive = false;
    if ((rc = hunt_bisect_halve(b, cand, &m, &inconclusive, done)) || *done || inconclusive)
        return rc;
    uint64_t one = (uint64_t)1 << cand[0];
    if ((rc = hunt_bisect_try(b, false, one, &out, done)) || *done)
        return rc;
    if (out == OUT_CLEAN) {
        hunt_ledger_entry *e = hunt_ledger_find(lg, false, one);
        hunt_conclude(b, "culprit", one,
                      "culprit: %s. Flipping it to %s alone stops the corruption (%lld/%lld "
                      "sessions corrupt) that the baseline shows in %.1f%% of sessions; %d "
                      "restarts",
                      lg->toggles[cand[0]].name, lg->toggles[cand[0]].off, (long long)e->corrupt,
                      (long long)e->sessions, 100 * lg->base_rate, hunt_ledger_restarts(lg));
        *done = true;
    }
    return 0;
}

/* Phase 4: no single toggle decides it: a 1-minimal culprit set by delta debugging over all the
 * toggles. Always concludes. Returns 0 or a negative error code. */
static int hunt_bisect_set(hunt_bctx *b) {
    hunt_ledger *lg = b->lg;
    hunt_bnote(b, "bisect: no single toggle decides it; delta debugging over all %d", b->n);
    hunt_ddctx d = {b, 0};
    int res[HUNT_MAX_TOGGLES], n_res = 0;
    int rc = hunt_ddmin(b->n, hunt_dd_test, &d, res, &n_res);
    if (rc && d.budget_hit) {
        hunt_budget_conclusion(b);
        return 0;
    }
    if (rc)
        return rc;
    int idx[HUNT_MAX_TOGGLES];
    for (int i = 0; i < n_res; i++)
        idx[i] = b->order[res[i]];
    uint64_t set = hunt_mask(b, idx, n_res);
    strbuf s;
    strbuf_init(&s);
    hunt_ledger_names(lg, set, &s);
    hunt_ledger_entry *e = hunt_ledger_find(lg, false, set);
    if (e && !strcmp(e->verdict, "clean"))
        hunt_conclude(b, n_res == 1 ? "culprit" : "culprit_set", set,
                      "culprit set: {%s}. Flipping these together stops the corruption; flipping "
                      "any one of them back keeps it (1-minimal by delta debugging); %d restarts",
                      s.data, hunt_ledger_restarts(lg));
    else
        hunt_conclude(b, "inconclusive", set,
                      "delta debugging ended at {%s} without a clean decision for it; some "
                      "configurations were undecided (see the ledger)",
                      s.data);
    strbuf_deinit(&s);
    return 0;
}

int hunt_bisect_run(hunt_ledger *lg, const hunt_bisect_cfg *cfg, const hunt_bisect_ops *ops) {
    hunt_bctx b = {.lg = lg, .cfg = cfg, .ops = ops, .n = lg->n_toggles};
    if (b.n < 1 || b.n > HUNT_MAX_TOGGLES)
        return err_set(ERR_RANGE, "%d toggles; bisect needs 1..%d", b.n, HUNT_MAX_TOGGLES);
    if (cfg->round < 1 || cfg->budget < 1 || cfg->max_sessions < 1 || cfg->baseline_sessions < 1)
        return err_set(ERR_RANGE, "round, budget and session limits must be positive");
    hunt_bisect_order(&b);
    snprintf(lg->state, sizeof lg->state, "running");
    lg->culprit = 0;
    lg->conclusion[0] = 0;
    bool done = false;
    int rc = hunt_bisect_baseline(&b, &done);
    if (!rc && !done)
        rc = hunt_bisect_premise(&b, &done);
    if (!rc && !done)
        rc = hunt_bisect_single(&b, &done);
    if (!rc && !done)
        rc = hunt_bisect_set(&b);
    return rc ? rc : hunt_bsave(&b);
}
