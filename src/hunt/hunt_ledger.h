/* SPDX-License-Identifier: MIT */
/*
 * hunt_ledger: bisect's record of what was tried, in JSON (the state it resumes from) and markdown
 * (for people). Each entry is one hypothesis tested on one server configuration: which toggles
 * were flipped to their OFF value, sessions run, corrupt count, Wilson interval, the SPRT's log
 * likelihood ratio and verdict, wall time and restarts. The summary says what is ruled out, what
 * remains and the culprit.
 *
 * The JSON file is rewritten atomically after every round, so an interruption loses at most the
 * round in progress. A ledger is tied to its bisection: toggles, launch command and hunt arguments
 * must match to resume from it.
 */
#ifndef VERITY_HUNT_LEDGER_H
#define VERITY_HUNT_LEDGER_H

#include "base/strbuf.h"

#include <stdbool.h>
#include <stdint.h>

#define HUNT_MAX_TOGGLES 64

typedef struct hunt_toggle {
    char *name;
    char *off;         /* value that disables the optimisation / path */
    char *on;          /* value as deployed (the baseline) */
    double likelihood; /* prior probability weight (default 1) */
    double cost;       /* relative restart cost (default 1) */
} hunt_toggle;

typedef struct hunt_ledger_entry {
    int id;
    bool baseline;    /* the all-ON measurement */
    uint64_t flipped; /* toggles set to OFF (bit i = toggle i) */
    char hypothesis[320];
    int64_t sessions, corrupt, errors;
    int64_t next_index; /* first session index not yet run in this configuration */
    double llr;
    char verdict[16]; /* baseline, clean, corrupt, undecided, error, running */
    double wall_s;
    int restarts;
    char note[320];
} hunt_ledger_entry;

typedef struct hunt_ledger {
    char *launch, *health, *hunt; /* as given */
    hunt_toggle toggles[HUNT_MAX_TOGGLES];
    int n_toggles;
    double p0, p1; /* SPRT hypotheses (0 until the baseline is measured) */
    double base_rate;
    hunt_ledger_entry *entries;
    int n_entries;
    size_t cap_entries;
    char state[24];   /* running, culprit, culprit_set, no_culprit, baseline_clean,
                         inconclusive, budget */
    uint64_t culprit; /* the toggles named (mask) */
    char conclusion[768];
} hunt_ledger;

/* Initialises an empty ledger (state "running"). */
void hunt_ledger_init(hunt_ledger *lg);

/* Frees everything the ledger owns. */
void hunt_ledger_deinit(hunt_ledger *lg);

/* Appends a new entry (zeroed, id assigned, verdict "running") and returns it, or NULL on
 * allocation failure. The pointer is valid until the next append. */
hunt_ledger_entry *hunt_ledger_add(hunt_ledger *lg);

/* The entry for a configuration (baseline, or the flip mask), or NULL. */
hunt_ledger_entry *hunt_ledger_find(hunt_ledger *lg, bool baseline, uint64_t flipped);

/* Restarts used so far (sum over entries). */
int hunt_ledger_restarts(const hunt_ledger *lg);

/* Names of the toggles in mask, comma-separated, into out. */
void hunt_ledger_names(const hunt_ledger *lg, uint64_t mask, strbuf *out);

/* Serialises the ledger as JSON / markdown into out. */
void hunt_ledger_json(const hunt_ledger *lg, strbuf *out);
void hunt_ledger_md(const hunt_ledger *lg, strbuf *out);

/* Writes path (JSON) and the markdown next to it (path with .json replaced by .md, or path.md).
 * Returns 0 or ERR_IO. */
int hunt_ledger_save(const hunt_ledger *lg, const char *path);

/* Loads a ledger from path into lg (initialised by the caller). Returns 0, ERR_NOTFOUND (no such
 * file), ERR_FORMAT (not a bisect ledger; detail names the file and field) or ERR_NOMEM. */
int hunt_ledger_load(const char *path, hunt_ledger *lg);

/* Checks that a loaded ledger belongs to the bisection described by want (same toggles with the
 * same values, launch command and hunt arguments). Returns 0 or ERR_INVAL naming the difference. */
int hunt_ledger_check_same(const hunt_ledger *loaded, const hunt_ledger *want);

#endif
