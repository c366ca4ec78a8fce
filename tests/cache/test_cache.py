#!/usr/bin/python3
"""The response cache end to end (docs/response-cache.md) on the real `weir serve` with the
trained model, with the memory plugin and with the redis plugin against a real redis-server
started here on a free loopback port:
  test_cache.py WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR
Checks, for each plugin: a repeated deterministic request is a hit (x-weir-cache) with the
same answer and usage; streamed hits replay the same SSE chunks (deltas, finish_reason, usage,
tool calls) for chat, completions and /v1/responses; a non-deterministic request is never
served; every parameter that changes the answer changes the key; cache.mode off, Cache-Control
no-store / no-cache, cache.ttl; scopes (API key, user) with a hostile client trying to read
another key's entry; the admin clear; the metrics; bad `cache` objects are 400s. With Redis:
two replicas share hits, and a Redis that goes down leaves the server answering (misses,
counted) and the cache working again once Redis is back."""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import Server, expect, finish, free_port  # noqa: E402

WEIR, PLUGINS, MODEL, WORK = sys.argv[1:5]
os.makedirs(WORK, exist_ok=True)

TOOLS = [{"type": "function", "function": {
    "name": "get_verse", "description": "Look up a verse",
    "parameters": {"type": "object", "properties": {
        "book": {"type": "string", "enum": ["Genesis", "Exodus"]}}, "required": ["book"]}}}]


def post(s, path, body, key=None, headers=None):
    """(status, x-weir-cache header, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=300)
    h = {"Content-Type": "application/json"}
    if key is not None:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    c.request("POST", path, json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    settle()
    return r.status, r.getheader("x-weir-cache"), data


def settle():
    """An answer is stored just after it is sent (on a worker thread): a repeat sent at once
    may arrive first and miss."""
    time.sleep(0.15)


def stored(s, path, body, key=None, timeout=10):
    """Waits until `body` is a hit on s (probing with no-store, so the probes store nothing
    themselves); True when it became one."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if post(s, path, body, key, {"Cache-Control": "no-store"})[1] == "hit-exact":
            return True
    return False


def chat(content, **kw):
    b = {"messages": [{"role": "user", "content": content}], "max_tokens": 12, "temperature": 0}
    b.update(kw)
    return b


def sse(data):
    """The data: payloads of an SSE stream, ids and timestamps removed (they differ per
    answer by design)."""
    out = []
    for block in data.decode("utf-8").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                p = line[6:]
                if p == "[DONE]":
                    out.append(p)
                    continue
                o = json.loads(p)
                scrub(o)
                out.append(o)
    return out


def scrub(o):
    if isinstance(o, dict):
        for k in list(o):
            if k in ("id", "created", "created_at", "call_id", "item_id") or \
               (k == "id" and isinstance(o[k], str)):
                o[k] = "*"
            else:
                scrub(o[k])
    elif isinstance(o, list):
        for x in o:
            scrub(x)


def metric(s, name):
    """Sum of a metric family's samples whose name and labels match the regex `name`."""
    st, data = s.get("/metrics")
    total = 0.0
    for line in data.decode().splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"(\S+)\s+(\S+)$", line)
        if m and re.fullmatch(name, m.group(1)):
            total += float(m.group(2))
    return total


def twice(s, path, body, key="k1", headers=None):
    a = post(s, path, body, key, headers)
    b = post(s, path, body, key, headers)
    return a, b


