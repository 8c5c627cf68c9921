/* SPDX-License-Identifier: MIT */
/*
 * hunt_oracle: turn verdicts. See hunt_oracle.h for the rules; the thresholds are here, each
 * with its reason.
 *
 * Degeneration thresholds (test relative to reference):
 *   repeat   a p-periodic run (p <= 128) of at least 4 periods and 48 bytes, at least twice the
 *            reference's longest such run plus 16 bytes (lists and rules of '-' in the reference
 *            raise its own bar);
 *   entropy  character-trigram entropy of the last W bytes (W = the shorter text, at most 1024,
 *            at least 64) more than 1.5 bits below the reference's and under 75% of it;
 *   tags     4 or more consecutive closing tags (</x> separated only by whitespace), 3 more than
 *            the reference's longest run;
 *   salad    at least 24 word characters with a class-change rate (letters, digits, punctuation,
 *            non-ASCII) of at least 0.3 per character and at least twice the reference's plus
 *            0.1; or replacement characters, invalid UTF-8 or control characters that the
 *            reference does not have.
 */
#include "hunt/hunt_oracle.h"
#include "base/json.h"
#include "base/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hunt_finding_name(int f) {
    static const char *const names[HUNT_F_COUNT] = {
        "tool_json",     "tool_schema",     "tool_unknown", "markup",
        "finish_reason", "stream_identity", "protocol",     "repeat",
        "entropy",       "closing_tags",    "salad"};
    return f >= 0 && f < HUNT_F_COUNT ? names[f] : "?";
}

const char *hunt_verdict_name(hunt_verdict v) {
    static const char *const names[] = {"clean", "benign", "corrupt", "error", "pending"};
    return (unsigned)v < 5 ? names[v] : "?";
}

const char *hunt_neartie_name(hunt_neartie n) {
    static const char *const names[] = {"none", "benign", "not_tie", "same_tokens", "no_logprobs"};
    return (unsigned)n < 5 ? names[n] : "?";
}

