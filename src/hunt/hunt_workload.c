/* SPDX-License-Identifier: MIT */
/*
 * hunt_workload: session scripts and request bodies. See hunt_workload.h.
 *
 * Each message is serialised to JSON once, when appended, into the history's `msgs` buffer;
 * ends[i] is where message i's text ends. The body of a request over the first n messages is
 * head + msgs[0..ends[n-1]) + tail, where head and tail hold the model, tools and sampling
 * parameters. All text generation draws from a hunt_rng seeded from (workload seed, session
 * index), in a fixed order, so a session's scripted parts never depend on the replies' timing.
 */
#include "hunt/hunt_workload.h"
#include "base/err.h"
#include "hunt/hunt_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hunt_workload {
    hunt_workload_cfg cfg;
    char *model;
};

typedef struct hunt_msg {
    int role;
    const char *content;
    size_t len;
} hunt_msg;

struct hunt_history {
    arena *a;
    uint64_t seed;    /* session seed */
    int skip_special; /* skip_special_tokens sent with every turn: 0, 1, or -1 (not sent) */
    hunt_rng script;  /* draws user tasks */
    hunt_msg *msgs;
    size_t *ends; /* [n] end offset of message i in json */
    int n;
    size_t cap_msgs, cap_ends;
    strbuf json; /* messages serialised, comma-separated */
};

int hunt_workload_create(const hunt_workload_cfg *cfg, hunt_workload **out) {
    if (cfg->turns < 1 || cfg->turns > HUNT_MAX_TURNS)
        return err_set(ERR_RANGE, "turns %d out of range 1..%d", cfg->turns, HUNT_MAX_TURNS);
    if (cfg->max_tokens < 1 || cfg->max_tokens > 1000000)
        return err_set(ERR_RANGE, "max tokens %d out of range 1..1000000", cfg->max_tokens);
    if (cfg->top_logprobs < 0 || cfg->top_logprobs > 20)
        return err_set(ERR_RANGE, "top logprobs %d out of range 0..20", cfg->top_logprobs);
    if (cfg->n_pads < 1 || cfg->n_pads > HUNT_MAX_PADS)
        return err_set(ERR_RANGE, "%d context pad levels, expected 1..%d", cfg->n_pads,
                       HUNT_MAX_PADS);
    for (int i = 0; i < cfg->n_pads; i++)
        if (cfg->pads[i] < 0 || cfg->pads[i] > 4000000)
            return err_set(ERR_RANGE, "context pad %d tokens out of range 0..4000000",
                           cfg->pads[i]);
    hunt_workload *w = calloc(1, sizeof *w);
    const char *m = cfg->model ? cfg->model : "default";
    if (!w || !(w->model = strdup(m))) {
        free(w);
        return err_set(ERR_NOMEM, "out of memory creating the workload");
    }
    w->cfg = *cfg;
    w->cfg.model = w->model;
    *out = w;
    return 0;
}

void hunt_workload_destroy(hunt_workload *w) {
    if (!w)
        return;
    free(w->model);
    free(w);
}

const hunt_workload_cfg *hunt_workload_config(const hunt_workload *w) {
    return &w->cfg;
}

int hunt_workload_pad(const hunt_workload *w, int64_t index, int *pad_slot) {
    int slot = (int)(index % w->cfg.n_pads);
    if (pad_slot)
        *pad_slot = slot;
    return w->cfg.pads[slot];
}

int hunt_workload_skip_special(const hunt_workload *w, int64_t index) {
    if (!w->cfg.skip_special)
        return -1;
    return index % 2 == 0;
}

uint64_t hunt_workload_session_seed(const hunt_workload *w, int64_t index) {
    return hunt_mix(w->cfg.seed, (uint64_t)index);
}

void hunt_call_id(uint64_t session_seed, int turn, int call, char out[10]) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t h = hunt_mix(session_seed, ((uint64_t)turn << 16) | (uint64_t)call);
    for (int i = 0; i < 9; i++) {
        out[i] = al[h % 62];
        h /= 62;
        if (i == 4)
            h = hunt_mix(h, session_seed);
    }
    out[9] = 0;
}

