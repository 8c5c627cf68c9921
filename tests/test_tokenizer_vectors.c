/* SPDX-License-Identifier: MIT */
/*
 * Tokenizer test vectors from llama.cpp (../shared/vocab/ggml-vocab-NAME.gguf.inp/.out): every
 * vocabulary whose .gguf is present must reproduce every expected id list exactly. The .inp file
 * holds the inputs separated by "\n__ggml_vocab_test__\n" (and ends with one); the .out file has
 * one line of space-separated ids per input. llama.cpp's test tokenizes with add_special = false
 * and parse_special = false, and so do we (the expected lists have no BOS). Each vocabulary prints
 * "vectors NAME: matched/total" and is one case; a missing .gguf is a skip with its reason.
 * Also checks that decoding the ids gives back the input (plus the SPM prefix space).
 */
#include "test.h"
#include "base/err.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *vec_path(const char *name, const char *ext) {
    static char path[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/vocab/ggml-vocab-%s.gguf%s", test_shared_dir(), name,
             ext);
    return path[k];
}

static void vec_run(const char *name) {
    const char *gpath = vec_path(name, "");
    const char *ipath = vec_path(name, ".inp");
    const char *opath = vec_path(name, ".out");
    if (access(ipath, R_OK) != 0)
        test_skip("%s not found (shared data missing)", ipath);
    if (access(gpath, R_OK) != 0)
        test_skip("%s has test vectors but no vocabulary file", name);
    size_t in_len, out_len;
    char *inp = test_read_file(ipath, &in_len);
    char *outp = test_read_file(opath, &out_len);
    T_CHECK(inp && outp);
    gguf *g;
    T_OK(gguf_open(gpath, &g));
    tokenizer *t;
    T_OK(tokenizer_load(g, &t));
    gguf_close(g);

    const char *delim = "\n__ggml_vocab_test__\n";
    size_t dl = strlen(delim);
    char *ip = inp, *op = outp;
    int total = 0, matched = 0, roundtrip_bad = 0;
    char first_fail[512] = "";
    size_t cap = 1 << 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    T_CHECK(ids);
    strbuf sb;
    strbuf_init(&sb);
    while (op < outp + out_len) {
        /* one expected line */
        char *eol = memchr(op, '\n', (size_t)(outp + out_len - op));
        if (!eol)
            eol = outp + out_len;
        *eol = 0;
        char *end = strstr(ip, delim);
        T_CHECKF(end, "%s: fewer inputs than expected lines", name);
        size_t n_text = (size_t)(end - ip);
        size_t n;
        T_OK(tokenizer_encode(t, ip, n_text, false, false, ids, cap, &n));
        int32_t want[4096];
        size_t n_want = 0;
        for (char *q = op; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q)
                break;
            T_CHECK(n_want < 4096);
            want[n_want++] = (int32_t)v;
            q = e;
        }
        total++;
        if (n == n_want && memcmp(ids, want, n * sizeof *ids) == 0) {
            matched++;
        } else if (!first_fail[0]) {
            int k = snprintf(first_fail, sizeof first_fail, "input %d '%.40s': got", total - 1, ip);
            for (size_t i = 0; i < n && i < 16 && k < 400; i++)
                k += snprintf(first_fail + k, sizeof first_fail - (size_t)k, " %d", ids[i]);
            k += snprintf(first_fail + k, sizeof first_fail - (size_t)k, " want");
            for (size_t i = 0; i < n_want && i < 16 && k < 480; i++)
                k += snprintf(first_fail + k, sizeof first_fail - (size_t)k, " %d", want[i]);
        }
        /* decode(encode(x)) == x, with the SPM prefix space */
        strbuf_reset(&sb);
        T_OK(tokenizer_decode(t, ids, n, false, &sb));
        bool spm = tokenizer_kind(t) == TOKENIZER_SPM && n_text > 0;
        const char *dec = sb.data + (spm && sb.len && sb.data[0] == ' ');
        size_t dec_len = sb.len - (size_t)(dec - sb.data);
        if (dec_len != n_text || memcmp(dec, ip, n_text) != 0)
            roundtrip_bad++;
        op = eol + 1;
        ip = end + dl;
    }
    printf("vectors %s: %d/%d inputs matched (%s, pre '%s')\n", name, matched, total,
           tokenizer_kind(t) == TOKENIZER_SPM ? "SPM" : "BPE", tokenizer_pre_name(t));
    strbuf_deinit(&sb);
    free(ids);
    tokenizer_destroy(t);
    free(inp);
    free(outp);
    T_CHECKF(matched == total, "%s: %d/%d matched; first mismatch: %s", name, matched, total,
             first_fail);
    T_CHECKF(roundtrip_bad == 0, "%s: %d inputs do not decode back to themselves", name,
             roundtrip_bad);
}

#define VEC(name)                                                                                  \
    static void t_vec_##name(void) {                                                               \
        vec_run(VEC_NAME_##name);                                                                  \
    }

#define VEC_NAME_llama_spm      "llama-spm"
#define VEC_NAME_phi_3          "phi-3"
#define VEC_NAME_gpt_2          "gpt-2"
#define VEC_NAME_deepseek_llm   "deepseek-llm"
#define VEC_NAME_deepseek_coder "deepseek-coder"
#define VEC_NAME_mpt            "mpt"
#define VEC_NAME_refact         "refact"
#define VEC_NAME_llama_bpe      "llama-bpe"
#define VEC_NAME_qwen2          "qwen2"
#define VEC_NAME_qwen35         "qwen35"
#define VEC_NAME_command_r      "command-r"
#define VEC_NAME_gemma_4        "gemma-4"
VEC(llama_spm)
VEC(phi_3)
VEC(gpt_2)
VEC(deepseek_llm)
VEC(deepseek_coder)
VEC(mpt)
VEC(refact)
VEC(llama_bpe)
VEC(qwen2)
VEC(qwen35)
VEC(command_r)
VEC(gemma_4)

int main(void) {
    test_run("tokenizer.vectors.llama-spm", t_vec_llama_spm);
    test_run("tokenizer.vectors.phi-3", t_vec_phi_3);
    test_run("tokenizer.vectors.gpt-2", t_vec_gpt_2);
    test_run("tokenizer.vectors.deepseek-llm", t_vec_deepseek_llm);
    test_run("tokenizer.vectors.deepseek-coder", t_vec_deepseek_coder);
    test_run("tokenizer.vectors.mpt", t_vec_mpt);
    test_run("tokenizer.vectors.refact", t_vec_refact);
    test_run("tokenizer.vectors.llama-bpe", t_vec_llama_bpe);
    test_run("tokenizer.vectors.qwen2", t_vec_qwen2);
    test_run("tokenizer.vectors.qwen35", t_vec_qwen35);
    test_run("tokenizer.vectors.command-r", t_vec_command_r);
    test_run("tokenizer.vectors.gemma-4", t_vec_gemma_4);
    return test_summary();
}
