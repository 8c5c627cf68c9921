/* SPDX-License-Identifier: MIT */
/*
 * flags: the toggle registry (P4). Every optimisation, alternative code path and tunable that a
 * bisector might want to flip is one row of FLAG_LIST below: a name (also the CLI option
 * `--name VALUE`), an environment variable (VERITY_NAME, '-' -> '_'), a kind, a default, the
 * allowed values, and one line saying what it does. `verity flags` lists them, the server exports
 * them as verity_flag_info, and a bisector flips them without reading code.
 *
 * Values are set at start-up (defaults, then environment, then command line) by the main thread
 * before any other thread starts, and are read-only afterwards; reads need no lock.
 * Adding a toggle: add a row here and read it with flags_int()/flags_str() where it applies.
 */
#ifndef VERITY_BASE_FLAGS_H
#define VERITY_BASE_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

enum flag_kind {
    FLAG_KIND_INT,
    FLAG_KIND_ENUM,
    FLAG_KIND_BOOL,
    FLAG_KIND_STRING,
    FLAG_KIND_SECRET
};

/* X(ID, "name", kind, "default", "choices or min:max", "description")
 * STRING values are free text (choices: "" or a maximum length); SECRET values are strings that
 * are never shown: listings print "(set)" or "" instead of the value. */
