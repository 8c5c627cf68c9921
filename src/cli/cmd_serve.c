/* SPDX-License-Identifier: MIT */
/*
 * cmd_serve: `verity serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--max-batch N] [--ctx N]
 * [--kv-mem MiB] [--chunk N] [--queue-max N] [--api-key KEY | --api-key-file F]
 * [--drain-timeout S] [--timeout S] [--max-body MIB] [--max-body-total MIB] [--max-conns N]
 * [--max-conns-per-addr N]
 * [--served-model-name NAME[,ALIAS...]] [--chat-template NAME|FILE]
 * [--chat-template-kwargs JSON] [--spec off|ngram|draft|mtp] [--spec-k K] [--draft-model FILE]
 * [--role prefill|decode|both] [--kv-transport tcp|ucx] [--kv-listen HOST:PORT]
 * [--kv-xfer-timeout MS] [-t THREADS]`; every option is also a VERITY_* environment variable (they are toggles in the
 * registry, flags.h).
 * Speculation: --spec draft needs --draft-model (checked before anything listens); a draft model
 * whose vocabulary differs from the model's, and --spec mtp on a model without MTP layers, exit 2
 * with one line naming why, once the model is loaded.
 *
 * Names: /v1/models lists every name of --served-model-name and a request's "model" may be any of
 * them; responses report the first. Without it the one name is the file name of -m (or
 * "stories260K" for the embedded default, else the GGUF's general.name).
 * Chat template: --chat-template (a built-in name or a file, chat_source.h) replaces the model's
 * own; a bad one exits 2 before anything listens. A broken template inside the model only turns
 * /v1/chat/completions off, with a warning. --chat-template-kwargs gives default template
 * variables, which a request's chat_template_kwargs replaces key by key.
 *
 * Start-up order: listen first (so /health answers 503 "loading" at once), then load the model,
 * its tokenizer and chat template, start the engine thread, and turn ready. Prints one line
 * "verity serve: listening on http://HOST:PORT (model NAME)" on stderr when ready.
 * SIGTERM / SIGINT: stop accepting (new requests get 503), let in-flight requests (running and
 * queued) finish for up to --drain-timeout seconds; those still unfinished then are cut and
 * answered 503 with an error naming the drain (a stream ends with an error event), never a
 * truncated "stop"; exit 0.
 */
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "cli/cli.h"
#include "template/chat_source.h"
#include "cli/cli_model.h"
#include "disagg/disagg.h"
#include "disagg/kv_xfer.h"
#include "engine/engine_loop.h"
#include "kv/kv_tier.h"
#include "server/server.h"
#include "server/srv_metrics.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SERVE_MAX_NAMES 16

/* Splits --served-model-name's comma-separated list into names (pointers into buf). Returns the
 * count (0 when the option is empty), or -1 after printing a usage error. */
static int serve_split_names(const char *list, char *buf, size_t cap, const char **names) {
    if (!list[0])
        return 0;
    snprintf(buf, cap, "%s", list);
    int n = 0;
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = 0;
        if (!*p) {
            cli_usage_error("serve", "--served-model-name '%s': empty name", list);
            return -1;
        }
        if (n == SERVE_MAX_NAMES) {
            cli_usage_error("serve", "--served-model-name: more than %d names", SERVE_MAX_NAMES);
            return -1;
        }
        names[n++] = p;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

/* Resolves the chat template: --chat-template's (spec non-empty; an error exits 2) or the
 * model's own (g non-NULL; an unusable one is a warning and no template). */
static int serve_load_template(const gguf *g, const char *spec, chat_source *src,
                               chat_template **tmpl) {
    *tmpl = NULL;
    int rc = chat_source_load(g, spec, src);
    if (rc)
        return cli_usage_error("serve", "--chat-template: %s", err_detail());
    if (!src->text)
        return 0;
    if ((rc = chat_template_create(src->text, src->len, tmpl))) {
        *tmpl = NULL;
        if (spec[0]) {
            int st = cli_usage_error("serve", "--chat-template: %s: %s", src->origin, err_detail());
            chat_source_deinit(src);
            return st;
        }
        log_warn("the model's chat template cannot be used (%s); /v1/chat/completions is off "
                 "(give one with --chat-template)",
                 err_detail());
        chat_source_deinit(src);
    }
    return 0;
}

/* The engine loop's per-step hook feeds the batch-size and step-time histograms. */
static void serve_on_step(void *ud, int64_t n_seqs, int64_t n_tokens, double seconds) {
    (void)n_tokens;
    srv_metrics *m = ud;
    srv_metrics_observe(m, SRV_H_BATCH, (double)n_seqs);
    srv_metrics_observe(m, SRV_H_STEP, seconds);
}

/* Everything cmd_serve sets up, in the order it is set up; serve_teardown frees it in reverse. */
typedef struct serve_state {
    const char *model_path;
    char key[512];
    char names_buf[512];
    const char *names[SERVE_MAX_NAMES];
    int n_names;
    const char *tmpl_spec;
    arena *kw_arena;
    const json_value *kwargs;
    chat_source tsrc;
    chat_template *tmpl;
    sigset_t sigs;
    server_opts so;
    server *srv;
    cli_model cm;
    engine_opts eo;
    engine *e;
    engine_loop *loop;
    disagg_rx *rx; /* --role decode: the KV receiver */
    char name[256];
} serve_state;

/* Parses the command line (-m, -t; everything else is a toggle, flags.h); returns 0, or 2 after a
 * usage error. */
static int serve_parse_args(int argc, char **argv, serve_state *s) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(v = cli_next("serve", argc, argv, &i)))
                return 2;
            s->model_path = v;
        } else if (!strcmp(a, "-t")) {
            if (!(v = cli_next("serve", argc, argv, &i)))
                return 2;
            if (flags_set("threads", v))
                return cli_usage_error("serve", "%s", err_detail());
        } else {
            return cli_usage_error("serve",
                                   "unknown option '%s' (options: -m MODEL, -t N, and the "
                                   "toggles listed by `verity flags`)",
                                   a);
        }
    }
    return 0;
}

