/* SPDX-License-Identifier: MIT */
/*
 * http_fetch: libcurl's easy interface, one handle per fetcher. See http_fetch.h.
 *
 * The handle is reset (curl_easy_reset keeps the connection cache) and configured for each
 * request (on a pool the handle is attached once to the pool's share, whose connection cache
 * replaces the handle's; curl_easy_reset keeps it), so nothing of one request leaks into the next
 * but its open connections. The write callback reads the status and Content-Type once, when the
 * first body bytes arrive (the headers are complete by then), and passes the bytes on; a non-zero
 * answer from on_data makes the callback refuse the bytes, which aborts the transfer with
 * CURLE_WRITE_ERROR, mapped back to the caller's code. The progress callback carries should_abort.
 */
#include "base/http_fetch.h"
#include "base/err.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the most idle connections a pool keeps (libcurl closes the oldest beyond it) */
#define HTTP_FETCH_POOL_MAX_CONNS 4096L

struct http_fetch {
    CURL *easy;
    http_fetch_pool *pool;
};

struct http_fetch_pool {
    CURLSH *share;
    /* libcurl's lock callbacks: one lock per kind of shared data (libcurl may hold one kind's
     * lock while taking another's, so a single lock would deadlock) */
    pthread_mutex_t mu[CURL_LOCK_DATA_LAST];
};

typedef struct http_fetch_call {
    const http_fetch_req *r;
    CURL *easy;
    long status;
    const char *content_type;
    int data_rc; /* what on_data returned, when it stopped the transfer */
    bool aborted;
} http_fetch_call;

static pthread_once_t http_fetch_once_ctl = PTHREAD_ONCE_INIT;
static int http_fetch_global_rc;

static void http_fetch_global_setup(void) {
    http_fetch_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : ERR_INTERNAL;
}

int http_fetch_global_init(void) {
    pthread_once(&http_fetch_once_ctl, http_fetch_global_setup);
    if (http_fetch_global_rc)
        return err_set(ERR_INTERNAL, "libcurl global initialisation failed");
    return 0;
}

static void http_fetch_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *ud) {
    (void)h, (void)a;
    pthread_mutex_lock(&((http_fetch_pool *)ud)->mu[d]);
}

static void http_fetch_unlock(CURL *h, curl_lock_data d, void *ud) {
    (void)h;
    pthread_mutex_unlock(&((http_fetch_pool *)ud)->mu[d]);
}

int http_fetch_pool_create(http_fetch_pool **out) {
    *out = NULL;
    if (http_fetch_global_init())
        return ERR_INTERNAL;
    http_fetch_pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "http_fetch: out of memory");
    p->share = curl_share_init();
    if (!p->share) {
        free(p);
        return err_set(ERR_INTERNAL, "http_fetch: libcurl could not create a share");
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&p->mu[i], NULL);
    curl_share_setopt(p->share, CURLSHOPT_LOCKFUNC, http_fetch_lock);
    curl_share_setopt(p->share, CURLSHOPT_UNLOCKFUNC, http_fetch_unlock);
    curl_share_setopt(p->share, CURLSHOPT_USERDATA, p);
    if (curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
        curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK) {
        http_fetch_pool_destroy(p);
        return err_set(ERR_INTERNAL, "http_fetch: libcurl cannot share connections");
    }
    *out = p;
    return 0;
}

void http_fetch_pool_destroy(http_fetch_pool *p) {
    if (!p)
        return;
    curl_share_cleanup(p->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&p->mu[i]);
    free(p);
}

int http_fetch_create(http_fetch_pool *pool, http_fetch **out) {
    *out = NULL;
    if (http_fetch_global_init())
        return ERR_INTERNAL;
    http_fetch *f = calloc(1, sizeof *f);
    if (!f)
        return err_set(ERR_NOMEM, "http_fetch: out of memory");
    f->easy = curl_easy_init();
    if (!f->easy) {
        free(f);
        return err_set(ERR_INTERNAL, "http_fetch: libcurl could not create a handle");
    }
    f->pool = pool;
    /* once: curl_easy_reset keeps the share */
    if (pool && curl_easy_setopt(f->easy, CURLOPT_SHARE, pool->share) != CURLE_OK) {
        http_fetch_destroy(f);
        return err_set(ERR_INTERNAL, "http_fetch: libcurl cannot attach the connection pool");
    }
    *out = f;
    return 0;
}

void http_fetch_destroy(http_fetch *f) {
    if (!f)
        return;
    curl_easy_cleanup(f->easy);
    free(f);
}

static size_t http_fetch_write(char *p, size_t size, size_t nmemb, void *ud) {
    http_fetch_call *c = ud;
    size_t n = size * nmemb;
    if (!c->content_type) {
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
        char *ct = NULL;
        curl_easy_getinfo(c->easy, CURLINFO_CONTENT_TYPE, &ct);
        c->content_type = ct ? ct : "";
    }
    if (!c->r->on_data || n == 0)
        return n;
    int rc = c->r->on_data(c->r->ud, c->status, c->content_type, p, n);
    if (rc) {
        c->data_rc = rc;
        return n == 0 ? 1 : 0; /* anything but n aborts the transfer */
    }
    return n;
}

