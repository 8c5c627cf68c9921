/* SPDX-License-Identifier: MIT */
/* mem: see mem.h. Sizes are rounded up to 2 MiB so the mapping can be backed by huge pages. */
#include "base/mem.h"
#include "base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MEM_HUGE (2u << 20)

static size_t mem_round(size_t n) {
    return (n + MEM_HUGE - 1) & ~(size_t)(MEM_HUGE - 1);
}

void *mem_alloc_large(size_t n) {
    if (n == 0)
        n = 1;
    size_t len = mem_round(n);
    if (len < n)
        return NULL;
    void *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* advisory: fine if the kernel declines */
#endif
    return p;
}

void mem_free_large(void *p, size_t n) {
    if (p)
        munmap(p, mem_round(n ? n : 1));
}

int mem_grow(void **items, size_t *cap, size_t need, size_t item_bytes) {
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            break;
        c *= 2;
    }
    void *p = c >= need && c <= SIZE_MAX / item_bytes ? realloc(*items, c * item_bytes) : NULL;
    if (!p)
        return err_set(ERR_NOMEM, "out of memory growing an array to %zu items of %zu bytes", need,
                       item_bytes);
    *items = p;
    *cap = c;
    return 0;
}