def basics(s, tag):
    body = chat("In the beginning " + tag)
    s1, h1, d1 = post(s, "/v1/chat/completions", body, "k1")
    # A hit never reaches the engine: no finished request, no prompt token, no prefix-cache
    # lookup is counted for it.
    engine = [metric(s, r"weir_request_success_total.*"), metric(s, r"weir_prompt_tokens_total.*"),
              metric(s, r"weir_prefix_cache_queries_total.*")]
    s2, h2, d2 = post(s, "/v1/chat/completions", body, "k1")
    after = [metric(s, r"weir_request_success_total.*"), metric(s, r"weir_prompt_tokens_total.*"),
             metric(s, r"weir_prefix_cache_queries_total.*")]
    expect(engine == after and engine[0] >= 1, "%s: a hit reached the engine: %s %s" %
           (tag, engine, after))
    expect(s1 == 200 and s2 == 200, "%s: status %s %s" % (tag, s1, s2))
    expect(h1 == "miss" and h2 == "hit-exact", "%s: headers %s %s" % (tag, h1, h2))
    r1, r2 = json.loads(d1), json.loads(d2)
    expect(r1["choices"] == r2["choices"] and r1["usage"] == r2["usage"],
           "%s: hit differs: %s vs %s" % (tag, r1, r2))
    expect(r1["id"] != r2["id"], "%s: a hit gets its own id" % tag)
    # Each parameter that changes the answer is in the key.
    for change in ({"max_tokens": 11}, {"stop": ["and"]}, {"seed": 7}, {"top_k": 3},
                   {"logit_bias": {"5": 2}}, {"frequency_penalty": 0.5}, {"n": 2},
                   {"messages": [{"role": "user", "content": "In the beginning " + tag + "!"}]},
                   {"response_format": {"type": "json_object"}}):
        st, h, d = post(s, "/v1/chat/completions", dict(body, **change), "k1")
        expect(st == 200 and h == "miss", "%s: %s served from the cache (%s %s)" %
               (tag, change, st, h))
    # Not deterministic: never stored or served; a fixed seed makes it deterministic.
    hot = chat("And God said " + tag, temperature=1.0)
    (_, h1, _), (_, h2, _) = twice(s, "/v1/chat/completions", hot)
    expect(h1 == "miss" and h2 == "miss", "%s: temperature 1 served: %s %s" % (tag, h1, h2))
    (_, h1, d1), (_, h2, d2) = twice(s, "/v1/chat/completions", dict(hot, seed=42))
    expect(h1 == "miss" and h2 == "hit-exact" and
           json.loads(d1)["choices"] == json.loads(d2)["choices"],
           "%s: seeded: %s %s" % (tag, h1, h2))
    # n > 1 with a seed: every choice comes back.
    (_, h1, d1), (_, h2, d2) = twice(s, "/v1/chat/completions", dict(hot, seed=5, n=3))
    expect(h2 == "hit-exact" and len(json.loads(d2)["choices"]) == 3 and
           json.loads(d1)["choices"] == json.loads(d2)["choices"], "%s: n=3 hit" % tag)


def control(s, tag):
    # cache.mode off: neither served nor stored.
    b = chat("Control off " + tag, cache={"mode": "off"})
    (_, h1, _), (_, h2, _) = twice(s, "/v1/chat/completions", b)
    expect(h1 == "miss" and h2 == "miss", "%s: mode off: %s %s" % (tag, h1, h2))
    # no-store: not stored, so the next plain request misses.
    b = chat("Control no-store " + tag)
    _, h1, _ = post(s, "/v1/chat/completions", b, "k1", {"Cache-Control": "no-store"})
    _, h2, _ = post(s, "/v1/chat/completions", b, "k1")
    expect(h1 == "miss" and h2 == "miss", "%s: no-store stored: %s %s" % (tag, h1, h2))
    # no-cache: a stored answer is not served (but the fresh one is stored).
    _, h3, _ = post(s, "/v1/chat/completions", b, "k1", {"Cache-Control": "max-age=0, No-Cache"})
    _, h4, _ = post(s, "/v1/chat/completions", b, "k1")
    expect(h3 == "miss" and h4 == "hit-exact", "%s: no-cache: %s %s" % (tag, h3, h4))
    # ttl: gone after it passes.
    b = chat("Control ttl " + tag, cache={"ttl": 1})
    post(s, "/v1/chat/completions", b, "k1")
    _, h1, _ = post(s, "/v1/chat/completions", b, "k1")
    time.sleep(2.2)
    _, h2, _ = post(s, "/v1/chat/completions", b, "k1")
    expect(h1 == "hit-exact" and h2 == "miss", "%s: ttl: %s %s" % (tag, h1, h2))
    # Bad cache objects are 400s naming the parameter.
    for bad, param in (({"mode": "maybe"}, "cache.mode"), ({"ttl": 0}, "cache.ttl"),
                       ({"ttl": "1"}, "cache.ttl"), ({"size": 1}, "cache.size"), ([], "cache")):
        st, _, d = post(s, "/v1/chat/completions", chat("x", cache=bad), "k1")
        err = json.loads(d).get("error", {})
        expect(st == 400 and err.get("param") == param, "%s: bad cache %s: %s %s" %
               (tag, bad, st, d[:200]))
    # Logprobs are never served from the cache.
    b = chat("Control logprobs " + tag, logprobs=True)
    (_, h1, _), (_, h2, _) = twice(s, "/v1/chat/completions", b)
    expect(h2 == "miss", "%s: logprobs served from the cache" % tag)


