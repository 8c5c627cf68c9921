/* SPDX-License-Identifier: MIT */
/*
 * tokenizer: text <-> token ids for the two vocabulary kinds GGUF files carry in practice,
 * loaded from the `tokenizer.ggml.*` metadata, with ids identical to llama.cpp's on its published
 * test vectors (../shared/vocab).
 *
 *  - SPM (`tokenizer.ggml.model = "llama"`): SentencePiece-style BPE over Unicode characters.
 *    Spaces become U+2581, a space is prefixed when add_space_prefix is set (default for SPM),
 *    then the adjacent pair whose concatenation is a vocabulary piece with the highest score is
 *    merged until none is left (ties: leftmost). A character that is not a piece falls back to
 *    its byte tokens <0xXX>, or to the unknown token when the vocabulary has no byte tokens.
 *  - BPE (`tokenizer.ggml.model = "gpt2"`): byte-level BPE. The text is split into words by the
 *    regular expressions of its `tokenizer.ggml.pre` type (PCRE2, UTF + UCP; several regexes are
 *    applied in sequence, each splitting the pieces of the previous one into matches and the gaps
 *    between them), each word's bytes are mapped to characters by GPT-2's byte-to-unicode table,
 *    and merges are applied lowest rank first (`tokenizer.ggml.merges`, ties: leftmost).
 *
 * Special tokens. Control and unknown-type tokens (`<s>`, `<|im_end|>`) are matched in the text as
 * single tokens only when parse_special is set; otherwise their text is tokenized as ordinary text
 * and they are never produced from it. User-defined tokens (added tokens such as the space runs of
 * NeoX vocabularies) are always matched before pre-tokenization, as llama.cpp and Hugging Face
 * tokenizers do. Matching is longest token first over the whole text, then shorter ones in what is
 * left (llama.cpp's order, so ids agree).
 *
 * Invalid UTF-8 input never fails and never crashes. Every byte that does not start a well-formed
 * UTF-8 sequence (RFC 3629: overlong forms, surrogates, values above U+10FFFF and truncated
 * sequences are ill-formed) is treated as follows: BPE replaces it with U+FFFD before
 * pre-tokenization, as llama.cpp does; SPM keeps it as a one-byte symbol, which becomes its byte
 * token <0xXX> (again as llama.cpp does), or the unknown token without byte tokens. Decoding such
 * ids back yields U+FFFD in place of the bad bytes.
 *
 * Decoding. Each token contributes fixed bytes (tokenizer_token_text): SPM pieces with U+2581 as
 * a space, byte tokens as their byte, BPE pieces mapped back through the byte table, control and
 * unknown-type tokens as their text only when special tokens are rendered. Those bytes need not be
 * valid UTF-8 on their own (one emoji can be four byte tokens); tokenizer_stream turns a token
 * sequence into valid UTF-8 incrementally, and decoding in one call equals decoding one token at a
 * time.
 *
 * Ownership and threads: a tokenizer copies what it needs from the gguf, so the gguf may be closed
 * after tokenizer_load. It is immutable after load; any number of threads may encode and decode
 * with one tokenizer concurrently. A tokenizer_stream belongs to one request (one thread at a
 * time) and carries that request's own skip_special_tokens flag.
 */
#ifndef VERITY_TOKENIZER_TOKENIZER_H
#define VERITY_TOKENIZER_TOKENIZER_H

#include "base/strbuf.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* "No such token" (an unset special id). */
#define TOKENIZER_NULL (-1)

enum tokenizer_kind {
    TOKENIZER_SPM = 1, /* tokenizer.ggml.model = "llama" */
    TOKENIZER_BPE = 2, /* tokenizer.ggml.model = "gpt2" */
};

/* Token attributes, a bit set derived from tokenizer.ggml.token_type (0 undefined, 1 normal,
 * 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte) plus what the loader infers: texts such
 * as "<|eot_id|>" are made control tokens, as llama.cpp does. */
enum tokenizer_attr {
    TOKENIZER_ATTR_UNDEFINED = 0,
    TOKENIZER_ATTR_UNKNOWN = 1 << 0,
    TOKENIZER_ATTR_UNUSED = 1 << 1,
    TOKENIZER_ATTR_NORMAL = 1 << 2,
    TOKENIZER_ATTR_CONTROL = 1 << 3,
    TOKENIZER_ATTR_USER_DEFINED = 1 << 4,
    TOKENIZER_ATTR_BYTE = 1 << 5,
    TOKENIZER_ATTR_LSTRIP = 1 << 7, /* when matched as special, eats whitespace to its left */
    TOKENIZER_ATTR_RSTRIP = 1 << 8, /* ... and to its right */
};

