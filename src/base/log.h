/* SPDX-License-Identifier: MIT */
/*
 * log: leveled logging to stderr. stdout is reserved for a command's output (generate prints only
 * the continuation there), so every diagnostic goes here. The level comes from VERITY_LOG
 * (error|warn|info|debug, default warn) or log_set_level(). Each line is written with a single
 * write() so lines from different threads do not interleave.
 */
#ifndef VERITY_BASE_LOG_H
#define VERITY_BASE_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Sets the level; messages above it are dropped. */
void log_set_level(enum log_level level);

/* Reads VERITY_LOG; an unknown value leaves the level unchanged and returns -1, else 0. */
int log_init_from_env(void);

/* Returns nonzero if messages at level would be printed. */
int log_enabled(enum log_level level);

/* Formats one line "verity: <level>: <message>\n" to stderr if level is enabled. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
