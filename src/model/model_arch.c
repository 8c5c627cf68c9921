/* SPDX-License-Identifier: MIT */
/*
 * model_arch: the one table of architectures (model_int.h). An architecture is a model_arch
 * defined in its own arch_<name>.c; adding one is that file and one row below. The table is
 * constant and read by any thread.
 */
#include "model/model_int.h"

#include <stdio.h>
#include <string.h>

extern const model_arch arch_llama, arch_qwen2, arch_qwen3, arch_qwen3moe, arch_deepseek2,
    arch_deepseek32, arch_deepseek4;

static const model_arch *const model_archs[] = {
    &arch_llama, &arch_qwen2, &arch_qwen3, &arch_qwen3moe, &arch_deepseek2, &arch_deepseek32,
    &arch_deepseek4,
};

#define MODEL_N_ARCHS (sizeof model_archs / sizeof *model_archs)

const model_arch *model_arch_find(const char *name) {
    for (size_t i = 0; i < MODEL_N_ARCHS; i++)
        if (strcmp(model_archs[i]->name, name) == 0)
            return model_archs[i];
    return NULL;
}

void model_arch_names(char *buf, size_t size) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < MODEL_N_ARCHS && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", model_archs[i]->name);
}
