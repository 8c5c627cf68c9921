/* SPDX-License-Identifier: MIT */
/*
 * test_spec: speculative decoding changes no byte.
 *   - spec.ngram_automaton: the prompt-lookup drafter against a brute-force longest-suffix search
 *     on random texts over small alphabets (long matches, periodic continuations, the automaton's
 *     growth past its first allocation), and its minimum match;
 *   - spec.engine_p1: the embedded default model stories260K (models/stories260K.gguf, real
 *     weights: it copies from its prompt) and 24 requests (greedy; seeded at temperature 0.7 and
 *     1.0, one with top-p, penalties; a regular-expression grammar; logprobs; n > 1 share groups;
 *     end-of-generation, max_tokens and the context limit reached in the middle of an accepted
 *     run). Every event (token, index, finish, logprob and alternatives, and the bytes of the row
 *     the token was drawn from) is compared with memcmp against the reference (speculation off,
 *     one request at a time), with ngram and with two draft models (the model itself, which
 *     accepts nearly everything, and a random-weight model with its vocabulary, which accepts
 *     little), alone and batched, in a pool so small that sequences are preempted, with the
 *     prefix cache on; then a second round of multi-turn requests (prompt, answer, more) runs
 *     warm from that cache, which would carry a refused guess's K/V had one been sealed;
 *   - spec.backoff: spec-rows 0 drafts nothing; a full batch drafts nothing;
 *   - spec.draft_refused: a draft model with another vocabulary is refused, naming the first
 *     differing token; spec mtp on a model without MTP layers is refused.
 * Every speculative run must also have drafted, accepted and refused guesses, so a run that
 * silently stopped speculating cannot pass as invariant.
 */
#include "test.h"

#include "base/err.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/grammar.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the n-gram drafter ---- */

/* The brute-force answer: the longest suffix of t[0..n) that also ends at some p < n - 1 (the
 * smallest such p), if at least min_match long, continued periodically. Returns the drafts. */
static int32_t brute_draft(const int32_t *t, int32_t n, int32_t k, int32_t min_match,
                           int32_t *out) {
    int32_t best = 0, best_p = -1;
    for (int32_t p = 0; p < n - 1; p++) {
        int32_t l = 0;
        while (l <= p && t[p - l] == t[n - 1 - l])
            l++;
        if (l > best) {
            best = l;
            best_p = p;
        }
    }
    if (best < min_match || best == 0)
        return 0;
    for (int32_t j = 1; j <= k; j++)
        out[j - 1] = best_p + j < n ? t[best_p + j] : out[best_p + j - n];
    return k;
}

static void t_ngram(void) {
    enum { N = 700, K = 6 };
    static int32_t t[N];
    int32_t out[K], want[K];
    for (int alpha = 2; alpha <= 5; alpha++) {
        for (int32_t min_match = 1; min_match <= 3; min_match += 2) {
            spec_opts o = {.kind = "ngram", .max_seqs = 1, .max_k = K, .ngram_min = min_match};
            spec_ctx *sp;
            T_OK(spec_create(&o, &sp));
            spec_seq *q;
            T_OK(spec_seq_create(sp, N, &q));
            uint32_t st = 7u + (uint32_t)alpha * 31u;
            int32_t n_drafts = 0;
            for (int32_t n = 1; n <= N; n++) {
                /* a text that mixes random stretches with copies of earlier stretches */
                st = st * 1103515245u + 12345u;
                int32_t copy_from = n > 20 ? (int32_t)((st >> 8) % (uint32_t)(n - 10)) : -1;
                if (copy_from >= 0 && (st >> 20) % 3 == 0)
                    t[n - 1] = t[copy_from];
                else
                    t[n - 1] = (int32_t)((st >> 12) % (uint32_t)alpha);
                /* draft at some lengths only: the automaton catches up over several tokens */
                if ((st >> 4) % 3 != 0 && n != N)
                    continue;
                spec_req r = {.seq = q, .toks = t, .n_toks = n, .k = K, .out = out};
                T_OK(spec_draft(sp, &r, 1));
                int32_t nw = brute_draft(t, n, K, min_match, want);
                T_CHECKF(r.n_out == nw && memcmp(out, want, (size_t)nw * sizeof *out) == 0,
                         "alphabet %d, min %d, length %d: %d drafts, %d expected", alpha, min_match,
                         n, r.n_out, nw);
                n_drafts += nw > 0;
            }
            T_CHECK(n_drafts > 100);
            spec_seq_destroy(sp, q);
            spec_destroy(sp);
        }
    }
    /* "a b a b a" proposes "b a b ..."; a match shorter than the minimum proposes nothing */
    spec_opts o = {.kind = "ngram", .max_seqs = 1, .max_k = 5, .ngram_min = 2};
    spec_ctx *sp;
    T_OK(spec_create(&o, &sp));
    spec_seq *q;
    T_OK(spec_seq_create(sp, 16, &q));
    int32_t txt[] = {1, 2, 1, 2, 1};
    spec_req r = {.seq = q, .toks = txt, .n_toks = 5, .k = 5, .out = out};
    T_OK(spec_draft(sp, &r, 1));
    int32_t per[] = {2, 1, 2, 1, 2};
    T_CHECK(r.n_out == 5 && memcmp(out, per, sizeof per) == 0);
    spec_seq_destroy(sp, q);
    T_OK(spec_seq_create(sp, 16, &q));
    int32_t txt2[] = {1, 2, 3, 4, 2};
    r = (spec_req){.seq = q, .toks = txt2, .n_toks = 5, .k = 5, .out = out};
    T_OK(spec_draft(sp, &r, 1));
    T_EQ_INT(r.n_out, 0);
    spec_seq_destroy(sp, q);
    spec_destroy(sp);
}

