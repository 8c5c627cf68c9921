/* SPDX-License-Identifier: MIT */
/*
 * sample_math: the deterministic logarithm, the 2^(j/32) table behind sample_exp_neg, and the
 * key sort used by the sampler's selection (sample_int.h explains why the sampler carries its own
 * exp and log). Everything here is a pure function of its inputs; no state, no allocation.
 */
#include "sample/sample_int.h"

const double sample_exp2_table[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

double sample_log(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & UINT64_C(0x000fffffffffffff)) | UINT64_C(0x3ff0000000000000);
    double m; /* x = m * 2^e, m in [1, 2) */
    memcpy(&m, &bits, sizeof m);
    if (m > 0x1.6a09e667f3bcdp+0) { /* sqrt(2): move m into [sqrt(1/2), sqrt(2)) */
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    /* 2 atanh(s) = 2 (s + s^3/3 + ... + s^23/23); |s| <= 0.1716, so the next term is < 1e-19. */
    double q = 1.0 / 23;
    for (int k = 21; k >= 1; k -= 2)
        q = 1.0 / k + s2 * q;
    double lm = 2.0 * s * q;
    double ed = (double)e;
    return ed * 0x1.62e42fefa0000p-1 + (ed * 0x1.cf79abc9e3b3ap-40 + lm);
}

static void keys_insertion_sort(uint64_t *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] < v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

/* Restores the min-heap property below node i of a[0..n) (a min-heap sorts descending). */
static void keys_sift_down(uint64_t *a, size_t n, size_t i) {
    uint64_t v = a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && a[c + 1] < a[c])
            c++;
        if (a[c] >= v)
            break;
        a[i] = a[c];
        i = c;
    }
    a[i] = v;
}

void sample_keys_heap_sort_desc(uint64_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;)
        keys_sift_down(a, n, i);
    for (size_t end = n; end-- > 1;) {
        uint64_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        keys_sift_down(a, end, 0);
    }
}

/* Partitions a[0..n) (n > 2) around the median of its first, middle and last keys (Hoare,
 * descending) and returns j: a[0..j] >= pivot >= a[j+1..n). */
static size_t keys_partition(uint64_t *a, size_t n) {
    uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
    uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    size_t i = 0, j = n - 1;
    for (;;) {
        while (a[i] > pivot)
            i++;
        while (a[j] < pivot)
            j--;
        if (i >= j)
            return j;
        uint64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
        i++;
        j--;
    }
}

static void keys_intro_sort(uint64_t *a, size_t n, int depth) {
    while (n > 24) {
        if (depth-- == 0) {
            sample_keys_heap_sort_desc(a, n);
            return;
        }
        /* a[0..j] >= pivot >= a[j+1..n): recurse on the smaller side, loop on the larger */
        size_t left = keys_partition(a, n) + 1;
        if (left < n - left) {
            keys_intro_sort(a, left, depth);
            a += left;
            n -= left;
        } else {
            keys_intro_sort(a + left, n - left, depth);
            n = left;
        }
    }
    keys_insertion_sort(a, n);
}

/* MSD radix sort, descending, of keys whose bits above shift + 8 are all equal: American flag
 * sort (in place, one counting pass and one permutation pass per byte), skipping bytes every
 * key shares, with insertion sort for small buckets. Recursion depth is at most eight. */
static void keys_radix_sort(uint64_t *a, size_t n, int shift) {
    size_t count[256];
    for (;;) {
        if (n <= 48) {
            keys_insertion_sort(a, n);
            return;
        }
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++)
            count[255 - ((a[i] >> shift) & 0xff)]++; /* bucket 0 holds the largest byte */
        size_t top = 0;
        while (count[top] == 0)
            top++;
        if (count[top] < n || shift == 0)
            break;
        shift -= 8; /* every key shares this byte */
    }
    size_t next[256], end[256], pos = 0;
    for (int b = 0; b < 256; b++) {
        next[b] = pos;
        pos += count[b];
        end[b] = pos;
    }
    for (int b = 0; b < 256; b++) {
        while (next[b] < end[b]) {
            uint64_t v = a[next[b]];
            size_t d = 255 - ((v >> shift) & 0xff);
            while (d != (size_t)b) { /* carry v to its bucket, picking up what was there */
                uint64_t t = a[next[d]];
                a[next[d]++] = v;
                v = t;
                d = 255 - ((v >> shift) & 0xff);
            }
            a[next[b]++] = v;
        }
    }
    if (shift == 0)
        return;
    size_t start = 0;
    for (int b = 0; b < 256; b++) {
        if (count[b] > 1)
            keys_radix_sort(a + start, count[b], shift - 8);
        start += count[b];
    }
}

void sample_keys_select_desc(uint64_t *keys, size_t n, size_t k) {
    if (k == 0 || k >= n)
        return;
    uint64_t *a = keys;
    size_t lo = 0, hi = n; /* the k-th boundary lies in [lo, hi) */
    int budget = 0;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (hi - lo > 24) {
        if (k <= lo || k >= hi) /* everything before k is >= everything after it */
            return;
        if (budget-- == 0) { /* adversarial input: finish with a sort of what is left */
            sample_keys_sort_desc(a + lo, hi - lo);
            return;
        }
        size_t j = lo + keys_partition(a + lo, hi - lo); /* a[lo..j] >= pivot >= a[j+1..hi) */
        if (k <= j + 1)
            hi = j + 1;
        else
            lo = j + 1;
    }
    keys_insertion_sort(a + lo, hi - lo);
}

void sample_keys_sort_desc(uint64_t *keys, size_t n) {
    if (n >= 1024) { /* large sets (flat distributions): radix beats comparisons by far */
        keys_radix_sort(keys, n, 56);
        return;
    }
    int depth = 0;
    for (size_t m = n; m > 1; m >>= 1)
        depth += 2;
    keys_intro_sort(keys, n, depth);
}
