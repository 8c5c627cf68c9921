/* SPDX-License-Identifier: MIT */
/* Unit tests for src/base: err, utf8, strbuf, arena, json, flags, pool. */
#include "test.h"
#include "base/arena.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/list.h"
#include "base/mem.h"
#include "base/pool.h"
#include "base/strbuf.h"
#include "base/utf8.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void t_err(void) {
    T_CHECK(strcmp(err_str(ERR_NOMEM), "out of memory") == 0);
    T_CHECK(strcmp(err_name(ERR_FORMAT), "ERR_FORMAT") == 0);
    T_EQ_INT(err_set(ERR_RANGE, "x %d", 5), ERR_RANGE);
    T_CHECK(strcmp(err_detail(), "x 5") == 0);
    err_wrap(ERR_RANGE, "file %s", "a.gguf");
    T_CHECK(strcmp(err_detail(), "file a.gguf: x 5") == 0);
}

static void t_utf8(void) {
    uint32_t cp;
    T_EQ_INT(utf8_hex_digit('0'), 0);
    T_EQ_INT(utf8_hex_digit('9'), 9);
    T_EQ_INT(utf8_hex_digit('a'), 10);
    T_EQ_INT(utf8_hex_digit('F'), 15);
    T_EQ_INT(utf8_hex_digit('g'), -1);
    T_EQ_INT(utf8_hex_digit('\xC3'), -1);
    T_EQ_INT(utf8_hex_digit(0), -1);
    T_EQ_INT(utf8_decode((const unsigned char *)"\xE2\x82\xAC", 3, &cp), 3);
    T_EQ_INT(cp, 0x20AC);
    T_EQ_INT(utf8_decode((const unsigned char *)"\xC0\x80", 2, &cp), -1);     /* overlong */
    T_EQ_INT(utf8_decode((const unsigned char *)"\xED\xA0\x80", 3, &cp), -1); /* surrogate */
    T_EQ_INT(utf8_decode((const unsigned char *)"\xF4\x90\x80\x80", 4, &cp), -1);
    T_EQ_INT(utf8_incomplete_tail("ab\xE2\x82", 4), 2);
    T_EQ_INT(utf8_incomplete_tail("ab\xE2", 3), 1);
    T_EQ_INT(utf8_incomplete_tail("ab\xE2\x82\xAC", 5), 0);
    T_EQ_INT(utf8_incomplete_tail("\xF0\x9F\x98", 3), 3);
    T_EQ_INT(utf8_incomplete_tail("a\x80", 2), 0);
    size_t off = 0;
    T_EQ_INT(utf8_valid("ok\xFFno", 5, &off), 0);
    T_EQ_INT(off, 2);
}

static void t_strbuf(void) {
    strbuf sb;
    strbuf_init(&sb);
    T_EQ_INT(sb.len, 0);
    T_CHECK(sb.data[0] == 0);
    for (int i = 0; i < 1000; i++)
        strbuf_printf(&sb, "%d,", i);
    T_CHECK(strncmp(sb.data, "0,1,2,", 6) == 0);
    strbuf_reset(&sb);
    strbuf_json_str(&sb, "a\"b\\\n\x01\xC3\xA9\xF0\x9F\x98\x80", 12, false);
    T_CHECK(strcmp(sb.data, "\"a\\\"b\\\\\\n\\u0001\xC3\xA9\xF0\x9F\x98\x80\"") == 0);
    strbuf_reset(&sb);
    strbuf_json_str(&sb, "\xC3\xA9\xF0\x9F\x98\x80", 6, true);
    T_CHECK(strcmp(sb.data, "\"\\u00e9\\ud83d\\ude00\"") == 0);
    strbuf_reset(&sb);
    strbuf_json_cstr(&sb, "x\"");
    strbuf_putc(&sb, ' ');
    strbuf_json_cstr(&sb, NULL);
    T_CHECK(strcmp(sb.data, "\"x\\\"\" null") == 0);
    strbuf_reset(&sb);
    strbuf_json_num(&sb, 0.1);
    strbuf_putc(&sb, ' ');
    strbuf_json_num(&sb, 3);
    strbuf_putc(&sb, ' ');
    strbuf_json_num(&sb, -2.5e-300);
    T_CHECK(strcmp(sb.data, "0.1 3 -2.5e-300") == 0);
    strbuf_deinit(&sb);
}

