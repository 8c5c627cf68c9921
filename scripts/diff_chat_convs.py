#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Differential tester for the real templates: random conversations (roles, content shapes,
tool calls with nested arguments, reasoning, flags) rendered through every template in
../shared/templates by jinja2 (the Hugging Face environment) and by verity's engine
(scripts/ct_render.c), compared byte for byte, errors included. A developer tool, not part of
`make test`; what it finds becomes a case in gen_chat_cases.py.

Usage: python3 scripts/diff_chat_convs.py [--n 40] [--seed 1] [--only SUBSTR] [--show 10]
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
from gen_chat_cases import NOW_UNIX, TOOLS, make_env, special_tokens  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["Hello", "", " ", "héllo 中文 😀", "a\nb", "  padded  ", "<think>x</think>rest",
         "quote ' and \" and \\", "{{ not jinja }}", "<|im_end|>", "</s>", "1 + 1 = 2",
         "line\r\nbreak", "\t tab", "Ünïcödé ✓", "<tool_call>{}</tool_call>"]


def rtext(r):
    return "".join(r.choice(TEXTS) for _ in range(r.randint(1, 3)))


def rvalue(r, d=0):
    k = r.random()
    if d > 2 or k < 0.3:
        return r.choice([1, 0, -5, 2.5, 1.0, 1e20, True, False, None, "x", "é", "", "a\"b"])
    if k < 0.6:
        return [rvalue(r, d + 1) for _ in range(r.randint(0, 3))]
    return {r.choice(["a", "b", "key", "é", "n"]): rvalue(r, d + 1) for _ in range(r.randint(0, 3))}


def rcontent(r):
    k = r.random()
    if k < 0.75:
        return rtext(r)
    if k < 0.85:
        return None
    return [{"type": "text", "text": rtext(r)} for _ in range(r.randint(1, 2))]


def rconv(r):
    msgs = []
    if r.random() < 0.6:
        msgs.append({"role": "system", "content": rcontent(r) if r.random() < 0.3 else rtext(r)})
    n = r.randint(1, 4)
    ids = 0
    for i in range(n):
        msgs.append({"role": "user", "content": rcontent(r)})
        if i == n - 1 and r.random() < 0.6:
            break
        m = {"role": "assistant", "content": rcontent(r)}
        if r.random() < 0.3:
            m["reasoning_content"] = rtext(r)
        if r.random() < 0.4:
            calls = []
            for _ in range(r.randint(1, 2)):
                ids += 1
                args = {r.choice(["location", "query", "x", "n"]): rvalue(r)
                        for _ in range(r.randint(0, 3))}
                if r.random() < 0.3:
                    args = json.dumps(args)
                calls.append({"id": "call%05d" % ids, "type": "function",
                              "function": {"name": r.choice(["get_weather", "search_web"]),
                                           "arguments": args}})
            m["tool_calls"] = calls
            msgs.append(m)
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"],
                             "name": c["function"]["name"], "content": rtext(r)})
            if r.random() < 0.5:
                msgs.append({"role": "assistant", "content": rtext(r)})
        else:
            msgs.append(m)
    ctx = {"messages": msgs, "tools": TOOLS if r.random() < 0.5 else None, "documents": None,
           "add_generation_prompt": r.random() < 0.6}
    if r.random() < 0.5:
        ctx["enable_thinking"] = r.random() < 0.5
    if r.random() < 0.2:
        ctx["reasoning_effort"] = r.choice(["low", "high"])
    return ctx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40, help="conversations per template")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--show", type=int, default=10)
    args = ap.parse_args()
    tdir = os.path.join(ROOT, "..", "shared", "templates")
    exe = os.path.join(tempfile.gettempdir(), "ct_render_%d" % os.getpid())
    subprocess.check_call(["cc", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "src"),
                           "-O1", "-g", os.path.join(ROOT, "scripts", "ct_render.c"),
                           os.path.join(ROOT, "build", "release", "libverity.a"), "-lm",
                           "-pthread", "-o", exe])
    env = make_env()
    r = random.Random(args.seed)
    cases, expected, names = [], [], []
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja") or args.only not in name:
            continue
        src = open(os.path.join(tdir, name), encoding="utf-8").read()
        tmpl = env.from_string(src)
        bos, eos = special_tokens(name)
        for _ in range(args.n):
            ctx = rconv(r)
            if bos is not None:
                ctx["bos_token"] = bos
            if eos is not None:
                ctx["eos_token"] = eos
            try:
                expected.append({"output": tmpl.render(**copy.deepcopy(ctx))})
            except Exception as e:
                expected.append({"error": str(e).split("\n")[0], "type": type(e).__name__})
            cases.append({"t": src, "ctx": ctx})
            names.append(name)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({"now_unix": NOW_UNIX, "cases": cases}, f, ensure_ascii=False)
        path = f.name
    out = subprocess.run([exe, path], capture_output=True, text=True, encoding="utf-8")
    os.unlink(path)
    os.unlink(exe)
    if out.returncode != 0:
        print("ct_render failed:", out.stderr[-2000:], file=sys.stderr)
        return 1
    got = json.loads(out.stdout)
    bad = msg_bad = shown = 0
    for name, c, w, g in zip(names, cases, expected, got):
        problem = None
        if "output" in w:
            if g.get("output") != w["output"]:
                o = g.get("output")
                if o is None:
                    problem = "jinja2 rendered, verity failed: %s" % g["error"]
                else:
                    i = next((k for k in range(min(len(o), len(w["output"])))
                              if o[k] != w["output"][k]), min(len(o), len(w["output"])))
                    problem = "differ at %d:\n  jinja2 %r\n  verity %r" % (
                        i, w["output"][max(0, i - 60):i + 60], o[max(0, i - 60):i + 60])
                bad += 1
        elif "output" in g:
            problem = "jinja2 %s: %s\n  verity rendered" % (w["type"], w["error"])
            bad += 1
        elif not (g["error"].endswith(w["error"]) or g["error"] == w["error"]):
            problem = "messages: jinja2 %s: %s\n  verity %s" % (w["type"], w["error"], g["error"])
            msg_bad += 1
        if problem and shown < args.show:
            print("--- %s %s\n  %s" % (name, json.dumps(c["ctx"], ensure_ascii=False)[:300],
                                      problem))
            shown += 1
    n_err = sum(1 for w in expected if "error" in w)
    print("%d renders (%d jinja2 errors): %d mismatches, %d message mismatches" %
          (len(cases), n_err, bad, msg_bad))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
