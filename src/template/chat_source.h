/* SPDX-License-Identifier: MIT */
/*
 * chat_source: where a chat template's text comes from, decided in one place for every command.
 * A template is named by a spec (the --chat-template option): a built-in name (chatml, llama3,
 * llama2, mistral, gemma: small templates of our own, one table in chat_source.c), else a path to
 * a Jinja file; with no spec it is the model's own `tokenizer.chat_template`, and this is the only
 * code that reads that GGUF key. Default template variables (--chat-template-kwargs) are parsed
 * here too, and merged with a request's own chat_template_kwargs (the request wins per key).
 */
#ifndef VERITY_TEMPLATE_CHAT_SOURCE_H
#define VERITY_TEMPLATE_CHAT_SOURCE_H

#include "base/arena.h"
#include "base/json.h"
#include "gguf/gguf.h"

#include <stddef.h>

/* A template's text and where it came from. text is malloc'd and NUL-terminated (NULL when there
 * is no template); origin describes it for messages ("built-in 'chatml'", "file t.jinja", "the
 * model's tokenizer.chat_template"). */
typedef struct chat_source {
    char *text;
    size_t len;
    char origin[256];
} chat_source;

/* Resolves spec into out (caller-owned; release with chat_source_deinit). spec NULL or "": the
 * GGUF's tokenizer.chat_template (g may be NULL: then no template); a built-in name: its text;
 * anything else: the file at that path. Returns 0 (out->text NULL when spec is empty and the model
 * has none), or
 *   ERR_NOTFOUND  spec is neither a built-in name nor a readable file (the detail lists the
 *                 built-in names)
 *   ERR_IO        the file exists but cannot be read
 *   ERR_TOOLARGE  the file is over 4 MiB
 *   ERR_NOMEM     out of memory
 * Nothing needs freeing on error. */
int chat_source_load(const gguf *g, const char *spec, chat_source *out);

/* Frees out->text. Safe on a zeroed or already released source. */
void chat_source_deinit(chat_source *src);

/* The built-in template called name, NUL-terminated and static, or NULL if there is none. */
const char *chat_source_builtin(const char *name);

/* The built-in names, comma-separated ("chatml, llama3, ..."), for messages and help. */
const char *chat_source_builtin_names(void);

/* Parses text (--chat-template-kwargs) as a JSON object into a. NULL or "" gives *out = NULL.
 * Returns 0, ERR_FORMAT (not JSON: the detail has the offset) or ERR_INVAL (JSON but not an
 * object), ERR_NOMEM. */
int chat_source_parse_kwargs(arena *a, const char *text, const json_value **out);

/* The template variables for one render: every key of defaults, then every key of request, which
 * replaces a default of the same name. Either may be NULL; when one is NULL the other is returned
 * as it is, else a new object allocated in a. Returns 0 or ERR_NOMEM. */
int chat_source_merge_kwargs(arena *a, const json_value *defaults, const json_value *request,
                             const json_value **out);

#endif
