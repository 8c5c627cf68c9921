/* SPDX-License-Identifier: MIT */
/*
 * kv_tier_redis: the L3 tier, blobs as Redis strings (kv_tier.h has the contract), through
 * hiredis's blocking API with a 1 s connect timeout and a 1 s command timeout. Several servers
 * (replicas) share one Redis: what one puts, another fetches; the identity in every key keeps
 * different models and settings apart.
 *
 * Keys: "verity:kv:<identity, 16 hex>:<key, 16 hex>"; values are written and read binary-safe
 * (%b). No TTL: Redis's own maxmemory policy evicts.
 *
 * Fetches: get_many pipelines its GETs, kv-redis-pipeline in flight at once, and reads their
 * replies itself, each value with one recvmsg straight into a buffer of the caller's free list
 * (kv_blobs.h): no 16 KB reads, no reply object, no copy. Every other command goes through
 * hiredis, whose reader keeps its buffer between replies (maxbuf 0).
 *
 * Failures: any failed command (timeout, reset, EOF, a protocol error) frees the connection and
 * fails the operation; the next operation reconnects, but at most one attempt per second
 * (RECONNECT_NS), and until then every operation fails at once without a syscall, so a dead
 * Redis costs the I/O thread nothing per block. An info line when the connection is lost (the
 * manager warns once when a tier starts failing), debug lines for the failed reconnects. An error
 * reply (e.g. OOM from maxmemory) fails the operation but keeps the connection.
 *
 * Threading: none of its own; one thread at a time (kv_tier.h). A write to a connection whose
 * server died may raise SIGPIPE: the manager's I/O thread blocks all signals, so it only fails.
 */
#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/log.h"
#include "kv/kv_tier.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define RECONNECT_NS     1000000000LL
#define REDIS_TIMEOUT_MS 1000
#define REDIS_HEAD_MAX   128 /* a reply's first line as get_many reads it: "$<length>\r\n" */

typedef struct redis_url {
    char host[256]; /* host, or the socket path if unix */
    int port;       /* 0: unix socket */
    int db;
} redis_url;

typedef struct redis_tier {
    char *url;
    redis_url u;
    uint64_t identity;
    redisContext *c;     /* NULL: not connected */
    int64_t last_try_ns; /* last connect attempt */
    int depth;           /* GETs in flight at once in get_many (flag kv-redis-pipeline) */
    /* get_many's own reader: bytes received past the reply being read (the start of the next
     * one); empty whenever hiredis reads from the socket */
    char carry[REDIS_HEAD_MAX];
    size_t carry_n;
} redis_tier;

/* Parses url into *u. 0 or ERR_INVAL quoting it. */
static int redis_url_parse(const char *url, redis_url *u) {
    memset(u, 0, sizeof *u);
    if (!url)
        return err_set(ERR_INVAL, "redis url: missing");
    if (strncmp(url, "unix://", 7) == 0) {
        const char *p = url + 7;
        if (p[0] != '/' || strlen(p) >= sizeof u->host)
            return err_set(ERR_INVAL, "redis url '%s': expected unix:///absolute/path.sock", url);
        snprintf(u->host, sizeof u->host, "%s", p);
        return 0;
    }
    if (strncmp(url, "redis://", 8) != 0)
        return err_set(ERR_INVAL,
                       "redis url '%s': expected redis://HOST[:PORT][/DB] or "
                       "unix:///path",
                       url);
    const char *h = url + 8, *end = h + strcspn(h, ":/");
    if (end == h || (size_t)(end - h) >= sizeof u->host)
        return err_set(ERR_INVAL, "redis url '%s': missing or too long host", url);
    memcpy(u->host, h, (size_t)(end - h));
    u->port = 6379;
    const char *p = end;
    if (*p == ':') {
        char *e;
        long port = strtol(p + 1, &e, 10);
        if (e == p + 1 || port <= 0 || port > 65535)
            return err_set(ERR_INVAL, "redis url '%s': bad port", url);
        u->port = (int)port;
        p = e;
    }
    if (*p == '/' && p[1]) {
        char *e;
        long db = strtol(p + 1, &e, 10);
        if (e == p + 1 || *e || db < 0 || db > 1000000)
            return err_set(ERR_INVAL, "redis url '%s': bad database number", url);
        u->db = (int)db;
        p = e;
    } else if (*p == '/') {
        p++;
    }
    if (*p)
        return err_set(ERR_INVAL, "redis url '%s': unexpected '%s'", url, p);
    return 0;
}

