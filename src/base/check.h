/* SPDX-License-Identifier: MIT */
/*
 * check: the always-on assertion for programmer bugs (style.md, "three kinds of check").
 * CHECK(x) stays in release builds: it guards invariants whose violation means memory is about to
 * be corrupted, so stopping loudly beats continuing. Input errors, OOM, disconnects and full caches
 * are never CHECKed: they are errors returned to the caller.
 */
#ifndef VERITY_BASE_CHECK_H
#define VERITY_BASE_CHECK_H

/* Prints "CHECK failed: expr at file:line" to stderr and aborts. */
_Noreturn void check_fail(const char *expr, const char *file, int line);

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (__builtin_expect(!(x), 0))                                                             \
            check_fail(#x, __FILE__, __LINE__);                                                    \
    } while (0)

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
