#!/usr/bin/python3
"""A second dequantizer of GGUF's block types, in numpy, written from the format description
(the block layouts as GGUF stores them; see docs/models.md) and kept apart from the C code in
sdk/include/weir/numeric.h, so that a misread layout shows as a disagreement between two
independent readings. test_kquant compares weir_dequantize_row against it on random blocks.

usage: kquant_ref.py TYPE IN OUT
  TYPE  q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs
  IN    whole blocks of TYPE, back to back
  OUT   the values, little-endian f32, block after block
Every product is computed in float32, in the order the format defines it: the sub-block scale
first (d * sc, an f32), then times the quant, then minus the sub-block min (dmin * m). Exits 1
with a message for an unknown type or a size that is not whole blocks."""
import sys

import numpy as np

F32 = np.float32

# The 16 values of the IQ4 non-linear codebook, indexed by a 4-bit code.
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                       1, 13, 25, 38, 53, 69, 89, 113], dtype=F32)

# type: (elements per block, bytes per block)
BLOCKS = {
    "q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24),
    "q8_0": (32, 34), "iq4_nl": (32, 18),
    "q2_K": (256, 84), "q3_K": (256, 110), "q4_K": (256, 144), "q5_K": (256, 176),
    "q6_K": (256, 210), "iq4_xs": (256, 136),
}


def half(blk, at):
    """The f16 at byte `at` of every block, as an (nblocks, 1) float32 column."""
    return blk[:, at:at + 2].copy().view("<f2").astype(F32)


def nibbles_32(qs):
    """16 bytes per block -> 32 codes: the low nibbles are elements 0..15, the high 16..31."""
    return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)


def fifth_bits(qh4):
    """4 bytes per block, read as a little-endian u32 -> 32 bits, bit i for element i."""
    word = qh4.copy().view("<u4").astype(np.int64)
    return ((word >> np.arange(32)) & 1).astype(np.int32)


def crumbs(qs, nb):
    """Q2_K/Q3_K low bits: 64 bytes = two halves of 32; element 128h + 32j + l is bits
    2j, 2j+1 of byte 32h + l."""
    q = qs.reshape(nb, 2, 1, 32) >> (2 * np.arange(4)).reshape(1, 1, 4, 1)
    return (q & 3).reshape(nb, 256).astype(np.int32)


