#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Differential tester: random templates rendered by jinja2 (the Hugging Face environment) and by
verity's engine (through scripts/ct_render.c), compared byte for byte. A developer tool, not part
of `make test`: run it after changing src/template to look for divergences, then turn what it finds
into snippets in gen_chat_unit.py.

Usage: python3 scripts/diff_chat_jinja.py [--n 2000] [--seed 1] [--show 20]
(needs build/release/libverity.a: run `make` first)
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_chat_cases import NOW_UNIX, make_env  # noqa: E402
from gen_chat_unit import CONTEXT  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VARS = list(CONTEXT) + ["undef_x"]
STRS = ["'a'", "'abc'", "''", "'Hello World'", "'é中😀'", "'it\\'s'", "'a,b,c'", "' pad '",
        "'\\n'", "'x\\ny'", "'{}'", "'%s'", "'A'", "'role'", "'content'", "'<b>'"]
ATTRS = ["a", "b", "x", "y", "z", "role", "content", "name", "age", "items", "get", "keys",
         "tags", "missing", "upper", "split", "tool_calls", "function", "arguments", "0"]
FILTERS = [
    ("length", [""]), ("count", [""]), ("string", [""]), ("trim", ["", "('x')"]),
    ("upper", [""]), ("lower", [""]), ("title", [""]), ("capitalize", [""]),
    ("tojson", ["", "(indent=2)", "(ensure_ascii=true)", "(sort_keys=true)"]),
    ("join", ["", "(',')", "(', ')"]), ("default", ["('d')", "('d', true)", ""]),
    ("first", [""]), ("last", [""]), ("list", [""]), ("sort", ["", "(reverse=true)"]),
    ("unique", [""]), ("reverse", [""]), ("min", [""]), ("max", [""]), ("sum", [""]),
    ("int", ["", "(7)"]), ("float", [""]), ("abs", [""]), ("round", ["", "(1)"]),
    ("replace", ["('a', 'b')", "('l', '')"]), ("items", [""]), ("dictsort", [""]),
    ("selectattr", ["('age')", "('role', 'equalto', 'user')"]),
    ("rejectattr", ["('tags')"]), ("select", ["", "('odd')", "('string')"]),
    ("reject", ["('none')", "('equalto', 1)"]), ("map", ["('string')", "(attribute='name')"]),
    ("indent", ["", "(2, true)"]), ("center", ["(9)"]), ("wordcount", [""]),
    ("safe", [""]), ("e", [""]), ("batch", ["(2)"]), ("format", ["('x')", "(1, 2)"]),
    ("attr", ["('a')"]),
]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "sequence", "iterable", "boolean", "true", "false", "odd", "even", "callable",
         "divisibleby 3", "equalto 1", "in l", "lower", "upper", "gt 1", "sameas none"]
METHODS = ["upper()", "lower()", "strip()", "split()", "split(',')", "split(',', 1)",
           "rsplit(',', 1)", "startswith('a')", "endswith('c')", "replace('a', 'X')",
           "find('b')", "count('a')", "get('a')", "get('zz', 5)", "items()", "keys()", "values()",
           "title()", "capitalize()", "lstrip('a')", "rstrip()", "format(1, 'x')", "join(ls)",
           "splitlines()", "isdigit()", "index(1)", "copy()", "partition(',')", "zfill(5)"]
OPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in",
       "not in", "and", "or"]


