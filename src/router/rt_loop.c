/* SPDX-License-Identifier: MIT */
/*
 * rt_loop: the event-driven proxy path (flag router-loop N >= 1): N loop threads, each running
 * libcurl's multi interface on its own epoll set, drive every request's backend transfers; no
 * thread per request, no worker to wake.
 *
 * Hand-off: srv_http's event thread (rt_on_request) appends a complete request to a loop's queue
 * (round robin over the loops) under the queue's lock; it writes the loop's eventfd only when the
 * loop is about to sleep or sleeping (`sleeping`, set before the loop's last look at the queue
 * and read after the append, both sequentially consistent, so no request is left behind). A
 * busy loop sees `queued` between two backend events and takes the request without a wake-up,
 * starting its transfer at once (curl_multi_socket_action on the timeout, not at the next turn).
 *
 * One request (rt_lcall) behaves as rt_proxy in router.c (see its design note): the same choice
 * (rt_policy_choose over the prompt's prefix hashes), the same retries while nothing was passed
 * on (no connection, a cut answer, a 503 or 429), the same whole answers held and sent complete,
 * the same error event and no [DONE] when a backend fails mid-stream, the same metrics. Each
 * attempt is one easy handle on the loop's multi handle, whose connection cache keeps the
 * backends' connections alive between requests (each loop has its own cache). libcurl calls
 * back on the loop thread only: the write callback appends the backend's bytes to `held`, moves
 * the complete SSE events into `out` and writes `out` to the client with srv_http_stream_write
 * and timeout 0, so the loop never blocks. The request overhead sample is taken in libcurl's
 * pre-request callback (as http_fetch's on_send), the event sample when `out` was written.
 *
 * Backpressure: when the client's output is full (ERR_BUSY) `out` waits and the call is marked
 * blocked; the next bytes the backend sends are refused with CURL_WRITEFUNC_PAUSE (libcurl keeps
 * them and stops reading that connection). srv_http has no "writable" notification, so the loop
 * retries the write of every blocked call every RT_LOOP_ROOM_MS (bounded: only while some call is
 * blocked, one write attempt per blocked call each time); once `out` is written the transfer is
 * resumed (curl_easy_pause CONT, which delivers what libcurl kept). A transfer that ends while
 * `out` waits leaves the call "ending": the rest, then the stream's end (or the error event), go
 * out as the client drains. A client gone is seen by the transfer's progress callback (as
 * http_fetch's should_abort) or by the blocked write's ERR_CANCELLED: the transfer is removed.
 *
 * Disaggregated requests: rt_disagg_start starts the prefill as a further easy handle of the
 * same request on the same loop; when it fails, the cancel POST is one more. The request ends
 * (released, r->active decremented) only once its prefill part ended, as on the worker path.
 *
 * Shutdown (rt_loops_stop, after srv_http_shutdown: every client is gone by then): each loop
 * answers its queue 503, removes every transfer, releases every request and exits.
 *
 * Threads: everything below belongs to its loop's thread except the queue (q_mu) and
 * `sleeping`/`stop` (atomics). The loop calls into srv_http (which takes the layer's lock
 * briefly) and rt_policy/rt_backend (r->mu, briefly); never a blocking call but epoll_wait.
 */
#include "router/rt_int.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* how often blocked calls retry their write (see the design note) */
#define RT_LOOP_ROOM_MS   2
#define RT_LOOP_EVENTS    64
#define RT_LOOP_MAX_CONNS 4096L /* idle backend connections a loop keeps */
#define RT_LOOP_SPARE     64    /* easy handles a loop keeps for reuse */

/* a request's transfers: the answer's, P's request, the cancel after P failed, the cancel after
 * the decode server was given up (rt_int.h, rt_prefill) */
enum { RT_X_MAIN, RT_X_PREFILL, RT_X_CANCEL, RT_X_DCANCEL };

typedef struct rt_loop rt_loop;
typedef struct rt_lcall rt_lcall;

/* One transfer of a request: its easy handle and what libcurl tells about it. */
typedef struct rt_xfer {
    int kind; /* RT_X_* */
    rt_lcall *c;
    CURL *e; /* NULL when none is running */
    struct curl_slist *hd;
    char errbuf[CURL_ERROR_SIZE];
    int data_rc;  /* what the write callback refused the bytes with */
    bool aborted; /* the progress callback said so (the client went away) */
    int64_t t0;
    char url[1200];
} rt_xfer;