static void t_arena(void) {
    arena *a = arena_create(128, 4096);
    T_CHECK(a);
    void *p = arena_alloc(a, 10);
    T_CHECK(p && ((uintptr_t)p & 15) == 0);
    T_CHECK(arena_alloc(a, 1000));         /* oversized chunk */
    T_CHECK(arena_alloc(a, 5000) == NULL); /* over the limit */
    arena_reset(a);
    T_EQ_INT(arena_used(a), 0);
    T_CHECK(arena_strndup(a, "abc", 3));
    arena_destroy(a);
}

static void t_json(void) {
    arena *a = arena_create(0, 0);
    json_value *v;
    const char *doc = "{\"a\":[1,2.5,-3e2,true,null],\"b\":\"x\\u00e9\\ud83d\\ude00\","
                      "\"a\":{\"k\":\"\\u0000z\"}}";
    T_OK(json_parse(a, doc, strlen(doc), &v));
    T_EQ_INT(v->obj.n, 2); /* duplicate key replaced in place */
    const json_value *b = json_get(v, "b");
    T_CHECK(b && b->type == JSON_STRING && b->str.len == 1 + 2 + 4);
    const json_value *k = json_get(json_get(v, "a"), "k");
    T_CHECK(k && k->str.len == 2 && k->str.s[0] == 0);
    strbuf sb;
    strbuf_init(&sb);
    json_write(&sb, v);
    T_CHECK(strcmp(sb.data, "{\"a\":{\"k\":\"\\u0000z\"},\"b\":\"x\xC3\xA9\xF0\x9F\x98\x80\"}") ==
            0);
    strbuf_deinit(&sb);
    static const char *eq[][2] = {{"{\"a\":[1,{\"b\":null}],\"c\":\"\\u0000\"}",
                                   "{\"c\":\"\\u0000\",\"a\":[1.0,{\"b\":null}]}"},
                                  {"[]", "[]"},
                                  {"{\"x\":1,\"x\":2}", "{\"x\":2}"}};
    static const char *ne[][2] = {{"{\"a\":1}", "{\"a\":1,\"b\":1}"},
                                  {"[1,2]", "[2,1]"},
                                  {"{\"a\\u0000b\":1}", "{\"a\":1}"},
                                  {"\"ab\"", "\"a\""},
                                  {"0", "false"},
                                  {"{\"a\":[1]}", "{\"a\":[1,1]}"}};
    for (size_t i = 0; i < sizeof eq / sizeof *eq + sizeof ne / sizeof *ne; i++) {
        bool want = i < sizeof eq / sizeof *eq;
        const char *const *pr = want ? eq[i] : ne[i - sizeof eq / sizeof *eq];
        json_value *x, *y;
        T_OK(json_parse(a, pr[0], strlen(pr[0]), &x));
        T_OK(json_parse(a, pr[1], strlen(pr[1]), &y));
        T_CHECKF(json_equal(x, y) == want && json_equal(y, x) == want, "%s vs %s", pr[0], pr[1]);
    }
    static const char *bad[] = {"",         "{",           "[1,]",       "{\"a\" 1}", "01",
                                "1.",       "\"\\ud800\"", "\"\xFF\"",   "[1] x",     "tru",
                                "\"a\nb\"", "-",           "{\"a\":1,}", "\"\\x\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = json_parse(a, bad[i], strlen(bad[i]), &v);
        T_CHECKF(rc == ERR_FORMAT, "'%s' gave %d", bad[i], rc);
        T_CHECKF(strstr(err_detail(), "at byte"), "'%s': detail '%s'", bad[i], err_detail());
    }
    char deep[600];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    T_EQ_INT(json_parse(a, deep, 600, &v), ERR_RANGE);
    int64_t iv;
    T_OK(json_parse(a, "12345678901234", 14, &v));
    T_CHECK(json_as_int(v, &iv) && iv == 12345678901234LL);
    arena_destroy(a);
}

