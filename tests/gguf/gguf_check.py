#!/usr/bin/python3
"""An independent GGUF reader, written from the format description, used by the gguf suite
to check that files weir writes are read the same way by a second implementation.

usage: gguf_check.py FILE
Prints one line per fact (version, each key with its type, each tensor with its type, shape
and offset, the data offset) and, for tokenizers, checks that every gpt2 merge joins two
existing tokens into an existing token and that every llama piece longer than one character
can be built from two shorter pieces. Ends with "OK", or exits 1 with "FAIL: reason"."""
import struct
import sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
              "u64", "i64", "f64"]
# ggml type: (block elements, block bytes)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
          14: (256, 210), 20: (32, 18), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
          27: (1, 8), 28: (1, 8), 30: (1, 2)}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class Reader:
    def __init__(self, data):
        self.b = data
        self.p = 0

    def take(self, fmt):
        n = struct.calcsize(fmt)
        if self.p + n > len(self.b):
            fail("truncated at %d" % self.p)
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += n
        return v

    def string(self):
        n = self.take("<Q")
        if self.p + n > len(self.b):
            fail("string past the end at %d" % self.p)
        s = self.b[self.p:self.p + n]
        self.p += n
        return s.decode("utf-8")

    def value(self, t):
        if t in SCALARS:
            return self.take(SCALARS[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("<I")
            n = self.take("<Q")
            return [self.value(et) for _ in range(n)]
        fail("unknown value type %d" % t)


def main():
    data = open(sys.argv[1], "rb").read()
    r = Reader(data)
    if r.take("<I") != 0x46554747:
        fail("bad magic")
    version = r.take("<I")
    n_tensors = r.take("<Q")
    n_kv = r.take("<Q")
    print("version %d" % version)
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        t = r.take("<I")
        kv[key] = r.value(t)
        print("kv %s %s" % (key, TYPE_NAMES[t]))
    align = kv.get("general.alignment", 32)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        t = r.take("<I")
        off = r.take("<Q")
        tensors.append((name, t, ne, off))
    data_offset = (r.p + align - 1) // align * align
    print("data_offset %d" % data_offset)
    for name, t, ne, off in tensors:
        if t not in BLOCKS:
            fail("tensor %s: type %d" % (name, t))
        be, bb = BLOCKS[t]
        if ne[0] % be:
            fail("tensor %s: row not a block multiple" % name)
        size = ne[0] // be * bb
        for d in ne[1:]:
            size *= d
        if off % align or data_offset + off + size > len(data):
            fail("tensor %s: bad offset %d" % (name, off))
        print("tensor %s %d %s %d" % (name, t, ",".join(str(d) for d in ne), off))

    toks = kv.get("tokenizer.ggml.tokens")
    model = kv.get("tokenizer.ggml.model")
    if toks is not None:
        index = {s: i for i, s in enumerate(toks)}
        if len(index) != len(toks):
            fail("duplicate tokens")
        types = kv.get("tokenizer.ggml.token_type", [1] * len(toks))
        if model == "gpt2":
            for m in kv["tokenizer.ggml.merges"]:
                a, b = m.split(" ")
                if a not in index or b not in index or a + b not in index:
                    fail("merge %r does not join two tokens into a token" % m)
            print("merges %d" % len(kv["tokenizer.ggml.merges"]))
        elif model == "llama":
            if len(kv["tokenizer.ggml.scores"]) != len(toks):
                fail("scores and tokens differ in length")
            for i, s in enumerate(toks):
                if types[i] != 1 or len(s) <= 1:
                    continue
                if not any(s[:k] in index and s[k:] in index for k in range(1, len(s))):
                    fail("piece %r cannot be built from two pieces" % s)
            print("pieces ok")
        for key in ("bos_token_id", "eos_token_id"):
            v = kv.get("tokenizer.ggml." + key)
            if v is None or not 0 <= v < len(toks):
                fail(key)
    print("OK")


main()
