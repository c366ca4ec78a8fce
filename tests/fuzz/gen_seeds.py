#!/usr/bin/env python3
"""Writes the hand-made seed inputs (seed-*) and the dictionaries of the fuzz targets into
tests/fuzz/corpus/<target>/ and tests/fuzz/dict/<target>.dict. Inputs the fuzzing runs kept
(merged with libFuzzer's -merge=1) sit next to the seeds under their content hashes; this
script never touches those. Run it from anywhere: python3 tests/fuzz/gen_seeds.py"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write_corpus(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        if old.startswith("seed-"):
            os.unlink(os.path.join(d, old))
    for name, data in seeds:
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def dict_line(tok):
    """One libFuzzer dictionary entry: a quoted string with \\ and " and bytes escaped."""
    if isinstance(tok, str):
        tok = tok.encode("utf-8", "surrogateescape")
    out = []
    for b in tok:
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append("\\x%02X" % b)
    return '"' + "".join(out) + '"'


def write_dict(target, tokens):
    os.makedirs(os.path.join(HERE, "dict"), exist_ok=True)
    seen = []
    for t in tokens:
        if t not in seen:
            seen.append(t)
    with open(os.path.join(HERE, "dict", target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary for fuzz_%s (written by tests/fuzz/gen_seeds.py)\n" % target)
        for t in seen:
            f.write(dict_line(t) + "\n")


def req(method, path, body=None, headers=None, version="1.1"):
    h = "%s %s HTTP/%s\r\n" % (method, path, version)
    hs = dict(headers or {})
    if version == "1.1" and "Host" not in hs:
        hs = {"Host": "fuzz", **hs}
    if body is not None:
        hs.setdefault("Content-Type", "application/json")
        hs.setdefault("Content-Length", str(len(body.encode("utf-8", "surrogateescape"))))
    for k, v in hs.items():
        if v is not None:
            h += "%s: %s\r\n" % (k, v)
    return h + "\r\n" + (body or "")


def dumps(o):
    return json.dumps(o, separators=(",", ":"))


# ---- JSON bodies ------------------------------------------------------------------------

STOP17 = '{"prompt":"a","max_tokens":2,' + ",".join('"stop":"s%d"' % i for i in range(1, 18)) + "}"

COMPLETIONS = [
    {"prompt": "Once upon a time", "max_tokens": 3},
    {"prompt": "hi", "max_tokens": 2, "stream": True},
    {"prompt": "hi", "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
    {"prompt": ["a", "b"], "n": 2, "max_tokens": 1},
    {"prompt": [1, 20, 30], "max_tokens": 2, "echo": True},
    {"prompt": [[1, 2], [3, 4]], "max_tokens": 1},
    {"prompt": "x", "logprobs": 5, "max_tokens": 2, "temperature": 0},
    {"prompt": "x", "logprobs": 20, "max_tokens": 3, "stream": True, "n": 3},
    {"prompt": "x", "stop": ["a", "b"], "stop_token_ids": [5, 6], "max_tokens": 3},
    {"prompt": "x", "seed": 7, "top_k": 5, "top_p": 0.9, "min_p": 0.1, "max_tokens": 2},
    {"prompt": "x", "presence_penalty": 1, "frequency_penalty": -1, "repetition_penalty": 1.2},
    {"prompt": "x", "ignore_eos": True, "min_tokens": 2, "max_tokens": 3},
    {"prompt": "x", "priority": -3, "user": "u", "model": "fuzz"},
    {"prompt": "x", "best_of": 1, "suffix": "", "logit_bias": {}},
    {"prompt": "x", "max_tokens": 100000},
    {"prompt": "", "max_tokens": 1},
    {"prompt": "x", "unknown": 1},
    {"prompt": "\u00e9\u4e2d\U0001F600", "echo": True, "max_tokens": 1},
]
COMPLETIONS_RAW = [
    ("crash-duplicate-stop", STOP17),
    ("seed-stop-list-then-string",
     '{"prompt":"a","stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16"],"stop":"q"}'),
    ("seed-duplicate-nested", '{"prompt":"a","stream":true,"stream_options":{"include_usage":true,"include_usage":true}}'),
    ("seed-nul", '{"prompt":"a\\u0000b","max_tokens":1}'),
    ("seed-escaped-backslash", '{"prompt":"a\\\\u0000b","max_tokens":1}'),
    ("seed-invalid-utf8", b'{"prompt":"a\xff\xfe\xc3","echo":true,"max_tokens":1}'),
    ("seed-not-object", "[1,2]"),
    ("seed-trailing", '{"prompt":"a"} x'),
    ("seed-deep", "{\"prompt\":" + "[" * 200 + "]" * 200 + "}"),
]

CHAT = [
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}],
     "max_completion_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
    {"messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"},
                  {"role": "assistant", "content": None}, {"role": "user", "content": "v"}]},
    {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 3, "max_tokens": 2},
    {"messages": [{"role": "user", "content": "x"}], "n": 4, "stream": True, "max_tokens": 2},
    {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}, "tools": [],
     "tool_choice": "none"},
    {"messages": [{"role": "tool", "content": "x"}]},
    {"messages": [{"role": "user", "content": "<|im_start|>system\n<|im_end|>"}], "max_tokens": 1},
    {"messages": []},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
]
CHAT_RAW = [
    ("seed-duplicate-role", '{"messages":[{"role":"user","role":"system","content":"x"}]}'),
    ("seed-nul-content", '{"messages":[{"role":"user","content":"\\u0000"}]}'),
    ("seed-stop-dup", '{"messages":[{"role":"user","content":"x"}],"stop":"a","stop":"b"}'),
]

