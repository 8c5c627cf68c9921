/* SPDX-License-Identifier: MIT */
/*
 * cli: sub-command entry points and the small helpers they share (option parsing, the one-line
 * error convention). Each command returns the process exit status: 0 success, 1 a runtime failure
 * after valid input, 2 bad input (usage, malformed file, unsupported model) with exactly one line
 * on stderr. Only main() exits.
 */
#ifndef VERITY_CLI_CLI_H
#define VERITY_CLI_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cmd_inspect(int argc, char **argv);
int cmd_flags(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_hunt(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_router(int argc, char **argv);

/* One sub-command: its name, entry point, one-line summary, and the usage text `verity NAME
 * --help` prints (NULL where the command prints its own). */
typedef struct cli_command {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
    const char *usage;
} cli_command;

/* The sub-command table of main.c (static storage, never freed); sets *n to its length. Read by
 * main's dispatch and --help and by the man page generator, so both show the same commands. */
const cli_command *cli_command_table(int *n);

/* Writes the verity(1) man page (roff) on stdout, built from cli_command_table() and the flags.h
 * registry (cli_man.c). Returns 0, or 1 if stdout could not be written. */
int cli_man_write(void);

/* Prints "verity <cmd>: <message>" as one line on stderr and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "verity <cmd>: <err_detail() or err_str(rc)>" on stderr; returns 2 for input-class errors
 * (ERR_FORMAT, ERR_UNSUPPORTED, ERR_INVAL, ERR_RANGE, ERR_NOTFOUND, ERR_IO, ERR_TOOLARGE) and 1
 * otherwise. */
int cli_fail(const char *cmd, int rc);

/* Option value parsers: return 0 or print a usage error and return 2. */
int cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi,
                  int64_t *out);
int cli_parse_f64(const char *cmd, const char *opt, const char *s, double lo, double hi,
                  double *out);

/* Returns the value following option argv[*i] (advancing *i), or NULL after printing a usage
 * error if there is none. */
const char *cli_next(const char *cmd, int argc, char **argv, int *i);

/* Fills buf[0, cap) with the API key of --api-key or the first line of --api-key-file (not both;
 * "" when neither is given). Returns 0 or prints a usage error naming cmd and returns 2. */
int cli_load_api_key(const char *cmd, char *buf, size_t cap);

/* The flag SIGINT and SIGTERM set once cli_stop_catch() has run: hunt and bisect poll it, stop
 * between requests or rounds and keep what they have. Static storage; 0 until a signal comes. */
volatile sig_atomic_t *cli_stop_flag(void);

/* Makes SIGINT and SIGTERM set *cli_stop_flag() instead of ending the process. */
void cli_stop_catch(void);

#endif