static void hunt_why(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void hunt_why(char *why, size_t cap, const char *fmt, ...) {
    if (!cap || why[0])
        return; /* keep the first finding's description */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

/* Quotes up to 60 bytes of s for a description (printable ASCII kept, others as '?'). */
static const char *hunt_snip(const char *s, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < cap && i < 60; i++)
        buf[k++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
    if (n > 60 && k + 4 < cap)
        buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
    buf[k] = 0;
    return buf;
}

/* ---- structural ---- */

static pcre2_code *hunt_markup_re;
static bool hunt_markup_tried;

static pcre2_code *hunt_markup(void) {
    if (!hunt_markup_tried) {
        hunt_markup_tried = true;
        static const char pat[] =
            "<\\|[^|<>\\s]{1,40}\\|>"                 /* <|im_end|> <|eot_id|> ... */
            "|<\xEF\xBD\x9C[^<>]{1,60}?\xEF\xBD\x9C>" /* DeepSeek <｜tool▁calls▁begin｜> */
            "|</?tool_calls?>|</?function_calls?>|<function=[A-Za-z_]"
            "|\\[TOOL_CALLS\\]|\\[/?INST\\]|\\[/?AVAILABLE_TOOLS\\]|\\[/?TOOL_RESULTS\\]"
            "|</s>|<s>|<start_of_turn>|<end_of_turn>"
            "|\\{\\s*\"name\"\\s*:\\s*\"[A-Za-z_][A-Za-z0-9_.-]{0,63}\"\\s*,\\s*"
            "\"(?:arguments|parameters)\"\\s*:";
        int ec;
        PCRE2_SIZE eo;
        hunt_markup_re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_NO_UTF_CHECK, &ec, &eo, NULL);
    }
    return hunt_markup_re;
}

/* Returns the offset of the first markup match in s, or -1. */
static long hunt_markup_find(const char *s, size_t n, size_t *mlen) {
    pcre2_code *re = hunt_markup();
    if (!re || n == 0 || !utf8_valid(s, n, NULL)) {
        if (re && n && !utf8_valid(s, n, NULL)) {
            /* invalid UTF-8: fall back to a plain search for the commonest markers */
            static const char *const lit[] = {"<|", "<tool_call>", "</tool_call>", "[TOOL_CALLS]"};
            for (size_t k = 0; k < 4; k++) {
                const char *p = memmem(s, n, lit[k], strlen(lit[k]));
                if (p) {
                    *mlen = strlen(lit[k]);
                    return p - s;
                }
            }
        }
        return -1;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md)
        return -1;
    long at = -1;
    if (pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        at = (long)ov[0];
        *mlen = ov[1] - ov[0];
    }
    pcre2_match_data_free(md);
    return at;
}

unsigned hunt_oracle_structural(const hunt_oracle_cfg *cfg, const hunt_reply *r, char *why,
                                size_t cap) {
    unsigned m = 0;
    char w[320], sn[80];
    if (cap)
        why[0] = 0;
    for (int i = 0; i < r->n_calls; i++) {
        const hunt_call *c = &r->calls[i];
        int t = cfg->tools ? hunt_tools_find(cfg->tools, c->name) : -1;
        if (t < 0) {
            m |= 1u << HUNT_F_TOOL_UNKNOWN;
            hunt_why(why, cap, "tool_calls[%d] names an unknown tool '%s'", i,
                     hunt_snip(c->name, strlen(c->name), sn, sizeof sn));
            continue;
        }
        w[0] = 0;
        int k = hunt_tools_check_args(cfg->tools, t, c->args, c->args_len, w, sizeof w);
        if (k == 1) {
            m |= 1u << HUNT_F_TOOL_JSON;
            hunt_why(why, cap, "tool_calls[%d] (%s): %s: '%s'", i, c->name, w,
                     hunt_snip(c->args, c->args_len, sn, sizeof sn));
        } else if (k == 2) {
            m |= 1u << HUNT_F_TOOL_SCHEMA;
            hunt_why(why, cap, "tool_calls[%d] (%s): schema violation: %s", i, c->name, w);
        }
    }
    size_t ml = 0;
    long at = hunt_markup_find(r->content, r->content_len, &ml);
    if (at >= 0) {
        m |= 1u << HUNT_F_MARKUP;
        hunt_why(why, cap, "content has tool-call markup or a special token at byte %ld: '%s'", at,
                 hunt_snip(r->content + at, ml, sn, sizeof sn));
    }
    static const char *const known[] = {"stop", "length", "tool_calls", "content_filter",
                                        "function_call"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        ok |= strcmp(r->finish, known[i]) == 0;
    if (!r->finish[0]) {
        m |= 1u << HUNT_F_FINISH;
        hunt_why(why, cap, "no finish_reason");
    } else if (!ok) {
        m |= 1u << HUNT_F_FINISH;
        hunt_why(why, cap, "unknown finish_reason '%s'",
                 hunt_snip(r->finish, strlen(r->finish), sn, sizeof sn));
    } else if ((!strcmp(r->finish, "tool_calls") || !strcmp(r->finish, "function_call")) &&
               r->n_calls == 0) {
        m |= 1u << HUNT_F_FINISH;
        hunt_why(why, cap, "finish_reason '%s' but the message has no tool calls", r->finish);
    }
    if (r->stream_issue) {
        m |= 1u << HUNT_F_IDENTITY;
        hunt_why(why, cap, "%s", r->stream_issue);
    }
    return m;
}

/* ---- degeneration ---- */

size_t hunt_degen_loop(const char *s, size_t n, size_t *period) {
    size_t best = 0, best_p = 0;
    if (n > 65536)
        n = 65536;
    for (size_t p = 1; p <= 128 && p < n; p++) {
        size_t run = 0;
        for (size_t i = 0; i + p < n; i++) {
            if (s[i] == s[i + p]) {
                run++;
                if (run + p >= 4 * p && run + p > best) {
                    best = run + p;
                    best_p = p;
                }
            } else {
                run = 0;
            }
        }
    }
    if (period)
        *period = best_p;
    return best;
}

static int hunt_u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

double hunt_degen_entropy3(const char *s, size_t n) {
    if (n < 3)
        return 0;
    size_t m = n - 2;
    uint32_t stackbuf[1024];
    uint32_t *codes = m <= 1024 ? stackbuf : malloc(m * sizeof *codes);
    if (!codes)
        return 0;
    for (size_t i = 0; i < m; i++)
        codes[i] = ((uint32_t)(unsigned char)s[i] << 16) |
                   ((uint32_t)(unsigned char)s[i + 1] << 8) | (unsigned char)s[i + 2];
    qsort(codes, m, sizeof *codes, hunt_u32_cmp);
    double h = 0;
    size_t i = 0;
    while (i < m) {
        size_t j = i;
        while (j < m && codes[j] == codes[i])
            j++;
        double p = (double)(j - i) / (double)m;
        h -= p * log2(p);
        i = j;
    }
    if (codes != stackbuf)
        free(codes);
    return h;
}

int hunt_degen_tag_run(const char *s, size_t n) {
    int best = 0, run = 0;
    size_t i = 0;
    while (i < n) {
        if (s[i] == '<' && i + 2 < n && s[i + 1] == '/') {
            size_t j = i + 2;
            if (j < n && ((s[j] >= 'A' && s[j] <= 'Z') || (s[j] >= 'a' && s[j] <= 'z') ||
                          s[j] == '_' || s[j] == '|')) {
                while (j < n && s[j] != '>' && s[j] != '<' && s[j] != ' ' && s[j] != '\n' &&
                       j - i < 64)
                    j++;
                if (j < n && s[j] == '>') {
                    run++;
                    if (run > best)
                        best = run;
                    i = j + 1;
                    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
                        i++;
                    continue;
                }
            }
        }
        run = 0;
        i++;
    }
    return best;
}

static int hunt_char_class(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    if (c >= '0' && c <= '9')
        return 2;
    if (c >= 0x80)
        return 4;
    return 3;
}

double hunt_degen_salad(const char *s, size_t n, size_t *word_chars) {
    size_t chars = 0, changes = 0;
    int prev = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            prev = 0;
            continue;
        }
        if ((c & 0xC0) == 0x80)
            continue; /* UTF-8 continuation: part of the previous character */
        int k = hunt_char_class(c);
        chars++;
        if (prev && k != prev)
            changes++;
        prev = k;
    }
    if (word_chars)
        *word_chars = chars;
    return chars ? (double)changes / (double)chars : 0;
}

