/* SPDX-License-Identifier: MIT */
/*
 * test_kv_tier: the KV tiers below the pool (kv_tier.h, kv_tiers.h). The disk tier directly:
 * round trips, the LRU bound, persistence and the MANIFEST's identity check. The manager with
 * in-memory fake backends: the L2 -> L3 chain, poll states, errors degrading to misses, the
 * staging and put-queue bounds (a backend held at a gate shows puts never wait). The Redis tier
 * against a real redis-server started here on a unix socket: two managers sharing it, identities
 * namespacing keys, the server killed mid-run (misses and counted errors, no hang) and restarted
 * (picked up again). No case depends on timing: waits are polls that end as soon as the state is
 * reached, with a 30 s backstop. Runs under TSan too (the manager has an I/O thread).
 */
#include "test.h"

#include "base/check.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "kv/kv_blobs.h"
#include "kv/kv_tier.h"
#include "kv/kv_tiers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define BACKSTOP_NS (30LL * 1000000000LL)

/* ---- helpers ---- */

/* A malloc'd blob of n bytes whose contents depend on key. */
static void *blob_make(uint64_t key, size_t n) {
    unsigned char *b = kv_blobs_alloc(NULL, n); /* as the manager's puts want them */
    T_CHECK(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(key * 31 + i * 7 + (i >> 8));
    return b;
}

static bool blob_is(const void *data, size_t n, uint64_t key, size_t want_n) {
    if (n != want_n)
        return false;
    void *w = blob_make(key, n);
    bool same = memcmp(w, data, n) == 0;
    free(w);
    return same;
}

/* Polls key until it is no longer pending (30 s backstop). */
static int poll_wait(kv_tiers *t, uint64_t key, void **blob, size_t *n, int *tier) {
    int64_t end = clock_now_ns() + BACKSTOP_NS;
    for (;;) {
        int s = kv_tiers_poll(t, key, blob, n, tier);
        if (s != KV_FETCH_PENDING)
            return s;
        T_CHECKF(clock_now_ns() < end, "key %llx still pending after 30 s",
                 (unsigned long long)key);
        usleep(1000);
    }
}

/* Fetches key and waits for its result; on READY checks it is blob (key, want_n) from want_tier
 * and frees it. Returns the state. */
static int fetch_check(kv_tiers *t, uint64_t key, size_t want_n, int want_tier) {
    kv_tiers_fetch(t, key);
    void *b = NULL;
    size_t n = 0;
    int tier = -1;
    int s = poll_wait(t, key, &b, &n, &tier);
    if (s == KV_FETCH_READY) {
        bool ok = blob_is(b, n, key, want_n);
        free(b);
        T_CHECKF(ok, "key %llx: wrong bytes (%zu, expected %zu)", (unsigned long long)key, n,
                 want_n);
        T_EQ_INT(tier, want_tier);
    }
    return s;
}

/* Waits until every operation queued before it has run (operations run in order). */
static void queue_sync(kv_tiers *t) {
    static uint64_t sentinel = 0xfeed000000000000ULL;
    uint64_t k = sentinel++;
    kv_tiers_fetch(t, k);
    void *b = NULL;
    poll_wait(t, k, &b, NULL, NULL);
    free(b);
}

static int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    T_CHECK(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        n += l >= s && strcmp(de->d_name + l - s, suffix) == 0;
    }
    closedir(d);
    return n;
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    T_CHECK(f);
    fputs(s, f);
    fclose(f);
}

static void disk_put_blob(const kv_tier_ops *ops, void *impl, uint64_t key, size_t n) {
    void *b = blob_make(key, n);
    int rc = ops->put(impl, key, b, n);
    free(b);
    T_OK(rc);
}

static void disk_get_check(const kv_tier_ops *ops, void *impl, uint64_t key, size_t n) {
    void *b = NULL;
    size_t got = 0;
    T_OK(ops->get(impl, key, NULL, &b, &got));
    bool ok = blob_is(b, got, key, n);
    free(b);
    T_CHECKF(ok, "key %llx: wrong bytes", (unsigned long long)key);
}

static void disk_usage_of(const kv_tier_ops *ops, void *impl, kv_tier_usage *u) {
    ops->usage(impl, u);
}

/* ---- disk tier ---- */

static void t_disk_roundtrip(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/rt/sub", test_tmpdir()); /* parents are created */
    const kv_tier_ops *ops;
    void *impl;
    T_OK(kv_tier_disk_open(dir, 1 << 20, 7, &ops, &impl));
    static const size_t sizes[] = {0, 1, 100, 4096, 70000};
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++)
        disk_put_blob(ops, impl, 1000 + i, sizes[i]);
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++)
        disk_get_check(ops, impl, 1000 + i, sizes[i]);
    void *b = NULL;
    size_t n = 0;
    T_EQ_INT(ops->get(impl, 999, NULL, &b, &n), ERR_NOTFOUND);
    T_CHECK(b == NULL);
    disk_put_blob(ops, impl, 1002, 333); /* replaces */
    disk_get_check(ops, impl, 1002, 333);
    kv_tier_usage u;
    disk_usage_of(ops, impl, &u);
    T_EQ_INT(u.blocks, 5);
    T_EQ_INT(u.bytes, 0 + 1 + 333 + 4096 + 70000);
    T_OK(ops->drop(impl, 1003));
    T_EQ_INT(ops->get(impl, 1003, NULL, &b, &n), ERR_NOTFOUND);
    T_OK(ops->drop(impl, 1003)); /* not there: still fine */
    char path[600];
    snprintf(path, sizeof path, "%s/%016llx.kvb", dir, 1003ULL);
    T_CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/%016llx.kvb", dir, 1004ULL);
    T_CHECK(access(path, F_OK) == 0);
    T_EQ_INT(count_files(dir, ".kvb"), 4);
    T_EQ_INT(count_files(dir, ".tmp"), 0);
    ops->destroy(impl);
}

