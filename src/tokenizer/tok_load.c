/* SPDX-License-Identifier: MIT */
/*
 * tok_load: builds a tokenizer from GGUF metadata, and the vocabulary accessors.
 *
 * Loading follows llama.cpp's vocabulary loader where it decides ids: the per-model defaults of
 * the special ids, add_bos/add_eos/add_space_prefix, the pre-tokenizer flags, which tokens count
 * as control (token_type 3, plus texts like "<|eot_id|>" that converters often mislabel), the
 * end-of-generation set, and the whitespace-stripping attributes Phi-3's special tokens get. Where
 * llama.cpp's choice depends on hash-map iteration order (which of several EOT candidates wins),
 * we take the lowest id. Where its defaults are accidents (BPE's BOS/EOS default of 11) we use
 * "none" instead.
 *
 * Everything is copied out of the gguf into one pool, so the gguf may be closed afterwards; the
 * result is immutable and shared by all threads.
 */
#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/utf8.h"
#include "tokenizer/tok_int.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_VOCAB (1 << 24)
#define TOK_POOL_MAX  0xF0000000u

/* ---- hashing ---- */

uint64_t tok_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t tok_hash_final(uint64_t h) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static size_t tok_table_size(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    return cap;
}

int32_t tok_lookup(const tokenizer *t, const char *s, size_t n, bool ordinary_only) {
    size_t i = (size_t)tok_hash_final(tok_hash(TOK_HASH_SEED, s, n)) & t->map_mask;
    for (;;) {
        int32_t id = t->map[i];
        if (id == TOKENIZER_NULL)
            return TOKENIZER_NULL;
        const tok_token *k = &t->tok[id];
        if (k->piece_len == n && memcmp(t->pool + k->piece_off, s, n) == 0) {
            if (ordinary_only && (k->attr & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN)))
                return TOKENIZER_NULL;
            return id;
        }
        i = (i + 1) & t->map_mask;
    }
}

static uint64_t tok_merge_hash(const char *l, size_t ln, const char *r, size_t rn) {
    uint64_t h = tok_hash(TOK_HASH_SEED, l, ln);
    h = tok_hash(h ^ 0x5bd1e995u, "\xff", 1);
    return tok_hash_final(tok_hash(h, r, rn));
}

int32_t tok_merge_rank(const tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    if (!t->merge_map)
        return -1;
    size_t i = (size_t)tok_merge_hash(l, ln, r, rn) & t->merge_mask;
    for (;;) {
        int32_t rank = t->merge_map[i];
        if (rank < 0)
            return -1;
        const tok_merge *m = &t->merges[rank];
        if (m->left_len == ln && m->right_len == rn &&
            memcmp(t->merge_pool + m->left_off, l, ln) == 0 &&
            memcmp(t->merge_pool + m->right_off, r, rn) == 0)
            return rank;
        i = (i + 1) & t->merge_mask;
    }
}

/* ---- GPT-2 byte <-> unicode ---- */

/* Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves; the other 68 bytes are given
 * the code points 256, 257, ... in increasing byte order. */
static bool tok_byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

static uint32_t tok_byte_cp(unsigned b) {
    if (tok_byte_is_printable(b))
        return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !tok_byte_is_printable(c);
    return 256 + n;
}

/* Fills t's byte -> UTF-8 table (done at load, so encoding never computes it). */
static void tok_byte_table(tokenizer *t) {
    for (unsigned c = 0; c < 256; c++) {
        char tmp[4];
        t->byte_enc_len[c] = (uint8_t)utf8_encode(tok_byte_cp(c), tmp);
        memcpy(t->byte_enc[c], tmp, 2);
    }
}

int tok_byte_decode(uint32_t cp) {
    if (cp < 256)
        return tok_byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned c = 0; c < 256; c++)
        if (!tok_byte_is_printable(c) && n-- == 0)
            return (int)c;
    return -1;
}

/* ---- the pool ---- */

typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;