#define FLAG_LIST(X)                                                                               \
    X(ISA, "isa", FLAG_KIND_ENUM, "auto", "auto|scalar|avx2|avx512",                               \
      "kernel instruction set; every choice computes identical bits, only speed differs")          \
    X(MM_PREFETCH, "mm-prefetch", FLAG_KIND_BOOL, "1", "0|1",                                      \
      "matmul kernels prefetch the next weights, and activation rows, while computing (speed "     \
      "only, same bits)")                                                                          \
    X(MM_DIRECT_ROWS, "mm-direct-rows", FLAG_KIND_INT, "-1", "-1:64",                              \
      "AVX-512 F16/BF16 matmuls of at most this many rows convert weights in registers, not "      \
      "via a panel (3 or more rows: in L1-sized K chunks shared by all rows); -1 = by CPU: 32 on " \
      "AMD, where the conversion runs beside the FMAs, 12 elsewhere (speed only, same bits)")      \
    X(MM_KC, "mm-kc", FLAG_KIND_INT, "128", "16:1024",                                             \
      "F16/BF16/F32 matmuls through the f32 panel work in K chunks of this many steps (rounded "   \
      "down to a multiple of 16; speed only, same bits)")                                          \
    X(MM_PANEL_PF_L2, "mm-panel-pf-l2", FLAG_KIND_BOOL, "1", "0|1",                                \
      "AVX-512 float matmuls through the f32 panel prefetch the next K chunk's weights into L2, "  \
      "not L1, where the panel and the activation rows compete for the space (speed only, same "   \
      "bits)")                                                                                     \
    X(MM_PANEL_FUSE, "mm-panel-fuse", FLAG_KIND_BOOL, "1", "0|1",                                  \
      "AVX-512 F16/BF16 matmuls through the f32 panel convert each K chunk inside the first row "  \
      "tile's loop, which stores the panel for the others, instead of in a loop of its own "       \
      "(speed only, same bits)")                                                                   \
    X(MM_Q_TILE, "mm-q-tile", FLAG_KIND_INT, "7", "4:7",                                           \
      "AVX-512 Q8_0 matmuls of more than 4 rows run in ceil(rows / this) tiles of equal height, "  \
      "each sweeping the weights once (4: tiles of 4, then the rest; speed only, same bits)")      \
    X(Q6K_PREFETCH, "q6k-prefetch", FLAG_KIND_INT, "2048", "0:65536",                              \
      "AVX-512 and AVX2 Q6_K matmuls of one row (decode at batch 1) prefetch the weights this "    \
      "many bytes ahead (0 = leave it to the hardware prefetcher; speed only, same bits)")         \
    X(KQ_PREFETCH, "kq-prefetch", FLAG_KIND_INT, "2048", "0:65536",                                \
      "AVX-512 and AVX2 Q4_K and Q5_K matmuls of one row (decode at batch 1) prefetch the "        \
      "weights this many bytes ahead (0 = leave it to the hardware prefetcher; speed only, same "  \
      "bits)")                                                                                     \
    X(Q8_PREFETCH, "q8-prefetch", FLAG_KIND_INT, "2048", "0:65536",                                \
      "AVX-512 and AVX2 Q8_0 matmuls of one row (decode at batch 1) prefetch the weights this "    \
      "many bytes ahead (0 = leave it to the hardware prefetcher; speed only, same bits)")         \
    X(MM_PREFETCH_L2, "mm-prefetch-l2", FLAG_KIND_INT, "4096", "0:65536",                          \
      "AVX-512 and AVX2 Q4_K, Q5_K, Q6_K and Q8_0 matmuls of one row (decode at batch 1) also "    \
      "prefetch the weights this many bytes ahead into L2, beyond the near prefetch into L1 (0 = " \
      "none; speed only, same bits)")                                                              \
    X(KQ_Q4K_PAIR, "kq-q4k-pair", FLAG_KIND_BOOL, "1", "0|1",                                      \
      "AVX-512 Q4_K weights packed two columns to a byte (the codes of columns c and c + 16 for "  \
      "one input), so one dot product serves both and no nibble is shifted (speed only, same "     \
      "bits)")                                                                                     \
    X(KQ_Q5_MASK, "kq-q5-mask", FLAG_KIND_BOOL, "1", "0|1",                                        \
      "AVX-512 Q5_0, Q5_1 and Q5_K weights keep each code's fifth bit in byte masks, so one masked " \
      "add per 64 codes restores it instead of a shift and a ternary logic op (speed only, same "  \
      "bits)")                                                                                     \
    X(MM_EVEN_SPLIT, "mm-even-split", FLAG_KIND_BOOL, "1", "0|1",                                  \
      "matmul phases cut each matrix into a multiple of the thread count of chunks with equal "    \
      "column-block counts where one divides, so two threads end a phase together (0: chunks "     \
      "by work alone; speed only, same bits)")                                                     \
    X(MM_TAIL_SPLIT, "mm-tail-split", FLAG_KIND_INT, "4", "1:16",                                  \
      "matmul phases cut the last chunk of each thread's range into this many pieces (1 = none), " \
      "so a thread done with its own range early takes small pieces of another's and the "         \
      "threads end the phase together (speed only, same bits)")                                    \
    X(MM_WARM, "mm-warm", FLAG_KIND_INT, "65536", "0:4194304",                                     \
      "a thread waiting for work (another's row phase, a phase's last chunks) prefetches into L2 " \
      "up to this many bytes of the weights it runs first in the next matmul phase (0 = none; "    \
      "speed only, same bits)")                                                                    \
    X(MM_PANEL, "mm-panel", FLAG_KIND_INT, "256", "0:1048576",                                     \
      "matmuls over more rows run panel by panel, each panel's columns swept before the next "     \
      "(0 = all rows at once; speed only, same bits)")                                             \
    X(THREADS, "threads", FLAG_KIND_INT, "0", "0:256",                                             \
      "compute threads per forward pass (0 = one per online CPU)")                                 \
    X(KV_DTYPE, "kv-dtype", FLAG_KIND_ENUM, "f16", "f16|f32",                                      \
      "element type of cached keys and values")                                                    \
    X(INDEX_KV_DTYPE, "index-kv-dtype", FLAG_KIND_ENUM, "auto", "auto|f32|f16|bf16|fp8",           \
      "DeepSeek sparse attention: element type of the indexer's cached keys (auto: as kv-dtype; "  \
      "fp8: e4m3 with an f32 scale per key row)")                                                  \
    X(KV_BLOCK, "kv-block", FLAG_KIND_INT, "16", "1:4096", "tokens per paged KV block")            \
    X(ATTN_CHUNK, "attn-chunk", FLAG_KIND_INT, "64", "1:65536",                                    \
      "attention key chunk length; chunk boundaries are multiples of it in absolute position")     \
    X(ATTN_GROUP, "attn-group", FLAG_KIND_INT, "16", "0:16",                                       \
      "query heads of one KV head attended together, sharing each key and value read (0: the "     \
      "per-head kernel; speed only, same bits)")                                                   \
    X(ATTN_V_ONCE, "attn-v-once", FLAG_KIND_BOOL, "1", "0|1",                                      \
      "AVX-512 grouped attention converts a chunk's F16 values to f32 once when more than one "    \
      "pass of query heads reads them (more than 4 heads per KV head) (speed only, same bits)")    \
    X(ATTN_PREFETCH, "attn-prefetch", FLAG_KIND_BOOL, "1", "0|1",                                  \
      "AVX-512 and AVX2 grouped attention prefetches the next key chunk's keys and values into "   \
      "L2 while scoring a chunk, and the next unit's first chunk during a unit's last (speed "     \
      "only, same bits)")                                                                          \
    X(MOE_GROUP, "moe-group", FLAG_KIND_BOOL, "1", "0|1",                                          \
      "mixture-of-experts: rows routed to one expert multiplied together, its weights read once "  \
      "per step (0: each row's experts one row at a time; speed only, same bits)")                 \
    X(MAX_BATCH, "max-batch", FLAG_KIND_INT, "32", "1:4096", "most sequences in one engine step")  \
    X(CHUNK, "chunk", FLAG_KIND_INT, "512", "1:1048576",                                           \
      "most prompt tokens of one sequence prefilled in one step (chunked prefill)")                \
    X(KV_MEM, "kv-mem", FLAG_KIND_INT, "0", "0:1048576",                                           \
      "KV cache memory in MiB (0 = enough for max-batch full contexts)")                           \
    X(KV_BLOCKS, "kv-blocks", FLAG_KIND_INT, "0", "0:1073741824",                                  \
      "KV cache size in blocks; overrides kv-mem when set (0 = use kv-mem)")                       \
    X(PREFIX_CACHE, "prefix-cache", FLAG_KIND_BOOL, "1", "0|1",                                    \
      "keep full KV blocks after their request ends, named by their token prefix, and reuse "      \
      "them for requests that start with the same tokens (same bits as recomputing)")              \
    X(KV_VERIFY, "kv-verify", FLAG_KIND_BOOL, "1", "0|1",                                          \
      "verify a cached KV block's checksum before reusing it from memory (tier loads are always "  \
      "verified)")                                                                                 \
    X(KV_DISK_DIR, "kv-disk-dir", FLAG_KIND_STRING, "", "",                                        \
      "directory of the disk KV tier (L2): blocks evicted from memory go there and come back "     \
      "checksummed (empty = no disk tier)")                                                        \
    X(KV_DISK_MEM, "kv-disk-mem", FLAG_KIND_INT, "4096", "1:16777216",                             \
      "bound on the disk KV tier's size in MiB (least recently used blocks are dropped)")          \
    X(KV_REDIS, "kv-redis", FLAG_KIND_STRING, "", "",                                              \
      "Redis KV tier (L3) shared by replicas: redis://HOST:PORT[/DB] or unix:///PATH (empty = "    \
      "none); sealed blocks are written to it and reused by any replica of the same model")        \
    X(KV_DISK_DIRECT, "kv-disk-direct", FLAG_KIND_BOOL, "0", "0|1",                                \
      "the disk KV tier reads its files with O_DIRECT into aligned buffers (0: through the page "  \
      "cache, with read-ahead hints for a batch of files; speed only, same bytes, verified)")      \
    X(KV_DISK_FLUSH, "kv-disk-flush", FLAG_KIND_BOOL, "1", "0|1",                                  \
      "at shutdown, write the blocks the memory cache still holds to the disk KV tier, so a "      \
      "restart on the same kv-disk-dir finds them (0: only evicted blocks reach the disk)")        \
    X(KV_TIER_BATCH, "kv-tier-batch", FLAG_KIND_INT, "32", "1:256",                                \
      "most block lookups the KV tiers' I/O thread answers together: Redis pipelines their GETs, " \
      "the disk tier reads their files ahead (1: one at a time; speed only)")                      \
    X(KV_BLOB_CACHE, "kv-blob-cache", FLAG_KIND_INT, "64", "0:65536",                              \
      "buffers kept for reuse by blocks moving to and from the KV tiers, so sealing or evicting "  \
      "a block does not allocate (0: allocate and free each; speed only)")                         \
    X(KV_REDIS_PIPELINE, "kv-redis-pipeline", FLAG_KIND_INT, "4", "1:64",                          \
      "GETs the Redis KV tier keeps in flight at once when it looks up a batch of blocks (1: one " \
      "round trip each; speed only)")                                                              \
    X(KV_TIER_WAKE, "kv-tier-wake", FLAG_KIND_BOOL, "1", "0|1",                                    \
      "the KV tiers' I/O thread wakes the engine as soon as it answered lookups for a queued "     \
      "request (0: the engine polls, sleeping 100 us doubling to 2 ms; speed only)")               \
    X(KV_FETCH_GROUP, "kv-fetch-group", FLAG_KIND_BOOL, "1", "0|1",                                \
      "a queued request's lookups in the KV tiers are asked and collected under one lock with "    \
      "one wake of the I/O thread, and its restore is retried only once its next block "           \
      "arrived (0: key by key, retried every step; speed only)")                                   \
    X(KV_PREFAULT_AHEAD, "kv-prefault-ahead", FLAG_KIND_INT, "256", "0:1048576",                   \
      "with a disk or Redis KV tier, MiB of KV pool beyond the highest block used so far that "    \
      "the tiers' I/O thread faults in while it has nothing else to do, so restored blocks "       \
      "do not wait on the kernel zeroing fresh pages (0: none; speed only)")                       \
    X(KV_PREFAULT, "kv-prefault", FLAG_KIND_BOOL, "0", "0|1",                                      \
      "write every page of the KV pool at start-up, so serving never waits on the kernel zeroing " \
      "a first-touched page (the whole pool is resident from the start; speed only)")              \
    X(KV_POOL_BLOCK_MAJOR, "kv-pool-block-major", FLAG_KIND_BOOL, "1", "0|1",                      \
      "the KV pool keeps each block's buffers for all layers in one contiguous region, in the "    \
      "order a saved block lists them, so a KV transfer sends and receives a block as one piece "  \
      "(0: layer-major, one region per layer and buffer; speed only, same bytes)")                 \
    X(SPEC, "spec", FLAG_KIND_ENUM, "off", "off|ngram|draft|mtp",                                  \
      "speculative decoding: drafted tokens are fed with a sequence's last token and each is "     \
      "kept only if the model's own sampler picks exactly it (same bytes as off); ngram: prompt "  \
      "lookup, draft: a draft model (draft-model), mtp: the model's MTP layers (deepseek4 nextn)") \
    X(SPEC_K, "spec-k", FLAG_KIND_INT, "8", "1:32",                                                \
      "spec: most tokens drafted for one sequence in one step")                                    \
    X(SPEC_ROWS, "spec-rows", FLAG_KIND_INT, "16", "0:4096",                                       \
      "spec: a step feeds drafted tokens only while its decoding sequences and drafted tokens "    \
      "together stay within this many rows (a fuller batch is compute-bound; 0 = never draft)")    \
    X(SPEC_ADAPT, "spec-adapt", FLAG_KIND_BOOL, "1", "0|1",                                        \
      "spec: each step drafts the number of tokens that maximizes expected tokens per second, "    \
      "from the measured cost of a step by its rows and each sequence's recent acceptance (0: "    \
      "always spec-k per sequence, within spec-rows)")                                             \
    X(SPEC_NGRAM_MIN, "spec-ngram-min", FLAG_KIND_INT, "2", "1:64",                                \
      "spec ngram: shortest suffix match, in tokens, whose continuation is drafted")               \
    X(DRAFT_MODEL, "draft-model", FLAG_KIND_STRING, "", "",                                        \
      "spec draft: the draft model's GGUF; its vocabulary must be the model's (refused at "        \
      "start-up otherwise)")                                                                       \
    X(POOL_SPIN, "pool-spin", FLAG_KIND_BOOL, "1", "0|1",                                          \
      "compute threads spin briefly between parallel regions instead of sleeping at once")         \
    X(POOL_RANGES, "pool-ranges", FLAG_KIND_BOOL, "1", "0|1",                                      \
      "each compute thread claims the chunks of a parallel region from its own contiguous range "  \
      "first, then takes the last chunks of the others' ranges, so a thread's chunks follow one "  \
      "another in memory (0: every chunk from one shared counter; speed only, same bits)")         \
    X(CTX, "ctx", FLAG_KIND_INT, "0", "0:16777216",                                                \
      "context length limit per sequence (0 = the model's)")                                       \
    X(HOST, "host", FLAG_KIND_STRING, "127.0.0.1", "", "serve: address to listen on")              \
    X(PORT, "port", FLAG_KIND_INT, "8080", "0:65535", "serve: TCP port (0 = any free port)")       \
    X(QUEUE_MAX, "queue-max", FLAG_KIND_INT, "256", "0:1000000",                                   \
      "serve: sequences (choices) allowed to wait beyond the running batch: the server holds "     \
      "max-batch + queue-max, beyond that 429 with Retry-After (0 = no waiting)")                  \
    X(API_KEY, "api-key", FLAG_KIND_SECRET, "", "", "serve: required bearer token (empty = none)") \
    X(API_KEY_FILE, "api-key-file", FLAG_KIND_STRING, "", "",                                      \
      "serve: file holding the bearer token (first line)")                                         \
    X(DRAIN_TIMEOUT, "drain-timeout", FLAG_KIND_INT, "30", "0:86400",                              \
      "serve: seconds to let in-flight requests finish after SIGTERM; then those left get 503 "    \
      "(a stream: an error event)")                                                                \
    X(TIMEOUT, "timeout", FLAG_KIND_INT, "600", "1:86400",                                         \
      "serve: seconds a connection may stay idle or take to send its request (the request head "   \
      "has its own deadline, at most 10 s)")                                                       \
    X(MAX_CONNS, "max-conns", FLAG_KIND_INT, "1024", "1:1000000",                                  \
      "serve: client connections open at once; one more is answered 503 and closed (idle ones "    \
      "cost about 300 bytes, no thread)")                                                          \
    X(MAX_CONNS_PER_ADDR, "max-conns-per-addr", FLAG_KIND_INT, "128", "1:1000000",                 \
      "serve: client connections open at once from one IP address; one more is answered 429 and "  \
      "closed")                                                                                    \
    X(HTTP_NODELAY, "http-nodelay", FLAG_KIND_BOOL, "1", "0|1",                                    \
      "serve, router: TCP_NODELAY on client connections, so an answer's head and each streamed "   \
      "event leave at once (0: the kernel's Nagle algorithm, which holds a small write until the " \
      "previous one is acknowledged: up to the client's delayed ACK, 40 ms on Linux)")             \
    X(HTTP_APPEND_BLOCKED, "http-append-blocked", FLAG_KIND_BOOL, "1", "0|1",                      \
      "serve, router: once a send finds a client's socket full, the writes that follow only "      \
      "append to its output until the event thread has drained it (0: every write tries a send "   \
      "and wakes the event thread, a failing send and a wake-up per write to a slow reader)")      \
    X(MAX_BODY, "max-body", FLAG_KIND_INT, "8", "1:1024",                                          \
      "serve: largest request body in MiB; larger ones get 413 (refused on their headers when "    \
      "they declare a length)")                                                                    \
    X(MAX_BODY_TOTAL, "max-body-total", FLAG_KIND_INT, "128", "1:1048576",                         \
      "serve: MiB of request bodies received at once, all connections together; a body that "      \
      "does not fit gets 503 with Retry-After")                                                    \
    X(SERVED_MODEL_NAME, "served-model-name", FLAG_KIND_STRING, "", "",                            \
      "serve: the model's names, comma-separated: /v1/models lists them all, requests may use "    \
      "any, responses report the first (empty = the file name)")                                   \
    X(CHAT_TEMPLATE, "chat-template", FLAG_KIND_STRING, "", "",                                    \
      "chat template replacing the model's: a built-in name (chatml, llama3, llama2, mistral, "    \
      "gemma) or a Jinja file (empty = the model's tokenizer.chat_template)")                      \
    X(CHAT_TEMPLATE_KWARGS, "chat-template-kwargs", FLAG_KIND_STRING, "", "",                      \
      "default chat template variables, a JSON object such as {\"enable_thinking\":false}; a "     \
      "request's chat_template_kwargs replaces them key by key")                                   \
    X(ADMIN_API, "admin-api", FLAG_KIND_BOOL, "0", "0|1",                                          \
      "serve: POST /admin/pause, /admin/resume and /admin/step hold the engine between steps, "    \
      "release it, or step it (tests, maintenance; behind --api-key like every route)")            \
    X(ROUTER_WORKERS, "router-workers", FLAG_KIND_INT, "256", "1:4096",                            \
      "router: worker threads, each proxying one request at a time (as many may wait; beyond: "    \
      "429)")                                                                                      \
    X(ROUTER_CPUS, "router-cpus", FLAG_KIND_STRING, "", "",                                        \
      "router: the CPUs its threads run on (\"1\", \"0-3,6\"; empty: wherever the kernel puts "    \
      "them); one CPU keeps the hand-offs between the event thread and the workers on one core, "  \
      "which on a small or virtual machine cuts the wake-ups' tail (bench/router.sh)")             \
    X(ROUTER_HEALTH_MS, "router-health-ms", FLAG_KIND_INT, "1000", "10:600000",                    \
      "router: interval of the health and load polls of every backend (GET /v1/status)")           \
    X(ROUTER_CACHE_AWARE, "router-cache-aware", FLAG_KIND_BOOL, "1", "0|1",                        \
      "router: send a request to the backend that holds the longest known prefix of its prompt "   \
      "(0: load alone decides; same bits either way, only speed differs)")                         \
    X(ROUTER_BALANCE_ABS, "router-balance-abs", FLAG_KIND_INT, "8", "0:1000000",                   \
      "router: when backends' loads (requests in flight plus waiting) differ by more than this, "  \
      "the least loaded wins over the cache")                                                      \
    X(ROUTER_CACHE_PCT, "router-cache-pct", FLAG_KIND_INT, "50", "0:100",                          \
      "router: share (percent) of a prompt's blocks a backend must hold for the cache to decide")  \
    X(ROUTER_DIRECT_WRITE, "router-direct-write", FLAG_KIND_BOOL, "1", "0|1",                      \
      "router: the worker that reads a backend's stream writes each event to the client's socket " \
      "itself (nonblocking, outside the HTTP layer's lock) instead of waking the event thread to " \
      "send it (0: the event thread sends every byte; same bytes either way)")                     \
    X(ROUTER_LOOP, "router-loop", FLAG_KIND_INT, "1", "0:64",                                      \
      "router: 0 proxies each request on a worker thread (router-workers); N >= 1 runs N proxy "   \
      "loops (libcurl's multi interface on epoll) that drive every backend transfer without a "    \
      "thread per request or a worker's wake-up (router-workers then bounds requests in flight "   \
      "at twice its value; same bytes either way)")                                                \
    X(BACKEND_API_KEY, "backend-api-key", FLAG_KIND_SECRET, "", "",                                \
      "router: bearer token sent to the backends (empty = none)")                                  \
    X(ROLE, "role", FLAG_KIND_ENUM, "both", "prefill|decode|both",                                 \
      "serve: disaggregation role: prefill computes prompts' K/V and sends it to a decode "        \
      "server, decode receives it (on --kv-listen) and generates, both is a monolithic server")    \
    X(KV_TRANSPORT, "kv-transport", FLAG_KIND_STRING, "tcp", "",                                   \
      "serve: the KV transfer transport between prefill and decode servers (tcp; ucx where "       \
      "built)")                                                                                    \
    X(KV_LISTEN, "kv-listen", FLAG_KIND_STRING, "127.0.0.1:0", "",                                 \
      "serve --role decode: HOST:PORT the KV receiver listens on (port 0 picks a free one; "       \
      "GET /v1/status reports it as kv_addr)")                                                     \
    X(KV_XFER_TIMEOUT, "kv-xfer-timeout", FLAG_KIND_INT, "10000", "100:600000",                    \
      "serve: milliseconds without progress after which a KV transfer is aborted and the decode "  \
      "server computes the prompt itself")                                                         \
    X(KV_XFER_INPLACE, "kv-xfer-inplace", FLAG_KIND_BOOL, "1", "0|1",                              \
      "KV transfers write a block straight from the sender's pool and receive it straight into "   \
      "the receiver's (still invisible) pool block, verified once there (0: through a blob "       \
      "buffer on each side, verified twice; speed only, same bytes)")                              \
    X(KV_XFER_INFLIGHT, "kv-xfer-inflight", FLAG_KIND_INT, "2", "1:64",                            \
      "KV transfers over ucx: the most block payloads a sender has on their way at once on one "   \
      "connection (1: each write waits until the receiver fetched it; speed only, same bytes)")    \
    X(KV_XFER_VERIFY_OVERLAP, "kv-xfer-verify-overlap", FLAG_KIND_INT, "1", "0:2",                 \
      "KV transfers received in place: a block is checksummed on a helper thread while the next "  \
      "one lands, when the next one is already on its way; 1: over transports whose receiver "     \
      "moves the bytes (ucx), 2: over every transport (tcp too: its sender copies as well, so on " \
      "one small machine the helper takes a core they need), 0: never (speed only, same bytes)")   \
    X(KV_IN_SKIP, "kv-in-skip", FLAG_KIND_BOOL, "1", "0|1",                                        \
      "decode server: a queued request whose KV is still arriving holds no blocks, so the "        \
      "requests behind it may start (0: it keeps its place and the queue waits behind it; same "   \
      "bytes either way, only the order requests start in differs)")