/* Arrays and objects, parsed or built, grow geometrically: n items cost arena bytes linear in n
 * (json_arr_push once copied the whole array per push, so 100,000 pushes needed 40 GB and a chat
 * of 2,800 messages ran out of its request's 64 MiB). Each arena's limit is twice what linear
 * growth needs (chunk tails are lost), so a quadratic builder fails long before the end. */
static void t_json_growth(void) {
    enum { N = 100000, NK = 5000 };
    /* pushes: pointer arrays only (one shared item); doubling leaves at most 2n + 2n slots */
    arena *a = arena_create(0, (size_t)N * 8 * 4 * 2);
    json_value *arr = json_new_arr(a), *item = json_new_null(a);
    T_CHECK(arr && item);
    size_t pushed = 0;
    while (pushed < N && json_arr_push(a, arr, item) == 0)
        pushed++;
    T_CHECKF(pushed == N, "json_arr_push failed at item %zu of %d (arena used %zu)", pushed, N,
             arena_used(a));
    T_CHECK(arr->arr.n == N && arr->arr.items[N - 1] == item && arr->arr.cap >= N);
    arena_destroy(a);

    /* object members: each key copied (16 bytes) plus three arrays of 8-byte slots */
    a = arena_create(0, (size_t)NK * (16 + 3 * 8 * 4) * 2);
    json_value *obj = json_new_obj(a);
    item = json_new_null(a);
    size_t set = 0;
    for (; set < NK; set++) {
        char key[16];
        snprintf(key, sizeof key, "k%zu", set);
        if (json_obj_set(a, obj, key, item))
            break;
    }
    T_CHECKF(set == NK, "json_obj_set failed at key %zu of %d (arena used %zu)", set, NK,
             arena_used(a));
    T_CHECK(obj->obj.n == NK && json_get(obj, "k4999") == item && !json_get(obj, "k5000"));
    arena_destroy(a);

    /* parsing an array of N numbers: arena bytes a small multiple of the text */
    strbuf sb;
    strbuf_init(&sb);
    strbuf_putc(&sb, '[');
    for (int i = 0; i < N; i++)
        strbuf_puts(&sb, i ? ",0" : "0");
    strbuf_putc(&sb, ']');
    a = arena_create(0, 0);
    json_value *v;
    T_OK(json_parse(a, sb.data, sb.len, &v));
    T_CHECK(v->type == JSON_ARRAY && v->arr.n == N);
    T_CHECKF(arena_used(a) <= 64 * sb.len, "parsing %zu bytes used %zu arena bytes", sb.len,
             arena_used(a));
    /* what the server does with a chat: clone each message object and push it to a copy */
    strbuf_reset(&sb);
    strbuf_putc(&sb, '[');
    for (int i = 0; i < N / 10; i++)
        strbuf_puts(&sb, i ? ",{\"role\":\"user\",\"content\":\"hi\"}"
                           : "{\"role\":\"user\",\"content\":\"hi\"}");
    strbuf_putc(&sb, ']');
    arena_reset(a);
    T_OK(json_parse(a, sb.data, sb.len, &v));
    size_t parsed = arena_used(a);
    json_value *copy = json_new_arr(a), *hi = json_new_str(a, "yo", 2);
    for (size_t i = 0; i < v->arr.n; i++) {
        json_value *c = json_obj_clone(a, v->arr.items[i]);
        T_CHECK(c && c->obj.n == 2 && json_arr_push(a, copy, c) == 0);
        if (c && c->obj.n == 2)
            c->obj.vals[1] = hi; /* the clone's own array: the parsed message keeps its value */
    }
    T_CHECK(copy->arr.n == v->arr.n);
    T_CHECK(json_equal(json_get(v->arr.items[7], "content"), json_get(v->arr.items[8], "content")));
    const char *str;
    T_CHECK(json_as_str(json_get(copy->arr.items[7], "content"), &str, NULL) && !strcmp(str, "yo"));
    T_CHECK(json_as_str(json_get(v->arr.items[7], "content"), &str, NULL) && !strcmp(str, "hi"));
    T_CHECKF(arena_used(a) - parsed <= 2 * parsed, "copying %zu messages used %zu arena bytes",
             v->arr.n, arena_used(a) - parsed);
    T_CHECK(json_obj_clone(a, copy) == NULL); /* not an object */

    /* an object of N keys, every tenth one repeated at the end: duplicates are found through a
     * hash index, so the key comparisons are linear in N (comparing with every earlier key was
     * N^2 / 2: a minute for a 1 MB body), and the last value wins at the first position */
    strbuf_reset(&sb);
    strbuf_putc(&sb, '{');
    for (int i = 0; i < N; i++)
        strbuf_printf(&sb, "%s\"k%d\":%d", i ? "," : "", i, i);
    for (int i = 0; i < N; i += 10)
        strbuf_printf(&sb, ",\"k%d\":-1", i);
    strbuf_putc(&sb, '}');
    arena_reset(a);
    size_t cmp0 = json_key_compares();
    T_OK(json_parse(a, sb.data, sb.len, &v));
    size_t cmps = json_key_compares() - cmp0;
    T_CHECKF(cmps <= 4 * (size_t)(N + N / 10), "%zu key comparisons for %d keys", cmps, N + N / 10);
    T_CHECK(v->type == JSON_OBJECT && v->obj.n == N);
    int64_t iv;
    T_CHECK(json_as_int(json_get(v, "k0"), &iv) && iv == -1);
    T_CHECK(json_as_int(json_get(v, "k99990"), &iv) && iv == -1);
    T_CHECK(json_as_int(json_get(v, "k99991"), &iv) && iv == 99991);
    T_CHECK(v->obj.key_lens[20] == 3 && !memcmp(v->obj.keys[20], "k20", 3));
    T_CHECK(json_as_int(v->obj.vals[20], &iv) && iv == -1);
    arena_destroy(a);
    strbuf_deinit(&sb);
}

