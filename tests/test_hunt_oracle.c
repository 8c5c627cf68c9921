/* SPDX-License-Identifier: MIT */
/* Unit tests for src/hunt/hunt_oracle on crafted transcripts: benign near-tie divergence must not
 * be flagged; markup leaks, invalid tool JSON, schema violations, unknown tools, finish_reason
 * inconsistencies, stream identity changes and degeneration must be. */
#include "test.h"
#include "base/arena.h"
#include "base/err.h"
#include "hunt/hunt_oracle.h"
#include "hunt/hunt_tools.h"
#include "hunt/hunt_util.h"

#include <math.h>
#include <string.h>

static arena *A;
static hunt_tools *TOOLS;

/* Builds a text reply whose logprob tokens are its space-separated words (each with its leading
 * space); every position's runner-up is `alt` at a gap of 3 nats, except at position tie_at, where
 * the runner-up `tie_alt` is within 0.01. */
static hunt_reply text_reply(const char *content, int tie_at, const char *tie_alt) {
    hunt_reply r;
    memset(&r, 0, sizeof r);
    r.content = arena_strndup(A, content, strlen(content));
    r.content_len = strlen(content);
    r.finish = "stop";
    r.has_logprobs = true;
    r.prompt_tokens = r.completion_tokens = -1;
    r.toks = arena_calloc(A, 256, sizeof *r.toks);
    const char *p = content;
    while (*p) {
        const char *q = p + 1;
        while (*q && *q != ' ')
            q++;
        hunt_tok *t = &r.toks[r.n_toks];
        t->text = arena_strndup(A, p, (size_t)(q - p));
        t->len = (size_t)(q - p);
        t->logprob = -0.2;
        t->top = arena_calloc(A, 2, sizeof *t->top);
        t->n_top = 2;
        t->top[0] = (hunt_top){t->text, t->len, -0.2};
        if (r.n_toks == tie_at)
            t->top[1] = (hunt_top){tie_alt, strlen(tie_alt), -0.21};
        else
            t->top[1] = (hunt_top){" alt", 4, -3.2};
        r.n_toks++;
        p = q;
    }
    return r;
}

static hunt_reply call_reply(const char *name, const char *args, const char *finish) {
    hunt_reply r;
    memset(&r, 0, sizeof r);
    r.content = "";
    r.content_null = true;
    r.finish = finish;
    r.prompt_tokens = r.completion_tokens = -1;
    r.calls = arena_calloc(A, 1, sizeof *r.calls);
    r.calls[0] = (hunt_call){"id1", "function", name, args, strlen(args)};
    r.n_calls = 1;
    return r;
}

static hunt_oracle_cfg cfg(void) {
    return (hunt_oracle_cfg){0.5, TOOLS};
}

static hunt_eval judge(const hunt_reply *t, const hunt_reply *r) {
    hunt_oracle_cfg c = cfg();
    hunt_eval ev;
    hunt_oracle_judge(&c, t, r, &ev);
    return ev;
}

static const char REF[] = "The cache is full because the writer never flushes its buffer after "
                          "each batch. Check the flush path in src/core/cache_store.c first.";

static void t_identical_clean(void) {
    hunt_reply r = text_reply(REF, -1, NULL), t = text_reply(REF, -1, NULL);
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CLEAN);
    T_CHECK(!ev.diverged);
    T_EQ_INT(ev.found, 0);
}

static void t_near_tie_benign(void) {
    /* reference: " is" at token 2 with " was" 0.01 behind; the test took " was" and went on with
     * a different but sound continuation */
    hunt_reply r = text_reply(REF, 2, " was");
    hunt_reply t = text_reply("The cache was full since the reader stalled while the batch was "
                              "being written. Look at the stall handling in src/core/reader.c.",
                              -1, NULL);
    hunt_eval ev = judge(&t, &r);
    T_CHECKF(ev.verdict == HUNT_V_BENIGN, "verdict %s: %s", hunt_verdict_name(ev.verdict), ev.why);
    T_CHECK(ev.diverged);
    T_EQ_INT(ev.neartie, HUNT_NT_BENIGN);
    T_EQ_INT(ev.div_token, 2);
    T_CHECK(ev.tie_gap >= 0 && ev.tie_gap < 0.02);
    T_CHECK(strcmp(ev.where, "content") == 0);
    T_EQ_INT(ev.div_offset, 10);
}

