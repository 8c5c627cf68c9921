/* SPDX-License-Identifier: MIT */
/*
 * cmd_generate: text generation from the command line.
 *
 *   verity generate [-m MODEL] -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
 *                   [--seed S] [--repeat-penalty R] [--frequency-penalty F]
 *                   [--presence-penalty P] [--ctx N] [--ignore-eos] [-t THREADS]
 *     prints only the generated continuation on stdout, streamed as it is produced.
 *     With --chat [--system TEXT], TEXT is the user's message: the chat template (the model's, or
 *     --chat-template NAME|FILE, with --chat-template-kwargs JSON) renders the conversation
 *     (exactly as the server does) and the assistant's answer is printed.
 *   verity generate [-m MODEL] --prompts FILE.jsonl [--max-batch B] [--chunk C] [-t THREADS]
 *                   [--logits-digest]
 *     runs every prompt through one engine with continuous batching and prints one JSON line per
 *     prompt, in input order: {"index":i,"tokens":[...],"text":"..."} (plus "logits_digest", an
 *     FNV-1a 64 hash of every logits row a token was drawn from, with --logits-digest).
 *     Input lines: {"prompt":"...","n":64,"seed":1,"temperature":0,...} with the same optional
 *     sampling fields as the options above (top_k, top_p, min_p, repeat_penalty,
 *     frequency_penalty, presence_penalty). Every line is validated before anything runs.
 *
 * Defaults: n = 64, temperature 0.8, top-p 0.95, min-p 0.05, seed 0 (runs are deterministic
 * unless --seed changes). The prompt is tokenized with the vocabulary's BOS rule. Timing goes to
 * stderr.
 */
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/mem.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "template/chat_prompt.h"
#include "template/chat_source.h"
#include "cli/cli_model.h"
#include "engine/engine.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen_item {
    int32_t *prompt;
    int32_t n_prompt;
    int32_t n;
    sample_params sp;
    int32_t *out;
    int32_t n_out;
    uint64_t digest;
    bool done;
    tokenizer_stream ts; /* streaming mode only */
} gen_item;

typedef struct gen_ctx {
    const tokenizer *tok;
    int64_t n_vocab;
    gen_item *items;
    bool stream;
    bool digest;
    strbuf sb;
} gen_ctx;

static uint64_t gen_fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void gen_on_event(void *ud, const engine_event *ev) {
    gen_ctx *g = ud;
    gen_item *it = &g->items[ev->req_id];
    if (ev->logits && g->digest)
        it->digest = gen_fnv(it->digest, ev->logits, (size_t)g->n_vocab * sizeof(float));
    if (ev->token >= 0) {
        it->out[it->n_out++] = ev->token;
        if (g->stream) {
            strbuf_reset(&g->sb);
            tokenizer_stream_push(&it->ts, ev->token, &g->sb);
            fwrite(g->sb.data, 1, g->sb.len, stdout);
            fflush(stdout);
        }
    }
    if (ev->finish != ENGINE_FINISH_NONE) {
        it->done = true;
        if (g->stream) {
            strbuf_reset(&g->sb);
            tokenizer_stream_flush(&it->ts, &g->sb);
            fwrite(g->sb.data, 1, g->sb.len, stdout);
            fflush(stdout);
        }
    }
}

static int gen_tokenize(const char *cmd, const tokenizer *tok, const char *text, size_t len,
                        gen_item *it) {
    size_t cap = tokenizer_max_tokens(len);
    it->prompt = malloc(cap * sizeof(int32_t));
    if (!it->prompt)
        return cli_fail(cmd, err_set(ERR_NOMEM, "out of memory"));
    size_t n;
    int rc = tokenizer_encode(tok, text, len, true, false, it->prompt, cap, &n);
    if (rc)
        return cli_fail(cmd, rc);
    if (n == 0)
        return cli_usage_error(cmd, "the prompt encodes to no tokens");
    it->n_prompt = (int32_t)n;
    return 0;
}

