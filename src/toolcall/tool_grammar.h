/* SPDX-License-Identifier: MIT */
/*
 * tool_grammar: the grammars (sample/grammar.h) that make a model's output a valid tool call or a
 * valid JSON value of a given schema: tool_choice "required" / a named function (any / that one
 * of the request's tools, in the model family's tool-call syntax) and response_format
 * json_object / json_schema.
 *
 * Output form. The grammar decides every byte, in one canonical form: JSON as Python's
 * json.dumps writes it by default (", " between items, ": " after keys, no other whitespace,
 * non-ASCII characters raw), which is also how chat templates render tool calls into the
 * history (ct_json.c), so a model sees its own format. Object properties come in the schema's
 * declared order; required ones always, optional ones may be left out (the model decides at each
 * one); properties the schema does not declare are never generated, except for objects whose
 * schema declares none (maps: additionalProperties, or any members).
 *
 * Call syntaxes (the text chat_tools.h parses back into exactly one call; tool_grammar_calls.c):
 *   HERMES        <tool_call>{"name": "NAME", "arguments": {...}}</tool_call>, with an optional
 *                 newline after <tool_call> and before </tool_call> (Qwen's templates write them,
 *                 the synthetic one does not; the parser accepts both)
 *   QWEN3_XML     <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>
 *                 \n</tool_call>
 *   GLM           <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 *   LLAMA3        {"name": "NAME", "parameters": {...}}
 *   MISTRAL       [TOOL_CALLS][{"name": "NAME", "arguments": {...}}]
 *   MISTRAL_ARGS  [TOOL_CALLS]NAME[ARGS]{...}
 *   DEEPSEEK_V3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>
 *                 NAME\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *   DEEPSEEK_V31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>
 *                 {...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *   DSML(_V4)     <｜DSML｜function_calls>\n (DSML_V4: tool_calls) <｜DSML｜invoke name="NAME">\n
 *                 <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>\n...
 *                 </｜DSML｜invoke>\n</｜DSML｜function_calls>
 *   KIMI_K2       <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
 *                 <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
 * In the XML-style syntaxes (QWEN3_XML, GLM, DSML) the parameters are the schema's declared
 * properties in order (required ones always, optional ones at the model's choice; top-level
 * anyOf / $ref, required names that are not properties and maps are ERR_UNSUPPORTED there), and
 * V is raw text for a parameter chat_tool_param_is_string calls a string (never containing '<',
 * nor control characters but tab and newline) and the value's JSON text otherwise; the parser
 * reads them back the same way once it has the tools (chat_tool_parser_set_tools). NAME (and K)
 * is written bare where no JSON string holds it, which needs 1 to 256 bytes without whitespace,
 * quotes, brackets, braces, commas or angle brackets (ERR_UNSUPPORTED otherwise).
 * Inside a call, JSON strings never contain a raw '<': the tag-delimited parsers end a call at
 * the first closing marker, so the grammar must not let one appear inside a string; the model
 * writes the character as \u003c (same decoded value), and literals from the schema (names,
 * enum values) are written that way too. Parallel calls are not generated (one call satisfies
 * "required").

 * Schema subset (JSON Schema 2020-12 and drafts 4-7 where they differ):
 *   type          "object", "array", "string", "integer", "number", "boolean", "null", or an
 *                 array of them (alternatives); when absent, inferred from the keywords present
 *                 (properties -> object, items -> array, ...), else any value.
 *   nullable      (OpenAPI) true adds null as an alternative.
 *   enum, const   exactly the listed values, written canonically.
 *   object        properties, required (a required name that is not a property gets any value),
 *                 additionalProperties (false, true or a schema: used only when there are no
 *                 properties), minProperties / maxProperties (bounds of a map; for declared
 *                 properties only when trivially met).
 *   array         items (one schema), minItems, maxItems.
 *   string        minLength, maxLength (in characters). Characters: printable ASCII but " and \,
 *                 well-formed UTF-8 of any length, and the escapes \" \\ \/ \b \f \n \r \t and
 *                 \uXXXX outside the surrogates (a character beyond U+FFFF is written raw).
 *   integer       minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft 4
 *                 booleans), multipleOf 1; at most int_digits digits.
 *   number        the same bounds, integer part plus optionally 1..frac_digits fraction digits,
 *                 no exponent. Under bounds a fraction is generated only where its whole unit
 *                 interval is inside them (so 4.5 for maximum 5, never 5.5).
 *   anyOf, oneOf  alternatives (oneOf as anyOf: values matching several branches are not
 *                 excluded, as in every grammar engine); no other validation keyword beside them.
 *   allOf         only with a single schema.
 *   $ref          local references ("#", "#/$defs/X", any JSON pointer into the root schema),
 *                 expanded in place; a recursive reference is refused (ERR_UNSUPPORTED): a
 *                 recursive schema is not a regular language.
 *   annotations   title, description, default, examples, format (an annotation since 2019-09),
 *                 $schema, $id, $comment, $defs, definitions, readOnly, writeOnly, deprecated,
 *                 content*: ignored. Unknown keywords are ignored too, as JSON Schema specifies.
 *   refused       pattern, patternProperties, propertyNames, dependentRequired,
 *                 dependentSchemas, dependencies, if/then/else, not, contains, min/maxContains,
 *                 prefixItems, additionalItems, items as an array, uniqueItems true,
 *                 unevaluated*, multipleOf (other than 1 on integers), $dynamicRef,
 *                 $recursiveRef: ERR_UNSUPPORTED naming the keyword and where it is, because
 *                 ignoring them could produce values the schema rejects.
 *
 * Bounds (tool_grammar_limits; they keep outputs short even when a model never chooses to stop,
 * e.g. random weights sampled greedily): strings without maxLength have at most string_chars
 * characters, maxLength is lowered to max_string_chars; arrays and maps without maxItems /
 * maxProperties have at most items entries, larger maxima are lowered to max_items; integers
 * have at most int_digits digits; a value without a schema is any JSON value with containers
 * nested at most any_depth deep. Lowering a maximum never produces a value the schema rejects; a
 * minimum above a bound is refused (ERR_UNSUPPORTED). Large schemas get the default bounds lifted
 * (see tool_grammar_limits_default). Termination does not rest on the bounds: the engine's
 * completion budget (grammar_apply) makes a constrained request end complete whenever max_tokens
 * covers the shortest valid output.
 *
 * Errors name the place in the request: "tools[0].function.parameters.properties.city: keyword
 * \"pattern\" is not supported by constrained decoding". Threading: none (plain functions over
 * the caller's AST).
 */
