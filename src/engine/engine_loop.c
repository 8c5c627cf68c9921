/* SPDX-License-Identifier: MIT */
/*
 * engine_loop: see engine_loop.h.
 *
 * Inbox: a mutex-protected singly linked list of messages (submit, cancel) and a condition
 * variable the engine thread sleeps on when it has nothing to do. Each request handle has its own
 * mutex, condition variable and growable event array (at most max_tokens + 1 events, so bounded
 * by the request). The engine thread calls engine_step; the engine's callback copies each event
 * into the request's queue under the request's lock and signals it.
 *
 * Statistics are written by the engine thread into atomics after each step and read by anyone.
 *
 * Pausing (engine_loop_pause): the engine thread finishes the step it is in, then parks under the
 * loop's mutex and tells the pauser so, which is what makes a pause a synchronisation point: once
 * engine_loop_pause returns, no step runs until engine_loop_resume (or engine_loop_step grants
 * some). A parked loop still takes messages, so submitted requests join the engine's waiting
 * queue and cancels are recorded; what they change happens at the next step.
 *
 * Waiting for I/O: when a step could run nothing while requests are queued (the head waits for
 * its blocks from a KV tier, or for a transfer from another server), the thread pauses before
 * trying again, 100 us doubling to 2 ms. With the toggle kv-tier-wake the pause is a timed wait on
 * the loop's condition variable and the tiers' I/O thread ends it as soon as it has answered
 * lookups (engine_set_wake: it sets `kicked` under the loop's mutex and signals), so a restored
 * prefix is taken at once rather than at the next tick; without it the pause is a plain sleep.
 */
#include "engine/engine_loop.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct eloop_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eloop_event *ev;
    size_t n_ev, cap_ev, next;
    bool finished;     /* the finish event was pushed */
    bool consumed_end; /* the finish event was returned */
    _Atomic int refs;
    atomic_bool cancel_sent;
    uint64_t id;
    engine_loop *loop;
    engine_req req; /* prompt owned by the handle until the engine copied it */
    int32_t *prompt;
};

typedef struct eloop_msg {
    enum { ELOOP_SUBMIT, ELOOP_CANCEL, ELOOP_KV_UNREF } kind;
    eloop_req *q;
    int32_t block; /* ELOOP_KV_UNREF */
    struct eloop_msg *next;
} eloop_msg;

struct engine_loop {
    engine *e;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t park_cv; /* signalled when the thread parks or finishes a granted step */
    eloop_msg *head, *tail;
    bool stop;
    bool joined;       /* engine_loop_stop joined the thread: messages are dropped at once */
    bool pause;        /* asked to pause (engine_loop_pause) */
    bool parked;       /* the thread has seen the pause and takes no step */
    int64_t grant;     /* steps a paused loop may still take (engine_loop_step) */
    int64_t n_granted; /* steps taken on grant so far */
    bool stepping;     /* a granted step is running */
    bool kicked;       /* the KV tiers answered lookups since the thread last paused for them */
    bool wake;         /* flag kv-tier-wake: the idle pause waits on cv (else it sleeps) */
    uint64_t next_id;
    eloop_step_cb step_cb;
    void *step_ud;
    /* requests known to the engine thread, by id (for lookups on cancel) */
    _Atomic int64_t pending;
    atomic_bool st_paused;
    _Atomic int64_t st_steps;
    pthread_mutex_t st_mu; /* guards st */
    engine_stats st;       /* the engine's, copied after every step */
};

static void eloop_req_unref(eloop_req *q) {
    if (atomic_fetch_sub(&q->refs, 1) == 1) {
        grammar_state_destroy(q->req.constraint); /* never handed to the engine */
        free(q->ev);
        free(q->prompt);
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q);
    }
}

