/* SPDX-License-Identifier: MIT */
/*
 * test_isa: what a kernel test says about the instruction sets it cannot check here. A case that
 * compares every available SIMD kernel with its scalar reference calls test_skip_missing_isas()
 * once: for each SIMD ISA the CPU lacks (kn_isa_available false) it prints
 *   SKIP <case>[avx512]: this CPU lacks AVX-512 (no avx512f avx512vnni): ...
 * naming the missing CPU features, so a machine without AVX-512 never passes those kernels'
 * tests in silence. Header-only (static inline): two test binaries use it.
 */
#ifndef VERITY_TESTS_TEST_ISA_H
#define VERITY_TESTS_TEST_ISA_H

#include "base/cpu.h"
#include "kernels/kn.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

/* Prints one test_skip_part line for each SIMD ISA this CPU lacks. */
static inline void test_skip_missing_isas(void) {
    const cpu_features *f = cpu_get_features();
    const struct {
        const char *name;
        bool have;
    } need[] = {{"avx2", f->avx2},         {"fma", f->fma},
                {"f16c", f->f16c},         {"avx512f", f->avx512f},
                {"avx512bw", f->avx512bw}, {"avx512vl", f->avx512vl},
                {"avx512dq", f->avx512dq}, {"avx512vnni", f->avx512vnni}};
    const struct {
        kn_isa isa;
        const char *title;
        int n_need; /* the first n_need entries of need[] */
    } isas[] = {{KN_ISA_AVX2, "AVX2", 3}, {KN_ISA_AVX512, "AVX-512", 8}};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (kn_isa_available(isas[i].isa))
            continue;
        char missing[160] = "";
        for (int k = 0; k < isas[i].n_need; k++)
            if (!need[k].have)
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s",
                         need[k].name);
        test_skip_part(kn_isa_name(isas[i].isa),
                       "this CPU lacks %s (no%s): the %s kernels were not checked against the "
                       "scalar reference",
                       isas[i].title, missing[0] ? missing : " SIMD in this build",
                       kn_isa_name(isas[i].isa));
    }
}

#endif