TOKENIZE = [
    {"prompt": "hello world"},
    {"text": "hello", "add_special_tokens": False},
    {"prompt": "<|im_start|>user\nhi<|im_end|>", "model": "fuzz"},
    {"prompt": "\u00e9\u4e2d\U0001F600 \t\n"},
    {"prompt": 3},
    {},
]
DETOKENIZE = [
    {"tokens": [1, 2, 3]},
    {"tokens": []},
    {"tokens": [100000]},
    {"tokens": ["a"]},
    {"tokens": [5], "model": "fuzz"},
    {"tokens": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 300, 400, 500, 511]},
]

JSON_TOKENS = ['{', '}', '[', ']', ':', ',', '"', 'true', 'false', 'null', '-1', '0', '1', '2',
               '1e400', '0.5', '\\u0000', '\\\\', '\\ud800', '\\"', '"model":"fuzz"']
COMMON_KEYS = ["model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stop",
               "stop_token_ids", "seed", "presence_penalty", "frequency_penalty",
               "repetition_penalty", "logprobs", "ignore_eos", "min_tokens", "stream",
               "stream_options", "include_usage", "user", "priority", "logit_bias", "suffix",
               "best_of", "tools", "tool_choice", "response_format", "functions"]


def keys_dict(keys):
    return JSON_TOKENS + ['"%s":' % k for k in keys]


# ---- HTTP -----------------------------------------------------------------------------

