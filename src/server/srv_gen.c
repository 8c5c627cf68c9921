/* SPDX-License-Identifier: MIT */
/*
 * srv_gen: running one generation request and writing its response.
 *
 * Every choice (n per prompt) is its own engine request with seed + choice index. Its events
 * (token ids with logprobs) are turned into text by the choice's own detokenizer stream with the
 * request's own skip_special_tokens (incident bug class (a): flags are never shared), then:
 *   1. stop strings (srv_stop.h, an automaton over the request's stop set, so a token costs
 *      O(its bytes) whatever the stop strings' lengths): text is released only up to the longest
 *      suffix that could still begin a stop string; when one matches, text is cut before the
 *      earliest-starting match, the engine request is cancelled,
 *      and the tokens counted stop at the one that completed the match, so the response does not
 *      depend on how many tokens the engine produced before it heard of the cancel;
 *   2. the tool-call parser (chat with tools): markup never reaches content; completed calls are
 *      emitted whole; a call that does not parse surfaces as finish_reason "error" with an
 *      "error" object on the choice and is counted in verity_tool_parse_failures_total. A
 *      control token that is one of the format's markers ([TOOL_CALLS], <|python_tag|>) is
 *      passed to the parser even when skip_special_tokens drops other control tokens.
 * Tool call ids are derived from (prompt, choice, call index, arguments) so a response is
 * reproducible byte for byte. Streams are SSE: role chunk first, content/tool-call deltas, one
 * finish chunk per choice, the usage chunk (choices: []) when asked, then [DONE].
 *
 * Admission (srv_gen_start) counts sequences exactly: the server holds at most max_batch +
 * queue_max of them, running, waiting or still in the engine's inbox, checked and submitted under
 * one lock. A request needing more than that alone is a 400 naming n and the limit, never a 429
 * a client would retry forever; so --queue-max 0 means no waiting beyond the running batch.
 *
 * Disconnects: the layer's gone flag (srv_http_request_gone) is checked on every pump of the
 * wait, tokens or not, and a stream write that fails says the same. A read EOF is either a closed
 * client or a half-closed one (shutdown of its writing side after the request, legal in HTTP/1.1
 * and done by some tools), which TCP cannot tell apart until something is sent: the layer answers
 * the EOF of a request that has no answer yet with an interim "100 Continue", which a closed
 * socket answers with a reset (gone) and a half-closed client reads. A stream therefore begins
 * (its status line and headers) with its first event, not before: until then its request has no
 * answer and can be probed; after, the first pump that sees the read EOF (srv_http_request_eof)
 * writes an SSE comment line, which a closed socket answers with a reset (gone).
 *
 * A prefill request ("kv_transfer" with "send_to", disagg.h) answered whole waits for its
 * transfer's outcome (disagg_tx_wait, bounded by --kv-xfer-timeout) and ends its body with
 * "kv_transfer":{"id","status":"sent"|"failed"|"none"} (none: no full block to send); the router
 * cancels the decode side's wait on "failed". A streamed one carries no status (the router asks
 * for no stream).
 *
 * Streams are pushed (srv_gen_stream): the worker formats the events of each pump and writes them
 * as one chunk; while the client's output buffer is full the write blocks (backpressure), so a
 * client that reads slowly holds at most the layer's out_cap_bytes of its stream in memory.
 *
 * Shutdown: a request the engine cancels without being asked (the server stopped the engine when
 * --drain-timeout ran out) is cut, not finished: a whole response becomes a 503 with type
 * "server_shutdown_error" and code "drain_timeout" (for a request still queued too, which would
 * otherwise be a 200 with no text), and a stream ends with finish_reason "error" and the error
 * object on each cut choice, then an error event, and no [DONE].
 */
#include "server/srv_int.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "disagg/disagg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SRV_POLL_MS 20

typedef struct srv_choice {
    eloop_req *q;
    int index;
    int prompt_idx;
    tokenizer_stream ts;
    strbuf raw;             /* detokenized text so far */
    size_t released;        /* raw[0..released) has passed the stop-string check */
    srv_stop_state stop_st; /* the stop matcher's progress through raw */
    strbuf content;         /* content released so far (non-stream) / not yet sent (stream) */
    strbuf lp;              /* logprob entries (JSON, comma-separated) not yet sent / all */
    size_t lp_sent;
    chat_tool_parser *tp;
    int calls_sent;
    int32_t n_tokens;
    int32_t n_cached; /* prompt positions the engine took from its cache (eloop_event.n_cached) */
    bool stopped;     /* a stop string matched: further events are ignored */
    bool done;
    bool role_sent;
    bool echo_sent;   /* stream with echo: the prompt's text went out as the first text */
    bool cut;         /* the server's shutdown cancelled it (--drain-timeout ran out) */
    int engine_error; /* the engine refused the request (err code) */
    const char *finish;
    char error[256];
    int64_t t_last_ns;
} srv_choice;

struct srv_gen {
    server *s;
    srv_params p;
    srv_choice ch[SRV_MAX_CHOICES];
    int n_ch;
    srv_http_req *req; /* the request it answers (the worker holds it) */
    char id[48];
    int64_t created;
    int64_t t_arrival_ns;
    bool first_token;
    int64_t prompt_tokens;
    strbuf out;    /* SSE bytes not yet handed to the HTTP layer */
    bool finished; /* usage chunk and [DONE] appended */
    bool aborted;
    bool cut;       /* some choice was cut by the server's shutdown */
    arena *a;       /* copies of the parameters' strings */
    struct disagg_tx *tx; /* prefill: the transfer of the prompt's K/V (disagg.h), or NULL */
    srv_stop *stop; /* the stop strings' automaton (in a), NULL when there are none */
};

