#!/usr/bin/python3
"""Trains each model family's `weir mkmodel` file on the King James Bible, in place, so the
family checks against llama.cpp and the float64 reference (docs/perf/model-families.md,
"Trained weights") run on weights whose top logits are not near-ties.

A tool run by hand (the product stays C). Needs Debian's interpreter and packages:
    apt-get install bible-kjv bible-kjv-text python3-torch python3-numpy libopenblas0-pthread
From the repository root:

    MODE=make FILES=W ARCHS="llama3 phi3" scripts/compare-families.sh   # W/FAMILY-f32.gguf
    /usr/bin/python3 scripts/train-families.py train --model W/llama3-f32.gguf --steps 300
    /usr/bin/python3 scripts/train-families.py eval  --model W/llama3-f32.gguf   # torch vs weir
    FILES=W TYPE=Q4_K_M LLAMA_BIN=... scripts/compare-families.sh 256

`train` reads the file's hyperparameters and tensors with its own GGUF reader (written from
the format description), tokenizes the training chapters of the KJV (scripts/train-demo.py's
split: every 20th chapter held out, tests/perplexity/fixtures/heldout-sample.txt being the
first two held-out ones) with THAT file's tokenizer, through weir itself (`weir serve` and
POST /tokenize, so the ids are weir's), trains every tensor of the file from its mkmodel
values (the RoPE factor tensors stay: they are constants), and writes the trained f32 values
back into the file's tensor data in place (same names, shapes and offsets). Then it prints
torch's perplexity of the held-out sample by weir's windows (`weir perplexity`'s convention)
and, with --weir, weir's on the same file: the two must agree to about 1% (weir keeps its KV
cache in f16), which shows the torch graph below is weir's graph.

The graph (one for every family, switched by what the file holds, as core/model/llama.c and
tests/reference/reference.c are; docs/models.md, Architectures, names each formula's
source): embedding (gemma: times sqrt(n_embd)); per layer RMSNorm times the stored weight
(gemma's stored weight is already 1 + w); Q, K, V (phi3: rows of the fused attn_qkv);
per-head RMSNorm of Q and K (qwen3, gemma3); RoPE, NORM pairs (2i, 2i+1) for llama and
mistral, NEOX pairs (i, i + n_rot/2) for the others, pair i's frequency divided by
rope_freqs[i] (llama3) or the LongRoPE long/short factor (phi3; long when the model's
context exceeds the original one) and cos/sin times rope.scaling.attn_factor; gemma3's
sliding layers use rope.freq_base_swa (default 10000) without scaling; causal GQA attention
(query head h reads KV head h // (n_head / n_head_kv)), scores times attention.scale
(default 1/sqrt(head_dim)) then soft-capped c tanh(s / c) (gemma2, 50), sliding layers
(gemma2: even ones; gemma3: all but every 6th; others: all when the file has a window) see
keys s with t - s < window; output projection; post_attention_norm (gemma); residual;
RMSNorm; down(act(gate) * up) with act SiLU, or GELU-tanh for gemma (phi3: ffn_up holds gate
rows then up rows); post_ffw_norm (gemma); residual; final RMSNorm; output (tied to the
embedding when output.weight is absent); final soft-cap (gemma2, 30).
"""
import argparse
import hashlib
import importlib.util
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HELDOUT = os.path.join(ROOT, "tests", "perplexity", "fixtures", "heldout-sample.txt")


