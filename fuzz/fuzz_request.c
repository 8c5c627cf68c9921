/* SPDX-License-Identifier: MIT */
/*
 * fuzz_request: libFuzzer target over the server's request parsing and validation
 * (srv_parse_generate): JSON bodies of /v1/completions and /v1/chat/completions, including chat
 * template rendering, tokenization, tool definitions and grammar compilation for tool_choice and
 * response_format. A tiny synthetic model's vocabulary and chat template are made once at start
 * (no ../shared needed). The first input byte picks the route; the rest is the body. Every input
 * must come back with 0 or an error body, never a crash, a leak or undefined behaviour.
 */
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "template/chat_template.h"
#include "gguf/gguf.h"
#include "model/synth.h"
#include "sample/grammar.h"
#include "server/srv_int.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static server *fz_server;
static gguf *fz_gguf; /* the tokenizer came from it */
static tokenizer *fz_tok;
static chat_template *fz_tmpl;

/* Frees what fz_setup made, at exit, so LeakSanitizer reports only what an input leaked. */
static void fz_teardown(void) {
    if (!fz_server)
        return;
    grammar_vocab_destroy(fz_server->gvocab);
    chat_template_destroy(fz_tmpl);
    tokenizer_destroy(fz_tok);
    gguf_close(fz_gguf);
    fz_server = NULL;
}

static void fz_setup(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/verity-fuzz-request-%ld.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    synth_opts o = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 1};
    gguf *g = NULL;
    tokenizer *tok;
    chat_template *t;
    gguf_str src;
    if (synth_write(&o, path) || gguf_open(path, &g) || tokenizer_load(g, &tok) ||
        gguf_get_str(g, "tokenizer.chat_template", &src) ||
        chat_template_create(src.s, src.len, &t)) {
        fprintf(stderr, "fuzz_request: setup failed: %s\n", err_detail());
        abort();
    }
    unlink(path);
    fz_gguf = g;
    fz_tok = tok;
    fz_tmpl = t;
    static server s;
    s.sm.name = "fuzz-model";
    s.sm.tok = tok;
    s.sm.tmpl = t;
    s.sm.n_ctx = 4096;
    s.tool_format = chat_tool_format_detect(src.s, src.len);
    if (grammar_vocab_create(tok, &s.gvocab))
        s.gvocab = NULL;
    s.o.queue_max = 16;
    fz_server = &s; /* g, tok and t live until fz_teardown: they back s */
    atexit(fz_teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fz_server)
        fz_setup();
    if (size < 1)
        return 0;
    bool chat = data[0] & 1;
    arena *a = arena_create(0, 64 << 20);
    json_value *body;
    if (a && json_parse(a, (const char *)data + 1, size - 1, &body) == 0 &&
        body->type == JSON_OBJECT) {
        srv_params p;
        srv_err e;
        if (srv_parse_generate(fz_server, a, body, chat, &p, &e) == 0)
            grammar_destroy(p.constraint); /* the engine would have taken it */
    }
    arena_destroy(a);
    return 0;
}
