/* SPDX-License-Identifier: MIT */
/*
 * mock_openai: a test-only OpenAI-compatible server for the hunt and bisect tests. Not part of
 * verity; it exists so the harness can be tested against a target whose faults are known.
 *
 *   mock_openai [--host 127.0.0.1] [--port P | --port 0 --port-file FILE] [--step-ms MS]
 *               [--max-running N] [--fault KIND[,KIND...]] [--fault-min-batch K]
 *               [--fault-rate P] [--fault-min-prompt N] [--fault-when EXPR] [--seed S]
 *               [--error-rate P] [--metrics-style verity|vllm|sglang|llamacpp] [--metrics-peak]
 *               [--no-logprobs] [--reject-logprobs]
 *               [--reject-skip-special] [--random-ids] [--max-lifetime S] [--NAME VALUE ...]
 *   (tests pass "--tag UNIQUE" as a harmless toggle to find their own servers in /proc)
 *   mock_openai --free-port      prints a free loopback port and exits
 *
 * Every option also reads an environment variable: MOCK_FAULT, MOCK_FAULT_MIN_BATCH,
 * MOCK_FAULT_RATE, MOCK_FAULT_WHEN, MOCK_STEP_MS, MOCK_SEED, MOCK_ERROR_RATE (the command line
 * wins). Any other `--NAME VALUE` pair is a toggle, like a real server's configuration switches;
 * toggles do nothing unless --fault-when names them: "a" (fault only while toggle a is 1), "a+b"
 * (both), "a|b" (either).
 *
 * Engine model. Requests are admitted into a simulated continuous-batching engine (one thread,
 * epoll): every step (at least --step-ms apart) each running request produces one token, so the
 * batch size of a step is the number of running requests. Clean mode is deterministic: a reply is
 * a function of the request alone (an FNV-1a hash of its messages, tools and parameters seeds an
 * autoregressive generator: token i depends on the tokens before it), whatever else runs, which
 * is what a batch-invariant server does. Replies are text over a fixed word list with logprobs
 * (five candidates, about one position in six a near tie where the runner-up is 0.01 nats behind)
 * or tool calls whose arguments are generated from the offered tool's schema.
 *
 * Faults (each fires only in a step whose batch is larger than --fault-min-batch, for a request
 * whose prompt has at least --fault-min-prompt tokens (estimated as bytes / 4; 0 = any), drawn
 * with probability --fault-rate, at the token the request is at; --fault-min-batch 0
 * --fault-min-prompt N makes a context-length bug that needs no concurrency):
 *   salad       the rest of the content becomes random character soup
 *   repeat      the rest loops over the last three tokens until max_tokens
 *   markup      tool-call markup appears in content (a tool call is written as text)
 *   special     a special token's text (<|im_end|>) is appended to content, tokens unchanged
 *   badjson     a tool call's arguments lose their closing brace
 *   schema      a tool call's arguments get a wrong type
 *   unknowntool a tool call names a tool that was not offered
 *   finish      a text reply ends with finish_reason "tool_calls"
 *   tags        the content ends in a run of closing tags
 *   identity    a streamed tool call's name changes mid-stream
 *   flip        a token far from a tie is replaced (sound text, but not benign)
 *   neartie     at the next near-tie position the runner-up is taken: benign nondeterminism
 *   garble      the response is cut: a stream chunk or the JSON body is not valid JSON
 *
 * Fault and error draws come from one generator seeded by --seed alone (default 1), never by the
 * process id or the time: the same requests in the same steps get the same faults in every run.
 *
 * Routes: POST /v1/chat/completions (streaming or not), GET /v1/models, GET /health, GET /metrics
 * (running requests, batch size, faults injected; names per --metrics-style). With
 * --metrics-peak the running and batch gauges report the largest value so far instead of the
 * current one, so a test can check a scraper's last sample against the peak however few
 * scrapes landed while the load was on.
 */
#include "base/arena.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "hunt/hunt_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    F_SALAD = 1 << 0,
    F_REPEAT = 1 << 1,
    F_MARKUP = 1 << 2,
    F_SPECIAL = 1 << 3,
    F_BADJSON = 1 << 4,
    F_SCHEMA = 1 << 5,
    F_UNKNOWNTOOL = 1 << 6,
    F_FINISH = 1 << 7,
    F_TAGS = 1 << 8,
    F_IDENTITY = 1 << 9,
    F_FLIP = 1 << 10,
    F_NEARTIE = 1 << 11,
    F_GARBLE = 1 << 12,
};

static const struct {
    const char *name;
    unsigned bit;
} fault_names[] = {
    {"salad", F_SALAD},
    {"repeat", F_REPEAT},
    {"markup", F_MARKUP},
    {"special", F_SPECIAL},
    {"badjson", F_BADJSON},
    {"schema", F_SCHEMA},
    {"unknowntool", F_UNKNOWNTOOL},
    {"finish", F_FINISH},
    {"tags", F_TAGS},
    {"identity", F_IDENTITY},
    {"flip", F_FLIP},
    {"neartie", F_NEARTIE},
    {"garble", F_GARBLE},
};

/* ---- configuration ---- */

#define MAX_TOGGLES 64

static struct {
    const char *host;
    int port;
    const char *port_file;
    int step_ms;
    int max_running;
    unsigned faults;
    int fault_min_batch;
    int fault_min_prompt;
    double fault_rate;
    const char *fault_when;
    uint64_t seed;
    double error_rate;
    const char *metrics_style;
    bool metrics_peak; /* running/batch gauges report the peak so far */
    bool no_logprobs;
    bool reject_logprobs;
    bool reject_skip_special; /* 400 for skip_special_tokens, as OpenAI's API does */
    bool random_ids;
    int max_lifetime_s;
    const char *toggle_name[MAX_TOGGLES];
    const char *toggle_val[MAX_TOGGLES];
    int n_toggles;
} cfg = {.host = "127.0.0.1",
         .step_ms = 2,
         .max_running = 4096,
         .fault_min_batch = 8,
         .fault_rate = 0.3,
         .seed = 1,
         .metrics_style = "verity",
         .max_lifetime_s = 900};

static bool fault_enabled; /* faults configured and --fault-when holds */

static const char *toggle_get(const char *name) {
    for (int i = 0; i < cfg.n_toggles; i++)
        if (!strcmp(cfg.toggle_name[i], name))
            return cfg.toggle_val[i];
    return NULL;
}

static bool toggle_on(const char *name, size_t n) {
    char buf[128];
    snprintf(buf, sizeof buf, "%.*s", (int)n, name);
    const char *v = toggle_get(buf);
    return v && strcmp(v, "0") && strcmp(v, "off") && strcmp(v, "false");
}

