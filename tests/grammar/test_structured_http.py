#!/usr/bin/python3
"""Structured output end to end (issue 13): the real `weir serve` on a random-weight model
(the constraint must force validity when the model knows nothing) and on the trained model,
driven over HTTP on loopback. Every output is checked independently of weir's code by
grammar_check.check_one (python3-jsonschema, Python's re).

  test_structured_http.py WEIR_BINARY PLUGIN_DIR SOURCE_DIR WORK_DIR [TEST_PLUGIN_DIR]

With TEST_PLUGIN_DIR, the trained model is also served with tests/grammar's `nocaps` sampler,
which declares no 1.1 capabilities: the host applies the masks for it (SDK promise).

Covers: generated JSON Schemas through response_format json_schema (completions and chat,
streaming and not, n > 1), guided_json, json_object, guided_regex, guided_choice,
guided_grammar; max_tokens reached inside a constrained output ("length", the truncated
text); and the 400s: an empty enum, an invalid regex, an unsupported keyword in strict mode,
two constraints at once. The server keeps serving after each error."""

import json
import os
import random
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import grammar_check  # noqa: E402
from weir_server import Server  # noqa: E402

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL " + msg[:600], flush=True)


def sse_join(data):
    """A stream's chunks folded into the non-streaming shape: text per choice index."""
    choices = {}
    for line in data.decode("utf-8").split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for c in chunk.get("choices", []):
            d = choices.setdefault(c["index"], {"index": c["index"], "text": "",
                                                "finish_reason": None})
            piece = c.get("text")
            if piece is None:
                piece = (c.get("delta") or {}).get("content") or ""
            d["text"] += piece
            if c.get("finish_reason"):
                d["finish_reason"] = c["finish_reason"]
    return {"choices": [choices[k] for k in sorted(choices)]}


def texts(resp):
    out = []
    for c in resp["choices"]:
        if "message" in c:
            out.append((c["message"]["content"], c["finish_reason"]))
        else:
            out.append((c["text"], c["finish_reason"]))
    return out


def check(kind, constraint, text, finish, what):
    """A finished output must satisfy its constraint; a cut one ("length") is not checked."""
    if finish == "length":
        return 0
    if finish != "stop":
        fail("%s: finish_reason %r" % (what, finish))
        return 0
    why = grammar_check.check_one(kind, constraint, text)
    if why:
        fail("%s: %s\n  constraint %s\n  output %r" % (
            what, why, json.dumps(constraint, ensure_ascii=False)[:300], text[:300]))
    return 1


def run_schemas(srv, name, schemas, max_tokens):
    """Each schema once through each shape; returns (finished, total)."""
    jobs = []
    for i, schema in enumerate(schemas):
        rf = {"type": "json_schema", "json_schema": {"name": "s%d" % i, "schema": schema}}
        shape = i % 4
        if shape == 0:
            body = {"prompt": "Data:", "max_tokens": max_tokens, "response_format": rf,
                    "seed": i, "temperature": 0.7}
            path = "/v1/completions"
        elif shape == 1:
            body = {"messages": [{"role": "user", "content": "JSON please"}],
                    "max_tokens": max_tokens, "response_format": rf, "seed": i, "n": 2,
                    "temperature": 1.0}
            path = "/v1/chat/completions"
        elif shape == 2:
            body = {"prompt": "Record:", "max_tokens": max_tokens, "guided_json": schema,
                    "seed": i, "stream": True}
            path = "/v1/completions"
        else:
            body = {"messages": [{"role": "user", "content": "Fill it in"}],
                    "max_tokens": max_tokens, "response_format": rf, "seed": i,
                    "stream": True, "n": 2}
            path = "/v1/chat/completions"
        jobs.append((i, schema, path, body))

    def one(job):
        i, schema, path, body = job
        st, resp = srv.post(path, body)
        if st != 200:
            fail("%s schema %d: status %d %s" % (name, i, st, json.dumps(resp)[:300]))
            return 0, 0
        fin = tot = 0
        for text, finish in texts(resp):
            tot += 1
            fin += check("schema", schema, text, finish, "%s schema %d" % (name, i))
        return fin, tot

    with ThreadPoolExecutor(8) as pool:
        res = list(pool.map(one, jobs))
    return sum(r[0] for r in res), sum(r[1] for r in res)


def expect_400(srv, body, param, words, what):
    st, resp = srv.post("/v1/completions", body)
    err = resp.get("error", {}) if isinstance(resp, dict) else {}
    if st != 400 or err.get("param") != param or not all(w in err.get("message", "") for w in words):
        fail("%s: want 400 naming %r, got %d %s" % (what, param, st, json.dumps(resp)[:300]))