def k4_scales_mins(s, nb):
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins. Sub-blocks 0..3: the low
    six bits of bytes 0..3 (scales) and 4..7 (mins). Sub-blocks 4..7: low four bits from the
    nibbles of bytes 8..11 (scale low nibble, min high nibble), top two bits from the top
    two bits of bytes 0..3 (scales) and 4..7 (mins)."""
    s = s.astype(np.int32)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc.astype(F32), mn.astype(F32)


def q3_scales(s, nb):
    """Q3_K: 12 bytes -> 16 six-bit scales, stored plus 32. The low four bits of scales 0..7
    are the low nibbles of bytes 0..7, of scales 8..15 their high nibbles; the top two bits
    of scale i + 4k (i < 4) are bits 2k, 2k+1 of byte 8 + i."""
    s = s.astype(np.int32)
    lo = np.concatenate([s[:, 0:8] & 15, s[:, 0:8] >> 4], axis=1)
    hi = ((s[:, None, 8:12] >> (2 * np.arange(4)).reshape(1, 4, 1)) & 3).reshape(nb, 16)
    return ((lo | (hi << 4)) - 32).astype(F32)


def dequant(kind, raw):
    be, bb = BLOCKS[kind]
    nb = len(raw) // bb
    blk = np.frombuffer(raw, dtype=np.uint8).reshape(nb, bb)
    if kind == "q8_0":
        return blk[:, 2:34].view(np.int8).astype(F32) * half(blk, 0)
    if kind == "q4_0":
        return (nibbles_32(blk[:, 2:18]) - 8).astype(F32) * half(blk, 0)
    if kind == "q4_1":
        return nibbles_32(blk[:, 4:20]).astype(F32) * half(blk, 0) + half(blk, 2)
    if kind == "q5_0":
        q = nibbles_32(blk[:, 6:22]) | (fifth_bits(blk[:, 2:6]) << 4)
        return (q - 16).astype(F32) * half(blk, 0)
    if kind == "q5_1":
        q = nibbles_32(blk[:, 8:24]) | (fifth_bits(blk[:, 4:8]) << 4)
        return q.astype(F32) * half(blk, 0) + half(blk, 2)
    if kind == "iq4_nl":
        return half(blk, 0) * IQ4_VALUES[nibbles_32(blk[:, 2:18])]
    if kind == "q2_K":
        sc = blk[:, 0:16].astype(np.int32)
        d, dmin = half(blk, 80), half(blk, 82)
        scale = np.repeat(d * (sc & 15).astype(F32), 16, axis=1)
        mins = np.repeat(dmin * (sc >> 4).astype(F32), 16, axis=1)
        return scale * crumbs(blk[:, 16:80], nb).astype(F32) - mins
    if kind == "q3_K":
        hbit = (blk[:, 0:32].reshape(nb, 1, 1, 32).astype(np.int32) >>
                (4 * np.arange(2).reshape(1, 2, 1, 1) + np.arange(4).reshape(1, 1, 4, 1))) & 1
        q = crumbs(blk[:, 32:96], nb) - 4 * (1 - hbit.reshape(nb, 256))
        scale = np.repeat(half(blk, 108) * q3_scales(blk[:, 96:108], nb), 16, axis=1)
        return scale * q.astype(F32)
    if kind in ("q4_K", "q5_K"):
        d, dmin = half(blk, 0), half(blk, 2)
        sc, mn = k4_scales_mins(blk[:, 4:16], nb)
        qs = blk[:, 48:176] if kind == "q5_K" else blk[:, 16:144]
        # 4 chunks of 32 bytes; chunk c holds sub-block 2c in its low nibbles and 2c + 1 in
        # its high nibbles.
        qs = qs.reshape(nb, 4, 1, 32).astype(np.int32)
        q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(nb, 256)
        if kind == "q5_K":  # bit s of byte l of qh is the fifth bit of element 32s + l
            qh = blk[:, 16:48].reshape(nb, 1, 32).astype(np.int32)
            q = q | ((((qh >> np.arange(8).reshape(1, 8, 1)) & 1).reshape(nb, 256)) << 4)
        scale = np.repeat(d * sc, 32, axis=1)
        mins = np.repeat(dmin * mn, 32, axis=1)
        return scale * q.astype(F32) - mins
    if kind == "q6_K":
        # Halves of 128; in half h, element 32j + l takes its low four bits from byte
        # 64h + 32(j % 2) + l of ql (low nibble for j < 2, high for j >= 2) and its top two
        # bits from bits 2j, 2j+1 of byte 32h + l of qh.
        ql = blk[:, 0:128].reshape(nb, 2, 1, 2, 32).astype(np.int32)
        lo = np.concatenate([ql & 15, ql >> 4], axis=2).reshape(nb, 2, 4, 32)
        qh = blk[:, 128:192].reshape(nb, 2, 1, 32).astype(np.int32)
        hi = (qh >> (2 * np.arange(4)).reshape(1, 1, 4, 1)) & 3
        q = ((lo | (hi << 4)) - 32).reshape(nb, 256)
        sc = blk[:, 192:208].view(np.int8).astype(F32)
        scale = np.repeat(half(blk, 208) * sc, 16, axis=1)
        return scale * q.astype(F32)
    if kind == "iq4_xs":
        sh = blk[:, 2:4].copy().view("<u2").astype(np.int32)
        sl = blk[:, 4:8].astype(np.int32)
        lo = np.stack([sl & 15, sl >> 4], axis=2).reshape(nb, 8)
        hi = (sh >> (2 * np.arange(8))) & 3
        scale = half(blk, 0) * ((lo | (hi << 4)) - 32).astype(F32)
        qs = blk[:, 8:136].reshape(nb, 8, 16).astype(np.int32)
        codes = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(nb, 256)
        return np.repeat(scale, 32, axis=1) * IQ4_VALUES[codes]
    raise KeyError(kind)


def main(argv):
    if len(argv) != 4 or argv[1] not in BLOCKS:
        print("usage: kquant_ref.py TYPE IN OUT (TYPE one of %s)" % " ".join(BLOCKS))
        return 1
    raw = open(argv[2], "rb").read()
    bb = BLOCKS[argv[1]][1]
    if len(raw) % bb:
        print("%s: %d bytes is not a whole number of %s blocks of %d bytes" %
              (argv[2], len(raw), argv[1], bb))
        return 1
    with np.errstate(over="ignore", invalid="ignore"):
        out = dequant(argv[1], raw).astype("<f4")
    open(argv[3], "wb").write(out.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
