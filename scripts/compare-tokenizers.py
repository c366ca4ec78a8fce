#!/usr/bin/env python3
"""weir's tokenizer against llama.cpp's on the same GGUF files (issue 30).

    scripts/compare-tokenizers.py --weir build/bin/weir --llama-server $LLAMA_BIN/llama-server \
        MODEL.gguf [MODEL.gguf ...]

For each file, starts `weir serve` and `llama-server` on loopback ports and sends each of a set
of awkward strings (leading, trailing and repeated spaces, newlines, tabs, CRLF, digits,
contractions, accented and CJK text, an emoji, the chat templates' special tokens inside text)
to both `/tokenize` endpoints with the tokenizer's special handling on (weir
`add_special_tokens: true`, its default, llama.cpp `add_special: true`): BOS as the file says,
and special tokens written in the text parsed as such (weir parses them only with
add_special_tokens, llama.cpp always). Prints each mismatch and one summary
line per file; exits 1 on any mismatch. With --write DIR, also writes llama.cpp's ids (BOS
left off) for each file as DIR/<file stem>_cases.tsv in the format of
tests/tokenizer/fixtures (gen/fixture_io.py), the peer's answers test_tokenizer_gguf holds
weir to without the peer. Standard library only; stops what it starts.
"""
import argparse
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module  # noqa: E402

greedy = import_module("compare-greedy")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "tokenizer", "gen"))
from fixture_io import esc  # noqa: E402

STRINGS = [
    "hello world",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "a  b   c    d",
    "line\nbreak",
    "\n\nnewlines first\n",
    "ends with newlines\n\n\n",
    " \n \n",
    "tabs\tand\t\ttabs",
    "\r\nwindows\r\nline ends",
    "digits 1234567890 and 3.14159, 1,000,000",
    "1 22 333 4444 55555 666666",
    "don't I'll WE'RE you've she'd",
    "café naïve façade ÀÉÎ ñ ß",
    "日本語のテキスト 中文",
    "emoji 🙂🚀 done",
    "<start_of_turn>user\nhi there<end_of_turn>\n<start_of_turn>model\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|user|>\nhi<|end|>\n<|assistant|>\n",
    "text<|end|>more text <|user|>",
    "   ",
    "x",
    "The quick brown fox jumps over the lazy dog. It was the best of times!",
    "punctuation... (parens) [brackets] {braces} \"quotes\" 'single' --dashes--",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write", metavar="DIR")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers too
    bad_total = 0
    for model in a.models:
        procs = []
        try:
            wport, lport = greedy.free_port(), greedy.free_port()
            procs.append(subprocess.Popen(
                [a.weir, "serve", "--model", model, "--port", str(wport), "--threads",
                 str(a.threads), "--set", "model.max_model_len=512"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            greedy.wait_health(wport, procs[-1], "weir serve")
            procs.append(subprocess.Popen(
                [a.llama_server, "-m", model, "--port", str(lport), "-t", str(a.threads), "-c",
                 "512", "-np", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            greedy.wait_health(lport, procs[-1], "llama-server")
            bad = 0
            bos = greedy.post(wport, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"]
            rows = []
            for s in STRINGS:
                w = greedy.post(wport, "/tokenize", {"prompt": s,
                                                     "add_special_tokens": True})["tokens"]
                l = greedy.post(lport, "/tokenize", {"content": s, "add_special": True})["tokens"]
                rows.append((s, l[len(bos):] if bos and l[:len(bos)] == bos else l))
                if w != l:
                    bad += 1
                    print(f"  {os.path.basename(model)} {json.dumps(s)}:\n    weir  {w}\n"
                          f"    llama {l}")
            print(f"{os.path.basename(model)}: {len(STRINGS) - bad}/{len(STRINGS)} strings "
                  "tokenized identically")
            bad_total += bad
            if a.write:
                stem = os.path.splitext(os.path.basename(model))[0]
                with open(os.path.join(a.write, stem + "_cases.tsv"), "w", encoding="utf-8") as f:
                    f.write("# text\tids (no BOS)  (llama.cpp c392e5094 llama-server /tokenize on "
                            f"the `weir mkmodel` file {stem}; scripts/compare-tokenizers.py)\n")
                    for text, ids in rows:
                        f.write(esc(text.encode()) + "\t" + " ".join(map(str, ids)) + "\n")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait()
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
