/* SPDX-License-Identifier: MIT */
/*
 * hunt_reply: one chat-completion answer as the harness sees it, parsed from an OpenAI-compatible
 * response: a whole JSON body (non-streaming) or a text/event-stream of chunks (streaming).
 *
 * The reply keeps what the oracles judge: the content, the tool calls exactly as received
 * (arguments are the raw string, which may be invalid JSON: that is evidence, not a parse error),
 * the finish_reason, the per-token logprobs with their top candidates when the server sent them,
 * the usage counts, and for streams the first delta that changed a tool call's identity (id, name
 * or type of an index already announced) or reused another call's id.
 *
 * Everything a reply points to lives in the arena given to the parser and dies with it. A
 * response that is not a chat completion at all (not JSON, no choices, an "error" object) is a
 * target error (ERR_PROTOCOL, detail quotes the server), never a verdict about the model.
 */
#ifndef VERITY_HUNT_REPLY_H
#define VERITY_HUNT_REPLY_H

#include "base/arena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hunt_top {
    const char *text; /* candidate token text, NUL-terminated */
    size_t len;
    double logprob;
} hunt_top;

typedef struct hunt_tok {
    const char *text; /* the chosen token's text, NUL-terminated */
    size_t len;
    double logprob;
    hunt_top *top; /* [n_top] top candidates as the server ordered them (best first) */
    int n_top;
} hunt_tok;

typedef struct hunt_call {
    const char *id;   /* "" when the server sent none */
    const char *type; /* "function" unless the server said otherwise */
    const char *name;
    const char *args; /* the arguments string exactly as received */
    size_t args_len;
} hunt_call;

typedef struct hunt_reply {
    const char *content; /* "" when absent or null */
    size_t content_len;
    bool content_null; /* the server sent null or no content */
    hunt_call *calls;  /* [n_calls] */
    int n_calls;
    const char *finish; /* finish_reason, or "" when the server sent none */
    hunt_tok *toks;     /* [n_toks]; only when has_logprobs */
    int n_toks;
    bool has_logprobs;
    int64_t prompt_tokens; /* usage, -1 when not reported */
    int64_t completion_tokens;
    const char *stream_issue; /* streams: first identity change, or NULL */
    int n_chunks;             /* streams: chunks received */
} hunt_reply;

/* Parses a non-streaming response body into *out (arena-allocated in a). Returns 0, ERR_PROTOCOL
 * (not a chat completion: detail quotes up to 200 bytes of the body, or the server's error
 * message) or ERR_NOMEM. */
int hunt_reply_parse_json(arena *a, const char *body, size_t len, hunt_reply *out);

/* Streaming accumulator: feed the raw body bytes as they arrive; events are parsed as they
 * complete. Opaque; one per response. */
typedef struct hunt_stream hunt_stream;

/* Creates an accumulator whose finished reply will live in a (which must outlive the reply).
 * Returns 0 or ERR_NOMEM. */
int hunt_stream_create(arena *a, hunt_stream **out);

/* Frees the accumulator (not the reply it produced). NULL is a no-op. */
void hunt_stream_destroy(hunt_stream *s);

/* Feeds body bytes (any chunking). Returns 0, or ERR_PROTOCOL for a chunk that is not JSON or
 * carries an "error" object (detail quotes it), ERR_TOOLARGE, ERR_NOMEM. After an error, further
 * feeds return the same error. */
int hunt_stream_feed(hunt_stream *s, const char *bytes, size_t n);

/* Ends the stream and fills *out. Returns 0; ERR_PROTOCOL if a feed failed or no chunk with
 * choices arrived; ERR_NOMEM. */
int hunt_stream_finish(hunt_stream *s, hunt_reply *out);

/* True when the stream has seen "data: [DONE]". */
bool hunt_stream_done(const hunt_stream *s);

/* Returns true if the two replies are identical in everything the exact oracle compares: content,
 * tool calls (id excluded: servers may draw ids at random), and finish_reason. */
bool hunt_reply_same(const hunt_reply *a, const hunt_reply *b);

/* Deep-copies src into arena a. Returns 0 or ERR_NOMEM. */
int hunt_reply_copy(arena *a, const hunt_reply *src, hunt_reply *dst);

#endif