/* ---- the engine ---- */

#define NR       24
#define MAXP     260
#define MAXG     140
#define REC_MAX  (MAXG + 2)
#define N_VOCABX 512

/* One event as recorded: everything a client could see, and the row's bytes' hash. */
typedef struct rec_ev {
    int32_t token;
    int32_t finish;
    int64_t index;
    int32_t has_lp, n_top;
    float logprob;
    sample_logprob top[4];
    uint64_t row_hash;
} rec_ev;

typedef struct rec {
    rec_ev ev[REC_MAX];
    int n;
    int32_t toks[MAXG];
    int n_toks;
    engine_finish fin;
    int64_t n_vocab;
} rec;

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void on_event(void *ud, const engine_event *ev) {
    rec *r = ud;
    T_CHECK(r->fin == ENGINE_FINISH_NONE && r->n < REC_MAX); /* nothing after the finish */
    rec_ev *x = &r->ev[r->n++];
    memset(x, 0, sizeof *x);
    x->token = ev->token;
    x->finish = (int32_t)ev->finish;
    x->index = ev->index;
    if (ev->sr) {
        x->has_lp = 1;
        x->logprob = ev->sr->logprob;
        x->n_top = ev->sr->n_top < 4 ? ev->sr->n_top : 4;
        memcpy(x->top, ev->sr->top, (size_t)x->n_top * sizeof *x->top);
    }
    if (ev->logits)
        x->row_hash = fnv(ev->logits, (size_t)r->n_vocab * sizeof(float));
    if (ev->token >= 0 && r->n_toks < MAXG)
        r->toks[r->n_toks++] = ev->token;
    if (ev->finish != ENGINE_FINISH_NONE)
        r->fin = ev->finish;
}

typedef struct spec_env {
    model *m;
    tokenizer *tok;
    grammar_vocab *gv;
    grammar *g;
    int64_t n_vocab;
    char self_path[512];  /* the model itself, as a draft */
    char rand_path[512];  /* random weights, the same vocabulary */
    char other_path[512]; /* random weights, another vocabulary */
    /* the workload */
    int32_t p[NR][MAXP];
    int32_t len[NR];
    sample_params sp[NR];
    int32_t max_tokens[NR];
    bool ignore_eog[NR], grammar_on[NR];
    uint64_t group[NR];
} spec_env;

static const char *stories[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball.",
    "Tom had a small dog. The dog liked to run and jump. One day, the dog ran into the garden and "
    "found a big bone.",
    "There was a happy bird who lived in a tree. Every morning the bird sang a song to the sun.",
    "Sam and Mia went to the beach. They built a big sand castle and looked for shells by the sea.",
};

