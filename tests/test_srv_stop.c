/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the server's stop-string matcher (server/srv_stop.h): the text it releases and
 * where it cuts, against the rules the server used before (a memmem per stop string over the
 * unreleased text, then the longest held suffix), on hand-made cases (a stop string spanning
 * token boundaries, overlapping stop strings, the earliest-starting match winning) and on random
 * stop sets and chunkings; its work per byte, counted (never timed), stays bounded for stop
 * strings of any length; and the limits.
 */
#include "test.h"

#include "base/arena.h"
#include "base/err.h"
#include "server/srv_stop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rules before the automaton (srv_gen.c's old srv_choice_release), as the reference: returns
 * true on a match, *end where released text ends. */
static bool ref_release(const char *const *stops, const size_t *lens, int n, const char *raw,
                        size_t L, size_t E, bool final, size_t *end) {
    size_t best = SIZE_MAX;
    for (int k = 0; k < n; k++) {
        if (L - E < lens[k])
            continue;
        const char *hit = memmem(raw + E, L - E, stops[k], lens[k]);
        if (hit && (size_t)(hit - raw) < best)
            best = (size_t)(hit - raw);
    }
    if (best != SIZE_MAX) {
        *end = best;
        return true;
    }
    size_t hold = 0;
    if (!final)
        for (int k = 0; k < n; k++)
            for (size_t h = lens[k] - 1; h > hold; h--)
                if (h <= L - E && memcmp(raw + L - h, stops[k], h) == 0) {
                    hold = h;
                    break;
                }
    *end = L - hold;
    return false;
}

static int g_mismatches; /* run_both disagreements so far (the random test stops at the first) */

/* Feeds text in the given chunk sizes (0-terminated list; the rest in one) through the matcher
 * and the reference, checking they agree after every chunk; returns the released text's end and
 * whether a stop matched. */
static bool run_both(const char *const *stops, const size_t *lens, int n, const char *text,
                     const size_t *chunks, size_t *released_out, const char *what) {
    arena *a = arena_create(0, 0);
    srv_stop *s;
    T_OK(srv_stop_create(a, stops, lens, n, &s));
    srv_stop_state st = {0};
    size_t L = 0, E = 0, total = strlen(text);
    bool hit = false;
    for (int c = 0; !hit && L < total; c++) {
        size_t step = chunks[c] ? chunks[c] : total - L;
        if (step > total - L)
            step = total - L;
        L += step;
        bool final = L == total;
        size_t end, ref_end;
        hit = srv_stop_scan(s, &st, text, L, final, &end);
        bool ref_hit = ref_release(stops, lens, n, text, L, E, final, &ref_end);
        T_CHECKF(hit == ref_hit && end == ref_end,
                 "%s: after %zu bytes: matcher %d/%zu, reference %d/%zu", what, L, hit, end,
                 ref_hit, ref_end);
        if (hit != ref_hit || end != ref_end) {
            g_mismatches++;
            break;
        }
        E = end;
        if (!chunks[c])
            chunks = (const size_t[]){0};
    }
    *released_out = E;
    arena_destroy(a);
    return hit;
}

static void t_cases(void) {
    size_t rel;
    /* a stop string spanning three tokens: "hello " is released, nothing of "world" */
    {
        const char *st[] = {"world"};
        size_t ln[] = {5};
        T_CHECK(run_both(st, ln, 1, "hello world!", (const size_t[]){3, 5, 2, 0}, &rel, "span"));
        T_EQ_INT(rel, 6);
    }
    /* held text: "wor" could begin "world", so it waits; at the end it is released */
    {
        const char *st[] = {"world"};
        size_t ln[] = {5};
        T_CHECK(!run_both(st, ln, 1, "hello wor", (const size_t[]){3, 3, 3, 0}, &rel, "held"));
        T_EQ_INT(rel, 9);
    }
    /* overlapping stop strings: "abcd" starts before "bc", which ends first; the earlier start
     * wins when both are found in one scan */
    {
        const char *st[] = {"abcd", "bc"};
        size_t ln[] = {4, 2};
        T_CHECK(run_both(st, ln, 2, "xabcdy", (const size_t[]){6, 0}, &rel, "overlap one scan"));
        T_EQ_INT(rel, 1);
        /* fed a byte at a time, "bc" completes first (as before: the text is cut there) */
        T_CHECK(run_both(st, ln, 2, "xabcdy", (const size_t[]){1, 1, 1, 1, 1, 1, 0}, &rel,
                         "overlap bytes"));
        T_EQ_INT(rel, 2);
    }
    /* two stop strings ending at the same byte: the longer starts earlier */
    {
        const char *st[] = {"b", "ab"};
        size_t ln[] = {1, 2};
        T_CHECK(run_both(st, ln, 2, "zzab", (const size_t[]){4, 0}, &rel, "same end"));
        T_EQ_INT(rel, 2);
    }
    /* a stop string that is a suffix of another one's prefix (failure links): "aab" in "aaab" */
    {
        const char *st[] = {"aab", "ac"};
        size_t ln[] = {3, 2};
        T_CHECK(run_both(st, ln, 2, "aaab", (const size_t[]){1, 1, 1, 1, 0}, &rel, "fail link"));
        T_EQ_INT(rel, 1);
    }
    /* no stop strings: everything is released at once */
    srv_stop_state st0 = {0};
    size_t end;
    T_CHECK(!srv_stop_scan(NULL, &st0, "abc", 3, false, &end) && end == 3);
}