struct rt_lcall {
    rt_loop *L;
    router *r;
    srv_http_req *req;
    rt_lcall *prev, *next; /* the loop's calls (qnext: the queue's) */
    rt_lcall *qnext;
    int64_t req_t0; /* the body complete (ns); 0 once the request overhead is counted */
    /* the request */
    const char *body;
    size_t blen;
    bool post, gen;
    int role;
    uint64_t tried;
    char *dbody; /* D's body with its transfer (disaggregated), owned */
    size_t dlen;
    bool have_whole; /* held is a complete answer worth passing on if nothing better */
    char last_err[400];
    /* the attempt */
    rt_xfer x;
    int b;
    long status;
    bool sse, begun;
    int write_rc;     /* the client's write failed (gone) */
    bool blocked;     /* out waits for room on the client */
    bool paused;      /* the transfer is paused (CURL_WRITEFUNC_PAUSE) */
    bool ending;      /* the transfer is over: out, then the stream's end */
    strbuf held;      /* a whole answer, or a stream's bytes after its last complete event */
    strbuf out;       /* complete events not yet written to the client */
    int64_t out_t0;   /* when out's oldest bytes arrived */
    char ctype[128];
    bool main_done; /* the client's answer is given (or it is gone) */
    /* the prefill part */
    rt_prefill *pf;
    rt_xfer px;
    strbuf pans;     /* P's answer */
    long pstatus;
    int prc;         /* P's transfer's code */
    int64_t pt0;     /* P's request started */
    char cbody[64];  /* the cancel's body */
    bool pf_running; /* px runs P's request or the cancel */
    rt_xfer dx;      /* the cancel to the decode server given up (RT_X_DCANCEL) */
    char dcbody[64];
    bool dx_running;
};

struct rt_loop {
    router *r;
    int id;
    pthread_t thread;
    bool started;
    int ep, evfd;
    CURLM *multi;
    int64_t curl_due_ns; /* libcurl's timer (-1: none) */
    rt_lcall *calls;
    int n_blocked; /* calls with blocked set */
    CURL *spare[RT_LOOP_SPARE];
    int n_spare;
    uint64_t h[RT_MAX_BLOCKS]; /* the prompt's block hashes of the call being routed */
    /* shared with the submitters */
    pthread_mutex_t q_mu;
    rt_lcall *q_head, *q_tail;
    atomic_bool sleeping, stop;
    atomic_bool queued; /* set by a submitter after its append: the loop looks between events */
};

/* ---- transfers ---- */

static CURL *rt_loop_easy(rt_loop *L) {
    if (L->n_spare > 0) {
        CURL *e = L->spare[--L->n_spare];
        curl_easy_reset(e);
        return e;
    }
    return curl_easy_init();
}

/* Removes x's handle from the multi handle and keeps it for reuse. */
static void rt_xfer_end(rt_loop *L, rt_xfer *x) {
    if (!x->e)
        return;
    curl_multi_remove_handle(L->multi, x->e);
    if (L->n_spare < RT_LOOP_SPARE)
        L->spare[L->n_spare++] = x->e;
    else
        curl_easy_cleanup(x->e);
    x->e = NULL;
    curl_slist_free_all(x->hd);
    x->hd = NULL;
}

/* x's code, as http_fetch_run maps libcurl's (err_detail names the URL). */
static int rt_xfer_rc(rt_xfer *x, CURLcode cc) {
    if (cc != CURLE_OK && x->data_rc)
        return x->data_rc;
    if (cc != CURLE_OK && x->aborted)
        return err_set(ERR_CANCELLED, "%s: abandoned by the caller", x->url);
    return http_fetch_code(cc, x->url, x->errbuf);
}

static size_t rt_main_write(char *p, size_t size, size_t nmemb, void *ud);
static size_t rt_pre_write(char *p, size_t size, size_t nmemb, void *ud);
static int rt_main_prereq(void *ud, char *ip, char *local_ip, int port, int local_port);
static int rt_main_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un);

/* Starts x: method (NULL: POST with body, else GET) to x->url, with the options http_fetch_run
 * sets. Returns 0, or ERR_NOMEM / ERR_INTERNAL (nothing started). */
