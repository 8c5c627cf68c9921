/* SPDX-License-Identifier: MIT */
/*
 * cmd_router: `verity router --replica URL[,URL...] | --prefill URL[,...] --decode URL[,...]
 * [--host 127.0.0.1] [--port 8080]
 * [--api-key KEY | --api-key-file FILE] [--backend-api-key KEY] [--timeout S] [--drain-timeout S]
 * [--max-body MIB] [--max-body-total MIB] [--max-conns N] [--max-conns-per-addr N]
 * [--router-workers N] [--router-health-ms MS] [--router-cache-aware 0|1]
 * [--router-balance-abs N] [--router-cache-pct P] [--router-cpus LIST]`: an OpenAI-compatible front over many
 * `verity serve` replicas (router/router.h). --replica may be repeated; every URL is
 * http://HOST:PORT.
 *
 * --prefill URL,... and --decode URL,... (both needed, and not with --replica): the disaggregated
 * flow (router.h): prefill servers (`verity serve --role prefill`) compute the prompt's KV and
 * send it to a decode server (`verity serve --role decode`), which continues from it.
 *
 * Bad input (no replica, a bad or repeated URL, an unknown option) exits 2 with one line on
 * stderr before anything listens. Prints "verity router: listening on http://HOST:PORT (N
 * replicas, M up)" on stderr when serving. SIGTERM / SIGINT: new requests get 503, those in
 * flight finish for up to --drain-timeout seconds, then the router closes; exit 0.
 */
#include "base/clock.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/flags.h"
#include "cli/cli.h"
#include "router/router.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUTER_URL_MAX 256

typedef struct router_args {
    char urls[ROUTER_MAX_BACKENDS][ROUTER_URL_MAX];
    const char *ptrs[ROUTER_MAX_BACKENDS];
    int roles[ROUTER_MAX_BACKENDS]; /* ROUTER_ROLE_* */
    int n;
    int n_rep, n_pre, n_dec;
    char key[512];
} router_args;

/* Adds the comma-separated URLs of list. Returns 0 or prints a usage error and returns 2. */
static int router_add_urls(router_args *a, const char *opt, const char *list, int role) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    int added = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (a->n == ROUTER_MAX_BACKENDS)
            return cli_usage_error("router", "%s: more than %d servers", opt, ROUTER_MAX_BACKENDS);
        if (router_url_check(t, a->urls[a->n], ROUTER_URL_MAX))
            return cli_usage_error("router", "%s: %s", opt, err_detail());
        for (int i = 0; i < a->n; i++)
            if (!strcmp(a->urls[i], a->urls[a->n]))
                return cli_usage_error("router", "%s: %s is given twice", opt, a->urls[i]);
        a->ptrs[a->n] = a->urls[a->n];
        a->roles[a->n] = role;
        a->n++;
        added++;
    }
    if (!added)
        return cli_usage_error("router", "%s: no URL in '%s'", opt, list);
    return 0;
}

static int router_parse_args(int argc, char **argv, router_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        bool rep = !strcmp(o, "--replica"), pre = !strcmp(o, "--prefill"),
             dec = !strcmp(o, "--decode");
        if (!rep && !pre && !dec)
            return cli_usage_error("router",
                                   "unknown option '%s' (options: --replica URL,..., and the "
                                   "toggles listed by `verity flags`)",
                                   o);
        if (!(v = cli_next("router", argc, argv, &i)))
            return 2;
        int role = rep ? ROUTER_ROLE_REPLICA : pre ? ROUTER_ROLE_PREFILL : ROUTER_ROLE_DECODE;
        int st = router_add_urls(a, o, v, role);
        if (st)
            return st;
    }
    for (int i = 0; i < a->n; i++)
        *(a->roles[i] == ROUTER_ROLE_REPLICA  ? &a->n_rep
          : a->roles[i] == ROUTER_ROLE_PREFILL ? &a->n_pre
                                               : &a->n_dec) += 1;
    if ((a->n_pre || a->n_dec) && a->n_rep)
        return cli_usage_error("router", "--replica cannot be mixed with --prefill/--decode (one "
                                         "router runs one flow)");
    if ((a->n_pre > 0) != (a->n_dec > 0))
        return cli_usage_error("router", "%s: the disaggregated flow needs both --prefill URL,... "
                                         "and --decode URL,...",
                               a->n_pre ? "--prefill without --decode" : "--decode without --prefill");
    if (!a->n)
        return cli_usage_error("router", "no backend: give --replica URL[,URL...]");
    return 0;
}

