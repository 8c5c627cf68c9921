/* SPDX-License-Identifier: MIT */
/*
 * cli_model: opening the model a command runs on: the file given with -m (or MODEL in the
 * environment), else the embedded default, a synthetic model made on the spot (synth.h) into a
 * private temporary file that is unlinked as soon as it is mapped.
 */
#include "cli/cli_model.h"
#include "base/err.h"
#include "base/log.h"
#include "model/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_model_open(const char *cmd, const char *path, cli_model *out) {
    memset(out, 0, sizeof *out);
    int rc = kn_isa_select(&out->isa);
    if (rc)
        return cli_fail(cmd, rc);
    char tmp[256] = "";
    if (!path || !*path)
        path = getenv("MODEL");
    if (!path || !*path) {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/verity-default-%ld.gguf", dir && *dir ? dir : "/tmp",
                 (long)getpid());
        synth_opts o = {.shape = "tiny", .type = GGUF_TYPE_F32, .seed = 1};
        if ((rc = synth_write(&o, tmp)))
            return cli_fail(cmd, rc);
        path = tmp;
        log_info(
            "no model given: using the embedded default (synthetic tiny model, random weights)");
        out->is_default = true;
    }
    rc = model_load(path, out->isa, &out->m);
    if (tmp[0])
        unlink(tmp);
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
