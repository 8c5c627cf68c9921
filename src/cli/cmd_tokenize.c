/* SPDX-License-Identifier: MIT */
/*
 * cmd_tokenize: `verity tokenize -m MODEL [--pieces] [--no-bos] [--special] (TEXT | -f FILE)`
 * prints the token ids of a text as one JSON array on one line, with ", " between ids
 * (`[1, 9038, 2501]`). With --pieces a second line follows: a JSON array of the raw vocabulary
 * pieces of the same tokens, in the same order (`["<s>", "▁Once", "▁upon"]`). MODEL is any GGUF
 * file with tokenizer metadata (a vocabulary-only file is enough). Bad input (missing or malformed
 * file, unsupported tokenizer, bad options) prints one line on stderr and exits 2.
 */
#include "base/err.h"
#include "base/file.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tokenize_help[] =
    "usage: verity tokenize -m MODEL [--pieces] [--no-bos] [--special] (TEXT | -f FILE)\n"
    "\n"
    "Prints the token ids of TEXT (or of the bytes of FILE; '-' reads stdin) as one JSON array\n"
    "on one line, ids separated by \", \": [1, 9038, 2501]\n"
    "\n"
    "  -m, --model MODEL  GGUF file with tokenizer metadata (vocabulary-only files work)\n"
    "  -f, --file FILE    tokenize the contents of FILE instead of TEXT\n"
    "  --pieces           also print a second line: a JSON array of the tokens' raw vocabulary\n"
    "                     pieces, in the same order: [\"<s>\", \"\xe2\x96\x81Once\"] (UTF-8 as "
    "is)\n"
    "  --no-bos           do not add the BOS (or EOS) token the vocabulary asks for\n"
    "  --special          match control tokens written in the text (\"<s>\", \"<|im_end|>\") as\n"
    "                     single tokens; without it they are tokenized as plain text\n"
    "\n"
    "Exit status: 0 success, 2 bad input (one line on stderr).\n";

/* Reads a whole file ("-" = stdin) into a malloc'd buffer. */
static int tokenize_read(const char *path, char **out, size_t *len) {
    if (strcmp(path, "-") == 0)
        return file_read_stream(stdin, "stdin", 0, out, len);
    return file_read_all(path, 0, out, len);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    bool pieces = false, no_bos = false, special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_next("tokenize", argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_next("tokenize", argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--pieces")) {
            pieces = true;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--")) {
            if (i + 1 < argc && !text && i + 2 == argc) {
                text = argv[++i];
            } else {
                return cli_usage_error("tokenize", "'--' must be followed by exactly one TEXT");
            }
        } else if (a[0] == '-' && a[1] != 0) {
            return cli_usage_error("tokenize", "unknown option '%s' (try verity tokenize --help)",
                                   a);
        } else if (text) {
            return cli_usage_error("tokenize",
                                   "more than one TEXT ('%s'); quote the text as one argument", a);
        } else {
            text = a;
        }
    }
    if (!model)
        return cli_usage_error("tokenize",
                               "missing -m MODEL (usage: verity tokenize -m MODEL [--pieces] "
                               "[--no-bos] [--special] TEXT)");
    if (!text && !file)
        return cli_usage_error("tokenize", "missing TEXT (or -f FILE)");
    if (text && file)
        return cli_usage_error("tokenize", "give either TEXT or -f FILE, not both");

    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    int rc = 0;
    if (file && (rc = tokenize_read(file, &owned, &len)))
        return cli_fail("tokenize", rc);
    if (file)
        text = owned;

    gguf *g = NULL;
    tokenizer *t = NULL;
    int32_t *ids = NULL;
    strbuf sb;
    strbuf_init(&sb);
    if ((rc = gguf_open(model, &g)) || (rc = tokenizer_load(g, &t)))
        goto out;
    gguf_close(g);
    g = NULL;

    size_t cap = tokenizer_max_tokens(len), n = 0;
    ids = malloc(cap * sizeof *ids);
    if (!ids) {
        rc = err_set(ERR_NOMEM, "out of memory for %zu token ids", cap);
        goto out;
    }
    if ((rc = tokenizer_encode(t, text, len, !no_bos, special, ids, cap, &n)))
        goto out;

    strbuf_putc(&sb, '[');
    for (size_t i = 0; i < n; i++)
        strbuf_printf(&sb, i ? ", %d" : "%d", ids[i]);
    strbuf_puts(&sb, "]\n");
    if (pieces) {
        strbuf_putc(&sb, '[');
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = tokenizer_token_piece(t, ids[i], &pl);
            if (i)
                strbuf_puts(&sb, ", ");
            strbuf_json_str(&sb, p, pl, false);
        }
        strbuf_puts(&sb, "]\n");
    }
    if (strbuf_failed(&sb)) {
        rc = err_set(ERR_NOMEM, "out of memory for the output");
        goto out;
    }
    if (fwrite(sb.data, 1, sb.len, stdout) != sb.len || fflush(stdout) != 0) {
        rc = err_set(ERR_IO, "writing to stdout: %s", strerror(errno));
        goto out;
    }
out:
    strbuf_deinit(&sb);
    free(ids);
    tokenizer_destroy(t);
    gguf_close(g);
    free(owned);
    return rc ? cli_fail("tokenize", rc) : 0;
}