static void t_flags(void) {
    T_OK(flags_init());
    T_EQ_INT(flags_int(FLAG_KV_BLOCK), 16);
    T_OK(flags_set("kv-block", "32"));
    T_EQ_INT(flags_int(FLAG_KV_BLOCK), 32);
    T_EQ_INT(flags_set("kv-block", "0"), ERR_INVAL);
    T_EQ_INT(flags_set("kv-dtype", "q9"), ERR_INVAL);
    T_CHECK(strstr(err_detail(), "kv-dtype") && strstr(err_detail(), "q9"));
    T_EQ_INT(flags_set("nope", "1"), ERR_NOTFOUND);
    char *argv[] = {"x", "--isa", "scalar", "--other", "--kv-dtype=f32", "file", NULL};
    int argc = 6;
    T_OK(flags_parse_args(&argc, argv));
    T_EQ_INT(argc, 3);
    T_CHECK(strcmp(argv[1], "--other") == 0 && strcmp(argv[2], "file") == 0);
    T_CHECK(strcmp(flags_str(FLAG_ISA), "scalar") == 0);
    T_CHECK(strcmp(flags_str(FLAG_KV_DTYPE), "f32") == 0);
    setenv("VERITY_KV_BLOCK", "abc", 1);
    T_EQ_INT(flags_init(), ERR_INVAL);
    T_CHECK(strstr(err_detail(), "VERITY_KV_BLOCK"));
    unsetenv("VERITY_KV_BLOCK");
    T_OK(flags_init());
}

typedef struct {
    pool *p;
    atomic_int sum;
    int slots[64];
} pool_ctx;

static void pool_job(void *vctx, int ith, int nth) {
    pool_ctx *c = vctx;
    for (int round = 0; round < 100; round++) {
        c->slots[ith] = round;
        pool_barrier(c->p);
        for (int j = 0; j < nth; j++)
            if (c->slots[j] != round)
                atomic_fetch_add(&c->sum, 1000000);
        pool_barrier(c->p);
    }
    atomic_fetch_add(&c->sum, ith + 1);
}

