/* SPDX-License-Identifier: MIT */
/*
 * test_chat_tools_rt: the tool-call parser against the real chat templates in
 * ../shared/templates.
 *   - detection: chat_tool_format_detect over every template gives the format in the table
 *     below (NONE for templates without tool-call syntax or with a syntax this module does not
 *     parse); a template missing from the table fails, so a new template gets classified;
 *   - round trips: for every template with a format, an assistant message with tool_calls (two
 *     parallel calls where the template allows them, else one) is rendered with
 *     chat_template_render; the assistant part (what follows the longest common prefix with the
 *     generation prompt, backed off to the start of a tag) is fed to the parser whole and byte by
 * byte, with and without the tools' schemas, and must give back the same calls (names, and
 * arguments equal as JSON) with no marker in the content. RT_VERBOSE=1 prints each assistant part.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "template/chat_template.h"
#include "toolcall/chat_tools.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rt_template {
    const char *file;
    chat_tool_format f;
    const char *bos, *eos;
} rt_template;

#define N      CHAT_TOOL_FORMAT_NONE
#define DS_BOS "<｜begin▁of▁sentence｜>"
#define DS_EOS "<｜end▁of▁sentence｜>"

/* Every shared template and the format its assistant tool calls are written in; NONE with the
 * syntax in a comment where the template has one this module does not parse. */