/* Replacement characters, invalid UTF-8 or control characters (other than \t \n \r). */
static bool hunt_has_garbage(const char *s, size_t n) {
    if (!utf8_valid(s, n, NULL) || memmem(s, n, "\xEF\xBF\xBD", 3))
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 32 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
            return true;
    }
    return false;
}

unsigned hunt_oracle_degeneration(const char *text, size_t len, const char *ref, size_t ref_len,
                                  char *why, size_t cap) {
    unsigned m = 0;
    if (cap)
        why[0] = 0;
    bool have_ref = ref != NULL;
    if (!ref) {
        ref = "";
        ref_len = 0;
    }
    size_t pt, pr;
    size_t lt = hunt_degen_loop(text, len, &pt), lr = hunt_degen_loop(ref, ref_len, &pr);
    if (lt >= 48 && lt >= 2 * lr + 16) {
        m |= 1u << HUNT_F_REPEAT;
        hunt_why(why, cap,
                 "repetition loop: %zu bytes repeating with period %zu (reference's longest: %zu)",
                 lt, pt, lr);
    }
    size_t w = len;
    if (have_ref && ref_len < w)
        w = ref_len;
    if (w > 1024)
        w = 1024;
    if (w >= (have_ref ? 64u : 128u)) {
        double ht = hunt_degen_entropy3(text + len - w, w);
        double hr = have_ref ? hunt_degen_entropy3(ref + ref_len - w, w) : 5.5;
        if (ht < hr - 1.5 && ht < 0.75 * hr) {
            m |= 1u << HUNT_F_ENTROPY;
            hunt_why(why, cap,
                     "trigram entropy of the last %zu bytes collapsed to %.2f bits (reference "
                     "%.2f)",
                     w, ht, hr);
        }
    }
    int tt = hunt_degen_tag_run(text, len), tr = hunt_degen_tag_run(ref, ref_len);
    if (tt >= 4 && tt >= tr + 3) {
        m |= 1u << HUNT_F_TAGS;
        hunt_why(why, cap, "run of %d closing tags (reference's longest: %d)", tt, tr);
    }
    size_t wt, wr;
    double st = hunt_degen_salad(text, len, &wt), sr = hunt_degen_salad(ref, ref_len, &wr);
    if (have_ref && wt >= 24 && st >= 0.3 && st >= 2 * sr + 0.1) {
        m |= 1u << HUNT_F_SALAD;
        hunt_why(why, cap,
                 "token salad: %.2f character-class changes per character (reference "
                 "%.2f)",
                 st, sr);
    }
    if (hunt_has_garbage(text, len) && !(have_ref && hunt_has_garbage(ref, ref_len))) {
        m |= 1u << HUNT_F_SALAD;
        hunt_why(why, cap,
                 "replacement characters, invalid UTF-8 or control characters in "
                 "content");
    }
    return m;
}

