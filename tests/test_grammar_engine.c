/* SPDX-License-Identifier: MIT */
/*
 * test_grammar_engine: constrained decoding through the engine and what it costs.
 *   - the engine: constrained requests on a synthetic model (random weights) finish with STOP
 *     and one schema-valid tool call each, and their tokens do not change between a batch-1 run
 *     and a batched, chunked run whose KV pool is so small that sequences are preempted and
 *     recomputed (P1: the grammar state must follow the sequence through it all); refused,
 *     cancelled and still-running requests free their constraint (ASan's leak check);
 *   - the cost of one mask and of one constrained engine step on the tiny vocabulary, on
 *     DeepSeek-LLM's 102k-token BPE vocabulary (../shared/vocab) and on a 152k-token extension of
 *     it, printed as INFO lines;
 *   - `test_grammar_engine --check-response ...`: the response checker tests/cli/serve_tools.sh
 *     runs on server output (see check_response).
 */
#include "test.h"

#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "toolcall/chat_tools.h"
#include "toolcall/tool_grammar.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/grammar.h"
#include "test_grammar_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine ---- */

typedef struct eng_out {
    int32_t toks[600];
    int n;
    engine_finish fin;
    int events_after_finish;
} eng_out;

static void eng_on_event(void *ud, const engine_event *ev) {
    eng_out *o = ud;
    if (o->fin != ENGINE_FINISH_NONE)
        o->events_after_finish++;
    if (ev->token >= 0 && o->n < 600)
        o->toks[o->n++] = ev->token;
    if (ev->finish != ENGINE_FINISH_NONE)
        o->fin = ev->finish;
}

typedef struct eng_env {
    model *m;
    tokenizer *tok;
    grammar_vocab *v;
    grammar *g;
    arena *a;
} eng_env;

static void eng_env_open(eng_env *env) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-grammar.gguf", test_tmpdir());
    synth_opts so = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 17};
    T_OK(synth_write(&so, path));
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    T_OK(model_load(path, isa, &env->m));
    T_OK(tokenizer_load(model_get_gguf(env->m), &env->tok));
    T_OK(grammar_vocab_create(env->tok, &env->v));
    env->a = arena_create(0, 0);
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, parse_json(env->a, test_tools), NULL,
                                    NULL, env->v, &env->g));
}

static void eng_env_close(eng_env *env) {
    grammar_destroy(env->g);
    grammar_vocab_destroy(env->v);
    tokenizer_destroy(env->tok);
    model_destroy(env->m);
    arena_destroy(env->a);
}

/* Runs n constrained requests (every fourth greedy) to the end; returns the preemptions. */
static int64_t eng_run(eng_env *env, int64_t kv_blocks, int max_batch, int chunk, eng_out *outs,
                       int n) {
    engine_opts o = {.max_batch = max_batch,
                     .chunk = chunk,
                     .kv_blocks = kv_blocks,
                     .block_size = 16,
                     .threads = 1,
                     .attn_chunk = 64};
    engine *e;
    T_OK(engine_create(env->m, env->tok, &o, &e));
    for (int i = 0; i < n; i++) {
        char text[128];
        snprintf(text, sizeof text,
                 "<|im_start|>user\nweather in city %d?<|im_end|>\n"
                 "<|im_start|>assistant\n",
                 i * 37);
        int32_t ids[256];
        size_t n_ids;
        T_OK(tokenizer_encode(env->tok, text, strlen(text), true, true, ids, 256, &n_ids));
        sample_params sp = sample_params_default();
        sp.seed = (uint64_t)i;
        if (i % 4 == 0)
            sp.temperature = 0;
        grammar_state *st;
        T_OK(grammar_state_create(env->g, &st));
        memset(&outs[i], 0, sizeof outs[i]);
        engine_req r = {.id = (uint64_t)i + 1,
                        .prompt = ids,
                        .n_prompt = (int32_t)n_ids,
                        .sp = sp,
                        .max_tokens = 300,
                        .constraint = st,
                        .cb = eng_on_event,
                        .ud = &outs[i]};
        T_OK(engine_submit(e, &r));
    }
    while (engine_busy(e))
        T_OK(engine_step(e));
    engine_stats st;
    engine_stats_get(e, &st);
    engine_destroy(e);
    return st.preemptions;
}

