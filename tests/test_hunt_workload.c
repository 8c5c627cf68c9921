/* SPDX-License-Identifier: MIT */
/* Unit tests for src/hunt: workload determinism (same seed, same sessions; tool results are pure
 * functions of the arguments), the built-in tools, option parsing and word splitting, the
 * Prometheus parser, and bisect's launch templates. */
#include "test.h"
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "hunt/hunt_args.h"
#include "hunt/hunt_launch.h"
#include "hunt/hunt_metrics.h"
#include "hunt/hunt_tools.h"
#include "hunt/hunt_workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hunt_workload *make_workload(hunt_tools *t, uint64_t seed, int pad) {
    hunt_workload_cfg c = {.seed = seed,
                           .turns = 4,
                           .max_tokens = 64,
                           .logprobs = true,
                           .top_logprobs = 5,
                           .n_pads = 2,
                           .model = "m",
                           .tools = t};
    c.pads[0] = 0;
    c.pads[1] = pad;
    hunt_workload *w;
    if (hunt_workload_create(&c, &w))
        test_fail(__FILE__, __LINE__, "workload: %s", err_detail());
    return w;
}

static hunt_reply text_reply(const char *s) {
    hunt_reply r;
    memset(&r, 0, sizeof r);
    r.content = s;
    r.content_len = strlen(s);
    r.finish = "stop";
    return r;
}

/* Plays a session with fixed replies and returns the body of every turn, joined. */
static void play(hunt_workload *w, int64_t index, strbuf *all) {
    hunt_history *h;
    T_OK(hunt_history_create(w, index, &h));
    strbuf body;
    strbuf_init(&body);
    hunt_call call = {"random-id-1", "function", "read_file", "{\"path\": \"src/a.c\"}", 19};
    for (int t = 0; t < 4; t++) {
        hunt_history_body(w, h, hunt_history_len(h), -1, &body);
        strbuf_append(all, body.data, body.len);
        strbuf_putc(all, '\n');
        hunt_reply r = text_reply(t == 1 ? "" : "Done.");
        if (t == 1) {
            r.calls = &call;
            r.n_calls = 1;
            r.finish = "tool_calls";
        }
        T_OK(hunt_history_add_reply(w, h, t, &r));
    }
    /* the body of an earlier turn is reproducible from the history */
    hunt_history_body(w, h, 2, -1, &body);
    T_CHECK(strncmp(all->data, body.data, body.len) == 0);
    strbuf_deinit(&body);
    hunt_history_destroy(h);
}

static void t_workload_determinism(void) {
    hunt_tools *t;
    T_OK(hunt_tools_create_builtin(10, &t));
    hunt_workload *w1 = make_workload(t, 7, 2000), *w2 = make_workload(t, 7, 2000);
    hunt_workload *w3 = make_workload(t, 8, 2000);
    strbuf a, b, c, d;
    strbuf_init(&a);
    strbuf_init(&b);
    strbuf_init(&c);
    strbuf_init(&d);
    play(w1, 3, &a);
    play(w2, 3, &b);
    play(w3, 3, &c);
    play(w1, 4, &d);
    T_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    T_CHECK(!(a.len == c.len && memcmp(a.data, c.data, a.len) == 0)); /* other seed */
    T_CHECK(!(a.len == d.len && memcmp(a.data, d.data, a.len) == 0)); /* other session */
    /* every body is valid JSON with the tools and the canonical tool-call id */
    arena *ar = arena_create(0, 0);
    char *line = a.data;
    int n = 0;
    while (*line) {
        char *nl = strchr(line, '\n');
        json_value *v;
        T_OK(json_parse(ar, line, (size_t)(nl - line), &v));
        T_EQ_INT(json_get(v, "tools")->arr.n, 10);
        n++;
        line = nl + 1;
    }
    T_EQ_INT(n, 4);
    char id[10];
    hunt_call_id(hunt_workload_session_seed(w1, 3), 1, 0, id);
    T_EQ_INT(strlen(id), 9);
    T_CHECK(strstr(a.data, id) != NULL);
    T_CHECK(strstr(a.data, "random-id-1") == NULL);
    /* padding: session 3 has pad slot 1 (2000 tokens, ~8000 bytes) */
    int slot;
    T_EQ_INT(hunt_workload_pad(w1, 3, &slot), 2000);
    T_EQ_INT(slot, 1);
    T_CHECK(a.len > 4 * 8000);
    T_CHECK(d.len < a.len); /* session 4: no padding */
    arena_destroy(ar);
    strbuf_deinit(&a);
    strbuf_deinit(&b);
    strbuf_deinit(&c);
    strbuf_deinit(&d);
    hunt_workload_destroy(w1);
    hunt_workload_destroy(w2);
    hunt_workload_destroy(w3);
    hunt_tools_destroy(t);
}

