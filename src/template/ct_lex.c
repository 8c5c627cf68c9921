/* SPDX-License-Identifier: MIT */
/*
 * ct_lex: the chat-template lexer. It reproduces jinja2's lexer (jinja2/lexer.py) as configured by
 * Hugging Face: trim_blocks and lstrip_blocks on, default delimiters, no line statements, and
 * keep_trailing_newline off. What it must get exactly right, because it decides output bytes:
 *
 *  - newlines: \r\n and \r become \n everywhere, and one trailing newline of the source is dropped;
 *  - "{%-", "{{-", "{#-" strip all whitespace (Python's str.isspace) before the tag; "-%}", "-}}",
 *    "-#}" all whitespace after it;
 *  - trim_blocks: one newline right after "%}" or "#}" is dropped ("+%}" keeps it);
 *  - lstrip_blocks: spaces and tabs from the start of the line up to "{%" or "{#" are dropped when
 *    nothing else is on that line before the tag ("{%+" keeps them); never before "{{";
 *  - "{% raw %}...{% endraw %}" passes its body through untouched;
 *  - string literals are decoded the way jinja2 does (Python's unicode-escape codec).
 *
 * Inside a tag, "%}" / "}}" only close it when every bracket opened inside is closed, as in
 * jinja2, so "{{ {'a': 1}}}" works. Tokens point into a normalised copy of the source kept in the
 * template's arena.
 */
#include "template/ct_int.h"

#include "base/err.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    arena *a;
    const char *s; /* normalised source */
    size_t n;
    size_t pos;
    int line;
    bool line_starting;
    ct_tok *toks;
    size_t n_toks, cap;
} lexer;

static int lex_push(lexer *lx, ct_tok t) {
    if (arena_grow(lx->a, (void **)&lx->toks, &lx->cap, lx->n_toks + 1, sizeof *lx->toks))
        return err_set(ERR_NOMEM, "template: out of memory while tokenising");
    lx->toks[lx->n_toks++] = t;
    return 0;
}