def http_seeds():
    s = []
    s.append(("seed-health", req("GET", "/health")))
    s.append(("seed-metrics", req("GET", "/metrics")))
    s.append(("seed-models", req("GET", "/v1/models")))
    s.append(("seed-model", req("GET", "/v1/models/fuzz")))
    s.append(("seed-version-head", req("HEAD", "/version")))
    s.append(("seed-completion", req("POST", "/v1/completions", dumps(COMPLETIONS[0]))))
    s.append(("seed-completion-stream", req("POST", "/v1/completions", dumps(COMPLETIONS[7]))))
    s.append(("seed-chat", req("POST", "/v1/chat/completions", dumps(CHAT[1]))))
    s.append(("seed-tokenize", req("POST", "/tokenize", dumps(TOKENIZE[0]))))
    s.append(("seed-detokenize", req("POST", "/detokenize", dumps(DETOKENIZE[0]))))
    s.append(("seed-pipelined", req("GET", "/health") + req("POST", "/tokenize", '{"prompt":"abc"}')
              + req("GET", "/nope")))
    s.append(("seed-pipelined-many", req("GET", "/health") * 40))
    s.append(("seed-chunked", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\nb\r\nmpt\":\"abc\"}\r\n0\r\n\r\n"))
    s.append(("seed-expect", req("POST", "/tokenize", '{"prompt":"a"}', {"Expect": "100-continue"})))
    s.append(("seed-http10", req("POST", "/v1/completions", dumps(COMPLETIONS[1]), version="1.0")))
    s.append(("seed-keepalive-close", req("GET", "/health", headers={"Connection": "close"}) + req("GET", "/health")))
    s.append(("seed-no-host", "GET /health HTTP/1.1\r\n\r\n"))
    s.append(("seed-two-hosts", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"))
    s.append(("seed-huge-length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
              "9223372036854775808\r\n\r\n{"))
    s.append(("seed-overflow-length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
              "99999999999999999999999\r\n\r\n{"))
    s.append(("seed-bad-url", b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n"))
    s.append(("seed-method", req("DELETE", "/v1/completions")))
    s.append(("seed-wrong-type", req("POST", "/tokenize", '{"prompt":"a"}', {"Content-Type": "text/plain"})))
    s.append(("seed-auth", req("GET", "/v1/models", headers={"Authorization": "Bearer sk"})))
    s.append(("seed-upgrade", req("GET", "/health", headers={"Connection": "upgrade", "Upgrade": "h2c"})))
    s.append(("seed-http2", "GET /health HTTP/2.0\r\n\r\n"))
    s.append(("seed-duplicate-stop", req("POST", "/v1/completions", STOP17)))
    s.append(("seed-responses", req("POST", "/v1/responses", dumps(
        {"input": "hi", "max_output_tokens": 4, "stream": True, "store": False}))))
    # Issue 31: llama-server's API, vLLM's parameters, a forced call cut by the budget.
    s.append(("seed-llama-completion", req("POST", "/completion", dumps(
        {"prompt": "x", "n_predict": -1, "grammar": 'root ::= "a" [b-c]*', "cache_prompt": True,
         "typical_p": 1, "seed": -1, "stop": ["c"], "repeat_last_n": 64}))))
    s.append(("seed-llama-completion-stream", req("POST", "/completion", dumps(
        {"prompt": [1, 20, 30], "n_predict": 3, "stream": True, "json_schema": {"type": "object"}}))))
    s.append(("seed-props", req("GET", "/props")))
    s.append(("seed-chat-vllm", req("POST", "/v1/chat/completions", dumps(
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y",
                                                         "parsed": None}],
         "continue_final_message": True, "chat_template_kwargs": {"enable_thinking": False},
         "skip_special_tokens": False, "spaces_between_special_tokens": False,
         "include_stop_str_in_output": True, "stop": ["a"], "store": False,
         "metadata": {"k": "v"}, "service_tier": "auto",
         "structured_outputs": {"regex": "[a-c]+", "disable_fallback": True}}))))
    s.append(("seed-chat-forced-cut", req("POST", "/v1/chat/completions", dumps(
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": True,
         "tool_choice": "required", "tools": [{"type": "function", "function": {
             "name": "f", "parameters": {"type": "object", "properties": {
                 "a": {"type": "string"}}}}}]}))))
    s.append(("seed-big-stream", req("POST", "/v1/chat/completions", dumps(
        {"messages": [{"role": "user", "content": "x"}], "n": 16, "logprobs": True,
         "top_logprobs": 20, "stream": True}))))
    return s


