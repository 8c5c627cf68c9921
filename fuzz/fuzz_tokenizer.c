/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tokenizer: libFuzzer target for tokenizer_encode and the detokenizers. It needs no files:
 * on the first call it writes small vocabularies with the gguf writer to a temporary file and
 * loads them (SPM with and without byte tokens; byte-level BPE under several pre-tokenizers,
 * each with a control and a user-defined token). VERITY_FUZZ_VOCAB=path.gguf adds a real
 * vocabulary (only the properties that hold for every vocabulary are checked on it).
 *
 * Input: byte 0 picks the tokenizer (bits 2..7) and add_special (bit 1) / parse_special (bit 0);
 * the rest is the text. Checked on every input:
 *  - encode succeeds with a buffer of tokenizer_max_tokens(len) ids, all in range, and is
 *    deterministic;
 *  - the bytes of the tokens are the text: BPE gives the text with each invalid UTF-8 byte
 *    replaced by U+FFFD; SPM gives " " + text (U+2581 read as a space) when no special token was
 *    matched (built-in vocabularies only);
 *  - streaming detokenization (both skip_special settings) equals one-shot decoding and is valid
 *    UTF-8 after every token.
 * A violated property aborts (libFuzzer records the input).
 */
#include "base/strbuf.h"
#include "base/utf8.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_TOK 16
#define FZ_NV      600

static tokenizer *fz_tok[FZ_MAX_TOK];
static bool fz_builtin[FZ_MAX_TOK];
static int fz_n;

#define FZ_ASSERT(c)                                                                               \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_tokenizer: property failed: %s (line %d)\n", #c, __LINE__);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- building the vocabularies ---- */

typedef struct fz_vocab {
    char *tok[FZ_NV];
    size_t len[FZ_NV];
    int32_t type[FZ_NV];
    float score[FZ_NV];
    int n;
    char *merge[64];
    int n_merges;
} fz_vocab;

static void fz_add(fz_vocab *v, const char *s, size_t n, int32_t type) {
    if (v->n >= FZ_NV)
        abort();
    v->tok[v->n] = malloc(n + 1);
    memcpy(v->tok[v->n], s, n);
    v->tok[v->n][n] = 0;
    v->len[v->n] = n;
    v->type[v->n] = type;
    v->score[v->n] = -(float)v->n;
    v->n++;
}

static void fz_free(fz_vocab *v) {
    for (int i = 0; i < v->n; i++)
        free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++)
        free(v->merge[i]);
}

static bool fz_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static size_t fz_spell(const char *s, char *out) {
    size_t n = 0;
    for (; *s; s++) {
        unsigned b = (unsigned char)*s, cp = b;
        if (!fz_printable(b)) {
            cp = 256;
            for (unsigned c = 0; c < b; c++)
                cp += !fz_printable(c);
        }
        n += (size_t)utf8_encode(cp, out + n);
    }
    out[n] = 0;
    return n;
}

static tokenizer *fz_load(const fz_vocab *v, const char *model, const char *pre, uint32_t bos) {
    char path[] = "/tmp/verity-fuzz-tokenizer-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    close(fd);
    gguf_writer *w = gguf_writer_create();
    if (!w)
        abort();
    gguf_writer_set_str(w, "tokenizer.ggml.model", model, strlen(model));
    if (pre)
        gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, v->len,
                            (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v->score, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v->type, (uint64_t)v->n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", bos);
    if (v->n_merges)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge, NULL,
                                (uint64_t)v->n_merges);
    gguf *g = NULL;
    tokenizer *t = NULL;
    if (gguf_writer_write(w, path) || gguf_open(path, &g) || tokenizer_load(g, &t)) {
        fprintf(stderr, "fuzz_tokenizer: cannot build the %s vocabulary\n", model);
        abort();
    }
    gguf_close(g);
    gguf_writer_destroy(w);
    unlink(path);
    return t;
}

static void fz_spm(bool bytes) {
    fz_vocab v = {0};
    fz_add(&v, "<unk>", 5, 2);
    fz_add(&v, "<s>", 3, 3);
    fz_add(&v, "</s>", 4, 3);
    if (bytes)
        for (unsigned b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            fz_add(&v, s, 6, 6);
        }
    static const char *const p[] = {"\xe2\x96\x81",
                                    "\xe2\x96\x81\xe2\x96\x81",
                                    "\xe2\x96\x81t",
                                    "h",
                                    "e",
                                    "t",
                                    "he",
                                    "\xe2\x96\x81the",
                                    "\xe2\x96\x81th",
                                    "a",
                                    "b",
                                    "o",
                                    "w",
                                    "r",
                                    "l",
                                    "d",
                                    "\xe2\x96\x81w",
                                    "or",
                                    "ld",
                                    "\xe2\x96\x81wor",
                                    "\xe2\x96\x81world",
                                    "\xc3\xa9",
                                    "\xe6\x97\xa5",
                                    "\xe6\x97\xa5\xe6\x9c\xac",
                                    "\xe6\x9c\xac",
                                    "<",
                                    ">",
                                    "|",
                                    "\n",
                                    "\xf0\x9f\x9a\x80"};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        fz_add(&v, p[i], strlen(p[i]), 1);
    fz_add(&v, "<|end|>", 7, 3);
    fz_add(&v, "<tool>", 6, 4);
    fz_tok[fz_n] = fz_load(&v, "llama", NULL, 1);
    fz_builtin[fz_n++] = bytes;
    fz_free(&v);
}

