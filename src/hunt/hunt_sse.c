/* SPDX-License-Identifier: MIT */
/*
 * hunt_sse: see hunt_sse.h. A byte-at-a-time state machine over two buffers: the current line and
 * the current event's data. Runs of plain bytes are appended in one call, so feeding a large chunk
 * costs one scan plus one copy per line.
 */
#include "hunt/hunt_sse.h"
#include "base/err.h"

#include <string.h>

#define HUNT_SSE_DEFAULT_MAX (16u << 20)

void hunt_sse_init(hunt_sse *p, hunt_sse_event_fn on_event, void *ud, size_t max_bytes) {
    memset(p, 0, sizeof *p);
    p->on_event = on_event;
    p->ud = ud;
    p->max_bytes = max_bytes ? max_bytes : HUNT_SSE_DEFAULT_MAX;
    strbuf_init(&p->line);
    strbuf_init(&p->data);
    strbuf_init(&p->event);
}

void hunt_sse_deinit(hunt_sse *p) {
    strbuf_deinit(&p->line);
    strbuf_deinit(&p->data);
    strbuf_deinit(&p->event);
}

static int hunt_sse_dispatch(hunt_sse *p) {
    int rc = 0;
    if (p->data_seen) {
        size_t n = p->data.len;
        if (n && p->data.data[n - 1] == '\n')
            n--;
        p->data.data[n] = 0; /* strbuf keeps a terminator slot; n <= len */
        const char *ev = p->event.len ? p->event.data : "message";
        p->n_events++;
        rc = p->on_event(p->ud, ev, p->data.data, n);
    }
    strbuf_reset(&p->data);
    strbuf_reset(&p->event);
    p->data_seen = false;
    return rc;
}

/* Processes one complete line (without its terminator). */
static int hunt_sse_line(hunt_sse *p) {
    const char *s = p->line.data;
    size_t n = p->line.len;
    if (n == 0)
        return hunt_sse_dispatch(p);
    if (s[0] == ':')
        return 0; /* comment */
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    const char *val = colon ? colon + 1 : s + n;
    size_t val_len = colon ? n - name_len - 1 : 0;
    if (val_len && val[0] == ' ') {
        val++;
        val_len--;
    }
    if (name_len == 4 && memcmp(s, "data", 4) == 0) {
        if (p->data.len + val_len + 1 > p->max_bytes)
            return err_set(ERR_TOOLARGE, "SSE: event data over %zu bytes", p->max_bytes);
        strbuf_append(&p->data, val, val_len);
        strbuf_putc(&p->data, '\n');
        p->data_seen = true;
    } else if (name_len == 5 && memcmp(s, "event", 5) == 0) {
        strbuf_reset(&p->event);
        strbuf_append(&p->event, val, val_len);
    } /* id, retry and unknown fields are ignored */
    if (strbuf_failed(&p->data) || strbuf_failed(&p->event))
        return err_set(ERR_NOMEM, "SSE: out of memory buffering an event");
    return 0;
}

int hunt_sse_feed(hunt_sse *p, const char *bytes, size_t n) {
    size_t i = 0;
    if (!p->bom_checked) {
        /* The BOM may itself arrive split; hold back up to 3 bytes in the line buffer. */
        static const char bom[3] = {'\xEF', '\xBB', '\xBF'};
        while (i < n && p->line.len < 3) {
            if (bytes[i] != bom[p->line.len])
                break;
            strbuf_putc(&p->line, bytes[i++]);
        }
        if (p->line.len == 3) {
            strbuf_reset(&p->line);
            p->bom_checked = true;
        } else if (i < n) {
            p->bom_checked = true; /* not a BOM: the held bytes are ordinary line bytes */
        } else {
            return 0; /* all bytes so far are a BOM prefix */
        }
    }
    while (i < n) {
        char c = bytes[i];
        if (p->cr_pending) {
            p->cr_pending = false;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\n' || c == '\r') {
            p->cr_pending = (c == '\r');
            i++;
            int rc = hunt_sse_line(p);
            strbuf_reset(&p->line);
            if (rc)
                return rc;
            continue;
        }
        size_t j = i;
        while (j < n && bytes[j] != '\n' && bytes[j] != '\r')
            j++;
        if (p->line.len + (j - i) > p->max_bytes)
            return err_set(ERR_TOOLARGE, "SSE: line over %zu bytes", p->max_bytes);
        strbuf_append(&p->line, bytes + i, j - i);
        if (strbuf_failed(&p->line))
            return err_set(ERR_NOMEM, "SSE: out of memory buffering a line");
        i = j;
    }
    return 0;
}

int hunt_sse_end(hunt_sse *p) {
    if (p->line.len) {
        int rc = hunt_sse_line(p);
        strbuf_reset(&p->line);
        if (rc)
            return rc;
    }
    return hunt_sse_dispatch(p);
}