/* ---- near tie ---- */

static bool hunt_tok_eq(const hunt_tok *a, const hunt_tok *b) {
    return a->len == b->len && memcmp(a->text, b->text, a->len) == 0;
}

hunt_neartie hunt_oracle_neartie(const hunt_reply *test, const hunt_reply *ref, double threshold,
                                 int *tok, double *gap, char *why, size_t cap) {
    char s1[80], s2[80];
    *tok = -1;
    *gap = -1;
    if (cap)
        why[0] = 0;
    if (!test->has_logprobs || !ref->has_logprobs || (test->n_toks == 0 && ref->n_toks == 0)) {
        hunt_why(why, cap, "no logprobs to classify the divergence");
        return HUNT_NT_NO_LOGPROBS;
    }
    int n = test->n_toks < ref->n_toks ? test->n_toks : ref->n_toks;
    int i = 0;
    while (i < n && hunt_tok_eq(&test->toks[i], &ref->toks[i]))
        i++;
    if (i == n && test->n_toks == ref->n_toks) {
        hunt_why(why, cap, "token streams identical (%d tokens) but the replies differ", n);
        return HUNT_NT_SAME_TOKENS;
    }
    *tok = i;
    if (i == ref->n_toks) {
        hunt_why(why, cap,
                 "the reference stopped after %d tokens where the test continued with "
                 "'%s'",
                 i, hunt_snip(test->toks[i].text, test->toks[i].len, s1, sizeof s1));
        return HUNT_NT_NOT_TIE;
    }
    const hunt_tok *rt = &ref->toks[i];
    if (i == test->n_toks) {
        hunt_why(why, cap,
                 "the test stopped after %d tokens where the reference continued with "
                 "'%s'",
                 i, hunt_snip(rt->text, rt->len, s1, sizeof s1));
        return HUNT_NT_NOT_TIE;
    }
    const hunt_tok *tt = &test->toks[i];
    if (rt->n_top == 0) {
        hunt_why(why, cap,
                 "token %d differs ('%s' vs reference '%s') and the reference has no "
                 "top_logprobs there",
                 i, hunt_snip(tt->text, tt->len, s1, sizeof s1),
                 hunt_snip(rt->text, rt->len, s2, sizeof s2));
        return HUNT_NT_NO_LOGPROBS;
    }
    /* The gap is between the two choices, both in the reference's distribution: the token the
     * reference chose and the one the test chose. Under greedy decoding the reference chose its
     * best candidate, so this is the distance from the best; under sampling the reference's
     * choice may be far from its best, and a test that lands on the best is no tie for that. */
    double mine = NAN;
    for (int k = 0; k < rt->n_top; k++)
        if (rt->top[k].len == tt->len && memcmp(rt->top[k].text, tt->text, tt->len) == 0 &&
            isnan(mine))
            mine = rt->top[k].logprob;
    if (isnan(mine)) {
        hunt_why(why, cap,
                 "token %d: the test chose '%s', not among the reference's %d top "
                 "candidates (reference chose '%s')",
                 i, hunt_snip(tt->text, tt->len, s1, sizeof s1), rt->n_top,
                 hunt_snip(rt->text, rt->len, s2, sizeof s2));
        return HUNT_NT_NOT_TIE;
    }
    *gap = fabs(rt->logprob - mine);
    bool tie = *gap <= threshold;
    hunt_why(why, cap, "token %d: '%s' instead of '%s', reference logprob gap %.4f %s %.4f: %s", i,
             hunt_snip(tt->text, tt->len, s1, sizeof s1),
             hunt_snip(rt->text, rt->len, s2, sizeof s2), *gap, tie ? "<=" : ">", threshold,
             tie ? "near tie" : "not a near tie");
    return tie ? HUNT_NT_BENIGN : HUNT_NT_NOT_TIE;
}