static void t_tool_results(void) {
    hunt_tools *t;
    T_OK(hunt_tools_create_builtin(HUNT_TOOLS_BUILTIN, &t));
    T_EQ_INT(hunt_tools_count(t), 12);
    strbuf a, b, c;
    strbuf_init(&a);
    strbuf_init(&b);
    strbuf_init(&c);
    for (int i = 0; i < hunt_tools_count(t); i++) {
        const char *name = hunt_tools_name(t, i);
        strbuf_reset(&a);
        strbuf_reset(&b);
        strbuf_reset(&c);
        static const char x1[] = "{\"path\":\"src/x.c\",\"query\":\"q\"}";
        static const char x2[] = "{ \"path\" : \"src/x.c\", \"query\": \"q\" }";
        static const char y1[] = "{\"path\":\"src/y.c\",\"query\":\"q\"}";
        hunt_tools_execute(t, name, x1, sizeof x1 - 1, &a);
        hunt_tools_execute(t, name, x2, sizeof x2 - 1, &b);
        hunt_tools_execute(t, name, y1, sizeof y1 - 1, &c);
        T_CHECKF(a.len > 0 && strcmp(a.data, b.data) == 0, "%s: whitespace changed the result",
                 name);
        if (strcmp(name, "run_tests") && strcmp(name, "git_log") && strcmp(name, "find_files"))
            T_CHECKF(strcmp(a.data, c.data) != 0, "%s: different path, same result", name);
    }
    strbuf_reset(&a);
    hunt_tools_execute(t, "nope", "{}", 2, &a);
    T_CHECK(strstr(a.data, "unknown tool") != NULL);
    strbuf_reset(&a);
    hunt_tools_execute(t, "grep", "{\"pattern\":", 11, &a);
    T_CHECK(strstr(a.data, "invalid arguments") != NULL);
    /* the schemas are enforced */
    char why[256];
    int rf = hunt_tools_find(t, "read_file");
#define CHECK_ARGS(tool, text) hunt_tools_check_args(t, tool, text, strlen(text), why, sizeof why)
    T_EQ_INT(CHECK_ARGS(rf, "{\"path\":\"a\",\"start_line\":3}"), 0);
    T_EQ_INT(CHECK_ARGS(rf, "{\"start_line\":3}"), 2);
    T_EQ_INT(CHECK_ARGS(rf, "{\"path\":\"a\",\"start_line\":0}"), 2);
    int sd = hunt_tools_find(t, "search_docs");
    T_EQ_INT(CHECK_ARGS(sd, "{\"query\":\"x\",\"options\":{\"limit\":99}}"), 2);
    T_CHECKF(strstr(why, "arguments.options.limit") != NULL, "%s", why);
    strbuf_deinit(&a);
    strbuf_deinit(&b);
    strbuf_deinit(&c);
    hunt_tools_destroy(t);
    /* a user file replaces them */
    char path[600];
    snprintf(path, sizeof path, "%s/tools.json", test_tmpdir());
    FILE *f = fopen(path, "w");
    T_CHECK(f != NULL);
    fputs("[{\"name\":\"lookup\",\"parameters\":{\"type\":\"object\",\"properties\":{\"k\":"
          "{\"type\":\"string\"}},\"required\":[\"k\"]}}]",
          f);
    fclose(f);
    T_OK(hunt_tools_load(path, &t));
    T_EQ_INT(hunt_tools_count(t), 1);
    size_t jl;
    T_CHECK(strstr(hunt_tools_json(t, &jl), "\"type\":\"function\"") != NULL);
    hunt_tools_destroy(t);
    f = fopen(path, "w");
    fputs("[{\"parameters\":{}}]", f);
    fclose(f);
    T_EQ_INT(hunt_tools_load(path, &t), ERR_FORMAT);
    T_EQ_INT(hunt_tools_load("/nonexistent/tools.json", &t), ERR_IO);
}

