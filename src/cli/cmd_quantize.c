/* SPDX-License-Identifier: MIT */
/*
 * cmd_quantize: `verity quantize IN.gguf OUT.gguf TYPE [-t N]` requantizes every weight matrix of
 * a model to TYPE (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k, or the q4_k_m / q5_k_m mixes), with
 * llama.cpp's fallback for rows the type's block does not divide, norms and vectors F32, metadata
 * copied (model/quantize.h). The output is written atomically: on any error (one line on stderr,
 * exit 2 for bad input) no output file appears. -t sets the threads (default: the `threads`
 * toggle, else every CPU); the output does not depend on it.
 */
#include "base/cpu.h"
#include "base/err.h"
#include "base/flags.h"
#include "cli/cli.h"
#include "model/quantize.h"

#include <stdio.h>
#include <string.h>

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-t")) {
            const char *v = cli_next("quantize", argc, argv, &i);
            if (!v)
                return 2;
            if (flags_set("threads", v))
                return cli_usage_error("quantize", "%s", err_detail());
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("quantize",
                                   "unknown option '%s' (usage: verity quantize "
                                   "IN.gguf OUT.gguf TYPE [-t N])",
                                   a);
        } else if (n_pos == 3) {
            return cli_usage_error("quantize",
                                   "unexpected argument '%s' (usage: verity quantize "
                                   "IN.gguf OUT.gguf TYPE [-t N])",
                                   a);
        } else {
            pos[n_pos++] = a;
        }
    }
    if (n_pos != 3)
        return cli_usage_error("quantize", "usage: verity quantize IN.gguf OUT.gguf TYPE [-t N]");
    quant_plan plan;
    if (quant_plan_parse(pos[2], &plan))
        return cli_usage_error("quantize", "%s", err_detail());
    int threads = (int)flags_int(FLAG_THREADS);
    if (threads <= 0)
        threads = cpu_count_online();
    int rc = quant_model(pos[0], pos[1], &plan, threads);
    if (rc)
        return cli_fail("quantize", rc);
    return 0;
}
