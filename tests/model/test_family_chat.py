#!/usr/bin/python3
"""The chat templates `weir mkmodel --arch` embeds (issue 30), rendered by weir's Jinja engine
in real chat requests to the real `weir serve`:
  test_family_chat.py WEIR_BINARY PLUGIN_DIR WORK_DIR
For gemma3, qwen3 and phi3 files, a chat request's prompt must be exactly the text the
family's published prompt format gives for the conversation (written out by hand below, not
rendered by any template engine): the request's usage.prompt_tokens equals the token count
of that text, and the greedy reply equals the reply /v1/completions gives for that text's
token ids, token for token (same text and same log-probabilities). Also: Qwen3's
enable_thinking=false (an empty reasoning block after the assistant opener), its reasoning of
an earlier turn dropped, <think> a single user-defined token kept in the output text; Gemma's
system turn folded into the first user turn and its role-alternation refusal (400 naming the
template's reason)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from weir_server import FAILURES, Server, expect, finish  # noqa: E402

SYSTEM, U1, A1, U2 = "You are terse.", "Hello there", "Hi.", "How are you?"
CONV = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": U1},
        {"role": "assistant", "content": A1}, {"role": "user", "content": U2}]

# Each family's published prompt format for CONV with the generation prompt (BOS left to the
# tokenizer: the Gemma template's own BOS text is replaced by the tokenizer's).
EXPECTED = {
    "gemma3": (f"<start_of_turn>user\n{SYSTEM}\n\n{U1}<end_of_turn>\n"
               f"<start_of_turn>model\n{A1}<end_of_turn>\n"
               f"<start_of_turn>user\n{U2}<end_of_turn>\n<start_of_turn>model\n"),
    "qwen3": (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{U1}<|im_end|>\n"
              f"<|im_start|>assistant\n{A1}<|im_end|>\n<|im_start|>user\n{U2}<|im_end|>\n"
              "<|im_start|>assistant\n"),
    "phi3": (f"<|system|>\n{SYSTEM}<|end|>\n<|user|>\n{U1}<|end|>\n<|assistant|>\n{A1}<|end|>\n"
             f"<|user|>\n{U2}<|end|>\n<|assistant|>\n"),
}
ARGS = {"gemma3": ["--arch", "gemma3", "--head-dim", "16", "--tied"],
        "qwen3": ["--arch", "qwen3"],
        "phi3": ["--arch", "phi3", "--swa", "96"]}
N = 8


def same_reply(srv, fam, text, chat_body):
    """The chat request's prompt is `text`: same token count, same greedy reply."""
    st, tok = srv.post("/tokenize", {"prompt": text})
    expect(st == 200, f"{fam}: tokenize {st}")
    body = dict(chat_body, max_tokens=N, temperature=0, ignore_eos=True, logprobs=True)
    st, chat = srv.post("/v1/chat/completions", body)
    expect(st == 200, f"{fam}: chat answered {st}: {chat}")
    expect(chat["usage"]["prompt_tokens"] == len(tok["tokens"]),
           f"{fam}: chat prompt has {chat['usage']['prompt_tokens']} tokens, the published "
           f"format {len(tok['tokens'])}")
    st, comp = srv.post("/v1/completions", {"prompt": tok["tokens"], "max_tokens": N,
                                            "temperature": 0, "ignore_eos": True,
                                            "logprobs": 0})
    expect(st == 200, f"{fam}: completion {st}")
    ctext = chat["choices"][0]["message"]["content"]
    expect(ctext == comp["choices"][0]["text"],
           f"{fam}: chat reply {ctext!r} differs from the published format's "
           f"{comp['choices'][0]['text']!r}")
    clp = [c["logprob"] for c in chat["choices"][0]["logprobs"]["content"]]
    plp = comp["choices"][0]["logprobs"]["token_logprobs"]
    expect(len(clp) == N and all(abs(a - b) < 1e-4 for a, b in zip(clp, plp)),
           f"{fam}: log-probabilities differ: {clp} vs {plp}")


def main():
    weir, plugins, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    for fam in ("gemma3", "qwen3", "phi3"):
        model = os.path.join(work, f"{fam}.gguf")
        subprocess.run([weir, "mkmodel", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                        "--ffn", "128", "--vocab", "512", "--layers", "2", "--ctx", "1024",
                        "--type", "f32", "--seed", "3", *ARGS[fam], "--out", model],
                       check=True, capture_output=True)
        failed_before = len(FAILURES)
        srv = Server(weir, plugins, model, os.path.join(work, f"{fam}.log"))
        try:
            same_reply(srv, fam, EXPECTED[fam], {"messages": CONV})
            if fam == "qwen3":
                # enable_thinking=false: an empty reasoning block opens the reply.
                same_reply(srv, fam, EXPECTED[fam] + "<think>\n\n</think>\n\n",
                           {"messages": CONV,
                            "chat_template_kwargs": {"enable_thinking": False}})
                st, r = srv.post("/v1/chat/completions", {"messages": CONV, "max_tokens": 1,
                                                          "chat_template_kwargs": [1]})
                expect(st == 400 and r["error"]["param"] == "chat_template_kwargs",
                       f"chat_template_kwargs [1] answered {st} {r}")
                # An earlier turn's reasoning is dropped from the history.
                conv = [dict(m) for m in CONV]
                conv[2]["content"] = "<think>\nthe user greets me\n</think>\n\n" + A1
                same_reply(srv, fam, EXPECTED[fam], {"messages": conv})
                # <think> is one token, and stays in decoded text.
                for t in ("<think>", "</think>"):
                    st, r = srv.post("/tokenize", {"prompt": t, "add_special_tokens": False})
                    expect(st == 200 and len(r["tokens"]) == 1, f"{t} is {r} tokens")
                    st, d = srv.post("/detokenize", {"tokens": r["tokens"]})
                    expect(st == 200 and d["prompt"] == t, f"{t} decodes to {d}")
            if fam == "gemma3":
                st, r = srv.post("/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "a"},
                                               {"role": "user", "content": "b"}],
                                  "max_tokens": 1})
                expect(st == 400 and "must alternate" in str(r),
                       f"gemma3: two user turns answered {st} {r}")
        finally:
            srv.stop()
        if len(FAILURES) == failed_before:
            print(f"{fam}: chat template renders the published format", flush=True)
    finish()


if __name__ == "__main__":
    main()