/* Fills s->key from --api-key or the first line of --api-key-file (not both). */
static int serve_load_key(serve_state *s) {
    return cli_load_api_key("serve", s->key, sizeof s->key);
}

/* Checks the option values before anything listens (a bad one exits 2): the served names, the
 * template kwargs and --chat-template. On failure nothing is left to free. */
static int serve_load_options(serve_state *s) {
    s->n_names = serve_split_names(flags_str(FLAG_SERVED_MODEL_NAME), s->names_buf,
                                   sizeof s->names_buf, s->names);
    if (s->n_names < 0)
        return 2;
    if (!kv_xfer_transport_find(flags_str(FLAG_KV_TRANSPORT)))
        return cli_usage_error("serve", "--kv-transport: %s", err_detail());
    if (!strcmp(flags_str(FLAG_ROLE), "decode")) { /* checked before anything listens */
        const char *kl = flags_str(FLAG_KV_LISTEN), *colon = strrchr(kl, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || colon == kl || !colon[1] || *end || port < 0 || port > 65535)
            return cli_usage_error("serve", "--kv-listen '%s': expected HOST:PORT (port 0..65535)",
                                   kl);
    }
    if (!strcmp(flags_str(FLAG_SPEC), "draft") && !flags_str(FLAG_DRAFT_MODEL)[0])
        return cli_usage_error("serve", "--spec draft needs --draft-model FILE");
    const char *redis = flags_str(FLAG_KV_REDIS);
    if (redis[0] && kv_tier_redis_url_check(redis))
        return cli_usage_error("serve", "--kv-redis: %s", err_detail());
    s->tmpl_spec = flags_str(FLAG_CHAT_TEMPLATE);
    s->kw_arena = arena_create(0, 0);
    s->kwargs = NULL;
    if (!s->kw_arena)
        return cli_fail("serve", err_set(ERR_NOMEM, "out of memory"));
    if (chat_source_parse_kwargs(s->kw_arena, flags_str(FLAG_CHAT_TEMPLATE_KWARGS), &s->kwargs)) {
        arena_destroy(s->kw_arena);
        return cli_usage_error("serve", "--chat-template-kwargs: %s", err_detail());
    }
    memset(&s->tsrc, 0, sizeof s->tsrc);
    s->tmpl = NULL;
    int st = s->tmpl_spec[0] ? serve_load_template(NULL, s->tmpl_spec, &s->tsrc, &s->tmpl) : 0;
    if (st) {
        arena_destroy(s->kw_arena);
        return st;
    }
    return 0;
}

