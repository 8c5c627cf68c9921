/* SPDX-License-Identifier: MIT */
/*
 * Tokenizer tests on small vocabularies written in the test (gguf writer -> temporary file), so
 * they need no ../shared data: every loader error names its key; every supported pre-tokenizer
 * type compiles, round-trips varied text and stays linear on pathological input (long runs of one
 * character class, the inputs that make backtracking regexes quadratic): the work counted by
 * tokenizer_encode_counted (regex steps, merge steps, bytes scanned) at most 2.5 times as large
 * for twice the input, where a quadratic cost would quadruple it; no clock is read. SPM fallbacks
 * without byte tokens; LSTRIP/RSTRIP special tokens; the gguf may be closed after loading.
 */
#include "test.h"
#include "base/err.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building vocabularies ---- */

#define VB_MAX 1024

typedef struct vb {
    char *tok[VB_MAX];
    size_t len[VB_MAX];
    int32_t type[VB_MAX];
    float score[VB_MAX];
    int n;
    char *merge[VB_MAX];
    int n_merges;
} vb;

static int vb_add(vb *v, const char *s, size_t n, int32_t type) {
    T_CHECK(v->n < VB_MAX);
    v->tok[v->n] = malloc(n + 1);
    memcpy(v->tok[v->n], s, n);
    v->tok[v->n][n] = 0;
    v->len[v->n] = n;
    v->type[v->n] = type;
    v->score[v->n] = -(float)v->n;
    return v->n++;
}

static void vb_free(vb *v) {
    for (int i = 0; i < v->n; i++)
        free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++)
        free(v->merge[i]);
}

/* GPT-2's byte -> code point table. */
static uint32_t byte_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return 256 + n;
}

/* Appends the byte-level spelling of raw text s. */
static size_t byte_spell(const char *s, char *out) {
    size_t n = 0;
    for (; *s; s++)
        n += (size_t)utf8_encode(byte_cp((unsigned char)*s), out + n);
    out[n] = 0;
    return n;
}

/* A merge of two raw strings, adding the merged piece. */
static void vb_merge(vb *v, const char *l, const char *r) {
    char a[64], b[64], m[160];
    byte_spell(l, a);
    byte_spell(r, b);
    snprintf(m, sizeof m, "%s %s", a, b);
    v->merge[v->n_merges++] = strdup(m);
    char both[128];
    snprintf(both, sizeof both, "%s%s", a, b);
    vb_add(v, both, strlen(both), 1);
}