/* Renders [system?, user] through the chat template (--chat-template's, else the model's) with
 * the --chat-template-kwargs variables and tokenizes it (chat_prompt.h). */
static int gen_chat_prompt(const cli_model *cm, const char *system_msg, const char *user,
                           gen_item *it) {
    chat_source src;
    const char *spec = flags_str(FLAG_CHAT_TEMPLATE);
    int rc = chat_source_load(model_get_gguf(cm->m), spec, &src);
    if (rc)
        return cli_usage_error("generate", "--chat-template: %s", err_detail());
    if (!src.text)
        return cli_usage_error("generate", "--chat: the model has no chat template (give one "
                                           "with --chat-template NAME|FILE)");
    chat_template *t;
    rc = chat_template_create(src.text, src.len, &t);
    if (rc) {
        int st = cli_usage_error("generate", "chat template (%s): %s", src.origin, err_detail());
        chat_source_deinit(&src);
        return st;
    }
    chat_source_deinit(&src);
    arena *a = arena_create(0, 0);
    strbuf sb;
    strbuf_init(&sb);
    json_value *msgs = a ? json_new_arr(a) : NULL;
    const json_value *kwargs = NULL;
    int status = 0;
    if (!msgs) {
        status = cli_fail("generate", err_set(ERR_NOMEM, "out of memory"));
        goto out;
    }
    if (chat_source_parse_kwargs(a, flags_str(FLAG_CHAT_TEMPLATE_KWARGS), &kwargs)) {
        status = cli_usage_error("generate", "--chat-template-kwargs: %s", err_detail());
        goto out;
    }
    const char *roles[2] = {"system", "user"}, *texts[2] = {system_msg, user};
    for (int i = 0; i < 2; i++) {
        if (!texts[i])
            continue;
        json_value *m = json_new_obj(a);
        json_obj_set(a, m, "role", json_new_str(a, roles[i], strlen(roles[i])));
        json_obj_set(a, m, "content", json_new_str(a, texts[i], strlen(texts[i])));
        json_arr_push(a, msgs, m);
    }
    chat_prompt_opts po = {.messages = msgs,
                           .extra = kwargs,
                           .add_generation_prompt = true,
                           .now_unix = clock_wall_s()};
    int32_t *ids;
    int32_t n;
    if ((rc = chat_prompt_render(t, cm->tok, a, &po, &sb)) ||
        (rc = chat_prompt_tokenize(cm->tok, a, sb.data, sb.len, &ids, &n))) {
        status = cli_fail("generate", rc);
        goto out;
    }
    it->prompt = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!it->prompt) {
        status = cli_fail("generate", err_set(ERR_NOMEM, "out of memory"));
        goto out;
    }
    memcpy(it->prompt, ids, (size_t)n * sizeof(int32_t));
    it->n_prompt = n;
out:
    strbuf_deinit(&sb);
    arena_destroy(a);
    chat_template_destroy(t);
    return status;
}

typedef struct gen_field {
    const char *key;
    char kind; /* 'd' double, 'i' int32 */
    size_t off;
} gen_field;

static const gen_field gen_fields[] = {
    {"temperature", 'd', offsetof(sample_params, temperature)},
    {"top_k", 'i', offsetof(sample_params, top_k)},
    {"top_p", 'd', offsetof(sample_params, top_p)},
    {"min_p", 'd', offsetof(sample_params, min_p)},
    {"repeat_penalty", 'd', offsetof(sample_params, repetition_penalty)},
    {"frequency_penalty", 'd', offsetof(sample_params, frequency_penalty)},
    {"presence_penalty", 'd', offsetof(sample_params, presence_penalty)},
};

static void gen_default_params(sample_params *sp) {
    *sp = sample_params_default();
    sp->temperature = 0.8;
    sp->top_p = 0.95;
    sp->min_p = 0.05;
    sp->seed = 0;
}