static int rt_xfer_start(rt_loop *L, rt_xfer *x, const char *method, const char *body,
                         size_t blen) {
    router *r = L->r;
    CURL *e = rt_loop_easy(L);
    if (!e)
        return err_set(ERR_NOMEM, "router: libcurl could not create a handle");
    x->errbuf[0] = 0;
    x->data_rc = 0;
    x->aborted = false;
    x->t0 = clock_now_ns();
    http_fetch_req q = {.url = x->url,
                        .method = method,
                        .body = body,
                        .body_len = blen,
                        .api_key = r->backend_api_key,
                        .timeout_s = r->o.timeout_s};
    struct curl_slist *hd = http_fetch_easy_setup(e, &q, x->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, x->kind == RT_X_MAIN ? rt_main_write : rt_pre_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    if (x->kind == RT_X_MAIN) {
        curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, rt_main_prereq);
        curl_easy_setopt(e, CURLOPT_PREREQDATA, x->c);
        curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, rt_main_progress);
        curl_easy_setopt(e, CURLOPT_XFERINFODATA, x->c);
        curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    }
    x->e = e;
    x->hd = hd;
    if (curl_multi_add_handle(L->multi, e) != CURLM_OK) {
        x->e = NULL;
        x->hd = NULL;
        curl_slist_free_all(hd);
        curl_easy_cleanup(e);
        return err_set(ERR_INTERNAL, "router: libcurl refused a transfer to %s", x->url);
    }
    return 0;
}

/* ---- one request: writing to the client ---- */

/* Writes out to the client, beginning the stream if needed. Returns 0 (out is empty), ERR_BUSY
 * (the client's output is full: out waits, the call is blocked) or the write's error (gone:
 * write_rc). Never blocks. */
static int rt_call_flush(rt_lcall *c) {
    if (c->write_rc)
        return c->write_rc;
    if (!c->out.len)
        return 0;
    if (!c->begun) {
        int rc = srv_http_stream_begin(c->req, (int)c->status, RT_SSE_HEADERS);
        if (rc)
            return c->write_rc = rc;
        c->begun = true;
    }
    int rc = srv_http_stream_write(c->req, c->out.data, c->out.len, 0);
    if (rc == ERR_BUSY) {
        if (!c->blocked)
            c->L->n_blocked++;
        c->blocked = true;
        return rc;
    }
    if (c->blocked)
        c->L->n_blocked--;
    c->blocked = false;
    if (rc)
        return c->write_rc = rc;
    rt_overhead_add(c->r, RT_OVH_EVENT, clock_now_ns() - c->out_t0);
    c->out.len = 0;
    return 0;
}

/* Moves the complete events of held into out. */
static void rt_call_take_events(rt_lcall *c, int64_t t_in) {
    size_t end = rt_sse_complete(c->held.data, c->held.len);
    if (!end)
        return;
    if (!c->out.len)
        c->out_t0 = t_in;
    strbuf_append(&c->out, c->held.data, end);
    memmove(c->held.data, c->held.data + end, c->held.len - end);
    c->held.len -= end;
}

static size_t rt_main_write(char *p, size_t size, size_t nmemb, void *ud) {
    rt_xfer *x = ud;
    rt_lcall *c = x->c;
    size_t n = size * nmemb;
    int64_t t_in = clock_now_ns();
    if (c->blocked) { /* the client is full: libcurl keeps these bytes and stops reading */
        c->paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (!c->status) {
        char *ct = NULL;
        curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &c->status);
        curl_easy_getinfo(x->e, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(c->ctype, sizeof c->ctype, "%s", ct ? ct : "");
        c->sse = c->status >= 200 && c->status < 300 &&
                 !strncmp(c->ctype, "text/event-stream", 17);
    }
    strbuf_append(&c->held, p, n);
    if (strbuf_failed(&c->held) || c->held.len > RT_MAX_ANSWER_BYTES) {
        x->data_rc = ERR_NOMEM;
        return n == 0 ? 1 : 0; /* anything but n aborts the transfer */
    }
    if (!c->sse)
        return n;
    rt_call_take_events(c, t_in);
    if (strbuf_failed(&c->out)) {
        x->data_rc = ERR_NOMEM;
        return n == 0 ? 1 : 0;
    }
    int rc = rt_call_flush(c);
    if (rc && rc != ERR_BUSY) {
        x->data_rc = rc;
        return n == 0 ? 1 : 0;
    }
    return n; /* taken; when blocked, the next bytes pause the transfer */
}

/* libcurl's pre-request hook: the request is about to be written to its backend. */
static int rt_main_prereq(void *ud, char *ip, char *local_ip, int port, int local_port) {
    (void)ip, (void)local_ip, (void)port, (void)local_port;
    rt_lcall *c = ud;
    if (c->req_t0) {
        rt_overhead_add(c->r, RT_OVH_REQUEST, clock_now_ns() - c->req_t0);
        c->req_t0 = 0;
    }
    return CURL_PREREQFUNC_OK;
}

static int rt_main_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                            curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    rt_lcall *c = ud;
    if (srv_http_request_gone(c->req)) {
        c->x.aborted = true;
        return 1;
    }
    return 0;
}