/* Under sampling the reference may choose a token well below its best: the tie is between the
 * two choices. A test that took the reference's best is no tie when the reference's own choice was
 * 1.3 nats behind it; a test that took a token 0.01 from the reference's choice is one. */
static void t_sampled_tie_is_between_the_choices(void) {
    hunt_reply r = text_reply(REF, -1, NULL);
    hunt_tok *k = &r.toks[2]; /* " is", sampled below the best candidate " was" */
    k->logprob = -1.5;
    k->top = arena_calloc(A, 3, sizeof *k->top);
    k->n_top = 3;
    k->top[0] = (hunt_top){" was", 4, -0.2};
    k->top[1] = (hunt_top){" is", 3, -1.5};
    k->top[2] = (hunt_top){" gets", 5, -1.51};
    hunt_reply t = text_reply("The cache was full.", -1, NULL);
    hunt_eval ev = judge(&t, &r);
    T_CHECKF(ev.verdict == HUNT_V_CORRUPT, "verdict %s: %s", hunt_verdict_name(ev.verdict), ev.why);
    T_EQ_INT(ev.neartie, HUNT_NT_NOT_TIE);
    T_CHECKF(fabs(ev.tie_gap - 1.3) < 1e-9, "gap %g", ev.tie_gap);
    t = text_reply("The cache gets full because the writer never flushes its buffer after "
                   "every batch.",
                   -1, NULL);
    ev = judge(&t, &r);
    T_CHECKF(ev.verdict == HUNT_V_BENIGN, "verdict %s: %s", hunt_verdict_name(ev.verdict), ev.why);
    T_CHECK(ev.tie_gap >= 0 && ev.tie_gap < 0.02);
}

static void t_not_a_tie(void) {
    hunt_reply r = text_reply(REF, 2, " was");
    /* diverges at token 4, where the reference's runner-up was 3 nats behind */
    hunt_reply t =
        text_reply("The cache is full alt the writer never flushes its buffer.", -1, NULL);
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_EQ_INT(ev.neartie, HUNT_NT_NOT_TIE);
    T_EQ_INT(ev.div_token, 4);
    T_CHECK(ev.tie_gap > 2.9);
    /* a token outside the reference's candidates */
    t = text_reply("The cache is zebra because.", -1, NULL);
    ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_CHECKF(strstr(ev.why, "not among") != NULL, "%s", ev.why);
    /* the near-tie threshold is what decides */
    hunt_oracle_cfg c = cfg();
    c.tie_threshold = 5;
    t = text_reply("The cache is full alt the writer never flushes its buffer.", -1, NULL);
    hunt_oracle_judge(&c, &t, &r, &ev);
    T_EQ_INT(ev.verdict, HUNT_V_BENIGN);
}

static void t_no_logprobs_is_corrupt(void) {
    hunt_reply r = text_reply(REF, 2, " was"), t = text_reply("The cache was full.", -1, NULL);
    t.has_logprobs = false;
    t.n_toks = 0;
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_EQ_INT(ev.neartie, HUNT_NT_NO_LOGPROBS);
}

static void t_early_stop(void) {
    hunt_reply r = text_reply(REF, -1, NULL), t = text_reply("The cache is", -1, NULL);
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_EQ_INT(ev.div_token, 3);
}

