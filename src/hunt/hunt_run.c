/* SPDX-License-Identifier: MIT */
/*
 * hunt_run: the session driver. See hunt_run.h for the phases.
 *
 * Each session in flight is a small state machine (hunt_sess) stepped from the client's
 * completion callbacks: build the next request body from the history, look it up in the
 * reference cache, submit it or use the cached reply, judge, append to the history, repeat. A
 * phase (hunt_phase) keeps `conc` counted sessions in flight and tops up with fillers. Sessions
 * that finish inside a callback start their successors from there too (hunt_phase_fill), so the
 * concurrency does not sag between event-loop turns; a guard keeps that from recursing.
 *
 * Ownership: a test session's state (history, replies, evaluations) is retained as rec->priv
 * until the resolve phase has judged its pending turns; hunt_sess_finalize then renders the
 * evidence, sets the verdict and frees it. The reference cache's replies live in one arena for
 * the life of the run.
 */
#include "hunt/hunt_run.h"
#include "hunt/hunt_calib.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "hunt/hunt_client.h"
#include "hunt/hunt_stats.h"
#include "hunt/hunt_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { S_WALK, S_TEST, S_FILL, S_RESOLVE };

typedef struct hunt_phase hunt_phase;

typedef struct hunt_sess hunt_sess;
struct hunt_sess {
    hunt_run *r;
    hunt_phase *ph;
    hunt_session_rec *rec; /* NULL for walks and fillers */
    int mode;
    int64_t index;
    hunt_history *h;
    arena *a;            /* test replies (kept until finalize) */
    arena *ra;           /* scratch for one reply */
    hunt_reply *replies; /* [turns] */
    hunt_eval *evals;    /* [turns] */
    int *msgs_at;        /* [turns] messages in the request of each turn */
    uint64_t *keys;      /* [turns] request hashes */
    int turn;            /* test/walk: the turn in progress; resolve: the turn being resolved */
    uint64_t key;        /* current request */
    strbuf body;
    strbuf raw;
    hunt_stream *st;
    hunt_http *http;
    int attempts;
    double t_start;
    double retry_at;
    bool waiting_retry;
    bool live_corrupt;      /* counted in the live corrupt figure */
    hunt_sess *prev, *next; /* phase's active list */
};

struct hunt_phase {
    int mode;
    const char *url;
    int conc;
    hunt_session_rec **recs; /* S_TEST / S_RESOLVE: the batch's records */
    int64_t first_index;     /* S_WALK: indices first_index + i */
    int n, next;
    int active_counted, active_fill;
    double deadline;
    bool past_deadline;
    bool fill;
    bool in_fill;
    bool draining; /* counted sessions done: fillers end after the request in flight */
    hunt_sess *active;
    int errors;
};

typedef struct hunt_cache {
    uint64_t *keys; /* 0 = empty */
    hunt_reply **vals;
    size_t cap, n;
} hunt_cache;

struct hunt_run {
    hunt_config cfg;
    char *chat_url, *ref_chat_url, *metrics_url, *models_url;
    hunt_tools *tools;
    hunt_workload *w;
    hunt_oracle_cfg ocfg;
    hunt_client *client;
    hunt_cache cache;
    arena *ref_arena;
    hunt_results res;
    double t0;
    double cpu0;
    int fatal; /* an error from inside a callback (ERR_NOMEM) */
    char first_error[512];
    /* metrics scraping */
    double next_scrape;
    bool scrape_busy, scrape_off;
    strbuf scrape_buf;
    /* progress */
    double next_progress;
    int64_t planned, tested, live_corrupt;
    const char *phase_name;
    int level, level_conc;
    bool progress_dirty;
    int64_t filler_next;
    int sess_in_flight, sess_peak; /* session requests (not /metrics scrapes) in flight */
};

/* ---- small helpers ---- */

static double hunt_now(const hunt_run *r) {
    return clock_now_s() - r->t0;
}

static double hunt_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static char *hunt_strdup(const char *s) {
    return s ? strdup(s) : NULL;
}

void hunt_config_default(hunt_config *c) {
    memset(c, 0, sizeof *c);
    c->conc[0] = 1;
    c->conc[1] = 8;
    c->conc[2] = 32;
    c->conc[3] = 64;
    c->n_conc = 4;
    c->sessions = 64;
    c->turns = 4;
    c->n_tools = 10;
    c->n_pads = 1;
    c->seed = 1;
    c->ref_conc = 1;
    c->max_tokens = 128;
    c->timeout_s = 120;
    c->tie_threshold = 0.5;
    c->logprobs = true;
    c->top_logprobs = 5;
    c->skip_special = true;
    c->scrape_ms = 250;
    c->fill = true;
    c->retries = 3;
}

/* ---- reference cache ---- */

static hunt_reply *hunt_cache_get(const hunt_cache *c, uint64_t key) {
    if (!c->cap)
        return NULL;
    size_t m = c->cap - 1;
    for (size_t i = key & m;; i = (i + 1) & m) {
        if (c->keys[i] == key)
            return c->vals[i];
        if (c->keys[i] == 0)
            return NULL;
    }
}

static int hunt_cache_put(hunt_cache *c, uint64_t key, hunt_reply *v) {
    if ((c->n + 1) * 2 > c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 1024;
        uint64_t *nk = calloc(nc, sizeof *nk);
        hunt_reply **nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return err_set(ERR_NOMEM, "out of memory growing the reference cache");
        }
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->keys[i])
                continue;
            size_t j = c->keys[i] & (nc - 1);
            while (nk[j])
                j = (j + 1) & (nc - 1);
            nk[j] = c->keys[i];
            nv[j] = c->vals[i];
        }
        free(c->keys);
        free(c->vals);
        c->keys = nk;
        c->vals = nv;
        c->cap = nc;
    }
    size_t m = c->cap - 1;
    size_t i = key & m;
    while (c->keys[i] && c->keys[i] != key)
        i = (i + 1) & m;
    if (!c->keys[i])
        c->n++;
    c->keys[i] = key;
    c->vals[i] = v;
    return 0;
}

static uint64_t hunt_key(const strbuf *body) {
    uint64_t k = hunt_hash(HUNT_FNV_OFFSET, body->data, body->len);
    return k ? k : 1;
}

/* ---- rendering ---- */