static int tok_buf_put(tok_buf *b, const void *s, size_t n, uint32_t *off) {
    if (b->len + n + 1 > TOK_POOL_MAX)
        return err_set(ERR_TOOLARGE, "tokenizer: vocabulary text exceeds %u bytes", TOK_POOL_MAX);
    if (mem_grow((void **)&b->p, &b->cap, b->len + n + 1, 1))
        return err_set(ERR_NOMEM, "tokenizer: out of memory for the vocabulary pool");
    *off = (uint32_t)b->len;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

/* ---- loading steps ---- */

static const char *const tok_special_keys[] = {
    [TOKENIZER_SPECIAL_BOS] = "tokenizer.ggml.bos_token_id",
    [TOKENIZER_SPECIAL_EOS] = "tokenizer.ggml.eos_token_id",
    [TOKENIZER_SPECIAL_EOT] = "tokenizer.ggml.eot_token_id",
    [TOKENIZER_SPECIAL_EOM] = "tokenizer.ggml.eom_token_id",
    [TOKENIZER_SPECIAL_UNK] = "tokenizer.ggml.unknown_token_id",
    [TOKENIZER_SPECIAL_SEP] = "tokenizer.ggml.seperator_token_id",
    [TOKENIZER_SPECIAL_PAD] = "tokenizer.ggml.padding_token_id",
    [TOKENIZER_SPECIAL_MASK] = "tokenizer.ggml.mask_token_id",
    [TOKENIZER_SPECIAL_FIM_PRE] = "tokenizer.ggml.fim_pre_token_id",
    [TOKENIZER_SPECIAL_FIM_SUF] = "tokenizer.ggml.fim_suf_token_id",
    [TOKENIZER_SPECIAL_FIM_MID] = "tokenizer.ggml.fim_mid_token_id",
    [TOKENIZER_SPECIAL_FIM_PAD] = "tokenizer.ggml.fim_pad_token_id",
    [TOKENIZER_SPECIAL_FIM_REP] = "tokenizer.ggml.fim_rep_token_id",
    [TOKENIZER_SPECIAL_FIM_SEP] = "tokenizer.ggml.fim_sep_token_id",
};

/* Texts that identify a role when the metadata does not name it (llama.cpp's lists). */
static const char *const tok_eot_texts[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<|end_of_text|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "<end_of_utterance>",
                                            NULL};
static const char *const tok_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const tok_fim_pre_texts[] = {"<|fim_prefix|>",
                                                "<fim-prefix>",
                                                "<fim_prefix>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "begin\xef\xbd\x9c>",
                                                "<PRE>",
                                                "\xe2\x96\x81<PRE>",
                                                "<|code_prefix|>",
                                                "<|prefix|>",
                                                NULL};
static const char *const tok_fim_suf_texts[] = {"<|fim_suffix|>",
                                                "<fim-suffix>",
                                                "<fim_suffix>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                                "<SUF>",
                                                "\xe2\x96\x81<SUF>",
                                                "<|code_suffix|>",
                                                "<|suffix|>",
                                                NULL};
static const char *const tok_fim_mid_texts[] = {"<|fim_middle|>",
                                                "<fim-middle>",
                                                "<fim_middle>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "end\xef\xbd\x9c>",
                                                "<MID>",
                                                "\xe2\x96\x81<MID>",
                                                "<|code_middle|>",
                                                "<|middle|>",
                                                NULL};
static const char *const tok_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                "<PAD>",       "[PAD]",     NULL};
static const char *const tok_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                "<REPO>",       "<reponame>",    NULL};
static const char *const tok_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const tok_eog_texts[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<|return|>",
                                            "<|call|>",
                                            "<|flush|>",
                                            "<|calls|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "</s>",
                                            "<|eom_id|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "[EOS]",
                                            "<|end_of_text|>",
                                            "<end_of_utterance>",
                                            "<eos>",
                                            "<turn|>",
                                            "<|tool_response>",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "[e~[",
                                            NULL};

static int32_t tok_find_str(const tokenizer *t, const char *s) {
    return tok_lookup(t, s, strlen(s), false);
}

/* Reads the tokenizer.ggml.model and .pre keys and sets the kind and the per-kind defaults. */
static int tok_load_model(tokenizer *t, const gguf *g) {
    gguf_str model;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc == ERR_NOTFOUND)
        return err_set(ERR_FORMAT, "%s: missing key tokenizer.ggml.model (no tokenizer in file)",
                       t->name);
    if (rc)
        return rc;
    if (gguf_str_eq(model, "llama")) {
        t->kind = TOKENIZER_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->kind = TOKENIZER_BPE;
    } else {
        static const struct {
            const char *model, *what;
        } known[] = {
            {"bert", "WordPiece"},
            {"t5", "Unigram"},
            {"rwkv", "RWKV"},
            {"plamo2", "PLaMo-2"},
            {"gemma4", "SentencePiece-style BPE on raw UTF-8"},
            {"no_vocab", "no vocabulary"},
            {"none", "no vocabulary"},
            {"hybriddna", "DNA k-mer"},
            {"whitespace", "whitespace BPE"},
        };
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            if (gguf_str_eq(model, known[i].model))
                return err_set(ERR_UNSUPPORTED,
                               "%s: tokenizer.ggml.model '%s' (%s) is not supported: only 'llama' "
                               "(SentencePiece) and 'gpt2' (byte-level BPE) are",
                               t->name, known[i].model, known[i].what);
        return err_set(ERR_UNSUPPORTED, "%s: unknown tokenizer.ggml.model '%.*s'", t->name,
                       (int)(model.len > 64 ? 64 : model.len), model.s);
    }

    for (int i = 0; i < TOKENIZER_SPECIAL_COUNT; i++)
        t->special[i] = TOKENIZER_NULL;
    if (t->kind == TOKENIZER_SPM) {
        t->special[TOKENIZER_SPECIAL_BOS] = 1;
        t->special[TOKENIZER_SPECIAL_EOS] = 2;
        t->special[TOKENIZER_SPECIAL_UNK] = 0;
        t->add_bos = true;
        t->add_eos = false;
        t->add_space_prefix = true;
        return 0;
    }

    gguf_str pre = {"", 0};
    rc = gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (rc && rc != ERR_NOTFOUND)
        return rc;
    if (rc == ERR_NOTFOUND)
        log_warn("%s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer (the model may "
                 "tokenize differently from its original tokenizer)",
                 t->name);
    bool known = false;
    t->pre = tok_pre_find(pre.s, pre.len, &known);
    snprintf(t->pre_name, sizeof t->pre_name, "%.*s", (int)(pre.len < 63 ? pre.len : 63),
             pre.len ? pre.s : "default");
    if (!t->pre)
        return err_set(ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is %s", t->name,
                       (int)(pre.len > 64 ? 64 : pre.len), pre.s,
                       known ? "not supported" : "an unknown pre-tokenizer type");
    t->add_bos = t->pre->add_bos;
    t->add_eos = false;
    t->add_space_prefix = false;
    t->ignore_merges = t->pre->ignore_merges;
    return 0;
}