static const rt_template rt_templates[] = {
    {"Apertus-8B-Instruct.jinja", N, "<|begin_of_text|>", "<|eot_id|>"}, /* <|tools_prefix|> */
    {"Apriel-1.6-15b-Thinker-fixed.jinja", N, "<s>", "</s>"},            /* <tool_calls>[...] */
    {"Bielik-11B-v3.0-Instruct.jinja", CHAT_TOOL_FORMAT_HERMES, "<s>", "</s>"},
    {"Cohere2MoE.jinja", N, "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"}, /* <|START_ACTION|> */
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", N, "<BOS_TOKEN>",
     "<|END_OF_TURN_TOKEN|>"}, /* Action: ```json */
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", N, "<BOS_TOKEN>",
     "<|END_OF_TURN_TOKEN|>"}, /* <|START_ACTION|> */
    {"GLM-4.7-Flash.jinja", CHAT_TOOL_FORMAT_GLM, NULL, "<|endoftext|>"},
    {"GigaChat3-10B-A1.8B.jinja", N, "<s>", "</s>"},   /* function call role */
    {"GigaChat3.1-10B-A1.8B.jinja", N, "<s>", "</s>"}, /* function call role */
    {"Kimi-K2-Instruct.jinja", CHAT_TOOL_FORMAT_KIMI_K2, "[BOS]", "[EOS]"},
    {"Kimi-K3.jinja", N, "[BOS]", "[EOS]"}, /* XTML tags */
    {"LFM2-8B-A1B.jinja", N, "<|startoftext|>", "<|im_end|>"},
    {"LFM2.5-8B-A1B.jinja", N, "<|startoftext|>", "<|im_end|>"}, /* <|tool_call_start|>[f(x=1)] */
    {"LFM2.5-Instruct.jinja", N, "<|startoftext|>", "<|im_end|>"},
    {"MiMo-VL.jinja", CHAT_TOOL_FORMAT_HERMES, NULL, "<|im_end|>"},
    {"MiniMax-M1.jinja", N, "<beginning_of_sentence>", "<end_of_sentence>"}, /* <tool_calls> */
    {"MiniMax-M3.jinja", N, "<beginning_of_sentence>", "<end_of_sentence>"}, /* <invoke> */
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", CHAT_TOOL_FORMAT_MISTRAL_ARGS, "<s>", "</s>"},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", CHAT_TOOL_FORMAT_QWEN3_XML, "<s>", "</s>"},
    {"NVIDIA-Nemotron-Nano-v2.jinja", N, "<s>", "</s>"}, /* <TOOLCALL>[...] */
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", CHAT_TOOL_FORMAT_HERMES,
     "<|begin_of_text|>", "<|eot_id|>"},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", CHAT_TOOL_FORMAT_HERMES,
     "<|begin_of_text|>", "<|eot_id|>"},
    {"Qwen-QwQ-32B.jinja", CHAT_TOOL_FORMAT_HERMES, NULL, "<|im_end|>"},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", CHAT_TOOL_FORMAT_HERMES, NULL, "<|im_end|>"},
    {"Qwen-Qwen3-0.6B.jinja", CHAT_TOOL_FORMAT_HERMES, NULL, "<|im_end|>"},
    {"Qwen3-Coder.jinja", CHAT_TOOL_FORMAT_QWEN3_XML, NULL, "<|im_end|>"},
    {"Qwen3.5-4B.jinja", CHAT_TOOL_FORMAT_QWEN3_XML, NULL, "<|im_end|>"},
    {"Reka-Edge.jinja", CHAT_TOOL_FORMAT_HERMES, "<s>", "</s>"},
    {"StepFun3.5-Flash.jinja", CHAT_TOOL_FORMAT_QWEN3_XML, "<s>", "</s>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", CHAT_TOOL_FORMAT_DEEPSEEK_V3,
     "<|begin_of_text|>", "<|eot_id|>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", CHAT_TOOL_FORMAT_DEEPSEEK_V3, DS_BOS,
     DS_EOS},
    {"deepseek-ai-DeepSeek-V3.1.jinja", CHAT_TOOL_FORMAT_DEEPSEEK_V31, DS_BOS, DS_EOS},
    {"deepseek-ai-DeepSeek-V3.2.jinja", CHAT_TOOL_FORMAT_DSML, DS_BOS, DS_EOS},
    {"deepseek-ai-DeepSeek-V4-Flash-0731.jinja", CHAT_TOOL_FORMAT_DSML_V4, DS_BOS, DS_EOS},
    {"deepseek-ai-DeepSeek-V4.jinja", CHAT_TOOL_FORMAT_DSML_V4, DS_BOS, DS_EOS},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", N, "<|begin_of_text|>",
     "<|eot_id|>"}, /* functools[...] */
    {"google-gemma-2-2b-it.jinja", N, "<bos>", "<eos>"},
    {"google-gemma-4-31B-it-interleaved.jinja", N, "<bos>", "<eos>"}, /* <|tool_call>call:f{} */
    {"google-gemma-4-31B-it.jinja", N, "<bos>", "<eos>"},             /* <|tool_call>call:f{} */
    {"ibm-granite-granite-3.3-2B-Instruct.jinja", N, "<|end_of_text|>",
     "<|end_of_text|>"}, /* <|tool_call|>[...] */
    {"ibm-granite-granite-4.1.jinja", CHAT_TOOL_FORMAT_HERMES, "<|end_of_text|>",
     "<|end_of_text|>"},
    {"llama-cpp-deepseek-r1.jinja", CHAT_TOOL_FORMAT_DEEPSEEK_V3, DS_BOS, DS_EOS},
    {"llama-cpp-rwkv-world.jinja", N, "", ""},
    {"meetkai-functionary-medium-v3.1.jinja", N, "<|begin_of_text|>",
     "<|eot_id|>"}, /* <function=f>{...}</function> */
    {"meetkai-functionary-medium-v3.2.jinja", N, "<|begin_of_text|>", "<|eot_id|>"}, /* >>>f */
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", CHAT_TOOL_FORMAT_LLAMA3, "<|begin_of_text|>",
     "<|eot_id|>"},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", CHAT_TOOL_FORMAT_LLAMA3, "<|begin_of_text|>",
     "<|eot_id|>"},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", CHAT_TOOL_FORMAT_LLAMA3, "<|begin_of_text|>",
     "<|eot_id|>"},
    {"microsoft-Phi-3.5-mini-instruct.jinja", N, "<s>", "<|endoftext|>"},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", CHAT_TOOL_FORMAT_MISTRAL_ARGS, "<s>",
     "</s>"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", CHAT_TOOL_FORMAT_MISTRAL, "<s>", "</s>"},
    {"moonshotai-Kimi-K2.jinja", CHAT_TOOL_FORMAT_KIMI_K2, "[BOS]", "[EOS]"},
    {"muse-glimmer.jinja", N, "<s>", "</s>"},                          /* <|start|>assistant to=f */
    {"openai-gpt-oss-120b.jinja", N, "<|startoftext|>", "<|return|>"}, /* harmony */
    {"openbmb-MiniCPM5-1B.jinja", N, "<s>", "</s>"}, /* <function name=...><param ...> */
    {"poolside-Laguna-S-2.1.jinja", CHAT_TOOL_FORMAT_GLM, "<s>", "</s>"},
    {"poolside-Laguna-XS-2.1.jinja", CHAT_TOOL_FORMAT_GLM, "<s>", "</s>"},
    {"poolside-Laguna-XS.2.jinja", CHAT_TOOL_FORMAT_GLM, "<s>", "</s>"},
    {"tencent-Hy3.jinja", N, "<s>", "</s>"},        /* <tool_calls〈HYTK〉> */
    {"unsloth-Apriel-1.5.jinja", N, "<s>", "</s>"}, /* <tool_calls>[...] */
    {"unsloth-mistral-Devstral-Small-2507.jinja", CHAT_TOOL_FORMAT_MISTRAL_ARGS, "<s>", "</s>"},
    {"upstage-Solar-Open-100B.jinja", N, "<s>", "</s>"}, /* <|tool_call:begin|> */
};
#define RT_N (sizeof rt_templates / sizeof *rt_templates)

