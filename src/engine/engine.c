/* SPDX-License-Identifier: MIT */
/*
 * engine: see engine.h. A sequence's state is its token array (prompt, then each sampled token
 * appended), n_done (how many of them already have K/V in the pool), its block table, reserved at
 * admission for its whole context, and its sampler. A sequence is "prefilling" while
 * n_toks - n_done > 1 and "decoding" when exactly its last sampled token remains to be fed.
 * Batches are built decoding sequences first (one token each, never starved), then prefilling
 * ones in admission order with chunks limited by `chunk` and the remaining token budget.
 * All per-request memory is allocated at submit/admission; engine_step itself does not allocate,
 * except the blobs it hands to the KV tiers below the pool when they are configured (kv_hier.h).
 * A constrained sequence (engine.h) keeps its grammar state beside its sampler: both advance only
 * on tokens sampled in eng_sample, and preemption keeps both, so after recompute (which re-reads
 * known tokens without sampling them) they still describe exactly the tokens in toks.
 *
 * Speculation (engine.h): a decoding sequence's guesses are written into toks past n_toks (the
 * array has room: guesses are limited to what max_tokens and the context still allow), so the
 * step feeds toks[n_done .. n_done + 1 + n_draft) like any chunk. Sampling a row writes its token
 * over the guess in the same slot; a token equal to the guess leaves toks as it was, and the
 * first that differs ends the sequence's step with the sampled token in place. The scheduler
 * plans guesses after everything else (eng_spec_plan), from what is left of the budget and of
 * spec_rows, shared round-robin among the sequences that draft, into blocks that are free or
 * evictable only.
 */
#include "engine/engine.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/hash.h"
#include "base/log.h"
#include "kv/kv_block.h"
#include "kv/kv_pool.h"
#include "kv/kv_prefix.h"
#include "model/forward.h"
#include "spec/spec.h"

#include <stdlib.h>
#include <string.h>

typedef struct eng_seq {
    uint64_t id;
    int32_t *toks;
    int32_t n_prompt, n_toks, n_done, cap;
    int32_t max_tokens, n_gen;
    kv_table tab;     /* its blocks (capacity: the request's whole context) */
    kv_fetch *fetch;  /* its lookups in the tiers below the pool (NULL without tiers) */
    int32_t n_cached; /* prompt positions taken from the cache or a peer at first admission */
    bool was_admitted;
    int32_t plan;     /* tokens scheduled for the current step */
    int64_t admitted; /* admission sequence number: preemption takes the latest first */
    sampler *smp;
    grammar_state *gs; /* the request's constraint, or NULL */
    bool ignore_eog;
    bool want_logprobs;
    bool cancelled; /* engine_cancel: reported and reaped at the next step */
    bool finished;  /* its last event was reported during this step */
    engine_cb cb;
    void *ud;
    struct eng_seq *next;
    uint64_t share_group; /* requests with the same nonzero group share one prompt (n > 1) */
    int32_t fault_tag;
    unsigned char *fault_host; /* FAULT (f): K/V saved to the "host tier" at preemption */
    int32_t fault_host_done;   /* positions saved */
    spec_seq *spq;             /* the drafter's state, NULL when speculation is off */
    int32_t n_draft;           /* guesses in toks[n_toks ..] fed this step */
    double spec_acc;           /* guesses accepted, recent ones weighing more (decayed) */
    double spec_tested;        /* guesses tested: accepted ones and each first refused one */
    engine_kv_in kv_in;        /* disagg: blocks from another server (poll NULL once done) */
    int32_t kv_in_n;           /* kv_in's answer: -1 until it said the blobs are there */
    const void *const *kv_in_blobs;
    size_t kv_in_nb;
    engine_kv_out kv_out;      /* disagg: blocks to another server (end NULL once ended) */
    int32_t n_exported;        /* kv_out: prompt blocks handed so far */
} eng_seq;

/* The controller of speculation (engine.h): a sequence's acceptance estimate is (accepted +
 * ENG_SPEC_PRIOR_ACC) / (tested + ENG_SPEC_PRIOR_TESTED) over decayed counts (ENG_SPEC_DECAY per
 * verification; ENG_SPEC_FORGET per decoding step, so an estimate drifts back to the prior and a
 * sequence that stopped drafting tries again now and then). A step's cost by its rows is learned
 * from pure decoding steps (EMA weight ENG_SPEC_COST_EMA); a row count never measured is
 * estimated from the nearest measured ones, ENG_SPEC_COST_SLOPE of a step per row beyond them
 * (optimistic, so that it gets tried and measured). */
#define ENG_SPEC_PRIOR_ACC    1.0
#define ENG_SPEC_PRIOR_TESTED 2.0
#define ENG_SPEC_DECAY        0.9
#define ENG_SPEC_FORGET       0.98
#define ENG_SPEC_COST_EMA     0.2
#define ENG_SPEC_COST_SLOPE   0.05

struct engine {
    model *m;
    const tokenizer *tok;
    engine_opts o;
    int64_t n_vocab;
    kv_pool *kv;
    kv_pool_opts kv_opts;
    kv_hier *h;
    kv_prefix *px; /* h's */
    fwd_ctx *fc;
    int64_t budget;
    eng_seq **running;
    int32_t n_running;
    eng_seq *wait_head, *wait_tail;
    int64_t n_waiting;
    fwd_seq *fs;
    eng_seq **fs_owner;
    sample_result sr;
    float *masked; /* [n_vocab] a constrained sequence's logits row after masking */
    int64_t n_admitted;
    int64_t n_preemptions;
    int64_t n_generated;        /* tokens sampled and kept */
    int64_t n_shared_positions; /* prompt positions taken from a group peer instead of computed */
    int64_t n_prompt_computed;  /* tokens fed while reading known tokens (prefill and recompute) */
    int64_t n_cached_positions; /* positions taken from the prefix cache */
    int64_t n_kv_in_restored, n_kv_in_refused, n_kv_out_handed; /* disagg */
    int64_t last_step_seqs;
    int32_t step_first_tag;
    spec_ctx *sp;            /* the drafter, NULL when speculation is off */
    spec_req *sreq;          /* [max_batch] this step's draft requests */
    eng_seq **sreq_owner;    /* [max_batch] their sequences */
    int32_t *sgrant;         /* [max_batch] guesses each may feed */
    int64_t n_spec_drafted;  /* guesses fed */
    int64_t n_spec_accepted; /* guesses kept */
    int64_t n_spec_verified; /* sequence steps that verified guesses */
    int64_t spec_accept_hist[SPEC_MAX_K + 1];
    int64_t step_tokens_hist[SPEC_MAX_K + 2];
    bool spec_warned;  /* the drafter's failure was logged */
    double *spec_cost; /* [spec_cost_n] seconds of a pure decoding step by its rows (0: never
                          measured), an EMA */
    int32_t spec_cost_n;
    int32_t *spec_pick; /* [spec_rows] the order in which guesses were granted */
    double *spec_alpha; /* [max_batch] acceptance estimates of this step's candidates */
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    bool f_kv_reuse, f_table_race, f_tier_reload, f_spec_accept;
    int32_t *f_freed_prev; /* FAULT (c): blocks freed at the end of the previous step */
    int64_t f_n_prev;
    unsigned char *f_noise; /* one block's worth of K/V noise */
    int64_t f_steps;
#endif
};