/* "a", "a+b" (all), "a|b" (any) */
static bool when_holds(const char *e) {
    if (!e || !*e)
        return true;
    bool any = strchr(e, '|') != NULL;
    char sep = any ? '|' : '+';
    const char *p = e;
    bool acc = !any;
    for (;;) {
        const char *q = strchr(p, sep);
        size_t n = q ? (size_t)(q - p) : strlen(p);
        bool on = toggle_on(p, n);
        acc = any ? (acc || on) : (acc && on);
        if (!q)
            break;
        p = q + 1;
    }
    return acc;
}

static unsigned parse_faults(const char *s) {
    unsigned m = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        bool ok = false;
        for (size_t i = 0; i < sizeof fault_names / sizeof *fault_names; i++)
            if (!strcmp(tok, fault_names[i].name)) {
                m |= fault_names[i].bit;
                ok = true;
            }
        if (!ok && strcmp(tok, "none")) {
            fprintf(stderr, "mock_openai: unknown fault '%s'\n", tok);
            exit(2);
        }
    }
    return m;
}

/* ---- statistics for /metrics ---- */

static struct {
    int64_t requests_total;
    int64_t faults_total;
    int64_t errors_total;
    int last_batch;
    int max_batch;
    int max_running_seen;
    int64_t steps;
} stats;

/* ---- tokens and plans ---- */

typedef enum { TK_CONTENT, TK_MARK, TK_CALL_NAME, TK_CALL_ARGS } tk_kind;

typedef struct mtok {
    tk_kind kind;
    int call;   /* tool call index for TK_CALL_* */
    char *text; /* token text (content text, a markup piece, the name, an args fragment) */
    double lp;
    char *top[5]; /* candidate texts (top[0] is the greedy choice) */
    double top_lp[5];
    int n_top;
} mtok;

typedef struct mcall {
    char id[32];
    char name[64];
} mcall;

typedef struct plan {
    mtok *toks;
    int n, cap;
    mcall calls[4];
    int n_calls;
    const char *finish;
    char *extra_content; /* appended to content at the end without a token (special fault) */
    int prompt_tokens;
} plan;

static char *xstrdup(const char *s) {
    char *p = strdup(s);
    if (!p) {
        fprintf(stderr, "mock_openai: out of memory\n");
        exit(1);
    }
    return p;
}

static void tok_free(mtok *t) {
    free(t->text);
    for (int k = 0; k < t->n_top; k++)
        free(t->top[k]);
    memset(t, 0, sizeof *t);
}

static void plan_truncate(plan *p, int n) {
    for (int i = n; i < p->n; i++)
        tok_free(&p->toks[i]);
    if (n < p->n)
        p->n = n;
}

static void plan_free(plan *p) {
    plan_truncate(p, 0);
    free(p->toks);
    free(p->extra_content);
    memset(p, 0, sizeof *p);
}

static mtok *plan_push(plan *p, tk_kind kind, int call, const char *text, double lp) {
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->toks = realloc(p->toks, (size_t)p->cap * sizeof *p->toks);
        if (!p->toks) {
            fprintf(stderr, "mock_openai: out of memory\n");
            exit(1);
        }
    }
    mtok *t = &p->toks[p->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->call = call;
    t->text = xstrdup(text);
    t->lp = lp;
    t->top[0] = xstrdup(text);
    t->top_lp[0] = lp;
    t->n_top = 1;
    return t;
}

static void tok_add_top(mtok *t, const char *text, double lp) {
    if (t->n_top < 5) {
        t->top[t->n_top] = xstrdup(text);
        t->top_lp[t->n_top] = lp;
        t->n_top++;
    }
}

/* One content token of the autoregressive generator at state h: the greedy word, its runner-ups
 * and whether this position is a near tie. */
typedef struct gen_choice {
    char word[5][48];
    double lp[5];
    bool tie;
} gen_choice;

static void gen_candidates(uint64_t h, int index, gen_choice *g) {
    hunt_rng r;
    hunt_rng_seed(&r, h);
    int nw = hunt_words_count();
    for (int k = 0; k < 5; k++) {
        const char *w = hunt_word((int)hunt_rng_below(&r, (uint32_t)nw));
        bool period = hunt_rng_below(&r, 8) == 0;
        snprintf(g->word[k], sizeof g->word[k], "%s%s%s", index ? " " : "", w, period ? "." : "");
        for (int j = 0; j < k; j++)
            if (!strcmp(g->word[j], g->word[k])) { /* keep candidates distinct */
                snprintf(g->word[k], sizeof g->word[k], "%s%s_%d", index ? " " : "", w, k);
                break;
            }
    }
    g->tie = hunt_rng_below(&r, 6) == 0;
    /* logprobs in whole hundredths of a nat, so they print short */
    int c[5];
    c[0] = 5 + (int)hunt_rng_below(&r, 40);
    c[1] = g->tie ? c[0] + 1 : c[0] + 200 + (int)hunt_rng_below(&r, 100);
    for (int k = 2; k < 5; k++)
        c[k] = c[k - 1] + 100 + (int)hunt_rng_below(&r, 50);
    for (int k = 0; k < 5; k++)
        g->lp[k] = -(double)c[k] / 100.0;
}

static uint64_t gen_advance(uint64_t h, const char *text) {
    return hunt_hash(h * 31 + 7, text, strlen(text));
}

/* Appends n content tokens starting at position index from state h, choosing candidate `pick`
 * (0 = greedy) at the first token only. Returns the state after them. */
static uint64_t gen_content(plan *p, uint64_t h, int index, int n, int pick_first) {
    for (int i = 0; i < n; i++) {
        gen_choice g;
        gen_candidates(h, index + i, &g);
        int pick = i == 0 ? pick_first : 0;
        mtok *t = plan_push(p, TK_CONTENT, 0, g.word[pick], g.lp[pick]);
        /* the candidates as the server would list them, best first */
        free(t->top[0]);
        t->top[0] = xstrdup(g.word[0]);
        t->top_lp[0] = g.lp[0];
        for (int k = 1; k < 5; k++)
            tok_add_top(t, g.word[k], g.lp[k]);
        h = gen_advance(h, g.word[pick]);
    }
    return h;
}

/* The request's parts the plan depends on. */
typedef struct req_info {
    const json_value *messages;
    const json_value *tools; /* array or NULL */
    int max_tokens;
    bool stream;
    bool include_usage;
    bool logprobs;
    int top_logprobs;
    const char *model;
    uint64_t hash;
    const char *last_role;
    int n_tool_msgs;
} req_info;

