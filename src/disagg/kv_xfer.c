/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer: the framing, checks and ownership rules of kv_xfer.h over any transport connection.
 * The sender keeps one entry per block it sent (its release callback and whether it ran); the
 * receiver keeps the pool blocks it verified, in position order, until the consumer takes them.
 * Both sides end a transfer through one function each (send_abort, recv_abort) that walks those
 * entries once, so a block is released exactly once whatever ended the transfer.
 *
 * Blocks in flight (kv-xfer-inflight, N). Where the connection can post writes (ucx) and N > 1, the
 * sender posts a block-major block's one-piece payload (write_held) straight from its pool and
 * goes on to the next block: up to N payloads are on their way at once. The bytes stay valid and
 * unchanged because the block is HELD until its release; the sender flushes (send_flush: every
 * posted write completed, or cancelled when it cannot) before every release and every read: in
 * kv_xfer_send_step before it reads an ACK, in send_abort (done by error, cancel, drain, peer
 * gone, timeout, destroy) before it releases, and in kv_xfer_send_flush, which a caller uses
 * before it waits for something else. The frame headers (and a layer-major block's gathered
 * write, and the frame path's blob) come from buffers reused for the next block, so they stay
 * write_all. N = 1, or tcp: every write is write_all, as before.
 *
 * Overlap on the receiver (kv-xfer-verify-overlap). In place, the receiver's per-block work is the
 * landing (on ucx the cma copy, inside the read) and then the checksum pass, one after the other
 * on its thread. When a block has landed and read_ready says the next message is already there,
 * recv_block posts the checksum to the receiver's verifier thread and returns with the block
 * pending (still RECEIVING, not ACKed); the next block's read then lands it while the verifier
 * hashes the first, and recv_pend_finish takes the first's verdict (HELD and ACK, or the abort)
 * before the second is decided, so the order of HELD blocks and ACKs is unchanged. A step that
 * finds a pending block and nothing to read settles it first, so a sender waiting for that ACK is
 * never kept waiting on the receiver's next read. recv_abort waits for the verifier before it
 * frees the pending block. The final block is always verified inline (nothing follows it).
 */
#include "disagg/kv_xfer.h"

#include "base/err.h"
#include "base/flags.h"
#include "base/hash.h"
#include "disagg/kv_xfer_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the transport table: one row per transport file ---- */

static const kv_xfer_transport *const transports[] = {&kv_xfer_tcp, &kv_xfer_ucx};

const kv_xfer_transport *kv_xfer_transport_find(const char *name) {
    for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++)
        if (name && strcmp(name, transports[i]->name) == 0)
            return transports[i];
    err_set(ERR_NOTFOUND, "kv_xfer: no transport '%s' (known: tcp, ucx)", name ? name : "");
    return NULL;
}

int kv_xfer_listener_port(const kv_xfer_listener *l) {
    return l->ops->port(l);
}

void kv_xfer_listener_destroy(kv_xfer_listener *l) {
    if (l)
        l->ops->destroy(l);
}

void kv_xfer_conn_shutdown(kv_xfer_conn *c) {
    if (c)
        c->ops->shutdown(c);
}

void kv_xfer_conn_destroy(kv_xfer_conn *c) {
    if (c)
        c->ops->destroy(c);
}

/* ---- messages ---- */

enum { HDR_BYTES = 64, MSG_BLOCK = 1, MSG_ACK = 2, MSG_ABORT = 3, FLAG_FINAL = 1 };
#define XFER_MAGIC 0x46584b56u /* "VKXF" */
#define BODY_MAX   ((uint64_t)1 << 32)

typedef struct msg_hdr {
    uint8_t type, flags;
    uint64_t xfer_id;
    uint32_t seq;
    int32_t code;
    int64_t pos0, pos1;
    uint64_t key, body;
} msg_hdr;