/* skip_special_tokens alternates by session (even true, odd false), is the same in every turn of
 * a session, and is absent when switched off. */
static void t_skip_special(void) {
    hunt_tools *t;
    T_OK(hunt_tools_create_builtin(2, &t));
    hunt_workload *off = make_workload(t, 7, 0);
    hunt_workload_cfg c = *hunt_workload_config(off);
    c.skip_special = true;
    hunt_workload *on;
    T_OK(hunt_workload_create(&c, &on));
    strbuf a;
    strbuf_init(&a);
    for (int64_t i = 0; i < 4; i++) {
        strbuf_reset(&a);
        play(on, i, &a); /* 4 turns, one body per line */
        const char *want = i % 2 ? "\"skip_special_tokens\":false" : "\"skip_special_tokens\":true";
        const char *other =
            i % 2 ? "\"skip_special_tokens\":true" : "\"skip_special_tokens\":false";
        int n = 0;
        for (const char *p = a.data; (p = strstr(p, want)); p++)
            n++;
        T_CHECKF(n == 4, "session %lld: %d of 4 turns send %s", (long long)i, n, want);
        T_CHECK(strstr(a.data, other) == NULL);
        T_EQ_INT(hunt_workload_skip_special(on, i), i % 2 == 0);
        strbuf_reset(&a);
        play(off, i, &a);
        T_CHECK(strstr(a.data, "skip_special_tokens") == NULL);
        T_EQ_INT(hunt_workload_skip_special(off, i), -1);
    }
    strbuf_deinit(&a);
    hunt_workload_destroy(on);
    hunt_workload_destroy(off);
    hunt_tools_destroy(t);
}

static void t_args(void) {
    int argc;
    char **argv;
    char msg[256];
    T_OK(hunt_args_split("--url 'http://h:1/v1' --model \"a b\" x\\ y  ", &argc, &argv, msg,
                         sizeof msg));
    T_EQ_INT(argc, 5);
    T_CHECK(!strcmp(argv[1], "http://h:1/v1") && !strcmp(argv[3], "a b") &&
            !strcmp(argv[4], "x y"));
    free(argv);
    T_EQ_INT(hunt_args_split("--model 'oops", &argc, &argv, msg, sizeof msg), ERR_FORMAT);
    hunt_config c;
    hunt_config_default(&c);
    char *a1[] = {"--url",
                  "http://127.0.0.1:8000",
                  "--concurrency",
                  "1,64",
                  "--context-pad",
                  "0,4000",
                  "--stream",
                  "--tie-threshold",
                  "0.25",
                  "--seed",
                  "9"};
    T_OK(hunt_args_parse(11, a1, &c, true, msg, sizeof msg));
    T_EQ_INT(c.n_conc, 2);
    T_EQ_INT(c.conc[1], 64);
    T_EQ_INT(c.pads[1], 4000);
    T_CHECK(c.stream && c.tie_threshold == 0.25 && c.seed == 9);
    T_CHECK(c.skip_special); /* sent by default */
    char *a4[] = {"--no-skip-special-tokens"};
    T_OK(hunt_args_parse(1, a4, &c, false, msg, sizeof msg));
    T_CHECK(!c.skip_special);
    char *a2[] = {"--sessions", "0"};
    T_EQ_INT(hunt_args_parse(2, a2, &c, false, msg, sizeof msg), ERR_INVAL);
    T_CHECKF(strstr(msg, "--sessions") != NULL, "%s", msg);
    char *a3[] = {"--concurrency"};
    T_EQ_INT(hunt_args_parse(1, a3, &c, false, msg, sizeof msg), ERR_INVAL);
    int out[4];
    T_EQ_INT(hunt_args_int_list("1,8,32", 1, 100, out, 4), 3);
    T_EQ_INT(hunt_args_int_list("1,,2", 1, 100, out, 4), -1);
    T_EQ_INT(hunt_args_int_list("1,2,3,4,5", 1, 100, out, 4), -1);
}

