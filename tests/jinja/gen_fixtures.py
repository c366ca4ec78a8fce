#!/usr/bin/python3
"""Jinja2 reference renderings for weir's template engine (core/template/jinja*.c).

Renders, with Debian's python3-jinja2 set up exactly as Hugging Face transformers sets up
its chat-template environment (ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]), its tojson, raise_exception and
strftime_now), two sets of cases:

  * every chat template under tests/jinja/templates/ with every conversation below,
    add_generation_prompt on and off (tests/jinja/fixtures/chat.json), and
  * the language cases of tests/jinja/lang_cases.json (tests/jinja/fixtures/lang.json).

Each case records the exact output, or the error: for raise_exception the template's own
message, for any other error only that it failed.

  /usr/bin/python3 tests/jinja/gen_fixtures.py            rewrite the fixtures
  /usr/bin/python3 tests/jinja/gen_fixtures.py --check BIN
        render every case with Jinja2 now and with weir (BIN --batch, the test_jinja
        binary) and compare them byte for byte; exit 1 on any difference. ctest runs this
        as jinja_live when python3-jinja2 is installed.
  /usr/bin/python3 tests/jinja/gen_fixtures.py --corpus DIR BIN
        the same comparison over every template file in DIR (a fuzz_jinja corpus) against
        one conversation: how engine differences are found.

strftime_now reads a fixed clock (NOW, shown in UTC) so that outputs are reproducible; weir
renders the fixtures with the same clock (weir_jinja_limits.now).
"""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = 1741944413  # 2025-03-14 09:26:53 UTC


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: marks the assistant's text
    (for training masks) and renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW, timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, ctx):
    try:
        return {"out": env.from_string(source).render(**ctx)}
    except RaisedByTemplate as e:
        return {"raised": str(e.message)}
    except Exception as e:  # any other failure: weir must fail too
        return {"error": type(e).__name__ + ": " + str(e)}


# ---- the chat templates: file, BOS and EOS texts (the tokenizer's) ----

TEMPLATES = {
    "llama-2-7b-chat": ("<s>", "</s>"),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2-3b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-7b-instruct": ("", "<|im_end|>"),
    "qwen3-0.6b": ("", "<|im_end|>"),
    "mistral-7b-instruct": ("<s>", "</s>"),
    "mixtral-8x7b-instruct": ("<s>", "</s>"),
    "mistral-nemo-instruct-2407": ("<s>", "</s>"),
    "gemma-2-2b-it": ("<bos>", "<eos>"),
    "gemma-3-1b-it": ("<bos>", "<eos>"),
    "gemma-3-270m-it": ("<bos>", "<eos>"),
    "phi-3-mini": ("<s>", "<|endoftext|>"),
    "phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "phi-4": ("<|endoftext|>", "<|im_end|>"),
    "phi-4-mini-instruct": ("<|endoftext|>", "<|endoftext|>"),
    "deepseek-v3": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-r1-distill-qwen-32b": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "smollm2-135m-instruct": ("<|im_start|>", "<|im_end|>"),
    "hermes-3-llama-3.1-8b-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "limit": {"type": "integer", "description": "At most this many results",
                          "default": 5},
                "tags": {"type": "array", "items": {"type": "string"},
                         "description": "Only these tags"},
                "score": {"type": "number", "description": "Minimum score", "default": 0.5},
                "exact": {"type": "boolean", "description": "Exact match"},
            },
            "required": ["query"],
        },
    },
}
NOARGS = {"type": "function",
          "function": {"name": "get_time", "description": "The current time.",
                       "parameters": {"type": "object", "properties": {}}}}

