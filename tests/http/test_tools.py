#!/usr/bin/python3
"""Tool calling end to end on the real `weir serve` with the trained model:
  test_tools.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR
The trained model never learned to call tools, so every call here is made by a constraint:
tool_choice naming a function or "required" (the server's own JSON Schema), and, for the
formats a model writes by itself under tool_choice "auto", a guided_regex that makes it write
a Hermes or Mistral call. Checks: the calls' shape and that their arguments satisfy the
function's schema, streaming (tool_calls deltas) against whole responses, content before a
call, that a reply with no call streams as it would without tools, a tool round trip
(assistant tool_calls, then the tool's result), n > 1, and the 400s for bad tool requests."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import expect, run_suite  # noqa: E402

TOOLS = [
    {"type": "function", "function": {
        "name": "get_verse", "description": "Look up a verse of the King James Bible",
        "parameters": {"type": "object", "properties": {
            "book": {"type": "string", "enum": ["Genesis", "Exodus"]},
            "chapter": {"type": "integer", "minimum": 1, "maximum": 50}},
            "required": ["book", "chapter"]}}},
    {"type": "function", "function": {
        "name": "count", "parameters": {"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"]}}},
]
MESSAGES = [{"role": "user", "content": "Where is the first verse of Genesis?"}]



def join_stream(data):
    """Chunks folded per choice: content, tool calls (deltas merged by index), finish."""
    out = {}
    for line in data.decode("utf-8").split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for c in json.loads(line[6:]).get("choices", []):
            ch = out.setdefault(c["index"], {"content": "", "calls": {}, "finish": None})
            d = c.get("delta", {})
            ch["content"] += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                slot = ch["calls"].setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] += tc.get("id") or ""
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if c.get("finish_reason"):
                ch["finish"] = c["finish_reason"]
    return out


def valid_args(name, text):
    """The arguments parse and satisfy the function's schema (as written in TOOLS)."""
    try:
        a = json.loads(text)
    except ValueError:
        return False
    if name == "get_verse":
        return (set(a) == {"book", "chapter"} and a["book"] in ("Genesis", "Exodus") and
                isinstance(a["chapter"], int) and 1 <= a["chapter"] <= 50)
    if name == "count":
        return set(a) == {"n"} and isinstance(a["n"], int) and 1 <= a["n"] <= 9
    return False


def calls_of(r):
    msg = r["choices"][0]["message"]
    return [(c["function"]["name"], c["function"]["arguments"], c["id"], c["type"])
            for c in msg.get("tool_calls") or []]


def forced(s):
    # A named function: the reply is its arguments.
    body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 64, "seed": 3,
            "tool_choice": {"type": "function", "function": {"name": "get_verse"}}}
    st, r = s.post("/v1/chat/completions", body)
    expect(st == 200, "named: status %s %s" % (st, r))
    if st != 200:
        return
    calls = calls_of(r)
    msg = r["choices"][0]["message"]
    expect(len(calls) == 1 and calls[0][0] == "get_verse" and calls[0][3] == "function",
           "named: one get_verse call, got %s" % calls)
    expect(calls and valid_args("get_verse", calls[0][1]), "named: arguments %s" % calls)
    expect(calls and calls[0][2].startswith("call_") and len(calls[0][2]) == 29,
           "named: call id %s" % calls)
    expect(msg["content"] is None, "named: content %r" % msg["content"])
    expect(r["choices"][0]["finish_reason"] == "tool_calls", "named: finish %s" % r)
    # The same request streamed: one tool_calls delta with the same call.
    st, j = s.post("/v1/chat/completions", dict(body, stream=True))
    c = j.get(0, {})
    sc = [(v["name"], v["arguments"]) for _, v in sorted(c.get("calls", {}).items())]
    expect(st == 200 and sc == [(x[0], x[1]) for x in calls] and c["content"] == "" and
           c["finish"] == "tool_calls", "named stream: %s vs %s" % (c, calls))
    # n = 2: each choice calls it.
    st, r = s.post("/v1/chat/completions", dict(body, n=2, temperature=1.0))
    expect(st == 200 and len(r["choices"]) == 2 and
           all(len(ch["message"].get("tool_calls") or []) == 1 for ch in r["choices"]),
           "named n=2: %s" % r)

    # required without parallel calls: exactly one call to one of the tools.
    body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 80, "seed": 5,
            "tool_choice": "required", "parallel_tool_calls": False}
    st, r = s.post("/v1/chat/completions", body)
    calls = calls_of(r) if st == 200 else []
    expect(len(calls) == 1 and valid_args(calls[0][0], calls[0][1]),
           "required: one valid call, got %s %s" % (st, r))
    expect(st == 200 and r["choices"][0]["finish_reason"] == "tool_calls", "required: %s" % r)
    st, j = s.post("/v1/chat/completions", dict(body, stream=True))
    c = j.get(0, {})
    sc = [(v["name"], v["arguments"]) for _, v in sorted(c.get("calls", {}).items())]
    expect(sc == [(x[0], x[1]) for x in calls], "required stream: %s vs %s" % (c, calls))