static void t_same_tokens_different_text(void) {
    /* a detokenizer fault: the tokens agree, the text does not (skip_special_tokens applied to
     * the wrong request) */
    hunt_reply r = text_reply(REF, -1, NULL), t = text_reply(REF, -1, NULL);
    t.content = "The cache is full<|im_end|> because";
    t.content_len = strlen(t.content);
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_EQ_INT(ev.neartie, HUNT_NT_SAME_TOKENS);
    T_CHECK(ev.found & (1u << HUNT_F_MARKUP));
}

static void t_near_tie_then_degenerate(void) {
    /* the first difference is a near tie, but the continuation loops: corrupt */
    hunt_reply r = text_reply(REF, 2, " was");
    hunt_reply t = text_reply("The cache was the cache was the cache was the cache was the cache "
                              "was the cache was the cache was the cache was the cache was the "
                              "cache was",
                              -1, NULL);
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.neartie, HUNT_NT_BENIGN);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_CHECKF(ev.found & (1u << HUNT_F_REPEAT), "found %x: %s", ev.found, ev.why);
}

static void t_markup_leak(void) {
    hunt_reply r = text_reply(REF, 2, " was");
    static const char *const leaks[] = {
        "The cache was <tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}",
        "The cache was full.<|im_end|><|im_start|>assistant",
        "placeholder (replaced below)",
        "The cache was {\"name\": \"grep\", \"arguments\": {\"pattern\": \"x\"}}",
        "The cache was [TOOL_CALLS] [{\"name\": \"grep\"}]",
        "The cache was <|python_tag|>grep(x)",
    };
    for (size_t i = 0; i < sizeof leaks / sizeof *leaks; i++) {
        hunt_reply t = text_reply(leaks[i], -1, NULL);
        if (i == 2) { /* build the fullwidth-bar marker properly: <｜tool▁calls▁begin｜> */
            t.content = "The cache was <\xEF\xBD\x9Ctool\xE2\x96\x81"
                        "calls\xE2\x96\x81"
                        "begin\xEF\xBD\x9C>";
            t.content_len = strlen(t.content);
        }
        hunt_eval ev = judge(&t, &r);
        T_CHECKF(ev.verdict == HUNT_V_CORRUPT && (ev.found & (1u << HUNT_F_MARKUP)),
                 "leak %zu not flagged: %s (%s)", i, hunt_verdict_name(ev.verdict), ev.why);
    }
    /* markup the reference has too is the model's, not the load's */
    hunt_reply r2 = text_reply("Use <tool_call> tags like this.", -1, NULL);
    hunt_reply t2 = text_reply("Use <tool_call> tags like this.", -1, NULL);
    hunt_eval ev = judge(&t2, &r2);
    T_EQ_INT(ev.verdict, HUNT_V_CLEAN);
    T_CHECK(ev.model_level & (1u << HUNT_F_MARKUP));
}

static void t_tool_structure(void) {
    hunt_reply r = call_reply("read_file", "{\"path\":\"src/a.c\"}", "tool_calls");
    hunt_reply t = call_reply("read_file", "{\"path\":\"src/a.c\"", "tool_calls");
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_CHECKF(ev.found & (1u << HUNT_F_TOOL_JSON), "%s", ev.why);
    T_CHECK(strcmp(ev.where, "tool_calls[0].arguments") == 0);
    t = call_reply("read_file", "{\"path\":7}", "tool_calls");
    ev = judge(&t, &r);
    T_CHECKF(ev.found & (1u << HUNT_F_TOOL_SCHEMA), "%s", ev.why);
    T_CHECKF(strstr(ev.why, "arguments.path: expected string") != NULL, "%s", ev.why);
    t = call_reply("read_file", "{\"path\":\"a\",\"mode\":\"x\"}", "tool_calls");
    ev = judge(&t, &r);
    T_CHECKF(ev.found & (1u << HUNT_F_TOOL_SCHEMA), "%s", ev.why);
    t = call_reply("read_fil", "{\"path\":\"src/a.c\"}", "tool_calls");
    ev = judge(&t, &r);
    T_CHECKF(ev.found & (1u << HUNT_F_TOOL_UNKNOWN), "%s", ev.why);
    t = call_reply("read_file", "[1,2]", "tool_calls");
    ev = judge(&t, &r);
    T_CHECK(ev.found & (1u << HUNT_F_TOOL_JSON));
    /* a different but valid call is a divergence without logprobs: corrupt, not structural */
    t = call_reply("read_file", "{\"path\":\"src/b.c\"}", "tool_calls");
    ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_EQ_INT(ev.found, 0);
    T_EQ_INT(ev.neartie, HUNT_NT_NO_LOGPROBS);
}