HTTP_DICT = ["GET ", "POST ", "HEAD ", "PUT ", "OPTIONS ", " HTTP/1.1\r\n", " HTTP/1.0\r\n", "\r\n",
             "\r\n\r\n", "Host: ", "Content-Length: ", "Content-Type: application/json\r\n",
             "Transfer-Encoding: chunked\r\n", "Connection: close\r\n", "Connection: keep-alive\r\n",
             "Expect: 100-continue\r\n", "Authorization: Bearer ", "Upgrade: ", "0\r\n\r\n",
             "/health", "/metrics", "/version", "/v1/models", "/v1/models/fuzz", "/v1/completions",
             "/v1/chat/completions", "/tokenize", "/detokenize", "/completion", "/props", "?", "%00",
             "18446744073709551616"] + \
    keys_dict(COMMON_KEYS + ["prompt", "messages", "role", "content", "echo", "tokens", "text",
                             "n_predict", "grammar", "json_schema", "cache_prompt",
                             "chat_template_kwargs", "continue_final_message",
                             "add_generation_prompt", "skip_special_tokens",
                             "include_stop_str_in_output", "structured_outputs", "store",
                             "metadata", "service_tier"]) + ["/v1/responses"] + \
    keys_dict(["speculative"])[len(JSON_TOKENS):]


# ---- TOML -------------------------------------------------------------------------------

def toml_seeds():
    s = []
    for rel in ["etc/server.toml", "etc/examples/production.toml", "etc/examples/speculative.toml",
                "etc/examples/cpu-f32-kv.toml", "etc/examples/cuda.toml"]:
        p = os.path.join(ROOT, rel)
        if os.path.exists(p):
            s.append(("seed-" + os.path.basename(rel), open(p, "rb").read()))
    s.append(("seed-empty", ""))
    s.append(("seed-server", '[server]\nport = 9000\nhost = "0.0.0.0"\nmax_body_bytes = "2MiB"\n'
              'api_key = "k\\u00e9y"\nmax_pending_output_bytes = 65536\n'))
    s.append(("seed-plugin-options", '[attention]\nbackend = "cpu_paged"\nquery_tile = 8\n'
              '"odd key" = [1, 2.5, "x", true]\n[drafter]\nname = "ngram"\nnum_speculative_tokens = 3\n'))
    s.append(("seed-nested", '[sampler]\nname = "default"\nopt = { a = 1, b = [ { c = "d" } ] }\n'))
    s.append(("seed-dirs", '[plugins]\ndirs = ["/a", "b c", "\\u00e9"]\n[log]\nlevel = "debug"\n'))
    s.append(("seed-bad-key", "[server]\nprot = 1\n"))
    s.append(("seed-bad-value", "[server]\nport = 70000\n"))
    s.append(("seed-dup", "[server]\nport = 1\nport = 2\n"))
    s.append(("seed-dotted", "server.port = 8080\ncache.block_size = 32\n"))
    s.append(("seed-datetime", "[quant]\nscheme = \"fp16\"\nwhen = 1979-05-27T07:32:00Z\n"))
    return s


TOML_DICT = ["[server]", "[log]", "[model]", "[device]", "[attention]", "[quant]", "[sampler]",
             "[drafter]", "[cache]", "[scheduler]", "[plugins]", "[[", "]]", " = ", "\n", "\"",
             "'", '"""', "'''", "{", "}", "[", "]", ",", ".", "true", "false", "inf", "nan",
             "0x1F", "0o17", "0b1", "1_000", "1979-05-27T07:32:00Z", "07:32:00", "\\u00e9",
             "\\U0001F600", "#", "MiB", "GiB", "KiB"] + [
    k + " = " for k in ["host", "port", "api_key", "served_model_name", "max_body_bytes",
                        "max_header_bytes", "max_connections", "header_timeout_ms",
                        "idle_timeout_ms", "drain_timeout_ms", "request_timeout_ms",
                        "max_tokens_limit", "default_max_tokens", "max_pending_output_bytes",
                        "stall_timeout_ms", "level", "format", "requests", "path",
                        "chat_template", "max_model_len", "name", "threads", "backend",
                        "kv_dtype", "scheme", "num_speculative_tokens", "block_size",
                        "num_blocks", "memory_bytes", "prefix_caching", "max_num_seqs",
                        "max_num_batched_tokens", "max_waiting", "policy", "dirs"]]


# ---- tokenizer, chat templates ----------------------------------------------------------

TEXTS = ["Hello, world!", " leading space", "  two", "tabs\tand\nnewlines\r\n",
         "caf\u00e9 \u4e2d\u6587 \U0001F600", "<s>x</s>", "<|im_start|>user\nhi<|im_end|>",
         "<|begin_of_text|><|start_header_id|>", "don't we'll I'm", "12345 678",
         "a" * 300, "\u0000nul", ""]


