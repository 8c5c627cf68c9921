/* SPDX-License-Identifier: MIT */
/*
 * srv_int: declarations shared inside src/server only: the server's state, the per-request
 * connection state, parsed generation parameters and the helpers that write responses.
 */
#ifndef VERITY_SERVER_SRV_INT_H
#define VERITY_SERVER_SRV_INT_H

#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "toolcall/chat_tools.h"
#include "sample/grammar.h"
#include "server/server.h"
#include "server/srv_metrics.h"
#include "server/srv_http.h"
#include "server/srv_stop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SRV_MAX_STOP    SRV_STOP_MAX_STRINGS
#define SRV_MAX_CHOICES 16

struct server {
    server_opts o;
    char *api_key;
    srv_http *http; /* the connection layer; NULL until server_create has started it */
    int listen_fd;  /* ours until srv_http_create takes it, then -1 */
    int port;
    atomic_bool ready;
    atomic_bool draining;
    /* admission: a request's check of the engine's load and its submissions happen under this
     * lock, so two requests never both take the last place (srv_gen_start) */
    pthread_mutex_t admit_mu;
    /* the worker pool (base/workq.h): workers are started as needed up to max_workers, as many
     * requests may wait for one, and they live until server_destroy */
    struct workq *pool;
    int max_workers;
    char too_large_msg[96], budget_msg[160]; /* the layer's 413 and 503 messages */
    server_model sm;
    srv_metrics *metrics;
    _Atomic int64_t active; /* requests handed to the pool and not yet released */
    _Atomic uint64_t next_id;
    char fingerprint[64];
    chat_tool_format tool_format;
    grammar_vocab *gvocab; /* the tokenizer's tables for constrained decoding (NULL if they could
                              not be built); set with sm, read-only afterwards */
};

/* An error to send: HTTP status, OpenAI error type, the offending parameter (or NULL) and a
 * message naming it. */
typedef struct srv_err {
    int status;
    const char *type;
    const char *param;
    const char *code;
    char message[512];
} srv_err;

/* Fills e and returns -1, so parsers can `return srv_fail(e, ...)`. */
int srv_fail(srv_err *e, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

enum srv_tool_choice { SRV_TOOLS_NONE, SRV_TOOLS_AUTO, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED };

/* A validated /v1/completions or /v1/chat/completions request. Pointers live in the request's
 * arena. */
typedef struct srv_params {
    bool chat;
    const char *model;
    int32_t n;          /* choices per prompt */
    int32_t max_tokens; /* -1: as many as fit */
    sample_params sp;
    const char *stop[SRV_MAX_STOP];
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage;
    bool logprobs;        /* report logprobs of the chosen tokens */
    int32_t top_logprobs; /* alternatives per position */
    bool skip_special;
    bool ignore_eos;
    bool echo;
    /* chat */
    const json_value *messages;
    const json_value *tools;
    enum srv_tool_choice tool_choice;
    const char *tool_choice_name;
    bool parallel_tool_calls;
    const json_value *response_format; /* a json_object / json_schema response_format, or NULL */
    /* the constraint for every choice (tool_choice required/named, or response_format json): a
     * grammar reference owned by whoever holds the srv_params until srv_gen_start, which always
     * takes it; NULL when generation is free */
    grammar *constraint;
    /* disaggregation: {"kv_transfer":{"id":"HEX","send_to":"HOST:PORT"}} (a prefill server sends
     * the prompt's K/V there) or {"kv_transfer":{"id":"HEX","recv":true}} (a decode server waits
     * for it); xfer_id 0: neither */
    uint64_t xfer_id;
    const char *xfer_to;
    bool xfer_recv;
    /* the prompts, tokenized (completions may have several) */
    int32_t **prompts;
    int32_t *prompt_lens;
    int n_prompts;
} srv_params;

/* Parses the transfer id of v ({"id":"<1 to 16 hex digits, nonzero>"}, the object named name in
 * messages; id_param is the error's param for a bad id). Returns 0 and *id, or -1 with e filled
 * (400). */
int srv_parse_xfer_id(const json_value *v, const char *name, const char *id_param, uint64_t *id,
                      srv_err *e);

/* Parses and validates a request body into p (prompts tokenized, chat template rendered, the
 * constraint compiled last). Returns 0 or -1 with e filled (400/404/...); on -1 p holds no
 * constraint. */
int srv_parse_generate(server *s, arena *a, const json_value *body, bool chat, srv_params *p,
                       srv_err *e);

typedef struct srv_gen srv_gen;

/* Starts generating for p: submits every choice to the engine loop, each with its own state of
 * p->constraint. Takes p->constraint in every case. Admission counts sequences (choices): the
 * server holds at most max_batch + queue_max of them, running or waiting, and the check and the
 * submissions are one step under s->admit_mu. Returns NULL with e filled on failure: 429 when
 * the server is full now, 400 (param "n") when the request alone needs more sequences than the
 * server ever holds, 500 out of memory. req is the HTTP request it answers (borrowed: the caller
 * holds it until after srv_gen_free); its gone flag is checked on every pump. */
srv_gen *srv_gen_start(server *s, const srv_params *p, srv_http_req *req, int64_t t_arrival_ns,
                       srv_err *e);

/* Non-streaming: waits for every choice to finish and writes the whole response body into out.
 * Returns 0, or ERR_CANCELLED if the client went away (the request is cancelled), or an error
 * with e filled: the engine refused the request (400/500), or the server's shutdown cut it
 * (503, type "server_shutdown_error", code "drain_timeout"). */
int srv_gen_complete(srv_gen *g, strbuf *out, srv_err *e);

/* Streaming: answers g's request with its SSE stream, pushing each event as it is ready
 * (srv_http_stream_write, blocking while the client's output buffer is full), until the stream
 * ends, the server's shutdown cuts it (an error event, no [DONE]) or the client goes (the rest is
 * cancelled). The stream begins with its first event, so until then the request has no answer
 * and the layer may probe a half-closed client. */
void srv_gen_stream(srv_gen *g);

/* Frees g, cancelling whatever is still running (the engine frees its KV at its next step). */
void srv_gen_free(srv_gen *g);

#endif