#ifndef VERITY_TOOLCALL_TOOL_GRAMMAR_H
#define VERITY_TOOLCALL_TOOL_GRAMMAR_H

#include "base/json.h"
#include "toolcall/chat_tools.h"
#include "sample/grammar.h"

#include <stdint.h>

typedef struct tool_grammar_limits {
    int32_t string_chars;     /* strings without maxLength (0: unbounded) */
    int32_t max_string_chars; /* maxLength is lowered to this */
    int32_t items;       /* arrays without maxItems, maps without maxProperties (0: unbounded) */
    int32_t max_items;   /* maxItems / maxProperties are lowered to this */
    int32_t int_digits;  /* digits of an integer part, 1..18 */
    int32_t frac_digits; /* most fraction digits of a number, 0..18 */
    int32_t any_depth;   /* containers nested in a value without a schema */
    int32_t any_string_chars; /* strings inside such a value (0: unbounded) */
    int32_t any_items;        /* entries of containers inside such a value (0: unbounded) */
    int32_t bounded_states;   /* the compile helpers: DFA states allowed with the default bounds
                                 above before they retry with them lifted (0: never retry) */
} tool_grammar_limits;

/* The defaults: strings 64 characters (maxLength up to 256), arrays and maps 8 entries (maxItems
 * up to 32), 15 integer and 6 fraction digits; schema-less values 2 containers deep with strings
 * of 32 characters and containers of any size (a count bound there would multiply the automaton
 * by itself at each level); bounded_states 16384.
 *
 * Adaptive bounds: the default bounds (string_chars, items, any_string_chars) multiply the
 * automaton by the bound for every string and array, so a large schema can need millions of
 * states. tool_grammar_compile_* therefore first compile with them, capped at bounded_states
 * DFA states (a typical tool: a few thousand; about 16 per string character), and if that is
 * exceeded compile again with those three set to 0 (unbounded). Explicit maxLength / maxItems
 * stay enforced either way; the output then still ends complete within max_tokens through the
 * completion budget (grammar_apply). Both attempts are functions of the request alone. */