/* The array of strings at key into *arr: 0, or ERR_FORMAT naming the key when it is missing (why
 * follows in the message) or holds other values. */
static int tok_string_array(const tokenizer *t, const gguf *g, const char *key, const char *why,
                            gguf_arr *arr) {
    int rc = gguf_get_arr(g, key, arr);
    if (rc == ERR_NOTFOUND)
        return err_set(ERR_FORMAT, "%s: missing key %s%s", t->name, key, why);
    if (rc)
        return rc;
    if (arr->type != GGUF_VT_STRING)
        return err_set(ERR_FORMAT, "%s: %s is an array of %s, expected string", t->name, key,
                       gguf_vtype_name(arr->type));
    return 0;
}

/* The attribute of each tokenizer.ggml.token_type (llama.cpp's numbering); others UNDEFINED. */
static const uint32_t tok_type_attr[7] = {
    [1] = TOKENIZER_ATTR_NORMAL,       [2] = TOKENIZER_ATTR_UNKNOWN, [3] = TOKENIZER_ATTR_CONTROL,
    [4] = TOKENIZER_ATTR_USER_DEFINED, [5] = TOKENIZER_ATTR_UNUSED,  [6] = TOKENIZER_ATTR_BYTE,
};

/* Reads tokens, scores and types into the pool and the records; builds the piece map. */
static int tok_load_tokens(tokenizer *t, const gguf *g, tok_buf *pool) {
    gguf_arr toks, scores, types;
    int rc = tok_string_array(t, g, "tokenizer.ggml.tokens", "", &toks);
    if (rc)
        return rc;
    if (toks.n == 0 || toks.n > TOK_MAX_VOCAB)
        return err_set(ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (expected 1..%d)",
                       t->name, (unsigned long long)toks.n, TOK_MAX_VOCAB);
    int32_t n = (int32_t)toks.n;

    bool have_scores = false, have_types = false;
    rc = gguf_get_arr(g, "tokenizer.ggml.scores", &scores);
    if (rc == 0) {
        if (scores.type != GGUF_VT_FLOAT32 && scores.type != GGUF_VT_INT32 &&
            scores.type != GGUF_VT_FLOAT64)
            return err_set(ERR_FORMAT,
                           "%s: tokenizer.ggml.scores is an array of %s, expected float32", t->name,
                           gguf_vtype_name(scores.type));
        if (scores.n < toks.n)
            return err_set(ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %d tokens",
                           t->name, (unsigned long long)scores.n, n);
        have_scores = true;
    } else if (rc != ERR_NOTFOUND) {
        return rc;
    }
    rc = gguf_get_arr(g, "tokenizer.ggml.token_type", &types);
    if (rc == 0) {
        if (types.type == GGUF_VT_STRING || types.type == GGUF_VT_ARRAY ||
            types.type == GGUF_VT_FLOAT32 || types.type == GGUF_VT_FLOAT64 ||
            types.type == GGUF_VT_BOOL)
            return err_set(ERR_FORMAT,
                           "%s: tokenizer.ggml.token_type is an array of %s, expected int32",
                           t->name, gguf_vtype_name(types.type));
        if (types.n < toks.n)
            return err_set(ERR_FORMAT,
                           "%s: tokenizer.ggml.token_type has %llu entries for %d tokens", t->name,
                           (unsigned long long)types.n, n);
        have_types = true;
    } else if (rc != ERR_NOTFOUND) {
        return rc;
    }

    t->tok = calloc((size_t)n, sizeof *t->tok);
    t->map_mask = tok_table_size((size_t)n) - 1;
    t->map = malloc((t->map_mask + 1) * sizeof *t->map);
    if (!t->tok || !t->map)
        return err_set(ERR_NOMEM, "%s: out of memory for %d tokens", t->name, n);
    memset(t->map, 0xff, (t->map_mask + 1) * sizeof *t->map);
    t->n_vocab = n;

    for (int32_t id = 0; id < n; id++) {
        gguf_str s = gguf_arr_str(&toks, (uint64_t)id);
        char empty[32];
        if (s.len == 0) {
            /* llama.cpp gives empty pieces a placeholder so they stay unique and unmatched */
            log_info("%s: empty token at index %d", t->name, id);
            int k = snprintf(empty, sizeof empty, "[EMPTY_%d]", id);
            s.s = empty;
            s.len = (uint64_t)k;
        }
        if (s.len > 0xFFFF)
            return err_set(ERR_FORMAT, "%s: tokenizer.ggml.tokens[%d] is %llu bytes long", t->name,
                           id, (unsigned long long)s.len);
        tok_token *k = &t->tok[id];
        if ((rc = tok_buf_put(pool, s.s, s.len + 1, &k->piece_off)))
            return rc;
        pool->p[pool->len - 1] = 0;
        k->piece_len = (uint32_t)s.len;
        k->score = have_scores ? (float)gguf_arr_f64(&scores, (uint64_t)id) : 0.0f;
        if (k->score != k->score) /* NaN would break the merge order: rank it last */
            k->score = -FLT_MAX;
        int64_t ty = have_types ? gguf_arr_i64(&types, (uint64_t)id) : 1;
        k->attr = ty >= 1 && ty <= 6 ? tok_type_attr[ty] : TOKENIZER_ATTR_UNDEFINED;
    }
    t->pool = pool->p; /* lookups below read pieces from the pool */
    for (int32_t id = 0; id < n; id++) {
        const tok_token *k = &t->tok[id];
        const char *s = pool->p + k->piece_off;
        size_t i = (size_t)tok_hash_final(tok_hash(TOK_HASH_SEED, s, k->piece_len)) & t->map_mask;
        while (t->map[i] != TOKENIZER_NULL) {
            const tok_token *o = &t->tok[t->map[i]];
            if (o->piece_len == k->piece_len &&
                memcmp(pool->p + o->piece_off, s, k->piece_len) == 0)
                return err_set(ERR_FORMAT,
                               "%s: tokenizer.ggml.tokens: duplicate token '%.*s' at ids %d and %d",
                               t->name, (int)(k->piece_len > 64 ? 64 : k->piece_len), s, t->map[i],
                               id);
            i = (i + 1) & t->map_mask;
        }
        t->map[i] = id;
    }
    return 0;
}

