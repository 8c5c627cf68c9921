/* SPDX-License-Identifier: MIT */
/*
 * cpu: instruction-set detection (CPUID + XGETBV) and core count. Kernels are chosen at start-up
 * from what this reports and the `isa` toggle (flags.h).
 */
#ifndef VERITY_BASE_CPU_H
#define VERITY_BASE_CPU_H

#include <stdbool.h>

typedef struct cpu_features {
    bool avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool avxvnni;
    bool amd; /* vendor "AuthenticAMD" (kernel choices that depend on the pipes, not the ISA) */
} cpu_features;

/* Returns the features of the running CPU, including OS support for the register state (XCR0). */
const cpu_features *cpu_get_features(void);

/* Number of online CPUs (>= 1). */
int cpu_count_online(void);

/* A one-line description of the CPU's model name, or "unknown". Static storage. */
const char *cpu_model_name(void);

/* Pins the calling thread (and so every thread it starts afterwards) to the CPUs of list: numbers
 * and ranges separated by commas ("1", "0-3,6"), each CPU one this process may run on now
 * (sched_getaffinity). Returns 0, or ERR_INVAL (nothing changed) with a detail naming the part of
 * the list that is malformed or the CPU that is not available. */
int cpu_pin_list(const char *list);

#endif
