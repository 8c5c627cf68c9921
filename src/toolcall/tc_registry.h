/* SPDX-License-Identifier: MIT */
/*
 * tc_registry: how a tool-call family plugs in, inside src/toolcall only.
 *
 * A family is one file, tc_<family>.c, holding everything about one model family's tool-call
 * syntax: its call regions (the parser side, ctp_syntax in chat_tools_int.h), its grammar rows
 * (the constrained-decoding side, tg_syntax in tool_grammar_int.h), its format names and its
 * detection rule. It exports one tc_family; tc_registry.c lists them all in one table, in the
 * order detection tries them (most specific markers first), and answers every per-format
 * question (chat_tool_format_detect / _name / _markers, the parser's syntax, the grammar row)
 * from that table: adding a family is one new file and one table entry.
 */
#ifndef VERITY_TOOLCALL_TC_REGISTRY_H
#define VERITY_TOOLCALL_TC_REGISTRY_H

#include "toolcall/chat_tools_int.h"
#include "toolcall/tool_grammar_int.h"

#include <stdbool.h>
#include <stddef.h>

/* One chat_tool_format. */
typedef struct tc_format {
    chat_tool_format f;
    const char *name;         /* chat_tool_format_name */
    const ctp_syntax *parse;  /* the parser's regions */
    const tg_syntax *grammar; /* the grammar row; NULL: no constrained decoding */
    bool content_no_bracket;  /* content strings beside calls never hold '[' (the first byte
                               * of the call markers, MISTRAL) */
} tc_format;

typedef struct tc_family {
    const char *name;
    /* The format a template source written for this family expects, or -1 when the source is
     * not this family's (detection then tries the next family). CHAT_TOOL_FORMAT_NONE stops
     * detection with NONE. */
    int (*detect)(const char *src, size_t len);
    const tc_format *formats;
    int n_formats;
} tc_family;

extern const tc_family tc_family_dsml, tc_family_deepseek, tc_family_kimi, tc_family_mistral,
    tc_family_glm, tc_family_qwen3_xml, tc_family_hermes, tc_family_llama3;

/* The row of format f, or NULL (NONE, out of range). */
const tc_format *tc_format_of(chat_tool_format f);

/* The parser syntax of format f, or NULL (NONE, out of range). */
const ctp_syntax *tc_syntax_of(chat_tool_format f);

/* True when lit occurs in s[0..n) (the detection rules' test). */
bool tc_has(const char *s, size_t n, const char *lit);

#endif
