/* SPDX-License-Identifier: MIT */
/*
 * convert: model format converters. llama2.c checkpoints (Karpathy's run.c format: a 7-int32
 * header dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative: separate
 * classifier), seq_len; then float32 weights) with their tokenizer.bin (int32 max token length;
 * per token: float32 score, int32 length, bytes) become a GGUF "llama" model with F32 tensors named
 * as llama.cpp names them and a SentencePiece vocabulary (spaces as U+2581, <unk>/<s>/</s>, byte
 * tokens typed BYTE), which reads the same as the reference converter's output.
 */
#ifndef VERITY_MODEL_CONVERT_H
#define VERITY_MODEL_CONVERT_H

/* Converts; the output is written atomically. Returns 0, ERR_IO (cannot read or write; detail
 * names the file), ERR_FORMAT (bad header or file size; detail names the field and offset). */
int convert_llama2c(const char *model_path, const char *tokenizer_path, const char *out_path);

#endif
