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

/* usage: printed for `verity CMD --help`; NULL where the command prints its own. The same table
 * feeds the man page (`verity flags --man`), so --help and verity(1) cannot disagree. */
static const cli_command commands[] = {
    {"serve", cmd_serve, "OpenAI-compatible HTTP server",
     "usage: verity serve [-m MODEL] [-t THREADS] [--host 127.0.0.1] [--port 8080] [--max-batch "
     "N]\n"
     "                    [--ctx N] [--kv-mem MIB] [--chunk N] [--queue-max N]\n"
     "                    [--api-key KEY | --api-key-file FILE] [--drain-timeout S] [--timeout S]\n"
     "                    [--max-body MIB] [--max-body-total MIB] [--max-conns N]\n"
     "                    [--max-conns-per-addr N]\n"
     "                    [--served-model-name NAME[,ALIAS...]] [--chat-template NAME|FILE]\n"
     "                    [--chat-template-kwargs JSON]\n"
     "                    [--spec off|ngram|draft|mtp] [--spec-k K] [--draft-model FILE]\n"
     "                    [--role prefill|decode|both] [--kv-transport tcp|ucx]\n"
     "                    [--kv-listen HOST:PORT] [--kv-xfer-timeout MS]\n"
     "Without -m (or MODEL=path) it serves the embedded stories260K. Built-in chat templates:\n"
     "chatml, llama3, llama2, mistral, gemma. Endpoints: /health,\n"
     "/v1/models, /v1/completions, /v1/chat/completions, /metrics, /tokenize, /detokenize,\n"
     "/v1/flags, /v1/status.\n"},
    {"router", cmd_router, "OpenAI-compatible front balancing many verity servers",
     "usage: verity router (--replica URL[,URL...] | --prefill URL[,...] --decode URL[,...])\n"
     "                     [--host 127.0.0.1] [--port 8080]\n"
     "                     [--api-key KEY | --api-key-file FILE] [--backend-api-key KEY]\n"
     "                     [--timeout S] [--drain-timeout S] [--router-workers N]\n"
     "                     [--router-health-ms MS] [--router-cache-aware 0|1]\n"
     "                     [--router-balance-abs N] [--router-cache-pct P]\n"
     "Each URL is http://HOST:PORT of a `verity serve`. Requests go to the replica holding the\n"
     "longest known prefix of their prompt unless the load is uneven, then to the least loaded;\n"
     "a request that has not streamed anything is retried on another replica. Endpoints: those\n"
     "of verity serve, and /health and /metrics of the router itself.\n"
     "With --prefill and --decode (servers started with --role prefill / --role decode) a\n"
     "prefill server computes each prompt's KV and sends it to a decode server, which answers.\n"},
    {"generate", cmd_generate, "generate text from a prompt or a JSONL file of prompts",
     "usage: verity generate [-m MODEL] (-p TEXT | --prompts FILE.jsonl) [-n N] [--temp T]\n"
     "                       [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
     "                       [--frequency-penalty F] [--presence-penalty P] [--seed S]\n"
     "                       [--chat] [--system TEXT] [--chat-template NAME|FILE]\n"
     "                       [--chat-template-kwargs JSON] [--ignore-eos] [--logits-digest]\n"
     "                       [--spec off|ngram|draft|mtp] [--spec-k K] [--draft-model FILE]\n"
     "                       [-t N]\n"
     "Without -m (or MODEL=path) it runs the embedded stories260K.\n"
     "Prints only the continuation on stdout; with --prompts, one JSON line per prompt.\n"},
    {"tokenize", cmd_tokenize, "print the token ids of a text", NULL},
    {"bench", cmd_bench, "measure prefill/decode speed against the machine's roofline",
     "usage: verity bench [-m MODEL] [--shape 0.5b|1b-kq] [--type TYPE] [--batch 1,8,32]\n"
     "                    [--prompt 256] [--gen 64] [--reps N] [-t N] [--cold] [--json]\n"
     "Without -m it benchmarks the synthetic model of SHAPE (default 0.5b) and TYPE (default f16;\n"
     "q4_k_m and q5_k_m are the llama.cpp mixes). The roofline is sampled before the first phase\n"
     "and after every phase; fractions use the medians. --cold: every decode step starts with\n"
     "none of the weights in the caches (an untimed read pass over the roofline's buffer).\n"},
    {"synth", cmd_synth, "write a deterministic random-weight model",
     "usage: verity synth --shape tiny|small|0.5b|gqa|1b-kq --type TYPE --seed S [--arch "
     "llama|qwen2|qwen3|qwen3moe|deepseek2|deepseek32|deepseek4]\n"
     "                    [--vocab-from GGUF] [--tied|--untied]\n                    "
     "[--rope-scaling linear|llama3|llama3-tensor]\n"
     "                    [--sliding-window W] [--nextn N (deepseek4 MTP layers)] -o OUT.gguf\n"
     "TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m q5_k_m\n"},
    {"convert", cmd_convert, "convert a llama2.c model to GGUF",
     "usage: verity convert llama2c --model MODEL.bin --tokenizer TOKENIZER.bin -o OUT.gguf\n"},
    {"quantize", cmd_quantize, "requantize a GGUF model's weights (q8_0, q4_k, q4_k_m, ...)",
     "usage: verity quantize IN.gguf OUT.gguf TYPE [-t N]\n"},
    {"chat-template", cmd_chat_template, "print the prompt a model's chat template renders",
     "usage: verity chat-template -m MODEL --messages FILE.json [--tools FILE.json]\n"
     "                            [--chat-template NAME|FILE] [--chat-template-kwargs JSON]\n"
     "                            [--no-generation-prompt]\n"
     "                            [--tool-args auto|as-given] [--now SECONDS]\n"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table",
     "usage: verity inspect FILE.gguf\n"},
    {"flags", cmd_flags, "list the toggle registry", "usage: verity flags [--json]\n"},
    {"hunt", cmd_hunt, "find concurrency-dependent corruption in an OpenAI-compatible server",
     NULL},
    {"bisect", cmd_bisect, "find the configuration toggle behind corruption that hunt measures",
     NULL},
};

const cli_command *cli_command_table(int *n) {
    *n = (int)(sizeof commands / sizeof *commands);
    return commands;
}

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
            if (commands[i].usage && argc >= 3 &&
                (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
                fputs(commands[i].usage, stdout);
                printf("Every toggle of `verity flags` is also accepted as --NAME VALUE.\n");
                return 0;
            }
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