/* Fault injection: the incident's bug classes, reproduced on purpose so that
 * `verity hunt` and `verity bisect` can be shown to find them. They exist only in the fault
 * build (make faults, -DVERITY_FAULTS=1), never in release builds, and are all off by default.
 * Each needs concurrency to fire, as the originals did. */
#if defined(VERITY_FAULTS) && VERITY_FAULTS
#define FLAG_FAULT_LIST(X)                                                                         \
    X(FAULT_DETOK_SHARED, "fault-detok-shared", FLAG_KIND_BOOL, "0", "0|1",                        \
      "FAULT (a): the detokenizer applies the first request's skip_special_tokens to all "         \
      "requests in the step")                                                                      \
    X(FAULT_ATTN_OFFSETS, "fault-attn-offsets", FLAG_KIND_BOOL, "0", "0|1",                        \
      "FAULT (b): attention reads every sequence's keys through the first sequence's block table") \
    X(FAULT_KV_REUSE, "fault-kv-reuse", FLAG_KIND_BOOL, "0", "0|1",                                \
      "FAULT (c): a freed KV block is reused while a simulated transfer still writes into it")     \
    X(FAULT_BIG_BATCH, "fault-big-batch", FLAG_KIND_BOOL, "0", "0|1",                              \
      "FAULT (d): above batch 32 the logits of later sequences come from a stale buffer")          \
    X(FAULT_TABLE_RACE, "fault-table-race", FLAG_KIND_BOOL, "0", "0|1",                            \
      "FAULT (e): the scheduler rewrites a block table while the previous step still reads it")    \
    X(FAULT_TIER_RELOAD, "fault-tier-reload", FLAG_KIND_BOOL, "0", "0|1",                          \
      "FAULT (f): a preempted sequence's KV comes back from the host tier with K but not V")       \
    X(FAULT_TIER_KONLY, "fault-tier-konly", FLAG_KIND_BOOL, "0", "0|1",                            \
      "FAULT (g): a block loaded from the disk or Redis tier gets its K but not its V")            \
    X(FAULT_KV_CORRUPT, "fault-kv-corrupt", FLAG_KIND_ENUM, "none", "none|l1|disk|redis",          \
      "FAULT (h): one bit of every eighth KV block flips in memory after it is cached (l1), or "   \
      "in "                                                                                        \
      "the blob written to the disk or Redis tier")                                                \
    X(FAULT_SPEC_ACCEPT, "fault-spec-accept", FLAG_KIND_BOOL, "0", "0|1",                          \
      "FAULT (i): speculation keeps every drafted token without comparing it with the "            \
      "sampler's pick, in steps that hold more than one sequence")                                 \
    X(FAULT_XFER, "fault-xfer", FLAG_KIND_ENUM, "none",                                            \
      "none|corrupt|drop|delay|dup|late|reuse|noconnect",                                          \
      "FAULT (j): KV transfers between prefill and decode servers: a sent block gets a bit "       \
      "flipped (corrupt), is lost (drop), held past the timeout (delay) or sent twice (dup); the " \
      "decode side gives up waiting at once and the blocks arrive after (late), a received "       \
      "block is overwritten while the transfer still holds it (reuse: the ownership rule "         \
      "bypassed), or the prefill side's connect to the decode server is refused (noconnect)")