def written_calls(s):
    """Calls the model writes in its own format (tool_choice auto), made here by a regex."""
    formats = [
        ("hermes", 'Checking\\. <tool_call>\\{"name": "count", "arguments": \\{"n": [1-9]\\}\\}'
                   '</tool_call>', "Checking."),
        ("mistral", '\\[TOOL_CALLS\\]\\[\\{"name": "count", "arguments": \\{"n": [1-9]\\}\\}\\]',
         None),
    ]
    for name, regex, content in formats:
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 160, "seed": 7,
                "guided_regex": regex}
        st, r = s.post("/v1/chat/completions", body)
        calls = calls_of(r) if st == 200 else []
        expect(len(calls) == 1 and calls[0][0] == "count" and valid_args("count", calls[0][1]),
               "%s: %s %s" % (name, st, r))
        if st != 200:
            continue
        msg = r["choices"][0]["message"]
        expect(msg["content"] == content, "%s: content %r" % (name, msg["content"]))
        expect(r["choices"][0]["finish_reason"] == "tool_calls", "%s: finish %s" % (name, r))
        st, j = s.post("/v1/chat/completions", dict(body, stream=True))
        c = j.get(0, {})
        sc = [(v["name"], v["arguments"]) for _, v in sorted(c.get("calls", {}).items())]
        # What streamed as content is what came before the call (never part of the call).
        expect(sc == [(x[0], x[1]) for x in calls] and c["content"].strip() == (content or "")
               and c["finish"] == "tool_calls", "%s stream: %s vs %s" % (name, c, calls))
        # tool_choice none: the same text is plain content.
        st, r = s.post("/v1/chat/completions", dict(body, tool_choice="none"))
        expect(st == 200 and "tool_calls" not in r["choices"][0]["message"] and
               r["choices"][0]["finish_reason"] == "stop" and
               ("<tool_call>" in r["choices"][0]["message"]["content"] or
                "[TOOL_CALLS]" in r["choices"][0]["message"]["content"]),
               "%s none: %s" % (name, r))


def no_call(s):
    """A reply without a call: the same text with and without tools (this model's template
    ignores them), and streaming with tools holds nothing back for good."""
    base = {"messages": MESSAGES, "max_tokens": 40, "seed": 11}
    st, plain = s.post("/v1/chat/completions", base)
    st2, with_tools = s.post("/v1/chat/completions", dict(base, tools=TOOLS))
    expect(st == 200 and st2 == 200, "no call: %s %s" % (st, st2))
    if st != 200 or st2 != 200:
        return
    text = plain["choices"][0]["message"]["content"]
    expect(with_tools["choices"][0]["message"]["content"] == text and
           "tool_calls" not in with_tools["choices"][0]["message"],
           "no call: %r vs %r" % (with_tools, text))
    st, j = s.post("/v1/chat/completions", dict(base, tools=TOOLS, stream=True))
    c = j.get(0, {})
    expect(c.get("content") == text and not c.get("calls") and
           c.get("finish") == plain["choices"][0]["finish_reason"],
           "no call stream: %r vs %r" % (c, text))


def round_trip(s):
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_verse", "arguments": "{\"book\": \"Genesis\", \"chapter\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_verse",
         "content": "In the beginning God created the heaven and the earth."},
    ]
    st, r = s.post("/v1/chat/completions", {"messages": history, "tools": TOOLS,
                                             "max_tokens": 24, "seed": 1})
    expect(st == 200 and isinstance(r["choices"][0]["message"]["content"], str) and
           r["choices"][0]["message"]["content"], "round trip: %s %s" % (st, r))
    # The tool result is part of the prompt.
    st2, r2 = s.post("/v1/chat/completions", {"messages": history[:2], "tools": TOOLS,
                                               "max_tokens": 1})
    expect(st == 200 and st2 == 200 and
           r["usage"]["prompt_tokens"] > r2["usage"]["prompt_tokens"] + 10,
           "round trip prompt: %s vs %s" % (r.get("usage"), r2.get("usage")))


def refusals(s):
    def check(body, param, what):
        st, r = s.post("/v1/chat/completions", dict({"messages": MESSAGES, "max_tokens": 4},
                                                     **body))
        got = r.get("error", {}).get("param") if isinstance(r, dict) else None
        expect(st == 400 and got == param, "%s: %s %s" % (what, st, r))

    check({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
          "tool_choice", "unknown function")
    check({"tool_choice": "auto"}, "tool_choice", "tool_choice without tools")
    check({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "bad tool_choice")
    check({"tools": TOOLS + TOOLS[:1]}, "tools", "duplicate function")
    check({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0]",
          "bad name")
    check({"tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]},
          "tools[0]", "bad parameters")
    check({"tools": TOOLS, "tool_choice": "required",
           "response_format": {"type": "json_object"}}, "tool_choice", "two constraints")
    check({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "bad bool")
    check({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]", "no tool_call_id")
    check({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0]",
          "tool_calls on a user message")
    check({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}]},
          "messages[0].tool_calls", "malformed tool_calls")
    check({"functions": []}, "functions", "legacy functions")
    # The server still serves.
    st, _ = s.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2})
    expect(st == 200, "after refusals: %s" % st)


if __name__ == "__main__":
    run_suite("tools-server.log", [forced, written_calls, no_call, round_trip, refusals],
              join=join_stream)