static uint64_t srv_fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Copies p into g with its strings and prompts in g's own arena (the request's arena dies when
 * the handler returns, a stream outlives it). */
static int srv_gen_copy_params(srv_gen *g, const srv_params *p) {
    g->p = *p;
    for (int i = 0; i < p->n_stop; i++)
        if (!(g->p.stop[i] = arena_strndup(g->a, p->stop[i], p->stop_len[i])))
            return ERR_NOMEM;
    if (srv_stop_create(g->a, g->p.stop, g->p.stop_len, g->p.n_stop, &g->stop))
        return ERR_NOMEM; /* srv_parse_generate enforced the limits */
    if (p->tool_choice_name && !(g->p.tool_choice_name = arena_strndup(
                                     g->a, p->tool_choice_name, strlen(p->tool_choice_name))))
        return ERR_NOMEM;
    g->p.messages = NULL;
    g->p.tools = NULL;
    g->p.response_format = NULL;
    g->p.model = NULL;
    g->p.prompts = arena_alloc(g->a, (size_t)p->n_prompts * sizeof *g->p.prompts);
    g->p.prompt_lens = arena_alloc(g->a, (size_t)p->n_prompts * sizeof *g->p.prompt_lens);
    if (!g->p.prompts || !g->p.prompt_lens)
        return ERR_NOMEM;
    for (int i = 0; i < p->n_prompts; i++) {
        g->p.prompt_lens[i] = p->prompt_lens[i];
        g->p.prompts[i] = arena_alloc(g->a, (size_t)p->prompt_lens[i] * sizeof(int32_t));
        if (!g->p.prompts[i])
            return ERR_NOMEM;
        memcpy(g->p.prompts[i], p->prompts[i], (size_t)p->prompt_lens[i] * sizeof(int32_t));
    }
    return 0;
}