def demo():
    """scripts/train-demo.py as a module (its corpus reader, split and heap settings)."""
    spec = importlib.util.spec_from_file_location("train_demo",
                                                  os.path.join(HERE, "train-demo.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


# ---- GGUF (read; tensor data rewritten in place) -----------------------------------------

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
F32, F16 = 0, 1


class Gguf:
    """Header, key/values and tensor table of a GGUF file (version 2 or 3)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            # The header of an mkmodel file is a few hundred KB at most (the vocabulary).
            b = f.read(16 << 20)
        p = [0]

        def take(fmt):
            v = struct.unpack_from(fmt, b, p[0])[0]
            p[0] += struct.calcsize(fmt)
            return v

        def string():
            n = take("<Q")
            s = b[p[0]:p[0] + n].decode("utf-8")
            p[0] += n
            return s

        def value(t):
            if t in SCALARS:
                return take(SCALARS[t])
            if t == 8:
                return string()
            if t == 9:
                et, n = take("<I"), take("<Q")
                return [value(et) for _ in range(n)]
            raise SystemExit(f"{path}: unknown GGUF value type {t}")

        if take("<I") != 0x46554747:
            raise SystemExit(f"{path}: not a GGUF file")
        if take("<I") not in (2, 3):
            raise SystemExit(f"{path}: GGUF version not 2 or 3")
        n_t, n_kv = take("<Q"), take("<Q")
        self.kv = {}
        for _ in range(n_kv):
            k = string()
            self.kv[k] = value(take("<I"))
        self.tensors = {}
        for _ in range(n_t):
            name = string()
            nd = take("<I")
            ne = [take("<Q") for _ in range(nd)]
            t, off = take("<I"), take("<Q")
            self.tensors[name] = (t, ne, off)
        align = self.kv.get("general.alignment", 32)
        self.data = (p[0] + align - 1) // align * align

    def read(self, name):
        """Tensor NAME as a float32 array of numpy shape reversed(ne) (F32 and F16 only)."""
        t, ne, off = self.tensors[name]
        dt = {F32: "<f4", F16: "<f2"}.get(t)
        if dt is None:
            raise SystemExit(f"{self.path}: tensor {name} has type {t}; this tool reads f32/f16")
        n = int(np.prod(ne))
        a = np.fromfile(self.path, dtype=dt, count=n, offset=self.data + off)
        return a.astype(np.float32).reshape(list(reversed(ne)))

    def write(self, values):
        """Writes {name: float32 array} into the file's tensor data in place, converted to
        each tensor's own type (F32, or F16 rounded to nearest even, as ggml converts)."""
        with open(self.path, "r+b") as f:
            for name, v in values.items():
                t, ne, off = self.tensors[name]
                if list(v.shape) != list(reversed(ne)):
                    raise SystemExit(f"{name}: shape {v.shape} is not the file's {ne}")
                dt = {F32: "<f4", F16: "<f2"}.get(t)
                if dt is None:
                    raise SystemExit(f"{self.path}: tensor {name} has type {t}; "
                                     "this tool writes f32/f16")
                f.seek(self.data + off)
                f.write(np.ascontiguousarray(v, dtype=np.float32).astype(dt).tobytes())


# ---- hyperparameters, as weir reads them (docs/models.md, Llama-family hyperparameters) ---

def hparams(g):
    kv = g.kv
    arch = kv["general.architecture"]
    if arch not in ("llama", "mistral", "qwen3", "gemma2", "gemma3", "phi3"):
        raise SystemExit(f"{g.path}: architecture {arch} is not one this tool trains")

    def k(name, default=None):
        return kv.get(f"{arch}.{name}", default)

    gemma = arch in ("gemma2", "gemma3")
    E, H = k("embedding_length"), k("attention.head_count")
    D = k("attention.key_length", E // H)
    hp = dict(arch=arch, E=E, L=k("block_count"), F=k("feed_forward_length"), H=H,
              HKV=k("attention.head_count_kv", H), D=D, n_rot=k("rope.dimension_count", D),
              ctx=k("context_length"), eps=k("attention.layer_norm_rms_epsilon", 1e-5),
              base=k("rope.freq_base", 10000.0),
              base_swa=k("rope.freq_base_swa", 10000.0 if arch == "gemma3" else None),
              factor=k("rope.scaling.factor", 1.0),
              n_orig=k("rope.scaling.original_context_length", k("context_length")),
              attn_factor=k("rope.scaling.attn_factor", 1.0),
              swa=k("attention.sliding_window", 4096 if arch == "gemma2" else 0),
              scale=k("attention.scale", 0.0),
              attn_cap=k("attn_logit_softcapping", 50.0 if arch == "gemma2" else 0.0),
              final_cap=k("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0),
              gemma=gemma, neox=arch not in ("llama", "mistral"),
              V=len(kv["tokenizer.ggml.tokens"]), tied="output.weight" not in g.tensors,
              fused="blk.0.attn_qkv.weight" in g.tensors,
              qk_norm="blk.0.attn_q_norm.weight" in g.tensors,
              bos=kv.get("tokenizer.ggml.bos_token_id"))
    if hp["base_swa"] is None:
        hp["base_swa"] = hp["base"]
    st = k("rope.scaling.type", "linear")
    if st not in ("none", "linear") or any(n in g.tensors for n in ("blk.0.attn_q.bias",)):
        raise SystemExit(f"{g.path}: rope scaling {st} / biases are not in this tool's graph")
    if hp["n_rot"] != D:
        raise SystemExit(f"{g.path}: partial RoPE (n_rot {hp['n_rot']} < head {D}) not handled")
    if hp["scale"] <= 0:
        hp["scale"] = 1.0 / math.sqrt(D)
    return hp


def layer_slides(hp, l):
    if hp["swa"] <= 0:
        return False
    if hp["arch"] == "gemma2":
        return l % 2 == 0
    if hp["arch"] == "gemma3":
        return (l + 1) % 6 != 0
    return True


def rope_tables(g, hp, torch, T, max_len):
    """cos and sin (times the attention factor) per position and pair, for global [0] and
    sliding [1] layers, computed in float64 as weir's host table is."""
    half = hp["n_rot"] // 2
    fac = np.ones(half)
    if "rope_freqs.weight" in g.tensors:
        fac = g.read("rope_freqs.weight").astype(np.float64)
    elif "rope_factors_long.weight" in g.tensors:
        fac = g.read("rope_factors_long.weight" if max_len > hp["n_orig"]
                     else "rope_factors_short.weight").astype(np.float64)
    out = []
    for swa in (0, 1):
        base, factor = hp["base"], hp["factor"] or 1.0
        if swa and hp["arch"] == "gemma3":
            base, factor = hp["base_swa"], 1.0
        inv = 1.0 / (base ** (2.0 * np.arange(half) / hp["n_rot"]) * fac) / factor
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        out.append((torch.tensor(np.cos(ang) * hp["attn_factor"], dtype=torch.float32),
                    torch.tensor(np.sin(ang) * hp["attn_factor"], dtype=torch.float32)))
    return out


def trainable_names(g):
    return [n for n in g.tensors if n not in ("rope_freqs.weight", "rope_factors_long.weight",
                                              "rope_factors_short.weight")]


class Model:
    """The family graph over a dict of torch tensors named as in the GGUF."""

    def __init__(self, torch, g, hp, T, max_len):
        self.torch, self.hp = torch, hp
        self.p = {n: torch.nn.Parameter(torch.from_numpy(g.read(n).copy()))
                  for n in trainable_names(g)}
        self.rope = rope_tables(g, hp, torch, T, max_len)
        t = torch.arange(T)
        diff = t[:, None] - t[None, :]
        neg = torch.tensor(float("-inf"))
        self.mask = [torch.where(diff >= 0, 0.0, neg),
                     torch.where((diff >= 0) & (diff < max(hp["swa"], 1)), 0.0, neg)]

    def params(self):
        return list(self.p.values())

    def rms(self, x, w):
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.hp["eps"]) * w

    def rot(self, x, cs):
        cos, sin = cs
        T = x.shape[1]
        c, s = cos[:T, None, :], sin[:T, None, :]
        if self.hp["neox"]:
            h = x.shape[-1] // 2
            x0, x1 = x[..., :h], x[..., h:]
            return self.torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return self.torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    def __call__(self, idx):
        torch, hp, p = self.torch, self.hp, self.p
        F = torch.nn.functional
        B, T = idx.shape
        E, H, HKV, D, FF = hp["E"], hp["H"], hp["HKV"], hp["D"], hp["F"]
        QD, KV = H * D, HKV * D
        x = F.embedding(idx, p["token_embd.weight"])
        if hp["gemma"]:
            x = x * math.sqrt(E)
        for l in range(hp["L"]):
            b = f"blk.{l}."
            sl = 1 if layer_slides(hp, l) else 0
            h = self.rms(x, p[b + "attn_norm.weight"])
            if hp["fused"]:
                qkv = h @ p[b + "attn_qkv.weight"].t()
                q, k, v = qkv[..., :QD], qkv[..., QD:QD + KV], qkv[..., QD + KV:]
            else:
                q = h @ p[b + "attn_q.weight"].t()
                k = h @ p[b + "attn_k.weight"].t()
                v = h @ p[b + "attn_v.weight"].t()
            q, k, v = q.view(B, T, H, D), k.view(B, T, HKV, D), v.view(B, T, HKV, D)
            if hp["qk_norm"]:
                q = self.rms(q, p[b + "attn_q_norm.weight"])
                k = self.rms(k, p[b + "attn_k_norm.weight"])
            q, k = self.rot(q, self.rope[sl]), self.rot(k, self.rope[sl])
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if HKV != H:
                k = k.repeat_interleave(H // HKV, dim=1)
                v = v.repeat_interleave(H // HKV, dim=1)
            s = (q @ k.transpose(-1, -2)) * hp["scale"]
            if hp["attn_cap"] > 0:
                s = torch.tanh(s / hp["attn_cap"]) * hp["attn_cap"]
            s = s + self.mask[sl][:T, :T]
            o = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, QD)
            o = o @ p[b + "attn_output.weight"].t()
            if b + "post_attention_norm.weight" in p:
                o = self.rms(o, p[b + "post_attention_norm.weight"])
            x = x + o
            h = self.rms(x, p[b + "ffn_norm.weight"])
            if b + "ffn_gate.weight" in p:
                gt, up = h @ p[b + "ffn_gate.weight"].t(), h @ p[b + "ffn_up.weight"].t()
            else:
                gu = h @ p[b + "ffn_up.weight"].t()
                gt, up = gu[..., :FF], gu[..., FF:]
            act = F.gelu(gt, approximate="tanh") if hp["gemma"] else F.silu(gt)
            o = (act * up) @ p[b + "ffn_down.weight"].t()
            if b + "post_ffw_norm.weight" in p:
                o = self.rms(o, p[b + "post_ffw_norm.weight"])
            x = x + o
        h = self.rms(x, p["output_norm.weight"])
        out = p["token_embd.weight"] if hp["tied"] else p["output.weight"]
        logits = h @ out.t()
        if hp["final_cap"] > 0:
            logits = torch.tanh(logits / hp["final_cap"]) * hp["final_cap"]
        return logits


# ---- tokenization through weir ------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def weir_tokenize(weir, model, texts, add_special):
    """Token ids of each text by weir serve's POST /tokenize on MODEL."""
    port = free_port()
    proc = subprocess.Popen([weir, "serve", "--model", model, "--port", str(port),
                             "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(1200):
            if proc.poll() is not None:
                raise SystemExit(f"weir serve exited with status {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.25)
        else:
            raise SystemExit("weir serve not ready after 300 s")
        return [post(port, "/tokenize", {"prompt": t, "add_special_tokens": add_special})["tokens"]
                for t in texts]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def token_data(a, g):
    """(training ids, held-out sample ids), cached in WORK by the tokenizer's own bytes."""
    tok = json.dumps([g.kv.get(k) for k in sorted(g.kv) if k.startswith("tokenizer.")])
    key = hashlib.sha256(tok.encode()).hexdigest()[:16]
    os.makedirs(a.work, exist_ok=True)
    path = os.path.join(a.work, f"ids-{key}.npz")
    if os.path.exists(path):
        z = np.load(path)
        return z["train"], z["held"]
    d = demo()
    train, _ = d.split_chapters(d.read_kjv())
    texts = [" ".join(vs) + "\n" for _, _, vs in train]
    with open(HELDOUT, encoding="utf-8") as f:
        held_text = f.read()
    ids = weir_tokenize(a.weir, a.model, texts, False)
    held = weir_tokenize(a.weir, a.model, [held_text], True)[0]
    bos = g.kv.get("tokenizer.ggml.bos_token_id")
    stream = []
    for t in ids:  # one document per chapter, BOS first (as each perplexity window starts)
        stream += [bos] + t
    tr, he = np.array(stream, dtype=np.int32), np.array(held, dtype=np.int32)
    np.savez(path, train=tr, held=he)
    return tr, he


# ---- train / eval --------------------------------------------------------------------------

def load_torch(a):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    return torch


def torch_ppl(torch, model, held, ctx):
    """weir perplexity's convention (docs/models.md): windows of CTX tokens, no overlap, the
    first replaced by BOS, predictions of positions CTX/2 + 1 .. CTX - 1 scored."""
    bos = int(held[0])
    nll, cnt = 0.0, 0
    first = ctx // 2
    with torch.no_grad():
        for start in range(0, len(held) - ctx + 1, ctx):
            w = torch.from_numpy(held[start:start + ctx].astype(np.int64))
            w[0] = bos
            lp = torch.log_softmax(model(w[None])[0].double(), dim=-1)
            tgt = w[first + 1:]
            nll += -lp[first:ctx - 1].gather(1, tgt[:, None]).sum().item()
            cnt += len(tgt)
    return math.exp(nll / cnt), cnt


def weir_ppl(a, ctx):
    out = subprocess.run([a.weir, "perplexity", "--model", a.model, "--file", HELDOUT,
                          "--ctx", str(ctx), "--threads", str(a.threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["perplexity"]


def cmd_train(a):
    torch = load_torch(a)
    g = Gguf(a.model)
    hp = hparams(g)
    tr, held = token_data(a, g)
    T, B = a.ctx, a.batch
    model = Model(torch, g, hp, max(T, a.eval_ctx), hp["ctx"])
    params = model.params()
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed + 1)
    data = torch.from_numpy(tr.astype(np.int64))
    warm = max(1, a.steps // 20)

    def lr_at(s):
        if s < warm:
            return a.lr * (s + 1) / warm
        q = (s - warm) / max(1, a.steps - warm)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))

    n = sum(p.numel() for p in params)
    p0, _ = torch_ppl(torch, model, held, a.eval_ctx)
    print(f"{os.path.basename(a.model)}: {hp['arch']}, {n} parameters, {len(tr)} training "
          f"tokens, held-out ppl before {p0:.2f}; {a.steps} steps of {B} x {T}", flush=True)
    t0, run = time.time(), 0.0
    for step in range(a.steps):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        off = torch.randint(0, len(data) - T - 1, (B,), generator=gen)
        batch = torch.stack([data[o:o + T + 1] for o in off.tolist()])
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, hp["V"]),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        run += loss.item()
        if (step + 1) % a.log_every == 0 or step + 1 == a.steps:
            k = (step + 1) % a.log_every or a.log_every
            print(f"step {step + 1}/{a.steps} loss {run / k:.4f} "
                  f"{time.time() - t0:.0f}s", flush=True)
            run = 0.0
    g.write({name: t.detach().numpy() for name, t in model.p.items()})
    p1, cnt = torch_ppl(torch, model, held, a.eval_ctx)
    res = dict(model=os.path.basename(a.model), arch=hp["arch"], steps=a.steps, batch=B, ctx=T,
               lr=a.lr, seconds=round(time.time() - t0), final_loss=round(loss.item(), 4),
               torch_ppl_before=round(p0, 4), torch_ppl=round(p1, 4), scored=cnt)
    if a.check:
        w = weir_ppl(a, a.eval_ctx)
        res.update(weir_ppl=round(w, 4), rel_diff=round((w - p1) / p1, 6))
    print(json.dumps(res), flush=True)
    with open(a.model + ".train.json", "w") as f:
        json.dump(res, f)
    if a.check and abs(res["rel_diff"]) > 0.01:
        raise SystemExit("weir's perplexity is more than 1% from torch's: the graphs differ")


def cmd_eval(a):
    torch = load_torch(a)
    g = Gguf(a.model)
    hp = hparams(g)
    _, held = token_data(a, g)
    model = Model(torch, g, hp, a.eval_ctx, hp["ctx"])
    p, cnt = torch_ppl(torch, model, held, a.eval_ctx)
    w = weir_ppl(a, a.eval_ctx)
    print(json.dumps(dict(model=os.path.basename(a.model), arch=hp["arch"], torch_ppl=round(p, 4),
                          weir_ppl=round(w, 4), rel_diff=round((w - p) / p, 6), scored=cnt)))
    return 0 if abs(w - p) / p <= 0.01 else 1


def main():
    d = demo()
    if any(os.environ.get(k) != v for k, v in d.MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **d.MALLOC_ENV})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("train", "eval"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True, help="an f32 GGUF file (trained in place)")
        s.add_argument("--work", default="work-families", help="token id cache")
        s.add_argument("--weir", default=os.path.join(ROOT, "build", "bin", "weir"))
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--seed", type=int, default=1234)
        s.add_argument("--eval-ctx", type=int, default=256)
        if name == "train":
            s.add_argument("--steps", type=int, default=300)
            s.add_argument("--batch", type=int, default=4)
            s.add_argument("--ctx", type=int, default=256)
            s.add_argument("--lr", type=float, default=3e-3)
            s.add_argument("--log-every", type=int, default=25)
            s.add_argument("--no-check", dest="check", action="store_false",
                           help="skip weir's perplexity after training")
    a = p.parse_args()
    sys.exit({"train": cmd_train, "eval": cmd_eval}[a.cmd](a))


if __name__ == "__main__":
    main()
