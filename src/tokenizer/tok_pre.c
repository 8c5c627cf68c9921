/* SPDX-License-Identifier: MIT */
/*
 * tok_pre: BPE pre-tokenizers. Each `tokenizer.ggml.pre` type is a list of regular expressions
 * (the lists llama.cpp uses, taken from each model's tokenizer.json) applied in sequence: the
 * first splits the text, each next one splits every piece the previous produced. Splitting a
 * piece keeps both the matches and the gaps between them as pieces, and every piece is matched
 * as a subject of its own (so `$` and lookarounds stop at its edges). This is Hugging Face's
 * Split(behavior = Isolated) and llama.cpp's unicode_regex_split.
 *
 * Regexes run on PCRE2 in UTF + UCP mode, so \p{L}, \p{N}, \p{P}, \p{S}, \p{M} are Unicode general
 * categories. Two deliberate rewrites keep results equal to the reference tokenizers (Oniguruma
 * in Hugging Face tokenizers) while PCRE2's own definitions differ:
 *  - `\s` and `\S` are spelled out as the Unicode White_Space set that Oniguruma uses (PCRE2's
 *    UCP \s lacks U+0085). RX_WS below is that set.
 *  - deepseek-llm's `\s+$` is written `(?<!\s)\s+$`: the leftmost match is the same (it starts
 *    where the trailing whitespace run starts), but a failed start inside a long whitespace run is
 *    rejected at once instead of rescanning the run, so a long run costs O(n), not O(n^2).
 * Where llama.cpp had to approximate a regex for std::regex (the \p{Lu}/\p{Ll} classes of gpt-4o
 * and tekken), the original regex is used. Patterns are ASCII with \x{...} escapes.
 *
 * Compiled codes are immutable and shared by every thread; match data, the match context and the
 * JIT stack are per call. A regex that exceeds PCRE2's backtracking limits gives ERR_TOOLARGE.
 *
 * Counting (tokenizer_encode_counted): the same patterns are compiled again for the call with
 * PCRE2_AUTO_CALLOUT (a callout before every pattern item) and PCRE2_NO_START_OPTIMIZE (every
 * start position is tried by the matcher itself), and run on the interpreter. The callout adds
 * one per item plus the distance the subject position moved since the previous callout of the
 * same attempt (from the attempt's start for its first), so a possessive or auto-possessified
 * repeat over n characters, which makes a single callout, still counts its n bytes.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/utf8.h"
#include "tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

/* Unicode White_Space, as \s in Oniguruma. */
#define RX_WS                                                                                      \
    "\\t\\n\\x{0b}\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"    \
    "\\x{205f}\\x{3000}"
#define RX_S  "[" RX_WS "]"
#define RX_NS "[^" RX_WS "]"
/* English contractions, case-insensitive in ASCII only (llama.cpp's spelling of (?i:'s|...)). */
#define RX_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* GPT-2 */
#define RX_GPT2                                                                                    \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" RX_WS "\\p{L}\\p{N}]+|" RX_S "+(?!" RX_NS ")"
/* Llama 3 (also dbrx, smaug, chatglm4) */
#define RX_LLAMA3                                                                                  \
    RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" RX_WS                               \
             "\\p{L}\\p{N}]+[\\r\\n]*|" RX_S "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"
/* Qwen2 (single digits) */
#define RX_QWEN2                                                                                   \
    RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" RX_WS "\\p{L}\\p{N}]+[\\r\\n]*|" RX_S    \
             "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"
#define RX_QWEN35                                                                                  \
    RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" RX_WS                            \
             "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" RX_S "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"
/* CJK ranges of the deepseek pre-tokenizers */
#define RX_DS_CJK "[\\x{4e00}-\\x{9fa5}\\x{0800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+"
/* deepseek-llm's cased-letter class */
#define RX_DS_LATIN                                                                                \
    "A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}"                 \
    "\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}"                          \
    "\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}"                  \
    "\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}"                         \
    "\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}"                 \
    "\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}"                 \
    "\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}"                 \
    "\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}"                            \
    "\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}"                           \
    "\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}"                 \
    "\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}"                  \
    "\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}"                   \
    "\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}"                  \
    "\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}"                  \
    "\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}"                  \
    "\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}"                 \
    "\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}"               \
    "\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}"                              \
    "\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}"
