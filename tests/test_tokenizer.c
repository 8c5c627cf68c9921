/* SPDX-License-Identifier: MIT */
/*
 * Tests for src/tokenizer on the real vocabularies in ../shared (each case skips when its file is
 * missing): stories260K encodings checked against an independent reference (llama2.c's encoder
 * run over tok512.bin, the same vocabulary in llama2.c's format) and a piece-by-piece comparison
 * with tok512.bin; decode(encode(x)) == x on varied text; the incremental detokenizer (held
 * multi-byte characters, invalid bytes, equality with one-shot decoding, per-stream
 * skip_special); parse_special on and off; invalid UTF-8 input; special roles and the
 * end-of-generation set; the WordPiece vocabulary rejected as unsupported; buffer-size errors;
 * concurrent encoding against a single-threaded reference; and linear cost on English text: the
 * work tokenizer_encode_counted counts for 100 KB is at most 2.5 times that for its first 50 KB
 * (no clock is read; the speed itself is measured by bench/bench_tokenize.c).
 */
#include "test.h"
#include "base/err.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAP 65536

static tokenizer *load_rel(const char *rel) {
    const char *path = test_shared_file(rel);
    gguf *g;
    T_OK(gguf_open(path, &g));
    tokenizer *t;
    T_OK(tokenizer_load(g, &t));
    gguf_close(g); /* the tokenizer must not need the file any more */
    return t;
}

static tokenizer *load_vocab(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    return load_rel(rel);
}

static size_t enc(const tokenizer *t, const char *s, size_t len, bool add_special,
                  bool parse_special, int32_t *ids) {
    size_t n;
    T_OK(tokenizer_encode(t, s, len, add_special, parse_special, ids, CAP, &n));
    return n;
}

static bool ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static bool ids_has(const int32_t *a, size_t n, int32_t id) {
    for (size_t i = 0; i < n; i++)
        if (a[i] == id)
            return true;
    return false;
}

/* ---- stories260K ---- */

static void t_stories_known(void) {
    tokenizer *t = load_rel("models/stories260K.gguf");
    T_EQ_INT(tokenizer_n_vocab(t), 512);
    T_EQ_INT(tokenizer_kind(t), TOKENIZER_SPM);
    T_EQ_INT(tokenizer_bos(t), 1);
    T_EQ_INT(tokenizer_eos(t), 2);
    T_CHECK(tokenizer_add_bos(t));
    /* expected ids from llama2.c's encode() over tok512.bin (an independent implementation) */
    static const struct {
        const char *text;
        int32_t ids[40];
        size_t n;
    } cases[] = {
        {"Once upon a time", {1, 403, 407, 261, 378}, 5},
        {"Hello world", {1, 346, 306, 414, 263, 304, 341}, 7},
        {"The quick brown fox jumps over the lazy dog.",
         {1,   291, 410, 456, 425, 417, 340, 268, 420, 327, 416, 272, 414, 444, 410,
          449, 425, 423, 427, 419, 334, 330, 265, 278, 412, 451, 422, 400, 428, 426},
         30},
        {"Lily's mom said, \"Don't worry!\"",
         {1, 317, 439, 419, 357, 336, 432, 313, 455, 289, 439, 413, 263, 304, 420, 422, 443, 436},
         18},
        {"\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80",
         {1, 410, 233, 154, 168, 233, 159, 175, 410, 243, 162, 157, 131},
         13},
        {"", {1}, 1},
    };
    int32_t ids[CAP];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t n = enc(t, cases[c].text, strlen(cases[c].text), true, false, ids);
        T_CHECKF(ids_eq(ids, n, cases[c].ids, cases[c].n), "'%s': got %zu ids, first %d %d %d",
                 cases[c].text, n, n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
    }
    T_EQ_INT(enc(t, "", 0, false, false, ids), 0);
    tokenizer_destroy(t);
}

/* tok512.bin: int32 max_token_length, then per token float score, int32 length, bytes. Pieces use
 * ' ' where the GGUF has U+2581, and the BOS/EOS texts differ; everything else must agree. */
static void t_stories_tok512(void) {
    const char *path = test_shared_file("models/tok512.bin");
    FILE *f = fopen(path, "rb");
    T_CHECK(f);
    tokenizer *t = load_rel("models/stories260K.gguf");
    int32_t maxlen;
    T_CHECK(fread(&maxlen, 4, 1, f) == 1);
    int compared = 0;
    for (int32_t id = 0; id < 512; id++) {
        float score;
        int32_t len;
        char buf[256];
        T_CHECK(fread(&score, 4, 1, f) == 1 && fread(&len, 4, 1, f) == 1);
        T_CHECK(len >= 0 && len < (int32_t)sizeof buf);
        T_CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len);
        if (id < 3)
            continue; /* <unk>, "\n<s>\n", "\n</s>\n" in llama2.c's file */
        size_t pl;
        const char *p = tokenizer_token_piece(t, id, &pl);
        char conv[256];
        size_t cn = 0;
        for (size_t i = 0; i < pl && cn < sizeof conv; i++) {
            if (i + 3 <= pl && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
                conv[cn++] = ' ';
                i += 2;
            } else {
                conv[cn++] = p[i];
            }
        }
        T_CHECKF(cn == (size_t)len && memcmp(conv, buf, cn) == 0, "token %d: '%s' vs '%.*s'", id, p,
                 (int)len, buf);
        T_CHECKF(tokenizer_token_score(t, id) == score, "token %d score", id);
        compared++;
    }
    fclose(f);
    T_EQ_INT(compared, 509);
    tokenizer_destroy(t);
}