/* A value for a schema property, by name and type. */
static void gen_arg_value(strbuf *out, const char *key, const json_value *ps, hunt_rng *r) {
    const json_value *en = json_get(ps, "enum");
    if (en && en->type == JSON_ARRAY && en->arr.n) {
        json_write(out, en->arr.items[hunt_rng_below(r, (uint32_t)en->arr.n)]);
        return;
    }
    const json_value *ty = json_get(ps, "type");
    const char *t = ty && ty->type == JSON_STRING ? ty->str.s : "string";
    if (!strcmp(t, "integer")) {
        double lo = 1, hi = 20, v;
        if (json_as_double(json_get(ps, "minimum"), &v))
            lo = v;
        if (json_as_double(json_get(ps, "maximum"), &v))
            hi = v;
        if (hi > lo + 50)
            hi = lo + 50;
        strbuf_printf(out, "%lld",
                      (long long)lo + (long long)hunt_rng_below(r, (uint32_t)(hi - lo + 1)));
    } else if (!strcmp(t, "number")) {
        strbuf_printf(out, "%u.5", 1 + hunt_rng_below(r, 30));
    } else if (!strcmp(t, "boolean")) {
        strbuf_puts(out, hunt_rng_below(r, 2) ? "true" : "false");
    } else if (!strcmp(t, "array")) {
        strbuf_puts(out, "[]");
    } else if (!strcmp(t, "object")) {
        strbuf_puts(out, "{}");
    } else {
        strbuf sb;
        strbuf_init(&sb);
        if (!strcmp(key, "path") || !strcmp(key, "target")) {
            strbuf_puts(&sb, "src/");
            hunt_text_ident(r, &sb);
            strbuf_puts(&sb, ".c");
        } else if (!strcmp(key, "url")) {
            strbuf_puts(&sb, "https://example.com/");
            hunt_text_ident(r, &sb);
        } else if (!strcmp(key, "command")) {
            strbuf_puts(&sb, "make test TARGET=");
            hunt_text_ident(r, &sb);
        } else if (!strcmp(key, "glob")) {
            strbuf_puts(&sb, "src/**/*.c");
        } else {
            hunt_text_ident(r, &sb);
        }
        strbuf_json_str(out, sb.data, sb.len, false);
        strbuf_deinit(&sb);
    }
}

/* Arguments for a tool from its parameters schema: every required property, plus each optional
 * one with probability 1/3. */
static void gen_args(strbuf *out, const json_value *params, hunt_rng *r) {
    const json_value *props = json_get(params, "properties");
    const json_value *req = json_get(params, "required");
    strbuf_putc(out, '{');
    int n = 0;
    for (size_t i = 0; props && props->type == JSON_OBJECT && i < props->obj.n; i++) {
        const char *k = props->obj.keys[i];
        bool required = false;
        for (size_t j = 0; req && req->type == JSON_ARRAY && j < req->arr.n; j++)
            if (req->arr.items[j]->type == JSON_STRING && !strcmp(req->arr.items[j]->str.s, k))
                required = true;
        if (!required && hunt_rng_below(r, 3) != 0)
            continue;
        if (n++)
            strbuf_puts(out, ", ");
        strbuf_json_str(out, k, strlen(k), false);
        strbuf_puts(out, ": ");
        gen_arg_value(out, k, props->obj.vals[i], r);
    }
    strbuf_putc(out, '}');
}

static void plan_call_tokens(plan *p, int ci, const char *args) {
    plan_push(p, TK_MARK, ci, "<tool_call>", -0.01);
    plan_push(p, TK_CALL_NAME, ci, p->calls[ci].name, -0.02);
    size_t n = strlen(args);
    for (size_t i = 0; i < n;) {
        size_t k = 3 + (i * 7 + n) % 5;
        if (i + k > n)
            k = n - i;
        char frag[16];
        memcpy(frag, args + i, k);
        frag[k] = 0;
        mtok *t = plan_push(p, TK_CALL_ARGS, ci, frag, -0.03);
        tok_add_top(t, " ", -4.0);
        i += k;
    }
    plan_push(p, TK_MARK, ci, "</tool_call>", -0.01);
}

static uint64_t mock_id_counter;

static void plan_build(plan *p, const req_info *q) {
    memset(p, 0, sizeof *p);
    hunt_rng r;
    hunt_rng_seed(&r, q->hash);
    int n_tools = q->tools ? (int)q->tools->arr.n : 0;
    bool want_call = false;
    if (n_tools > 0) {
        if (!strcmp(q->last_role, "user"))
            want_call = hunt_rng_below(&r, 10) < 6;
        else if (!strcmp(q->last_role, "tool"))
            want_call = q->n_tool_msgs < 4 && hunt_rng_below(&r, 10) < 3;
    }
    int budget = q->max_tokens;
    if (!want_call) {
        int n = 10 + (int)hunt_rng_below(&r, 40);
        if (n >= budget)
            n = budget;
        gen_content(p, q->hash, 0, n, 0);
        p->finish = n == budget ? "length" : "stop";
        return;
    }
    if (hunt_rng_below(&r, 10) < 3)
        gen_content(p, q->hash ^ 0x77, 0, 3 + (int)hunt_rng_below(&r, 4), 0);
    int n_calls = hunt_rng_below(&r, 7) == 0 ? 2 : 1;
    for (int ci = 0; ci < n_calls; ci++) {
        const json_value *tool = q->tools->arr.items[hunt_rng_below(&r, (uint32_t)n_tools)];
        const json_value *fn = json_get(tool, "function");
        const char *name;
        size_t nl;
        if (!json_as_str(json_get(fn, "name"), &name, &nl))
            name = "unknown";
        mcall *c = &p->calls[ci];
        snprintf(c->name, sizeof c->name, "%s", name);
        if (cfg.random_ids)
            snprintf(c->id, sizeof c->id, "call_%llx",
                     (unsigned long long)(++mock_id_counter * 2654435761u));
        else
            snprintf(c->id, sizeof c->id, "call_%08llx%d",
                     (unsigned long long)(q->hash & 0xffffffff), ci);
        strbuf args;
        strbuf_init(&args);
        gen_args(&args, json_get(fn, "parameters"), &r);
        p->n_calls = ci + 1;
        plan_call_tokens(p, ci, args.data);
        strbuf_deinit(&args);
    }
    p->finish = "tool_calls";
}

/* ---- faults ---- */

/* Rebuilds the rest of a plan from position pos on according to the fault. Returns true if the
 * fault changed anything. */