/* Reads tokenizer.ggml.merges into the merge pool and table (BPE only). Each entry is "left right",
 * split at the first space after the first byte (a piece may itself start with a space byte in raw
 * vocabularies). A duplicate pair keeps its first (lowest) rank; an entry without a space can never
 * match and is skipped. */
static int tok_load_merges(tokenizer *t, const gguf *g) {
    gguf_arr arr;
    int rc = tok_string_array(t, g, "tokenizer.ggml.merges", " (required for gpt2)", &arr);
    if (rc)
        return rc;
    if (arr.n > TOK_MAX_VOCAB)
        return err_set(ERR_FORMAT, "%s: tokenizer.ggml.merges has %llu entries (at most %d)",
                       t->name, (unsigned long long)arr.n, TOK_MAX_VOCAB);
    size_t total = 0;
    for (uint64_t i = 0; i < arr.n; i++)
        total += gguf_arr_str(&arr, i).len;
    if (total > TOK_POOL_MAX)
        return err_set(ERR_TOOLARGE, "%s: tokenizer.ggml.merges has %zu bytes of text", t->name,
                       total);
    t->merges = malloc((arr.n ? arr.n : 1) * sizeof *t->merges);
    t->merge_pool = malloc(total ? total : 1);
    t->merge_mask = tok_table_size((size_t)arr.n) - 1;
    t->merge_map = malloc((t->merge_mask + 1) * sizeof *t->merge_map);
    if (!t->merges || !t->merge_pool || !t->merge_map)
        return err_set(ERR_NOMEM, "%s: out of memory for %llu merges", t->name,
                       (unsigned long long)arr.n);
    memset(t->merge_map, 0xff, (t->merge_mask + 1) * sizeof *t->merge_map);
    size_t off = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        gguf_str s = gguf_arr_str(&arr, i);
        memcpy(t->merge_pool + off, s.s, s.len);
        tok_merge *m = &t->merges[i];
        const char *sp = s.len > 1 ? memchr(s.s + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            log_debug("%s: tokenizer.ggml.merges[%llu] has no space; ignored", t->name,
                      (unsigned long long)i);
            m->left_off = m->right_off = (uint32_t)off;
            m->left_len = m->right_len = 0xFFFFFFFFu; /* never equal to a real length */
            off += s.len;
            continue;
        }
        size_t ln = (size_t)(sp - s.s);
        m->left_off = (uint32_t)off;
        m->left_len = (uint32_t)ln;
        m->right_off = (uint32_t)(off + ln + 1);
        m->right_len = (uint32_t)(s.len - ln - 1);
        off += s.len;
        const char *l = t->merge_pool + m->left_off, *r = t->merge_pool + m->right_off;
        size_t j = (size_t)tok_merge_hash(l, m->left_len, r, m->right_len) & t->merge_mask;
        bool dup = false;
        while (t->merge_map[j] >= 0) {
            const tok_merge *o = &t->merges[t->merge_map[j]];
            if (o->left_len == m->left_len && o->right_len == m->right_len &&
                memcmp(t->merge_pool + o->left_off, l, m->left_len) == 0 &&
                memcmp(t->merge_pool + o->right_off, r, m->right_len) == 0) {
                dup = true;
                break;
            }
            j = (j + 1) & t->merge_mask;
        }
        if (!dup)
            t->merge_map[j] = (int32_t)i;
    }
    t->n_merges = (int32_t)arr.n;
    return 0;
}

