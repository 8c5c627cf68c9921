/* SPDX-License-Identifier: MIT */
/* hunt_metrics: a line scanner for the Prometheus text format. See hunt_metrics.h. */
#include "hunt/hunt_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { M_RUNNING, M_WAITING, M_BATCH };

static const struct {
    const char *name;
    int what;
    const char *flavor;
} hunt_known[] = {
    {"verity_requests_running", M_RUNNING, "verity"},
    {"verity_requests_waiting", M_WAITING, "verity"},
    {"verity_batch_size", M_BATCH, "verity"},
    {"vllm:num_requests_running", M_RUNNING, "vllm"},
    {"vllm:num_requests_waiting", M_WAITING, "vllm"},
    {"sglang:num_running_reqs", M_RUNNING, "sglang"},
    {"sglang:num_queue_reqs", M_WAITING, "sglang"},
    {"llamacpp:requests_processing", M_RUNNING, "llamacpp"},
    {"llamacpp:requests_deferred", M_WAITING, "llamacpp"},
    {"llamacpp:n_busy_slots_per_decode", M_BATCH, "llamacpp"},
};

const char *hunt_metrics_parse(const char *text, size_t n, hunt_metrics_sample *out) {
    double v[3] = {NAN, NAN, NAN};
    const char *flavor = NULL;
    size_t i = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && text[e] != '\n')
            e++;
        const char *line = text + i;
        size_t len = e - i;
        i = e + 1;
        while (len && (line[0] == ' ' || line[0] == '\t'))
            line++, len--;
        if (len == 0 || line[0] == '#')
            continue;
        size_t nl = 0;
        while (nl < len && line[nl] != '{' && line[nl] != ' ' && line[nl] != '\t')
            nl++;
        size_t k = nl;
        if (k < len && line[k] == '{') { /* skip labels, honouring quoted '}' */
            bool q = false;
            for (k++; k < len; k++) {
                if (q && line[k] == '\\') {
                    k++;
                    continue;
                }
                if (line[k] == '"')
                    q = !q;
                else if (!q && line[k] == '}')
                    break;
            }
            k++;
        }
        while (k < len && (line[k] == ' ' || line[k] == '\t'))
            k++;
        if (k >= len)
            continue;
        char num[64];
        size_t m = 0;
        while (k < len && line[k] != ' ' && line[k] != '\t' && m + 1 < sizeof num)
            num[m++] = line[k++];
        num[m] = 0;
        char *end;
        double x = strtod(num, &end);
        if (end == num || *end || !isfinite(x))
            continue;
        for (size_t j = 0; j < sizeof hunt_known / sizeof *hunt_known; j++) {
            if (strlen(hunt_known[j].name) == nl && memcmp(hunt_known[j].name, line, nl) == 0) {
                int w = hunt_known[j].what;
                v[w] = isnan(v[w]) ? x : v[w] + x;
                if (!flavor)
                    flavor = hunt_known[j].flavor;
            }
        }
    }
    out->running = v[M_RUNNING];
    out->waiting = v[M_WAITING];
    out->batch = v[M_BATCH]; /* NaN when the server has no batch figure: not measured */
    return flavor;
}
