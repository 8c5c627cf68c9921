/* SPDX-License-Identifier: MIT */
/* Unit tests for src/hunt/hunt_bisect and hunt_ledger on synthetic targets: a single culprit among
 * 8 toggles within 2*log2(8)+2 restarts, a pair needed together (ddmin), no culprit, a clean
 * baseline, and resuming from the ledger after a budget stop and after an interruption. */
#include "test.h"
#include "base/err.h"
#include "hunt/hunt_bisect.h"
#include "hunt/hunt_ledger.h"
#include "hunt/hunt_util.h"

#include <stdio.h>
#include <string.h>

typedef struct synth {
    int kind; /* 0 single culprit, 1 either of two (OR), 2 none, 3 clean baseline */
    int culprit, other;
    double rate;
    uint64_t flipped; /* current configuration */
    int begins;
    int rounds;
    int cancel_after_rounds; /* >0: the Nth round is interrupted half way */
    bool running;
    char path[512];
} synth;

static int s_begin(void *ud, const hunt_ledger *lg, uint64_t flipped) {
    synth *s = ud;
    (void)lg;
    T_CHECK(!s->running);
    s->flipped = flipped;
    s->begins++;
    s->running = true;
    return 0;
}

static double s_rate(const synth *s) {
    bool on_c = !(s->flipped >> s->culprit & 1), on_o = !(s->flipped >> s->other & 1);
    switch (s->kind) {
    case 0:
        return on_c ? s->rate : 0;
    case 1:
        return on_c || on_o ? s->rate : 0;
    case 2:
        return s->rate;
    default:
        return 0;
    }
}

static int s_round(void *ud, int64_t first, int n, hunt_verdict *out, int *n_out) {
    synth *s = ud;
    T_CHECK(s->running);
    s->rounds++;
    int m = n;
    bool cancel = s->cancel_after_rounds && s->rounds == s->cancel_after_rounds;
    if (cancel)
        m = n / 2;
    for (int i = 0; i < m; i++) {
        hunt_rng r;
        hunt_rng_seed(&r, hunt_mix(s->flipped * 7919 + 13, (uint64_t)(first + i)));
        out[i] = hunt_rng_unit(&r) < s_rate(s) ? HUNT_V_CORRUPT : HUNT_V_CLEAN;
        if (i % 17 == 16)
            out[i] = HUNT_V_ERROR; /* the odd target error is skipped, not counted */
    }
    *n_out = m;
    return cancel ? err_set(ERR_CANCELLED, "interrupted") : 0;
}

static void s_end(void *ud) {
    synth *s = ud;
    s->running = false;
}

static int s_save(void *ud, const hunt_ledger *lg) {
    synth *s = ud;
    return s->path[0] ? hunt_ledger_save(lg, s->path) : 0;
}

static void setup(hunt_ledger *lg, int n) {
    hunt_ledger_init(lg);
    static const char *const names[] = {
        "cuda-graph",  "prefix-cache", "overlap-schedule", "kv-fp8", "chunked-prefill",
        "detok-batch", "host-kv-tier", "spec-decode",      "t8",     "t9"};
    for (int i = 0; i < n; i++) {
        lg->toggles[i].name = strdup(names[i]);
        lg->toggles[i].off = strdup("0");
        lg->toggles[i].on = strdup("1");
        lg->toggles[i].likelihood = 1;
        lg->toggles[i].cost = 1;
    }
    lg->n_toggles = n;
    lg->launch = strdup("mock {flags}");
    lg->hunt = strdup("--url http://127.0.0.1:{port}");
}

static const hunt_bisect_cfg CFG = {
    .budget = 8, .round = 16, .baseline_sessions = 32, .max_sessions = 400};

static hunt_bisect_ops ops_for(synth *s) {
    return (hunt_bisect_ops){s_begin, s_round, s_end, s_save, NULL, s};
}