static void t_engine(void) {
    eng_env env;
    eng_env_open(&env);
    enum { N = 12 };
    static eng_out gold[N], out[N];
    T_EQ_INT(eng_run(&env, 4096, 1, 512, gold, N), 0);
    arena *a = arena_create(0, 0);
    const json_value *tools = parse_json(a, test_tools);
    for (int i = 0; i < N; i++) {
        T_CHECKF(gold[i].fin == ENGINE_FINISH_STOP, "request %d finished with %d", i, gold[i].fin);
        T_EQ_INT(gold[i].events_after_finish, 0);
        strbuf text, content;
        strbuf_init(&text);
        strbuf_init(&content);
        T_OK(tokenizer_decode(env.tok, gold[i].toks, (size_t)gold[i].n, false, &text));
        chat_tool_parser *p;
        T_OK(chat_tool_parser_create(CHAT_TOOL_FORMAT_HERMES, &p));
        T_OK(chat_tool_parser_feed(p, text.data, text.len, &content));
        T_OK(chat_tool_parser_finish(p, &content));
        T_EQ_INT(chat_tool_parser_n_calls(p), 1);
        const chat_tool_call *call = chat_tool_parser_call(p, 0);
        const json_value *params = tool_params(tools, call->name);
        arena *va = arena_create(0, 0);
        T_CHECKF(valid(params, params, parse_json(va, call->arguments), 0), "%s(%s)", call->name,
                 call->arguments);
        arena_destroy(va);
        chat_tool_parser_destroy(p);
        strbuf_deinit(&text);
        strbuf_deinit(&content);
    }
    /* batched, chunked, and with a pool so small that sequences are preempted and recomputed:
     * the same tokens (P1; the grammar state must follow the sequence through it all) */
    int64_t pre = eng_run(&env, 24, 8, 16, out, N);
    T_CHECKF(pre > 0, "no preemption happened");
    for (int i = 0; i < N; i++) {
        T_CHECKF(out[i].n == gold[i].n &&
                     !memcmp(out[i].toks, gold[i].toks, (size_t)gold[i].n * sizeof(int32_t)) &&
                     out[i].fin == gold[i].fin,
                 "request %d differs under batching/preemption (%d vs %d tokens)", i, out[i].n,
                 gold[i].n);
    }
    printf("INFO grammar_engine.engine: %d constrained requests, %lld preemptions, identical\n", N,
           (long long)pre);
    arena_destroy(a);
    eng_env_close(&env);
}

/* The engine owns a constraint from engine_submit on: refused, cancelled and destroyed requests
 * free it (ASan's leak check sees it otherwise). */
static void t_engine_ownership(void) {
    eng_env env;
    eng_env_open(&env);
    engine_opts o = {.max_batch = 4,
                     .chunk = 64,
                     .kv_blocks = 256,
                     .block_size = 16,
                     .threads = 1,
                     .attn_chunk = 64};
    engine *e;
    T_OK(engine_create(env.m, env.tok, &o, &e));
    grammar_state *st;
    eng_out out;
    memset(&out, 0, sizeof out);
    int32_t bad[2] = {5, 1 << 30};
    T_OK(grammar_state_create(env.g, &st));
    engine_req r = {.id = 1,
                    .prompt = bad,
                    .n_prompt = 2,
                    .sp = sample_params_default(),
                    .max_tokens = 10,
                    .constraint = st,
                    .cb = eng_on_event,
                    .ud = &out};
    T_EQ_INT(engine_submit(e, &r), ERR_INVAL);
    int32_t ok[3] = {1, 40, 41};
    for (uint64_t id = 2; id < 5; id++) {
        T_OK(grammar_state_create(env.g, &st));
        r = (engine_req){.id = id,
                         .prompt = ok,
                         .n_prompt = 3,
                         .sp = sample_params_default(),
                         .max_tokens = 200,
                         .constraint = st,
                         .cb = eng_on_event,
                         .ud = &out};
        T_OK(engine_submit(e, &r));
    }
    T_OK(engine_step(e));
    T_OK(engine_cancel(e, 2));
    T_OK(engine_step(e));
    engine_destroy(e); /* 3 and 4 still running */
    eng_env_close(&env);
}

/* ---- mask cost ---- */