void engine_opts_from_flags(engine_opts *o, const model *m) {
    const model_hparams *hp = model_get_hparams(m);
    memset(o, 0, sizeof *o);
    o->max_batch = (int32_t)flags_int(FLAG_MAX_BATCH);
    o->chunk = (int32_t)flags_int(FLAG_CHUNK);
    o->n_ctx = flags_int(FLAG_CTX) > 0 ? flags_int(FLAG_CTX) : hp->n_ctx_train;
    o->block_size = (int32_t)flags_int(FLAG_KV_BLOCK);
    o->kv_f16 = strcmp(flags_str(FLAG_KV_DTYPE), "f16") == 0;
    o->attn_chunk = flags_int(FLAG_ATTN_CHUNK);
    o->threads = (int)flags_int(FLAG_THREADS);
    if (o->threads <= 0)
        o->threads = cpu_count_online();
    int64_t per_seq = (o->n_ctx + o->block_size - 1) / o->block_size;
    o->kv_blocks = per_seq * o->max_batch;
    int64_t mib = flags_int(FLAG_KV_MEM);
    kv_pool_opts ko;
    model_kv_pool_opts(m, o->kv_f16, o->block_size, 1, &ko);
    size_t block_bytes = kv_block_state_bytes_of(&ko);
    if (mib > 0 && block_bytes)
        o->kv_blocks = (int64_t)(((size_t)mib << 20) / block_bytes);
    if (flags_int(FLAG_KV_BLOCKS) > 0)
        o->kv_blocks = flags_int(FLAG_KV_BLOCKS);
    o->prefix_cache = flags_int(FLAG_PREFIX_CACHE) != 0;
    o->kv_in_fifo = flags_int(FLAG_KV_IN_SKIP) == 0;
    o->kv_verify = flags_int(FLAG_KV_VERIFY) != 0;
    o->kv_disk_dir = flags_str(FLAG_KV_DISK_DIR);
    o->kv_disk_bytes = flags_int(FLAG_KV_DISK_MEM) << 20;
    o->kv_redis_url = flags_str(FLAG_KV_REDIS);
    o->spec = flags_str(FLAG_SPEC);
    o->spec_k = (int32_t)flags_int(FLAG_SPEC_K);
    o->spec_rows = (int32_t)flags_int(FLAG_SPEC_ROWS);
    o->spec_ngram_min = (int32_t)flags_int(FLAG_SPEC_NGRAM_MIN);
    o->spec_fixed_k = flags_int(FLAG_SPEC_ADAPT) == 0;
    o->draft_model = flags_str(FLAG_DRAFT_MODEL);
}

/* True when o asks for a drafter. */
static bool eng_spec_on(const engine_opts *o) {
    return o->spec && o->spec[0] && strcmp(o->spec, "off") != 0;
}