static void t_metrics(void) {
    hunt_metrics_sample s;
    const char *v = "# HELP verity_requests_running x\n# TYPE verity_requests_running gauge\n"
                    "verity_requests_running 12\nverity_batch_size 9\nverity_requests_waiting 3\n"
                    "other_metric 5\n";
    T_CHECK(!strcmp(hunt_metrics_parse(v, strlen(v), &s), "verity"));
    T_CHECK(s.running == 12 && s.batch == 9 && s.waiting == 3);
    const char *vl = "vllm:num_requests_running{model_name=\"a\"} 4.0\n"
                     "vllm:num_requests_running{model_name=\"b\",x=\"}\"} 3\n"
                     "vllm:num_requests_waiting{model_name=\"a\"} 1 1700000000000\n";
    T_CHECK(!strcmp(hunt_metrics_parse(vl, strlen(vl), &s), "vllm"));
    T_CHECK(s.running == 7 && isnan(s.batch) && s.waiting == 1); /* no batch figure */
    const char *sg = "sglang:num_running_reqs{model_name=\"m\"} 5\nsglang:num_queue_reqs 2\n";
    T_CHECK(!strcmp(hunt_metrics_parse(sg, strlen(sg), &s), "sglang"));
    T_CHECK(s.running == 5 && s.waiting == 2);
    const char *lc = "llamacpp:requests_processing 2\nllamacpp:n_busy_slots_per_decode 1.5\n";
    T_CHECK(!strcmp(hunt_metrics_parse(lc, strlen(lc), &s), "llamacpp"));
    T_CHECK(s.running == 2 && s.batch == 1.5 && isnan(s.waiting));
    const char *none = "<html>not found</html>\nfoo 1\n";
    T_CHECK(hunt_metrics_parse(none, strlen(none), &s) == NULL);
}

static void t_launch_templates(void) {
    hunt_ledger lg;
    hunt_ledger_init(&lg);
    const char *n[] = {"cuda-graph", "VERITY_FAULT_DETOK", "attn"};
    const char *off[] = {"0", "0", "flash"};
    const char *on[] = {"1", "1", "sdpa"};
    for (int i = 0; i < 3; i++) {
        lg.toggles[i].name = strdup(n[i]);
        lg.toggles[i].off = strdup(off[i]);
        lg.toggles[i].on = strdup(on[i]);
    }
    lg.n_toggles = 3;
    strbuf s;
    strbuf_init(&s);
    T_OK(hunt_launch_expand("serve --port {port}{flags} --x {attn}", &lg, 1u << 2, 8123, &s));
    T_CHECKF(!strcmp(s.data, "serve --port 8123 --cuda-graph 1 --attn flash --x flash"), "%s",
             s.data);
    T_OK(hunt_launch_expand("{port}", &lg, 0, -1, &s));
    T_CHECK(!strcmp(s.data, "{port}"));
    T_EQ_INT(hunt_launch_expand("x {bogus}", &lg, 0, 1, &s), ERR_INVAL);
    T_CHECK(hunt_toggle_is_env("VERITY_FAULT_DETOK") && !hunt_toggle_is_env("cuda-graph") &&
            !hunt_toggle_is_env("1ABC"));
    int p = hunt_free_port();
    T_CHECK(p > 0 && p < 65536);
    strbuf_deinit(&s);
    hunt_ledger_deinit(&lg);
}

int main(void) {
    test_run("hunt_workload.same_seed_same_sessions", t_workload_determinism);
    test_run("hunt_workload.tool_results_are_functions_of_arguments", t_tool_results);
    test_run("hunt_workload.skip_special_tokens_alternate", t_skip_special);
    test_run("hunt_workload.args_and_splitting", t_args);
    test_run("hunt_workload.metrics_names", t_metrics);
    test_run("hunt_workload.launch_templates", t_launch_templates);
    return test_summary();
}
