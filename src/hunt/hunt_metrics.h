/* SPDX-License-Identifier: MIT */
/*
 * hunt_metrics: reads a target's Prometheus /metrics text for the two figures hunt puts on its
 * timeline: requests running (the batch the server is decoding) and the batch size, plus requests
 * waiting. It knows verity's names and those of vLLM, SGLang and llama.cpp:
 *
 *   running  verity_requests_running, vllm:num_requests_running, sglang:num_running_reqs,
 *            llamacpp:requests_processing
 *   waiting  verity_requests_waiting, vllm:num_requests_waiting, sglang:num_queue_reqs,
 *            llamacpp:requests_deferred
 *   batch    verity_batch_size, llamacpp:n_busy_slots_per_decode (NaN, "not measured", for
 *            servers without a batch figure: reports say so rather than draw running requests
 *            as if they were the batch)
 *
 * Values of the same name with different labels (one per model, say) are summed. Unknown names,
 * comments, timestamps and malformed lines are skipped: a scrape never fails on content.
 */
#ifndef VERITY_HUNT_METRICS_H
#define VERITY_HUNT_METRICS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct hunt_metrics_sample {
    double t;       /* seconds since the run started (set by the caller) */
    double running; /* NAN when the server does not say */
    double waiting;
    double batch; /* the server's batch figure, NaN when it has none */
} hunt_metrics_sample;

/* Parses Prometheus text exposition format. Fills *out (t left as is) and returns the flavour
 * recognised ("verity", "vllm", "sglang", "llamacpp") or NULL when none of the known names
 * appear. */
const char *hunt_metrics_parse(const char *text, size_t n, hunt_metrics_sample *out);

#endif