static void env_open(spec_env *env) {
    memset(env, 0, sizeof *env);
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    snprintf(env->self_path, sizeof env->self_path, "models/stories260K.gguf");
    T_OK(model_load(env->self_path, isa, &env->m));
    T_OK(tokenizer_load(model_get_gguf(env->m), &env->tok));
    env->n_vocab = model_get_hparams(env->m)->n_vocab;
    snprintf(env->rand_path, sizeof env->rand_path, "%s/draft-rand.gguf", test_tmpdir());
    synth_opts so = {
        .shape = "tiny", .type = GGUF_TYPE_F32, .seed = 3, .vocab_from = env->self_path};
    T_OK(synth_write(&so, env->rand_path));
    snprintf(env->other_path, sizeof env->other_path, "%s/draft-other.gguf", test_tmpdir());
    synth_opts so2 = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 4};
    T_OK(synth_write(&so2, env->other_path));
    /* a grammar: lower-case words separated by single spaces, then a full stop */
    T_OK(grammar_vocab_create(env->tok, &env->gv));
    grammar_ast *a;
    T_OK(grammar_ast_create(&a));
    grammar_node *root;
    const char *pat = "( [a-z]+){2,40}\\.";
    T_OK(grammar_ast_parse(a, pat, strlen(pat), &root));
    T_OK(grammar_compile(a, root, env->gv, &env->g));
    grammar_ast_destroy(a);
    /* the requests: a story, then its beginning again (something to copy), or a story told
     * twice and continued; parameters by index */
    for (int i = 0; i < NR; i++) {
        char text[1024];
        const char *s = stories[i % 4];
        size_t sl = strlen(s), cut = sl / 3 + (size_t)(i * 7) % (sl / 3);
        if (i % 3 == 2)
            snprintf(text, sizeof text, "%s %s %.*s", s, s, (int)cut, s);
        else
            snprintf(text, sizeof text, "%s %.*s", s, (int)cut, s);
        size_t n;
        T_OK(tokenizer_encode(env->tok, text, strlen(text), true, true, env->p[i], MAXP, &n));
        env->len[i] = (int32_t)n;
        sample_params sp = sample_params_default();
        sp.seed = 1000 + (uint64_t)i;
        switch (i % 4) {
        case 0:
            sp.temperature = 0;
            break;
        case 1:
            sp.temperature = 0.7;
            break;
        case 2:
            sp.temperature = 1.0;
            break;
        default:
            sp.temperature = 1.0;
            sp.top_p = 0.9;
            sp.repetition_penalty = 1.1;
            sp.frequency_penalty = 0.2;
            break;
        }
        if (i % 5 == 1)
            sp.n_logprobs = 3;
        env->sp[i] = sp;
        env->max_tokens[i] = 20 + (i * 13) % (MAXG - 20);
        env->ignore_eog[i] = i % 6 == 5 ? false : true;
        env->grammar_on[i] = i % 8 == 3;
        /* n > 1: requests 16..19 and 20..23 repeat 4 and 8's prompts in two share groups */
        env->group[i] = 0;
    }
    for (int i = 16; i < NR; i++) {
        int src = i < 20 ? 4 : 8;
        memcpy(env->p[i], env->p[src], (size_t)env->len[src] * sizeof(int32_t));
        env->len[i] = env->len[src];
        env->group[i] = (uint64_t)src + 1;
        env->group[src] = (uint64_t)src + 1;
        env->sp[i].seed = env->sp[src].seed + (uint64_t)i;
        env->max_tokens[i] = env->max_tokens[src] + i % 3;
        env->grammar_on[i] = false;
    }
}

static void env_close(spec_env *env) {
    grammar_destroy(env->g);
    grammar_vocab_destroy(env->gv);
    tokenizer_destroy(env->tok);
    model_destroy(env->m);
}

typedef struct run_cfg {
    const char *spec; /* NULL: off */
    const char *draft;
    int max_batch, chunk, threads;
    int64_t kv_blocks;
    bool prefix_cache;
    int64_t n_ctx;
    int32_t spec_k, spec_rows;
    bool adapt; /* spec-adapt 1: the controller decides (else spec_k guesses every step) */
} run_cfg;

static engine *mk_engine(spec_env *env, const run_cfg *c) {
    engine_opts o = {.max_batch = c->max_batch,
                     .chunk = c->chunk,
                     .n_ctx = c->n_ctx,
                     .kv_blocks = c->kv_blocks,
                     .block_size = 16,
                     .threads = c->threads,
                     .attn_chunk = 64,
                     .prefix_cache = c->prefix_cache,
                     .kv_verify = true,
                     .spec = c->spec,
                     .spec_k = c->spec_k ? c->spec_k : 8,
                     .spec_rows = c->spec_rows ? c->spec_rows : 512,
                     .spec_ngram_min = 2,
                     .spec_fixed_k = !c->adapt,
                     .draft_model = c->draft};
    engine *e;
    T_OK(engine_create(env->m, env->tok, &o, &e));
    return e;
}