/* ---- one request: its lifecycle ---- */

static void rt_call_free(rt_lcall *c) {
    rt_loop *L = c->L;
    rt_xfer_end(L, &c->x);
    rt_xfer_end(L, &c->px);
    rt_xfer_end(L, &c->dx);
    if (c->blocked)
        L->n_blocked--;
    if (c->prev)
        c->prev->next = c->next;
    else if (L->calls == c)
        L->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    strbuf_deinit(&c->held);
    strbuf_deinit(&c->out);
    strbuf_deinit(&c->pans);
    free(c->dbody);
    if (c->pf) {
        free(c->pf->body);
        free(c->pf);
    }
    srv_http_req_release(c->req);
    atomic_fetch_sub(&c->r->active, 1);
    free(c);
}

/* The client's answer is given or it is gone: the call ends once its prefill part and its
 * decode-side cancel have too. */
static void rt_call_main_done(rt_lcall *c) {
    c->main_done = true;
    if (c->blocked)
        c->L->n_blocked--;
    c->blocked = false;
    if (!c->pf_running && !c->dx_running)
        rt_call_free(c);
}

/* The decode server that got the request with its transfer is given up before it answered: the
 * transfer is cancelled there (rt_int.h, rt_prefill), as one more transfer of the call. */
static void rt_call_cancel_decode(rt_lcall *c) {
    if (!c->pf || c->dx_running)
        return;
    int n = rt_prefill_cancel_body(c->pf, c->dcbody, sizeof c->dcbody);
    c->dx.kind = RT_X_DCANCEL;
    snprintf(c->dx.url, sizeof c->dx.url, "%s", c->pf->cancel_url);
    int rc = rt_xfer_start(c->L, &c->dx, NULL, c->dcbody, (size_t)n);
    if (rc)
        rt_prefill_cancel_done(c->pf, rc, 0);
    c->dx_running = rc == 0;
}

/* The decode-side cancel ended with rc. */
static void rt_dcancel_done(rt_lcall *c, int rc) {
    long status = 0;
    curl_easy_getinfo(c->dx.e, CURLINFO_RESPONSE_CODE, &status);
    rt_xfer_end(c->L, &c->dx);
    rt_prefill_cancel_done(c->pf, rc, status);
    c->dx_running = false;
    if (c->main_done && !c->pf_running)
        rt_call_free(c);
}

/* An ending stream: writes what is left of out, then ends the stream and the call. Returns
 * whether the call ended (else it waits for room). */
static bool rt_call_end_stream(rt_lcall *c) {
    int rc = rt_call_flush(c);
    if (rc == ERR_BUSY)
        return false;
    if (!rc)
        srv_http_stream_end(c->req);
    rt_call_main_done(c);
    return true;
}

static int rt_pre_start(rt_prefill *pf, void *ud);

/* Starts the next attempt of c, or answers it when no backend is left. */
static void rt_call_next(rt_lcall *c) {
    rt_loop *L = c->L;
    router *r = c->r;
    const char *method = srv_http_req_method(c->req), *path = srv_http_req_path(c->req),
               *query = srv_http_req_query(c->req);
    for (;;) {
        int nh = c->post ? rt_prefix_hashes(c->body, c->blen, L->h) : 0;
        int b = rt_policy_choose(r, L->h, nh, c->tried, c->role);
        if (b < 0)
            break;
        bool first = c->tried == 0;
        c->tried |= 1ull << b;
        if (c->gen && first) {
            c->dbody = rt_disagg_start(r, b, path, c->body, c->blen, L->h, nh, rt_pre_start, c,
                                       &c->pf, &c->dlen);
        } else if (c->dbody) { /* a retry on another decode server: no transfer, it computes */
            free(c->dbody);
            c->dbody = NULL;
            rt_call_cancel_decode(c); /* the first one will not take the transfer */
        }
        c->b = b;
        snprintf(c->x.url, sizeof c->x.url, "%s%s%s%s", r->backends[b].url, path,
                 query[0] ? "?" : "", query);
        c->status = 0;
        c->sse = false;
        c->ctype[0] = 0;
        strbuf_reset(&c->held);
        int rc = rt_xfer_start(L, &c->x, c->post ? NULL : "GET",
                               c->post ? (c->dbody ? c->dbody : c->body) : NULL,
                               c->dbody ? c->dlen : c->blen);
        if (!rc)
            return;
        snprintf(c->last_err, sizeof c->last_err, "%s", err_detail());
        rt_backend_done(r, b, RT_OUT_RETRIED, 0, false);
        c->have_whole = false;
        log_warn("router: %s %s: %s", method, path, c->last_err);
    }
    if (c->dbody) /* the decode server that got the transfer did not take the request */
        rt_call_cancel_decode(c);
    if (c->have_whole) {
        rt_respond_whole(c->req, c->status, c->ctype, &c->held);
    } else {
        char msg[600];
        snprintf(msg, sizeof msg, "no backend could take the request (%s)", c->last_err);
        rt_send_error(c->req, 503, "server_error", "no_backend", "Retry-After: 1\r\n", msg);
    }
    rt_call_main_done(c);
}