char *hunt_reply_render(const hunt_reply *r) {
    strbuf sb;
    strbuf_init(&sb);
    strbuf_append(&sb, r->content, r->content_len);
    for (int i = 0; i < r->n_calls; i++) {
        if (sb.len)
            strbuf_putc(&sb, '\n');
        strbuf_printf(&sb, "[tool_call %s ", r->calls[i].name);
        strbuf_append(&sb, r->calls[i].args, r->calls[i].args_len);
        strbuf_putc(&sb, ']');
    }
    strbuf_printf(&sb, "%s[finish_reason %s]", sb.len ? "\n" : "", r->finish[0] ? r->finish : "-");
    return strbuf_take(&sb, NULL);
}

/* ---- progress and metrics ---- */

static void hunt_progress(hunt_run *r, bool force) {
    const hunt_config *c = &r->cfg;
    if (!c->progress)
        return;
    double now = hunt_now(r);
    if (!force && now < r->next_progress)
        return;
    r->next_progress = now + (c->progress == 2 ? 0.25 : 5.0);
    double rate = now > 0 ? (double)r->tested / now : 0;
    int64_t left = r->planned > r->tested ? r->planned - r->tested : 0;
    char eta[32] = "?";
    if (rate > 0)
        snprintf(eta, sizeof eta, "%.0fs", (double)left / rate);
    fprintf(stderr,
            "%shunt: c=%d %-9s sessions %lld/%lld corrupt %lld (%.1f%%) in flight %d "
            "elapsed %.0fs eta %s%s",
            c->progress == 2 ? "\r" : "", r->level_conc, r->phase_name ? r->phase_name : "",
            (long long)r->tested, (long long)r->planned, (long long)r->live_corrupt,
            r->tested ? 100.0 * (double)r->live_corrupt / (double)r->tested : 0.0,
            r->sess_in_flight, now, eta, c->progress == 2 ? "   " : "\n");
    r->progress_dirty = c->progress == 2;
}

static int hunt_scrape_data(void *ud, long status, const char *p, size_t n) {
    hunt_run *r = ud;
    (void)status;
    if (r->scrape_buf.len < (4u << 20))
        strbuf_append(&r->scrape_buf, p, n);
    return 0;
}

static void hunt_scrape_done(void *ud, int rc, long status, double retry_after) {
    hunt_run *r = ud;
    (void)retry_after;
    r->scrape_busy = false;
    hunt_metrics_sample s;
    const char *fl = rc == 0 && status == 200
                         ? hunt_metrics_parse(r->scrape_buf.data, r->scrape_buf.len, &s)
                         : NULL;
    if (!fl) {
        if (!r->res.obs.metrics_flavor) {
            r->scrape_off = true; /* no usable /metrics: stop asking */
            log_info("hunt: %s has no known metrics; no batch timeline", r->metrics_url);
        }
        return;
    }
    if (!r->res.obs.metrics_flavor)
        r->res.obs.metrics_flavor = hunt_strdup(fl);
    s.t = hunt_now(r);
    hunt_results *res = &r->res;
    if (mem_grow((void **)&res->obs.samples, &res->obs.cap_samples, (size_t)res->obs.n_samples + 1,
                 sizeof *res->obs.samples))
        return;
    res->obs.samples[res->obs.n_samples++] = s;
}

static void hunt_scrape(hunt_run *r) {
    if (r->cfg.scrape_ms <= 0 || r->scrape_off || r->scrape_busy)
        return;
    double now = hunt_now(r);
    if (now < r->next_scrape)
        return;
    r->next_scrape = now + r->cfg.scrape_ms / 1000.0;
    strbuf_reset(&r->scrape_buf);
    hunt_http_req q = {.url = r->metrics_url,
                       .api_key = r->cfg.api_key,
                       .timeout_s = 5,
                       .on_data = hunt_scrape_data,
                       .on_done = hunt_scrape_done,
                       .ud = r};
    if (hunt_client_submit(r->client, &q, NULL) == 0)
        r->scrape_busy = true;
}

/* ---- sessions ---- */

static void hunt_sess_free(hunt_sess *s) {
    if (!s)
        return;
    hunt_history_destroy(s->h);
    hunt_stream_destroy(s->st);
    arena_destroy(s->a);
    arena_destroy(s->ra);
    strbuf_deinit(&s->body);
    strbuf_deinit(&s->raw);
    free(s->replies);
    free(s->evals);
    free(s->msgs_at);
    free(s->keys);
    free(s);
}

static void hunt_note_error(hunt_run *r, const char *msg) {
    if (!r->first_error[0])
        snprintf(r->first_error, sizeof r->first_error, "%s", msg);
}

static void hunt_phase_fill(hunt_phase *ph, hunt_run *r);
static void hunt_sess_step(hunt_sess *s);