static void t_single_culprit(void) {
    for (int c = 0; c < 8; c++) {
        hunt_ledger lg;
        setup(&lg, 8);
        synth s = {.kind = 0, .culprit = c, .rate = 0.18};
        hunt_bisect_ops ops = ops_for(&s);
        T_OK(hunt_bisect_run(&lg, &CFG, &ops));
        T_CHECKF(!strcmp(lg.state, "culprit"), "culprit %d: state %s: %s", c, lg.state,
                 lg.conclusion);
        T_CHECKF(lg.culprit == (uint64_t)1 << c, "culprit %d: named mask %llx", c,
                 (unsigned long long)lg.culprit);
        T_CHECKF(hunt_ledger_restarts(&lg) <= 2 * 3 + 2, "%d restarts", hunt_ledger_restarts(&lg));
        T_EQ_INT(hunt_ledger_restarts(&lg), s.begins);
        hunt_ledger_deinit(&lg);
    }
}

static void t_prior_ordering(void) {
    /* a strong prior on the culprit puts it first: found with the fewest restarts */
    hunt_ledger lg;
    setup(&lg, 8);
    lg.toggles[6].likelihood = 20;
    synth s = {.kind = 0, .culprit = 6, .rate = 0.5};
    hunt_bisect_ops ops = ops_for(&s);
    T_OK(hunt_bisect_run(&lg, &CFG, &ops));
    T_CHECK(!strcmp(lg.state, "culprit") && lg.culprit == (uint64_t)1 << 6);
    T_CHECKF(hunt_ledger_restarts(&lg) <= 3, "%d restarts", hunt_ledger_restarts(&lg));
    hunt_ledger_deinit(&lg);
}

static void t_pair_needs_ddmin(void) {
    hunt_ledger lg;
    setup(&lg, 8);
    synth s = {.kind = 1, .culprit = 2, .other = 5, .rate = 0.5};
    hunt_bisect_ops ops = ops_for(&s);
    hunt_bisect_cfg cfg = CFG;
    cfg.budget = 40;
    T_OK(hunt_bisect_run(&lg, &cfg, &ops));
    T_CHECKF(!strcmp(lg.state, "culprit_set"), "state %s: %s", lg.state, lg.conclusion);
    T_EQ_INT(lg.culprit, (1u << 2) | (1u << 5));
    hunt_ledger_deinit(&lg);
}

static void t_no_culprit_and_clean_baseline(void) {
    hunt_ledger lg;
    setup(&lg, 8);
    synth s = {.kind = 2, .rate = 0.4};
    hunt_bisect_ops ops = ops_for(&s);
    T_OK(hunt_bisect_run(&lg, &CFG, &ops));
    T_CHECKF(!strcmp(lg.state, "no_culprit"), "state %s", lg.state);
    T_EQ_INT(hunt_ledger_restarts(&lg), 2);
    hunt_ledger_deinit(&lg);
    setup(&lg, 8);
    synth c = {.kind = 3};
    ops = ops_for(&c);
    T_OK(hunt_bisect_run(&lg, &CFG, &ops));
    T_CHECKF(!strcmp(lg.state, "baseline_clean"), "state %s", lg.state);
    T_EQ_INT(hunt_ledger_restarts(&lg), 1);
    hunt_ledger_deinit(&lg);
}

static void t_resume_after_budget(void) {
    /* the reference run */
    hunt_ledger full;
    setup(&full, 8);
    synth s0 = {.kind = 0, .culprit = 3, .rate = 0.3};
    hunt_bisect_ops ops = ops_for(&s0);
    T_OK(hunt_bisect_run(&full, &CFG, &ops));
    T_CHECK(!strcmp(full.state, "culprit"));
    int total = hunt_ledger_restarts(&full);
    /* the same with a budget of 3, saved to a file, then resumed from it */
    hunt_ledger lg;
    setup(&lg, 8);
    synth s = {.kind = 0, .culprit = 3, .rate = 0.3};
    snprintf(s.path, sizeof s.path, "%s/ledger.json", test_tmpdir());
    ops = ops_for(&s);
    hunt_bisect_cfg cfg = CFG;
    cfg.budget = 3;
    T_OK(hunt_bisect_run(&lg, &cfg, &ops));
    T_CHECKF(!strcmp(lg.state, "budget"), "state %s", lg.state);
    T_EQ_INT(s.begins, 3);
    hunt_ledger_deinit(&lg);
    hunt_ledger back;
    hunt_ledger_init(&back);
    T_OK(hunt_ledger_load(s.path, &back));
    hunt_ledger want;
    setup(&want, 8);
    T_OK(hunt_ledger_check_same(&back, &want));
    want.toggles[2].on[0] = '2';
    T_EQ_INT(hunt_ledger_check_same(&back, &want), ERR_INVAL);
    hunt_ledger_deinit(&want);
    T_EQ_INT(hunt_ledger_restarts(&back), 3);
    s.begins = 0;
    T_OK(hunt_bisect_run(&back, &CFG, &ops));
    T_CHECK(!strcmp(back.state, "culprit") && back.culprit == 1u << 3);
    T_EQ_INT(hunt_ledger_restarts(&back), total);
    T_EQ_INT(s.begins, total - 3); /* nothing decided before was restarted */
    hunt_ledger_deinit(&back);
    hunt_ledger_deinit(&full);
}

