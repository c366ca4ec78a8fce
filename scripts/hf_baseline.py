#!/usr/bin/env python3
"""HF transformers baseline for weir's CUDA numbers.

Runs `generate` with static batching (one fixed batch, every row the same prompt length, no
early stop) on a randomly initialised LlamaConfig of the shape weir_cuda_bench uses (TinyLlama
1.1B by default), in float16 on the first GPU, and reports generated tokens per second for
each batch size. Random weights: no download happens or is possible; the speed of a forward
pass does not depend on what the weights are.

    python3 scripts/hf_baseline.py --batch 1 64 --new-tokens 128 --prompt-len 128 --json out.json

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
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

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


if __name__ == "__main__":
    sys.exit(main())