/* deepseek-v3 main regex */
#define RX_DS3                                                                                     \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"           \
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|" RX_S "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S   \
    "+"
/* bloom / poro / viking */
#define RX_PORO                                                                                    \
    " ?[^(" RX_WS "|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{0964}\\x{06d4}\\x{060c})]+"
/* gpt-4o / llama4 (the tokenizer.json regex) */
#define RX_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RX_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RX_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER "*" RX_LOWER "+" RX_CONTR                                    \
    "?|[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER "+" RX_LOWER "*" RX_CONTR "?|\\p{N}{1,3}| ?[^" RX_WS       \
    "\\p{L}\\p{N}]+[\\r\\n/]*|" RX_S "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"
/* tekken (mistral): like gpt-4o without contractions and with single digits */
#define RX_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER "*" RX_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" RX_UPPER             \
    "+" RX_LOWER "*|\\p{N}| ?[^" RX_WS "\\p{L}\\p{N}]+[\\r\\n/]*|" RX_S "*[\\r\\n]+|" RX_S         \
    "+(?!" RX_NS ")|" RX_S "+"

static const tok_pre tok_pre_table[] = {
    {.name = "default", .rx = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {.name = "gpt-2", .rx = {RX_GPT2}},
    {.name = "llama3", .rx = {RX_LLAMA3}, .ignore_merges = true, .add_bos = true},
    {.name = "dbrx", .rx = {RX_LLAMA3}},
    {.name = "chatglm-bpe", .rx = {RX_LLAMA3}, .no_bos = true},
    {.name = "deepseek-llm",
     .rx = {"[\\r\\n]", RX_S "?[" RX_DS_LATIN "]+",
            RX_S "?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}"
                 "\\x{3000}-\\x{3002}]+",
            "(?<!" RX_S ")" RX_S "+$", RX_DS_CJK, "\\p{N}+"}},
    {.name = "deepseek-coder",
     .rx = {"[\\r\\n]", RX_S "?\\p{L}+", RX_S "?\\p{P}+", RX_DS_CJK, "\\p{N}"}},
    {.name = "deepseek-v3",
     .rx = {"\\p{N}{1,3}", "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+", RX_DS3}},
    {.name = "falcon", .rx = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"}},
    {.name = "starcoder", .rx = {"\\p{N}", RX_GPT2}},
    {.name = "qwen2", .rx = {RX_QWEN2}},
    {.name = "qwen35", .rx = {RX_QWEN35}},
    {.name = "poro-chat", .rx = {RX_PORO}},
    {.name = "viking", .rx = {RX_PORO, "\\p{N}"}},
    {.name = "tekken", .rx = {RX_TEKKEN}, .ignore_merges = true, .add_bos = true},
    {.name = "gpt-4o", .rx = {RX_GPT4O}},
    {.name = "chameleon",
     .rx = {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
            "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", RX_GPT2},
     .add_bos = true},
    {.name = "seed-coder",
     .rx = {RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^" RX_WS
                     "\\p{L}\\p{N}\\r\\n]+|" RX_S "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"}},
    {.name = "bailingmoe",
     .rx = {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
            "?[^" RX_WS "\\p{L}\\p{N}]+[\\r\\n]*|" RX_S "*[\\r\\n]|" RX_S "+(?!" RX_NS ")|" RX_S
            "+"}},
    {.name = "ufakzeka",
     .rx = {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" RX_WS "\\p{L}\\p{N}]+[\\r\\n]*|" RX_S
            "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"}},
    {.name = "laguna", .rx = {"[^\\n]+|[\\n]+", RX_QWEN2}},
    {.name = "exaone-moe",
     .rx = {RX_CONTR
            "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^" RX_WS
            "\\p{L}\\p{N}]+[\\r\\n/]?|" RX_S "*[\\r\\n]|" RX_S "+(?!" RX_NS ")|" RX_S "+"}},
    {.name = "minicpm5",
     .rx = {"\\p{N}{1,3}",
            RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^" RX_WS
                     "\\p{L}\\p{N}]+[\\r\\n]*|" RX_S "*[\\r\\n]+|" RX_S "+(?!" RX_NS ")|" RX_S "+"},
     .ignore_merges = true},
};

/* tokenizer.ggml.pre names and the table entry each uses (llama.cpp's mapping). */
static const struct {
    const char *name, *entry;
} tok_pre_alias[] = {
    {"default", "default"},
    {"gpt-2", "gpt-2"},
    {"phi-2", "gpt-2"},
    {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"},
    {"gigachat", "gpt-2"},
    {"jina-v2-es", "gpt-2"},
    {"jina-v2-de", "gpt-2"},
    {"a.x-4.0", "gpt-2"},
    {"mellum", "gpt-2"},
    {"modern-bert", "gpt-2"},
    {"mpt", "gpt-2"},
    {"olmo", "gpt-2"},
    {"jais", "gpt-2"},
    {"trillion", "gpt-2"},
    {"granite-docling", "gpt-2"},
    {"exaone4", "gpt-2"},
    {"gpt-neox", "gpt-2"}, /* not a llama.cpp name: NeoX vocabularies use GPT-2's regex */
    {"llama3", "llama3"},
    {"llama-v3", "llama3"},
    {"llama-bpe", "llama3"},
    {"falcon3", "llama3"},
    {"falcon-h1", "llama3"},
    {"pixtral", "llama3"},
    {"midm-2.0", "llama3"},
    {"lfm2", "llama3"},
    {"jina-v5-nano", "llama3"},
    {"dbrx", "dbrx"},
    {"smaug-bpe", "dbrx"},
    {"chatglm-bpe", "chatglm-bpe"},
    {"glm4", "chatglm-bpe"},
    {"deepseek-llm", "deepseek-llm"},
    {"deepseek-coder", "deepseek-coder"},
    {"deepseek-v3", "deepseek-v3"},
    {"hunyuan-dense", "deepseek-v3"},
    {"joyai-llm", "deepseek-v3"},
    {"hy_v4", "deepseek-v3"},
    {"falcon", "falcon"},
    {"starcoder", "starcoder"},
    {"refact", "starcoder"},
    {"command-r", "starcoder"},
    {"smollm", "starcoder"},
    {"codeshell", "starcoder"},
    {"exaone", "starcoder"},
    {"minerva-7b", "starcoder"},
    {"mellum2", "starcoder"},
    {"qwen2", "qwen2"},
    {"deepseek-r1-qwen", "qwen2"},
    {"kormo", "qwen2"},
    {"f2llmv2", "qwen2"},
    {"megrez", "qwen2"},
    {"stablelm2", "qwen2"},
    {"hunyuan", "qwen2"},
    {"solar-open", "qwen2"},
    {"grok-2", "qwen2"},
    {"qwen35", "qwen35"},
    {"poro-chat", "poro-chat"},
    {"bloom", "poro-chat"},
    {"gpt3-finnish", "poro-chat"},
    {"viking", "viking"},
    {"tekken", "tekken"},
    {"gpt-4o", "gpt-4o"},
    {"llama4", "gpt-4o"},
    {"kanana2", "gpt-4o"},
    {"talkie", "gpt-4o"},
    {"minimax-m2", "gpt-4o"},
    {"chameleon", "chameleon"},
    {"seed-coder", "seed-coder"},
    {"bailingmoe", "bailingmoe"},
    {"bailingmoe2", "bailingmoe"},
    {"llada-moe", "bailingmoe"},
    {"ufakzeka", "ufakzeka"},
    {"laguna", "laguna"},
    {"exaone-moe", "exaone-moe"},
    {"minicpm5", "minicpm5"},
};

/* Names llama.cpp knows that need machinery we do not have (custom splitters, raw-UTF-8 BPE,
 * separator tokens). */
static const char *const tok_pre_unsupported[] = {"kimi-k2",
                                                  "gemma4",
                                                  "granite-embed-multi-311m",
                                                  "sarvam-moe",
                                                  "afmoe",
                                                  "whitespace",
                                                  "jina-v1-en",
                                                  "jina-v2-code",
                                                  "roberta-bpe",
                                                  "jais-2",
                                                  "youtu",
                                                  "spark2_5",
                                                  "granite-embed-multi-97m",
                                                  "tiny_aya",
                                                  "cohere2moe",
                                                  "superbpe",
                                                  NULL};

static bool tok_name_eq(const char *a, size_t n, const char *b) {
    return strlen(b) == n && memcmp(a, b, n) == 0;
}

const tok_pre *tok_pre_find(const char *name, size_t len, bool *known) {
    *known = false;
    if (!name || len == 0) {
        name = "default";
        len = 7;
    }
    for (size_t i = 0; i < sizeof tok_pre_alias / sizeof *tok_pre_alias; i++) {
        if (!tok_name_eq(name, len, tok_pre_alias[i].name))
            continue;
        for (size_t j = 0; j < sizeof tok_pre_table / sizeof *tok_pre_table; j++)
            if (strcmp(tok_pre_table[j].name, tok_pre_alias[i].entry) == 0) {
                *known = true;
                return &tok_pre_table[j];
            }
    }
    for (const char *const *u = tok_pre_unsupported; *u; u++)
        if (tok_name_eq(name, len, *u))
            *known = true;
    return NULL;
}

/* The compile options of every pre-tokenizer regex. */
#define TOK_RX_OPTIONS (PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_BACKSLASH_C)
/* ...and of their instrumented copies (see the top of the file). */
#define TOK_RX_COUNT_OPTIONS (TOK_RX_OPTIONS | PCRE2_AUTO_CALLOUT | PCRE2_NO_START_OPTIMIZE)

int tok_pre_compile(tokenizer *t) {
    t->n_rx = 0;
    for (int i = 0; i < TOK_PRE_MAX_RX && t->pre->rx[i]; i++) {
        int code;
        PCRE2_SIZE at;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)t->pre->rx[i], PCRE2_ZERO_TERMINATED,
                                       TOK_RX_OPTIONS, &code, &at, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            return err_set(ERR_INTERNAL, "tokenizer: pre-tokenizer '%s' regex %d at offset %zu: %s",
                           t->pre->name, i, (size_t)at, (const char *)msg);
        }
        /* JIT is an optimisation; the interpreter gives the same matches if it is unavailable */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        t->rx[t->n_rx++] = re;
    }
    return 0;
}