/* ---- round trips ---- */

static const char *const rt_texts[] = {
    "Hello, world!",
    "  two leading spaces and trailing  ",
    "tabs\tand\nnewlines\r\n\n\n",
    "emoji \xf0\x9f\x9a\x80\xf0\x9f\x99\x82 family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2"
    "\x80\x8d\xf0\x9f\x91\xa7 flag \xf0\x9f\x87\xab\xf0\x9f\x87\xb7",
    "CJK \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe7\xab\xa0\xe3\x80\x82\xe4"
    "\xb8\xad\xe6\x96\x87\xef\xbc\x8c\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
    "combining e\xcc\x81 a\xcc\x88 n\xcc\x83 Z\xcd\x91\xcd\x92\xcd\x93 \xe0\xa4\xb9\xe0\xa4\xbf",
    "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac \xd0\xa0\xd1\x83\xd1\x81\xd1"
    "\x81\xd0\xba\xd0\xb8\xd0\xb9 \xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xe0\xb9"
    "\x84\xe0\xb8\x97\xe0\xb8\xa2",
    "math \xe2\x88\x91\xe2\x88\xab\xe2\x88\x9a \xe2\x89\xa4 \xe2\x89\xa5 1+1=2",
    "code: int main(void) { return 0; } // x->y && z || !w",
    "nbsp\xc2\xa0ideographic\xe3\x80\x80space nel\xc2\x85 zwsp a\xe2\x80\x8b"
    "b",
    "digits 1 12 123 1234 12345 3.14159 1,000,000",
    "contractions 's 're 'LL Don't I'M we've",
    "ctrl \x01\x02\x7f bell\x07 esc\x1b[0m",
    "<s> </s> <unk> <|endoftext|> <|im_end|> [PAD] <pad>",
    "a",
    " ",
    "\n",
};

/* SPM decoding gives the prefix space back; everything else must be byte-identical. */
static void roundtrip_vocab(const char *name) {
    tokenizer *t = load_vocab(name);
    int32_t ids[CAP];
    strbuf sb;
    strbuf_init(&sb);
    for (size_t i = 0; i < sizeof rt_texts / sizeof *rt_texts; i++) {
        const char *x = rt_texts[i];
        size_t n = enc(t, x, strlen(x), false, false, ids);
        strbuf_reset(&sb);
        T_OK(tokenizer_decode(t, ids, n, false, &sb));
        const char *d = sb.data;
        if (tokenizer_kind(t) == TOKENIZER_SPM) {
            T_CHECKF(sb.len > 0 && d[0] == ' ', "%s: no prefix space in '%s'", name, d);
            d++;
        }
        T_CHECKF(strcmp(d, x) == 0, "%s: '%s' decodes to '%s'", name, x, d);
    }
    strbuf_deinit(&sb);
    tokenizer_destroy(t);
}

static void t_rt_llama_spm(void) {
    roundtrip_vocab("llama-spm");
}
static void t_rt_phi3(void) {
    roundtrip_vocab("phi-3");
}
static void t_rt_baichuan(void) {
    roundtrip_vocab("baichuan");
}
static void t_rt_gpt2(void) {
    roundtrip_vocab("gpt-2");
}
static void t_rt_deepseek_llm(void) {
    roundtrip_vocab("deepseek-llm");
}
static void t_rt_deepseek_coder(void) {
    roundtrip_vocab("deepseek-coder");
}
static void t_rt_mpt(void) {
    roundtrip_vocab("mpt");
}
static void t_rt_refact(void) {
    roundtrip_vocab("refact");
}
static void t_rt_neox(void) {
    roundtrip_vocab("gpt-neox");
}

/* ---- incremental detokenizer ---- */

static int32_t piece_id(const tokenizer *t, const char *piece) {
    int32_t id = tokenizer_find_piece(t, piece, strlen(piece));
    T_CHECKF(id != TOKENIZER_NULL, "no piece '%s'", piece);
    return id;
}