/* Special token roles for tokenizer_special(). */
enum tokenizer_special {
    TOKENIZER_SPECIAL_BOS,
    TOKENIZER_SPECIAL_EOS,
    TOKENIZER_SPECIAL_EOT,
    TOKENIZER_SPECIAL_EOM,
    TOKENIZER_SPECIAL_UNK,
    TOKENIZER_SPECIAL_SEP,
    TOKENIZER_SPECIAL_PAD,
    TOKENIZER_SPECIAL_MASK,
    TOKENIZER_SPECIAL_FIM_PRE,
    TOKENIZER_SPECIAL_FIM_SUF,
    TOKENIZER_SPECIAL_FIM_MID,
    TOKENIZER_SPECIAL_FIM_PAD,
    TOKENIZER_SPECIAL_FIM_REP,
    TOKENIZER_SPECIAL_FIM_SEP,
    TOKENIZER_SPECIAL_COUNT
};

/* ---- loading ---- */

/* Builds a tokenizer from g's tokenizer.ggml.* metadata: model, pre, tokens, scores, token_type,
 * merges, the *_token_id keys, add_bos_token, add_eos_token, add_space_prefix. Special ids that
 * are out of range are ignored with a warning (llama.cpp keeps its defaults too); EOT, EOM and the
 * FIM ids are also found by their text when the metadata does not name them.
 * Returns 0 and *out (free with tokenizer_destroy), or:
 *   ERR_FORMAT      a key is missing, has the wrong type, or is inconsistent (scores or types
 *                   shorter than tokens, a duplicate token, a byte-type token that is not <0xXX>,
 *                   add_bos_token set without a BOS id); the detail names the file and the key or
 *                   token id;
 *   ERR_UNSUPPORTED the tokenizer model (e.g. "bert": WordPiece, "t5": Unigram) or the BPE
 *                   pre-tokenizer type is not implemented; the detail names it;
 *   ERR_TOOLARGE    the vocabulary's text exceeds the pool limit (3.75 GiB);
 *   ERR_NOMEM. */
int tokenizer_load(const gguf *g, tokenizer **out);

/* Frees t. NULL is a no-op. */
void tokenizer_destroy(tokenizer *t);

/* ---- encoding ---- */

/* Tokenizes text[0..len) (any bytes; see invalid UTF-8 above) into out[0..cap).
 * add_special: prepend BOS / append EOS when the vocabulary's add_bos / add_eos flags say so.
 * parse_special: match control and unknown-type tokens written in the text as single tokens.
 * On success returns 0 with *n_out ids in out. Errors:
 *   ERR_FULL     cap is too small: the first cap ids are in out and *n_out is the number needed;
 *   ERR_TOOLARGE len exceeds 256 MiB, or a pre-tokenizer regex hit PCRE2's backtracking limit on
 *                pathological input (the detail names the pre-tokenizer and byte offset);
 *   ERR_NOMEM.
 * text may be NULL when len is 0. Reentrant: no state is kept between calls. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, size_t cap, size_t *n_out);

/* What one encode did, in counts that depend only on the tokenizer and the input, never on the
 * machine or its load, so that tests can check how the cost of encoding grows with the input
 * (linearly, not quadratically, on pathological text) without a clock. */
typedef struct tokenizer_work {
    uint64_t rx_steps;      /* pre-tokenizer regex work (BPE): for every PCRE2 match attempt,
                             * one per pattern item visited plus the distance in bytes the subject
                             * position moved to reach it, so a scan over n bytes counts about n
                             * and a backtrack counts its way back */
    uint64_t rx_calls;      /* pcre2_match calls */
    uint64_t merge_steps;   /* bigram queue pushes and pops (SPM and BPE merging) */
    uint64_t special_bytes; /* bytes scanned to find special tokens written in the text */
} tokenizer_work;

/* tokenizer_encode, also counting its work into *work (zeroed first). The pre-tokenizer regexes
 * run on a second copy compiled for this call with PCRE2 auto-callouts and without its
 * start-of-match optimisations, on the interpreter rather than the JIT, so that every step of the
 * backtracking matcher is seen: much slower than tokenizer_encode, for tests and benchmarks only.
 * Same ids, *n_out and errors as tokenizer_encode, except that PCRE2's limits (ERR_TOOLARGE) apply
 * to the interpreter; also ERR_INTERNAL if the instrumented copy does not compile. */
int tokenizer_encode_counted(const tokenizer *t, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t *out, size_t cap, size_t *n_out,
                             tokenizer_work *work);

/* An upper bound on the ids tokenizer_encode can produce for len bytes of text: a buffer of this
 * many ids never gets ERR_FULL. */
size_t tokenizer_max_tokens(size_t len);

/* ---- vocabulary ---- */

/* Number of tokens; valid ids are 0..n_vocab-1. */
int32_t tokenizer_n_vocab(const tokenizer *t);

/* SPM or BPE. */
enum tokenizer_kind tokenizer_kind(const tokenizer *t);

/* The BPE pre-tokenizer type as named by tokenizer.ggml.pre ("gpt-2", "llama-bpe", "mpt"...;
 * "default" when the key is absent; "" for SPM). The string is owned by t. */
