/* SPDX-License-Identifier: MIT */
/*
 * hunt_oracle: the verdict on one turn, comparing the reply a session got under load with the
 * reference reply to the byte-identical request. Four oracles, each reported separately:
 *
 * exact        the first divergence from the reference: where (content, a tool call's name or
 *              arguments, the number of calls, finish_reason), the byte offset, and the token index
 *              when logprobs give tokens.
 * near-tie     with logprobs on both sides, find the first token position where the two token
 *              streams differ. The divergence is benign nondeterminism when the token the test
 *              chose is among the reference's top candidates at that position and its reference
 *              logprob is within `tie_threshold` nats of the logprob of the token the reference
 *              chose (under greedy decoding: the reference's best candidate): a server that is
 *              not batch-invariant computes slightly different logits under a different batch,
 *              which can only flip a choice between candidates that were already that close.
 *              Anything else is corruption: a token outside the reference's near-ties, identical
 *              token streams with different text (a detokenizer or parser fault), an early or
 *              late stop, or no logprobs to tell. Threshold 0 makes every divergence but an exact
 *              tie corruption: the setting for a batch-invariant server.
 * structural   tool calls with arguments that are not a JSON object, that violate the tool's
 *              schema, or that name an unknown tool; tool-call markup or special tokens in
 *              `content`; finish_reason inconsistent with the message; streamed deltas that
 *              change a call's identity; a response that is not parseable at all (a stream chunk
 *              or body that is not JSON) where the reference's answer to the same request was.
 * degeneration repetition loops, collapsing character-trigram entropy, runs of closing tags and
 *              "token salad" (character-class churn, replacement or control characters), each
 *              judged relative to the reference's own statistics so a model that always rambles
 *              is not flagged.
 *
 * The turn verdict: identical to the reference -> clean (whatever the oracles say about the model
 * itself, it is not load-dependent: such findings are counted as "model-level"). Diverged -> benign
 * when the near-tie oracle says so and neither structural nor degeneration findings appear that
 * the reference does not have; otherwise corrupt. Structural and degeneration findings are always
 * judged against the reference's own findings (test mask minus reference mask).
 *
 * Later turns that depend on a benign divergence are compared with references built from the
 * diverged history (the runner asks the reference for the exact request the session sent).
 *
 * All functions are pure; the markup regex is compiled once, lazily, and is only used from one
 * thread at a time (hunt is single-threaded).
 */
#ifndef VERITY_HUNT_ORACLE_H
#define VERITY_HUNT_ORACLE_H

#include "hunt/hunt_reply.h"
#include "hunt/hunt_tools.h"

#include <stdbool.h>
#include <stddef.h>

/* Finding kinds, bit positions in the masks below. */
enum hunt_finding {
    HUNT_F_TOOL_JSON = 0, /* arguments not a JSON object */
    HUNT_F_TOOL_SCHEMA,   /* arguments violate the tool's schema */
    HUNT_F_TOOL_UNKNOWN,  /* a call names a tool that was not offered */
    HUNT_F_MARKUP,        /* tool-call markup or special tokens in content */
    HUNT_F_FINISH,        /* finish_reason inconsistent with the message */
    HUNT_F_IDENTITY,      /* streamed deltas changed a call's identity */
    HUNT_F_PROTOCOL,      /* the response was not parseable (a chunk or body not JSON) */
    HUNT_F_REPEAT,        /* repetition loop */
    HUNT_F_ENTROPY,       /* collapsing n-gram entropy */
    HUNT_F_TAGS,          /* run of closing tags */
    HUNT_F_SALAD,         /* token salad */
    HUNT_F_COUNT
};
#define HUNT_F_STRUCTURAL_MASK 0x7Fu
#define HUNT_F_DEGEN_MASK      (0xFu << HUNT_F_REPEAT)

/* Short name of a finding ("tool_json", "markup", "repeat", ...). */
const char *hunt_finding_name(int f);

