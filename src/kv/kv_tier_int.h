/* SPDX-License-Identifier: MIT */
/*
 * kv_tier_int: shared inside the KV tiers only. kv_tmap, a small intrusive hash map from a 64-bit
 * key to a node embedded in the caller's struct (the manager's results, the disk tier's index):
 * chained buckets, a power-of-two table that doubles when the load passes 1. Insert never fails:
 * if the table cannot grow, chains get longer. Not thread-safe: its owner locks.
 */
#ifndef VERITY_KV_KV_TIER_INT_H
#define VERITY_KV_KV_TIER_INT_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_tmap_node {
    uint64_t key;
    struct kv_tmap_node *hnext;
} kv_tmap_node;

typedef struct kv_tmap {
    kv_tmap_node **b; /* [nb] */
    size_t nb, n;
} kv_tmap;

/* Empties m with a first table of 64 buckets. 0 or ERR_NOMEM. */
int kv_tmap_init(kv_tmap *m);

/* Frees the table (not the nodes). */
void kv_tmap_deinit(kv_tmap *m);

/* The node with key, or NULL. */
kv_tmap_node *kv_tmap_find(const kv_tmap *m, uint64_t key);

/* Adds node (its key set, not already in m; keys are unique by the caller's check). */
void kv_tmap_insert(kv_tmap *m, kv_tmap_node *node);

/* Removes node, which must be in m. */
void kv_tmap_remove(kv_tmap *m, kv_tmap_node *node);

#define KV_TMAP_ENTRY(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