static void hunt_sess_unlink(hunt_sess *s) {
    hunt_phase *ph = s->ph;
    if (s->prev)
        s->prev->next = s->next;
    else if (ph->active == s)
        ph->active = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

/* The session is done with this phase. */
static void hunt_sess_end(hunt_sess *s) {
    hunt_phase *ph = s->ph;
    hunt_run *r = s->r;
    hunt_sess_unlink(s);
    if (s->mode == S_FILL)
        ph->active_fill--;
    else
        ph->active_counted--;
    if (s->mode == S_TEST)
        r->tested++;
    hunt_stream_destroy(s->st);
    s->st = NULL;
    s->http = NULL;
    s->ph = NULL;
    if (s->mode == S_WALK || s->mode == S_FILL) {
        hunt_sess_free(s);
    } else {
        arena_destroy(s->ra);
        s->ra = NULL;
        strbuf_deinit(&s->raw);
        strbuf_init(&s->raw);
    }
    if (!ph->in_fill)
        hunt_phase_fill(ph, r);
}

static void hunt_sess_fail(hunt_sess *s, const char *why) {
    hunt_run *r = s->r;
    hunt_note_error(r, why);
    if (s->ph)
        s->ph->errors++;
    if (s->rec && !s->rec->error && s->mode != S_WALK) {
        char buf[600];
        snprintf(buf, sizeof buf, "%s turn %d: %s", s->mode == S_RESOLVE ? "reference for" : "test",
                 s->turn, why);
        s->rec->error = hunt_strdup(buf);
    }
    hunt_sess_end(s);
}

static int hunt_sess_data(void *ud, long status, const char *p, size_t n) {
    hunt_sess *s = ud;
    if (status == 200 && s->st)
        return hunt_stream_feed(s->st, p, n);
    size_t cap = status == 200 ? (256u << 20) : (64u << 10);
    if (s->raw.len + n > cap)
        return err_set(ERR_TOOLARGE, "response over %zu bytes", cap);
    strbuf_append(&s->raw, p, n);
    return 0;
}

/* Judges test turn t of a session against the cached reference, if there is one. Returns the
 * verdict (PENDING when the reference is not cached). */
static hunt_verdict hunt_sess_judge(hunt_sess *s, int t) {
    hunt_run *r = s->r;
    const hunt_reply *ref = hunt_cache_get(&r->cache, s->keys[t]);
    hunt_turn_rec *tr = &s->rec->turns[t];
    if (!ref) {
        tr->verdict = HUNT_V_PENDING;
        return HUNT_V_PENDING;
    }
    hunt_eval *ev = &s->evals[t];
    hunt_oracle_judge(&r->ocfg, &s->replies[t], ref, ev);
    tr->verdict = ev->verdict;
    tr->found = ev->found;
    tr->model_level = ev->model_level;
    tr->neartie = ev->neartie;
    if (ev->verdict == HUNT_V_CORRUPT && !s->live_corrupt) {
        s->live_corrupt = true;
        r->live_corrupt++;
    }
    return ev->verdict;
}

/* A test reply that could not be parsed at all (a chunk or body that is not JSON) while the
 * reference answered the same request: corruption of the response itself. Records the turn as
 * corrupt with the parser's complaint as evidence and ends the session. Returns false (and does
 * nothing) when there is no reference to hold it against. */
static bool hunt_sess_malformed(hunt_sess *s, const char *why) {
    hunt_run *r = s->r;
    if (s->mode != S_TEST || !hunt_cache_get(&r->cache, s->key))
        return false;
    int t = s->turn;
    hunt_reply *rep = &s->replies[t];
    memset(rep, 0, sizeof *rep);
    char text[700];
    snprintf(text, sizeof text, "[malformed response: %s]", why);
    rep->content = arena_strndup(s->a, text, strlen(text));
    rep->content_len = rep->content ? strlen(text) : 0;
    rep->finish = "";
    rep->prompt_tokens = rep->completion_tokens = -1;
    if (!rep->content)
        rep->content = "";
    hunt_eval *ev = &s->evals[t];
    memset(ev, 0, sizeof *ev);
    ev->verdict = HUNT_V_CORRUPT;
    ev->diverged = true;
    snprintf(ev->where, sizeof ev->where, "response");
    ev->div_offset = -1;
    ev->div_token = -1;
    ev->tie_gap = -1;
    ev->found = 1u << HUNT_F_PROTOCOL;
    snprintf(ev->why, sizeof ev->why, "the response could not be parsed: %s", why);
    hunt_turn_rec *tr = &s->rec->turns[t];
    tr->verdict = HUNT_V_CORRUPT;
    tr->found = ev->found;
    tr->t_start = s->t_start;
    tr->t_end = hunt_now(r);
    tr->prompt_tokens = tr->completion_tokens = -1;
    s->rec->n_turns = t + 1;
    if (!s->live_corrupt) {
        s->live_corrupt = true;
        r->live_corrupt++;
    }
    hunt_sess_end(s);
    return true;
}

static void hunt_sess_done_cb(void *ud, int rc, long status, double retry_after) {
    hunt_sess *s = ud;
    hunt_run *r = s->r;
    s->http = NULL;
    r->sess_in_flight--;
    char why[600];
    bool retryable = false;
    if (rc == 0 && status != 200) {
        char snip[200];
        size_t k = 0;
        for (size_t i = 0; i < s->raw.len && k + 1 < sizeof snip; i++)
            snip[k++] = (s->raw.data[i] >= 32 && s->raw.data[i] < 127) ? s->raw.data[i] : ' ';
        snip[k] = 0;
        snprintf(why, sizeof why, "HTTP %ld from %s: %s", status, s->ph->url, snip);
        retryable = status == 429 || status == 502 || status == 503 || status == 504;
    } else if (rc) {
        snprintf(why, sizeof why, "%s", err_detail()[0] ? err_detail() : err_str(rc));
        retryable = rc == ERR_CONNECT || rc == ERR_PROTOCOL || rc == ERR_TIMEOUT;
        if (rc == ERR_PROTOCOL && strstr(why, "not JSON")) {
            /* a malformed chunk is the server's answer, not a dropped line */
            if (hunt_sess_malformed(s, why))
                return;
            retryable = false;
        }
    }
    if (rc || status != 200) {
        if (retryable && s->attempts < r->cfg.retries) {
            s->attempts++;
            r->res.client.retries++;
            double delay = retry_after >= 0
                               ? retry_after
                               : 0.1 * (double)(1 << (s->attempts < 4 ? s->attempts : 4));
            if (delay > 30)
                delay = 30;
            s->retry_at = hunt_now(r) + delay;
            s->waiting_retry = true;
            hunt_stream_destroy(s->st);
            s->st = NULL;
            return;
        }
        hunt_sess_fail(s, why);
        return;
    }
    /* parse the reply */
    hunt_reply rep;
    arena *dst = s->mode == S_TEST ? s->a : s->ra;
    int prc;
    if (s->st) {
        prc = hunt_stream_finish(s->st, &rep);
        hunt_stream_destroy(s->st);
        s->st = NULL;
        if (prc == 0 && dst != s->ra) {
            /* the stream wrote into s->ra; keep test replies in the session arena */
            hunt_reply copy;
            prc = hunt_reply_copy(dst, &rep, &copy);
            rep = copy;
        }
    } else {
        prc = hunt_reply_parse_json(dst, s->raw.data, s->raw.len, &rep);
    }
    if (prc) {
        snprintf(why, sizeof why, "%s", err_detail()[0] ? err_detail() : err_str(prc));
        if (prc == ERR_PROTOCOL && strstr(why, "not JSON") && hunt_sess_malformed(s, why))
            return;
        if (prc == ERR_NOMEM)
            r->fatal = ERR_NOMEM;
        hunt_sess_fail(s, why);
        return;
    }
    s->attempts = 0;
    double now = hunt_now(r);
    if (s->mode == S_WALK || s->mode == S_RESOLVE) {
        hunt_reply *keep = arena_alloc(r->ref_arena, sizeof *keep);
        if (!keep || hunt_reply_copy(r->ref_arena, &rep, keep) ||
            hunt_cache_put(&r->cache, s->key, keep)) {
            r->fatal = ERR_NOMEM;
            hunt_sess_fail(s, "out of memory caching a reference reply");
            return;
        }
        r->res.client.ref_requests++;
        if (s->mode == S_WALK) {
            if (hunt_history_add_reply(r->w, s->h, s->turn, keep)) {
                r->fatal = ERR_NOMEM;
                hunt_sess_fail(s, "out of memory");
                return;
            }
            s->turn++;
        } else if (hunt_sess_judge(s, s->turn) == HUNT_V_CORRUPT) {
            hunt_sess_end(s);
            return;
        } else {
            s->turn++;
        }
        if (s->ra)
            arena_reset(s->ra);
        hunt_sess_step(s);
        return;
    }
    r->res.client.requests++;
    if (s->mode == S_FILL) {
        if (hunt_history_add_reply(r->w, s->h, s->turn, &rep)) {
            r->fatal = ERR_NOMEM;
            hunt_sess_fail(s, "out of memory");
            return;
        }
        s->turn++;
        arena_reset(s->ra);
        hunt_sess_step(s);
        return;
    }
    /* S_TEST */
    int t = s->turn;
    s->replies[t] = rep;
    hunt_turn_rec *tr = &s->rec->turns[t];
    tr->t_start = s->t_start;
    tr->t_end = now;
    tr->prompt_tokens = rep.prompt_tokens;
    tr->completion_tokens = rep.completion_tokens;
    if (rep.prompt_tokens > s->rec->max_prompt_tokens)
        s->rec->max_prompt_tokens = rep.prompt_tokens;
    s->rec->n_turns = t + 1;
    if (hunt_sess_judge(s, t) == HUNT_V_CORRUPT) {
        hunt_sess_end(s);
        return;
    }
    if (hunt_history_add_reply(r->w, s->h, t, &rep)) {
        r->fatal = ERR_NOMEM;
        hunt_sess_fail(s, "out of memory");
        return;
    }
    s->turn++;
    if (s->ra)
        arena_reset(s->ra);
    hunt_sess_step(s);
}

/* Submits the request in s->body. */
static void hunt_sess_submit(hunt_sess *s) {
    hunt_run *r = s->r;
    const hunt_config *c = &r->cfg;
    strbuf_reset(&s->raw);
    hunt_stream_destroy(s->st);
    s->st = NULL;
    if (c->stream) {
        if (!s->ra)
            s->ra = arena_create(16 * 1024, 0);
        if (!s->ra || hunt_stream_create(s->ra, &s->st)) {
            r->fatal = ERR_NOMEM;
            hunt_sess_fail(s, "out of memory");
            return;
        }
    }
    hunt_http_req q = {.url = s->ph->url,
                       .body = s->body.data,
                       .body_len = s->body.len,
                       .api_key = c->api_key,
                       .stream = c->stream,
                       .timeout_s = c->timeout_s,
                       .on_data = hunt_sess_data,
                       .on_done = hunt_sess_done_cb,
                       .ud = s};
    s->t_start = hunt_now(r);
    if (hunt_client_submit(r->client, &q, &s->http)) {
        r->fatal = ERR_INTERNAL;
        hunt_sess_fail(s, err_detail());
        return;
    }
    if (++r->sess_in_flight > r->sess_peak)
        r->sess_peak = r->sess_in_flight;
}

/* Advances a session until it needs the network or is done with the phase. */
static void hunt_sess_step(hunt_sess *s) {
    hunt_run *r = s->r;
    const hunt_config *c = &r->cfg;
    for (;;) {
        if (r->fatal) {
            hunt_sess_end(s);
            return;
        }
        if (s->mode == S_RESOLVE) {
            while (s->turn < s->rec->n_turns && s->rec->turns[s->turn].verdict != HUNT_V_PENDING)
                s->turn++;
            if (s->turn >= s->rec->n_turns) {
                hunt_sess_end(s);
                return;
            }
            hunt_history_body(r->w, s->h, s->msgs_at[s->turn], -1, &s->body);
            s->key = hunt_key(&s->body);
            if (hunt_cache_get(&r->cache, s->key)) {
                if (hunt_sess_judge(s, s->turn) == HUNT_V_CORRUPT) {
                    hunt_sess_end(s);
                    return;
                }
                s->turn++;
                continue;
            }
            hunt_sess_submit(s);
            return;
        }
        if (s->turn >= c->turns || (s->mode != S_WALK && s->ph->past_deadline && s->turn > 0) ||
            (s->mode == S_FILL && s->ph->draining)) {
            hunt_sess_end(s);
            return;
        }
        hunt_history_body(r->w, s->h, hunt_history_len(s->h), -1, &s->body);
        if (strbuf_failed(&s->body)) {
            r->fatal = ERR_NOMEM;
            hunt_sess_fail(s, "out of memory building a request");
            return;
        }
        s->key = hunt_key(&s->body);
        if (s->mode == S_WALK) {
            const hunt_reply *cached = hunt_cache_get(&r->cache, s->key);
            if (cached) {
                if (hunt_history_add_reply(r->w, s->h, s->turn, cached)) {
                    r->fatal = ERR_NOMEM;
                    hunt_sess_fail(s, "out of memory");
                    return;
                }
                s->turn++;
                continue;
            }
        }
        if (s->mode == S_TEST) {
            s->msgs_at[s->turn] = hunt_history_len(s->h);
            s->keys[s->turn] = s->key;
        }
        hunt_sess_submit(s);
        return;
    }
}

static hunt_sess *hunt_sess_new(hunt_run *r, hunt_phase *ph, int mode, int64_t index) {
    hunt_sess *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->r = r;
    s->ph = ph;
    s->mode = mode;
    s->index = index;
    strbuf_init(&s->body);
    strbuf_init(&s->raw);
    if (hunt_history_create(r->w, index, &s->h) || !(s->ra = arena_create(16 * 1024, 0))) {
        hunt_sess_free(s);
        return NULL;
    }
    if (mode == S_TEST) {
        int T = r->cfg.turns;
        s->a = arena_create(64 * 1024, 0);
        s->replies = calloc((size_t)T, sizeof *s->replies);
        s->evals = calloc((size_t)T, sizeof *s->evals);
        s->msgs_at = calloc((size_t)T, sizeof *s->msgs_at);
        s->keys = calloc((size_t)T, sizeof *s->keys);
        if (!s->a || !s->replies || !s->evals || !s->msgs_at || !s->keys) {
            hunt_sess_free(s);
            return NULL;
        }
    }
    return s;
}

static void hunt_phase_link(hunt_phase *ph, hunt_sess *s) {
    s->prev = NULL;
    s->next = ph->active;
    if (ph->active)
        ph->active->prev = s;
    ph->active = s;
}

/* Starts sessions until the phase's limits are reached. */
static void hunt_phase_fill(hunt_phase *ph, hunt_run *r) {
    if (ph->in_fill)
        return;
    ph->in_fill = true;
    for (;;) {
        if (r->fatal)
            break;
        if (ph->deadline > 0 && hunt_now(r) >= ph->deadline)
            ph->past_deadline = true;
        hunt_sess *s = NULL;
        if (ph->active_counted < ph->conc && ph->next < ph->n && !ph->past_deadline) {
            int i = ph->next++;
            if (ph->mode == S_WALK) {
                s = hunt_sess_new(r, ph, S_WALK, ph->first_index + i);
            } else if (ph->mode == S_TEST) {
                hunt_session_rec *rec = ph->recs[i];
                s = hunt_sess_new(r, ph, S_TEST, rec->index);
                if (s) {
                    s->rec = rec;
                    rec->priv = s;
                }
            } else { /* S_RESOLVE */
                hunt_session_rec *rec = ph->recs[i];
                s = rec->priv;
                if (!s)
                    continue; /* nothing retained: nothing pending */
                bool pending = false;
                for (int t = 0; t < rec->n_turns; t++)
                    pending |= rec->turns[t].verdict == HUNT_V_PENDING;
                bool corrupt = false;
                for (int t = 0; t < rec->n_turns; t++)
                    corrupt |= rec->turns[t].verdict == HUNT_V_CORRUPT;
                if (!pending || corrupt)
                    continue;
                s->mode = S_RESOLVE;
                s->ph = ph;
                s->turn = 0;
                if (!s->ra)
                    s->ra = arena_create(16 * 1024, 0);
            }
            if (!s) {
                r->fatal = ERR_NOMEM;
                break;
            }
            ph->active_counted++;
        } else if (ph->fill && ph->mode == S_TEST && ph->active_counted > 0 &&
                   (ph->next >= ph->n || ph->past_deadline) &&
                   ph->active_counted + ph->active_fill < ph->conc) {
            s = hunt_sess_new(r, ph, S_FILL, ((int64_t)1 << 40) + r->filler_next++);
            if (!s) {
                r->fatal = ERR_NOMEM;
                break;
            }
            ph->active_fill++;
        } else {
            break;
        }
        hunt_phase_link(ph, s);
        hunt_sess_step(s);
    }
    ph->in_fill = false;
}

static void hunt_phase_retries(hunt_phase *ph, hunt_run *r) {
    double now = hunt_now(r);
    for (hunt_sess *s = ph->active; s;) {
        hunt_sess *next = s->next;
        if (s->waiting_retry && now >= s->retry_at) {
            s->waiting_retry = false;
            hunt_sess_submit(s);
        }
        s = next;
    }
}

static void hunt_phase_cancel(hunt_phase *ph, hunt_run *r) {
    ph->in_fill = true; /* no refilling while tearing down */
    while (ph->active) {
        hunt_sess *s = ph->active;
        if (s->http) {
            hunt_client_cancel(r->client, s->http);
            r->sess_in_flight--;
        }
        s->http = NULL;
        hunt_sess_end(s);
    }
    ph->in_fill = false;
}

static int hunt_phase_run(hunt_run *r, hunt_phase *ph) {
    hunt_phase_fill(ph, r);
    for (;;) {
        if (r->cfg.stop && *r->cfg.stop) {
            hunt_phase_cancel(ph, r);
            return err_set(ERR_CANCELLED, "interrupted");
        }
        if (r->fatal) {
            hunt_phase_cancel(ph, r);
            return r->fatal;
        }
        hunt_phase_fill(ph, r);
        if (ph->active_counted == 0 && (ph->next >= ph->n || ph->past_deadline))
            break;
        hunt_phase_retries(ph, r);
        hunt_scrape(r);
        hunt_progress(r, false);
        int rc = hunt_client_run(r->client, 20);
        if (rc < 0) {
            hunt_phase_cancel(ph, r);
            return rc;
        }
    }
    /* The counted sessions are done. The fillers finish the requests they have in flight rather
     * than hang up: a server that notices a closed connection only when it writes (a whole,
     * non-streamed response) would go on generating them, and the next phase, a reference at
     * concurrency 1, would not have the server to itself. */
    ph->draining = true;
    for (;;) {
        for (hunt_sess *s = ph->active; s;) {
            hunt_sess *next = s->next;
            if (s->waiting_retry) /* nothing in flight */
                hunt_sess_end(s);
            s = next;
        }
        if (!ph->active || r->fatal || (r->cfg.stop && *r->cfg.stop))
            break;
        hunt_scrape(r);
        hunt_progress(r, false);
        if (hunt_client_run(r->client, 20) < 0)
            break;
    }
    hunt_phase_cancel(ph, r);
    return 0;
}

/* ---- finalising a session ---- */

static void hunt_sess_finalize(hunt_run *r, hunt_session_rec *rec) {
    hunt_sess *s = rec->priv;
    int shown = -1;
    bool corrupt = false, pending = false, benign = false;
    for (int t = 0; t < rec->n_turns; t++) {
        hunt_verdict v = rec->turns[t].verdict;
        if (v == HUNT_V_CORRUPT && !corrupt) {
            corrupt = true;
            shown = t;
        } else if (v == HUNT_V_BENIGN && !benign && !corrupt) {
            benign = true;
            if (shown < 0)
                shown = t;
        } else if (v == HUNT_V_PENDING && !corrupt) {
            pending = true;
        }
    }
    if (corrupt)
        rec->verdict = HUNT_V_CORRUPT;
    else if (rec->error || pending || rec->n_turns == 0)
        rec->verdict = HUNT_V_ERROR;
    else if (benign)
        rec->verdict = HUNT_V_BENIGN;
    else
        rec->verdict = HUNT_V_CLEAN;
    if (rec->verdict == HUNT_V_ERROR && !rec->error)
        rec->error =
            hunt_strdup(rec->n_turns == 0 ? "no turn completed" : "no reference reply for a turn");
    rec->shown_turn = rec->verdict == HUNT_V_ERROR ? -1 : shown;
    if (s && shown >= 0 && rec->verdict != HUNT_V_ERROR) {
        rec->eval = s->evals[shown];
        rec->test_text = hunt_reply_render(&s->replies[shown]);
        const hunt_reply *ref = hunt_cache_get(&r->cache, s->keys[shown]);
        rec->ref_text = ref ? hunt_reply_render(ref) : NULL;
    }
    hunt_sess_free(s);
    rec->priv = NULL;
}

/* ---- the run ---- */

static char *hunt_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 1);
    if (p) {
        memcpy(p, a, la);
        memcpy(p + la, b, lb + 1);
    }
    return p;
}