static void t_pool(void) {
    for (int n = 1; n <= 4; n++) {
        pool *p;
        T_OK(pool_create(n, &p));
        pool_ctx c = {.p = p};
        for (int r = 0; r < 5; r++)
            pool_run(p, pool_job, &c);
        T_EQ_INT(atomic_load(&c.sum), 5 * n * (n + 1) / 2);
        pool_destroy(p);
    }
}

static void pool_count(void *vctx, int ith, int nth) {
    (void)ith, (void)nth;
    atomic_fetch_add(&((pool_ctx *)vctx)->sum, 1);
}

typedef struct {
    int n_threads;
    uint32_t *hits; /* per chunk */
    atomic_int bad_thread;
} pool_for_ctx;

static void pool_for_chunk(void *vctx, int64_t chunk, int64_t n_chunks, int thread) {
    pool_for_ctx *c = vctx;
    if (thread < 0 || thread >= c->n_threads || chunk < 0 || chunk >= n_chunks)
        atomic_fetch_add(&c->bad_thread, 1);
    else
        c->hits[chunk] += 1; /* each chunk is run by exactly one thread */
}

/* pool_for runs every chunk exactly once, whatever the chunk count (including more than one job
 * word holds, and fewer chunks than threads) and interleaved with pool_run jobs, and passes a
 * thread index in range: claimed by range (pool-ranges, the default) and from one counter. */
static void t_pool_for(void) {
    static const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, (1 << 20) + 5};
    for (int nr = 0; nr < 8; nr++) {
        int n = 1 + nr % 4;
        T_OK(flags_set("pool-ranges", nr < 4 ? "1" : "0"));
        pool *p;
        T_OK(pool_create(n, &p));
        pool_ctx rc = {.p = p};
        int runs = 0;
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            int64_t sz = sizes[si];
            int rounds = sz > 100000 ? 1 : 200;
            pool_for_ctx c = {.n_threads = n, .hits = calloc((size_t)(sz ? sz : 1), 4)};
            T_CHECK(c.hits != NULL);
            for (int r = 0; r < rounds; r++) {
                pool_for(p, sz, pool_for_chunk, &c);
                if (r % 50 == 0)
                    pool_run(p, pool_count, &rc);
            }
            int64_t wrong = 0;
            for (int64_t i = 0; i < sz; i++)
                wrong += c.hits[i] != (uint32_t)rounds;
            T_EQ_INT(wrong, 0);
            T_EQ_INT(atomic_load(&c.bad_thread), 0);
            free(c.hits);
            runs += (rounds + 49) / 50;
        }
        T_EQ_INT(atomic_load(&rc.sum), runs * n);
        pool_destroy(p);
    }
    T_OK(flags_set("pool-ranges", "1"));
}

typedef struct {
    int64_t n;
    atomic_int done;          /* chunks finished, but chunk 0 */
    atomic_int runs[64];      /* per chunk */
    atomic_int by_thread[64]; /* the thread that ran it */
} pool_steal_ctx;

/* Whoever runs chunk 0 waits until every other chunk is done: the others must take the rest of
 * its range (with ranges, chunk 0 is the owner's first, so the rest of the owner's range). */
static void pool_steal_chunk(void *vctx, int64_t chunk, int64_t n_chunks, int thread) {
    pool_steal_ctx *c = vctx;
    (void)n_chunks;
    atomic_fetch_add(&c->runs[chunk], 1);
    atomic_store(&c->by_thread[chunk], thread);
    if (chunk == 0) /* a pool that never hands out the rest hangs here: the runner's timeout */
        while (atomic_load(&c->done) < c->n - 1)
            sched_yield(); /* the CPU to the others where the threads outnumber the cores */
    else
        atomic_fetch_add(&c->done, 1);
}

/* A thread stalled in its first chunk (descheduled, or slow) delays only that chunk: the other
 * threads finish their own ranges, then take the stalled thread's remaining chunks from the back.
 * Deterministic: the stall lasts until every other chunk is done, whoever runs them. */