def streams(s, tag):
    cases = [
        ("/v1/chat/completions", chat("Stream chat " + tag, max_tokens=16, stream=True,
                                      stream_options={"include_usage": True})),
        ("/v1/completions", {"prompt": "Stream completion " + tag, "max_tokens": 16,
                             "temperature": 0, "stream": True,
                             "stream_options": {"include_usage": True}}),
        ("/v1/responses", {"input": "Stream response " + tag, "max_output_tokens": 16,
                           "temperature": 0, "stream": True}),
        ("/v1/chat/completions", chat("Where is Genesis? " + tag, max_tokens=40, stream=True,
                                      tools=TOOLS,
                                      tool_choice={"type": "function",
                                                   "function": {"name": "get_verse"}})),
    ]
    for path, body in cases:
        (s1, h1, d1), (s2, h2, d2) = twice(s, path, body)
        e1, e2 = sse(d1), sse(d2)
        expect(s1 == 200 and s2 == 200 and h1 == "miss" and h2 == "hit-exact",
               "%s %s: %s %s %s %s" % (tag, path, s1, s2, h1, h2))
        expect(e1 == e2 and len(e1) > 3,
               "%s %s: replay differs:\n%s\nvs\n%s" % (tag, path, e1, e2))
        if path != "/v1/responses" and "tools" not in body:
            # Token-sized deltas, not one blob.
            deltas = [c for c in e2 if isinstance(c, dict) and c.get("choices")]
            expect(len(deltas) >= 4, "%s %s: %d chunks" % (tag, path, len(deltas)))
            # The non-streaming form of the same request is served from the same entry.
            nb = dict(body)
            nb.pop("stream")
            nb.pop("stream_options", None)
            st, h, d = post(s, path, nb, "k1")
            expect(st == 200 and h == "hit-exact", "%s %s: non-streamed %s %s" %
                   (tag, path, st, h))
        if "tools" in body:
            calls = [c for c in e2 if isinstance(c, dict) and c.get("choices") and
                     c["choices"][0].get("delta", {}).get("tool_calls")]
            expect(len(calls) >= 1, "%s: no tool_calls deltas in the replay" % tag)


