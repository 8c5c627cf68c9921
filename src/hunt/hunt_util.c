/* SPDX-License-Identifier: MIT */
/* hunt_util: hashing, a seeded generator, pseudo-text, escaping. See hunt_util.h. */
#include "hunt/hunt_util.h"
#include "base/utf8.h"

#include <string.h>

uint64_t hunt_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t hunt_hash_str(uint64_t h, const char *s) {
    return hunt_hash(h, s, strlen(s));
}

static uint64_t hunt_fmix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t hunt_mix(uint64_t a, uint64_t b) {
    return hunt_fmix(a + 0x9e3779b97f4a7c15ull + ((b << 29) | (b >> 35)) * 0xd6e8feb86659fd93ull);
}

void hunt_rng_seed(hunt_rng *r, uint64_t seed) {
    r->s = seed;
}

uint64_t hunt_rng_next(hunt_rng *r) {
    r->s += 0x9e3779b97f4a7c15ull;
    return hunt_fmix(r->s);
}

uint32_t hunt_rng_below(hunt_rng *r, uint32_t n) {
    return n <= 1 ? 0 : (uint32_t)(((hunt_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

double hunt_rng_unit(hunt_rng *r) {
    return (double)(hunt_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static const char *const hunt_words_list[] = {
    "the",      "of",        "and",     "to",         "in",        "is",      "that",     "for",
    "it",       "as",        "with",    "on",         "by",        "this",    "be",       "are",
    "from",     "or",        "at",      "an",         "which",     "not",     "but",      "all",
    "when",     "each",      "will",    "can",        "one",       "there",   "their",    "has",
    "if",       "so",        "into",    "its",        "then",      "than",    "only",     "buffer",
    "request",  "server",    "client",  "socket",     "header",    "parser",  "token",    "stream",
    "block",    "cache",     "queue",   "thread",     "worker",    "config",  "option",   "value",
    "field",    "record",    "index",   "table",      "entry",     "handle",  "state",    "event",
    "timer",    "signal",    "error",   "result",     "status",    "length",  "offset",   "count",
    "limit",    "size",      "memory",  "page",       "frame",     "batch",   "step",     "path",
    "file",     "directory", "module",  "function",   "method",    "object",  "struct",   "pointer",
    "array",    "list",      "map",     "set",        "string",    "number",  "byte",     "line",
    "word",     "text",      "input",   "output",     "reader",    "writer",  "channel",  "message",
    "packet",   "payload",   "schema",  "model",      "layer",     "kernel",  "weight",   "scale",
    "range",    "window",    "prefix",  "suffix",     "key",       "lock",    "mutex",    "loop",
    "callback", "hook",      "plugin",  "service",    "router",    "handler", "session",  "account",
    "user",     "group",     "role",    "policy",     "rule",      "check",   "test",     "case",
    "suite",    "report",    "metric",  "gauge",      "counter",   "trace",   "span",     "log",
    "level",    "flag",      "toggle",  "build",      "target",    "release", "version",  "commit",
    "branch",   "merge",     "patch",   "diff",       "review",    "issue",   "fix",      "bug",
    "crash",    "leak",      "race",    "deadlock",   "timeout",   "retry",   "backoff",  "budget",
    "quota",    "shard",     "replica", "leader",     "follower",  "vote",    "term",     "epoch",
    "snapshot", "journal",   "ledger",  "checkpoint", "restore",   "migrate", "upgrade",  "deploy",
    "rollback", "monitor",   "alert",   "dashboard",  "query",     "filter",  "sort",     "join",
    "scan",     "seek",      "flush",   "sync",       "commit",    "abort",   "open",     "close",
    "read",     "write",     "parse",   "render",     "encode",    "decode",  "compress", "hash",
    "sign",     "verify",    "load",    "store",      "fetch",     "send",    "receive",  "accept",
    "reject",   "allocate",  "free",    "reset",      "update",    "create",  "delete",   "insert",
    "remove",   "append",    "split",   "match",      "replace",   "convert", "quickly",  "slowly",
    "safely",   "always",    "never",   "often",      "rarely",    "usually", "simply",   "clearly",
    "exactly",  "mostly",    "new",     "old",        "small",     "large",   "fast",     "slow",
    "empty",    "full",      "valid",   "invalid",    "stale",     "fresh",   "shared",   "private",
    "public",   "local",     "remote",  "primary",    "secondary", "default", "custom",   "partial",
    "complete", "pending",
};

int hunt_words_count(void) {
    return (int)(sizeof hunt_words_list / sizeof *hunt_words_list);
}

const char *hunt_word(int i) {
    return hunt_words_list[i];
}

void hunt_text_prose(hunt_rng *r, int n_words, strbuf *out) {
    int nw = hunt_words_count();
    int left_in_sentence = 0;
    for (int i = 0; i < n_words; i++) {
        const char *w = hunt_words_list[hunt_rng_below(r, (uint32_t)nw)];
        if (left_in_sentence == 0) {
            left_in_sentence = 6 + (int)hunt_rng_below(r, 9);
            if (i)
                strbuf_putc(out, ' ');
            strbuf_putc(out, (char)(w[0] >= 'a' && w[0] <= 'z' ? w[0] - 32 : w[0]));
            strbuf_puts(out, w + 1);
        } else {
            strbuf_putc(out, ' ');
            strbuf_puts(out, w);
        }
        if (--left_in_sentence == 0 || i + 1 == n_words)
            strbuf_putc(out, '.');
    }
}

void hunt_text_ident(hunt_rng *r, strbuf *out) {
    int nw = hunt_words_count();
    /* content words start after the short function words */
    int first = 39;
    strbuf_puts(out, hunt_words_list[first + (int)hunt_rng_below(r, (uint32_t)(nw - first))]);
    strbuf_putc(out, '_');
    strbuf_puts(out, hunt_words_list[first + (int)hunt_rng_below(r, (uint32_t)(nw - first))]);
}

void hunt_html_escape(strbuf *out, const char *s, size_t n) {
    static const char *const ent[0x80] = {
        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;", ['\''] = "&#39;"};
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            if (ent[c])
                strbuf_puts(out, ent[c]);
            else if (c < 32 && c != '\n' && c != '\t') /* shown as its control picture */
                strbuf_printf(out, "&#x%x;", 0x2400 + c);
            else
                strbuf_putc(out, (char)c);
            i++;
            continue;
        }
        uint32_t cp;
        int len = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (len < 0) {
            strbuf_puts(out, "\xEF\xBF\xBD");
            i++;
        } else {
            strbuf_append(out, s + i, (size_t)len);
            i += (size_t)len;
        }
    }
}

void hunt_md_escape(strbuf *out, const char *s, size_t n, size_t max_bytes) {
    size_t m = n < max_bytes ? n : max_bytes;
    /* do not cut a UTF-8 sequence */
    while (m < n && m > 0 && ((unsigned char)s[m] & 0xC0) == 0x80)
        m--;
    for (size_t i = 0; i < m; i++) {
        char c = s[i];
        if (c == '|' || c == '`' || c == '\\')
            strbuf_putc(out, '\\'), strbuf_putc(out, c);
        else if (c == '\n')
            strbuf_puts(out, "\\n");
        else if ((unsigned char)c < 32)
            strbuf_putc(out, ' ');
        else
            strbuf_putc(out, c);
    }
    if (m < n)
        strbuf_puts(out, "...");
}