int engine_create(model *m, const tokenizer *tok, const engine_opts *o, engine **out) {
    *out = NULL;
    const model_hparams *hp = model_get_hparams(m);
    if (o->max_batch <= 0 || o->chunk <= 0 || o->block_size <= 0 || o->kv_blocks <= 0 ||
        o->threads <= 0 || o->attn_chunk <= 0 || o->n_ctx < 0)
        return err_set(ERR_INVAL,
                       "engine: invalid options (batch %d, chunk %d, block %d, "
                       "blocks %lld, threads %d)",
                       o->max_batch, o->chunk, o->block_size, (long long)o->kv_blocks, o->threads);
    engine *e = calloc(1, sizeof *e);
    if (!e)
        return err_set(ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->o = *o;
    if (e->o.n_ctx == 0)
        e->o.n_ctx = hp->n_ctx_train;
    e->n_vocab = hp->n_vocab;
    e->budget = (int64_t)o->chunk + o->max_batch;
    bool spec_on = eng_spec_on(o);
    if (spec_on && (o->spec_k < 1 || o->spec_k > SPEC_MAX_K || o->spec_rows < 0)) {
        free(e);
        return err_set(ERR_INVAL, "engine: invalid speculation options (k %d, rows %d)", o->spec_k,
                       o->spec_rows);
    }
    /* guesses add logit rows: at most spec_rows, and at most spec_k per sequence */
    int64_t spec_outputs = 0;
    if (spec_on) {
        spec_outputs = (int64_t)o->max_batch * o->spec_k;
        if (spec_outputs > o->spec_rows)
            spec_outputs = o->spec_rows;
    }
    kv_pool_opts ko;
    model_kv_pool_opts(m, o->kv_f16, o->block_size, o->kv_blocks, &ko);
    e->kv_opts = ko;
    int rc = kv_pool_create(&ko, &e->kv);
    if (!rc && flags_int(FLAG_KV_PREFAULT))
        kv_pool_prefault(e->kv);
    if (!e->o.identity) {
        /* the root key: the model file, and what shapes its KV bytes (the index keys' type) */
        uint64_t id[3] = {model_identity(m), (uint64_t)o->kv_f16, (uint64_t)o->block_size};
        e->o.identity = hash64(0, id, sizeof id);
        if (ko.ik_row_bytes)
            e->o.identity = hash64(e->o.identity, ko.ik_name, strlen(ko.ik_name));
    }
    kv_hier_opts ho = {
        .prefix = {.enabled = o->prefix_cache, .verify = o->kv_verify, .identity = e->o.identity},
        .disk_dir = o->kv_disk_dir,
        .disk_max_bytes = o->kv_disk_bytes,
        .redis_url = o->kv_redis_url};
    if (!rc)
        rc = kv_hier_create(e->kv, &ho, &e->h);
    if (!rc)
        e->px = kv_hier_prefix(e->h);
    if (!rc)
        rc = fwd_ctx_create(m, e->kv, e->budget, o->max_batch + spec_outputs, o->threads,
                            o->attn_chunk, &e->fc);
    if (!rc && spec_on) {
        spec_opts so = {.kind = o->spec,
                        .target = m,
                        .draft_path = o->draft_model,
                        .max_seqs = o->max_batch,
                        .max_k = o->spec_k,
                        .ngram_min = o->spec_ngram_min > 0 ? o->spec_ngram_min : 1,
                        .threads = o->threads,
                        .attn_chunk = o->attn_chunk,
                        .block_size = o->block_size,
                        .kv_blocks = o->kv_blocks,
                        .kv_f16 = o->kv_f16,
                        .max_tokens = e->budget};
        rc = spec_create(&so, &e->sp);
        e->sreq = calloc((size_t)o->max_batch, sizeof *e->sreq);
        e->sreq_owner = calloc((size_t)o->max_batch, sizeof *e->sreq_owner);
        e->sgrant = calloc((size_t)o->max_batch, sizeof *e->sgrant);
        e->spec_cost_n = o->max_batch + o->spec_rows + 1;
        e->spec_cost = calloc((size_t)e->spec_cost_n, sizeof *e->spec_cost);
        e->spec_pick = calloc((size_t)o->spec_rows + 1, sizeof *e->spec_pick);
        e->spec_alpha = calloc((size_t)o->max_batch, sizeof *e->spec_alpha);
        if (!rc && (!e->sreq || !e->sreq_owner || !e->sgrant || !e->spec_cost || !e->spec_pick ||
                    !e->spec_alpha))
            rc = err_set(ERR_NOMEM, "engine: out of memory");
    }
    e->running = calloc((size_t)o->max_batch, sizeof *e->running);
    e->fs = calloc((size_t)o->max_batch, sizeof *e->fs);
    e->fs_owner = calloc((size_t)o->max_batch, sizeof *e->fs_owner);
    e->masked = malloc((size_t)e->n_vocab * sizeof *e->masked);
    if (!rc && (!e->running || !e->fs || !e->fs_owner || !e->masked))
        rc = err_set(ERR_NOMEM, "engine: out of memory");
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    e->f_kv_reuse = FLAG_FAULT(KV_REUSE);
    e->f_table_race = FLAG_FAULT(TABLE_RACE);
    e->f_tier_reload = FLAG_FAULT(TIER_RELOAD);
    e->f_spec_accept = FLAG_FAULT(SPEC_ACCEPT);
    if (!rc) {
        e->f_freed_prev = calloc((size_t)o->kv_blocks, sizeof(int32_t));
        e->f_noise = malloc(kv_block_state_bytes(e->kv));
        if (!e->f_freed_prev || !e->f_noise)
            rc = err_set(ERR_NOMEM, "engine: out of memory");
        else
            for (size_t i = 0; i < kv_block_state_bytes(e->kv) / 2; i++)
                ((uint16_t *)e->f_noise)[i] = (uint16_t)(0x3000 + (i * 2654435761u) % 0x1000);
    }
#endif
    if (rc) {
        engine_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

static void eng_release_blocks(engine *e, eng_seq *s) {
    if (s->tab.ids)
        kv_prefix_release(e->px, &s->tab);
}

/* Ends s's disagg hooks that are still open (kv_in.done, kv_out.end), each exactly once. */
static void eng_kv_hooks_end(eng_seq *s) {
    if (s->kv_in.poll) {
        s->kv_in.poll = NULL;
        s->kv_in.done(s->kv_in.ctx, 0, 0);
    }
    if (s->kv_out.end) {
        void (*end)(void *, bool) = s->kv_out.end;
        s->kv_out.end = NULL;
        end(s->kv_out.ctx, false);
    }
}

/* kv_out: hands over s's full prompt blocks sealed since the last call (a reference each); when
 * all are handed, ends the hook as complete. */
static void eng_kv_export(engine *e, eng_seq *s) {
    if (!s->kv_out.end || s->cancelled)
        return;
    int32_t full = s->n_prompt / e->o.block_size, lim = s->tab.n_sealed < full ? s->tab.n_sealed
                                                                                : full;
    while (s->n_exported < lim) {
        int32_t id = s->tab.ids[s->n_exported];
        kv_block_ref(e->kv, id);
        e->n_kv_out_handed++;
        s->kv_out.block(s->kv_out.ctx, s->n_exported++, id);
    }
    if (s->n_exported == full) {
        void (*end)(void *, bool) = s->kv_out.end;
        s->kv_out.end = NULL;
        end(s->kv_out.ctx, true);
    }
}

/* kv_in at admission, once poll answered (s->kv_in_n >= 0; t holds L1's and the tiers' prefix):
 * restores the received blobs past it. */
static void eng_kv_import(engine *e, eng_seq *s, int32_t n_full) {
    const void *const *blobs = s->kv_in_blobs;
    size_t nb = s->kv_in_nb;
    int32_t n = s->kv_in_n;
    int64_t bs = e->o.block_size;
    int32_t restored = 0, refused = 0;
    uint64_t identity = kv_prefix_identity(e->px);
    for (int32_t j = s->tab.n; j < n && j < n_full; j++) {
        const int32_t *bt = s->toks + (size_t)j * (size_t)bs;
        uint64_t parent = s->tab.n_sealed ? s->tab.tail_key : identity;
        uint64_t key = kv_prefix_next_key(e->px, &s->tab, bt);
        int32_t id = kv_prefix_alloc(e->px, &s->tab);
        if (id < 0)
            break; /* no room: the rest is computed */
        kv_block_meta want = {.identity = identity, .parent = parent, .key = key, .toks = bt};
        uint64_t sum = 0;
        int rc = kv_block_decode(e->kv, id, &want, blobs[j], nb, &sum);
        if (rc) {
            log_error("disagg: received block %d (positions %lld..%lld) of request %llu refused: "
                      "%s; recomputed",
                      j, (long long)(j * bs), (long long)((j + 1) * bs - 1),
                      (unsigned long long)s->id, err_detail());
            kv_prefix_pop(e->px, &s->tab);
            refused++;
            break;
        }
        kv_prefix_seal_loaded(e->px, &s->tab, bt, sum);
        restored++;
    }
    e->n_kv_in_restored += restored;
    e->n_kv_in_refused += refused;
    s->kv_in.poll = NULL;
    s->kv_in.done(s->kv_in.ctx, restored, refused);
}

static void eng_seq_free(engine *e, eng_seq *s) {
    if (!s)
        return;
    eng_kv_hooks_end(s);
    eng_release_blocks(e, s);
    spec_seq_destroy(e->sp, s->spq);
    sampler_destroy(s->smp);
    grammar_state_destroy(s->gs);
    kv_table_deinit(&s->tab);
    kv_fetch_destroy(s->fetch);
    free(s->toks);
    free(s);
}

void engine_destroy(engine *e) {
    if (!e)
        return;
    for (int32_t i = 0; i < e->n_running; i++)
        eng_seq_free(e, e->running[i]);
    for (eng_seq *s = e->wait_head; s;) {
        eng_seq *n = s->next;
        eng_seq_free(e, s);
        s = n;
    }
    fwd_ctx_destroy(e->fc);
    spec_destroy(e->sp);
    free(e->sreq);
    free(e->sreq_owner);
    free(e->sgrant);
    free(e->spec_cost);
    free(e->spec_pick);
    free(e->spec_alpha);
    kv_hier_destroy(e->h);
    kv_pool_destroy(e->kv);
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    free(e->f_freed_prev);
    free(e->f_noise);
#endif
    free(e->running);
    free(e->fs);
    free(e->fs_owner);
    free(e->masked);
    free(e);
}

/* Positions a request can occupy, and the blocks that takes. */
static int64_t eng_ctx_need(const engine *e, int32_t n_prompt, int32_t max_tokens) {
    int64_t need = (int64_t)n_prompt + max_tokens;
    return need < e->o.n_ctx ? need : e->o.n_ctx;
}

static int64_t eng_blocks_need(const engine *e, int64_t positions) {
    return (positions + e->o.block_size - 1) / e->o.block_size;
}

static int eng_submit(engine *e, const engine_req *r) {
    if (r->n_prompt <= 0 || !r->prompt)
        return err_set(ERR_INVAL, "request %llu: empty prompt", (unsigned long long)r->id);
    if (r->max_tokens < 0)
        return err_set(ERR_INVAL, "request %llu: max_tokens %d is negative",
                       (unsigned long long)r->id, r->max_tokens);
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->n_vocab)
            return err_set(ERR_INVAL, "request %llu: prompt token %d outside the vocabulary",
                           (unsigned long long)r->id, r->prompt[i]);
    if (r->n_prompt >= e->o.n_ctx)
        return err_set(ERR_RANGE, "prompt of %d tokens does not fit the context of %lld tokens",
                       r->n_prompt, (long long)e->o.n_ctx);
    int64_t blocks = eng_blocks_need(e, eng_ctx_need(e, r->n_prompt, r->max_tokens));
    if (blocks > kv_pool_n_blocks(e->kv))
        return err_set(ERR_RANGE, "request needs %lld KV blocks, the pool has %lld",
                       (long long)blocks, (long long)kv_pool_n_blocks(e->kv));
    int rc = sample_params_validate(&r->sp);
    if (rc)
        return rc;
    eng_seq *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "engine: out of memory");
    s->id = r->id;
    s->cap = (int32_t)eng_ctx_need(e, r->n_prompt, r->max_tokens) + 1;
    s->toks = malloc((size_t)s->cap * sizeof *s->toks);
    rc = kv_table_init(&s->tab, (int32_t)blocks);
    if (!rc && kv_hier_has_tiers(e->h))
        rc = kv_fetch_create((int32_t)blocks, &s->fetch);
    if (!rc && e->sp)
        rc = spec_seq_create(e->sp, s->cap, &s->spq);
    if (rc || !s->toks || (rc = sampler_create(&r->sp, (int)e->n_vocab, &s->smp))) {
        eng_seq_free(e, s);
        return rc ? rc : err_set(ERR_NOMEM, "engine: out of memory");
    }
    memcpy(s->toks, r->prompt, (size_t)r->n_prompt * sizeof *s->toks);
    s->n_prompt = s->n_toks = r->n_prompt;
    s->max_tokens = r->max_tokens;
    s->ignore_eog = r->ignore_eog;
    s->fault_tag = r->fault_tag;
    s->share_group = r->share_group;
    s->want_logprobs = r->sp.n_logprobs > 0 || r->want_logprobs;
    s->gs = r->constraint;
    s->cb = r->cb;
    s->ud = r->ud;
    s->kv_in = r->kv_in;
    s->kv_in_n = -1;
    s->kv_out = r->kv_out;
    if (!s->kv_out.block)
        s->kv_out.end = NULL;
    sampler_accept_prompt(s->smp, r->prompt, r->n_prompt);
    if (e->wait_tail)
        e->wait_tail->next = s;
    else
        e->wait_head = s;
    e->wait_tail = s;
    e->n_waiting++;
    return 0;
}

int engine_submit(engine *e, const engine_req *r) {
    int rc = eng_submit(e, r);
    if (rc) {
        grammar_state_destroy(r->constraint); /* owned from here on, whatever happens */
        if (r->kv_in.poll)
            r->kv_in.done(r->kv_in.ctx, 0, 0);
        if (r->kv_out.block && r->kv_out.end)
            r->kv_out.end(r->kv_out.ctx, false);
    }
    return rc;
}

void engine_kv_unref(engine *e, int32_t id) {
    kv_prefix_unref(e->px, id);
}

const kv_pool *engine_kv_pool(const engine *e) {
    return e->kv;
}

void engine_kv_pool_opts(const engine *e, kv_pool_opts *out) {
    *out = e->kv_opts;
}

uint64_t engine_kv_identity(const engine *e) {
    return e->o.identity;
}

int engine_cancel(engine *e, uint64_t id) {
    for (int32_t i = 0; i < e->n_running; i++) {
        if (e->running[i]->id == id) {
            e->running[i]->cancelled = true;
            return 0;
        }
    }
    for (eng_seq *s = e->wait_head; s; s = s->next) {
        if (s->id == id) {
            s->cancelled = true;
            return 0;
        }
    }
    return err_set(ERR_NOTFOUND, "request %llu not found", (unsigned long long)id);
}

static void eng_emit_finish(eng_seq *s, engine_finish f) {
    engine_event ev = {
        .req_id = s->id, .token = -1, .index = s->n_gen, .finish = f, .n_cached = s->n_cached};
    if (s->cb)
        s->cb(s->ud, &ev);
}

/* Removes running[i] (keeps the order of the others). */
static void eng_remove_running(engine *e, int32_t i) {
    eng_seq_free(e, e->running[i]);
    memmove(e->running + i, e->running + i + 1,
            (size_t)(e->n_running - i - 1) * sizeof *e->running);
    e->n_running--;
}

static void eng_reap_cancelled(engine *e) {
    for (int32_t i = 0; i < e->n_running;) {
        if (e->running[i]->cancelled) {
            eng_emit_finish(e->running[i], ENGINE_FINISH_CANCELLED);
            eng_remove_running(e, i);
        } else {
            i++;
        }
    }
    eng_seq **pp = &e->wait_head;
    e->wait_tail = NULL;
    while (*pp) {
        eng_seq *s = *pp;
        if (s->cancelled) {
            *pp = s->next;
            e->n_waiting--;
            eng_emit_finish(s, ENGINE_FINISH_CANCELLED);
            eng_seq_free(e, s);
        } else {
            e->wait_tail = s;
            pp = &s->next;
        }
    }
}

/* For a waiting request of a share group: the running peer whose K/V for the first
 * n_prompt - 1 positions is complete (same prompt), or NULL. *state is 1 when a running peer
 * exists but is still computing that prefix (the caller then waits), 0 otherwise. */
static const eng_seq *eng_share_peer(const engine *e, const eng_seq *s, int32_t *state) {
    *state = 0;
    if (s->n_done > 0 || s->n_prompt < 2 || s->n_toks != s->n_prompt)
        return NULL; /* only fresh requests share (not one re-admitted after preemption) */
    for (int32_t i = 0; i < e->n_running; i++) {
        const eng_seq *r = e->running[i];
        if (r->share_group != s->share_group || r->n_prompt != s->n_prompt ||
            memcmp(r->toks, s->toks, (size_t)s->n_prompt * sizeof *s->toks) != 0)
            continue;
        if (r->n_done >= s->n_prompt - 1)
            return r;
        *state = 1;
    }
    return NULL;
}

/* Gives s the peer's K/V for positions [0, n_prompt - 1): full blocks by reference (they are
 * never written again: both sequences write only at positions >= n_prompt - 1), the partial block
 * by copy. The bytes are exactly those s would have computed (P1), so s's output is unchanged. */
static void eng_share_prompt(engine *e, eng_seq *s, const eng_seq *peer) {
    int64_t upto = s->n_prompt - 1, full = upto / e->o.block_size;
    bool partial = upto % e->o.block_size != 0;
    for (int64_t b = 0; b < full + (partial ? 1 : 0); b++) {
        kv_block_ref(e->kv, peer->tab.ids[b]);
        s->tab.ids[s->tab.n++] = peer->tab.ids[b];
    }
    /* the partial block is copied: s writes its next position there */
    if (partial && kv_prefix_copy_block(e->px, &s->tab, (int32_t)full) != 0) {
        /* no block for the copy: give the partial block back and compute it */
        kv_prefix_release(e->px, &s->tab);
        for (int64_t b = 0; b < full; b++) {
            kv_block_ref(e->kv, peer->tab.ids[b]);
            s->tab.ids[s->tab.n++] = peer->tab.ids[b];
        }
        upto = full * e->o.block_size;
    }
    s->n_done = (int32_t)upto;
    e->n_shared_positions += upto;
}

/* True if a running sequence is computing block `index` of s's known tokens (same tokens up to
 * its end) and has not finished it: s had better wait and take it from the cache. */
static bool eng_block_in_progress(const engine *e, const eng_seq *s, int32_t index) {
    int64_t end = ((int64_t)index + 1) * e->o.block_size;
    if (end > s->n_toks)
        return false;
    for (int32_t i = 0; i < e->n_running; i++) {
        const eng_seq *r = e->running[i];
        if (r->n_toks >= end && r->n_done < end &&
            memcmp(r->toks, s->toks, (size_t)end * sizeof *s->toks) == 0)
            return true;
    }
    return false;
}

/* For the head request s, holding no blocks: takes the longest cached prefix of its known tokens
 * (its last known token is always computed, for its logits: a cached block holding it is copied
 * first). Returns true, holding nothing, if s should rather wait for a running sequence that is
 * computing the next block s would take. */
static bool eng_take_cached(engine *e, eng_seq *s) {
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    if (s->fault_host)
        return false;
#endif
    if (!e->o.prefix_cache || s->n_done > 0 || s->tab.n > 0)
        return false;
    if (s->kv_in.poll && s->kv_in_n < 0 &&
        (s->kv_in_n = s->kv_in.poll(s->kv_in.ctx, &s->kv_in_blobs, &s->kv_in_nb)) < 0)
        return true; /* the blocks are still arriving from another server: wait, in order (asked
                      * before the prefix match, so a wait re-matches and re-verifies nothing) */
    int32_t bs = e->o.block_size;
    /* the next block is still on its way from a tier: matching now would take (and verify)
     * again the blocks restored so far, and restore nothing new */
    if (s->fetch && !s->kv_in.poll && kv_hier_waiting(e->h, s->fetch, s->toks, s->n_toks / bs))
        return true;
    int32_t got = kv_prefix_match(e->px, &s->tab, s->toks, s->n_toks / bs);
    if (s->fetch) {
        int32_t more = kv_hier_load(e->h, s->fetch, &s->tab, s->toks, s->n_toks / bs);
        if (more < 0) {
            kv_prefix_release(e->px, &s->tab); /* restored blocks stay cached in the pool */
            return true;                       /* a tier is still looking: wait, in order */
        }
        got += more;
    }
    if (s->kv_in.poll) {
        eng_kv_import(e, s, s->n_toks / bs);
        got = s->tab.n;
    }
    if (eng_block_in_progress(e, s, got)) {
        kv_prefix_release(e->px, &s->tab);
        return true;
    }
    int64_t done = (int64_t)got * bs;
    if (got > 0 && done >= s->n_toks) {
        if (kv_prefix_copy_block(e->px, &s->tab, got - 1) == 0) {
            done = s->n_toks - 1;
        } else {
            /* no block for the copy: give the last block back and compute it */
            kv_prefix_release(e->px, &s->tab);
            got = kv_prefix_match(e->px, &s->tab, s->toks, got - 1);
            done = (int64_t)got * bs;
        }
    }
    s->n_done = (int32_t)done;
    e->n_cached_positions += done;
    return false;
}

/* Admits waiting requests in FIFO order while a batch slot is free and the pool has blocks for
 * all of the head request's known tokens (so it can at least finish its prefill), counting the
 * blocks that running sequences still need for their own known tokens as taken, and evictable
 * cached blocks as available. */
static void eng_admit(engine *e) {
    /* the tiers look up the blocks of the requests near the head of the queue while they wait */
    int32_t ahead = 0;
    for (eng_seq *w = e->wait_head; w && ahead < e->o.max_batch; w = w->next, ahead++)
        if (w->fetch && w->n_done == 0 && w->tab.n == 0)
            kv_hier_prefetch(e->h, w->fetch, w->toks, w->n_toks / e->o.block_size);
    int64_t pending = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const eng_seq *r = e->running[i];
        int64_t b = eng_blocks_need(e, r->n_toks) - r->tab.n;
        pending += b > 0 ? b : 0;
    }
    /* prev: the last request passed over because its KV is still arriving from another server
     * (it holds nothing while it waits, so the requests behind it may go first) */
    eng_seq *prev = NULL;
    while (e->n_running < e->o.max_batch) {
        eng_seq *s = prev ? prev->next : e->wait_head;
        if (!s)
            break;
        int32_t peer_state = 0;
        const eng_seq *peer = s->share_group ? eng_share_peer(e, s, &peer_state) : NULL;
        if (!peer && peer_state == 1)
            break; /* a group peer is computing the shared prompt: wait for it, in order */
        /* blocked on blocks whatever the cache holds: wait without touching the cache (a match
         * would take, verify and give back the same blocks every step) */
        if (!peer && e->o.prefix_cache && s->tab.n == 0 &&
            eng_blocks_need(e, s->n_toks) -
                    kv_prefix_peek(e->px, s->toks, s->n_toks / e->o.block_size) + pending >
                kv_prefix_n_available(e->px))
            break;
        if (!peer && eng_take_cached(e, s)) {
            if (s->kv_in.poll && s->kv_in_n < 0 && !e->o.kv_in_fifo) {
                prev = s; /* its blocks are still arriving: the next request may go */
                continue;
            }
            break; /* a running sequence is computing s's next block: wait for it, in order */
        }
        int64_t held = peer ? (s->n_prompt - 1) / e->o.block_size : s->tab.n;
        int64_t need = eng_blocks_need(e, s->n_toks) - held;
        if (need + pending > kv_prefix_n_available(e->px)) {
            /* FIFO: the head waits for blocks; later requests do not overtake it */
            if (!peer && s->tab.n) {
                e->n_cached_positions -= s->n_done;
                kv_prefix_release(e->px, &s->tab);
                s->n_done = 0;
            }
            break;
        }
        pending += need;
        if (peer)
            eng_share_prompt(e, s, peer);
#if defined(VERITY_FAULTS) && VERITY_FAULTS
        if (s->fault_host) {
            /* FAULT (f): reload the saved K/V from the "host tier" -- K only, V is forgotten */
            int64_t nb = eng_blocks_need(e, s->fault_host_done);
            size_t sb = kv_block_state_bytes(e->kv);
            for (int64_t b = 0; b < nb; b++) {
                int32_t id = kv_prefix_alloc(e->px, &s->tab);
                kv_block_load(e->kv, id, s->fault_host + (size_t)b * sb, true, false);
            }
            s->n_done = s->fault_host_done;
            pending -= nb;
            free(s->fault_host);
            s->fault_host = NULL;
        }
#endif
        if (prev)
            prev->next = s->next;
        else
            e->wait_head = s->next;
        if (e->wait_tail == s)
            e->wait_tail = prev;
        s->next = NULL;
        e->n_waiting--;
        s->admitted = e->n_admitted++;
        kv_fetch_reset(s->fetch);
        if (!s->was_admitted) {
            s->was_admitted = true;
            s->n_cached = s->n_done;
        }
        e->running[e->n_running++] = s;
    }
}