/* Average microseconds of grammar_allowed at the state after prefix (and the allowed count). */
static double mask_us(grammar *g, const char *prefix, int reps, int32_t *count, int32_t n_vocab) {
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    T_CHECKF(grammar_accept_bytes(st, prefix, strlen(prefix)), "prefix \"%s\" refused", prefix);
    uint64_t *mask = malloc(((size_t)n_vocab + 63) / 64 * sizeof *mask);
    int64_t t0 = clock_now_ns();
    for (int r = 0; r < reps; r++)
        *count = grammar_allowed(st, true, GRAMMAR_NO_BUDGET, mask);
    double us = (double)(clock_now_ns() - t0) / 1e3 / reps;
    free(mask);
    grammar_state_destroy(st);
    return us;
}

static const char *speed_points[][2] = {
    {"start", ""},
    {"after {\"name\": ", "<tool_call>{\"name\": "},
    {"in a string", "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"wea"},
    {"in an integer", "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"x\", \"k\": 1"},
};

static void report_speed(const char *what, grammar *g, int32_t n_vocab, int reps) {
    for (size_t i = 0; i < sizeof speed_points / sizeof *speed_points; i++) {
        int32_t count = 0;
        double us = mask_us(g, speed_points[i][1], reps, &count, n_vocab);
        printf("INFO grammar_engine.mask_cost: %s vocabulary (%d tokens), %s: %.1f us per mask, %d "
               "allowed\n",
               what, n_vocab, speed_points[i][0], us, count);
        if (i == 2)
            T_CHECKF(count > n_vocab / 2, "only %d tokens allowed inside a string", count);
        if (i == 1)
            T_CHECKF(count < 100, "%d tokens allowed before a name", count);
    }
    /* what the engine pays per constrained step inside a string: mask, -inf pass, plus the copy */
    grammar_state *st;
    T_OK(grammar_state_create(g, &st));
    T_CHECK(grammar_accept_bytes(st, speed_points[2][1], strlen(speed_points[2][1])));
    float *row = malloc((size_t)n_vocab * sizeof *row),
          *copy = malloc((size_t)n_vocab * sizeof *row);
    for (int32_t i = 0; i < n_vocab; i++)
        row[i] = (float)(i % 97) * 0.01f;
    int64_t t0 = clock_now_ns();
    for (int r = 0; r < reps; r++) {
        memcpy(copy, row, (size_t)n_vocab * sizeof *row);
        grammar_apply(st, copy, n_vocab, true, 1000);
    }
    printf(
        "INFO grammar_engine.mask_cost: %s vocabulary (%d tokens), engine step in a string (copy, "
        "mask, -inf pass): %.1f us\n",
        what, n_vocab, (double)(clock_now_ns() - t0) / 1e3 / reps);
    free(row);
    free(copy);
    grammar_state_destroy(st);
}

static void t_mask_cost(void) {
    eng_env env;
    eng_env_open(&env);
    report_speed("tiny", env.g, tokenizer_n_vocab(env.tok), (int)(2000 * test_scale()) + 1);
    eng_env_close(&env);

    const char *path = test_shared_file("vocab/ggml-vocab-deepseek-llm.gguf");
    gguf *gf;
    tokenizer *tok;
    grammar_vocab *v;
    grammar *g;
    T_OK(gguf_open(path, &gf));
    T_OK(tokenizer_load(gf, &tok));
    gguf_close(gf);
    int64_t t0 = clock_now_ns();
    T_OK(grammar_vocab_create(tok, &v));
    int64_t t1 = clock_now_ns();
    arena *a = arena_create(0, 0);
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, parse_json(a, test_tools), NULL, NULL,
                                    v, &g));
    int64_t t2 = clock_now_ns();
    printf(
        "INFO grammar_engine.mask_cost: %d-token vocabulary tables built in %.1f ms; tool grammar "
        "(%d DFA states, %d byte classes, %.0f KiB) compiled in %.1f ms\n",
        tokenizer_n_vocab(tok), (double)(t1 - t0) / 1e6, grammar_n_dfa_states(g),
        grammar_n_classes(g), (double)grammar_table_bytes(g) / 1024, (double)(t2 - t1) / 1e6);
    report_speed("BPE", g, tokenizer_n_vocab(tok), (int)(100 * test_scale()) + 1);
    grammar_destroy(g);

    /* a Qwen-sized vocabulary (152064): these tokens plus joined pairs of them */
    enum { BIG = 152064 };
    int32_t n0 = tokenizer_n_vocab(tok);
    const char **texts = malloc(BIG * sizeof *texts);
    size_t *lens = malloc(BIG * sizeof *lens);
    uint8_t *kinds = malloc(BIG);
    char *pool = malloc((size_t)(BIG - n0) * 64), *pp = pool;
    uint64_t seed = 99;
    for (int32_t i = 0; i < BIG; i++) {
        if (i < n0) {
            texts[i] = tokenizer_token_text(tok, i, false, &lens[i]);
            kinds[i] = tokenizer_is_eog(tok, i) ? GRAMMAR_TOKEN_EOG
                       : lens[i]                ? GRAMMAR_TOKEN_TEXT
                                                : GRAMMAR_TOKEN_NEVER;
            continue;
        }
        size_t la, lb;
        const char *ta, *tb;
        do {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            ta = tokenizer_token_text(tok, (int32_t)((seed >> 20) % (uint64_t)n0), false, &la);
            tb = tokenizer_token_text(tok, (int32_t)((seed >> 40) % (uint64_t)n0), false, &lb);
        } while (la + lb > 63 || la + lb == 0);
        memcpy(pp, ta, la);
        memcpy(pp + la, tb, lb);
        texts[i] = pp;
        lens[i] = la + lb;
        kinds[i] = GRAMMAR_TOKEN_TEXT;
        pp += 64;
    }
    grammar_vocab *big;
    T_OK(grammar_vocab_create_raw(BIG, texts, lens, kinds, &big));
    T_OK(tool_grammar_compile_calls(CHAT_TOOL_FORMAT_HERMES, parse_json(a, test_tools), NULL, NULL,
                                    big, &g));
    report_speed("BPE + joined pairs", g, BIG, (int)(100 * test_scale()) + 1);
    grammar_destroy(g);
    grammar_vocab_destroy(big);
    free(texts);
    free(lens);
    free(kinds);
    free(pool);
    grammar_vocab_destroy(v);
    tokenizer_destroy(tok);
    arena_destroy(a);
}

