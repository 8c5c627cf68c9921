/* SPDX-License-Identifier: MIT */
/*
 * forward: see forward.h. One step is a sequence of phases, each one pool_for over chunks that
 * whichever thread is free claims (so a descheduled thread delays only the chunk it holds). A
 * phase's work is divided three ways, each of which keeps a value's computation independent of
 * the division:
 *   rows   - token rows [T*i/n, T*(i+1)/n) (or expert slots): embedding, norms, RoPE, KV
 *            writes, routing, SwiGLU, residuals, activation quantization;
 *   cols   - kn_matmul's column blocks (Q, K and V in one phase; gate and up in one);
 *   heads  - attention units: one token's query heads of one KV head (up to attn-group of them,
 *            fewer when a step has too few units to keep every thread busy), each head's result
 *            the same bits whichever heads share its unit (kn_attn_rows).
 * Chunk counts follow the work (a tiny model's phases run on the caller alone).
 * The layers are the architecture's (model_arch.forward_layer: arch_dense.c has the llama
 * family's, moe.c the mixture-of-experts FFN); this file runs them in order between the
 * embedding (folded into layer 0's first phase) and the output: logit rows are gathered, normed
 * and projected last. forward_int.h has the phase machinery the layers use.
 *
 * RoPE angles are computed per token from its absolute position in double precision
 * (theta_i = freq_scale * pos * base^(-2i/n_rot), divided by the Llama 3 factor of pair i if any;
 * with YaRN pos times the pair's blended frequency), so they are the same for a position
 * whichever step computes it.
 */
#include "base/err.h"
#include "base/flags.h"
#include "base/pool.h"
#include "model/forward_int.h"

#include <stdlib.h>
#include <string.h>

static void *fwd_alloc(size_t n, bool *fail) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p)
        *fail = true;
    return p;
}

/* Lines an idle call prefetches: a few hundred nanoseconds from memory, so a waiting thread
 * still sees its next job within about that */
#define FWD_WARM_LINES 4

/* pool_set_idle's function (mm-warm): a few lines of this thread's target, from its cursor. */
static void fwd_warm_idle(void *ctx, int thread) {
    fwd_ctx *c = ctx;
    fwd_warm *w = &c->warm[thread];
    uint32_t g = atomic_load_explicit(&w->gen, memory_order_acquire);
    if (g != w->seen) {
        w->seen = g;
        w->cur = atomic_load_explicit(&w->lo, memory_order_relaxed);
        w->end = atomic_load_explicit(&w->hi, memory_order_relaxed);
        if (w->end < w->cur || w->end - w->cur > (uintptr_t)c->mm_warm)
            w->end = w->cur + (uintptr_t)c->mm_warm;
    }
    for (int i = 0; i < FWD_WARM_LINES && w->cur < w->end; i++, w->cur += 64)
        __builtin_prefetch((const void *)w->cur, 0, 2); /* prefetcht1: into L2 */
}