static bool hunt_ends_with(const char *s, size_t n, const char *suf) {
    size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

/* Derives the chat-completions URL and the server's base URL from what the user gave. */
static int hunt_urls(const char *url, char **chat, char **base) {
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        return err_set(ERR_INVAL, "URL '%s' must start with http:// or https://", url);
    size_t n = strlen(url);
    while (n > 8 && url[n - 1] == '/')
        n--;
    char *u = strndup(url, n);
    if (!u)
        return err_set(ERR_NOMEM, "out of memory");
    if (hunt_ends_with(u, n, "/chat/completions")) {
        *chat = u;
        size_t b = n - strlen("/chat/completions");
        if (hunt_ends_with(u, b, "/v1"))
            b -= 3;
        *base = strndup(u, b);
    } else if (hunt_ends_with(u, n, "/v1")) {
        *chat = hunt_join(u, "/chat/completions");
        *base = strndup(u, n - 3);
        free(u);
    } else {
        *chat = hunt_join(u, "/v1/chat/completions");
        *base = u;
    }
    if (!*chat || !*base)
        return err_set(ERR_NOMEM, "out of memory");
    return 0;
}

/* Finds the model name from /v1/models when none was given, and checks the target answers. */
static int hunt_preflight(hunt_run *r, char **model_out) {
    char body[8192];
    long status = 0;
    int rc = hunt_http_get(r->models_url, r->cfg.api_key, 10, &status, body, sizeof body);
    if (rc)
        return err_set(ERR_CONNECT, "cannot reach the target: %s", err_detail());
    if (status == 401 || status == 403)
        return err_set(ERR_AUTH, "%s answered HTTP %ld: check --api-key", r->models_url, status);
    *model_out = NULL;
    if (!r->cfg.model && status == 200) {
        arena *a = arena_create(0, 0);
        json_value *v;
        const char *id;
        size_t idl;
        if (a && json_parse(a, body, strlen(body), &v) == 0) {
            const json_value *d = json_get(v, "data");
            if (d && d->type == JSON_ARRAY && d->arr.n &&
                json_as_str(json_get(d->arr.items[0], "id"), &id, &idl))
                *model_out = strndup(id, idl);
        }
        arena_destroy(a);
    }
    return 0;
}

/* Sends one probe: a one-token chat completion, with logprobs and skip_special_tokens when asked,
 * retrying 429/502/503/504. Returns 0 with *status and the reply body, or the transport error. */
static int hunt_probe_once(hunt_run *r, const char *model, bool lp, bool ss, long *status,
                           char *reply, size_t cap) {
    strbuf q;
    strbuf_init(&q);
    strbuf_puts(&q, "{\"model\":");
    strbuf_json_str(&q, model, strlen(model), false);
    strbuf_puts(&q, ",\"messages\":[{\"role\":\"user\",\"content\":\"ping\"}],"
                    "\"max_tokens\":1,\"temperature\":0");
    if (lp)
        strbuf_printf(&q, ",\"logprobs\":true,\"top_logprobs\":%d", r->cfg.top_logprobs);
    if (ss) /* the value that differs from the usual default, as half the sessions send it */
        strbuf_puts(&q, ",\"skip_special_tokens\":false");
    strbuf_putc(&q, '}');
    if (strbuf_failed(&q)) {
        strbuf_deinit(&q);
        return err_set(ERR_NOMEM, "out of memory building the probe request");
    }
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        rc = hunt_http_fetch(r->chat_url, r->cfg.api_key, q.data,
                             r->cfg.timeout_s > 0 ? r->cfg.timeout_s : 60, status, reply, cap);
        bool busy =
            rc == 0 && (*status == 429 || *status == 502 || *status == 503 || *status == 504);
        if (!busy || attempt >= r->cfg.retries)
            break;
        struct timespec ts = {0, 100000000L << (attempt < 3 ? attempt : 3)};
        nanosleep(&ts, NULL);
    }
    strbuf_deinit(&q);
    return rc;
}

