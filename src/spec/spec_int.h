/* SPDX-License-Identifier: MIT */
/*
 * spec_int: what a drafter file provides (one spec_drafter each) and the table of spec.c lists.
 * The state pointers are the drafter's own: `impl` from create, `st` from seq_create; spec.c
 * passes them through unchanged (spec_req.seq carries st).
 */
#ifndef VERITY_SPEC_SPEC_INT_H
#define VERITY_SPEC_SPEC_INT_H

#include "spec/spec.h"

typedef struct spec_drafter {
    const char *name;
    int (*create)(const spec_opts *o, void **impl);
    void (*destroy)(void *impl);
    int (*seq_create)(void *impl, int32_t cap, void **st);
    void (*seq_destroy)(void *impl, void *st);
    void (*seq_park)(void *impl, void *st); /* NULL: nothing to drop */
    int (*draft)(void *impl, spec_req *reqs, int32_t n);
} spec_drafter;

extern const spec_drafter spec_ngram_drafter; /* spec_ngram.c */
extern const spec_drafter spec_draft_drafter; /* spec_draft.c */
extern const spec_drafter spec_mtp_drafter;   /* spec_mtp.c */

#endif