/* Templates with a format whose tool calls cannot be rendered, and why. */
static const struct {
    const char *file, *why;
} rt_no_round_trip[] = {
    {"Kimi-K2-Instruct.jinja", "its list.append is unsafe in jinja2's sandbox, so Hugging Face "
                               "cannot render its tool calls either"},
};

static const rt_template *rt_find(const char *file) {
    for (size_t i = 0; i < RT_N; i++)
        if (!strcmp(rt_templates[i].file, file))
            return &rt_templates[i];
    return NULL;
}

static int rt_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Detection over every template in the shared directory. */
static void t_detect(void) {
    const char *dir = test_shared_file("templates");
    DIR *d = opendir(dir);
    T_CHECKF(d, "cannot open %s", dir);
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512)
        if (strstr(e->d_name, ".jinja"))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, rt_cmp);
    int with_format = 0;
    for (int i = 0; i < n; i++) {
        const rt_template *t = rt_find(names[i]);
        T_CHECKF(t, "%s is not in the detection table of %s", names[i], __FILE__);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len;
        char *src = test_read_file(path, &len);
        T_CHECKF(src, "cannot read %s", path);
        chat_tool_format f = chat_tool_format_detect(src, len);
        free(src);
        T_CHECKF(f == t->f, "%s: detected %s, expected %s", names[i], chat_tool_format_name(f),
                 chat_tool_format_name(t->f));
        with_format += f != CHAT_TOOL_FORMAT_NONE;
        free(names[i]);
    }
    printf("INFO chat_tools_rt.detect: %d templates, %d with a tool-call format\n", n, with_format);
    T_CHECK(chat_tool_format_detect(NULL, 0) == CHAT_TOOL_FORMAT_NONE);
    T_CHECK(chat_tool_format_detect("", 0) == CHAT_TOOL_FORMAT_NONE);
}

/* ---- round trips ---- */

static const char *rt_tools =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Weather "
    "in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": \"Local "
    "time\", \"parameters\": {\"type\": \"object\", \"properties\": {\"tz\": {\"type\": "
    "\"string\"}, \"opts\": {\"type\": \"object\"}}}}}]";

static const char *rt_names[2] = {"get_weather", "get_time"};
static const char *rt_args[2] = {"{\"city\": \"Paris\", \"days\": 3}",
                                 "{\"tz\": \"Europe/Paris\", \"opts\": {\"24h\": [1, \"x\"]}}"};

/* The conversation: a user turn and an assistant turn with n_calls tool calls whose content is
 * null (content_null) or "". */