static void t_resume_after_interrupt(void) {
    hunt_ledger lg;
    setup(&lg, 8);
    synth s = {.kind = 0, .culprit = 1, .rate = 0.3, .cancel_after_rounds = 3};
    snprintf(s.path, sizeof s.path, "%s/ledger2.json", test_tmpdir());
    hunt_bisect_ops ops = ops_for(&s);
    T_EQ_INT(hunt_bisect_run(&lg, &CFG, &ops), ERR_CANCELLED);
    T_CHECK(!s.running); /* the target was stopped */
    hunt_ledger_deinit(&lg);
    hunt_ledger back;
    hunt_ledger_init(&back);
    T_OK(hunt_ledger_load(s.path, &back));
    hunt_ledger_entry *run = NULL;
    for (int i = 0; i < back.n_entries; i++)
        if (!strcmp(back.entries[i].verdict, "running"))
            run = &back.entries[i];
    T_CHECK(run != NULL);
    T_CHECK(run->next_index > 0 && run->sessions > 0);
    int64_t resumed_from = run->next_index;
    s.cancel_after_rounds = 0;
    T_OK(hunt_bisect_run(&back, &CFG, &ops));
    T_CHECKF(!strcmp(back.state, "culprit") && back.culprit == 1u << 1, "%s", back.conclusion);
    for (int i = 0; i < back.n_entries; i++)
        if (back.entries[i].next_index == resumed_from)
            test_fail(__FILE__, __LINE__, "the interrupted configuration was not continued");
    hunt_ledger_deinit(&back);
}

static void t_ledger_markdown(void) {
    hunt_ledger lg;
    setup(&lg, 3);
    synth s = {.kind = 0, .culprit = 2, .rate = 0.5};
    hunt_bisect_ops ops = ops_for(&s);
    T_OK(hunt_bisect_run(&lg, &CFG, &ops));
    strbuf md;
    strbuf_init(&md);
    hunt_ledger_md(&lg, &md);
    T_CHECK(strstr(md.data, "culprit: kv-fp8") == NULL); /* 3 toggles: the third is overlap */
    T_CHECKF(strstr(md.data, "- culprit: overlap-schedule") != NULL, "%s", md.data);
    T_CHECK(strstr(md.data, "- ruled out: ") != NULL);
    T_CHECK(strstr(md.data, "| baseline") != NULL);
    strbuf_deinit(&md);
    hunt_ledger_deinit(&lg);
}

int main(void) {
    test_run("hunt_bisect.single_culprit_among_8_within_budget", t_single_culprit);
    test_run("hunt_bisect.prior_puts_the_likely_toggle_first", t_prior_ordering);
    test_run("hunt_bisect.pair_needed_together_ddmin", t_pair_needs_ddmin);
    test_run("hunt_bisect.no_culprit_and_clean_baseline", t_no_culprit_and_clean_baseline);
    test_run("hunt_bisect.resume_after_budget", t_resume_after_budget);
    test_run("hunt_bisect.resume_after_interrupt", t_resume_after_interrupt);
    test_run("hunt_bisect.ledger_markdown", t_ledger_markdown);
    return test_summary();
}