typedef enum hunt_verdict {
    HUNT_V_CLEAN = 0,
    HUNT_V_BENIGN, /* diverged at a near tie, structurally sound */
    HUNT_V_CORRUPT,
    HUNT_V_ERROR,   /* the target failed (transport, HTTP status, not a chat completion) */
    HUNT_V_PENDING, /* no reference yet */
} hunt_verdict;

/* "clean", "benign", "corrupt", "error", "pending". */
const char *hunt_verdict_name(hunt_verdict v);

/* Near-tie oracle outcome. */
typedef enum hunt_neartie {
    HUNT_NT_NONE = 0,    /* no divergence */
    HUNT_NT_BENIGN,      /* first differing token is a near tie in the reference */
    HUNT_NT_NOT_TIE,     /* first differing token is not a near tie */
    HUNT_NT_SAME_TOKENS, /* token streams identical but the replies differ */
    HUNT_NT_NO_LOGPROBS, /* one side has no logprobs: cannot tell */
} hunt_neartie;

/* "none", "benign", "not_tie", "same_tokens", "no_logprobs". */
const char *hunt_neartie_name(hunt_neartie n);

typedef struct hunt_oracle_cfg {
    double tie_threshold;    /* nats; a divergence within it of the reference's choice is benign */
    const hunt_tools *tools; /* the tools offered (may have 0) */
} hunt_oracle_cfg;

typedef struct hunt_eval {
    hunt_verdict verdict;
    /* exact */
    bool diverged;
    char where[64];  /* "content", "tool_calls[1].arguments", "finish_reason", ... */
    long div_offset; /* byte offset of the first difference within `where`, -1 if n/a */
    int div_token;   /* token index of the first differing token, -1 if unknown */
    /* near-tie */
    hunt_neartie neartie;
    double tie_gap; /* reference logprob gap at div_token (its choice vs the test's), or -1 */
    /* structural and degeneration: findings in the test reply that the reference lacks, and
     * findings present in both (model-level, not load-dependent) */
    unsigned found; /* mask of enum hunt_finding */
    unsigned model_level;
    char why[640]; /* evidence for the verdict, one paragraph */
} hunt_eval;

/* Runs the structural checks on one reply. Returns the mask of findings; the first finding's
 * description goes to why[0..cap). */
unsigned hunt_oracle_structural(const hunt_oracle_cfg *cfg, const hunt_reply *r, char *why,
                                size_t cap);

/* Runs the degeneration checks on text, relative to the reference text ref (which may be NULL:
 * then absolute thresholds apply). Returns the mask of findings; the first one's description goes
 * to why. */
unsigned hunt_oracle_degeneration(const char *text, size_t len, const char *ref, size_t ref_len,
                                  char *why, size_t cap);

/* The near-tie oracle alone: classifies the first token difference between test and ref. Sets
 * *tok (first differing token index, or -1) and *gap (the distance, in the reference's logprobs,
 * between the reference's token and the test's, or -1 when the test's token is not among the
 * reference's candidates). Writes a description to why. */
hunt_neartie hunt_oracle_neartie(const hunt_reply *test, const hunt_reply *ref, double threshold,
                                 int *tok, double *gap, char *why, size_t cap);

/* Judges test against its reference (ref non-NULL) and fills *ev. */
void hunt_oracle_judge(const hunt_oracle_cfg *cfg, const hunt_reply *test, const hunt_reply *ref,
                       hunt_eval *ev);

/* Helper for measurements shown in reports and tests: the longest p-periodic run in text for
 * p <= 128 (*period set), the character-trigram entropy in bits of the last `window` bytes, the
 * longest run of closing tags, and the salad score (class changes per word character). */
size_t hunt_degen_loop(const char *s, size_t n, size_t *period);
double hunt_degen_entropy3(const char *s, size_t n);
int hunt_degen_tag_run(const char *s, size_t n);
double hunt_degen_salad(const char *s, size_t n, size_t *word_chars);

#endif
