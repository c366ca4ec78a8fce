#!/usr/bin/python3
"""/v1/embeddings end to end on the real `weir serve` (issue 33):
  test_embeddings.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR
The served model's pooled hidden states (mean pooling, the default), with
embedding.max_inputs = 64. Checks the OpenAI shape (object, data[i].index, the model, usage),
unit vectors of the model's width, that a text and its token ids (from /tokenize) give the
same vector, that a batch gives what single requests give, that base64 is the float32 bytes
of the same vector, that different texts differ, that an embedding asked while a long
completion streams is the same as alone (and the completion finishes), and the refusals a
hostile client meets: 10,000 inputs, nested or mixed arrays, ids outside the vocabulary,
fractional ids, empty strings and lists, an input beyond the context, unknown parameters,
`dimensions` other than the model's, a bad encoding_format, an unknown model; the server
still answers afterwards. Then a second server with a `weir mkmodel --arch bert` embedding
model: its name and width in the answer, WordPiece token counts, its vocabulary and context
bounds."""
import base64
import http.client
import json
import math
import os
import struct
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import Server, expect, finish  # noqa: E402


def embed(s, body):
    return s.post("/v1/embeddings", body)


def vec(r, i=0):
    return r["data"][i]["embedding"]


def close(a, b, tol=1e-5):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


def shape(s):
    st, r = embed(s, {"input": "In the beginning God created the heaven and the earth.",
                      "model": s.model})
    expect(st == 200, "status %s %s" % (st, r))
    if st != 200:
        return None
    expect(r["object"] == "list" and len(r["data"]) == 1, "shape %s" % str(r)[:300])
    d = r["data"][0]
    expect(d["object"] == "embedding" and d["index"] == 0, "item %s" % str(d)[:200])
    v = d["embedding"]
    expect(len(v) == s.dim, "length %d, model width %d" % (len(v), s.dim))
    n = math.sqrt(sum(x * x for x in v))
    expect(abs(n - 1) < 1e-5, "norm %g" % n)
    expect(r["model"] == s.model, "model %r" % r["model"])
    st2, t = s.post("/tokenize", {"prompt": "In the beginning God created the heaven and the earth."})
    expect(st2 == 200, "tokenize %s" % st2)
    expect(r["usage"]["prompt_tokens"] == t["count"] and r["usage"]["total_tokens"] == t["count"],
           "usage %s, tokenize count %s" % (r["usage"], t["count"]))
    # The same text as token ids.
    st3, r3 = embed(s, {"input": t["tokens"]})
    expect(st3 == 200 and close(vec(r3), v), "ids vs text")
    # ... and as a list of token lists.
    st4, r4 = embed(s, {"input": [t["tokens"], t["tokens"][:3]]})
    expect(st4 == 200 and len(r4["data"]) == 2 and close(vec(r4), v), "token lists")
    expect(st4 == 200 and not close(vec(r4, 1), v, 1e-2), "a prefix gives another vector")
    expect(st4 == 200 and r4["usage"]["prompt_tokens"] == t["count"] + 3, "usage of lists")
    return v


def batch(s, v0):
    texts = ["In the beginning God created the heaven and the earth.", "And God said, Let there be light",
             "Jesus wept."]
    st, r = embed(s, {"input": texts})
    expect(st == 200 and [d["index"] for d in r["data"]] == [0, 1, 2], "batch %s" % str(r)[:200])
    if st != 200:
        return
    expect(close(vec(r, 0), v0), "batch item 0 equals the single request")
    for i, t in enumerate(texts):
        st1, r1 = embed(s, {"input": t})
        expect(st1 == 200 and close(vec(r1), vec(r, i)), "batch item %d vs single" % i)
    expect(not close(vec(r, 1), vec(r, 2), 1e-2), "different texts give different vectors")
    cos = sum(a * b for a, b in zip(vec(r, 1), vec(r, 2)))
    expect(cos < 0.9999, "cosine of different texts %g" % cos)