static void t_pool_for_ranges_steal(void) {
    for (int nr = 0; nr < 4; nr++) {
        int n = 2 + nr % 2;
        T_OK(flags_set("pool-ranges", nr < 2 ? "1" : "0"));
        pool *p;
        T_OK(pool_create(n, &p));
        for (int round = 0; round < 20; round++) {
            pool_steal_ctx c = {.n = 48};
            pool_for(p, c.n, pool_steal_chunk, &c);
            int64_t wrong = 0, stolen = 0;
            for (int64_t i = 0; i < c.n; i++)
                wrong += atomic_load(&c.runs[i]) != 1;
            T_EQ_INT(wrong, 0);
            /* the owner claims first, so it normally runs chunk 0 (a preempted owner may find
             * everything done); then the rest of its range, [1, 48 / n) by range, went to the
             * others (a ranges pool without stealing never returns) */
            for (int64_t i = 1; i < c.n / n; i++)
                stolen += atomic_load(&c.by_thread[i]) != 0;
            if (atomic_load(&c.by_thread[0]) == 0)
                T_EQ_INT(stolen, c.n / n - 1);
        }
        pool_destroy(p);
    }
    T_OK(flags_set("pool-ranges", "1"));
}

typedef struct pool_alt_ctx {
    int magic;
    atomic_long wrong, chunks, runs;
} pool_alt_ctx;

static atomic_long pool_alt_null; /* chunks run with ctx NULL */

static void pool_alt_chunk(void *ctx, int64_t c, int64_t n, int thread) {
    if (!ctx) {
        atomic_fetch_add(&pool_alt_null, 1);
        return;
    }
    pool_alt_ctx *a = ctx;
    if (a->magic != 42 || c < 0 || c >= n || thread < 0)
        atomic_fetch_add(&a->wrong, 1);
    atomic_fetch_add(&a->chunks, 1);
}

static void pool_alt_run(void *ctx, int ith, int nth) {
    pool_alt_ctx *a = ctx;
    if (a) /* the NULL-ctx runs count nothing */
        atomic_fetch_add(&a->runs, 1);
    (void)ith;
    (void)nth;
}

/* pool_for and pool_run in turn, the pool_run's ctx NULL (forward's fwd_ctx_wake): every chunk
 * gets its own job's ctx, each exactly once, and every job returns. A worker that read a finished
 * ranges job's word late could once claim chunk 0 of it again through the shared counter, after
 * the owner had stored the pool_run's NULL ctx: that chunk ran with ctx NULL and counted in the
 * pool_run's `done`, which never again equalled its target (a hang, within a thousand rounds
 * here). Passing does not depend on timing; the failure did. */
static void t_pool_for_run_alternate(void) {
    for (int n = 2; n <= 3; n++) {
        pool *p;
        T_OK(pool_create(n, &p));
        pool_alt_ctx a = {.magic = 42};
        atomic_store(&pool_alt_null, 0);
        pool_for(p, 2, pool_alt_chunk, &a);
        long rounds = (long)((n == 2 ? 20000 : 4000) * test_scale()) + 200, want = 2;
        for (long i = 0; i < rounds; i++) {
            int64_t k = 2 + i % 5;
            pool_for(p, k, pool_alt_chunk, &a);
            want += k;
            pool_run(p, pool_alt_run, (i & 1) ? NULL : &a);
        }
        pool_destroy(p);
        T_EQ_INT(atomic_load(&pool_alt_null), 0);
        T_EQ_INT(atomic_load(&a.wrong), 0);
        T_EQ_INT(atomic_load(&a.chunks), want);
        T_EQ_INT(atomic_load(&a.runs), (rounds + 1) / 2 * n);
    }
}

/* pool_set_idle: a thread that has nothing to run calls the idle function while it spins (the
 * worker waiting for its next job, the owner for a pool_for's last chunk), with its own thread
 * number and the ctx given. Chunk 0 of each pool_for waits (up to 10 s) until a thread other than
 * the one running it has called it: the other thread's chunk 1 ends at once and it has nothing
 * left, so it spins; without the calls every round times out. Spinning is set on explicitly
 * (pool-spin 0 makes every wait a sleep, which calls nothing). */
typedef struct pool_idle_ctx {
    int magic;
    int n;
    _Atomic long calls[4];
    atomic_int wrong, timeouts;
} pool_idle_ctx;