/* The attempt ended with rc (and the status libcurl saw): rt_proxy's decisions. */
static void rt_call_attempt_done(rt_lcall *c, int rc) {
    router *r = c->r;
    double secs = (double)(clock_now_ns() - c->x.t0) * 1e-9;
    if (!c->status && c->x.e)
        curl_easy_getinfo(c->x.e, CURLINFO_RESPONSE_CODE, &c->status);
    rt_xfer_end(c->L, &c->x);
    const char *base = r->backends[c->b].url;
    if (rc == 0 || c->write_rc || rc == ERR_CANCELLED) {
        /* refused before any work (loading, draining, full): another backend may take it */
        bool retry_503 = rc == 0 && !c->begun && (c->status == 503 || c->status == 429);
        rt_backend_done(r, c->b, retry_503 ? RT_OUT_RETRIED : RT_OUT_OK, secs, false);
        if (c->write_rc || rc == ERR_CANCELLED) { /* the client went away */
            rt_call_main_done(c);
            return;
        }
        if (retry_503) {
            snprintf(c->last_err, sizeof c->last_err, "%s answered %ld", base, c->status);
            c->have_whole = true;
            rt_call_next(c);
            return;
        }
        if (c->begun || c->out.len) {
            strbuf_append(&c->out, c->held.data, c->held.len); /* a last event without its
                                                                   blank line */
            c->held.len = 0;
            c->ending = true;
            rt_call_end_stream(c);
        } else {
            rt_respond_whole(c->req, c->status, c->ctype, &c->held);
            rt_call_main_done(c);
        }
        return;
    }
    snprintf(c->last_err, sizeof c->last_err, "%s", err_detail());
    rt_backend_done(r, c->b, c->begun || c->out.len ? RT_OUT_ERROR : RT_OUT_RETRIED, secs,
                    rc == ERR_CONNECT || (rc == ERR_PROTOCOL && !c->status));
    if (c->begun || c->out.len) {
        if (!c->out.len)
            c->out_t0 = clock_now_ns();
        rt_stream_error_event(&c->out, base, c->last_err);
        c->ending = true;
        rt_call_end_stream(c);
        return;
    }
    c->have_whole = false;
    log_info("router: %s %s on %s failed before anything was passed on (%s); retrying",
             srv_http_req_method(c->req), srv_http_req_path(c->req), base, c->last_err);
    rt_call_next(c);
}