def b64(s, v0):
    st, r = embed(s, {"input": "In the beginning God created the heaven and the earth.",
                      "encoding_format": "base64", "dimensions": s.dim})
    expect(st == 200 and isinstance(vec(r), str), "base64 %s" % str(r)[:200])
    if st != 200:
        return
    raw = base64.b64decode(vec(r))
    expect(len(raw) == 4 * s.dim, "base64 bytes %d" % len(raw))
    f = list(struct.unpack("<%df" % s.dim, raw))
    expect(close(f, v0, 1e-6), "base64 decodes to the float vector")


def beside_generation(s, v0):
    """An embedding while a long completion streams: the same vector, and the stream ends."""
    out = {}

    def gen():
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=300)
        c.request("POST", "/v1/completions",
                  json.dumps({"prompt": "In the beginning", "max_tokens": 64, "stream": True,
                              "temperature": 0, "ignore_eos": True}),
                  {"Content-Type": "application/json"})
        resp = c.getresponse()
        out["status"] = resp.status
        out["body"] = resp.read()

    th = threading.Thread(target=gen)
    th.start()
    same = 0
    for _ in range(5):
        st, r = embed(s, {"input": "In the beginning God created the heaven and the earth."})
        same += st == 200 and close(vec(r), v0)
    th.join()
    expect(same == 5, "embeddings beside a completion: %d of 5 equal" % same)
    expect(out.get("status") == 200 and out["body"].rstrip().endswith(b"data: [DONE]"),
           "the completion beside them finished")


