/* SPDX-License-Identifier: MIT */
/*
 * kv_tier_map: kv_tmap (kv_tier_int.h). Keys are hashed with the splitmix64 finalizer, so keys
 * that are already hashes and keys that are small counters (tests) spread alike.
 */
#include "kv/kv_tier_int.h"
#include "base/check.h"
#include "base/err.h"

#include <stdlib.h>

static size_t tmap_slot(uint64_t key, size_t nb) {
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ULL;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebULL;
    key ^= key >> 31;
    return (size_t)key & (nb - 1);
}

int kv_tmap_init(kv_tmap *m) {
    m->nb = 64;
    m->n = 0;
    m->b = calloc(m->nb, sizeof *m->b);
    return m->b ? 0 : err_set(ERR_NOMEM, "kv tier map: out of memory");
}

void kv_tmap_deinit(kv_tmap *m) {
    free(m->b);
    m->b = NULL;
    m->nb = m->n = 0;
}

kv_tmap_node *kv_tmap_find(const kv_tmap *m, uint64_t key) {
    for (kv_tmap_node *x = m->b[tmap_slot(key, m->nb)]; x; x = x->hnext)
        if (x->key == key)
            return x;
    return NULL;
}

/* Doubles the table; on allocation failure keeps the old one. */
static void tmap_grow(kv_tmap *m) {
    size_t nb = m->nb * 2;
    kv_tmap_node **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < m->nb; i++) {
        kv_tmap_node *x = m->b[i];
        while (x) {
            kv_tmap_node *next = x->hnext;
            size_t s = tmap_slot(x->key, nb);
            x->hnext = b[s];
            b[s] = x;
            x = next;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

void kv_tmap_insert(kv_tmap *m, kv_tmap_node *node) {
    if (m->n >= m->nb)
        tmap_grow(m);
    size_t s = tmap_slot(node->key, m->nb);
    node->hnext = m->b[s];
    m->b[s] = node;
    m->n++;
}

void kv_tmap_remove(kv_tmap *m, kv_tmap_node *node) {
    kv_tmap_node **pp = &m->b[tmap_slot(node->key, m->nb)];
    while (*pp && *pp != node)
        pp = &(*pp)->hnext;
    CHECK(*pp == node);
    *pp = node->hnext;
    node->hnext = NULL;
    m->n--;
}