def run_other(srv, name):
    # Regex, choice, json_object and a grammar, several seeds each.
    cases = [
        ("regex", r"[A-Z][a-z]{1,8} (said|spake) unto [A-Z][a-z]{1,8}\.",
         {"guided_regex": r"[A-Z][a-z]{1,8} (said|spake) unto [A-Z][a-z]{1,8}\."}),
        ("regex", r"\d{3}-\d{4}", {"guided_regex": r"\d{3}-\d{4}"}),
        ("choice", ["a prophet", "a king", "a shepherd"],
         {"guided_choice": ["a prophet", "a king", "a shepherd"]}),
        ("json_object", None, {"response_format": {"type": "json_object"}}),
        ("ebnf-arith", None, {"guided_grammar": 'root ::= expr\nexpr ::= term ("+" term)*\n'
                                                 'term ::= [0-9] | "(" expr ")"'}),
    ]
    for kind, constraint, extra in cases:
        for seed in range(6):
            body = dict(prompt="And he said", max_tokens=200, seed=seed, temperature=0.9,
                        **extra)
            body["stream"] = seed % 2 == 1
            st, resp = srv.post("/v1/completions", body)
            if st != 200:
                fail("%s %s: status %d %s" % (name, kind, st, json.dumps(resp)[:300]))
                continue
            for text, finish in texts(resp):
                check(kind, constraint, text, finish, "%s %s seed %d" % (name, kind, seed))

    # max_tokens reached inside a constrained output: "length" and the cut text, as OpenAI.
    st, resp = srv.post("/v1/completions", {
        "prompt": "x", "max_tokens": 3, "guided_regex": "a{50}"})
    c = resp["choices"][0] if st == 200 else {}
    if st != 200 or c.get("finish_reason") != "length" or not set(c.get("text", "")) <= {"a"} \
            or not c.get("text"):
        fail("%s: max_tokens inside a constraint: %d %s" % (name, st, json.dumps(resp)[:300]))

    # Errors: a 400 naming the problem, and the server keeps serving.
    expect_400(srv, {"prompt": "x", "response_format": {
        "type": "json_schema", "json_schema": {"name": "e", "schema": {"enum": []}}}},
        "response_format", ["enum"], name + " empty enum")
    expect_400(srv, {"prompt": "x", "guided_regex": "(ab"}, "guided_regex", ["regex"],
               name + " invalid regex")
    expect_400(srv, {"prompt": "x", "response_format": {
        "type": "json_schema", "json_schema": {"name": "u", "strict": True, "schema": {
            "type": "array", "uniqueItems": True}}}}, "response_format", ["uniqueItems"],
        name + " unsupported keyword in strict mode")
    expect_400(srv, {"prompt": "x", "guided_regex": "a", "guided_choice": ["b"]},
               "guided_choice", ["give one"], name + " two constraints")
    expect_400(srv, {"prompt": "x", "response_format": {"type": "xml"}},
               "response_format.type", ["json_schema"], name + " unknown type")
    st, _ = srv.get("/health")
    if st != 200:
        fail("%s: /health %d after the errors" % (name, st))

    # A schema that takes a good part of a second to compile is compiled off the event loop:
    # /health answers meanwhile, and a client that leaves during the compile costs nothing.
    heavy = {"type": "object", "properties": {
        "p%d_%s" % (i, name): {"type": "string", "pattern": "^[a-z]{3,40}[0-9]{2,9}$"}
        for i in range(300)}}
    body = {"prompt": "x", "max_tokens": 2, "guided_json": heavy}
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(srv.post, "/v1/completions", body)
        time.sleep(0.05)
        t0 = time.time()
        st, _ = srv.get("/health")
        dt = time.time() - t0
        st2, resp = fut.result()
    if st != 200 or st2 != 200:
        fail("%s: heavy schema: /health %d, completion %d" % (name, st, st2))
    print("%s: /health answered in %.3f s while a heavy schema compiled" % (name, dt), flush=True)
    if dt > 0.25:
        fail("%s: /health took %.3f s during a compile" % (name, dt))
    heavy2 = dict(heavy, required=["p0_" + name])
    raw = json.dumps({"prompt": "x", "max_tokens": 2, "guided_json": heavy2}).encode()
    sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw)
    sock.close()
    time.sleep(1.5)
    st, page = srv.get("/metrics")
    if st != 200 or b"weir_num_requests_running" not in page:
        fail("%s: /metrics %d after a client left during a compile" % (name, st))


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        return 2
    weir, plugins, source, work = sys.argv[1:5]
    test_plugins = sys.argv[5] if len(sys.argv) == 6 else None
    os.makedirs(work, exist_ok=True)
    r = random.Random(1301)
    schemas = [grammar_check.gen_schema(r) for _ in range(240)]

    random_model = os.path.join(work, "structured-random.gguf")
    subprocess.run([weir, "mkmodel", "--preset", "tiny", "--seed", "7", "--out", random_model],
                   check=True, stdout=subprocess.DEVNULL)
    # (name, model, schemas, max_tokens, the share of outputs that must finish in budget):
    # the trained model writes longer strings than the random one.
    models = [("random", random_model, schemas, 384, 0.75, ())]
    trained = os.path.join(source, "models", "kjv-target.gguf")
    if os.path.exists(trained):
        models.append(("trained", trained, schemas[:60], 480, 0.5, ()))
        nocaps = os.path.join(test_plugins or "", "weir_sampler_nocaps.so")
        if test_plugins and os.path.exists(nocaps):
            models.append(("nocaps-sampler", trained, schemas[60:90], 480, 0.5,
                           ("--set", "sampler.path=" + nocaps)))
    for name, path, sch, max_tokens, share, extra in models:
        srv = Server(weir, plugins, path, os.path.join(work, "structured-%s.log" % name), extra,
                     join=sse_join)
        try:
            t0 = time.time()
            fin, tot = run_schemas(srv, name, sch, max_tokens)
            print("%s: %d schemas, %d outputs, %d finished and valid-checked (%.1f s)" % (
                name, len(sch), tot, fin, time.time() - t0), flush=True)
            # Most outputs must end within the budget, or the check proves little.
            if tot == 0 or fin < share * tot:
                fail("%s: only %d of %d outputs finished within %d tokens" % (
                    name, fin, tot, max_tokens))
            run_other(srv, name)
        finally:
            rc = srv.stop()
        if rc != 0:
            fail("%s: server exit status %s" % (name, rc))
    print("%d failures" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