srv_gen *srv_gen_start(server *s, const srv_params *p, srv_http_req *req, int64_t t_arrival_ns,
                       srv_err *e) {
    int n_ch = p->n * p->n_prompts;
    int64_t cap = s->o.max_batch + s->o.queue_max;
    const char *role = s->sm.role ? s->sm.role : "both";
    const char *xerr = !p->xfer_id                            ? NULL
                       : p->xfer_recv && !s->sm.kv_rx         ? "recv needs --role decode"
                       : !p->xfer_recv && !strcmp(role, "decode") ? "send_to needs --role prefill or both"
                                                              : NULL;
    if (xerr) {
        grammar_destroy(p->constraint);
        srv_fail(e, 400, "invalid_request_error", "kv_transfer", "\"kv_transfer\" %s (this server: --role %s)", xerr, role);
        return NULL;
    }
    if (n_ch > cap) { /* no wait would help: a 429 would be retried forever */
        grammar_destroy(p->constraint);
        srv_fail(e, 400, "invalid_request_error", "n",
                 "the request needs %d sequences (n x prompts) but this server holds at most "
                 "%lld at once (--max-batch %lld + --queue-max %lld); it can never be admitted",
                 n_ch, (long long)cap, (long long)s->o.max_batch, (long long)s->o.queue_max);
        return NULL;
    }
    srv_gen *g = calloc(1, sizeof *g);
    if (!g || !(g->a = arena_create(0, 0)) || srv_gen_copy_params(g, p)) {
        if (g)
            arena_destroy(g->a);
        free(g);
        grammar_destroy(p->constraint);
        srv_fail(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    /* g->p.constraint is g's from here on: srv_gen_free drops it */
    g->s = s;
    g->req = req;
    g->n_ch = n_ch;
    g->created = clock_wall_s();
    g->t_arrival_ns = t_arrival_ns;
    uint64_t idn = atomic_fetch_add(&s->next_id, 1) + 1;
    uint64_t h = srv_fnv(1469598103934665603ull, &idn, sizeof idn);
    h = srv_fnv(h, &t_arrival_ns, sizeof t_arrival_ns);
    snprintf(g->id, sizeof g->id, "%s-%016llx%08llx", p->chat ? "chatcmpl" : "cmpl",
             (unsigned long long)h, (unsigned long long)(idn & 0xffffffffu));
    strbuf_init(&g->out);
    bool tools =
        p->chat && p->tool_choice != SRV_TOOLS_NONE && s->tool_format != CHAT_TOOL_FORMAT_NONE;
    for (int i = 0; i < n_ch; i++) {
        srv_choice *c = &g->ch[i];
        c->index = i;
        c->prompt_idx = i / p->n;
        tokenizer_stream_init(&c->ts, s->sm.tok, p->skip_special);
        strbuf_init(&c->raw);
        strbuf_init(&c->content);
        strbuf_init(&c->lp);
        /* the tools' schemas type the raw parameter values of the XML-style formats */
        if (tools && (chat_tool_parser_create(s->tool_format, &c->tp) ||
                      chat_tool_parser_set_tools(c->tp, p->tools))) {
            srv_gen_free(g);
            srv_fail(e, 500, "server_error", NULL, "out of memory");
            return NULL;
        }
    }
    /* admission: every sequence the engine holds (running, waiting, or still in its inbox) is
     * counted as what it is, and the count and the submissions are one step under admit_mu, so
     * exactly max_batch + queue_max sequences get in however they arrive */
    pthread_mutex_lock(&s->admit_mu);
    int64_t held = engine_loop_pending(s->sm.loop);
    if (held + n_ch > cap) {
        pthread_mutex_unlock(&s->admit_mu);
        srv_gen_free(g);
        srv_fail(e, 429, "rate_limit_error", NULL,
                 "the server is at capacity (%lld sequences running or waiting, at most %lld: "
                 "--max-batch %lld + --queue-max %lld); retry later",
                 (long long)held, (long long)cap, (long long)s->o.max_batch,
                 (long long)s->o.queue_max);
        return NULL;
    }
    for (int i = 0; i < n_ch; i++) {
        srv_choice *c = &g->ch[i];
        int32_t len = g->p.prompt_lens[c->prompt_idx];
        engine_kv_in kin = {0};
        engine_kv_out kout = {0};
        if (p->xfer_id && i == 0 && p->n_prompts == 1 && len / s->sm.kv_block_size >= 1) {
            /* disagg.h: a transfer carries one prompt's full blocks (a shorter prompt has none;
             * several prompts: none), into the first choice (the others share its K/V) */
            int rc = 0;
            if (p->xfer_recv) {
                rc = disagg_rx_expect(s->sm.kv_rx, p->xfer_id, g->p.prompts[0], len, &kin);
            } else {
                disagg_tx_opts to = {.transport = s->sm.kv_transport,
                                     .addr = p->xfer_to,
                                     .id = p->xfer_id,
                                     .pool = s->sm.kv_pool,
                                     .identity = s->sm.kv_identity,
                                     .loop = s->sm.loop,
                                     .timeout_ms = s->sm.kv_timeout_ms};
                rc = disagg_tx_create(&to, g->p.prompts[0], len, &kout, &g->tx);
            }
            if (rc) {
                pthread_mutex_unlock(&s->admit_mu);
                srv_gen_free(g);
                srv_fail(e, rc == ERR_EXISTS ? 409 : 500,
                         rc == ERR_EXISTS ? "invalid_request_error" : "server_error",
                         "kv_transfer", "kv_transfer: %s", err_detail());
                return NULL;
            }
        }
        engine_req r = {.prompt = g->p.prompts[c->prompt_idx],
                        .n_prompt = len,
                        .sp = g->p.sp,
                        .max_tokens =
                            g->p.max_tokens > 0 ? g->p.max_tokens : (int32_t)(s->sm.n_ctx - len),
                        .ignore_eog = g->p.ignore_eos,
                        .want_logprobs = g->p.logprobs};
        r.kv_in = kin;
        r.kv_out = kout;
        r.sp.seed = g->p.sp.seed + (uint64_t)(i % p->n);
        r.fault_tag = g->p.skip_special ? 2 : 1; /* used by FAULT (a) only */
        if (p->n > 1) /* the n choices of a prompt share its K/V (engine.h, share_group) */
            r.share_group = idn * SRV_MAX_CHOICES + (uint64_t)c->prompt_idx + 1;
        /* each choice follows the grammar with its own state; the engine owns it once submitted */
        if ((g->p.constraint && grammar_state_create(g->p.constraint, &r.constraint)) ||
            engine_loop_submit(s->sm.loop, &r, &c->q)) {
            /* the engine never saw it: its disagg hooks end here */
            if (kin.poll)
                kin.done(kin.ctx, 0, 0);
            if (kout.end)
                kout.end(kout.ctx, false);
            pthread_mutex_unlock(&s->admit_mu);
            srv_gen_free(g);
            srv_fail(e, 500, "server_error", NULL, "out of memory");
            return NULL;
        }
        if (i % p->n == 0) /* OpenAI's usage: each prompt counts once, not once per choice */
            g->prompt_tokens += len;
    }
    pthread_mutex_unlock(&s->admit_mu);
    return g;
}

void srv_gen_free(srv_gen *g) {
    if (!g)
        return;
    bool cancelled = false;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        if (c->q) {
            if (!c->done)
                cancelled = true;
            eloop_req_release(c->q);
        }
        tokenizer_stream_deinit(&c->ts);
        strbuf_deinit(&c->raw);
        strbuf_deinit(&c->content);
        strbuf_deinit(&c->lp);
        chat_tool_parser_destroy(c->tp);
    }
    if (cancelled || g->aborted || g->cut)
        srv_metrics_cancelled(g->s->metrics);
    disagg_tx_finish(g->tx); /* after the release above: the request's end ends the transfer */
    grammar_destroy(g->p.constraint);
    strbuf_deinit(&g->out);
    arena_destroy(g->a);
    free(g);
}

/* ---- text pipeline ---- */

/* Passes released text to the tool parser (or straight to content). */
static void srv_choice_content(srv_gen *g, srv_choice *c, const char *t, size_t n) {
    if (!c->tp) {
        strbuf_append(&c->content, t, n);
        return;
    }
    if (chat_tool_parser_feed(c->tp, t, n, &c->content) == ERR_FORMAT && !c->error[0])
        snprintf(c->error, sizeof c->error, "%s", err_detail());
    (void)g;
}

/* Releases raw text up to the stop-string rules; returns true if a stop string matched. */
static bool srv_choice_release(srv_gen *g, srv_choice *c, bool final) {
    size_t E = c->released, end;
    bool hit = srv_stop_scan(g->stop, &c->stop_st, c->raw.data, c->raw.len, final, &end);
    if (end < E) /* cannot happen (held bytes were never released); keep the invariant anyway */
        end = E;
    srv_choice_content(g, c, c->raw.data + E, end - E);
    c->released = end;
    return hit;
}

static void srv_json_token_bytes(strbuf *sb, const char *t, size_t n) {
    strbuf_puts(sb, "\"bytes\":[");
    for (size_t i = 0; i < n; i++)
        strbuf_printf(sb, i ? ",%u" : "%u", (unsigned)(unsigned char)t[i]);
    strbuf_putc(sb, ']');
}

/* The text of token id when it is a control token whose text is one of format f's tool-call
 * markers (Mistral's [TOOL_CALLS] / [ARGS] / [CALL_ID], Llama's <|python_tag|>), else NULL. Such
 * a token reaches the tool parser even when the request skips special tokens: the parser keeps
 * markup out of content either way, and without the marker it would see a call's JSON as text. */
static const char *srv_tool_marker_token(const tokenizer *t, chat_tool_format f, int32_t id,
                                         size_t *n) {
    if (!tokenizer_is_control(t, id))
        return NULL;
    const char *text = tokenizer_token_text(t, id, true, n);
    const char *const *m;
    int nm = chat_tool_format_markers(f, &m);
    for (int k = 0; text && k < nm; k++)
        if (strlen(m[k]) == *n && !memcmp(m[k], text, *n))
            return text;
    return NULL;
}

/* Appends one position's logprob entry (chat shape) to c->lp. */
static void srv_choice_logprob(srv_gen *g, srv_choice *c, const eloop_event *ev) {
    const tokenizer *tok = g->s->sm.tok;
    size_t n;
    const char *t = tokenizer_token_text(tok, ev->token, true, &n);
    strbuf *sb = &c->lp;
    if (sb->len)
        strbuf_putc(sb, ',');
    if (g->p.chat) {
        strbuf_puts(sb, "{\"token\":");
        strbuf_json_str(sb, t, n, false);
        strbuf_puts(sb, ",\"logprob\":");
        strbuf_json_num(sb, ev->logprob);
        strbuf_putc(sb, ',');
        srv_json_token_bytes(sb, t, n);
        strbuf_puts(sb, ",\"top_logprobs\":[");
        for (int k = 0; k < ev->n_top && k < g->p.top_logprobs; k++) {
            size_t tn;
            const char *tt = tokenizer_token_text(tok, ev->top[k].token, true, &tn);
            strbuf_puts(sb, k ? ",{\"token\":" : "{\"token\":");
            strbuf_json_str(sb, tt, tn, false);
            strbuf_puts(sb, ",\"logprob\":");
            strbuf_json_num(sb, ev->top[k].logprob);
            strbuf_putc(sb, ',');
            srv_json_token_bytes(sb, tt, tn);
            strbuf_putc(sb, '}');
        }
        strbuf_puts(sb, "]}");
    } else {
        /* completions: keep [token, logprob, {alternatives}] triples; assembled at the end */
        strbuf_puts(sb, "[");
        strbuf_json_str(sb, t, n, false);
        strbuf_putc(sb, ',');
        strbuf_json_num(sb, ev->logprob);
        strbuf_puts(sb, ",{");
        for (int k = 0; k < ev->n_top && k < g->p.top_logprobs; k++) {
            size_t tn;
            const char *tt = tokenizer_token_text(tok, ev->top[k].token, true, &tn);
            if (k)
                strbuf_putc(sb, ',');
            strbuf_json_str(sb, tt, tn, false);
            strbuf_putc(sb, ':');
            strbuf_json_num(sb, ev->top[k].logprob);
        }
        strbuf_puts(sb, "}]");
    }
}

/* Applies one engine event to its choice. */
static void srv_choice_event(srv_gen *g, srv_choice *c, const eloop_event *ev) {
    srv_metrics *mt = g->s->metrics;
    c->n_cached = ev->n_cached;
    if (ev->token >= 0 && !c->stopped) {
        int64_t now = clock_now_ns();
        if (!g->first_token) {
            g->first_token = true;
            srv_metrics_observe(mt, SRV_H_TTFT, (double)(now - g->t_arrival_ns) * 1e-9);
        } else if (c->t_last_ns) {
            srv_metrics_observe(mt, SRV_H_ITL, (double)(now - c->t_last_ns) * 1e-9);
        }
        c->t_last_ns = now;
        c->n_tokens++;
        if (FLAG_FAULT(DETOK_SHARED) && ev->fault_step_tag)
            c->ts.skip_special = ev->fault_step_tag == 2; /* FAULT (a): the step's first flags */
        /* a control token that is one of the tool format's markers reaches the parser even when
         * special tokens are skipped (else a Mistral call would lose its [TOOL_CALLS]) */
        size_t mn;
        const char *marker =
            c->tp && c->ts.skip_special && !tokenizer_stream_pending(&c->ts)
                ? srv_tool_marker_token(g->s->sm.tok, g->s->tool_format, ev->token, &mn)
                : NULL;
        if (marker)
            strbuf_append(&c->raw, marker, mn);
        else
            tokenizer_stream_push(&c->ts, ev->token, &c->raw);
        if (g->p.logprobs && ev->has_logprobs)
            srv_choice_logprob(g, c, ev);
        if (srv_choice_release(g, c, false)) {
            c->stopped = true;
            c->finish = "stop";
            eloop_req_cancel(c->q);
        }
    }
    if (ev->finish == ENGINE_FINISH_NONE)
        return;
    if (ev->error) {
        c->done = true;
        c->engine_error = ev->error;
        c->finish = "error";
        if (ev->error == ERR_RANGE) { /* the server checked the context: the pool is smaller */
            int32_t len = g->p.prompt_lens[c->prompt_idx];
            snprintf(c->error, sizeof c->error,
                     "the request does not fit the server's KV cache: a prompt of %d tokens "
                     "with %d more to generate (max_tokens%s) needs more than the whole pool; "
                     "lower max_tokens",
                     len, g->p.max_tokens > 0 ? g->p.max_tokens : (int32_t)(g->s->sm.n_ctx - len),
                     g->p.max_tokens > 0 ? "" : ": as many as fit the context");
        } else
            snprintf(c->error, sizeof c->error, "the engine refused the request (%s)",
                     err_str(ev->error));
        return;
    }
    if (ev->finish == ENGINE_FINISH_CANCELLED && !c->stopped) {
        /* a cancel this handler did not ask for (its own come from a stop string, which sets
         * stopped, or from a client gone, after which nothing reads on): the server's shutdown
         * cut the request when --drain-timeout ran out. Its text is incomplete, so it does not
         * end as "stop" */
        c->done = true;
        c->cut = true;
        g->cut = true;
        c->finish = "error";
        if (c->n_tokens)
            snprintf(c->error, sizeof c->error,
                     "the server is shutting down: --drain-timeout (%d s) ran out after %d "
                     "generated tokens of this choice; its output is incomplete",
                     g->s->o.drain_timeout_s, c->n_tokens);
        else
            snprintf(c->error, sizeof c->error,
                     "the server is shutting down: --drain-timeout (%d s) ran out before this "
                     "request produced any output (it was still queued or in prefill)",
                     g->s->o.drain_timeout_s);
        return;
    }
    if (!c->stopped) {
        tokenizer_stream_flush(&c->ts, &c->raw);
        if (srv_choice_release(g, c, true))
            c->finish = "stop";
        else
            c->finish = ev->finish == ENGINE_FINISH_LENGTH ? "length" : "stop";
    }
    if (c->tp) {
        if (chat_tool_parser_finish(c->tp, &c->content) == ERR_FORMAT && !c->error[0])
            snprintf(c->error, sizeof c->error, "%s", err_detail());
        if (c->error[0]) {
            c->finish = "error";
            srv_metrics_tool_parse_failure(mt);
        } else if (chat_tool_parser_n_calls(c->tp) > 0) {
            c->finish = "tool_calls";
        }
    }
    c->done = true;
    srv_metrics_finish(mt, !strcmp(c->finish, "length")       ? SRV_FINISH_LENGTH
                           : !strcmp(c->finish, "tool_calls") ? SRV_FINISH_TOOL_CALLS
                                                              : SRV_FINISH_STOP);
    srv_metrics_tokens(mt, 0, c->n_tokens);
}

static bool srv_all_done(const srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (!g->ch[i].done)
            return false;
    return true;
}

/* Takes every event available now (waiting up to timeout_ms for the first). Returns true if any
 * arrived. */
static bool srv_gen_pump(srv_gen *g, int timeout_ms) {
    bool got = false;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        eloop_event ev;
        while (!c->done && eloop_req_next(c->q, &ev, 0) == 0) {
            srv_choice_event(g, c, &ev);
            got = true;
        }
    }
    if (got || srv_all_done(g))
        return got;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        eloop_event ev;
        if (!c->done) {
            if (eloop_req_next(c->q, &ev, timeout_ms) == 0) {
                srv_choice_event(g, c, &ev);
                return true;
            }
            break;
        }
    }
    return false;
}