/* Preemption by recompute: the sequence gives back all its blocks, forgets its computed K/V
 * (n_done = 0) and goes to the front of the waiting queue; its tokens (prompt and everything
 * generated so far) and its sampler are kept, so when it is admitted again it re-reads them and
 * continues at the same output position. Invariance makes the recomputed K/V, and so everything
 * after, bitwise identical to an uninterrupted run. */
static void eng_preempt(engine *e, int32_t i) {
    eng_seq *s = e->running[i];
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    size_t sb = kv_block_state_bytes(e->kv);
    int64_t keep = eng_blocks_need(e, s->n_done);
    if (e->f_tier_reload && s->n_done > 0 && (s->fault_host = malloc((size_t)keep * sb))) {
        for (int64_t b = 0; b < keep; b++) {
            kv_block_save(e->kv, s->tab.ids[b], s->fault_host + (size_t)b * sb);
            /* the device block is recycled: its V no longer holds this sequence's values */
            kv_block_load(e->kv, s->tab.ids[b], e->f_noise, false, true);
        }
        s->fault_host_done = s->n_done;
    }
#endif
    eng_release_blocks(e, s);
    spec_seq_park(e->sp, s->spq);
    s->n_done = 0;
    s->plan = 0;
    memmove(e->running + i, e->running + i + 1,
            (size_t)(e->n_running - i - 1) * sizeof *e->running);
    e->n_running--;
    s->next = e->wait_head;
    e->wait_head = s;
    if (!e->wait_tail)
        e->wait_tail = s;
    e->n_waiting++;
    e->n_preemptions++;
}