int fwd_ctx_create(model *m, kv_pool *kv, int64_t max_tokens, int64_t max_outputs, int n_threads,
                   int64_t attn_chunk, fwd_ctx **out) {
    *out = NULL;
    const model_hparams *hp = &m->hp;
    if (max_tokens <= 0 || max_outputs <= 0 || n_threads <= 0 || attn_chunk <= 0)
        return err_set(ERR_INVAL, "forward: invalid sizes (tokens %lld, outputs %lld, threads %d)",
                       (long long)max_tokens, (long long)max_outputs, n_threads);
    fwd_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(ERR_NOMEM, "forward: out of memory");
    c->m = m;
    c->kv = kv;
    c->max_tokens = max_tokens;
    c->max_outputs = max_outputs;
    c->attn_chunk = attn_chunk;
    c->mm_panel = flags_int(FLAG_MM_PANEL) > 0 ? flags_int(FLAG_MM_PANEL) : max_tokens;
    c->mm_even_split = flags_int(FLAG_MM_EVEN_SPLIT) != 0;
    c->mm_tail_split = flags_int(FLAG_MM_TAIL_SPLIT);
    c->mm_warm = n_threads > 1 ? flags_int(FLAG_MM_WARM) : 0;
    c->attn_group = hp->n_head / hp->n_head_kv;
    c->attn_per_row = flags_int(FLAG_ATTN_GROUP) == 0;
    c->attn_prefetch = flags_int(FLAG_ATTN_PREFETCH) != 0;
    c->attn_v_once = flags_int(FLAG_ATTN_V_ONCE) != 0;
    if (c->attn_group > flags_int(FLAG_ATTN_GROUP))
        c->attn_group = c->attn_per_row ? 1 : flags_int(FLAG_ATTN_GROUP);
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = model_kv_dim(m);
    c->n_ff_max = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp;
    c->act_k = hp->n_embd;
    if (c->q_dim > c->act_k)
        c->act_k = c->q_dim;
    if (c->n_ff_max > c->act_k)
        c->act_k = c->n_ff_max;
    if (hp->n_ff_exp > c->act_k)
        c->act_k = hp->n_ff_exp;
    size_t T = (size_t)max_tokens, O = (size_t)max_outputs, F = sizeof(float);
    size_t FF = (size_t)c->n_ff_max;
    bool fail = false;
    c->x = fwd_alloc(T * (size_t)hp->n_embd * F, &fail);
    c->xn = fwd_alloc(T * (size_t)hp->n_embd * F, &fail);
    c->y = fwd_alloc(T * (size_t)hp->n_embd * F, &fail);
    c->q = fwd_alloc(T * (size_t)c->q_dim * F, &fail);
    c->att = fwd_alloc(T * (size_t)c->q_dim * F, &fail);
    c->k = fwd_alloc(T * (size_t)c->kv_dim * F, &fail);
    c->v = fwd_alloc(T * (size_t)c->kv_dim * F, &fail);
    c->g = fwd_alloc(T * FF * F, &fail);
    c->u = fwd_alloc(T * FF * F, &fail);
    /* quantized activations: every matmul input row (tokens, outputs, expert slots) at the
     * widest K, or what the architecture asks for beyond that */
    size_t arows = T > O ? T : O;
    if ((size_t)moe_act_rows(hp, max_tokens) > arows)
        arows = (size_t)moe_act_rows(hp, max_tokens);
    size_t aelems = arows * (size_t)c->act_k, ablocks = arows * (size_t)(c->act_k / 32 + 1);
    if (m->arch->ctx_act) {
        int64_t rows = 0, elems = 0;
        m->arch->ctx_act(hp, max_tokens, &rows, &elems);
        if ((size_t)elems > aelems)
            aelems = (size_t)elems;
        if ((size_t)(elems / 32 + rows) > ablocks)
            ablocks = (size_t)(elems / 32 + rows);
    }
    c->aq = fwd_alloc(aelems, &fail);
    c->aqd = fwd_alloc(ablocks * F, &fail);
    c->aqs = fwd_alloc(ablocks * sizeof(int32_t), &fail);
    c->aqs16 = fwd_alloc(ablocks * sizeof(int32_t), &fail);
    c->rope = fwd_alloc(T * (size_t)hp->n_rot * F, &fail);
    c->tok_id = fwd_alloc(T * sizeof(int32_t), &fail);
    c->tok_pos = fwd_alloc(T * sizeof(int32_t), &fail);
    c->tok_seq = fwd_alloc(T * sizeof(int32_t), &fail);
    c->out_row = fwd_alloc(O * sizeof(int64_t), &fail);
    c->out_x = fwd_alloc(O * (size_t)hp->n_embd * F, &fail);
    c->logits = fwd_alloc(O * (size_t)hp->n_vocab * F, &fail);
    c->mm_scratch = calloc((size_t)n_threads, sizeof(void *));
    c->attn_scratch = calloc((size_t)n_threads, sizeof(float *));
    c->chunk_next_unit = calloc((size_t)n_threads, sizeof(int64_t));
    if (!c->mm_scratch || !c->attn_scratch || !c->chunk_next_unit)
        fail = true;
    if (c->mm_warm) {
        c->warm = fwd_alloc((size_t)n_threads * sizeof *c->warm, &fail);
        for (int i = 0; c->warm && i < n_threads; i++) {
            atomic_init(&c->warm[i].lo, 0);
            atomic_init(&c->warm[i].hi, 0);
            atomic_init(&c->warm[i].gen, 0);
            c->warm[i].seen = 0;
            c->warm[i].cur = c->warm[i].end = 0;
        }
    }
    for (int i = 0; !fail && i < n_threads; i++) {
        c->mm_scratch[i] = fwd_alloc(kn_matmul_scratch_bytes(), &fail);
        size_t an = kn_attn_scratch_floats(c->attn_group, hp->head_dim, attn_chunk);
        c->attn_scratch[i] = fwd_alloc(an * F, &fail);
        if (c->attn_scratch[i]) /* padding rows are read (never used): keep them defined */
            memset(c->attn_scratch[i], 0, an * F);
    }
    c->n_threads = n_threads; /* the scratch arrays' length, also for a failed create */
    if (!fail && moe_ctx_create(c))
        fail = true;
    int arc = !fail && m->arch->ctx_create ? m->arch->ctx_create(c) : 0;
    if (arc && arc != ERR_NOMEM) { /* the architecture's error (its detail is set) */
        fwd_ctx_destroy(c);
        return arc;
    }
    if (fail || arc) {
        fwd_ctx_destroy(c);
        return err_set(ERR_NOMEM, "forward: out of memory for %lld-token buffers",
                       (long long)max_tokens);
    }
    int rc = pool_create(n_threads, &c->threads);
    if (rc) {
        fwd_ctx_destroy(c);
        return rc;
    }
    if (c->mm_warm)
        pool_set_idle(c->threads, fwd_warm_idle, c);
    c->fault_attn_offsets = FLAG_FAULT(ATTN_OFFSETS);
    c->fault_big_batch = FLAG_FAULT(BIG_BATCH);
    *out = c;
    return 0;
}

