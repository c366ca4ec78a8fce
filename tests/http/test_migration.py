#!/usr/bin/python3
"""What clients migrating from OpenAI, vLLM and llama-server send, end to end on the real
`weir serve` with the trained model (docs/http-api.md, "Migrating from vLLM / llama-server"):
  test_migration.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR
- forced tool calls cut by max_tokens: whole calls come back as tool_calls (finish_reason
  "tool_calls"), a call cut short is dropped, a reply cut inside its first call has no calls,
  null content and finish_reason "length"; the same streamed; the forced list is bounded;
- store / metadata / service_tier accepted, store: true refused;
- vLLM's chat_template_kwargs (on a copy of the model whose template reads them),
  add_generation_prompt, continue_final_message, skip_special_tokens,
  spaces_between_special_tokens, include_stop_str_in_output, min_tokens, structured_outputs;
- llama-server's POST /completion (whole and streamed, n_predict, grammar, json_schema, stop
  words, token prompts) and GET /props;
- hostile bodies: wrong types, huge values, duplicate keys, contradictions."""
import http.client
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gguf_meta  # noqa: E402
from weir_server import Server, expect, finish  # noqa: E402

MAX_FORCED_CALLS = 8  # WEIR_API_MAX_FORCED_CALLS
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


def raw_post(s, path, body_bytes):
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=300)
    c.request("POST", path, body_bytes, {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read()


def post_stream(s, path, body):
    st, data = raw_post(s, path, json.dumps(dict(body, stream=True)).encode())
    return st, data.decode("utf-8")


def chat_stream(s, body):
    """Chunks folded: content, tool calls merged by index, finish_reason."""
    st, text = post_stream(s, "/v1/chat/completions", body)
    out = {"content": "", "calls": {}, "finish": None, "done": False}
    for line in text.split("\n"):
        if line == "data: [DONE]":
            out["done"] = True
        if not line.startswith("data: {"):
            continue
        for c in json.loads(line[6:]).get("choices", []):
            d = c.get("delta", {})
            out["content"] += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                slot = out["calls"].setdefault(tc["index"], {"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if c.get("finish_reason"):
                out["finish"] = c["finish_reason"]
    return st, out


def valid_args(name, text):
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


def err_param(r):
    return r.get("error", {}).get("param") if isinstance(r, dict) else None


def refused(s, path, body, param, what, status=400):
    st, r = s.post(path, body)
    expect(st == status and err_param(r) == param, "%s: %s %s" % (what, st, r))
    return r


# ---- 1. forced tool calls cut by max_tokens ------------------------------------------------

def forced_cut(s):
    base = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required",
            "temperature": 0}
    # A long list (this model repeats calls until something stops it): every call whole.
    st, full = s.post("/v1/chat/completions", dict(base, max_tokens=480))
    expect(st == 200, "required long: %s %s" % (st, full))
    if st != 200:
        return
    ch = full["choices"][0]
    calls = ch["message"].get("tool_calls") or []
    expect(1 <= len(calls) <= MAX_FORCED_CALLS and ch["finish_reason"] == "tool_calls" and
           ch["message"]["content"] is None,
           "required long: 1..%d calls, finish tool_calls: %s" % (MAX_FORCED_CALLS, ch))
    expect(all(valid_args(c["function"]["name"], c["function"]["arguments"]) for c in calls),
           "required long: arguments %s" % calls)
    # The bound ends the list: some sampled run reaches MAX_FORCED_CALLS calls and stops
    # there, before the budget; none goes beyond.
    bounded = False
    for seed in range(1, 9):
        st, r = s.post("/v1/chat/completions", dict(base, max_tokens=480, temperature=1,
                                                    seed=seed))
        got = r["choices"][0]["message"].get("tool_calls") or [] if st == 200 else []
        expect(st == 200 and len(got) <= MAX_FORCED_CALLS, "bound, seed %d: %s" % (seed, r))
        if len(got) == MAX_FORCED_CALLS and r["usage"]["completion_tokens"] < 480:
            bounded = True
            break
    expect(bounded, "no run was ended by the bound of %d calls" % MAX_FORCED_CALLS)
    total = full["usage"]["completion_tokens"]
    # Every budget below the whole list: never raw text, never a partial call; whole calls
    # are tool_calls with finish "tool_calls", none means null content and "length".
    seen_cut_with_calls = seen_cut_without = False
    budgets = sorted(set([1, 2, 3, 5, 8] + [max(1, total * k // 10) for k in range(1, 10)] +
                         [total - 1]))
    for mt in budgets:
        if mt < 1 or mt >= total:
            continue
        st, r = s.post("/v1/chat/completions", dict(base, max_tokens=mt))
        if st != 200:
            expect(False, "required max_tokens=%d: %s %s" % (mt, st, r))
            continue
        c = r["choices"][0]
        got = c["message"].get("tool_calls") or []
        expect(c["message"]["content"] is None,
               "required max_tokens=%d: content must be null, got %r" % (mt, c["message"]))
        expect(all(valid_args(x["function"]["name"], x["function"]["arguments"]) for x in got),
               "required max_tokens=%d: a partial call leaked %s" % (mt, got))
        expect([x["function"]["arguments"] for x in got] ==
               [x["function"]["arguments"] for x in calls[:len(got)]],
               "required max_tokens=%d: calls are a prefix of the whole list" % mt)
        if got:
            seen_cut_with_calls = True
            expect(c["finish_reason"] == "tool_calls", "cut with calls: %s" % c)
        else:
            seen_cut_without = True
            expect(c["finish_reason"] == "length" and "tool_calls" not in c["message"],
                   "cut before a whole call: %s" % c)
        # Streamed: the same calls, no content.
        st, j = chat_stream(s, dict(base, max_tokens=mt))
        sc = [(v["name"], v["arguments"]) for _, v in sorted(j["calls"].items())]
        expect(st == 200 and j["content"] == "" and j["done"] and
               sc == [(x["function"]["name"], x["function"]["arguments"]) for x in got] and
               j["finish"] == c["finish_reason"],
               "required stream max_tokens=%d: %s vs %s" % (mt, j, c))
    expect(seen_cut_without, "no budget cut the first call (total %d)" % total)
    if len(calls) > 1:
        expect(seen_cut_with_calls, "no budget kept a whole call before the cut (%s)" % calls)

    # A named function cut short: no partial arguments.
    named = {"messages": MESSAGES, "tools": TOOLS, "temperature": 0,
             "tool_choice": {"type": "function", "function": {"name": "get_verse"}}}
    st, r = s.post("/v1/chat/completions", dict(named, max_tokens=3))
    c = r["choices"][0] if st == 200 else {}
    expect(st == 200 and c["message"]["content"] is None and
           "tool_calls" not in c["message"] and c["finish_reason"] == "length",
           "named cut: %s %s" % (st, r))
    st, j = chat_stream(s, dict(named, max_tokens=3))
    expect(st == 200 and not j["calls"] and j["content"] == "" and j["finish"] == "length",
           "named cut stream: %s" % j)
    st, r = s.post("/v1/chat/completions", dict(named, max_tokens=64))
    c = r["choices"][0] if st == 200 else {}
    got = c.get("message", {}).get("tool_calls") or []
    expect(len(got) == 1 and valid_args("get_verse", got[0]["function"]["arguments"]) and
           c["finish_reason"] == "tool_calls", "named whole: %s" % r)

    # parallel_tool_calls false: one call, the grammar ends the list after it.
    st, r = s.post("/v1/chat/completions", dict(base, max_tokens=480,
                                                parallel_tool_calls=False))
    got = r["choices"][0]["message"].get("tool_calls") or [] if st == 200 else []
    expect(len(got) == 1 and r["choices"][0]["finish_reason"] == "tool_calls",
           "parallel false: %s" % r)
    # /v1/responses: the forced list never becomes output text.
    st, r = s.post("/v1/responses", {"input": "Where is Genesis?", "tools": [
        {"type": "function", "name": "count", "parameters": TOOLS[1]["function"]["parameters"]}],
        "tool_choice": "required", "max_output_tokens": 3, "temperature": 0})
    texts = [p.get("text") for o in (r.get("output") or []) for p in (o.get("content") or [])]
    expect(st == 200 and all(not t for t in texts) and
           not any(o.get("type") == "function_call" for o in r.get("output") or []),
           "responses cut: %s %s" % (st, r))
    # Cut after whole calls: those are function_call items, the response "incomplete".
    st, r = s.post("/v1/responses", {"input": "Where is Genesis?", "tools": [
        {"type": "function", "name": "get_verse",
         "parameters": TOOLS[0]["function"]["parameters"]}],
        "tool_choice": "required", "max_output_tokens": 120, "temperature": 0})
    fcs = [o for o in r.get("output") or [] if o.get("type") == "function_call"]
    texts = [p.get("text") for o in (r.get("output") or []) for p in (o.get("content") or [])]
    expect(st == 200 and fcs and all(valid_args("get_verse", o["arguments"]) for o in fcs) and
           all(not t for t in texts) and r["status"] == "incomplete",
           "responses cut after whole calls: %s %s" % (st, r))


# ---- 2. store, metadata, service_tier ------------------------------------------------------

def openai_params(s):
    for path, body in (("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2}),
                       ("/v1/completions", {"prompt": "In the", "max_tokens": 2})):
        st, r = s.post(path, dict(body, store=False, metadata={"user": "a", "run": "7"},
                                  service_tier="auto"))
        expect(st == 200, "%s store/metadata/service_tier: %s %s" % (path, st, r))
        r = refused(s, path, dict(body, store=True), "store", path + " store true")
        expect("stores nothing" in r.get("error", {}).get("message", ""),
               "store true message: %s" % r)
        refused(s, path, dict(body, metadata=[1]), "metadata", "metadata list")
        refused(s, path, dict(body, metadata={"k%d" % i: "v" for i in range(17)}), "metadata",
                "17 metadata pairs")
        refused(s, path, dict(body, metadata={"k": 5}), "metadata", "metadata number value")
        refused(s, path, dict(body, metadata={"k": "v" * 513}), "metadata", "metadata long")
        refused(s, path, dict(body, service_tier="gold"), "service_tier", "bad tier")
        refused(s, path, dict(body, store="no"), "store", "store string")


# ---- 3. vLLM's parameters -----------------------------------------------------------------

def chat_rendering(s):
    base = {"max_tokens": 4, "temperature": 0}
    conv = MESSAGES + [{"role": "assistant", "content": "In the beginning"}]
    st1, gen = s.post("/v1/chat/completions", dict(base, messages=conv))
    st2, nogen = s.post("/v1/chat/completions", dict(base, messages=conv,
                                                     add_generation_prompt=False))
    st3, cont = s.post("/v1/chat/completions", dict(base, messages=conv,
                                                    continue_final_message=True))
    expect(st1 == st2 == st3 == 200, "rendering: %s %s %s" % (gen, nogen, cont))
    if st1 == st2 == st3 == 200:
        pg, pn, pc = (x["usage"]["prompt_tokens"] for x in (gen, nogen, cont))
        # The opener "<|im_start|>assistant\n" adds tokens; continuing drops "<|im_end|>\n".
        expect(pg > pn > pc, "prompt tokens: gen %d, no gen %d, continue %d" % (pg, pn, pc))
    refused(s, "/v1/chat/completions",
            dict(base, messages=conv, continue_final_message=True, add_generation_prompt=True),
            "continue_final_message", "continue + add_generation_prompt")
    refused(s, "/v1/chat/completions", dict(base, messages=MESSAGES, add_generation_prompt=1),
            "add_generation_prompt", "add_generation_prompt number")
    refused(s, "/v1/chat/completions", dict(base, messages=MESSAGES, chat_template_kwargs=[]),
            "chat_template_kwargs", "kwargs list")
    refused(s, "/v1/chat/completions",
            dict(base, messages=MESSAGES, chat_template_kwargs={"messages": []}),
            "chat_template_kwargs", "kwargs overriding messages")
    refused(s, "/v1/completions", {"prompt": "x", "chat_template_kwargs": {}},
            "chat_template_kwargs", "kwargs on completions")


def special_tokens(s):
    st, tok = s.post("/tokenize", {"prompt": "<|im_start|>"})
    im_start = tok["tokens"][-1] if st == 200 else None
    expect(st == 200 and im_start == 3, "im_start id: %s" % tok)
    body = {"prompt": "In the beginning", "max_tokens": 3, "temperature": 0,
            "logit_bias": {str(im_start): 100}}
    st, skipped = s.post("/v1/completions", body)
    st2, kept = s.post("/v1/completions", dict(body, skip_special_tokens=False,
                                               spaces_between_special_tokens=False))
    expect(st == 200 and skipped["choices"][0]["text"] == "",
           "skip_special_tokens default: %s" % skipped)
    expect(st2 == 200 and kept["choices"][0]["text"] == "<|im_start|>" * 3,
           "skip_special_tokens false: %s" % kept)
    st, kept2 = s.post("/v1/completions", dict(body, skip_special_tokens=False))
    expect(st == 200 and kept2["choices"][0]["text"] == "<|im_start|>" * 3,
           "skip_special_tokens false alone: %s" % kept2)
    refused(s, "/v1/completions", dict(body, skip_special_tokens=False,
                                       spaces_between_special_tokens=True),
            "spaces_between_special_tokens", "spaces between kept special tokens")
    st, _ = s.post("/v1/completions", dict(body, spaces_between_special_tokens=True))
    expect(st == 200, "spaces_between_special_tokens true with skipping: %s" % st)
    refused(s, "/v1/completions", dict(body, skip_special_tokens="no"), "skip_special_tokens",
            "skip_special_tokens string")


def stop_strings(s):
    body = {"prompt": "In the beginning God created", "max_tokens": 24, "temperature": 0}
    st, r = s.post("/v1/completions", body)
    text = r["choices"][0]["text"] if st == 200 else ""
    words = [w for w in re.findall(r"[A-Za-z]{3,}", text)]
    expect(st == 200 and len(words) >= 2, "stop: base text %r" % text)
    if len(words) < 2:
        return
    stop = words[1]
    at = text.index(stop)
    st, cut = s.post("/v1/completions", dict(body, stop=[stop]))
    st2, incl = s.post("/v1/completions", dict(body, stop=[stop], include_stop_str_in_output=True))
    expect(st == 200 and cut["choices"][0]["text"] == text[:at] and
           cut["choices"][0]["finish_reason"] == "stop", "stop: %r vs %r" % (cut, text[:at]))
    expect(st2 == 200 and incl["choices"][0]["text"] == text[:at + len(stop)] and
           incl["choices"][0]["finish_reason"] == "stop",
           "include_stop_str_in_output: %r vs %r" % (incl, text[:at + len(stop)]))
    # Streamed the same.
    st, data = post_stream(s, "/v1/completions", dict(body, stop=[stop],
                                                      include_stop_str_in_output=True))
    joined = "".join(c["text"] for line in data.split("\n") if line.startswith("data: {")
                     for c in json.loads(line[6:])["choices"])
    expect(st == 200 and joined == text[:at + len(stop)], "include stop streamed: %r" % joined)
    refused(s, "/v1/completions", dict(body, include_stop_str_in_output=1),
            "include_stop_str_in_output", "include_stop_str_in_output number")


def min_tokens(s):
    # Without max_tokens, min_tokens raises the default budget (completions: 16).
    st, r = s.post("/v1/completions", {"prompt": "In the beginning", "min_tokens": 40,
                                       "temperature": 0})
    expect(st == 200 and r["usage"]["completion_tokens"] >= 40, "min_tokens 40: %s" % r)
    refused(s, "/v1/completions", {"prompt": "x", "min_tokens": 9, "max_tokens": 8},
            "min_tokens", "min_tokens > max_tokens")
    refused(s, "/v1/completions", {"prompt": "x", "min_tokens": 100000}, "min_tokens",
            "min_tokens beyond the context")
    refused(s, "/v1/completions", {"prompt": "x", "min_tokens": -1}, "min_tokens",
            "negative min_tokens")
    refused(s, "/v1/completions", {"prompt": "x", "min_tokens": 1e300}, "min_tokens",
            "huge min_tokens")


def structured_outputs(s):
    base = {"messages": MESSAGES, "max_tokens": 40, "temperature": 0}
    st, r = s.post("/v1/chat/completions", dict(base, structured_outputs={"choice": ["yes", "no"]}))
    expect(st == 200 and r["choices"][0]["message"]["content"] in ("yes", "no"),
           "structured_outputs.choice: %s" % r)
    st, r = s.post("/v1/chat/completions", dict(base, structured_outputs={"regex": "[0-9]{3}"}))
    expect(st == 200 and re.fullmatch("[0-9]{3}", r["choices"][0]["message"]["content"]),
           "structured_outputs.regex: %s" % r)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1,
                                                     "maximum": 9}}, "required": ["n"]}
    st, r = s.post("/v1/chat/completions", dict(base, structured_outputs={"json": schema}))
    try:
        ok = isinstance(json.loads(r["choices"][0]["message"]["content"])["n"], int)
    except Exception:  # noqa: BLE001
        ok = False
    expect(st == 200 and ok, "structured_outputs.json: %s" % r)
    st, r = s.post("/v1/completions", {"prompt": "In", "max_tokens": 8, "temperature": 0,
                                       "structured_outputs": {"grammar": 'root ::= "amen" | "selah"'}})
    expect(st == 200 and r["choices"][0]["text"] in ("amen", "selah"),
           "structured_outputs.grammar: %s" % r)
    st, r = s.post("/v1/chat/completions", dict(base, max_tokens=60, structured_outputs={
        "json_object": True, "disable_any_whitespace": True, "disable_fallback": True}))
    try:
        ok = isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)
    except Exception:  # noqa: BLE001
        ok = r["choices"][0]["finish_reason"] == "length" if st == 200 else False
    expect(st == 200 and ok, "structured_outputs.json_object: %s" % r)
    # disable_any_whitespace: with a bias toward the space token, whitespace appears only
    # when it is allowed (false); true (weir's default) keeps the JSON compact.
    st, sp = s.post("/tokenize", {"prompt": " ", "add_special_tokens": False})
    space = str(sp["tokens"][-1]) if st == 200 else "0"
    outs = {}
    for ws in (True, False):
        st, r = s.post("/v1/chat/completions", dict(base, max_tokens=12, logit_bias={space: 30},
                       structured_outputs={"json_object": True, "disable_any_whitespace": ws}))
        outs[ws] = r["choices"][0]["message"]["content"] if st == 200 else None
    expect(outs[True] is not None and not re.search(r"\s", outs[True]) and
           outs[False] is not None and re.search(r"\s", outs[False]),
           "disable_any_whitespace: %r" % outs)
    refused(s, "/v1/chat/completions", dict(base, structured_outputs={"regex": "a", "choice": ["b"]}),
            "structured_outputs.choice", "two structured outputs")
    refused(s, "/v1/chat/completions", dict(base, structured_outputs={"regex": "a"},
                                            guided_choice=["b"]),
            "structured_outputs.regex", "structured_outputs and guided_choice")
    refused(s, "/v1/chat/completions", dict(base, structured_outputs={"structural_tag": "x"}),
            "structured_outputs.structural_tag", "structural_tag")
    refused(s, "/v1/chat/completions", dict(base, structured_outputs="json"),
            "structured_outputs", "structured_outputs string")
    refused(s, "/v1/chat/completions", dict(base, structured_outputs={"choice": []}),
            "structured_outputs.choice", "empty choice")
    refused(s, "/v1/chat/completions", dict(base, structured_outputs={"regex": "("}),
            "structured_outputs.regex", "bad regex")


# ---- 3b. llama-server's API --------------------------------------------------------------

def llama_events(text):
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


def llama_completion(s):
    body = {"prompt": "In the beginning", "n_predict": 12, "temperature": 0}
    st, r = s.post("/completion", body)
    expect(st == 200 and isinstance(r.get("content"), str) and r.get("stop") is True and
           r.get("tokens_predicted") == 12 and r.get("stop_type") == "limit" and
           r.get("tokens_evaluated", 0) > 0 and "timings" in r and
           r["generation_settings"]["n_predict"] == 12,
           "/completion: %s %s" % (st, r))
    if st != 200:
        return
    # The same greedy request on /v1/completions: the same text.
    st2, o = s.post("/v1/completions", {"prompt": "In the beginning", "max_tokens": 12,
                                        "temperature": 0})
    expect(st2 == 200 and o["choices"][0]["text"] == r["content"],
           "/completion vs /v1/completions: %r vs %r" % (r["content"], o))
    # Streamed: llama-server's events, no [DONE]; the pieces make the same text.
    st, text = post_stream(s, "/completion", body)
    ev = llama_events(text) if st == 200 else []
    expect(st == 200 and ev and all(e["stop"] is False for e in ev[:-1]) and
           ev[-1]["stop"] is True and ev[-1]["stop_type"] == "limit" and
           "[DONE]" not in text and "".join(e["content"] for e in ev) == r["content"] and
           all(isinstance(e.get("tokens"), list) for e in ev),
           "/completion stream: %s" % text[:600])
    # Token ids as the prompt.
    st, tok = s.post("/tokenize", {"prompt": "In the beginning"})
    st, r2 = s.post("/completion", dict(body, prompt=tok["tokens"]))
    expect(st == 200 and r2.get("content") == r["content"], "/completion ids: %s" % r2)
    # A stop word: stop_type word, the word named.
    words = re.findall(r"[A-Za-z]{3,}", r["content"])
    if words:
        st, r3 = s.post("/completion", dict(body, stop=[words[0]]))
        expect(st == 200 and r3["stop_type"] == "word" and r3["stopping_word"] == words[0] and
               words[0] not in r3["content"], "/completion stop word: %s" % r3)
    # GBNF grammar and JSON Schema.
    st, r4 = s.post("/completion", {"prompt": "Answer:", "n_predict": 8,
                                    "grammar": 'root ::= "yea" | "nay"'})
    expect(st == 200 and r4["content"] in ("yea", "nay") and r4["stop_type"] == "eos",
           "/completion grammar: %s" % r4)
    st, r5 = s.post("/completion", {"prompt": "Answer:", "n_predict": 40, "json_schema": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["n"]}})
    try:
        ok = 1 <= json.loads(r5["content"])["n"] <= 9
    except Exception:  # noqa: BLE001
        ok = False
    expect(st == 200 and ok, "/completion json_schema: %s" % r5)
    # n_predict -1: until the context is full (512 tokens for this model).
    st, r6 = s.post("/completion", {"prompt": "In the beginning", "n_predict": -1,
                                    "ignore_eos": True, "temperature": 0})
    expect(st == 200 and r6["tokens_predicted"] + r6["tokens_evaluated"] == 512 and
           r6["stop_type"] == "limit", "/completion n_predict -1: %s" % {
               k: r6.get(k) for k in ("tokens_predicted", "tokens_evaluated", "stop_type")})
    # n_predict beyond the context: a cap, not an error.
    st, r7 = s.post("/completion", {"prompt": "In", "n_predict": 10 ** 12, "ignore_eos": True,
                                    "temperature": 0})
    expect(st == 200 and r7["tokens_predicted"] + r7["tokens_evaluated"] == 512,
           "/completion n_predict huge: %s" % st)
    # Settings UIs send at their neutral values are accepted; others refused.
    st, _ = s.post("/completion", dict(body, cache_prompt=False, typical_p=1, tfs_z=1,
                                       mirostat=0, seed=-1, repeat_penalty=1.0,
                                       repeat_last_n=64, n_probs=0, id_slot=-1,
                                       dry_multiplier=0, xtc_probability=0, dynatemp_range=0,
                                       timings_per_token=False))
    expect(st == 200, "/completion neutral settings: %s" % st)
    for k, v in (("typical_p", 0.5), ("mirostat", 2), ("n_probs", 3), ("dry_multiplier", 0.8),
                 ("timings_per_token", True), ("id_slot", 2)):
        refused(s, "/completion", dict(body, **{k: v}), k, "/completion %s=%s" % (k, v))
    refused(s, "/completion", dict(body, repeat_penalty=1.2, repeat_last_n=64), "repeat_last_n",
            "repeat_last_n window with a penalty")
    for v in (0, -3, "ten", 1.5, True):
        refused(s, "/completion", dict(body, n_predict=v), "n_predict", "n_predict %r" % (v,))
    refused(s, "/completion", {"n_predict": 4}, "prompt", "/completion without prompt")
    refused(s, "/completion", dict(body, prompt=["a", "b"]), "prompt", "several prompts")
    refused(s, "/completion", dict(body, prompt=[]), "prompt", "empty token prompt")
    refused(s, "/completion", dict(body, prompt=[99999]), "prompt", "token id out of range")
    refused(s, "/completion", dict(body, grammar='root ::= "a"', json_schema={"type": "object"}),
            "json_schema", "grammar and json_schema")
    refused(s, "/completion", dict(body, grammar="root ::= ("), "guided_grammar", "bad grammar")
    refused(s, "/completion", dict(body, samplers=["top_k"]), "samplers", "samplers")
    # logit_bias in llama-server's shapes: a ban (false) and a push, as pairs or an object.
    # The first token the greedy reply samples: the first streamed event's id.
    first = next((e["tokens"][0] for e in ev if e.get("tokens")), 5)
    st, b1 = s.post("/completion", dict(body, n_predict=1, logit_bias=[[first, False]]))
    st2, b2 = s.post("/completion", dict(body, n_predict=3, logit_bias={"3": 100}))
    st3, b3 = s.post("/completions", dict(body, n_predict=3, logit_bias=[[3, 100]]))
    expect(st == 200 and b1["content"] and not r["content"].startswith(b1["content"]),
           "logit_bias ban: %r vs %r" % (b1, r["content"]))
    expect(st2 == 200 and st3 == 200 and b2["content"] == b3["content"] == "" and
           b2["tokens_predicted"] == 3, "logit_bias push of a special token: %s %s" % (b2, b3))
    refused(s, "/completion", dict(body, logit_bias=[["Hello", 1]]), "logit_bias",
            "logit_bias by text")
    refused(s, "/completion", dict(body, logit_bias=[[1, 2, 3]]), "logit_bias", "bias triple")
    refused(s, "/completion", dict(body, logit_bias=[[5, 1000]]), "logit_bias", "bias 1000")
    refused(s, "/completion", dict(body, logit_bias={"x": 1}), "logit_bias", "bias key x")
    refused(s, "/completion", dict(body, logit_bias=[[i, 1] for i in range(1025)]), "logit_bias",
            "1025 biases")
    refused(s, "/completion", dict(body, temperature="hot"), "temperature", "temperature str")
    refused(s, "/completion", dict(body, frobnicate=1), "frobnicate", "unknown key")
    st, r = raw_post(s, "/completion", b'{"prompt": "a", "n_predict": 2, "n_predict": 3}')
    expect(st == 400 and b"Duplicate key" in r, "duplicate key: %s %s" % (st, r))
    st, r = s.post("/completion", body)
    expect(st == 200, "still serving: %s" % st)


def llama_props(s):
    st, raw = s.get("/props")
    p = json.loads(raw) if st == 200 else {}
    st2, models = s.get("/v1/models")
    ctx = json.loads(models)["data"][0]["max_model_len"]
    dgs = p.get("default_generation_settings", {})
    expect(st == 200 and dgs.get("n_ctx") == ctx == 512 and
           dgs.get("params", {}).get("n_predict") == -1 and
           dgs["params"].get("temperature") == 0.8 and
           isinstance(p.get("total_slots"), int) and p["total_slots"] >= 1 and
           p.get("model_path", "").endswith(".gguf") and
           "<|im_start|>" in p.get("chat_template", "") and
           p.get("bos_token") == "<s>" and p.get("eos_token") == "</s>" and
           p.get("build_info", "").startswith("weir "),
           "/props: %s %s" % (st, p))
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("POST", "/props", "{}", {"Content-Type": "application/json"})
    r = c.getresponse()
    expect(r.status == 405, "POST /props: %s" % r.status)


def hostile(s):
    chat = {"messages": MESSAGES, "max_tokens": 2}
    st, r = raw_post(s, "/v1/chat/completions",
                     b'{"messages": [{"role": "user", "content": "x"}], "store": false, '
                     b'"store": true}')
    expect(st == 400 and b"Duplicate key" in r, "duplicate store: %s %s" % (st, r))
    refused(s, "/v1/chat/completions", dict(chat, chat_template_kwargs={"k%d" % i: 1
                                                                        for i in range(65)}),
            "chat_template_kwargs", "65 kwargs")
    refused(s, "/v1/chat/completions", dict(chat, continue_final_message="yes"),
            "continue_final_message", "continue string")
    # An assistant message sent back as a reply carried it (openai-node's runTools adds
    # `parsed`): its output-only keys are accepted there, and only there.
    echoed = MESSAGES + [{"role": "assistant", "content": "Genesis.", "parsed": None,
                          "refusal": None, "annotations": []},
                         {"role": "user", "content": "And then?"}]
    st, r = s.post("/v1/chat/completions", dict(chat, messages=echoed))
    expect(st == 200, "assistant message with parsed/refusal: %s %s" % (st, r))
    refused(s, "/v1/chat/completions", dict(chat, messages=[
        {"role": "user", "content": "x", "parsed": None}]), "messages[0].parsed",
        "parsed on a user message")
    st, _ = s.post("/v1/chat/completions", chat)
    expect(st == 200, "still serving: %s" % st)


# ---- chat_template_kwargs, on a copy of the model whose template reads them ---------------

KWARGS_TEMPLATE = (
    "{%- if probe is defined -%}{{- raise_exception('probe=' + probe) -}}{%- endif -%}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking %}{{ '<think>\\n' }}{% endif %}"
    "{% endif %}")


def template_kwargs(weir, plugins, model, work):
    copy = os.path.join(work, "kwargs-model.gguf")
    gguf_meta.set_string(model, copy, "tokenizer.chat_template", KWARGS_TEMPLATE)
    s = Server(weir, plugins, copy, os.path.join(work, "migration-kwargs-server.log"))
    try:
        base = {"messages": MESSAGES, "max_tokens": 2, "temperature": 0}
        st1, plain = s.post("/v1/chat/completions", base)
        st2, think = s.post("/v1/chat/completions",
                            dict(base, chat_template_kwargs={"enable_thinking": True}))
        st3, off = s.post("/v1/chat/completions",
                          dict(base, chat_template_kwargs={"enable_thinking": False}))
        expect(st1 == st2 == st3 == 200, "kwargs: %s %s %s" % (plain, think, off))
        if st1 == st2 == st3 == 200:
            p, t, o = (x["usage"]["prompt_tokens"] for x in (plain, think, off))
            expect(t > p == o, "enable_thinking: plain %d, on %d, off %d" % (p, t, o))
        st, r = s.post("/v1/chat/completions", dict(base, chat_template_kwargs={"probe": "seen"}))
        expect(st == 400 and "probe=seen" in r.get("error", {}).get("message", ""),
               "kwargs reach the template: %s %s" % (st, r))
        st, r = s.get("/props")
        expect(st == 200 and "enable_thinking" in json.loads(r)["chat_template"],
               "/props shows the model's template")
    finally:
        s.stop()


if __name__ == "__main__":
    weir, plugins, model, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    s = Server(weir, plugins, model, os.path.join(work, "migration-server.log"))
    try:
        for check in (forced_cut, openai_params, chat_rendering, special_tokens, stop_strings,
                      min_tokens, structured_outputs, llama_completion, llama_props, hostile):
            check(s)
    finally:
        s.stop()
    template_kwargs(weir, plugins, model, work)
    finish("ok")