/* Plans this step's tokens: decoding sequences first (one token each, never starved), then prompt
 * chunks in admission order within the token budget. */
static void eng_plan(engine *e) {
    int64_t budget = e->budget;
    for (int32_t i = 0; i < e->n_running; i++)
        e->running[i]->plan = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < e->n_running && budget > 0; i++) {
            eng_seq *s = e->running[i];
            int32_t remaining = s->n_toks - s->n_done;
            bool decoding = remaining == 1 && s->n_done >= s->n_prompt;
            if ((pass == 0) != decoding || remaining <= 0)
                continue;
            int32_t n = remaining < e->o.chunk ? remaining : e->o.chunk;
            if (n > budget)
                n = (int32_t)budget;
            s->plan = n;
            budget -= n;
        }
    }
}

/* Blocks the planned step still needs, summed over running sequences. */
static int64_t eng_plan_blocks(const engine *e) {
    int64_t need = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const eng_seq *s = e->running[i];
        if (s->plan) {
            int64_t b = eng_blocks_need(e, (int64_t)s->n_done + s->plan) - s->tab.n;
            need += b > 0 ? b : 0;
        }
    }
    return need;
}

/* Makes the planned step fit the pool: while it needs more blocks than are free, preempt the
 * most recently admitted running sequence (documented policy: last in, first out), then replan. */