/* ---- script ---- */

static void hunt_task(hunt_rng *r, strbuf *out) {
    strbuf a, b;
    strbuf_init(&a);
    strbuf_init(&b);
    static const char *const dirs[] = {"src", "src/net", "src/core", "lib", "tests", "docs"};
    hunt_text_ident(r, &a);
    hunt_text_ident(r, &b);
    const char *dir = dirs[hunt_rng_below(r, 6)];
    const char *w1 = hunt_word(39 + (int)hunt_rng_below(r, 120));
    const char *w2 = hunt_word(39 + (int)hunt_rng_below(r, 120));
    switch (hunt_rng_below(r, 12)) {
    case 0:
        strbuf_printf(out, "Read %s/%s.c and explain what %s does.", dir, a.data, b.data);
        break;
    case 1:
        strbuf_printf(out, "Find every place where %s is called and list the files.", a.data);
        break;
    case 2:
        strbuf_printf(out, "Run the tests for the %s module and summarize the failures.", w1);
        break;
    case 3:
        strbuf_printf(out, "Rename %s to %s in %s/%s.c and show me the diff.", a.data, b.data, dir,
                      w1);
        break;
    case 4:
        strbuf_printf(out, "Show me the five most recent commits that touched %s/%s.c.", dir,
                      a.data);
        break;
    case 5:
        strbuf_printf(out,
                      "Check the docs for how the %s %s works and summarize it in two "
                      "sentences.",
                      w1, w2);
        break;
    case 6:
        strbuf_printf(out, "List the files under %s and tell me which one handles the %s.", dir,
                      w1);
        break;
    case 7:
        strbuf_printf(out, "Fetch https://example.com/%s/%s and tell me the status code.", w1, w2);
        break;
    case 8:
        strbuf_printf(out, "Write a short test for %s in tests/test_%s.c.", a.data, w1);
        break;
    case 9:
        strbuf_printf(out, "Grep for TODO in %s and pick the most important one.", dir);
        break;
    case 10:
        strbuf_printf(out, "What does the current diff in %s/%s.c change?", dir, a.data);
        break;
    default:
        strbuf_printf(out, "Explain the %s %s design in a short paragraph, without using tools.",
                      w1, w2);
    }
    strbuf_deinit(&a);
    strbuf_deinit(&b);
}

/* ---- history ---- */

static int hunt_history_push(hunt_history *h, int role, const char *content, size_t len,
                             const char *json, size_t json_len) {
    if (arena_grow(h->a, (void **)&h->msgs, &h->cap_msgs, (size_t)h->n + 1, sizeof *h->msgs) ||
        arena_grow(h->a, (void **)&h->ends, &h->cap_ends, (size_t)h->n + 1, sizeof *h->ends))
        return err_set(ERR_NOMEM, "out of memory growing a session history");
    char *c = arena_strndup(h->a, content, len);
    if (!c)
        return err_set(ERR_NOMEM, "out of memory growing a session history");
    if (h->n)
        strbuf_putc(&h->json, ',');
    strbuf_append(&h->json, json, json_len);
    if (strbuf_failed(&h->json))
        return err_set(ERR_NOMEM, "out of memory growing a session history");
    h->msgs[h->n] = (hunt_msg){role, c, len};
    h->ends[h->n] = h->json.len;
    h->n++;
    return 0;
}

static int hunt_history_push_text(hunt_history *h, int role, const char *text, size_t len) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    strbuf j;
    strbuf_init(&j);
    strbuf_printf(&j, "{\"role\":\"%s\",\"content\":", roles[role]);
    strbuf_json_str(&j, text, len, false);
    strbuf_putc(&j, '}');
    int rc = strbuf_failed(&j) ? err_set(ERR_NOMEM, "out of memory building a message")
                               : hunt_history_push(h, role, text, len, j.data, j.len);
    strbuf_deinit(&j);
    return rc;
}

