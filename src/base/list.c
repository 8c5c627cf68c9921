/* SPDX-License-Identifier: MIT */
/* list: see list.h. */
#include "base/list.h"

void list_push_last(list *l, list_link *link) {
    link->prev = l->last;
    link->next = NULL;
    if (l->last)
        l->last->next = link;
    else
        l->first = link;
    l->last = link;
}

void list_unlink(list *l, list_link *link) {
    if (link->prev)
        link->prev->next = link->next;
    else
        l->first = link->next;
    if (link->next)
        link->next->prev = link->prev;
    else
        l->last = link->prev;
    link->prev = link->next = NULL;
}