/* The prompt of request i in round 2: round 1's prompt, its answer (the reference's), and more. */
static int32_t round2_prompt(const spec_env *env, const rec *ref1, int i, int32_t *out) {
    int32_t n = env->len[i];
    memcpy(out, env->p[i], (size_t)n * sizeof *out);
    int32_t a = ref1[i].n_toks < 40 ? ref1[i].n_toks : 40;
    memcpy(out + n, ref1[i].toks, (size_t)a * sizeof *out);
    n += a;
    static const int32_t more[] = {1, 365, 300, 267, 261};
    for (int j = 0; j < 5 && n < 2 * MAXP; j++)
        out[n++] = more[j] % (int32_t)env->n_vocab;
    return n;
}

static void submit(engine *e, spec_env *env, int i, const int32_t *prompt, int32_t n, rec *r) {
    memset(r, 0, sizeof *r);
    r->n_vocab = env->n_vocab;
    grammar_state *gs = NULL;
    if (env->grammar_on[i])
        T_OK(grammar_state_create(env->g, &gs));
    engine_req q = {.id = (uint64_t)i + 1,
                    .prompt = prompt,
                    .n_prompt = n,
                    .sp = env->sp[i],
                    .max_tokens = env->max_tokens[i],
                    .ignore_eog = env->ignore_eog[i],
                    .want_logprobs = i % 7 == 2,
                    .constraint = gs,
                    .cb = on_event,
                    .ud = r,
                    .share_group = env->group[i]};
    T_OK(engine_submit(e, &q));
}

/* Runs the round's requests, one at a time (alone) or all submitted at once. */
static void run_round(engine *e, spec_env *env, const rec *ref1, bool alone, rec *out) {
    static int32_t buf[NR][2 * MAXP];
    for (int i = 0; i < NR; i++) {
        const int32_t *p = env->p[i];
        int32_t n = env->len[i];
        if (ref1) {
            n = round2_prompt(env, ref1, i, buf[i]);
            p = buf[i];
        }
        submit(e, env, i, p, n, &out[i]);
        if (alone)
            while (engine_busy(e))
                T_OK(engine_step(e));
    }
    while (engine_busy(e))
        T_OK(engine_step(e));
}

static void expect_same_n(const rec *ref, const rec *got, int nr, const char *what) {
    for (int i = 0; i < nr; i++) {
        T_CHECKF(got[i].fin != ENGINE_FINISH_NONE, "%s: request %d did not finish", what, i);
        int n = ref[i].n < got[i].n ? ref[i].n : got[i].n;
        int first = n;
        for (int j = 0; j < n; j++)
            if (memcmp(&ref[i].ev[j], &got[i].ev[j], sizeof ref[i].ev[j]) != 0) {
                first = j;
                break;
            }
        T_CHECKF(ref[i].n == got[i].n && first == n,
                 "%s: request %d differs from the reference at event %d (%d events, %d "
                 "expected; token %d, expected %d)",
                 what, i, first, got[i].n, ref[i].n, first < got[i].n ? got[i].ev[first].token : -9,
                 first < ref[i].n ? ref[i].ev[first].token : -9);
    }
}

static void expect_same(const rec *ref, const rec *got, const char *what) {
    expect_same_n(ref, got, NR, what);
}

typedef struct case_run {
    const char *name;
    run_cfg cfg;
    bool alone;
    bool expect_refusals; /* the drafter guesses wrong at times */
    bool expect_preempt;
    bool same_cache; /* no eviction: the cache must end up with exactly the blocks of a run with
                        speculation off (a sealed guess would be a block more) */
} case_run;

