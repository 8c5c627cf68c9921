/* SPDX-License-Identifier: MIT */
/*
 * hunt_client: libcurl multi + epoll. See hunt_client.h.
 *
 * libcurl tells us which sockets to watch (socket callback) and when it next needs a timeout
 * (timer callback); we keep the epoll set in step and call curl_multi_socket_action for each
 * ready socket or an expired timer. Completed transfers are collected with curl_multi_info_read
 * after libcurl returns, and only then are on_done callbacks run, so they may submit new requests
 * or cancel others. Easy handles are recycled through a free list; connections stay in libcurl's
 * cache (max_conns) for keep-alive reuse.
 */
#include "hunt/hunt_client.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/http_fetch.h"
#include "base/list.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

struct hunt_http {
    hunt_client *c;
    CURL *easy;
    struct curl_slist *headers;
    hunt_http_data_fn on_data;
    hunt_http_done_fn on_done;
    void *ud;
    int data_rc; /* error returned by on_data */
    char errbuf[CURL_ERROR_SIZE];
    hunt_http *next_free;
    list_link in_flight; /* in the client's list of requests in flight */
    bool active;
};

struct hunt_client {
    CURLM *multi;
    int ep;
    int64_t timer_deadline_ns; /* -1: none */
    int in_flight, peak;
    int64_t completed, bytes;
    hunt_http *free_list;
    list active; /* of hunt_http: the requests in flight */
};

static int hunt_curl_refs;

static int hunt_curl_global(void) {
    if (hunt_curl_refs++ == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        hunt_curl_refs = 0;
        return err_set(ERR_INTERNAL, "libcurl global initialisation failed");
    }
    return 0;
}

static void hunt_curl_global_release(void) {
    if (hunt_curl_refs > 0 && --hunt_curl_refs == 0)
        curl_global_cleanup();
}

static int hunt_sock_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
    (void)easy;
    hunt_client *c = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(c->ep, EPOLL_CTL_DEL, s, NULL);
        curl_multi_assign(c->multi, s, NULL);
        return 0;
    }
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.data.fd = s;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        ev.events |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        ev.events |= EPOLLOUT;
    if (socketp) {
        epoll_ctl(c->ep, EPOLL_CTL_MOD, s, &ev);
    } else {
        if (epoll_ctl(c->ep, EPOLL_CTL_ADD, s, &ev) != 0 && errno == EEXIST)
            epoll_ctl(c->ep, EPOLL_CTL_MOD, s, &ev);
        curl_multi_assign(c->multi, s, (void *)1);
    }
    return 0;
}

static int hunt_timer_cb(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    hunt_client *c = userp;
    c->timer_deadline_ns = timeout_ms < 0 ? -1 : clock_now_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}

static size_t hunt_write_cb(char *p, size_t size, size_t nmemb, void *ud) {
    hunt_http *h = ud;
    size_t n = size * nmemb;
    h->c->bytes += (int64_t)n;
    if (h->on_data) {
        long status = 0;
        curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
        int rc = h->on_data(h->ud, status, p, n);
        if (rc) {
            h->data_rc = rc;
            return 0; /* makes libcurl abort with CURLE_WRITE_ERROR */
        }
    }
    return n;
}

int hunt_client_create(int max_conns, hunt_client **out) {
    if (hunt_curl_global())
        return ERR_INTERNAL;
    hunt_client *c = calloc(1, sizeof *c);
    if (!c) {
        hunt_curl_global_release();
        return err_set(ERR_NOMEM, "out of memory creating the HTTP client");
    }
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    c->multi = curl_multi_init();
    c->timer_deadline_ns = -1;
    if (c->ep < 0 || !c->multi) {
        if (c->ep >= 0)
            close(c->ep);
        if (c->multi)
            curl_multi_cleanup(c->multi);
        free(c);
        hunt_curl_global_release();
        return err_set(ERR_INTERNAL, "cannot create the HTTP event loop (epoll or libcurl)");
    }
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, hunt_sock_cb);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, hunt_timer_cb);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)(max_conns > 0 ? max_conns + 8 : 64));
    curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    /* each connection needs a descriptor; leave room for the rest of the process */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)max_conns * 2 + 64) {
        rlim_t want = (rlim_t)max_conns * 2 + 64;
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    *out = c;
    return 0;
}

static void hunt_http_release(hunt_client *c, hunt_http *h) {
    curl_multi_remove_handle(c->multi, h->easy);
    curl_slist_free_all(h->headers);
    h->headers = NULL;
    h->active = false;
    list_unlink(&c->active, &h->in_flight);
    h->next_free = c->free_list;
    c->free_list = h;
    c->in_flight--;
}

void hunt_client_destroy(hunt_client *c) {
    if (!c)
        return;
    hunt_http *h;
    while ((h = LIST_ENTRY(c->active.first, hunt_http, in_flight)))
        hunt_http_release(c, h);
    while (c->free_list) {
        h = c->free_list;
        c->free_list = h->next_free;
        curl_easy_cleanup(h->easy);
        free(h);
    }
    curl_multi_cleanup(c->multi);
    close(c->ep);
    free(c);
    hunt_curl_global_release();
}

