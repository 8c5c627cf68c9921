/* SPDX-License-Identifier: MIT */
/*
 * tc_registry: the one table of tool-call families (tc_registry.h). Detection asks each family
 * in table order; names, markers, parser syntaxes and grammar rows are looked up in the
 * families' format rows. Read-only data: safe from any thread.
 */
#include "toolcall/tc_registry.h"

#include <string.h>

/* In detection order, most specific markers first: the DeepSeek markers before Kimi's and
 * Mistral's, GLM and Qwen3-Coder before Hermes (all three write <tool_call>), Llama 3 last. */
static const tc_family *const tc_families[] = {
    &tc_family_dsml, &tc_family_deepseek,  &tc_family_kimi,   &tc_family_mistral,
    &tc_family_glm,  &tc_family_qwen3_xml, &tc_family_hermes, &tc_family_llama3,
};

#define TC_N_FAMILIES (sizeof tc_families / sizeof *tc_families)

bool tc_has(const char *s, size_t n, const char *lit) {
    return memmem(s, n, lit, strlen(lit)) != NULL;
}

const tc_format *tc_format_of(chat_tool_format f) {
    for (size_t i = 0; i < TC_N_FAMILIES; i++)
        for (int k = 0; k < tc_families[i]->n_formats; k++)
            if (tc_families[i]->formats[k].f == f)
                return &tc_families[i]->formats[k];
    return NULL;
}

const ctp_syntax *tc_syntax_of(chat_tool_format f) {
    const tc_format *r = tc_format_of(f);
    return r ? r->parse : NULL;
}

chat_tool_format chat_tool_format_detect(const char *src, size_t len) {
    if (!src)
        return CHAT_TOOL_FORMAT_NONE;
    for (size_t i = 0; i < TC_N_FAMILIES; i++) {
        int f = tc_families[i]->detect(src, len);
        if (f >= 0)
            return (chat_tool_format)f;
    }
    return CHAT_TOOL_FORMAT_NONE;
}

const char *chat_tool_format_name(chat_tool_format f) {
    const tc_format *r = tc_format_of(f);
    return r ? r->name : "none";
}

int chat_tool_format_markers(chat_tool_format f, const char *const **out) {
    const ctp_syntax *s = tc_syntax_of(f);
    *out = s ? s->markers : NULL;
    return s ? s->n_markers : 0;
}