/* Random stop sets over a 3-letter alphabet (many overlaps) and random chunkings. */
static void t_random(void) {
    srand(7);
    char text[80], stops_buf[4][8];
    for (int iter = 0; iter < 20000; iter++) {
        int n = 1 + rand() % 4;
        const char *stops[4];
        size_t lens[4];
        for (int k = 0; k < n; k++) {
            lens[k] = 1 + (size_t)(rand() % 6);
            for (size_t j = 0; j < lens[k]; j++)
                stops_buf[k][j] = (char)('a' + rand() % 3);
            stops[k] = stops_buf[k];
        }
        size_t tl = (size_t)(rand() % 70);
        for (size_t j = 0; j < tl; j++)
            text[j] = (char)('a' + rand() % 3);
        text[tl] = 0;
        size_t chunks[80];
        int nc = 0;
        for (size_t left = tl; left > 0 && nc < 78;) {
            size_t c = 1 + (size_t)(rand() % 5);
            chunks[nc++] = c;
            left = c >= left ? 0 : left - c;
        }
        chunks[nc] = 0;
        size_t rel;
        char what[64];
        snprintf(what, sizeof what, "random case %d", iter);
        run_both(stops, lens, n, text, chunks, &rel, what);
        if (g_mismatches)
            return;
    }
}

/* The work per appended byte is bounded whatever the stop strings' lengths: four stop strings of
 * 1,024 bytes that almost match the text everywhere (the worst case for per-token suffix checks,
 * which cost their lengths squared per token) against a megabyte fed 3 bytes at a time. */
static void t_work_bounded(void) {
    enum { SL = 1024, TEXT = 1 << 20 };
    static char stop_buf[4][SL];
    const char *stops[4];
    size_t lens[4];
    for (int k = 0; k < 4; k++) {
        memset(stop_buf[k], 'a', SL);
        stop_buf[k][SL - 1 - k] = 'b'; /* "aaa...ab", "aaa...aba", ... */
        stops[k] = stop_buf[k];
        lens[k] = SL;
    }
    char *text = malloc(TEXT);
    T_CHECK(text);
    if (!text)
        return;
    for (int pattern = 0; pattern < 3; pattern++) {
        for (size_t i = 0; i < TEXT; i++)
            text[i] = pattern == 0   ? 'a'
                      : pattern == 1 ? (i % (SL - 1) == SL - 2 ? 'c' : 'a') /* restarts */
                                     : "ab"[(i * 2654435761u >> 7) & 1];
        arena *a = arena_create(0, 0);
        srv_stop *s;
        T_OK(srv_stop_create(a, stops, lens, 4, &s));
        srv_stop_state st = {0};
        size_t end = 0;
        bool hit = false;
        uint64_t worst = 0;
        for (size_t L = 3; L <= TEXT && !hit; L += 3) {
            uint64_t w0 = st.work;
            hit = srv_stop_scan(s, &st, text, L, false, &end);
            /* a single scan may pay for earlier bytes' depth (failure hops), never more than
             * the depth it holds: bounded by the stop length, not the text */
            if (st.work - w0 > worst)
                worst = st.work - w0;
        }
        T_CHECKF(st.work <= 10 * (uint64_t)st.fed,
                 "pattern %d: %llu steps for %zu bytes (more than 10 a byte)", pattern,
                 (unsigned long long)st.work, st.fed);
        T_CHECKF(worst <= 5 * (SL + 3), "pattern %d: one 3-byte scan took %llu steps", pattern,
                 (unsigned long long)worst);
        T_CHECKF(end + SL > st.fed || hit, "pattern %d: held %zu bytes", pattern, st.fed - end);
        arena_destroy(a);
    }
    free(text);
}

static void t_limits(void) {
    arena *a = arena_create(0, 0);
    srv_stop *s = (srv_stop *)1;
    const char *st[5] = {"a", "b", "c", "d", "e"};
    size_t ln[5] = {1, 1, 1, 1, 1};
    T_OK(srv_stop_create(a, st, ln, 0, &s));
    T_CHECK(s == NULL);
    T_EQ_INT(srv_stop_create(a, st, ln, 5, &s), ERR_INVAL);
    size_t zero[1] = {0};
    T_EQ_INT(srv_stop_create(a, st, zero, 1, &s), ERR_INVAL);
    static char big[SRV_STOP_MAX_BYTES + 1];
    memset(big, 'x', sizeof big);
    const char *bs[2] = {big, big};
    size_t bl[2] = {SRV_STOP_MAX_BYTES, 1};
    T_OK(srv_stop_create(a, bs, bl, 1, &s)); /* exactly the limit */
    T_EQ_INT(srv_stop_create(a, bs, bl, 2, &s), ERR_INVAL);
    arena_destroy(a);
}

int main(void) {
    test_run("srv_stop.cases", t_cases);
    test_run("srv_stop.random_vs_reference", t_random);
    test_run("srv_stop.work_bounded", t_work_bounded);
    test_run("srv_stop.limits", t_limits);
    return test_summary();
}
