/* SPDX-License-Identifier: MIT */
/*
 * hunt_sse: an incremental parser for text/event-stream bodies (the WHATWG "server-sent events"
 * rules), fed whatever byte chunks the network delivers.
 *
 * Bytes are fed in arbitrary pieces, down to one byte at a time; a line may end with CRLF, LF or
 * a lone CR, and a CRLF split across two feeds counts as one line end. A leading UTF-8 BOM is
 * skipped. Lines starting with ':' are comments; "field: value" loses one leading space of the
 * value; "data" lines are joined with '\n'; an empty line dispatches the event (when any data line
 * was seen). Other fields ("event", "id", "retry") are accepted and only "event" is kept.
 * hunt_sse_end() dispatches a final event that the server did not terminate with a blank line
 * (more lenient than the standard, which drops it: a server cut off after its last data line
 * should still be judged on what it sent).
 *
 * Caller-owned storage: hunt_sse_init / hunt_sse_deinit. Not thread-safe; one per response.
 */
#ifndef VERITY_HUNT_SSE_H
#define VERITY_HUNT_SSE_H

#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

/* Called once per dispatched event with its type ("message" when none was given) and its data
 * (NUL-terminated, without the final newline). Returns 0 to continue or a negative error code,
 * which hunt_sse_feed returns at once. */
typedef int (*hunt_sse_event_fn)(void *ud, const char *event, const char *data, size_t len);

typedef struct hunt_sse {
    hunt_sse_event_fn on_event;
    void *ud;
    strbuf line;      /* the current, unterminated line */
    strbuf data;      /* data lines of the current event, each followed by '\n' */
    strbuf event;     /* the current event type */
    bool data_seen;   /* a data line belongs to the current event */
    bool cr_pending;  /* the last byte fed was CR: a following LF is part of that line end */
    bool bom_checked; /* the first bytes have been checked for a BOM */
    size_t max_bytes; /* a line or an event's data above this is ERR_TOOLARGE */
    size_t n_events;  /* events dispatched so far */
} hunt_sse;

/* Initialises a parser that calls on_event(ud, ...) per event; max_bytes bounds one line and one
 * event's data (0 = 16 MiB). */
void hunt_sse_init(hunt_sse *p, hunt_sse_event_fn on_event, void *ud, size_t max_bytes);

/* Frees the parser's buffers. */
void hunt_sse_deinit(hunt_sse *p);

/* Feeds bytes. Returns 0, the first nonzero code an event callback returned, ERR_TOOLARGE (a line
 * or event over max_bytes; detail says which) or ERR_NOMEM. After an error the parser should be
 * discarded. */
int hunt_sse_feed(hunt_sse *p, const char *bytes, size_t n);

/* Marks the end of the body: a pending unterminated line is processed and a pending event is
 * dispatched. Returns like hunt_sse_feed. */
int hunt_sse_end(hunt_sse *p);

#endif