/* A request taken from the queue. */
static void rt_call_begin(rt_loop *L, rt_lcall *c) {
    router *r = L->r;
    c->next = L->calls;
    if (L->calls)
        L->calls->prev = c;
    L->calls = c;
    if (atomic_load(&r->draining) || atomic_load(&L->stop)) {
        rt_send_error(c->req, 503, "server_error", NULL, NULL, "the router is shutting down");
        rt_call_main_done(c);
        return;
    }
    const char *path = srv_http_req_path(c->req);
    c->body = srv_http_req_body(c->req, &c->blen);
    c->post = !strcmp(srv_http_req_method(c->req), "POST");
    c->role = r->disagg ? ROUTER_ROLE_DECODE : ROUTER_ROLE_REPLICA;
    c->gen = r->disagg && c->post &&
             (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions"));
    snprintf(c->last_err, sizeof c->last_err, "no backend is up");
    rt_call_next(c);
}

/* ---- the prefill part ---- */

static size_t rt_pre_write(char *p, size_t size, size_t nmemb, void *ud) {
    rt_xfer *x = ud;
    size_t n = size * nmemb;
    if (x->kind == RT_X_CANCEL || x->kind == RT_X_DCANCEL)
        return n;
    int rc = rt_prefill_answer_add(&x->c->pans, p, n);
    if (rc) {
        x->data_rc = rc;
        return n == 0 ? 1 : 0;
    }
    return n;
}

/* rt_disagg_start's start: P's request as a further transfer of call ud. */
static int rt_pre_start(rt_prefill *pf, void *ud) {
    rt_lcall *c = ud;
    c->px.kind = RT_X_PREFILL;
    c->px.c = c;
    snprintf(c->px.url, sizeof c->px.url, "%s", pf->url);
    c->pt0 = clock_now_ns();
    int rc = rt_xfer_start(c->L, &c->px, NULL, pf->body, pf->len);
    c->pf_running = rc == 0;
    return rc;
}

/* P's request or the cancel ended with rc. */
static void rt_pre_done(rt_lcall *c, int rc) {
    rt_prefill *pf = c->pf;
    long status = 0;
    curl_easy_getinfo(c->px.e, CURLINFO_RESPONSE_CODE, &status);
    int kind = c->px.kind;
    rt_xfer_end(c->L, &c->px);
    if (kind == RT_X_PREFILL) {
        c->prc = rc;
        c->pstatus = status;
        if (rt_prefill_failed(pf, rc, status, &c->pans)) {
            int n = rt_prefill_cancel_body(pf, c->cbody, sizeof c->cbody);
            c->px.kind = RT_X_CANCEL;
            snprintf(c->px.url, sizeof c->px.url, "%s", pf->cancel_url);
            int src = rt_xfer_start(c->L, &c->px, NULL, c->cbody, (size_t)n);
            if (!src)
                return;
            rt_prefill_cancel_done(pf, src, 0);
        }
    } else {
        rt_prefill_cancel_done(pf, rc, status);
    }
    rt_backend_done(c->r, pf->b, c->prc || c->pstatus != 200 ? RT_OUT_ERROR : RT_OUT_OK,
                    (double)(clock_now_ns() - c->pt0) * 1e-9, c->prc == ERR_CONNECT);
    c->pf_running = false;
    if (c->main_done && !c->dx_running)
        rt_call_free(c);
}

/* ---- the loop ---- */

/* libcurl's socket callback: keeps the epoll set in step with what libcurl waits for. */
static int rt_loop_sock(CURL *e, curl_socket_t fd, int what, void *ud, void *sockp) {
    (void)e;
    rt_loop *L = ud;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(L->ep, EPOLL_CTL_DEL, fd, NULL); /* may be closed already: ignored */
        curl_multi_assign(L->multi, fd, NULL);
        return 0;
    }
    struct epoll_event ev = {.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) |
                                       (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                             .data.fd = fd};
    if (sockp) {
        epoll_ctl(L->ep, EPOLL_CTL_MOD, fd, &ev);
    } else {
        if (epoll_ctl(L->ep, EPOLL_CTL_ADD, fd, &ev) && errno == EEXIST)
            epoll_ctl(L->ep, EPOLL_CTL_MOD, fd, &ev);
        curl_multi_assign(L->multi, fd, L); /* any non-NULL mark: the fd is in the set */
    }
    return 0;
}

/* libcurl's timer callback: when to call it with CURL_SOCKET_TIMEOUT (-1: no timer). */
static int rt_loop_timer(CURLM *m, long timeout_ms, void *ud) {
    (void)m;
    rt_loop *L = ud;
    L->curl_due_ns = timeout_ms < 0 ? -1 : clock_now_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}

/* Hands every finished transfer to its request. */
static void rt_loop_finished(rt_loop *L) {
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(L->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        char *priv = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
        rt_xfer *x = (rt_xfer *)(void *)priv;
        if (!x)
            continue;
        CURLcode cc = m->data.result; /* m is invalid once the handle is removed */
        int rc = rt_xfer_rc(x, cc);
        if (x->kind == RT_X_MAIN)
            rt_call_attempt_done(x->c, rc);
        else if (x->kind == RT_X_DCANCEL)
            rt_dcancel_done(x->c, rc);
        else
            rt_pre_done(x->c, rc);
    }
}

