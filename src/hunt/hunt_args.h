/* SPDX-License-Identifier: MIT */
/*
 * hunt_args: the option syntax of `verity hunt`, shared by the command and by `verity bisect`
 * (whose --hunt 'ARGS' string is split and parsed the same way).
 *
 *   --url URL  --api-key K  --model M  --concurrency 1,8,32,64  --sessions N  --turns T
 *   --tools N  --tools-file FILE  --context-pad TOKENS,...  --temperature T  --seed S
 *   --reference URL  --reference-concurrency N  --stream  --duration S  --out DIR  --json
 *   --max-tokens N  --timeout S  --tie-threshold NATS  --no-logprobs  --top-logprobs K
 *   --no-skip-special-tokens  --scrape-ms MS  --no-fill  --retries N  --quiet
 *
 * The api key may also come from VERITY_API_KEY.
 */
#ifndef VERITY_HUNT_ARGS_H
#define VERITY_HUNT_ARGS_H

#include "hunt/hunt_run.h"

#include <stddef.h>

/* Parses argv[0..argc) (options only, no command name) into c, which should hold the defaults
 * (hunt_config_default). Strings in c point into argv. Returns 0, or ERR_INVAL with a one-line
 * message in msg (naming the option and value). require_url: --url must be present. */
int hunt_args_parse(int argc, char **argv, hunt_config *c, bool require_url, char *msg, size_t cap);

/* Splits a command line into words the way a POSIX shell does for plain words, single and double
 * quotes and backslashes (no expansions). *argv_out is one malloc'd block holding the pointer
 * array and the strings (free() it once). Returns 0, ERR_FORMAT (an unterminated quote; msg says
 * where) or ERR_NOMEM. */
int hunt_args_split(const char *line, int *argc_out, char ***argv_out, char *msg, size_t cap);

/* Parses a comma-separated list of integers in [lo, hi] into out (at most max). Returns the count,
 * or -1 on a malformed or out-of-range element. */
int hunt_args_int_list(const char *s, int lo, int hi, int *out, int max);

#endif