static void srv_tool_call_json(strbuf *sb, const srv_gen *g, const srv_choice *c, int k,
                               bool with_index) {
    const chat_tool_call *call = chat_tool_parser_call(c->tp, k);
    const int32_t *pr = g->p.prompts[c->prompt_idx];
    uint64_t h = srv_fnv(1469598103934665603ull, pr, (size_t)g->p.prompt_lens[c->prompt_idx] * 4);
    h = srv_fnv(h, &c->index, sizeof c->index);
    h = srv_fnv(h, &k, sizeof k);
    h = srv_fnv(h, call->name, strlen(call->name));
    h = srv_fnv(h, call->arguments, strlen(call->arguments));
    strbuf_putc(sb, '{');
    if (with_index)
        strbuf_printf(sb, "\"index\":%d,", k);
    strbuf_printf(sb, "\"id\":\"call_%016llx\",\"type\":\"function\",\"function\":{\"name\":",
                  (unsigned long long)h);
    strbuf_json_str(sb, call->name, strlen(call->name), false);
    strbuf_puts(sb, ",\"arguments\":");
    strbuf_json_str(sb, call->arguments, strlen(call->arguments), false);
    strbuf_puts(sb, "}}");
}

/* usage, with prompt_tokens_details.cached_tokens (OpenAI's convention): prompt_tokens counts
 * each prompt once however many choices it has, cached_tokens the positions of each prompt taken
 * from the KV cache rather than computed, as its first choice saw them (the other choices of a
 * prompt share its K/V, so theirs would count the prompt again); completion_tokens sums every
 * choice. */
