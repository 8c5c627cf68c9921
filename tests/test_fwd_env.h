/* SPDX-License-Identifier: MIT */
/*
 * test_fwd_env: a model, its KV pool and a forward context opened together for the forward-pass
 * tests (KV blocks of 16 positions, attention chunks of 64), and closed together. Header-only
 * (static): test_arch and test_model use it.
 */
#ifndef VERITY_TESTS_TEST_FWD_ENV_H
#define VERITY_TESTS_TEST_FWD_ENV_H

#include "base/err.h"
#include "kernels/kn.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "test.h"

typedef struct run_env {
    model *m;
    kv_pool *kv;
    fwd_ctx *fc;
} run_env;

/* Loads path for isa, a pool of n_blocks blocks (F16 or F32 KV) and a context of max_tokens
 * tokens (as many outputs) on `threads` threads; fails the case on any error. */
static inline void env_open(run_env *e, const char *path, kn_isa isa, bool kv_f16, int threads,
                            int64_t max_tokens, int64_t n_blocks) {
    T_OK(model_load(path, isa, &e->m));
    kv_pool_opts ko;
    model_kv_pool_opts(e->m, kv_f16, 16, n_blocks, &ko);
    T_OK(kv_pool_create(&ko, &e->kv));
    T_OK(fwd_ctx_create(e->m, e->kv, max_tokens, max_tokens, threads, 64, &e->fc));
}

/* Destroys what env_open made, the context first. */
static inline void env_close(run_env *e) {
    fwd_ctx_destroy(e->fc);
    kv_pool_destroy(e->kv);
    model_destroy(e->m);
}

#endif
