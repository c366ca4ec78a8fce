#!/usr/bin/env python3
"""Greedy tokens of weir against llama.cpp's llama-server on one GGUF file (issue 30).

    scripts/compare-greedy.py --weir build/bin/weir --llama-server $LLAMA_BIN/llama-server \
        --model m.gguf [--n 256] [--threads 2] [--text FILE]

Both servers run on loopback ports with the same file. The prompt is the first 32 tokens of
the text as weir tokenizes it (BOS included), sent to both as token ids, so tokenization plays
no part here (scripts/compare-tokenizers.py checks it). llama-server generates N tokens at
temperature 0 past EOS; then:
  - top-1 agreement: weir scores the prompt followed by llama.cpp's N tokens (completions,
    `echo` with `logprobs`) and, at each of the N positions, llama.cpp's token is counted as
    agreeing when weir gives it the largest log-probability (within 1e-5: an exact tie);
    at each disagreement, [weir's log-prob margin of its own top token over llama.cpp's,
    llama.cpp's margin of its token over its runner-up] (disagreement_gaps: how near a tie);
  - free run: weir generates N tokens at temperature 0 from the same prompt; its text is
    compared with llama.cpp's (the texts, not the token pieces: the two servers render a
    piece that ends inside a UTF-8 character differently), and the common prefix reported.
With --ref (tests/reference's weir_ref_eval, the double-precision reference), a third
opinion: the reference runs each side's sequence teacher-forced (llama.cpp's prompt + N tokens,
and weir's free run, whose token ids come from weir's streamed `/completion`) and reports how
many of each side's tokens are its own top-1 there, with its margin in nats at each miss
(ref_vs_llama, ref_vs_weir: [index, reference's token, given token, margin]). Without
--llama-server (families the peer predates) only weir's free run and the reference run, and
the exit status follows the reference's agreement with weir.
Prints one JSON line. Exits 1 when the agreement is below --min (default 0.99).
Standard library only; every process it starts is stopped before it exits.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body, timeout=3600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait_health(port, proc, what):
    for _ in range(1200):
        if proc.poll() is not None:
            sys.exit(f"{what} exited with status {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.25)
    sys.exit(f"{what} not ready after 300 s")


def weir_greedy_ids(port, prompt, n):
    """weir's N greedy token ids from the prompt (its llama.cpp-style /completion streams the
    ids of each piece)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        data=json.dumps({"prompt": prompt, "n_predict": n + 1, "temperature": 0,
                         "ignore_eos": True,
                         "stream": True}).encode(),
        headers={"Content-Type": "application/json"})
    ids = []
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if "error" in ev:
                    sys.exit(f"weir /completion: {ev['error']}")
                ids += ev.get("tokens", [])
    # (N + 1 asked for: the final event carries no ids, so the last one may not arrive.)
    if len(ids) < n:
        sys.exit(f"weir /completion streamed {len(ids)} token ids, asked for {n + 1}")
    return ids[:n]


