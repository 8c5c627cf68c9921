/* SPDX-License-Identifier: MIT */
/* hunt_args: option parsing for hunt, and a shell-like word splitter. See hunt_args.h. */
#include "hunt/hunt_args.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hunt_args_int_list(const char *s, int lo, int hi, int *out, int max) {
    int n = 0;
    const char *p = s;
    if (!*p)
        return -1;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || n >= max)
            return -1;
        out[n++] = (int)v;
        if (*end == 0)
            return n;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

static int hunt_bad(char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int hunt_bad(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return err_set(ERR_INVAL, "%s", msg);
}

static int hunt_num(const char *opt, const char *v, double lo, double hi, double *out, char *msg,
                    size_t cap) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(d) || d < lo || d > hi)
        return hunt_bad(msg, cap, "%s: invalid value '%s' (a number in %g..%g)", opt, v, lo, hi);
    *out = d;
    return 0;
}

static int hunt_int(const char *opt, const char *v, long lo, long hi, int *out, char *msg,
                    size_t cap) {
    char *end;
    errno = 0;
    long d = strtol(v, &end, 10);
    if (end == v || *end || errno || d < lo || d > hi)
        return hunt_bad(msg, cap, "%s: invalid value '%s' (an integer in %ld..%ld)", opt, v, lo,
                        hi);
    *out = (int)d;
    return 0;
}

