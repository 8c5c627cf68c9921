/* SPDX-License-Identifier: MIT */
/*
 * test_engine_loop: the engine thread and its pause/step/resume hold (engine_loop.h), on a
 * synthetic tiny model. A held loop takes submissions but runs no step; engine_loop_step runs
 * exactly the steps granted (fewer when the work runs out) and returns after them; resume lets
 * everything finish. And P1 at this level: requests held until all of them wait, then released
 * into one batch, give the same tokens as each request run alone. Runs under TSan too.
 */
#include "test.h"

#include "base/err.h"
#include "engine/engine_loop.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_REQ 12
#define MAX_TOK 24

typedef struct lp_env {
    model *m;
    tokenizer *tok;
    engine *e;
    engine_loop *loop;
} lp_env;

static void lp_open(lp_env *env, int max_batch, int chunk, int threads) {
    char path[512];
    snprintf(path, sizeof path, "%s/loop-tiny.gguf", test_tmpdir());
    synth_opts so = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 23};
    T_OK(synth_write(&so, path));
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    T_OK(model_load(path, isa, &env->m));
    T_OK(tokenizer_load(model_get_gguf(env->m), &env->tok));
    engine_opts o = {.max_batch = max_batch,
                     .chunk = chunk,
                     .kv_blocks = 512,
                     .block_size = 16,
                     .threads = threads,
                     .attn_chunk = 64};
    T_OK(engine_create(env->m, env->tok, &o, &env->e));
    T_OK(engine_loop_create(env->e, NULL, NULL, &env->loop));
}

static void lp_close(lp_env *env) {
    engine_loop_destroy(env->loop); /* the engine outlives its loop */
    engine_destroy(env->e);
    tokenizer_destroy(env->tok);
    model_destroy(env->m);
}

/* Request i: a prompt of 3 + 5 * i tokens (so several exceed a chunk of 16), seeded sampling. */
static eloop_req *lp_submit(lp_env *env, int i) {
    int32_t prompt[64];
    int n = 3 + 5 * i;
    for (int k = 0; k < n; k++)
        prompt[k] = 1 + (int32_t)((k * 7 + i * 13) % 200);
    engine_req r;
    memset(&r, 0, sizeof r);
    r.prompt = prompt;
    r.n_prompt = n;
    r.sp = sample_params_default();
    r.sp.temperature = i % 3 ? 0.9 : 0.0;
    r.sp.seed = (uint64_t)i + 1;
    r.max_tokens = MAX_TOK;
    r.ignore_eog = true;
    eloop_req *q;
    T_OK(engine_loop_submit(env->loop, &r, &q));
    return q;
}

/* Reads request q to its end; returns the number of tokens, which go to toks. */
static int lp_drain(eloop_req *q, int32_t *toks) {
    int n = 0;
    eloop_event ev;
    for (;;) {
        T_OK(eloop_req_next(q, &ev, -1));
        if (ev.token >= 0 && n < MAX_TOK)
            toks[n++] = ev.token;
        if (ev.finish != ENGINE_FINISH_NONE)
            break;
    }
    T_CHECKF(ev.finish == ENGINE_FINISH_LENGTH && ev.error == 0, "finish %d, error %d",
             (int)ev.finish, ev.error);
    eloop_req_release(q);
    return n;
}

