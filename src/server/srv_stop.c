/* SPDX-License-Identifier: MIT */
/*
 * srv_stop: see srv_stop.h. The trie is an array of nodes (node 0 the root), each with its
 * children in a sibling list (at most SRV_STOP_MAX_STRINGS of them: a node's children begin
 * different strings' continuations). Failure links are computed breadth first; out_len is the
 * length of the longest stop string that is a suffix of the node's string (0: none), inherited
 * through the failure link when the node itself ends no string.
 */
#include "server/srv_stop.h"
#include "base/err.h"

#include <string.h>

typedef struct srv_stop_node {
    int32_t child;   /* first child, -1 none */
    int32_t sibling; /* next child of the same parent, -1 none */
    int32_t fail;    /* the longest proper suffix that is a node */
    int32_t depth;   /* bytes from the root */
    int32_t out_len; /* longest stop string ending here, 0 none */
    unsigned char byte;
} srv_stop_node;

struct srv_stop {
    srv_stop_node *nodes;
    int32_t n_nodes;
};

/* The child of node v on byte b, or -1; counts the comparisons in *work. */
static int32_t srv_stop_child(const srv_stop *s, int32_t v, unsigned char b, uint64_t *work) {
    for (int32_t c = s->nodes[v].child; c >= 0; c = s->nodes[c].sibling) {
        (*work)++;
        if (s->nodes[c].byte == b)
            return c;
    }
    return -1;
}

int srv_stop_create(arena *a, const char *const *stops, const size_t *lens, int n, srv_stop **out) {
    *out = NULL;
    if (n <= 0)
        return 0;
    if (n > SRV_STOP_MAX_STRINGS)
        return err_set(ERR_INVAL, "stop: %d strings; at most %d", n, SRV_STOP_MAX_STRINGS);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!lens[i])
            return err_set(ERR_INVAL, "stop: string %d is empty", i);
        total += lens[i];
        if (total > SRV_STOP_MAX_BYTES)
            return err_set(ERR_INVAL, "stop: more than %d bytes", SRV_STOP_MAX_BYTES);
    }
    srv_stop *s = arena_alloc(a, sizeof *s);
    int32_t *queue = arena_alloc(a, (total + 1) * sizeof *queue);
    if (!s || !queue || !(s->nodes = arena_alloc(a, (total + 1) * sizeof *s->nodes)))
        return err_set(ERR_NOMEM, "stop: out of memory");
    s->nodes[0] = (srv_stop_node){.child = -1, .sibling = -1};
    s->n_nodes = 1;
    uint64_t work = 0;
    for (int i = 0; i < n; i++) {
        int32_t v = 0;
        for (size_t k = 0; k < lens[i]; k++) {
            unsigned char b = (unsigned char)stops[i][k];
            int32_t c = srv_stop_child(s, v, b, &work);
            if (c < 0) {
                c = s->n_nodes++;
                s->nodes[c] = (srv_stop_node){.child = -1,
                                              .sibling = s->nodes[v].child,
                                              .depth = s->nodes[v].depth + 1,
                                              .byte = b};
                s->nodes[v].child = c;
            }
            v = c;
        }
        s->nodes[v].out_len = (int32_t)lens[i];
    }
    /* breadth first: a node's failure link is shallower, so it is final before the node */
    size_t qh = 0, qt = 0;
    for (int32_t c = s->nodes[0].child; c >= 0; c = s->nodes[c].sibling) {
        s->nodes[c].fail = 0;
        queue[qt++] = c;
    }
    while (qh < qt) {
        int32_t v = queue[qh++];
        srv_stop_node *nv = &s->nodes[v];
        if (!nv->out_len)
            nv->out_len = s->nodes[nv->fail].out_len;
        for (int32_t c = nv->child; c >= 0; c = s->nodes[c].sibling) {
            int32_t f = nv->fail, t;
            while ((t = srv_stop_child(s, f, s->nodes[c].byte, &work)) < 0 && f)
                f = s->nodes[f].fail;
            s->nodes[c].fail = t >= 0 ? t : 0;
            queue[qt++] = c;
        }
    }
    *out = s;
    return 0;
}

bool srv_stop_scan(const srv_stop *s, srv_stop_state *st, const char *raw, size_t len, bool final,
                   size_t *end) {
    if (!s) {
        st->fed = len;
        *end = len;
        return false;
    }
    int32_t v = st->node;
    size_t best = SIZE_MAX;
    for (size_t i = st->fed; i < len; i++) {
        unsigned char b = (unsigned char)raw[i];
        int32_t t;
        while ((t = srv_stop_child(s, v, b, &st->work)) < 0 && v) {
            v = s->nodes[v].fail;
            st->work++;
        }
        v = t >= 0 ? t : 0;
        int32_t ol = s->nodes[v].out_len;
        if (ol && i + 1 - (size_t)ol < best)
            best = i + 1 - (size_t)ol;
    }
    st->node = v;
    st->fed = len;
    if (best != SIZE_MAX) {
        *end = best;
        return true;
    }
    size_t hold = final ? 0 : (size_t)s->nodes[v].depth;
    *end = len - (hold < len ? hold : len);
    return false;
}
