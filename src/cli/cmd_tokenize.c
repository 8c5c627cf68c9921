/* SPDX-License-Identifier: MIT */
/* cmd_tokenize: placeholder until the command lands. */
#include "cli/cli.h"
int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_usage_error("tokenize", "not built yet");
}
