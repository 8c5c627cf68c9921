/* SPDX-License-Identifier: MIT */
/*
 * hunt_calib: measures how many bytes of hunt's context padding make one token for the target's
 * tokenizer, so `--context-pad N` adds about N tokens whatever the vocabulary (a byte-level
 * 512-token vocabulary takes about 1.6 bytes per token, a 150k BPE vocabulary about 4). It sends
 * the same one-token chat completion twice, once with a known amount of padding text, and divides
 * the bytes added by the difference in the server's own usage.prompt_tokens. Blocking, one
 * thread; called once before a run starts.
 */
#ifndef VERITY_HUNT_HUNT_CALIB_H
#define VERITY_HUNT_HUNT_CALIB_H

#include <stdint.h>

typedef struct hunt_calib_target {
    const char *chat_url; /* the chat completions endpoint */
    const char *api_key;  /* NULL: none */
    const char *model;
    double timeout_s; /* per request */
    uint64_t seed;    /* draws the padding text */
} hunt_calib_target;

/* Measures padding bytes per token on target t. Tries a padding of 2,000 bytes, then 500 (for
 * servers with a short context). Returns 0 with *bytes_per_token set (clamped to 0.5..16), or
 * ERR_PROTOCOL (no usage.prompt_tokens in a 200 reply, or no growth; detail says why),
 * ERR_CONNECT / ERR_TIMEOUT from the transport, or ERR_NOMEM. On error *bytes_per_token is left
 * alone, so the caller keeps its default. */
int hunt_calib_pad(const hunt_calib_target *t, double *bytes_per_token);

#endif
