/* SPDX-License-Identifier: MIT */
/* hunt_stats: Wilson intervals, Wald's SPRT, ddmin. See hunt_stats.h. */
#include "hunt/hunt_stats.h"
#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void hunt_wilson(int64_t k, int64_t n, double z, double *lo, double *hi) {
    if (n <= 0) {
        *lo = 0;
        *hi = 1;
        return;
    }
    if (k < 0)
        k = 0;
    if (k > n)
        k = n;
    double nn = (double)n, p = (double)k / nn, z2 = z * z;
    double denom = 1 + z2 / nn;
    double center = (p + z2 / (2 * nn)) / denom;
    double half = z / denom * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
    double l = center - half, h = center + half;
    *lo = k == 0 ? 0 : (l < 0 ? 0 : l);
    *hi = k == n ? 1 : (h > 1 ? 1 : h);
}

int hunt_sprt_init(hunt_sprt *t, double p0, double p1, double alpha, double beta) {
    memset(t, 0, sizeof *t);
    if (!(p0 > 0 && p0 < p1 && p1 < 1))
        return err_set(ERR_RANGE, "SPRT: need 0 < p0 < p1 < 1, got p0 = %g, p1 = %g", p0, p1);
    if (!(alpha > 0 && alpha < 0.5 && beta > 0 && beta < 0.5))
        return err_set(ERR_RANGE, "SPRT: error rates must be in (0, 0.5), got %g and %g", alpha,
                       beta);
    t->p0 = p0;
    t->p1 = p1;
    t->alpha = alpha;
    t->beta = beta;
    t->upper = log((1 - beta) / alpha);
    t->lower = log(beta / (1 - alpha));
    return 0;
}

static hunt_sprt_decision hunt_sprt_check(hunt_sprt *t) {
    if (t->decision == HUNT_SPRT_CONTINUE) {
        if (t->llr >= t->upper)
            t->decision = HUNT_SPRT_CORRUPT;
        else if (t->llr <= t->lower)
            t->decision = HUNT_SPRT_CLEAN;
    }
    return t->decision;
}

hunt_sprt_decision hunt_sprt_add(hunt_sprt *t, bool corrupt) {
    return hunt_sprt_add_counts(t, 1, corrupt ? 1 : 0);
}

hunt_sprt_decision hunt_sprt_add_counts(hunt_sprt *t, int64_t n, int64_t k) {
    if (n <= 0)
        return t->decision;
    t->n += n;
    t->k += k;
    if (t->decision == HUNT_SPRT_CONTINUE)
        t->llr += (double)k * log(t->p1 / t->p0) + (double)(n - k) * log((1 - t->p1) / (1 - t->p0));
    return hunt_sprt_check(t);
}

const char *hunt_sprt_name(hunt_sprt_decision d) {
    switch (d) {
    case HUNT_SPRT_CLEAN:
        return "clean";
    case HUNT_SPRT_CORRUPT:
        return "corrupt";
    default:
        return "continue";
    }
}

void hunt_sprt_pick(double base, double *p0, double *p1) {
    double q1 = base / 2;
    if (!(q1 >= 0.002))
        q1 = 0.002;
    if (q1 > 0.5)
        q1 = 0.5;
    *p1 = q1;
    *p0 = q1 / 8;
}

/* ---- ddmin ---- */

/* Splits c[0..n) into k nearly equal consecutive parts; part i is c[start(i)..start(i+1)). */
static int hunt_dd_start(int n, int k, int i) {
    return (int)((int64_t)n * i / k);
}

int hunt_ddmin(int n, hunt_dd_test_fn test, void *ud, int *out, int *n_out) {
    if (n < 1 || n > 4096)
        return err_set(ERR_INVAL, "ddmin: set size %d out of range 1..4096", n);
    int *c = malloc((size_t)n * sizeof *c);
    int *cand = malloc((size_t)n * sizeof *cand);
    if (!c || !cand) {
        free(c);
        free(cand);
        return err_set(ERR_NOMEM, "ddmin: out of memory");
    }
    int nc = n;
    for (int i = 0; i < n; i++)
        c[i] = i;
    int gran = 2;
    int rc = 0;
    while (nc >= 2) {
        if (gran > nc)
            gran = nc;
        bool reduced = false;
        /* phase 0 tries each part on its own, phase 1 each complement (only informative when
         * there are more than two parts); a subset that still fails replaces the set */
        for (int phase = 0; phase < 2 && !reduced; phase++)
            for (int i = 0; i < gran && !reduced && (phase == 0 || gran > 2); i++) {
                int s = hunt_dd_start(nc, gran, i), e = hunt_dd_start(nc, gran, i + 1);
                int m = 0;
                for (int j = 0; j < nc; j++)
                    if ((j >= s && j < e) == (phase == 0))
                        cand[m++] = c[j];
                int r = test(ud, cand, m);
                if (r < 0) {
                    rc = r;
                    goto out;
                }
                if (r == HUNT_DD_FAIL) {
                    memcpy(c, cand, (size_t)m * sizeof *c);
                    nc = m;
                    gran = phase == 0 || gran - 1 < 2 ? 2 : gran - 1;
                    reduced = true;
                }
            }
        if (reduced)
            continue;
        if (gran >= nc)
            break; /* 1-minimal */
        gran = gran * 2 < nc ? gran * 2 : nc;
    }
    /* sort the result (it is already in increasing order: parts keep order) */
    memcpy(out, c, (size_t)nc * sizeof *out);
    *n_out = nc;
out:
    free(c);
    free(cand);
    return rc;
}