static void t_engine(void) {
    static spec_env env;
    static rec ref[NR], ref2[NR], out[NR], out2[NR];
    env_open(&env);
    run_cfg base = {.max_batch = 1, .chunk = 512, .threads = 1, .kv_blocks = 256, .n_ctx = 200};
    engine *e = mk_engine(&env, &base);
    run_round(e, &env, NULL, true, ref);
    run_round(e, &env, ref, true, ref2);
    engine_destroy(e);
    /* the workload reaches what it should: every kind of finish, grammars complete */
    int n_stop = 0, n_len = 0, n_ctx_end = 0;
    for (int i = 0; i < NR; i++) {
        n_stop += ref[i].fin == ENGINE_FINISH_STOP;
        n_len += ref[i].fin == ENGINE_FINISH_LENGTH;
        n_ctx_end += ref[i].fin == ENGINE_FINISH_LENGTH && ref[i].n_toks < env.max_tokens[i];
    }
    if (getenv("SPEC_DEBUG"))
        for (int i = 0; i < NR; i++)
            printf("req %d: prompt %d, max %d, got %d, fin %d, eog %d\n", i, env.len[i],
                   env.max_tokens[i], ref[i].n_toks, ref[i].fin, !env.ignore_eog[i]);
    T_CHECKF(n_stop >= 2 && n_len >= 10 && n_ctx_end >= 2,
             "finishes: %d stop, %d length (%d at "
             "the context limit)",
             n_stop, n_len, n_ctx_end);

    const case_run cases[] = {
        {"ngram alone",
         {.spec = "ngram",
          .max_batch = 1,
          .chunk = 512,
          .threads = 1,
          .kv_blocks = 256,
          .n_ctx = 200},
         true,
         true,
         false,
         false},
        {"ngram batched",
         {.spec = "ngram",
          .max_batch = 16,
          .chunk = 16,
          .threads = 2,
          .kv_blocks = 512,
          .n_ctx = 200},
         false,
         true,
         false,
         false},
        {"ngram batched, small pool, prefix cache",
         {.spec = "ngram",
          .max_batch = 12,
          .chunk = 24,
          .threads = 2,
          .kv_blocks = 40,
          .prefix_cache = true,
          .n_ctx = 200,
          .spec_k = 5},
         false,
         true,
         true,
         false},
        {"draft (itself) batched, prefix cache",
         {.spec = "draft",
          .draft = env.self_path,
          .max_batch = 16,
          .chunk = 32,
          .threads = 2,
          .kv_blocks = 512,
          .prefix_cache = true,
          .n_ctx = 200},
         false,
         true,
         false,
         true},
        {"ngram batched, prefix cache",
         {.spec = "ngram",
          .max_batch = 16,
          .chunk = 32,
          .threads = 2,
          .kv_blocks = 512,
          .prefix_cache = true,
          .n_ctx = 200},
         false,
         true,
         false,
         true},
        {"draft (random) batched, small pool",
         {.spec = "draft",
          .draft = env.rand_path,
          .max_batch = 12,
          .chunk = 8,
          .threads = 1,
          .kv_blocks = 40,
          .prefix_cache = true,
          .n_ctx = 200,
          .spec_k = 3},
         false,
         true,
         true,
         false},
        {"draft (itself) alone",
         {.spec = "draft",
          .draft = env.self_path,
          .max_batch = 1,
          .chunk = 512,
          .threads = 1,
          .kv_blocks = 256,
          .n_ctx = 200},
         true,
         true,
         false,
         false},
        {"ngram adaptive, batched, prefix cache",
         {.spec = "ngram",
          .max_batch = 8,
          .chunk = 64,
          .threads = 1,
          .kv_blocks = 512,
          .prefix_cache = true,
          .n_ctx = 200,
          .adapt = true},
         false,
         false,
         false,
         true},
        {"draft (itself) adaptive, alone",
         {.spec = "draft",
          .draft = env.self_path,
          .max_batch = 1,
          .chunk = 512,
          .threads = 1,
          .kv_blocks = 256,
          .n_ctx = 200,
          .adapt = true},
         true,
         false,
         false,
         false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const case_run *cr = &cases[c];
        if (test_scale() < 1 && c % 2 == 0)
            continue; /* sanitizers: every other case (batched, preempted, cached, adaptive) */
        kv_prefix_stats px_off = {0};
        if (cr->same_cache) {
            run_cfg off = cr->cfg;
            off.spec = NULL;
            e = mk_engine(&env, &off);
            run_round(e, &env, NULL, cr->alone, out);
            engine_stats st;
            engine_stats_get(e, &st);
            px_off = st.prefix;
            engine_destroy(e);
        }
        e = mk_engine(&env, &cr->cfg);
        run_round(e, &env, NULL, cr->alone, out);
        expect_same(ref, out, cr->name);
        if (cr->same_cache) {
            engine_stats st;
            engine_stats_get(e, &st);
            T_CHECKF(st.prefix.inserted == px_off.inserted && st.prefix.cached == px_off.cached &&
                         st.prefix.evictions == 0 && px_off.inserted > 0,
                     "%s: %lld blocks sealed, %lld with speculation off", cr->name,
                     (long long)st.prefix.inserted, (long long)px_off.inserted);
        }
        /* round 2 from the same engine: the cache (when on) holds round 1's sealed blocks */
        run_round(e, &env, ref, cr->alone, out2);
        expect_same(ref2, out2, cr->name);
        engine_stats st;
        engine_stats_get(e, &st);
        T_CHECKF(st.spec_drafted > 0 && st.spec_accepted > 0 && st.spec_verified > 0,
                 "%s: drafted %lld, accepted %lld", cr->name, (long long)st.spec_drafted,
                 (long long)st.spec_accepted);
        if (cr->expect_refusals)
            T_CHECKF(st.spec_accepted < st.spec_drafted, "%s: every guess accepted", cr->name);
        if (cr->expect_preempt)
            T_CHECKF(st.preemptions > 0, "%s: no preemption", cr->name);
        if (cr->cfg.prefix_cache)
            T_CHECKF(st.cached_positions > 0 && st.prefix.checksum_failures == 0, "%s: cached %lld",
                     cr->name, (long long)st.cached_positions);
        int64_t sum = 0, acc = 0;
        for (int a = 0; a <= SPEC_MAX_K; a++) {
            sum += st.spec_accept_hist[a];
            acc += (int64_t)a * st.spec_accept_hist[a];
        }
        T_CHECK(sum == st.spec_verified && acc == st.spec_accepted);
        int64_t kept = 0;
        for (int t = 0; t <= SPEC_MAX_K + 1; t++)
            kept += (int64_t)t * st.step_tokens_hist[t];
        T_CHECK(kept <= st.generated);
        printf("INFO spec.engine_p1: %s: %lld guesses, %lld accepted (%.0f%%), %lld preemptions\n",
               cr->name, (long long)st.spec_drafted, (long long)st.spec_accepted,
               100.0 * (double)st.spec_accepted / (double)st.spec_drafted,
               (long long)st.preemptions);
        engine_destroy(e);
    }
    env_close(&env);
}

/* End-of-generation in the middle of a run: a random-weight model (its built-in vocabulary)
 * samples its end-of-generation token now and then at temperature 1, and repeats one token when
 * greedy (which every guess of its own then matches). */
static void t_eog(void) {
    enum { NS = 24 };
    static rec ref[NS], out[NS];
    char path[512];
    snprintf(path, sizeof path, "%s/eog-tiny.gguf", test_tmpdir());
    synth_opts so = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 21};
    T_OK(synth_write(&so, path));
    kn_isa isa;
    T_OK(kn_isa_select(&isa));
    model *m;
    tokenizer *tok;
    T_OK(model_load(path, isa, &m));
    T_OK(tokenizer_load(model_get_gguf(m), &tok));
    int64_t nv = model_get_hparams(m)->n_vocab;
    /* every fourth request is held to "a+": its rows allow only the tokens spelling "a" and,
     * once one was written, end-of-generation, so guesses of "a" are often kept and the end
     * often comes after some of them were */
    grammar_vocab *gv;
    T_OK(grammar_vocab_create(tok, &gv));
    grammar_ast *ga;
    T_OK(grammar_ast_create(&ga));
    grammar_node *root;
    T_OK(grammar_ast_parse(ga, "a+", 2, &root));
    grammar *g;
    T_OK(grammar_compile(ga, root, gv, &g));
    grammar_ast_destroy(ga);
    static int32_t p[NS][96];
    int32_t len[NS];
    uint32_t st = 5;
    for (int i = 0; i < NS; i++) {
        len[i] = 4 + i * 3;
        for (int j = 0; j < len[i]; j++)
            p[i][j] = (int32_t)(3 + ((st = st * 1103515245u + 12345u) >> 8) % (uint32_t)(nv - 3));
        if (i % 2) /* something to copy */
            memcpy(p[i] + len[i] / 2, p[i], (size_t)(len[i] / 2) * sizeof(int32_t));
    }
    const char *kinds[] = {NULL, "ngram", "draft"};
    for (int k = 0; k < 3; k++) {
        engine_opts o = {.max_batch = k ? 8 : 1,
                         .chunk = k ? 16 : 512,
                         .kv_blocks = k ? 48 : 64,
                         .block_size = 16,
                         .threads = 1,
                         .attn_chunk = 64,
                         .prefix_cache = k == 2,
                         .kv_verify = true,
                         .spec = kinds[k],
                         .spec_fixed_k = true,
                         .spec_k = 6,
                         .spec_rows = 64,
                         .spec_ngram_min = 2,
                         .draft_model = path};
        engine *e;
        T_OK(engine_create(m, tok, &o, &e));
        rec *r = k ? out : ref;
        for (int i = 0; i < NS; i++) {
            memset(&r[i], 0, sizeof r[i]);
            r[i].n_vocab = nv;
            sample_params sp = sample_params_default();
            sp.seed = (uint64_t)i * 3 + 1;
            sp.temperature = i % 4 == 0 ? 0 : 1.0;
            grammar_state *gs = NULL;
            if (i % 4 == 1)
                T_OK(grammar_state_create(g, &gs));
            engine_req q = {.id = (uint64_t)i + 1,
                            .prompt = p[i],
                            .n_prompt = len[i],
                            .sp = sp,
                            .max_tokens = 130,
                            .constraint = gs,
                            .cb = on_event,
                            .ud = &r[i]};
            T_OK(engine_submit(e, &q));
            if (!k)
                while (engine_busy(e))
                    T_OK(engine_step(e));
        }
        while (engine_busy(e))
            T_OK(engine_step(e));
        engine_stats es;
        engine_stats_get(e, &es);
        if (k) {
            expect_same_n(ref, out, NS, kinds[k]);
            T_CHECKF(es.spec_accepted > 0 && es.spec_accepted < es.spec_drafted,
                     "%s: %lld of %lld accepted", kinds[k], (long long)es.spec_accepted,
                     (long long)es.spec_drafted);
            T_CHECKF(es.step_tokens_hist[0] > 0, "%s: no step ended on end-of-generation",
                     kinds[k]);
        } else {
            int eog = 0;
            for (int i = 0; i < NS; i++)
                eog += ref[i].fin == ENGINE_FINISH_STOP;
            T_CHECKF(eog >= 3, "only %d requests ended on end-of-generation", eog);
        }
        engine_destroy(e);
    }
    grammar_destroy(g);
    grammar_vocab_destroy(gv);
    tokenizer_destroy(tok);
    model_destroy(m);
}

