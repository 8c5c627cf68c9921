/* SPDX-License-Identifier: MIT */
/*
 * file: reading a whole file, the one way every part of verity does it (model converters, chat
 * templates, message and tool files, ledgers, test data). The file is read to its end with fread,
 * so pipes and /proc files work as well as regular files, and a size limit guards against
 * reading something unbounded into memory.
 */
#ifndef VERITY_BASE_FILE_H
#define VERITY_BASE_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Reads the file at path into a new buffer: *out (malloc'd, the caller frees it) holds *len
 * bytes and a NUL after them, so text can be used as a C string. max_bytes > 0 limits the size
 * (0: no limit). Returns 0, ERR_NOTFOUND (no such file), ERR_IO (cannot open or read: the detail
 * names the path and the system's reason), ERR_TOOLARGE (more than max_bytes), ERR_NOMEM. On
 * error *out is NULL and *len 0. */
int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len);

/* The same for an open stream f (stdin, a pipe), read to its end and left open; name names it in
 * messages. Returns 0, ERR_IO (a read error), ERR_TOOLARGE, ERR_NOMEM. */
int file_read_stream(FILE *f, const char *name, size_t max_bytes, char **out, size_t *len);

#endif
