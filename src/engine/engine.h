/* SPDX-License-Identifier: MIT */
/*
 * engine: the request state machine and the continuous-batching scheduler over one model, one
 * KV pool and one forward context. Requests (token prompts with sampling parameters) wait in a
 * FIFO queue; each step admits waiting requests while there are free batch slots and KV blocks,
 * then builds one ragged batch: every generating sequence contributes its next token, and
 * sequences still reading their prompt contribute a chunk of at most `chunk` tokens within the
 * step's token budget (chunk + max_batch). One forward pass later, every sequence whose step
 * reached the end of its known tokens samples one token, which is reported through the request's
 * callback; finished requests release their blocks at once.
 *
 * KV policy: blocks are allocated as a sequence grows, step by step. A waiting request is
 * admitted (FIFO, no overtaking) when a batch slot is free and the pool has blocks for all its
 * known tokens. When a step needs more blocks than are free, the most recently admitted running
 * sequence is preempted (last in, first out): it returns its blocks, goes back to the front of the
 * queue with its tokens so far, and is recomputed when admitted again. A lone request always fits:
 * engine_submit refuses one whose context could never fit the whole pool.
 *
 * Prefix cache (kv/kv_prefix.h): every block a sequence fills is sealed into the cache as soon
 * as its positions are computed; at admission a request takes the longest cached prefix of its
 * known tokens and computes only the rest (at least its last token, whose logits it needs: a
 * cached block holding that token is copied first, never written while shared). When a running
 * sequence is computing the very block a waiting request would take next, the request waits for
 * it (in FIFO order) instead of computing the same block beside it. Cached blocks no sequence
 * holds are evicted, least recently used first, before anything is preempted; a preempted
 * sequence usually finds its own blocks still cached when it comes back. Below the pool, the
 * optional disk and Redis tiers (kv/kv_hier.h) keep evicted and computed blocks; a queued
 * request's blocks are looked up there while it waits, and restored (verified) at admission.
 *
 * Invariance (P1): what a request produces depends only on its prompt, its parameters and the
 * model: logits per sequence are batch-invariant (forward.h) and each draw is keyed by
 * (seed, output position) (sample.h). Which requests share a step, the chunk size, max_batch and
 * the thread count change only timing.
 *
 * Constrained decoding: a request may carry a grammar state (sample/grammar.h). Each time it
 * samples, the engine copies the logits row into a per-engine scratch row, sets every token the
 * grammar refuses to -inf (with the request's token budget, so the text can always be completed
 * in the tokens left), samples from the copy and advances the grammar with the token; when the
 * grammar says the text must end, the request finishes with ENGINE_FINISH_STOP as if an
 * end-of-generation token had been sampled. The mask depends only on the request's own tokens,
 * so P1 holds. Logprobs of a constrained request are those of the masked distribution.
 *
 * Speculative decoding (the spec toggle, spec/spec.h): a decoding sequence may feed, after its
 * last token, up to k tokens a drafter guessed, with logits for all of them (1 + k rows, which P1
 * makes bitwise the rows decoding them one by one would give). Then, row by row, the sequence
 * samples exactly as above (grammar mask, penalties, logprobs, its draw for that output position,
 * end-of-generation, max_tokens, the context limit) and reports the token; if the token equals the
 * next guess, the next row is valid and is sampled too, otherwise the step ends for the sequence.
 * Every token kept was sampled by the sequence's own sampler from its own row, in order, so the
 * output is the one without speculation by construction; a finish in the middle stops where it
 * would have stopped. The K/V of refused guesses is dropped by setting n_done back (and giving
 * back blocks that hold nothing else; nothing is copied); only accepted positions are sealed into
 * the prefix cache (and so reach a tier). Guesses count against the step's token budget and are
 * fed only while the step's decoding sequences and guesses stay within spec_rows (a full batch is
 * compute-bound already: there speculation backs off entirely), and only into free or evictable
 * blocks (a guess never preempts anything).
 *
 * How many guesses (toggle spec-adapt): verifying rows is not free (on a CPU a third row can cost
 * a third of a step), so the engine learns what a step of decoding sequences costs by its rows
 * (the time of every such step, an EMA per row count) and keeps per sequence an estimate a of the
 * chance that its next guess is kept (recent verifications: accepted guesses over guesses tested,
 * with a prior of 1/2 that recent evidence outweighs and that returns as evidence fades). A step
 * with decoding sequences only grants guesses one by one to the sequence whose next guess is the
 * likeliest (a^j for its j-th), and keeps the number of guesses whose expected tokens per
 * estimated second is best, none if none beats the step without them: a sequence whose guesses
 * are refused stops drafting (it tries one guess again once its estimate has recovered), and one
 * that copies gets up to spec_k. With spec-adapt 0 every decoding sequence drafts spec_k guesses
 * in every step (within the budget and spec_rows). The controller reads the clock, so which
 * guesses a run feeds varies from run to run; what it outputs does not (see above).
 *
 * Threading: an engine is driven by one thread; callbacks run on it during engine_step.
 */
