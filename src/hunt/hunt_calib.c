/* SPDX-License-Identifier: MIT */
/*
 * hunt_calib: bytes of padding per token, measured with the server's own usage.prompt_tokens (see
 * hunt_calib.h). The two requests differ only in the padding appended to one user message, so
 * the difference in prompt tokens is the padding's token count under the server's tokenizer and
 * chat template, whatever constant overhead the template adds.
 */
#include "hunt/hunt_calib.h"
#include "base/arena.h"
#include "base/err.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "hunt/hunt_client.h"
#include "hunt/hunt_workload.h"

#include <string.h>

/* One one-token chat completion whose user message is "ping" followed by pad_bytes of padding;
 * sets *status and, on 200, *prompt_tokens from usage (-1 when the reply has none). */
static int calib_prompt_tokens(const hunt_calib_target *t, size_t pad_bytes, long *status,
                               int64_t *prompt_tokens) {
    strbuf text, q;
    strbuf_init(&text);
    strbuf_init(&q);
    strbuf_puts(&text, "ping");
    if (pad_bytes) {
        strbuf_puts(&text, "\n\n");
        hunt_workload_pad_text(t->seed, pad_bytes, &text);
    }
    strbuf_puts(&q, "{\"model\":");
    strbuf_json_str(&q, t->model, strlen(t->model), false);
    strbuf_puts(&q, ",\"messages\":[{\"role\":\"user\",\"content\":");
    strbuf_json_str(&q, text.data, text.len, false);
    strbuf_puts(&q, "}],\"max_tokens\":1,\"temperature\":0}");
    int rc = strbuf_failed(&text) || strbuf_failed(&q)
                 ? err_set(ERR_NOMEM, "out of memory building a calibration request")
                 : 0;
    char reply[8192];
    if (!rc)
        rc = hunt_http_fetch(t->chat_url, t->api_key, q.data, t->timeout_s, status, reply,
                             sizeof reply);
    strbuf_deinit(&text);
    strbuf_deinit(&q);
    if (rc)
        return rc;
    *prompt_tokens = -1;
    if (*status != 200)
        return 0;
    arena *a = arena_create(16 * 1024, 0);
    if (!a)
        return err_set(ERR_NOMEM, "out of memory parsing a calibration reply");
    json_value *root = NULL;
    if (json_parse(a, reply, strlen(reply), &root) == 0) {
        const json_value *pt = json_get(json_get(root, "usage"), "prompt_tokens");
        int64_t n;
        if (json_as_int(pt, &n) && n >= 0) /* returns 1 on success */
            *prompt_tokens = n;
    }
    arena_destroy(a);
    return 0;
}

int hunt_calib_pad(const hunt_calib_target *t, double *bytes_per_token) {
    static const size_t sizes[] = {2000, 500};
    long status = 0;
    int64_t base = -1;
    int rc = calib_prompt_tokens(t, 0, &status, &base);
    if (rc)
        return rc;
    if (base < 0)
        return err_set(ERR_PROTOCOL, "no usage.prompt_tokens in the reply (HTTP %ld)", status);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int64_t padded = -1;
        if ((rc = calib_prompt_tokens(t, sizes[i], &status, &padded)))
            return rc;
        if (status != 200)
            continue; /* e.g. longer than the server's context: try less */
        if (padded <= base)
            return err_set(ERR_PROTOCOL, "padding did not grow usage.prompt_tokens (%lld)",
                           (long long)padded);
        /* the text actually added: "\n\n" and the documents, as built */
        strbuf probe;
        strbuf_init(&probe);
        hunt_workload_pad_text(t->seed, sizes[i], &probe);
        double added = (double)probe.len + 2;
        strbuf_deinit(&probe);
        double bpt = added / (double)(padded - base);
        *bytes_per_token = bpt < 0.5 ? 0.5 : bpt > 16 ? 16 : bpt;
        return 0;
    }
    return err_set(ERR_PROTOCOL, "padded calibration requests answered HTTP %ld", status);
}
