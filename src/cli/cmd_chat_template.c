/* SPDX-License-Identifier: MIT */
/*
 * cmd_chat_template: `verity chat-template -m MODEL --messages FILE.json [--tools FILE.json]
 * [--chat-template NAME|FILE] [--chat-template-kwargs JSON] [--no-generation-prompt]
 * [--now UNIX_SECONDS] [--tool-args auto|as-given]` prints the prompt the model's chat template
 * (tokenizer.chat_template, or --chat-template: a built-in name or a Jinja file, chat_source.h;
 * --template is the same option's older spelling) renders for a conversation,
 * exactly as the server renders it (chat_prompt.h), with no newline added. MODEL may be a
 * vocabulary-only GGUF; only its metadata is read. --now fixes the time strftime_now sees.
 * --tool-args: "auto" (default, as the server) converts tool-call arguments to the shape the
 * template expects (an object or a JSON string); "as-given" passes them unchanged, as Hugging
 * Face's renderer does.
 */
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/file.h"
#include "base/flags.h"
#include "template/chat_prompt.h"
#include "template/chat_source.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a whole file into the arena. Returns NULL after printing a usage error. */
static char *ct_slurp(arena *a, const char *opt, const char *path, size_t *len) {
    char *buf;
    if (file_read_all(path, 0, &buf, len)) {
        cli_usage_error("chat-template", "%s %s", opt, err_detail());
        return NULL;
    }
    char *b = arena_alloc(a, *len + 1);
    if (b)
        memcpy(b, buf, *len + 1);
    else
        cli_usage_error("chat-template", "%s %s: out of memory", opt, path);
    free(buf);
    return b;
}

static const json_value *ct_json_file(arena *a, const char *opt, const char *path) {
    size_t len;
    char *text = ct_slurp(a, opt, path, &len);
    if (!text)
        return NULL;
    json_value *v;
    if (json_parse(a, text, len, &v)) {
        cli_usage_error("chat-template", "%s %s: %s", opt, path, err_detail());
        return NULL;
    }
    if (v->type != JSON_ARRAY) {
        cli_usage_error("chat-template", "%s %s: must hold a JSON array", opt, path);
        return NULL;
    }
    return v;
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *tools = NULL, *tmpl_file = NULL;
    bool gen = true, as_given = false;
    int64_t now = clock_wall_s();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "-m") || !strcmp(a, "--model") ? &model
                           : !strcmp(a, "--messages")                ? &messages
                           : !strcmp(a, "--tools")                   ? &tools
                           : !strcmp(a, "--template")                ? &tmpl_file
                                                                     : NULL;
        if (!strcmp(a, "--no-generation-prompt")) {
            gen = false;
        } else if (!strcmp(a, "--tool-args")) {
            const char *v = cli_next("chat-template", argc, argv, &i);
            if (!v)
                return 2;
            if (strcmp(v, "auto") && strcmp(v, "as-given"))
                return cli_usage_error("chat-template", "--tool-args: '%s' is not auto or as-given",
                                       v);
            as_given = !strcmp(v, "as-given");
        } else if (!strcmp(a, "--now")) {
            const char *v = cli_next("chat-template", argc, argv, &i);
            if (!v || cli_parse_i64("chat-template", "--now", v, 0, INT64_MAX, &now))
                return 2;
        } else if (dst) {
            if (!(*dst = cli_next("chat-template", argc, argv, &i)))
                return 2;
        } else {
            return cli_usage_error(
                "chat-template",
                "unknown option '%s' (usage: verity chat-template -m MODEL "
                "--messages FILE.json [--tools FILE.json] [--chat-template NAME|FILE] "
                "[--no-generation-prompt] [--now SECONDS])",
                a);
        }
    }
    if (!model || !messages)
        return cli_usage_error("chat-template", "-m MODEL and --messages FILE.json are required");
    arena *ar = arena_create(0, 0);
    gguf *g = NULL;
    tokenizer *tok = NULL;
    chat_template *t = NULL;
    strbuf out;
    strbuf_init(&out);
    int status = 0, rc;
    const json_value *msgs = NULL, *tl = NULL, *kwargs = NULL;
    if (!ar) {
        status = cli_fail("chat-template", ERR_NOMEM);
        goto done;
    }
    if ((rc = gguf_open(model, &g)) || (rc = tokenizer_load(g, &tok))) {
        status = cli_fail("chat-template", rc);
        goto done;
    }
    chat_source cs;
    const char *spec = tmpl_file ? tmpl_file : flags_str(FLAG_CHAT_TEMPLATE);
    if ((rc = chat_source_load(g, spec, &cs))) {
        status = cli_usage_error("chat-template", "--chat-template: %s", err_detail());
        goto done;
    }
    if (!cs.text) {
        status = cli_usage_error(
            "chat-template", "%s has no tokenizer.chat_template (give --chat-template NAME|FILE)",
            model);
        goto done;
    }
    rc = chat_template_create(cs.text, cs.len, &t);
    if (rc) {
        t = NULL;
        status =
            cli_usage_error("chat-template", "chat template (%s): %s", cs.origin, err_detail());
        chat_source_deinit(&cs);
        goto done;
    }
    chat_source_deinit(&cs);
    if (chat_source_parse_kwargs(ar, flags_str(FLAG_CHAT_TEMPLATE_KWARGS), &kwargs)) {
        status = cli_usage_error("chat-template", "--chat-template-kwargs: %s", err_detail());
        goto done;
    }
    if (!(msgs = ct_json_file(ar, "--messages", messages)) ||
        (tools && !(tl = ct_json_file(ar, "--tools", tools)))) {
        status = 2;
        goto done;
    }
    chat_prompt_opts po = {.messages = msgs,
                           .tools = tl,
                           .extra = kwargs,
                           .add_generation_prompt = gen,
                           .now_unix = now,
                           .args_as_given = as_given};
    if ((rc = chat_prompt_render(t, tok, ar, &po, &out))) {
        status = cli_fail("chat-template", rc);
        goto done;
    }
    fwrite(out.data, 1, out.len, stdout);
done:
    strbuf_deinit(&out);
    chat_template_destroy(t);
    tokenizer_destroy(tok);
    gguf_close(g);
    arena_destroy(ar);
    return status;
}