/* Signals are handled synchronously by this thread (sigwait); blocks them everywhere. */
static void serve_block_signals(serve_state *s) {
    sigemptyset(&s->sigs);
    sigaddset(&s->sigs, SIGTERM);
    sigaddset(&s->sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &s->sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Listens (answering 503 "loading"), then loads the model, its chat template (unless
 * --chat-template gave one) and starts the engine thread. On failure frees what it made and what
 * serve_load_options made. */
static int serve_start(serve_state *s) {
    s->so = (server_opts){.host = flags_str(FLAG_HOST),
                          .port = (int)flags_int(FLAG_PORT),
                          .queue_max = flags_int(FLAG_QUEUE_MAX),
                          .api_key = s->key,
                          .timeout_s = (int)flags_int(FLAG_TIMEOUT),
                          .max_body_bytes = (size_t)flags_int(FLAG_MAX_BODY) << 20,
                          .max_body_total_bytes = (size_t)flags_int(FLAG_MAX_BODY_TOTAL) << 20,
                          .max_conns = (int)flags_int(FLAG_MAX_CONNS),
                          .max_conns_per_addr = (int)flags_int(FLAG_MAX_CONNS_PER_ADDR),
                          .nagle = flags_int(FLAG_HTTP_NODELAY) == 0,
                          .send_each_write = flags_int(FLAG_HTTP_APPEND_BLOCKED) == 0,
                          .max_batch = flags_int(FLAG_MAX_BATCH),
                          .drain_timeout_s = (int)flags_int(FLAG_DRAIN_TIMEOUT),
                          .admin_api = flags_int(FLAG_ADMIN_API) != 0};
    int rc = server_create(&s->so, &s->srv);
    if (rc) {
        chat_template_destroy(s->tmpl);
        chat_source_deinit(&s->tsrc);
        arena_destroy(s->kw_arena);
        return cli_fail("serve", rc);
    }
    /* info, not a line of its own on stderr: a bad model file must leave exactly one line (the
     * error) there */
    log_info("loading the model; /health answers 503 on http://%s:%d meanwhile", s->so.host,
             server_port(s->srv));
    int status = cli_model_open("serve", s->model_path, &s->cm);
    if (!status && !s->tmpl_spec[0])
        status = serve_load_template(model_get_gguf(s->cm.m), "", &s->tsrc, &s->tmpl);
    if (status) {
        chat_template_destroy(s->tmpl);
        chat_source_deinit(&s->tsrc);
        arena_destroy(s->kw_arena);
        server_destroy(s->srv);
        return status;
    }
    engine_opts_from_flags(&s->eo, s->cm.m);
    s->e = NULL;
    s->loop = NULL;
    srv_metrics *hook_metrics = server_metrics(s->srv);
    if ((rc = engine_create(s->cm.m, s->cm.tok, &s->eo, &s->e)) ||
        (rc = engine_loop_create(s->e, serve_on_step, hook_metrics, &s->loop))) {
        status = cli_fail("serve", rc);
        engine_destroy(s->e);
        chat_template_destroy(s->tmpl);
        chat_source_deinit(&s->tsrc);
        arena_destroy(s->kw_arena);
        cli_model_close(&s->cm);
        server_destroy(s->srv);
        return status;
    }
    if (!strcmp(flags_str(FLAG_ROLE), "decode")) {
        disagg_rx_opts ro = {.transport = flags_str(FLAG_KV_TRANSPORT),
                             .listen = flags_str(FLAG_KV_LISTEN),
                             .identity = engine_kv_identity(s->e),
                             .timeout_ms = (int)flags_int(FLAG_KV_XFER_TIMEOUT)};
        engine_kv_pool_opts(s->e, &ro.pool);
        if ((rc = disagg_rx_create(&ro, &s->rx))) {
            status = rc == ERR_CONNECT || rc == ERR_INVAL
                         ? cli_usage_error("serve", "--kv-listen: %s", err_detail())
                         : cli_fail("serve", rc);
            engine_loop_destroy(s->loop);
            engine_destroy(s->e);
            chat_template_destroy(s->tmpl);
            chat_source_deinit(&s->tsrc);
            arena_destroy(s->kw_arena);
            cli_model_close(&s->cm);
            server_destroy(s->srv);
            return status;
        }
    }
    return 0;
}

/* Picks the reported model name: the first --served-model-name, else the file name of -m, else
 * "stories260K" for the embedded default, else the GGUF's general.name. */
static void serve_pick_name(serve_state *s) {
    gguf_str gn;
    if (s->n_names > 0) {
        snprintf(s->name, sizeof s->name, "%s", s->names[0]);
    } else if (s->model_path && *s->model_path) {
        const char *base = strrchr(s->model_path, '/');
        snprintf(s->name, sizeof s->name, "%s", base ? base + 1 : s->model_path);
    } else if (s->cm.is_default) {
        snprintf(s->name, sizeof s->name, "stories260K");
    } else if (gguf_get_str(model_get_gguf(s->cm.m), "general.name", &gn) == 0) {
        snprintf(s->name, sizeof s->name, "%.*s", (int)(gn.len > 200 ? 200 : gn.len), gn.s);
    } else {
        snprintf(s->name, sizeof s->name, "verity-default");
    }
}

/* Hands the model to the server, which turns ready, and prints the "listening" line. */
static void serve_set_ready(serve_state *s) {
    server_model sm = {.name = s->name,
                       .names = s->n_names > 0 ? s->names : NULL,
                       .n_names = s->n_names,
                       .m = s->cm.m,
                       .tok = s->cm.tok,
                       .tmpl = s->tmpl,
                       .tmpl_src = s->tsrc.text,
                       .tmpl_src_len = s->tsrc.len,
                       .template_kwargs = s->kwargs,
                       .loop = s->loop,
                       .n_ctx = engine_n_ctx(s->e),
                       .role = flags_str(FLAG_ROLE),
                       .kv_rx = s->rx,
                       .kv_pool = engine_kv_pool(s->e),
                       .kv_identity = engine_kv_identity(s->e),
                       .kv_block_size = s->eo.block_size,
                       .kv_transport = flags_str(FLAG_KV_TRANSPORT),
                       .kv_timeout_ms = (int)flags_int(FLAG_KV_XFER_TIMEOUT)};
    server_set_ready(s->srv, &sm);
    fprintf(stderr,
            "verity serve: listening on http://%s:%d (model %s, context %lld, batch %d, "
            "%d threads, speculation %s, role %s%s%s)\n",
            s->so.host, server_port(s->srv), s->name, (long long)sm.n_ctx, s->eo.max_batch,
            s->eo.threads, s->eo.spec && s->eo.spec[0] ? s->eo.spec : "off", sm.role,
            s->rx ? ", kv on " : "", s->rx ? disagg_rx_addr(s->rx) : "");
}

/* Seconds the handlers of requests cut by the drain timeout get to send their 503s. */
#define SERVE_CUT_GRACE_S 10

/* Waits for SIGTERM/SIGINT, stops accepting, and lets in-flight requests finish (generated and
 * their responses sent) for up to --drain-timeout seconds. Requests still queued keep their
 * place: they were accepted, and run if the timeout allows. When it runs out, whatever is left,
 * running or queued, is cut: the engine is stopped and each handler answers 503 with an error
 * naming the drain (a stream: an error event, srv_gen.c), never a truncated success. */
static void serve_wait_drain(serve_state *s) {
    int sig = 0;
    sigwait(&s->sigs, &sig);
    fprintf(stderr, "verity serve: %s: draining (up to %lld s)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)flags_int(FLAG_DRAIN_TIMEOUT));
    server_drain(s->srv);
    int64_t deadline = clock_now_ns() + flags_int(FLAG_DRAIN_TIMEOUT) * 1000000000LL;
    /* both: the engine's work, and the handlers still writing the last responses (the engine
     * is done with a request before its handler has sent it; stopping the daemon then would
     * cut that response off) */
    while ((engine_loop_pending(s->loop) > 0 || server_active(s->srv) > 0) &&
           clock_now_ns() < deadline) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    int64_t left = engine_loop_pending(s->loop);
    if (!left)
        return;
    fprintf(stderr, "verity serve: drain timeout: cutting %lld request(s)\n", (long long)left);
    /* cancel what is left: each handler answers 503 (a stream ends with an error event); let
     * them send those answers before the connections close, for a bounded time (a client that
     * does not read cannot hold the exit) */
    engine_loop_stop(s->loop);
    deadline = clock_now_ns() + SERVE_CUT_GRACE_S * 1000000000LL;
    while (server_active(s->srv) > 0 && clock_now_ns() < deadline) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Frees everything serve_start and serve_load_options made. */
static void serve_teardown(serve_state *s) {
    /* cancel what is left (their handlers finish with an error), then stop the connection
     * threads, which may still read the loop's stats (/metrics), then free the loop */
    engine_loop_stop(s->loop);
    server_destroy(s->srv);
    disagg_rx_destroy(s->rx); /* after the handlers: nothing expects a transfer any more */
    engine_loop_destroy(s->loop);
    engine_destroy(s->e);
    chat_template_destroy(s->tmpl);
    chat_source_deinit(&s->tsrc);
    arena_destroy(s->kw_arena);
    cli_model_close(&s->cm);
}

int cmd_serve(int argc, char **argv) {
    serve_state s;
    memset(&s, 0, sizeof s);
    int st;
    if ((st = serve_parse_args(argc, argv, &s)) || (st = serve_load_key(&s)) ||
        (st = serve_load_options(&s)))
        return st;
    serve_block_signals(&s);
    if ((st = serve_start(&s)))
        return st;
    serve_pick_name(&s);
    serve_set_ready(&s);
    serve_wait_drain(&s);
    serve_teardown(&s);
    fprintf(stderr, "verity serve: stopped\n");
    return 0;
}