static void pool_idle_count(void *ctx, int thread) {
    pool_idle_ctx *a = ctx;
    if (a->magic != 7 || thread < 0 || thread >= a->n)
        atomic_fetch_add(&a->wrong, 1);
    else
        atomic_fetch_add(&a->calls[thread], 1);
}

static void pool_idle_chunk(void *ctx, int64_t c, int64_t n, int thread) {
    pool_idle_ctx *a = ctx;
    (void)n;
    if (c != 0)
        return;
    int64_t t0 = clock_now_ns();
    for (;;) {
        long others = 0;
        for (int t = 0; t < a->n; t++)
            if (t != thread)
                others += atomic_load(&a->calls[t]);
        if (others > 0)
            break;
        if (clock_now_ns() - t0 > 10 * (int64_t)1000000000) {
            atomic_fetch_add(&a->timeouts, 1);
            break;
        }
        sched_yield();
    }
    for (int t = 0; t < a->n; t++) /* the next round waits for new calls */
        atomic_store(&a->calls[t], 0);
}

static void t_pool_idle(void) {
    char spin[8];
    snprintf(spin, sizeof spin, "%s", flags_str(FLAG_POOL_SPIN));
    T_OK(flags_set("pool-spin", "1"));
    for (int n = 2; n <= 3; n++) {
        pool *p;
        T_OK(pool_create(n, &p));
        pool_idle_ctx a = {.magic = 7, .n = n};
        pool_set_idle(p, pool_idle_count, &a);
        for (int r = 0; r < 20 && !atomic_load(&a.timeouts); r++)
            pool_for(p, 2, pool_idle_chunk, &a);
        pool_destroy(p);
        T_EQ_INT(atomic_load(&a.wrong), 0);
        T_EQ_INT(atomic_load(&a.timeouts), 0);
    }
    T_OK(flags_set("pool-spin", spin));
}

/* file_read_all: the bytes and a NUL after them; a file read to its end whatever stat says
 * (/proc); missing, too large, unreadable (a directory) each its own error, naming the path. */
static void t_file(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/f.bin", test_tmpdir());
    FILE *f = fopen(path, "wb");
    T_CHECK(f != NULL);
    for (int i = 0; i < 200000; i++)
        fputc(i * 7 % 251, f);
    fclose(f);
    char *b;
    size_t n;
    T_OK(file_read_all(path, 0, &b, &n));
    T_EQ_INT(n, 200000);
    int bad = -1;
    for (int i = 0; i < 200000 && bad < 0; i++)
        if ((unsigned char)b[i] != i * 7 % 251)
            bad = i;
    T_CHECKF(bad < 0 && b[n] == 0, "byte %d differs", bad);
    free(b);
    T_CHECK(file_read_all(path, 199999, &b, &n) == ERR_TOOLARGE && !b && n == 0);
    T_OK(file_read_all(path, 200000, &b, &n));
    free(b);
    T_OK(file_read_all("/proc/self/status", 0, &b, &n)); /* stat size 0 */
    T_CHECK(n > 0 && strstr(b, "Pid:") != NULL);
    free(b);
    snprintf(path, sizeof path, "%s/none", test_tmpdir());
    T_CHECK(file_read_all(path, 0, &b, &n) == ERR_NOTFOUND && strstr(err_detail(), path));
    T_CHECK(file_read_all(test_tmpdir(), 0, &b, &n) == ERR_IO && !b);
    FILE *mem = fmemopen((void *)"piped text", 10, "r"); /* a stream, as stdin would be */
    T_CHECK(mem != NULL);
    T_OK(file_read_stream(mem, "stdin", 0, &b, &n));
    T_CHECK(n == 10 && !strcmp(b, "piped text"));
    free(b);
    rewind(mem);
    T_CHECK(file_read_stream(mem, "stdin", 4, &b, &n) == ERR_TOOLARGE && !b && n == 0);
    fclose(mem);
}

/* mem_grow and arena_grow: capacities double to what is needed, contents survive, a failure
 * leaves the array as it was. */