static void t_disk_lru(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/lru", test_tmpdir());
    const kv_tier_ops *ops;
    void *impl;
    T_OK(kv_tier_disk_open(dir, 3000, 7, &ops, &impl));
    for (uint64_t k = 1; k <= 4; k++)
        disk_put_blob(ops, impl, k, 1000); /* the 4th evicts key 1 */
    void *b = NULL;
    size_t n = 0;
    T_EQ_INT(ops->get(impl, 1, NULL, &b, &n), ERR_NOTFOUND);
    disk_get_check(ops, impl, 2, 1000); /* 2 is now the youngest: 3 goes next */
    disk_put_blob(ops, impl, 5, 1000);
    T_EQ_INT(ops->get(impl, 3, NULL, &b, &n), ERR_NOTFOUND);
    disk_get_check(ops, impl, 2, 1000);
    disk_get_check(ops, impl, 4, 1000);
    disk_get_check(ops, impl, 5, 1000);
    kv_tier_usage u;
    disk_usage_of(ops, impl, &u);
    T_EQ_INT(u.blocks, 3);
    T_EQ_INT(u.bytes, 3000);
    T_EQ_INT(u.evictions, 2);
    T_EQ_INT(count_files(dir, ".kvb"), 3);
    T_EQ_INT(ops->put(impl, 9, "x", 4000), ERR_TOOLARGE); /* larger than the whole tier */
    ops->destroy(impl);
}

