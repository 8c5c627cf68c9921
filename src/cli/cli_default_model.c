/* SPDX-License-Identifier: MIT */
/*
 * cli_default_model: the bytes of models/stories260K.gguf (see models/README.md), placed in the
 * binary's read-only data by the assembler's .incbin, so that `verity` without -m runs a real
 * model with no file to find. The image is aligned to 64 bytes, more than any GGUF alignment the
 * file uses (32), so gguf_open_memory sees its tensors aligned exactly as in an mmapped file.
 * The path is relative to the repository root, where make runs the compiler; the Makefile lists
 * the GGUF as a prerequisite of this object so that changing the file rebuilds it.
 * Only the verity binary links this file (it is in src/cli), not the library or the tests.
 */
#include "cli/cli_model.h"

__asm__(".section .rodata\n"
        ".balign 64\n"
        ".globl cli_default_gguf_data\n"
        ".type cli_default_gguf_data, @object\n"
        "cli_default_gguf_data:\n"
        ".incbin \"models/stories260K.gguf\"\n"
        "cli_default_gguf_end:\n"
        ".size cli_default_gguf_data, cli_default_gguf_end - cli_default_gguf_data\n"
        ".balign 8\n"
        ".globl cli_default_gguf_size\n"
        ".type cli_default_gguf_size, @object\n"
        "cli_default_gguf_size:\n"
        ".quad cli_default_gguf_end - cli_default_gguf_data\n"
        ".size cli_default_gguf_size, 8\n"
        ".previous\n");