#else
#define FLAG_FAULT_LIST(X)
#endif

typedef enum flag_id {
#define FLAG_ENUM(id, name, kind, def, choices, desc) FLAG_##id,
    FLAG_LIST(FLAG_ENUM) FLAG_FAULT_LIST(FLAG_ENUM)
#undef FLAG_ENUM
        FLAG_COUNT
} flag_id;

/* True in the fault build when fault toggle id is on; always false otherwise, so release code
 * compiles the fault branches away. */
#if defined(VERITY_FAULTS) && VERITY_FAULTS
#define FLAG_FAULT(id) (flags_int(FLAG_FAULT_##id) != 0)
#else
#define FLAG_FAULT(id) 0
#endif

typedef struct flag_info {
    const char *name;
    const char *env;
    enum flag_kind kind;
    const char *def;
    const char *choices;
    const char *desc;
    const char *value; /* current value as text */
    bool from_env;     /* current value came from the environment */
    bool from_cli;     /* current value came from the command line */
    bool secret;       /* never display the value */
} flag_info;

/* Resets every flag to its default, then applies VERITY_* environment variables. Returns 0, or
 * ERR_INVAL naming the variable and the bad value (err_detail). */
int flags_init(void);

/* Sets a flag by name from text. Returns 0, ERR_NOTFOUND for an unknown name, or ERR_INVAL for a
 * value outside the flag's choices (detail names both). */
int flags_set(const char *name, const char *value);

/* Scans argv for registered flags given as `--name VALUE` or `--name=VALUE`, applies them, and
 * removes them from argv (argc updated; argv[argc] stays NULL). Unregistered options are left for
 * the caller. Returns 0 or the error of flags_set. */
int flags_parse_args(int *argc, char **argv);

/* Current value of an INT or BOOL flag. */
int64_t flags_int(flag_id id);

/* Current value of any flag as text (an ENUM's choice). */
const char *flags_str(flag_id id);

/* Registry row i (0 <= i < FLAG_COUNT). */
const flag_info *flags_get(int i);

/* Finds a row by name, or NULL. */
const flag_info *flags_find(const char *name);

#endif
