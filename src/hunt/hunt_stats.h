/* SPDX-License-Identifier: MIT */
/*
 * hunt_stats: the statistics hunt and bisect decide with.
 *
 * - Wilson score interval for a binomial proportion (k corrupt sessions out of n). Unlike the
 *   normal approximation it stays inside [0, 1] and is informative at k = 0: 0 of 30 gives
 *   [0, 0.114], so "no corruption seen" is reported with how much corruption could still hide.
 * - Wald's sequential probability ratio test for a Bernoulli rate. H0: rate <= p0 (the
 *   configuration is clean), H1: rate >= p1 (still corrupt). After each session the log
 *   likelihood ratio moves by log(p1/p0) for a corrupt one and log((1-p1)/(1-p0)) for a clean one;
 *   it stops at log((1-beta)/alpha) (accept H1) or log(beta/(1-alpha)) (accept H0). With
 *   alpha = beta = 0.05 both error rates are bounded by 5% (Wald's bounds, slightly conservative),
 *   and a clean verdict needs only as many sessions as the data require.
 * - hunt_sprt_pick chooses p0 and p1 from a measured baseline rate (see its contract).
 * - ddmin (Zeller and Hildebrandt's delta debugging) over a set of element indices, for the
 *   smallest set of toggles whose combination is needed.
 */
#ifndef VERITY_HUNT_STATS_H
#define VERITY_HUNT_STATS_H

#include <stdbool.h>
#include <stdint.h>

#define HUNT_Z95 1.959963984540054 /* two-sided 95% standard normal quantile */

/* Wilson score interval of k successes in n trials at normal quantile z (HUNT_Z95 for 95%).
 * n == 0 gives [0, 1]. The bounds are clamped to [0, 1]; k == 0 gives lo == 0 exactly and k == n
 * gives hi == 1 exactly. */
void hunt_wilson(int64_t k, int64_t n, double z, double *lo, double *hi);

typedef enum hunt_sprt_decision {
    HUNT_SPRT_CONTINUE = 0,
    HUNT_SPRT_CLEAN,   /* H0 accepted: rate <= p0 */
    HUNT_SPRT_CORRUPT, /* H1 accepted: rate >= p1 */
} hunt_sprt_decision;

typedef struct hunt_sprt {
    double p0, p1;               /* hypotheses */
    double alpha, beta;          /* error rates: P(accept H1 | H0), P(accept H0 | H1) */
    double llr;                  /* log likelihood ratio so far, log(L1/L0) */
    double upper, lower;         /* decision bounds on llr */
    int64_t n, k;                /* sessions seen, corrupt among them */
    hunt_sprt_decision decision; /* sticky once decided */
} hunt_sprt;

/* Initialises a test of H0: rate <= p0 against H1: rate >= p1. Returns 0, or ERR_RANGE (detail
 * names the values) unless 0 < p0 < p1 < 1 and 0 < alpha, beta < 0.5. */
int hunt_sprt_init(hunt_sprt *t, double p0, double p1, double alpha, double beta);

/* Adds one observation (corrupt or not) and returns the decision. Once decided, further
 * observations are counted but do not change the decision. */
hunt_sprt_decision hunt_sprt_add(hunt_sprt *t, bool corrupt);

/* Re-applies n observations of which k were corrupt (order does not matter for the ratio, only
 * for when a bound was first crossed: this checks the bounds once, after all of them). Used when
 * resuming from a ledger. Returns the decision. */
hunt_sprt_decision hunt_sprt_add_counts(hunt_sprt *t, int64_t n, int64_t k);

/* Returns "continue", "clean" or "corrupt". */
const char *hunt_sprt_name(hunt_sprt_decision d);

/* Chooses the SPRT hypotheses from a measured baseline corruption rate base (0 < base <= 1):
 * p1 = base / 2 (a configuration that leaves the bug alone keeps the baseline rate, comfortably
 * above p1; one that removes it drops to ~0) and p0 = p1 / 8 (a clean configuration is decided
 * after about 3.4 / p1 clean sessions; one corrupt session moves the ratio by log 8, so a few
 * corrupt sessions decide "still corrupt"). p1 is clamped to [0.002, 0.5]. */
void hunt_sprt_pick(double base, double *p0, double *p1);

/* ddmin outcome of one test. */
enum { HUNT_DD_PASS = 0, HUNT_DD_FAIL = 1, HUNT_DD_UNRESOLVED = 2 };

/* The test callback: returns HUNT_DD_FAIL if the property being minimised ("the failure") holds
 * for the subset set[0..n), HUNT_DD_PASS if not, HUNT_DD_UNRESOLVED if it cannot tell, or a
 * negative error code, which aborts ddmin. */
typedef int (*hunt_dd_test_fn)(void *ud, const int *set, int n);

/* Minimises the set {0..n-1}, for which the property is assumed to hold (it is not re-tested), to
 * a 1-minimal subset (removing any one element makes the test stop failing, as far as the tests
 * could tell). Writes the subset in increasing order to out (capacity n) and its size to *n_out.
 * Returns 0, ERR_INVAL (n < 1 or n > 4096), ERR_NOMEM, or the callback's negative code. */
int hunt_ddmin(int n, hunt_dd_test_fn test, void *ud, int *out, int *n_out);

#endif