static void hdr_encode(const msg_hdr *h, uint8_t *b) {
    uint32_t magic = XFER_MAGIC;
    uint16_t zero = 0;
    memcpy(b + 0, &magic, 4);
    b[4] = h->type;
    b[5] = h->flags;
    memcpy(b + 6, &zero, 2);
    memcpy(b + 8, &h->xfer_id, 8);
    memcpy(b + 16, &h->seq, 4);
    memcpy(b + 20, &h->code, 4);
    memcpy(b + 24, &h->pos0, 8);
    memcpy(b + 32, &h->pos1, 8);
    memcpy(b + 40, &h->key, 8);
    memcpy(b + 48, &h->body, 8);
    uint64_t hh = hash64(XFER_MAGIC, b, 56);
    memcpy(b + 56, &hh, 8);
}

static int hdr_decode(const uint8_t *b, msg_hdr *h) {
    uint32_t magic;
    uint64_t hh;
    memcpy(&magic, b, 4);
    memcpy(&hh, b + 56, 8);
    if (magic != XFER_MAGIC || hh != hash64(XFER_MAGIC, b, 56))
        return err_set(ERR_PROTOCOL, "kv_xfer: message header %s",
                       magic != XFER_MAGIC ? "has a bad magic" : "fails its hash");
    h->type = b[4];
    h->flags = b[5];
    memcpy(&h->xfer_id, b + 8, 8);
    memcpy(&h->seq, b + 16, 4);
    memcpy(&h->code, b + 20, 4);
    memcpy(&h->pos0, b + 24, 8);
    memcpy(&h->pos1, b + 32, 8);
    memcpy(&h->key, b + 40, 8);
    memcpy(&h->body, b + 48, 8);
    if (h->type < MSG_BLOCK || h->type > MSG_ABORT || h->body > BODY_MAX)
        return err_set(ERR_PROTOCOL, "kv_xfer: message type %u with %llu body bytes", h->type,
                       (unsigned long long)h->body);
    return 0;
}

/* Writes a header-only message (ACK, ABORT). */
static int msg_write_short(kv_xfer_conn *c, uint8_t type, uint64_t xfer_id, uint32_t seq,
                           int32_t code) {
    msg_hdr h = {.type = type, .xfer_id = xfer_id, .seq = seq, .code = code};
    uint8_t b[HDR_BYTES];
    hdr_encode(&h, b);
    return c->ops->write_all(c, b, sizeof b);
}

/* Reads and discards a message's body (a dropped message). */
static int msg_skip_body(kv_xfer_conn *c, uint64_t n, int timeout_ms) {
    uint8_t junk[4096];
    while (n > 0) {
        size_t k = n < sizeof junk ? (size_t)n : sizeof junk;
        int rc = c->ops->read_full(c, junk, k, timeout_ms);
        if (rc)
            return rc;
        n -= k;
    }
    return 0;
}

/* ---- sender ---- */

typedef struct send_entry {
    int32_t id;
    bool released;
    kv_xfer_release_fn release;
    void *ctx;
} send_entry;

struct kv_xfer_send {
    kv_xfer_conn *conn;
    kv_xfer_send_opts o;
    kv_xfer_state state;
    int error;
    bool final_sent;
    kv_xfer_stats st;
    send_entry *held;                  /* one per seq sent */
    uint32_t n_held, cap_held, n_open; /* n_open: entries not yet released */
    uint8_t *frame;
    size_t frame_cap;
    bool inplace;      /* kv-xfer-inplace, and no wire hook (a hook rewrites a whole frame) */
    struct iovec *iov; /* in place: the message header, the blob's head, the block's segments */
    int iov_cap;
    int inflight; /* kv-xfer-inflight where the connection posts writes (write_held), else 1 */
    bool posted;  /* a write was posted since the last send_flush */
};

int kv_xfer_send_create(kv_xfer_conn *conn, const kv_xfer_send_opts *o, kv_xfer_send **out) {
    if (!conn || !o)
        return err_set(ERR_INVAL, "kv_xfer_send_create: no connection or options");
    kv_xfer_send *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "kv_xfer_send_create: transfer %llu",
                       (unsigned long long)o->xfer_id);
    s->conn = conn;
    s->o = *o;
    s->inplace = flags_int(FLAG_KV_XFER_INPLACE) && !o->wire_hook;
    s->inflight = conn->ops->write_held ? (int)flags_int(FLAG_KV_XFER_INFLIGHT) : 1;
    *out = s;
    return 0;
}

static void send_release(kv_xfer_send *s, send_entry *e) {
    if (e->released)
        return;
    e->released = true;
    s->n_open--;
    s->st.n_released++;
    e->release(e->ctx, e->id);
}

