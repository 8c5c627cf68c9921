/* SPDX-License-Identifier: MIT */
/* chat_prompt: see chat_prompt.h. */
#include "template/chat_prompt.h"
#include "base/err.h"

#include <string.h>

int chat_prompt_render(const chat_template *t, const tokenizer *tok, arena *a,
                       const chat_prompt_opts *o, strbuf *out) {
    const json_value *norm = o->messages;
    if (!o->args_as_given) {
        int rc = chat_messages_normalize_tool_args(a, o->messages,
                                                   chat_template_wants_object_args(t), &norm);
        if (rc)
            return rc;
    }
    size_t bl = 0, el = 0;
    const char *bos =
        tokenizer_bos(tok) >= 0 ? tokenizer_token_text(tok, tokenizer_bos(tok), true, &bl) : "";
    const char *eos =
        tokenizer_eos(tok) >= 0 ? tokenizer_token_text(tok, tokenizer_eos(tok), true, &el) : "";
    char *bos_z = arena_strndup(a, bos, bl), *eos_z = arena_strndup(a, eos, el);
    if (!bos_z || !eos_z)
        return err_set(ERR_NOMEM, "out of memory");
    chat_render_opts ro = {.messages = norm,
                           .tools = o->tools,
                           .add_generation_prompt = o->add_generation_prompt,
                           .bos_token = bos_z,
                           .eos_token = eos_z,
                           .extra = o->extra,
                           .now_unix = o->now_unix,
                           .tool_args = CHAT_TOOL_ARGS_AS_GIVEN};
    return chat_template_render(t, &ro, out);
}

int chat_prompt_tokenize(const tokenizer *tok, arena *a, const char *text, size_t len,
                         int32_t **ids, int32_t *n) {
    size_t bl = 0;
    const char *bos =
        tokenizer_bos(tok) >= 0 ? tokenizer_token_text(tok, tokenizer_bos(tok), true, &bl) : "";
    bool has_bos = bl && len >= bl && memcmp(text, bos, bl) == 0;
    size_t cap = tokenizer_max_tokens(len), got = 0;
    int32_t *out = arena_alloc(a, (cap ? cap : 1) * sizeof *out);
    if (!out)
        return err_set(ERR_TOOLARGE, "prompt of %zu bytes is too large", len);
    int rc =
        tokenizer_encode(tok, text, len, !has_bos && tokenizer_add_bos(tok), true, out, cap, &got);
    if (rc)
        return rc;
    *ids = out;
    *n = (int32_t)got;
    return 0;
}