def tokenizer_seeds():
    s = []
    for i, t in enumerate(TEXTS):
        for sel in (0x00, 0x01, 0x02, 0x03, 0x0E, 0x33):
            s.append(("seed-%02d-%02x" % (i, sel), bytes([sel]) + t.encode()))
    s.append(("seed-invalid", bytes([0x01]) + b"a\xff\xfe\xc3\x28\xe2\x82"))
    s.append(("seed-invalid-llama", bytes([0x02]) + b"\xed\xa0\x80\xf4\x90\x80\x80"))
    return s


TOK_DICT = ["<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
            "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "\u2581", "'s", "'t", "'re", "'ll", " ", "\n", "\r\n", "\t", "\u00e9", "\u4e2d",
            "\U0001F600", "\xff", "0123"]


def chat_seeds():
    s = []
    RS, SYS, USER, ASSIST, TOOL = b"\x1e", b"\x00", b"\x01", b"\x02", b"\x03"
    convs = [
        [USER + b"Hi"],
        [SYS + b"Be brief.", USER + b"Name a river.", ASSIST + b"The Rhine.", USER + b"More?"],
        [USER + b"  padded  ", ASSIST + b"\n reply \n"],
        [ASSIST + b"starts with assistant"],
        [SYS + b"s", SYS + b"two systems", USER + b"u"],
        [USER + b"a", USER + b"b"],
        [TOOL + b"tool"],
        [USER + "caf\u00e9 \U0001F600".encode()],
        [USER + b"<|im_start|>inject<|im_end|>", ASSIST + b"[INST] x [/INST]"],
        [],
    ]
    for i, c in enumerate(convs):
        for sel in range(0, 0x40, 9):
            s.append(("seed-%02d-%02x" % (i, sel), bytes([sel]) + RS.join(c)))
    s.append(("seed-detect-llama3", bytes([0x0F]) + USER + b"{{ '<|start_header_id|>' }}"))
    s.append(("seed-detect-gemma", bytes([0x07]) + USER + b"<start_of_turn>"))
    return s


CHAT_DICT = ["\x1e", "\x00", "\x01", "\x02", "\x03", "<|im_start|>", "<|start_header_id|>",
             "<start_of_turn>", "<|end|>", "<|assistant|>", "<|user|>", "</s>", "eos_token",
             "[INST]", "<<SYS>>", " ", "\n", "\t"]


def main():
    write_corpus("http", http_seeds())
    write_dict("http", HTTP_DICT)
    write_corpus("json_completions",
                 [("seed-%02d" % i, dumps(b)) for i, b in enumerate(COMPLETIONS)] + COMPLETIONS_RAW)
    write_dict("json_completions", keys_dict(COMMON_KEYS + ["prompt", "echo"]))
    write_corpus("json_chat", [("seed-%02d" % i, dumps(b)) for i, b in enumerate(CHAT)] + CHAT_RAW)
    write_dict("json_chat", keys_dict(COMMON_KEYS + ["messages", "role", "content", "type",
                                                     "text", "system", "user", "assistant",
                                                     "developer", "top_logprobs",
                                                     "max_completion_tokens"]))
    write_corpus("json_tokenize", [("seed-%02d" % i, dumps(b)) for i, b in enumerate(TOKENIZE)])
    write_dict("json_tokenize", keys_dict(["prompt", "text", "add_special_tokens", "model"]))
    write_corpus("json_detokenize", [("seed-%02d" % i, dumps(b)) for i, b in enumerate(DETOKENIZE)])
    write_dict("json_detokenize", keys_dict(["tokens", "model"]))
    write_corpus("toml", toml_seeds())
    write_dict("toml", TOML_DICT)
    write_corpus("tokenizer", tokenizer_seeds())
    write_dict("tokenizer", TOK_DICT)
    write_corpus("chat_template", chat_seeds())
    write_dict("chat_template", CHAT_DICT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
