/* SPDX-License-Identifier: MIT */
/* cmd_generate: placeholder until the command lands. */
#include "cli/cli.h"
int cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_usage_error("generate", "not built yet");
}
