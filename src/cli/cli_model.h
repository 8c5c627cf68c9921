/* SPDX-License-Identifier: MIT */
/*
 * cli_model: the model (and its tokenizer) a command runs on. See cli_model.c.
 */
#ifndef VERITY_CLI_CLI_MODEL_H
#define VERITY_CLI_CLI_MODEL_H

#include "cli/cli.h"
#include "kernels/kn.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct cli_model {
    model *m;
    tokenizer *tok;
    kn_isa isa;
    bool is_default;
} cli_model;

/* The embedded default model's GGUF image (models/stories260K.gguf, cli_default_model.c):
 * cli_default_gguf_size bytes from cli_default_gguf_data, 64-byte aligned, read-only. */
extern const unsigned char cli_default_gguf_data[];
extern const uint64_t cli_default_gguf_size;

/* Opens path (NULL or "": $MODEL, else the embedded default, stories260K, read in place from
 * the binary). On failure prints the one-line
 * error for cmd and returns its exit status (2 for bad input); 0 on success. */
int cli_model_open(const char *cmd, const char *path, cli_model *out);
void cli_model_close(cli_model *cm);

#endif