/* Reads the *_token_id keys (out-of-range values keep the default, as llama.cpp does) and the
 * add_* flags; checks that a BOS/EOS exists where one must be added. */
static int tok_load_specials(tokenizer *t, const gguf *g) {
    for (int r = 0; r < TOKENIZER_SPECIAL_COUNT; r++)
        if (t->special[r] >= t->n_vocab)
            t->special[r] = TOKENIZER_NULL;
    if (t->pre && t->pre->no_bos)
        t->special[TOKENIZER_SPECIAL_BOS] = TOKENIZER_NULL;
    static const struct {
        const char *key;
        int role;
    } deprecated[] = {
        {"tokenizer.ggml.prefix_token_id", TOKENIZER_SPECIAL_FIM_PRE},
        {"tokenizer.ggml.suffix_token_id", TOKENIZER_SPECIAL_FIM_SUF},
        {"tokenizer.ggml.middle_token_id", TOKENIZER_SPECIAL_FIM_MID},
    };
    for (int k = 0; k < TOKENIZER_SPECIAL_COUNT + 3; k++) {
        const char *key = k < TOKENIZER_SPECIAL_COUNT ? tok_special_keys[k]
                                                      : deprecated[k - TOKENIZER_SPECIAL_COUNT].key;
        int role = k < TOKENIZER_SPECIAL_COUNT ? k : deprecated[k - TOKENIZER_SPECIAL_COUNT].role;
        int64_t v;
        int rc = gguf_get_i64(g, key, &v);
        if (rc == ERR_NOTFOUND)
            continue;
        if (rc)
            return rc;
        if (v < 0 || v >= t->n_vocab) {
            log_info("%s: %s = %lld is outside the vocabulary (%d tokens); ignored", t->name, key,
                     (long long)v, t->n_vocab);
            continue;
        }
        t->special[role] = (int32_t)v;
    }
    static const struct {
        const char *key;
        size_t field;
    } flags[] = {
        {"tokenizer.ggml.add_bos_token", offsetof(tokenizer, add_bos)},
        {"tokenizer.ggml.add_eos_token", offsetof(tokenizer, add_eos)},
        {"tokenizer.ggml.add_space_prefix", offsetof(tokenizer, add_space_prefix)},
    };
    bool given[3] = {false, false, false};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        bool b;
        int rc = gguf_get_bool(g, flags[i].key, &b);
        if (rc == ERR_NOTFOUND)
            continue;
        if (rc)
            return rc;
        *(bool *)((char *)t + flags[i].field) = b;
        given[i] = true;
    }
    /* A BOS/EOS that must be added but does not exist: an error when the file asks for it, a
     * warning when only the type's default does (llama.cpp would add its default id 11). */
    const int roles[2] = {TOKENIZER_SPECIAL_BOS, TOKENIZER_SPECIAL_EOS};
    bool *add[2] = {&t->add_bos, &t->add_eos};
    for (int i = 0; i < 2; i++) {
        if (!*add[i] || t->special[roles[i]] != TOKENIZER_NULL)
            continue;
        if (given[i])
            return err_set(ERR_FORMAT, "%s: %s is true but there is no valid %s", t->name,
                           flags[i].key, tok_special_keys[roles[i]]);
        log_warn("%s: no valid %s; it will not be added", t->name, tok_special_keys[roles[i]]);
        *add[i] = false;
    }
    return 0;
}

/* Finds roles by text, makes the tokens that end generation control tokens, and builds the EOG
 * set, in llama.cpp's order (some steps see the attributes earlier ones set). */