/* Parses one JSONL line into it. Returns 0 or prints "FILE:LINE: ..." and returns 2. */
static int gen_parse_line(const char *file, int line_no, const char *line, size_t len,
                          const tokenizer *tok, gen_item *it) {
    arena *a = arena_create(0, 0);
    json_value *v;
    int rc = a ? json_parse(a, line, len, &v) : ERR_NOMEM;
    if (rc) {
        arena_destroy(a);
        return cli_usage_error("generate", "%s:%d: %s", file, line_no, err_detail());
    }
    int status = 0;
    const char *p;
    size_t pl;
    int64_t iv;
    double dv;
    gen_default_params(&it->sp);
    it->n = 64;
    if (v->type != JSON_OBJECT) {
        status =
            cli_usage_error("generate", "%s:%d: each line must be a JSON object", file, line_no);
        goto out;
    }
    if (!json_as_str(json_get(v, "prompt"), &p, &pl)) {
        status =
            cli_usage_error("generate", "%s:%d: \"prompt\" (a string) is required", file, line_no);
        goto out;
    }
    const json_value *f;
    if ((f = json_get(v, "n")) && (!json_as_int(f, &iv) || iv < 0 || iv > 1000000)) {
        status = cli_usage_error("generate", "%s:%d: \"n\" must be an integer in 0..1000000", file,
                                 line_no);
        goto out;
    }
    if (f)
        it->n = (int32_t)iv;
    if ((f = json_get(v, "seed"))) {
        if (!json_as_int(f, &iv) || iv < 0) {
            status = cli_usage_error("generate", "%s:%d: \"seed\" must be a non-negative integer",
                                     file, line_no);
            goto out;
        }
        it->sp.seed = (uint64_t)iv;
    }
    for (size_t i = 0; i < sizeof gen_fields / sizeof *gen_fields; i++) {
        if (!(f = json_get(v, gen_fields[i].key)))
            continue;
        bool ok = gen_fields[i].kind == 'd' ? json_as_double(f, &dv)
                                            : (json_as_int(f, &iv) && iv >= 0 && iv <= INT32_MAX);
        if (!ok) {
            status = cli_usage_error("generate", "%s:%d: \"%s\" must be a number", file, line_no,
                                     gen_fields[i].key);
            goto out;
        }
        if (gen_fields[i].kind == 'd')
            *(double *)((char *)&it->sp + gen_fields[i].off) = dv;
        else
            *(int32_t *)((char *)&it->sp + gen_fields[i].off) = (int32_t)iv;
    }
    if ((rc = sample_params_validate(&it->sp))) {
        status = cli_usage_error("generate", "%s:%d: %s", file, line_no, err_detail());
        goto out;
    }
    status = gen_tokenize("generate", tok, p, pl, it);
out:
    arena_destroy(a);
    return status;
}

static int gen_read_prompts(const char *file, const tokenizer *tok, gen_item **items_out,
                            int32_t *n_out) {
    FILE *f = fopen(file, "rb");
    if (!f)
        return cli_usage_error("generate", "%s: cannot open", file);
    gen_item *items = NULL;
    int32_t n = 0;
    size_t cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int line_no = 0, status = 0;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t'))
            k++;
        if (k == (size_t)len)
            continue; /* blank line */
        if (mem_grow((void **)&items, &cap, (size_t)n + 1, sizeof *items)) {
            status = cli_fail("generate", err_set(ERR_NOMEM, "out of memory"));
            break;
        }
        memset(&items[n], 0, sizeof items[n]);
        if ((status = gen_parse_line(file, line_no, line, (size_t)len, tok, &items[n++])))
            break;
    }
    free(line);
    fclose(f);
    if (!status && n == 0)
        status = cli_usage_error("generate", "%s: no prompts", file);
    *items_out = items;
    *n_out = n;
    return status;
}