int kv_tier_redis_url_check(const char *url) {
    redis_url u;
    return redis_url_parse(url, &u);
}

/* The reason a context failed, for messages. */
static const char *redis_why(const redisContext *c) {
    return c && c->err ? c->errstr : "no reply";
}

/* Runs a command that must answer status "OK" or "PONG"; 0 or ERR_CONNECT. */
static int redis_handshake_cmd(redis_tier *r, const char *what, redisReply *rep) {
    bool ok = rep && rep->type == REDIS_REPLY_STATUS;
    int rc = 0;
    if (!ok)
        rc = err_set(ERR_CONNECT, "redis %s: %s failed: %s", r->url, what,
                     rep && rep->type == REDIS_REPLY_ERROR ? rep->str : redis_why(r->c));
    if (rep)
        freeReplyObject(rep);
    return rc;
}

/* Connects (with timeouts), checks the server answers and selects the db. 0 or ERR_CONNECT. */
static int redis_connect(redis_tier *r) {
    struct timeval tv = {REDIS_TIMEOUT_MS / 1000, (REDIS_TIMEOUT_MS % 1000) * 1000};
    r->last_try_ns = clock_now_ns();
    r->c = r->u.port ? redisConnectWithTimeout(r->u.host, r->u.port, tv)
                     : redisConnectUnixWithTimeout(r->u.host, tv);
    int rc = 0;
    if (!r->c || r->c->err)
        rc = err_set(ERR_CONNECT, "redis %s: cannot connect: %s", r->url,
                     r->c ? r->c->errstr : "out of memory");
    else if (redisSetTimeout(r->c, tv) != REDIS_OK)
        rc = err_set(ERR_CONNECT, "redis %s: cannot set the command timeout", r->url);
    if (!rc) /* keep the reader's buffer between replies: hiredis frees it after every reply by
              * default once it passes 16 KB, and regrows it by doubling for every blob */
        r->c->reader->maxbuf = 0;
    if (!rc)
        rc = redis_handshake_cmd(r, "PING", redisCommand(r->c, "PING"));
    if (!rc && r->u.db)
        rc = redis_handshake_cmd(r, "SELECT", redisCommand(r->c, "SELECT %d", r->u.db));
    if (rc && r->c) {
        redisFree(r->c);
        r->c = NULL;
    }
    return rc;
}

/* Makes sure there is a connection, trying at most once per RECONNECT_NS. 0 or ERR_CONNECT. */
static int redis_ready(redis_tier *r) {
    if (r->c)
        return 0;
    if (clock_now_ns() - r->last_try_ns < RECONNECT_NS)
        return err_set(ERR_CONNECT, "redis %s: not connected (next attempt within 1 s)", r->url);
    int rc = redis_connect(r);
    if (rc)
        log_debug("kv redis tier: reconnect failed: %s", err_detail());
    else
        log_info("kv redis tier: reconnected to %s", r->url);
    return rc;
}

/* After a command: NULL reply means the connection is broken; drops it. Returns 0 if rep is
 * usable, else ERR_IO naming what failed. */
static int redis_reply_check(redis_tier *r, redisReply *rep, const char *what, uint64_t key) {
    if (rep)
        return 0;
    int rc = err_set(ERR_IO, "redis %s: %s %016" PRIx64 ": %s", r->url, what, key, redis_why(r->c));
    log_info("kv redis tier: lost the connection to %s (%s); reconnecting at most once a second",
             r->url, redis_why(r->c));
    redisFree(r->c);
    r->c = NULL;
    r->last_try_ns = clock_now_ns();
    return rc;
}