/* A byte-level BPE vocabulary: the 256 byte characters, a few merges, three specials. */
static void vb_bpe(vb *v) {
    memset(v, 0, sizeof *v);
    for (unsigned b = 0; b < 256; b++) {
        char s[4];
        int l = utf8_encode(byte_cp(b), s);
        vb_add(v, s, (size_t)l, 1);
    }
    static const char *const m[][2] = {
        {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"},     {"e", "r"}, {" ", "a"}, {"o", "r"},
        {"l", "d"}, {" ", "w"}, {" w", "or"}, {" wor", "ld"}, {" ", " "}, {"1", "2"}, {"12", "3"}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        vb_merge(v, m[i][0], m[i][1]);
    vb_add(v, "<|endoftext|>", 13, 3);
    vb_add(v, "<|im_start|>", 12, 3);
    vb_add(v, "<tool>", 6, 4);
}

/* An SPM vocabulary: <unk>, <s>, </s>, optionally the 256 byte tokens, and some pieces. */
static void vb_spm(vb *v, bool bytes) {
    memset(v, 0, sizeof *v);
    vb_add(v, "<unk>", 5, 2);
    vb_add(v, "<s>", 3, 3);
    vb_add(v, "</s>", 4, 3);
    if (bytes)
        for (unsigned b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            vb_add(v, s, 6, 6);
        }
    static const char *const p[] = {"\xe2\x96\x81",
                                    "\xe2\x96\x81t",
                                    "h",
                                    "e",
                                    "t",
                                    "he",
                                    "\xe2\x96\x81the",
                                    "\xe2\x96\x81th",
                                    "a",
                                    "b",
                                    "c",
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
                                    "\xc3\xa9"};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        vb_add(v, p[i], strlen(p[i]), 1);
    vb_add(v, "<|end|>", 7, 3);
    vb_add(v, "<tool>", 6, 4);
}

/* What to write (and what to get wrong). */
typedef struct spec {
    const char *model; /* NULL: omit the key */
    const char *pre;   /* NULL: omit */
    const char *name;  /* general.name, NULL: omit */
    bool omit_tokens, omit_merges, short_scores, tokens_not_str, types_float;
    int64_t bos; /* bos_token_id when set_bos */
    bool set_bos;
    int add_bos; /* add_bos_token: 0 omit, 1 false, 2 true */
} spec;

static const char *vb_write(const vb *v, const spec *sp) {
    static char path[512];
    static int k;
    snprintf(path, sizeof path, "%s/vocab%d.gguf", test_tmpdir(), k++);
    gguf_writer *w = gguf_writer_create();
    T_CHECK(w);
    if (sp->model)
        T_OK(gguf_writer_set_str(w, "tokenizer.ggml.model", sp->model, strlen(sp->model)));
    if (sp->pre)
        T_OK(gguf_writer_set_str(w, "tokenizer.ggml.pre", sp->pre, strlen(sp->pre)));
    if (sp->name)
        T_OK(gguf_writer_set_str(w, "general.name", sp->name, strlen(sp->name)));
    if (sp->tokens_not_str) {
        T_OK(gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_VT_INT32, v->type,
                                 (uint64_t)v->n));
    } else if (!sp->omit_tokens) {
        T_OK(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok,
                                     v->len, (uint64_t)v->n));
    }
    T_OK(gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v->score,
                             (uint64_t)(sp->short_scores ? v->n - 1 : v->n)));
    if (sp->types_float)
        T_OK(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_FLOAT32, v->score,
                                 (uint64_t)v->n));
    else
        T_OK(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v->type,
                                 (uint64_t)v->n));
    if (v->n_merges && !sp->omit_merges)
        T_OK(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge,
                                     NULL, (uint64_t)v->n_merges));
    if (sp->set_bos)
        T_OK(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)sp->bos));
    if (sp->add_bos)
        T_OK(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", sp->add_bos == 2));
    T_OK(gguf_writer_write(w, path));
    gguf_writer_destroy(w);
    return path;
}

/* Loads; returns the load's code, *out set on success. */
static int vb_load(const vb *v, const spec *sp, tokenizer **out) {
    gguf *g;
    T_OK(gguf_open(vb_write(v, sp), &g));
    int rc = tokenizer_load(g, out);
    gguf_close(g);
    return rc;
}

static tokenizer *vb_load_ok(const vb *v, const spec *sp) {
    tokenizer *t;
    T_OK(vb_load(v, sp, &t));
    return t;
}

#define SPEC(...) ((spec){__VA_ARGS__})

/* ---- loader errors ---- */

static void expect_err(const vb *v, spec sp, int code, const char *needle) {
    tokenizer *t = NULL;
    int rc = vb_load(v, &sp, &t);
    T_CHECKF(rc == code, "expected %s for '%s', got %d (%s)", err_name(code), needle, rc,
             err_detail());
    T_CHECK(t == NULL);
    T_CHECKF(strstr(err_detail(), needle), "detail '%s' does not name '%s'", err_detail(), needle);
}

