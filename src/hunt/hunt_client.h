/* SPDX-License-Identifier: MIT */
/*
 * hunt_client: an event-driven HTTP/1.1 client for the harness: libcurl's multi interface driven
 * by epoll (curl_multi_socket_action), so one thread on one core keeps thousands of streaming
 * requests in flight and each event costs work proportional to the sockets that are ready.
 *
 * Requests are POSTs of a JSON body (chat completions) or GETs (/metrics, /v1/models, health).
 * Response bytes are handed to on_data as they arrive (streams are parsed incrementally by the
 * caller); on_done reports the outcome exactly once per submitted request, unless the request was
 * cancelled, in which case neither callback is called again (libuv's rule). Callbacks run inside
 * hunt_client_run: on_data from inside libcurl (it must not submit or cancel), on_done after
 * libcurl returned (it may submit and cancel freely).
 *
 * Only the URL given is contacted: no redirects are followed and proxies from the environment are
 * ignored, so "loopback" stays loopback. Each request has a total timeout.
 *
 * Not thread-safe: a client and its requests belong to one thread.
 */
#ifndef VERITY_HUNT_CLIENT_H
#define VERITY_HUNT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hunt_client hunt_client;
typedef struct hunt_http hunt_http;

/* Response bytes. status is the HTTP status of the response they belong to. Returns 0 to
 * continue or a negative error code to abort the transfer (on_done then gets that code). */
typedef int (*hunt_http_data_fn)(void *ud, long status, const char *bytes, size_t n);

/* Outcome: rc 0 when an HTTP response was received completely (whatever its status), else
 * ERR_CONNECT (could not connect), ERR_TIMEOUT, ERR_PROTOCOL (malformed HTTP, connection closed
 * early) or the code on_data returned; err_detail() holds the description during the call.
 * retry_after_s is the server's Retry-After in seconds, or -1. */
typedef void (*hunt_http_done_fn)(void *ud, int rc, long status, double retry_after_s);

typedef struct hunt_http_req {
    const char *url;  /* copied */
    const char *body; /* POST body (copied); NULL for a GET */
    size_t body_len;
    const char *api_key; /* "Authorization: Bearer KEY" when non-NULL and non-empty */
    bool stream;         /* sends "Accept: text/event-stream" */
    double timeout_s;    /* whole request; 0 = 600 s */
    hunt_http_data_fn on_data;
    hunt_http_done_fn on_done;
    void *ud;
} hunt_http_req;

/* Creates a client that keeps up to max_conns connections open for reuse. Raises the process's
 * open-file soft limit towards its hard limit when max_conns needs it. Returns 0, ERR_NOMEM or
 * ERR_INTERNAL (libcurl or epoll could not be initialised; detail says which). */
int hunt_client_create(int max_conns, hunt_client **out);

/* Aborts every request in flight (no callbacks) and frees the client. NULL is a no-op. */
void hunt_client_destroy(hunt_client *c);

/* Starts a request. On success *out (if non-NULL) is a handle valid until on_done returns or the
 * request is cancelled. Returns 0, ERR_NOMEM or ERR_INTERNAL; on error no callback is called. */
int hunt_client_submit(hunt_client *c, const hunt_http_req *r, hunt_http **out);

/* Aborts a request in flight; its callbacks are never called again. Must not be called from
 * on_data. */
void hunt_client_cancel(hunt_client *c, hunt_http *h);

/* Runs the event loop for up to timeout_ms (0: only what is ready now), calling callbacks; with
 * nothing in flight it just waits timeout_ms. Returns early, after at least one completion, when
 * nothing is left in flight. Returns the number
 * of requests in flight afterwards, or a negative error code (ERR_INTERNAL) if epoll failed. */
int hunt_client_run(hunt_client *c, int timeout_ms);

/* Requests in flight now, and the most that were in flight at once. */
int hunt_client_in_flight(const hunt_client *c);
int hunt_client_peak(const hunt_client *c);

/* Requests completed (on_done called) and bytes received so far. */
int64_t hunt_client_completed(const hunt_client *c);
int64_t hunt_client_bytes(const hunt_client *c);

/* A blocking GET for one-off checks (health, /v1/models): returns 0 and the status and up to
 * cap-1 bytes of body (NUL-terminated) in body, or ERR_CONNECT/ERR_TIMEOUT/ERR_PROTOCOL. */
int hunt_http_get(const char *url, const char *api_key, double timeout_s, long *status, char *body,
                  size_t cap);

/* Like hunt_http_get, but POSTs the JSON text post_body (NULL: a GET). */
int hunt_http_fetch(const char *url, const char *api_key, const char *post_body, double timeout_s,
                    long *status, char *body, size_t cap);

#endif