static int http_fetch_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                               curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    http_fetch_call *c = ud;
    if (c->r->should_abort && c->r->should_abort(c->r->ud)) {
        c->aborted = true;
        return 1;
    }
    return 0;
}

static int http_fetch_prereq(void *ud, char *ip, char *local_ip, int port, int local_port) {
    (void)ip, (void)local_ip, (void)port, (void)local_port;
    const http_fetch_req *r = ud;
    r->on_send(r->ud);
    return CURL_PREREQFUNC_OK;
}

struct curl_slist *http_fetch_easy_setup(void *easy, const http_fetch_req *r, char *errbuf) {
    CURL *e = easy;
    struct curl_slist *hd = NULL;
    if (r->api_key && r->api_key[0]) {
        char auth[1024];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", r->api_key);
        hd = curl_slist_append(hd, auth);
    }
    if (r->accept) {
        char acc[256];
        snprintf(acc, sizeof acc, "Accept: %s", r->accept);
        hd = curl_slist_append(hd, acc);
    }
    if (r->body) {
        hd = curl_slist_append(hd, "Content-Type: application/json");
        hd = curl_slist_append(hd, "Expect:"); /* no 100-continue round trip */
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    }
    if (r->method)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    double t = r->timeout_s > 0 ? r->timeout_s : 600;
    double ct = r->connect_timeout_s > 0 ? r->connect_timeout_s : (t < 10 ? t : 10);
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(t * 1000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(ct * 1000));
    return hd;
}

int http_fetch_code(int cc, const char *url, const char *errbuf) {
    if (cc == CURLE_OK)
        return 0;
    const char *why = errbuf && errbuf[0] ? errbuf : curl_easy_strerror((CURLcode)cc);
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return err_set(ERR_TIMEOUT, "%s: %s", url, why);
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
        cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL)
        return err_set(ERR_CONNECT, "%s: %s", url, why);
    return err_set(ERR_PROTOCOL, "%s: %s", url, why);
}

int http_fetch_run(http_fetch *f, const http_fetch_req *r, long *status) {
    CURL *e = f->easy;
    curl_easy_reset(e);
    http_fetch_call c = {.r = r, .easy = e};
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hd = http_fetch_easy_setup(e, r, errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_fetch_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &c);
    /* a shared cache keeps every connection given back (libcurl's default of 5 would close the
     * rest, so each request past the fifth at once paid for a new connection) */
    if (f->pool)
        curl_easy_setopt(e, CURLOPT_MAXCONNECTS, HTTP_FETCH_POOL_MAX_CONNS);
    if (r->on_send) {
        curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, http_fetch_prereq);
        curl_easy_setopt(e, CURLOPT_PREREQDATA, (void *)r);
    }
    if (r->should_abort) {
        curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, http_fetch_progress);
        curl_easy_setopt(e, CURLOPT_XFERINFODATA, &c);
        curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    }
    CURLcode cc = curl_easy_perform(e);
    int rc = 0;
    if (cc == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &c.status);
    else if (c.data_rc)
        rc = c.data_rc;
    else if (c.aborted)
        rc = err_set(ERR_CANCELLED, "%s: abandoned by the caller", r->url);
    else
        rc = http_fetch_code(cc, r->url, errbuf);
    if (status)
        *status = c.status;
    curl_slist_free_all(hd);
    return rc;
}

typedef struct http_fetch_buf {
    char *p;
    size_t cap, len;
} http_fetch_buf;

static int http_fetch_copy(void *ud, long status, const char *ct, const char *bytes, size_t n) {
    (void)status, (void)ct;
    http_fetch_buf *b = ud;
    if (b->cap) {
        size_t k = b->cap - 1 - b->len < n ? b->cap - 1 - b->len : n;
        memcpy(b->p + b->len, bytes, k);
        b->len += k;
        b->p[b->len] = 0;
    }
    return 0;
}

int http_fetch_once(const char *url, const char *api_key, const char *post_body, double timeout_s,
                    long *status, char *body, size_t cap) {
    *status = 0;
    if (cap)
        body[0] = 0;
    http_fetch *f;
    int rc = http_fetch_create(NULL, &f);
    if (rc)
        return rc;
    http_fetch_buf b = {body, cap, 0};
    http_fetch_req r = {.url = url,
                        .body = post_body,
                        .body_len = post_body ? strlen(post_body) : 0,
                        .api_key = api_key,
                        .timeout_s = timeout_s > 0 ? timeout_s : 10,
                        .on_data = http_fetch_copy,
                        .ud = &b};
    rc = http_fetch_run(f, &r, status);
    http_fetch_destroy(f);
    return rc;
}
