#!/usr/bin/python3
"""Structured output through the real server (issue 13): the decode time per token of one
stream with a JSON Schema constraint next to the same stream without one, runs alternated in
one server, so the difference is what the constraint costs a client (masks, matcher,
host-side work), not a microbenchmark's estimate.

  scripts/bench-structured-http.py WEIR MODEL [--schema FILE] [--runs N] [--threads N]
                                   [--max-tokens N] [--plugins DIR] [--streams N]

Each run streams one /v1/completions request (temperature 0.8, a fixed seed per run pair)
and takes the token arrival times on the client: decode time per token = (last - first) /
(tokens - 1). The first constrained request also compiles the schema and fills the token
classes as positions are reached (cold); the median is over the warm runs. With --streams N,
each run is N concurrent streams of one kind (seeds differ), so every step of the constrained
runs computes N masks (in parallel on the engine's mask pool); a run's figure is the mean of
its streams' decode times per token. Prints a Markdown table and the command line."""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream(port, body):
    """(tokens, seconds from the first token to the last, text, finish_reason)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:300]))
    times, text, finish = [], [], None
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        now = time.perf_counter()
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            line = ev.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            for ch in obj.get("choices", []):
                if ch.get("text"):
                    times.append(now)
                    text.append(ch["text"])
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
    if len(times) < 2:
        return len(times), 0.0, "".join(text), finish
    return len(times), times[-1] - times[0], "".join(text), finish


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weir")
    ap.add_argument("model")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--schema", default=os.path.join(here, "tests/grammar/fixtures/order.schema.json"))
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--plugins", default=None)
    ap.add_argument("--streams", type=int, default=1)
    a = ap.parse_args()
    schema = json.load(open(a.schema))
    port = free_port()
    args = [a.weir, "serve", "--model", a.model, "--port", str(port),
            "--set", "server.host=127.0.0.1", "--set", "device.threads=%d" % a.threads]
    if a.plugins:
        args += ["--set", 'plugins.dirs=["%s"]' % a.plugins]
    log = open("/tmp/bench-structured-http.log", "w")
    srv = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        base = {"prompt": "The record of the order:", "max_tokens": a.max_tokens,
                "temperature": 0.8, "stream": True}
        # One warm-up of each kind (the plain one warms the model; the constrained one
        # compiles the schema: its time is the cold figure).
        stream(port, dict(base, seed=999))
        t0 = time.perf_counter()
        cold = stream(port, dict(base, seed=999, response_format={
            "type": "json_schema", "json_schema": {"name": "order", "schema": schema}}))
        cold_wall = time.perf_counter() - t0
        plain, constrained, ctoks, finishes = [], [], [], []
        pool = ThreadPoolExecutor(a.streams)
        for i in range(a.runs):
            for kind in (("plain", "constrained") if i % 2 == 0 else ("constrained", "plain")):
                bodies = []
                for j in range(a.streams):
                    body = dict(base, seed=i * 1000 + j)
                    if kind == "constrained":
                        body["response_format"] = {"type": "json_schema", "json_schema": {
                            "name": "order", "schema": schema}}
                    bodies.append(body)
                pers = []
                for n, secs, text, finish in pool.map(lambda b: stream(port, b), bodies):
                    if n < 2:
                        continue
                    pers.append(secs / (n - 1) * 1e3)
                    if kind == "constrained":
                        ctoks.append(n)
                        finishes.append(finish)
                        try:
                            json.loads(text) if finish == "stop" else None
                        except ValueError:
                            print("invalid JSON from a finished constrained run: %r" % text[:200])
                            return 1
                if pers:
                    (constrained if kind == "constrained" else plain).append(statistics.mean(pers))
        mp, mc = statistics.median(plain), statistics.median(constrained)
        print("model: %s; %d thread(s); %d stream(s) per run; schema %s; %d run pairs "
              "alternated" % (os.path.basename(a.model), a.threads, a.streams,
                              os.path.basename(a.schema), a.runs))
        print()
        print("| | decode ms/token (median) | runs | tokens per constrained output |")
        print("|---|---|---|---|")
        print("| no constraint | %.3f | %d | |" % (mp, len(plain)))
        print("| JSON Schema | %.3f | %d | median %d (%s) |" % (
            mc, len(constrained), statistics.median(ctoks),
            ", ".join("%s %d" % (f, finishes.count(f)) for f in sorted(set(finishes), key=str))))
        print()
        print("constraint cost: %+.1f%% of the decode step; first (cold) constrained request: "
              "%d tokens in %.2f s wall, schema compile included" % (
                  (mc / mp - 1) * 100, cold[0], cold_wall))
        print("command: %s" % " ".join(sys.argv))
    finally:
        srv.terminate()
        srv.wait(30)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