static int count_nl(const char *p, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* Length of the Python-whitespace run at s[i..n). */
static size_t ws_run(const char *s, size_t n, size_t i) {
    size_t j = i;
    while (j < n) {
        size_t k = j;
        uint32_t cp = ct_utf8_next(s, n, &k);
        if (!ct_py_isspace(cp))
            break;
        j = k;
    }
    return j - i;
}

/* Python str.rstrip() of s[0..n): returns the new length. */
static size_t rstrip_len(const char *s, size_t n) {
    size_t off, len;
    ct_py_strip(s, n, NULL, 0, 2, &off, &len);
    return len;
}

/* Applies the whitespace control of a tag opener (sign '-', '+' or 0) to the text before it. */
static size_t strip_text(lexer *lx, const char *text, size_t n, char sign, bool is_var) {
    if (sign == '-')
        return rstrip_len(text, n);
    if (sign != '+' && !is_var) {
        size_t l_pos = 0;
        for (size_t i = n; i > 0; i--)
            if (text[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if (l_pos > 0 || lx->line_starting) {
            /* whitespace_re.fullmatch(text, l_pos): one or more whitespace chars */
            if (n > l_pos && ws_run(text, n, l_pos) == n - l_pos)
                return l_pos;
        }
    }
    return n;
}

static int emit_data(lexer *lx, const char *p, size_t n, int line) {
    if (n == 0)
        return 0;
    ct_tok t = {.type = TK_DATA, .line = line, .p = p, .n = n};
    return lex_push(lx, t);
}

/* Matches jinja2's raw-begin pattern at s[q] ("{%" [-+]? \s* "raw" \s* ("-%}" \s* | "%}")).
 * Returns the end offset or 0. */
static size_t match_raw_begin(const lexer *lx, size_t q) {
    const char *s = lx->s;
    size_t n = lx->n, i = q + 2;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        i++;
    i += ws_run(s, n, i);
    if (n - i < 3 || memcmp(s + i, "raw", 3) != 0)
        return 0;
    i += 3;
    i += ws_run(s, n, i);
    if (n - i >= 3 && memcmp(s + i, "-%}", 3) == 0)
        return i + 3 + ws_run(s, n, i + 3);
    if (n - i >= 2 && memcmp(s + i, "%}", 2) == 0)
        return i + 2;
    return 0;
}

/* Matches "{%" [-+]? \s* "endraw" \s* ("+%}" | "-%}" \s* | "%}" "\n"?) at s[q]; returns end or 0.
 */
static size_t match_raw_end(const lexer *lx, size_t q, char *sign) {
    const char *s = lx->s;
    size_t n = lx->n, i = q + 2;
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        *sign = s[i++];
    i += ws_run(s, n, i);
    if (n - i < 6 || memcmp(s + i, "endraw", 6) != 0)
        return 0;
    i += 6;
    i += ws_run(s, n, i);
    if (n - i >= 3 && memcmp(s + i, "+%}", 3) == 0)
        return i + 3;
    if (n - i >= 3 && memcmp(s + i, "-%}", 3) == 0)
        return i + 3 + ws_run(s, n, i + 3);
    if (n - i >= 2 && memcmp(s + i, "%}", 2) == 0)
        return i + 2 + (i + 2 < n && s[i + 2] == '\n');
    return 0;
}

/* Decodes a string literal body the way jinja2 does:
 * body.encode("ascii", "backslashreplace").decode("unicode-escape"). */
static int decode_string(lexer *lx, const char *p, size_t n, int line, ct_tok *t) {
    strbuf sb;
    strbuf_init(&sb);
    int rc = 0;
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        if (c != '\\') {
            strbuf_putc(&sb, (char)c);
            i++;
            continue;
        }
        if (i + 1 >= n) { /* cannot happen: the literal regex pairs backslashes */
            rc = err_set(ERR_FORMAT, "template line %d: \\ at end of string", line);
            goto out;
        }
        unsigned char e = (unsigned char)p[i + 1];
        i += 2;
        switch (e) {
        case '\n':
            break; /* line continuation */
        case '\\':
            strbuf_putc(&sb, '\\');
            break;
        case '\'':
            strbuf_putc(&sb, '\'');
            break;
        case '"':
            strbuf_putc(&sb, '"');
            break;
        case 'a':
            strbuf_putc(&sb, '\a');
            break;
        case 'b':
            strbuf_putc(&sb, '\b');
            break;
        case 'f':
            strbuf_putc(&sb, '\f');
            break;
        case 'n':
            strbuf_putc(&sb, '\n');
            break;
        case 'r':
            strbuf_putc(&sb, '\r');
            break;
        case 't':
            strbuf_putc(&sb, '\t');
            break;
        case 'v':
            strbuf_putc(&sb, '\v');
            break;
        case '0':
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
        case '7': {
            uint32_t v = e - '0';
            for (int k = 0; k < 2 && i < n && p[i] >= '0' && p[i] <= '7'; k++)
                v = v * 8 + (uint32_t)(p[i++] - '0');
            ct_utf8_put(&sb, v);
            break;
        }
        case 'x':
        case 'u':
        case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + (size_t)k < n ? utf8_hex_digit(p[i + (size_t)k]) : -1;
                if (h < 0) {
                    rc = err_set(ERR_FORMAT, "template line %d: truncated \\%c escape in string",
                                 line, e);
                    goto out;
                }
                v = v * 16 + (uint32_t)h;
            }
            i += (size_t)digits;
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                rc = err_set(ERR_UNSUPPORTED,
                             "template line %d: escape \\%c%0*X is not a valid "
                             "code point",
                             line, e, digits, v);
                goto out;
            }
            ct_utf8_put(&sb, v);
            break;
        }
        case 'N':
            rc = err_set(ERR_UNSUPPORTED, "template line %d: \\N{...} escapes are not supported",
                         line);
            goto out;
        default:
            if (e >= 0x80) {
                /* a backslash before a non-ASCII char: the codec sees "\\" + "xNN" text */
                size_t j = i - 1;
                uint32_t cp = ct_utf8_next(p, n, &j);
                i = j;
                strbuf_putc(&sb, '\\');
                if (cp < 0x100)
                    strbuf_printf(&sb, "x%02x", cp);
                else if (cp < 0x10000)
                    strbuf_printf(&sb, "u%04x", cp);
                else
                    strbuf_printf(&sb, "U%08x", cp);
            } else {
                strbuf_putc(&sb, '\\');
                strbuf_putc(&sb, (char)e);
            }
        }
    }
    if (strbuf_failed(&sb)) {
        rc = err_set(ERR_NOMEM, "template: out of memory decoding a string");
        goto out;
    }
    t->p = arena_strndup(lx->a, sb.data, sb.len);
    t->n = sb.len;
    if (!t->p)
        rc = err_set(ERR_NOMEM, "template: out of memory decoding a string");