static void srv_usage_json(strbuf *sb, const srv_gen *g) {
    int64_t comp = 0, cached = 0;
    for (int i = 0; i < g->n_ch; i++) {
        comp += g->ch[i].n_tokens;
        if (i % g->p.n == 0)
            cached += g->ch[i].n_cached;
    }
    strbuf_printf(sb,
                  "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
                  "\"prompt_tokens_details\":{\"cached_tokens\":%lld}}",
                  (long long)g->prompt_tokens, (long long)comp,
                  (long long)(g->prompt_tokens + comp), (long long)cached);
}

/* The OpenAI error type (and code, or NULL) of engine error ee as the client should see it:
 * ERR_RANGE is a request larger than the context or the KV pool, ERR_INVAL one the engine
 * refused as invalid; anything else is the server's. */
static const char *srv_engine_error_type(int ee, const char **code) {
    *code = ee == ERR_RANGE ? "context_length_exceeded" : NULL;
    return ee == ERR_RANGE || ee == ERR_INVAL ? "invalid_request_error" : "server_error";
}

/* The choice's "error" object: the engine's refusal, or a tool call that did not parse. */
static void srv_choice_error_json(strbuf *sb, const srv_choice *c) {
    if (!c->error[0])
        return;
    if (c->cut) {
        strbuf_puts(sb, ",\"error\":{\"type\":\"server_shutdown_error\",\"code\":\"drain_timeout\","
                        "\"message\":");
        strbuf_json_str(sb, c->error, strlen(c->error), false);
        strbuf_putc(sb, '}');
        return;
    }
    const char *code = NULL;
    const char *type =
        c->engine_error ? srv_engine_error_type(c->engine_error, &code) : "tool_call_parse_error";
    strbuf_printf(sb, ",\"error\":{\"type\":\"%s\",", type);
    if (code) /* ERR_RANGE: the request does not fit; max_tokens is what to lower */
        strbuf_printf(sb, "\"code\":\"%s\",\"param\":\"max_tokens\",", code);
    strbuf_puts(sb, "\"message\":");
    strbuf_json_str(sb, c->error, strlen(c->error), false);
    strbuf_putc(sb, '}');
}

