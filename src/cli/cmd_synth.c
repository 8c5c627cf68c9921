/* SPDX-License-Identifier: MIT */
/* cmd_synth: placeholder until the command lands. */
#include "cli/cli.h"
int cmd_synth(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_usage_error("synth", "not built yet");
}