/* Appends padding documents to out until it holds about target_bytes bytes more. */
static void hunt_pad_docs(hunt_rng *r, size_t target_bytes, strbuf *out) {
    size_t target = out->len + target_bytes;
    strbuf_puts(out, "Here are documents from the repository for context.\n\n");
    while (out->len < target) {
        strbuf_puts(out, "<document path=\"docs/");
        hunt_text_ident(r, out);
        strbuf_puts(out, ".md\">\n");
        /* ~6 bytes per word; documents of up to ~400 words */
        size_t left = target > out->len ? target - out->len : 0;
        int words = (int)(left / 6) + 1;
        hunt_text_prose(r, words < 400 ? words : 400, out);
        strbuf_puts(out, "\n</document>\n\n");
    }
}

void hunt_workload_pad_text(uint64_t seed, size_t target_bytes, strbuf *out) {
    hunt_rng r;
    hunt_rng_seed(&r, hunt_mix(seed, 0x5157));
    hunt_pad_docs(&r, target_bytes, out);
}

int hunt_history_create(const hunt_workload *w, int64_t index, hunt_history **out) {
    hunt_history *h = calloc(1, sizeof *h);
    if (!h || !(h->a = arena_create(16 * 1024, 0))) {
        free(h);
        return err_set(ERR_NOMEM, "out of memory creating a session");
    }
    strbuf_init(&h->json);
    h->seed = hunt_workload_session_seed(w, index);
    h->skip_special = hunt_workload_skip_special(w, index);
    hunt_rng_seed(&h->script, h->seed);
    hunt_rng r;
    hunt_rng_seed(&r, hunt_mix(h->seed, 0x5157));
    strbuf sb;
    strbuf_init(&sb);
    strbuf repo;
    strbuf_init(&repo);
    hunt_text_ident(&r, &repo);
    strbuf_printf(&sb,
                  "You are a careful coding agent working in the repository '%s'. Use the tools "
                  "to inspect and change files before you answer; never invent file contents. "
                  "Call tools with arguments that match their schemas exactly. When the task is "
                  "done, answer in plain prose of at most three sentences.",
                  repo.data);
    strbuf_deinit(&repo);
    int rc = hunt_history_push_text(h, HUNT_ROLE_SYSTEM, sb.data, sb.len);
    strbuf_reset(&sb);
    int pad = hunt_workload_pad(w, index, NULL);
    if (!rc && pad > 0) {
        double bpt = w->cfg.pad_bytes_per_token > 0 ? w->cfg.pad_bytes_per_token : 4;
        hunt_pad_docs(&r, (size_t)((double)pad * bpt + 0.5), &sb);
    }
    hunt_task(&h->script, &sb);
    if (!rc)
        rc = strbuf_failed(&sb) ? err_set(ERR_NOMEM, "out of memory building a session")
                                : hunt_history_push_text(h, HUNT_ROLE_USER, sb.data, sb.len);
    strbuf_deinit(&sb);
    if (rc) {
        hunt_history_destroy(h);
        return rc;
    }
    *out = h;
    return 0;
}

void hunt_history_destroy(hunt_history *h) {
    if (!h)
        return;
    strbuf_deinit(&h->json);
    arena_destroy(h->a);
    free(h);
}

int hunt_history_len(const hunt_history *h) {
    return h->n;
}

int hunt_history_role(const hunt_history *h, int i) {
    return h->msgs[i].role;
}

const char *hunt_history_content(const hunt_history *h, int i, size_t *len) {
    *len = h->msgs[i].len;
    return h->msgs[i].content;
}

