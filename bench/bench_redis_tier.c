/* SPDX-License-Identifier: MIT */
/*
 * bench_redis_tier: the Redis KV tier's read path alone (kv_tier_redis.c's get_many, as the tiers'
 * I/O thread calls it), against a running redis-server, without an engine beside it. Not part of
 * the test suite. Build, run (bench/kv_cache.sh's part 5 compares the same value size with
 * `redis-benchmark -t get -c 1` on the same socket):
 *
 *   make && cc -O2 -Isrc bench/bench_redis_tier.c build/release/libverity.a -lm -pthread \
 *       -lxxhash -lcurl -lhiredis -lpcre2-8 -o build/release/bench_redis_tier &&
 *   build/release/bench_redis_tier unix:///path/redis.sock [BYTES] [BLOCKS] [BATCH] [ROUNDS]
 *
 * Puts BLOCKS (192) values of BYTES (196,760: one block of the synthetic 0.5b model with its
 * header) under a fresh identity, then reads them all back ROUNDS (7) times with get_many in
 * batches of BATCH (32, the default kv-tier-batch), the buffers recycled through a kv_blobs free
 * list as the tiers do; checks every value's bytes; prints each round's GETs/s and MB/s (1e6
 * bytes) and the median and best. CPU time of this process is printed too (user+sys per GET), so
 * that a busy machine's wait can be told from the client's own cost.
 */
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "kv/kv_blobs.h"
#include "kv/kv_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int br_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double br_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_redis_tier URL [BYTES] [BLOCKS] [BATCH] [ROUNDS]\n");
        return 2;
    }
    size_t bytes = argc > 2 ? (size_t)atoll(argv[2]) : 196760;
    int blocks = argc > 3 ? atoi(argv[3]) : 192, batch = argc > 4 ? atoi(argv[4]) : 32;
    int rounds = argc > 5 ? atoi(argv[5]) : 7;
    if (bytes < 8 || blocks < 1 || batch < 1 || batch > 256 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "bench_redis_tier: bad sizes\n");
        return 2;
    }
    if (flags_init() < 0) { /* VERITY_KV_REDIS_PIPELINE and the like */
        fprintf(stderr, "bench_redis_tier: %s\n", err_detail());
        return 2;
    }
    const kv_tier_ops *ops;
    void *impl;
    uint64_t identity = (uint64_t)clock_now_ns() * 0x9E3779B97F4A7C15ULL;
    if (kv_tier_redis_open(argv[1], identity, &ops, &impl) < 0) {
        fprintf(stderr, "bench_redis_tier: cannot open %s\n", argv[1]);
        return 2;
    }
    kv_blobs *pool;
    unsigned char *val = malloc(bytes);
    uint64_t *keys = malloc(sizeof *keys * (size_t)blocks);
    kv_tier_got *got = malloc(sizeof *got * (size_t)batch);
    if (!val || !keys || !got || kv_blobs_create(64, &pool) < 0) {
        fprintf(stderr, "bench_redis_tier: out of memory\n");
        return 2;
    }
    for (int b = 0; b < blocks; b++) {
        keys[b] = 1000 + (uint64_t)b;
        for (size_t i = 0; i < bytes; i++)
            val[i] = (unsigned char)(i * 31 + (size_t)b * 7);
        if (ops->put(impl, keys[b], val, bytes) < 0) {
            fprintf(stderr, "bench_redis_tier: put failed\n");
            return 2;
        }
    }
    double *gps = malloc(sizeof(double) * (size_t)rounds);
    double cpu_total = 0;
    int bad = 0;
    printf("bench_redis_tier: %d values of %zu bytes, get_many batches of %d, %s\n", blocks, bytes,
           batch, argv[1]);
    for (int r = 0; r < rounds; r++) {
        double t0 = clock_now_s(), c0 = br_cpu_s();
        for (int b0 = 0; b0 < blocks; b0 += batch) {
            int n = blocks - b0 < batch ? blocks - b0 : batch;
            ops->get_many(impl, pool, keys + b0, n, got);
            for (int i = 0; i < n; i++) {
                if (got[i].rc || got[i].n != bytes)
                    bad++;
                else if (((unsigned char *)got[i].data)[bytes - 1] !=
                         (unsigned char)((bytes - 1) * 31 + (size_t)(b0 + i) * 7))
                    bad++;
                if (got[i].data)
                    kv_blobs_free(pool, got[i].data, got[i].n);
            }
        }
        double t = clock_now_s() - t0, c = br_cpu_s() - c0;
        cpu_total += c;
        gps[r] = blocks / t;
        printf("round %d: %.0f GETs/s, %.1f MB/s, client CPU %.1f us per GET\n", r + 1, gps[r],
               gps[r] * (double)bytes * 1e-6, c / blocks * 1e6);
    }
    qsort(gps, (size_t)rounds, sizeof *gps, br_cmp);
    double med = rounds % 2 ? gps[rounds / 2] : (gps[rounds / 2 - 1] + gps[rounds / 2]) / 2;
    printf("median %.0f GETs/s = %.1f MB/s, best %.0f GETs/s = %.1f MB/s; client CPU %.1f us per "
           "GET; %d bad values\n",
           med, med * (double)bytes * 1e-6, gps[rounds - 1], gps[rounds - 1] * (double)bytes * 1e-6,
           cpu_total / ((double)blocks * rounds) * 1e6, bad);
    for (int b = 0; b < blocks; b++)
        ops->drop(impl, keys[b]);
    ops->destroy(impl);
    kv_blobs_destroy(pool);
    free(val);
    free(keys);
    free(got);
    free(gps);
    return bad ? 1 : 0;
}