def front(s, tag, plugin):
    """The front index (a byte-identical repeat answered without parsing): it serves repeats,
    and never across API keys or users, never a non-deterministic request, never against
    Cache-Control, never after a clear."""
    fh = lambda: metric(s, r"weir_response_cache_front_hits_total.*")  # noqa: E731
    body = chat("Front repeat " + tag)
    st, h1, d1 = post(s, "/v1/chat/completions", body, "alice")
    b0 = fh()
    st, h2, d2 = post(s, "/v1/chat/completions", body, "alice")
    b1 = fh()
    st, h3, d3 = post(s, "/v1/chat/completions", body, "alice")
    # memory: the store made the front entry (every front hit asks the plugin); Redis: the
    # first hit through the full path did (a store there may fail).
    expect(h1 == "miss" and h2 == "hit-exact" and h3 == "hit-exact" and fh() == b1 + 1 and
           (plugin != "memory" or b1 == b0 + 1),
           "%s: front: %s %s %s front hits %s %s %s" % (tag, h1, h2, h3, b0, b1, fh()))
    expect(d2 != d3 and json.loads(d2)["choices"] == json.loads(d3)["choices"],
           "%s: front answer (its own id)" % tag)
    expect(json.loads(d1)["choices"] == json.loads(d2)["choices"], "%s: front answer" % tag)
    # Streamed: the same chunks as the live stream, one entry per body.
    sb = dict(body, stream=True, stream_options={"include_usage": True})
    (_, h3, e3), (_, h4, e4) = twice(s, "/v1/chat/completions", sb, "alice")
    _, h5, e5 = post(s, "/v1/chat/completions", sb, "alice")
    expect(h3 == "hit-exact" and h4 == "hit-exact" and h5 == "hit-exact" and
           sse(e3) == sse(e4) == sse(e5) and len(sse(e5)) > 3,
           "%s: front stream %s %s %s" % (tag, h3, h4, h5))
    # From its second streamed front hit on, an entry is served from its rendered body (one
    # copy, the id and time patched in): the same chunks as the replay, each answer its own
    # id on every chunk, the current time, for chat and for completions.
    cb = {"prompt": "Front rendered " + tag, "max_tokens": 12, "temperature": 0,
          "stream": True, "stream_options": {"include_usage": True}}
    for path, b, prefix in (("/v1/chat/completions", sb, "chatcmpl-"),
                            ("/v1/completions", cb, "cmpl-")):
        got = [post(s, path, b, "alice") for _ in range(5)]
        ids = []
        for _, h, e in got:
            objs = [json.loads(line[6:]) for line in e.decode().split("\n")
                    if line.startswith("data: {")]
            these = {o.get("id") for o in objs}
            times = {o.get("created") for o in objs}
            expect(h == "hit-exact" or e is got[0][2], "%s: rendered %s: %s" % (tag, path, h))
            expect(len(these) == 1 and next(iter(these)).startswith(prefix) and len(times) == 1 and
                   abs(next(iter(times)) - time.time()) < 30,
                   "%s: rendered %s: ids %s times %s" % (tag, path, these, times))
            ids.append(next(iter(these)))
        expect(len(set(ids)) == 5, "%s: rendered %s reused an id: %s" % (tag, path, ids))
        expect(all(sse(e) == sse(got[1][2]) for _, _, e in got[1:]) and
               e.rstrip().endswith(b"data: [DONE]"),
               "%s: rendered %s differs from the replay" % (tag, path))
    # Other keys, no key, another user: the same bytes are another scope.
    base = fh()
    for key, b in (("mallory", body), (None, body), ("Alice", body),
                   ("alice", dict(body, user="u9"))):
        _, h, _ = post(s, "/v1/chat/completions", b, key)
        expect(h == "miss", "%s: front crossed scope key %r: %s" % (tag, key, h))
    expect(fh() == base, "%s: front served across scopes" % tag)
    # Not deterministic: never served, by either path.
    nd = chat("Front sampled " + tag, temperature=0.9)
    for _ in range(3):
        _, h, _ = post(s, "/v1/chat/completions", nd, "alice")
        expect(h == "miss", "%s: a sampled request was served: %s" % (tag, h))
    # no-store: nothing stored, by the front index either; no-cache: never served by it.
    ns = chat("Front no-store " + tag)
    for _ in range(2):
        _, h, _ = post(s, "/v1/chat/completions", ns, "alice", {"Cache-Control": "no-store"})
        expect(h == "miss", "%s: no-store request served %s" % (tag, h))
    _, h, _ = post(s, "/v1/chat/completions", ns, "alice")
    expect(h == "miss", "%s: a no-store answer was kept: %s" % (tag, h))
    base = fh()
    _, h, _ = post(s, "/v1/chat/completions", body, "alice", {"Cache-Control": "no-cache"})
    expect(h == "miss" and fh() == base, "%s: no-cache served: %s" % (tag, h))
    # cache.mode off in the body: never filled, never served.
    off = chat("Front off " + tag, cache={"mode": "off"})
    for _ in range(3):
        _, h, _ = post(s, "/v1/chat/completions", off, "alice")
        expect(h == "miss", "%s: mode off served %s" % (tag, h))
    # A clear empties it at once.
    post(s, "/v1/chat/completions", body, "alice")
    st, _, _ = post(s, "/admin/cache/clear", {}, "alice")
    _, h, _ = post(s, "/v1/chat/completions", body, "alice")
    expect(st == 200 and h == "miss", "%s: front served after a clear: %s" % (tag, h))


def raw_stream(s, body, key="alice"):
    """A streamed request on a raw socket: (socket, the bytes read until the first data
    chunk)."""
    data = json.dumps(body).encode()
    c = socket.create_connection(("127.0.0.1", s.port), 30)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nAuthorization: Bearer " + key.encode() +
              b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while b"data: " not in got:
        part = c.recv(65536)
        if not part:
            break
        got += part
    return c, got


def read_all(c):
    got = b""
    while True:
        part = c.recv(65536)
        if not part:
            break
        got += part
        if got.endswith(b"0\r\n\r\n"):
            break
    c.close()
    return got


