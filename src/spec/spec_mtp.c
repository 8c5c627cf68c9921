/* SPDX-License-Identifier: MIT */
/*
 * spec_mtp: drafting with a model's own multi-token-prediction layers (DeepSeek's "nextn"
 * layers, counted by the GGUF key <arch>.nextn_predict_layers). Not built yet: creation refuses,
 * with a message that says whether the model has such layers at all, so `--spec mtp` fails at
 * start-up instead of serving without what was asked for.
 */
#include "base/err.h"
#include "gguf/gguf.h"
#include "spec/spec_int.h"

#include <stdio.h>

static int mtp_create(const spec_opts *o, void **impl) {
    *impl = NULL;
    const gguf *g = model_get_gguf(o->target);
    gguf_str arch = {0};
    char key[160];
    uint32_t n = 0;
    if (gguf_get_str(g, "general.architecture", &arch) == 0 && arch.len < 100)
        snprintf(key, sizeof key, "%.*s.nextn_predict_layers", (int)arch.len, arch.s);
    else
        snprintf(key, sizeof key, "nextn_predict_layers");
    if (gguf_get_u32(g, key, &n) != 0 || n == 0)
        return err_set(ERR_UNSUPPORTED,
                       "spec mtp: the model has no multi-token-prediction layers (%s is %s); use "
                       "--spec ngram or --spec draft",
                       key, n == 0 && gguf_find_key(g, key) >= 0 ? "0" : "absent");
    return err_set(ERR_UNSUPPORTED,
                   "spec mtp: the model has %u multi-token-prediction layer(s) (%s), but drafting "
                   "with them is not built yet; use --spec ngram or --spec draft",
                   n, key);
}

static void mtp_destroy(void *impl) {
    (void)impl;
}

static int mtp_seq_create(void *impl, int32_t cap, void **st) {
    *st = NULL;
    return err_set(ERR_UNSUPPORTED, "spec mtp: not built");
}

static void mtp_seq_destroy(void *impl, void *st) {
    (void)st;
}

static int mtp_draft(void *impl, spec_req *reqs, int32_t n) {
    return 0;
}

const spec_drafter spec_mtp_drafter = {
    .name = "mtp",
    .create = mtp_create,
    .destroy = mtp_destroy,
    .seq_create = mtp_seq_create,
    .seq_destroy = mtp_seq_destroy,
    .seq_park = NULL,
    .draft = mtp_draft,
};
