/* SPDX-License-Identifier: MIT */
/*
 * hunt_workload: multi-turn agentic sessions like a coding agent's, reproducible from a seed.
 *
 * A session (seed, index) has a system prompt, the tool set, scripted user tasks and optional
 * context padding: documents in the first user message sized to about pad_tokens tokens
 * (pad_bytes_per_token bytes each: 4, the usual ratio for English-like text, unless hunt_calib
 * measured the server's own ratio from usage.prompt_tokens). One "turn" is one model request. After a reply the harness acts as the agent: it
 * appends the assistant message, then either the result of every tool call (hunt_tools_execute,
 * a pure function of the arguments) or, when the model answered without calling a tool, the next
 * scripted user task. A session is therefore a deterministic function of (seed, index, the
 * replies it got): same seed and same replies give byte-identical requests.
 *
 * Tool-call ids in the history are rewritten to ids derived from (session, turn, call index): the
 * harness is the client and owns its history, and servers that draw ids at random would otherwise
 * make every later request differ from the reference's for no reason. The ids are 9 alphanumeric
 * characters, the strictest format servers accept (Mistral templates).
 *
 * skip_special_tokens (a vLLM/SGLang/verity extension: whether control tokens are left out of the
 * text) is sent, when enabled, with a value that alternates by session index: even sessions true
 * (the usual default), odd sessions false. Requests that share an engine step then carry opposite
 * values, which is what a detokenizer that applies one request's flag to the whole step needs to
 * show itself (the incident's bug class (a)). A session keeps its value for all its turns, so its
 * reference, asked with the byte-identical request, has the same value.
 *
 * The history of a session lives in its own arena (hunt_history); messages are serialised once
 * when appended, so the body of turn t is assembled from stored pieces (hunt_history_body), also
 * for an earlier turn when a reference must be asked for the exact request the session sent.
 */
#ifndef VERITY_HUNT_WORKLOAD_H
#define VERITY_HUNT_WORKLOAD_H

#include "base/arena.h"
#include "base/strbuf.h"
#include "hunt/hunt_reply.h"
#include "hunt/hunt_tools.h"

#include <stdbool.h>
#include <stdint.h>

#define HUNT_MAX_PADS  16
#define HUNT_MAX_TURNS 256

typedef struct hunt_workload_cfg {
    uint64_t seed;
    int turns;          /* model requests per session, 1..HUNT_MAX_TURNS */
    int max_tokens;     /* per request */
    double temperature; /* 0 = greedy */
    bool stream;
    bool logprobs;           /* ask for logprobs */
    bool skip_special;       /* send skip_special_tokens, alternating by session index */
    int top_logprobs;        /* candidates per position (0..20) */
    int pads[HUNT_MAX_PADS]; /* context padding levels in tokens; session i gets pads[i % n_pads] */
    int n_pads;              /* 1.. (a single 0 = no padding) */
    double pad_bytes_per_token; /* padding bytes per target token; 0: 4 (measured: hunt_calib) */
    const char *model;       /* copied */
    const hunt_tools *tools; /* borrowed; must outlive the workload */
} hunt_workload_cfg;

typedef struct hunt_workload hunt_workload;

/* Creates a workload. Returns 0, ERR_RANGE (turns, max_tokens, top_logprobs, pads or n_pads out
 * of range; detail names it) or ERR_NOMEM. */
int hunt_workload_create(const hunt_workload_cfg *cfg, hunt_workload **out);

/* Frees the workload. NULL is a no-op. */
void hunt_workload_destroy(hunt_workload *w);

/* The configuration as given (model string owned by the workload). */
const hunt_workload_cfg *hunt_workload_config(const hunt_workload *w);

/* Appends about target_bytes bytes of padding documents to out, drawn from seed: the same text
 * sessions carry as context padding (for calibrating bytes per token against a server). */
void hunt_workload_pad_text(uint64_t seed, size_t target_bytes, strbuf *out);

/* Pad level (tokens) of session index, and its position in the pads list. */
int hunt_workload_pad(const hunt_workload *w, int64_t index, int *pad_slot);

/* The skip_special_tokens value session index sends: 1 (even index) or 0 (odd index); -1 when
 * the workload does not send the field. */
int hunt_workload_skip_special(const hunt_workload *w, int64_t index);

/* Per-session seed derived from the workload seed and the session index. */
uint64_t hunt_workload_session_seed(const hunt_workload *w, int64_t index);

enum hunt_role { HUNT_ROLE_SYSTEM, HUNT_ROLE_USER, HUNT_ROLE_ASSISTANT, HUNT_ROLE_TOOL };

typedef struct hunt_history hunt_history;

/* Creates session index's history: the system prompt and the first user message (with padding).
 * Returns 0 or ERR_NOMEM. */
int hunt_history_create(const hunt_workload *w, int64_t index, hunt_history **out);

/* Frees a history. NULL is a no-op. */
void hunt_history_destroy(hunt_history *h);

/* Messages in the history so far. */
int hunt_history_len(const hunt_history *h);

/* Writes the request body for the conversation made of the first n_msgs messages (n_msgs <=
 * hunt_history_len; the whole history gives the next request) into out (reset first). stream
 * overrides the configured streaming mode when >= 0. */
void hunt_history_body(const hunt_workload *w, const hunt_history *h, int n_msgs, int stream,
                       strbuf *out);

/* Appends the reply to turn `turn` and what the agent does next (tool results or the next user
 * task). The reply is copied. Returns 0 or ERR_NOMEM. */
int hunt_history_add_reply(const hunt_workload *w, hunt_history *h, int turn, const hunt_reply *r);

/* Role and content of message i, for reports (content may be "" for a tool-calling assistant). */
int hunt_history_role(const hunt_history *h, int i);
const char *hunt_history_content(const hunt_history *h, int i, size_t *len);

/* The 9-character alphanumeric tool-call id the history uses for (session seed, turn, call). */
void hunt_call_id(uint64_t session_seed, int turn, int call, char out[10]);

#endif