static void t_load_errors(void) {
    vb v;
    vb_bpe(&v);
    expect_err(&v, SPEC(.pre = "gpt-2"), ERR_FORMAT, "tokenizer.ggml.model");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2", .omit_tokens = true), ERR_FORMAT,
               "tokenizer.ggml.tokens");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2", .tokens_not_str = true), ERR_FORMAT,
               "tokenizer.ggml.tokens");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2", .omit_merges = true), ERR_FORMAT,
               "tokenizer.ggml.merges");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2", .short_scores = true), ERR_FORMAT,
               "tokenizer.ggml.scores");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2", .types_float = true), ERR_FORMAT,
               "tokenizer.ggml.token_type");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "no-such-pre"), ERR_UNSUPPORTED, "no-such-pre");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "kimi-k2"), ERR_UNSUPPORTED, "not supported");
    expect_err(&v, SPEC(.model = "t5"), ERR_UNSUPPORTED, "'t5'");
    expect_err(&v, SPEC(.model = "bert"), ERR_UNSUPPORTED, "'bert'");
    expect_err(&v, SPEC(.model = "whatever"), ERR_UNSUPPORTED, "whatever");
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2", .add_bos = 2), ERR_FORMAT,
               "add_bos_token");
    /* an out-of-range special id is ignored, as llama.cpp does */
    tokenizer *t = vb_load_ok(
        &v, &SPEC(.model = "gpt2", .pre = "gpt-2", .bos = 4000000000ll, .set_bos = true));
    T_EQ_INT(tokenizer_bos(t), TOKENIZER_NULL);
    tokenizer_destroy(t);
    /* llama3's default add_bos without a BOS id: not added, not an error */
    t = vb_load_ok(&v, &SPEC(.model = "gpt2", .pre = "llama-bpe"));
    T_CHECK(!tokenizer_add_bos(t));
    tokenizer_destroy(t);
    t = vb_load_ok(&v, &SPEC(.model = "gpt2", .pre = "llama-bpe", .bos = 257, .set_bos = true));
    T_CHECK(tokenizer_add_bos(t));
    tokenizer_destroy(t);
    /* a duplicate token */
    vb_add(&v, "he", 2, 1);
    expect_err(&v, SPEC(.model = "gpt2", .pre = "gpt-2"), ERR_FORMAT, "duplicate token 'he'");
    vb_free(&v);

    vb_spm(&v, true);
    free(v.tok[10]);
    v.tok[10] = strdup("<0xZZ>"); /* a byte-type token that is not <0xXX> */
    expect_err(&v, SPEC(.model = "llama"), ERR_FORMAT, "tokenizer.ggml.tokens[10]");
    vb_free(&v);
}

/* ---- every pre-tokenizer ---- */

static const char *const pre_names[] = {
    "default",        "gpt-2",       "phi-2",         "jina-es",
    "jina-de",        "gigachat",    "jina-v2-es",    "jina-v2-de",
    "a.x-4.0",        "mellum",      "modern-bert",   "mpt",
    "olmo",           "jais",        "trillion",      "granite-docling",
    "exaone4",        "gpt-neox",    "llama3",        "llama-v3",
    "llama-bpe",      "falcon3",     "falcon-h1",     "pixtral",
    "midm-2.0",       "lfm2",        "jina-v5-nano",  "dbrx",
    "smaug-bpe",      "chatglm-bpe", "glm4",          "deepseek-llm",
    "deepseek-coder", "deepseek-v3", "hunyuan-dense", "joyai-llm",
    "hy_v4",          "falcon",      "starcoder",     "refact",
    "command-r",      "smollm",      "codeshell",     "exaone",
    "minerva-7b",     "mellum2",     "qwen2",         "deepseek-r1-qwen",
    "kormo",          "f2llmv2",     "megrez",        "stablelm2",
    "hunyuan",        "solar-open",  "grok-2",        "qwen35",
    "poro-chat",      "bloom",       "gpt3-finnish",  "viking",
    "tekken",         "gpt-4o",      "llama4",        "kanana2",
    "talkie",         "minimax-m2",  "chameleon",     "seed-coder",
    "bailingmoe",     "bailingmoe2", "llada-moe",     "ufakzeka",
    "laguna",         "exaone-moe",  "minicpm5",
};

static const char *const pre_texts[] = {
    "Hello world, the world's 123 4567 numbers!",
    "  indented\n\tcode() { return x->y; }\r\n\n",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 "
    "\xe3\x81\x8b\xe3\x81\xaa \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xf0\x9f\x9a\x80",
    "e\xcc\x81t\xc3\xa9 \xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80 "
    "\xc2\xa0\xe3\x80\x80\xc2\x85 'S 'll 'VE",
    "<tool>call</tool> <|endoftext|> <sentinel:12> IMGIMGABZ",
    "",
};