static void t_stream_emoji_bytes(void) {
    tokenizer *t = load_vocab("llama-spm");
    /* "🚀" is not a piece of the llama vocabulary: it encodes as its four byte tokens */
    int32_t ids[CAP];
    size_t n = enc(t, "\xf0\x9f\x9a\x80", 4, false, false, ids);
    const int32_t want[] = {piece_id(t, "\xe2\x96\x81"), piece_id(t, "<0xF0>"),
                            piece_id(t, "<0x9F>"), piece_id(t, "<0x9A>"), piece_id(t, "<0x80>")};
    T_CHECK(ids_eq(ids, n, want, 5));
    tokenizer_stream s;
    tokenizer_stream_init(&s, t, true);
    strbuf sb;
    strbuf_init(&sb);
    T_OK(tokenizer_stream_push(&s, ids[0], &sb));
    T_CHECK(strcmp(sb.data, " ") == 0);
    for (size_t i = 1; i < 4; i++) {
        T_OK(tokenizer_stream_push(&s, ids[i], &sb));
        T_CHECKF(sb.len == 1, "after %zu byte tokens the output is %zu bytes", i, sb.len);
        T_EQ_INT(tokenizer_stream_pending(&s), i);
    }
    T_OK(tokenizer_stream_push(&s, ids[4], &sb));
    T_CHECK(strcmp(sb.data, " \xf0\x9f\x9a\x80") == 0);
    T_EQ_INT(tokenizer_stream_pending(&s), 0);
    T_OK(tokenizer_stream_flush(&s, &sb));
    T_CHECK(strcmp(sb.data, " \xf0\x9f\x9a\x80") == 0);
    /* a bad id leaves the stream as it was */
    T_EQ_INT(tokenizer_stream_push(&s, 999999, &sb), ERR_RANGE);
    T_EQ_INT(tokenizer_stream_push(&s, -5, &sb), ERR_RANGE);
    tokenizer_stream_deinit(&s);
    strbuf_deinit(&sb);
    tokenizer_destroy(t);
}

/* Byte tokens that never complete: each maximal ill-formed subpart becomes one U+FFFD, as soon
 * as a later byte shows it cannot complete, or at flush. */
static void t_stream_invalid(void) {
    tokenizer *t = load_vocab("llama-spm");
    static const struct {
        const char *bytes[6];
        const char *want;       /* after all pushes, before flush */
        const char *want_flush; /* after flush */
    } cases[] = {
        {{"<0xF0>", "<0x9F>", "a"},
         "\xef\xbf\xbd"
         "a",
         "\xef\xbf\xbd"
         "a"},
        {{"<0xF0>", "<0x9F>"}, "", "\xef\xbf\xbd"},
        {{"<0x80>"}, "\xef\xbf\xbd", "\xef\xbf\xbd"},
        {{"<0xE0>", "<0x80>"}, "\xef\xbf\xbd\xef\xbf\xbd", "\xef\xbf\xbd\xef\xbf\xbd"},
        {{"<0xED>", "<0xA0>", "<0x80>"},
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {{"<0xF4>", "<0x90>"}, "\xef\xbf\xbd\xef\xbf\xbd", "\xef\xbf\xbd\xef\xbf\xbd"},
        {{"<0xC0>", "<0xAF>"}, "\xef\xbf\xbd\xef\xbf\xbd", "\xef\xbf\xbd\xef\xbf\xbd"},
        {{"<0xE2>", "<0x82>", "<0xE2>", "<0x82>", "<0xAC>"},
         "\xef\xbf\xbd\xe2\x82\xac",
         "\xef\xbf\xbd\xe2\x82\xac"},
        {{"<0xC3>", "<0xA9>"}, "\xc3\xa9", "\xc3\xa9"},
    };
    strbuf a, b;
    strbuf_init(&a);
    strbuf_init(&b);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int32_t ids[8];
        size_t n = 0;
        for (; n < 6 && cases[c].bytes[n]; n++)
            ids[n] = piece_id(t, cases[c].bytes[n]);
        tokenizer_stream s;
        tokenizer_stream_init(&s, t, true);
        strbuf_reset(&a);
        for (size_t i = 0; i < n; i++) {
            T_OK(tokenizer_stream_push(&s, ids[i], &a));
            T_CHECK(utf8_valid(a.data, a.len, NULL));
        }
        T_CHECKF(strcmp(a.data, cases[c].want) == 0, "case %zu before flush", c);
        T_OK(tokenizer_stream_flush(&s, &a));
        T_CHECKF(strcmp(a.data, cases[c].want_flush) == 0, "case %zu after flush", c);
        strbuf_reset(&b);
        T_OK(tokenizer_decode(t, ids, n, false, &b));
        T_CHECKF(strcmp(a.data, b.data) == 0, "case %zu: one-shot differs", c);
    }
    strbuf_deinit(&a);
    strbuf_deinit(&b);
    tokenizer_destroy(t);
}

