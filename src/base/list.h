/* SPDX-License-Identifier: MIT */
/*
 * list: an intrusive doubly-linked list, first in first. An element embeds a list_link and may
 * sit in one list per link; the list holds its first and last links, so appending, unlinking
 * any element and taking the first are O(1) and allocate nothing. The disk KV tier's LRU order,
 * the tier manager's staging list and the hunt client's requests in flight are such lists.
 *
 * Not thread-safe: whoever owns the elements guards the list with the same lock, if any.
 */
#ifndef VERITY_BASE_LIST_H
#define VERITY_BASE_LIST_H

#include <stddef.h>

typedef struct list_link {
    struct list_link *prev, *next; /* NULL at the ends, and while not in a list */
} list_link;

typedef struct list {
    list_link *first, *last; /* NULL when empty; a zeroed list is empty */
} list;

/* Appends link, which is in no list, at the end of l. */
void list_push_last(list *l, list_link *link);

/* Removes link from l, which must hold it; its prev and next become NULL. */
void list_unlink(list *l, list_link *link);

/* The element of type `type` whose member `member` (a list_link) is link; NULL for a NULL link. */
#define LIST_ENTRY(link, type, member) ((type *)list_entry_at((link), offsetof(type, member)))

/* LIST_ENTRY's arithmetic: the address off bytes before link, or NULL. */
static inline void *list_entry_at(list_link *link, size_t off) {
    return link ? (void *)((char *)link - off) : NULL;
}

#endif
