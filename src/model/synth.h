/* SPDX-License-Identifier: MIT */
/*
 * synth: writes deterministic random-weight models, the test and benchmark fixtures (`verity
 * synth`, and `verity bench` without -m). Weights are N(0, 0.02) from a counter-based generator
 * keyed by (seed, tensor name, element index), so a file depends only on its options; norm weights
 * are 1 + N(0, 0.02). The tokenizer is copied from another GGUF (--vocab-from) or is the built-in
 * byte-level SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
 * U+2581 and the 94 printable ASCII characters, so any text encodes (characters or byte fallback).
 */
#ifndef VERITY_MODEL_SYNTH_H
#define VERITY_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

/* Revision of what synth writes for given options; bumped whenever its output changes (a new
 * metadata key, a different template), so caches of synthesized files key on it. */
#define SYNTH_FORMAT 2

typedef struct synth_opts {
    const char *shape; /* "tiny", "small", "0.5b", "gqa" or "1b-kq" */
    const char *arch;  /* "llama" (default), "qwen2", "qwen3", "qwen3moe", "deepseek2",
                        * "deepseek32", "deepseek4" */
    int type;          /* gguf type of the weight matrices (after the fallback of
                        * quantize.h for rows the type's block does not divide) */
    bool mix;          /* the _M mix of quantize.h instead: q5_k_m if type is Q5_K, else
                        * q4_k_m (type then ignored) */
    uint64_t seed;
    const char *vocab_from; /* GGUF to copy tokenizer.* metadata from, or NULL */
    bool tied;              /* tied output (default: tiny tied, 0.5b untied) */
    bool tied_set;
    const char *rope_scaling; /* NULL, "linear" (factor 2), "llama3" (factor 8, low 1, high 4,
                                 original context 256) or "llama3-tensor" (the same factors
                                 stored as the rope_freqs.weight tensor) */
    int64_t sliding_window;   /* written as attention.sliding_window when > 0 */
    int nextn;                /* deepseek4: MTP (nextn) layers appended (0 to 4) */
} synth_opts;

/* Writes the model to path atomically. Matrices get the type (or mix) of o through
 * quant_tensor_type (quantize.h), so rows a block type does not divide use its fallback; vectors
 * and norms are F32. Returns 0, ERR_INVAL (unknown shape/arch, unsupported type), ERR_IO,
 * ERR_NOMEM, or the vocab file's error. */
int synth_write(const synth_opts *o, const char *path);

/* Normal deviate number i of stream (seed, key): deterministic, independent of call order. */
float synth_normal(uint64_t seed, uint64_t key, uint64_t i);

/* FNV-1a hash of a string, for stream keys. */
uint64_t synth_key(const char *s);

#endif