/* Cancellation from a callback in the middle of an accepted run: the request gets no token after
 * the one whose event cancelled it, then its CANCELLED finish, as without speculation. */
typedef struct cancel_rec {
    engine *e;
    uint64_t id;
    int after, n_tok, n_after_cancel;
    bool cancelled;
    engine_finish fin;
} cancel_rec;

static void on_cancel_event(void *ud, const engine_event *ev) {
    cancel_rec *c = ud;
    if (ev->token >= 0) {
        c->n_tok++;
        if (c->cancelled)
            c->n_after_cancel++;
        if (c->n_tok == c->after && !c->cancelled) {
            T_OK(engine_cancel(c->e, c->id));
            c->cancelled = true;
        }
    }
    if (ev->finish != ENGINE_FINISH_NONE)
        c->fin = ev->finish;
}

static void t_cancel(void) {
    static spec_env env;
    env_open(&env);
    const char *kinds[] = {NULL, "ngram", "draft"};
    for (int k = 0; k < 3; k++) {
        run_cfg c = {.spec = kinds[k],
                     .draft = env.self_path,
                     .max_batch = 8,
                     .chunk = 64,
                     .threads = 1,
                     .kv_blocks = 256,
                     .n_ctx = 200};
        engine *e = mk_engine(&env, &c);
        cancel_rec cr[8];
        for (int i = 0; i < 8; i++) {
            cr[i] = (cancel_rec){.e = e, .id = (uint64_t)i + 1, .after = 3 + i * 4};
            sample_params sp = sample_params_default();
            sp.temperature = i % 2 ? 0.7 : 0;
            sp.seed = (uint64_t)i;
            engine_req q = {.id = cr[i].id,
                            .prompt = env.p[i],
                            .n_prompt = env.len[i],
                            .sp = sp,
                            .max_tokens = 100,
                            .ignore_eog = true,
                            .cb = on_cancel_event,
                            .ud = &cr[i]};
            T_OK(engine_submit(e, &q));
        }
        while (engine_busy(e))
            T_OK(engine_step(e));
        engine_stats st;
        engine_stats_get(e, &st);
        for (int i = 0; i < 8; i++)
            T_CHECKF(cr[i].n_tok == cr[i].after && cr[i].n_after_cancel == 0 &&
                         cr[i].fin == ENGINE_FINISH_CANCELLED,
                     "%s: request %d: %d tokens (cancelled after %d), finish %d",
                     kinds[k] ? kinds[k] : "off", i, cr[i].n_tok, cr[i].after, cr[i].fin);
        if (k)
            T_CHECK(st.spec_accepted > 0);
        engine_destroy(e);
    }
    env_close(&env);
}

