/* SPDX-License-Identifier: MIT */
/*
 * fuzz_sse: libFuzzer target for what hunt parses from a server: a text/event-stream of chat
 * completion chunks, fed in pieces whose sizes come from the input's first byte (so chunk
 * boundaries are fuzzed too), a whole non-streaming response, and Prometheus /metrics text. Every
 * reply that parses is run through the structural and degeneration oracles and the judge against
 * itself and against the other parse, so ASan sees their loops over fuzzed strings.
 */
#include "base/arena.h"
#include "hunt/hunt_metrics.h"
#include "hunt/hunt_oracle.h"
#include "hunt/hunt_reply.h"
#include "hunt/hunt_tools.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hunt_tools *fuzz_tools;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_tools && hunt_tools_create_builtin(HUNT_TOOLS_BUILTIN, &fuzz_tools))
        return 0;
    if (size == 0)
        return 0;
    size_t step = (size_t)(data[0] % 17) + 1;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    arena *a = arena_create(0, 1u << 26);
    if (!a)
        return 0;
    hunt_oracle_cfg cfg = {0.5, fuzz_tools};
    hunt_reply streamed, whole;
    bool have_s = false, have_w = false;
    hunt_stream *s;
    if (hunt_stream_create(a, &s) == 0) {
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i += step)
            rc = hunt_stream_feed(s, text + i, n - i < step ? n - i : step);
        have_s = hunt_stream_finish(s, &streamed) == 0;
        hunt_stream_destroy(s);
    }
    have_w = hunt_reply_parse_json(a, text, n, &whole) == 0;
    hunt_eval ev;
    char why[256];
    if (have_s) {
        hunt_oracle_judge(&cfg, &streamed, &streamed, &ev);
        hunt_oracle_structural(&cfg, &streamed, why, sizeof why);
    }
    if (have_w) {
        hunt_oracle_judge(&cfg, &whole, &whole, &ev);
        hunt_oracle_degeneration(whole.content, whole.content_len, NULL, 0, why, sizeof why);
    }
    if (have_s && have_w) {
        hunt_oracle_judge(&cfg, &streamed, &whole, &ev);
        hunt_oracle_judge(&cfg, &whole, &streamed, &ev);
    }
    hunt_metrics_sample ms;
    hunt_metrics_parse(text, n, &ms);
    arena_destroy(a);
    return 0;
}