/* Streaming equals one-shot decoding and never emits invalid UTF-8, on every round-trip text and
 * random byte strings, for each vocabulary kind. */
static void stream_vs_oneshot(const char *name) {
    tokenizer *t = load_vocab(name);
    int32_t ids[CAP];
    strbuf a, b;
    strbuf_init(&a);
    strbuf_init(&b);
    unsigned seed = 12345;
    for (int round = 0; round < 200; round++) {
        char text[512];
        size_t len;
        if (round < (int)(sizeof rt_texts / sizeof *rt_texts)) {
            len = strlen(rt_texts[round]);
            memcpy(text, rt_texts[round], len);
        } else {
            len = (size_t)(seed % 200);
            for (size_t i = 0; i < len; i++) {
                seed = seed * 1103515245u + 12345u;
                text[i] = (char)(seed >> 16);
            }
        }
        size_t n = enc(t, text, len, round & 1, round & 2, ids);
        for (int skip = 0; skip < 2; skip++) {
            tokenizer_stream s;
            tokenizer_stream_init(&s, t, skip);
            strbuf_reset(&a);
            for (size_t i = 0; i < n; i++) {
                T_OK(tokenizer_stream_push(&s, ids[i], &a));
                T_CHECKF(utf8_valid(a.data, a.len, NULL), "%s: invalid UTF-8 after token %zu", name,
                         i);
            }
            T_OK(tokenizer_stream_flush(&s, &a));
            strbuf_reset(&b);
            T_OK(tokenizer_decode(t, ids, n, !skip, &b));
            T_CHECKF(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
                     "%s: round %d: streaming differs from one-shot", name, round);
            T_CHECK(utf8_valid(b.data, b.len, NULL));
        }
    }
    strbuf_deinit(&a);
    strbuf_deinit(&b);
    tokenizer_destroy(t);
}

static void t_stream_oneshot_spm(void) {
    stream_vs_oneshot("llama-spm");
}
static void t_stream_oneshot_bpe(void) {
    stream_vs_oneshot("gpt-2");
}
static void t_stream_oneshot_deepseek(void) {
    stream_vs_oneshot("deepseek-llm");
}

/* skip_special is per stream: two requests sharing a tokenizer, one skipping special tokens and
 * one not, interleaved token by token, each see their own flag. */
static void t_skip_special(void) {
    tokenizer *t = load_vocab("phi-3");
    int32_t ids[CAP];
    const char *chat = "<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>";
    size_t n = enc(t, chat, strlen(chat), true, true, ids);
    T_CHECK(n > 4 && ids[0] == tokenizer_bos(t));
    int32_t end = piece_id(t, "<|end|>");
    T_CHECK(ids_has(ids, n, end));
    T_CHECK(tokenizer_is_control(t, end));
    T_CHECK(tokenizer_is_eog(t, end));
    tokenizer_stream skip, keep;
    tokenizer_stream_init(&skip, t, true);
    tokenizer_stream_init(&keep, t, false);
    strbuf a, b;
    strbuf_init(&a);
    strbuf_init(&b);
    for (size_t i = 0; i < n; i++) {
        T_OK(tokenizer_stream_push(&skip, ids[i], &a));
        T_OK(tokenizer_stream_push(&keep, ids[i], &b));
    }
    T_OK(tokenizer_stream_flush(&skip, &a));
    T_OK(tokenizer_stream_flush(&keep, &b));
    /* Phi-3's special tokens eat the newline after them (RSTRIP), and the text after a special
     * token gets the SPM prefix space */
    T_CHECKF(strcmp(a.data, " Hi Hello!") == 0, "skip: '%s'", a.data);
    T_CHECKF(strcmp(b.data, "<s><|user|> Hi<|end|><|assistant|> Hello!<|end|>") == 0, "keep: '%s'",
             b.data);
    size_t len;
    T_CHECK(tokenizer_token_text(t, end, false, &len) && len == 0);
    T_CHECK(tokenizer_token_text(t, end, true, &len) && len == 7);
    char buf[16];
    T_OK(tokenizer_token_to_text(t, end, true, buf, sizeof buf, &len));
    T_CHECK(strcmp(buf, "<|end|>") == 0);
    T_EQ_INT(tokenizer_token_to_text(t, end, true, buf, 3, &len), ERR_FULL);
    T_EQ_INT(len, 7);
    T_EQ_INT(tokenizer_token_to_text(t, -1, true, buf, sizeof buf, &len), ERR_RANGE);
    strbuf_deinit(&a);
    strbuf_deinit(&b);
    tokenizer_destroy(t);
}

/* ---- special tokens in text ---- */