/* spec-rows 0, or a batch that fills spec-rows with decoding rows, drafts nothing. */
static void t_backoff(void) {
    static spec_env env;
    static rec out[NR];
    env_open(&env);
    /* k 0 is invalid; spec-rows 0 means never */
    engine_opts bad = {.max_batch = 1,
                       .chunk = 8,
                       .kv_blocks = 16,
                       .block_size = 16,
                       .threads = 1,
                       .attn_chunk = 64,
                       .spec = "ngram",
                       .spec_k = 0};
    engine *e = NULL;
    T_CHECK(engine_create(env.m, env.tok, &bad, &e) == ERR_INVAL && !e);
    engine_opts z = {.max_batch = 16,
                     .chunk = 512,
                     .n_ctx = 200,
                     .kv_blocks = 512,
                     .block_size = 16,
                     .threads = 1,
                     .attn_chunk = 64,
                     .spec = "ngram",
                     .spec_k = 8,
                     .spec_rows = 0,
                     .spec_ngram_min = 2,
                     .spec_fixed_k = true};
    T_OK(engine_create(env.m, env.tok, &z, &e));
    run_round(e, &env, NULL, false, out);
    engine_stats st;
    engine_stats_get(e, &st);
    T_EQ_INT(st.spec_drafted, 0);
    engine_destroy(e);
    /* 16 requests at once with spec-rows 16: while all 16 decode, nothing is drafted; as they
     * finish, drafting resumes (so some guesses, but fewer than with room to spare) */
    z.spec_rows = 16;
    T_OK(engine_create(env.m, env.tok, &z, &e));
    run_round(e, &env, NULL, false, out);
    engine_stats_get(e, &st);
    int64_t tight = st.spec_drafted;
    engine_destroy(e);
    z.spec_rows = 512;
    T_OK(engine_create(env.m, env.tok, &z, &e));
    run_round(e, &env, NULL, false, out);
    engine_stats_get(e, &st);
    engine_destroy(e);
    T_CHECKF(tight < st.spec_drafted, "spec-rows 16: %lld guesses, 512: %lld", (long long)tight,
             (long long)st.spec_drafted);
    env_close(&env);
}