static bool plan_fault(plan *p, int pos, unsigned fault, int max_tokens, uint64_t salt) {
    hunt_rng r;
    hunt_rng_seed(&r, salt);
    if (pos > p->n)
        pos = p->n;
    bool is_text = p->n_calls == 0;
    if (fault & F_SALAD) {
        if (!is_text || pos >= p->n)
            return false;
        int n = p->n - pos;
        plan_truncate(p, pos);
        static const char soup[] = "#@;%^&*{}[]<>~|qzxjkv0123456789QZXJKV!?$";
        for (int i = 0; i < n; i++) {
            char w[12];
            int len = 3 + (int)hunt_rng_below(&r, 6);
            w[0] = ' ';
            for (int k = 1; k < len; k++)
                w[k] = soup[hunt_rng_below(&r, sizeof soup - 1)];
            w[len] = 0;
            plan_push(p, TK_CONTENT, 0, w, -9.0);
        }
        return true;
    }
    if (fault & F_REPEAT) {
        int from = pos < 3 ? 3 : pos;
        if (!is_text || p->n < from)
            return false;
        plan_truncate(p, from);
        while (p->n < max_tokens && p->n < from + 200) {
            const mtok *src = &p->toks[from - 3 + (p->n - from) % 3];
            char *t = xstrdup(src->text);
            plan_push(p, TK_CONTENT, 0, t, -0.01);
            free(t);
        }
        p->finish = "length";
        return true;
    }
    if (fault & F_MARKUP) {
        if (is_text) {
            plan_truncate(p, pos);
            plan_push(p, TK_CONTENT, 0, " <tool_call>", -0.5);
            plan_push(p, TK_CONTENT, 0,
                      "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.c\"}}", -0.5);
            plan_push(p, TK_CONTENT, 0, "</tool_call>", -0.5);
            return true;
        }
        /* the tool call itself comes out as text */
        strbuf text;
        strbuf_init(&text);
        for (int i = 0; i < p->n; i++)
            strbuf_puts(&text, p->toks[i].text);
        plan_truncate(p, 0);
        plan_push(p, TK_CONTENT, 0, text.data, -0.3);
        strbuf_deinit(&text);
        p->n_calls = 0;
        p->finish = "stop";
        return true;
    }
    if (fault & F_SPECIAL) {
        if (!is_text)
            return false;
        free(p->extra_content);
        p->extra_content = xstrdup("<|im_end|>");
        return true;
    }
    if (fault & (F_BADJSON | F_SCHEMA | F_UNKNOWNTOOL)) {
        if (is_text)
            return false;
        bool changed = false;
        for (int i = 0; i < p->n; i++) {
            mtok *t = &p->toks[i];
            if (i < pos && !(fault & F_UNKNOWNTOOL))
                continue;
            if ((fault & F_UNKNOWNTOOL) && t->kind == TK_CALL_NAME && i >= pos) {
                size_t l = strlen(p->calls[t->call].name);
                if (l + 2 < sizeof p->calls[t->call].name)
                    strcat(p->calls[t->call].name, "_v2");
                free(t->text);
                t->text = xstrdup(p->calls[t->call].name);
                changed = true;
            }
            if ((fault & F_BADJSON) && t->kind == TK_CALL_ARGS && i + 1 < p->n &&
                p->toks[i + 1].kind == TK_MARK && strchr(t->text, '}')) {
                char *b = strrchr(t->text, '}');
                *b = 0;
                changed = true;
            }
            if ((fault & F_SCHEMA) && t->kind == TK_CALL_ARGS) {
                char *q = strchr(t->text, '"');
                if (q && !changed) {
                    /* turn the first string value's quote into a digit: "x..." -> 7x..." is not
                     * valid JSON, so instead replace the whole arguments with a wrong type */
                    int c = t->call;
                    int first = -1, last = -1;
                    for (int j = 0; j < p->n; j++)
                        if (p->toks[j].kind == TK_CALL_ARGS && p->toks[j].call == c) {
                            if (first < 0)
                                first = j;
                            last = j;
                        }
                    if (first >= pos) {
                        for (int j = first; j <= last; j++) {
                            free(p->toks[j].text);
                            p->toks[j].text =
                                xstrdup(j == first ? "{\"path\": 12345, \"x_bad\": [1]}" : "");
                        }
                        changed = true;
                    }
                }
            }
        }
        return changed;
    }
    if (fault & F_FINISH) {
        if (!is_text)
            return false;
        p->finish = "tool_calls";
        return true;
    }
    if (fault & F_TAGS) {
        if (!is_text)
            return false;
        plan_truncate(p, pos);
        for (int i = 0; i < 8; i++)
            plan_push(p, TK_CONTENT, 0, i % 2 ? "</div>" : "</span>", -0.2);
        return true;
    }
    if (fault & F_IDENTITY)
        return !is_text; /* handled while streaming */
    if (fault & F_GARBLE)
        return true; /* handled when writing */
    if (fault & (F_FLIP | F_NEARTIE)) {
        if (!is_text)
            return false;
        /* find the position to change: the next near tie (neartie) or the next non-tie (flip) */
        uint64_t h = 0;
        int at = -1;
        /* recompute the generator state by replaying the plan's text */
        /* the plan's first token was generated from the request hash stored in salt's high bits;
         * the caller passes the state before `pos` as salt */
        h = salt;
        for (int i = pos; i < p->n; i++) {
            gen_choice g;
            gen_candidates(h, i, &g);
            if (strcmp(g.word[0], p->toks[i].text))
                break; /* not our generator's text (already faulted) */
            if (((fault & F_NEARTIE) && g.tie) || ((fault & F_FLIP) && !g.tie)) {
                at = i;
                break;
            }
            h = gen_advance(h, g.word[0]);
        }
        if (at < 0)
            return false;
        int n = p->n - at;
        plan_truncate(p, at);
        gen_content(p, h, at, n, (fault & F_NEARTIE) ? 1 : 3);
        return true;
    }
    return false;
}

/* ---- connections and generations ---- */

typedef struct gen gen;

typedef struct conn {
    int fd;
    strbuf in;
    strbuf out;
    bool want_close;
    bool closed;
    bool epollout;
    gen *g; /* the generation answering this connection's current request */
} conn;

struct gen {
    conn *c;
    plan p;
    req_info q;
    arena *a;   /* request JSON */
    char *body; /* request body copy (q points into it) */
    int pos;    /* tokens produced */
    bool fault_decided;
    bool faulted;
    uint64_t state_before; /* generator state before pos (for flip/neartie) */
    uint64_t id;
    bool sent_role;
    bool identity_done;
    gen *next;
};

static int ep;
static gen *gens; /* running and waiting */
static int n_gens;
static hunt_rng fault_rng;
static uint64_t next_gen_id;

static void conn_flush(conn *c);

static void conn_close(conn *c) {
    if (c->closed)
        return;
    c->closed = true;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
}

static void conn_free(conn *c) {
    strbuf_deinit(&c->in);
    strbuf_deinit(&c->out);
    free(c);
}