static void eng_fit_pool(engine *e) {
    for (;;) {
        eng_plan(e);
        if (eng_plan_blocks(e) <= kv_prefix_n_available(e->px) || e->n_running <= 1)
            break;
        int32_t victim = 0;
        for (int32_t i = 1; i < e->n_running; i++)
            if (e->running[i]->admitted > e->running[victim]->admitted)
                victim = i;
        eng_preempt(e, victim);
    }
    for (int32_t i = 0; i < e->n_running; i++) {
        eng_seq *s = e->running[i];
        int64_t want = eng_blocks_need(e, (int64_t)s->n_done + s->plan);
        while (s->plan && s->tab.n < want)
            CHECK(kv_prefix_alloc(e->px, &s->tab) >= 0);
    }
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    /* FAULT (e): every fourth step with more than one sequence, the scheduler moves the newest
     * sequence's last block to a fresh one, copying it without the slot the previous step wrote
     * (that step was still in flight when the copy was taken) */
    if (e->f_table_race && e->n_running > 1 && (++e->f_steps & 3) == 0 && kv_pool_n_free(e->kv)) {
        eng_seq *s = e->running[e->n_running - 1];
        if (s->n_done > 0 && s->tab.n > 0 && s->n_done % e->o.block_size != 0) {
            unsigned char *tmp = malloc(kv_block_state_bytes(e->kv));
            if (tmp) {
                int32_t last = s->tab.ids[s->tab.n - 1], fresh = kv_pool_alloc(e->kv);
                kv_block_save(e->kv, last, tmp);
                /* the saved state is, layer by layer, each buffer's block in payload order; the
                 * buffers differ in size (MLA's latent, an indexer's keys), each laid out by
                 * position */
                size_t slot = (size_t)((s->n_done - 1) % e->o.block_size), off = 0;
                for (int64_t l = 0; l < kv_pool_n_layer(e->kv); l++)
                    for (int b = 0; b < kv_pool_n_buffers(e->kv); b++) {
                        size_t bb = kv_pool_buffer_block_bytes(e->kv, b);
                        size_t per_slot = bb / (size_t)e->o.block_size;
                        memset(tmp + off + slot * per_slot, 0, per_slot);
                        off += bb;
                    }
                kv_block_load(e->kv, fresh, tmp, true, true);
                s->tab.ids[s->tab.n - 1] = fresh;
                kv_block_unref(e->kv, last);
                free(tmp);
            }
        }
    }
#endif
}

/* Samples the next token of s from its logits row and reports it; returns true if s finished.
 * guess is the drafted token this row verifies, or -1 (read only by FAULT (i)). */
static bool eng_sample(engine *e, eng_seq *s, const float *logits, int32_t guess) {
    if (s->n_gen >= s->max_tokens) {
        eng_emit_finish(s, ENGINE_FINISH_LENGTH);
        return true;
    }
    /* logprobs cost an extra pass over the vocabulary: only when the request asked for them */
    sample_result *sr = s->want_logprobs ? &e->sr : NULL;
    const float *row = logits;
    if (s->gs) {
        /* Constrained: sample from a copy with the refused tokens at -inf. The allowed set is a
         * function of this sequence's own tokens and budget alone (P1). The budget is what may
         * still be generated, this token included. */
        int64_t left = s->max_tokens - s->n_gen;
        if (e->o.n_ctx - s->n_toks < left)
            left = e->o.n_ctx - s->n_toks;
        memcpy(e->masked, logits, (size_t)e->n_vocab * sizeof *e->masked);
        if (grammar_apply(s->gs, e->masked, (int32_t)e->n_vocab, !s->ignore_eog, left) == 0) {
            /* nothing can follow (the vocabulary cannot spell the grammar's next byte) */
            log_warn("request %llu: no token can continue its grammar; stopping",
                     (unsigned long long)s->id);
            eng_emit_finish(s, ENGINE_FINISH_STOP);
            return true;
        }
        row = e->masked;
    }
    int32_t tok = sampler_sample(s->smp, row, s->n_gen, sr);
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    /* FAULT (i): the guess is kept without comparing it with the sampler's pick */
    if (e->f_spec_accept && guess >= 0 && e->last_step_seqs > 1) {
        tok = guess;
        if (sr)
            sr->token = guess;
    }
#endif
    if (s->gs && !grammar_accept(s->gs, tok)) {
        /* cannot happen: grammar_apply leaves the sampler only allowed tokens */
        log_error("request %llu: sampled token %d outside its grammar; stopping",
                  (unsigned long long)s->id, tok);
        eng_emit_finish(s, ENGINE_FINISH_STOP);
        return true;
    }
    if (!s->ignore_eog && e->tok && tokenizer_is_eog(e->tok, tok)) {
        engine_event ev = {.req_id = s->id,
                           .token = -1,
                           .index = s->n_gen,
                           .sr = sr,
                           .logits = row,
                           .finish = ENGINE_FINISH_STOP,
                           .fault_step_tag = e->step_first_tag,
                           .n_cached = s->n_cached};
        if (s->cb)
            s->cb(s->ud, &ev);
        return true;
    }
    sampler_accept(s->smp, tok);
    e->n_generated++;
    CHECK(s->n_toks < s->cap);
    s->toks[s->n_toks++] = tok;
    s->n_gen++;
    bool done = s->n_gen >= s->max_tokens || s->n_toks >= e->o.n_ctx;
    engine_finish fin = done ? ENGINE_FINISH_LENGTH : ENGINE_FINISH_NONE;
    /* a grammar that is complete and either cannot continue or has no tokens left ends the
     * request as an end-of-generation token would */
    if (s->gs && (grammar_must_end(s->gs) || (done && grammar_complete(s->gs)))) {
        fin = ENGINE_FINISH_STOP;
        done = true;
    }
    engine_event ev = {.req_id = s->id,
                       .token = tok,
                       .index = s->n_gen - 1,
                       .sr = sr,
                       .logits = row,
                       .finish = fin,
                       .fault_step_tag = e->step_first_tag,
                       .n_cached = s->n_cached};
    if (s->cb)
        s->cb(s->ud, &ev);
    return done;
}

