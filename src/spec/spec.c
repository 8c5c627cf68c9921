/* SPDX-License-Identifier: MIT */
/*
 * spec: see spec.h. The table of drafters, and the calls that dispatch through it. A new drafter
 * is one file defining a spec_drafter and one row here (and a choice of the spec toggle).
 */
#include "spec/spec.h"
#include "base/err.h"
#include "spec/spec_int.h"

#include <stdlib.h>
#include <string.h>

static const spec_drafter *const spec_table[] = {
    &spec_ngram_drafter,
    &spec_draft_drafter,
    &spec_mtp_drafter,
};

#define SPEC_N (sizeof spec_table / sizeof *spec_table)

struct spec_ctx {
    const spec_drafter *d;
    void *impl;
};

const char *spec_kinds(void) {
    return "ngram|draft|mtp";
}

int spec_create(const spec_opts *o, spec_ctx **out) {
    *out = NULL;
    const spec_drafter *d = NULL;
    for (size_t i = 0; i < SPEC_N; i++)
        if (o->kind && !strcmp(o->kind, spec_table[i]->name))
            d = spec_table[i];
    if (!d)
        return err_set(ERR_INVAL, "spec: unknown drafter '%s' (choices: %s)",
                       o->kind ? o->kind : "", spec_kinds());
    if (o->max_k < 1 || o->max_k > SPEC_MAX_K || o->max_seqs < 1 || o->ngram_min < 1)
        return err_set(ERR_INVAL, "spec: invalid options (k %d of at most %d, sequences %d)",
                       o->max_k, SPEC_MAX_K, o->max_seqs);
    spec_ctx *sp = calloc(1, sizeof *sp);
    if (!sp)
        return err_set(ERR_NOMEM, "spec: out of memory");
    sp->d = d;
    int rc = d->create(o, &sp->impl);
    if (rc) {
        free(sp);
        return rc;
    }
    *out = sp;
    return 0;
}

void spec_destroy(spec_ctx *sp) {
    if (!sp)
        return;
    sp->d->destroy(sp->impl);
    free(sp);
}

const char *spec_name(const spec_ctx *sp) {
    return sp->d->name;
}

int spec_seq_create(spec_ctx *sp, int32_t cap, spec_seq **out) {
    void *st = NULL;
    int rc = sp->d->seq_create(sp->impl, cap, &st);
    *out = rc ? NULL : (spec_seq *)st;
    return rc;
}

void spec_seq_destroy(spec_ctx *sp, spec_seq *q) {
    if (sp && q)
        sp->d->seq_destroy(sp->impl, q);
}

void spec_seq_park(spec_ctx *sp, spec_seq *q) {
    if (sp && q && sp->d->seq_park)
        sp->d->seq_park(sp->impl, q);
}

int spec_draft(spec_ctx *sp, spec_req *reqs, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        reqs[i].n_out = 0;
    return n > 0 ? sp->d->draft(sp->impl, reqs, n) : 0;
}