void hunt_history_body(const hunt_workload *w, const hunt_history *h, int n_msgs, int stream,
                       strbuf *out) {
    const hunt_workload_cfg *c = &w->cfg;
    bool st = stream >= 0 ? stream != 0 : c->stream;
    strbuf_reset(out);
    strbuf_puts(out, "{\"model\":");
    strbuf_json_str(out, w->model, strlen(w->model), false);
    strbuf_puts(out, ",\"messages\":[");
    if (n_msgs > 0)
        strbuf_append(out, h->json.data, h->ends[n_msgs - 1]);
    strbuf_putc(out, ']');
    if (c->tools && hunt_tools_count(c->tools) > 0) {
        size_t tl;
        const char *tj = hunt_tools_json(c->tools, &tl);
        strbuf_puts(out, ",\"tools\":");
        strbuf_append(out, tj, tl);
        strbuf_puts(out, ",\"tool_choice\":\"auto\"");
    }
    strbuf_puts(out, ",\"temperature\":");
    strbuf_json_num(out, c->temperature);
    strbuf_printf(out, ",\"max_tokens\":%d,\"seed\":%llu", c->max_tokens,
                  (unsigned long long)(h->seed & 0x7fffffff));
    if (c->logprobs)
        strbuf_printf(out, ",\"logprobs\":true,\"top_logprobs\":%d", c->top_logprobs);
    if (h->skip_special >= 0)
        strbuf_printf(out, ",\"skip_special_tokens\":%s", h->skip_special ? "true" : "false");
    if (st)
        strbuf_puts(out, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    else
        strbuf_puts(out, ",\"stream\":false");
    strbuf_putc(out, '}');
}

int hunt_history_add_reply(const hunt_workload *w, hunt_history *h, int turn, const hunt_reply *r) {
    strbuf j;
    strbuf_init(&j);
    strbuf_puts(&j, "{\"role\":\"assistant\",\"content\":");
    if (r->n_calls && r->content_len == 0)
        strbuf_puts(&j, "null");
    else
        strbuf_json_str(&j, r->content, r->content_len, false);
    char ids[64][10];
    int n_calls = r->n_calls < 64 ? r->n_calls : 64;
    if (n_calls) {
        strbuf_puts(&j, ",\"tool_calls\":[");
        for (int i = 0; i < n_calls; i++) {
            const hunt_call *c = &r->calls[i];
            hunt_call_id(h->seed, turn, i, ids[i]);
            strbuf_printf(&j, "%s{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":",
                          i ? "," : "", ids[i]);
            strbuf_json_str(&j, c->name, strlen(c->name), false);
            strbuf_puts(&j, ",\"arguments\":");
            strbuf_json_str(&j, c->args, c->args_len, false);
            strbuf_puts(&j, "}}");
        }
        strbuf_putc(&j, ']');
    }
    strbuf_putc(&j, '}');
    int rc = strbuf_failed(&j) ? err_set(ERR_NOMEM, "out of memory building a message")
                               : hunt_history_push(h, HUNT_ROLE_ASSISTANT, r->content,
                                                   r->content_len, j.data, j.len);
    strbuf_deinit(&j);
    if (rc)
        return rc;
    strbuf res;
    strbuf_init(&res);
    for (int i = 0; i < n_calls && !rc; i++) {
        const hunt_call *c = &r->calls[i];
        strbuf_reset(&res);
        hunt_tools_execute(w->cfg.tools, c->name, c->args, c->args_len, &res);
        strbuf_init(&j);
        strbuf_printf(&j, "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"name\":", ids[i]);
        strbuf_json_str(&j, c->name, strlen(c->name), false);
        strbuf_puts(&j, ",\"content\":");
        strbuf_json_str(&j, res.data, res.len, false);
        strbuf_putc(&j, '}');
        rc = strbuf_failed(&j) || strbuf_failed(&res)
                 ? err_set(ERR_NOMEM, "out of memory building a message")
                 : hunt_history_push(h, HUNT_ROLE_TOOL, res.data, res.len, j.data, j.len);
        strbuf_deinit(&j);
    }
    if (!rc && n_calls == 0) {
        strbuf_reset(&res);
        strbuf_puts(&res, "Thanks. Next: ");
        hunt_task(&h->script, &res);
        rc = strbuf_failed(&res) ? err_set(ERR_NOMEM, "out of memory building a message")
                                 : hunt_history_push_text(h, HUNT_ROLE_USER, res.data, res.len);
    }
    strbuf_deinit(&res);
    return rc;
}
