/* SPDX-License-Identifier: MIT */
/*
 * disagg: see disagg.h for the flow, the ownership and the threads. Here: the hello frame, the
 * receiver's registry of expected transfers (one mutex, one condition), its accept and connection
 * threads, and the sender's thread and queue.
 *
 * Hello (sender -> receiver, once per connection, before kv_xfer's messages): 24 bytes,
 * u32 magic "VKXH", u32 zero, u64 transfer id, u64 hash64 of the 16 bytes before.
 */
#include "disagg/disagg.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/flags.h"
#include "base/hash.h"
#include "base/log.h"
#include "disagg/kv_xfer.h"
#include "disagg/kv_xfer_int.h"
#include "kv/kv_block.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HELLO_MAGIC 0x484b5856u /* "VKXH" */

static _Atomic int64_t g_rx_ok, g_rx_aborted, g_rx_verified, g_rx_dropped, g_rx_expired,
    g_rx_cancelled, g_rx_open, g_tx_ok, g_tx_aborted, g_tx_sent, g_tx_acked, g_tx_open;

void disagg_stats_get(disagg_stats *o) {
    *o = (disagg_stats){.rx_transfers_ok = atomic_load(&g_rx_ok),
                        .rx_transfers_aborted = atomic_load(&g_rx_aborted),
                        .rx_blocks_verified = atomic_load(&g_rx_verified),
                        .rx_blocks_dropped = atomic_load(&g_rx_dropped),
                        .rx_waits_expired = atomic_load(&g_rx_expired),
                        .rx_cancelled = atomic_load(&g_rx_cancelled),
                        .rx_open = atomic_load(&g_rx_open),
                        .tx_transfers_ok = atomic_load(&g_tx_ok),
                        .tx_transfers_aborted = atomic_load(&g_tx_aborted),
                        .tx_blocks_sent = atomic_load(&g_tx_sent),
                        .tx_blocks_acked = atomic_load(&g_tx_acked),
                        .tx_open = atomic_load(&g_tx_open)};
}

/* FAULT (j), fault-xfer: the fault build's transfer faults (flags.h); "none" elsewhere. */
static const char *fault_xfer(void) {
#if defined(VERITY_FAULTS) && VERITY_FAULTS
    return flags_str(FLAG_FAULT_XFER);
#else
    return "none";
#endif
}

static int hello_write(kv_xfer_conn *c, uint64_t id) {
    uint8_t b[24];
    uint32_t magic = HELLO_MAGIC, zero = 0;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &zero, 4);
    memcpy(b + 8, &id, 8);
    uint64_t h = hash64(HELLO_MAGIC, b, 16);
    memcpy(b + 16, &h, 8);
    return c->ops->write_all(c, b, sizeof b);
}

static int hello_read(kv_xfer_conn *c, int timeout_ms, uint64_t *id) {
    uint8_t b[24];
    int rc = c->ops->read_full(c, b, sizeof b, timeout_ms);
    if (rc)
        return rc;
    uint32_t magic;
    uint64_t h;
    memcpy(&magic, b, 4);
    memcpy(&h, b + 16, 8);
    if (magic != HELLO_MAGIC || h != hash64(HELLO_MAGIC, b, 16))
        return err_set(ERR_PROTOCOL, "disagg: a kv connection began without a valid hello");
    memcpy(id, b + 8, 8);
    return 0;
}

