/* SPDX-License-Identifier: MIT */
/*
 * main: the one `verity` binary. Reads the toggle registry's environment variables and registered
 * `--flag value` options (flags.h), then dispatches to a sub-command. Exit status: 0 success,
 * 1 runtime failure, 2 bad input or usage (one line on stderr).
 */
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"generate", cmd_generate, "generate text from a prompt or a JSONL file of prompts"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"bench", cmd_bench, "measure prefill/decode speed against the machine's roofline"},
    {"synth", cmd_synth, "write a deterministic random-weight model"},
    {"convert", cmd_convert, "convert a llama2.c model to GGUF"},
    {"quantize", cmd_quantize, "requantize a GGUF model's weights (q8_0, q4_k, q4_k_m, ...)"},
    {"chat-template", cmd_chat_template, "print the prompt a model's chat template renders"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"flags", cmd_flags, "list the toggle registry"},
    {"hunt", cmd_hunt, "find concurrency-dependent corruption in an OpenAI-compatible server"},
    {"bisect", cmd_bisect, "find the configuration toggle behind corruption that hunt measures"},
};

static void main_usage(FILE *f) {
    fprintf(f, "usage: verity <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nEvery toggle listed by `verity flags` is also accepted as --NAME VALUE.\n");
}

int main(int argc, char **argv) {
    if (log_init_from_env() != 0)
        fprintf(stderr, "verity: warning: ignoring VERITY_LOG (use error|warn|info|debug)\n");
    if (argc < 2) {
        main_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        main_usage(stdout);
        return 0;
    }
    if (flags_init() != 0) {
        fprintf(stderr, "verity: %s\n", err_detail());
        return 2;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            int sub_argc = argc - 1;
            char **sub_argv = argv + 1;
            if (flags_parse_args(&sub_argc, sub_argv) != 0) {
                fprintf(stderr, "verity %s: %s\n", argv[1], err_detail());
                return 2;
            }
            return commands[i].fn(sub_argc, sub_argv);
        }
    }
    fprintf(stderr, "verity: unknown command '%s' (try verity --help)\n", argv[1]);
    return 2;
}
