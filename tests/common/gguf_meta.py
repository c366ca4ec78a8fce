"""A GGUF file's metadata read and rewritten (the GGUF spec: header, key-value pairs, tensor
infos, padding to the alignment, tensor data), for tests that need the trained model with one
key changed (a chat template). Tensor data offsets are relative to the data section, so the
data is copied as it is and only the section's start moves, re-aligned."""
import struct

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
STRING = 8
ARRAY = 9


def _read_value(b, at, t):
    if t in _SCALAR:
        fmt = _SCALAR[t]
        return struct.unpack_from(fmt, b, at)[0], at + struct.calcsize(fmt)
    if t == STRING:
        n = struct.unpack_from("<Q", b, at)[0]
        return b[at + 8:at + 8 + n].decode("utf-8", "replace"), at + 8 + n
    if t == ARRAY:
        et, n = struct.unpack_from("<IQ", b, at)
        at += 12
        out = []
        for _ in range(n):
            v, at = _read_value(b, at, et)
            out.append(v)
        return out, at
    raise ValueError("unknown GGUF type %d" % t)


def _string(s):
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def read(path):
    """(metadata dict, the raw bytes)."""
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", path
    _, _, n_kv = struct.unpack_from("<IQQ", b, 4)
    at = 24
    meta = {}
    for _ in range(n_kv):
        key, at = _read_value(b, at, STRING)
        t = struct.unpack_from("<I", b, at)[0]
        meta[key], at = _read_value(b, at + 4, t)
    return meta, b


def set_string(src, dst, key, value):
    """Writes a copy of the GGUF file src to dst with the string key set to value."""
    b = open(src, "rb").read()
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    at = 24
    kvs = []
    alignment = 32
    found = False
    for _ in range(n_kv):
        start = at
        k, at = _read_value(b, at, STRING)
        t = struct.unpack_from("<I", b, at)[0]
        v, at = _read_value(b, at + 4, t)
        if k == "general.alignment":
            alignment = v
        if k == key:
            kvs.append(_string(k) + struct.pack("<I", STRING) + _string(value))
            found = True
        else:
            kvs.append(b[start:at])
    if not found:
        kvs.append(_string(key) + struct.pack("<I", STRING) + _string(value))
    info_start = at
    for _ in range(n_tensors):
        _, at = _read_value(b, at, STRING)
        n_dims = struct.unpack_from("<I", b, at)[0]
        at += 4 + 8 * n_dims + 4 + 8
    infos = b[info_start:at]
    data_start = (at + alignment - 1) // alignment * alignment
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    pad = (-len(head)) % alignment
    with open(dst, "wb") as f:
        f.write(head + b"\0" * pad + b[data_start:])