static void t_disk_identity(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/ident", test_tmpdir());
    const kv_tier_ops *ops;
    void *impl;
    T_OK(kv_tier_disk_open(dir, 1 << 20, 0xAAAA, &ops, &impl));
    for (uint64_t k = 1; k <= 3; k++)
        disk_put_blob(ops, impl, k, 500 * k);
    ops->destroy(impl);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    write_file(path, "not a blob\n");
    snprintf(path, sizeof path, "%s/%016llx.kvb.tmp", dir, 77ULL); /* a crash's leftover */
    write_file(path, "half");

    /* same identity: the blobs persist, the temp file goes */
    kv_tier_usage u;
    T_OK(kv_tier_disk_open(dir, 1 << 20, 0xAAAA, &ops, &impl));
    disk_usage_of(ops, impl, &u);
    T_EQ_INT(u.blocks, 3);
    T_EQ_INT(u.bytes, 3000);
    for (uint64_t k = 1; k <= 3; k++)
        disk_get_check(ops, impl, k, 500 * k);
    T_EQ_INT(count_files(dir, ".tmp"), 0);
    ops->destroy(impl);

    /* a smaller bound at open trims the least recently used (key 1) */
    T_OK(kv_tier_disk_open(dir, 2600, 0xAAAA, &ops, &impl));
    disk_usage_of(ops, impl, &u);
    T_EQ_INT(u.blocks, 2);
    T_EQ_INT(u.bytes, 2500);
    ops->destroy(impl);

    /* another identity: cleared, the foreign file stays */
    T_OK(kv_tier_disk_open(dir, 1 << 20, 0xBBBB, &ops, &impl));
    disk_usage_of(ops, impl, &u);
    T_EQ_INT(u.blocks, 0);
    T_EQ_INT(count_files(dir, ".kvb"), 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    T_CHECK(access(path, F_OK) == 0);
    disk_put_blob(ops, impl, 9, 100);
    ops->destroy(impl);

    /* a corrupt MANIFEST: cleared */
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    write_file(path, "verity-kv-disk\nversion 1\nidentity zz\n");
    T_OK(kv_tier_disk_open(dir, 1 << 20, 0xBBBB, &ops, &impl));
    disk_usage_of(ops, impl, &u);
    T_EQ_INT(u.blocks, 0);
    T_EQ_INT(count_files(dir, ".kvb"), 0);
    disk_put_blob(ops, impl, 9, 100);
    ops->destroy(impl);

    /* and the fresh MANIFEST it wrote is trusted */
    T_OK(kv_tier_disk_open(dir, 1 << 20, 0xBBBB, &ops, &impl));
    disk_get_check(ops, impl, 9, 100);
    ops->destroy(impl);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    T_CHECK(access(path, F_OK) == 0);

    /* a directory that cannot be created */
    snprintf(path, sizeof path, "%s/notes.txt/sub", dir);
    T_EQ_INT(kv_tier_disk_open(path, 1 << 20, 1, &ops, &impl), ERR_IO);
}

/* ---- fake backends: an in-memory table, optionally failing, optionally held at a gate ---- */

#define FAKE_MAX 64

typedef struct fake_tier {
    uint64_t keys[FAKE_MAX];
    void *data[FAKE_MAX];
    size_t n[FAKE_MAX];
    int count;
    bool fail_get; /* set before the manager starts */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool held;              /* puts wait while held */
    int batches, batch_max; /* get_many calls and the most keys in one (I/O thread only) */
} fake_tier;

static int fake_find(fake_tier *f, uint64_t key) {
    for (int i = 0; i < f->count; i++)
        if (f->keys[i] == key)
            return i;
    return -1;
}

static int fake_put(void *impl, uint64_t key, const void *data, size_t n) {
    fake_tier *f = impl;
    pthread_mutex_lock(&f->mu);
    while (f->held)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    int i = fake_find(f, key);
    if (i < 0) {
        if (f->count == FAKE_MAX)
            return err_set(ERR_FULL, "fake tier full");
        i = f->count++;
        f->keys[i] = key;
    } else {
        free(f->data[i]);
    }
    f->data[i] = malloc(n ? n : 1);
    memcpy(f->data[i], data, n);
    f->n[i] = n;
    return 0;
}

static int fake_get(void *impl, uint64_t key, kv_blobs *pool, void **data, size_t *n) {
    fake_tier *f = impl;
    *data = NULL;
    if (f->fail_get)
        return err_set(ERR_IO, "fake tier: failing on purpose");
    int i = fake_find(f, key);
    if (i < 0)
        return ERR_NOTFOUND;
    *data = kv_blobs_alloc(pool, f->n[i]);
    memcpy(*data, f->data[i], f->n[i]);
    *n = f->n[i];
    return 0;
}

static int fake_drop(void *impl, uint64_t key) {
    fake_tier *f = impl;
    int i = fake_find(f, key);
    if (i >= 0) {
        free(f->data[i]);
        f->count--;
        f->keys[i] = f->keys[f->count];
        f->data[i] = f->data[f->count];
        f->n[i] = f->n[f->count];
    }
    return 0;
}

static void fake_destroy(void *impl) {
    fake_tier *f = impl;
    for (int i = 0; i < f->count; i++)
        free(f->data[i]);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

static void fake_get_many(void *impl, kv_blobs *pool, const uint64_t *keys, int n,
                          kv_tier_got *got) {
    fake_tier *f = impl;
    f->batches++;
    if (n > f->batch_max)
        f->batch_max = n;
    for (int i = 0; i < n; i++)
        got[i].rc = fake_get(impl, keys[i], pool, &got[i].data, &got[i].n);
}

static const kv_tier_ops fake_ops_many = {.name = "disk",
                                          .put = fake_put,
                                          .get = fake_get,
                                          .get_many = fake_get_many,
                                          .drop = fake_drop,
                                          .destroy = fake_destroy};

static const kv_tier_ops fake_ops[2] = {
    {.name = "disk", .put = fake_put, .get = fake_get, .drop = fake_drop, .destroy = fake_destroy},
    {.name = "redis", .put = fake_put, .get = fake_get, .drop = fake_drop, .destroy = fake_destroy},
};

static fake_tier *fake_new(void) {
    fake_tier *f = calloc(1, sizeof *f);
    T_CHECK(f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    return f;
}

static void fake_hold(fake_tier *f, bool held) {
    pthread_mutex_lock(&f->mu);
    f->held = held;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* A manager over fakes l2 and l3 (either NULL: no such tier). */
static kv_tiers *fake_tiers(fake_tier *l2, fake_tier *l3, int64_t staging, int64_t queue) {
    const kv_tier_ops *ops[KV_TIER_COUNT] = {l2 ? &fake_ops[0] : NULL, l3 ? &fake_ops[1] : NULL};
    void *impl[KV_TIER_COUNT] = {l2, l3};
    kv_tiers_opts o = {.staging_max_bytes = staging, .queue_max_bytes = queue};
    kv_tiers *t;
    T_OK(kv_tiers_create_with(&o, ops, impl, &t));
    return t;
}

static void put_blob(kv_tiers *t, int tier, uint64_t key, size_t n) {
    kv_tiers_put(t, tier, key, blob_make(key, n), n);
}

/* get_many answers each key as get would, in order, hits and misses mixed, with buffered reads
 * (read-ahead hints) and with O_DIRECT (sizes around the alignment: the read asks for whole
 * blocks and gets the file's bytes). */
static void disk_many_check(const char *flag_direct) {
    T_OK(flags_set("kv-disk-direct", flag_direct));
    char dir[512];
    snprintf(dir, sizeof dir, "%s/many%s", test_tmpdir(), flag_direct);
    const kv_tier_ops *ops;
    void *impl;
    T_OK(kv_tier_disk_open(dir, 1 << 20, 7, &ops, &impl));
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 70000};
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++)
        disk_put_blob(ops, impl, 10 + i, sizes[i]);
    const uint64_t keys[] = {10, 99, 11, 12, 13, 98, 14, 15};
    kv_tier_got got[ARRAY_LEN(keys)];
    kv_blobs *pool;
    T_OK(kv_blobs_create(4, &pool));
    ops->get_many(impl, pool, keys, (int)ARRAY_LEN(keys), got);
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        if (keys[i] >= 98) {
            T_EQ_INT(got[i].rc, ERR_NOTFOUND);
            T_CHECK(got[i].data == NULL);
            continue;
        }
        T_EQ_INT(got[i].rc, 0);
        T_CHECKF(blob_is(got[i].data, got[i].n, keys[i], sizes[keys[i] - 10]),
                 "direct=%s: key %llu: wrong bytes", flag_direct, (unsigned long long)keys[i]);
        T_CHECK(((uintptr_t)got[i].data & (KV_BLOBS_ALIGN - 1)) == 0);
        kv_blobs_free(pool, got[i].data, got[i].n);
    }
    kv_blobs_destroy(pool);
    ops->destroy(impl);
    T_OK(flags_set("kv-disk-direct", "0"));
}

static void t_disk_get_many(void) {
    disk_many_check("0");
    disk_many_check("1");
}

/* ---- the blob free list ---- */

static void t_blobs(void) {
    T_EQ_INT((int)kv_blobs_capacity(0), KV_BLOBS_ALIGN);
    T_EQ_INT((int)kv_blobs_capacity(KV_BLOBS_ALIGN - 1), KV_BLOBS_ALIGN);
    T_EQ_INT((int)kv_blobs_capacity(KV_BLOBS_ALIGN), 2 * KV_BLOBS_ALIGN);
    kv_blobs *b;
    T_EQ_INT(kv_blobs_create(-1, &b), ERR_INVAL);
    T_OK(kv_blobs_create(2, &b));
    void *x = kv_blobs_alloc(b, 5000), *y = kv_blobs_alloc(b, 5000), *z = kv_blobs_alloc(b, 5000);
    T_CHECK(x && y && z);
    T_CHECK(((uintptr_t)x & (KV_BLOBS_ALIGN - 1)) == 0);
    memset(x, 1, kv_blobs_capacity(5000)); /* the whole capacity is usable (ASan) */
    kv_blobs_free(b, x, 5000);
    kv_blobs_free(b, y, 5000);
    kv_blobs_free(b, z, 5000); /* beyond the bound of 2: freed */
    kv_blobs_stats st;
    kv_blobs_stats_get(b, &st);
    T_EQ_INT(st.allocs, 3);
    T_EQ_INT(st.reuses, 0);
    T_EQ_INT(st.cached, 2);
    void *p = kv_blobs_alloc(b, 6000); /* same capacity: the latest given back */
    T_CHECK(p == y);
    void *q = kv_blobs_alloc(b, 9000); /* another capacity: a new buffer */
    kv_blobs_free(b, q, 9000);         /* and not kept beside the others */
    kv_blobs_free(b, p, 6000);
    kv_blobs_stats_get(b, &st);
    T_EQ_INT(st.allocs, 4);
    T_EQ_INT(st.reuses, 1);
    T_EQ_INT(st.cached, 2);
    kv_blobs_destroy(b);
    T_OK(kv_blobs_create(0, &b)); /* no list: every buffer allocated and freed */
    kv_blobs_free(b, kv_blobs_alloc(b, 10), 10);
    kv_blobs_free(b, kv_blobs_alloc(b, 10), 10);
    kv_blobs_stats_get(b, &st);
    T_EQ_INT(st.allocs, 2);
    T_EQ_INT(st.cached, 0);
    kv_blobs_destroy(b);
    kv_blobs_free(NULL, kv_blobs_alloc(NULL, 10), 10);
}

/* ---- the manager ---- */

static void t_manager_chain(void) {
    fake_tier *l2 = fake_new(), *l3 = fake_new();
    kv_tiers *t = fake_tiers(l2, l3, 0, 0);
    T_CHECK(kv_tiers_has(t, KV_TIER_DISK) && kv_tiers_has(t, KV_TIER_REDIS));
    T_EQ_INT(kv_tiers_poll(t, 1, NULL, NULL, NULL), KV_FETCH_NONE);
    put_blob(t, KV_TIER_DISK, 1, 1000);
    put_blob(t, KV_TIER_REDIS, 2, 2000);
    put_blob(t, KV_TIER_DISK, 4, 10);
    put_blob(t, KV_TIER_REDIS, 4, 20); /* L2 wins */
    T_EQ_INT(fetch_check(t, 1, 1000, KV_TIER_DISK), KV_FETCH_READY);
    T_EQ_INT(fetch_check(t, 2, 2000, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(t, 4, 10, KV_TIER_DISK), KV_FETCH_READY);
    T_EQ_INT(fetch_check(t, 3, 0, 0), KV_FETCH_MISS);
    /* each result is reported once */
    T_EQ_INT(kv_tiers_poll(t, 1, NULL, NULL, NULL), KV_FETCH_NONE);
    T_EQ_INT(kv_tiers_poll(t, 3, NULL, NULL, NULL), KV_FETCH_NONE);
    /* a fetch while one is pending or unpolled is a no-op */
    kv_tiers_fetch(t, 2);
    kv_tiers_fetch(t, 2);
    T_EQ_INT(fetch_check(t, 2, 2000, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(kv_tiers_poll(t, 2, NULL, NULL, NULL), KV_FETCH_NONE);
    /* drop: the tier forgets */
    kv_tiers_drop(t, KV_TIER_DISK, 4);
    T_EQ_INT(fetch_check(t, 4, 20, KV_TIER_REDIS), KV_FETCH_READY);
    kv_tier_stats s2, s3;
    kv_tiers_stats_get(t, KV_TIER_DISK, &s2);
    kv_tiers_stats_get(t, KV_TIER_REDIS, &s3);
    T_EQ_INT(s2.puts, 2);
    T_EQ_INT(s2.put_bytes, 1010);
    T_EQ_INT(s2.hits, 2);
    T_EQ_INT(s2.hit_bytes, 1010);
    T_EQ_INT(s2.misses, 4);
    T_EQ_INT(s2.drops, 1);
    T_EQ_INT(s2.errors, 0);
    T_EQ_INT(s2.load_count, 2);
    int64_t sum = 0;
    for (int i = 0; i <= KV_TIER_LOAD_BUCKETS; i++)
        sum += s2.load_counts[i];
    T_EQ_INT(sum, 2);
    T_EQ_INT(s3.hits, 3);
    T_EQ_INT(s3.misses, 1);
    T_EQ_INT(s3.puts, 2);
    kv_tiers_destroy(t);

    /* a failing L2 degrades to misses: counted as errors, L3 still answers */
    l2 = fake_new();
    l3 = fake_new();
    l2->fail_get = true;
    t = fake_tiers(l2, l3, 0, 0);
    put_blob(t, KV_TIER_REDIS, 5, 50);
    T_EQ_INT(fetch_check(t, 5, 50, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(t, 6, 0, 0), KV_FETCH_MISS);
    kv_tiers_stats_get(t, KV_TIER_DISK, &s2);
    T_EQ_INT(s2.errors, 2);
    T_EQ_INT(s2.misses, 2);
    kv_tiers_destroy(t);

    /* no tiers at all: a fetch is a miss at once; puts are dropped */
    t = fake_tiers(NULL, NULL, 0, 0);
    T_CHECK(!kv_tiers_has(t, KV_TIER_DISK) && !kv_tiers_has(t, KV_TIER_REDIS));
    put_blob(t, KV_TIER_DISK, 1, 10);
    kv_tiers_fetch(t, 1);
    T_EQ_INT(kv_tiers_poll(t, 1, NULL, NULL, NULL), KV_FETCH_MISS);
    kv_tiers_destroy(t);
    kv_tiers_destroy(NULL);
}

static void t_manager_staging(void) {
    fake_tier *l2 = fake_new();
    kv_tiers *t = fake_tiers(l2, NULL, 2500, 0);
    for (uint64_t k = 1; k <= 3; k++)
        put_blob(t, KV_TIER_DISK, k, 1000);
    for (uint64_t k = 1; k <= 3; k++)
        kv_tiers_fetch(t, k);
    void *b = NULL;
    size_t n = 0;
    int tier = -1;
    /* key 3 staged means keys 1 and 2 were too (in order): 3000 > 2500 dropped the oldest */
    T_EQ_INT(poll_wait(t, 3, &b, &n, &tier), KV_FETCH_READY);
    T_CHECK(blob_is(b, n, 3, 1000));
    free(b);
    T_EQ_INT(kv_tiers_poll(t, 1, &b, &n, &tier), KV_FETCH_MISS);
    T_CHECK(b == NULL);
    T_EQ_INT(kv_tiers_poll(t, 2, &b, &n, &tier), KV_FETCH_READY);
    T_CHECK(blob_is(b, n, 2, 1000));
    free(b);
    kv_tier_stats s;
    kv_tiers_stats_get(t, KV_TIER_DISK, &s);
    T_EQ_INT(s.staged_dropped, 1);
    T_EQ_INT(s.hits, 3);
    /* a blob larger than the whole staging bound is never held */
    put_blob(t, KV_TIER_DISK, 9, 3000);
    T_EQ_INT(fetch_check(t, 9, 3000, KV_TIER_DISK), KV_FETCH_MISS);
    /* unpolled results are freed by destroy */
    kv_tiers_fetch(t, 2);
    kv_tiers_destroy(t);
}

static void t_manager_queue_bound(void) {
    fake_tier *l2 = fake_new();
    fake_hold(l2, true);
    kv_tiers *t = fake_tiers(l2, NULL, 0, 4000);
    /* the backend is stuck: at most 1 put runs and 4 wait, the rest are dropped, none blocks */
    for (uint64_t k = 1; k <= 10; k++)
        put_blob(t, KV_TIER_DISK, k, 1000);
    kv_tier_stats s;
    kv_tiers_stats_get(t, KV_TIER_DISK, &s);
    T_CHECKF(s.puts_dropped >= 5, "%lld puts dropped, expected at least 5",
             (long long)s.puts_dropped);
    put_blob(t, KV_TIER_DISK, 99, 5000); /* larger than the bound: always dropped */
    fake_hold(l2, false);
    queue_sync(t);
    kv_tiers_stats_get(t, KV_TIER_DISK, &s);
    T_EQ_INT(s.puts + s.puts_dropped, 11);
    T_CHECK(s.puts >= 4);
    /* the put that ran first is there */
    T_EQ_INT(fetch_check(t, 1, 1000, KV_TIER_DISK), KV_FETCH_READY);
    /* puts to a tier that is not there are dropped */
    put_blob(t, KV_TIER_REDIS, 1, 10);
    put_blob(t, 7, 1, 10);
    kv_tiers_destroy(t);
}

static void t_manager_disk(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mgr", test_tmpdir());
    kv_tiers_opts o = {.disk_dir = dir, .disk_max_bytes = 1 << 20, .identity = 42};
    kv_tiers *t;
    T_OK(kv_tiers_create(&o, &t));
    T_CHECK(kv_tiers_has(t, KV_TIER_DISK) && !kv_tiers_has(t, KV_TIER_REDIS));
    for (uint64_t k = 1; k <= 5; k++)
        put_blob(t, KV_TIER_DISK, k, 1000 * k);
    T_EQ_INT(fetch_check(t, 3, 3000, KV_TIER_DISK), KV_FETCH_READY);
    T_EQ_INT(fetch_check(t, 6, 0, 0), KV_FETCH_MISS);
    kv_tiers_drop(t, KV_TIER_DISK, 3);
    T_EQ_INT(fetch_check(t, 3, 0, 0), KV_FETCH_MISS);
    kv_tier_stats s;
    kv_tiers_stats_get(t, KV_TIER_DISK, &s);
    T_EQ_INT(s.blocks, 4);
    T_EQ_INT(s.bytes, 12000);
    put_blob(t, KV_TIER_DISK, 7, 700); /* finished by destroy, not lost */
    kv_tiers_destroy(t);
    T_OK(kv_tiers_create(&o, &t));
    T_EQ_INT(fetch_check(t, 7, 700, KV_TIER_DISK), KV_FETCH_READY);
    kv_tiers_stats_get(t, KV_TIER_DISK, &s);
    T_EQ_INT(s.blocks, 5);
    kv_tiers_destroy(t);

    /* malformed options are errors; a directory that cannot be made leaves the tier out */
    kv_tiers_opts bad = {.disk_dir = dir, .disk_max_bytes = 0};
    T_EQ_INT(kv_tiers_create(&bad, &t), ERR_INVAL);
    T_CHECK(t == NULL);
    char file[600];
    snprintf(file, sizeof file, "%s/plain", test_tmpdir());
    write_file(file, "x");
    strcat(file, "/sub");
    kv_tiers_opts nodir = {.disk_dir = file, .disk_max_bytes = 1000};
    T_OK(kv_tiers_create(&nodir, &t));
    T_CHECK(!kv_tiers_has(t, KV_TIER_DISK));
    kv_tiers_destroy(t);
}

/* ---- Redis ---- */

/* Fetches queued behind a put that is held run as one batch: get_many sees them all at once (at
 * most kv-tier-batch), each answered with its own blob; what L2 misses goes to L3 (no get_many
 * there: key by key). */
static void batch_check(const char *flag_batch, int want_max) {
    T_OK(flags_set("kv-tier-batch", flag_batch));
    fake_tier *l2 = fake_new(), *l3 = fake_new();
    const kv_tier_ops *ops[KV_TIER_COUNT] = {&fake_ops_many, &fake_ops[1]};
    void *impl[KV_TIER_COUNT] = {l2, l3};
    kv_tiers_opts o = {0};
    kv_tiers *t;
    T_OK(kv_tiers_create_with(&o, ops, impl, &t));
    for (uint64_t k = 1; k <= 3; k++)
        put_blob(t, KV_TIER_DISK, k, 100 * k);
    put_blob(t, KV_TIER_REDIS, 6, 600);
    queue_sync(t);
    fake_hold(l2, true);
    put_blob(t, KV_TIER_DISK, 50, 10); /* the I/O thread waits in this put */
    for (uint64_t k = 1; k <= 6; k++)
        kv_tiers_fetch(t, k);
    fake_hold(l2, false);
    for (uint64_t k = 1; k <= 6; k++) {
        void *b = NULL;
        size_t n = 0;
        int tier = -1;
        int st = poll_wait(t, k, &b, &n, &tier);
        if (k <= 3 || k == 6) {
            T_EQ_INT(st, KV_FETCH_READY);
            T_EQ_INT(tier, k == 6 ? KV_TIER_REDIS : KV_TIER_DISK);
            T_CHECKF(blob_is(b, n, k, 100 * k), "key %llu: wrong blob", (unsigned long long)k);
            kv_tiers_blob_free(t, b, n);
        } else {
            T_EQ_INT(st, KV_FETCH_MISS);
        }
    }
    /* get_many returned before its answers were published (under the manager's mutex, which
     * the polls took): its counters are final and visible here */
    T_EQ_INT(l2->batch_max, want_max);
    kv_tiers_destroy(t);
    T_OK(flags_set("kv-tier-batch", "32"));
}

static void t_manager_batch(void) {
    batch_check("32", 6);
    batch_check("4", 4);
    batch_check("1", 1);
}

typedef struct tick {
    pthread_mutex_t mu;
    int n, stop_at; /* calls so far; idle: says "done" from this call on */
} tick;

static void tick_notify(void *ud) {
    tick *k = ud;
    pthread_mutex_lock(&k->mu);
    k->n++;
    pthread_mutex_unlock(&k->mu);
}

static bool tick_idle(void *ud) {
    tick *k = ud;
    pthread_mutex_lock(&k->mu);
    bool more = ++k->n < k->stop_at;
    pthread_mutex_unlock(&k->mu);
    return more;
}

static int tick_get(tick *k) {
    pthread_mutex_lock(&k->mu);
    int n = k->n;
    pthread_mutex_unlock(&k->mu);
    return n;
}

/* Waits until k counted at least n calls (30 s backstop). */
static void tick_wait(tick *k, int n) {
    int64_t end = clock_now_ns() + BACKSTOP_NS;
    while (tick_get(k) < n) {
        T_CHECKF(clock_now_ns() < end, "%d calls after 30 s, waiting for %d", tick_get(k), n);
        usleep(1000);
    }
}

/* kv_tiers_fetch_many queues a request's keys under one lock, so the I/O thread takes them as one
 * batch; kv_tiers_poll_many answers each; the notify function (kv-tier-wake) has run by the time a
 * poll sees an answer, and not after it was unset; the idle function (kv-prefault-ahead) runs
 * until it says it is done, and again after an operation. */
static void t_manager_many_notify(void) {
    fake_tier *l2 = fake_new();
    const kv_tier_ops *ops[KV_TIER_COUNT] = {&fake_ops_many, NULL};
    void *impl[KV_TIER_COUNT] = {l2, NULL};
    kv_tiers_opts o = {0};
    kv_tiers *t;
    T_OK(kv_tiers_create_with(&o, ops, impl, &t));
    for (uint64_t k = 1; k <= 5; k++)
        put_blob(t, KV_TIER_DISK, k, 100 * k);
    queue_sync(t);
    tick nt = {.n = 0}, it = {.n = 0, .stop_at = 3};
    pthread_mutex_init(&nt.mu, NULL);
    pthread_mutex_init(&it.mu, NULL);
    kv_tiers_set_notify(t, tick_notify, &nt);
    int batches = l2->batches;
    const uint64_t keys[] = {1, 2, 99, 3, 4, 5};
    kv_tiers_fetch_many(t, keys, 6);
    kv_tiers_fetch_many(t, keys, 6); /* already asked: no-ops */
    kv_tiers_polled got[6];
    bool answered[6] = {false};
    int left = 6;
    int64_t end = clock_now_ns() + BACKSTOP_NS;
    while (left > 0) {
        kv_tiers_poll_many(t, keys, 6, got);
        for (int i = 0; i < 6; i++) {
            if (got[i].state == KV_FETCH_PENDING || got[i].state == KV_FETCH_NONE)
                continue;
            T_CHECKF(!answered[i], "key %llu answered twice", (unsigned long long)keys[i]);
            answered[i] = true;
            left--;
            T_CHECKF(tick_get(&nt) >= 1, "an answer seen before the notify ran");
            if (keys[i] == 99) {
                T_EQ_INT(got[i].state, KV_FETCH_MISS);
                T_CHECK(got[i].blob == NULL);
                continue;
            }
            T_EQ_INT(got[i].state, KV_FETCH_READY);
            T_EQ_INT(got[i].tier, KV_TIER_DISK);
            T_CHECK(blob_is(got[i].blob, got[i].n, keys[i], 100 * keys[i]));
            kv_tiers_blob_free(t, got[i].blob, got[i].n);
        }
        T_CHECKF(clock_now_ns() < end, "%d keys still pending after 30 s", left);
        if (left > 0)
            usleep(1000);
    }
    /* one lock, one wake: the six keys went to the backend together */
    T_EQ_INT(l2->batches - batches, 1);
    T_EQ_INT(l2->batch_max, 6);
    kv_tiers_set_notify(t, NULL, NULL);
    int n_notify = tick_get(&nt);
    T_EQ_INT(fetch_check(t, 1, 100, KV_TIER_DISK), KV_FETCH_READY);
    T_EQ_INT(tick_get(&nt), n_notify);

    kv_tiers_set_idle(t, tick_idle, &it);
    tick_wait(&it, 3); /* three steps, the last one saying it is done */
    queue_sync(t);     /* an operation: the idle function runs again */
    tick_wait(&it, 4);
    kv_tiers_destroy(t); /* joins the thread: no idle call after this */
    pthread_mutex_destroy(&nt.mu);
    pthread_mutex_destroy(&it.mu);
}

/* Blobs go round: a put's buffer comes back to the free list after the put, a fetched blob is
 * received into a recycled buffer, and one given back after decoding is reused again, so a
 * steady flow of blocks allocates nothing. */
static void t_manager_blob_reuse(void) {
    fake_tier *l2 = fake_new();
    kv_tiers *t = fake_tiers(l2, NULL, 0, 0);
    for (uint64_t k = 1; k <= 8; k++) {
        void *b = kv_tiers_blob_alloc(t, 70000);
        T_CHECK(b);
        void *want = blob_make(k, 70000);
        memcpy(b, want, 70000);
        free(want);
        kv_tiers_put(t, KV_TIER_DISK, k, b, 70000);
        queue_sync(t);
    }
    for (uint64_t k = 1; k <= 8; k++) {
        kv_tiers_fetch(t, k);
        void *b = NULL;
        size_t n = 0;
        T_EQ_INT(poll_wait(t, k, &b, &n, NULL), KV_FETCH_READY);
        T_CHECK(blob_is(b, n, k, 70000));
        kv_tiers_blob_free(t, b, n);
    }
    kv_blobs_stats st;
    kv_tiers_blob_stats(t, &st);
    T_EQ_INT(st.allocs, 1);
    T_EQ_INT(st.reuses, 15);
    kv_tiers_destroy(t);
}

static void t_redis_unreachable(void) {
    kv_tiers *t;
    char url[600];
    snprintf(url, sizeof url, "unix://%s/no-such.sock", test_tmpdir());
    kv_tiers_opts o = {.redis_url = url, .identity = 1};
    T_OK(kv_tiers_create(&o, &t)); /* warns, leaves the tier out */
    T_CHECK(!kv_tiers_has(t, KV_TIER_REDIS));
    kv_tiers_fetch(t, 1);
    T_EQ_INT(kv_tiers_poll(t, 1, NULL, NULL, NULL), KV_FETCH_MISS);
    kv_tiers_destroy(t);
    static const char *const bad[] = {"http://x:1",     "redis://",       "redis://h:0",
                                      "redis://h:x",    "redis://h:1/db", "unix://rel.sock",
                                      "redis://h:1/2/3"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        kv_tiers_opts ob = {.redis_url = bad[i]};
        T_CHECKF(kv_tiers_create(&ob, &t) == ERR_INVAL, "url %s accepted", bad[i]);
    }
    T_OK(kv_tier_redis_url_check("redis://127.0.0.1:6380/2"));
    T_OK(kv_tier_redis_url_check("redis://localhost"));
}

static pid_t redis_pid = -1;
static char redis_dir[64], redis_sock[100];

static void redis_kill(void) {
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = -1;
    }
}

static void redis_cleanup_at_exit(void) {
    redis_kill();
    if (redis_sock[0])
        unlink(redis_sock);
    if (redis_dir[0])
        rmdir(redis_dir);
}

static const char *redis_server_path(void) {
    const char *path = getenv("PATH");
    static char buf[1024];
    while (path && *path) {
        size_t l = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/redis-server", (int)l, path);
        if (access(buf, X_OK) == 0)
            return buf;
        path += l + (path[l] == ':');
    }
    return access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : NULL;
}

/* Starts redis-server on redis_sock and waits until the socket accepts (30 s backstop). */
static void redis_start(const char *exe) {
    pid_t pid = fork();
    T_CHECK(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (chdir(redis_dir) != 0)
            _exit(127);
        execl(exe, exe, "--port", "0", "--unixsocket", redis_sock, "--save", "", "--appendonly",
              "no", "--daemonize", "no", (char *)NULL);
        _exit(127);
    }
    redis_pid = pid;
    int64_t end = clock_now_ns() + BACKSTOP_NS;
    for (;;) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", redis_sock);
        int ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
        close(s);
        if (ok)
            return;
        int st;
        T_CHECKF(waitpid(pid, &st, WNOHANG) == 0, "redis-server exited (status %d)", st);
        T_CHECKF(clock_now_ns() < end, "redis-server did not accept on %s within 30 s", redis_sock);
        usleep(5000);
    }
}

static kv_tiers *redis_tiers(const char *url, uint64_t identity, const char *disk) {
    kv_tiers_opts o = {.redis_url = url,
                       .identity = identity,
                       .disk_dir = disk,
                       .disk_max_bytes = disk ? 1 << 20 : 0};
    kv_tiers *t;
    T_OK(kv_tiers_create(&o, &t));
    T_CHECK(kv_tiers_has(t, KV_TIER_REDIS));
    return t;
}

/* Puts key on a and fetches it back until it is there (the tier reconnects at most once a
 * second after a failure), with the 30 s backstop. */
static void redis_put_until_back(kv_tiers *a, uint64_t key, size_t n) {
    int64_t end = clock_now_ns() + BACKSTOP_NS;
    for (;;) {
        put_blob(a, KV_TIER_REDIS, key, n);
        if (fetch_check(a, key, n, KV_TIER_REDIS) == KV_FETCH_READY)
            return;
        T_CHECKF(clock_now_ns() < end, "redis not picked up again within 30 s");
        usleep(20000);
    }
}

static void fetch_until_back(kv_tiers *b, uint64_t key, size_t n) {
    int64_t end = clock_now_ns() + BACKSTOP_NS;
    while (fetch_check(b, key, n, KV_TIER_REDIS) != KV_FETCH_READY) {
        T_CHECKF(clock_now_ns() < end, "redis not picked up again within 30 s");
        usleep(20000);
    }
}

static void t_redis_real(void) {
    const char *exe = redis_server_path();
    if (!exe)
        test_skip("redis-server not found on PATH or at /usr/bin/redis-server");
    snprintf(redis_dir, sizeof redis_dir, "/tmp/verity-redis-XXXXXX");
    T_CHECK(mkdtemp(redis_dir));
    snprintf(redis_sock, sizeof redis_sock, "%s/redis.sock", redis_dir);
    atexit(redis_cleanup_at_exit);
    redis_start(exe);
    char url[400], disk[512];
    snprintf(url, sizeof url, "unix://%s", redis_sock);
    snprintf(disk, sizeof disk, "%s/chain", test_tmpdir());

    kv_tiers *a = redis_tiers(url, 1, NULL), *b = redis_tiers(url, 1, NULL);
    kv_tiers *c = redis_tiers(url, 2, NULL), *d = redis_tiers(url, 1, disk);
    /* round trip, and a second replica sees it; another identity does not */
    put_blob(a, KV_TIER_REDIS, 100, 5000);
    put_blob(a, KV_TIER_REDIS, 101, 0);
    T_EQ_INT(fetch_check(a, 100, 5000, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(b, 100, 5000, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(b, 101, 0, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(c, 100, 0, 0), KV_FETCH_MISS);
    /* the chain: L2 hit, L2 miss then L3 hit, both miss */
    put_blob(d, KV_TIER_DISK, 300, 300);
    put_blob(d, KV_TIER_REDIS, 301, 301);
    T_EQ_INT(fetch_check(d, 300, 300, KV_TIER_DISK), KV_FETCH_READY);
    T_EQ_INT(fetch_check(d, 301, 301, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(d, 100, 5000, KV_TIER_REDIS), KV_FETCH_READY);
    T_EQ_INT(fetch_check(d, 302, 0, 0), KV_FETCH_MISS);
    /* the backend's pipeline: more keys than its window, hits and misses mixed, each reply
     * matched to its key */
    const kv_tier_ops *rops;
    void *rimpl;
    T_OK(kv_tier_redis_open(url, 1, &rops, &rimpl));
    uint64_t keys[11];
    for (int i = 0; i < 11; i++) {
        keys[i] = 400 + (uint64_t)i;
        if (i % 3 != 2)
            put_blob(a, KV_TIER_REDIS, keys[i], 1000 * (size_t)i + 1);
    }
    queue_sync(a);
    kv_tier_got got[11];
    rops->get_many(rimpl, NULL, keys, 11, got);
    for (int i = 0; i < 11; i++) {
        T_EQ_INT(got[i].rc, i % 3 != 2 ? 0 : ERR_NOTFOUND);
        if (i % 3 != 2)
            T_CHECKF(blob_is(got[i].data, got[i].n, keys[i], 1000 * (size_t)i + 1),
                     "pipelined GET %d: wrong blob", i);
        free(got[i].data);
    }
    /* an error reply (GET of a list: WRONGTYPE) fails its key alone, the connection stays */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "redis-cli -s %s RPUSH verity:kv:%016llx:%016llx x >/dev/null 2>&1",
             redis_sock, 1ULL, 500ULL);
    if (system(cmd) == 0) {
        const uint64_t k3[3] = {400, 500, 401};
        rops->get_many(rimpl, NULL, k3, 3, got);
        T_EQ_INT(got[0].rc, 0);
        T_EQ_INT(got[1].rc, ERR_IO);
        T_EQ_INT(got[2].rc, 0);
        T_CHECK(blob_is(got[2].data, got[2].n, 401, 1001));
        free(got[0].data);
        free(got[2].data);
    }
    rops->destroy(rimpl);
    /* drop */
    kv_tiers_drop(a, KV_TIER_REDIS, 100);
    queue_sync(a);
    T_EQ_INT(fetch_check(b, 100, 0, 0), KV_FETCH_MISS);
    kv_tier_stats s;
    kv_tiers_stats_get(b, KV_TIER_REDIS, &s);
    T_EQ_INT(s.hits, 2);
    T_EQ_INT(s.errors, 0);

    /* the server dies: misses and counted errors, never a hang */
    redis_kill();
    T_EQ_INT(fetch_check(b, 101, 0, 0), KV_FETCH_MISS);
    put_blob(b, KV_TIER_REDIS, 102, 10);
    T_EQ_INT(fetch_check(b, 102, 0, 0), KV_FETCH_MISS);
    T_EQ_INT(fetch_check(a, 101, 0, 0), KV_FETCH_MISS);
    T_EQ_INT(fetch_check(d, 300, 300, KV_TIER_DISK), KV_FETCH_READY); /* L2 unaffected */
    kv_tiers_stats_get(b, KV_TIER_REDIS, &s);
    T_CHECKF(s.errors >= 2, "%lld errors counted", (long long)s.errors);
    kv_tiers_stats_get(a, KV_TIER_REDIS, &s);
    T_CHECK(s.errors >= 1);

    /* it comes back (empty): picked up again after the reconnect backoff */
    redis_start(exe);
    redis_put_until_back(a, 200, 2000);
    fetch_until_back(b, 200, 2000);
    T_EQ_INT(fetch_check(c, 200, 0, 0), KV_FETCH_MISS);
    kv_tiers_destroy(a);
    kv_tiers_destroy(b);
    kv_tiers_destroy(c);
    kv_tiers_destroy(d);
    redis_kill();
}

int main(void) {
    test_run("kv_tier.disk_roundtrip", t_disk_roundtrip);
    test_run("kv_tier.disk_lru", t_disk_lru);
    test_run("kv_tier.disk_identity", t_disk_identity);
    test_run("kv_tier.disk_get_many", t_disk_get_many);
    test_run("kv_tier.blobs", t_blobs);
    test_run("kv_tier.manager_chain", t_manager_chain);
    test_run("kv_tier.manager_staging", t_manager_staging);
    test_run("kv_tier.manager_queue_bound", t_manager_queue_bound);
    test_run("kv_tier.manager_disk", t_manager_disk);
    test_run("kv_tier.manager_batch", t_manager_batch);
    test_run("kv_tier.manager_blob_reuse", t_manager_blob_reuse);
    test_run("kv_tier.manager_many_notify", t_manager_many_notify);
    test_run("kv_tier.redis_unreachable", t_redis_unreachable);
    test_run("kv_tier.redis_real", t_redis_real);
    return test_summary();
}
