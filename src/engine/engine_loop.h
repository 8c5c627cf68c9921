/* SPDX-License-Identifier: MIT */
/*
 * engine_loop: runs an engine on its own thread and connects it to request handlers on other
 * threads (design.md: "one engine thread owns the scheduler and the KV pool"). Handlers submit
 * requests into an inbox and receive each request's events (tokens with logprobs, then one
 * finish) on the request's own queue; nothing the engine owns is touched by another thread.
 *
 * Request handles are reference counted between the handler and the engine thread: the handler
 * drops its reference with eloop_req_release (after or instead of reading the finish event); the
 * engine drops its own after pushing the finish event. Cancelling is asynchronous: the engine
 * frees the request's KV at its next step and then pushes a CANCELLED finish.
 *
 * Threading: engine_loop_submit / eloop_req_* may be called from any thread; the engine and the
 * forward pass's compute threads are driven only by the loop's thread.
 */
#ifndef VERITY_ENGINE_ENGINE_LOOP_H
#define VERITY_ENGINE_ENGINE_LOOP_H

#include "engine/engine.h"

#include <stdint.h>

typedef struct engine_loop engine_loop;
typedef struct eloop_req eloop_req;

/* What a handler receives: a copy of engine_event that outlives the step. */
typedef struct eloop_event {
    int32_t token;          /* -1 on a finish-only event */
    int64_t index;          /* output position */
    engine_finish finish;   /* ENGINE_FINISH_NONE until the last event */
    int error;              /* nonzero on a finish caused by a submit error (err code) */
    int32_t fault_step_tag; /* fault build only (engine_event.fault_step_tag) */
    int32_t n_cached;       /* prompt positions taken from the cache (engine_event.n_cached) */
    bool has_logprobs;
    float logprob;
    int32_t n_top;
    sample_logprob top[SAMPLE_MAX_LOGPROBS];
} eloop_event;

/* A snapshot of the engine's state for metrics, copied once per step. */
typedef struct eloop_stats {
    engine_stats e; /* the engine's (engine.h) */
    int64_t steps;
    bool paused; /* engine_loop_pause took effect and no resume followed */
} eloop_stats;

/* Called by the engine thread after every step with the number of sequences in it (for the batch
 * size histogram); may be NULL. */
typedef void (*eloop_step_cb)(void *ud, int64_t n_seqs, int64_t n_tokens, double seconds);

/* Starts the loop's thread over engine e (which the loop then owns: do not touch it directly
 * until engine_loop_destroy). Returns 0, ERR_NOMEM, ERR_INTERNAL (thread creation). */
int engine_loop_create(engine *e, eloop_step_cb step_cb, void *step_ud, engine_loop **out);

/* Cancels every request (their handlers receive CANCELLED), stops and joins the thread; a
 * request submitted afterwards finishes CANCELLED at once. The loop stays valid for
 * engine_loop_stats, engine_loop_pending and the request functions until engine_loop_destroy, so
 * a server can stop the engine, then its worker threads (which may still read the stats or
 * release requests), then free the loop. Idempotent. The engine is not destroyed. */
void engine_loop_stop(engine_loop *l);

/* engine_loop_stop, then frees the loop. NULL is a no-op. */
void engine_loop_destroy(engine_loop *l);

/* Queues a request (r->cb, r->ud and r->id are ignored: the loop sets them). On success *out is
 * the handle (one reference, the caller's). Validation errors of engine_submit arrive as a finish
 * event with `error` set, so the caller learns of them the same way as of everything else.
 * r->constraint, if any, passes to the loop (and then the engine) whatever this returns.
 * Returns 0 or ERR_NOMEM. */
int engine_loop_submit(engine_loop *l, const engine_req *r, eloop_req **out);

/* Gives back, from any thread, a KV block reference that a request's kv_out hook handed over
 * (engine.h): the engine thread drops it (engine_kv_unref) before its next step. After
 * engine_loop_stop it is a no-op (the pool goes with the engine). Returns 0 or ERR_NOMEM (the
 * reference is then kept: the block stays used, never reused while read). */
int engine_loop_kv_unref(engine_loop *l, int32_t id);

/* Waits up to timeout_ms (0: do not wait, -1: forever) for the request's next event. Returns 0
 * and *ev, or ERR_TIMEOUT. After the finish event has been returned, further calls return
 * ERR_STATE. */
int eloop_req_next(eloop_req *q, eloop_event *ev, int timeout_ms);

/* Asks the engine to stop the request and free its KV (idempotent). */
void eloop_req_cancel(eloop_req *q);

/* Drops the caller's reference. Cancels the request first if it has not finished. */
void eloop_req_release(eloop_req *q);

/* Holds the engine between steps: waits for the step in progress (if any) to end, and returns
 * once the engine thread has parked. Until engine_loop_resume no step runs, except those granted
 * by engine_loop_step; submissions and cancels are still taken in (submitted requests wait,
 * cancelled ones are freed at the next step). Pausing a paused loop is a no-op. For tests that
 * must create a state (a full queue, a batch of N, a request holding KV) without racing the
 * engine, and for maintenance. */
void engine_loop_pause(engine_loop *l);

/* Lets a paused loop step again (a no-op when not paused). */
void engine_loop_resume(engine_loop *l);

/* On a paused loop: runs up to n_steps steps, fewer if the engine runs out of work first, and
 * returns when they are done (the statistics and the step hook already reflect them); the loop
 * stays paused. *n_taken is the number of steps run. Returns 0, or ERR_STATE when the loop is not
 * paused. */
int engine_loop_step(engine_loop *l, int64_t n_steps, int64_t *n_taken);

/* Current state (lock-free snapshot, possibly one step old). */
void engine_loop_stats(engine_loop *l, eloop_stats *out);

/* Requests submitted but not yet finished (waiting + running + in the inbox). */
int64_t engine_loop_pending(engine_loop *l);

#endif
