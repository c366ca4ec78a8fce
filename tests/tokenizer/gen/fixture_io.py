"""Escaping shared by the fixture generators: one record per line, fields separated by tabs;
inside a field backslash, tab, newline and carriage return are written \\\\, \\t, \\n, \\r.
tests/tokenizer/fixtures.c reads the same format."""


def esc(s: bytes) -> str:
    out = []
    for b in s:
        if b == 0x5C:
            out.append("\\\\")
        elif b == 0x09:
            out.append("\\t")
        elif b == 0x0A:
            out.append("\\n")
        elif b == 0x0D:
            out.append("\\r")
        elif b < 0x20 or b == 0x7F:
            out.append("\\x%02x" % b)
        else:
            out.append(chr(b) if b < 0x80 else None)
    # Non-ASCII bytes are written as they are (the file is UTF-8 where the text is).
    res = bytearray()
    i = 0
    for b in s:
        if b >= 0x80:
            res.append(b)
        else:
            res += out[i].encode()
        i += 1
    return res.decode("utf-8", errors="surrogateescape")
