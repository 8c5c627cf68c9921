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
 * Formats (the syntax each family's chat template renders assistant tool calls in; the parser of
 * every format is lenient about whitespace between markup, and the parsers of one family accept
 * each other's variants, listed under "also"):
 *   NONE          all text is content.
 *   HERMES        <tool_call>{"name": N, "arguments": {...}}</tool_call>, one per call (Hermes,
 *                 Qwen 2.5 / 3, Granite 4, MiMo, Bielik, Reka). "parameters" is accepted for
 *                 "arguments", and arguments given as a JSON string holding an object.
 *                 Also: the QWEN3_XML and GLM bodies inside <tool_call>.
 *   QWEN3_XML     <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n...</function>\n
 *                 </tool_call> (Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5); a bare
 *                 <function=N>...</function> without the wrapper is a call too. V is raw text:
 *                 one newline after <parameter=K> and one before </parameter> are removed.
 *   GLM           <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 *                 (GLM 4.5-4.7, Laguna), V raw as in QWEN3_XML.
 *   LLAMA3        {"name": N, "parameters": {...}} (Llama 3.1-3.3): a call is a JSON object whose
 *                 first key is "name" or "type", either at the start of the output (after
 *                 whitespace) or after <|python_tag|> anywhere; calls may follow each other,
 *                 separated by whitespace and at most one ';'. A JSON object at the start that is
 *                 complete, valid and has no "parameters"/"arguments" member is content; any
 *                 other text is content, and an object later in the text is content.
 *   MISTRAL       [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (Mistral Nemo, v3
 *                 tokenizers). Also: the MISTRAL_ARGS form, and a single object after the marker.
 *   MISTRAL_ARGS  [TOOL_CALLS]N[ARGS]{...}, optionally N[CALL_ID]ID[ARGS]{...}, repeated for
 *                 parallel calls (Mistral Small 3.2, Ministral 3, Devstral: v11+ tokenizers).
 *                 Also: the MISTRAL array form.
 *   DEEPSEEK_V3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>
 *                 N\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek
 *                 V3, R1 and its distills). Also: the V31 body.
 *   DEEPSEEK_V31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>
 *                 {...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek V3.1). Also: the V3
 *                 body.
 *   DSML          <｜DSML｜function_calls>\n<｜DSML｜invoke name="N">\n<｜DSML｜parameter name="K"
 *                 string="true|false">V</｜DSML｜parameter>\n...</｜DSML｜invoke>\n...
 *                 </｜DSML｜function_calls> (DeepSeek V3.2). V is raw text with string="true",
 *                 JSON with string="false".
 *   DSML_V4       the same with <｜DSML｜tool_calls> ... </｜DSML｜tool_calls> (DeepSeek V4).
 *                 DSML and DSML_V4 accept both wrappers.
 *   KIMI_K2       <|tool_calls_section_begin|><|tool_call_begin|>functions.N:IDX
 *                 <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
 *                 (Kimi K2); the name is the id without "functions." and ":IDX".
 * In the DeepSeek, DSML and Kimi formats a section whose closing marker never came is accepted at
 * the end when every call in it is complete (a model stopped right after its last call).
 *
 * Raw parameter values (QWEN3_XML, GLM, DSML without a string attribute) are typed by the tool's
 * schema when chat_tool_parser_set_tools was called: a parameter whose schema is a string
 * (chat_tool_param_is_string) keeps the raw text, any other is parsed as JSON (raw text when it
 * does not parse). Without a schema, text that parses as a JSON number, boolean, null, object or
 * array is that value, anything else a string.
 *
 * Markup: each format has a list of markers (chat_tool_format_markers). Outside a call, content
 * is released up to the longest suffix that is a proper prefix of a marker (and, for LLAMA3, of
 * the start of a call at the beginning of the output); a marker that opens a call starts one,
 * any other marker there (a closing tag with no call open) is an error: markup never reaches
 * content.
 * Threading: a parser belongs to one request.
 */
#ifndef VERITY_TOOLCALL_CHAT_TOOLS_H
#define VERITY_TOOLCALL_CHAT_TOOLS_H

#include "base/json.h"
#include "base/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum chat_tool_format {
    CHAT_TOOL_FORMAT_NONE = 0,
    CHAT_TOOL_FORMAT_HERMES,
    CHAT_TOOL_FORMAT_QWEN3_XML,
    CHAT_TOOL_FORMAT_GLM,
    CHAT_TOOL_FORMAT_LLAMA3,
    CHAT_TOOL_FORMAT_MISTRAL,
    CHAT_TOOL_FORMAT_MISTRAL_ARGS,
    CHAT_TOOL_FORMAT_DEEPSEEK_V3,
    CHAT_TOOL_FORMAT_DEEPSEEK_V31,
    CHAT_TOOL_FORMAT_DSML,
    CHAT_TOOL_FORMAT_DSML_V4,
    CHAT_TOOL_FORMAT_KIMI_K2,
    CHAT_TOOL_FORMAT_COUNT
} chat_tool_format;