static void gen_print_item(gen_ctx *g, int32_t i) {
    gen_item *it = &g->items[i];
    strbuf_reset(&g->sb);
    strbuf_printf(&g->sb, "{\"index\":%d,\"tokens\":[", i);
    for (int32_t k = 0; k < it->n_out; k++)
        strbuf_printf(&g->sb, k ? ",%d" : "%d", it->out[k]);
    strbuf_puts(&g->sb, "],\"text\":");
    strbuf text;
    strbuf_init(&text);
    tokenizer_decode(g->tok, it->out, (size_t)it->n_out, false, &text);
    strbuf_json_str(&g->sb, text.data, text.len, false);
    strbuf_deinit(&text);
    if (g->digest)
        strbuf_printf(&g->sb, ",\"logits_digest\":\"%016llx\"", (unsigned long long)it->digest);
    strbuf_puts(&g->sb, "}\n");
    fwrite(g->sb.data, 1, g->sb.len, stdout);
}

/* What the command line asked for: the model, the prompt(s) and the sampling defaults. */
typedef struct gen_opts {
    const char *model_path, *prompt, *prompts_file, *system_msg;
    bool chat, ignore_eos, digest;
    int64_t n;
    sample_params sp;
} gen_opts;

/* Parses argv[*i] if it is one of the sampling options (--temp ... --seed), with its value, into
 * sp. Sets *matched to whether it was one; returns 0, or 2 after a usage error. */
static int gen_parse_sample_opt(int argc, char **argv, int *i, sample_params *sp, bool *matched) {
    const char *a = argv[*i], *v;
    double d;
    int64_t iv;
    *matched = true;
#define NEXT()                                                                                     \
    do {                                                                                           \
        if (!(v = cli_next("generate", argc, argv, i)))                                            \
            return 2;                                                                              \
    } while (0)
    if (!strcmp(a, "--temp")) {
        NEXT();
        if (cli_parse_f64("generate", a, v, 0, 100, &sp->temperature))
            return 2;
    } else if (!strcmp(a, "--top-k")) {
        NEXT();
        if (cli_parse_i64("generate", a, v, 0, INT32_MAX, &iv))
            return 2;
        sp->top_k = (int32_t)iv;
    } else if (!strcmp(a, "--top-p")) {
        NEXT();
        if (cli_parse_f64("generate", a, v, 0, 1, &sp->top_p))
            return 2;
    } else if (!strcmp(a, "--min-p")) {
        NEXT();
        if (cli_parse_f64("generate", a, v, 0, 1, &sp->min_p))
            return 2;
    } else if (!strcmp(a, "--repeat-penalty")) {
        NEXT();
        if (cli_parse_f64("generate", a, v, 0, 100, &d))
            return 2;
        sp->repetition_penalty = d;
    } else if (!strcmp(a, "--frequency-penalty")) {
        NEXT();
        if (cli_parse_f64("generate", a, v, -2, 2, &sp->frequency_penalty))
            return 2;
    } else if (!strcmp(a, "--presence-penalty")) {
        NEXT();
        if (cli_parse_f64("generate", a, v, -2, 2, &sp->presence_penalty))
            return 2;
    } else if (!strcmp(a, "--seed")) {
        NEXT();
        if (cli_parse_i64("generate", a, v, 0, INT64_MAX, &iv))
            return 2;
        sp->seed = (uint64_t)iv;
    } else {
        *matched = false;
    }
#undef NEXT
    return 0;
}

/* Parses the whole command line into o and checks the combination; returns 0, or 2 after a usage
 * error. */