/* Appends an event (engine thread). */
static void eloop_push(eloop_req *q, const eloop_event *ev) {
    pthread_mutex_lock(&q->mu);
    if (q->n_ev == q->cap_ev) {
        size_t nc = q->cap_ev ? q->cap_ev * 2 : 16;
        eloop_event *n = realloc(q->ev, nc * sizeof *n);
        if (!n) {
            /* out of memory: drop tokens but never the finish event (kept in the last slot) */
            if (ev->finish != ENGINE_FINISH_NONE && q->n_ev > 0)
                q->ev[q->n_ev - 1] = *ev;
            if (ev->finish != ENGINE_FINISH_NONE)
                q->finished = true;
            pthread_cond_broadcast(&q->cv);
            pthread_mutex_unlock(&q->mu);
            return;
        }
        q->ev = n;
        q->cap_ev = nc;
    }
    q->ev[q->n_ev++] = *ev;
    if (ev->finish != ENGINE_FINISH_NONE)
        q->finished = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* The engine's callback (engine thread). */
static void eloop_on_event(void *ud, const engine_event *e) {
    eloop_req *q = ud;
    eloop_event ev;
    memset(&ev, 0, sizeof ev);
    ev.token = e->token;
    ev.index = e->index;
    ev.finish = e->finish;
    ev.fault_step_tag = e->fault_step_tag;
    ev.n_cached = e->n_cached;
    if (e->sr && e->token >= 0) {
        ev.has_logprobs = true;
        ev.logprob = e->sr->logprob;
        ev.n_top = e->sr->n_top;
        memcpy(ev.top, e->sr->top, (size_t)e->sr->n_top * sizeof ev.top[0]);
    }
    eloop_push(q, &ev);
    if (e->finish != ENGINE_FINISH_NONE) {
        atomic_fetch_sub(&q->loop->pending, 1);
        eloop_req_unref(q); /* the engine's reference */
    }
}

static void eloop_update_stats(engine_loop *l) {
    engine_stats st;
    engine_stats_get(l->e, &st);
    pthread_mutex_lock(&l->st_mu);
    l->st = st;
    pthread_mutex_unlock(&l->st_mu);
}

static void eloop_handle(engine_loop *l, eloop_msg *m) {
    eloop_req *q = m->q;
    if (m->kind == ELOOP_KV_UNREF) {
        engine_kv_unref(l->e, m->block);
    } else if (m->kind == ELOOP_SUBMIT) {
        q->req.id = q->id;
        q->req.cb = eloop_on_event;
        q->req.ud = q;
        int rc = engine_submit(l->e, &q->req);
        free(q->prompt); /* the engine copied it */
        q->prompt = NULL;
        q->req.prompt = NULL;
        q->req.constraint = NULL; /* the engine owns it now, whatever rc says */
        if (rc) {
            eloop_event ev;
            memset(&ev, 0, sizeof ev);
            ev.token = -1;
            ev.finish = ENGINE_FINISH_CANCELLED;
            ev.error = rc;
            eloop_push(q, &ev);
            atomic_fetch_sub(&l->pending, 1);
            eloop_req_unref(q);
        } else if (atomic_load(&q->cancel_sent)) {
            engine_cancel(l->e, q->id);
        }
    } else {
        engine_cancel(l->e, q->id); /* ERR_NOTFOUND if it already finished: fine */
        eloop_req_unref(q);         /* the message's reference */
    }
    free(m);
}

/* Under l->mu: may the thread take a step now? (Otherwise it waits, or handles messages.) */
static bool eloop_may_step(engine_loop *l) {
    return (!l->pause || l->grant > 0) && engine_busy(l->e);
}

enum { ELOOP_IDLE_MIN_NS = 100 * 1000, ELOOP_IDLE_MAX_NS = 2000 * 1000 };

/* engine_set_wake's function (the tiers' I/O thread, under the tiers' lock; it takes the loop's
 * mutex, and the engine thread never calls into the tiers holding it). */
static void eloop_wake(void *ud) {
    engine_loop *l = ud;
    pthread_mutex_lock(&l->mu);
    l->kicked = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* The pause after a step that could run nothing: idle_ns, cut short (kv-tier-wake) by the tiers'
 * answer, a message, a pause request or stop. */
static void eloop_idle(engine_loop *l, long idle_ns) {
    if (!l->wake) {
        struct timespec ts = {0, idle_ns};
        nanosleep(&ts, NULL);
        return;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += idle_ns;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->kicked && !l->head && !l->stop && !l->pause)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &dl) == ETIMEDOUT)
            break;
    l->kicked = false;
    pthread_mutex_unlock(&l->mu);
}

