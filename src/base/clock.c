/* SPDX-License-Identifier: MIT */
/* clock: see clock.h. */
#include "base/clock.h"

#include <time.h>

int64_t clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double clock_now_s(void) {
    return (double)clock_now_ns() * 1e-9;
}

int64_t clock_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}