/* Waits for the payload writes posted since the last flush (kv-xfer-inflight): every one then
 * completed or was cancelled, so no posted write reads a block any more. Called before the
 * transfer reads from the connection or releases a block. Returns 0 or ERR_CONNECT. */
static int send_flush(kv_xfer_send *s) {
    if (!s->posted)
        return 0;
    s->posted = false;
    return s->conn->ops->flush(s->conn, s->o.timeout_ms);
}

/* Writes n bytes of a HELD block's payload: posted (write_held) when kv-xfer-inflight allows more
 * than one in flight and the connection can post, else written (write_all). */
static int send_payload(kv_xfer_send *s, const void *buf, size_t n) {
    if (s->inflight <= 1)
        return s->conn->ops->write_all(s->conn, buf, n);
    s->posted = true;
    return s->conn->ops->write_held(s->conn, buf, n, s->inflight);
}

/* Ends an open transfer with code: every HELD block released once; the peer told if notify. */
static void send_abort(kv_xfer_send *s, int code, bool notify) {
    if (s->state != KV_XFER_OPEN)
        return;
    (void)send_flush(s); /* before any release: no posted write may still read a block */
    s->state = KV_XFER_ABORTED;
    s->error = code;
    for (uint32_t i = 0; i < s->n_held; i++)
        send_release(s, &s->held[i]);
    if (notify)
        (void)msg_write_short(s->conn, MSG_ABORT, s->o.xfer_id, 0, code);
}

void kv_xfer_send_cancel(kv_xfer_send *s, int code) {
    send_abort(s, code, true);
}

void kv_xfer_send_destroy(kv_xfer_send *s) {
    if (!s)
        return;
    send_abort(s, ERR_CANCELLED, true);
    free(s->held);
    free(s->frame);
    free(s->iov);
    free(s);
}