#ifndef VERITY_ENGINE_ENGINE_H
#define VERITY_ENGINE_ENGINE_H

#include "kv/kv_hier.h"
#include "kv/kv_prefix.h"
#include "model/model.h"
#include "sample/grammar.h"
#include "sample/sample.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum engine_finish {
    ENGINE_FINISH_NONE = 0,
    ENGINE_FINISH_STOP,      /* an end-of-generation token was sampled (not reported as text),
                                or the request's grammar is complete and cannot continue */
    ENGINE_FINISH_LENGTH,    /* max_tokens or the context limit was reached */
    ENGINE_FINISH_CANCELLED, /* engine_cancel */
} engine_finish;

typedef struct engine_event {
    uint64_t req_id;
    int32_t token;           /* the sampled token, or -1 on a finish-only event */
    int64_t index;           /* output position of token (0-based) */
    const sample_result *sr; /* logprobs of the draw, if the request wants them; else NULL */
    const float *logits;     /* the row the token was drawn from (n_vocab floats; masked by the
                                request's grammar if it has one), or NULL */
    engine_finish finish;    /* set on the request's last event */
    int32_t fault_step_tag;  /* fault build only: fault_tag of the first sequence of the step */
    int32_t n_cached;        /* prompt positions the request took from the prefix cache (or a
                                share-group peer) at its first admission instead of computing */
} engine_event;

typedef void (*engine_cb)(void *ud, const engine_event *ev);

typedef struct engine_opts {
    int32_t max_batch;  /* sequences per step */
    int32_t chunk;      /* prompt tokens per sequence per step */
    int64_t n_ctx;      /* context limit (prompt + generated); 0 = the model's */
    int64_t kv_blocks;  /* KV pool size in blocks */
    int32_t block_size; /* positions per block */
    bool kv_f16;
    int threads;
    int64_t attn_chunk;
    bool prefix_cache; /* toggle prefix-cache */
    bool kv_in_fifo;   /* toggle kv-in-skip 0: a request whose KV is still arriving (kv_in) keeps
                          its place in the queue instead of letting the requests behind it go */
    bool kv_verify;    /* toggle kv-verify */
    uint64_t identity; /* the cache's root key; 0: from the model file's identity (model_identity),
                          the KV element type and the block size, at create */
    const char *kv_disk_dir;  /* L2 tier directory (kv-disk-dir); NULL or "": none */
    int64_t kv_disk_bytes;    /* its bound (kv-disk-mem) */
    const char *kv_redis_url; /* L3 tier (kv-redis); NULL or "": none */
    const char *spec;         /* drafter (toggle spec): NULL, "" or "off": none; "ngram", "draft",
                                 "mtp" (spec.h) */
    int32_t spec_k;           /* most guesses per sequence per step (spec-k, 1..SPEC_MAX_K) */
    int32_t spec_rows;        /* decoding rows plus guesses per step, at most (spec-rows) */
    int32_t spec_ngram_min;   /* ngram: shortest suffix match (spec-ngram-min) */
    bool spec_fixed_k;        /* !spec-adapt: every decoding sequence drafts spec_k guesses in
                                 every step, within the budget and spec_rows (tests, bisecting) */
    const char *draft_model;  /* draft: the draft model's GGUF (draft-model) */
} engine_opts;

