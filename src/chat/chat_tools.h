/* SPDX-License-Identifier: MIT */
/*
 * chat_tools: recognising tool calls in a model's generated text, per model family, as a
 * streaming parser with per-request state.
 *
 * The parser sits between a request's detokenized text and its client: chat_tool_parser_feed
 * appends to `content` only text that is certainly not part of tool-call markup, holding back
 * anything that could still turn into markup, so markup never reaches content whatever the chunk
 * boundaries; a call becomes visible (chat_tool_parser_n_calls) only once it is complete and its
 * arguments parsed as JSON. At the end of generation, chat_tool_parser_finish releases held-back
 * text that turned out not to be markup, and reports a call that started but never completed or
 * did not parse as ERR_FORMAT (the caller surfaces it as an error on the choice and counts it;
 * it is never dropped silently and never leaked into content).
 *
 * Formats:
 *   NONE    all text is content.
 *   HERMES  <tool_call>{"name": N, "arguments": {...}}</tool_call> (Hermes, Qwen 2.5 / 3).
 * Threading: a parser belongs to one request.
 */
#ifndef VERITY_CHAT_CHAT_TOOLS_H
#define VERITY_CHAT_CHAT_TOOLS_H

#include "base/strbuf.h"

#include <stddef.h>

typedef enum chat_tool_format {
    CHAT_TOOL_FORMAT_NONE = 0,
    CHAT_TOOL_FORMAT_HERMES,
} chat_tool_format;

/* Picks the format a chat template expects from the markers in its source (e.g. "<tool_call>").
 * NONE if the template has no known tool-call syntax. */
chat_tool_format chat_tool_format_detect(const char *template_src, size_t len);

/* "none", "hermes", ... */
const char *chat_tool_format_name(chat_tool_format f);

typedef struct chat_tool_call {
    char *name;      /* NUL-terminated */
    char *arguments; /* the arguments as compact JSON text (an object) */
} chat_tool_call;

typedef struct chat_tool_parser chat_tool_parser;

/* Creates a parser. Returns 0 or ERR_NOMEM. */
int chat_tool_parser_create(chat_tool_format f, chat_tool_parser **out);
void chat_tool_parser_destroy(chat_tool_parser *p);

/* Feeds n bytes of generated text (complete UTF-8 characters). Appends safe content text to
 * content. Returns 0, ERR_FORMAT when a completed call does not parse (the detail says why; the
 * parser then stops parsing and holds everything from the call's start for finish), ERR_NOMEM. */
int chat_tool_parser_feed(chat_tool_parser *p, const char *text, size_t n, strbuf *content);

/* Ends the text. Appends held-back text that is not markup. Returns 0, or ERR_FORMAT if a call
 * was started (or failed earlier) and is not a valid complete call. */
int chat_tool_parser_finish(chat_tool_parser *p, strbuf *content);

/* Completed calls so far, in order. */
int chat_tool_parser_n_calls(const chat_tool_parser *p);
const chat_tool_call *chat_tool_parser_call(const chat_tool_parser *p, int i);

#endif
