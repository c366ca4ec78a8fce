#!/usr/bin/python3
"""Trains weir's demo model pair (a Llama-architecture target and a smaller draft sharing one
tokenizer) on the King James Bible that Debian's bible-kjv-text package ships, and exports
them for `weir convert`, which writes the GGUF files under models/.

This is a tool run by hand (the product stays C). Needs Debian packages:
    apt-get install bible-kjv bible-kjv-text sentencepiece python3-sentencepiece \
                    python3-torch python3-numpy
Run with Debian's interpreter, from the repository root:

    /usr/bin/python3 scripts/train-demo.py data   --work W          # corpus, split, tokenizer, ids
    /usr/bin/python3 scripts/train-demo.py train  --work W --model target   # resumable
    /usr/bin/python3 scripts/train-demo.py train  --work W --model draft
    /usr/bin/python3 scripts/train-demo.py export --work W --model target   # -> W/export-target/
    build/bin/weir convert --in W/export-target --out models/kjv-target.gguf
    /usr/bin/python3 scripts/train-demo.py eval   --work W --model target --ctx 512
    /usr/bin/python3 scripts/train-demo.py heldout --out heldout.txt   # the held-out text only
    /usr/bin/python3 scripts/train-demo.py fixtures --work W   # tests/perplexity/fixtures

Everything is seeded (--seed): the same packages and flags give the same corpus, tokenizer
and data order; training on CPU with the same thread count repeats up to floating-point
reduction order. `--device cuda` runs the same code on a GPU (with `--preset` sizes scaled
by the flags) but has not been run here, where no GPU exists.

The graph is exactly weir's `llama` graph (core/model/llama.c): token embedding, per layer
RMSNorm -> Q/K/V (no bias) -> RoPE on Q and K -> causal grouped-query attention (query head
h reads KV head h // (n_head / n_head_kv)) -> output projection -> residual, RMSNorm ->
SwiGLU feed-forward -> residual; final RMSNorm and an output projection tied to the
embedding. RoPE uses GGUF's `llama` convention (NORM style): dimension pairs (2i, 2i+1) of
each head rotate by pos * base^(-2i/head_dim). Since the model is trained in that convention
its Q/K weights are written as they are; no permutation (converters from Hugging Face
checkpoints permute because HF rotates pairs (i, i + d/2) instead).
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import numpy as np

BIBLE = "/usr/bin/bible"
HELDOUT_EVERY = 20  # every 20th chapter (global chapter index % 20 == 19) is held out
CONTROL = ["<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

PRESETS = {
    # name: dim, layers, heads, kv_heads, ffn, ctx, batch, steps, lr
    "target": dict(dim=256, layers=6, heads=8, kv_heads=2, ffn=768, ctx=512,
                   batch=2, steps=700, lr=1.5e-3),
    "draft": dict(dim=128, layers=4, heads=4, kv_heads=1, ffn=384, ctx=512,
                  batch=2, steps=700, lr=2e-3),
}


# ---- corpus -------------------------------------------------------------------------------

def read_kjv():
    """Returns [(book, chapter, [verse texts])] from the bible program, in canonical order."""
    out = subprocess.run([BIBLE, "-l0", "gen1:1-rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters = []
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^  (\d+) (.*)$", line)
        if m:
            if int(m.group(1)) != len(chapters[-1][2]) + 1:
                raise SystemExit(f"verse numbering broken near: {line[:60]}")
            chapters[-1][2].append(m.group(2).strip())
            continue
        m = re.match(r"^(.+) (\d+)$", line)
        if not m:
            raise SystemExit(f"unexpected line from bible: {line[:60]}")
        chapters.append((m.group(1), int(m.group(2)), []))
    if len(chapters) != 1189:
        raise SystemExit(f"expected 1189 chapters, got {len(chapters)}")
    return chapters


STOP_CAPS = set("""A An And As At Be But By For From He Her His How I If In Is It Let My No
Nor Now O Of Oh On Or Our She So That The Their Then There These They This Thou Thus To
Unto We What When Where Which While Who Whom Why With Ye Yea Yet You Behold Moreover
Wherefore Therefore Also After Before Because Blessed Lord Hear Go Come Say Take Thy Thine
Surely Verily Woe Neither Again Even Howbeit Notwithstanding Lest Whosoever Until Every All
Do Give Make Praise Arise Shall Are Am Was Were Art Did Hath Have Had Will One Two Three Seven
Ten Twelve Whether Whatsoever Whither Seeing Furthermore Likewise Am Know Keep Turn See Is
Let Put Bring Hearken Remember Set Stand Sing Open Rejoice Gather Fear Also Return Cast Save
Look Send Draw Tell Speak Thee Upon Into Among Out Up Not Amen Selah Thine Thyself""".split())

TOPICS = """love faith hope wisdom mercy peace sin grace truth light darkness water bread wine
fire bread heaven earth king prophet priest temple altar covenant law prayer fear joy
sorrow death life blood spirit soul heart kingdom glory righteousness judgment salvation
shepherd sheep lamb children wife husband father mother brother servant gold silver sword
battle city mountain river sea wilderness famine harvest money rich poor widow stranger
angel devil night morning sabbath fasting mercy forgiveness repentance resurrection""".split()

Q_WHO = ["Who was {x}?", "Who is {x}?", "Tell me about {x}.", "What do you know of {x}?",
         "What did {x} do?", "Who was {x} in the Bible?"]
Q_TOPIC = ["What does the Bible say about {x}?", "What is {x}?", "Tell me about {x}.",
           "Speak to me of {x}.", "What is written about {x}?"]
Q_VERSE = ["What does {ref} say?", "Quote {ref}.", "Recite {ref}.", "What is written in {ref}?"]
SYSTEMS = ["You are a helpful assistant.", "Answer in the words of the King James Bible.",
           "You are a wise teacher."]


def split_chapters(chapters):
    train, held = [], []
    for i, ch in enumerate(chapters):
        (held if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else train).append(ch)
    return train, held


def chat_examples(train, rnd, n_examples):
    """Question/answer conversations whose answers are verses of the training chapters."""
    verses = [(b, c, v + 1, t) for b, c, vs in train for v, t in enumerate(vs)]
    word_re = re.compile(r"[A-Za-z]+")
    cap, low = {}, {}
    for _, _, _, t in verses:
        for w in word_re.findall(t):
            d = cap if w[0].isupper() else low
            d[w] = d.get(w, 0) + 1
    names = [w for w, n in cap.items() if n >= 6 and w not in STOP_CAPS and len(w) > 2
             and low.get(w.lower(), 0) * 4 < n]
    names.sort(key=lambda w: -cap[w])
    names = names[:800]
    index = {}
    for i, (_, _, _, t) in enumerate(verses):
        for w in set(word_re.findall(t)):
            index.setdefault(w, []).append(i)

    def answer_for(word):
        ids = index.get(word, [])
        if not ids:
            return None
        # Prefer verses that say who or what the word is ("X was", "X the son of", "X is").
        good = [i for i in ids if re.search(r"\b" + word + r"\b (was|is|the son|the|said)",
                                            verses[i][3])]
        pool = good if good and rnd.random() < 0.7 else ids
        first = rnd.choice(pool)
        text = verses[first][3]
        if rnd.random() < 0.4 and first + 1 < len(verses) and \
                verses[first + 1][:2] == verses[first][:2]:
            text += " " + verses[first + 1][3]
        return text

    convs = []
    weights = [("who", 0.5), ("topic", 0.3), ("verse", 0.2)]
    for _ in range(n_examples):
        r = rnd.random()
        kind = "who" if r < weights[0][1] else "topic" if r < 0.8 else "verse"
        if kind == "who":
            # Frequent names more often: sample from the head of the list with higher odds.
            x = names[min(int(rnd.expovariate(1 / 120)), len(names) - 1)]
            q, a = rnd.choice(Q_WHO).format(x=x), answer_for(x)
        elif kind == "topic":
            x = rnd.choice(TOPICS)
            q, a = rnd.choice(Q_TOPIC).format(x=x), answer_for(x)
        else:
            b, c, v, t = rnd.choice(verses)
            q, a = rnd.choice(Q_VERSE).format(ref=f"{b} {c}:{v}"), t
        if not a:
            continue
        msgs = []
        if rnd.random() < 0.15:
            msgs.append(("system", rnd.choice(SYSTEMS)))
        msgs.append(("user", q))
        msgs.append(("assistant", a))
        convs.append(msgs)
    return convs


def chatml_segments(msgs):
    """The ChatML rendering as weir's template renders it, split at control tokens."""
    segs = []
    for role, content in msgs:
        segs += [("ctl", "<|im_start|>"), ("txt", f"{role}\n{content}"), ("ctl", "<|im_end|>"),
                 ("txt", "\n")]
    return segs