static void http_head(conn *c, int status, const char *reason, const char *ctype, long len,
                      const char *extra) {
    strbuf_printf(&c->out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", status, reason, ctype);
    if (len >= 0)
        strbuf_printf(&c->out, "Content-Length: %ld\r\n", len);
    else
        strbuf_puts(&c->out, "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n");
    if (extra)
        strbuf_puts(&c->out, extra);
    if (c->want_close)
        strbuf_puts(&c->out, "Connection: close\r\n");
    strbuf_puts(&c->out, "\r\n");
}

static void http_simple(conn *c, int status, const char *reason, const char *ctype,
                        const char *body, const char *extra) {
    http_head(c, status, reason, ctype, (long)strlen(body), extra);
    strbuf_puts(&c->out, body);
    conn_flush(c);
}

static void sse_send(conn *c, const char *data, size_t n) {
    strbuf_printf(&c->out, "%zx\r\ndata: ", n + 8);
    strbuf_append(&c->out, data, n);
    strbuf_puts(&c->out, "\n\n\r\n");
}

static void write_tok_logprobs(strbuf *o, const mtok *t, int top_n) {
    strbuf_puts(o, "{\"token\":");
    strbuf_json_str(o, t->text, strlen(t->text), false);
    strbuf_puts(o, ",\"logprob\":");
    strbuf_json_num(o, t->lp);
    strbuf_puts(o, ",\"top_logprobs\":[");
    int n = t->n_top < top_n ? t->n_top : top_n;
    for (int k = 0; k < n; k++) {
        strbuf_puts(o, k ? ",{\"token\":" : "{\"token\":");
        strbuf_json_str(o, t->top[k], strlen(t->top[k]), false);
        strbuf_puts(o, ",\"logprob\":");
        strbuf_json_num(o, t->top_lp[k]);
        strbuf_putc(o, '}');
    }
    strbuf_puts(o, "]}");
}

static bool want_logprobs(const gen *g) {
    return g->q.logprobs && !cfg.no_logprobs;
}

static void usage_json(strbuf *o, const gen *g) {
    strbuf_printf(o, "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                  g->p.prompt_tokens, g->p.n, g->p.prompt_tokens + g->p.n);
}

/* Streams token i of g as one chunk. */
static void stream_token(gen *g, int i) {
    conn *c = g->c;
    const mtok *t = &g->p.toks[i];
    if (g->faulted && (cfg.faults & F_GARBLE)) {
        static const char cut[] = "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x";
        sse_send(c, cut, sizeof cut - 1);
        return;
    }
    strbuf o;
    strbuf_init(&o);
    strbuf_printf(&o, "{\"id\":\"chatcmpl-%llu\",\"object\":\"chat.completion.chunk\",\"model\":",
                  (unsigned long long)g->id);
    strbuf_json_str(&o, g->q.model, strlen(g->q.model), false);
    strbuf_puts(&o, ",\"choices\":[{\"index\":0,\"delta\":{");
    if (!g->sent_role) {
        strbuf_puts(&o, "\"role\":\"assistant\"");
        g->sent_role = true;
        if (t->kind != TK_MARK)
            strbuf_putc(&o, ',');
    }
    if (t->kind == TK_CONTENT) {
        strbuf_puts(&o, "\"content\":");
        strbuf_json_str(&o, t->text, strlen(t->text), false);
    } else if (t->kind == TK_CALL_NAME) {
        const mcall *mc = &g->p.calls[t->call];
        strbuf_printf(&o,
                      "\"tool_calls\":[{\"index\":%d,\"id\":\"%s\",\"type\":\"function\","
                      "\"function\":{\"name\":",
                      t->call, mc->id);
        strbuf_json_str(&o, mc->name, strlen(mc->name), false);
        strbuf_puts(&o, ",\"arguments\":\"\"}}]");
    } else if (t->kind == TK_CALL_ARGS) {
        strbuf_printf(&o, "\"tool_calls\":[{\"index\":%d,", t->call);
        if (g->faulted && (cfg.faults & F_IDENTITY) && !g->identity_done) {
            /* the broken-identity fault: this delta renames the call */
            strbuf_puts(&o, "\"function\":{\"name\":\"renamed_tool\",\"arguments\":");
            g->identity_done = true;
        } else {
            strbuf_puts(&o, "\"function\":{\"arguments\":");
        }
        strbuf_json_str(&o, t->text, strlen(t->text), false);
        strbuf_puts(&o, "}}]");
    } else if (o.data[o.len - 1] == ',') {
        o.len--;
        o.data[o.len] = 0;
    }
    strbuf_puts(&o, "}");
    if (want_logprobs(g)) {
        strbuf_puts(&o, ",\"logprobs\":{\"content\":[");
        write_tok_logprobs(&o, t, g->q.top_logprobs);
        strbuf_puts(&o, "]}");
    }
    strbuf_puts(&o, ",\"finish_reason\":null}]}");
    sse_send(c, o.data, o.len);
    strbuf_deinit(&o);
}

static void stream_finish(gen *g) {
    conn *c = g->c;
    strbuf o;
    strbuf_init(&o);
    if (g->p.extra_content) {
        strbuf_puts(&o, "{\"choices\":[{\"index\":0,\"delta\":{\"content\":");
        strbuf_json_str(&o, g->p.extra_content, strlen(g->p.extra_content), false);
        strbuf_puts(&o, "},\"finish_reason\":null}]}");
        sse_send(c, o.data, o.len);
        strbuf_reset(&o);
    }
    strbuf_printf(&o,
                  "{\"id\":\"chatcmpl-%llu\",\"object\":\"chat.completion.chunk\",\"choices\":"
                  "[{\"index\":0,\"delta\":{},\"finish_reason\":\"%s\"}]}",
                  (unsigned long long)g->id, g->p.finish);
    sse_send(c, o.data, o.len);
    if (g->q.include_usage) {
        strbuf_reset(&o);
        strbuf_puts(&o, "{\"choices\":[],\"usage\":");
        usage_json(&o, g);
        strbuf_putc(&o, '}');
        sse_send(c, o.data, o.len);
    }
    sse_send(c, "[DONE]", 6);
    strbuf_puts(&c->out, "0\r\n\r\n");
    strbuf_deinit(&o);
}

static void respond_whole(gen *g) {
    conn *c = g->c;
    const plan *p = &g->p;
    strbuf o;
    strbuf_init(&o);
    strbuf content;
    strbuf_init(&content);
    for (int i = 0; i < p->n; i++)
        if (p->toks[i].kind == TK_CONTENT)
            strbuf_puts(&content, p->toks[i].text);
    if (p->extra_content)
        strbuf_puts(&content, p->extra_content);
    strbuf_printf(&o,
                  "{\"id\":\"chatcmpl-%llu\",\"object\":\"chat.completion\",\"created\":0,"
                  "\"model\":",
                  (unsigned long long)g->id);
    strbuf_json_str(&o, g->q.model, strlen(g->q.model), false);
    strbuf_puts(&o, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    if (content.len == 0 && p->n_calls)
        strbuf_puts(&o, "null");
    else
        strbuf_json_str(&o, content.data, content.len, false);
    if (p->n_calls) {
        strbuf_puts(&o, ",\"tool_calls\":[");
        for (int ci = 0; ci < p->n_calls; ci++) {
            strbuf args;
            strbuf_init(&args);
            for (int i = 0; i < p->n; i++)
                if (p->toks[i].kind == TK_CALL_ARGS && p->toks[i].call == ci)
                    strbuf_puts(&args, p->toks[i].text);
            strbuf_printf(&o, "%s{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":",
                          ci ? "," : "", p->calls[ci].id);
            strbuf_json_str(&o, p->calls[ci].name, strlen(p->calls[ci].name), false);
            strbuf_puts(&o, ",\"arguments\":");
            strbuf_json_str(&o, args.data, args.len, false);
            strbuf_puts(&o, "}}");
            strbuf_deinit(&args);
        }
        strbuf_putc(&o, ']');
    }
    strbuf_puts(&o, "},\"logprobs\":");
    if (want_logprobs(g)) {
        strbuf_puts(&o, "{\"content\":[");
        for (int i = 0; i < p->n; i++) {
            if (i)
                strbuf_putc(&o, ',');
            write_tok_logprobs(&o, &p->toks[i], g->q.top_logprobs);
        }
        strbuf_puts(&o, "]}");
    } else {
        strbuf_puts(&o, "null");
    }
    strbuf_printf(&o, ",\"finish_reason\":\"%s\"}],\"usage\":", p->finish);
    usage_json(&o, g);
    strbuf_putc(&o, '}');
    if (g->faulted && (cfg.faults & F_GARBLE))
        o.len /= 2; /* a body cut in half */
    http_head(c, 200, "OK", "application/json", (long)o.len, NULL);
    strbuf_append(&c->out, o.data, o.len);
    strbuf_deinit(&o);
    strbuf_deinit(&content);
}

static void gen_free(gen *g) {
    plan_free(&g->p);
    arena_destroy(g->a);
    free(g->body);
    free(g);
}

static void gens_remove(gen *g) {
    for (gen **pp = &gens; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            n_gens--;
            return;
        }
}

/* ---- request handling ---- */

static void handle_chat(conn *c, const char *body, size_t len) {
    gen *g = calloc(1, sizeof *g);
    if (!g || !(g->a = arena_create(0, 0)) || !(g->body = malloc(len + 1))) {
        http_simple(c, 500, "Internal Server Error", "application/json",
                    "{\"error\":{\"message\":\"out of memory\"}}", NULL);
        if (g)
            arena_destroy(g->a);
        free(g);
        return;
    }
    memcpy(g->body, body, len);
    g->body[len] = 0;
    json_value *root;
    if (json_parse(g->a, g->body, len, &root) != 0 || root->type != JSON_OBJECT) {
        http_simple(c, 400, "Bad Request", "application/json",
                    "{\"error\":{\"message\":\"body is not a JSON object\",\"type\":"
                    "\"invalid_request_error\"}}",
                    NULL);
        gen_free(g);
        return;
    }
    req_info *q = &g->q;
    q->messages = json_get(root, "messages");
    if (!q->messages || q->messages->type != JSON_ARRAY || q->messages->arr.n == 0) {
        http_simple(c, 400, "Bad Request", "application/json",
                    "{\"error\":{\"message\":\"messages must be a non-empty array\",\"type\":"
                    "\"invalid_request_error\"}}",
                    NULL);
        gen_free(g);
        return;
    }
    q->tools = json_get(root, "tools");
    if (q->tools && q->tools->type != JSON_ARRAY)
        q->tools = NULL;
    int64_t v;
    q->max_tokens = 64;
    if (json_as_int(json_get(root, "max_tokens"), &v) ||
        json_as_int(json_get(root, "max_completion_tokens"), &v))
        q->max_tokens = v < 1 ? 1 : v > 4096 ? 4096 : (int)v;
    bool b;
    q->stream = json_as_bool(json_get(root, "stream"), &b) && b;
    q->include_usage =
        json_as_bool(json_get(json_get(root, "stream_options"), "include_usage"), &b) && b;
    q->logprobs = json_as_bool(json_get(root, "logprobs"), &b) && b;
    q->top_logprobs = json_as_int(json_get(root, "top_logprobs"), &v) ? (int)v : 0;
    if (q->top_logprobs > 5)
        q->top_logprobs = 5;
    if (q->logprobs && cfg.reject_logprobs) {
        http_simple(c, 400, "Bad Request", "application/json",
                    "{\"error\":{\"message\":\"logprobs are not supported\",\"type\":"
                    "\"invalid_request_error\"}}",
                    NULL);
        gen_free(g);
        return;
    }
    if (cfg.reject_skip_special && json_get(root, "skip_special_tokens")) {
        http_simple(c, 400, "Bad Request", "application/json",
                    "{\"error\":{\"message\":\"Unrecognized request argument supplied: "
                    "skip_special_tokens\",\"type\":\"invalid_request_error\"}}",
                    NULL);
        gen_free(g);
        return;
    }
    const char *s;
    size_t sl;
    q->model = json_as_str(json_get(root, "model"), &s, &sl) ? s : "mock-model";
    const json_value *last = q->messages->arr.items[q->messages->arr.n - 1];
    q->last_role = json_as_str(json_get(last, "role"), &s, &sl) ? s : "user";
    for (size_t i = 0; i < q->messages->arr.n; i++)
        if (json_as_str(json_get(q->messages->arr.items[i], "role"), &s, &sl) && !strcmp(s, "tool"))
            q->n_tool_msgs++;
    /* the reply depends on the conversation and the parameters that shape it, nothing else */
    strbuf canon;
    strbuf_init(&canon);
    json_write(&canon, q->messages);
    if (q->tools)
        json_write(&canon, q->tools);
    strbuf_printf(&canon, "|%d", q->max_tokens);
    const json_value *seed = json_get(root, "seed");
    if (seed)
        json_write(&canon, seed);
    q->hash = hunt_hash(HUNT_FNV_OFFSET, canon.data, canon.len);
    int prompt_tokens = (int)(canon.len / 4);
    strbuf_deinit(&canon);
    plan_build(&g->p, q);
    g->p.prompt_tokens = prompt_tokens;
    g->state_before = q->hash;
    if (g->p.n_calls && g->p.n && g->p.toks[0].kind == TK_CONTENT)
        g->state_before = q->hash ^ 0x77;
    g->c = c;
    g->id = ++next_gen_id;
    c->g = g;
    stats.requests_total++;
    g->next = gens;
    gens = g;
    n_gens++;
    if (q->stream) {
        http_head(c, 200, "OK", "text/event-stream", -1, NULL);
        conn_flush(c);
    }
}

static void metrics_text(strbuf *o) {
    int running = n_gens < cfg.max_running ? n_gens : cfg.max_running;
    int waiting = n_gens - running;
    int batch = stats.last_batch;
    if (cfg.metrics_peak) {
        running = stats.max_running_seen < cfg.max_running ? stats.max_running_seen
                                                           : cfg.max_running;
        batch = stats.max_batch;
    }
    const char *st = cfg.metrics_style;
    if (!strcmp(st, "vllm")) {
        strbuf_printf(
            o,
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            "vllm:num_requests_running{model_name=\"mock-model\"} %d\n"
            "vllm:num_requests_waiting{model_name=\"mock-model\"} %d\n",
            running, waiting);
    } else if (!strcmp(st, "sglang")) {
        strbuf_printf(o,
                      "# TYPE sglang:num_running_reqs "
                      "gauge\nsglang:num_running_reqs{model_name=\"mock-model\"} %d\n"
                      "sglang:num_queue_reqs{model_name=\"mock-model\"} %d\n",
                      running, waiting);
    } else if (!strcmp(st, "llamacpp")) {
        strbuf_printf(o,
                      "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n"
                      "llamacpp:requests_deferred %d\nllamacpp:n_busy_slots_per_decode %d\n",
                      running, waiting, batch);
    } else {
        strbuf_printf(o,
                      "# HELP verity_requests_running Requests in the running batch.\n"
                      "# TYPE verity_requests_running gauge\nverity_requests_running %d\n"
                      "# TYPE verity_requests_waiting gauge\nverity_requests_waiting %d\n"
                      "# TYPE verity_batch_size gauge\nverity_batch_size %d\n"
                      "# TYPE verity_requests_total counter\nverity_requests_total %lld\n",
                      running, waiting, batch, (long long)stats.requests_total);
    }
    strbuf_printf(o,
                  "# TYPE mock_faults_injected_total counter\nmock_faults_injected_total %lld\n"
                  "mock_max_batch %d\nmock_max_running %d\nmock_steps_total %lld\n"
                  "mock_errors_injected_total %lld\n",
                  (long long)stats.faults_total, stats.max_batch, stats.max_running_seen,
                  (long long)stats.steps, (long long)stats.errors_total);
}

static void handle_request(conn *c, const char *method, const char *path, const char *body,
                           size_t len) {
    if (!strcmp(method, "GET") && !strcmp(path, "/health")) {
        http_simple(c, 200, "OK", "text/plain", "ok\n", NULL);
    } else if (!strcmp(method, "GET") && !strcmp(path, "/v1/models")) {
        http_simple(c, 200, "OK", "application/json",
                    "{\"object\":\"list\",\"data\":[{\"id\":\"mock-model\",\"object\":\"model\","
                    "\"owned_by\":\"verity-tests\"}]}",
                    NULL);
    } else if (!strcmp(method, "GET") && !strcmp(path, "/metrics")) {
        strbuf o;
        strbuf_init(&o);
        metrics_text(&o);
        http_simple(c, 200, "OK", "text/plain; version=0.0.4", o.data, NULL);
        strbuf_deinit(&o);
    } else if (!strcmp(method, "POST") && !strcmp(path, "/v1/chat/completions")) {
        if (cfg.error_rate > 0 && hunt_rng_unit(&fault_rng) < cfg.error_rate) {
            stats.errors_total++;
            http_simple(c, 503, "Service Unavailable", "application/json",
                        "{\"error\":{\"message\":\"overloaded (injected)\"}}",
                        "Retry-After: 0\r\n");
            return;
        }
        handle_chat(c, body, len);
    } else {
        http_simple(c, 404, "Not Found", "application/json",
                    "{\"error\":{\"message\":\"no such route\"}}", NULL);
    }
}

/* Parses complete requests out of c->in. */
static void conn_parse(conn *c) {
    while (!c->g && !c->closed) {
        char *hdr_end = c->in.len ? strstr(c->in.data, "\r\n\r\n") : NULL;
        if (!hdr_end) {
            if (c->in.len > 65536) {
                c->want_close = true;
                http_simple(c, 431, "Request Header Fields Too Large", "text/plain", "too large\n",
                            NULL);
            }
            return;
        }
        size_t head_len = (size_t)(hdr_end - c->in.data) + 4;
        char method[16] = "", path[256] = "";
        sscanf(c->in.data, "%15s %255s", method, path);
        long clen = 0;
        c->want_close = false;
        for (char *line = strstr(c->in.data, "\r\n"); line && line < hdr_end;
             line = strstr(line + 2, "\r\n")) {
            char *h = line + 2;
            if (!strncasecmp(h, "Content-Length:", 15))
                clen = strtol(h + 15, NULL, 10);
            else if (!strncasecmp(h, "Connection:", 11) && strstr(h, "close") &&
                     strstr(h, "close") < strstr(h, "\r\n"))
                c->want_close = true;
        }
        if (clen < 0 || clen > 64L << 20) {
            c->want_close = true;
            http_simple(c, 413, "Payload Too Large", "text/plain", "too large\n", NULL);
            return;
        }
        if (c->in.len < head_len + (size_t)clen)
            return;
        char *q = strchr(path, '?');
        if (q)
            *q = 0;
        handle_request(c, method, path, c->in.data + head_len, (size_t)clen);
        size_t used = head_len + (size_t)clen;
        memmove(c->in.data, c->in.data + used, c->in.len - used);
        c->in.len -= used;
        c->in.data[c->in.len] = 0;
    }
}

static void conn_flush(conn *c) {
    if (c->closed)
        return;
    size_t off = 0;
    while (off < c->out.len) {
        ssize_t k = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_close(c);
        return;
    }
    if (off) {
        memmove(c->out.data, c->out.data + off, c->out.len - off);
        c->out.len -= off;
        c->out.data[c->out.len] = 0;
    }
    bool need_out = c->out.len > 0;
    if (need_out != c->epollout) {
        struct epoll_event ev = {.events = EPOLLIN | (need_out ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->epollout = need_out;
    }
    if (!need_out && c->want_close && !c->g)
        conn_close(c);
}

/* ---- the engine step ---- */

static void engine_step(void) {
    int batch = 0;
    /* the oldest n_running generations run; gens is newest first, so count from the tail */
    int skip = n_gens > cfg.max_running ? n_gens - cfg.max_running : 0;
    int idx = 0;
    gen *g = gens;
    gen *done_list = NULL;
    batch = n_gens - skip;
    if (batch <= 0)
        return;
    stats.steps++;
    stats.last_batch = batch;
    if (batch > stats.max_batch)
        stats.max_batch = batch;
    while (g) {
        gen *next = g->next;
        if (idx++ < skip) {
            g = next;
            continue;
        }
        if (g->c->closed) { /* the client went away */
            gens_remove(g);
            conn *c = g->c;
            gen_free(g);
            conn_free(c);
            g = next;
            continue;
        }
        if (fault_enabled && !g->fault_decided && batch > cfg.fault_min_batch &&
            g->p.prompt_tokens >= cfg.fault_min_prompt) {
            g->fault_decided = true;
            if (hunt_rng_unit(&fault_rng) < cfg.fault_rate) {
                /* state before pos, for the flip/neartie generator replay */
                uint64_t h = g->state_before;
                for (int i = 0; i < g->pos && i < g->p.n && g->p.toks[i].kind == TK_CONTENT; i++)
                    h = gen_advance(h, g->p.toks[i].text);
                if (plan_fault(&g->p, g->pos, cfg.faults, g->q.max_tokens,
                               (cfg.faults & (F_FLIP | F_NEARTIE)) ? h
                                                                   : hunt_rng_next(&fault_rng))) {
                    g->faulted = true;
                    stats.faults_total++;
                }
            }
        }
        if (g->pos < g->p.n) {
            if (g->q.stream)
                stream_token(g, g->pos);
            g->pos++;
        }
        if (g->pos >= g->p.n) {
            if (g->q.stream)
                stream_finish(g);
            else
                respond_whole(g);
            gens_remove(g);
            g->next = done_list;
            done_list = g;
        } else if (g->q.stream) {
            conn_flush(g->c);
        }
        g = next;
    }
    while (done_list) {
        gen *d = done_list;
        done_list = d->next;
        conn *c = d->c;
        c->g = NULL;
        gen_free(d);
        conn_flush(c);
        if (!c->closed)
            conn_parse(c); /* a pipelined request may be waiting */
        if (c->closed)
            conn_free(c);
    }
}

/* ---- main loop ---- */

static volatile sig_atomic_t stop_flag;
static void on_signal(int s) {
    (void)s;
    stop_flag = 1;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(void) {
    fprintf(stderr,
            "usage: mock_openai [--port P] [--port-file F] [--step-ms MS] [--fault KINDS] "
            "[--fault-min-batch K] [--fault-rate P] [--fault-when EXPR] [--NAME VALUE ...]\n");
    exit(2);
}

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

int main(int argc, char **argv) {
    const char *faults = env_or("MOCK_FAULT", NULL);
    cfg.fault_min_batch = atoi(env_or("MOCK_FAULT_MIN_BATCH", "8"));
    cfg.fault_rate = atof(env_or("MOCK_FAULT_RATE", "0.3"));
    cfg.fault_when = env_or("MOCK_FAULT_WHEN", NULL);
    cfg.step_ms = atoi(env_or("MOCK_STEP_MS", "2"));
    cfg.seed = strtoull(env_or("MOCK_SEED", "1"), NULL, 10);
    cfg.error_rate = atof(env_or("MOCK_ERROR_RATE", "0"));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--free-port")) {
            int s = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            socklen_t sl = sizeof sa;
            if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) ||
                getsockname(s, (struct sockaddr *)&sa, &sl))
                return 1;
            printf("%d\n", ntohs(sa.sin_port));
            close(s);
            return 0;
        }
        if (!strcmp(a, "--metrics-peak")) {
            cfg.metrics_peak = true;
            continue;
        }
        if (!strcmp(a, "--no-logprobs")) {
            cfg.no_logprobs = true;
            continue;
        }
        if (!strcmp(a, "--reject-logprobs")) {
            cfg.reject_logprobs = true;
            continue;
        }
        if (!strcmp(a, "--reject-skip-special")) {
            cfg.reject_skip_special = true;
            continue;
        }
        if (!strcmp(a, "--random-ids")) {
            cfg.random_ids = true;
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--host"))
            cfg.host = v;
        else if (!strcmp(a, "--port"))
            cfg.port = atoi(v);
        else if (!strcmp(a, "--port-file"))
            cfg.port_file = v;
        else if (!strcmp(a, "--step-ms"))
            cfg.step_ms = atoi(v);
        else if (!strcmp(a, "--max-running"))
            cfg.max_running = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(a, "--fault"))
            faults = v;
        else if (!strcmp(a, "--fault-min-batch"))
            cfg.fault_min_batch = atoi(v);
        else if (!strcmp(a, "--fault-min-prompt"))
            cfg.fault_min_prompt = atoi(v);
        else if (!strcmp(a, "--fault-rate"))
            cfg.fault_rate = atof(v);
        else if (!strcmp(a, "--fault-when"))
            cfg.fault_when = v;
        else if (!strcmp(a, "--seed"))
            cfg.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--error-rate"))
            cfg.error_rate = atof(v);
        else if (!strcmp(a, "--metrics-style"))
            cfg.metrics_style = v;
        else if (!strcmp(a, "--max-lifetime"))
            cfg.max_lifetime_s = atoi(v);
        else if (cfg.n_toggles < MAX_TOGGLES) {
            cfg.toggle_name[cfg.n_toggles] = a + 2;
            cfg.toggle_val[cfg.n_toggles] = v;
            cfg.n_toggles++;
        }
    }
    if (faults)
        cfg.faults = parse_faults(faults);
    fault_enabled = cfg.faults && when_holds(cfg.fault_when);
    hunt_rng_seed(&fault_rng, cfg.seed * 0x9e3779b97f4a7c15ull);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port)};
    if (inet_pton(AF_INET, cfg.host, &sa.sin_addr) != 1) {
        fprintf(stderr, "mock_openai: bad host %s\n", cfg.host);
        return 2;
    }
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 4096)) {
        fprintf(stderr, "mock_openai: cannot listen on %s:%d: %s\n", cfg.host, cfg.port,
                strerror(errno));
        return 1;
    }
    socklen_t sl = sizeof sa;
    getsockname(ls, (struct sockaddr *)&sa, &sl);
    int port = ntohs(sa.sin_port);
    if (cfg.port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", cfg.port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, cfg.port_file)) {
            fprintf(stderr, "mock_openai: cannot write %s\n", cfg.port_file);
            return 1;
        }
    }
    fprintf(stderr, "mock_openai: listening on %s:%d (faults 0x%x %s, min batch %d, rate %.2f)\n",
            cfg.host, port, cfg.faults, fault_enabled ? "on" : "off", cfg.fault_min_batch,
            cfg.fault_rate);
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
    int64_t start = now_ms(), next_step = start;
    struct epoll_event evs[512];
    while (!stop_flag) {
        int64_t now = now_ms();
        if (cfg.max_lifetime_s > 0 && now - start > (int64_t)cfg.max_lifetime_s * 1000) {
            fprintf(stderr, "mock_openai: max lifetime reached, exiting\n");
            break;
        }
        int wait = n_gens ? (int)(next_step > now ? next_step - now : 0) : 200;
        int n = epoll_wait(ep, evs, 512, wait);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (!c) {
                for (;;) {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0)
                        break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn *nc = calloc(1, sizeof *nc);
                    if (!nc) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    strbuf_init(&nc->in);
                    strbuf_init(&nc->out);
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            if (c->closed)
                continue;
            if (evs[i].events & EPOLLOUT)
                conn_flush(c);
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                char buf[65536];
                for (;;) {
                    ssize_t k = recv(c->fd, buf, sizeof buf, 0);
                    if (k > 0) {
                        strbuf_append(&c->in, buf, (size_t)k);
                        continue;
                    }
                    if (k < 0 && errno == EINTR)
                        continue;
                    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                        conn_close(c);
                    break;
                }
                if (!c->closed)
                    conn_parse(c);
            }
            if (c->closed && !c->g)
                conn_free(c);
            /* a closed connection with a generation is freed by the engine step */
        }
        now = now_ms();
        if (n_gens && now >= next_step) {
            engine_step();
            next_step = now + cfg.step_ms;
        }
        if (stats.max_running_seen < n_gens)
            stats.max_running_seen = n_gens;
    }
    close(ls);
    return 0;
}
