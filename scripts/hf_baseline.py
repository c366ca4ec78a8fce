#!/usr/bin/env python3
"""HF transformers baseline for weir's CUDA numbers.

Runs `generate` with static batching (one fixed batch, every row the same prompt length, no
early stop) on a randomly initialised LlamaConfig of the shape weir_cuda_bench uses (TinyLlama
1.1B by default), in float16 on the first GPU, and reports generated tokens per second for
each batch size. Random weights: no download happens or is possible; the speed of a forward
pass does not depend on what the weights are.

    python3 scripts/hf_baseline.py --batch 1 64 --new-tokens 128 --prompt-len 128 --json out.json

Static-batching workload (docs/benchmarking.md, issue 34): the requests of a `weir bench
--dump-workload` file (token-id prompts, per-request max_tokens, e.g. drawn from the
exponential distribution), taken in order in batches of --static-batch, each batch padded to
its longest prompt (left) and generating its longest max_tokens (EOS ignored: min_new_tokens
= max_new_tokens), as HF `generate` serves a static batch. Throughput = (prompt tokens +
each request's own max_tokens) / wall time, the tokens a client asked for; what a padded row
computes beyond its own request is waste, as in any static batch.

    weir bench --dump-workload w.jsonl --num-requests 1000 --input-len 512 \
      --prompt-format tokens --vocab 32000 --output-dist exponential --output-len 128 \
      --output-cap 1536 --ignore-eos --model x
    python3 scripts/hf_baseline.py --workload w.jsonl --static-batch 128 --json hf.json

Without torch or transformers (Debian packages no python3-transformers; the GPU machine's
environment may have both) it prints why and exits 77, which scripts/gpu-check reports as SKIP.

Timing: one untimed warm-up generate per batch size, then --repeats timed ones (CUDA
synchronized before reading the clock); the median is reported. tokens/s counts generated
tokens only (batch * new_tokens / seconds), prompt processing included in the time, which is
how a client sees a static batch.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--static-cache", action="store_true",
                    help="use transformers' static KV cache (cache_implementation='static')")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--workload", help="static-batching mode: a weir bench --dump-workload "
                    "JSONL file of token-id prompts with max_tokens")
    ap.add_argument("--static-batch", type=int, default=128,
                    help="static-batching mode: requests per batch (default 128)")
    ap.add_argument("--max-requests", type=int, default=0,
                    help="static-batching mode: only the first N requests (0: all)")
    ap.add_argument("--time-limit", type=float, default=0,
                    help="static-batching mode: stop after the batch that passes S seconds; "
                    "the throughput is over the batches run (0: no limit)")
    a = ap.parse_args()

    reqs = None
    if a.workload:
        reqs = load_workload(a.workload, a.max_requests)
        if not reqs:
            print(f"{a.workload}: no requests with token-id prompts and max_tokens")
            return 1
    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"SKIP: HF baseline needs torch and transformers in this python3 ({e}); Debian "
              "packages no python3-transformers: run where pip installed both")
        return 77

    if not torch.cuda.is_available():
        print("no CUDA device: skipping")
        return 77
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=a.dim, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      vocab_size=a.vocab, max_position_embeddings=4096, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=False, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.float16)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    dev = torch.cuda.get_device_name(0)
    print(f"device: {dev}; torch {torch.__version__}, transformers {transformers.__version__}; "
          f"{params / 1e9:.2f} B parameters, f16")

    if reqs is not None:
        return static_batches(a, torch, transformers, model, dev, reqs)

    runs = []
    for b in a.batch:
        ids = torch.randint(10, a.vocab, (b, a.prompt_len), device="cuda")
        mask = torch.ones_like(ids)
        kw = dict(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=False,
                  pad_token_id=0, attention_mask=mask)
        if a.static_cache:
            kw["cache_implementation"] = "static"
        with torch.inference_mode():
            model.generate(ids, **dict(kw, max_new_tokens=8, min_new_tokens=8))
            times = []
            for _ in range(a.repeats):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model.generate(ids, **kw)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        gen = out.shape[1] - a.prompt_len
        t = statistics.median(times)
        tps = b * gen / t
        runs.append({"batch": b, "new_tokens": gen, "prompt_len": a.prompt_len, "seconds": t,
                     "tokens_per_s": tps})
        print(f"batch {b:>3}: {gen} new tokens in {t * 1e3:.0f} ms -> {tps:.1f} tokens/s")
        del ids, mask, out
        torch.cuda.empty_cache()

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "hf_baseline.py", "device": dev, "torch": torch.__version__,
                       "transformers": transformers.__version__,
                       "model": {"dim": a.dim, "layers": a.layers, "heads": a.heads,
                                 "kv_heads": a.kv_heads, "ffn": a.ffn, "vocab": a.vocab,
                                 "dtype": "f16", "weights": "random"},
                       "static_cache": a.static_cache, "runs": runs}, f, indent=2)
    return 0


def load_workload(path, limit):
    """(prompt ids, max_tokens) of each request of a weir bench --dump-workload file."""
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            p, m = o.get("prompt"), o.get("max_tokens")
            if not isinstance(p, list) or not isinstance(m, int) or m < 1:
                continue  # the arrivals line, or a text prompt
            reqs.append((p, m))
            if limit and len(reqs) >= limit:
                break
    return reqs


def static_batches(a, torch, transformers, model, dev, reqs):
    """Static batching over the workload's requests, in order; see the module docstring."""
    # One untimed warm-up batch of the first batch's full shape (its prompt length and its
    # longest answer). An 8-token warm-up was not enough: on an H200 (2026-11-28) the first
    # timed batch still ran 2.2-3.2x slower per step than the second (the caching allocator
    # and the KV cache grow over the first full-length generate), which inflated weir's ratio
    # up to 2x when only two batches ran.
    first = reqs[:a.static_batch]
    warm_len = max(m for _, m in first)
    warm = torch.tensor([first[0][0]] * len(first), device="cuda")
    with torch.inference_mode():
        model.generate(warm, attention_mask=torch.ones_like(warm), max_new_tokens=warm_len,
                       min_new_tokens=warm_len, do_sample=False, pad_token_id=0)
    del warm
    batches, prompt_tok, gen_tok, padded_tok, done = [], 0, 0, 0, 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(reqs), a.static_batch):
            chunk = reqs[i:i + a.static_batch]
            plen = max(len(p) for p, _ in chunk)
            longest = max(m for _, m in chunk)
            # left padding, as decoder-only generation needs
            ids = torch.zeros((len(chunk), plen), dtype=torch.long, device="cuda")
            mask = torch.zeros_like(ids)
            for r, (p, _) in enumerate(chunk):
                ids[r, plen - len(p):] = torch.tensor(p, device="cuda")
                mask[r, plen - len(p):] = 1
            tb = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=longest,
                                 min_new_tokens=longest, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            dt = time.perf_counter() - tb
            own = sum(m for _, m in chunk)
            batches.append({"requests": len(chunk), "prompt_len": plen, "longest": longest,
                            "generated": out.shape[1] - plen, "seconds": dt,
                            "tokens": sum(len(p) for p, _ in chunk) + own})
            prompt_tok += sum(len(p) for p, _ in chunk)
            gen_tok += own
            padded_tok += len(chunk) * longest - own
            done += len(chunk)
            del ids, mask, out
            print(f"batch {len(batches)}: {len(chunk)} requests, longest {longest} tokens, "
                  f"{dt:.1f} s")
            if a.time_limit and time.perf_counter() - t0 > a.time_limit:
                break
    wall = time.perf_counter() - t0
    tps = (prompt_tok + gen_tok) / wall
    print(f"static batches of {a.static_batch}: {done} of {len(reqs)} requests, {prompt_tok} "
          f"prompt + {gen_tok} generated tokens ({padded_tok} padding) in {wall:.1f} s -> "
          f"{tps:.1f} tokens/s (prompt + generated)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "hf_baseline.py", "mode": "static_batching", "device": dev,
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "model": {"dim": a.dim, "layers": a.layers, "heads": a.heads,
                                 "kv_heads": a.kv_heads, "ffn": a.ffn, "vocab": a.vocab,
                                 "dtype": "f16", "weights": "random"},
                       "workload": a.workload, "static_batch": a.static_batch,
                       "requests": done, "requests_in_workload": len(reqs),
                       "prompt_tokens": prompt_tok, "generated_tokens": gen_tok,
                       "padding_tokens": padded_tok, "seconds": wall,
                       "total_tokens_per_s": tps, "batches": batches}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