out:
    strbuf_deinit(&sb);
    return rc;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* (\d+_)*\d+ at s[i]: returns the end or i when no match. */
static size_t match_digits(const char *s, size_t n, size_t i) {
    size_t j = i;
    if (j >= n || !is_digit(s[j]))
        return i;
    while (j < n && is_digit(s[j]))
        j++;
    while (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) {
        j++;
        while (j < n && is_digit(s[j]))
            j++;
    }
    return j;
}

/* Copies s[i..j) without underscores into buf (NUL-terminated); false if too long. */
static bool strip_underscores(const char *s, size_t i, size_t j, char *buf, size_t cap) {
    size_t k = 0;
    for (; i < j; i++) {
        if (s[i] == '_')
            continue;
        if (k + 1 >= cap)
            return false;
        buf[k++] = s[i];
    }
    buf[k] = 0;
    return true;
}

static int lex_number(lexer *lx, size_t *pos, bool *matched) {
    const char *s = lx->s;
    size_t n = lx->n, i = *pos;
    *matched = false;
    if (!is_digit(s[i]))
        return 0;
    char buf[128];
    /* float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+) */
    if (!(i > 0 && s[i - 1] == '.')) {
        size_t j = match_digits(s, n, i);
        size_t end = 0;
        size_t k = j;
        if (k + 1 < n && s[k] == '.' && is_digit(s[k + 1]))
            k = match_digits(s, n, k + 1);
        for (int pass = 0; pass < 2 && !end; pass++) {
            size_t at = pass == 0 ? k : j; /* exponent after the fraction, else right after */
            if (at < n && (s[at] == 'e' || s[at] == 'E')) {
                size_t m = at + 1;
                if (m < n && (s[m] == '+' || s[m] == '-'))
                    m++;
                size_t e = match_digits(s, n, m);
                if (e > m)
                    end = e;
            }
        }
        if (!end && k != j)
            end = k; /* digits "." digits */
        if (end) {
            if (!strip_underscores(s, i, end, buf, sizeof buf))
                return err_set(ERR_UNSUPPORTED, "template line %d: float literal too long",
                               lx->line);
            ct_tok t = {.type = TK_FLOAT, .line = lx->line, .p = s + i, .n = end - i};
            t.f = strtod(buf, NULL);
            *pos = end;
            *matched = true;
            return lex_push(lx, t);
        }
    }
    /* integer_re (case-insensitive) */
    int base = 10;
    size_t j = i, start = i;
    if (s[i] == '0' && i + 1 < n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        char b = (char)(s[i + 1] | 0x20);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        size_t k = i + 2;
        size_t ok = k;
        for (;;) {
            size_t m = k;
            if (m < n && s[m] == '_')
                m++;
            int h = m < n ? utf8_hex_digit(s[m]) : -1;
            if (h < 0 || h >= base)
                break;
            k = m + 1;
            ok = k;
        }
        if (ok > i + 2) {
            j = ok;
            start = i + 2;
        } else {
            base = 10;
        }
    }
    if (base == 10) {
        if (s[i] == '0') {
            j = i + 1;
            for (;;) {
                size_t m = j;
                if (m < n && s[m] == '_')
                    m++;
                if (m < n && s[m] == '0')
                    j = m + 1;
                else
                    break;
            }
        } else {
            j = i + 1;
            for (;;) {
                size_t m = j;
                if (m < n && s[m] == '_')
                    m++;
                if (m < n && is_digit(s[m]))
                    j = m + 1;
                else
                    break;
            }
        }
    }
    if (!strip_underscores(s, start, j, buf, sizeof buf))
        return err_set(ERR_UNSUPPORTED, "template line %d: integer literal too long", lx->line);
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(buf, &end, base);
    if (errno || v > INT64_MAX)
        return err_set(ERR_UNSUPPORTED, "template line %d: integer literal %.*s out of range",
                       lx->line, (int)(j - i), s + i);
    ct_tok t = {.type = TK_INT, .line = lx->line, .p = s + i, .n = j - i};
    t.i = (int64_t)v;
    *pos = j;
    *matched = true;
    return lex_push(lx, t);
}

