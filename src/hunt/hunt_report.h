/* SPDX-License-Identifier: MIT */
/*
 * hunt_report: what `verity hunt --out DIR` writes.
 *
 *   results.json  every session with its verdict and evidence, the aggregates with Wilson 95%
 *                 intervals, the per-oracle counts, the /metrics timeline and corruption events,
 *                 and the harness's own figures (peak concurrency, CPU per request);
 *   report.md     the same for people: tables, the confound conclusion, the first divergent turn
 *                 of each corrupt session next to its reference;
 *   report.html   self-contained (inline CSS and SVG, no scripts or external resources): corruption
 *                 rate against concurrency and against context length with their intervals, the
 *                 batch-size timeline with corruption events, and the divergent turns side by side
 *                 with the first differing byte marked.
 *
 * Files are written to a temporary name and renamed, so a reader never sees half a report.
 * Call hunt_results_aggregate first.
 */
#ifndef VERITY_HUNT_REPORT_H
#define VERITY_HUNT_REPORT_H

#include "base/strbuf.h"
#include "hunt/hunt_run.h"

#include <stdbool.h>

/* Appends results.json's content to out. */
void hunt_report_json(const hunt_results *res, strbuf *out);

/* Appends report.md's content to out. */
void hunt_report_md(const hunt_results *res, strbuf *out);

/* Appends the workload sentence both reports share ("N sessions per level, ... skip_special_tokens
 * ..."), plain text without markup. */
void hunt_report_workload(const hunt_results *res, strbuf *out);

/* Appends the verdict's figures both reports share ("C of N sessions corrupt (R%, Wilson 95%
 * [lo%, hi%]); B benign divergences; E target errors."), plain text without markup. */
void hunt_report_verdict(const hunt_results *res, strbuf *out);

/* Appends the harness's figures both reports share ("N test and M reference requests (R
 * retries) in T s; peak P requests in flight; harness CPU C s (X ms per request)."), plain text
 * without markup. */
void hunt_report_harness(const hunt_results *res, strbuf *out);

/* The corrupt sessions both reports show turn by turn: the first record at or after index *i that
 * is corrupt and has a shown turn, *i then just past it; NULL when there is none. */
const hunt_session_rec *hunt_report_next_corrupt(const hunt_results *res, int64_t *i);

/* Row k of the oracles table both reports show, for k from 0 while it returns true: its label
 * ("exact: diverged from the reference", "structural: <finding>", ...) into label[0..cap), its
 * session count into *n, and into *finding whether it counts a finding (the rows after the
 * three divergence rows). */
bool hunt_report_oracle_row(const hunt_results *res, int k, char *label, size_t cap, int64_t *n,
                            bool *finding);

/* Appends report.html's content to out. */
void hunt_report_html(const hunt_results *res, strbuf *out);

/* Creates dir if needed and writes the three files. Returns 0, ERR_IO (detail names the path) or
 * ERR_NOMEM. */
int hunt_report_write(const hunt_results *res, const char *dir);

/* Writes data[0..n) to path atomically (path.tmp then rename). Returns 0 or ERR_IO. */
int hunt_write_file(const char *path, const char *data, size_t n);

/* Mean prompt tokens (usage) of the sessions at padding slot p, or -1 when unknown. */
double hunt_results_mean_prompt(const hunt_results *res, int p);

#endif
