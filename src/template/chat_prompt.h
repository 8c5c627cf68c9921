/* SPDX-License-Identifier: MIT */
/*
 * chat_prompt: from a conversation to the prompt a model reads, the one way the server, the
 * `chat-template` command and `generate --chat` all do it: tool-call arguments are normalised to
 * the shape the template expects (chat_template_wants_object_args), the template is rendered with
 * the vocabulary's BOS/EOS token texts, and the text is tokenized with special tokens parsed,
 * adding BOS only if the vocabulary wants one and the template did not already write it.
 */
#ifndef VERITY_TEMPLATE_CHAT_PROMPT_H
#define VERITY_TEMPLATE_CHAT_PROMPT_H

#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct chat_prompt_opts {
    const json_value *messages; /* OpenAI-style messages (content already strings) */
    const json_value *tools;    /* tool definitions, or NULL */
    const json_value *extra;    /* extra template variables (an object), or NULL */
    bool add_generation_prompt;
    int64_t now_unix;   /* the instant strftime_now sees */
    bool args_as_given; /* pass tool-call arguments unchanged (Hugging Face's behaviour)
                           instead of normalising them to the template's shape */
} chat_prompt_opts;

/* Renders the conversation into out. Allocations in a. Returns 0, or the template's error
 * (ERR_INVAL for raise_exception and runtime errors, ERR_TOOLARGE...; err_detail says why). */
int chat_prompt_render(const chat_template *t, const tokenizer *tok, arena *a,
                       const chat_prompt_opts *o, strbuf *out);

/* Tokenizes a rendered prompt into an arena array (*ids, *n): special tokens parsed, BOS added
 * only if the vocabulary adds one and the text does not already start with it. Returns 0 or the
 * tokenizer's error. */
int chat_prompt_tokenize(const tokenizer *tok, arena *a, const char *text, size_t len,
                         int32_t **ids, int32_t *n);

#endif