static void deadline_in(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* ---- receiver ---- */

enum { IN_WAITING = 0, IN_RECEIVING, IN_READY, IN_FAILED };

typedef struct rx_entry {
    uint64_t id;
    int32_t *toks; /* NULL until the request registered */
    int32_t n_toks;
    int state;
    bool engine_done; /* the hook's done ran: nobody will take the blobs */
    bool has_conn;    /* a connection thread holds it */
    int refs;         /* the engine's hook + the connection thread */
    void **blobs;
    int32_t n_blobs;
    size_t blob_bytes;
    int64_t progress_ns; /* last sign of life (registered, a block verified) */
    kv_xfer_conn *conn;  /* while receiving: shut down to cut the transfer */
    disagg_rx *rx;
    struct rx_entry *next;
} rx_entry;

struct disagg_rx {
    disagg_rx_opts o;
    char transport[32];
    const kv_xfer_transport *tr;
    kv_xfer_listener *lis;
    char addr[300];
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rx_entry *entries;
    uint64_t tombs[DISAGG_RX_TOMBSTONES]; /* ids cancelled before their expect (0: free) */
    int next_tomb;                        /* where the next one goes (a ring) */
    bool stop;
    int n_threads; /* connection threads alive */
};

/* Under rx->mu. */
static rx_entry *rx_find(disagg_rx *rx, uint64_t id) {
    for (rx_entry *e = rx->entries; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

/* Under rx->mu: whether id has a tombstone; take removes it. */
static bool rx_tomb_find(disagg_rx *rx, uint64_t id, bool take) {
    for (int i = 0; i < DISAGG_RX_TOMBSTONES; i++)
        if (rx->tombs[i] == id) {
            if (take)
                rx->tombs[i] = 0;
            return true;
        }
    return false;
}

/* Under rx->mu: drops one reference; the last frees the entry. */
static void rx_entry_unref(disagg_rx *rx, rx_entry *e) {
    if (--e->refs > 0)
        return;
    for (rx_entry **pp = &rx->entries; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    for (int32_t i = 0; i < e->n_blobs; i++)
        free(e->blobs[i]);
    free(e->blobs);
    free(e->toks);
    free(e);
}

static int32_t rx_hook_poll(void *ctx, const void *const **blobs, size_t *blob_bytes) {
    rx_entry *e = ctx;
    disagg_rx *rx = e->rx;
    pthread_mutex_lock(&rx->mu);
    int32_t n = -1;
    if (e->state == IN_READY) {
        *blobs = (const void *const *)e->blobs;
        *blob_bytes = e->blob_bytes;
        n = e->n_blobs;
    } else if (e->state == IN_FAILED || rx->stop) {
        n = 0;
    } else if (clock_now_ns() - e->progress_ns > (int64_t)rx->o.timeout_ms * 1000000 ||
               !strcmp(fault_xfer(), "late")) { /* FAULT (j) late: give up at once */
        /* no progress for the timeout (P never connected, or went silent): compute it here */
        atomic_fetch_add(&g_rx_expired, 1);
        log_warn("disagg: transfer %016llx made no progress in %d ms: the prompt is computed "
                 "here",
                 (unsigned long long)e->id, rx->o.timeout_ms);
        e->state = IN_FAILED;
        if (e->conn)
            kv_xfer_conn_shutdown(e->conn);
        n = 0;
    }
    pthread_mutex_unlock(&rx->mu);
    return n;
}

static void rx_hook_done(void *ctx, int32_t restored, int32_t refused) {
    rx_entry *e = ctx;
    disagg_rx *rx = e->rx;
    (void)restored;
    (void)refused;
    pthread_mutex_lock(&rx->mu);
    e->engine_done = true;
    if (e->conn && e->state == IN_RECEIVING)
        kv_xfer_conn_shutdown(e->conn); /* the request ended first: cut the transfer */
    pthread_cond_broadcast(&rx->cv);
    rx_entry_unref(rx, e);
    pthread_mutex_unlock(&rx->mu);
}

int disagg_rx_expect(disagg_rx *rx, uint64_t id, const int32_t *toks, int32_t n_toks,
                     engine_kv_in *hook) {
    int32_t *copy = malloc((size_t)(n_toks > 0 ? n_toks : 1) * sizeof *copy);
    if (!copy)
        return err_set(ERR_NOMEM, "disagg: transfer %016llx", (unsigned long long)id);
    memcpy(copy, toks, (size_t)n_toks * sizeof *copy);
    pthread_mutex_lock(&rx->mu);
    rx_entry *e = rx_find(rx, id);
    if (e && e->toks) {
        pthread_mutex_unlock(&rx->mu);
        free(copy);
        return err_set(ERR_EXISTS, "disagg: transfer id %016llx is already expected",
                       (unsigned long long)id);
    }
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&rx->mu);
            free(copy);
            return err_set(ERR_NOMEM, "disagg: transfer %016llx", (unsigned long long)id);
        }
        e->id = id;
        e->rx = rx;
        e->next = rx->entries;
        rx->entries = e;
    }
    e->toks = copy;
    e->n_toks = n_toks;
    e->refs++;
    e->progress_ns = clock_now_ns();
    if (rx_tomb_find(rx, id, true) && e->state == IN_WAITING) {
        /* the router's cancel came first: compute it here at once */
        atomic_fetch_add(&g_rx_cancelled, 1);
        e->state = IN_FAILED;
        if (e->conn)
            kv_xfer_conn_shutdown(e->conn);
    }
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
    *hook = (engine_kv_in){.poll = rx_hook_poll, .done = rx_hook_done, .ctx = e};
    return 0;
}

disagg_cancel_result disagg_rx_cancel(disagg_rx *rx, uint64_t id) {
    disagg_cancel_result res = DISAGG_CANCEL_IGNORED;
    pthread_mutex_lock(&rx->mu);
    rx_entry *e = rx_find(rx, id);
    if (e && e->toks) {
        if (e->state == IN_WAITING || e->state == IN_RECEIVING) {
            atomic_fetch_add(&g_rx_cancelled, 1);
            log_info("disagg: transfer %016llx cancelled (its prefill failed): the prompt is "
                     "computed here",
                     (unsigned long long)id);
            e->state = IN_FAILED;
            if (e->conn)
                kv_xfer_conn_shutdown(e->conn); /* frees the staging blocks, tells P */
            res = DISAGG_CANCEL_DONE;
        }
    } else if (!rx_tomb_find(rx, id, false)) {
        /* not expected yet (a connection may wait for the request: it sees the tombstone) */
        rx->tombs[rx->next_tomb] = id;
        rx->next_tomb = (rx->next_tomb + 1) % DISAGG_RX_TOMBSTONES;
        res = DISAGG_CANCEL_PENDING;
    }
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
    return res;
}

typedef struct rx_conn_arg {
    disagg_rx *rx;
    kv_xfer_conn *conn;
} rx_conn_arg;

/* Receives one transfer into a staging pool; returns the blobs (n_full of them) or NULL. */
static void **rx_receive(disagg_rx *rx, rx_entry *e, kv_xfer_conn *conn, int32_t *n_out,
                         size_t *bytes_out) {
    int64_t bs = rx->o.pool.block_size, n_full = e->n_toks / bs;
    if (n_full < 1)
        return NULL;
    kv_pool_opts po = rx->o.pool;
    po.n_blocks = n_full;
    kv_pool *stage = NULL;
    kv_xfer_recv *r = NULL;
    void **blobs = NULL;
    if (kv_pool_create(&po, &stage))
        return NULL;
    kv_xfer_recv_opts ro = {.xfer_id = e->id,
                            .identity = rx->o.identity,
                            .toks = e->toks,
                            .n_toks = e->n_toks,
                            .timeout_ms = rx->o.timeout_ms};
    if (kv_xfer_recv_create(conn, stage, &ro, &r)) {
        kv_pool_destroy(stage);
        return NULL;
    }
    /* every block's name, and its checksum as verified (the blob handed on carries that one, so
     * a block changed after its verification is refused at restore, never used) */
    uint64_t *keys = malloc((size_t)n_full * sizeof *keys), *sums = calloc((size_t)n_full, 8);
    if (!keys || !sums) {
        free(keys);
        free(sums);
        kv_xfer_recv_destroy(r);
        kv_pool_destroy(stage);
        return NULL;
    }
    for (int64_t i = 0; i < n_full; i++)
        keys[i] = kv_block_key(i ? keys[i - 1] : rx->o.identity, e->toks + i * bs, bs);
    bool f_reuse = !strcmp(fault_xfer(), "reuse");
    kv_xfer_state st = KV_XFER_OPEN;
    int64_t verified = 0;
    while (st == KV_XFER_OPEN) {
        st = kv_xfer_recv_step(r);
        kv_xfer_stats s = kv_xfer_recv_stats(r);
        if (s.n_verified > verified) {
            atomic_fetch_add(&g_rx_verified, s.n_verified - verified);
            for (int64_t i = verified; i < s.n_verified; i++) {
                int32_t id = kv_xfer_recv_block(r, (uint32_t)i);
                if (id < 0)
                    break;
                sums[i] = kv_xfer_recv_checksum(r, (uint32_t)i); /* as verified: no 2nd pass */
                if (f_reuse && i == 0) {
                    /* FAULT (j) reuse: the verified block is written over while the transfer
                     * still holds it, as if the pool had handed it to someone else */
                    size_t sb = kv_block_state_bytes(stage);
                    unsigned char *noise = malloc(sb);
                    if (noise) {
                        for (size_t k = 0; k < sb; k++)
                            noise[k] = (unsigned char)(k * 2654435761u >> 13);
                        kv_block_load(stage, id, noise, true, true);
                        free(noise);
                    }
                }
            }
            verified = s.n_verified;
            pthread_mutex_lock(&rx->mu);
            e->progress_ns = clock_now_ns();
            pthread_mutex_unlock(&rx->mu);
        }
    }
    atomic_fetch_add(&g_rx_dropped, kv_xfer_recv_stats(r).n_dropped);
    if (st == KV_XFER_COMPLETE) {
        int32_t *ids = malloc((size_t)n_full * sizeof *ids);
        size_t nb = kv_block_blob_bytes(stage);
        blobs = calloc((size_t)n_full, sizeof *blobs);
        int n = ids && blobs ? kv_xfer_recv_take(r, ids, (int)n_full) : -1;
        if (n == (int)n_full) {
            bool ok = true;
            for (int i = 0; i < n; i++) {
                const int32_t *bt = e->toks + (int64_t)i * bs;
                kv_block_meta m = {.identity = rx->o.identity,
                                   .parent = i ? keys[i - 1] : rx->o.identity,
                                   .key = keys[i],
                                   .checksum = sums[i],
                                   .toks = bt};
                blobs[i] = ok ? malloc(nb) : NULL;
                if (blobs[i])
                    kv_block_encode(stage, ids[i], &m, blobs[i]);
                else
                    ok = false;
            }
            for (int i = 0; i < n; i++)
                kv_block_unref(stage, ids[i]); /* HANDED: ours to free */
            if (ok) {
                *n_out = n;
                *bytes_out = nb;
            } else {
                for (int i = 0; i < n; i++)
                    free(blobs[i]);
                free(blobs);
                blobs = NULL;
            }
        } else {
            free(blobs);
            blobs = NULL;
        }
        free(ids);
    } else {
        log_warn("disagg: transfer %016llx aborted after %lld verified blocks (%s): the prompt "
                 "is computed here",
                 (unsigned long long)e->id, (long long)verified,
                 err_name(kv_xfer_recv_error(r)));
    }
    kv_xfer_recv_destroy(r); /* frees whatever was not handed */
    kv_pool_destroy(stage);
    free(keys);
    free(sums);
    return blobs;
}

static void *rx_conn_main(void *arg) {
    rx_conn_arg *a = arg;
    disagg_rx *rx = a->rx;
    kv_xfer_conn *conn = a->conn;
    free(a);
    uint64_t id = 0;
    rx_entry *e = NULL;
    bool receiving = false;
    if (hello_read(conn, rx->o.timeout_ms, &id) == 0) {
        pthread_mutex_lock(&rx->mu);
        e = rx_find(rx, id);
        if ((e && e->has_conn) || (!(e && e->toks) && rx_tomb_find(rx, id, false))) {
            e = NULL; /* a second connection for one transfer, or a cancelled one: refused */
        } else if (!e && (e = calloc(1, sizeof *e)) != NULL) {
            e->id = id;
            e->rx = rx;
            e->next = rx->entries;
            rx->entries = e;
        }
        if (e) {
            e->refs++;
            e->has_conn = true;
            e->conn = conn;
            struct timespec dl;
            deadline_in(&dl, rx->o.timeout_ms);
            while (!e->toks && !rx->stop && !rx_tomb_find(rx, id, false) &&
                   pthread_cond_timedwait(&rx->cv, &rx->mu, &dl) != ETIMEDOUT) {
            }
            if (e->toks && !e->engine_done && !rx->stop && e->state == IN_WAITING)
                e->state = IN_RECEIVING;
            receiving = e->state == IN_RECEIVING;
        }
        pthread_mutex_unlock(&rx->mu);
    }
    void **blobs = NULL;
    int32_t n = 0;
    size_t nb = 0;
    if (receiving) {
        atomic_fetch_add(&g_rx_open, 1);
        blobs = rx_receive(rx, e, conn, &n, &nb);
        atomic_fetch_sub(&g_rx_open, 1);
        atomic_fetch_add(blobs ? &g_rx_ok : &g_rx_aborted, 1);
    }
    pthread_mutex_lock(&rx->mu);
    if (e) {
        e->conn = NULL;
        if (receiving && blobs && e->state == IN_RECEIVING && !e->engine_done) {
            e->blobs = blobs;
            e->n_blobs = n;
            e->blob_bytes = nb;
            e->state = IN_READY;
            blobs = NULL;
        } else if (e->state != IN_READY) {
            e->state = IN_FAILED;
        }
        rx_entry_unref(rx, e);
    }
    rx->n_threads--;
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
    if (blobs) { /* the request ended meanwhile */
        for (int32_t i = 0; i < n; i++)
            free(blobs[i]);
        free(blobs);
    }
    kv_xfer_conn_destroy(conn);
    return NULL;
}

static void *rx_accept_main(void *arg) {
    disagg_rx *rx = arg;
    for (;;) {
        pthread_mutex_lock(&rx->mu);
        bool stop = rx->stop;
        pthread_mutex_unlock(&rx->mu);
        if (stop)
            break;
        kv_xfer_conn *c = NULL;
        if (rx->tr->accept(rx->lis, 100, &c))
            continue;
        rx_conn_arg *a = malloc(sizeof *a);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_mutex_lock(&rx->mu);
        rx->n_threads++;
        pthread_mutex_unlock(&rx->mu);
        if (a)
            *a = (rx_conn_arg){rx, c};
        if (!a || pthread_create(&t, &at, rx_conn_main, a)) {
            free(a);
            kv_xfer_conn_destroy(c);
            pthread_mutex_lock(&rx->mu);
            rx->n_threads--;
            pthread_mutex_unlock(&rx->mu);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

int disagg_rx_create(const disagg_rx_opts *o, disagg_rx **out) {
    *out = NULL;
    const kv_xfer_transport *tr = kv_xfer_transport_find(o->transport);
    if (!tr)
        return ERR_NOTFOUND;
    disagg_rx *rx = calloc(1, sizeof *rx);
    if (!rx)
        return err_set(ERR_NOMEM, "disagg: receiver");
    rx->o = *o;
    snprintf(rx->transport, sizeof rx->transport, "%s", o->transport);
    rx->o.transport = rx->transport;
    rx->o.listen = NULL;
    rx->tr = tr;
    int rc = tr->listen(o->listen, &rx->lis);
    if (rc) {
        free(rx);
        return rc;
    }
    char host[256];
    const char *colon = strrchr(o->listen, ':');
    size_t hl = colon ? (size_t)(colon - o->listen) : 0;
    if (hl >= sizeof host)
        hl = sizeof host - 1;
    memcpy(host, o->listen, hl);
    host[hl] = 0;
    snprintf(rx->addr, sizeof rx->addr, "%s:%d", host[0] ? host : "0.0.0.0",
             kv_xfer_listener_port(rx->lis));
    pthread_mutex_init(&rx->mu, NULL);
    pthread_cond_init(&rx->cv, NULL);
    if (pthread_create(&rx->accept_thread, NULL, rx_accept_main, rx)) {
        kv_xfer_listener_destroy(rx->lis);
        pthread_mutex_destroy(&rx->mu);
        pthread_cond_destroy(&rx->cv);
        free(rx);
        return err_set(ERR_INTERNAL, "disagg: cannot start the kv listener's thread");
    }
    *out = rx;
    return 0;
}

const char *disagg_rx_addr(const disagg_rx *rx) {
    return rx->addr;
}

void disagg_rx_destroy(disagg_rx *rx) {
    if (!rx)
        return;
    pthread_mutex_lock(&rx->mu);
    rx->stop = true;
    pthread_mutex_unlock(&rx->mu);
    pthread_join(rx->accept_thread, NULL);
    pthread_mutex_lock(&rx->mu);
    for (rx_entry *e = rx->entries; e; e = e->next)
        if (e->conn)
            kv_xfer_conn_shutdown(e->conn);
    pthread_cond_broadcast(&rx->cv);
    while (rx->n_threads > 0)
        pthread_cond_wait(&rx->cv, &rx->mu);
    bool held = rx->entries != NULL;
    pthread_mutex_unlock(&rx->mu);
    kv_xfer_listener_destroy(rx->lis);
    if (held) {
        /* entries still held by requests: their done runs when the engine stops, later; the
         * receiver stays allocated for them (process exit) */
        return;
    }
    pthread_mutex_destroy(&rx->mu);
    pthread_cond_destroy(&rx->cv);
    free(rx);
}

/* ---- sender ---- */

typedef struct tx_item {
    int32_t index, id;
} tx_item;

struct disagg_tx {
    disagg_tx_opts o;
    char addr[300], transport[32];
    int32_t *toks;
    int32_t n_toks, n_full;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tx_item *q; /* [n_full] */
    int32_t n_q, next_q;
    bool ended, complete;
    bool joined; /* disagg_tx_wait joined the thread */
    int result;  /* the thread's: 0 (sent and acknowledged) or the transfer's error */
};

static void tx_hook_block(void *ctx, int32_t index, int32_t id) {
    disagg_tx *t = ctx;
    pthread_mutex_lock(&t->mu);
    if (t->n_q < t->n_full)
        t->q[t->n_q++] = (tx_item){index, id};
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void tx_hook_end(void *ctx, bool complete) {
    disagg_tx *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->ended = true;
    t->complete = complete;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void tx_release(void *ctx, int32_t id) {
    disagg_tx *t = ctx;
    (void)engine_loop_kv_unref(t->o.loop, id);
}

/* Takes the next queued block, waiting for one or the end. Before it sleeps it lets the blocks
 * already sent leave (kv_xfer_send_flush on s, NULL: none): they are not left waiting for this
 * thread while the engine computes the next chunk. Returns false at the end. */
static bool tx_next(disagg_tx *t, kv_xfer_send *s, tx_item *it) {
    pthread_mutex_lock(&t->mu);
    if (s && t->next_q == t->n_q && !t->ended) {
        pthread_mutex_unlock(&t->mu);
        (void)kv_xfer_send_flush(s); /* a failure aborted the transfer: the loop sees it */
        pthread_mutex_lock(&t->mu);
    }
    while (t->next_q == t->n_q && !t->ended)
        pthread_cond_wait(&t->cv, &t->mu);
    bool got = t->next_q < t->n_q;
    if (got)
        *it = t->q[t->next_q++];
    pthread_mutex_unlock(&t->mu);
    return got;
}

/* FAULT (j) on the sender's wire (kv_xfer_wire_hook): corrupt flips a payload bit of block 0,
 * drop loses block 1 (block 0 if it is the only one), dup sends block 0 twice, delay holds block 0
 * past the receiver's timeout. */
static int tx_fault_hook(void *ctx, uint32_t seq, uint8_t *frame, size_t n) {
    disagg_tx *t = ctx;
    const char *f = fault_xfer();
    if (!strcmp(f, "corrupt") && seq == 0) {
        frame[n - 1 - 8] ^= 0x10; /* inside the payload's last bytes, not the header */
    } else if (!strcmp(f, "drop") && seq == (t->n_full > 1 ? 1u : 0u)) {
        return 0;
    } else if (!strcmp(f, "dup") && seq == 0) {
        return 2;
    } else if (!strcmp(f, "delay") && seq == 0) {
        struct timespec ts = {(t->o.timeout_ms + 300) / 1000,
                              (long)((t->o.timeout_ms + 300) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* Connects to the decode server; FAULT (j) noconnect: refused, as by a dead address. */
static int tx_connect(const kv_xfer_transport *tr, const char *addr, kv_xfer_conn **out) {
    if (!strcmp(fault_xfer(), "noconnect"))
        return err_set(ERR_CONNECT, "disagg: connect to %s refused (FAULT (j) noconnect)", addr);
    return tr->connect(addr, out);
}

static void *tx_main(void *arg) {
    disagg_tx *t = arg;
    const kv_xfer_transport *tr = kv_xfer_transport_find(t->transport);
    kv_xfer_conn *conn = NULL;
    kv_xfer_send *s = NULL;
    kv_xfer_send_opts so = {.xfer_id = t->o.id, .timeout_ms = t->o.timeout_ms};
    if (strcmp(fault_xfer(), "none")) {
        so.wire_hook = tx_fault_hook;
        so.wire_ctx = t;
    }
    if (!tr || tx_connect(tr, t->addr, &conn) || hello_write(conn, t->o.id) ||
        kv_xfer_send_create(conn, &so, &s))
        log_warn("disagg: transfer %016llx to %s not started: %s", (unsigned long long)t->o.id,
                 t->addr, err_detail());
    atomic_fetch_add(&g_tx_open, 1);
    int64_t bs = kv_pool_block_size(t->o.pool);
    uint64_t key = t->o.identity;
    tx_item it;
    bool final_sent = false;
    while (tx_next(t, s, &it)) {
        const int32_t *bt = t->toks + (int64_t)it.index * bs;
        uint64_t parent = key;
        key = kv_block_key(parent, bt, bs);
        bool final = it.index == t->n_full - 1;
        if (!s || kv_xfer_send_state(s) != KV_XFER_OPEN) {
            tx_release(t, it.id); /* never taken by a transfer: ours to give back */
            continue;
        }
        kv_block_meta m = {.identity = t->o.identity,
                           .parent = parent,
                           .key = key,
                           .checksum = kv_block_checksum(t->o.pool, it.id, key),
                           .toks = bt};
        int rc = kv_xfer_send_block(s, t->o.pool, it.id, &m, final, tx_release, t);
        if (rc == 0) {
            atomic_fetch_add(&g_tx_sent, 1);
        } else if (rc != ERR_CONNECT) { /* not taken (ERR_STATE, ERR_NOMEM): ours to give back */
            tx_release(t, it.id);
            kv_xfer_send_cancel(s, rc); /* a gap would follow: end the transfer now */
        }
        final_sent |= final && rc == 0;
    }
    if (s) {
        pthread_mutex_lock(&t->mu);
        bool complete = t->complete;
        pthread_mutex_unlock(&t->mu);
        if (!complete || !final_sent)
            kv_xfer_send_cancel(s, ERR_CANCELLED); /* the request ended first */
        while (kv_xfer_send_state(s) == KV_XFER_OPEN)
            kv_xfer_send_step(s);
        kv_xfer_stats st = kv_xfer_send_stats(s);
        atomic_fetch_add(&g_tx_acked, st.n_acked);
        bool ok = kv_xfer_send_state(s) == KV_XFER_COMPLETE;
        t->result = ok ? 0 : kv_xfer_send_error(s) ? kv_xfer_send_error(s) : ERR_CANCELLED;
        atomic_fetch_add(ok ? &g_tx_ok : &g_tx_aborted, 1);
        if (!ok)
            log_warn("disagg: transfer %016llx to %s aborted (%s)", (unsigned long long)t->o.id,
                     t->addr, err_name(kv_xfer_send_error(s)));
        kv_xfer_send_destroy(s);
    } else {
        t->result = ERR_CONNECT;
        atomic_fetch_add(&g_tx_aborted, 1);
    }
    atomic_fetch_sub(&g_tx_open, 1);
    kv_xfer_conn_destroy(conn);
    return NULL;
}

int disagg_tx_create(const disagg_tx_opts *o, const int32_t *toks, int32_t n_toks,
                     engine_kv_out *hook, disagg_tx **out) {
    *out = NULL;
    if (!kv_xfer_transport_find(o->transport))
        return ERR_NOTFOUND;
    int64_t bs = kv_pool_block_size(o->pool);
    disagg_tx *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(ERR_NOMEM, "disagg: transfer %016llx", (unsigned long long)o->id);
    t->o = *o;
    snprintf(t->addr, sizeof t->addr, "%s", o->addr);
    snprintf(t->transport, sizeof t->transport, "%s", o->transport);
    t->n_toks = n_toks;
    t->n_full = (int32_t)(n_toks / bs);
    t->toks = malloc((size_t)(n_toks > 0 ? n_toks : 1) * sizeof *t->toks);
    t->q = malloc((size_t)(t->n_full > 0 ? t->n_full : 1) * sizeof *t->q);
    if (!t->toks || !t->q) {
        free(t->toks);
        free(t->q);
        free(t);
        return err_set(ERR_NOMEM, "disagg: transfer %016llx", (unsigned long long)o->id);
    }
    memcpy(t->toks, toks, (size_t)n_toks * sizeof *toks);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->thread, NULL, tx_main, t)) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t->toks);
        free(t->q);
        free(t);
        return err_set(ERR_INTERNAL, "disagg: cannot start a sender thread");
    }
    *hook = (engine_kv_out){.block = tx_hook_block, .end = tx_hook_end, .ctx = t};
    *out = t;
    return 0;
}

int disagg_tx_wait(disagg_tx *t) {
    if (!t->joined) {
        pthread_join(t->thread, NULL); /* the thread wrote t->result before it ended */
        t->joined = true;
    }
    return t->result;
}

void disagg_tx_finish(disagg_tx *t) {
    if (!t)
        return;
    (void)disagg_tx_wait(t);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->toks);
    free(t->q);
    free(t);
}
