/* SPDX-License-Identifier: MIT */
/*
 * srv_metrics: the server's Prometheus metrics: counters, labelled counters and histograms that
 * request threads and the engine loop update concurrently (atomics; histograms under a small
 * mutex each), and the text exposition format (version 0.0.4) that `promtool check metrics`
 * accepts: HELP and TYPE for every family, counters ending in _total, seconds as the unit,
 * cumulative histogram buckets with le="+Inf", _sum and _count. Gauges that mirror the engine's
 * state are read at scrape time from engine_loop_stats.
 */
#ifndef VERITY_SERVER_SRV_METRICS_H
#define VERITY_SERVER_SRV_METRICS_H

#include "base/strbuf.h"
#include "engine/engine_loop.h"

#include <stdint.h>

typedef struct srv_metrics srv_metrics;

/* Finish reasons and rejection reasons, the label values of the labelled counters. */
enum srv_finish { SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_TOOL_CALLS, SRV_FINISH_COUNT };
enum srv_reject {
    SRV_REJECT_QUEUE_FULL,
    SRV_REJECT_DRAINING,
    SRV_REJECT_LOADING,
    SRV_REJECT_INVALID,
    SRV_REJECT_TOO_LONG,
    SRV_REJECT_UNAUTHORIZED,
    SRV_REJECT_TOO_LARGE,
    SRV_REJECT_BODY_BUDGET, /* the bodies being received fill --max-body-total */
    SRV_REJECT_COUNT
};
enum srv_hist { SRV_H_TTFT, SRV_H_ITL, SRV_H_E2E, SRV_H_BATCH, SRV_H_STEP, SRV_H_COUNT };

srv_metrics *srv_metrics_create(void);
void srv_metrics_destroy(srv_metrics *m);

void srv_metrics_finish(srv_metrics *m, enum srv_finish f);
void srv_metrics_reject(srv_metrics *m, enum srv_reject r);
void srv_metrics_cancelled(srv_metrics *m); /* a client went away, or the shutdown cut it */
void srv_metrics_tool_parse_failure(srv_metrics *m);
void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t generated);
void srv_metrics_observe(srv_metrics *m, enum srv_hist h, double value);

/* Appends the whole exposition to sb; stats supplies the engine gauges, body_bytes the bytes of
 * request bodies being received (the server's count); model_name and the toggle registry go into
 * info metrics. */
void srv_metrics_write(srv_metrics *m, const eloop_stats *stats, const char *model_name,
                       int64_t body_bytes, strbuf *sb);

#endif