static void redis_key(const redis_tier *r, uint64_t key, char *buf, size_t n) {
    snprintf(buf, n, "verity:kv:%016" PRIx64 ":%016" PRIx64, r->identity, key);
}

/* Runs verb on block key's Redis key, with data[0..n) as a second argument when data is not NULL,
 * reconnecting first if needed. Returns 0 with the reply in *rep (the caller frees it) and the
 * Redis key in k, or the error of redis_ready or redis_reply_check. */
static int redis_run(redis_tier *r, const char *verb, uint64_t key, const void *data, size_t n,
                     char k[64], redisReply **rep) {
    int rc = redis_ready(r);
    if (rc)
        return rc;
    redis_key(r, key, k, 64);
    const char *argv[3] = {verb, k, data};
    size_t lens[3] = {strlen(verb), strlen(k), n};
    *rep = redisCommandArgv(r->c, data ? 3 : 2, argv, lens);
    return redis_reply_check(r, *rep, verb, key);
}

/* ERR_IO for a reply of a type verb does not answer: the error reply's text, if it is one. */
static int redis_reply_bad(const redis_tier *r, const char *verb, const char *k,
                           const redisReply *rep) {
    return err_set(ERR_IO, "redis %s: %s %s: %s", r->url, verb, k,
                   rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
}

/* A command whose reply only says whether it worked: 0 when it is of type want. */
static int redis_run_checked(redis_tier *r, const char *verb, uint64_t key, const void *data,
                             size_t n, int want) {
    char k[64];
    redisReply *rep;
    int rc = redis_run(r, verb, key, data, n, k, &rep);
    if (rc)
        return rc;
    if (rep->type != want)
        rc = redis_reply_bad(r, verb, k, rep);
    freeReplyObject(rep);
    return rc;
}

static int redis_put(void *impl, uint64_t key, const void *data, size_t n) {
    return redis_run_checked(impl, "SET", key, data, n, REDIS_REPLY_STATUS);
}

/* get_many's failure of the connection: ERR_IO naming the key and why, the connection dropped
 * (the replies still in flight are lost with it), the carry emptied. */
static int redis_lost(redis_tier *r, uint64_t key, const char *why) {
    int rc = err_set(ERR_IO, "redis %s: GET %016" PRIx64 ": %s", r->url, key, why);
    log_info("kv redis tier: lost the connection to %s (%s); reconnecting at most once a second",
             r->url, why);
    redisFree(r->c);
    r->c = NULL;
    r->carry_n = 0;
    r->last_try_ns = clock_now_ns();
    return rc;
}

/* The reason a receive failed: got is recv's result (0: EOF). */
static const char *redis_recv_why(ssize_t got) {
    if (got == 0)
        return "connection closed";
    return errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno);
}

/* Receives into iov (cnt entries) until they are full, the carry first. 0, or -1 with why set
 * (the socket's receive timeout, set by redisSetTimeout, ends a stalled read). */
static int redis_recv_full(redis_tier *r, struct iovec *iov, int cnt, const char **why) {
    for (int i = 0; i < cnt && r->carry_n > 0; i++) {
        size_t k = iov[i].iov_len < r->carry_n ? iov[i].iov_len : r->carry_n;
        memcpy(iov[i].iov_base, r->carry, k);
        memmove(r->carry, r->carry + k, r->carry_n - k);
        r->carry_n -= k;
        iov[i].iov_base = (char *)iov[i].iov_base + k;
        iov[i].iov_len -= k;
    }
    for (;;) {
        while (cnt > 0 && iov[0].iov_len == 0) {
            iov++;
            cnt--;
        }
        if (cnt == 0)
            return 0;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t got = recvmsg(r->c->fd, &mh, MSG_WAITALL);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            *why = redis_recv_why(got);
            return -1;
        }
        for (size_t g = (size_t)got; g > 0;) {
            size_t k = iov[0].iov_len < g ? iov[0].iov_len : g;
            iov[0].iov_base = (char *)iov[0].iov_base + k;
            iov[0].iov_len -= k;
            g -= k;
            if (iov[0].iov_len == 0) {
                iov++;
                cnt--;
            }
        }
    }
}

