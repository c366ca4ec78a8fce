#!/usr/bin/python3
"""The response cache's semantic layer on labelled question pairs (docs/perf/cache.md):
  semantic_eval.py URL PAIRS.jsonl [--api-key K] [--max-tokens N] [--json OUT]
For each pair, in the file's order, asks `a` then `b` (chat, temperature 0, "cache": {"mode":
"semantic"}) and reads x-weir-cache of `b`. A semantic hit on b is right when the pair is
labelled the same question and b got a's answer; any other semantic hit (a pair labelled
different, or an answer not a's) is a wrong hit. Reports the hit rate, the wrong-hit rate
(wrong / hits) by kind, and the server's own online labels (its metrics)."""
import argparse
import collections
import http.client
import json
import re
import time
import urllib.parse


def post(host, port, body, key):
    c = http.client.HTTPConnection(host, port, timeout=300)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    c.request("POST", "/v1/chat/completions", json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    return r.status, r.getheader("x-weir-cache"), json.loads(data)


def metrics(host, port):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        m = re.match(r"(weir_response_cache_[a-z_]+(\{[^}]*\})?)\s+(\S+)$", line)
        if m:
            name = re.sub(r'model_name="[^"]*",?', "", m.group(1)).replace("{}", "")
            out[name] = float(m.group(3))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("pairs")
    ap.add_argument("--api-key", default="eval")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--json")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    pairs = [json.loads(line) for line in open(a.pairs)]
    stats = collections.defaultdict(lambda: collections.Counter())
    t0 = time.time()
    for p in pairs:
        req = lambda q: {"messages": [{"role": "user", "content": q}], "temperature": 0,
                         "max_tokens": a.max_tokens, "cache": {"mode": "semantic"}}
        sa, ha, ra = post(u.hostname, u.port, req(p["a"]), a.api_key)
        sb, hb, rb = post(u.hostname, u.port, req(p["b"]), a.api_key)
        k = stats[p["kind"]]
        k["pairs"] += 1
        if sa != 200 or sb != 200:
            k["errors"] += 1
            continue
        if hb == "hit-semantic":
            k["hits"] += 1
            same_answer = ra["choices"][0]["message"] == rb["choices"][0]["message"]
            if not (p["same"] and same_answer):
                k["wrong"] += 1
        # The model's own verdict, for reference: would b's live answer equal a's?
    total = collections.Counter()
    for k in stats.values():
        total.update(k)
    res = {"pairs": total["pairs"], "errors": total["errors"], "hits": total["hits"],
           "wrong_hits": total["wrong"],
           "hit_rate": total["hits"] / max(1, total["pairs"]),
           "wrong_hit_rate": total["wrong"] / total["hits"] if total["hits"] else 0.0,
           "by_kind": {k: dict(v) for k, v in stats.items()},
           "seconds": round(time.time() - t0, 1),
           "server": metrics(u.hostname, u.port)}
    print(json.dumps(res, indent=1))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


main()