int hunt_args_parse(int argc, char **argv, hunt_config *c, bool require_url, char *msg,
                    size_t cap) {
    const char *key = getenv("VERITY_API_KEY");
    if (key && *key && !c->api_key)
        c->api_key = key;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        /* flags without a value */
        if (!strcmp(o, "--stream")) {
            c->stream = true;
            continue;
        }
        if (!strcmp(o, "--json")) {
            c->json = true;
            continue;
        }
        if (!strcmp(o, "--no-logprobs")) {
            c->logprobs = false;
            continue;
        }
        if (!strcmp(o, "--no-skip-special-tokens")) {
            c->skip_special = false;
            continue;
        }
        if (!strcmp(o, "--no-fill")) {
            c->fill = false;
            continue;
        }
        if (!strcmp(o, "--quiet")) {
            c->progress = 0;
            continue;
        }
        static const char *const with_value[] = {"--url",
                                                 "--api-key",
                                                 "--model",
                                                 "--concurrency",
                                                 "--sessions",
                                                 "--turns",
                                                 "--tools",
                                                 "--tools-file",
                                                 "--context-pad",
                                                 "--temperature",
                                                 "--seed",
                                                 "--reference",
                                                 "--reference-concurrency",
                                                 "--duration",
                                                 "--out",
                                                 "--max-tokens",
                                                 "--timeout",
                                                 "--tie-threshold",
                                                 "--top-logprobs",
                                                 "--scrape-ms",
                                                 "--retries"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= strcmp(o, with_value[k]) == 0;
        if (!known)
            return hunt_bad(msg, cap, "unknown option '%s'", o);
        if (i + 1 >= argc)
            return hunt_bad(msg, cap, "option %s needs a value", o);
        const char *v = argv[++i];
        double d;
        int rc = 0;
        if (!strcmp(o, "--url"))
            c->url = v;
        else if (!strcmp(o, "--api-key"))
            c->api_key = v;
        else if (!strcmp(o, "--model"))
            c->model = v;
        else if (!strcmp(o, "--tools-file"))
            c->tools_file = v;
        else if (!strcmp(o, "--reference"))
            c->ref_url = v;
        else if (!strcmp(o, "--out"))
            c->out_dir = v;
        else if (!strcmp(o, "--concurrency")) {
            c->n_conc = hunt_args_int_list(v, 1, 100000, c->conc, HUNT_MAX_LEVELS);
            if (c->n_conc < 1)
                return hunt_bad(msg, cap,
                                "--concurrency: invalid list '%s' (up to %d integers in "
                                "1..100000, comma-separated)",
                                v, HUNT_MAX_LEVELS);
        } else if (!strcmp(o, "--context-pad")) {
            c->n_pads = hunt_args_int_list(v, 0, 4000000, c->pads, HUNT_MAX_PADS);
            if (c->n_pads < 1)
                return hunt_bad(msg, cap,
                                "--context-pad: invalid list '%s' (up to %d token "
                                "counts in 0..4000000, comma-separated)",
                                v, HUNT_MAX_PADS);
        } else if (!strcmp(o, "--sessions"))
            rc = hunt_int(o, v, 1, 10000000, &c->sessions, msg, cap);
        else if (!strcmp(o, "--turns"))
            rc = hunt_int(o, v, 1, HUNT_MAX_TURNS, &c->turns, msg, cap);
        else if (!strcmp(o, "--tools"))
            rc = hunt_int(o, v, 0, 12, &c->n_tools, msg, cap);
        else if (!strcmp(o, "--reference-concurrency"))
            rc = hunt_int(o, v, 1, 100000, &c->ref_conc, msg, cap);
        else if (!strcmp(o, "--max-tokens"))
            rc = hunt_int(o, v, 1, 1000000, &c->max_tokens, msg, cap);
        else if (!strcmp(o, "--top-logprobs"))
            rc = hunt_int(o, v, 1, 20, &c->top_logprobs, msg, cap);
        else if (!strcmp(o, "--scrape-ms"))
            rc = hunt_int(o, v, 0, 3600000, &c->scrape_ms, msg, cap);
        else if (!strcmp(o, "--retries"))
            rc = hunt_int(o, v, 0, 100, &c->retries, msg, cap);
        else if (!strcmp(o, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (end == v || *end || errno || v[0] == '-')
                return hunt_bad(msg, cap, "--seed: invalid value '%s' (a non-negative integer)", v);
            c->seed = s;
        } else if (!strcmp(o, "--temperature")) {
            rc = hunt_num(o, v, 0, 10, &d, msg, cap);
            c->temperature = d;
        } else if (!strcmp(o, "--duration")) {
            rc = hunt_num(o, v, 0, 1e7, &d, msg, cap);
            c->duration_s = d;
        } else if (!strcmp(o, "--timeout")) {
            rc = hunt_num(o, v, 0.1, 1e6, &d, msg, cap);
            c->timeout_s = d;
        } else if (!strcmp(o, "--tie-threshold")) {
            rc = hunt_num(o, v, 0, 100, &d, msg, cap);
            c->tie_threshold = d;
        }
        if (rc)
            return rc;
    }
    if (require_url && !c->url)
        return hunt_bad(msg, cap, "--url is required (the OpenAI-compatible server to test)");
    if (c->url && strncmp(c->url, "http://", 7) && strncmp(c->url, "https://", 8))
        return hunt_bad(msg, cap, "--url: '%s' is not an http:// or https:// URL", c->url);
    if (c->ref_url && strncmp(c->ref_url, "http://", 7) && strncmp(c->ref_url, "https://", 8))
        return hunt_bad(msg, cap, "--reference: '%s' is not an http:// or https:// URL",
                        c->ref_url);
    return 0;
}

int hunt_args_split(const char *line, int *argc_out, char ***argv_out, char *msg, size_t cap) {
    size_t n = strlen(line);
    /* at most n/2+1 words; strings need at most n + words bytes */
    size_t max_words = n / 2 + 2;
    char **argv = malloc(max_words * sizeof *argv + n + max_words + 1);
    if (!argv)
        return err_set(ERR_NOMEM, "out of memory splitting arguments");
    char *out = (char *)(argv + max_words);
    int argc = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n'))
            i++;
        if (i >= n)
            break;
        argv[argc++] = out;
        char q = 0;
        while (i < n) {
            char ch = line[i];
            if (q == '\'') {
                if (ch == '\'')
                    q = 0;
                else
                    *out++ = ch;
                i++;
            } else if (q == '"') {
                if (ch == '"')
                    q = 0;
                else if (ch == '\\' && i + 1 < n && strchr("\"\\$`", line[i + 1]))
                    *out++ = line[++i];
                else
                    *out++ = ch;
                i++;
            } else if (ch == '\'' || ch == '"') {
                q = ch;
                i++;
            } else if (ch == '\\' && i + 1 < n) {
                *out++ = line[i + 1];
                i += 2;
            } else if (ch == ' ' || ch == '\t' || ch == '\n') {
                break;
            } else {
                *out++ = ch;
                i++;
            }
        }
        if (q) {
            free(argv);
            snprintf(msg, cap, "unterminated %c quote in '%s'", q, line);
            return err_set(ERR_FORMAT, "%s", msg);
        }
        *out++ = 0;
    }
    argv[argc] = NULL;
    *argc_out = argc;
    *argv_out = argv;
    return 0;
}
