/* SPDX-License-Identifier: MIT */
/*
 * cmd_serve: `verity serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--max-batch N] [--ctx N]
 * [--kv-mem MiB] [--chunk N] [--queue-max N] [--api-key KEY | --api-key-file F]
 * [--drain-timeout S] [--served-model-name NAME[,ALIAS...]] [--chat-template NAME|FILE]
 * [--chat-template-kwargs JSON] [-t THREADS]`; every option is also a VERITY_* environment
 * variable (they are toggles in the registry, flags.h).
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
 * SIGTERM / SIGINT: stop accepting (new requests get 503), let in-flight requests finish for up
 * to --drain-timeout seconds, then exit 0.
 */
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "cli/cli.h"
#include "template/chat_source.h"
#include "cli/cli_model.h"
#include "engine/engine_loop.h"
#include "server/server.h"
#include "server/srv_metrics.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int serve_read_key_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_usage_error("serve", "--api-key-file %s: cannot open", path);
    if (!fgets(buf, (int)cap, f)) {
        fclose(f);
        return cli_usage_error("serve", "--api-key-file %s: empty", path);
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = 0;
    if (!buf[0])
        return cli_usage_error("serve", "--api-key-file %s: empty first line", path);
    return 0;
}

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

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(v = cli_next("serve", argc, argv, &i)))
                return 2;
            model_path = v;
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
    char key[512] = "";
    const char *key_file = flags_str(FLAG_API_KEY_FILE);
    if (flags_str(FLAG_API_KEY)[0] && key_file[0])
        return cli_usage_error("serve", "give --api-key or --api-key-file, not both");
    if (key_file[0]) {
        int st = serve_read_key_file(key_file, key, sizeof key);
        if (st)
            return st;
    } else {
        snprintf(key, sizeof key, "%s", flags_str(FLAG_API_KEY));
    }

    /* option values are checked before anything listens: a bad one exits 2 */
    char names_buf[512];
    const char *names[SERVE_MAX_NAMES];
    int n_names =
        serve_split_names(flags_str(FLAG_SERVED_MODEL_NAME), names_buf, sizeof names_buf, names);
    if (n_names < 0)
        return 2;
    const char *tmpl_spec = flags_str(FLAG_CHAT_TEMPLATE);
    arena *kw_arena = arena_create(0, 0);
    const json_value *kwargs = NULL;
    if (!kw_arena)
        return cli_fail("serve", err_set(ERR_NOMEM, "out of memory"));
    if (chat_source_parse_kwargs(kw_arena, flags_str(FLAG_CHAT_TEMPLATE_KWARGS), &kwargs)) {
        arena_destroy(kw_arena);
        return cli_usage_error("serve", "--chat-template-kwargs: %s", err_detail());
    }
    chat_source tsrc;
    memset(&tsrc, 0, sizeof tsrc);
    chat_template *tmpl = NULL;
    int st = tmpl_spec[0] ? serve_load_template(NULL, tmpl_spec, &tsrc, &tmpl) : 0;
    if (st) {
        arena_destroy(kw_arena);
        return st;
    }

    /* signals are handled synchronously by this thread (sigwait); block them everywhere */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    server_opts so = {.host = flags_str(FLAG_HOST),
                      .port = (int)flags_int(FLAG_PORT),
                      .queue_max = flags_int(FLAG_QUEUE_MAX),
                      .api_key = key,
                      .timeout_s = (int)flags_int(FLAG_TIMEOUT),
                      .max_body_bytes = (size_t)flags_int(FLAG_MAX_BODY) << 20,
                      .max_batch = flags_int(FLAG_MAX_BATCH),
                      .admin_api = flags_int(FLAG_ADMIN_API) != 0};
    server *srv;
    int rc = server_create(&so, &srv);
    if (rc) {
        chat_template_destroy(tmpl);
        chat_source_deinit(&tsrc);
        arena_destroy(kw_arena);
        return cli_fail("serve", rc);
    }
    fprintf(stderr, "verity serve: loading on http://%s:%d\n", so.host, server_port(srv));
    cli_model cm;
    int status = cli_model_open("serve", model_path, &cm);
    if (!status && !tmpl_spec[0])
        status = serve_load_template(model_get_gguf(cm.m), "", &tsrc, &tmpl);
    if (status) {
        chat_template_destroy(tmpl);
        chat_source_deinit(&tsrc);
        arena_destroy(kw_arena);
        server_destroy(srv);
        return status;
    }
    engine_opts eo;
    engine_opts_from_flags(&eo, cm.m);
    engine *e = NULL;
    engine_loop *loop = NULL;
    srv_metrics *hook_metrics = server_metrics(srv);
    if ((rc = engine_create(cm.m, cm.tok, &eo, &e)) ||
        (rc = engine_loop_create(e, serve_on_step, hook_metrics, &loop))) {
        status = cli_fail("serve", rc);
        engine_destroy(e);
        chat_template_destroy(tmpl);
        chat_source_deinit(&tsrc);
        arena_destroy(kw_arena);
        cli_model_close(&cm);
        server_destroy(srv);
        return status;
    }
    char name[256];
    gguf_str gn;
    if (n_names > 0) {
        snprintf(name, sizeof name, "%s", names[0]);
    } else if (model_path && *model_path) {
        const char *base = strrchr(model_path, '/');
        snprintf(name, sizeof name, "%s", base ? base + 1 : model_path);
    } else if (cm.is_default) {
        snprintf(name, sizeof name, "stories260K");
    } else if (gguf_get_str(model_get_gguf(cm.m), "general.name", &gn) == 0) {
        snprintf(name, sizeof name, "%.*s", (int)(gn.len > 200 ? 200 : gn.len), gn.s);
    } else {
        snprintf(name, sizeof name, "verity-default");
    }
    server_model sm = {.name = name,
                       .names = n_names > 0 ? names : NULL,
                       .n_names = n_names,
                       .m = cm.m,
                       .tok = cm.tok,
                       .tmpl = tmpl,
                       .tmpl_src = tsrc.text,
                       .tmpl_src_len = tsrc.len,
                       .template_kwargs = kwargs,
                       .loop = loop,
                       .n_ctx = engine_n_ctx(e)};
    server_set_ready(srv, &sm);
    fprintf(stderr,
            "verity serve: listening on http://%s:%d (model %s, context %lld, batch %d, "
            "%d threads)\n",
            so.host, server_port(srv), name, (long long)sm.n_ctx, eo.max_batch, eo.threads);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "verity serve: %s: draining (up to %lld s)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)flags_int(FLAG_DRAIN_TIMEOUT));
    server_drain(srv);
    int64_t deadline = clock_now_ns() + flags_int(FLAG_DRAIN_TIMEOUT) * 1000000000LL;
    while (engine_loop_pending(loop) > 0 && clock_now_ns() < deadline) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    int64_t left = engine_loop_pending(loop);
    if (left)
        fprintf(stderr, "verity serve: drain timeout: cancelling %lld request(s)\n",
                (long long)left);
    /* cancel what is left (their handlers finish with an error), then stop the connection
     * threads, which may still read the loop's stats (/metrics), then free the loop */
    engine_loop_stop(loop);
    server_destroy(srv);
    engine_loop_destroy(loop);
    engine_destroy(e);
    chat_template_destroy(tmpl);
    chat_source_deinit(&tsrc);
    arena_destroy(kw_arena);
    cli_model_close(&cm);
    fprintf(stderr, "verity serve: stopped\n");
    return 0;
}