/* Completions logprobs object from the collected triples. */
static void srv_completion_logprobs(strbuf *sb, const srv_gen *g, const srv_choice *c) {
    arena *a = arena_create(0, 0);
    strbuf arr;
    strbuf_init(&arr);
    strbuf_putc(&arr, '[');
    strbuf_append(&arr, c->lp.data, c->lp.len);
    strbuf_putc(&arr, ']');
    json_value *v = NULL;
    if (!a || json_parse(a, arr.data, arr.len, &v)) {
        strbuf_puts(sb, "null");
    } else {
        strbuf_puts(sb, "{\"tokens\":[");
        for (size_t i = 0; i < v->arr.n; i++) {
            if (i)
                strbuf_putc(sb, ',');
            json_write(sb, v->arr.items[i]->arr.items[0]);
        }
        strbuf_puts(sb, "],\"token_logprobs\":[");
        for (size_t i = 0; i < v->arr.n; i++) {
            if (i)
                strbuf_putc(sb, ',');
            json_write(sb, v->arr.items[i]->arr.items[1]);
        }
        strbuf_puts(sb, "],\"top_logprobs\":[");
        for (size_t i = 0; i < v->arr.n; i++) {
            if (i)
                strbuf_putc(sb, ',');
            json_write(sb, v->arr.items[i]->arr.items[2]);
        }
        strbuf_puts(sb, "],\"text_offset\":[");
        size_t off = 0;
        for (size_t i = 0; i < v->arr.n; i++) {
            strbuf_printf(sb, i ? ",%zu" : "%zu", off);
            off += v->arr.items[i]->arr.items[0]->str.len;
        }
        strbuf_puts(sb, "]}");
    }
    (void)g;
    strbuf_deinit(&arr);
    arena_destroy(a);
}

/* Whitespace-only content beside tool calls is dropped (content: null), as OpenAI reports it. */
static bool srv_blank(const strbuf *sb) {
    for (size_t i = 0; i < sb->len; i++)
        if (sb->data[i] != ' ' && sb->data[i] != '\n' && sb->data[i] != '\t' && sb->data[i] != '\r')
            return false;
    return true;
}

static void srv_gen_head(strbuf *sb, const srv_gen *g, const char *object) {
    strbuf_puts(sb, "{\"id\":");
    strbuf_json_str(sb, g->id, strlen(g->id), false);
    strbuf_printf(sb, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object,
                  (long long)g->created);
    strbuf_json_str(sb, g->s->sm.name, strlen(g->s->sm.name), false);
    strbuf_puts(sb, ",\"system_fingerprint\":");
    strbuf_json_str(sb, g->s->fingerprint, strlen(g->s->fingerprint), false);
}

/* Whether g's client has gone away; called on every pump, so a request whose tokens keep coming is
 * checked as often as an idle one. The layer decides (srv_http_request_gone): a hang-up, a reset,
 * a failed write, or a read EOF that its probe of a half-closed client turned into a reset. */
static bool srv_gen_client_gone(const srv_gen *g) {
    return srv_http_request_gone(g->req);
}

