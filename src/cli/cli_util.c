/* SPDX-License-Identifier: MIT */
/* cli_util: shared option parsing and error printing for the sub-commands. See cli.h. */
#include "cli/cli.h"
#include "base/err.h"
#include "base/flags.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "verity %s: %s\n", cmd, msg);
    return 2;
}

int cli_fail(const char *cmd, int rc) {
    const char *d = err_detail();
    fprintf(stderr, "verity %s: %s\n", cmd, d[0] ? d : err_str(rc));
    switch (rc) {
    case ERR_FORMAT:
    case ERR_UNSUPPORTED:
    case ERR_INVAL:
    case ERR_RANGE:
    case ERR_NOTFOUND:
    case ERR_IO:
    case ERR_TOOLARGE:
        return 2;
    default:
        return 1;
    }
}

int cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi,
                  int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return cli_usage_error(cmd, "%s: invalid value '%s' (an integer in %lld..%lld)", opt, s,
                               (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int cli_parse_f64(const char *cmd, const char *opt, const char *s, double lo, double hi,
                  double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return cli_usage_error(cmd, "%s: invalid value '%s' (a number in %g..%g)", opt, s, lo, hi);
    *out = v;
    return 0;
}

const char *cli_next(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int cli_read_key_file(const char *cmd, const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_usage_error(cmd, "--api-key-file %s: cannot open", path);
    if (!fgets(buf, (int)cap, f)) {
        fclose(f);
        return cli_usage_error(cmd, "--api-key-file %s: empty", path);
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = 0;
    if (!buf[0])
        return cli_usage_error(cmd, "--api-key-file %s: empty first line", path);
    return 0;
}

int cli_load_api_key(const char *cmd, char *buf, size_t cap) {
    const char *key_file = flags_str(FLAG_API_KEY_FILE);
    if (flags_str(FLAG_API_KEY)[0] && key_file[0])
        return cli_usage_error(cmd, "give --api-key or --api-key-file, not both");
    if (key_file[0])
        return cli_read_key_file(cmd, key_file, buf, cap);
    snprintf(buf, cap, "%s", flags_str(FLAG_API_KEY));
    return 0;
}

static volatile sig_atomic_t cli_stop;

static void cli_on_signal(int s) {
    (void)s;
    cli_stop = 1;
}

volatile sig_atomic_t *cli_stop_flag(void) {
    return &cli_stop;
}

void cli_stop_catch(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cli_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