static void fwd_wake_nop(void *ctx, int ith, int nth) {
    (void)ctx, (void)ith, (void)nth;
}

void fwd_ctx_wake(fwd_ctx *c) {
    pool_run(c->threads, fwd_wake_nop, NULL);
}

void fwd_ctx_destroy(fwd_ctx *c) {
    if (!c)
        return;
    pool_destroy(c->threads);
    moe_ctx_destroy(c);
    if (c->m->arch->ctx_destroy)
        c->m->arch->ctx_destroy(c);
    free(c->x);
    free(c->xn);
    free(c->y);
    free(c->q);
    free(c->att);
    free(c->k);
    free(c->v);
    free(c->g);
    free(c->u);
    free(c->aq);
    free(c->aqd);
    free(c->aqs);
    free(c->aqs16);
    free(c->rope);
    free(c->tok_id);
    free(c->tok_pos);
    free(c->tok_seq);
    free(c->out_row);
    free(c->out_x);
    free(c->logits);
    for (int i = 0; i < c->n_threads; i++) {
        if (c->mm_scratch)
            free(c->mm_scratch[i]);
        if (c->attn_scratch)
            free(c->attn_scratch[i]);
    }
    free(c->mm_scratch);
    free(c->attn_scratch);
    free(c->chunk_next_unit);
    free(c->warm);
    free(c);
}

int fwd_ctx_n_threads(const fwd_ctx *c) {
    return c->n_threads;
}

int fwd_run_mtp(fwd_ctx *c, const fwd_batch *b, const float *h_in, const float **logits,
                int64_t *n_out) {
    if (!c->m->arch->mtp_forward || c->m->hp.n_layer_nextn <= 0 || !h_in)
        return err_set(ERR_UNSUPPORTED, "forward: %s model without multi-token-prediction layers",
                       c->m->hp.arch_name);
    c->mtp_h = h_in;
    int rc = fwd_run(c, b, logits, n_out);
    c->mtp_h = NULL;
    c->out_norm_w = NULL;
    c->out_w = NULL;
    return rc;
}

const float *fwd_hidden(const fwd_ctx *c, int64_t row, int64_t *width) {
    if (!c->m->arch->hidden || row < 0 || row >= c->n_tok)
        return NULL;
    return c->m->arch->hidden(c, row, width);
}