void tok_pre_free(tokenizer *t) {
    for (int i = 0; i < t->n_rx; i++)
        pcre2_code_free(t->rx[i]);
    t->n_rx = 0;
}

int tok_spans_push(tok_spans *s, uint32_t off, uint32_t len) {
    if (mem_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v))
        return err_set(ERR_NOMEM, "tokenizer: out of memory");
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return 0;
}

/* Splits each span of in by re into out: matches and the gaps between them, empty ones dropped.
 * After an empty match the search retries at the same place for a non-empty one, then moves on by
 * one character (pcre2demo's rule, which is also std::regex_iterator's). */
static int tok_pre_split_one(const tokenizer *t, int ri, const pcre2_code *re, const char *text,
                             const tok_spans *in, tok_spans *out, pcre2_match_data *md,
                             pcre2_match_context *mc, uint64_t *n_calls) {
    int rc = 0;
    out->n = 0;
    for (size_t w = 0; w < in->n && rc == 0; w++) {
        const char *subj = text + in->v[w].off;
        size_t n = in->v[w].len, pos = 0, start = 0;
        uint32_t opts = 0;
        while (start <= n) {
            int m = pcre2_match(re, (PCRE2_SPTR)subj, n, start, opts | PCRE2_NO_UTF_CHECK, md, mc);
            if (n_calls)
                (*n_calls)++;
            if (m == PCRE2_ERROR_NOMATCH) {
                if (!opts)
                    break;
                opts = 0; /* no non-empty match here: step over one character */
                if (start >= n)
                    break;
                int l = utf8_seq_len((unsigned char)subj[start]);
                start += l > 0 ? (size_t)l : 1;
                continue;
            }
            if (m < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(m, msg, sizeof msg);
                bool limit = m == PCRE2_ERROR_MATCHLIMIT || m == PCRE2_ERROR_DEPTHLIMIT ||
                             m == PCRE2_ERROR_HEAPLIMIT || m == PCRE2_ERROR_JIT_STACKLIMIT ||
                             m == PCRE2_ERROR_NOMEMORY;
                return err_set(limit ? ERR_TOOLARGE : ERR_INTERNAL,
                               "tokenizer: pre-tokenizer '%s' regex %d failed at byte %zu of a "
                               "%zu-byte word: %s",
                               t->pre->name, ri, (size_t)in->v[w].off + start, n,
                               (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me < ms || me > n) /* \K can produce these; our patterns do not use it */
                return err_set(ERR_INTERNAL, "tokenizer: pre-tokenizer '%s' regex %d: bad match",
                               t->pre->name, ri);
            if (ms > pos)
                rc = tok_spans_push(out, in->v[w].off + (uint32_t)pos, (uint32_t)(ms - pos));
            if (rc == 0 && me > ms)
                rc = tok_spans_push(out, in->v[w].off + (uint32_t)ms, (uint32_t)(me - ms));
            if (rc)
                break;
            pos = me;
            start = me;
            opts = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
        }
        if (rc == 0 && pos < n)
            rc = tok_spans_push(out, in->v[w].off + (uint32_t)pos, (uint32_t)(n - pos));
    }
    return rc;
}

/* The counting callout: see the top of the file. */
typedef struct tok_rx_count {
    uint64_t steps;
    size_t last; /* subject position at the previous callout of this attempt */
} tok_rx_count;

static int tok_rx_callout(pcre2_callout_block *cb, void *data) {
    tok_rx_count *c = data;
    size_t from = (cb->callout_flags & PCRE2_CALLOUT_STARTMATCH) ? cb->start_match : c->last;
    size_t pos = cb->current_position;
    c->steps += 1 + (pos > from ? pos - from : from - pos);
    c->last = pos;
    return 0; /* carry on matching */
}

int tok_pre_split(const tokenizer *t, const char *text, size_t len, tok_spans *words,
                  tok_spans *scratch, tokenizer_work *work) {
    words->n = 0;
    if (len == 0)
        return 0;
    int rc = tok_spans_push(words, 0, (uint32_t)len);
    if (rc)
        return rc;
    pcre2_code *counted[TOK_PRE_MAX_RX] = {0};
    tok_rx_count count = {0};
    pcre2_match_data *md = pcre2_match_data_create(32, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!md || !mc || !js) {
        rc = err_set(ERR_NOMEM, "tokenizer: out of memory for regex matching");
        goto done;
    }
    pcre2_jit_stack_assign(mc, NULL, js);
    if (work) {
        for (int i = 0; i < t->n_rx; i++) {
            int code;
            PCRE2_SIZE at;
            counted[i] = pcre2_compile((PCRE2_SPTR)t->pre->rx[i], PCRE2_ZERO_TERMINATED,
                                       TOK_RX_COUNT_OPTIONS, &code, &at, NULL);
            if (!counted[i]) {
                rc = err_set(code == PCRE2_ERROR_NOMEMORY ? ERR_NOMEM : ERR_INTERNAL,
                             "tokenizer: pre-tokenizer '%s' regex %d: the counting copy does "
                             "not compile (error %d at offset %zu)",
                             t->pre->name, i, code, (size_t)at);
                goto done;
            }
        }
        pcre2_set_callout(mc, tok_rx_callout, &count);
    }
    for (int i = 0; i < t->n_rx && rc == 0; i++) {
        const pcre2_code *re = work ? counted[i] : t->rx[i];
        rc = tok_pre_split_one(t, i, re, text, words, scratch, md, mc,
                               work ? &work->rx_calls : NULL);
        if (rc == 0) {
            tok_spans tmp = *words;
            *words = *scratch;
            *scratch = tmp;
        }
    }
    if (work)
        work->rx_steps += count.steps;
done:
    for (int i = 0; i < t->n_rx; i++)
        pcre2_code_free(counted[i]);
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    return rc;
}
