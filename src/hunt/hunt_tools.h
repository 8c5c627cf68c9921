/* SPDX-License-Identifier: MIT */
/*
 * hunt_tools: the tool set a hunt session offers the model, the JSON-Schema check the structural
 * oracle applies to tool-call arguments, and the deterministic tool executor.
 *
 * Twelve built-in tools look like a coding agent's (read_file, write_file, edit_file, list_dir,
 * find_files, grep, run_shell, run_tests, git_diff, git_log, http_get, search_docs), each with a
 * realistic schema (required fields, enums, integer ranges, arrays, nested objects,
 * additionalProperties false). A user file (a JSON array of OpenAI tool definitions) may replace
 * them.
 *
 * The schema check supports the subset tool definitions use in practice: type (one or a list),
 * properties, required, additionalProperties (boolean or schema), enum, const, items,
 * minimum/maximum, exclusiveMinimum/Maximum, minLength/maxLength, minItems/maxItems, anyOf/oneOf
 * (as "any of"). Unknown keywords are ignored (never a violation).
 *
 * The executor is the harness acting as the agent's environment: a tool result is a pure function
 * of (tool name, arguments text), so a session is reproducible from its seed and two runs that
 * send the same call get the same result. Results for invalid or unknown calls are deterministic
 * error objects, as a real agent framework would return.
 *
 * A hunt_tools is immutable after creation and may be shared by every session.
 */
#ifndef VERITY_HUNT_TOOLS_H
#define VERITY_HUNT_TOOLS_H

#include "base/json.h"
#include "base/strbuf.h"

#include <stddef.h>

#define HUNT_TOOLS_BUILTIN 12

typedef struct hunt_tools hunt_tools;

/* Creates the first n built-in tools (1 <= n <= HUNT_TOOLS_BUILTIN; 0 gives an empty set, for
 * sessions without tools). Returns 0, ERR_RANGE (n out of range) or ERR_NOMEM. */
int hunt_tools_create_builtin(int n, hunt_tools **out);

/* Loads tool definitions from a JSON file: an array of {"type":"function","function":{"name",
 * "description","parameters"}} (or of bare {"name","parameters"} objects). Returns 0, ERR_IO
 * (unreadable), ERR_FORMAT (not JSON, or an entry without a name or with a non-object parameters;
 * detail names the file and entry), ERR_NOMEM. */
int hunt_tools_load(const char *path, hunt_tools **out);

/* Frees the set. NULL is a no-op. */
void hunt_tools_destroy(hunt_tools *t);

/* Number of tools. */
int hunt_tools_count(const hunt_tools *t);

/* Tool i's name (0 <= i < count). */
const char *hunt_tools_name(const hunt_tools *t, int i);

/* Tool i's parameters schema (an object; never NULL). */
const json_value *hunt_tools_params(const hunt_tools *t, int i);

/* Index of the tool called name, or -1. */
int hunt_tools_find(const hunt_tools *t, const char *name);

/* The OpenAI "tools" array, compact JSON, for request bodies. Valid while t lives. */
const char *hunt_tools_json(const hunt_tools *t, size_t *len);

/* Checks a call's arguments text against tool i's schema. Returns 0 when valid; otherwise 1 for
 * arguments that are not JSON (or not a JSON object) and 2 for a schema violation, with a
 * description naming the path ("arguments.path: expected string, got number") written to
 * why[0..why_cap). Never fails otherwise (a scratch arena that cannot be allocated counts as
 * valid). */
int hunt_tools_check_args(const hunt_tools *t, int i, const char *args, size_t len, char *why,
                          size_t why_cap);

/* Validates instance against schema, the same rules as hunt_tools_check_args; returns 0 or 2 and
 * the description in why. path prefixes it ("arguments"). Exposed for tests. */
int hunt_schema_check(const json_value *schema, const json_value *instance, const char *path,
                      char *why, size_t why_cap);

/* Appends the deterministic result of calling the tool called name with args[0..len) to out: the
 * tool's output for a valid call, a JSON error object for an unknown tool or arguments that are
 * not a JSON object. Results are a few hundred to ~1,500 bytes. */
void hunt_tools_execute(const hunt_tools *t, const char *name, const char *args, size_t len,
                        strbuf *out);

#endif
