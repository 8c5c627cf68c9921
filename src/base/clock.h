/* SPDX-License-Identifier: MIT */
/*
 * clock: monotonic and wall time in integer units.
 */
#ifndef VERITY_BASE_CLOCK_H
#define VERITY_BASE_CLOCK_H

#include <stdint.h>

/* Monotonic nanoseconds since an arbitrary origin (CLOCK_MONOTONIC). */
int64_t clock_now_ns(void);

/* Monotonic seconds as a double, for reporting durations. */
double clock_now_s(void);

/* Wall-clock seconds since the Unix epoch (CLOCK_REALTIME). */
int64_t clock_wall_s(void);

#endif
