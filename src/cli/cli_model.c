/* SPDX-License-Identifier: MIT */
/*
 * cli_model: opening the model a command runs on: the file given with -m (or MODEL in the
 * environment), else the embedded default, the real tiny model stories260K whose GGUF image is
 * linked into the binary (cli_default_model.c) and read in place, with no temporary file. The
 * synthetic random-weight models stay available through `verity synth` (and `verity bench`
 * without -m, which makes its own).
 */
#include "cli/cli_model.h"
#include "base/err.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_model_open(const char *cmd, const char *path, cli_model *out) {
    memset(out, 0, sizeof *out);
    int rc = kn_isa_select(&out->isa);
    if (rc)
        return cli_fail(cmd, rc);
    if (!path || !*path)
        path = getenv("MODEL");
    if (!path || !*path) {
        log_info("no model given: using the embedded default (stories260K, a tiny story model)");
        rc = model_load_memory(cli_default_gguf_data, (size_t)cli_default_gguf_size,
                               "<embedded stories260K>", out->isa, &out->m);
        out->is_default = true;
    } else {
        rc = model_load(path, out->isa, &out->m);
    }
    if (rc)
        return cli_fail(cmd, rc);
    rc = tokenizer_load(model_get_gguf(out->m), &out->tok);
    if (rc) {
        model_destroy(out->m);
        out->m = NULL;
        return cli_fail(cmd, rc);
    }
    return 0;
}

void cli_model_close(cli_model *cm) {
    tokenizer_destroy(cm->tok);
    model_destroy(cm->m);
    memset(cm, 0, sizeof *cm);
}