static void fz_bpe(const char *pre) {
    fz_vocab v = {0};
    for (unsigned b = 0; b < 256; b++) {
        char s[4], one[2] = {(char)b, 0};
        if (b == 0) {
            fz_add(&v, "\xc4\x80", 2, 1); /* fz_spell stops at NUL; byte 0 is U+0100 */
            continue;
        }
        size_t n = fz_spell(one, s);
        fz_add(&v, s, n, 1);
    }
    static const char *const m[][2] = {{" ", "t"}, {"h", "e"},   {" t", "he"},    {"i", "n"},
                                       {"e", "r"}, {" ", "a"},   {"o", "r"},      {"l", "d"},
                                       {" ", "w"}, {" w", "or"}, {" wor", "ld"},  {" ", " "},
                                       {"1", "2"}, {"12", "3"},  {"\xc3", "\xa9"}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        char a[32], b[32], both[64], mm[80];
        fz_spell(m[i][0], a);
        fz_spell(m[i][1], b);
        snprintf(mm, sizeof mm, "%s %s", a, b);
        snprintf(both, sizeof both, "%s%s", a, b);
        v.merge[v.n_merges++] = strdup(mm);
        fz_add(&v, both, strlen(both), 1);
    }
    fz_add(&v, "<|endoftext|>", 13, 3);
    fz_add(&v, "<tool>", 6, 4);
    fz_tok[fz_n] = fz_load(&v, "gpt2", pre, (uint32_t)v.n - 2);
    fz_builtin[fz_n++] = true;
    fz_free(&v);
}

static void fz_init(void) {
    fz_spm(true);
    fz_spm(false);
    static const char *const pres[] = {"gpt-2",          "llama-bpe", "deepseek-llm",
                                       "deepseek-coder", "qwen2",     "gpt-4o",
                                       "default",        "tekken",    "chameleon"};
    for (size_t i = 0; i < sizeof pres / sizeof *pres; i++)
        fz_bpe(pres[i]);
    const char *extra = getenv("VERITY_FUZZ_VOCAB");
    if (extra && *extra) {
        gguf *g;
        if (gguf_open(extra, &g) == 0) {
            if (tokenizer_load(g, &fz_tok[fz_n]) == 0)
                fz_builtin[fz_n++] = false;
            gguf_close(g);
        }
    }
}

/* ---- properties ---- */

/* text with each byte that starts no well-formed sequence replaced by U+FFFD */
static void fz_sanitize(const char *s, size_t n, strbuf *out) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (l > 0) {
            strbuf_append(out, s + i, (size_t)l);
            i += (size_t)l;
        } else {
            strbuf_append(out, "\xef\xbf\xbd", 3);
            i++;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fz_n)
        fz_init();
    if (size == 0)
        return 0;
    int which = (data[0] >> 2) % fz_n;
    bool parse_special = data[0] & 1, add_special = data[0] & 2;
    const tokenizer *t = fz_tok[which];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    size_t cap = tokenizer_max_tokens(len), n = 0, n2 = 0;
    int32_t *ids = malloc(cap * sizeof *ids), *ids2 = malloc(cap * sizeof *ids2);
    FZ_ASSERT(ids && ids2);
    FZ_ASSERT(tokenizer_encode(t, text, len, add_special, parse_special, ids, cap, &n) == 0);
    FZ_ASSERT(n <= cap);
    FZ_ASSERT(tokenizer_encode(t, text, len, add_special, parse_special, ids2, cap, &n2) == 0);
    FZ_ASSERT(n == n2 && (n == 0 || memcmp(ids, ids2, n * sizeof *ids) == 0));
    bool special = false;
    for (size_t i = 0; i < n; i++) {
        FZ_ASSERT(ids[i] >= 0 && ids[i] < tokenizer_n_vocab(t));
        special |=
            (tokenizer_token_attr(t, ids[i]) &
             (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_USER_DEFINED | TOKENIZER_ATTR_UNKNOWN)) != 0;
    }

    strbuf raw, want, a, b;
    strbuf_init(&raw);
    strbuf_init(&want);
    strbuf_init(&a);
    strbuf_init(&b);
    if (fz_builtin[which] && !add_special) {
        for (size_t i = 0; i < n; i++) {
            size_t l;
            const char *p = tokenizer_token_text(t, ids[i], true, &l);
            strbuf_append(&raw, p, l);
        }
        if (tokenizer_kind(t) == TOKENIZER_BPE) {
            fz_sanitize(text, len, &want);
            FZ_ASSERT(raw.len == want.len && memcmp(raw.data, want.data, raw.len) == 0);
        } else if (!special && len > 0) {
            strbuf_putc(&want, ' ');
            for (size_t i = 0; i < len; i++) {
                if (i + 3 <= len && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
                    strbuf_putc(&want, ' ');
                    i += 2;
                } else {
                    strbuf_putc(&want, text[i]);
                }
            }
            FZ_ASSERT(raw.len == want.len && memcmp(raw.data, want.data, raw.len) == 0);
        }
    }
    for (int skip = 0; skip < 2; skip++) {
        tokenizer_stream s;
        tokenizer_stream_init(&s, t, skip);
        strbuf_reset(&a);
        for (size_t i = 0; i < n; i++) {
            FZ_ASSERT(tokenizer_stream_push(&s, ids[i], &a) == 0);
            FZ_ASSERT(utf8_valid(a.data, a.len, NULL));
            FZ_ASSERT(tokenizer_stream_pending(&s) <= 3);
        }
        FZ_ASSERT(tokenizer_stream_flush(&s, &a) == 0);
        tokenizer_stream_deinit(&s);
        strbuf_reset(&b);
        FZ_ASSERT(tokenizer_decode(t, ids, n, !skip, &b) == 0);
        FZ_ASSERT(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        FZ_ASSERT(utf8_valid(b.data, b.len, NULL));
    }
    strbuf_deinit(&raw);
    strbuf_deinit(&want);
    strbuf_deinit(&a);
    strbuf_deinit(&b);
    free(ids);
    free(ids2);
    return 0;
}