static uint64_t work_total(const tokenizer_work *w) {
    return w->rx_steps + w->merge_steps + w->special_bytes;
}

static void t_pre_all(void) {
    vb v;
    vb_bpe(&v);
    /* big: the length the plain encoder must handle within PCRE2's limits; small: the length
     * whose counted work is compared with twice as much */
    size_t big = (size_t)(20000 * test_scale()), small = (size_t)(2000 * test_scale());
    T_CHECK(2 * small <= big);
    char *patho = malloc(big + 8);
    T_CHECK(patho);
    const char fill[] = {' ', 'A', 'a', '1', '\n', '!', '\t'};
    /* what ends the run: a letter then a CJK character (each pre-tokenizer's letter rule splits
     * the run off), a CJK character alone (the run stays in the piece of what follows it, where
     * an end-anchored whitespace rule such as deepseek-llm's once rescanned it from every start),
     * punctuation, and nothing */
    static const char *const suffix[] = {"x\xe4\xb8\xad", "\xe4\xb8\xad", "!", ""};
    size_t cap = tokenizer_max_tokens(big + 8);
    int32_t *ids = malloc(cap * sizeof *ids), *ref = malloc(cap * sizeof *ref);
    T_CHECK(ids && ref);
    strbuf sb;
    strbuf_init(&sb);
    double worst = 0;
    const char *worst_name = "";
    char worst_fill = ' ';
    const char *worst_suffix = "";
    for (size_t p = 0; p < sizeof pre_names / sizeof *pre_names; p++) {
        tokenizer *t = vb_load_ok(
            &v, &SPEC(.model = "gpt2", .pre = pre_names[p], .bos = 256, .set_bos = true));
        for (size_t i = 0; i < sizeof pre_texts / sizeof *pre_texts; i++) {
            size_t n, len = strlen(pre_texts[i]);
            T_OK(tokenizer_encode(t, pre_texts[i], len, false, false, ids, 4096, &n));
            strbuf_reset(&sb);
            T_OK(tokenizer_decode(t, ids, n, false, &sb));
            T_CHECKF(sb.len == len && memcmp(sb.data, pre_texts[i], len) == 0,
                     "pre '%s': '%s' decodes to '%s'", pre_names[p], pre_texts[i], sb.data);
        }
        /* long runs of one class, then something else: no regex limit hit (at big bytes), and
         * linear work (counted at small and twice small bytes) */
        for (size_t f = 0; f < sizeof fill; f++) {
            for (size_t x = 0; x < sizeof suffix / sizeof *suffix; x++) {
                size_t sl = strlen(suffix[x]), n, n1;
                memset(patho, fill[f], big);
                memcpy(patho + big, suffix[x], sl);
                T_OK(tokenizer_encode(t, patho, big + sl, false, false, ids, cap, &n));
                tokenizer_work w1, w2;
                memset(patho, fill[f], small);
                memcpy(patho + small, suffix[x], sl);
                T_OK(tokenizer_encode(t, patho, small + sl, false, false, ref, cap, &n));
                T_OK(tokenizer_encode_counted(t, patho, small + sl, false, false, ids, cap, &n1,
                                              &w1));
                T_CHECKF(n1 == n && memcmp(ids, ref, n * sizeof *ids) == 0,
                         "pre '%s': the counted encode of %zu x '%c' + '%s' differs from the "
                         "plain one",
                         pre_names[p], small, fill[f], suffix[x]);
                /* the counter is live: every byte is passed over at least once */
                T_CHECKF(w1.rx_steps >= small && w1.rx_calls > 0,
                         "pre '%s': %zu x '%c' + '%s' counted only %llu regex steps in %llu calls",
                         pre_names[p], small, fill[f], suffix[x], (unsigned long long)w1.rx_steps,
                         (unsigned long long)w1.rx_calls);
                memset(patho, fill[f], 2 * small);
                memcpy(patho + 2 * small, suffix[x], sl);
                T_OK(tokenizer_encode_counted(t, patho, 2 * small + sl, false, false, ids, cap, &n,
                                              &w2));
                double ratio = (double)work_total(&w2) / (double)work_total(&w1);
                if (ratio > worst) {
                    worst = ratio;
                    worst_name = pre_names[p];
                    worst_fill = fill[f];
                    worst_suffix = suffix[x];
                }
                T_CHECKF(ratio <= 2.5,
                         "pre '%s': %zu x '%c' + '%s' costs %llu steps (regex %llu, merge %llu, "
                         "special %llu), twice as many %llu (regex %llu, merge %llu, special "
                         "%llu): %.2fx, not linear",
                         pre_names[p], small, fill[f], suffix[x],
                         (unsigned long long)work_total(&w1), (unsigned long long)w1.rx_steps,
                         (unsigned long long)w1.merge_steps, (unsigned long long)w1.special_bytes,
                         (unsigned long long)work_total(&w2), (unsigned long long)w2.rx_steps,
                         (unsigned long long)w2.merge_steps, (unsigned long long)w2.special_bytes,
                         ratio);
            }
        }
        tokenizer_destroy(t);
    }
    printf("pre-tokenizers: %zu types ok; largest work ratio for twice the pathological input "
           "%.2f (%s, '%c' + '%s')\n",
           sizeof pre_names / sizeof *pre_names, worst, worst_name, worst_fill, worst_suffix);
    strbuf_deinit(&sb);
    free(ids);
    free(ref);
    free(patho);
    vb_free(&v);
}

