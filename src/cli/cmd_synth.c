/* SPDX-License-Identifier: MIT */
/*
 * cmd_synth: `verity synth --shape tiny|small|0.5b|gqa|1b-kq --type TYPE --seed S
 * [--arch llama|qwen2|qwen3|qwen3moe|deepseek2|deepseek32|deepseek4] [--nextn N] [--vocab-from
 * GGUF] [--tied|--untied] -o OUT.gguf`, TYPE one of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k
 * q6_k, or q4_k_m / q5_k_m (the llama.cpp-style mixes). Matrices whose rows the type's block does
 * not divide (K-quants need multiples of 256) get llama.cpp's fallback type; model/quantize.h has
 * the rule and the mix recipes.
 */
#include "base/err.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/quantize.h"
#include "model/synth.h"

#include <stdio.h>
#include <string.h>

int cmd_synth(int argc, char **argv) {
    synth_opts o = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 1};
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--shape")) {
            if (!(v = cli_next("synth", argc, argv, &i)))
                return 2;
            o.shape = v;
        } else if (!strcmp(a, "--type")) {
            if (!(v = cli_next("synth", argc, argv, &i)))
                return 2;
            quant_plan plan;
            if (quant_plan_parse(v, &plan))
                return cli_usage_error("synth", "--type: %s", err_detail());
            o.type = plan.type;
            o.mix = plan.mix;
        } else if (!strcmp(a, "--seed")) {
            int64_t s;
            if (!(v = cli_next("synth", argc, argv, &i)) ||
                cli_parse_i64("synth", "--seed", v, 0, INT64_MAX, &s))
                return 2;
            o.seed = (uint64_t)s;
        } else if (!strcmp(a, "--arch")) {
            if (!(v = cli_next("synth", argc, argv, &i)))
                return 2;
            o.arch = v;
        } else if (!strcmp(a, "--vocab-from")) {
            if (!(v = cli_next("synth", argc, argv, &i)))
                return 2;
            o.vocab_from = v;
        } else if (!strcmp(a, "--rope-scaling")) {
            if (!(v = cli_next("synth", argc, argv, &i)))
                return 2;
            o.rope_scaling = v;
        } else if (!strcmp(a, "--sliding-window")) {
            int64_t sw;
            if (!(v = cli_next("synth", argc, argv, &i)) ||
                cli_parse_i64("synth", "--sliding-window", v, 1, 1 << 24, &sw))
                return 2;
            o.sliding_window = sw;
        } else if (!strcmp(a, "--nextn")) {
            int64_t nn;
            if (!(v = cli_next("synth", argc, argv, &i)) ||
                cli_parse_i64("synth", "--nextn", v, 0, 4, &nn))
                return 2;
            o.nextn = (int)nn;
        } else if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            o.tied_set = true;
            o.tied = !strcmp(a, "--tied");
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_next("synth", argc, argv, &i)))
                return 2;
        } else {
            return cli_usage_error(
                "synth",
                "unknown option '%s' (usage: verity synth --shape "
                "tiny|small|0.5b|gqa|1b-kq --type TYPE --seed S [--arch A] [--vocab-from GGUF] "
                "-o OUT.gguf)",
                a);
        }
    }
    if (!out)
        return cli_usage_error("synth", "missing -o OUT.gguf");
    int rc = synth_write(&o, out);
    if (rc)
        return cli_fail("synth", rc);
    return 0;
}