/* ---- judge ---- */

static long hunt_first_diff(const char *a, size_t na, const char *b, size_t nb) {
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return na == nb ? -1 : (long)n;
}

static void hunt_locate(const hunt_reply *t, const hunt_reply *r, hunt_eval *ev) {
    long d = hunt_first_diff(t->content, t->content_len, r->content, r->content_len);
    if (d >= 0) {
        snprintf(ev->where, sizeof ev->where, "content");
        ev->div_offset = d;
        return;
    }
    int n = t->n_calls < r->n_calls ? t->n_calls : r->n_calls;
    for (int i = 0; i < n; i++) {
        const hunt_call *a = &t->calls[i], *b = &r->calls[i];
        if ((d = hunt_first_diff(a->name, strlen(a->name), b->name, strlen(b->name))) >= 0) {
            snprintf(ev->where, sizeof ev->where, "tool_calls[%d].name", i);
            ev->div_offset = d;
            return;
        }
        if ((d = hunt_first_diff(a->args, a->args_len, b->args, b->args_len)) >= 0) {
            snprintf(ev->where, sizeof ev->where, "tool_calls[%d].arguments", i);
            ev->div_offset = d;
            return;
        }
        if (strcmp(a->type, b->type)) {
            snprintf(ev->where, sizeof ev->where, "tool_calls[%d].type", i);
            return;
        }
    }
    if (t->n_calls != r->n_calls) {
        snprintf(ev->where, sizeof ev->where, "tool_calls (%d vs %d calls)", t->n_calls,
                 r->n_calls);
        return;
    }
    snprintf(ev->where, sizeof ev->where, "finish_reason");
}

void hunt_oracle_judge(const hunt_oracle_cfg *cfg, const hunt_reply *test, const hunt_reply *ref,
                       hunt_eval *ev) {
    memset(ev, 0, sizeof *ev);
    ev->div_offset = -1;
    ev->div_token = -1;
    ev->tie_gap = -1;
    char ws[320], wr[320], wd[320], wn[320];
    unsigned st = hunt_oracle_structural(cfg, test, ws, sizeof ws);
    unsigned sr = hunt_oracle_structural(cfg, ref, wr, sizeof wr);
    ev->model_level = st & sr;
    if (hunt_reply_same(test, ref)) {
        ev->found = st & ~sr & (1u << HUNT_F_IDENTITY);
        ev->verdict = ev->found ? HUNT_V_CORRUPT : HUNT_V_CLEAN;
        if (ev->found)
            snprintf(ev->why, sizeof ev->why,
                     "same reply as the reference, but the stream "
                     "broke a tool call's identity: %s",
                     ws);
        return;
    }
    ev->diverged = true;
    hunt_locate(test, ref, ev);
    unsigned dt = hunt_oracle_degeneration(test->content, test->content_len, ref->content,
                                           ref->content_len, wd, sizeof wd);
    ev->neartie = hunt_oracle_neartie(test, ref, cfg->tie_threshold, &ev->div_token, &ev->tie_gap,
                                      wn, sizeof wn);
    ev->found = (st & ~sr) | dt;
    char at[96];
    if (ev->div_offset >= 0)
        snprintf(at, sizeof at, "%s at byte %ld", ev->where, ev->div_offset);
    else
        snprintf(at, sizeof at, "%s", ev->where);
    if (ev->neartie == HUNT_NT_BENIGN && !ev->found) {
        ev->verdict = HUNT_V_BENIGN;
        snprintf(ev->why, sizeof ev->why, "diverges in %s; %s; continuation structurally sound", at,
                 wn);
        return;
    }
    ev->verdict = HUNT_V_CORRUPT;
    if (st & ~sr)
        snprintf(ev->why, sizeof ev->why, "diverges in %s; %s", at, ws);
    else if (dt)
        snprintf(ev->why, sizeof ev->why, "diverges in %s; %s", at, wd);
    else
        snprintf(ev->why, sizeof ev->why, "diverges in %s; %s", at, wn);
}