static void t_parse_special(void) {
    tokenizer *t = load_vocab("gpt-2");
    int32_t ids[CAP], ids2[CAP];
    const char *x = "Hello<|endoftext|>world";
    size_t n = enc(t, x, strlen(x), false, true, ids);
    const int32_t want[] = {15496, 50256, 6894};
    T_CHECK(ids_eq(ids, n, want, 3));
    n = enc(t, x, strlen(x), false, false, ids);
    T_CHECK(n > 3 && !ids_has(ids, n, 50256));
    tokenizer_destroy(t);

    t = load_vocab("llama-spm");
    x = "<s>Hi</s>";
    n = enc(t, x, strlen(x), false, true, ids);
    size_t n2 = enc(t, "Hi", 2, false, false, ids2);
    /* after a special token the text gets the prefix space again */
    T_CHECK(n == n2 + 2 && ids[0] == 1 && ids[n - 1] == 2 && ids_eq(ids + 1, n - 2, ids2, n2));
    n = enc(t, x, strlen(x), false, false, ids);
    T_CHECK(!ids_has(ids, n, 1) && !ids_has(ids, n, 2));
    /* with add_special the BOS comes first, then the parsed one */
    n = enc(t, x, strlen(x), true, true, ids);
    T_CHECK(n > 2 && ids[0] == 1 && ids[1] == 1);
    tokenizer_destroy(t);

    /* user-defined tokens (NeoX's space runs) are matched even without parse_special */
    t = load_vocab("mpt");
    int32_t two = piece_id(t, "  ");
    T_CHECK(tokenizer_token_attr(t, two) & TOKENIZER_ATTR_USER_DEFINED);
    n = enc(t, "a  b", 4, false, false, ids);
    T_CHECK(ids_has(ids, n, two));
    tokenizer_destroy(t);

    t = load_vocab("deepseek-coder");
    int32_t eot = piece_id(t, "<|EOT|>");
    n = enc(t, "x<|EOT|>", 8, false, false, ids);
    T_CHECK(n == 2 && ids[1] == eot);
    tokenizer_destroy(t);
}

/* ---- invalid UTF-8 ---- */