/* One tiny chat completion: the endpoint works, and the request extensions hunt sends are
 * accepted. A server that answers 400/422 is asked again without skip_special_tokens, then without
 * logprobs, then without both; what it rejects is switched off with a one-line warning each rather
 * than failing every session. */
static int hunt_probe(hunt_run *r, const char *model) {
    char reply[2048];
    long status = 0;
    bool lp0 = r->cfg.logprobs, ss0 = r->cfg.skip_special;
    /* k = 0: as configured; 1: without skip_special_tokens; 2: without logprobs; 3: without
     * both. Variants that drop an extension that was not asked for repeat an earlier one. */
    for (int k = 0; k < 4; k++) {
        if (((k & 1) && !ss0) || ((k & 2) && !lp0))
            continue;
        bool lp = lp0 && !(k & 2), ss = ss0 && !(k & 1);
        int rc = hunt_probe_once(r, model, lp, ss, &status, reply, sizeof reply);
        if (rc == ERR_NOMEM)
            return rc;
        if (rc)
            return err_set(ERR_CONNECT, "cannot reach the target: %s", err_detail());
        if (status == 401 || status == 403)
            return err_set(ERR_AUTH, "%s answered HTTP %ld: check --api-key", r->chat_url, status);
        if (status == 200) {
            if (lp0 && !lp) {
                log_warn("hunt: %s rejects logprobs; running without them (every divergence "
                         "then counts as corruption: the near-tie oracle needs logprobs)",
                         r->chat_url);
                r->cfg.logprobs = false;
            }
            if (ss0 && !ss) {
                log_warn("hunt: %s rejects skip_special_tokens; running without it (a "
                         "detokenizer that shares the flag across a batch cannot be seen)",
                         r->chat_url);
                r->cfg.skip_special = false;
            }
            return 0;
        }
        if (status != 400 && status != 422)
            break;
    }
    for (char *p = reply; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return err_set(ERR_PROTOCOL, "%s answered HTTP %ld to a one-token chat completion: %.300s",
                   r->chat_url, status, reply);
}

/* With any padding asked for, measures the target's bytes per token (hunt_calib) so a pad of N
 * tokens adds about N to usage.prompt_tokens; a target that reports no usage keeps 4 bytes per
 * token, with a warning. Returns 0 or ERR_NOMEM. */
static int hunt_run_calibrate(hunt_run *r, hunt_workload_cfg *wc) {
    bool padded = false;
    for (int i = 0; i < wc->n_pads; i++)
        padded |= wc->pads[i] > 0;
    if (!padded)
        return 0;
    hunt_calib_target t = {.chat_url = r->chat_url,
                           .api_key = r->cfg.api_key,
                           .model = wc->model,
                           .timeout_s = r->cfg.timeout_s > 0 ? r->cfg.timeout_s : 60,
                           .seed = wc->seed};
    double bpt = 4;
    int rc = hunt_calib_pad(&t, &bpt);
    if (rc == ERR_NOMEM)
        return rc;
    if (rc)
        log_warn("hunt: cannot measure the target's bytes per token (%s); context padding "
                 "assumes 4",
                 err_detail());
    else
        log_info("hunt: context padding at %.2f bytes per token (measured)", bpt);
    wc->pad_bytes_per_token = bpt;
    r->res.cfg.pad_bytes_per_token = bpt;
    return 0;
}

int hunt_run_create(const hunt_config *cfg, hunt_run **out) {
    if (cfg->n_conc < 1 || cfg->n_conc > HUNT_MAX_LEVELS)
        return err_set(ERR_RANGE, "%d concurrency levels, expected 1..%d", cfg->n_conc,
                       HUNT_MAX_LEVELS);
    for (int i = 0; i < cfg->n_conc; i++)
        if (cfg->conc[i] < 1 || cfg->conc[i] > 100000)
            return err_set(ERR_RANGE, "concurrency %d out of range 1..100000", cfg->conc[i]);
    if (cfg->sessions < 1 || cfg->ref_conc < 1 || cfg->retries < 0)
        return err_set(ERR_RANGE, "sessions, reference concurrency and retries must be positive");
    hunt_run *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(ERR_NOMEM, "out of memory creating the run");
    r->cfg = *cfg;
    r->t0 = clock_now_s();
    r->cpu0 = hunt_cpu_s();
    strbuf_init(&r->scrape_buf);
    char *base = NULL, *ref_base = NULL, *model = NULL;
    int rc = hunt_urls(cfg->url, &r->chat_url, &base);
    if (!rc && cfg->ref_url)
        rc = hunt_urls(cfg->ref_url, &r->ref_chat_url, &ref_base);
    if (rc)
        goto fail;
    if (!r->ref_chat_url && !(r->ref_chat_url = strdup(r->chat_url))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    r->metrics_url = hunt_join(base, "/metrics");
    r->models_url = hunt_join(base, "/v1/models");
    r->ref_arena = arena_create(256 * 1024, 0);
    if (!r->metrics_url || !r->models_url || !r->ref_arena) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    rc = cfg->tools_file ? hunt_tools_load(cfg->tools_file, &r->tools)
                         : hunt_tools_create_builtin(cfg->n_tools, &r->tools);
    if (rc)
        goto fail;
    if ((rc = hunt_preflight(r, &model)))
        goto fail;
    if ((rc = hunt_probe(r, cfg->model ? cfg->model : model ? model : "default")))
        goto fail;
    hunt_workload_cfg wc = {
        .seed = cfg->seed,
        .turns = cfg->turns,
        .max_tokens = cfg->max_tokens,
        .temperature = cfg->temperature,
        .stream = cfg->stream,
        .logprobs = r->cfg.logprobs,
        .top_logprobs = cfg->top_logprobs,
        .skip_special = r->cfg.skip_special,
        .n_pads = cfg->n_pads,
        .model = cfg->model ? cfg->model
                 : model    ? model
                            : "default",
        .tools = r->tools,
    };
    memcpy(wc.pads, cfg->pads, sizeof wc.pads);
    if ((rc = hunt_run_calibrate(r, &wc)))
        goto fail;
    if ((rc = hunt_workload_create(&wc, &r->w)))
        goto fail;
    r->ocfg.tie_threshold = cfg->tie_threshold;
    r->ocfg.tools = r->tools;
    int maxc = cfg->ref_conc;
    for (int i = 0; i < cfg->n_conc; i++)
        if (cfg->conc[i] > maxc)
            maxc = cfg->conc[i];
    if ((rc = hunt_client_create(maxc + 4, &r->client)))
        goto fail;
    hunt_results *res = &r->res;
    res->cfg.url = hunt_strdup(cfg->url);
    res->cfg.ref_url = hunt_strdup(cfg->ref_url);
    res->cfg.model = hunt_strdup(wc.model);
    memcpy(res->cfg.conc, cfg->conc, sizeof res->cfg.conc);
    res->cfg.n_conc = cfg->n_conc;
    memcpy(res->cfg.pads, cfg->pads, sizeof res->cfg.pads);
    res->cfg.n_pads = cfg->n_pads;
    res->cfg.sessions = cfg->sessions;
    res->cfg.turns = cfg->turns;
    res->cfg.n_tools = hunt_tools_count(r->tools);
    res->cfg.max_tokens = cfg->max_tokens;
    res->cfg.ref_conc = cfg->ref_conc;
    res->cfg.stream = cfg->stream;
    res->cfg.logprobs = r->cfg.logprobs;
    res->cfg.skip_special = r->cfg.skip_special;
    res->cfg.temperature = cfg->temperature;
    res->cfg.tie_threshold = cfg->tie_threshold;
    res->cfg.seed = cfg->seed;
    if (!res->cfg.url || !res->cfg.model) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    free(base);
    free(ref_base);
    free(model);
    *out = r;
    return 0;
fail:
    free(base);
    free(ref_base);
    free(model);
    hunt_run_destroy(r);
    return rc;
}

static void hunt_rec_free(hunt_session_rec *rec) {
    if (!rec)
        return;
    hunt_sess_free(rec->priv);
    free(rec->turns);
    free(rec->test_text);
    free(rec->ref_text);
    free(rec->error);
    free(rec);
}

void hunt_run_destroy(hunt_run *r) {
    if (!r)
        return;
    hunt_results *res = &r->res;
    for (int64_t i = 0; i < res->records.n_recs; i++)
        hunt_rec_free(res->records.recs[i]);
    free(res->records.recs);
    free(res->obs.samples);
    free(res->obs.spans);
    free(res->obs.metrics_flavor);
    free(res->cfg.url);
    free(res->cfg.ref_url);
    free(res->cfg.model);
    hunt_client_destroy(r->client);
    hunt_workload_destroy(r->w);
    hunt_tools_destroy(r->tools);
    free(r->cache.keys);
    free(r->cache.vals);
    arena_destroy(r->ref_arena);
    strbuf_deinit(&r->scrape_buf);
    free(r->chat_url);
    free(r->ref_chat_url);
    free(r->metrics_url);
    free(r->models_url);
    free(r);
}

void hunt_run_set_plan(hunt_run *r, int64_t sessions_total) {
    r->planned = sessions_total;
}

hunt_results *hunt_run_results(hunt_run *r) {
    return &r->res;
}

static int hunt_results_push(hunt_results *res, hunt_session_rec *rec) {
    if (mem_grow((void **)&res->records.recs, &res->records.cap_recs,
                 (size_t)res->records.n_recs + 1, sizeof *res->records.recs))
        return err_set(ERR_NOMEM, "out of memory keeping session records");
    res->records.recs[res->records.n_recs++] = rec;
    return 0;
}

int hunt_run_batch(hunt_run *r, int level, int conc, int64_t first_index, int n) {
    const hunt_config *c = &r->cfg;
    if (n < 1 || conc < 1)
        return err_set(ERR_RANGE, "batch of %d sessions at concurrency %d", n, conc);
    r->level = level;
    r->level_conc = conc;
    r->first_error[0] = 0;
    hunt_session_rec **recs = calloc((size_t)n, sizeof *recs);
    if (!recs)
        return err_set(ERR_NOMEM, "out of memory");
    int rc = 0;
    for (int i = 0; i < n; i++) {
        hunt_session_rec *rec = calloc(1, sizeof *rec);
        if (!rec || !(rec->turns = calloc((size_t)c->turns, sizeof *rec->turns))) {
            free(rec);
            rc = err_set(ERR_NOMEM, "out of memory");
            goto out;
        }
        recs[i] = rec;
        rec->index = first_index + i;
        rec->level = level;
        rec->conc = conc;
        rec->pad = hunt_workload_pad(r->w, rec->index, &rec->pad_slot);
        rec->seed = hunt_workload_session_seed(r->w, rec->index);
        rec->skip_special = hunt_workload_skip_special(r->w, rec->index);
        rec->shown_turn = -1;
        rec->max_prompt_tokens = -1;
    }
    /* 1. reference walk */
    hunt_phase walk = {.mode = S_WALK,
                       .url = r->ref_chat_url,
                       .conc = c->ref_conc,
                       .first_index = first_index,
                       .n = n};
    if (c->duration_s > 0) /* a walk started is finished; no new one after the deadline */
        walk.deadline = hunt_now(r) + c->duration_s;
    r->phase_name = "reference";
    if ((rc = hunt_phase_run(r, &walk)))
        goto out;
    if (walk.errors > 0 && walk.errors == walk.next) {
        rc = err_set(ERR_PROTOCOL, "target error: every reference session failed; first: %s",
                     r->first_error);
        goto out;
    }
    /* 2. test */
    /* only sessions with a reference walk are tested (all of them unless --duration cut it) */
    hunt_phase test = {.mode = S_TEST,
                       .url = r->chat_url,
                       .conc = conc,
                       .recs = recs,
                       .n = walk.next,
                       .fill = c->fill};
    if (c->duration_s > 0)
        test.deadline = hunt_now(r) + c->duration_s;
    r->phase_name = "test";
    double span_t0 = hunt_now(r);
    rc = hunt_phase_run(r, &test);
    hunt_results *rs = &r->res;
    if (!mem_grow((void **)&rs->obs.spans, &rs->obs.cap_spans, (size_t)rs->obs.n_spans + 1,
                  sizeof *rs->obs.spans))
        rs->obs.spans[rs->obs.n_spans++] = (hunt_span){span_t0, hunt_now(r), conc};
    if (rc && rc != ERR_CANCELLED)
        goto out;
    int test_rc = rc;
    /* 3. resolve */
    if (!test_rc) {
        hunt_phase res = {
            .mode = S_RESOLVE, .url = r->ref_chat_url, .conc = c->ref_conc, .recs = recs, .n = n};
        r->phase_name = "resolve";
        rc = hunt_phase_run(r, &res);
        if (rc && rc != ERR_CANCELLED)
            goto out;
    } else {
        rc = test_rc;
    }
    /* finalise: sessions that never started (deadline, interruption) are dropped */
    int started = 0, errors = 0;
    int cancelled_rc = rc;
    rc = 0;
    for (int i = 0; i < n; i++) {
        hunt_session_rec *rec = recs[i];
        if (rec->n_turns == 0 && !rec->error) {
            hunt_rec_free(rec);
            recs[i] = NULL;
            continue;
        }
        hunt_sess_finalize(r, rec);
        started++;
        errors += rec->verdict == HUNT_V_ERROR;
        if ((rc = hunt_results_push(&r->res, rec)))
            goto out;
        recs[i] = NULL;
    }
    r->phase_name = "done";
    hunt_progress(r, true);
    if (cancelled_rc) {
        rc = cancelled_rc;
        goto out;
    }
    if (started > 0 && errors * 2 > started) {
        rc = err_set(ERR_PROTOCOL,
                     "target error: %d of %d sessions failed at concurrency %d; "
                     "first: %s",
                     errors, started, conc, r->first_error);
        goto out;
    }
out:
    for (int i = 0; i < n; i++)
        hunt_rec_free(recs[i]);
    free(recs);
    if (r->cfg.progress == 2 && r->progress_dirty) {
        fputc('\n', stderr);
        r->progress_dirty = false;
    }
    return rc;
}

/* The timeline's last sample: once the traffic is over, one more scrape, awaited (the client has
 * nothing else in flight by now; a scrape times out after 5 s). Every run that scrapes then ends
 * with the server's state after its last request, however short the run or long the period.
 * Not after an interruption: SIGINT means stop now. */
static void hunt_scrape_final(hunt_run *r) {
    bool *busy = &r->scrape_busy;
    volatile sig_atomic_t *stop = r->cfg.stop;
    if (r->cfg.scrape_ms <= 0)
        return;
    while (*busy && !(stop && *stop) && hunt_client_run(r->client, 20) >= 0)
        ; /* a periodic scrape still in flight */
    if (r->scrape_off || *busy || (stop && *stop))
        return;
    r->next_scrape = 0;
    hunt_scrape(r);
    while (*busy && !(stop && *stop) && hunt_client_run(r->client, 20) >= 0)
        ;
}

void hunt_run_finish(hunt_run *r) {
    hunt_scrape_final(r);
    hunt_results *res = &r->res;
    res->client.wall_s = hunt_now(r);
    res->client.cpu_s = hunt_cpu_s() - r->cpu0;
    res->client.peak_in_flight = r->sess_peak;
    res->client.bytes = hunt_client_bytes(r->client);
    res->client.interrupted = r->cfg.stop && *r->cfg.stop;
}