/* The pre-tokenizer splits on what the regex says: "default"-type digits in threes, gpt-2
 * keeps " 12345" whole (then merges "12"+"3"), starcoder splits digits singly. */
static void t_pre_splits(void) {
    vb v;
    vb_bpe(&v);
    int32_t ids[64];
    size_t n;
    tokenizer *t = vb_load_ok(&v, &SPEC(.model = "gpt2", .pre = "starcoder"));
    T_OK(tokenizer_encode(t, "123", 3, false, false, ids, 64, &n));
    T_EQ_INT(n, 3); /* \p{N} splits every digit: no "12" merge possible */
    tokenizer_destroy(t);
    t = vb_load_ok(&v, &SPEC(.model = "gpt2", .pre = "gpt-2"));
    T_OK(tokenizer_encode(t, "123", 3, false, false, ids, 64, &n));
    T_EQ_INT(n, 1); /* "12" + "3" */
    T_OK(tokenizer_encode(t, "the the", 7, false, false, ids, 64, &n));
    T_EQ_INT(n, 3); /* "the" -> t + he (no merge t+he); " the" -> Ġt + he -> Ġthe */
    tokenizer_destroy(t);
    vb_free(&v);
}

/* ---- SPM specifics ---- */

static void t_spm_fallbacks(void) {
    vb v;
    vb_spm(&v, false); /* no byte tokens */
    tokenizer *t = vb_load_ok(&v, &SPEC(.model = "llama"));
    int32_t ids[64];
    size_t n;
    /* "▁world" merges fully; "ü" is no piece and has no byte tokens: one <unk> */
    T_OK(tokenizer_encode(t, "world \xc3\xbc", 8, true, false, ids, 64, &n));
    int32_t world = tokenizer_find_piece(t, "\xe2\x96\x81world", 8);
    int32_t sp = tokenizer_find_piece(t, "\xe2\x96\x81", 3);
    T_CHECKF(n == 4 && ids[0] == 1 && ids[1] == world && ids[2] == sp && ids[3] == 0,
             "n=%zu %d %d %d %d", n, ids[0], ids[1], ids[2], ids[3]);
    tokenizer_destroy(t);
    vb_free(&v);

    vb_spm(&v, true);
    t = vb_load_ok(&v, &SPEC(.model = "llama"));
    T_OK(tokenizer_encode(t, "\xc3\xbc", 2, false, false, ids, 64, &n));
    T_CHECK(n == 3 && ids[1] == 3 + 0xC3 && ids[2] == 3 + 0xBC);
    /* control tokens are never produced by merging ordinary text: "<|end|>" stays pieces */
    T_OK(tokenizer_encode(t, "<|end|>", 7, false, false, ids, 64, &n));
    int32_t end = tokenizer_find_piece(t, "<|end|>", 7);
    for (size_t i = 0; i < n; i++)
        T_CHECK(ids[i] != end);
    T_OK(tokenizer_encode(t, "<|end|>", 7, false, true, ids, 64, &n));
    T_CHECK(n == 1 && ids[0] == end);
    /* a user-defined token is matched either way, and the text after it gets the prefix space */
    int32_t tool = tokenizer_find_piece(t, "<tool>", 6);
    T_OK(tokenizer_encode(t, "the<tool>the", 12, false, false, ids, 64, &n));
    int32_t the = tokenizer_find_piece(t, "\xe2\x96\x81the", 6);
    T_CHECKF(n == 3 && ids[0] == the && ids[1] == tool && ids[2] == the, "n=%zu", n);
    tokenizer_destroy(t);
    vb_free(&v);
}

