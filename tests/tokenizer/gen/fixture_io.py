"""Escaping shared by the Python fixture generators: one record per line, fields separated
by tabs; inside a field backslash, tab, newline and carriage return are written as \\\\, \\t,
\\n, \\r and other control bytes as \\xHH. Non-ASCII bytes are written as they are (the files
are UTF-8 where the text is). tests/tokenizer/fixtures.c reads the format back."""

_NAMED = {0x5C: "\\\\", 0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def esc(s: bytes) -> str:
    out = bytearray()
    for b in s:
        if b in _NAMED:
            out += _NAMED[b].encode()
        elif b < 0x20 or b == 0x7F:
            out += b"\\x%02x" % b
        else:
            out.append(b)
    return out.decode("utf-8", errors="surrogateescape")
