/* SPDX-License-Identifier: MIT */
/* Unit tests for src/hunt/hunt_stats: Wilson intervals against published values, SPRT decisions
 * and error rates on synthetic Bernoulli streams, ddmin on synthetic predicates. */
#include "test.h"
#include "base/err.h"
#include "hunt/hunt_stats.h"
#include "hunt/hunt_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void near(double got, double want, double tol, const char *what) {
    if (fabs(got - want) > tol)
        test_fail(__FILE__, __LINE__, "%s: got %.6f, expected %.6f", what, got, want);
}

static void t_wilson_known(void) {
    /* Newcombe (1998), Statistics in Medicine 17:857, table I, method 3 (Wilson score) */
    static const struct {
        int k, n;
        double lo, hi;
    } v[] = {
        {81, 263, 0.2553, 0.3662},
        {15, 148, 0.0624, 0.1605},
        {0, 20, 0.0, 0.1611},
        {1, 29, 0.0061, 0.1718},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        double lo, hi;
        hunt_wilson(v[i].k, v[i].n, HUNT_Z95, &lo, &hi);
        near(lo, v[i].lo, 6e-5, "lower bound");
        near(hi, v[i].hi, 6e-5, "upper bound");
    }
    double lo, hi;
    hunt_wilson(0, 10, HUNT_Z95, &lo, &hi);
    T_CHECK(lo == 0.0);
    near(hi, 0.27753, 1e-5, "0 of 10");
    hunt_wilson(10, 10, HUNT_Z95, &lo, &hi);
    T_CHECK(hi == 1.0);
    near(lo, 1 - 0.27753, 1e-5, "10 of 10");
    hunt_wilson(0, 0, HUNT_Z95, &lo, &hi);
    T_CHECK(lo == 0 && hi == 1);
    hunt_wilson(18, 100, HUNT_Z95, &lo, &hi);
    near(lo, 0.11700, 1e-5, "18 of 100 lower");
    near(hi, 0.26667, 1e-5, "18 of 100 upper");
}

/* Runs the SPRT on a Bernoulli(p) stream until it decides (or max steps). */
static hunt_sprt_decision sprt_sim(double p0, double p1, double p, hunt_rng *r, int64_t *steps) {
    hunt_sprt t;
    T_OK(hunt_sprt_init(&t, p0, p1, 0.05, 0.05));
    hunt_sprt_decision d = HUNT_SPRT_CONTINUE;
    while (d == HUNT_SPRT_CONTINUE && t.n < 100000)
        d = hunt_sprt_add(&t, hunt_rng_unit(r) < p);
    *steps = t.n;
    return d;
}

static void t_sprt_decisions(void) {
    hunt_rng r;
    hunt_rng_seed(&r, 12345);
    double p0, p1;
    hunt_sprt_pick(0.18, &p0, &p1); /* the incident's rate */
    near(p1, 0.09, 1e-12, "p1");
    near(p0, 0.01125, 1e-12, "p0");
    int64_t steps;
    /* a configuration that removes the bug (rate 0) is decided clean, in a data-driven number of
     * sessions: every session moves the ratio by log((1-p1)/(1-p0)) */
    T_EQ_INT(sprt_sim(p0, p1, 0.0, &r, &steps), HUNT_SPRT_CLEAN);
    int64_t expect = (int64_t)ceil(log(0.05 / 0.95) / log((1 - p1) / (1 - p0)));
    T_EQ_INT(steps, expect);
    T_CHECKF(steps < 40, "clean after %lld sessions", (long long)steps);
    /* a configuration that leaves it (rate 0.18) is decided corrupt quickly */
    int corrupt = 0;
    int64_t total = 0;
    for (int i = 0; i < 200; i++) {
        corrupt += sprt_sim(p0, p1, 0.18, &r, &steps) == HUNT_SPRT_CORRUPT;
        total += steps;
    }
    T_CHECKF(corrupt >= 198, "%d of 200 decided corrupt at the baseline rate", corrupt);
    T_CHECKF(total / 200 < 40, "mean %lld sessions", (long long)(total / 200));
    /* the stated error rates hold at the hypotheses themselves */
    int wrong0 = 0, wrong1 = 0;
    const int n = 2000;
    for (int i = 0; i < n; i++) {
        wrong0 += sprt_sim(p0, p1, p0, &r, &steps) == HUNT_SPRT_CORRUPT;
        wrong1 += sprt_sim(p0, p1, p1, &r, &steps) == HUNT_SPRT_CLEAN;
    }
    T_CHECKF(wrong0 <= n * 0.06, "alpha: %d of %d", wrong0, n);
    T_CHECKF(wrong1 <= n * 0.06, "beta: %d of %d", wrong1, n);
}