class Gen:
    def __init__(self, rng):
        self.r = rng

    def atom(self, d):
        r = self.r.random()
        if r < 0.45:
            return self.r.choice(VARS)
        if r < 0.6:
            return self.r.choice(STRS)
        if r < 0.72:
            return str(self.r.choice([0, 1, 2, 3, -1, 7, 10, 100]))
        if r < 0.78:
            return self.r.choice(["1.5", "0.1", "2.0", "-0.5", "1e3", "3.25"])
        if r < 0.84:
            return self.r.choice(["true", "false", "none"])
        if r < 0.92 and d > 0:
            items = ", ".join(self.expr(d - 1) for _ in range(self.r.randint(0, 3)))
            return self.r.choice(["[%s]", "(%s,)"]) % items
        if d > 0:
            items = ", ".join("%s: %s" % (self.r.choice(STRS), self.expr(d - 1))
                              for _ in range(self.r.randint(0, 2)))
            return "{%s}" % items
        return self.r.choice(VARS)

    def postfix(self, e, d):
        for _ in range(self.r.randint(0, 2)):
            r = self.r.random()
            if r < 0.35:
                e = "%s.%s" % (e, self.r.choice(ATTRS))
            elif r < 0.55:
                e = "%s[%s]" % (e, self.r.choice(["0", "-1", "1", "'a'", "'role'", "5", "'x'"]))
            elif r < 0.7:
                e = "%s[%s]" % (e, self.r.choice(["1:", ":2", "::-1", "-2:", "1:3", "::2"]))
            else:
                e = "%s.%s" % (e, self.r.choice(METHODS))
        return e

    def expr(self, d=3):
        r = self.r.random()
        if d <= 0 or r < 0.3:
            return self.postfix(self.atom(d), d)
        if r < 0.5:
            name, args = self.r.choice(FILTERS)
            return "%s | %s%s" % (self.unary(d - 1), name, self.r.choice(args))
        if r < 0.6:
            neg = self.r.choice(["", "not "])
            return "%s is %s%s" % (self.unary(d - 1), neg, self.r.choice(TESTS))
        if r < 0.85:
            return "%s %s %s" % (self.unary(d - 1), self.r.choice(OPS), self.unary(d - 1))
        if r < 0.92:
            return "%s if %s else %s" % (self.unary(d - 1), self.unary(d - 1), self.unary(d - 1))
        return "not " + self.unary(d - 1)

    def unary(self, d):
        e = self.expr(d)
        return "(%s)" % e if self.r.random() < 0.7 else self.postfix(self.atom(d), d)

    def ws(self):
        return self.r.choice(["", "", " ", "\n", "  ", "\n  ", " \n", "\t"])

    def tag(self, body):
        o = self.r.choice(["{%", "{%", "{%-", "{%+"])
        c = self.r.choice(["%}", "%}", "-%}", "+%}"])
        return "%s %s %s" % (o, body, c)

    def stmt(self, d):
        r = self.r.random()
        if d <= 0 or r < 0.35:
            o = self.r.choice(["{{", "{{-"])
            c = self.r.choice(["}}", "-}}"])
            return "%s %s %s%s" % (o, self.expr(), c, self.ws())
        if r < 0.45:
            return "text%d%s" % (self.r.randint(0, 9), self.ws())
        if r < 0.6:
            return (self.tag("if " + self.expr(2)) + self.ws() + self.body(d - 1) +
                    (self.tag("else") + self.body(d - 1) if self.r.random() < 0.5 else "") +
                    self.tag("endif") + self.ws())
        if r < 0.75:
            it = self.r.choice(["l", "ls", "msgs", "users", "d", "s", "range(3)", "d.items()",
                                "[1, 2, 3]", "el", "u"])
            tgt = "k, v" if it == "d.items()" else "x"
            extra = self.r.choice(["", "", " if x"]) if tgt == "x" else ""
            inner = self.r.choice(["{{ loop.index }}", "{{ loop.first }}", "{{ loop.last }}",
                                   "{{ x }}", "{{ loop.previtem }}", "{{ loop.length }}",
                                   "{% if loop.index > 1 %}{% break %}{% endif %}"])
            return (self.tag("for %s in %s%s" % (tgt, it, extra)) + inner + self.ws() +
                    self.body(d - 1) + self.tag("endfor") + self.ws())
        if r < 0.87:
            return self.tag("set v%d = %s" % (self.r.randint(0, 2), self.expr(2))) + self.ws()
        if r < 0.93:
            return ("{%% macro mm(a, b=%s) %%}{{ a }}|{{ b }}{%% endmacro %%}{{ mm(%s) }}" %
                    (self.expr(1), self.expr(1)))
        return "{{ v%d }}" % self.r.randint(0, 2)

    def ws_template(self):
        """Text and tags only: exercises the lexer's whitespace control."""
        pieces = []
        texts = ["", " ", "  ", "\t", "\n", "\n\n", " \n ", "\r\n", "\r", "x", "ab ",
                 "\u00a0", "\u3000", "\n\t ", "é", " y\n"]
        for _ in range(self.r.randint(1, 12)):
            pieces.append(self.r.choice(texts))
            k = self.r.random()
            o = self.r.choice(["{%", "{%-", "{%+"])
            c = self.r.choice(["%}", "-%}", "+%}"])
            if k < 0.3:
                pieces.append("%s if t %s%s%s endif %s" % (o, c, self.r.choice(texts), o, c))
            elif k < 0.5:
                pieces.append(self.r.choice(["{{", "{{-"]) + self.r.choice([" n ", "'v'", " e "]) +
                              self.r.choice(["}}", "-}}"]))
            elif k < 0.65:
                pieces.append(self.r.choice(["{#", "{#-", "{#+"]) + self.r.choice([" c ", "", "\n"]) +
                              self.r.choice(["#}", "-#}", "+#}"]))
            elif k < 0.75:
                pieces.append("%s raw %s%s{{ x }}%s endraw %s" % (o, c, self.r.choice(texts), o, c))
            elif k < 0.9:
                pieces.append("%s for i in [1, 2] %s%s{{ i }}%s%s endfor %s" % (
                    o, c, self.r.choice(texts), self.r.choice(texts), o, c))
            else:
                pieces.append("%s set q = 1 %s" % (o, c))
        pieces.append(self.r.choice(texts))
        return "".join(pieces)

    def body(self, d):
        return "".join(self.stmt(d) for _ in range(self.r.randint(1, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=20)
    ap.add_argument("--messages", action="store_true", help="also show error-message mismatches")
    ap.add_argument("--ws", action="store_true", help="whitespace-control templates instead")
    args = ap.parse_args()
    exe = os.path.join(tempfile.gettempdir(), "ct_render_%d" % os.getpid())
    subprocess.check_call(["cc", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "src"),
                           "-O1", "-g", os.path.join(ROOT, "scripts", "ct_render.c"),
                           os.path.join(ROOT, "build", "release", "libverity.a"), "-lm",
                           "-pthread", "-o", exe])
    env = make_env()
    gen = Gen(random.Random(args.seed))
    cases, expected = [], []
    for _ in range(args.n):
        src = gen.ws_template() if args.ws else gen.body(3)
        try:
            # a fresh copy each time: some jinja2 filters mutate their input (`list | indent`)
            expected.append({"output": env.from_string(src).render(**copy.deepcopy(CONTEXT))})
        except Exception as e:
            expected.append({"error": str(e).split("\n")[0], "type": type(e).__name__})
        cases.append({"t": src, "ctx": CONTEXT})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({"now_unix": NOW_UNIX, "cases": cases}, f, ensure_ascii=False)
        path = f.name
    out = subprocess.run([exe, path], capture_output=True, text=True, encoding="utf-8")
    os.unlink(path)
    os.unlink(exe)
    if out.returncode != 0:
        print("ct_render failed:", out.stderr, file=sys.stderr)
        return 1
    got = json.loads(out.stdout)
    bad = msg_bad = 0
    shown = 0
    for c, w, g in zip(cases, expected, got):
        problem = None
        if "output" in w:
            if g.get("output") != w["output"]:
                problem = "jinja2 %r\n  verity %r" % (w["output"][:300],
                                                      g.get("output", g.get("error")))
        elif "output" in g:
            problem = "jinja2 %s: %s\n  verity rendered %r" % (w["type"], w["error"],
                                                              g["output"][:300])
        elif args.messages and not g["error"].endswith(w["error"]) and \
                w["type"] not in ("TemplateSyntaxError", "TemplateAssertionError"):
            msg_bad += 1
            problem = "jinja2 %s: %s\n  verity %s: %s" % (w["type"], w["error"], g["code"],
                                                          g["error"])
        if problem:
            if "message" not in problem:
                bad += 1
            if shown < args.show:
                print("--- %r\n  %s" % (c["t"], problem))
                shown += 1
    n_err = sum(1 for w in expected if "error" in w)
    print("%d cases (%d jinja2 errors): %d output mismatches, %d message mismatches" %
          (len(cases), n_err, bad - msg_bad, msg_bad))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