void tool_grammar_limits_default(tool_grammar_limits *l);

/* Builds in a the expression of one JSON value valid under schema (a JSON value; NULL means
 * no schema: any value). root is the document $ref pointers resolve against (usually schema
 * itself); where names schema in error details ("response_format.json_schema.schema").
 * lim NULL means the defaults. Returns 0 and *out, or ERR_UNSUPPORTED (a keyword outside the
 * subset, a recursive $ref, a minimum above a bound), ERR_INVAL (a malformed schema: the wrong
 * type for a keyword, an unresolvable $ref, an empty enum, bounds that exclude every value),
 * ERR_TOOLARGE (nesting deeper than 64 schemas), ERR_NOMEM. The detail names the place and the
 * keyword. */
int tool_grammar_schema(grammar_ast *a, const json_value *schema, const json_value *root,
                        const char *where, const tool_grammar_limits *lim, grammar_node **out);

/* Builds the expression of one tool call in format f over tools (the request's "tools" array,
 * already checked to hold {"type": "function", "function": {"name": ...}} objects): the call's
 * name is one of the tools' names, or only `name` when it is not NULL, and its arguments follow
 * that tool's "parameters" schema (absent or null: no parameters, "{}"; a schema with a "type"
 * other than "object" is ERR_INVAL). Returns 0 and *out, ERR_UNSUPPORTED (f has no grammar, or
 * a schema keyword as above), ERR_NOTFOUND (no tool called name), or a schema error. */
int tool_grammar_calls(grammar_ast *a, chat_tool_format f, const json_value *tools,
                       const char *name, const tool_grammar_limits *lim, grammar_node **out);

/* Builds the expression for an OpenAI response_format object: "json_object" -> any JSON object;
 * "json_schema" -> the value of json_schema.schema; "text" -> *out = NULL (no constraint).
 * Returns 0, ERR_INVAL (not an object, no type, json_schema without a schema object),
 * ERR_UNSUPPORTED (another type, or a schema keyword as above), or a schema error. */
int tool_grammar_response_format(grammar_ast *a, const json_value *rf,
                                 const tool_grammar_limits *lim, grammar_node **out);

/* What a request's output may be: one tool call (tools set), content following a JSON
 * response_format (response_format set), or, with both, either of them (tool_choice "auto" with
 * a JSON response_format). With both, strings in the content never contain a raw '<' (it is
 * written \u003c), nor for MISTRAL / MISTRAL_ARGS a raw '[' (\u005b), so the tool-call parser,
 * which reads that output too, cannot mistake content for a call (with LLAMA3, content that is
 * an object whose first key is "name" and that has a "parameters" member would read as a call). */
typedef struct tool_grammar_spec {
    const json_value *tools;           /* the request's tools array, or NULL: no call */
    chat_tool_format format;           /* their syntax */
    const char *name;                  /* NULL, or the only function that may be called */
    const json_value *response_format; /* a response_format object, or NULL (type "text" is
                                          the same as NULL) */
} tool_grammar_spec;

/* Builds the expression for spec and compiles it for vocabulary v, with the adaptive bounds
 * described at tool_grammar_limits_default (lim NULL: the defaults). Returns 0 and *out (one
 * reference, grammar_destroy; NULL when spec constrains nothing), or the errors of the builders
 * above and of grammar_compile (ERR_TOOLARGE when even the unbounded form is over the grammar
 * limits). */
int tool_grammar_compile(const tool_grammar_spec *spec, const tool_grammar_limits *lim,
                         grammar_vocab *v, grammar **out);

/* tool_grammar_compile of just the calls (tools, f, name). */
int tool_grammar_compile_calls(chat_tool_format f, const json_value *tools, const char *name,
                               const tool_grammar_limits *lim, grammar_vocab *v, grammar **out);

/* tool_grammar_compile of just the response_format. *out is NULL for "text". */
int tool_grammar_compile_response_format(const json_value *rf, const tool_grammar_limits *lim,
                                         grammar_vocab *v, grammar **out);

#endif