static void t_invalid_utf8(void) {
    tokenizer *t = load_vocab("gpt-2");
    int32_t ids[CAP], ids2[CAP];
    strbuf sb;
    strbuf_init(&sb);
    /* BPE: every invalid byte is U+FFFD */
    size_t n = enc(t,
                   "a\xff"
                   "b",
                   3, false, false, ids);
    size_t n2 = enc(t,
                    "a\xef\xbf\xbd"
                    "b",
                    5, false, false, ids2);
    T_CHECK(ids_eq(ids, n, ids2, n2));
    n = enc(t, "x\xe2\x82", 3, false, false, ids);
    n2 = enc(t, "x\xef\xbf\xbd\xef\xbf\xbd", 7, false, false, ids2);
    T_CHECK(ids_eq(ids, n, ids2, n2));
    n = enc(t, "\xc0\xaf\xed\xa0\x80", 5, false, false, ids); /* overlong, surrogate */
    T_OK(tokenizer_decode(t, ids, n, false, &sb));
    T_CHECK(strcmp(sb.data, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") == 0);
    tokenizer_destroy(t);

    /* SPM: an invalid byte is its own character and becomes its byte token */
    t = load_vocab("llama-spm");
    n = enc(t, "\xff", 1, false, false, ids);
    T_CHECK(n == 2 && ids[0] == piece_id(t, "\xe2\x96\x81") && ids[1] == piece_id(t, "<0xFF>"));
    n = enc(t,
            "\xe2\x82"
            "A",
            3, false, false, ids);
    T_CHECK(ids_has(ids, n, piece_id(t, "<0xE2>")) && ids_has(ids, n, piece_id(t, "<0x82>")));
    strbuf_reset(&sb);
    T_OK(tokenizer_decode(t, ids, n, false, &sb));
    T_CHECKF(strcmp(sb.data, " \xef\xbf\xbd"
                             "A") == 0,
             "'%s'", sb.data);
    tokenizer_destroy(t);
    strbuf_deinit(&sb);
}

/* ---- roles, EOG, errors ---- */

static void t_roles(void) {
    tokenizer *t = load_vocab("llama-spm");
    T_EQ_INT(tokenizer_bos(t), 1);
    T_EQ_INT(tokenizer_eos(t), 2);
    T_EQ_INT(tokenizer_special(t, TOKENIZER_SPECIAL_UNK), 0);
    T_CHECK(tokenizer_is_eog(t, 2) && !tokenizer_is_eog(t, 1) && !tokenizer_is_eog(t, 100));
    T_CHECK(!tokenizer_is_eog(t, -1) && !tokenizer_is_eog(t, 1 << 30));
    T_CHECK(tokenizer_is_control(t, 1) && !tokenizer_is_control(t, 100));
    T_CHECK(tokenizer_token_attr(t, 3) & TOKENIZER_ATTR_BYTE);
    T_CHECK(tokenizer_token_piece(t, 32000, NULL) == NULL);
    size_t len;
    T_CHECK(strcmp(tokenizer_token_piece(t, 15043, &len), "\xe2\x96\x81Hello") == 0 && len == 8);
    T_CHECK(strcmp(tokenizer_pre_name(t), "") == 0);
    tokenizer_destroy(t);

    t = load_vocab("gpt-2");
    T_EQ_INT(tokenizer_eot(t), 50256); /* found by its text */
    T_CHECK(tokenizer_is_eog(t, 50256));
    T_CHECK(!tokenizer_add_bos(t));
    T_CHECK(strcmp(tokenizer_pre_name(t), "gpt-2") == 0);
    tokenizer_destroy(t);

    t = load_vocab("phi-3");
    T_EQ_INT(tokenizer_eos(t), 32000);
    int32_t eog[] = {2, 32000, 32007}; /* </s>, <|endoftext|>, <|end|> */
    for (size_t i = 0; i < 3; i++)
        T_CHECKF(tokenizer_is_eog(t, eog[i]) && tokenizer_is_control(t, eog[i]), "phi-3 %d",
                 eog[i]);
    T_CHECK(!tokenizer_is_eog(t, 32001)); /* <|assistant|> */
    tokenizer_destroy(t);

    t = load_vocab("deepseek-coder");
    T_EQ_INT(tokenizer_special(t, TOKENIZER_SPECIAL_FIM_PRE), piece_id(t, "<\xef\xbd\x9c"
                                                                          "fim\xe2\x96\x81"
                                                                          "begin\xef\xbd\x9c>"));
    T_EQ_INT(tokenizer_special(t, TOKENIZER_SPECIAL_FIM_SUF),
             piece_id(t, "<\xef\xbd\x9c"
                         "fim\xe2\x96\x81hole\xef\xbd\x9c>"));
    T_EQ_INT(tokenizer_special(t, TOKENIZER_SPECIAL_FIM_MID), piece_id(t, "<\xef\xbd\x9c"
                                                                          "fim\xe2\x96\x81"
                                                                          "end\xef\xbd\x9c>"));
    T_EQ_INT(tokenizer_eot(t), tokenizer_eos(t));
    T_CHECK(tokenizer_add_bos(t));
    T_EQ_INT(tokenizer_special(t, TOKENIZER_SPECIAL_COUNT), TOKENIZER_NULL);
    tokenizer_destroy(t);
}

static void t_bert_unsupported(void) {
    const char *path = test_shared_file("vocab/ggml-vocab-bert-bge.gguf");
    gguf *g;
    T_OK(gguf_open(path, &g));
    tokenizer *t = (tokenizer *)1;
    T_EQ_INT(tokenizer_load(g, &t), ERR_UNSUPPORTED);
    T_CHECK(t == NULL);
    T_CHECKF(strstr(err_detail(), "'bert'") && strstr(err_detail(), "not supported"), "%s",
             err_detail());
    gguf_close(g);
}

static void t_buffer_errors(void) {
    tokenizer *t = load_vocab("gpt-2");
    int32_t all[CAP], few[3];
    const char *x = "The quick brown fox jumps over the lazy dog";
    size_t n_all = enc(t, x, strlen(x), false, false, all), n;
    T_EQ_INT(tokenizer_encode(t, x, strlen(x), false, false, few, 3, &n), ERR_FULL);
    T_EQ_INT(n, n_all);
    T_CHECK(memcmp(few, all, sizeof few) == 0);
    T_CHECK(n_all <= tokenizer_max_tokens(strlen(x)));
    T_EQ_INT(tokenizer_encode(t, NULL, 0, false, false, few, 0, &n), 0);
    T_EQ_INT(n, 0);
    strbuf sb;
    strbuf_init(&sb);
    int32_t bad[] = {15496, 70000};
    T_EQ_INT(tokenizer_decode(t, bad, 2, false, &sb), ERR_RANGE);
    T_CHECK(strstr(err_detail(), "70000") != NULL);
    T_CHECK(strcmp(sb.data, "Hello") == 0);
    strbuf_deinit(&sb);
    tokenizer_destroy(t);
}

/* ---- concurrency and speed ---- */

/* Concurrent encoding against a single-threaded reference: the reference ids of every text (with
 * and without parse_special) are computed first, on one thread, before any worker starts; then 4
 * threads encode the texts 200 times each in different orders and every result must equal its
 * reference. (Comparing the threads with each other would miss state that every thread corrupts
 * the same way.) */
#define THR_N   4
#define THR_CAP 4096
#define N_RT    (sizeof rt_texts / sizeof *rt_texts)

typedef struct thr_ref {
    int32_t ids[2][THR_CAP]; /* [parse_special] */
    size_t n[2];
} thr_ref;

typedef struct thr_arg {
    const tokenizer *t;
    const thr_ref *ref; /* [N_RT], read-only while the threads run */
    int seed;
    int bad;         /* mismatches */
    char first[160]; /* the first one */
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    int32_t *ids = malloc(THR_CAP * sizeof *ids);
    if (!ids) {
        a->bad++;
        snprintf(a->first, sizeof a->first, "out of memory");
        return NULL;
    }
    for (int r = 0; r < 200; r++) {
        size_t ti = (size_t)(r + a->seed) % N_RT;
        int ps = r & 1;
        const char *x = rt_texts[ti];
        size_t n = 0;
        int rc = tokenizer_encode(a->t, x, strlen(x), true, ps, ids, THR_CAP, &n);
        if (rc || !ids_eq(ids, n, a->ref[ti].ids[ps], a->ref[ti].n[ps])) {
            if (!a->bad++)
                snprintf(a->first, sizeof a->first,
                         "round %d, text %zu, parse_special %d: rc %d, %zu ids, reference %zu", r,
                         ti, ps, rc, n, a->ref[ti].n[ps]);
        }
    }
    free(ids);
    return NULL;
}

static void t_threads(void) {
    tokenizer *t = load_vocab("deepseek-llm");
    thr_ref *ref = calloc(N_RT, sizeof *ref);
    T_CHECK(ref);
    for (size_t i = 0; i < N_RT; i++)
        for (int ps = 0; ps < 2; ps++)
            T_OK(tokenizer_encode(t, rt_texts[i], strlen(rt_texts[i]), true, ps, ref[i].ids[ps],
                                  THR_CAP, &ref[i].n[ps]));
    pthread_t th[THR_N];
    thr_arg args[THR_N];
    for (int i = 0; i < THR_N; i++) {
        args[i] = (thr_arg){.t = t, .ref = ref, .seed = i};
        T_CHECK(pthread_create(&th[i], NULL, thr_main, &args[i]) == 0);
    }
    for (int i = 0; i < THR_N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THR_N; i++)
        T_CHECKF(args[i].bad == 0,
                 "thread %d: %d of 200 encodes differ from the single-threaded "
                 "reference; first: %s",
                 i, args[i].bad, args[i].first);
    free(ref);
    tokenizer_destroy(t);
}

/* cap bytes (at most) of English-like prose, from a fixed word pool with a fixed generator: a
 * shorter text is a prefix of a longer one. */
static char *english_text(size_t cap, size_t *len) {
    static const char *const words[] = {"the",
                                        "of",
                                        "and",
                                        "to",
                                        "in",
                                        "is",
                                        "that",
                                        "for",
                                        "it",
                                        "as",
                                        "was",
                                        "with",
                                        "be",
                                        "by",
                                        "on",
                                        "not",
                                        "he",
                                        "I",
                                        "this",
                                        "are",
                                        "or",
                                        "his",
                                        "from",
                                        "at",
                                        "which",
                                        "but",
                                        "have",
                                        "an",
                                        "had",
                                        "they",
                                        "you",
                                        "were",
                                        "their",
                                        "one",
                                        "all",
                                        "we",
                                        "can",
                                        "her",
                                        "has",
                                        "there",
                                        "been",
                                        "if",
                                        "more",
                                        "when",
                                        "will",
                                        "would",
                                        "who",
                                        "so",
                                        "no",
                                        "government",
                                        "information",
                                        "development",
                                        "tokenizer",
                                        "inference",
                                        "deterministic",
                                        "Once",
                                        "upon",
                                        "time",
                                        "little",
                                        "girl",
                                        "named",
                                        "Lily",
                                        "She",
                                        "loved",
                                        "play",
                                        "outside",
                                        "park",
                                        "\"quoted\"",
                                        "(parenthesised)",
                                        "don't",
                                        "it's",
                                        "we'll",
                                        "1984",
                                        "3.14",
                                        "e-mail",
                                        "U.S.",
                                        "well-known"};
    char *s = malloc(cap + 64);
    size_t n = 0;
    unsigned seed = 7;
    int in_sentence = 0;
    while (n < cap) {
        seed = seed * 1664525u + 1013904223u;
        const char *w = words[(seed >> 8) % (sizeof words / sizeof *words)];
        size_t wl = strlen(w);
        if (n + wl + 3 > cap)
            break;
        memcpy(s + n, w, wl);
        n += wl;
        in_sentence++;
        if (in_sentence > 8 && (seed >> 20) % 5 == 0) {
            s[n++] = (seed >> 24) % 3 ? '.' : ',';
            if ((seed >> 26) % 7 == 0)
                s[n++] = '\n';
            in_sentence = 0;
        }
        s[n++] = ' ';
    }
    *len = n;
    return s;
}

static uint64_t work_total(const tokenizer_work *w) {
    return w->rx_steps + w->merge_steps + w->special_bytes;
}

/* Encoding cost grows linearly with English text: the counted work of 100 KB is at most 2.5 times
 * that of its first 50 KB (a quadratic cost would make it 4 times). The counted encode must also
 * give the plain encode's ids. */
static void linear_vocab(const char *name) {
    tokenizer *t = load_vocab(name);
    size_t len1, len2;
    char *text = english_text(102400, &len2);
    char *half = english_text(51200, &len1);
    T_CHECK(text && half && len1 < len2 && memcmp(text, half, len1) == 0);
    size_t cap = tokenizer_max_tokens(len2), n = 0, n2 = 0;
    int32_t *ids = malloc(cap * sizeof *ids), *ref = malloc(cap * sizeof *ref);
    T_CHECK(ids && ref);
    tokenizer_work w1, w2;
    T_OK(tokenizer_encode_counted(t, half, len1, true, false, ids, cap, &n, &w1));
    T_OK(tokenizer_encode_counted(t, text, len2, true, false, ids, cap, &n2, &w2));
    size_t nr;
    T_OK(tokenizer_encode(t, text, len2, true, false, ref, cap, &nr));
    T_CHECKF(ids_eq(ids, n2, ref, nr), "%s: the counted encode differs from the plain one", name);
    T_CHECKF(w2.merge_steps >= n2 - 1 &&
                 (tokenizer_kind(t) == TOKENIZER_SPM || w2.rx_steps >= len2),
             "%s: the work counter is not live: %llu regex steps, %llu merge steps for %zu "
             "bytes, %zu tokens",
             name, (unsigned long long)w2.rx_steps, (unsigned long long)w2.merge_steps, len2, n2);
    double ratio = (double)work_total(&w2) / (double)work_total(&w1);
    printf("work %s: %zu bytes -> %llu steps (regex %llu, merge %llu, special %llu); %zu bytes "
           "-> %.2fx\n",
           name, len1, (unsigned long long)work_total(&w1), (unsigned long long)w1.rx_steps,
           (unsigned long long)w1.merge_steps, (unsigned long long)w1.special_bytes, len2, ratio);
    T_CHECKF(ratio <= 2.5 * (double)len2 / (2.0 * (double)len1),
             "%s: %zu bytes cost %llu steps, %zu bytes %llu: %.2fx, not linear", name, len1,
             (unsigned long long)work_total(&w1), len2, (unsigned long long)work_total(&w2), ratio);
    free(ids);
    free(ref);
    free(half);
    free(text);
    tokenizer_destroy(t);
}

static void t_linear_gpt2(void) {
    linear_vocab("gpt-2");
}
static void t_linear_spm(void) {
    linear_vocab("llama-spm");
}
static void t_linear_deepseek(void) {
    linear_vocab("deepseek-llm");
}

int main(void) {
    test_run("tokenizer.stories260K_known", t_stories_known);
    test_run("tokenizer.stories260K_vs_tok512", t_stories_tok512);
    test_run("tokenizer.roundtrip.llama-spm", t_rt_llama_spm);
    test_run("tokenizer.roundtrip.phi-3", t_rt_phi3);
    test_run("tokenizer.roundtrip.baichuan", t_rt_baichuan);
    test_run("tokenizer.roundtrip.gpt-2", t_rt_gpt2);
    test_run("tokenizer.roundtrip.deepseek-llm", t_rt_deepseek_llm);
    test_run("tokenizer.roundtrip.deepseek-coder", t_rt_deepseek_coder);
    test_run("tokenizer.roundtrip.mpt", t_rt_mpt);
    test_run("tokenizer.roundtrip.refact", t_rt_refact);
    test_run("tokenizer.roundtrip.gpt-neox", t_rt_neox);
    test_run("tokenizer.stream_emoji_bytes", t_stream_emoji_bytes);
    test_run("tokenizer.stream_invalid", t_stream_invalid);
    test_run("tokenizer.stream_vs_oneshot.spm", t_stream_oneshot_spm);
    test_run("tokenizer.stream_vs_oneshot.bpe", t_stream_oneshot_bpe);
    test_run("tokenizer.stream_vs_oneshot.deepseek", t_stream_oneshot_deepseek);
    test_run("tokenizer.skip_special_per_stream", t_skip_special);
    test_run("tokenizer.parse_special", t_parse_special);
    test_run("tokenizer.invalid_utf8", t_invalid_utf8);
    test_run("tokenizer.roles_and_eog", t_roles);
    test_run("tokenizer.bert_unsupported", t_bert_unsupported);
    test_run("tokenizer.buffer_errors", t_buffer_errors);
    test_run("tokenizer.threads", t_threads);
    test_run("tokenizer.linear.gpt-2", t_linear_gpt2);
    test_run("tokenizer.linear.llama-spm", t_linear_spm);
    test_run("tokenizer.linear.deepseek-llm", t_linear_deepseek);
    return test_summary();
}