static void *eloop_main(void *arg) {
    engine_loop *l = arg;
    long idle_ns = ELOOP_IDLE_MIN_NS;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        for (;;) {
            if (l->pause && !l->parked) {
                l->parked = true;
                atomic_store(&l->st_paused, true);
                pthread_cond_broadcast(&l->park_cv);
            }
            if (l->head || l->stop || eloop_may_step(l))
                break;
            if (l->pause && l->grant > 0) { /* idle: the grant lapses, the stepper returns */
                l->grant = 0;
                pthread_cond_broadcast(&l->park_cv);
            }
            pthread_cond_wait(&l->cv, &l->mu);
        }
        eloop_msg *m = l->head;
        l->head = l->tail = NULL;
        bool stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        while (m) {
            eloop_msg *n = m->next;
            eloop_handle(l, m);
            m = n;
        }
        if (stop)
            break;
        pthread_mutex_lock(&l->mu);
        bool step = eloop_may_step(l);
        bool granted = step && l->pause;
        if (granted) {
            l->grant--;
            l->stepping = true;
        }
        pthread_mutex_unlock(&l->mu);
        if (step) {
            engine_stats a, b;
            engine_stats_get(l->e, &a);
            int64_t t0 = clock_now_ns();
            int rc = engine_step(l->e);
            double dt = (double)(clock_now_ns() - t0) * 1e-9;
            if (rc)
                log_error("engine step failed: %s", err_detail());
            atomic_fetch_add(&l->st_steps, 1);
            engine_stats_get(l->e, &b);
            if (l->step_cb)
                l->step_cb(l->step_ud, b.last_step_seqs,
                           (b.generated - a.generated) + (b.prompt_computed - a.prompt_computed),
                           dt);
            if (b.last_step_seqs == 0 && engine_busy(l->e)) {
                /* nothing could run: the queue's head waits for a KV tier's I/O thread or for a
                 * transfer from another server; the pause doubles from 100 us up to 2 ms while
                 * nothing runs (a transfer can take seconds: no busy loop beside it), and the
                 * tiers end it when they answer (kv-tier-wake) */
                eloop_idle(l, idle_ns);
                idle_ns = idle_ns * 2 > ELOOP_IDLE_MAX_NS ? ELOOP_IDLE_MAX_NS : idle_ns * 2;
            } else {
                idle_ns = ELOOP_IDLE_MIN_NS;
            }
        }
        eloop_update_stats(l);
        if (granted) {
            pthread_mutex_lock(&l->mu);
            l->n_granted++;
            l->stepping = false;
            pthread_cond_broadcast(&l->park_cv);
            pthread_mutex_unlock(&l->mu);
        }
    }
    /* cancel everything still known to the engine and let it report */
    engine_cancel_all(l->e);
    while (engine_busy(l->e))
        engine_step(l->e);
    eloop_update_stats(l);
    pthread_mutex_lock(&l->mu);
    pthread_cond_broadcast(&l->park_cv); /* a pauser or stepper waiting on a stopped loop */
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int engine_loop_create(engine *e, eloop_step_cb step_cb, void *step_ud, engine_loop **out) {
    *out = NULL;
    engine_loop *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(ERR_NOMEM, "engine loop: out of memory");
    l->e = e;
    l->step_cb = step_cb;
    l->step_ud = step_ud;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->park_cv, NULL);
    pthread_mutex_init(&l->st_mu, NULL);
    eloop_update_stats(l);
    l->wake = flags_int(FLAG_KV_TIER_WAKE) != 0;
    if (l->wake)
        engine_set_wake(e, eloop_wake, l);
    if (pthread_create(&l->thread, NULL, eloop_main, l) != 0) {
        engine_set_wake(e, NULL, NULL);
        pthread_mutex_destroy(&l->st_mu);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        pthread_cond_destroy(&l->park_cv);
        free(l);
        return err_set(ERR_INTERNAL, "engine loop: cannot start thread");
    }
    *out = l;
    return 0;
}