static void t_sprt_misc(void) {
    hunt_sprt t;
    T_EQ_INT(hunt_sprt_init(&t, 0.2, 0.1, 0.05, 0.05), ERR_RANGE);
    T_EQ_INT(hunt_sprt_init(&t, 0.0, 0.1, 0.05, 0.05), ERR_RANGE);
    T_OK(hunt_sprt_init(&t, 0.01, 0.1, 0.05, 0.05));
    /* one corrupt session moves log(10) = 2.30 < log(19): not yet decided; two decide */
    T_EQ_INT(hunt_sprt_add(&t, true), HUNT_SPRT_CONTINUE);
    T_EQ_INT(hunt_sprt_add(&t, true), HUNT_SPRT_CORRUPT);
    T_EQ_INT(hunt_sprt_add(&t, false), HUNT_SPRT_CORRUPT); /* sticky */
    hunt_sprt u;
    T_OK(hunt_sprt_init(&u, 0.01, 0.1, 0.05, 0.05));
    T_EQ_INT(hunt_sprt_add_counts(&u, 10, 0), HUNT_SPRT_CONTINUE);
    T_EQ_INT(hunt_sprt_add_counts(&u, 30, 0), HUNT_SPRT_CLEAN);
    T_CHECK(strcmp(hunt_sprt_name(HUNT_SPRT_CLEAN), "clean") == 0);
    double p0, p1;
    hunt_sprt_pick(1.0, &p0, &p1);
    T_CHECK(p1 == 0.5);
    hunt_sprt_pick(0.0001, &p0, &p1);
    T_CHECK(p1 == 0.002);
}

/* ddmin predicates over subsets of {0..n-1} */
typedef struct dd_pred {
    int kind;
    int calls;
} dd_pred;

static bool has(const int *s, int n, int x) {
    for (int i = 0; i < n; i++)
        if (s[i] == x)
            return true;
    return false;
}

static int dd_test(void *ud, const int *s, int n) {
    dd_pred *p = ud;
    p->calls++;
    switch (p->kind) {
    case 0: /* one culprit */
        return has(s, n, 6) ? HUNT_DD_FAIL : HUNT_DD_PASS;
    case 1: /* a pair needed together */
        return has(s, n, 2) && has(s, n, 5) ? HUNT_DD_FAIL : HUNT_DD_PASS;
    case 2: /* three needed, spread out */
        return has(s, n, 0) && has(s, n, 7) && has(s, n, 12) ? HUNT_DD_FAIL : HUNT_DD_PASS;
    case 3: /* some subsets cannot be tested */
        if (n == 3)
            return HUNT_DD_UNRESOLVED;
        return has(s, n, 1) && has(s, n, 4) ? HUNT_DD_FAIL : HUNT_DD_PASS;
    default:
        return err_set(ERR_CANCELLED, "budget");
    }
}

static void t_ddmin(void) {
    int out[32], n_out;
    dd_pred p = {0, 0};
    T_OK(hunt_ddmin(8, dd_test, &p, out, &n_out));
    T_EQ_INT(n_out, 1);
    T_EQ_INT(out[0], 6);
    T_CHECKF(p.calls <= 8, "%d tests", p.calls);
    p = (dd_pred){1, 0};
    T_OK(hunt_ddmin(8, dd_test, &p, out, &n_out));
    T_EQ_INT(n_out, 2);
    T_CHECK(out[0] == 2 && out[1] == 5);
    p = (dd_pred){2, 0};
    T_OK(hunt_ddmin(16, dd_test, &p, out, &n_out));
    T_EQ_INT(n_out, 3);
    T_CHECK(out[0] == 0 && out[1] == 7 && out[2] == 12);
    p = (dd_pred){3, 0};
    T_OK(hunt_ddmin(6, dd_test, &p, out, &n_out));
    T_CHECK(has(out, n_out, 1) && has(out, n_out, 4));
    p = (dd_pred){9, 0};
    T_EQ_INT(hunt_ddmin(8, dd_test, &p, out, &n_out), ERR_CANCELLED);
    T_EQ_INT(hunt_ddmin(0, dd_test, &p, out, &n_out), ERR_INVAL);
    p = (dd_pred){0, 0};
    T_OK(hunt_ddmin(1, dd_test, &p, out, &n_out));
    T_EQ_INT(n_out, 1);
    T_EQ_INT(p.calls, 0);
}

int main(void) {
    test_run("hunt_stats.wilson_published_values", t_wilson_known);
    test_run("hunt_stats.sprt_decisions_and_error_rates", t_sprt_decisions);
    test_run("hunt_stats.sprt_bounds_and_counts", t_sprt_misc);
    test_run("hunt_stats.ddmin_synthetic", t_ddmin);
    return test_summary();
}