static int tok_load_roles(tokenizer *t) {
    static const struct {
        int role;
        const char *const *texts;
    } by_text[] = {
        {TOKENIZER_SPECIAL_EOT, tok_eot_texts},
        {TOKENIZER_SPECIAL_EOM, tok_eom_texts},
        {TOKENIZER_SPECIAL_FIM_PRE, tok_fim_pre_texts},
        {TOKENIZER_SPECIAL_FIM_SUF, tok_fim_suf_texts},
        {TOKENIZER_SPECIAL_FIM_MID, tok_fim_mid_texts},
        {TOKENIZER_SPECIAL_FIM_PAD, tok_fim_pad_texts},
        {TOKENIZER_SPECIAL_FIM_REP, tok_fim_rep_texts},
        {TOKENIZER_SPECIAL_FIM_SEP, tok_fim_sep_texts},
    };
    for (size_t r = 0; r < sizeof by_text / sizeof *by_text; r++) {
        int role = by_text[r].role;
        if (t->special[role] != TOKENIZER_NULL)
            continue;
        /* lowest id among the candidate texts */
        int32_t best = TOKENIZER_NULL;
        for (const char *const *s = by_text[r].texts; *s; s++) {
            int32_t id = tok_find_str(t, *s);
            if (id != TOKENIZER_NULL && (best == TOKENIZER_NULL || id < best))
                best = id;
        }
        if (best != TOKENIZER_NULL) {
            t->special[role] = best;
            t->tok[best].attr |= TOKENIZER_ATTR_CONTROL;
        }
    }

    t->eog = calloc((size_t)t->n_vocab, 1);
    if (!t->eog)
        return err_set(ERR_NOMEM, "%s: out of memory", t->name);
    const int eog_roles[] = {TOKENIZER_SPECIAL_FIM_PAD, TOKENIZER_SPECIAL_FIM_REP,
                             TOKENIZER_SPECIAL_FIM_SEP};
    for (size_t i = 0; i < sizeof eog_roles / sizeof *eog_roles; i++)
        if (t->special[eog_roles[i]] != TOKENIZER_NULL)
            t->eog[t->special[eog_roles[i]]] = 1;
    for (const char *const *s = tok_eog_texts; *s; s++) {
        int32_t id = tok_find_str(t, *s);
        if (id != TOKENIZER_NULL) {
            t->eog[id] = 1;
            t->tok[id].attr |= TOKENIZER_ATTR_CONTROL;
        }
    }
    /* gpt-oss: these structure tokens are always rendered */
    static const char *const render_always[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                "<|constrain|>", NULL};
    for (const char *const *s = render_always; *s; s++) {
        int32_t id = tok_find_str(t, *s);
        if (id != TOKENIZER_NULL)
            t->tok[id].attr = TOKENIZER_ATTR_USER_DEFINED;
    }
    const int eog_ids[] = {TOKENIZER_SPECIAL_EOS, TOKENIZER_SPECIAL_EOT, TOKENIZER_SPECIAL_EOM};
    for (size_t i = 0; i < sizeof eog_ids / sizeof *eog_ids; i++)
        if (t->special[eog_ids[i]] != TOKENIZER_NULL)
            t->eog[t->special[eog_ids[i]]] = 1;

    /* o200k_harmony / solar-open: with <|return|> and <|call|> (or <|calls|> and <|flush|>),
     * <|end|> ends a message, not the generation */
    int32_t ret = tok_find_str(t, "<|return|>"), call = tok_find_str(t, "<|call|>");
    int32_t calls = tok_find_str(t, "<|calls|>"), flush = tok_find_str(t, "<|flush|>");
    int32_t end = tok_find_str(t, "<|end|>");
    bool has_call =
        (call != TOKENIZER_NULL && t->eog[call]) || (calls != TOKENIZER_NULL && t->eog[calls]);
    bool has_ret = ret != TOKENIZER_NULL && t->eog[ret];
    bool has_flush = flush != TOKENIZER_NULL && t->eog[flush];
    if (end != TOKENIZER_NULL && t->eog[end] && has_call && (has_ret || has_flush)) {
        t->eog[end] = 0;
        t->tok[end].attr = TOKENIZER_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: with <|tool_response>, </s> is an ordinary token */
    int32_t tool_resp = tok_find_str(t, "<|tool_response>"), s_end = tok_find_str(t, "</s>");
    if (tool_resp != TOKENIZER_NULL && t->eog[tool_resp] && s_end != TOKENIZER_NULL &&
        t->eog[s_end]) {
        t->eog[s_end] = 0;
        t->tok[s_end].attr = TOKENIZER_ATTR_NORMAL;
    }
    return 0;
}

/* Order of the special list: longer piece first, then lower id. */
static bool tok_special_before(const tokenizer *t, int32_t x, int32_t y) {
    uint32_t lx = t->tok[x].piece_len, ly = t->tok[y].piece_len;
    return lx != ly ? lx > ly : x < y;
}

/* Bottom-up merge sort of v[0..n) with scratch tmp[0..n) (no global context, so two threads may
 * load at once). */
static void tok_special_sort(const tokenizer *t, int32_t *v, int32_t *tmp, size_t n) {
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = tok_special_before(t, v[j], v[i]) ? v[j++] : v[i++];
            while (i < mid)
                tmp[k++] = v[i++];
            while (j < hi)
                tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
    }
}

