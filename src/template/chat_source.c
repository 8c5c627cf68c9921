/* SPDX-License-Identifier: MIT */
/*
 * chat_source: resolving a --chat-template spec (built-in name, file, or the model's own
 * template) and the default template variables. See chat_source.h.
 *
 * The built-in templates are our own short Jinja texts for the common prompt formats. They render
 * messages (content as a string), the generation prompt, and the BOS/EOS tokens where the format
 * writes them; they know nothing of tools. A model's own template, when it has one, is always more
 * faithful; these exist for base models that ship none and for models whose template is wrong.
 */
#include "template/chat_source.h"
#include "base/err.h"
#include "base/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAT_SOURCE_MAX_BYTES (4u << 20)

typedef struct chat_builtin {
    const char *name;
    const char *text;
} chat_builtin;

static const chat_builtin chat_builtins[] = {
    {"chatml", "{%- for message in messages -%}"
               "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + "
               "'<|im_end|>\\n' }}"
               "{%- endfor -%}"
               "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"},
    {"llama3", "{{- bos_token or '' -}}"
               "{%- for message in messages -%}"
               "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
               "(message['content'] or '') | trim + '<|eot_id|>' }}"
               "{%- endfor -%}"
               "{%- if add_generation_prompt -%}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
               "{%- endif -%}"},
    {"llama2", "{%- set ns = namespace(sys='') -%}"
               "{%- for message in messages -%}"
               "{%- if message['role'] == 'system' -%}"
               "{%- set ns.sys = '<<SYS>>\\n' + (message['content'] or '') | trim + "
               "'\\n<</SYS>>\\n\\n' -%}"
               "{%- elif message['role'] == 'user' -%}"
               "{{ (bos_token or '') + '[INST] ' + ns.sys + (message['content'] or '') | trim + "
               "' [/INST]' }}"
               "{%- set ns.sys = '' -%}"
               "{%- elif message['role'] == 'assistant' -%}"
               "{{ ' ' + (message['content'] or '') | trim + ' ' + (eos_token or '') }}"
               "{%- endif -%}"
               "{%- endfor -%}"},
    {"mistral", "{%- set ns = namespace(sys='') -%}"
                "{{- bos_token or '' -}}"
                "{%- for message in messages -%}"
                "{%- if message['role'] == 'system' -%}"
                "{%- set ns.sys = (message['content'] or '') + '\\n\\n' -%}"
                "{%- elif message['role'] == 'user' -%}"
                "{{ '[INST] ' + ns.sys + (message['content'] or '') + '[/INST]' }}"
                "{%- set ns.sys = '' -%}"
                "{%- elif message['role'] == 'assistant' -%}"
                "{{ (message['content'] or '') + (eos_token or '') }}"
                "{%- endif -%}"
                "{%- endfor -%}"},
    {"gemma", "{{- bos_token or '' -}}"
              "{%- for message in messages -%}"
              "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
              "{{ '<start_of_turn>' + role + '\\n' + (message['content'] or '') | trim + "
              "'<end_of_turn>\\n' }}"
              "{%- endfor -%}"
              "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"},
};

#define CHAT_N_BUILTINS (sizeof chat_builtins / sizeof *chat_builtins)

const char *chat_source_builtin(const char *name) {
    for (size_t i = 0; name && i < CHAT_N_BUILTINS; i++)
        if (!strcmp(chat_builtins[i].name, name))
            return chat_builtins[i].text;
    return NULL;
}

const char *chat_source_builtin_names(void) {
    return "chatml, llama3, llama2, mistral, gemma";
}

static int chat_source_copy(chat_source *out, const char *s, size_t len) {
    out->text = malloc(len + 1);
    if (!out->text)
        return err_set(ERR_NOMEM, "out of memory");
    memcpy(out->text, s, len);
    out->text[len] = 0;
    out->len = len;
    return 0;
}

static int chat_source_read_file(const char *path, chat_source *out) {
    char *buf;
    size_t len;
    int rc = file_read_all(path, CHAT_SOURCE_MAX_BYTES, &buf, &len);
    if (rc == ERR_NOTFOUND)
        return err_set(ERR_NOTFOUND,
                       "chat template '%s' is neither a built-in (%s) nor an existing file", path,
                       chat_source_builtin_names());
    if (rc)
        return err_wrap(rc, "chat template");
    rc = chat_source_copy(out, buf, len);
    free(buf);
    if (!rc)
        snprintf(out->origin, sizeof out->origin, "file %s", path);
    return rc;
}

int chat_source_load(const gguf *g, const char *spec, chat_source *out) {
    memset(out, 0, sizeof *out);
    int rc;
    if (!spec || !*spec) {
        gguf_str s;
        if (!g || gguf_get_str(g, "tokenizer.chat_template", &s) != 0)
            return 0;
        if ((rc = chat_source_copy(out, s.s, s.len)))
            return rc;
        snprintf(out->origin, sizeof out->origin, "the model's tokenizer.chat_template");
        return 0;
    }
    const char *b = chat_source_builtin(spec);
    if (b) {
        if ((rc = chat_source_copy(out, b, strlen(b))))
            return rc;
        snprintf(out->origin, sizeof out->origin, "built-in '%s'", spec);
        return 0;
    }
    return chat_source_read_file(spec, out);
}

void chat_source_deinit(chat_source *src) {
    free(src->text);
    src->text = NULL;
    src->len = 0;
}

int chat_source_parse_kwargs(arena *a, const char *text, const json_value **out) {
    *out = NULL;
    if (!text || !*text)
        return 0;
    json_value *v;
    int rc = json_parse(a, text, strlen(text), &v);
    if (rc)
        return err_wrap(rc, "chat template kwargs");
    if (v->type != JSON_OBJECT)
        return err_set(ERR_INVAL, "chat template kwargs must be a JSON object, like "
                                  "{\"enable_thinking\":false}");
    *out = v;
    return 0;
}

int chat_source_merge_kwargs(arena *a, const json_value *defaults, const json_value *request,
                             const json_value **out) {
    if (!defaults || !request) {
        *out = defaults ? defaults : request;
        return 0;
    }
    json_value *m = json_new_obj(a);
    if (!m)
        return err_set(ERR_NOMEM, "out of memory");
    const json_value *srcs[2] = {defaults, request};
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < srcs[s]->obj.n; i++)
            if (json_obj_set(a, m, srcs[s]->obj.keys[i], srcs[s]->obj.vals[i]))
                return err_set(ERR_NOMEM, "out of memory");
    *out = m;
    return 0;
}
