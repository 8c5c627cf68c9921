/* SPDX-License-Identifier: MIT */
/* test harness: see test.h. */
#include "test.h"

#include "base/file.h"
#include "base/err.h"

#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static jmp_buf test_jmp;
static int test_failed_count;
static int test_state; /* 0 pass, 1 fail, 2 skip */
static char test_msg[2048];
static char test_tmp[256];
static const char *test_name; /* the case running */

void test_run(const char *name, void (*fn)(void)) {
    test_name = name;
    test_state = 0;
    test_msg[0] = 0;
    err_clear();
    if (setjmp(test_jmp) == 0)
        fn();
    if (test_state == 0)
        printf("PASS %s\n", name);
    else if (test_state == 1) {
        printf("FAIL %s: %s\n", name, test_msg);
        test_failed_count++;
    } else
        printf("SKIP %s: %s\n", name, test_msg);
    fflush(stdout);
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    int n = snprintf(test_msg, sizeof test_msg, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(test_msg + n, sizeof test_msg - (size_t)n, fmt, ap);
    va_end(ap);
    test_state = 1;
    longjmp(test_jmp, 1);
}

void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(test_msg, sizeof test_msg, fmt, ap);
    va_end(ap);
    test_state = 2;
    longjmp(test_jmp, 1);
}

void test_skip_part(const char *part, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("SKIP %s[%s]: %s\n", test_name ? test_name : "?", part, msg);
    fflush(stdout);
}

static int test_rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int test_summary(void) {
    if (test_tmp[0])
        nftw(test_tmp, test_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return test_failed_count ? 1 : 0;
}

const char *test_shared_dir(void) {
    const char *s = getenv("VERITY_SHARED");
    return s && *s ? s : "../shared";
}

const char *test_shared_file(const char *rel) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_shared_dir(), rel);
    if (access(path, R_OK) != 0)
        test_skip("%s not found (shared data missing)", path);
    return path;
}

double test_scale(void) {
    const char *s = getenv("VERITY_TEST_SCALE");
    if (s && *s) {
        double v = atof(s);
        if (v > 0)
            return v;
    }
    return 1.0;
}

const char *test_tmpdir(void) {
    if (!test_tmp[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(test_tmp, sizeof test_tmp, "%s/verity-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(test_tmp)) {
            fprintf(stderr, "cannot create temporary directory\n");
            exit(2);
        }
    }
    return test_tmp;
}

char *test_read_file(const char *path, size_t *len) {
    char *b;
    return file_read_all(path, 0, &b, len) ? NULL : b;
}