/* ---- the phases ---- */

void fwd_quantize_rows(fwd_ctx *c, const float *x, int64_t k, int64_t r0, int64_t r1) {
    kn_act a = {.x = x, .ldx = k, .q = c->aq, .qd = c->aqd, .qs = c->aqs, .qs16 = c->aqs16};
    kn_act_quantize(&a, k, r0, r1, c->m->isa);
}

static void fwd_embed(fwd_ctx *c, int64_t r0, int64_t r1) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd, half = hp->n_rot / 2;
    for (int64_t t = r0; t < r1; t++) {
        kn_dequantize_row(c->m->tok_embd->type, c->m->tok_embd->data, c->tok_id[t], D,
                          c->x + t * D);
        float *cs = c->rope + t * hp->n_rot;
        double pos = (double)c->tok_pos[t];
        for (int64_t i = 0; i < half; i++) {
            double theta = (double)hp->rope_freq_scale * pos *
                           pow((double)hp->rope_base, -2.0 * (double)i / (double)hp->n_rot);
            if (c->m->rope_factors)
                theta /= (double)c->m->rope_factors[i];
            if (c->m->rope_theta) /* YaRN */
                theta = pos * c->m->rope_theta[i];
            cs[2 * i] = (float)cos(theta);
            cs[2 * i + 1] = (float)sin(theta);
        }
    }
}

void fwd_rows_residual_norm(fwd_ctx *c, const fwd_phase *ph, int64_t u0, int64_t u1, int thread) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd;
    if (ph->embed)
        fwd_embed(c, u0, u1);
    else
        for (int64_t t = u0; t < u1; t++)
            kn_add(c->x + t * D, c->y + t * D, D);
    for (int64_t t = u0; t < u1; t++)
        kn_rmsnorm(c->x + t * D, ph->arg, hp->rms_eps, D, c->xn + t * D, c->m->isa);
    if (ph->quant)
        fwd_quantize_rows(c, c->xn, D, u0, u1);
}

/* Output rows [o0, o1): the last residual of their token rows (the other rows' is never read),
 * the output norm, and quantization if the output matrix wants it. */
static void fwd_rows_out_norm(fwd_ctx *c, const fwd_phase *ph, int64_t o0, int64_t o1, int thread) {
    const model_hparams *hp = &c->m->hp;
    int64_t D = hp->n_embd;
    for (int64_t o = o0; o < o1; o++) {
        int64_t t = c->out_row[o];
        kn_add(c->x + t * D, c->y + t * D, D);
        kn_rmsnorm(c->x + t * D, c->out_norm_w ? c->out_norm_w : c->m->output_norm, hp->rms_eps, D,
                   c->out_x + o * D, c->m->isa);
    }
    if (ph->quant)
        fwd_quantize_rows(c, c->out_x, D, o0, o1);
}

