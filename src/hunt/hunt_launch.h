/* SPDX-License-Identifier: MIT */
/*
 * hunt_launch: starting and stopping the server under test for bisect.
 *
 * The launch command is a template run by /bin/sh -c in a new process group (so stopping it
 * signals its own group only, never anything else). Placeholders:
 *   {flags}  " --NAME VALUE" for every toggle whose name is not an environment variable name
 *   {NAME}   the current value of toggle NAME
 *   {port}   a free loopback port chosen for this launch (also in the health URL and hunt args)
 * Toggles named like environment variables (A-Z, 0-9, _; not starting with a digit) are exported
 * to the command's environment instead of appearing in {flags}.
 */
#ifndef VERITY_HUNT_LAUNCH_H
#define VERITY_HUNT_LAUNCH_H

#include "base/strbuf.h"
#include "hunt/hunt_ledger.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* True if name looks like an environment variable (then the toggle goes to the environment). */
bool hunt_toggle_is_env(const char *name);

/* Expands the placeholders of tmpl for the configuration with `flipped` toggles OFF into out.
 * port < 0 leaves {port} as is. Returns 0, or ERR_INVAL for an unknown {placeholder} (detail
 * names it). */
int hunt_launch_expand(const char *tmpl, const hunt_ledger *lg, uint64_t flipped, int port,
                       strbuf *out);

/* A free TCP port on 127.0.0.1 (bound and released; the usual small race applies), or a
 * negative error code. */
int hunt_free_port(void);

typedef struct hunt_proc hunt_proc;

/* Starts `sh -c cmd` in its own process group with the environment toggles of the
 * configuration exported, stdout and stderr appended to log_path (NULL: /dev/null). Returns 0 or
 * ERR_IO (fork or log file failed; detail says why). */
int hunt_proc_start(const char *cmd, const hunt_ledger *lg, uint64_t flipped, const char *log_path,
                    hunt_proc **out);

/* Polls url (GET, 200 means healthy) every 200 ms until it answers, the process exits, timeout_s
 * passes or *stop is set. Returns 0, ERR_STATE (the process exited; detail has its status),
 * ERR_TIMEOUT or ERR_CANCELLED. */
int hunt_proc_wait_healthy(hunt_proc *p, const char *url, double timeout_s,
                           volatile sig_atomic_t *stop);

/* Stops the process group (SIGTERM, then SIGKILL after grace_s), reaps the process and frees p.
 * NULL is a no-op. */
void hunt_proc_stop(hunt_proc *p, double grace_s);

#endif
