/* SPDX-License-Identifier: MIT */
/*
 * cpu: see cpu.h. The features are computed once (pthread_once) and then read-only.
 */
#include "base/cpu.h"
#include "base/err.h"

#include <cpuid.h>
#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static cpu_features cpu_feat;
static char cpu_name[49] = "unknown";
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static uint64_t cpu_xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void cpu_detect_name(void) {
    unsigned a, b, c, d, r[12];
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &r[i * 4], &r[i * 4 + 1], &r[i * 4 + 2], &r[i * 4 + 3]);
        memcpy(cpu_name, r, 48);
        cpu_name[48] = 0;
    }
}

static void cpu_detect(void) {
    unsigned a, b, c, d;
    cpu_detect_name();
    if (__get_cpuid(0, &a, &b, &c, &d)) /* the vendor string is in ebx, edx, ecx */
        cpu_feat.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool osxsave = (c >> 27) & 1;
    bool avx = (c >> 28) & 1;
    bool fma = (c >> 12) & 1;
    bool f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? cpu_xgetbv0() : 0;
    bool ymm_ok = avx && (xcr0 & 0x6) == 0x6;
    bool zmm_ok = ymm_ok && (xcr0 & 0xE0) == 0xE0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    cpu_feat.avx2 = ymm_ok && ((b >> 5) & 1);
    cpu_feat.bmi2 = (b >> 8) & 1;
    cpu_feat.fma = ymm_ok && fma;
    cpu_feat.f16c = ymm_ok && f16c;
    cpu_feat.avx512f = zmm_ok && ((b >> 16) & 1);
    cpu_feat.avx512dq = zmm_ok && ((b >> 17) & 1);
    cpu_feat.avx512bw = zmm_ok && ((b >> 30) & 1);
    cpu_feat.avx512vl = zmm_ok && ((b >> 31) & 1);
    cpu_feat.avx512vnni = zmm_ok && ((c >> 11) & 1);
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        cpu_feat.avxvnni = ymm_ok && ((a >> 4) & 1);
        cpu_feat.avx512bf16 = zmm_ok && ((a >> 5) & 1);
    }
}

const cpu_features *cpu_get_features(void) {
    pthread_once(&cpu_once, cpu_detect);
    return &cpu_feat;
}

int cpu_count_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

const char *cpu_model_name(void) {
    pthread_once(&cpu_once, cpu_detect);
    return cpu_name;
}

/* One number of a CPU list at *p (advanced past it); -1 if there is none or it is too large. */
static long cpu_list_num(const char **p) {
    if (!isdigit((unsigned char)**p))
        return -1;
    long v = 0;
    while (isdigit((unsigned char)**p)) {
        v = v * 10 + (**p - '0');
        if (v >= CPU_SETSIZE)
            return -1;
        (*p)++;
    }
    return v;
}

int cpu_pin_list(const char *list) {
    cpu_set_t allowed, want;
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return err_set(ERR_INVAL, "CPU list '%s': this process's CPUs cannot be read", list);
    CPU_ZERO(&want);
    const char *p = list;
    for (;;) {
        const char *part = p;
        long lo = cpu_list_num(&p), hi = lo;
        if (lo >= 0 && *p == '-') {
            p++;
            hi = cpu_list_num(&p);
        }
        if (lo < 0 || hi < lo || (*p && *p != ','))
            return err_set(ERR_INVAL,
                           "CPU list '%s': '%.*s' is not a CPU number or range (like 1 or 0-3, "
                           "below %d)",
                           list, (int)strcspn(part, ","), part, CPU_SETSIZE);
        for (long c = lo; c <= hi; c++) {
            if (!CPU_ISSET((int)c, &allowed))
                return err_set(ERR_INVAL,
                               "CPU list '%s': CPU %ld is not one this process may run on", list,
                               c);
            CPU_SET((int)c, &want);
        }
        if (!*p)
            break;
        p++; /* the comma */
    }
    if (sched_setaffinity(0, sizeof want, &want))
        return err_set(ERR_INVAL, "CPU list '%s': the kernel refused it", list);
    return 0;
}
