#!/usr/bin/python3
"""/v1/responses end to end on the real `weir serve` with the trained model:
  test_responses.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR
Checks that a Response has the documented shape and says the same as the chat request it
means (same text for the same greedy request), that instructions and max_output_tokens act
(status incomplete with reason max_output_tokens), that the streamed events come in the
documented order with increasing sequence numbers and end with the same Response, that a
forced function call comes back as a function_call item (streamed as argument deltas) and
that function_call / function_call_output items in the input reach the prompt, and the 400s
for stored state, built-in tools, unknown input items and unknown parameters."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import expect, run_suite  # noqa: E402

PARAMS = {"type": "object", "properties": {"book": {"type": "string", "enum": ["Genesis", "Exodus"]}},
          "required": ["book"]}
TOOLS = [{"type": "function", "name": "get_verse", "description": "Look up a verse",
          "parameters": PARAMS}]


def events(data):
    """The SSE stream as (event name, payload) pairs; the name must match the payload's type."""
    out = []
    for block in data.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        ev = json.loads(lines["data"])
        expect(lines.get("event") == ev.get("type"), "event line %r" % block[:200])
        out.append((ev["type"], ev))
    return out


def text_of(resp):
    return "".join(c["text"] for o in resp["output"] if o["type"] == "message"
                   for c in o["content"])


def plain(s):
    body = {"input": "In the beginning", "instructions": "Continue the verse.",
            "max_output_tokens": 12, "temperature": 0}
    st, r = s.post("/v1/responses", body)
    expect(st == 200, "status %s %s" % (st, r))
    if st != 200:
        return
    expect(r["object"] == "response" and r["id"].startswith("resp_") and
           r["status"] == "incomplete" and
           r["incomplete_details"] == {"reason": "max_output_tokens"} and
           r["instructions"] == "Continue the verse." and r["max_output_tokens"] == 12 and
           r["usage"]["output_tokens"] == 12 and
           r["usage"]["total_tokens"] == r["usage"]["input_tokens"] + 12, "shape %s" % r)
    msg = r["output"][0]
    expect(len(r["output"]) == 1 and msg["type"] == "message" and msg["role"] == "assistant" and
           msg["id"].startswith("msg_") and msg["content"][0]["type"] == "output_text" and
           msg["status"] == "incomplete",
           "output %s" % r["output"])
    # The chat request it means says the same.
    st, c = s.post("/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Continue the verse."},
                     {"role": "user", "content": "In the beginning"}],
        "max_tokens": 12, "temperature": 0})
    expect(st == 200 and c["choices"][0]["message"]["content"] == text_of(r),
           "chat equivalent %r vs %r" % (c, text_of(r)))
    # Streamed: created, in_progress, the message item, deltas, done events, then the end.
    st, data = s.post("/v1/responses", dict(body, stream=True))
    ev = events(data) if st == 200 else []
    kinds = [k for k, _ in ev]
    expect(kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"] and
           kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"],
           "event order %s" % kinds)
    expect([e["sequence_number"] for _, e in ev] == list(range(len(ev))), "sequence numbers")
    deltas = "".join(e["delta"] for k, e in ev if k == "response.output_text.delta")
    final = ev[-1][1]["response"] if ev else {}
    expect(deltas == text_of(r) and text_of(final) == deltas and
           final.get("usage", {}).get("output_tokens") == 12 and
           final["output"][0]["status"] == "incomplete", "stream text %r vs %r" %
           (deltas, text_of(r)))


def tools(s):
    body = {"input": "Where is Genesis?", "tools": TOOLS, "max_output_tokens": 40, "temperature": 0,
            "tool_choice": {"type": "function", "name": "get_verse"}}
    st, r = s.post("/v1/responses", body)
    calls = [o for o in r.get("output", []) if o["type"] == "function_call"] if st == 200 else []
    ok = len(calls) == 1 and calls[0]["name"] == "get_verse"
    expect(ok and json.loads(calls[0]["arguments"])["book"] in ("Genesis", "Exodus") and
           calls[0]["call_id"].startswith("call_") and calls[0]["status"] == "completed" and
           len(r["output"]) == 1 and r["status"] == "completed", "call %s %s" % (st, r))
    st, data = s.post("/v1/responses", dict(body, stream=True))
    ev = events(data) if st == 200 else []
    kinds = [k for k, _ in ev]
    args = "".join(e["delta"] for k, e in ev if k == "response.function_call_arguments.delta")
    expect(kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done",
                     "response.completed"] and ok and args == calls[0]["arguments"],
           "call stream %s %r" % (kinds, args))
    if not ok:
        return
    # The call and its output go back as input items and reach the prompt.
    items = [{"role": "user", "content": "Where is Genesis?"}, calls[0],
             {"type": "function_call_output", "call_id": calls[0]["call_id"],
              "output": "In the beginning God created the heaven and the earth."}]
    st, a = s.post("/v1/responses", {"input": items, "tools": TOOLS, "max_output_tokens": 4})
    st2, b = s.post("/v1/responses", {"input": items[:1], "tools": TOOLS, "max_output_tokens": 4})
    expect(st == 200 and st2 == 200 and text_of(a) and
           a["usage"]["input_tokens"] > b["usage"]["input_tokens"] + 10,
           "round trip %s %s" % (a, b))


def refusals(s):
    cases = [({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
             ({"input": "x", "store": True}, "store"),
             ({"input": "x", "reasoning": {"effort": "low"}}, "reasoning"),
             ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
             ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0].type"),
             ({"input": [{"role": "robot", "content": "x"}]}, "input[0]"),
             ({"input": []}, "input"),
             ({}, "input"),
             ({"input": "x", "frobnicate": 1}, "frobnicate"),
             ({"input": "x", "tool_choice": "auto"}, "tool_choice")]
    for body, param in cases:
        st, r = s.post("/v1/responses", body)
        got = r.get("error", {}).get("param") if isinstance(r, dict) else None
        expect(st == 400 and got == param, "refusal %s: %s %s" % (body, st, r))
    # An item_reference (earlier output sent back by id) says how to send the item instead.
    st, r = s.post("/v1/responses", {"input": [{"role": "user", "content": "x"},
                                               {"type": "item_reference", "id": "msg_1"}]})
    msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
    expect(st == 400 and r["error"]["param"] == "input[1].type" and "store = false" in msg,
           "item_reference %s %s" % (st, r))
    # What asks for nothing is accepted.
    st, r = s.post("/v1/responses", {"input": "x", "store": False, "truncation": "disabled",
                                     "text": {"format": {"type": "text"}}, "max_output_tokens": 2,
                                     "metadata": {}, "user": "u"})
    expect(st == 200, "do-nothing values %s %s" % (st, r))


if __name__ == "__main__":
    run_suite("responses-server.log", [plain, tools, refusals])