def refusals(s):
    def refused(body, status, needle, what):
        st, r = embed(s, body)
        msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
        expect(st == status and needle in msg, "%s: %s %s" % (what, st, str(r)[:300]))

    refused({"input": ["a"] * 10000}, 400, "at most 64", "10,000 inputs")
    refused({"input": ["a"] * 65}, 400, "at most 64", "65 inputs")
    refused({"input": [[[1, 2]]]}, 400, "token ids", "nested token lists")
    refused({"input": [["a"]]}, 400, "token ids", "strings inside a list of lists")
    refused({"input": [[1, [2]]]}, 400, "token ids", "a list inside a token list")
    refused({"input": ["a", 1]}, 400, "all strings", "mixed strings and ids")
    refused({"input": [1, "a"]}, 400, "token ids", "an id list with a string")
    refused({"input": [{"text": "a"}]}, 400, "input", "objects")
    refused({"input": [10 ** 9]}, 400, "outside the vocabulary", "an id beyond the vocabulary")
    refused({"input": [[5, -1]]}, 400, "outside the vocabulary", "a negative id")
    refused({"input": [1.5]}, 400, "integers", "a fractional id")
    refused({"input": ""}, 400, "empty", "an empty string")
    refused({"input": ["a", ""]}, 400, "empty", "an empty string in a list")
    refused({"input": []}, 400, "empty", "an empty list")
    refused({"input": [[]]}, 400, "empty", "an empty token list")
    refused({"input": [7] * (s.ctx + 1)}, 400, "context", "ids beyond the context")
    refused({"input": "Jesus wept. " * (s.ctx)}, 400, "context", "text beyond the context")
    refused({"input": 42}, 400, "must be a string", "a number")
    refused({}, 400, "'input' is required", "no input")
    refused({"input": "a", "dimensions": s.dim // 2}, 400, "cannot be shortened", "dimensions")
    refused({"input": "a", "encoding_format": "hex"}, 400, "encoding_format", "encoding_format")
    refused({"input": "a", "temperature": 1}, 400, "temperature", "an unknown parameter")
    refused({"input": "a", "model": "gpt-nope"}, 404, "does not exist", "an unknown model")
    # Still serving.
    st, r = embed(s, {"input": "Jesus wept."})
    expect(st == 200 and len(vec(r)) == s.dim, "serving after the refusals")
    st, _ = s.post("/v1/completions", {"prompt": "In the beginning", "max_tokens": 4})
    expect(st == 200, "completions after the refusals")


def encoder(weir, plugins, model, work):
    """A dedicated bert embedding model beside the served model: its name, width, WordPiece
    token counts, vocabulary and context."""
    import subprocess
    path = os.path.join(work, "bert.gguf")
    subprocess.run([weir, "mkmodel", "--arch", "bert", "--layers", "2", "--dim", "64", "--heads", "4",
                    "--ffn", "128", "--vocab", "512", "--ctx", "128", "--type", "f32",
                    "--name", "tiny-bert", "--out", path], check=True, stdout=subprocess.DEVNULL)
    s = Server(weir, plugins, model, os.path.join(work, "embeddings-bert-server.log"),
               extra=["--set", 'embedding.model="%s"' % path])
    try:
        st, r = embed(s, {"input": ["The river, the WEIR.", "the river , the weir ."], "model": "tiny-bert"})
        expect(st == 200, "bert: %s %s" % (st, str(r)[:300]))
        if st == 200:
            expect(r["model"] == "tiny-bert", "bert model name %r" % r["model"])
            expect(len(vec(r)) == 64, "bert width %d" % len(vec(r)))
            # [CLS] the river , the weir . [SEP], twice
            expect(r["usage"]["prompt_tokens"] == 16, "bert usage %s" % r["usage"])
            expect(close(vec(r, 0), vec(r, 1)), "lowercasing and punctuation splitting")
        st, r = embed(s, {"input": [101, 511, 102]})
        expect(st == 200, "bert ids in its vocabulary: %s" % st)
        st, r = embed(s, {"input": [101, 512, 102]})
        expect(st == 400 and "outside the vocabulary [0, 512)" in r["error"]["message"],
               "bert vocabulary bound: %s %s" % (st, str(r)[:200]))
        st, r = embed(s, {"input": [7] * 129})
        expect(st == 400 and "context" in r["error"]["message"], "bert context: %s" % st)
        st, r = embed(s, {"input": "water " * 200})
        expect(st == 400 and "context" in r["error"]["message"], "bert text context: %s" % st)
        st, r = embed(s, {"input": "water", "dimensions": 64})
        expect(st == 200, "dimensions = 64: %s" % st)
    finally:
        s.stop()


def metric(s, name):
    st, page = s.get("/metrics")
    for line in page.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def metrics(s):
    """The embedding counters grow by what a request embedded."""
    before = [metric(s, "weir_embedding_inputs_total"), metric(s, "weir_embedding_tokens_total")]
    st, r = embed(s, {"input": [[5, 6, 7], [8, 9]]})
    after = [metric(s, "weir_embedding_inputs_total"), metric(s, "weir_embedding_tokens_total")]
    expect(st == 200 and None not in before + after and after[0] - before[0] == 2 and
           after[1] - before[1] == 5, "embedding counters %s -> %s" % (before, after))
    expect((metric(s, "weir_embedding_seconds_total") or 0) > 0, "embedding seconds")


def main():
    weir, plugins, model, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    s = Server(weir, plugins, model, os.path.join(work, "embeddings-server.log"),
               extra=["--set", "embedding.max_inputs=64"])
    try:
        st, m = s.get("/v1/models")
        info = json.loads(m)["data"][0]
        s.model, s.ctx = info["id"], info["max_model_len"]
        st, r = embed(s, {"input": "x"})
        s.dim = len(vec(r)) if st == 200 else 0
        expect(s.dim > 0, "a first embedding: %s %s" % (st, str(r)[:300]))
        v0 = shape(s)
        if v0:
            batch(s, v0)
            b64(s, v0)
            beside_generation(s, v0)
        refusals(s)
        metrics(s)
    finally:
        s.stop()
    encoder(weir, plugins, model, work)
    finish("ok")


if __name__ == "__main__":
    main()