static void t_finish_reason(void) {
    hunt_reply r = text_reply(REF, -1, NULL), t = text_reply(REF, -1, NULL);
    t.finish = "tool_calls";
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_CHECK(ev.found & (1u << HUNT_F_FINISH));
    T_CHECK(strcmp(ev.where, "finish_reason") == 0);
    t.finish = "";
    ev = judge(&t, &r);
    T_CHECK(ev.found & (1u << HUNT_F_FINISH));
    t.finish = "eos_token_weird";
    ev = judge(&t, &r);
    T_CHECK(ev.found & (1u << HUNT_F_FINISH));
    /* tool calls with finish "stop" are accepted (OpenAI does this for forced tool choice) */
    hunt_oracle_cfg c = cfg();
    char why[256];
    hunt_reply s = call_reply("grep", "{\"pattern\":\"x\"}", "stop");
    T_EQ_INT(hunt_oracle_structural(&c, &s, why, sizeof why), 0);
}

static void t_stream_identity(void) {
    hunt_reply r = call_reply("grep", "{\"pattern\":\"x\"}", "tool_calls");
    hunt_reply t = call_reply("grep", "{\"pattern\":\"x\"}", "tool_calls");
    t.stream_issue = "tool_calls[0]: name changed from 'grep' to 'git_log' mid-stream";
    hunt_eval ev = judge(&t, &r);
    T_EQ_INT(ev.verdict, HUNT_V_CORRUPT);
    T_CHECK(ev.found & (1u << HUNT_F_IDENTITY));
}

static void t_degeneration(void) {
    char why[256];
    /* salad */
    const char *salad = "The cache is fu#9kQ;z x7@@b]Lq 0x%%r^Tq9 ;;k8#Zp ]]w3!vB$ 88{q}aP:1 "
                        "Zk9#@x;Q m2^^tR!7 p0)(Lk?";
    T_CHECK(hunt_oracle_degeneration(salad, strlen(salad), REF, strlen(REF), why, sizeof why) &
            (1u << HUNT_F_SALAD));
    /* closing tags */
    const char *tags = "Done.</div></div>\n</div></span></p></body></html></html>";
    T_CHECK(hunt_oracle_degeneration(tags, strlen(tags), REF, strlen(REF), why, sizeof why) &
            (1u << HUNT_F_TAGS));
    T_EQ_INT(hunt_degen_tag_run(tags, strlen(tags)), 8);
    /* entropy collapse without an exact loop */
    char low[400];
    hunt_rng r;
    hunt_rng_seed(&r, 1);
    for (int i = 0; i < 399; i++)
        low[i] = "ab "[hunt_rng_below(&r, 3)];
    low[399] = 0;
    unsigned m = hunt_oracle_degeneration(low, 399, REF, strlen(REF), why, sizeof why);
    T_CHECKF(m & (1u << HUNT_F_ENTROPY), "mask %x", m);
    /* replacement characters */
    const char *bad = "The cache is \xEF\xBF\xBD full";
    T_CHECK(hunt_oracle_degeneration(bad, strlen(bad), REF, strlen(REF), why, sizeof why) &
            (1u << HUNT_F_SALAD));
    /* ordinary different prose is not degenerate */
    const char *fine = "The reader stalls while the batch is written, so the queue fills up and "
                       "the writer blocks. Look at the stall handling in src/core/reader.c.";
    T_EQ_INT(hunt_oracle_degeneration(fine, strlen(fine), REF, strlen(REF), why, sizeof why), 0);
    /* a reference that itself repeats raises its own bar */
    const char *rep = "- item\n- item\n- item\n- item\n- item\n- item\n- item\n- item\n- item\n";
    T_EQ_INT(hunt_oracle_degeneration(rep, strlen(rep), rep, strlen(rep), why, sizeof why), 0);
    size_t per;
    T_CHECK(hunt_degen_loop(rep, strlen(rep), &per) >= 60);
    T_EQ_INT(per, 7);
}

