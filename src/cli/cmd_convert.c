/* SPDX-License-Identifier: MIT */
/*
 * cmd_convert: `verity convert llama2c --model MODEL.bin --tokenizer TOKENIZER.bin -o OUT.gguf`.
 */
#include "base/err.h"
#include "cli/cli.h"
#include "model/convert.h"

#include <string.h>

int cmd_convert(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "llama2c") != 0)
        return cli_usage_error("convert", "usage: verity convert llama2c --model MODEL.bin "
                                          "--tokenizer TOKENIZER.bin -o OUT.gguf");
    const char *model = NULL, *tok = NULL, *out = NULL;
    for (int i = 2; i < argc; i++) {
        const char **dst = !strcmp(argv[i], "--model")                                ? &model
                           : !strcmp(argv[i], "--tokenizer")                          ? &tok
                           : (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) ? &out
                                                                                      : NULL;
        if (!dst)
            return cli_usage_error("convert", "unknown option '%s'", argv[i]);
        if (!(*dst = cli_next("convert", argc, argv, &i)))
            return 2;
    }
    if (!model || !tok || !out)
        return cli_usage_error("convert", "--model, --tokenizer and -o are required");
    int rc = convert_llama2c(model, tok, out);
    if (rc)
        return cli_fail("convert", rc);
    return 0;
}