int hunt_client_submit(hunt_client *c, const hunt_http_req *r, hunt_http **out) {
    hunt_http *h = c->free_list;
    if (h) {
        c->free_list = h->next_free;
        curl_easy_reset(h->easy);
    } else {
        h = calloc(1, sizeof *h);
        if (!h || !(h->easy = curl_easy_init())) {
            free(h);
            return err_set(ERR_NOMEM, "out of memory starting a request to %s", r->url);
        }
    }
    h->c = c;
    h->on_data = r->on_data;
    h->on_done = r->on_done;
    h->ud = r->ud;
    h->data_rc = 0;
    h->errbuf[0] = 0;
    h->next_free = NULL;
    CURL *e = h->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, hunt_write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    double t = r->timeout_s > 0 ? r->timeout_s : 600;
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(t * 1000));
    struct curl_slist *hd = NULL;
    hd = curl_slist_append(hd, "Expect:");
    if (r->body)
        hd = curl_slist_append(hd, "Content-Type: application/json");
    if (r->stream)
        hd = curl_slist_append(hd, "Accept: text/event-stream");
    if (r->api_key && r->api_key[0]) {
        char auth[1024];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", r->api_key);
        hd = curl_slist_append(hd, auth);
    }
    h->headers = hd;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hd);
    if (r->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, r->body);
    }
    if (!hd || curl_multi_add_handle(c->multi, e) != CURLM_OK) {
        curl_slist_free_all(hd);
        h->headers = NULL;
        h->next_free = c->free_list;
        c->free_list = h;
        return err_set(ERR_INTERNAL, "libcurl refused a request to %s", r->url);
    }
    h->active = true;
    list_push_last(&c->active, &h->in_flight);
    c->in_flight++;
    if (c->in_flight > c->peak)
        c->peak = c->in_flight;
    if (out)
        *out = h;
    return 0;
}

void hunt_client_cancel(hunt_client *c, hunt_http *h) {
    if (h && h->active)
        hunt_http_release(c, h);
}

static void hunt_client_collect(hunt_client *c) {
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        hunt_http *h = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&h);
        if (!h || !h->active)
            continue;
        CURLcode cc = m->data.result;
        long status = 0;
        curl_off_t ra = -1;
        curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(h->easy, CURLINFO_RETRY_AFTER, &ra);
        int rc = 0;
        if (cc != CURLE_OK) {
            const char *why = h->errbuf[0] ? h->errbuf : curl_easy_strerror(cc);
            char *url = NULL;
            curl_easy_getinfo(h->easy, CURLINFO_EFFECTIVE_URL, &url);
            if (h->data_rc)
                rc = h->data_rc; /* detail was set by on_data */
            else if (cc == CURLE_OPERATION_TIMEDOUT)
                rc = err_set(ERR_TIMEOUT, "%s: %s", url ? url : "?", why);
            else if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST)
                rc = err_set(ERR_CONNECT, "%s: %s", url ? url : "?", why);
            else
                rc = err_set(ERR_PROTOCOL, "%s: %s", url ? url : "?", why);
        }
        hunt_http_done_fn done = h->on_done;
        void *ud = h->ud;
        hunt_http_release(c, h);
        c->completed++;
        if (done)
            done(ud, rc, status, ra > 0 ? (double)ra : -1);
    }
}

int hunt_client_run(hunt_client *c, int timeout_ms) {
    int64_t end = clock_now_ns() + (int64_t)timeout_ms * 1000000;
    struct epoll_event evs[256];
    int running;
    int64_t done_before = c->completed;
    for (;;) {
        int64_t now = clock_now_ns();
        int64_t wait_ns = end - now;
        if (c->timer_deadline_ns >= 0 && c->timer_deadline_ns - now < wait_ns)
            wait_ns = c->timer_deadline_ns - now;
        if (wait_ns < 0)
            wait_ns = 0;
        int wait_ms = (int)((wait_ns + 999999) / 1000000);
        int n = epoll_wait(c->ep, evs, 256, wait_ms);
        if (n < 0 && errno != EINTR)
            return err_set(ERR_INTERNAL, "epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            int flags = 0;
            if (evs[i].events & EPOLLIN)
                flags |= CURL_CSELECT_IN;
            if (evs[i].events & EPOLLOUT)
                flags |= CURL_CSELECT_OUT;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                flags |= CURL_CSELECT_ERR;
            curl_multi_socket_action(c->multi, evs[i].data.fd, flags, &running);
        }
        if (c->timer_deadline_ns >= 0 && clock_now_ns() >= c->timer_deadline_ns) {
            c->timer_deadline_ns = -1;
            curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        hunt_client_collect(c);
        if (clock_now_ns() >= end)
            break;
        if (c->in_flight == 0 && c->completed > done_before)
            break;
        /* nothing in flight and no completion yet: epoll_wait above simply slept out the
         * timeout (the caller may be waiting to retry), so the loop ends at `end` */
    }
    return c->in_flight;
}

int hunt_client_in_flight(const hunt_client *c) {
    return c->in_flight;
}

int hunt_client_peak(const hunt_client *c) {
    return c->peak;
}

int64_t hunt_client_completed(const hunt_client *c) {
    return c->completed;
}

int64_t hunt_client_bytes(const hunt_client *c) {
    return c->bytes;
}

/* ---- blocking requests (base/http_fetch.h) ---- */

int hunt_http_get(const char *url, const char *api_key, double timeout_s, long *status, char *body,
                  size_t cap) {
    return http_fetch_once(url, api_key, NULL, timeout_s, status, body, cap);
}

int hunt_http_fetch(const char *url, const char *api_key, const char *post_body, double timeout_s,
                    long *status, char *body, size_t cap) {
    return http_fetch_once(url, api_key, post_body, timeout_s, status, body, cap);
}