/* Finishes messages the thread will never see: a submission is cancelled (its handler gets the
 * CANCELLED finish), a cancel just drops its reference. */
static void eloop_drop_msgs(engine_loop *l, eloop_msg *m) {
    while (m) {
        eloop_msg *n = m->next;
        if (m->kind == ELOOP_KV_UNREF) { /* the engine is stopped: its pool goes with it */
            free(m);
            m = n;
            continue;
        }
        if (m->kind == ELOOP_SUBMIT) {
            /* the engine never saw it: its disagg hooks end here, as engine_submit's would */
            if (m->q->req.kv_in.poll)
                m->q->req.kv_in.done(m->q->req.kv_in.ctx, 0, 0);
            if (m->q->req.kv_out.block && m->q->req.kv_out.end)
                m->q->req.kv_out.end(m->q->req.kv_out.ctx, false);
            eloop_event ev;
            memset(&ev, 0, sizeof ev);
            ev.token = -1;
            ev.finish = ENGINE_FINISH_CANCELLED;
            eloop_push(m->q, &ev);
            atomic_fetch_sub(&l->pending, 1);
        }
        eloop_req_unref(m->q);
        free(m);
        m = n;
    }
}

void engine_loop_stop(engine_loop *l) {
    pthread_mutex_lock(&l->mu);
    if (l->joined) {
        pthread_mutex_unlock(&l->mu);
        return;
    }
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    if (l->wake)
        engine_set_wake(l->e, NULL, NULL); /* the tiers outlive the loop: no call into it after */
    pthread_mutex_lock(&l->mu);
    l->joined = true;
    eloop_msg *m = l->head; /* messages that arrived after the thread's last look */
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->mu);
    eloop_drop_msgs(l, m);
}

void engine_loop_destroy(engine_loop *l) {
    if (!l)
        return;
    engine_loop_stop(l);
    pthread_mutex_destroy(&l->st_mu);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->park_cv);
    free(l);
}