/* Runs chunk ci of n of a phase. Row phases take units [units*ci/n, units*(ci+1)/n). */
static void fwd_phase_chunk(void *vph, int64_t ci, int64_t n, int thread) {
    fwd_phase *ph = vph;
    fwd_ctx *c = ph->c;
    if (ph->mm) {
        int64_t part = 0, parts = 1;
        if (ph->mm_tail > 1) { /* a range's last chunk in pieces */
            int64_t k = ph->mm_chunks / c->n_threads, kr = k + ph->mm_tail - 1;
            int64_t t = ci / kr, j = ci % kr;
            if (j >= k - 1) {
                part = j - (k - 1);
                parts = ph->mm_tail;
                j = k - 1;
            }
            ci = t * k + j;
        }
        int i = 0;
        while (ci >= ph->mm[i].chunks * ph->mm[i].panels)
            ci -= ph->mm[i].chunks * ph->mm[i].panels, i++;
        const fwd_mm *mm = &ph->mm[i];
        int64_t k = kn_mat_k(mm->w), kb = k / 32, ldy = kn_mat_n(mm->w);
        int64_t r0 = ci / mm->chunks * c->mm_panel, r1 = r0 + c->mm_panel;
        if (r1 > mm->rows)
            r1 = mm->rows;
        ci %= mm->chunks;
        /* rows [r0, r1) of the product: the activation rows and their quantized forms start
         * row0 + r0 rows in */
        int64_t a0 = mm->row0 + r0;
        kn_act a = {.x = mm->x + a0 * k,
                    .ldx = k,
                    .q = c->aq + a0 * k,
                    .qd = c->aqd + a0 * kb,
                    .qs = c->aqs + a0 * kb,
                    .qs16 = c->aqs16 + a0 * kb};
        int64_t units = kn_mat_n_units(mm->w);
        int64_t u0 = units * ci / mm->chunks, u1 = units * (ci + 1) / mm->chunks;
        kn_matmul_units(mm->w, &a, r1 - r0, mm->y + a0 * ldy, ldy, u0 + (u1 - u0) * part / parts,
                        u0 + (u1 - u0) * (part + 1) / parts, c->mm_scratch[thread]);
        return;
    }
    /* uneven: later tokens attend to more keys, so claim the heaviest first */
    int64_t k = ph->uneven ? n - 1 - ci : ci, kn = ph->uneven ? n - 2 - ci : ci + 1;
    int64_t u0 = ph->units * k / n, u1 = ph->units * (k + 1) / n;
    c->chunk_next_unit[thread] = ci + 1 < n ? ph->units * kn / n : -1;
    ph->fn(c, ph, u0, u1, thread);
}

/* Chunks for `units` units of `unit_work` each: enough that each costs at least `min_work`,
 * never more than units (or max_chunks). */
static int64_t fwd_chunks(int64_t units, int64_t unit_work, int64_t min_work, int64_t max_chunks) {
    int64_t n = units * unit_work / min_work;
    if (n > units)
        n = units;
    if (n > max_chunks)
        n = max_chunks;
    return n < 1 ? 1 : n;
}

void fwd_phase_run(fwd_ctx *c, fwd_phase *ph, int64_t unit_work) {
    /* uneven units (attention: a token's keys): more, smaller chunks even them out */
    int64_t per_thread = ph->uneven ? 16 : 4;
    int64_t n =
        fwd_chunks(ph->units, unit_work, FWD_CHUNK_WORK, per_thread * (int64_t)c->n_threads);
    pool_for(c->threads, n, fwd_phase_chunk, ph);
}

void fwd_phase_rows(fwd_ctx *c, fwd_rows_fn fn, int64_t layer, int64_t units, int64_t unit_work,
                    bool quant, const void *arg) {
    fwd_phase ph = {.c = c, .fn = fn, .layer = layer, .units = units, .quant = quant, .arg = arg};
    fwd_phase_run(c, &ph, unit_work);
}

void fwd_phase_residual_norm(fwd_ctx *c, int64_t layer, const float *w, bool embed, bool quant) {
    int64_t D = c->m->hp.n_embd;
    fwd_phase ph = {.c = c,
                    .fn = fwd_rows_residual_norm,
                    .layer = layer,
                    .units = c->n_tok,
                    .quant = quant,
                    .embed = embed,
                    .arg = w};
    fwd_phase_run(c, &ph, embed ? 4 * D : 2 * D);
}

int64_t fwd_mm_chunks_even(int64_t want, int64_t units, int64_t nt) {
    if (nt <= 1 || units < nt)
        return want;
    int64_t best = 0, best_any = 0;
    for (int64_t n = nt; n <= units; n += nt) {
        int64_t d = n > want ? n - want : want - n;
        if (!best_any || d < (best_any > want ? best_any - want : want - best_any))
            best_any = n;
        if (units % n == 0 && (!best || d < (best > want ? best - want : want - best)))
            best = n;
    }
    /* a divisor far from the work-based count (units = 2 x a prime) is not worth it */
    int64_t db = best > want ? best - want : want - best;
    return best && db <= want / 2 + nt ? best : best_any;
}