static void t_refused(void) {
    static spec_env env;
    env_open(&env);
    engine_opts o = {.max_batch = 2,
                     .chunk = 64,
                     .kv_blocks = 64,
                     .block_size = 16,
                     .threads = 1,
                     .attn_chunk = 64,
                     .spec = "draft",
                     .spec_k = 4,
                     .spec_rows = 16,
                     .spec_ngram_min = 2,
                     .draft_model = env.other_path};
    engine *e = NULL;
    int rc = engine_create(env.m, env.tok, &o, &e);
    T_CHECKF(rc == ERR_INVAL && !e && strstr(err_detail(), "differs from the target's at token") &&
                 !strchr(err_detail(), '\n'),
             "rc %d: %s", rc, err_detail());
    printf("INFO spec.draft_refused: %s\n", err_detail());
    o.draft_model = "";
    T_CHECK(engine_create(env.m, env.tok, &o, &e) == ERR_INVAL && !e);
    o.spec = "mtp";
    rc = engine_create(env.m, env.tok, &o, &e);
    T_CHECKF(rc == ERR_UNSUPPORTED && !e && strstr(err_detail(), "no multi-token-prediction"),
             "rc %d: %s", rc, err_detail());
    o.spec = "nonsense";
    T_CHECK(engine_create(env.m, env.tok, &o, &e) == ERR_INVAL && !e);
    env_close(&env);
}

int main(void) {
    test_run("spec.ngram_automaton", t_ngram);
    test_run("spec.engine_p1", t_engine);
    test_run("spec.eog", t_eog);
    test_run("spec.cancel", t_cancel);
    test_run("spec.backoff", t_backoff);
    test_run("spec.draft_refused", t_refused);
    return test_summary();
}