int kv_xfer_send_block(kv_xfer_send *s, const kv_pool *p, int32_t id, const kv_block_meta *m,
                       bool final, kv_xfer_release_fn release, void *ctx) {
    if (s->state != KV_XFER_OPEN || s->final_sent)
        return err_set(ERR_STATE, "kv_xfer transfer %llu: block %d sent after the transfer %s",
                       (unsigned long long)s->o.xfer_id, id,
                       s->state == KV_XFER_OPEN ? "sent its final block" : "ended");
    size_t blob = kv_block_blob_bytes(p), head = kv_block_head_bytes(p);
    size_t need = HDR_BYTES + (s->inplace ? head : blob);
    int n_iov = 1 + (int)(kv_pool_n_layer(p) * kv_pool_n_buffers(p));
    if (s->n_held == s->cap_held) {
        uint32_t cap = s->cap_held ? 2 * s->cap_held : 16;
        send_entry *h = realloc(s->held, cap * sizeof *h);
        if (!h)
            return err_set(ERR_NOMEM, "kv_xfer transfer %llu: %u block entries",
                           (unsigned long long)s->o.xfer_id, cap);
        s->held = h;
        s->cap_held = cap;
    }
    if (need > s->frame_cap) {
        uint8_t *f = realloc(s->frame, need);
        if (!f)
            return err_set(ERR_NOMEM, "kv_xfer transfer %llu: a %zu-byte frame",
                           (unsigned long long)s->o.xfer_id, need);
        s->frame = f;
        s->frame_cap = need;
    }
    if (s->inplace && n_iov > s->iov_cap) {
        struct iovec *v = realloc(s->iov, (size_t)n_iov * sizeof *v);
        if (!v)
            return err_set(ERR_NOMEM, "kv_xfer transfer %llu: %d write parts",
                           (unsigned long long)s->o.xfer_id, n_iov);
        s->iov = v;
        s->iov_cap = n_iov;
    }
    uint32_t seq = s->n_held;
    s->held[s->n_held++] = (send_entry){.id = id, .release = release, .ctx = ctx};
    s->n_open++;
    int64_t bs = kv_pool_block_size(p);
    msg_hdr h = {.type = MSG_BLOCK,
                 .flags = final ? FLAG_FINAL : 0,
                 .xfer_id = s->o.xfer_id,
                 .seq = seq,
                 .pos0 = (int64_t)seq * bs,
                 .pos1 = (int64_t)(seq + 1) * bs,
                 .key = m->key,
                 .body = blob};
    hdr_encode(&h, s->frame);
    if (final)
        s->final_sent = true;
    int rc = 0;
    if (s->inplace) {
        /* the message header, the blob's head, then the segments straight from the pool (the
         * block is HELD: nobody writes it until its release); the same bytes as a frame */
        kv_block_encode_head(p, m, s->frame + HDR_BYTES);
        s->iov[0] = (struct iovec){s->frame + HDR_BYTES, head};
        int n_seg = kv_block_segments(p, id, s->iov + 1, n_iov - 1);
        if (n_seg == 1) {
            /* a block-major pool's block is one piece: the header and head as one write, the
             * payload as another straight from the pool, so a message transport sends it as one
             * message without a gather copy and its receiver's read of the payload (into its
             * own pool block) takes that message whole (kv_xfer_ucx.c) */
            rc = s->conn->ops->write_all(s->conn, s->frame, HDR_BYTES + head);
            if (rc == 0)
                rc = send_payload(s, s->iov[1].iov_base, s->iov[1].iov_len);
        } else {
            rc = s->conn->ops->write_all(s->conn, s->frame, HDR_BYTES);
            if (rc == 0)
                rc = s->conn->ops->writev_all(s->conn, s->iov, 1 + n_seg);
        }
        s->st.n_sent += rc == 0;
    } else {
        kv_block_encode(p, id, m, s->frame + HDR_BYTES);
        int copies = s->o.wire_hook ? s->o.wire_hook(s->o.wire_ctx, seq, s->frame, need) : 1;
        for (int i = 0; i < copies && rc == 0; i++) {
            /* header and blob as two writes: the same bytes on a stream, and each of the
             * receiver's two reads can land in place on a message transport (kv_xfer_ucx.c) */
            rc = s->conn->ops->write_all(s->conn, s->frame, HDR_BYTES);
            if (rc == 0)
                rc = s->conn->ops->write_all(s->conn, s->frame + HDR_BYTES, need - HDR_BYTES);
        }
        s->st.n_sent += rc == 0 && copies > 0;
    }
    if (rc) {
        send_abort(s, rc, false);
        return rc;
    }
    return 0;
}

int kv_xfer_send_flush(kv_xfer_send *s) {
    int rc = send_flush(s);
    if (rc)
        send_abort(s, rc, false);
    return rc;
}

kv_xfer_state kv_xfer_send_step(kv_xfer_send *s) {
    uint8_t b[HDR_BYTES];
    msg_hdr h;
    int rc = send_flush(s); /* the blocks on their way first: an ACK may release one */
    if (rc == 0)
        rc = s->conn->ops->read_full(s->conn, b, sizeof b, s->o.timeout_ms);
    if (rc == 0)
        rc = hdr_decode(b, &h);
    if (rc == 0 && h.body)
        rc = msg_skip_body(s->conn, h.body, s->o.timeout_ms); /* a receiver sends none */
    if (rc) {
        send_abort(s, rc, rc != ERR_CONNECT);
        return s->state;
    }
    if (s->state != KV_XFER_OPEN || h.xfer_id != s->o.xfer_id) {
        s->st.n_dropped++;
        return s->state;
    }
    if (h.type == MSG_ABORT) {
        err_set(h.code < 0 ? h.code : ERR_PROTOCOL,
                "kv_xfer transfer %llu: the receiver aborted "
                "(%s)",
                (unsigned long long)s->o.xfer_id, err_name(h.code));
        send_abort(s, h.code < 0 ? h.code : ERR_PROTOCOL, false);
        return s->state;
    }
    if (h.type != MSG_ACK || h.seq >= s->n_held || s->held[h.seq].released) {
        s->st.n_dropped++; /* a duplicate ACK, or one for a block never sent */
        return s->state;
    }
    s->st.n_acked++;
    send_release(s, &s->held[h.seq]);
    if (s->final_sent && s->n_open == 0)
        s->state = KV_XFER_COMPLETE;
    return s->state;
}