/* A matmul phase's division: fills each mm's chunks and panels; returns the chunks in all. */
static int64_t fwd_mm_plan(const fwd_ctx *c, int n_mm, fwd_mm *mm) {
    int64_t total = 0;
    for (int i = 0; i < n_mm; i++) {
        int64_t N = kn_mat_n(mm[i].w);
        mm[i].panels = (mm[i].rows + c->mm_panel - 1) / c->mm_panel;
        int64_t rows = mm[i].rows < c->mm_panel ? mm[i].rows : c->mm_panel;
        mm[i].chunks = fwd_chunks((N + 63) / 64, 64 * kn_mat_k(mm[i].w) * rows, FWD_MM_CHUNK_WORK,
                                  (N + 63) / 64);
        if (c->mm_even_split)
            mm[i].chunks = fwd_mm_chunks_even(mm[i].chunks, kn_mat_n_units(mm[i].w), c->n_threads);
        total += mm[i].chunks * mm[i].panels;
    }
    return total;
}

/* Publishes thread t's target [lo, hi) (empty: lo = hi = 0). */
static void fwd_warm_publish(fwd_ctx *c, int t, uintptr_t lo, uintptr_t hi) {
    atomic_store_explicit(&c->warm[t].lo, lo, memory_order_relaxed);
    atomic_store_explicit(&c->warm[t].hi, hi, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->warm[t].gen, 1, memory_order_release);
}

void fwd_warm_matmul(fwd_ctx *c, int n_mm, fwd_mm *mm) {
    if (!c->mm_warm || n_mm < 1 || c->warm_w == mm[0].w) /* off, or already the target */
        return;
    int64_t total = fwd_mm_plan(c, n_mm, mm), nt = c->n_threads;
    for (int64_t t = 0; t < nt; t++) {
        /* the front of thread t's range (pool.h; with mm-tail-split's pieces the range's chunks
         * are the same, n a multiple of nt), within the matrix and panel 0 it starts in */
        int64_t ci = total * t / nt, ce = total * (t + 1) / nt, i = 0;
        while (i < n_mm && ci >= mm[i].chunks * mm[i].panels)
            ci -= mm[i].chunks * mm[i].panels, ce -= mm[i].chunks * mm[i].panels, i++;
        const void *p = NULL;
        size_t bytes = 0; /* none: no chunks, past panel 0, or no contiguous span */
        if (i < n_mm && ci < mm[i].chunks) {
            int64_t units = kn_mat_n_units(mm[i].w), ch = mm[i].chunks;
            if (!kn_mat_units_span(mm[i].w, units * ci / ch, units * (ce < ch ? ce : ch) / ch, &p,
                                   &bytes))
                p = NULL, bytes = 0;
        }
        if (bytes > (size_t)c->mm_warm)
            bytes = (size_t)c->mm_warm;
        fwd_warm_publish(c, (int)t, (uintptr_t)p, (uintptr_t)p + bytes);
    }
    c->warm_w = mm[0].w;
}

void fwd_phase_matmul(fwd_ctx *c, int n_mm, fwd_mm *mm) {
    fwd_phase ph = {.c = c, .layer = -1, .mm = mm, .n_mm = n_mm};
    int64_t total = fwd_mm_plan(c, n_mm, mm);
    /* mm-warm: the targets are this phase's (the threads now run them), clear them; another
     * phase's stay, warmed while this one's last chunks run */
    if (c->mm_warm && c->warm_w == mm[0].w) {
        for (int t = 0; t < c->n_threads; t++)
            fwd_warm_publish(c, t, 0, 0);
        c->warm_w = NULL;
    }
    /* with pool-ranges thread t's own range is [n * t / T, n * (t + 1) / T) (pool.h): a multiple
     * of T chunks keeps each range's pieces at its end */
    int64_t nt = c->n_threads;
    ph.mm_chunks = total;
    ph.mm_tail = nt > 1 && c->mm_tail_split > 1 && total % nt == 0 ? c->mm_tail_split : 1;
    if (total > 0)
        pool_for(c->threads, total + (ph.mm_tail - 1) * (ph.mm_tail > 1 ? nt : 0), fwd_phase_chunk,
                 &ph);
}

