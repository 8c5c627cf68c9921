/* SPDX-License-Identifier: MIT */
/* cmd_convert: placeholder until the command lands. */
#include "cli/cli.h"
int cmd_convert(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_usage_error("convert", "not built yet");
}