/* Reads the first line of a reply into line (NUL-terminated, without its CRLF): the carry, then
 * small reads; what arrives past the line stays in the carry. An error reply longer than the
 * buffer is cut (its start kept, the rest read and dropped); any other line that long is not a
 * GET's answer. 0, or -1 with why set. */
static int redis_recv_line(redis_tier *r, char line[REDIS_HEAD_MAX], const char **why) {
    bool cut = false; /* line holds the start of a longer error; skipping to its end */
    for (;;) {
        char *nl = memchr(r->carry, '\n', r->carry_n);
        if (nl) {
            size_t k = (size_t)(nl - r->carry) + 1;
            if (!cut && (k < 2 || nl[-1] != '\r')) {
                *why = "malformed reply";
                return -1;
            }
            if (!cut) {
                memcpy(line, r->carry, k - 2);
                line[k - 2] = 0;
            }
            memmove(r->carry, r->carry + k, r->carry_n - k);
            r->carry_n -= k;
            return 0;
        }
        if (r->carry_n == sizeof r->carry) {
            if (!cut && r->carry[0] != '-') {
                *why = "reply line too long";
                return -1;
            }
            if (!cut)
                snprintf(line, REDIS_HEAD_MAX, "%.*s", REDIS_HEAD_MAX - 1, r->carry);
            cut = true;
            r->carry_n = 0;
        }
        ssize_t got = recv(r->c->fd, r->carry + r->carry_n, sizeof r->carry - r->carry_n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            *why = redis_recv_why(got);
            return -1;
        }
        r->carry_n += (size_t)got;
    }
}

/* Reads one GET reply straight from the socket: "$<n>\r\n" then n bytes into a buffer of pool
 * (one recvmsg, with the trailing CRLF into a side buffer, instead of hiredis's 16 KB reads, its
 * reply copy and ours), "$-1\r\n" (nil: ERR_NOTFOUND), or "-<error>\r\n" (an error reply:
 * ERR_IO quoting it, the connection kept). A broken, stalled or garbled stream drops the
 * connection (redis_lost). */
static int redis_read_get(redis_tier *r, uint64_t key, kv_blobs *pool, void **data, size_t *n) {
    char line[REDIS_HEAD_MAX];
    const char *why = NULL;
    if (redis_recv_line(r, line, &why))
        return redis_lost(r, key, why);
    if (line[0] == '-')
        return err_set(ERR_IO, "redis %s: GET %016" PRIx64 ": %s", r->url, key, line + 1);
    char *end;
    errno = 0;
    long long len = line[0] == '$' ? strtoll(line + 1, &end, 10) : -2;
    if (len == -1 && *end == 0)
        return ERR_NOTFOUND;
    if (len < 0 || *end != 0 || errno)
        return redis_lost(r, key, "unexpected reply");
    void *buf = kv_blobs_alloc(pool, (size_t)len);
    if (!buf) /* the bytes must still be read off the socket: give up the connection */
        return redis_lost(r, key, "out of memory for the value");
    char crlf[2];
    struct iovec iov[2] = {{buf, (size_t)len}, {crlf, 2}};
    if (redis_recv_full(r, iov, 2, &why) || memcmp(crlf, "\r\n", 2) != 0) {
        kv_blobs_free(pool, buf, (size_t)len);
        return redis_lost(r, key, why ? why : "malformed reply");
    }
    *data = buf;
    *n = (size_t)len;
    return 0;
}