/* Fills opts from the toggle registry (max-batch, chunk, kv-block, kv-dtype, attn-chunk,
 * threads, prefix-cache, kv-verify, kv-disk-dir, kv-disk-mem, kv-redis, spec, spec-k, spec-rows,
 * spec-ngram-min, draft-model) with n_ctx = 0 and kv_blocks sized for max_batch full contexts. */
void engine_opts_from_flags(engine_opts *o, const model *m);

typedef struct engine engine;

/* Creates an engine over model m (and its tokenizer, for end-of-generation tokens). Returns 0,
 * ERR_INVAL (bad options; a draft model whose vocabulary differs), ERR_UNSUPPORTED (spec mtp),
 * the draft model's load error, ERR_NOMEM. */
int engine_create(model *m, const tokenizer *tok, const engine_opts *o, engine **out);
void engine_destroy(engine *e);

/* Disaggregation (src/disagg/disagg.h): a request whose prompt K/V another server computes (in),
 * or whose prompt K/V this server sends to another (out). Both optional (NULL functions: none);
 * every function runs on the engine thread.
 *
 * In. At admission, before the prefix cache's match, poll says whether the blocks arrived: -1
 * while they are still coming (the request waits, holding nothing, and is asked again next step;
 * the requests behind it in the queue may be admitted meanwhile, so one slow transfer does not
 * hold the others; poll itself bounds the wait: past its deadline it answers 0; once it answered
 * n >= 0 it is not asked again); else the count
 * n of blobs in *blobs, blocks 0..n-1 of the prompt in kv_block.h's format (blob_bytes each).
 * The engine restores those past what L1 held into fresh blocks, each decoded and verified
 * (kv_block_decode) and sealed into L1, stopping at the first refused one; the request then
 * computes the rest (at least the partial tail block and its last token) and samples every token
 * itself. done runs exactly once (after the restore, or when the request ends first), with the
 * counts of blocks restored and refused; the blobs are the callee's until then.
 *
 * Out. Each time one of the prompt's full blocks is sealed (computed or taken from the cache),
 * block(ctx, index, id) hands it over with a reference taken for the callee, who reads it from
 * any thread (a sealed block is never written again) and gives the reference back on the engine
 * thread (engine_kv_unref, or engine_loop_kv_unref from elsewhere). end(ctx, complete) runs
 * exactly once: complete when every full prompt block was handed, false when the request ended
 * (cancelled, failed) before; no block call follows it. */
typedef struct engine_kv_in {
    int32_t (*poll)(void *ctx, const void *const **blobs, size_t *blob_bytes);
    void (*done)(void *ctx, int32_t restored, int32_t refused);
    void *ctx;
} engine_kv_in;

typedef struct engine_kv_out {
    void (*block)(void *ctx, int32_t index, int32_t id);
    void (*end)(void *ctx, bool complete);
    void *ctx;
} engine_kv_out;

typedef struct engine_req {
    uint64_t id;
    const int32_t *prompt; /* copied */
    int32_t n_prompt;      /* >= 1 */
    sample_params sp;
    int32_t max_tokens; /* >= 0 */
    bool ignore_eog;    /* keep generating past end-of-generation tokens */
    bool want_logprobs; /* report the chosen token's logprob (also implied by sp.n_logprobs) */
    grammar_state *constraint; /* optional: generation follows this grammar (see above). The
                                  state must be at its start; the engine owns it from
                                  engine_submit on, whatever that returns, and destroys it with
                                  the request */
    engine_cb cb;
    void *ud;
    int32_t fault_tag;    /* fault build only: echoed as fault_step_tag to its step's peers */
    uint64_t share_group; /* nonzero: requests of the group with the same prompt share its K/V
                             (n > 1 choices); the shared bytes equal what each would compute */
    engine_kv_in kv_in;   /* optional: the prompt's K/V comes from another server (above) */
    engine_kv_out kv_out; /* optional: the prompt's K/V goes to another server (above) */
} engine_req;

