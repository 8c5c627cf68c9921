/* SPDX-License-Identifier: MIT */
/*
 * log: see log.h. The level is a relaxed atomic so any thread may log while another changes it.
 */
#include "base/log.h"
#include "base/check.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic int log_level_cur = LOG_WARN;

void log_set_level(enum log_level level) {
    atomic_store_explicit(&log_level_cur, (int)level, memory_order_relaxed);
}

int log_init_from_env(void) {
    const char *v = getenv("VERITY_LOG");
    if (!v || !*v)
        return 0;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(v, names[i]) == 0) {
            log_set_level((enum log_level)i);
            return 0;
        }
    }
    return -1;
}

int log_enabled(enum log_level level) {
    return (int)level <= atomic_load_explicit(&log_level_cur, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...) {
    if (!log_enabled(level))
        return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    int n = snprintf(line, sizeof line, "verity: %s: ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

_Noreturn void check_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "verity: CHECK failed: %s at %s:%d\n", expr, file, line);
    abort();
}
