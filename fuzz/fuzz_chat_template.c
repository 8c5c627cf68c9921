/* SPDX-License-Identifier: MIT */
/*
 * fuzz_chat_template: libFuzzer target for the chat-template engine. The input is a template;
 * it is created and, when it parses, rendered against a fixed small conversation (system, user,
 * an assistant tool call with object arguments, a tool result) and two tools, once without and
 * once with add_generation_prompt and CHAT_TOOL_ARGS_AUTO. Any outcome but a crash, a sanitizer
 * report or a leak is fine: errors are expected for most inputs.
 */
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"

#include <stdint.h>
#include <string.h>

static const char conversation[] =
    "[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris? caf\\u00e9 \\ud83d\\ude00\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call12345\","
    "\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"arguments\":{\"location\":\"Paris\",\"days\":[1,2.5,null,true]}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call12345\",\"content\":\"18 C\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"thanks\"}]}]";

static const char tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},"
    "\"required\":[\"location\"]}}}]";

static const char extra[] = "{\"enable_thinking\":true,\"reasoning_effort\":\"low\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16)
        return 0;
    chat_template *t = NULL;
    if (chat_template_create((const char *)data, size, &t) != 0)
        return 0;
    arena *a = arena_create(0, 0);
    json_value *msgs = NULL, *tl = NULL, *ex = NULL;
    if (a && json_parse(a, conversation, strlen(conversation), &msgs) == 0 &&
        json_parse(a, tools, strlen(tools), &tl) == 0 &&
        json_parse(a, extra, strlen(extra), &ex) == 0) {
        for (int pass = 0; pass < 2; pass++) {
            chat_render_opts o = {.messages = msgs,
                                  .tools = pass ? tl : NULL,
                                  .add_generation_prompt = pass == 1,
                                  .bos_token = "<s>",
                                  .eos_token = "</s>",
                                  .extra = pass ? ex : NULL,
                                  .now_unix = 1741356309,
                                  .tool_args =
                                      pass ? CHAT_TOOL_ARGS_AUTO : CHAT_TOOL_ARGS_AS_GIVEN};
            strbuf sb;
            strbuf_init(&sb);
            chat_template_render(t, &o, &sb);
            strbuf_deinit(&sb);
        }
    }
    arena_destroy(a);
    chat_template_destroy(t);
    err_clear();
    return 0;
}