/* Appends GET keys[i] to hiredis's output buffer. 0 or ERR_NOMEM. */
static int redis_append_get(redis_tier *r, uint64_t key) {
    char k[64];
    redis_key(r, key, k, sizeof k);
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, strlen(k)};
    if (redisAppendCommandArgv(r->c, 2, argv, lens) != REDIS_OK)
        return err_set(ERR_NOMEM, "redis %s: GET %s: out of memory", r->url, k);
    return 0;
}

/* Sends what hiredis's output buffer holds. 0 or redis_lost's error. */
static int redis_flush(redis_tier *r, uint64_t key) {
    int done = 0;
    while (!done)
        if (redisBufferWrite(r->c, &done) != REDIS_OK)
            return redis_lost(r, key, redis_why(r->c));
    return 0;
}

/* Pipelined GETs with a sliding window: REDIS_PIPELINE_DEPTH commands are sent, and each reply
 * read sends the next key's command, so over a network the round trips overlap. The window is
 * small because a deeper one only makes the server queue more values in its output buffer
 * (measured on a unix socket: 16 or 32 in flight read slower than 1 to 8). Commands go out
 * through hiredis; the replies are read by redis_read_get, straight into the caller's buffers
 * (hiredis's reader is empty between commands: it never reads past a reply). A broken
 * connection fails the key being read and every key after it; an error or nil reply fails its
 * key alone. */
static void redis_get_many(void *impl, kv_blobs *pool, const uint64_t *keys, int n,
                           kv_tier_got *got) {
    redis_tier *r = impl;
    for (int i = 0; i < n; i++)
        got[i] = (kv_tier_got){.data = NULL, .n = 0, .rc = 0};
    int rc = redis_ready(r), sent = 0;
    if (!rc && r->c->reader->pos != r->c->reader->len)
        rc = redis_lost(r, keys[0], "unread bytes before a GET");
    for (int i = 0; i < n; i++) {
        bool more = false;
        while (!rc && r->c && sent < n && sent < i + r->depth) {
            rc = redis_append_get(r, keys[sent]);
            sent += !rc;
            more = !rc;
        }
        if (more && r->c && redis_flush(r, keys[i]))
            rc = ERR_IO;
        if (i >= sent || !r->c) {
            /* never sent (not connected, out of memory), or lost with the connection */
            got[i].rc = i >= sent && rc ? rc : ERR_IO;
            continue;
        }
        got[i].rc = redis_read_get(r, keys[i], pool, &got[i].data, &got[i].n);
    }
}

static int redis_get(void *impl, uint64_t key, kv_blobs *pool, void **data, size_t *n) {
    kv_tier_got g;
    redis_get_many(impl, pool, &key, 1, &g);
    *data = g.data;
    *n = g.n;
    return g.rc;
}

static int redis_drop(void *impl, uint64_t key) {
    return redis_run_checked(impl, "DEL", key, NULL, 0, REDIS_REPLY_INTEGER);
}

static void redis_destroy(void *impl) {
    redis_tier *r = impl;
    if (!r)
        return;
    if (r->c)
        redisFree(r->c);
    free(r->url);
    free(r);
}

static const kv_tier_ops redis_ops = {
    .name = "redis",
    .put = redis_put,
    .get = redis_get,
    .get_many = redis_get_many,
    .drop = redis_drop,
    .usage = NULL,
    .destroy = redis_destroy,
};

int kv_tier_redis_open(const char *url, uint64_t identity, const kv_tier_ops **ops, void **impl) {
    *ops = NULL;
    *impl = NULL;
    redis_tier *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(ERR_NOMEM, "kv redis tier: out of memory");
    int rc = redis_url_parse(url, &r->u);
    if (!rc && !(r->url = strdup(url)))
        rc = err_set(ERR_NOMEM, "kv redis tier: out of memory");
    r->identity = identity;
    r->depth = (int)flags_int(FLAG_KV_REDIS_PIPELINE);
    if (r->depth < 1)
        r->depth = 1;
    if (!rc)
        rc = redis_connect(r);
    if (rc) {
        redis_destroy(r);
        return rc;
    }
    *ops = &redis_ops;
    *impl = r;
    return 0;
}