void engine_loop_pause(engine_loop *l) {
    pthread_mutex_lock(&l->mu);
    l->pause = true;
    pthread_cond_signal(&l->cv);
    while (!l->parked && !l->stop)
        pthread_cond_wait(&l->park_cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

void engine_loop_resume(engine_loop *l) {
    pthread_mutex_lock(&l->mu);
    l->pause = false;
    l->parked = false;
    l->grant = 0;
    atomic_store(&l->st_paused, false);
    pthread_cond_signal(&l->cv);
    pthread_cond_broadcast(&l->park_cv); /* a stepper waiting on the paused loop */
    pthread_mutex_unlock(&l->mu);
}

int engine_loop_step(engine_loop *l, int64_t n_steps, int64_t *n_taken) {
    *n_taken = 0;
    pthread_mutex_lock(&l->mu);
    if (!l->pause) {
        pthread_mutex_unlock(&l->mu);
        return err_set(ERR_STATE, "engine loop: not paused (pause it before stepping it)");
    }
    int64_t start = l->n_granted;
    l->grant += n_steps;
    pthread_cond_signal(&l->cv);
    while ((l->grant > 0 || l->stepping) && l->pause && !l->stop)
        pthread_cond_wait(&l->park_cv, &l->mu);
    l->grant = 0;
    *n_taken = l->n_granted - start;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

static void eloop_post(engine_loop *l, eloop_msg *m) {
    pthread_mutex_lock(&l->mu);
    if (l->joined) { /* stopped: nobody will take it */
        pthread_mutex_unlock(&l->mu);
        eloop_drop_msgs(l, m);
        return;
    }
    if (l->tail)
        l->tail->next = m;
    else
        l->head = m;
    l->tail = m;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int engine_loop_kv_unref(engine_loop *l, int32_t id) {
    eloop_msg *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(ERR_NOMEM, "engine loop: no memory to give back KV block %d", id);
    m->kind = ELOOP_KV_UNREF;
    m->block = id;
    eloop_post(l, m);
    return 0;
}

int engine_loop_submit(engine_loop *l, const engine_req *r, eloop_req **out) {
    *out = NULL;
    eloop_req *q = calloc(1, sizeof *q);
    eloop_msg *m = calloc(1, sizeof *m);
    int32_t *prompt = r->n_prompt > 0 ? malloc((size_t)r->n_prompt * sizeof *prompt) : NULL;
    if (!q || !m || (r->n_prompt > 0 && !prompt)) {
        free(q);
        free(m);
        free(prompt);
        grammar_state_destroy(r->constraint);
        return err_set(ERR_NOMEM, "engine loop: out of memory");
    }
    if (r->n_prompt > 0)
        memcpy(prompt, r->prompt, (size_t)r->n_prompt * sizeof *prompt);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    atomic_init(&q->refs, 2); /* handler + engine */
    atomic_init(&q->cancel_sent, false);
    q->loop = l;
    q->req = *r;
    q->req.prompt = prompt;
    q->prompt = prompt;
    pthread_mutex_lock(&l->mu);
    q->id = ++l->next_id;
    pthread_mutex_unlock(&l->mu);
    atomic_fetch_add(&l->pending, 1);
    m->kind = ELOOP_SUBMIT;
    m->q = q;
    eloop_post(l, m);
    *out = q;
    return 0;
}

int eloop_req_next(eloop_req *q, eloop_event *ev, int timeout_ms) {
    pthread_mutex_lock(&q->mu);
    if (q->consumed_end) {
        pthread_mutex_unlock(&q->mu);
        return ERR_STATE;
    }
    if (q->next == q->n_ev && timeout_ms != 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        if (timeout_ms > 0) {
            dl.tv_sec += timeout_ms / 1000;
            dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000L;
            }
        }
        while (q->next == q->n_ev) {
            int w = timeout_ms < 0 ? pthread_cond_wait(&q->cv, &q->mu)
                                   : pthread_cond_timedwait(&q->cv, &q->mu, &dl);
            if (w == ETIMEDOUT)
                break;
        }
    }
    if (q->next == q->n_ev) {
        pthread_mutex_unlock(&q->mu);
        return ERR_TIMEOUT;
    }
    *ev = q->ev[q->next++];
    if (ev->finish != ENGINE_FINISH_NONE)
        q->consumed_end = true;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void eloop_req_cancel(eloop_req *q) {
    if (atomic_exchange(&q->cancel_sent, true))
        return;
    eloop_msg *m = calloc(1, sizeof *m);
    if (!m)
        return;                    /* the request runs to its end; its output is discarded */
    atomic_fetch_add(&q->refs, 1); /* the message's reference */
    m->kind = ELOOP_CANCEL;
    m->q = q;
    eloop_post(q->loop, m);
}

void eloop_req_release(eloop_req *q) {
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    bool finished = q->finished;
    pthread_mutex_unlock(&q->mu);
    if (!finished)
        eloop_req_cancel(q);
    eloop_req_unref(q);
}

void engine_loop_stats(engine_loop *l, eloop_stats *out) {
    pthread_mutex_lock(&l->st_mu);
    out->e = l->st;
    pthread_mutex_unlock(&l->st_mu);
    out->steps = atomic_load(&l->st_steps);
    out->paused = atomic_load(&l->st_paused);
}

int64_t engine_loop_pending(engine_loop *l) {
    return atomic_load(&l->pending);
}