static bool tok_contains(const char *s, size_t n, const char *sub) {
    size_t m = strlen(sub);
    return n >= m && memmem(s, n, sub, m) != NULL;
}

/* The list of tokens matched in text before tokenizing (longest first, then by id), and the
 * whitespace-stripping attributes some models give them. */
static int tok_load_special_list(tokenizer *t, const gguf *g) {
    size_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok[id].attr &
            (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_USER_DEFINED | TOKENIZER_ATTR_UNKNOWN))
            n++;
    t->specials = malloc((n ? n : 1) * sizeof *t->specials);
    if (!t->specials)
        return err_set(ERR_NOMEM, "%s: out of memory", t->name);
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok[id].attr &
            (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_USER_DEFINED | TOKENIZER_ATTR_UNKNOWN))
            t->specials[n++] = id;
    t->n_specials = n;
    int32_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return err_set(ERR_NOMEM, "%s: out of memory", t->name);
    tok_special_sort(t, t->specials, tmp, n);
    free(tmp);

    gguf_str name = {"", 0}, pre = {"", 0}, arch = {"", 0};
    gguf_get_str(g, "general.name", &name);
    gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    gguf_get_str(g, "general.architecture", &arch);
    char lname[256];
    size_t ln = name.len < sizeof lname ? (size_t)name.len : sizeof lname;
    for (size_t i = 0; i < ln; i++) {
        char c = name.s[i];
        lname[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    if (tok_contains(pre.s, pre.len, "jina-v2-de") || tok_contains(pre.s, pre.len, "jina-v2-es") ||
        tok_contains(pre.s, pre.len, "jina-v2-code") ||
        tok_contains(arch.s, arch.len, "nomic-bert-moe") ||
        tok_contains(arch.s, arch.len, "jina-bert-v3")) {
        int32_t id = tok_find_str(t, "<mask>");
        if (id != TOKENIZER_NULL)
            t->tok[id].attr |= TOKENIZER_ATTR_LSTRIP;
    } else if (tok_contains(lname, ln, "phi-3") || tok_contains(lname, ln, "phi3")) {
        for (size_t i = 0; i < t->n_specials; i++)
            t->tok[t->specials[i]].attr |= TOKENIZER_ATTR_RSTRIP;
        int32_t id = tok_find_str(t, "</s>");
        if (id != TOKENIZER_NULL)
            t->tok[id].attr |= TOKENIZER_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
        for (const char *const *s = keep; *s; s++)
            if ((id = tok_find_str(t, *s)) != TOKENIZER_NULL)
                t->tok[id].attr &= ~(uint32_t)TOKENIZER_ATTR_RSTRIP;
    } else if (tok_contains(lname, ln, "modern-bert")) {
        int32_t id = tok_find_str(t, "[MASK]");
        if (id != TOKENIZER_NULL)
            t->tok[id].attr |= TOKENIZER_ATTR_LSTRIP;
    }
    return 0;
}

/* Computes each token's decoded bytes into the pool (tokenizer_token_text) and the SPM byte
 * fallback table. */
static int tok_load_texts(tokenizer *t, tok_buf *pool) {
    char *tmp = NULL;
    size_t tmp_cap = 0;
    int rc = 0;
    for (int32_t id = 0; id < t->n_vocab && rc == 0; id++) {
        tok_token *k = &t->tok[id];
        /* the pool may move while we append: copy the piece out first */
        size_t n = k->piece_len;
        if (tmp_cap < n + 8) {
            char *p = realloc(tmp, n + 8);
            if (!p) {
                rc = err_set(ERR_NOMEM, "%s: out of memory", t->name);
                break;
            }
            tmp = p;
            tmp_cap = n + 8;
        }
        memcpy(tmp, pool->p + k->piece_off, n);
        const char *s = tmp;
        uint32_t a = k->attr;
        if (a & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN | TOKENIZER_ATTR_USER_DEFINED)) {
            k->text_off = k->piece_off; /* the raw piece */
            k->text_len = k->piece_len;
            continue;
        }
        uint32_t start = (uint32_t)pool->len;
        k->text_off = start;
        if (t->kind == TOKENIZER_SPM && (a & TOKENIZER_ATTR_NORMAL)) {
            for (size_t i = 0; i < n && rc == 0; i++) {
                uint32_t off;
                if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    rc = tok_buf_put(pool, " ", 1, &off);
                    i += 2;
                } else {
                    rc = tok_buf_put(pool, s + i, 1, &off);
                }
            }
        } else if (t->kind == TOKENIZER_SPM && (a & TOKENIZER_ATTR_BYTE)) {
            int hi = n == 6 ? utf8_hex_digit(s[3]) : -1, lo = n == 6 ? utf8_hex_digit(s[4]) : -1;
            if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || hi < 0 || lo < 0) {
                rc = err_set(ERR_FORMAT,
                             "%s: tokenizer.ggml.tokens[%d] '%.*s' has the byte type but is not "
                             "<0xXX>",
                             t->name, id, (int)(n > 32 ? 32 : n), s);
                break;
            }
            char b = (char)(hi * 16 + lo);
            uint32_t off;
            rc = tok_buf_put(pool, &b, 1, &off);
        } else if (t->kind == TOKENIZER_BPE && (a & TOKENIZER_ATTR_NORMAL)) {
            /* map each character back to its byte; a character outside the table (or a stray
             * invalid byte) is kept as it is */
            size_t i = 0;
            while (i < n && rc == 0) {
                uint32_t cp, off;
                int l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
                int b = l > 0 ? tok_byte_decode(cp) : -1;
                if (b >= 0) {
                    char c = (char)b;
                    rc = tok_buf_put(pool, &c, 1, &off);
                } else {
                    if (l < 1)
                        l = 1;
                    rc = tok_buf_put(pool, s + i, (size_t)l, &off);
                }
                i += (size_t)l;
            }
        }
        k->text_len = (uint32_t)(pool->len - start);
    }
    free(tmp);
    if (rc)
        return rc;
    t->pool = pool->p;
    t->pool_len = pool->len;

    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = tok_lookup(t, hex, 6, false);
        if (id == TOKENIZER_NULL) {
            char c = (char)b;
            id = tok_lookup(t, &c, 1, false);
        }
        t->byte_token[b] = id;
    }
    return 0;
}

