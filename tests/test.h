/* SPDX-License-Identifier: MIT */
/*
 * test: the tiny harness every test binary uses. A test binary's main calls test_run() for each
 * case; a case fails at its first failed T_CHECK (the harness longjmps out of it) and may skip
 * itself with test_skip() (missing ../shared data). Each case prints one line:
 *   PASS name | FAIL name: file:line: message | SKIP name: reason
 * and before it one "SKIP name[part]: reason" line per part it could not run (test_skip_part).
 * tests/run.sh counts those lines over every binary and script and prints "N passed, N failed".
 */
#ifndef VERITY_TESTS_TEST_H
#define VERITY_TESTS_TEST_H

#include <stdbool.h>
#include <stddef.h>

/* Runs one case. */
void test_run(const char *name, void (*fn)(void));

/* Marks the current case failed with a message and leaves it. */
_Noreturn void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Marks the current case skipped with a one-line reason and leaves it. */
_Noreturn void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reports a part of the current case that cannot run here (an instruction set this CPU lacks) as
 * its own line, "SKIP <case>[<part>]: reason", without leaving the case: the rest of it runs and
 * its PASS/FAIL line follows. */
void test_skip_part(const char *part, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returns the process exit status for main: 1 if any case failed. */
int test_summary(void);

/* Path of ../shared (VERITY_SHARED overrides), relative to the repository root. */
const char *test_shared_dir(void);

/* Builds "<shared>/<rel>" into a static buffer; skips the case if the file does not exist. */
const char *test_shared_file(const char *rel);

/* Scale factor for heavy tests: 1 normally, smaller under sanitizers (VERITY_TEST_SCALE). */
double test_scale(void);

/* The whole file at path, NUL-terminated (base/file.h's file_read_all; the caller frees it), its
 * length in *len; NULL if it cannot be read. */
char *test_read_file(const char *path, size_t *len);

/* A fresh temporary directory for this binary (removed at exit). */
const char *test_tmpdir(void);

#define T_CHECK(cond)                                                                              \
    do {                                                                                           \
        if (!(cond))                                                                               \
            test_fail(__FILE__, __LINE__, "check failed: %s", #cond);                              \
    } while (0)

#define T_CHECKF(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                                            \
    } while (0)

/* Checks that an int-returning call returned 0, printing the error detail otherwise. */
#define T_OK(expr)                                                                                 \
    do {                                                                                           \
        int t_rc_ = (expr);                                                                        \
        if (t_rc_ != 0)                                                                            \
            test_fail(__FILE__, __LINE__, "%s returned %d: %s", #expr, t_rc_, err_detail());       \
    } while (0)

#define T_EQ_INT(a, b)                                                                             \
    do {                                                                                           \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                                    \
        if (t_a_ != t_b_)                                                                          \
            test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #a, t_a_, #b, t_b_);  \
    } while (0)

#endif