static void fwd_step(fwd_ctx *c) {
    model *m = c->m;
    const model_hparams *hp = &m->hp;
    int64_t D = hp->n_embd, T = c->n_tok;
    /* heads per attention unit: attn-group, halved while the step would have fewer units than
     * threads (a decode step of one sequence of an MQA model); the bits do not depend on it */
    int64_t group = hp->n_head / hp->n_head_kv;
    c->attn_per_unit = c->attn_group;
    while (c->attn_per_unit > 1 &&
           T * hp->n_head_kv * ((group + c->attn_per_unit - 1) / c->attn_per_unit) < c->n_threads)
        c->attn_per_unit = (c->attn_per_unit + 1) / 2;
    const kn_mat *out_w = m->output;
    if (c->mtp_h) { /* an MTP step: the architecture's MTP block instead of the layers */
        m->arch->mtp_forward(c);
        out_w = c->out_w ? c->out_w : m->output;
    } else {
        for (int64_t l = 0; l < hp->n_layer; l++)
            m->arch->forward_layer(c, l);
    }
    /* FAULT (d): above batch 32 only the first 32 logit rows are computed; later rows keep
     * whatever the buffer held from an earlier step */
    int64_t n_logit_rows = c->fault_big_batch && c->n_out > 32 ? 32 : c->n_out;
    fwd_mm out = {.w = out_w, .x = c->out_x, .y = c->logits, .rows = n_logit_rows};
    if (n_logit_rows > 0)
        fwd_warm_matmul(c, 1, &out);
    fwd_phase ph = {.c = c,
                    .fn = fwd_rows_out_norm,
                    .layer = -1,
                    .units = c->n_out,
                    .quant = kn_mat_wants_q8(out_w)};
    fwd_phase_run(c, &ph, 3 * D);
    if (n_logit_rows > 0)
        fwd_phase_matmul(c, 1, &out);
}

int fwd_run(fwd_ctx *c, const fwd_batch *b, const float **logits, int64_t *n_out) {
    const model_hparams *hp = &c->m->hp;
    int64_t bs = kv_pool_block_size(c->kv);
    int64_t n_tok = 0, n_o = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const fwd_seq *q = &b->seqs[s];
        if (q->n_tokens <= 0 || q->pos0 < 0 || q->n_logits < 0 || q->n_logits > q->n_tokens)
            return err_set(ERR_INVAL,
                           "forward: sequence %d: bad token count %d / position %d / logits %d", s,
                           q->n_tokens, q->pos0, q->n_logits);
        int64_t end = (int64_t)q->pos0 + q->n_tokens;
        if ((end + bs - 1) / bs > q->n_blocks)
            return err_set(ERR_INVAL, "forward: sequence %d: %d blocks do not cover %lld positions",
                           s, q->n_blocks, (long long)end);
        for (int32_t i = 0; i < q->n_blocks && i < (end + bs - 1) / bs; i++)
            if (q->blocks[i] < 0 || q->blocks[i] >= kv_pool_n_blocks(c->kv))
                return err_set(ERR_INVAL, "forward: sequence %d: block id %d out of range", s,
                               q->blocks[i]);
        for (int32_t i = 0; i < q->n_tokens; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= hp->n_vocab)
                return err_set(ERR_INVAL,
                               "forward: sequence %d: token id %d outside vocabulary of %lld", s,
                               q->tokens[i], (long long)hp->n_vocab);
        n_tok += q->n_tokens;
        n_o += q->n_logits;
    }
    if (n_tok > c->max_tokens || n_o > c->max_outputs)
        return err_set(
            ERR_INVAL, "forward: %lld tokens / %lld outputs exceed the context's %lld / %lld",
            (long long)n_tok, (long long)n_o, (long long)c->max_tokens, (long long)c->max_outputs);
    int64_t t = 0, o = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const fwd_seq *q = &b->seqs[s];
        for (int32_t i = 0; i < q->n_tokens; i++, t++) {
            c->tok_id[t] = q->tokens[i];
            c->tok_pos[t] = q->pos0 + i;
            c->tok_seq[t] = s;
            if (i >= q->n_tokens - q->n_logits)
                c->out_row[o++] = t;
        }
    }
    c->b = b;
    c->n_tok = n_tok;
    c->n_out = n_o;
    if (n_tok > 0)
        fwd_step(c);
    *logits = c->logits;
    *n_out = n_o;
    return 0;
}
