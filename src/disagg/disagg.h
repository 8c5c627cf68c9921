/* SPDX-License-Identifier: MIT */
/*
 * disagg: prefill/decode disaggregation on top of kv_xfer (kv_xfer.h) and the engine's two hooks
 * (engine.h: engine_kv_in, engine_kv_out). A prefill server (role prefill) computes a request's
 * prompt K/V and sends each full block as soon as it is sealed; a decode server (role decode)
 * receives them, and its copy of the request takes them from its prefix cache, recomputes only
 * the partial tail block and samples every token itself, so its output equals a monolithic
 * server's by construction (a cache hit is byte-identical to a miss, P1). Every block crosses
 * the wire checksummed and is verified twice on the decode side (P2): into a staging pool by
 * kv_xfer, and into the engine's pool by kv_block_decode at admission.
 *
 * The flow (the router drives it, src/router/): the router picks a prefill server P and a
 * decode server D (D's KV address comes from its GET /v1/status, "kv_addr") and a transfer id X.
 * P gets the request with {"kv_transfer":{"id":X,"send_to":ADDR}} and max_tokens 1; D gets it
 * with {"kv_transfer":{"id":X,"recv":true}} and streams the answer.
 *
 * Sender (P, disagg_tx): one thread per transfer. It connects to ADDR, writes a hello (the
 * transfer id, so D can match the connection with its request), then takes the blocks the engine
 * hands over (engine_kv_out.block, a reference each) from a queue and sends them in order
 * (kv_xfer_send_block: the transfer holds the reference until D's ACK or an abort), reading the
 * sealed pool block from its own thread; every reference goes back to the engine thread through
 * engine_loop_kv_unref, exactly once (kv_xfer's state machine). A request that ends before every
 * block was handed (client gone, drain) cancels the transfer.
 *
 * Receiver (D, disagg_rx): a listener thread on --kv-listen accepts connections and starts one
 * thread per connection. It reads the hello, then waits (bounded) for the request with that id
 * to be registered (disagg_rx_expect, by the HTTP handler, before the request is submitted);
 * either may come first. Then kv_xfer_recv receives and verifies each block into a private
 * staging pool of the same geometry as the engine's (owned by this thread: the engine's pool is
 * only touched by the engine thread), ACKing each. When the transfer completes the staging blocks
 * are encoded into blobs in host memory and the entry turns READY; on any abort (P died, a
 * corrupt, lost or duplicated block, a timeout) it turns FAILED.
 *
 * Engine side (D): the request carries an engine_kv_in hook over its entry. At admission the
 * engine polls it: still receiving -> the request waits (the wait is bounded: with no progress for
 * timeout_ms the poll answers "nothing" and the transfer is cut); READY -> the blobs are restored,
 * verified, into L1 (engine.h); FAILED -> nothing: D computes the prompt itself, slower, never
 * wrong. Received blocks are invisible to the scheduler until the transfer is complete and
 * verified. The hook's done (request admitted, cancelled, or drained first) drops the engine's
 * reference; a transfer still running then is cut (its connection shut down), which frees the
 * staging blocks and tells P, which releases its own.
 *
 * Ownership, both sides: a block is either in the engine's pool (engine thread), HELD by a
 * kv_xfer transfer (released exactly once by kv_xfer's state machine), or a blob in host memory
 * owned by one entry; nothing is shared without a reference.
 *
 * Cancel (D, disagg_rx_cancel): when the prefill side fails (P's HTTP call fails, or P reports
 * its transfer failed: it could not connect to D or the transfer aborted), the router tells D at
 * once (POST /v1/kv_transfer/cancel), so D computes the prompt now instead of waiting out
 * timeout_ms; and when the router gives up on D before it answered (D refused the request or
 * failed first), so P's connection for a transfer nobody will expect is refused (the tombstone
 * below) instead of holding P's blocks for timeout_ms. The receiver's entries, one per transfer id:
 *
 *     (none) --expect--> WAITING --hello, request registered--> RECEIVING --complete--> READY
 *     WAITING | RECEIVING --abort, no progress for timeout_ms, cancel--> FAILED
 *     (none) --cancel--> tombstone --expect--> FAILED          READY, FAILED --cancel--> (same)
 *
 * A cancel of a RECEIVING entry cuts its connection (kv_xfer's state machine then frees the
 * staging blocks, once, and tells P). A cancel for an id not yet expected (the router's cancel
 * overtook D's request) leaves a tombstone in a bounded ring (DISAGG_RX_TOMBSTONES, the oldest
 * forgotten first): a later expect of that id starts FAILED and a hello for it is refused. READY
 * or consumed entries are left alone: the blocks arrived and verified, they are as good as a
 * computed prompt.
 *
 * Limits, on purpose: a decode request waiting for its blocks does not hold the engine's queue
 * (later requests are admitted past it, test_kv_prefix engine_disagg), but it waits up to
 * timeout_ms for a prefill server that dies unnoticed by the router (the router's cancel covers
 * a failed or refused HTTP call and a transfer P reports failed); a transfer carries one prompt (a
 * request with several prompts, or a prompt shorter than one block, transfers nothing and the
 * decode server computes it); both servers must run the same model with the same KV settings
 * (the blocks' names include them: a mismatch is refused block by block, then computed).
 *
 * Threading: disagg_rx_expect, disagg_rx_cancel, disagg_tx_create, disagg_tx_wait and
 * disagg_tx_finish run on handler threads; the hooks on the engine thread; the rest on the
 * module's own threads. Counters are atomic.
 */