/* ---- the response checker for tests/cli/serve_tools.sh ----
 *
 * test_grammar_engine --check-response RESPONSE REQUEST tools|json|either [NAME]
 * RESPONSE is a /v1/chat/completions or /v1/completions body, or an SSE stream of chunks;
 * REQUEST the request body. "tools": every choice finished with "tool_calls" and carries exactly
 * one call to a function of the request's tools (NAME if given) whose arguments are valid under
 * its parameters. "json": every choice's text parses and is valid under the request's
 * response_format (json_schema's schema, or any object for json_object); "either": each choice
 * is one or the other (tool_choice "auto" with a JSON response_format). Prints why and exits 1
 * on the first problem, exits 0 silently otherwise. */

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    strbuf sb;
    strbuf_init(&sb);
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        strbuf_append(&sb, buf, k);
    fclose(f);
    return strbuf_take(&sb, n);
}

typedef struct ck_choice {
    strbuf text;       /* content / text, concatenated over chunks */
    strbuf name, args; /* the first call */
    int n_calls;
    char finish[32];
} ck_choice;

static int ck_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ck_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    return 1;
}

/* Folds one response object (a whole body or one chunk) into the choices. */
static void ck_fold(const json_value *body, ck_choice *ch, int *n_ch) {
    const json_value *cs = json_get(body, "choices");
    for (size_t i = 0; cs && cs->type == JSON_ARRAY && i < cs->arr.n; i++) {
        const json_value *c = cs->arr.items[i];
        int64_t idx = 0;
        json_as_int(json_get(c, "index"), &idx);
        if (idx < 0 || idx >= 16)
            continue;
        if (idx + 1 > *n_ch)
            *n_ch = (int)idx + 1;
        ck_choice *k = &ch[idx];
        const json_value *m = json_get(c, "message");
        if (!m)
            m = json_get(c, "delta");
        const char *t;
        size_t tl;
        if (json_as_str(json_get(m, "content"), &t, &tl) ||
            json_as_str(json_get(c, "text"), &t, &tl))
            strbuf_append(&k->text, t, tl);
        const json_value *calls = json_get(m, "tool_calls");
        for (size_t j = 0; calls && calls->type == JSON_ARRAY && j < calls->arr.n; j++) {
            const json_value *f = json_get(calls->arr.items[j], "function");
            if (k->n_calls++ == 0) {
                if (json_as_str(json_get(f, "name"), &t, &tl))
                    strbuf_append(&k->name, t, tl);
                if (json_as_str(json_get(f, "arguments"), &t, &tl))
                    strbuf_append(&k->args, t, tl);
            }
        }
        if (json_as_str(json_get(c, "finish_reason"), &t, &tl))
            snprintf(k->finish, sizeof k->finish, "%.*s", (int)tl, t);
    }
}

