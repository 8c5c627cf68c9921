/* SPDX-License-Identifier: MIT */
/* cmd_bisect: placeholder, filled in below. */
#include "cli/cli.h"

int cmd_bisect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_usage_error("bisect", "not implemented yet");
}
