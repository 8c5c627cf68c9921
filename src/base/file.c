/* SPDX-License-Identifier: MIT */
/* file: see file.h. The buffer doubles from 64 KiB as the file is read. */
#include "base/file.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(errno == ENOENT ? ERR_NOTFOUND : ERR_IO, "%s: cannot open: %s", path,
                       strerror(errno));
    int rc = file_read_stream(f, path, max_bytes, out, len);
    fclose(f);
    return rc;
}

int file_read_stream(FILE *f, const char *path, size_t max_bytes, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (cap - n < 2) { /* room for at least one byte and the NUL */
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = nc > cap ? realloc(buf, nc) : NULL;
            if (!nb) {
                rc = err_set(ERR_NOMEM, "%s: out of memory after %zu bytes", path, n);
                break;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (max_bytes && n > max_bytes) {
            rc = err_set(ERR_TOOLARGE, "%s: larger than %zu bytes", path, max_bytes);
            break;
        }
        if (got == 0) {
            if (ferror(f))
                rc = err_set(ERR_IO, "%s: read error after %zu bytes", path, n);
            break;
        }
    }
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}