static const struct {
    const char *s;
    uint8_t op;
} lex_ops[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW},   {"==", OP_EQ},      {"!=", OP_NE},      {">=", OP_GTEQ},
    {"<=", OP_LTEQ},     {"+", OP_ADD},    {"-", OP_SUB},      {"/", OP_DIV},      {"*", OP_MUL},
    {"%", OP_MOD},       {"~", OP_TILDE},  {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN},
    {")", OP_RPAREN},    {"{", OP_LBRACE}, {"}", OP_RBRACE},   {">", OP_GT},       {"<", OP_LT},
    {"=", OP_ASSIGN},    {".", OP_DOT},    {":", OP_COLON},    {"|", OP_PIPE},     {",", OP_COMMA},
    {";", OP_SEMICOLON},
};

/* Tokenises the inside of a {{ }} or {% %} tag until its end. */
static int lex_tag(lexer *lx, bool is_block) {
    const char *s = lx->s;
    size_t n = lx->n;
    char stack[CT_MAX_PARSE_DEPTH];
    int depth = 0;
    int rc;
    while (lx->pos < n) {
        size_t i = lx->pos;
        if (depth == 0) {
            size_t end = 0;
            if (is_block) {
                if (n - i >= 3 && s[i] == '+' && s[i + 1] == '%' && s[i + 2] == '}')
                    end = i + 3;
                else if (n - i >= 3 && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}')
                    end = i + 3 + ws_run(s, n, i + 3);
                else if (n - i >= 2 && s[i] == '%' && s[i + 1] == '}')
                    end = i + 2 + (i + 2 < n && s[i + 2] == '\n');
            } else {
                if (n - i >= 3 && s[i] == '-' && s[i + 1] == '}' && s[i + 2] == '}')
                    end = i + 3 + ws_run(s, n, i + 3);
                else if (n - i >= 2 && s[i] == '}' && s[i + 1] == '}')
                    end = i + 2;
            }
            if (end) {
                ct_tok t = {.type = is_block ? TK_BLOCK_END : TK_VAR_END, .line = lx->line};
                if ((rc = lex_push(lx, t)))
                    return rc;
                lx->line += count_nl(s + i, end - i);
                lx->line_starting = s[end - 1] == '\n';
                lx->pos = end;
                return 0;
            }
        }
        size_t w = ws_run(s, n, i);
        if (w) {
            lx->line += count_nl(s + i, w);
            lx->pos = i + w;
            continue;
        }
        bool matched;
        if ((rc = lex_number(lx, &lx->pos, &matched)))
            return rc;
        if (matched)
            continue;
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i + 1;
            while (j < n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') ||
                             is_digit(s[j]) || s[j] == '_'))
                j++;
            ct_tok t = {.type = TK_NAME, .line = lx->line, .p = s + i, .n = j - i};
            if ((rc = lex_push(lx, t)))
                return rc;
            lx->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n)
                    j++;
                j++;
            }
            if (j < n) {
                ct_tok t = {.type = TK_STRING, .line = lx->line};
                if ((rc = decode_string(lx, s + i + 1, j - i - 1, lx->line, &t)))
                    return rc;
                if ((rc = lex_push(lx, t)))
                    return rc;
                lx->line += count_nl(s + i, j + 1 - i);
                lx->pos = j + 1;
                continue;
            }
        }
        bool op_found = false;
        for (size_t k = 0; k < sizeof lex_ops / sizeof lex_ops[0]; k++) {
            size_t m = strlen(lex_ops[k].s);
            if (n - i >= m && memcmp(s + i, lex_ops[k].s, m) == 0) {
                uint8_t op = lex_ops[k].op;
                if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
                    if (depth >= CT_MAX_PARSE_DEPTH)
                        return err_set(ERR_TOOLARGE,
                                       "template line %d: brackets nested deeper "
                                       "than %d",
                                       lx->line, CT_MAX_PARSE_DEPTH);
                    stack[depth++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
                } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
                    char want = s[i];
                    if (depth == 0)
                        return err_set(ERR_FORMAT, "template line %d: unexpected '%c'", lx->line,
                                       want);
                    if (stack[depth - 1] != want)
                        return err_set(ERR_FORMAT,
                                       "template line %d: unexpected '%c', expected "
                                       "'%c'",
                                       lx->line, want, stack[depth - 1]);
                    depth--;
                }
                ct_tok t = {.type = TK_OP, .op = op, .line = lx->line, .p = s + i, .n = m};
                if ((rc = lex_push(lx, t)))
                    return rc;
                lx->pos = i + m;
                op_found = true;
                break;
            }
        }
        if (op_found)
            continue;
        size_t k = i;
        uint32_t cp = ct_utf8_next(s, n, &k);
        strbuf sb;
        strbuf_init(&sb);
        ct_py_repr_str(&sb, s + i, k - i);
        int e = err_set(ERR_FORMAT, "template line %d: unexpected char %s (U+%04X) at %zu",
                        lx->line, sb.data, cp, i);
        strbuf_deinit(&sb);
        return e;
    }
    /* end of source inside a tag: the parser reports it */
    return 0;
}