/* True when s feeds exactly its last sampled token this step (the only steps that draft). */
static bool eng_decoding(const eng_seq *s) {
    return s->n_toks - s->n_done == 1 && s->n_done >= s->n_prompt && s->plan == 1;
}

/* The estimated seconds of a pure decoding step of r rows, from the measured ones (0 if no step
 * of at most r rows was measured yet). */
static double eng_spec_cost(const engine *e, int64_t r) {
    if (r >= e->spec_cost_n)
        r = e->spec_cost_n - 1;
    if (e->spec_cost[r] > 0)
        return e->spec_cost[r];
    int64_t lo = r - 1, hi = r + 1;
    while (lo >= 1 && e->spec_cost[lo] <= 0)
        lo--;
    while (hi < e->spec_cost_n && e->spec_cost[hi] <= 0)
        hi++;
    if (lo < 1)
        return 0;
    double up = e->spec_cost[lo] * (1 + ENG_SPEC_COST_SLOPE * (double)(r - lo));
    if (hi >= e->spec_cost_n)
        return up;
    double lin = e->spec_cost[lo] +
                 (e->spec_cost[hi] - e->spec_cost[lo]) * (double)(r - lo) / (double)(hi - lo);
    return lin < up ? lin : up;
}

/* Plans this step's guesses (after eng_fit_pool, which planned and placed everything else). Only
 * a step of decoding sequences alone drafts (a prefill chunk makes a step compute-bound already),
 * within what is left of the budget and of spec_rows. Guesses are granted one at a time, each to
 * the sequence whose next guess is the likeliest to be kept (its estimate to the power of the
 * guess's place), and the number of guesses kept is the one that maximizes expected tokens per
 * estimated second of the step: none, when no number beats the step without guesses. The
 * drafter then fills them (it may propose fewer); blocks for them come only from free or
 * evictable ones. */
static void eng_spec_plan(engine *e) {
    if (!e->sp)
        return;
    int64_t used = 0, n_dec = 0;
    bool prefill = false;
    for (int32_t i = 0; i < e->n_running; i++) {
        eng_seq *s = e->running[i];
        used += s->plan;
        if (eng_decoding(s)) {
            n_dec++;
            s->spec_acc *= ENG_SPEC_FORGET; /* evidence fades (ENG_SPEC_FORGET) */
            s->spec_tested *= ENG_SPEC_FORGET;
        } else if (s->plan) {
            prefill = true;
        }
    }
    int64_t allow = e->budget - used;
    if (allow > e->o.spec_rows - n_dec)
        allow = e->o.spec_rows - n_dec; /* a full batch is compute-bound: no guesses at all */
    double base = n_dec > 0 ? eng_spec_cost(e, n_dec) : 0;
    if (allow <= 0 || (!e->o.spec_fixed_k && (prefill || base <= 0)))
        return;
    int32_t n = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        eng_seq *s = e->running[i];
        if (!eng_decoding(s) || !s->spq)
            continue;
        /* every guess could become a token, and one more comes from the last row */
        int64_t k = e->o.spec_k;
        if (k > (int64_t)s->max_tokens - s->n_gen - 1)
            k = (int64_t)s->max_tokens - s->n_gen - 1;
        if (k > e->o.n_ctx - s->n_toks - 1)
            k = e->o.n_ctx - s->n_toks - 1;
        if (k <= 0)
            continue;
        e->sreq[n] = (spec_req){.seq = s->spq,
                                .toks = s->toks,
                                .n_toks = s->n_toks,
                                .k = (int32_t)k,
                                .out = s->toks + s->n_toks};
        e->sgrant[n] = 0;
        e->spec_alpha[n] =
            (s->spec_acc + ENG_SPEC_PRIOR_ACC) / (s->spec_tested + ENG_SPEC_PRIOR_TESTED);
        e->sreq_owner[n++] = s;
    }
    /* grant guesses in order of their chance (fixed k: round-robin, every chance equal) and
     * remember the best tokens per second (fixed k: as many as allowed) */
    if (e->o.spec_fixed_k)
        for (int32_t i = 0; i < n; i++)
            e->spec_alpha[i] = 1.0 - 1e-9 * i;
    double tokens = (double)n_dec, best = base > 0 ? tokens / base : 0;
    int64_t best_d = 0;
    for (int64_t d = 1; d <= allow; d++) {
        int32_t pick = -1;
        double gain = 0;
        for (int32_t i = 0; i < n; i++) {
            if (e->sgrant[i] >= e->sreq[i].k)
                continue;
            double g = e->spec_alpha[i];
            for (int32_t j = 0; j < e->sgrant[i]; j++)
                g *= e->spec_alpha[i];
            if (g > gain) {
                gain = g;
                pick = i;
            }
        }
        if (pick < 0)
            break;
        e->sgrant[pick]++;
        e->spec_pick[d - 1] = pick;
        tokens += gain;
        double c = eng_spec_cost(e, n_dec + d);
        if (e->o.spec_fixed_k) {
            best_d = d;
        } else if (c > 0 && tokens / c > best) {
            best = tokens / c;
            best_d = d;
        }
    }
    for (int32_t i = 0; i < n; i++)
        e->sgrant[i] = 0;
    for (int64_t d = 0; d < best_d; d++)
        e->sgrant[e->spec_pick[d]]++;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!e->sgrant[i])
            continue;
        e->sreq[m] = e->sreq[i];
        e->sreq[m].k = e->sgrant[i];
        e->sreq_owner[m++] = e->sreq_owner[i];
    }
    if (spec_draft(e->sp, e->sreq, m) != 0) {
        /* a drafter that fails costs its guesses, never a step: nothing is drafted */
        if (!e->spec_warned)
            log_warn("speculation: the %s drafter failed (%s); this step drafts nothing",
                     spec_name(e->sp), err_detail());
        e->spec_warned = true;
        return;
    }
    for (int32_t i = 0; i < m; i++) {
        eng_seq *s = e->sreq_owner[i];
        int32_t nd = e->sreq[i].n_out;
        /* blocks for positions up to n_done + nd: only from free or evictable ones */
        int64_t want = eng_blocks_need(e, (int64_t)s->n_done + 1 + nd);
        while (s->tab.n < want && kv_prefix_n_available(e->px) > 0)
            CHECK(kv_prefix_alloc(e->px, &s->tab) >= 0);
        int64_t room = (int64_t)s->tab.n * e->o.block_size - s->n_done - 1;
        if (nd > room)
            nd = (int32_t)room;
        s->n_draft = nd;
        s->plan = 1 + nd;
        e->n_spec_drafted += nd;
    }
}

/* Records a pure decoding step's duration under its rows (the controller's cost table). */
static void eng_spec_measure(engine *e, int64_t rows, double seconds) {
    if (!e->sp || rows < 1 || rows >= e->spec_cost_n)
        return;
    double *c = &e->spec_cost[rows];
    *c = *c > 0 ? *c + ENG_SPEC_COST_EMA * (seconds - *c) : seconds;
}

/* After a verification of nd guesses of which a were kept, updates s's acceptance estimate: a
 * accepted, and one more tested if the first refused one was reached. */