static json_value *rt_messages(arena *a, int n_calls, bool content_null, bool with_assistant) {
    strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "[{\"role\": \"user\", \"content\": \"Weather and time in Paris?\"}");
    if (with_assistant) {
        strbuf_printf(&sb, ", {\"role\": \"assistant\", \"content\": %s, \"tool_calls\": [",
                      content_null ? "null" : "\"\"");
        for (int i = 0; i < n_calls; i++) {
            strbuf_printf(&sb,
                          "%s{\"id\": \"call0000%d\", \"type\": \"function\", \"function\": "
                          "{\"name\": \"%s\", \"arguments\": ",
                          i ? ", " : "", i + 1, rt_names[i]);
            strbuf_json_str(&sb, rt_args[i], strlen(rt_args[i]), false);
            strbuf_puts(&sb, "}}");
        }
        strbuf_puts(&sb, "]}");
    }
    strbuf_puts(&sb, "]");
    json_value *v;
    T_OK(json_parse(a, sb.data, sb.len, &v));
    strbuf_deinit(&sb);
    return v;
}

/* JSON equality, object members in any order. */
static bool rt_json_equal(const json_value *x, const json_value *y) {
    if (x->type != y->type)
        return false;
    switch (x->type) {
    case JSON_NULL:
        return true;
    case JSON_BOOL:
        return x->b == y->b;
    case JSON_NUMBER:
        return x->num.d == y->num.d;
    case JSON_STRING:
        return x->str.len == y->str.len && !memcmp(x->str.s, y->str.s, x->str.len);
    case JSON_ARRAY:
        if (x->arr.n != y->arr.n)
            return false;
        for (size_t i = 0; i < x->arr.n; i++)
            if (!rt_json_equal(x->arr.items[i], y->arr.items[i]))
                return false;
        return true;
    case JSON_OBJECT:
        if (x->obj.n != y->obj.n)
            return false;
        for (size_t i = 0; i < x->obj.n; i++) {
            const json_value *o = json_get(y, x->obj.keys[i]);
            if (!o || !rt_json_equal(x->obj.vals[i], o))
                return false;
        }
        return true;
    }
    return false;
}

/* Parses part (whole or byte by byte) and checks the calls. */
static void rt_parse(const char *file, chat_tool_format f, const json_value *tools,
                     const char *part, size_t n, int n_calls, bool bytes) {
    chat_tool_parser *p;
    T_OK(chat_tool_parser_create(f, &p));
    if (tools)
        T_OK(chat_tool_parser_set_tools(p, tools));
    strbuf content;
    strbuf_init(&content);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += bytes ? 1 : n)
        rc = chat_tool_parser_feed(p, part + i, bytes ? 1 : n, &content);
    if (!rc)
        rc = chat_tool_parser_finish(p, &content);
    T_CHECKF(rc == 0, "%s: the parser failed (%s) on the rendered assistant turn \"%s\"", file,
             err_detail(), part);
    T_CHECKF(chat_tool_parser_n_calls(p) == n_calls, "%s: %d calls from \"%s\", expected %d", file,
             chat_tool_parser_n_calls(p), part, n_calls);
    const char *const *m;
    int nm = chat_tool_format_markers(f, &m);
    for (int k = 0; k < nm; k++)
        T_CHECKF(!content.len || !strstr(content.data, m[k]), "%s: marker %s in content \"%s\"",
                 file, m[k], content.data);
    arena *a = arena_create(0, 0);
    for (int i = 0; i < n_calls; i++) {
        const chat_tool_call *c = chat_tool_parser_call(p, i);
        json_value *want, *got;
        T_OK(json_parse(a, rt_args[i], strlen(rt_args[i]), &want));
        T_OK(json_parse(a, c->arguments, strlen(c->arguments), &got));
        T_CHECKF(!strcmp(c->name, rt_names[i]) && rt_json_equal(want, got),
                 "%s: call %d is %s(%s), expected %s(%s), from \"%s\"", file, i, c->name,
                 c->arguments, rt_names[i], rt_args[i], part);
    }
    arena_destroy(a);
    strbuf_deinit(&content);
    chat_tool_parser_destroy(p);
}