def dechunk(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    out = b""
    while body:
        line, _, rest = body.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return head, out


def idle(s, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, d = s.get("/props")
        if not json.loads(d)["default_generation_settings"]["is_processing"]:
            return True
        time.sleep(0.1)
    return False


def joins(s, tag):
    """Identical requests in flight join the first: generated once, every one answered (the
    same text, streamed or not), and a client that leaves while joined frees everything."""
    import threading
    jm = lambda: metric(s, r"weir_response_cache_joins_total.*")  # noqa: E731
    done = lambda: metric(s, r"weir_request_success_total.*")  # noqa: E731
    body = chat("Join " + tag, max_tokens=300, ignore_eos=True)
    sbody = dict(body, stream=True)
    j0, d0 = jm(), done()
    lead, first = raw_stream(s, sbody)  # generating now: its first chunk is out
    results = []

    def one(b):
        results.append(post(s, "/v1/chat/completions", b, "alice"))
    ts = [threading.Thread(target=one, args=(b,)) for b in (body, body, sbody, sbody)]
    for t in ts:
        t.start()
    # One more follower leaves while it waits: its job must be freed, the rest unharmed.
    q = socket.create_connection(("127.0.0.1", s.port), 30)
    data = json.dumps(body).encode()
    q.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nAuthorization: Bearer alice\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    time.sleep(0.3)
    q.close()
    head, lead_sse = dechunk(first + read_all(lead))
    for t in ts:
        t.join(300)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in sse(lead_sse)
                   if isinstance(c, dict) and c.get("choices"))
    expect(len(results) == 4 and len(text) > 0, "%s: join results %d" % (tag, len(results)))
    for st, h, d in results:
        if d.startswith(b"data: ") or b"\ndata: " in d[:20]:
            got = "".join(c["choices"][0]["delta"].get("content") or "" for c in sse(d)
                          if isinstance(c, dict) and c.get("choices"))
        else:
            got = json.loads(d)["choices"][0]["message"]["content"]
        expect(st == 200 and h == "hit-exact" and got == text,
               "%s: joined answer %s %s differs (%d vs %d chars)" % (tag, st, h, len(got),
                                                                      len(text)))
    expect(jm() - j0 >= 3, "%s: joins counted %s" % (tag, jm() - j0))
    expect(done() - d0 == 1, "%s: generated %s times, not once" % (tag, done() - d0))
    expect(idle(s), "%s: jobs left after a joined client left" % tag)
    # The leader's client leaves: its followers still get the answer.
    body2 = chat("Join leaves " + tag, max_tokens=300, ignore_eos=True)
    lead, _ = raw_stream(s, dict(body2, stream=True))
    results = []
    ts = [threading.Thread(target=one, args=(b,)) for b in (body2, dict(body2, stream=True))]
    for t in ts:
        t.start()
    time.sleep(0.3)
    lead.close()
    for t in ts:
        t.join(300)
    expect(len(results) == 2 and all(st == 200 and h in ("hit-exact", "miss")
                                      for st, h, _ in results),
           "%s: followers of a leader that left: %s" % (tag, [(a, b) for a, b, _ in results]))
    expect(idle(s), "%s: jobs left after the leader left" % tag)


def scopes(s, tag):
    """A hostile client (key "mallory") tries to get key "alice"'s answer."""
    body = chat("Scope secret " + tag, user="u1")
    st, h, d = post(s, "/v1/chat/completions", body, "alice")
    expect(h == "miss", "%s: first alice %s" % (tag, h))
    _, h, _ = post(s, "/v1/chat/completions", body, "alice")
    expect(h == "hit-exact", "%s: alice's own hit %s" % (tag, h))
    attempts = [
        ("mallory", body, None), (None, body, None), ("", body, None),
        ("alicf", body, None),
        ("Alice", body, None), ("alice\t", dict(body, user="u2"), None),
        ("mallory", dict(body, user="u1", cache={"mode": "exact"}), None),
        ("mallory", body, {"Authorization": "Bearer alice, Bearer mallory"}),
    ]
    for key, b, hdr in attempts:
        # no-store: the attempts leave no entry of their own, so any hit would be alice's.
        st, h, d = post(s, "/v1/chat/completions", b, key,
                        dict(hdr or {}, **{"Cache-Control": "no-store"}))
        expect(h != "hit-exact", "%s: scope crossed with key %r headers %r" % (tag, key, hdr))
    # Another user of the same key is another scope too.
    _, h, _ = post(s, "/v1/chat/completions", dict(body, user="u2"), "alice",
                   {"Cache-Control": "no-store"})
    expect(h == "miss", "%s: user scope crossed" % tag)
    # Mallory clearing "her" scope leaves alice's entry; clearing with alice's key removes it.
    st, _, d = post(s, "/admin/cache/clear", {}, "mallory")
    expect(st == 200, "%s: clear own %s %s" % (tag, st, d))
    _, h, _ = post(s, "/v1/chat/completions", body, "alice")
    expect(h == "hit-exact", "%s: another scope's clear removed alice's entry" % tag)
    st, _, d = post(s, "/admin/cache/clear", {"user": "u1"}, "alice")
    expect(st == 200 and json.loads(d)["cleared"] >= 1, "%s: clear alice/u1 %s" % (tag, d))
    _, h, _ = post(s, "/v1/chat/completions", body, "alice")
    expect(h == "miss", "%s: cleared entry served" % tag)
    st, _, d = post(s, "/admin/cache/clear", {"all": True}, "alice")
    expect(st == 200 and json.loads(d)["scope"] == "all", "%s: clear all %s" % (tag, d))
    _, h, _ = post(s, "/v1/chat/completions", body, "alice")
    expect(h == "miss", "%s: entry left after clear all" % tag)
    st, _, d = post(s, "/admin/cache/clear", {"everything": 1}, "alice")
    expect(st == 400, "%s: bad clear body %s" % (tag, st))


def metrics(s, tag, plugin):
    expect(metric(s, r'weir_response_cache_hits_total\{.*layer="exact".*') >= 5,
           "%s: hits metric" % tag)
    expect(metric(s, r"weir_response_cache_lookups_total.*") >
           metric(s, r'weir_response_cache_hits_total.*'), "%s: lookups metric" % tag)
    expect(metric(s, r"weir_response_cache_stores_total.*") >= 5, "%s: stores metric" % tag)
    if plugin == "memory":
        expect(metric(s, r'weir_cache_entries\{.*plugin="memory".*') >= 1 and
               metric(s, r'weir_cache_bytes\{.*plugin="memory".*') > 0,
               "%s: memory entries/bytes gauges" % tag)


def semantic():
    """The semantic layer on the real server, its vectors from the served model (the
    [embedding] default). With the default 1% bound and no evidence it refuses a paraphrase
    (answers live) and learns from it; with the bound at 1 and no exploring, the same
    paraphrase is served (hit-semantic) with the original's answer, streamed like it."""
    q1 = "Who created the heaven and the earth?"
    q2 = "Who made the heaven and the earth?"
    sem = {"mode": "semantic"}
    s = start("semantic-default.log", ["--set", "cache.name=memory", "--set", "cache.semantic=true"])
    try:
        _, h1, _ = post(s, "/v1/chat/completions", chat(q1, cache=sem))
        _, h2, _ = post(s, "/v1/chat/completions", chat(q2, cache=sem))
        expect(h1 == "miss" and h2 == "miss", "semantic default: %s %s" % (h1, h2))
        refused = metric(s, r'weir_response_cache_semantic_decisions_total\{.*verdict="refuse".*')
        labelled = metric(s, r"weir_response_cache_semantic_observations_total.*")
        expect(refused >= 1 and labelled >= 1, "semantic: refused %s labelled %s" %
               (refused, labelled))
        # Not opted in: no semantic decision.
        before = metric(s, r"weir_response_cache_semantic_decisions_total.*")
        post(s, "/v1/chat/completions", chat("Who formed the heaven and the earth?"))
        expect(metric(s, r"weir_response_cache_semantic_decisions_total.*") == before,
               "semantic decision without opting in")
        expect(metric(s, r"weir_response_cache_semantic_similarity_count.*") >= 1,
               "similarity histogram")
    finally:
        s.stop()
    s = start("semantic-open.log", ["--set", "cache.name=memory", "--set", "cache.semantic=true",
                                    "--set", "cache.semantic_max_error=1",
                                    "--set", "cache.semantic_explore=0"])
    try:
        _, h1, d1 = post(s, "/v1/chat/completions", chat(q1, cache=sem))
        _, h2, d2 = post(s, "/v1/chat/completions", chat(q2, cache=sem))
        expect(h1 == "miss" and h2 == "hit-semantic" and
               json.loads(d1)["choices"] == json.loads(d2)["choices"],
               "semantic open: %s %s" % (h1, h2))
        st1, _, s1 = post(s, "/v1/chat/completions", chat(q1, cache=sem, stream=True))
        st2, h3, s2 = post(s, "/v1/chat/completions", chat("Who made heaven and earth?",
                                                           cache=sem, stream=True))
        expect(h3 == "hit-semantic" and sse(s1) == sse(s2), "semantic stream: %s" % h3)
        # Another API key never gets it, semantic or not.
        _, h4, _ = post(s, "/v1/chat/completions", chat(q2, cache=sem), "other")
        expect(h4 == "miss", "semantic scope crossed: %s" % h4)
    finally:
        s.stop()


def behind_nginx():
    """etc/examples/nginx (ports rewritten, nothing else) in front of two replicas that share
    one Redis: the first answer is generated once, then every replica serves it as a hit."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if not nginx:
        print("behind_nginx: skipped: nginx is not installed")
        return
    r = Redis()
    opts = ["--set", "cache.name=redis", "--set", "cache.port=%d" % r.port]
    a = start("nginx-replica-a.log", opts)
    b = start("nginx-replica-b.log", opts)
    d = os.path.abspath(os.path.join(WORK, "nginx"))
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "etc",
                       "examples", "nginx", "nginx.conf")
    port = free_port()
    conf = open(src).read().replace("127.0.0.1:8001 ", "127.0.0.1:%d " % a.port) \
        .replace("127.0.0.1:8002 ", "127.0.0.1:%d " % b.port) \
        .replace("listen 127.0.0.1:8000;", "listen 127.0.0.1:%d;" % port)
    open(os.path.join(d, "nginx.conf"), "w").write(conf)
    ng = subprocess.Popen([nginx, "-p", d, "-c", os.path.join(d, "nginx.conf"), "-g",
                           "daemon off; master_process off;"],
                          stdout=open(os.path.join(d, "nginx.out"), "w"), stderr=subprocess.STDOUT)

    class Front:
        pass
    front = Front()
    front.port = port
    try:
        for _ in range(100):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        body = chat("Through the proxy")
        first = post(front, "/v1/chat/completions", body, "k9")[1]
        stored(a, "/v1/chat/completions", body, "k9")
        stored(b, "/v1/chat/completions", body, "k9")
        ha0 = metric(a, r'weir_response_cache_hits_total\{.*layer="exact".*')
        hb0 = metric(b, r'weir_response_cache_hits_total\{.*layer="exact".*')
        heads = [post(front, "/v1/chat/completions", body, "k9")[1] for _ in range(7)]
        expect(first == "miss" and heads == ["hit-exact"] * 7, "nginx: %s %s" % (first, heads))
        ha = metric(a, r'weir_response_cache_hits_total\{.*layer="exact".*') - ha0
        hb = metric(b, r'weir_response_cache_hits_total\{.*layer="exact".*') - hb0
        expect(ha >= 1 and hb >= 1 and ha + hb == 7, "nginx: hits per replica %s %s" % (ha, hb))
        st, h, data = post(front, "/v1/chat/completions", dict(body, stream=True), "k9")
        expect(st == 200 and h == "hit-exact" and sse(data)[-1] == "[DONE]",
               "nginx: streamed hit %s %s" % (st, h))
    finally:
        ng.terminate()
        ng.wait(10)
        a.stop()
        b.stop()
        r.stop()


def start(log, extra):
    return Server(WEIR, PLUGINS, MODEL, os.path.join(WORK, log), extra=extra)


class Redis:
    def __init__(self, port=None):
        self.port = port or free_port()
        self.proc = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=open(os.path.join(WORK, "redis-%d.log" % self.port), "w"),
            stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def suite(plugin, extra, tag):
    s = start("cache-%s.log" % tag, ["--set", "cache.name=" + plugin] + extra)
    try:
        basics(s, tag)
        control(s, tag)
        streams(s, tag)
        scopes(s, tag)
        front(s, tag, plugin)
        joins(s, tag)
        metrics(s, tag, plugin)
    finally:
        s.stop()


def redis_outage_and_replicas():
    r = Redis()
    opts = ["--set", "cache.name=redis", "--set", "cache.port=%d" % r.port,
            "--set", "cache.retry_ms=200", "--set", "cache.timeout_ms=200"]
    a = start("replica-a.log", opts)
    b = start("replica-b.log", opts)
    try:
        body = chat("Shared between replicas")
        _, h1, d1 = post(a, "/v1/chat/completions", body)
        # B never stored this (its probes are no-store): a hit there is A's answer via Redis.
        stored(b, "/v1/chat/completions", body)
        _, h2, d2 = post(b, "/v1/chat/completions", body)
        expect(h1 == "miss" and h2 == "hit-exact" and
               json.loads(d1)["choices"] == json.loads(d2)["choices"],
               "replicas: %s %s" % (h1, h2))
        # Another model on the same Redis never gets A's answer (the key holds the model;
        # each replica's front index holds its own model's answers only).
        draft = os.path.join(os.path.dirname(MODEL), "kjv-draft.gguf")
        c = Server(WEIR, PLUGINS, draft, os.path.join(WORK, "replica-c.log"), extra=opts)
        try:
            _, hc, _ = post(c, "/v1/chat/completions", body)
            expect(hc == "miss", "another model was served A's answer: %s" % hc)
        finally:
            c.stop()
        # Redis goes down: answers go on (misses), errors are counted, never a 5xx. (A's
        # front index may serve its own entries for WEIR__FRONT_FRESH_NS, 1 s, after its last
        # look at Redis: docs/response-cache.md.)
        r.stop()
        time.sleep(1.1)
        for i in range(3):
            st, h, _ = post(a, "/v1/chat/completions", body)
            expect(st == 200 and h == "miss", "redis down: %s %s" % (st, h))
            st, h, _ = post(a, "/v1/chat/completions", chat("While down %d" % i))
            expect(st == 200, "redis down, new request: %s" % st)
        expect(metric(a, r"weir_response_cache_backend_errors_total.*") >= 1 and
               metric(a, r'weir_cache_redis_errors_total\{.*') >= 1,
               "redis errors not counted")
        st, _, _ = post(a, "/admin/cache/clear", {"all": True})
        expect(st == 503, "clear with redis down: %s" % st)
        # Back on the same port: the cache works again once retry_ms has passed.
        r = Redis(r.port)
        time.sleep(0.5)
        post(a, "/v1/chat/completions", body)
        expect(stored(b, "/v1/chat/completions", body), "redis back: no hit on the other replica")
    finally:
        a.stop()
        b.stop()
        r.stop()


def config_checks():
    """[cache] is also the KV cache's table: with no response cache selected, a key that is
    not the core's is refused (a misspelt KV key must not pass as a plugin option); with one
    selected, `weir config check` validates its options."""
    toml = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "etc",
                        "server.toml")
    for args, want in ((["--set", "cache.block_sise=16"], "unknown key 'cache.block_sise'"),
                       (["--set", "cache.name=memory", "--set", "cache.max_bytes=-1"],
                        "cache.max_bytes: -1 is out of range"),
                       (["--set", "cache.name=redis", "--set", "cache.colour=1"],
                        "colour"),
                       (["--set", "cache.semantic_max_error=2"], "out of range [0, 1]")):
        p = subprocess.run([WEIR, "config", "check", toml, "--plugin-dir", PLUGINS] + args,
                           capture_output=True, text=True)
        expect(p.returncode == 1 and want in p.stderr + p.stdout,
               "config check %s: %s %s" % (args, p.returncode, (p.stderr + p.stdout)[-300:]))
    p = subprocess.run([WEIR, "config", "check", toml, "--plugin-dir", PLUGINS, "--set",
                        "cache.name=redis", "--set", "cache.port=7777"],
                       capture_output=True, text=True)
    expect(p.returncode == 0, "config check redis: %s %s" % (p.returncode, p.stderr[-300:]))


config_checks()
suite("memory", [], "memory")
r = Redis()
try:
    suite("redis", ["--set", "cache.port=%d" % r.port], "redis")
finally:
    r.stop()
redis_outage_and_replicas()
behind_nginx()
semantic()
finish("ok")