const char *tokenizer_pre_name(const tokenizer *t);

/* The id of a special role, or TOKENIZER_NULL (also for a role out of range). */
int32_t tokenizer_special(const tokenizer *t, enum tokenizer_special role);

/* Shorthands for tokenizer_special(t, TOKENIZER_SPECIAL_BOS / _EOS / _EOT). */
int32_t tokenizer_bos(const tokenizer *t);
int32_t tokenizer_eos(const tokenizer *t);
int32_t tokenizer_eot(const tokenizer *t);

/* Whether encode with add_special prepends BOS / appends EOS. */
bool tokenizer_add_bos(const tokenizer *t);
bool tokenizer_add_eos(const tokenizer *t);

/* True if id ends generation: EOS, EOT, EOM, the FIM pad/repo/separator tokens and tokens with
 * texts such as "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>" (the
 * set llama.cpp builds). False for ids out of range. */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);

/* Attribute bits of id (enum tokenizer_attr), 0 for ids out of range. */
uint32_t tokenizer_token_attr(const tokenizer *t, int32_t id);

/* True if id is a control token (rendered only with render_special). False out of range. */
bool tokenizer_is_control(const tokenizer *t, int32_t id);

/* The raw vocabulary piece of id ("▁Hello", "Ġworld", "<0x0A>", "<s>"), NUL-terminated, owned by
 * t; *len (if not NULL) gets its length. NULL for ids out of range. */
const char *tokenizer_token_piece(const tokenizer *t, int32_t id, size_t *len);

/* The score of id (SPM merge priority), 0 out of range. */
float tokenizer_token_score(const tokenizer *t, int32_t id);

/* The id whose piece is exactly s[0..len), or TOKENIZER_NULL. */
int32_t tokenizer_find_piece(const tokenizer *t, const char *s, size_t len);

/* ---- decoding ---- */

/* The bytes id contributes to decoded text, owned by t (not NUL-terminated; may be partial UTF-8,
 * e.g. a byte token). Control and unknown-type tokens give their text if render_special, else
 * nothing; unused and undefined tokens give nothing. Returns NULL (and *len = 0) for ids out of
 * range, else a pointer with *len bytes (possibly 0). */
const char *tokenizer_token_text(const tokenizer *t, int32_t id, bool render_special, size_t *len);

/* Copies tokenizer_token_text(id) into buf[0..cap), NUL-terminated when there is room.
 * Returns 0 and *len_out = its length; ERR_RANGE for an id out of range; ERR_FULL when cap is
 * smaller than the length (*len_out = the length needed; nothing written). */
int tokenizer_token_to_text(const tokenizer *t, int32_t id, bool render_special, char *buf,
                            size_t cap, size_t *len_out);

/* Appends the UTF-8 decoding of ids[0..n) to out: the token bytes concatenated, each ill-formed
 * subsequence replaced by U+FFFD (one per maximal subpart, as the Unicode standard recommends).
 * Equals feeding the ids one by one to a tokenizer_stream and flushing it. Returns 0, ERR_RANGE
 * for an id out of range (detail names it and its index; out then holds the text before it), or
 * ERR_NOMEM if out failed. */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool render_special,
                     strbuf *out);

/* Incremental detokenizer for one sequence. Caller-owned; the fields are private. Feeding tokens
 * never allocates (only the caller's strbuf grows). It appends only complete, valid UTF-8: a
 * multi-byte character split over several tokens is held back (at most 3 bytes) until it
 * completes, and bytes that can no longer complete become U+FFFD as soon as that is known, or at
 * flush. */
typedef struct tokenizer_stream {
    const tokenizer *t;
    bool skip_special; /* the request's skip_special_tokens: control tokens add nothing */
    uint8_t n_held;    /* bytes of an incomplete character held back */
    uint8_t need;      /* its total length */
    unsigned char held[4];
} tokenizer_stream;

/* Starts a stream over t (which must outlive it). skip_special = true drops control and
 * unknown-type tokens from the text (OpenAI's skip_special_tokens default); false renders them. */
void tokenizer_stream_init(tokenizer_stream *s, const tokenizer *t, bool skip_special);

/* Feeds one token; appends to out the text that became complete. Returns 0, ERR_RANGE for an id
 * out of range (nothing appended, the stream is unchanged), or ERR_NOMEM if out has failed. */
int tokenizer_stream_push(tokenizer_stream *s, int32_t id, strbuf *out);

/* Ends the sequence: a held incomplete character is appended as U+FFFD. The stream is then empty
 * and may be reused for a new sequence. Returns 0 or ERR_NOMEM if out has failed. */
int tokenizer_stream_flush(tokenizer_stream *s, strbuf *out);

/* Number of bytes currently held back (0..3). */
size_t tokenizer_stream_pending(const tokenizer_stream *s);

/* Releases the stream (holds no memory; provided for symmetry). Held bytes are dropped. */
void tokenizer_stream_deinit(tokenizer_stream *s);

#endif
