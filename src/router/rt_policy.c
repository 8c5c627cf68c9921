/* SPDX-License-Identifier: MIT */
/*
 * rt_policy: where a request goes. See router.h (routing) for the rule.
 *
 * The prompt key is text, not tokens (the router has no tokenizer): a completions prompt as
 * given (an array prompt as its JSON text), a chat request's messages as role, 0x1F, content,
 * 0x1E each (content that is not a string as its JSON text). Two requests sharing a leading run
 * of messages share a leading run of key bytes, so their first blocks hash the same; the server
 * would share the same leading KV blocks. Block i's hash chains all blocks before it, so a match
 * at block i means the whole prefix up to it matched (as the KV cache's block names do). A
 * backend's table is direct-mapped: a lookup is one load, an insertion one store, and a hash lost
 * to a newer one only makes the router forget, never misroute for correctness (any backend gives
 * the same bytes, P1); the cache only affects speed.
 */
#include "router/rt_int.h"
#include "base/arena.h"
#include "base/hash.h"
#include "base/json.h"

#include <string.h>

#define RT_KEY_SEED 0x9e3779b97f4a7c15ull

static void rt_key_value(strbuf *sb, const json_value *v) {
    if (v->type == JSON_STRING)
        strbuf_append(sb, v->str.s, v->str.len);
    else
        json_write(sb, v);
}

int rt_prefix_hashes(const char *body, size_t len, uint64_t *h) {
    arena *a = arena_create(16 * 1024, (size_t)64 << 20);
    if (!a)
        return 0;
    json_value *root;
    int n = 0;
    strbuf key;
    strbuf_init(&key);
    if (json_parse(a, body, len, &root) == 0 && root->type == JSON_OBJECT) {
        const json_value *msgs = json_get(root, "messages"), *prompt = json_get(root, "prompt");
        if (msgs && msgs->type == JSON_ARRAY) {
            for (size_t i = 0; i < msgs->arr.n; i++) {
                const json_value *m = msgs->arr.items[i];
                const json_value *role = json_get(m, "role"), *content = json_get(m, "content");
                if (role)
                    rt_key_value(&key, role);
                strbuf_putc(&key, 0x1f);
                if (content)
                    rt_key_value(&key, content);
                strbuf_putc(&key, 0x1e);
            }
        } else if (prompt) {
            rt_key_value(&key, prompt);
        }
    }
    if (!strbuf_failed(&key)) {
        uint64_t prev = RT_KEY_SEED;
        for (size_t off = 0; off + RT_BLOCK_BYTES <= key.len && n < RT_MAX_BLOCKS;
             off += RT_BLOCK_BYTES) {
            prev = hash64(prev, key.data + off, RT_BLOCK_BYTES);
            h[n++] = prev ? prev : 1; /* 0 marks an empty slot */
        }
    }
    strbuf_deinit(&key);
    arena_destroy(a);
    return n;
}

static int64_t rt_load(const rt_backend *b) {
    return b->inflight + b->waiting;
}

/* Leading blocks of h[0, n) that b's table holds. */
static int rt_match(const rt_backend *b, const uint64_t *h, int n) {
    int k = 0;
    while (k < n && b->prefix[h[k] & (RT_PREFIX_SLOTS - 1)] == h[k])
        k++;
    return k;
}

/* Whether a is less loaded than b: load, then the share of KV used (cross-multiplied). */
static bool rt_less_loaded(const rt_backend *a, const rt_backend *b) {
    int64_t la = rt_load(a), lb = rt_load(b);
    if (la != lb)
        return la < lb;
    int64_t ta = a->kv_total > 0 ? a->kv_total : 1, tb = b->kv_total > 0 ? b->kv_total : 1;
    return a->kv_used * tb < b->kv_used * ta;
}

int rt_policy_choose(router *r, const uint64_t *h, int n, uint64_t tried, int role) {
    pthread_mutex_lock(&r->mu);
    int nb = r->n_backends, least = -1, cached = -1, best_match = 0;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    unsigned start = r->turn++;
    for (int k = 0; k < nb; k++) {
        int i = (int)((start + (unsigned)k) % (unsigned)nb); /* ties go to the next in turn */
        rt_backend *b = &r->backends[i];
        if (!b->up || (tried >> i & 1) || b->role != role)
            continue;
        int64_t l = rt_load(b);
        lo = l < lo ? l : lo;
        hi = l > hi ? l : hi;
        if (least < 0 || rt_less_loaded(b, &r->backends[least]))
            least = i;
        int m = n ? rt_match(b, h, n) : 0;
        if (m > best_match ||
            (m == best_match && m > 0 && rt_less_loaded(b, &r->backends[cached]))) {
            best_match = m;
            cached = i;
        }
    }
    int pick = least;
    enum rt_decision d = RT_DECIDE_LEAST_LOAD;
    if (least >= 0) {
        if (hi - lo > r->o.balance_abs)
            d = RT_DECIDE_BALANCE;
        else if (r->o.cache_aware && cached >= 0 &&
                 (int64_t)best_match * 100 >= (int64_t)r->o.cache_pct * n) {
            pick = cached;
            d = RT_DECIDE_CACHE;
        }
        rt_backend *b = &r->backends[pick];
        r->n_decisions[d]++;
        b->inflight++;
        if (r->o.cache_aware)
            for (int k = 0; k < n; k++)
                b->prefix[h[k] & (RT_PREFIX_SLOTS - 1)] = h[k];
    } else {
        r->no_backend++;
    }
    pthread_mutex_unlock(&r->mu);
    return pick;
}