/* Retries the write of every blocked call (the design note's room poll). */
static void rt_loop_room(rt_loop *L) {
    rt_lcall *c = L->calls, *next;
    for (; c && L->n_blocked > 0; c = next) {
        next = c->next;
        if (!c->blocked)
            continue;
        if (c->ending) {
            rt_call_end_stream(c);
            continue;
        }
        int rc = rt_call_flush(c);
        if (rc == ERR_BUSY)
            continue;
        if (rc) { /* the client went away: end the transfer as rt_proxy does */
            rt_call_attempt_done(c, rc);
            continue;
        }
        if (c->paused) {
            c->paused = false;
            curl_easy_pause(c->x.e, CURLPAUSE_CONT); /* delivers what libcurl kept */
        }
    }
}

/* Takes the queue's requests and starts their transfers at once (libcurl's timer would
 * otherwise start them only after the events of this turn). */
static void rt_loop_take(rt_loop *L) {
    atomic_store(&L->queued, false);
    pthread_mutex_lock(&L->q_mu);
    rt_lcall *c = L->q_head;
    L->q_head = L->q_tail = NULL;
    pthread_mutex_unlock(&L->q_mu);
    if (!c)
        return;
    while (c) {
        rt_lcall *next = c->qnext;
        rt_call_begin(L, c);
        c = next;
    }
    int running = 0;
    L->curl_due_ns = -1;
    curl_multi_socket_action(L->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    rt_loop_finished(L);
}

static void *rt_loop_main(void *arg) {
    rt_loop *L = arg;
    struct epoll_event evs[RT_LOOP_EVENTS];
    int running = 0;
    int64_t room_due = 0;
    while (!atomic_load(&L->stop)) {
        rt_loop_take(L);
        int64_t now = clock_now_ns();
        int wait_ms = -1;
        if (L->curl_due_ns >= 0)
            wait_ms = L->curl_due_ns <= now ? 0 : (int)((L->curl_due_ns - now + 999999) / 1000000);
        if (L->n_blocked > 0) {
            if (!room_due)
                room_due = now + (int64_t)RT_LOOP_ROOM_MS * 1000000;
            int w = room_due <= now ? 0 : (int)((room_due - now + 999999) / 1000000);
            wait_ms = wait_ms < 0 || w < wait_ms ? w : wait_ms;
        }
        /* the last look at the queue after `sleeping` is set: a submitter that appended before
         * it is seen here, one that appends after sees `sleeping` and writes the eventfd */
        atomic_store(&L->sleeping, true);
        pthread_mutex_lock(&L->q_mu);
        bool queued = L->q_head != NULL;
        pthread_mutex_unlock(&L->q_mu);
        if (queued || atomic_load(&L->stop))
            wait_ms = 0;
        int n = epoll_wait(L->ep, evs, RT_LOOP_EVENTS, wait_ms);
        atomic_store(&L->sleeping, false);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd == L->evfd) {
                uint64_t v;
                ssize_t k = read(L->evfd, &v, sizeof v);
                (void)k;
                continue;
            }
            int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                        (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(L->multi, evs[i].data.fd, flags, &running);
            if (atomic_load(&L->queued)) /* a request arrived: it goes before the next event */
                rt_loop_take(L);
        }
        now = clock_now_ns();
        if (L->curl_due_ns >= 0 && L->curl_due_ns <= now) {
            L->curl_due_ns = -1;
            curl_multi_socket_action(L->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        rt_loop_finished(L);
        if (L->n_blocked > 0 && room_due && room_due <= clock_now_ns()) {
            room_due = 0;
            rt_loop_room(L);
            rt_loop_finished(L);
        } else if (L->n_blocked == 0) {
            room_due = 0;
        }
    }
    /* stop: every client is gone (srv_http_shutdown returned); answer the queue, end the rest */
    rt_loop_take(L);
    while (L->calls) {
        rt_lcall *c = L->calls;
        if (c->pf_running) {
            rt_xfer_end(L, &c->px);
            c->pf_running = false;
            rt_backend_done(L->r, c->pf->b, RT_OUT_ERROR, 0, false);
        }
        if (c->dx_running) {
            rt_xfer_end(L, &c->dx);
            c->dx_running = false;
        }
        if (c->x.e) {
            rt_xfer_end(L, &c->x);
            rt_backend_done(L->r, c->b, RT_OUT_OK, 0, false);
        }
        if (c->main_done)
            rt_call_free(c);
        else
            rt_call_main_done(c);
    }
    return NULL;
}

void rt_loop_submit(router *r, srv_http_req *req, int64_t t0_ns) {
    unsigned k = atomic_fetch_add(&r->loop_turn, 1) % (unsigned)r->o.loops;
    rt_loop *L = r->loops[k];
    rt_lcall *c = calloc(1, sizeof *c);
    if (!c) {
        rt_send_error(req, 500, "server_error", NULL, NULL, "the router is out of memory");
        srv_http_req_release(req);
        atomic_fetch_sub(&r->active, 1);
        return;
    }
    c->L = L;
    c->r = r;
    c->req = req;
    c->req_t0 = t0_ns ? t0_ns : 1;
    c->x.kind = RT_X_MAIN;
    c->x.c = c;
    c->px.c = c;
    c->dx.c = c;
    strbuf_init(&c->held);
    strbuf_init(&c->out);
    strbuf_init(&c->pans);
    pthread_mutex_lock(&L->q_mu);
    if (L->q_tail)
        L->q_tail->qnext = c;
    else
        L->q_head = c;
    L->q_tail = c;
    pthread_mutex_unlock(&L->q_mu);
    atomic_store(&L->queued, true);
    if (atomic_load(&L->sleeping)) {
        uint64_t one = 1;
        ssize_t n = write(L->evfd, &one, sizeof one);
        (void)n;
    }
}

static void rt_loop_free(rt_loop *L) {
    if (!L)
        return;
    if (L->started) {
        atomic_store(&L->stop, true);
        uint64_t one = 1;
        ssize_t n = write(L->evfd, &one, sizeof one);
        (void)n;
        pthread_join(L->thread, NULL);
    }
    for (int i = 0; i < L->n_spare; i++)
        curl_easy_cleanup(L->spare[i]);
    if (L->multi)
        curl_multi_cleanup(L->multi);
    if (L->ep >= 0)
        close(L->ep);
    if (L->evfd >= 0)
        close(L->evfd);
    pthread_mutex_destroy(&L->q_mu);
    free(L);
}

static int rt_loop_create(router *r, int id, rt_loop **out) {
    *out = NULL;
    rt_loop *L = calloc(1, sizeof *L);
    if (!L)
        return err_set(ERR_NOMEM, "router: out of memory");
    L->r = r;
    L->id = id;
    L->ep = L->evfd = -1;
    L->curl_due_ns = -1;
    pthread_mutex_init(&L->q_mu, NULL);
    *out = L;
    L->ep = epoll_create1(EPOLL_CLOEXEC);
    L->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (L->ep < 0 || L->evfd < 0)
        return err_set(ERR_INTERNAL, "router: proxy loop %d: epoll or eventfd: %s", id,
                       strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = L->evfd};
    if (epoll_ctl(L->ep, EPOLL_CTL_ADD, L->evfd, &ev))
        return err_set(ERR_INTERNAL, "router: proxy loop %d: epoll_ctl: %s", id, strerror(errno));
    L->multi = curl_multi_init();
    if (!L->multi)
        return err_set(ERR_INTERNAL, "router: proxy loop %d: libcurl's multi handle", id);
    curl_multi_setopt(L->multi, CURLMOPT_SOCKETFUNCTION, rt_loop_sock);
    curl_multi_setopt(L->multi, CURLMOPT_SOCKETDATA, L);
    curl_multi_setopt(L->multi, CURLMOPT_TIMERFUNCTION, rt_loop_timer);
    curl_multi_setopt(L->multi, CURLMOPT_TIMERDATA, L);
    curl_multi_setopt(L->multi, CURLMOPT_MAXCONNECTS, RT_LOOP_MAX_CONNS);
    if (pthread_create(&L->thread, NULL, rt_loop_main, L))
        return err_set(ERR_INTERNAL, "router: proxy loop %d: cannot start its thread", id);
    L->started = true;
    return 0;
}

int rt_loops_start(router *r) {
    r->loops = calloc((size_t)r->o.loops, sizeof *r->loops);
    if (!r->loops)
        return err_set(ERR_NOMEM, "router: out of memory");
    for (int i = 0; i < r->o.loops; i++) {
        int rc = rt_loop_create(r, i, &r->loops[i]);
        if (rc) {
            rt_loops_stop(r);
            return rc;
        }
    }
    return 0;
}

void rt_loops_stop(router *r) {
    if (!r->loops)
        return;
    for (int i = 0; i < r->o.loops; i++)
        rt_loop_free(r->loops[i]);
    free(r->loops);
    r->loops = NULL;
}