static int rt_render(const chat_template *t, const rt_template *rt, const json_value *msgs,
                     const json_value *tools, bool gen, strbuf *out) {
    chat_render_opts o = {.messages = msgs,
                          .tools = tools,
                          .add_generation_prompt = gen,
                          .bos_token = rt->bos,
                          .eos_token = rt->eos,
                          .now_unix = 1700000000,
                          .tool_args = CHAT_TOOL_ARGS_AUTO};
    strbuf_reset(out);
    return chat_template_render(t, &o, out);
}

static void t_round_trip(void) {
    int done = 0, parallel = 0;
    for (size_t ti = 0; ti < RT_N; ti++) {
        const rt_template *rt = &rt_templates[ti];
        if (rt->f == CHAT_TOOL_FORMAT_NONE)
            continue;
        const char *why = NULL;
        for (size_t k = 0; k < sizeof rt_no_round_trip / sizeof *rt_no_round_trip; k++)
            if (!strcmp(rt_no_round_trip[k].file, rt->file))
                why = rt_no_round_trip[k].why;
        if (why) {
            printf("INFO chat_tools_rt.round_trip: %s not rendered: %s\n", rt->file, why);
            continue;
        }
        char rel[300];
        snprintf(rel, sizeof rel, "templates/%s", rt->file);
        size_t len;
        char *src = test_read_file(test_shared_file(rel), &len);
        T_CHECKF(src, "cannot read %s", rt->file);
        chat_template *t;
        T_OK(chat_template_create(src, len, &t));
        free(src);
        arena *a = arena_create(0, 0);
        json_value *tools;
        T_OK(json_parse(a, rt_tools, strlen(rt_tools), &tools));
        strbuf full, gen;
        strbuf_init(&full);
        strbuf_init(&gen);
        /* two calls if the template renders them, else one; content null, else ""; with the
         * tools, else without (llama-cpp-deepseek-r1 cannot render them: jinja2 fails too) */
        int n_calls = 0;
        bool null_content = true;
        const json_value *tv = tools;
        for (int k = 0; k < 8 && !n_calls; k++) {
            int calls = k % 4 < 2 ? 2 : 1;
            null_content = k % 2 == 0;
            tv = k < 4 ? tools : NULL;
            if (!rt_render(t, rt, rt_messages(a, calls, null_content, true), tv, false, &full))
                n_calls = calls;
        }
        T_CHECKF(n_calls, "%s: no rendering of tool calls succeeded: %s", rt->file, err_detail());
        T_OK(rt_render(t, rt, rt_messages(a, 0, null_content, false), tv, true, &gen));
        size_t common = 0;
        while (common < full.len && common < gen.len && full.data[common] == gen.data[common])
            common++;
        /* a divergence inside a tag (the prompt's "<think>" against the turn's "<tool_call>")
         * starts the turn at that tag */
        while (common > 0 && common < gen.len && !strchr(">]\n", full.data[common - 1]))
            common--;
        const char *part = full.data + common;
        size_t n = full.len - common;
        if (getenv("RT_VERBOSE"))
            printf("--- %s (%s, %d calls)\n%.*s\n", rt->file, chat_tool_format_name(rt->f), n_calls,
                   (int)n, part);
        for (int with_tools = 0; with_tools < 2; with_tools++)
            for (int bytes = 0; bytes < 2; bytes++)
                rt_parse(rt->file, rt->f, with_tools ? tools : NULL, part, n, n_calls, bytes);
        done++;
        parallel += n_calls == 2;
        strbuf_deinit(&full);
        strbuf_deinit(&gen);
        arena_destroy(a);
        chat_template_destroy(t);
    }
    printf("INFO chat_tools_rt.round_trip: %d templates, %d with parallel calls\n", done, parallel);
}

int main(void) {
    test_run("chat_tools_rt.detect", t_detect);
    test_run("chat_tools_rt.round_trip", t_round_trip);
    return test_summary();
}