/* general.name "Phi-3...": special tokens eat the whitespace to their right (RSTRIP), except
 * <s>, <unk> and <|endoftext|>. */
static void t_rstrip(void) {
    vb v;
    vb_spm(&v, true);
    tokenizer *t = vb_load_ok(&v, &SPEC(.model = "llama", .name = "Phi-3 mini"));
    int32_t end = tokenizer_find_piece(t, "<|end|>", 7);
    T_CHECK(tokenizer_token_attr(t, end) & TOKENIZER_ATTR_RSTRIP);
    T_CHECK(!(tokenizer_token_attr(t, 1) & TOKENIZER_ATTR_RSTRIP));
    int32_t ids[64];
    size_t n;
    T_OK(tokenizer_encode(t, "<|end|>\n \tthe", 13, false, true, ids, 64, &n));
    int32_t the = tokenizer_find_piece(t, "\xe2\x96\x81the", 6);
    T_CHECK(n == 2 && ids[0] == end && ids[1] == the);
    tokenizer_destroy(t);
    t = vb_load_ok(&v, &SPEC(.model = "llama", .name = "tiny"));
    T_OK(tokenizer_encode(t, "<|end|>\nthe", 11, false, true, ids, 64, &n));
    T_CHECK(n > 2); /* the newline stays */
    tokenizer_destroy(t);
    vb_free(&v);
}

/* add_space_prefix = false (some SPM conversions) */
static void t_spm_no_prefix(void) {
    vb v;
    vb_spm(&v, true);
    const char *path = vb_write(&v, &SPEC(.model = "llama"));
    /* rewrite with the flag: copy every key, then add it */
    gguf *g;
    T_OK(gguf_open(path, &g));
    gguf_writer *w = gguf_writer_create();
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        T_OK(gguf_writer_copy_kv(w, g, i));
    T_OK(gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false));
    char p2[600];
    snprintf(p2, sizeof p2, "%s.noprefix", path);
    T_OK(gguf_writer_write(w, p2));
    gguf_writer_destroy(w);
    gguf_close(g);
    T_OK(gguf_open(p2, &g));
    tokenizer *t;
    T_OK(tokenizer_load(g, &t));
    gguf_close(g);
    int32_t ids[64];
    size_t n;
    T_OK(tokenizer_encode(t, "the", 3, false, false, ids, 64, &n));
    T_CHECK(n == 2 && ids[0] == tokenizer_find_piece(t, "t", 1) &&
            ids[1] == tokenizer_find_piece(t, "he", 2));
    tokenizer_destroy(t);
    vb_free(&v);
}

int main(void) {
    test_run("tokenizer_synth.load_errors", t_load_errors);
    test_run("tokenizer_synth.pre_all_types", t_pre_all);
    test_run("tokenizer_synth.pre_splits", t_pre_splits);
    test_run("tokenizer_synth.spm_fallbacks", t_spm_fallbacks);
    test_run("tokenizer_synth.rstrip", t_rstrip);
    test_run("tokenizer_synth.spm_no_prefix", t_spm_no_prefix);
    return test_summary();
}