static void eng_spec_adapt(eng_seq *s, int32_t nd, int32_t a) {
    s->spec_acc = s->spec_acc * ENG_SPEC_DECAY + a;
    s->spec_tested = s->spec_tested * ENG_SPEC_DECAY + a + (a < nd ? 1 : 0);
}

/* Samples a decoding sequence's rows (its last token's, then one per guess) in order while each
 * token equals the next guess, then sets n_done to the positions whose fed tokens were all kept,
 * gives back blocks that hold only refused guesses and seals what is complete. Returns true if s
 * finished. */
static bool eng_verify(engine *e, eng_seq *s, const float *rows) {
    int32_t nd = s->n_draft, a = 0, base = s->n_done, n_before = s->n_toks;
    bool done = false;
    for (int32_t j = 0;; j++) {
        int32_t guess = j < nd ? s->toks[s->n_toks] : -1; /* the slot the token is written to */
        done = eng_sample(e, s, rows + (int64_t)j * e->n_vocab, guess);
        if (done || s->cancelled || j == nd || s->toks[s->n_toks - 1] != guess)
            break;
        a++;
    }
    s->n_done = base + 1 + a;
    s->n_draft = 0;
    while (s->tab.n > eng_blocks_need(e, (int64_t)s->n_done + 1))
        kv_prefix_pop(e->px, &s->tab);
    kv_prefix_seal(e->px, &s->tab, s->toks, s->n_done / e->o.block_size);
    if (nd > 0) {
        e->n_spec_verified++;
        e->n_spec_accepted += a;
        e->spec_accept_hist[a]++;
        eng_spec_adapt(s, nd, a);
    }
    e->step_tokens_hist[s->n_toks - n_before]++;
    return done;
}

int engine_step(engine *e) {
    eng_reap_cancelled(e);
    eng_admit(e);
    if (e->n_running == 0)
        return 0;
    eng_fit_pool(e);
    int64_t t_step = e->sp ? clock_now_ns() : 0; /* drafting, forward pass and sampling */
    eng_spec_plan(e);
    int32_t nb = 0, n_pure = 0;
    int64_t rows = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < e->n_running; i++) {
            eng_seq *s = e->running[i];
            bool decoding = s->n_toks - s->n_done == 1 && s->n_done >= s->n_prompt;
            if (!s->plan || (pass == 0) != decoding)
                continue;
            bool last = s->n_done + s->plan >= s->n_toks;
            e->fs[nb] = (fwd_seq){.tokens = s->toks + s->n_done,
                                  .n_tokens = s->plan,
                                  .pos0 = s->n_done,
                                  .blocks = s->tab.ids,
                                  .n_blocks = s->tab.n,
                                  .n_logits = s->n_draft ? s->plan
                                              : last     ? 1
                                                         : 0};
            e->fs_owner[nb++] = s;
            rows += s->plan;
            n_pure += pass == 0;
            if (pass == 1)
                e->n_prompt_computed += s->plan;
        }
    }
    e->last_step_seqs = nb;
    e->step_first_tag = nb ? e->fs_owner[0]->fault_tag : 0;
    fwd_batch b = {.seqs = e->fs, .n_seqs = nb};
    const float *logits;
    int64_t n_out;
    int rc = fwd_run(e->fc, &b, &logits, &n_out);
    if (rc)
        return rc;
    int64_t o = 0;
    for (int32_t i = 0; i < nb; i++) {
        eng_seq *s = e->fs_owner[i];
        if (e->fs[i].n_tokens == 1 && s->n_done + 1 == s->n_toks && s->n_done >= s->n_prompt &&
            !s->n_draft) {
            /* a plain decoding step: the same path as a verification without guesses */
            s->finished = eng_verify(e, s, logits + o * e->n_vocab);
            o++;
            continue;
        }
        if (s->n_draft) {
            s->finished = eng_verify(e, s, logits + o * e->n_vocab);
            o += e->fs[i].n_logits;
            continue;
        }
        s->n_done += e->fs[i].n_tokens;
        /* blocks the step filled join the cache at once, so requests queued behind with the same
         * prefix take them instead of computing them again */
        kv_prefix_seal(e->px, &s->tab, s->toks, s->n_done / e->o.block_size);
        if (e->fs[i].n_logits) {
            s->finished = eng_sample(e, s, logits + o * e->n_vocab, -1);
            o++;
        }
    }
    if (e->sp && n_pure == nb)
        eng_spec_measure(e, rows, (double)(clock_now_ns() - t_step) * 1e-9);
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    /* FAULT (c): the "transfer" of blocks freed last step lands now, into blocks that may have
     * been handed to another sequence meanwhile */
    for (int64_t k = 0; k < e->f_n_prev; k++)
        kv_block_load(e->kv, e->f_freed_prev[k], e->f_noise, true, true);
    e->f_n_prev = 0;
    int32_t running_before = e->n_running;
#endif
    for (int32_t i = 0; i < e->n_running; i++)
        eng_kv_export(e, e->running[i]); /* before a finished sequence releases its blocks */
    for (int32_t i = 0; i < e->n_running;) {
        if (e->running[i]->finished) {
#if defined(VERITY_FAULTS) && VERITY_FAULTS
            eng_seq *fs = e->running[i];
            if (e->f_kv_reuse && running_before > 1)
                for (int32_t k = 0; k < fs->tab.n; k++)
                    if (kv_block_refcount(e->kv, fs->tab.ids[k]) == 1)
                        e->f_freed_prev[e->f_n_prev++] = fs->tab.ids[k];
#endif
            eng_remove_running(e, i);
        } else {
            i++;
        }
    }
    return 0;
}

void engine_set_wake(engine *e, void (*fn)(void *ud), void *ud) {
    if (e->h)
        kv_hier_set_notify(e->h, fn, ud);
}

bool engine_busy(const engine *e) {
    return e->n_running > 0 || e->n_waiting > 0;
}

int64_t engine_n_ctx(const engine *e) {
    return e->o.n_ctx;
}

void engine_stats_get(const engine *e, engine_stats *out) {
    memset(out, 0, sizeof *out);
    out->running = e->n_running;
    out->waiting = e->n_waiting;
    out->kv_total = kv_pool_n_blocks(e->kv);
    out->kv_used = out->kv_total - kv_prefix_n_available(e->px);
    out->preemptions = e->n_preemptions;
    out->generated = e->n_generated;
    out->prompt_computed = e->n_prompt_computed;
    out->shared_positions = e->n_shared_positions;
    out->cached_positions = e->n_cached_positions;
    out->last_step_seqs = e->last_step_seqs;
    out->spec_drafted = e->n_spec_drafted;
    out->spec_accepted = e->n_spec_accepted;
    out->spec_verified = e->n_spec_verified;
    memcpy(out->spec_accept_hist, e->spec_accept_hist, sizeof out->spec_accept_hist);
    memcpy(out->step_tokens_hist, e->step_tokens_hist, sizeof out->step_tokens_hist);
    out->kv_block_bytes = (int64_t)kv_block_state_bytes(e->kv);
    kv_prefix_stats_get(e->px, &out->prefix);
    out->kv_in_restored = e->n_kv_in_restored;
    out->kv_in_refused = e->n_kv_in_refused;
    out->kv_out_handed = e->n_kv_out_handed;
    kv_hier_stats_get(e->h, out->tiers);
}

void engine_cancel_all(engine *e) {
    for (int32_t i = 0; i < e->n_running; i++)
        e->running[i]->cancelled = true;
    for (eng_seq *s = e->wait_head; s; s = s->next)
        s->cancelled = true;
}