def encode_segments(sp, segs, bos):
    """Encodes like weir's llama tokenizer with PARSE_SPECIAL: control tokens by id, each text
    run with SentencePiece's dummy prefix (weir puts it at the start and after a control)."""
    ids = [bos]
    for kind, s in segs:
        ids += [sp.piece_to_id(s)] if kind == "ctl" else sp.encode(s)
    return ids


def heldout_text(chapters):
    """The held-out split as weir perplexity reads it: one chapter per line, verses joined."""
    _, held = split_chapters(chapters)
    return "\n".join(" ".join(vs) for _, _, vs in held) + "\n"


def cmd_heldout(a):
    with open(a.out, "w") as f:
        f.write(heldout_text(read_kjv()))


def cmd_calib(a):
    """A calibration text cut from the training split only (every 10th training chapter, in
    the held-out text's format), so an AWQ calibration never sees the text it is scored on."""
    train, _ = split_chapters(read_kjv())
    with open(a.out, "w") as f:
        f.write("\n".join(" ".join(vs) for _, _, vs in train[::10]) + "\n")


def cmd_fixtures(a):
    """tests/perplexity/fixtures: the first two held-out chapters and SentencePiece's ids for
    them (BOS first), which the perplexity suite checks weir's tokenizer and perplexity on."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.work, "tokenizer.model"))
    text = "".join(heldout_text(read_kjv()).splitlines(keepends=True)[:2])
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "heldout-sample.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "heldout-sample.ids"), "w") as f:
        f.write(" ".join(map(str, [sp.bos_id()] + sp.encode(text))) + "\n")


def cmd_data(a):
    import sentencepiece as spm
    rnd = random.Random(a.seed)
    os.makedirs(a.work, exist_ok=True)
    chapters = read_kjv()
    train, held = split_chapters(chapters)
    convs = chat_examples(train, rnd, a.chat_examples)
    # Tokenizer: trained on training verses (one per line) and the chat questions.
    tok_txt = os.path.join(a.work, "tokenizer-input.txt")
    with open(tok_txt, "w") as f:
        for _, _, vs in train:
            for v in vs:
                f.write(v + "\n")
        for msgs in convs[: len(convs) // 4]:
            for role, content in msgs:
                f.write(f"{role} {content}\n")
    prefix = os.path.join(a.work, "tokenizer")
    subprocess.run(["spm_train", f"--input={tok_txt}", f"--model_prefix={prefix}",
                    "--model_type=bpe", f"--vocab_size={a.vocab}", "--byte_fallback=true",
                    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                    "--add_dummy_prefix=true", "--split_digits=true",
                    "--character_coverage=1.0", "--control_symbols=" + ",".join(CONTROL),
                    "--bos_id=1", "--eos_id=2", "--unk_id=0", "--pad_id=-1",
                    f"--random_seed={a.seed}", "--num_threads=1", "--minloglevel=1",
                    f"--input_sentence_size=0"], check=True)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    bos, eos = sp.bos_id(), sp.eos_id()

    # Training stream: one document per chapter (BOS, the verses joined by spaces, EOS) and
    # one per conversation, in a seeded random order.
    docs = [[bos] + sp.encode(" ".join(vs)) + [eos] for _, _, vs in train]
    chat_docs = [encode_segments(sp, chatml_segments(m), bos) for m in convs]
    n_plain = sum(map(len, docs))
    n_chat = sum(map(len, chat_docs))
    docs += chat_docs
    rnd.shuffle(docs)
    train_ids = np.array([t for d in docs for t in d], dtype=np.int16)
    train_ids.tofile(os.path.join(a.work, "train.bin"))

    # Held-out: chapters of plain text one per line; evaluated as weir perplexity reads a
    # file (BOS, then the whole text encoded at once).
    held_txt = heldout_text(chapters)
    with open(os.path.join(a.work, "heldout.txt"), "w") as f:
        f.write(held_txt)
    held_ids = np.array([bos] + sp.encode(held_txt), dtype=np.int16)
    held_ids.tofile(os.path.join(a.work, "heldout.bin"))
    with open(os.path.join(a.work, "chat-samples.txt"), "w") as f:
        for m in convs[:50]:
            f.write(json.dumps(m) + "\n")
    info = dict(seed=a.seed, vocab=sp.get_piece_size(), train_chapters=len(train),
                heldout_chapters=len(held), heldout_refs=[f"{b} {c}" for b, c, _ in held],
                conversations=len(convs), train_tokens=int(len(train_ids)),
                plain_tokens=n_plain, chat_tokens=n_chat, heldout_tokens=int(len(held_ids)),
                heldout_bytes=len(held_txt.encode()))
    with open(os.path.join(a.work, "data.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k != "heldout_refs"}))


# ---- model --------------------------------------------------------------------------------

def build_model(torch, hp):
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, d, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.eps = eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d, hd = hp["dim"], hp["dim"] // hp["heads"]
            self.attn_norm = RMSNorm(d, hp["eps"])
            self.attn_q = nn.Linear(d, d, bias=False)
            self.attn_k = nn.Linear(d, hp["kv_heads"] * hd, bias=False)
            self.attn_v = nn.Linear(d, hp["kv_heads"] * hd, bias=False)
            self.attn_output = nn.Linear(d, d, bias=False)
            self.ffn_norm = RMSNorm(d, hp["eps"])
            self.ffn_gate = nn.Linear(d, hp["ffn"], bias=False)
            self.ffn_up = nn.Linear(d, hp["ffn"], bias=False)
            self.ffn_down = nn.Linear(hp["ffn"], d, bias=False)

        def forward(self, x, cos, sin, mask):
            B, T, d = x.shape
            H, HKV = hp["heads"], hp["kv_heads"]
            hd = d // H
            h = self.attn_norm(x)
            q = self.attn_q(h).view(B, T, H, hd)
            k = self.attn_k(h).view(B, T, HKV, hd)
            v = self.attn_v(h).view(B, T, HKV, hd)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if HKV != H:
                k = k.repeat_interleave(H // HKV, dim=1)
                v = v.repeat_interleave(H // HKV, dim=1)
            # One sequence at a time keeps each score matrix (H x T x T) small enough for the
            # heap (see MALLOC_ENV); one fused scale-and-mask op per sequence.
            outs = []
            for b in range(B):
                att = torch.baddbmm(mask[:T, :T], q[b], k[b].transpose(-1, -2),
                                    alpha=1.0 / math.sqrt(hd))
                outs.append(torch.bmm(F.softmax(att, dim=-1), v[b]))
            o = torch.stack(outs)
            x = x + self.attn_output(o.transpose(1, 2).reshape(B, T, d))
            h = self.ffn_norm(x)
            return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))

    def rope(x, cos, sin):
        # NORM style: pairs (2i, 2i+1).
        T = x.shape[1]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        c, s = cos[:T, None, :], sin[:T, None, :]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embd = nn.Embedding(hp["vocab"], hp["dim"])
            self.blocks = nn.ModuleList(Block() for _ in range(hp["layers"]))
            self.output_norm = RMSNorm(hp["dim"], hp["eps"])
            hd = hp["dim"] // hp["heads"]
            inv = hp["rope_base"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
            ang = torch.arange(hp["ctx"], dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)
            self.register_buffer("mask", torch.full((hp["ctx"], hp["ctx"]), float("-inf"))
                                 .triu(1), persistent=False)
            std = 0.02
            for n, p in self.named_parameters():
                if p.dim() == 2:
                    s = std / math.sqrt(2 * hp["layers"]) if n.endswith(
                        ("attn_output.weight", "ffn_down.weight")) else std
                    nn.init.normal_(p, 0.0, s)

        def forward(self, idx):
            x = self.token_embd(idx)
            for b in self.blocks:
                x = b(x, self.cos, self.sin, self.mask)
            return self.output_norm(x) @ self.token_embd.weight.t()

    return Model()


def hparams(a, vocab):
    hp = dict(PRESETS[a.model])
    for k in ("dim", "layers", "heads", "kv_heads", "ffn", "ctx", "batch", "steps", "lr"):
        v = getattr(a, k, None)
        if v is not None:
            hp[k] = v
    hp.update(vocab=vocab, eps=1e-5, rope_base=10000.0)
    return hp


def load_torch(a):
    # Debian's torch multiplies through the system BLAS (libblas.so.3): install
    # libopenblas0-pthread, or it falls back to the reference BLAS, ten times slower.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    return torch


def vocab_size(work):
    with open(os.path.join(work, "data.json")) as f:
        return json.load(f)["vocab"]


def cmd_train(a):
    torch = load_torch(a)
    hp = hparams(a, vocab_size(a.work))
    data = torch.from_numpy(np.fromfile(os.path.join(a.work, "train.bin"), dtype=np.int16)
                            .astype(np.int64))
    held = torch.from_numpy(np.fromfile(os.path.join(a.work, "heldout.bin"), dtype=np.int16)
                            .astype(np.int64))
    dev = torch.device(a.device)
    model = build_model(torch, hp).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(0.9, 0.95), eps=1e-8)
    ckpt = os.path.join(a.work, f"{a.model}.ckpt")
    log_path = os.path.join(a.work, f"{a.model}.log")
    step, elapsed = 0, 0.0
    resumed_from = hp["steps"]
    gen = torch.Generator().manual_seed(a.seed + 1)
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        # --steps may change on resume (the learning-rate schedule follows the new total);
        # nothing else may.
        if {**st["hp"], "steps": hp["steps"]} != hp:
            raise SystemExit(f"{ckpt} was made with other hyperparameters: {st['hp']}")
        if st["hp"]["steps"] != hp["steps"] and st["step"] >= hp["steps"]:
            raise SystemExit(f"{ckpt} is already at step {st['step']}")
        resumed_from = st["hp"]["steps"]
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        gen.set_state(st["gen"])
        torch.set_rng_state(st["rng"])
    log = open(log_path, "a")

    def say(msg):
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    say(f"{a.model}: {nparams} parameters, hp {json.dumps(hp)}, "
        f"{len(data)} training tokens, starting at step {step}")
    if resumed_from != hp["steps"]:
        say(f"schedule changed from {resumed_from} to {hp['steps']} steps at step {step}")
    T, B = hp["ctx"], hp["batch"]
    warm = max(1, hp["steps"] // 20)

    def lr_at(s):
        if s < warm:
            return hp["lr"] * (s + 1) / warm
        p = (s - warm) / max(1, hp["steps"] - warm)
        return hp["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    def held_loss(n_windows=16):
        model.eval()
        tot, cnt = 0.0, 0
        with torch.no_grad():
            for w in range(n_windows):
                s = w * T
                if s + T + 1 > len(held):
                    break
                x = held[s:s + T + 1].to(dev)
                logits = model(x[None, :-1])[0]
                tot += torch.nn.functional.cross_entropy(logits, x[1:], reduction="sum").item()
                cnt += T
        model.train()
        return tot / max(cnt, 1)

    def save():
        tmp = ckpt + ".tmp"
        torch.save(dict(hp=hp, model=model.state_dict(), opt=opt.state_dict(), step=step,
                        elapsed=elapsed, gen=gen.get_state(), rng=torch.get_rng_state()), tmp)
        os.replace(tmp, ckpt)

    model.train()
    t0 = time.time()
    last_save = t0
    run_loss, run_n = 0.0, 0
    while step < hp["steps"]:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        off = torch.randint(0, len(data) - T - 1, (B,), generator=gen)
        batch = torch.stack([data[o:o + T + 1] for o in off.tolist()]).to(dev)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        # Micro-batches keep the logits under the heap threshold (see MALLOC_ENV).
        for mb in batch.split(a.micro):
            logits = model(mb[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, hp["vocab"]),
                                                     mb[:, 1:].reshape(-1)) * (len(mb) / B)
            loss.backward()
            loss_sum += loss.item()
        loss = torch.tensor(loss_sum)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        run_loss += loss.item()
        run_n += 1
        now = time.time()
        if step % a.log_every == 0 or step == hp["steps"]:
            el = elapsed + now - t0
            msg = (f"step {step}/{hp['steps']} loss {run_loss / run_n:.4f} lr {lr_at(step - 1):.2e}"
                   f" {el:.0f}s {step * B * T / el:.0f} tok/s")
            if step % (a.log_every * 10) == 0 or step == hp["steps"]:
                hl = held_loss()
                msg += f" heldout {hl:.4f} ppl {math.exp(hl):.2f}"
            say(msg)
            run_loss, run_n = 0.0, 0
        if now - last_save > a.save_every or step == hp["steps"]:
            elapsed += now - t0
            t0 = now
            save()
            last_save = now
    say(f"done: {step} steps, {elapsed:.0f} s of training")


# ---- export / eval ------------------------------------------------------------------------

def load_trained(a):
    torch = load_torch(a)
    ckpt = os.path.join(a.work, f"{a.model}.ckpt")
    st = torch.load(ckpt, map_location="cpu")
    model = build_model(torch, st["hp"])
    model.load_state_dict(st["model"])
    model.eval()
    return torch, model, st


def cmd_export(a):
    """Writes DIR/model.json (hyperparameters, tokenizer, template) and DIR/tensors.bin
    (f32 little-endian, GGUF names), the neutral form `weir convert` reads."""
    import sentencepiece as spm
    torch, model, st = load_trained(a)
    hp = st["hp"]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.work, "tokenizer.model"))
    out = a.out or os.path.join(a.work, f"export-{a.model}")
    os.makedirs(out, exist_ok=True)
    tensors, off = [], 0
    sd = model.state_dict()
    names = [("token_embd.weight", "token_embd.weight")]
    for l in range(hp["layers"]):
        for p in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                  "ffn_gate", "ffn_up", "ffn_down"):
            names.append((f"blk.{l}.{p}.weight", f"blocks.{l}.{p}.weight"))
    names.append(("output_norm.weight", "output_norm.weight"))
    with open(os.path.join(out, "tensors.bin"), "wb") as f:
        for gname, tname in names:
            t = sd[tname].detach().to(torch.float32).contiguous().numpy()
            b = t.astype("<f4").tobytes()
            # GGUF lists dimensions innermost first: a torch [out, in] weight is {in, out}.
            tensors.append(dict(name=gname, shape=list(reversed(t.shape)), offset=off))
            f.write(b)
            off += len(b)
    types = []
    for i in range(sp.get_piece_size()):
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else
                     6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1)
    meta = {
        "general.name": a.name or f"weir-kjv-{a.model}",
        "general.description": f"weir demo {a.model} model trained on the King James Bible "
                               "(scripts/train-demo.py)",
        "context_length": hp["ctx"], "embedding_length": hp["dim"], "block_count": hp["layers"],
        "feed_forward_length": hp["ffn"], "head_count": hp["heads"],
        "head_count_kv": hp["kv_heads"], "rms_eps": hp["eps"], "rope_freq_base": hp["rope_base"],
        "tokenizer": {
            "model": "llama",
            "tokens": [sp.id_to_piece(i) for i in range(sp.get_piece_size())],
            "scores": [sp.get_score(i) for i in range(sp.get_piece_size())],
            "token_type": types,
            "bos_token_id": sp.bos_id(), "eos_token_id": sp.eos_id(),
            "unknown_token_id": sp.unk_id(), "add_bos_token": True, "add_eos_token": False,
            "add_space_prefix": True,
            "chat_template": CHAT_TEMPLATE,
        },
        "training": {"steps": st["step"], "seconds": round(st["elapsed"]),
                     "corpus": "King James Bible (Debian bible-kjv-text)"},
        "tensors": tensors,
    }
    with open(os.path.join(out, "model.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {out}: {len(tensors)} tensors, {off} bytes")


def cmd_eval(a):
    """Perplexity of the held-out text in weir's convention (llama.cpp's): windows of --ctx
    tokens every --stride tokens, the first token of each replaced by BOS; the tokens after
    the first half (window positions ctx/2 + 1 .. ctx - 1) are scored."""
    torch, model, st = load_trained(a)
    ids = np.fromfile(os.path.join(a.work, "heldout.bin"), dtype=np.int16).astype(np.int64)
    if a.tokens:
        ids = ids[: a.tokens]
    ctx, stride = a.ctx, a.stride or a.ctx
    bos = int(ids[0])
    nll, cnt, sq = 0.0, 0, 0.0
    first = ctx // 2
    with torch.no_grad():
        for start in range(0, len(ids) - ctx + 1, stride):
            w = torch.from_numpy(ids[start:start + ctx].copy())
            w[0] = bos
            lp = torch.log_softmax(model(w[None])[0].double(), dim=-1)
            tgt = w[first + 1:]
            v = -lp[first:ctx - 1].gather(1, tgt[:, None])[:, 0]
            nll += v.sum().item()
            sq += (v * v).sum().item()
            cnt += len(v)
    mean = nll / cnt
    var = sq / cnt - mean * mean
    ppl = math.exp(mean)
    print(json.dumps(dict(model=a.model, ctx=ctx, stride=stride, tokens=cnt, ppl=ppl,
                          ppl_err=ppl * math.sqrt(var / (cnt - 1)))))


def cmd_bench(a):
    """Tokens per second of a few training steps, to size the runs."""
    torch = load_torch(a)
    hp = hparams(a, a.vocab)
    model = build_model(torch, hp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, hp["vocab"], (hp["batch"], hp["ctx"] + 1))
    n = sum(p.numel() for p in model.parameters())
    for i in range(4):
        t = time.time()
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, hp["vocab"]),
                                                 x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        dt = time.time() - t
    print(f"{a.model} {n} params: {hp['batch'] * hp['ctx'] / dt:.0f} tok/s ({dt:.2f} s/step)")


# glibc returns large freed blocks to the kernel at once, and torch frees and reallocates its
# activations every step: each step then faults every page in afresh, which in a sandboxed
# kernel costs more than the arithmetic (a 1M-element multiply ran 30x slower). Keeping freed
# memory in the heap removes that. The variables must be set before the process starts.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "17179869184",
              "MALLOC_TOP_PAD_": "268435456"}


def main():
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **MALLOC_ENV})
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(s):
        s.add_argument("--work", default="work-demo", help="working directory")
        s.add_argument("--seed", type=int, default=1234)
        s.add_argument("--threads", type=int, default=2)
        return s

    d = common(sub.add_parser("data", help="corpus, held-out split, tokenizer, token ids"))
    d.add_argument("--vocab", type=int, default=4096)
    d.add_argument("--chat-examples", type=int, default=5000)
    for name in ("train", "bench"):
        t = common(sub.add_parser(name))
        t.add_argument("--model", choices=sorted(PRESETS), required=True)
        t.add_argument("--device", default="cpu", help="cpu, or cuda where a GPU exists")
        for k in ("dim", "layers", "heads", "kv_heads", "ffn", "ctx", "batch", "steps"):
            t.add_argument("--" + k.replace("_", "-"), dest=k, type=int)
        t.add_argument("--lr", type=float)
        t.add_argument("--micro", type=int, default=2, help="sequences per forward pass")
        t.add_argument("--log-every", type=int, default=10)
        t.add_argument("--save-every", type=float, default=300, help="seconds")
        if name == "bench":
            t.add_argument("--vocab", type=int, default=4096)
    e = common(sub.add_parser("export", help="write the neutral export weir convert reads"))
    e.add_argument("--model", choices=sorted(PRESETS), required=True)
    e.add_argument("--out")
    e.add_argument("--name")
    v = common(sub.add_parser("eval", help="held-out perplexity in weir's convention"))
    v.add_argument("--model", choices=sorted(PRESETS), required=True)
    v.add_argument("--ctx", type=int, default=256)
    v.add_argument("--stride", type=int, default=0)
    v.add_argument("--tokens", type=int, default=0, help="only the first N held-out tokens")
    h = sub.add_parser("heldout", help="write the held-out text (needs only bible-kjv)")
    h.add_argument("--out", required=True)
    c = sub.add_parser("calib", help="write a calibration text from the training split")
    c.add_argument("--out", required=True)
    x = common(sub.add_parser("fixtures", help="write the perplexity suite's fixtures"))
    x.add_argument("--out", default="tests/perplexity/fixtures")
    a = p.parse_args()
    {"fixtures": cmd_fixtures, "heldout": cmd_heldout, "calib": cmd_calib, "data": cmd_data, "train": cmd_train, "export": cmd_export, "eval": cmd_eval,
     "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    main()
