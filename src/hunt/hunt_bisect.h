/* SPDX-License-Identifier: MIT */
/*
 * hunt_bisect: `verity bisect`'s search, independent of how a configuration is started and
 * measured (hunt_bisect_ops), so it can be tested on synthetic targets.
 *
 * Semantics. Toggles are NAME=OFF:ON; the baseline runs every toggle at ON (the configuration that
 * shows corruption). A hypothesis flips a set F of toggles to OFF and asks whether the corruption
 * stops. The search assumes flipping a harmless toggle neither causes nor cures corruption.
 *
 *   1. baseline: measure the corruption rate (baseline_sessions sessions). No corruption: nothing
 *      to bisect. Otherwise p1 = rate / 2 and p0 = p1 / 8 (hunt_sprt_pick) unless given.
 *   2. every configuration after that is decided by Wald's SPRT at 5% error rates: H0 rate <= p0
 *      ("clean": the flipped set contains what the corruption needs) against H1 rate >= p1
 *      ("still corrupt": those toggles are ruled out). Sessions run in rounds; the test stops at
 *      the first session that crosses a bound, so a clean verdict needs only as many sessions as
 *      the data require. max_sessions without a decision is "undecided".
 *   3. premise: flip everything. Still corrupt: the cause is not among the toggles.
 *   4. single culprit: adaptive bisection over the toggles ordered by prior (likelihood / restart
 *      cost, highest first); each step flips the half of the candidates holding about half the
 *      prior weight: clean keeps that half, corrupt keeps the other. One remaining candidate is
 *      confirmed by flipping it alone (free when the last step did exactly that).
 *   5. no single toggle: ddmin over all toggles for a 1-minimal set whose flipping together is
 *      needed to stop the corruption.
 * For n toggles a single culprit costs at most 1 + 1 + ceil(log2 n) + 1 restarts (6 for 8).
 *
 * Every configuration is one restart; results are memoised in the ledger, so a resumed bisection
 * replays its decisions without restarting anything it already decided, and continues an
 * interrupted configuration's SPRT from its recorded counts. The budget counts every restart.
 */
#ifndef VERITY_HUNT_BISECT_H
#define VERITY_HUNT_BISECT_H

#include "hunt/hunt_ledger.h"
#include "hunt/hunt_oracle.h"

#include <stdint.h>

typedef struct hunt_bisect_cfg {
    int budget;            /* restarts, the baseline included */
    int round;             /* sessions per round */
    int baseline_sessions; /* sessions for the baseline rate */
    int max_sessions;      /* per configuration before "undecided" */
    double p0, p1;         /* 0: from the baseline */
} hunt_bisect_cfg;

typedef struct hunt_bisect_ops {
    /* Starts the target with the toggles in `flipped` OFF and the rest ON (one restart). Returns
     * 0, or a negative code (the bisection stops with it). */
    int (*begin)(void *ud, const hunt_ledger *lg, uint64_t flipped);
    /* Runs sessions first .. first + n - 1 and writes their verdicts in index order to out (HUNT_V_
     * CLEAN, BENIGN, CORRUPT or ERROR); *n_out may be smaller when interrupted. Returns 0,
     * ERR_CANCELLED (interrupted), or another negative code (the target failed the round). */
    int (*round)(void *ud, int64_t first, int n, hunt_verdict *out, int *n_out);
    /* Stops the target. */
    void (*end)(void *ud);
    /* Persists the ledger (called after every round and decision). Returns 0 or an error. */
    int (*save)(void *ud, const hunt_ledger *lg);
    /* One line of progress. */
    void (*note)(void *ud, const char *line);
    void *ud;
} hunt_bisect_ops;

/* Runs (or resumes) the bisection recorded in lg, whose toggles are set. On return lg->state is
 * one of culprit, culprit_set, no_culprit, baseline_clean, inconclusive, budget, with the
 * conclusion and culprit mask filled in. Returns 0 when the search ended (whatever it found),
 * ERR_CANCELLED when a round was interrupted, or the first error of begin/save. */
int hunt_bisect_run(hunt_ledger *lg, const hunt_bisect_cfg *cfg, const hunt_bisect_ops *ops);

#endif
