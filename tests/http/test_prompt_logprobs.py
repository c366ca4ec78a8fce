#!/usr/bin/python3
"""Prompt logprobs end to end (issue 13: `echo` with `logprobs` on /v1/completions), on the real
`weir serve` with the trained model, prompts scored in chunks of at most 32 rows
(scheduler.max_num_batched_tokens = 32):
  test_prompt_logprobs.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR
Checks the response's shape (one entry per prompt token, the first with null logprob and
top, then the output's; text_offset placing every token in the returned text), that a prompt
token's logprob is the one the model gave it when it generated that very token (prompt
scoring and generation agree), that streaming reports the same entries as a whole response,
that a prompt seen before (in the prefix cache) scores the same, n > 1, a long prompt, and
that a client leaving while its prompt is scored costs nothing: the server keeps serving."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import Server, expect, finish  # noqa: E402

TEXT = ("In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep. And the Spirit of God "
        "moved upon the face of the waters. And God said, Let there be light: and there was "
        "light.")



def stream_logprobs(data):
    """The chunks of one streamed completion folded together: text and the four arrays."""
    text, lp = "", {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for line in data.decode("utf-8").split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for c in json.loads(line[6:]).get("choices", []):
            text += c.get("text") or ""
            for k in lp:
                lp[k] += (c.get("logprobs") or {}).get(k, [])
    return text, lp


def check_shape(resp, n_prompt, max_tokens, k, what):
    c = resp["choices"][0]
    lp = c["logprobs"]
    toks, vals, tops, offs = (lp["tokens"], lp["token_logprobs"], lp["top_logprobs"],
                              lp["text_offset"])
    expect(len(toks) == len(vals) == len(tops) == len(offs) == n_prompt + max_tokens,
           "%s: %d entries for %d prompt + %d output tokens" % (what, len(toks), n_prompt,
                                                               max_tokens))
    expect(vals[0] is None and tops[0] is None, "%s: first entry %r %r" % (what, vals[0], tops[0]))
    text = c["text"]
    expect(text.startswith(TEXT), "%s: echo missing: %r" % (what, text[:80]))
    for i in range(1, len(toks)):
        expect(vals[i] is not None and vals[i] <= 1e-6, "%s: logprob %d = %r" % (what, i, vals[i]))
        top = tops[i] or {}
        expect(k <= len(top) <= k + 1, "%s: %d top entries at %d" % (what, len(top), i))
        expect(abs(top.get(toks[i], 1) - vals[i]) < 1e-6,
               "%s: token %d (%r) not listed with its logprob" % (what, i, toks[i]))
        expect(max(top.values()) >= vals[i] - 1e-6, "%s: top below the token at %d" % (what, i))
    # Offsets place each token in the text: nondecreasing, and the output starts after the
    # echoed prompt.
    expect(offs == sorted(offs) and offs[-1] <= len(text.encode()), "%s: offsets %r" % (what, offs))
    expect(offs[n_prompt] == len(TEXT.encode()), "%s: first output offset %d, prompt %d bytes" % (
        what, offs[n_prompt], len(TEXT.encode())))
    for i in range(2, n_prompt):
        piece = text.encode()[offs[i]:offs[i + 1] if i + 1 < len(offs) else None].decode()
        expect(piece.strip() == toks[i].strip() or toks[i].startswith("bytes:"),
               "%s: offset %d gives %r for token %r" % (what, i, piece, toks[i]))
    return vals


def main():
    weir, plugins, model, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    srv = Server(weir, plugins, model, os.path.join(work, "prompt-logprobs.log"),
                 ["--set", "scheduler.max_num_batched_tokens=32"])
    try:
        st, tok = srv.post("/tokenize", {"prompt": TEXT})
        ids = tok["tokens"]
        n = len(ids)
        expect(st == 200 and n > 40, "tokenize: %r" % (tok,))
        body = {"prompt": TEXT, "max_tokens": 3, "temperature": 0, "echo": True, "logprobs": 3}

        st, full = srv.post("/v1/completions", body)
        expect(st == 200, "echo+logprobs: status %d %r" % (st, full))
        vals = check_shape(full, n, 3, 3, "whole")

        # The same request streamed: the same text and entries.
        st, raw = srv.post("/v1/completions", dict(body, stream=True))
        text, lp = stream_logprobs(raw)
        want = full["choices"][0]["logprobs"]
        expect(text == full["choices"][0]["text"], "stream text differs: %r" % text[:100])
        expect(lp["tokens"] == want["tokens"] and lp["text_offset"] == want["text_offset"],
               "stream tokens/offsets differ")
        expect(all((a is None and b is None) or abs(a - b) < 1e-5
                   for a, b in zip(lp["token_logprobs"], want["token_logprobs"])) and
               len(lp["token_logprobs"]) == len(want["token_logprobs"]),
               "stream logprobs differ")

        # Prompt scoring agrees with generation: the model generated token g after the prompt
        # with logprob lg; scoring the prompt + g gives g the same logprob.
        st, gen = srv.post("/v1/completions", {"prompt": ids, "max_tokens": 1, "temperature": 0,
                                               "logprobs": 2})
        g_lp = gen["choices"][0]["logprobs"]["token_logprobs"][0]
        st, tok2 = srv.post("/tokenize", {"prompt": TEXT + gen["choices"][0]["text"]})
        ids2 = tok2["tokens"]
        if ids2[:n] == ids and len(ids2) == n + 1:
            st, sc = srv.post("/v1/completions", {"prompt": ids2, "max_tokens": 1,
                                                  "temperature": 0, "echo": True, "logprobs": 0})
            got = sc["choices"][0]["logprobs"]["token_logprobs"][n]
            expect(abs(got - g_lp) < 1e-3, "scored %r, generated with %r" % (got, g_lp))
            # The prompt part is independent of what follows it.
            prefix = sc["choices"][0]["logprobs"]["token_logprobs"][1:n]
            expect(max(abs(a - b) for a, b in zip(prefix, vals[1:n])) < 1e-4,
                   "the same prompt tokens scored differently")
        else:
            expect(False, "retokenized prompt + output does not extend the prompt: %r" % ids2)

        # Seen before, so its blocks are in the prefix cache: still every row is scored.
        st, again = srv.post("/v1/completions", body)
        a2 = again["choices"][0]["logprobs"]["token_logprobs"]
        expect(st == 200 and len(a2) == len(vals) and
               max(abs(a - b) for a, b in zip(a2[1:], vals[1:])) < 1e-4,
               "repeat: %r" % (again.get("error"),))

        # n > 1: every choice carries the prompt's entries.
        st, two = srv.post("/v1/completions", dict(body, n=2, temperature=0.8, seed=3))
        expect(st == 200 and len(two["choices"]) == 2, "n=2: %d %r" % (st, two))
        for c in two.get("choices", []):
            expect(c["logprobs"]["token_logprobs"][0] is None and
                   len(c["logprobs"]["tokens"]) == n + 3, "n=2 choice %d" % c["index"])

        # A long prompt (many chunks), then a client that leaves while its prompt is scored.
        long_ids = (ids * 12)[:480]
        st, lg = srv.post("/v1/completions", {"prompt": long_ids, "max_tokens": 1, "echo": True,
                                              "logprobs": 1})
        expect(st == 200 and len(lg["choices"][0]["logprobs"]["tokens"]) == 481,
               "long prompt: %d %r" % (st, lg.get("error")))
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", srv.port))
            req = json.dumps({"prompt": long_ids, "max_tokens": 50, "echo": True,
                              "logprobs": 5, "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
            time.sleep(0.05)
            s.close()
        st, _ = srv.get("/health")
        expect(st == 200, "health after clients left: %d" % st)
        st, ok = srv.post("/v1/completions", body)
        expect(st == 200 and ok["choices"][0]["logprobs"]["token_logprobs"][1:] ==
               full["choices"][0]["logprobs"]["token_logprobs"][1:],
               "after clients left: %r" % (ok.get("error"),))
        deadline = time.time() + 30
        while time.time() < deadline:
            st, m = srv.get("/metrics")
            running = [ln for ln in m.decode().split("\n")
                       if ln.startswith("weir_num_requests_running{")]
            if running and float(running[0].split()[-1]) == 0:
                break
            time.sleep(0.2)
        expect(running and float(running[0].split()[-1]) == 0, "requests still running: %r" % running)
    finally:
        rc = srv.stop()
    expect(rc == 0, "server exit status %r" % rc)
    finish("prompt logprobs: all checks passed")


if __name__ == "__main__":
    main()