/* Queues a request. On error kv_in.done and kv_out.end run before this returns. Returns 0, ERR_INVAL (empty prompt, bad parameters), ERR_RANGE (the prompt
 * does not fit the context, or its context could never fit the KV pool; the detail gives the
 * numbers), ERR_NOMEM. On error the callback is never called (and r->constraint is destroyed). */
int engine_submit(engine *e, const engine_req *r);

/* Cancels request id (waiting or running): its callback gets a final CANCELLED event during the
 * next engine_step. Returns 0 or ERR_NOTFOUND. */
int engine_cancel(engine *e, uint64_t id);

/* Runs one step (admission, one forward pass, sampling, callbacks). Returns 0 or the forward
 * pass's error. */
int engine_step(engine *e);

/* True while any request is waiting or running. */
bool engine_busy(const engine *e);

/* Sets a function the KV tiers' I/O thread calls when lookups for queued requests were answered
 * (kv_hier_set_notify: quick, under the tiers' lock, never calling into e), so a caller that
 * paused because no step could run may step again at once; fn NULL: none. Once it returns with
 * NULL, the previous fn is not running and will not be called. No-op without tiers. */
void engine_set_wake(engine *e, void (*fn)(void *ud), void *ud);

/* The engine's state and counters (totals since creation), copied out once per step. */
typedef struct engine_stats {
    int64_t running, waiting;
    int64_t kv_used, kv_total; /* blocks held by sequences (cached blocks that no sequence holds
                                  are in prefix.evictable) / the pool's size */
    int64_t preemptions;
    int64_t generated;        /* tokens sampled and kept */
    int64_t prompt_computed;  /* tokens fed while reading known tokens (prefill, recompute) */
    int64_t shared_positions; /* prompt positions taken from a share-group peer (n > 1) */
    int64_t cached_positions; /* positions taken from the prefix cache instead of computed */
    int64_t last_step_seqs;   /* sequences in the last step */
    int64_t kv_block_bytes;   /* bytes of one block (every buffer, every layer) */
    int64_t spec_drafted;     /* guesses fed for verification */
    int64_t spec_accepted;    /* guesses the sequence's sampler picked */
    int64_t spec_verified;    /* sequence steps that verified at least one guess */
    int64_t spec_accept_hist[SPEC_MAX_K + 1]; /* verifications by guesses accepted (0..k) */
    int64_t step_tokens_hist[SPEC_MAX_K + 2]; /* decoding sequence steps by tokens kept (0..k+1;
                                                 0: it finished on an end-of-generation token) */
    int64_t kv_in_restored;  /* blocks received from another server and restored (disagg) */
    int64_t kv_in_refused;   /* received blocks refused by verification: recomputed */
    int64_t kv_out_handed;   /* blocks handed to a transfer to another server */
    kv_prefix_stats prefix;                   /* the prefix cache (kv_prefix.h) */
    kv_hier_tier_stats tiers[KV_TIER_COUNT];  /* the tiers below it (kv_hier.h) */
} engine_stats;

void engine_stats_get(const engine *e, engine_stats *out);

/* The context limit (prompt + generated) per request. */
int64_t engine_n_ctx(const engine *e);

/* Gives back a reference engine_kv_out.block handed over (engine thread only). */
void engine_kv_unref(engine *e, int32_t id);

/* The KV pool (for reading sealed blocks handed by kv_out from another thread), its options
 * (a staging pool of the same geometry) and the cache's root key (kv_block.h's identity). The
 * pool's geometry and the identity never change after engine_create. */
const kv_pool *engine_kv_pool(const engine *e);
void engine_kv_pool_opts(const engine *e, kv_pool_opts *out);
uint64_t engine_kv_identity(const engine *e);

/* Marks every request cancelled; each gets its CANCELLED event at the next engine_step. */
void engine_cancel_all(engine *e);

#endif