int srv_gen_complete(srv_gen *g, strbuf *out, srv_err *e) {
    while (!srv_all_done(g)) {
        /* the client is checked on every pump, whether tokens came or not */
        srv_gen_pump(g, SRV_POLL_MS);
        if (!srv_all_done(g) && srv_gen_client_gone(g)) {
            g->aborted = true;
            return ERR_CANCELLED;
        }
    }
    for (int i = 0; i < g->n_ch; i++) {
        int ee = g->ch[i].engine_error;
        if (ee) {
            const char *code;
            const char *type = srv_engine_error_type(ee, &code);
            srv_fail(e, strcmp(type, "server_error") ? 400 : 500, type,
                     ee == ERR_RANGE ? "max_tokens" : NULL, "%s", g->ch[i].error);
            e->code = code;
            return ERR_INTERNAL;
        }
    }
    for (int i = 0; i < g->n_ch; i++) {
        if (g->ch[i].cut) { /* a part of the answer is no answer: 503, as for the queued */
            srv_fail(e, 503, "server_shutdown_error", NULL, "%s", g->ch[i].error);
            e->code = "drain_timeout";
            return ERR_BUSY;
        }
    }
    /* a prefill's answer says how its transfer ended (disagg.h "Cancel"): the router cancels
     * the decode side's wait when it did not arrive; "none": the prompt had nothing to send */
    const char *xfer = NULL;
    if (g->p.xfer_id && !g->p.xfer_recv)
        xfer = !g->tx ? "none" : disagg_tx_wait(g->tx) ? "failed" : "sent";
    srv_metrics_tokens(g->s->metrics, g->prompt_tokens, 0);
    srv_metrics_observe(g->s->metrics, SRV_H_E2E,
                        (double)(clock_now_ns() - g->t_arrival_ns) * 1e-9);
    srv_gen_head(out, g, g->p.chat ? "chat.completion" : "text_completion");
    strbuf_puts(out, ",\"choices\":[");
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        strbuf_printf(out, "%s{\"index\":%d,", i ? "," : "", i);
        if (g->p.chat) {
            int n_calls = c->tp ? chat_tool_parser_n_calls(c->tp) : 0;
            strbuf_puts(out, "\"message\":{\"role\":\"assistant\",\"content\":");
            if (n_calls && srv_blank(&c->content))
                strbuf_puts(out, "null");
            else
                strbuf_json_str(out, c->content.data, c->content.len, false);
            if (n_calls) {
                strbuf_puts(out, ",\"tool_calls\":[");
                for (int k = 0; k < n_calls; k++) {
                    if (k)
                        strbuf_putc(out, ',');
                    srv_tool_call_json(out, g, c, k, false);
                }
                strbuf_putc(out, ']');
            }
            strbuf_puts(out, "},\"logprobs\":");
            if (g->p.logprobs) {
                strbuf_puts(out, "{\"content\":[");
                strbuf_append(out, c->lp.data, c->lp.len);
                strbuf_puts(out, "]}");
            } else {
                strbuf_puts(out, "null");
            }
        } else {
            strbuf_puts(out, "\"text\":");
            if (g->p.echo) {
                strbuf text;
                strbuf_init(&text);
                tokenizer_decode(g->s->sm.tok, g->p.prompts[c->prompt_idx],
                                 (size_t)g->p.prompt_lens[c->prompt_idx], false, &text);
                strbuf_append(&text, c->content.data, c->content.len);
                strbuf_json_str(out, text.data, text.len, false);
                strbuf_deinit(&text);
            } else {
                strbuf_json_str(out, c->content.data, c->content.len, false);
            }
            strbuf_puts(out, ",\"logprobs\":");
            if (g->p.logprobs)
                srv_completion_logprobs(out, g, c);
            else
                strbuf_puts(out, "null");
        }
        strbuf_printf(out, ",\"finish_reason\":\"%s\"", c->finish);
        srv_choice_error_json(out, c);
        strbuf_putc(out, '}');
    }
    strbuf_puts(out, "],\"usage\":");
    srv_usage_json(out, g);
    if (xfer)
        strbuf_printf(out, ",\"kv_transfer\":{\"id\":\"%016llx\",\"status\":\"%s\"}",
                      (unsigned long long)g->p.xfer_id, xfer);
    strbuf_putc(out, '}');
    return strbuf_failed(out) ? ERR_NOMEM : 0;
}

/* ---- streaming ---- */

static void srv_sse_begin(srv_gen *g) {
    strbuf_puts(&g->out, "data: ");
    srv_gen_head(&g->out, g, g->p.chat ? "chat.completion.chunk" : "text_completion");
}

static void srv_sse_end(srv_gen *g) {
    strbuf_puts(&g->out, "}\n\n");
}

/* Writes whatever choice c has ready: role chunk, content delta, new tool calls, finish. */
static void srv_stream_choice(srv_gen *g, srv_choice *c) {
    if (g->p.chat && !c->role_sent) {
        srv_sse_begin(g);
        strbuf_printf(&g->out,
                      ",\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\","
                      "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]",
                      c->index);
        srv_sse_end(g);
        c->role_sent = true;
    }
    if (!g->p.chat && g->p.echo && !c->echo_sent) {
        /* echo: the prompt's text is the choice's first text, as in the whole response */
        strbuf text;
        strbuf_init(&text);
        tokenizer_decode(g->s->sm.tok, g->p.prompts[c->prompt_idx],
                         (size_t)g->p.prompt_lens[c->prompt_idx], false, &text);
        if (text.len && !strbuf_failed(&text)) {
            srv_sse_begin(g);
            strbuf_printf(&g->out, ",\"choices\":[{\"index\":%d,\"text\":", c->index);
            strbuf_json_str(&g->out, text.data, text.len, false);
            strbuf_puts(&g->out, ",\"logprobs\":null,\"finish_reason\":null}]");
            srv_sse_end(g);
        }
        strbuf_deinit(&text);
        c->echo_sent = true;
    }
    bool has_lp = g->p.logprobs && c->lp.len > c->lp_sent;
    if (c->content.len || has_lp) {
        srv_sse_begin(g);
        strbuf_printf(&g->out, ",\"choices\":[{\"index\":%d,", c->index);
        if (g->p.chat) {
            strbuf_puts(&g->out, "\"delta\":{\"content\":");
            strbuf_json_str(&g->out, c->content.data, c->content.len, false);
            strbuf_puts(&g->out, "},\"logprobs\":");
            if (has_lp) {
                strbuf_puts(&g->out, "{\"content\":[");
                const char *lp = c->lp.data + c->lp_sent;
                size_t n = c->lp.len - c->lp_sent;
                if (n && lp[0] == ',')
                    lp++, n--;
                strbuf_append(&g->out, lp, n);
                strbuf_puts(&g->out, "]}");
                c->lp_sent = c->lp.len;
            } else {
                strbuf_puts(&g->out, "null");
            }
        } else {
            strbuf_puts(&g->out, "\"text\":");
            strbuf_json_str(&g->out, c->content.data, c->content.len, false);
            strbuf_puts(&g->out, ",\"logprobs\":null");
        }
        strbuf_puts(&g->out, ",\"finish_reason\":null}]");
        srv_sse_end(g);
        strbuf_reset(&c->content);
    }
    int n_calls = c->tp ? chat_tool_parser_n_calls(c->tp) : 0;
    while (c->calls_sent < n_calls) {
        srv_sse_begin(g);
        strbuf_printf(&g->out, ",\"choices\":[{\"index\":%d,\"delta\":{\"tool_calls\":[", c->index);
        srv_tool_call_json(&g->out, g, c, c->calls_sent, true);
        strbuf_puts(&g->out, "]},\"logprobs\":null,\"finish_reason\":null}]");
        srv_sse_end(g);
        c->calls_sent++;
    }
    if (c->done && c->finish) {
        srv_sse_begin(g);
        if (g->p.chat)
            strbuf_printf(&g->out,
                          ",\"choices\":[{\"index\":%d,\"delta\":{},\"logprobs\":null,"
                          "\"finish_reason\":\"%s\"",
                          c->index, c->finish);
        else
            strbuf_printf(&g->out,
                          ",\"choices\":[{\"index\":%d,\"text\":\"\",\"logprobs\":null,"
                          "\"finish_reason\":\"%s\"",
                          c->index, c->finish);
        srv_choice_error_json(&g->out, c);
        strbuf_puts(&g->out, "}]");
        srv_sse_end(g);
        c->finish = NULL; /* written */
    }
}