static void t_grow(void) {
    int *v = NULL;
    size_t cap = 0;
    for (int i = 0; i < 1000; i++) {
        T_OK(mem_grow((void **)&v, &cap, (size_t)i + 1, sizeof *v));
        v[i] = i;
    }
    T_CHECK(cap >= 1000 && cap < 2000);
    T_OK(mem_grow((void **)&v, &cap, 10, sizeof *v)); /* already big enough */
    T_CHECK(cap >= 1000 && cap < 2000);
    int bad = -1;
    for (int i = 0; i < 1000 && bad < 0; i++)
        if (v[i] != i)
            bad = i;
    T_CHECKF(bad < 0, "item %d lost", bad);
    T_EQ_INT(mem_grow((void **)&v, &cap, SIZE_MAX / 2, 16), ERR_NOMEM);
    T_CHECK(cap >= 1000 && cap < 2000 && v[999] == 999);
    free(v);

    arena *a = arena_create(1024, 64 * 1024);
    T_CHECK(a);
    int *w = NULL;
    size_t wcap = 0;
    T_OK(arena_grow(a, (void **)&w, &wcap, 1, sizeof *w));
    T_EQ_INT(wcap, 4);
    for (int i = 0; i < 100; i++) {
        T_OK(arena_grow(a, (void **)&w, &wcap, (size_t)i + 1, sizeof *w));
        w[i] = 3 * i;
    }
    T_CHECK(wcap == 128 && w[0] == 0 && w[50] == 150 && w[99] == 297);
    int *keep = w;
    T_EQ_INT(arena_grow(a, (void **)&w, &wcap, 100000, sizeof *w), ERR_NOMEM); /* the limit */
    T_CHECK(w == keep && wcap == 128);
    arena_destroy(a);
}

typedef struct list_item {
    int id;
    list_link link;
} list_item;

/* The ids of l from first to last, and the same walked back from last, as "1,2,3|3,2,1". */
static void list_ids(const list *l, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (list_link *k = l->first; k; k = k->next)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", k == l->first ? "" : ",",
                              LIST_ENTRY(k, list_item, link)->id);
    n += (size_t)snprintf(out + n, cap - n, "|");
    for (list_link *k = l->last; k; k = k->prev)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", k == l->last ? "" : ",",
                              LIST_ENTRY(k, list_item, link)->id);
}

static void t_list(void) {
    list l = {0};
    list_item it[4] = {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}};
    char ids[64];
    T_CHECK(LIST_ENTRY(l.first, list_item, link) == NULL);
    for (int i = 0; i < 4; i++)
        list_push_last(&l, &it[i].link);
    list_ids(&l, ids, sizeof ids);
    T_CHECKF(!strcmp(ids, "1,2,3,4|4,3,2,1"), "%s", ids);
    list_unlink(&l, &it[1].link); /* middle */
    list_unlink(&l, &it[0].link); /* first */
    list_unlink(&l, &it[3].link); /* last */
    list_ids(&l, ids, sizeof ids);
    T_CHECKF(!strcmp(ids, "3|3"), "%s", ids);
    T_CHECK(!it[1].link.prev && !it[1].link.next);
    list_push_last(&l, &it[0].link); /* an unlinked element goes back in */
    T_CHECK(LIST_ENTRY(l.first, list_item, link) == &it[2]);
    list_unlink(&l, &it[2].link);
    list_unlink(&l, &it[0].link);
    T_CHECK(!l.first && !l.last);
}

int main(void) {
    test_run("base.file", t_file);
    test_run("base.err", t_err);
    test_run("base.utf8", t_utf8);
    test_run("base.strbuf", t_strbuf);
    test_run("base.arena", t_arena);
    test_run("base.json", t_json);
    test_run("base.json_growth", t_json_growth);
    test_run("base.flags", t_flags);
    test_run("base.pool", t_pool);
    test_run("base.pool_for", t_pool_for);
    test_run("base.pool_for_ranges_steal", t_pool_for_ranges_steal);
    test_run("base.pool_for_run_alternate", t_pool_for_run_alternate);
    test_run("base.pool_idle", t_pool_idle);
    test_run("base.list", t_list);
    test_run("base.grow", t_grow);
    return test_summary();
}