CALL_WEATHER = {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL_SEARCH = {"id": "call_2", "type": "function",
               "function": {"name": "search_docs",
                            "arguments": {"query": "paged KV cache", "limit": 3, "score": 0.75,
                                          "tags": ["kv", "cache"], "exact": False}}}
CALL_STRING_ARGS = {"id": "call_3", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! What can you do?"}
A1 = {"role": "assistant", "content": "I can answer questions and call tools."}
U2 = {"role": "user", "content": "What's the weather in Paris?"}

CONVERSATIONS = [
    {"messages": [U1]},
    {"messages": [SYSTEM, U1]},
    {"messages": [SYSTEM, U1, A1, U2]},
    {"messages": [U1, A1, U2]},
    {"messages": [U1, A1]},
    {"messages": [{"role": "system", "content": "  Réponds en français.  \n"},
                  {"role": "user", "content": "  Ça va? 日本語で答えて 🌍\tתודה \"quoted\" 'single' back\\slash  \n"},
                  {"role": "assistant", "content": "\nTrès bien — ありがとう! ✓\n"},
                  {"role": "user", "content": "Ünïcödé: ß ẞ Ω ж {{ not a tag }} {% neither %}"}]},
    {"messages": [U1, {"role": "assistant", "content": ""}, {"role": "user", "content": ""}]},
    {"messages": [SYSTEM] + [m for i in range(5) for m in (
        {"role": "user", "content": "Question %d?" % i},
        {"role": "assistant", "content": "Answer %d." % i})] + [U2]},
    {"messages": [SYSTEM, U2], "tools": [WEATHER, SEARCH]},
    {"messages": [U2], "tools": [WEATHER]},
    {"messages": [SYSTEM, U2,
                  {"role": "assistant", "content": None, "tool_calls": [CALL_WEATHER]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                   "content": "{\"temperature\": 18, \"sky\": \"clear\"}"}],
     "tools": [WEATHER, SEARCH]},
    {"messages": [U2,
                  {"role": "assistant", "content": "", "tool_calls": [CALL_WEATHER, CALL_SEARCH]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"},
                  {"role": "tool", "tool_call_id": "call_2", "name": "search_docs",
                   "content": "[\"kv-cache.md\"]"},
                  {"role": "assistant", "content": "It is 18 C in Paris."},
                  {"role": "user", "content": "Thanks."}],
     "tools": [WEATHER, SEARCH, NOARGS]},
    {"messages": [U2, {"role": "assistant", "content": None, "tool_calls": [CALL_STRING_ARGS]},
                  {"role": "tool", "tool_call_id": "call_3", "content": "cold"}],
     "tools": [WEATHER]},
    {"messages": [U1, {"role": "assistant",
                       "content": "<think>\nThe user greets me.\n</think>\n\nHello there!"},
                  {"role": "user", "content": "Think again."}]},
    {"messages": [SYSTEM, U1], "kwargs": {"enable_thinking": False}},
    {"messages": [SYSTEM, U1], "kwargs": {"date_string": "01 Jan 2025", "tools_in_user_message": False},
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Who am I?", "name": "alice"}]},
    {"messages": [{"role": "system", "content": "Only a system message."}]},
    {"messages": [U1, U2]},
    {"messages": [SYSTEM, U2,
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": "a1B2c3D4e", "type": "function",
                                   "function": {"name": "get_weather",
                                                "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "get_weather",
                   "content": "18 C, clear"},
                  {"role": "assistant", "content": "It is 18 C and clear in Paris."},
                  {"role": "user", "content": "And tomorrow?"}],
     "tools": [WEATHER]},
]


def conversation_context(conv):
    """The variables transformers' apply_chat_template passes, but the generation prompt
    switch and the special tokens."""
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None}
    ctx.update(conv.get("kwargs", {}))
    return ctx


def chat_context(name, conv, gen):
    bos, eos = TEMPLATES[name]
    ctx = conversation_context(conv)
    ctx.update({"add_generation_prompt": gen, "bos_token": bos, "eos_token": eos})
    return ctx


def chat_cases():
    cases = []
    for name in sorted(TEMPLATES):
        with open(os.path.join(HERE, "templates", name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        for ci, conv in enumerate(CONVERSATIONS):
            for gen in (True, False):
                cases.append({"name": "%s #%d gen=%d" % (name, ci, gen), "template": name,
                              "conversation": ci, "gen": gen, "source": source,
                              "context": chat_context(name, conv, gen)})
    return cases


def lang_cases():
    with open(os.path.join(HERE, "lang_cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    return [{"name": c["name"], "source": c["template"], "context": c.get("context", {})}
            for c in spec]


def reference(cases):
    env = make_env()
    return [render(env, c["source"], c["context"]) for c in cases]


def write_fixtures():
    os.makedirs(os.path.join(HERE, "fixtures"), exist_ok=True)
    chat = chat_cases()
    ref = reference(chat)
    out = {"generated_by": "tests/jinja/gen_fixtures.py with python3-jinja2 " + jinja2.__version__,
           "now": NOW,
           "templates": {n: {"bos_token": b, "eos_token": e} for n, (b, e) in TEMPLATES.items()},
           "conversations": [json.dumps(conversation_context(c), ensure_ascii=False)
                             for c in CONVERSATIONS],
           "cases": [dict({"template": c["template"], "conversation": c["conversation"],
                           "add_generation_prompt": c["gen"]}, **r)
                     for c, r in zip(chat, ref)]}
    with open(os.path.join(HERE, "fixtures", "chat.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    lang = lang_cases()
    ref = reference(lang)
    with open(os.path.join(HERE, "fixtures", "lang.json"), "w", encoding="utf-8") as f:
        json.dump({"generated_by": out["generated_by"], "now": NOW,
                   "cases": [dict({"name": c["name"], "template": c["source"],
                                   "context": json.dumps(c["context"], ensure_ascii=False)}, **r)
                             for c, r in zip(lang, ref)]},
                  f, ensure_ascii=False, indent=0)
        f.write("\n")
    n_out = sum(1 for r in ref if "out" in r)
    print("wrote %d chat cases and %d language cases (%d render, %d fail)" %
          (len(chat), len(lang), n_out, len(lang) - n_out))


def check(binary):
    cases = chat_cases() + lang_cases()
    return compare(cases, reference(cases), binary)


FUZZ_CONTEXT = {
    "messages": [SYSTEM, U2, {"role": "assistant", "content": "", "tool_calls": [CALL_WEATHER]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
                 {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is 18 C."}],
    "tools": [WEATHER], "documents": None, "add_generation_prompt": True, "bos_token": "<s>",
    "eos_token": "</s>", "enable_thinking": False}


def corpus(directory, binary, limit=5000):
    """Differential check on arbitrary templates (e.g. a fuzzer's corpus): every UTF-8 file
    is rendered by Jinja2 and by weir against one conversation; differences are printed.
    Generators and Python's big integers print differently by design (docs/chat-templates.md)."""
    import signal

    def timeout(*_):
        raise TimeoutError()

    signal.signal(signal.SIGALRM, timeout)
    env = make_env()
    cases, ref = [], []
    for name in sorted(os.listdir(directory))[:limit]:
        try:
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:  # a running fuzzer replaced it
            continue
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if "\x00" in source:
            continue
        signal.alarm(2)
        try:
            r = render(env, source, FUZZ_CONTEXT)
        except (TimeoutError, RecursionError):
            continue
        finally:
            signal.alarm(0)
        cases.append({"name": name, "source": source, "context": FUZZ_CONTEXT})
        ref.append(r)
    return compare(cases, ref, binary)


def compare(cases, ref, binary):
    with tempfile.TemporaryDirectory() as d:
        inp, outp = os.path.join(d, "in.json"), os.path.join(d, "out.json")
        with open(inp, "w", encoding="utf-8") as f:
            json.dump({"now": NOW, "cases": [{"template": c["source"],
                                              "context": json.dumps(c["context"], ensure_ascii=False)}
                                             for c in cases]}, f, ensure_ascii=False)
        subprocess.run([binary, "--batch", inp, outp], check=True)
        with open(outp, "rb") as f:
            got = json.loads(f.read().decode("utf-8", "replace"))
    bad = 0
    for c, want, have in zip(cases, ref, got):
        ok = (("out" in want and have.get("out") == want["out"]) or
              ("raised" in want and have.get("raised") == want["raised"]) or
              ("error" in want and ("error" in have or "raised" in have)))
        if not ok:
            bad += 1
            if bad <= 20:
                print("MISMATCH %s\n  jinja2: %r\n  weir:   %r" % (c["name"], want, have))
    print("%d cases, %d mismatches (python3-jinja2 %s)" % (len(cases), bad, jinja2.__version__))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "--corpus":
        sys.exit(corpus(sys.argv[2], sys.argv[3]))
    write_fixtures()
