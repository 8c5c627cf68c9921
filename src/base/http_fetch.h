/* SPDX-License-Identifier: MIT */
/*
 * http_fetch: a blocking HTTP/1.1 client for one request at a time on the calling thread
 * (libcurl's easy interface), for the programs that speak HTTP to servers: the router's backend
 * requests (one per worker, streamed through as they arrive) and the harness's one-off checks.
 *
 * A fetcher (http_fetch_create) keeps its connections open between requests, so a worker that
 * sends request after request to the same servers reuses them (keep-alive); it belongs to one
 * thread at a time. Fetchers created on one pool (http_fetch_pool) share one cache of idle
 * connections instead, so many workers hold no more connections to a server than they use at
 * once (a worker pool of 256 threads would otherwise keep up to 256 idle connections to each
 * server, past its per-address cap); a pool keeps up to 4096 idle connections, so a burst of
requests finds its connections again. http_fetch_run sends one request and hands the response body
 * to on_data as it arrives, with the status and Content-Type known from the first call on;
 * on_progress (optional) is asked about every 100 ms whether to give up (a client that went away).
 *
 * Only the URL given is contacted: no redirects are followed and proxies from the environment are
 * ignored, so "loopback" stays loopback. Signals are not used for timeouts (safe in threads).
 * libcurl's global state is set up once per process by http_fetch_global_init, which must run
 * before any other thread uses the library (main does it; create calls it too, for
 * single-threaded programs).
 */
#ifndef VERITY_BASE_HTTP_FETCH_H
#define VERITY_BASE_HTTP_FETCH_H

#include <stdbool.h>
#include <stddef.h>

typedef struct http_fetch http_fetch;
typedef struct http_fetch_pool http_fetch_pool;

/* Response bytes: status is the HTTP status, content_type the response's Content-Type ("" when
 * absent). Returns 0 to continue or a negative error code, which aborts the transfer and becomes
 * http_fetch_run's result. */
typedef int (*http_fetch_data_fn)(void *ud, long status, const char *content_type,
                                  const char *bytes, size_t n);

/* Returns true to abort the transfer (http_fetch_run then returns ERR_CANCELLED). */
typedef bool (*http_fetch_abort_fn)(void *ud);

typedef struct http_fetch_req {
    const char *url;
    const char *method; /* NULL: POST when body is non-NULL, else GET */
    const char *body;   /* request body (not copied; valid during the call), NULL: none */
    size_t body_len;
    const char *api_key;              /* "Authorization: Bearer KEY" when non-NULL and non-empty */
    const char *accept;               /* an Accept header value, or NULL */
    double timeout_s;                 /* whole request; 0 = 600 s */
    double connect_timeout_s;         /* 0 = min(timeout_s, 10 s) */
    http_fetch_data_fn on_data;       /* NULL: the body is discarded */
    http_fetch_abort_fn should_abort; /* NULL: never */
    /* NULL, or called once the connection is ready (new or kept alive) and just before the
     * request is written to it (libcurl's pre-request hook): where a caller's own time ends */
    void (*on_send)(void *ud);
    void *ud;
} http_fetch_req;

/* Sets up libcurl's global state once per process. Returns 0 or ERR_INTERNAL. Thread-safe once
 * the first call has returned; call it from main before starting threads. */
int http_fetch_global_init(void);

/* Creates a cache of idle connections that fetchers on any thread share (under its lock).
 * Returns 0 and *out, ERR_NOMEM or ERR_INTERNAL. */
int http_fetch_pool_create(http_fetch_pool **out);

/* Frees the pool and closes its connections; every fetcher created on it must be destroyed first.
 * NULL is a no-op. */
void http_fetch_pool_destroy(http_fetch_pool *p);

/* Creates a fetcher on pool (NULL: its own connections). Returns 0 and *out, ERR_NOMEM or
 * ERR_INTERNAL (libcurl could not be set up). */
int http_fetch_create(http_fetch_pool *pool, http_fetch **out);

/* Closes its connections and frees it. NULL is a no-op. */
void http_fetch_destroy(http_fetch *f);

/* Sends r and waits for the whole response. *status (may be NULL) gets the HTTP status, 0 when
 * none arrived. Returns 0 when a response was received completely, whatever its status;
 * ERR_CONNECT (could not connect: refused, unresolvable, a malformed URL), ERR_TIMEOUT,
 * ERR_CANCELLED (should_abort said so), the code on_data returned, or ERR_PROTOCOL (malformed
 * HTTP, the connection closed before the response was complete). err_detail() names the URL. */
int http_fetch_run(http_fetch *f, const http_fetch_req *r, long *status);

/* For a caller that drives libcurl itself (the router's proxy loops, on the multi interface):
 * sets on easy (a CURL *) every option http_fetch_run sets from r except the callbacks (write,
 * progress, pre-request: the caller's own) and the connection cache's size: the URL, the method
 * and body, the headers (bearer key, Accept, Content-Type, no Expect), the timeouts, no signals,
 * no proxy, no redirects, HTTP/1.1, TCP_NODELAY, and errbuf (CURL_ERROR_SIZE bytes, kept alive
 * by the caller) as the error buffer. Returns the header list, which the caller frees
 * (curl_slist_free_all) once the transfer ended; NULL when there is none. */
struct curl_slist *http_fetch_easy_setup(void *easy, const http_fetch_req *r, char *errbuf);

/* The code http_fetch_run returns for libcurl's result cc (a CURLcode) of a transfer to url:
 * 0 for CURLE_OK, else ERR_TIMEOUT, ERR_CONNECT or ERR_PROTOCOL, err_detail() naming url and
 * why (errbuf when libcurl filled it). A caller maps its own aborts and refusals first. */
int http_fetch_code(int cc, const char *url, const char *errbuf);

/* One request with a fresh fetcher, the body copied into body[0, cap) (truncated, always
 * NUL-terminated when cap > 0). post_body NULL: a GET. Same returns as http_fetch_run plus
 * ERR_NOMEM. */
int http_fetch_once(const char *url, const char *api_key, const char *post_body, double timeout_s,
                    long *status, char *body, size_t cap);

#endif
