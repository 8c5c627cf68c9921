/* SPDX-License-Identifier: MIT */
/* cmd_bench: placeholder until the command lands. */
#include "cli/cli.h"
int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_usage_error("bench", "not built yet");
}