static int check_response(int argc, char **argv) {
    if (argc < 5)
        return ck_fail(
            "usage: test_grammar_engine --check-response RESPONSE REQUEST tools|json|either "
            "[NAME]");
    bool either = !strcmp(argv[4], "either");
    const char *want = argc > 5 ? argv[5] : NULL;
    size_t rn, qn;
    char *resp = read_file(argv[2], &rn), *req = read_file(argv[3], &qn);
    if (!resp || !req)
        return ck_fail("cannot read %s or %s", argv[2], argv[3]);
    arena *a = arena_create(0, 0);
    json_value *rq;
    if (json_parse(a, req, qn, &rq))
        return ck_fail("the request is not JSON: %s", err_detail());
    ck_choice ch[16];
    memset(ch, 0, sizeof ch);
    for (int i = 0; i < 16; i++) {
        strbuf_init(&ch[i].text);
        strbuf_init(&ch[i].name);
        strbuf_init(&ch[i].args);
    }
    int n_ch = 0;
    if (rn >= 6 && !memcmp(resp, "data: ", 6)) {
        for (char *line = strtok(resp, "\n"); line; line = strtok(NULL, "\n")) {
            if (strncmp(line, "data: ", 6) || !strcmp(line + 6, "[DONE]"))
                continue;
            json_value *v;
            if (json_parse(a, line + 6, strlen(line + 6), &v))
                return ck_fail("a chunk is not JSON: %s", line);
            ck_fold(v, ch, &n_ch);
        }
    } else {
        json_value *v;
        if (json_parse(a, resp, rn, &v))
            return ck_fail("the response is not JSON: %s", resp);
        ck_fold(v, ch, &n_ch);
    }
    if (n_ch == 0)
        return ck_fail("no choices in the response: %.300s", resp);
    const json_value *tools = json_get(rq, "tools");
    const json_value *rf = json_get(rq, "response_format");
    const json_value *schema = json_get(json_get(rf, "json_schema"), "schema");
    for (int i = 0; i < n_ch; i++) {
        ck_choice *k = &ch[i];
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        bool tools_mode = !strcmp(argv[4], "tools") || (either && k->n_calls > 0);
        if (tools_mode) {
            if (strcmp(k->finish, "tool_calls"))
                return ck_fail("choice %s: finish_reason \"%s\", expected tool_calls", idx,
                               k->finish);
            if (k->n_calls != 1)
                return ck_fail("choice %s: %d calls, expected one", idx, k->n_calls);
            if (want && strcmp(k->name.data, want))
                return ck_fail("called %s, expected %s", k->name.data, want);
            const json_value *params = NULL;
            bool found = false;
            for (size_t t = 0; tools && t < tools->arr.n; t++) {
                const json_value *f = json_get(tools->arr.items[t], "function");
                if (!strcmp(json_get(f, "name")->str.s, k->name.data)) {
                    found = true;
                    params = json_get(f, "parameters");
                }
            }
            if (!found)
                return ck_fail("called %s, which is not among the tools", k->name.data);
            json_value *args;
            if (json_parse(a, k->args.data, k->args.len, &args) || args->type != JSON_OBJECT)
                return ck_fail("arguments are not a JSON object: %s", k->args.data);
            if (params && !valid(params, params, args, 0))
                return ck_fail("arguments do not follow the %s schema: %s", k->name.data,
                               k->args.data);
        } else {
            if (strcmp(k->finish, "stop"))
                return ck_fail("choice %s: finish_reason \"%s\", expected stop", idx, k->finish);
            json_value *v;
            if (json_parse(a, k->text.data, k->text.len, &v))
                return ck_fail("the output is not JSON: %s", k->text.data);
            if (schema ? !valid(schema, schema, v, 0) : v->type != JSON_OBJECT)
                return ck_fail("the output does not follow the schema: %s", k->text.data);
        }
    }
    for (int i = 0; i < 16; i++) {
        strbuf_deinit(&ch[i].text);
        strbuf_deinit(&ch[i].name);
        strbuf_deinit(&ch[i].args);
    }
    arena_destroy(a);
    free(resp);
    free(req);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--check-response"))
        return check_response(argc, argv);
    test_run("grammar_engine.engine", t_engine);
    test_run("grammar_engine.ownership", t_engine_ownership);
    test_run("grammar_engine.mask_cost", t_mask_cost);
    return test_summary();
}