/* Waits (bounded) for the engine thread to take in `want` waiting requests. */
static void lp_wait_waiting(engine_loop *l, int64_t want) {
    eloop_stats st;
    for (int k = 0; k < 100000; k++) {
        engine_loop_stats(l, &st);
        if (st.e.waiting == want)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    test_fail(__FILE__, __LINE__, "%lld requests waiting, %lld expected", (long long)st.e.waiting,
              (long long)want);
}

static void t_pause_step_resume(void) {
    lp_env env;
    lp_open(&env, 8, 16, 1);
    int64_t taken = -1;
    T_CHECK(engine_loop_step(env.loop, 1, &taken) == ERR_STATE); /* not paused */
    engine_loop_pause(env.loop);
    engine_loop_pause(env.loop); /* a no-op */
    eloop_req *q[4];
    for (int i = 0; i < 4; i++)
        q[i] = lp_submit(&env, i);
    lp_wait_waiting(env.loop, 4);
    eloop_stats st;
    engine_loop_stats(env.loop, &st);
    T_CHECK(st.paused && st.steps == 0 && st.e.running == 0);
    eloop_event ev;
    T_CHECK(eloop_req_next(q[0], &ev, 0) == ERR_TIMEOUT); /* nothing ran */
    T_OK(engine_loop_step(env.loop, 1, &taken));
    engine_loop_stats(env.loop, &st);
    T_CHECKF(taken == 1 && st.steps == 1 && st.e.running == 4 && st.e.waiting == 0,
             "taken %lld, steps %lld, running %lld, waiting %lld", (long long)taken,
             (long long)st.steps, (long long)st.e.running, (long long)st.e.waiting);
    T_OK(engine_loop_step(env.loop, 3, &taken));
    engine_loop_stats(env.loop, &st);
    T_CHECKF(taken == 3 && st.steps == 4 && st.paused, "taken %lld, steps %lld", (long long)taken,
             (long long)st.steps);
    /* more steps than there is work: the grant stops with the work */
    T_OK(engine_loop_step(env.loop, 1000, &taken));
    engine_loop_stats(env.loop, &st);
    T_CHECKF(taken < 1000 && st.e.running == 0 && st.e.waiting == 0, "taken %lld, running %lld",
             (long long)taken, (long long)st.e.running);
    int32_t toks[MAX_TOK];
    for (int i = 0; i < 4; i++)
        T_EQ_INT(lp_drain(q[i], toks), MAX_TOK);
    T_OK(engine_loop_step(env.loop, 5, &taken)); /* idle: returns at once */
    T_EQ_INT(taken, 0);
    engine_loop_resume(env.loop);
    engine_loop_stats(env.loop, &st);
    T_CHECK(!st.paused);
    T_EQ_INT(lp_drain(lp_submit(&env, 5), toks), MAX_TOK); /* runs unpaused */
    engine_loop_pause(env.loop);
    eloop_req *left = lp_submit(&env, 6); /* stopped while held: cancelled, no hang */
    engine_loop_stop(env.loop);
    T_OK(eloop_req_next(left, &ev, -1));
    T_CHECK(ev.finish == ENGINE_FINISH_CANCELLED);
    eloop_req_release(left);
    /* a stopped loop still answers: stats stay readable, a late submission is cancelled at once */
    engine_loop_stats(env.loop, &st);
    T_EQ_INT(engine_loop_pending(env.loop), 0);
    eloop_req *late = lp_submit(&env, 7);
    T_OK(eloop_req_next(late, &ev, -1));
    T_CHECK(ev.finish == ENGINE_FINISH_CANCELLED && ev.token < 0);
    eloop_req_release(late);
    T_EQ_INT(engine_loop_pending(env.loop), 0);
    lp_close(&env);
}

/* P1: each request alone (batch of one) vs all held and released together into batches, with
 * chunked prefill and 2 threads. */
static void t_held_batch_equals_alone(void) {
    static int32_t gold[N_REQ][MAX_TOK], out[N_REQ][MAX_TOK];
    lp_env env;
    lp_open(&env, 1, 512, 1);
    for (int i = 0; i < N_REQ; i++)
        T_EQ_INT(lp_drain(lp_submit(&env, i), gold[i]), MAX_TOK);
    lp_close(&env);

    lp_open(&env, N_REQ, 16, 2);
    engine_loop_pause(env.loop);
    eloop_req *q[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        q[i] = lp_submit(&env, i);
    lp_wait_waiting(env.loop, N_REQ);
    int64_t taken;
    T_OK(engine_loop_step(env.loop, 1, &taken));
    eloop_stats st;
    engine_loop_stats(env.loop, &st);
    T_CHECKF(st.e.running == N_REQ, "%lld of %d requests in the first step", (long long)st.e.running,
             N_REQ);
    engine_loop_resume(env.loop);
    for (int i = 0; i < N_REQ; i++)
        T_EQ_INT(lp_drain(q[i], out[i]), MAX_TOK);
    lp_close(&env);
    for (int i = 0; i < N_REQ; i++)
        T_CHECKF(!memcmp(gold[i], out[i], sizeof gold[i]), "request %d differs in a batch", i);
}

int main(void) {
    test_run("engine_loop.pause_step_resume", t_pause_step_resume);
    test_run("engine_loop.held_batch_equals_alone", t_held_batch_equals_alone);
    return test_summary();
}