/* Sends g->out as one chunk, beginning the stream first if it has not begun. While the client's
 * output buffer is full the write waits (the engine goes on producing; its events wait in the
 * request's queue). Returns 0, or ERR_CANCELLED when the client is gone. */
static int srv_gen_flush(srv_gen *g, bool *begun) {
    if (!g->out.len)
        return 0;
    if (strbuf_failed(&g->out))
        return ERR_NOMEM;
    if (!*begun) {
        int rc = srv_http_stream_begin(g->req, 200,
                                       "Content-Type: text/event-stream\r\n"
                                       "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
        if (rc)
            return rc;
        *begun = true;
    }
    int rc;
    while ((rc = srv_http_stream_write(g->req, g->out.data, g->out.len, 100 * SRV_POLL_MS)) ==
           ERR_BUSY)
        ;
    strbuf_reset(&g->out);
    return rc;
}

void srv_gen_stream(srv_gen *g) {
    bool begun = false, probed = false;
    for (;;) {
        if (srv_gen_flush(g, &begun)) {
            g->aborted = true; /* the client is gone (or out of memory): cancel the rest */
            for (int i = 0; i < g->n_ch; i++)
                if (!g->ch[i].done)
                    eloop_req_cancel(g->ch[i].q);
            return;
        }
        if (g->finished) {
            srv_http_stream_end(g->req);
            return;
        }
        if (srv_all_done(g)) {
            for (int i = 0; i < g->n_ch; i++)
                srv_stream_choice(g, &g->ch[i]);
            g->finished = true;
            if (g->cut) {
                /* cut by the shutdown: after the choices' finish chunks (finish_reason "error"
                 * with the error object), an error event as OpenAI streams one, and no [DONE]:
                 * the stream did not complete */
                for (int i = 0; i < g->n_ch; i++) {
                    const srv_choice *c = &g->ch[i];
                    if (!c->cut)
                        continue;
                    strbuf_puts(&g->out, "data: {\"error\":{\"message\":");
                    strbuf_json_str(&g->out, c->error, strlen(c->error), false);
                    strbuf_puts(&g->out, ",\"type\":\"server_shutdown_error\",\"param\":null,"
                                         "\"code\":\"drain_timeout\"}}\n\n");
                    break;
                }
                continue;
            }
            if (g->p.include_usage) {
                srv_sse_begin(g);
                strbuf_puts(&g->out, ",\"choices\":[],\"usage\":");
                srv_usage_json(&g->out, g);
                srv_sse_end(g);
            }
            strbuf_puts(&g->out, "data: [DONE]\n\n");
            srv_metrics_tokens(g->s->metrics, g->prompt_tokens, 0);
            srv_metrics_observe(g->s->metrics, SRV_H_E2E,
                                (double)(clock_now_ns() - g->t_arrival_ns) * 1e-9);
            continue;
        }
        /* the client is checked on every pump, whether tokens came or not */
        bool got = srv_gen_pump(g, SRV_POLL_MS);
        if (srv_gen_client_gone(g)) {
            g->aborted = true;
            for (int i = 0; i < g->n_ch; i++)
                if (!g->ch[i].done)
                    eloop_req_cancel(g->ch[i].q);
            return;
        }
        /* a begun stream whose client's read side ended: an SSE comment line, which a
         * half-closed client ignores and a closed socket answers with a reset (gone), so a
         * stream that is not producing (a held engine, a long prefill) still notices */
        if (begun && !probed && srv_http_request_eof(g->req)) {
            probed = true;
            strbuf_puts(&g->out, ":\n\n");
        }
        if (got)
            for (int i = 0; i < g->n_ch; i++)
                if (!g->ch[i].done || g->ch[i].finish)
                    srv_stream_choice(g, &g->ch[i]);
    }
}