kv_xfer_state kv_xfer_send_state(const kv_xfer_send *s) {
    return s->state;
}

int kv_xfer_send_error(const kv_xfer_send *s) {
    return s->error;
}

kv_xfer_stats kv_xfer_send_stats(const kv_xfer_send *s) {
    return s->st;
}

/* ---- receiver ---- */

/* The verifier thread of one receiver (kv-xfer-verify-overlap), started at its first job: it
 * checksums one RECEIVING block at a time (job: busy set, id, key; done: busy cleared, sum) and
 * reads nothing else of the pool but the block's bytes and the pool's fixed geometry, so the
 * receiver's thread may allocate and land the next block meanwhile. */
typedef struct recv_verifier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool started, stop, busy;
    const kv_pool *pool;
    int32_t id;
    uint64_t key, sum;
} recv_verifier;

static void *verifier_main(void *arg) {
    recv_verifier *v = arg;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        while (!v->busy && !v->stop)
            pthread_cond_wait(&v->cv, &v->mu);
        if (!v->busy)
            break;
        int32_t id = v->id;
        uint64_t key = v->key;
        pthread_mutex_unlock(&v->mu);
        uint64_t sum = kv_block_checksum(v->pool, id, key);
        pthread_mutex_lock(&v->mu);
        v->sum = sum;
        v->busy = false;
        pthread_cond_broadcast(&v->cv);
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

/* Gives block id (name key) to the verifier, starting it if needed. Returns 0, or -1 when no
 * thread could be started (the caller verifies the block itself). */
static int verifier_post(recv_verifier *v, const kv_pool *p, int32_t id, uint64_t key) {
    if (!v->started) {
        if (pthread_create(&v->th, NULL, verifier_main, v) != 0)
            return -1;
        v->started = true;
    }
    pthread_mutex_lock(&v->mu);
    v->pool = p;
    v->id = id;
    v->key = key;
    v->busy = true;
    pthread_cond_broadcast(&v->cv);
    pthread_mutex_unlock(&v->mu);
    return 0;
}

/* Waits for the posted job and returns the checksum it computed. */
static uint64_t verifier_wait(recv_verifier *v) {
    pthread_mutex_lock(&v->mu);
    while (v->busy)
        pthread_cond_wait(&v->cv, &v->mu);
    uint64_t sum = v->sum;
    pthread_mutex_unlock(&v->mu);
    return sum;
}

static void verifier_stop(recv_verifier *v) {
    if (v->started) {
        pthread_mutex_lock(&v->mu);
        v->stop = true;
        pthread_cond_broadcast(&v->cv);
        pthread_mutex_unlock(&v->mu);
        pthread_join(v->th, NULL);
    }
    pthread_cond_destroy(&v->cv);
    pthread_mutex_destroy(&v->mu);
}

struct kv_xfer_recv {
    kv_xfer_conn *conn;
    kv_pool *pool;
    kv_xfer_recv_opts o;
    kv_xfer_state state;
    int error;
    bool taken;
    kv_xfer_stats st;
    int64_t bs, n_full;
    uint64_t *keys; /* n_full chain names, computed from the prompt */
    int32_t *ids;   /* verified blocks, position order */
    uint64_t *sums; /* their checksums, as verified */
    uint32_t n_ids;
    uint8_t *body;
    size_t body_bytes;
    bool inplace;      /* kv-xfer-inplace: the blob's segments land in the pool block */
    struct iovec *iov; /* in place: the blob's head (into body), then the block's segments */
    int n_iov;
    /* kv-xfer-verify-overlap: block pend_seq (pool block pend_id, RECEIVING) is being checksummed
     * by the verifier thread while the next block lands; pend_sum is what its head promised. */
    bool overlap, pend;
    int32_t pend_id;
    uint32_t pend_seq;
    uint64_t pend_sum;
    recv_verifier v;
};

int kv_xfer_recv_create(kv_xfer_conn *conn, kv_pool *p, const kv_xfer_recv_opts *o,
                        kv_xfer_recv **out) {
    if (!conn || !p || !o || !o->toks)
        return err_set(ERR_INVAL, "kv_xfer_recv_create: no connection, pool, options or tokens");
    int64_t bs = kv_pool_block_size(p), n_full = o->n_toks / bs;
    if (n_full < 1)
        return err_set(ERR_INVAL,
                       "kv_xfer_recv_create: %lld prompt tokens hold no full block of "
                       "%lld",
                       (long long)o->n_toks, (long long)bs);
    kv_xfer_recv *r = calloc(1, sizeof *r);
    if (r) {
        r->keys = malloc((size_t)n_full * sizeof *r->keys);
        r->ids = malloc((size_t)n_full * sizeof *r->ids);
        r->sums = malloc((size_t)n_full * sizeof *r->sums);
        r->body_bytes = kv_block_blob_bytes(p);
        r->inplace = flags_int(FLAG_KV_XFER_INPLACE) != 0;
        r->body = malloc(r->inplace ? kv_block_head_bytes(p) : r->body_bytes);
        r->n_iov = 1 + (int)(kv_pool_n_layer(p) * kv_pool_n_buffers(p));
        r->iov = r->inplace ? malloc((size_t)r->n_iov * sizeof *r->iov) : NULL;
    }
    if (!r || !r->keys || !r->ids || !r->sums || !r->body || (r->inplace && !r->iov)) {
        if (r) {
            free(r->keys);
            free(r->ids);
            free(r->sums);
            free(r->body);
            free(r->iov);
            free(r);
        }
        return err_set(ERR_NOMEM, "kv_xfer_recv_create: transfer %llu of %lld blocks",
                       (unsigned long long)o->xfer_id, (long long)n_full);
    }
    r->conn = conn;
    r->pool = p;
    r->o = *o;
    int64_t ov = flags_int(FLAG_KV_XFER_VERIFY_OVERLAP);
    r->overlap = r->inplace && conn->ops->read_ready &&
                 (ov == 2 || (ov == 1 && conn->ops->receiver_moves));
    pthread_mutex_init(&r->v.mu, NULL);
    pthread_cond_init(&r->v.cv, NULL);
    r->bs = bs;
    r->n_full = n_full;
    uint64_t parent = o->identity;
    for (int64_t i = 0; i < n_full; i++)
        parent = r->keys[i] = kv_block_key(parent, o->toks + i * bs, bs);
    *out = r;
    return 0;
}

/* Ends the transfer with code unless its blocks were taken: every held block freed once. */
static void recv_abort(kv_xfer_recv *r, int code, bool notify) {
    if (r->state == KV_XFER_ABORTED || r->taken)
        return;
    r->state = KV_XFER_ABORTED;
    r->error = code;
    if (r->pend) {
        (void)verifier_wait(&r->v); /* the verifier reads it: freed only once it is done */
        r->pend = false;
        kv_block_unref(r->pool, r->pend_id); /* RECEIVING -> FREED */
        r->st.n_released++;
    }
    for (uint32_t i = 0; i < r->n_ids; i++) {
        kv_block_unref(r->pool, r->ids[i]);
        r->st.n_released++;
    }
    r->n_ids = 0;
    if (notify)
        (void)msg_write_short(r->conn, MSG_ABORT, r->o.xfer_id, 0, code);
}

void kv_xfer_recv_cancel(kv_xfer_recv *r, int code) {
    recv_abort(r, code, true);
}

void kv_xfer_recv_destroy(kv_xfer_recv *r) {
    if (!r)
        return;
    recv_abort(r, ERR_CANCELLED, true);
    verifier_stop(&r->v);
    free(r->keys);
    free(r->ids);
    free(r->sums);
    free(r->body);
    free(r->iov);
    free(r);
}

/* Block seq (pool block id, checksum sum) passed: HELD, in position order, and ACKed; the final
 * one completes the transfer. Returns 0 or the ACK's write error. */
static int recv_held(kv_xfer_recv *r, int32_t id, uint32_t seq, uint64_t sum, bool final) {
    r->sums[r->n_ids] = sum;
    r->ids[r->n_ids++] = id; /* RECEIVING -> HELD */
    r->st.n_verified++;
    int rc = msg_write_short(r->conn, MSG_ACK, r->o.xfer_id, seq, 0);
    if (rc)
        return rc;
    r->st.n_acked++;
    if (final)
        r->state = KV_XFER_COMPLETE;
    return 0;
}

/* The pending block's verdict: waits for the verifier, then HELD and ACKed, or freed. Returns 0 or
 * the error that ends the transfer. */
static int recv_pend_finish(kv_xfer_recv *r) {
    uint64_t got = verifier_wait(&r->v);
    r->pend = false;
    if (got != r->pend_sum) {
        kv_block_unref(r->pool, r->pend_id); /* RECEIVING -> FREED */
        r->st.n_released++;
        err_set(ERR_CHECKSUM, "kv blob %016llx: block %d as received fails its checksum",
                (unsigned long long)r->keys[r->pend_seq], r->pend_id);
        return err_wrap(ERR_CHECKSUM, "kv_xfer transfer %llu: block %u",
                        (unsigned long long)r->o.xfer_id, r->pend_seq);
    }
    return recv_held(r, r->pend_id, r->pend_seq, got, false);
}

/* Applies one BLOCK whose header h was read (its body not yet). In place with the overlap on, a
 * block that is not the final one and has a message behind it already is handed to the verifier
 * (pending) instead: the next block then lands while it is checksummed, and its verdict comes
 * before the next block's (recv_pend_finish). Returns 0 or the abort code. */
static int recv_block(kv_xfer_recv *r, const msg_hdr *h) {
    unsigned long long x = (unsigned long long)r->o.xfer_id;
    uint32_t next = r->n_ids + (r->pend ? 1 : 0);
    if (h->seq != next)
        return err_set(ERR_PROTOCOL, "kv_xfer transfer %llu: block %u arrived, block %u expected",
                       x, h->seq, next);
    if (h->seq >= r->n_full || h->pos0 != (int64_t)h->seq * r->bs || h->pos1 != h->pos0 + r->bs ||
        h->body != r->body_bytes || h->key != r->keys[h->seq])
        return err_set(ERR_PROTOCOL,
                       "kv_xfer transfer %llu: block %u (positions %lld..%lld, %llu "
                       "bytes) is not block %u of this prompt (%lld full blocks of %zu bytes)",
                       x, h->seq, (long long)h->pos0, (long long)h->pos1,
                       (unsigned long long)h->body, h->seq, (long long)r->n_full, r->body_bytes);
    kv_block_meta want = {.identity = r->o.identity,
                          .parent = h->seq ? r->keys[h->seq - 1] : r->o.identity,
                          .key = r->keys[h->seq],
                          .toks = r->o.toks + (int64_t)h->seq * r->bs};
    bool final = (h->flags & FLAG_FINAL) != 0;
    int rc = r->inplace ? 0 : r->conn->ops->read_full(r->conn, r->body, r->body_bytes,
                                                       r->o.timeout_ms);
    if (rc)
        return rc;
    int32_t id = kv_pool_alloc(r->pool);
    if (id < 0) {
        if (r->inplace && (rc = msg_skip_body(r->conn, h->body, r->o.timeout_ms)))
            return rc;
        return err_set(ERR_FULL, "kv_xfer transfer %llu: no free pool block for block %u", x,
                       h->seq);
    }
    uint64_t sum = 0;
    if (r->inplace) {
        /* RECEIVING: the block is ours alone and nobody sees it until it is HELD, so its bytes
         * land in it straight from the wire and are verified once where they lie */
        r->iov[0] = (struct iovec){r->body, kv_block_head_bytes(r->pool)};
        int n_seg = kv_block_segments(r->pool, id, r->iov + 1, r->n_iov - 1);
        rc = r->conn->ops->readv_full(r->conn, r->iov, 1 + n_seg, r->o.timeout_ms);
        if (rc == 0)
            rc = kv_block_check_head(r->pool, &want, r->body, kv_block_head_bytes(r->pool), &sum);
        if (rc == 0 && r->pend && (rc = recv_pend_finish(r)) != 0) {
            kv_block_unref(r->pool, id); /* RECEIVING -> FREED: the one before failed */
            r->st.n_released++;
            return rc;
        }
        if (rc == 0 && r->overlap && !final && r->conn->ops->read_ready(r->conn) &&
            verifier_post(&r->v, r->pool, id, want.key) == 0) {
            r->pend = true; /* stays RECEIVING until recv_pend_finish */
            r->pend_id = id;
            r->pend_seq = h->seq;
            r->pend_sum = sum;
            r->st.n_overlapped++;
            return 0;
        }
        if (rc == 0 && kv_block_checksum(r->pool, id, want.key) != sum)
            rc = err_set(ERR_CHECKSUM, "kv blob %016llx: block %d as received fails its checksum",
                         (unsigned long long)want.key, id);
    } else {
        rc = kv_block_decode(r->pool, id, &want, r->body, r->body_bytes, &sum);
    }
    if (rc) {
        kv_block_unref(r->pool, id); /* RECEIVING -> FREED */
        r->st.n_released++;
        return rc == ERR_CONNECT || rc == ERR_TIMEOUT
                   ? rc
                   : err_wrap(rc, "kv_xfer transfer %llu: block %u", x, h->seq);
    }
    return recv_held(r, id, h->seq, sum, final);
}

kv_xfer_state kv_xfer_recv_step(kv_xfer_recv *r) {
    uint8_t b[HDR_BYTES];
    msg_hdr h;
    if (r->pend && !r->conn->ops->read_ready(r->conn)) {
        /* nothing behind the pending block yet: its verdict (and ACK) does not wait for more */
        int rc = recv_pend_finish(r);
        if (rc)
            recv_abort(r, rc, rc != ERR_CONNECT);
        return r->state;
    }
    int rc = r->conn->ops->read_full(r->conn, b, sizeof b, r->o.timeout_ms);
    if (rc == 0)
        rc = hdr_decode(b, &h);
    if (rc) {
        if (r->state == KV_XFER_OPEN)
            recv_abort(r, rc, rc != ERR_CONNECT);
        return r->state;
    }
    bool dup = h.type == MSG_BLOCK && h.seq < r->n_ids + (r->pend ? 1u : 0u);
    if (r->state != KV_XFER_OPEN || h.xfer_id != r->o.xfer_id || dup || h.type == MSG_ACK) {
        r->st.n_dropped++; /* late, foreign, duplicate, or an ACK the sender should not send */
        if (msg_skip_body(r->conn, h.body, r->o.timeout_ms) && r->state == KV_XFER_OPEN)
            recv_abort(r, ERR_CONNECT, false);
        return r->state;
    }
    if (h.type == MSG_ABORT) {
        err_set(h.code < 0 ? h.code : ERR_PROTOCOL,
                "kv_xfer transfer %llu: the sender aborted "
                "(%s)",
                (unsigned long long)r->o.xfer_id, err_name(h.code));
        recv_abort(r, h.code < 0 ? h.code : ERR_PROTOCOL, false);
        return r->state;
    }
    rc = recv_block(r, &h);
    if (rc)
        recv_abort(r, rc, rc != ERR_CONNECT);
    return r->state;
}

int kv_xfer_recv_take(kv_xfer_recv *r, int32_t *ids, int cap) {
    if (r->state != KV_XFER_COMPLETE || r->taken)
        return err_set(ERR_STATE, "kv_xfer transfer %llu: blocks %s",
                       (unsigned long long)r->o.xfer_id,
                       r->taken ? "already taken" : "taken before the transfer completed");
    if ((uint32_t)cap < r->n_ids)
        return err_set(ERR_RANGE, "kv_xfer transfer %llu: %u blocks, room for %d",
                       (unsigned long long)r->o.xfer_id, r->n_ids, cap);
    memcpy(ids, r->ids, r->n_ids * sizeof *ids);
    r->taken = true; /* HELD -> HANDED */
    r->st.n_handed = r->n_ids;
    return (int)r->n_ids;
}

int32_t kv_xfer_recv_block(const kv_xfer_recv *r, uint32_t i) {
    return i < r->n_ids ? r->ids[i] : -1;
}

uint64_t kv_xfer_recv_checksum(const kv_xfer_recv *r, uint32_t i) {
    return i < r->n_ids ? r->sums[i] : 0;
}

kv_xfer_state kv_xfer_recv_state(const kv_xfer_recv *r) {
    return r->state;
}

int kv_xfer_recv_error(const kv_xfer_recv *r) {
    return r->error;
}

kv_xfer_stats kv_xfer_recv_stats(const kv_xfer_recv *r) {
    return r->st;
}