/* Picks the format a chat template expects from the markers its source uses to render
 * assistant tool calls, most specific first:
 *   "｜DSML｜"                                   DSML ("function_calls>" in it), else DSML_V4
 *   "<｜tool▁calls▁begin｜>" / "<｜tool▁call▁begin｜>"  DEEPSEEK_V3 with a "```json" fence, else
 *                                               DEEPSEEK_V31
 *   "<|tool_calls_section_begin|>"              KIMI_K2
 *   "[TOOL_CALLS]"                              MISTRAL_ARGS with "[ARGS]", else MISTRAL
 *   "<tool_call>"                               GLM with "<arg_key>", QWEN3_XML with
 *                                               "<function=", NONE with "<invoke " (MiniMax) or
 *                                               "<tool_calls>[" (Apriel), else HERMES
 *   "<|start_header_id|>" + "\"parameters\": " + "{\"name\": \""  LLAMA3, unless the template
 *                                               writes "functools[" or "<function=" (FireFunction,
 *                                               Functionary)
 * NONE if the template has no tool-call syntax this module knows. */
chat_tool_format chat_tool_format_detect(const char *template_src, size_t len);

/* "none", "hermes", "qwen3_xml", "glm", "llama3", "mistral", "mistral_args", "deepseek_v3",
 * "deepseek_v31", "dsml", "dsml_v4", "kimi_k2"; "none" for values out of range. */
const char *chat_tool_format_name(chat_tool_format f);

/* The markers of format f (see the header note): *out points at a static array of n strings
 * (the return value; 0 for NONE). The first ones open a call; none is a substring of another. */
int chat_tool_format_markers(chat_tool_format f, const char *const **out);

/* True when a parameter with this JSON schema is written as raw text in the XML-style formats
 * (QWEN3_XML, GLM, and string="true" in DSML): its "type" is "string" (or a list of "string" and
 * "null"), or it has no "type" and an enum / const of strings only. The one rule the parser and
 * the constrained-decoding grammar (tool_grammar.h) share. */
bool chat_tool_param_is_string(const json_value *schema);

typedef struct chat_tool_call {
    char *name;      /* NUL-terminated */
    char *arguments; /* the arguments as compact JSON text (an object) */
} chat_tool_call;

typedef struct chat_tool_parser chat_tool_parser;

/* Creates a parser for format f into *out (the caller owns it: chat_tool_parser_destroy).
 * Returns 0 or ERR_NOMEM; ERR_INVAL for f out of range (*out is then NULL). */
int chat_tool_parser_create(chat_tool_format f, chat_tool_parser **out);

/* Frees p and its calls (pointers from chat_tool_parser_call die with it). NULL is a no-op. */
void chat_tool_parser_destroy(chat_tool_parser *p);

/* Gives the parser the request's "tools" array so raw parameter values are typed by schema (see
 * the header note); tools is copied (the caller keeps it), NULL forgets a previous one. Call
 * before the first feed. Returns 0, ERR_NOMEM. Entries that are not {"function": {"name": ...}}
 * are ignored. */
int chat_tool_parser_set_tools(chat_tool_parser *p, const json_value *tools);

/* Feeds n bytes of generated text (complete UTF-8 characters). Appends safe content text to
 * content. Returns 0, ERR_FORMAT when a call does not parse (the detail says why; the parser
 * then stops parsing and holds everything from the call's start for finish), ERR_NOMEM. */
int chat_tool_parser_feed(chat_tool_parser *p, const char *text, size_t n, strbuf *content);

/* Ends the text. Appends held-back text that is not markup. Returns 0, or ERR_FORMAT if a call
 * was started (or failed earlier) and is not a valid complete call; the detail says which. */
int chat_tool_parser_finish(chat_tool_parser *p, strbuf *content);

/* Completed calls so far, in order: their number, and call i (NULL when i is out of range),
 * owned by p and unchanged until p is destroyed. */
int chat_tool_parser_n_calls(const chat_tool_parser *p);
const chat_tool_call *chat_tool_parser_call(const chat_tool_parser *p, int i);

#endif
