/* SPDX-License-Identifier: MIT */
/*
 * chat_template: renders the Jinja chat templates that models ship (tokenizer_config.json's
 * "chat_template", or chat_template.jinja) into the prompt text, byte for byte as Hugging Face
 * transformers does with Python's jinja2 (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, HF's {% generation %} tag and its tojson/raise_exception/
 * strftime_now).
 *
 * A template is parsed once (chat_template_create) and is read-only afterwards: any number of
 * threads may render it at the same time. Each render allocates from its own arena, bounded in
 * memory, output size (16 MiB), evaluation steps and nesting, so a hostile template fails with an
 * error instead of crashing or hanging the server.
 *
 * What a template sees when rendered (the variables HF passes):
 *   messages               opts->messages (an empty list when NULL)
 *   tools                  opts->tools, or None when NULL (HF passes tools=None)
 *   documents              None
 *   add_generation_prompt  opts->add_generation_prompt
 *   bos_token, eos_token   the strings given; undefined when NULL
 *   every key of opts->extra (e.g. enable_thinking, reasoning_effort), which may also override
 *   the variables above
 * and the globals range, namespace, dict, raise_exception and strftime_now.
 *
 * Supported Jinja: everything the templates in ../shared/templates use (see src/template/ct_int.h for
 * the engine's layout). Not supported, reported as ERR_UNSUPPORTED naming the construct and line:
 * template inheritance and includes ({% extends/block/include/import %}), {% call %} blocks,
 * recursive loops, loop.changed, and the filters groupby, wordwrap, urlize, truncate, slice,
 * striptags, xmlattr, filesizeformat, pprint, random, urlencode.
 *
 * Known differences from Python that no shipped template reaches: integers are 64-bit (an
 * overflow is ERR_RANGE; JSON integers beyond 64 bits print exactly but compute as doubles);
 * lower/upper/title map case for Latin, Greek and Cyrillic only; repr() of a string escapes
 * unassigned code points as printable; reprs of generators and methods carry a fixed fake
 * address.
 */
#ifndef VERITY_TEMPLATE_CHAT_TEMPLATE_H
#define VERITY_TEMPLATE_CHAT_TEMPLATE_H

#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct chat_template chat_template;

/* How tool_calls[].function.arguments reach the template (see chat_messages_normalize_tool_args).
 *   CHAT_TOOL_ARGS_AS_GIVEN  pass what the request holds (what HF's apply_chat_template does)
 *   CHAT_TOOL_ARGS_AUTO      when the template needs object arguments
 *                            (chat_template_wants_object_args), parse JSON-string arguments into
 *                            objects; otherwise pass them as given. The setting for a server that
 *                            receives OpenAI requests, whose arguments are always JSON strings.
 *   CHAT_TOOL_ARGS_OBJECT    always parse JSON-string arguments into objects
 *   CHAT_TOOL_ARGS_STRING    always serialise object arguments to compact JSON strings */
typedef enum chat_tool_args {
    CHAT_TOOL_ARGS_AS_GIVEN = 0,
    CHAT_TOOL_ARGS_AUTO,
    CHAT_TOOL_ARGS_OBJECT,
    CHAT_TOOL_ARGS_STRING,
} chat_tool_args;

typedef struct chat_render_opts {
    const json_value *messages; /* array of OpenAI-style messages; NULL = [] */
    const json_value *tools;    /* array of tool definitions, or NULL (the template sees None) */
    bool add_generation_prompt;
    const char *bos_token; /* NUL-terminated; NULL leaves the variable undefined */
    const char *eos_token;
    const json_value *extra; /* object of extra variables (enable_thinking ...), or NULL */
    int64_t now_unix;        /* the instant strftime_now formats, in UTC */
    chat_tool_args tool_args;
} chat_render_opts;

/* Parses source[0..len) (UTF-8) into a template. On success *out owns it (chat_template_destroy).
 * Errors, with err_detail() naming the line and construct ("template line 12: unsupported tag
 * 'include'"):
 *   ERR_INVAL        a NULL argument
 *   ERR_FORMAT       invalid UTF-8, a syntax error, or a filter/test jinja2 itself does not know
 *                    used outside any `if` (jinja2 rejects those at compile time too)
 *   ERR_UNSUPPORTED  a tag this engine does not implement (extends, include, call, ...)
 *   ERR_TOOLARGE     source over 4 MiB, or nesting deeper than the parser allows
 *   ERR_NOMEM        out of memory
 * Creating also probes, once, whether the template needs object tool-call arguments. */
int chat_template_create(const char *source, size_t len, chat_template **out);

/* Frees a template. NULL is a no-op. No render of it may be in progress. */
void chat_template_destroy(chat_template *t);

/* Renders the template for opts and appends the text to out. On error nothing is appended and
 * err_detail() says why:
 *   ERR_INVAL        the template failed as jinja2 would: raise_exception('msg') (the detail is
 *                    then exactly 'msg'), or a runtime error such as an undefined value used, a
 *                    type error, a missing filter ("template line 7: can only concatenate str (not
 *                    \"int\") to str"); also NULL t/opts/out or messages that is not an array
 *   ERR_UNSUPPORTED  the render reached a construct this engine does not implement
 *   ERR_TOOLARGE     the output, a string, the evaluation steps or the nesting exceeded its bound
 *   ERR_RANGE        an integer left 64 bits (Python would switch to big integers)
 *   ERR_NOMEM        out of memory, or the render arena's bound was exceeded
 * Thread-safe for concurrent renders of the same template. */
int chat_template_render(const chat_template *t, const chat_render_opts *opts, strbuf *out);

/* Returns true when the template needs tool-call arguments as JSON objects: it iterates them,
 * applies |tojson to them, or fails on a string. Decided once at create time the way llama.cpp
 * decides it, by rendering a probe conversation whose one tool call carries
 * {"argument_needle": ...} once as a JSON string and once as an object: true when the string
 * form does not appear as JSON in the output ("argument_needle": or 'argument_needle':) while the
 * object form shows the argument in any way (llama.cpp requires JSON there too, which misses
 * templates that render arguments as XML parameters, like Qwen3-Coder's). False for templates
 * that print string arguments as they are, or that show no tool calls at all. */
bool chat_template_wants_object_args(const chat_template *t);

/* Returns a copy of messages in which every tool_calls[i].function.arguments is converted:
 * with to_object, a string holding a JSON object becomes that object (other strings are left as
 * they are); without, an object or array becomes its compact JSON text. Everything else is shared
 * with the input, and new nodes are allocated in a. Errors: ERR_INVAL (messages not an array),
 * ERR_NOMEM. */
int chat_messages_normalize_tool_args(arena *a, const json_value *messages, bool to_object,
                                      const json_value **out);

#endif