static int gen_parse_args(int argc, char **argv, gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->n = 64;
    gen_default_params(&o->sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        bool matched;
#define NEXT()                                                                                     \
    do {                                                                                           \
        if (!(v = cli_next("generate", argc, argv, &i)))                                           \
            return 2;                                                                              \
    } while (0)
        if (gen_parse_sample_opt(argc, argv, &i, &o->sp, &matched))
            return 2;
        if (matched)
            continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEXT();
            o->model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            NEXT();
            o->prompt = v;
        } else if (!strcmp(a, "--prompts")) {
            NEXT();
            o->prompts_file = v;
        } else if (!strcmp(a, "-n")) {
            NEXT();
            if (cli_parse_i64("generate", a, v, 0, 1000000, &o->n))
                return 2;
        } else if (!strcmp(a, "-t")) {
            NEXT();
            if (flags_set("threads", v))
                return cli_usage_error("generate", "%s", err_detail());
        } else if (!strcmp(a, "--chat")) {
            o->chat = true;
        } else if (!strcmp(a, "--system")) {
            NEXT();
            o->system_msg = v;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if (!strcmp(a, "--logits-digest")) {
            o->digest = true;
        } else {
            return cli_usage_error("generate", "unknown option '%s' (see verity generate --help)",
                                   a);
        }
#undef NEXT
    }
    if (!o->prompt == !o->prompts_file)
        return cli_usage_error("generate", "give exactly one of -p TEXT or --prompts FILE.jsonl");
    if ((o->chat || o->system_msg) && !o->prompt)
        return cli_usage_error("generate", "--chat and --system go with -p TEXT");
    if (sample_params_validate(&o->sp))
        return cli_usage_error("generate", "%s", err_detail());
    return 0;
}

/* Builds g->items (and *n_items) from -p TEXT (through the chat template with --chat/--system) or
 * from the --prompts file. On failure the items built so far stay in g for gen_free_items. */
static int gen_load_items(const cli_model *cm, const gen_opts *o, gen_ctx *g, int32_t *n_items) {
    int status;
    if (!o->prompt)
        return gen_read_prompts(o->prompts_file, cm->tok, &g->items, n_items);
    g->items = calloc(1, sizeof *g->items);
    *n_items = 1;
    if (!g->items)
        return cli_fail("generate", err_set(ERR_NOMEM, "out of memory"));
    g->items[0].sp = o->sp;
    g->items[0].n = (int32_t)o->n;
    if (o->chat || o->system_msg) {
        if ((status = gen_chat_prompt(cm, o->system_msg, o->prompt, &g->items[0])))
            return status;
    } else if ((status = gen_tokenize("generate", cm->tok, o->prompt, strlen(o->prompt),
                                      &g->items[0]))) {
        return status;
    }
    tokenizer_stream_init(&g->items[0].ts, cm->tok, true);
    return 0;
}

/* Creates the engine, its KV pool sized (unless --kv-mem/--kv-blocks say otherwise) for what these
 * prompts need at most, max_batch at a time. */
static int gen_engine_start(const cli_model *cm, const gen_ctx *g, int32_t n_items, engine **e) {
    engine_opts eo;
    engine_opts_from_flags(&eo, cm->m);
    int64_t per = 0;
    for (int32_t i = 0; i < n_items; i++) {
        int64_t need = (int64_t)g->items[i].n_prompt + g->items[i].n;
        if (need > eo.n_ctx)
            need = eo.n_ctx;
        if (need > per)
            per = need;
    }
    if (flags_int(FLAG_KV_MEM) == 0 && flags_int(FLAG_KV_BLOCKS) == 0)
        eo.kv_blocks = ((per + eo.block_size - 1) / eo.block_size) *
                       (n_items < eo.max_batch ? n_items : eo.max_batch);
    int rc = engine_create(cm->m, cm->tok, &eo, e);
    if (rc)
        return cli_fail("generate", rc);
    return 0;
}

/* Allocates each item's output buffer and submits it to the engine, in input order. */
static int gen_submit_items(engine *e, gen_ctx *g, int32_t n_items, bool ignore_eos) {
    for (int32_t i = 0; i < n_items; i++) {
        gen_item *it = &g->items[i];
        it->out = malloc(((size_t)it->n + 1) * sizeof(int32_t));
        it->digest = 1469598103934665603ull;
        engine_req r = {.id = (uint64_t)i,
                        .prompt = it->prompt,
                        .n_prompt = it->n_prompt,
                        .sp = it->sp,
                        .max_tokens = it->n,
                        .ignore_eog = ignore_eos,
                        .cb = gen_on_event,
                        .ud = g};
        if (!it->out)
            return cli_fail("generate", err_set(ERR_NOMEM, "out of memory"));
        if (engine_submit(e, &r))
            return cli_usage_error("generate", "prompt %d: %s", i, err_detail());
    }
    return 0;
}