def ref_top1(ref, model, prompt, cont):
    """The reference's teacher-forced verdict on prompt + cont (tests/reference/ref_eval.c)."""
    out = subprocess.run([ref, "top1", model, str(len(prompt))], check=True, text=True,
                         input=" ".join(str(t) for t in prompt + cont), capture_output=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("--ref", help="tests/reference's weir_ref_eval: a third opinion")
    ap.add_argument("--weir-set", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to weir serve as --set (e.g. attention.kv_dtype=f32)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                    "perplexity", "fixtures",
                                                    "heldout-sample.txt"))
    ap.add_argument("--min", type=float, default=0.99)
    a = ap.parse_args()
    # A SIGTERM unwinds through the finally below, so the servers stop with the script.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    procs = []
    try:
        wport, lport = free_port(), free_port()
        ctx = a.prompt_tokens + a.n + 64
        procs.append(subprocess.Popen(
            [a.weir, "serve", "--model", a.model, "--port", str(wport), "--threads",
             str(a.threads), "--set", f"model.max_model_len={ctx}"] +
            [x for kv in a.weir_set for x in ("--set", kv)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_health(wport, procs[-1], "weir serve")
        with open(a.text, encoding="utf-8") as f:
            text = f.read()[:4000]
        prompt = post(wport, "/tokenize", {"prompt": text})["tokens"][:a.prompt_tokens]
        if not a.llama_server:
            if not a.ref:
                sys.exit("without --llama-server, --ref is needed")
            wids = weir_greedy_ids(wport, prompt, a.n)
            rw = ref_top1(a.ref, a.model, prompt, wids)
            res = {"model": os.path.basename(a.model), "n": a.n, "prompt_tokens": len(prompt),
                   "ref_vs_weir": rw["agree"] / a.n, "ref_vs_weir_misses": rw["misses"]}
            print(json.dumps(res))
            return 0 if rw["agree"] / a.n >= a.min else 1
        procs.append(subprocess.Popen(
            [a.llama_server, "-m", a.model, "--port", str(lport), "-t", str(a.threads), "-c",
             str(ctx), "-b", "512", "-np", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_health(lport, procs[-1], "llama-server")

        l = post(lport, "/completion", {"prompt": prompt, "n_predict": a.n, "temperature": 0,
                                        "ignore_eos": True, "cache_prompt": False,
                                        "return_tokens": True, "n_probs": 2})
        ltoks = l["tokens"]
        if len(ltoks) != a.n:
            sys.exit(f"llama-server returned {len(ltoks)} tokens, asked for {a.n}")
        ltexts = [p["token"] for p in l["completion_probabilities"]]

        # Teacher-forced: weir's distribution at each of llama.cpp's positions.
        w = post(wport, "/v1/completions", {"prompt": prompt + ltoks, "max_tokens": 1,
                                            "echo": True, "logprobs": 1, "temperature": 0})
        lp = w["choices"][0]["logprobs"]
        agree, first_miss, gaps = 0, None, []
        for i in range(a.n):
            p = len(prompt) + i
            own, top = lp["token_logprobs"][p], lp["top_logprobs"][p]
            if own >= max(top.values()) - 1e-5:
                agree += 1
                continue
            if first_miss is None:
                first_miss = i
            # How close the call was: weir's log-prob of its own choice over llama.cpp's
            # token, and llama.cpp's of its token over its runner-up.
            # (llama-server gives one entry per token unless it joins the pieces of a UTF-8
            # character into one; then its entries no longer line up and its margin is None.)
            probs = l["completion_probabilities"]
            ltop = ([t["logprob"] for t in probs[i]["top_logprobs"]] if len(probs) == a.n
                    else [])
            gaps.append((round(max(top.values()) - own, 4),
                         round(ltop[0] - ltop[1], 4) if len(ltop) > 1 else None))

        # Free run.
        g = post(wport, "/v1/completions", {"prompt": prompt, "max_tokens": a.n, "temperature": 0,
                                            "ignore_eos": True})
        wtext, ltext = g["choices"][0]["text"], l["content"]
        same = 0
        while same < min(len(wtext), len(ltext)) and wtext[same] == ltext[same]:
            same += 1
        res = {"model": os.path.basename(a.model), "n": a.n, "prompt_tokens": len(prompt),
               "top1_agreement": agree / a.n, "first_disagreement": first_miss,
               "disagreement_gaps": gaps,
               "free_run_same_text": wtext == ltext,
               "free_run_common_chars": same, "free_run_chars": len(ltext)}
        if a.ref:
            rl = ref_top1(a.ref, a.model, prompt, ltoks)
            rw = ref_top1(a.ref, a.model, prompt, weir_greedy_ids(wport, prompt, a.n))
            res.update({"ref_vs_llama": rl["agree"] / a.n, "ref_vs_weir": rw["agree"] / a.n,
                        "ref_vs_llama_misses": rl["misses"], "ref_vs_weir_misses": rw["misses"]})
        print(json.dumps(res))
        return 0 if agree / a.n >= a.min else 1
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main())
