#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generates the reference renderings of the shared chat templates for tests/test_chat_template.c.

Every ../shared/templates/*.jinja is rendered with jinja2 exactly the way Hugging Face transformers
renders chat templates (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the
loopcontrols extension and HF's `generation` tag; HF's tojson, raise_exception and strftime_now),
against every conversation in CASES. Output:

  tests/data/chat/cases.json           the conversations (inputs), shared by every template
  tests/data/chat/expected/NAME.json   per template: bos/eos tokens used and, per case, either
                                       {"output": "..."} or {"error": "...", "error_type": "..."}

strftime_now is pinned to 2025-03-07 14:05:09 (NOW_UNIX below, UTC) so the output is reproducible;
the C test passes the same instant as chat_render_opts.now_unix.

Usage: python3 scripts/gen_chat_cases.py [--templates DIR] [--out DIR]
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2025, 3, 7, 14, 5, 9)
NOW_UNIX = 1741356309  # calendar.timegm(NOW.timetuple())


class AssistantTracker(jinja2.ext.Extension):
    """HF's {% generation %} tag: renders its body (as a caller macro) unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(
            self.call_method("_generation_support"), [], [], body
        ).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- conversations ----------------------------------------------------------------------------

SYSTEM = "You are a helpful assistant."

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "Temperature unit",
                    },
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web and return the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Search query"},
                    "max_results": {
                        "type": "integer",
                        "description": "How many results to return",
                        "default": 5,
                    },
                    "sites": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Restrict to these sites",
                    },
                },
                "required": ["query"],
            },
        },
    },
]

WEATHER_ARGS = {"location": "Paris", "unit": "celsius"}
WEATHER_RESULT = '{"temperature": 18, "condition": "sunny"}'


def tool_turns(args, content=""):
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": "call12345",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": args},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": WEATHER_RESULT},
        {"role": "assistant", "content": "It is 18 degrees and sunny in Paris."},
    ]


CASES = [
    {
        "name": "sys_user",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello! How are you?"}],
        "add_generation_prompt": False,
    },
    {
        "name": "sys_user_agp",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello! How are you?"}],
        "add_generation_prompt": True,
    },
    {
        "name": "multi_turn",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "2 + 2 = 4."},
            {"role": "user", "content": "And times 3?"},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "user_only",
        "messages": [{"role": "user", "content": "Write a haiku about the sea."}],
        "add_generation_prompt": True,
    },
    {
        "name": "user_only_no_agp",
        "messages": [{"role": "user", "content": "Write a haiku about the sea."}],
        "add_generation_prompt": False,
    },
    {
        "name": "tool_call_obj",
        "messages": tool_turns(WEATHER_ARGS),
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "tool_call_str",
        "messages": tool_turns(json.dumps(WEATHER_ARGS)),
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "tool_call_null_content",
        "messages": tool_turns(WEATHER_ARGS, content=None),
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "tool_call_parallel",
        "messages": [
            {"role": "user", "content": "Weather in Paris and in Tokyo, please."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "callA1234", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"location": "Paris"}}},
                    {"id": "callB5678", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"location": "Tokyo", "unit": "celsius"}}},
                ],
            },
            {"role": "tool", "tool_call_id": "callA1234", "name": "get_weather", "content": '{"temperature": 18}'},
            {"role": "tool", "tool_call_id": "callB5678", "name": "get_weather", "content": '{"temperature": 22.5}'},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "tools_agp",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Find news about Mars."}],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "tools_user_no_agp",
        "messages": [{"role": "user", "content": "Find news about Mars."}],
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "unicode",
        "messages": [
            {"role": "system", "content": "Réponds en français. 中文也可以。"},
            {"role": "user", "content": 'Café "quoted" and \'single\'\nsecond line\ttab <b>&amp; \\ emoji 😀🎉'},
            {"role": "assistant", "content": "Très bien ! 好的 👍\n\nDone."},
            {"role": "user", "content": "  spaces around  \n"},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "content_parts",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "text", "text": "a red apple."}]},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "reasoning",
        "messages": [
            {"role": "user", "content": "Is 17 prime?"},
            {"role": "assistant", "content": "Yes, 17 is prime.", "reasoning_content": "17 has no divisors other than 1 and 17."},
            {"role": "user", "content": "And 21?"},
        ],
        "add_generation_prompt": True,
        "extra": {"enable_thinking": True},
    },
    {
        "name": "no_thinking",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Quick answer: capital of Italy?"}],
        "add_generation_prompt": True,
        "extra": {"enable_thinking": False},
    },
    {
        "name": "nested_args",
        "messages": [
            {"role": "user", "content": "Search for cafés."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call98765",
                        "type": "function",
                        "function": {
                            "name": "search_web",
                            "arguments": {
                                "query": "café ☕ \"best\" <near> me",
                                "max_results": 3,
                                "sites": ["a.com", "b.org"],
                                "filters": {"safe": True, "score": 0.5, "none": None, "big": 1e20,
                                            "one": 1.0, "neg": -2, "nested": [[1, 2], {}]},
                            },
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call98765", "name": "search_web",
             "content": "[{\"title\": \"Café Ü\", \"url\": \"https://a.com\"}]"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "reasoning_tools",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "I should call get_weather for Oslo.",
                "tool_calls": [
                    {"id": "call55555", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"location": "Oslo"}}}
                ],
            },
            {"role": "tool", "tool_call_id": "call55555", "name": "get_weather", "content": "-3 C, snow"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
        "extra": {"enable_thinking": True},
    },
    {
        "name": "assistant_last",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hi there!"},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "multi_system_empty",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": ""},
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Ok?"},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "custom_vars",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi."}],
        "add_generation_prompt": True,
        "extra": {
            "functions": json.dumps([t["function"] for t in TOOLS], indent=2),
            "datetime": "2025-03-07",
            "reasoning_effort": "high",
            "builtin_tools": ["code_interpreter", "brave_search"],
        },
    },
]


# ---- special tokens per family ------------------------------------------------------------------

def special_tokens(name):
    n = name.lower()
    table = [
        (("llama-3", "llama3", "meta-llama", "hermes", "firefunction", "functionary", "distill-llama", "apertus"),
         ("<|begin_of_text|>", "<|eot_id|>")),
        (("deepseek", "distill-qwen"), ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")),
        (("qwen", "qwq", "mimo"), (None, "<|im_end|>")),
        (("gemma",), ("<bos>", "<eos>")),
        (("phi-3",), ("<s>", "<|endoftext|>")),
        (("granite",), ("<|end_of_text|>", "<|end_of_text|>")),
        (("cohere", "command-r"), ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>")),
        (("gpt-oss",), ("<|startoftext|>", "<|return|>")),
        (("kimi",), ("[BOS]", "[EOS]")),
        (("glm",), (None, "<|endoftext|>")),
        (("lfm",), ("<|startoftext|>", "<|im_end|>")),
        (("minimax",), ("<beginning_of_sentence>", "<end_of_sentence>")),
        (("rwkv",), ("", "")),
    ]
    for keys, toks in table:
        if any(k in n for k in keys):
            return toks
    return ("<s>", "</s>")


def render_case(tmpl, case, bos, eos):
    kw = dict(case.get("extra", {}))
    if bos is not None:
        kw["bos_token"] = bos
    if eos is not None:
        kw["eos_token"] = eos
    try:
        out = tmpl.render(
            messages=case["messages"],
            tools=case.get("tools"),
            documents=None,
            add_generation_prompt=case["add_generation_prompt"],
            **kw,
        )
        return {"output": out}
    except Exception as e:  # the template rejected the conversation: the error is the expectation
        return {"error": str(e), "error_type": type(e).__name__}


def wants_object_args(tmpl):
    """The probe chat_template_wants_object_args runs (after llama.cpp's): render one tool call
    whose arguments are {"argument_needle": ...}, once as a JSON string and once as an object.
    The template wants objects when the string form does not come out as JSON (it fails, or gets
    double-encoded by |tojson) while the object form shows the argument (as JSON, or any other
    way, e.g. Qwen3-Coder's <parameter=argument_needle>)."""
    args_obj = {"argument_needle": "print('Hello, World!')"}

    def render(args):
        msgs = [
            {"role": "user", "content": "Hey"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call00001", "type": "function",
                "function": {"name": "ipython", "arguments": args}}]},
        ]
        try:
            return tmpl.render(messages=msgs, tools=None, documents=None,
                               add_generation_prompt=False, bos_token="", eos_token="")
        except Exception:
            return ""

    out_str = render(json.dumps(args_obj, separators=(",", ":")))
    str_as_json = '"argument_needle":' in out_str or "'argument_needle':" in out_str
    return (not str_as_json) and "argument_needle" in render(args_obj)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default=os.path.join(root, "..", "shared", "templates"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "chat"))
    args = ap.parse_args()

    env = make_env()
    os.makedirs(os.path.join(args.out, "expected"), exist_ok=True)
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"now_unix": NOW_UNIX, "cases": CASES}, f, ensure_ascii=False, indent=1)
        f.write("\n")

    names = sorted(x for x in os.listdir(args.templates) if x.endswith(".jinja"))
    n_ok = n_err = 0
    for name in names:
        with open(os.path.join(args.templates, name), encoding="utf-8") as f:
            src = f.read()
        bos, eos = special_tokens(name)
        rec = {"template": name, "bos_token": bos, "eos_token": eos, "cases": {}}
        try:
            tmpl = env.from_string(src)
        except Exception as e:
            rec["compile_error"] = {"error": str(e), "error_type": type(e).__name__}
            tmpl = None
        rec["wants_object_args"] = wants_object_args(tmpl) if tmpl is not None else False
        for case in CASES:
            if tmpl is None:
                r = rec["compile_error"]
            else:
                r = render_case(tmpl, case, bos, eos)
            rec["cases"][case["name"]] = r
            if "output" in r:
                n_ok += 1
            else:
                n_err += 1
        stem = name[: -len(".jinja")]
        with open(os.path.join(args.out, "expected", stem + ".json"), "w", encoding="utf-8") as f:
            json.dump(rec, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"{len(names)} templates x {len(CASES)} cases: {n_ok} rendered, {n_err} errors", file=sys.stderr)


if __name__ == "__main__":
    main()