/* Tokens a decoding sequence kept per step, on average (1 without speculation). */
static double gen_tokens_per_step(const engine_stats *st) {
    int64_t steps = 0, toks = 0;
    for (int t = 0; t <= SPEC_MAX_K + 1; t++) {
        steps += st->step_tokens_hist[t];
        toks += (int64_t)t * st->step_tokens_hist[t];
    }
    return steps ? (double)toks / (double)steps : 0.0;
}

/* Steps the engine until every item is done, printing batch results in input order as they
 * complete, then the timing line on stderr. */
static int gen_run(engine *e, gen_ctx *g, int32_t n_items) {
    int rc;
    int64_t t0 = clock_now_ns(), n_gen = 0, n_prompt_tok = 0;
    int32_t next_print = 0;
    while (engine_busy(e)) {
        if ((rc = engine_step(e)))
            return cli_fail("generate", rc);
        while (!g->stream && next_print < n_items && g->items[next_print].done)
            gen_print_item(g, next_print++);
    }
    fflush(stdout);
    double dt = (double)(clock_now_ns() - t0) * 1e-9;
    for (int32_t i = 0; i < n_items; i++) {
        n_gen += g->items[i].n_out;
        n_prompt_tok += g->items[i].n_prompt;
    }
    if (g->stream)
        fputc('\n', stderr);
    engine_stats st;
    engine_stats_get(e, &st);
    char spec_note[160] = "";
    if (st.spec_drafted > 0 || strcmp(flags_str(FLAG_SPEC), "off") != 0)
        snprintf(spec_note, sizeof spec_note,
                 ", spec %s: %lld drafted, %lld accepted (%.1f%%), %.2f tokens per decoding step",
                 flags_str(FLAG_SPEC), (long long)st.spec_drafted, (long long)st.spec_accepted,
                 st.spec_drafted ? 100.0 * (double)st.spec_accepted / (double)st.spec_drafted : 0.0,
                 gen_tokens_per_step(&st));
    fprintf(stderr,
            "verity: %d prompt(s), %lld prompt tokens, %lld generated in %.3f s (%.1f tok/s), "
            "%lld preemptions, %lld positions from the prefix cache%s\n",
            n_items, (long long)n_prompt_tok, (long long)n_gen, dt,
            dt > 0 ? (double)n_gen / dt : 0.0, (long long)st.preemptions,
            (long long)st.cached_positions, spec_note);
    return 0;
}

/* Frees the items' prompts and outputs, the items array and the output buffer. */
static void gen_free_items(gen_ctx *g, int32_t n_items) {
    for (int32_t i = 0; g->items && i < n_items; i++) {
        free(g->items[i].prompt);
        free(g->items[i].out);
    }
    free(g->items);
    strbuf_deinit(&g->sb);
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    int status = gen_parse_args(argc, argv, &o);
    if (status)
        return status;
    cli_model cm;
    if ((status = cli_model_open("generate", o.model_path, &cm)))
        return status;
    gen_ctx g = {.tok = cm.tok,
                 .n_vocab = model_get_hparams(cm.m)->n_vocab,
                 .digest = o.digest,
                 .stream = o.prompt != NULL};
    strbuf_init(&g.sb);
    int32_t n_items = 0;
    engine *e = NULL;
    if (!(status = gen_load_items(&cm, &o, &g, &n_items)) &&
        !(status = gen_engine_start(&cm, &g, n_items, &e)) &&
        !(status = gen_submit_items(e, &g, n_items, o.ignore_eos)))
        status = gen_run(e, &g, n_items);
    engine_destroy(e);
    gen_free_items(&g, n_items);
    cli_model_close(&cm);
    return status;
}
