/* SPDX-License-Identifier: MIT */
/*
 * server: the OpenAI-compatible HTTP server (`verity serve`). HTTP/1.1 with keep-alive on
 * verity's own event-driven connection layer (srv_http.h: one event thread for every connection,
 * with deadlines and caps), and a pool of worker threads: a worker parses and validates a
 * request, renders the chat template, tokenizes, submits to the engine loop, and then reads its
 * own request's events, detokenizing with that request's flags, applying its stop strings and
 * tool-call parser, and pushing SSE chunks or the final JSON to the layer. The engine thread owns
 * scheduling and the KV pool (engine_loop.h). Nothing per request is shared between requests.
 *
 * Lifecycle: server_create binds and listens at once, answering /health with 503 ("loading")
 * until server_set_ready attaches the model; server_drain makes every new request get 503 while
 * in-flight ones finish; requests the engine then cancels (the caller stops the engine loop when
 * its drain timeout runs out) are answered 503, or end their stream with an error event;
 * server_destroy closes everything.
 *
 * Limits: a request's API key and declared body size are checked on its headers, before its
 * body is read; bodies larger than max_body_bytes get 413, bodies beyond the global
 * max_body_total_bytes 503 with Retry-After; at most max_batch + queue_max sequences are held
 * (running or waiting), beyond that 429 with Retry-After, and a request needing more alone 400.
 *
 * Routes: GET /health, GET /v1/models, GET /metrics, GET /v1/status (the load a router polls:
 * running, waiting, kv_used, kv_total, active, draining), GET /v1/flags, POST /tokenize,
 * POST /detokenize, POST /v1/completions, POST /v1/chat/completions, and with admin_api
 * POST /admin/pause, /admin/resume, /admin/step (engine_loop_pause). Errors are OpenAI-shaped:
 * {"error":{"message","type","param","code"}} with the field named in message and param.
 */
#ifndef VERITY_SERVER_SERVER_H
#define VERITY_SERVER_SERVER_H

#include "template/chat_template.h"
#include "engine/engine_loop.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct server_opts {
    const char *host;            /* IPv4 address to bind */
    int port;                    /* 0 = any free port */
    int64_t queue_max;           /* sequences that may wait beyond the running batch before 429 */
    const char *api_key;         /* NULL or "" = no authentication */
    int timeout_s;               /* a connection's idle timeout, and the bound on sending a
                                    request (the head also has its own deadline, at most 10 s) */
    int max_conns;               /* client connections at once (--max-conns; 0: the layer's) */
    int max_conns_per_addr;      /* ... from one address (--max-conns-per-addr; 0: the layer's) */
    bool nagle;                  /* keep Nagle's algorithm on client connections (--http-nodelay 0;
                                    srv_http_cfg.nagle) */
    bool send_each_write;        /* srv_http_cfg.send_each_write (--http-append-blocked 0) */
    size_t max_body_bytes;       /* larger request bodies get 413 (--max-body) */
    size_t max_body_total_bytes; /* bodies being received at once, all connections together;
                                    beyond it 503 with Retry-After (--max-body-total) */
    int64_t max_batch;           /* the engine's batch size (admission, the connection limit) */
    int drain_timeout_s;         /* --drain-timeout, named in the error of a request it cuts */
    bool admin_api;              /* POST /admin/pause, /admin/resume, /admin/step (off: 404) */
} server_opts;

typedef struct server server;

/* Binds, listens and starts answering (503 until ready). Returns 0, ERR_IO (cannot bind: the
 * detail names the address), ERR_INVAL, ERR_NOMEM. */
int server_create(const server_opts *o, server **out);

/* The port actually bound (useful with port 0). */
int server_port(const server *s);

/* What the server serves; the server does not own them, and they outlive it. tmpl may be NULL
 * (chat requests then get a 400 naming --chat-template). n_ctx is the engine's context limit. */
typedef struct server_model {
    const char *name;         /* the id reported in responses (names[0] when names is given) */
    const char *const *names; /* every id /v1/models lists and "model" may use; NULL = {name} */
    int n_names;
    model *m;
    const tokenizer *tok;
    const chat_template *tmpl;
    const char *tmpl_src; /* tmpl's source text (for tool-call format detection) */
    size_t tmpl_src_len;
    const json_value *template_kwargs; /* default template variables (an object), or NULL */
    engine_loop *loop;
    int64_t n_ctx;
    /* disaggregation (disagg/disagg.h): role "prefill", "decode" or "both" (NULL = "both") */
    const char *role;
    struct disagg_rx *kv_rx;  /* decode: the KV receiver (its address in /v1/status), or NULL */
    const struct kv_pool *kv_pool; /* the engine's pool (a prefill's sender reads it) */
    uint64_t kv_identity;          /* engine_kv_identity */
    int64_t kv_block_size;
    const char *kv_transport; /* --kv-transport */
    int kv_timeout_ms;        /* --kv-xfer-timeout */
} server_model;

/* Attaches the model and starts serving requests (/health turns 200). */
void server_set_ready(server *s, const server_model *sm);

/* Stops accepting work: new requests get 503, in-flight ones continue. */
void server_drain(server *s);

/* Requests being handled right now (parsing, waiting or generating). */
int64_t server_active(const server *s);

/* The server's metrics (the engine loop's step hook feeds its histograms). */
struct srv_metrics *server_metrics(server *s);

/* Stops listening, lets answers in progress be sent for up to 2 s, closes every connection,
 * joins the workers, frees. The engine loop is not touched. */
void server_destroy(server *s);

#endif