int tokenizer_load(const gguf *g, tokenizer **out) {
    *out = NULL;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(ERR_NOMEM, "tokenizer: out of memory");
    const char *path = gguf_path(g);
    snprintf(t->name, sizeof t->name, "%s", path && *path ? path : "gguf");
    tok_buf pool = {0};
    int rc = tok_load_model(t, g);
    if (!rc)
        rc = tok_load_tokens(t, g, &pool);
    t->pool = pool.p;
    if (!rc && t->kind == TOKENIZER_BPE)
        rc = tok_load_merges(t, g);
    if (!rc)
        rc = tok_load_specials(t, g);
    if (!rc)
        rc = tok_load_roles(t);
    if (!rc)
        rc = tok_load_special_list(t, g);
    if (!rc)
        rc = tok_load_texts(t, &pool);
    t->pool = pool.p;
    if (!rc && t->kind == TOKENIZER_BPE) {
        tok_byte_table(t);
        rc = tok_pre_compile(t);
    }
    if (rc) {
        tokenizer_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tokenizer_destroy(tokenizer *t) {
    if (!t)
        return;
    tok_pre_free(t);
    free(t->tok);
    free(t->pool);
    free(t->map);
    free(t->merges);
    free(t->merge_pool);
    free(t->merge_map);
    free(t->eog);
    free(t->specials);
    free(t);
}

/* ---- accessors ---- */

static bool tok_valid(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab;
}

int32_t tokenizer_n_vocab(const tokenizer *t) {
    return t->n_vocab;
}

enum tokenizer_kind tokenizer_kind(const tokenizer *t) {
    return t->kind;
}

const char *tokenizer_pre_name(const tokenizer *t) {
    return t->pre_name;
}

int32_t tokenizer_special(const tokenizer *t, enum tokenizer_special role) {
    if ((int)role < 0 || role >= TOKENIZER_SPECIAL_COUNT)
        return TOKENIZER_NULL;
    return t->special[role];
}

int32_t tokenizer_bos(const tokenizer *t) {
    return t->special[TOKENIZER_SPECIAL_BOS];
}
int32_t tokenizer_eos(const tokenizer *t) {
    return t->special[TOKENIZER_SPECIAL_EOS];
}
int32_t tokenizer_eot(const tokenizer *t) {
    return t->special[TOKENIZER_SPECIAL_EOT];
}
bool tokenizer_add_bos(const tokenizer *t) {
    return t->add_bos;
}
bool tokenizer_add_eos(const tokenizer *t) {
    return t->add_eos;
}

bool tokenizer_is_eog(const tokenizer *t, int32_t id) {
    return tok_valid(t, id) && t->eog[id];
}

uint32_t tokenizer_token_attr(const tokenizer *t, int32_t id) {
    return tok_valid(t, id) ? t->tok[id].attr : 0;
}

bool tokenizer_is_control(const tokenizer *t, int32_t id) {
    return tok_valid(t, id) && (t->tok[id].attr & TOKENIZER_ATTR_CONTROL);
}

const char *tokenizer_token_piece(const tokenizer *t, int32_t id, size_t *len) {
    if (!tok_valid(t, id)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->tok[id].piece_len;
    return t->pool + t->tok[id].piece_off;
}

float tokenizer_token_score(const tokenizer *t, int32_t id) {
    return tok_valid(t, id) ? t->tok[id].score : 0.0f;
}

int32_t tokenizer_find_piece(const tokenizer *t, const char *s, size_t len) {
    return tok_lookup(t, s, len, false);
}