#ifndef VERITY_DISAGG_DISAGG_H
#define VERITY_DISAGG_DISAGG_H

#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "kv/kv_pool.h"

#include <stdbool.h>
#include <stdint.h>

/* Counters of one server (totals since start; open = transfers in progress now). */
typedef struct disagg_stats {
    int64_t rx_transfers_ok, rx_transfers_aborted, rx_blocks_verified, rx_blocks_dropped;
    int64_t rx_waits_expired; /* requests that stopped waiting (no progress for the timeout) */
    int64_t rx_cancelled;     /* requests whose transfer was cancelled (disagg_rx_cancel) */
    int64_t rx_open;
    int64_t tx_transfers_ok, tx_transfers_aborted, tx_blocks_sent, tx_blocks_acked;
    int64_t tx_open;
} disagg_stats;

/* ---- decode side ---- */

typedef struct disagg_rx disagg_rx;

typedef struct disagg_rx_opts {
    const char *transport; /* kv_xfer_transport_find's name ("tcp") */
    const char *listen;    /* "host:port" (port 0 picks a free one) */
    kv_pool_opts pool;     /* the engine's pool's geometry (engine_kv_pool_opts) */
    uint64_t identity;     /* engine_kv_identity */
    int timeout_ms;        /* no progress for this long aborts a transfer or a wait */
} disagg_rx_opts;

/* Listens and starts the accept thread. Returns 0, ERR_NOTFOUND (no such transport: the detail
 * names the known ones), ERR_CONNECT (cannot listen: the detail names the address), ERR_NOMEM. */
int disagg_rx_create(const disagg_rx_opts *o, disagg_rx **out);

/* The bound address, "host:port". */
const char *disagg_rx_addr(const disagg_rx *rx);

/* Registers transfer id for a request with prompt toks (copied) and fills *hook for its
 * engine_req. Returns 0, ERR_EXISTS (id already expected), ERR_NOMEM. */
int disagg_rx_expect(disagg_rx *rx, uint64_t id, const int32_t *toks, int32_t n_toks,
                     engine_kv_in *hook);

/* Tombstones kept for cancels that came before their expect (the oldest is forgotten first). */
#define DISAGG_RX_TOMBSTONES 1024

/* What disagg_rx_cancel did. */
typedef enum disagg_cancel_result {
    DISAGG_CANCEL_DONE = 0,    /* a waiting or receiving request turned FAILED: it computes now */
    DISAGG_CANCEL_PENDING = 1, /* not expected yet: a tombstone makes its expect start FAILED */
    DISAGG_CANCEL_IGNORED = 2, /* READY, already FAILED, or a tombstone already there */
} disagg_cancel_result;

/* Cancels transfer id (thread-safe; see "Cancel" above): a WAITING or RECEIVING entry turns
 * FAILED now (a connection in progress is cut), an id not expected yet gets a tombstone, READY
 * and FAILED entries are left alone. Counts rx_cancelled when a request turns FAILED (here, or
 * at the expect that meets the tombstone). Returns a disagg_cancel_result. */
disagg_cancel_result disagg_rx_cancel(disagg_rx *rx, uint64_t id);

/* Stops accepting, cuts every transfer in progress and waits for its threads. Entries still
 * held by requests stay valid until their done runs. NULL is a no-op. */
void disagg_rx_destroy(disagg_rx *rx);

/* ---- prefill side ---- */

typedef struct disagg_tx disagg_tx;

typedef struct disagg_tx_opts {
    const char *transport;
    const char *addr; /* the decode server's kv address */
    uint64_t id;
    const kv_pool *pool; /* the engine's (read-only from the sender thread) */
    uint64_t identity;
    engine_loop *loop; /* where references go back */
    int timeout_ms;
} disagg_tx_opts;

/* Starts a transfer of the prompt toks (copied) and fills *hook for its engine_req. Returns 0,
 * ERR_NOTFOUND (transport), ERR_NOMEM, ERR_INTERNAL (thread). */
int disagg_tx_create(const disagg_tx_opts *o, const int32_t *toks, int32_t n_toks,
                     engine_kv_out *hook, disagg_tx **out);

/* After the request's engine_kv_out.end ran (or will: the request finished or was cancelled):
 * waits for the transfer to end (bounded by the timeout per message: a silent receiver aborts
 * it). Returns 0 when every block was sent and acknowledged, else the transfer's error (for
 * example ERR_CONNECT: the decode server could not be reached; ERR_CANCELLED: the request ended
 * before its blocks were handed). Callable more than once (the same answer). */
int disagg_tx_wait(disagg_tx *tx);

/* disagg_tx_wait, then frees the transfer. NULL: no-op. */
void disagg_tx_finish(disagg_tx *tx);

/* This process's counters (every disagg_rx and disagg_tx). */
void disagg_stats_get(disagg_stats *out);

#endif
