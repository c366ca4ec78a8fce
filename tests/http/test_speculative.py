"""Speculative decoding with the draft model through the real server: the trained target
with drafter/draft_model at a fixed length (drafter.adaptive = false, so that drafts are
really made on any machine). Greedy text is the same with and without drafts, streamed or
not; "speculative": false makes no drafts for its request (the draft counter of /metrics
does not move, nor does the draft model's pass counter) and gives the same text; a non-boolean is a 400 naming the parameter.
  python3 test_speculative.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import Server, expect, finish  # noqa: E402


def metric(s, name):
    _, text = s.get("/metrics")
    m = re.search(rb"^weir_" + name.encode() + rb"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def drafted(s):
    return metric(s, "spec_decode_num_draft_tokens_total")


def passes(s):
    return metric(s, "spec_decode_draft_passes_total")


def stream_text(data):
    out = []
    for line in data.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])
            out.extend(c.get("text", "") for c in ch.get("choices", []))
    return "".join(out)


def main():
    weir, plugins, model, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    draft = os.path.join(os.path.dirname(model), "kjv-draft.gguf")
    s = Server(weir, plugins, model, os.path.join(work, "speculative-server.log"),
               extra=["--set", "drafter.name=draft_model", "--set", "drafter.model=" + draft,
                      "--set", "drafter.adaptive=false",
                      # every step drafts its 4 (no confidence stop): the per-position
                      # metrics below need drafts at every position
                      "--set", "drafter.min_confidence=0"])
    try:
        body = {"prompt": "And it came to pass", "max_tokens": 48, "temperature": 0,
                "ignore_eos": True}
        d0, p0 = drafted(s), passes(s)
        st, r = s.post("/v1/completions", body)
        d1, p1 = drafted(s), passes(s)
        expect(st == 200 and r["usage"]["completion_tokens"] == 48, "with drafts %s %s" % (st, r))
        expect(d0 is not None and d1 is not None and d1 > d0, "drafts made: %s -> %s" % (d0, d1))
        text = r["choices"][0]["text"] if st == 200 else None
        # The draft model's forward passes: some for the drafting request, none for one that
        # does not draft (its draft KV is never caught up: docs/engine.md, lazy catch-up).
        expect(p0 == 0 and p1 is not None and p1 > 0 and
               (metric(s, "spec_decode_draft_model_tokens_total") or 0) >= p1,
               "draft passes: %s -> %s" % (p0, p1))
        st, r2 = s.post("/v1/completions", dict(body, speculative=False))
        d2, p2 = drafted(s), passes(s)
        expect(st == 200 and r2["choices"][0]["text"] == text, "speculative false: %s" % r2)
        expect(d2 == d1, "speculative false made drafts: %s -> %s" % (d1, d2))
        expect(p2 == p1, "speculative false ran draft passes: %s -> %s" % (p1, p2))
        st, data = s.post("/v1/completions", dict(body, stream=True))
        expect(st == 200 and stream_text(data) == text, "streamed with drafts")
        st, c = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                "max_tokens": 24, "temperature": 0,
                                                "speculative": False})
        expect(st == 200, "chat with speculative false: %s %s" % (st, c))
        _, m = s.get("/metrics")
        pos = {}
        for kind in ("draft", "accepted"):
            for mm in re.finditer((r'^weir_spec_decode_num_%s_tokens_per_pos_total\{[^}]*'
                                   r'position="(\d+)"[^}]*\} (\S+)$' % kind).encode(), m, re.M):
                pos[(kind, int(mm.group(1)))] = float(mm.group(2))
        expect(sorted(k for (kk, k) in pos if kk == "draft") == [1, 2, 3, 4] and
               pos[("draft", 1)] >= pos[("draft", 4)] > 0 and
               0 < pos[("accepted", 1)] <= pos[("draft", 1)] and
               pos[("accepted", 4)] <= pos[("accepted", 1)], "per-position metrics %s" % pos)
        expect(re.search(rb"^weir_spec_decode_length(\{[^}]*\})? 4$", m, re.M) is not None and
               re.search(rb"^weir_spec_decode_draft_seconds_total(\{[^}]*\})? [1-9eE0-9.+-]+$",
                         m, re.M) is not None, "length and drafting time")
        for bad in ["no", 0, [True]]:
            st, e = s.post("/v1/completions", dict(body, speculative=bad))
            expect(st == 400 and e["error"]["param"] == "speculative",
                   "speculative=%r: %s %s" % (bad, st, e))
    finally:
        s.stop()
    finish("ok")


if __name__ == "__main__":
    main()