static void t_schema_subset(void) {
    arena *a = arena_create(0, 0);
    json_value *sc, *v;
    const char *s = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                    "\"minimum\":1,\"maximum\":5},\"tags\":{\"type\":\"array\",\"items\":"
                    "{\"type\":\"string\"},\"maxItems\":2},\"o\":{\"anyOf\":[{\"type\":"
                    "\"string\"},{\"type\":\"null\"}]}},\"required\":[\"n\"],"
                    "\"additionalProperties\":false}";
    T_OK(json_parse(a, s, strlen(s), &sc));
    char why[256];
    static const struct {
        const char *v;
        int want;
    } cases[] = {
        {"{\"n\":3}", 0},
        {"{\"n\":3.0}", 0},
        {"{\"n\":3.5}", 2},
        {"{\"n\":0}", 2},
        {"{}", 2},
        {"{\"n\":1,\"x\":1}", 2},
        {"{\"n\":1,\"tags\":[\"a\",\"b\"]}", 0},
        {"{\"n\":1,\"tags\":[\"a\",1]}", 2},
        {"{\"n\":1,\"tags\":[\"a\",\"b\",\"c\"]}", 2},
        {"{\"n\":1,\"o\":null}", 0},
        {"{\"n\":1,\"o\":5}", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        T_OK(json_parse(a, cases[i].v, strlen(cases[i].v), &v));
        int got = hunt_schema_check(sc, v, "arguments", why, sizeof why);
        T_CHECKF(got == cases[i].want, "%s: got %d (%s)", cases[i].v, got, why);
    }
    arena_destroy(a);
}

int main(void) {
    A = arena_create(0, 0);
    if (hunt_tools_create_builtin(HUNT_TOOLS_BUILTIN, &TOOLS) != 0)
        return 1;
    test_run("hunt_oracle.identical_is_clean", t_identical_clean);
    test_run("hunt_oracle.near_tie_divergence_is_benign", t_near_tie_benign);
    test_run("hunt_oracle.divergence_off_a_tie_is_corrupt", t_not_a_tie);
    test_run("hunt_oracle.sampled_tie_is_between_the_choices",
             t_sampled_tie_is_between_the_choices);
    test_run("hunt_oracle.divergence_without_logprobs_is_corrupt", t_no_logprobs_is_corrupt);
    test_run("hunt_oracle.early_stop_is_corrupt", t_early_stop);
    test_run("hunt_oracle.same_tokens_different_text", t_same_tokens_different_text);
    test_run("hunt_oracle.near_tie_then_degeneration_is_corrupt", t_near_tie_then_degenerate);
    test_run("hunt_oracle.markup_leaks", t_markup_leak);
    test_run("hunt_oracle.tool_json_schema_unknown", t_tool_structure);
    test_run("hunt_oracle.finish_reason", t_finish_reason);
    test_run("hunt_oracle.stream_identity", t_stream_identity);
    test_run("hunt_oracle.degeneration", t_degeneration);
    test_run("hunt_oracle.schema_subset", t_schema_subset);
    hunt_tools_destroy(TOOLS);
    arena_destroy(A);
    return test_summary();
}
