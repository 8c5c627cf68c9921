/* SPDX-License-Identifier: MIT */
/*
 * srv_stop: matching a request's stop strings against a choice's growing text in O(new bytes)
 * per token, whatever the stop strings' lengths.
 *
 * The stop set is compiled once per request into an Aho-Corasick automaton (a trie of the
 * strings with failure links); each choice keeps its own state (a trie node and how many bytes
 * of its text it has fed). The node reached after a byte is the longest suffix of the text that
 * begins some stop string, so it gives both what the old rules needed at once: a stop string
 * ending here (the longest one ending here starts earliest), and how many trailing bytes must be
 * held back because they could still begin one. A trie node has at most SRV_STOP_MAX_STRINGS
 * children, and failure hops are paid for by the depth each byte adds, so feeding n bytes costs
 * at most (SRV_STOP_MAX_STRINGS + 1) * 2 * n steps; srv_stop_state.work counts them.
 *
 * The automaton is immutable once built and may be read by several threads; a state belongs to
 * one choice.
 */
#ifndef VERITY_SERVER_SRV_STOP_H
#define VERITY_SERVER_SRV_STOP_H

#include "base/arena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* At most this many stop strings (OpenAI's limit), of at most this many bytes together. */
#define SRV_STOP_MAX_STRINGS 4
#define SRV_STOP_MAX_BYTES   4096

typedef struct srv_stop srv_stop;

/* One choice's progress through its text. Zero-initialise it before the first scan. */
typedef struct srv_stop_state {
    int32_t node;  /* the automaton's node after raw[0..fed) */
    size_t fed;    /* bytes of the text fed so far */
    uint64_t work; /* trie edge comparisons and failure hops so far (for tests) */
} srv_stop_state;

/* Compiles n stop strings (stops[i][0..lens[i]), each non-empty; n <= SRV_STOP_MAX_STRINGS, total
 * bytes <= SRV_STOP_MAX_BYTES) into an automaton allocated in a (it lives as long as a). Returns
 * 0, ERR_INVAL (a limit broken, an empty string) or ERR_NOMEM. n == 0 gives *out = NULL, which
 * srv_stop_scan treats as "no stop strings". */
int srv_stop_create(arena *a, const char *const *stops, const size_t *lens, int n, srv_stop **out);

/* Feeds raw[st->fed..len) (raw[0..st->fed) must be what was fed before: the text only grows) and
 * says how much of raw may be released. Returns true when a stop string occurs in the text fed so
 * far (it ends in the new bytes, as earlier scans found none): *end is where the earliest-starting
 * occurrence begins; text before it is released, the rest dropped. Otherwise returns false with
 * *end = len minus the longest suffix of raw that could still begin a stop string (none held when
 * final: the text ends here). s == NULL: false, *end = len. */
bool srv_stop_scan(const srv_stop *s, srv_stop_state *st, const char *raw, size_t len, bool final,
                   size_t *end);

#endif