/* Waits for SIGTERM/SIGINT, then drains: new requests get 503 while those in flight finish, up
 * to --drain-timeout seconds. */
static void router_wait_drain(router *r, sigset_t *sigs) {
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "verity router: %s: draining (up to %lld s)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)flags_int(FLAG_DRAIN_TIMEOUT));
    router_drain(r);
    int64_t deadline = clock_now_ns() + flags_int(FLAG_DRAIN_TIMEOUT) * 1000000000LL;
    while (router_active(r) > 0 && clock_now_ns() < deadline) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (router_active(r) > 0)
        fprintf(stderr, "verity router: drain timeout: cutting %lld request(s)\n",
                (long long)router_active(r));
}

int cmd_router(int argc, char **argv) {
    static router_args a; /* 16 KiB of URLs: not on the stack */
    memset(&a, 0, sizeof a);
    int st;
    if ((st = router_parse_args(argc, argv, &a)) ||
        (st = cli_load_api_key("router", a.key, sizeof a.key)))
        return st;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    router_opts o = {.host = flags_str(FLAG_HOST),
                     .port = (int)flags_int(FLAG_PORT),
                     .replicas = a.ptrs,
                     .n_replicas = a.n,
                     .roles = a.roles,
                     .api_key = a.key,
                     .backend_api_key = flags_str(FLAG_BACKEND_API_KEY),
                     .timeout_s = (int)flags_int(FLAG_TIMEOUT),
                     .max_conns = (int)flags_int(FLAG_MAX_CONNS),
                     .max_conns_per_addr = (int)flags_int(FLAG_MAX_CONNS_PER_ADDR),
                     .max_body_bytes = (size_t)flags_int(FLAG_MAX_BODY) << 20,
                     .max_body_total_bytes = (size_t)flags_int(FLAG_MAX_BODY_TOTAL) << 20,
                     .workers = (int)flags_int(FLAG_ROUTER_WORKERS),
                     .health_ms = (int)flags_int(FLAG_ROUTER_HEALTH_MS),
                     .cache_aware = flags_int(FLAG_ROUTER_CACHE_AWARE) != 0,
                     .balance_abs = (int)flags_int(FLAG_ROUTER_BALANCE_ABS),
                     .cache_pct = (int)flags_int(FLAG_ROUTER_CACHE_PCT),
                     .nagle = flags_int(FLAG_HTTP_NODELAY) == 0,
                     .send_each_write = flags_int(FLAG_HTTP_APPEND_BLOCKED) == 0,
                     .direct_write = flags_int(FLAG_ROUTER_DIRECT_WRITE) != 0,
                     .loops = (int)flags_int(FLAG_ROUTER_LOOP)};
    /* before any thread starts: the event thread, the workers and the health thread inherit it */
    const char *cpus = flags_str(FLAG_ROUTER_CPUS);
    if (cpus[0] && cpu_pin_list(cpus))
        return cli_usage_error("router", "--router-cpus: %s", err_detail());
    router *r;
    int rc = router_create(&o, &r);
    if (rc)
        return cli_fail("router", rc);
    if (a.n_pre)
        fprintf(stderr,
                "verity router: listening on http://%s:%d (%d prefill and %d decode servers, %d "
                "up)\n",
                o.host, router_port(r), a.n_pre, a.n_dec, router_backends_up(r));
    else
        fprintf(stderr, "verity router: listening on http://%s:%d (%d replicas, %d up)\n", o.host,
                router_port(r), a.n, router_backends_up(r));
    router_wait_drain(r, &sigs);
    router_destroy(r);
    fprintf(stderr, "verity router: stopped\n");
    return 0;
}