/* Normalises newlines (\r\n, \r -> \n) and drops one trailing newline, as jinja2 does. */
static int normalise(lexer *lx, const char *src, size_t n) {
    char *d = arena_alloc(lx->a, n + 1);
    if (!d)
        return err_set(ERR_NOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            d[k++] = src[i];
        }
    }
    if (k > 0 && d[k - 1] == '\n')
        k--;
    d[k] = 0;
    lx->s = d;
    lx->n = k;
    return 0;
}

int ct_lex(arena *a, const char *src, size_t n, ct_tok **toks, size_t *n_toks) {
    lexer lx = {.a = a, .line = 1, .line_starting = true};
    int rc = normalise(&lx, src, n);
    if (rc)
        return rc;
    const char *s = lx.s;
    n = lx.n;
    while (lx.pos < n) {
        size_t q = lx.pos;
        const char *hit = NULL;
        while (q + 1 < n) {
            hit = memchr(s + q, '{', n - q - 1);
            if (!hit)
                break;
            q = (size_t)(hit - s);
            char c = s[q + 1];
            if (c == '{' || c == '%' || c == '#')
                break;
            q++;
            hit = NULL;
        }
        if (!hit) {
            if ((rc = emit_data(&lx, s + lx.pos, n - lx.pos, lx.line)))
                return rc;
            break;
        }
        char kind = s[q + 1];
        char sign = (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        size_t raw_end = kind == '%' ? match_raw_begin(&lx, q) : 0;
        size_t tlen = strip_text(&lx, s + lx.pos, q - lx.pos, sign, kind == '{');
        if ((rc = emit_data(&lx, s + lx.pos, tlen, lx.line)))
            return rc;
        lx.line += count_nl(s + lx.pos, q - lx.pos);
        if (raw_end) {
            int raw_line = lx.line;
            lx.line += count_nl(s + q, raw_end - q);
            lx.line_starting = s[raw_end - 1] == '\n';
            size_t r = raw_end, end = 0;
            char rsign = 0;
            while (r + 1 < n) {
                const char *h = memchr(s + r, '{', n - r - 1);
                if (!h)
                    break;
                r = (size_t)(h - s);
                if (s[r + 1] == '%' && (end = match_raw_end(&lx, r, &rsign)))
                    break;
                r++;
            }
            if (!end)
                return err_set(ERR_FORMAT, "template line %d: missing end of raw directive",
                               raw_line);
            size_t blen = strip_text(&lx, s + raw_end, r - raw_end, rsign, false);
            if ((rc = emit_data(&lx, s + raw_end, blen, lx.line)))
                return rc;
            lx.line += count_nl(s + raw_end, end - raw_end);
            lx.line_starting = s[end - 1] == '\n';
            lx.pos = end;
            continue;
        }
        lx.pos = q + 2 + (sign ? 1 : 0);
        lx.line_starting = false;
        if (kind == '#') {
            size_t r = lx.pos, end = 0;
            while (r + 1 < n) {
                const char *h = memmem(s + r, n - r, "#}", 2);
                if (!h)
                    break;
                size_t e = (size_t)(h - s);
                if (e > lx.pos && s[e - 1] == '-' && e - 1 >= lx.pos)
                    end = e + 2 + ws_run(s, n, e + 2);
                else if (e > lx.pos && s[e - 1] == '+')
                    end = e + 2;
                else
                    end = e + 2 + (e + 2 < n && s[e + 2] == '\n');
                break;
            }
            if (!end)
                return err_set(ERR_FORMAT, "template line %d: missing end of comment tag", lx.line);
            lx.line += count_nl(s + lx.pos, end - lx.pos);
            lx.line_starting = s[end - 1] == '\n';
            lx.pos = end;
            continue;
        }
        ct_tok t = {.type = kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, .line = lx.line};
        if ((rc = lex_push(&lx, t)))
            return rc;
        if ((rc = lex_tag(&lx, kind == '%')))
            return rc;
    }
    ct_tok eof = {.type = TK_EOF, .line = lx.line};
    if ((rc = lex_push(&lx, eof)))
        return rc;
    *toks = lx.toks;
    *n_toks = lx.n_toks;
    return 0;
}
