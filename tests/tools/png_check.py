#!/usr/bin/env python3
"""Checks that a PNG (a browser screenshot) is not blank: decodes it with the standard library
(zlib, the five PNG row filters) and requires enough non-background pixels and colours.

  png_check.py FILE.png [--min-ink 0.02] [--min-colours 8]

Exit 0 when it passes, 1 naming what is missing.
"""
import argparse
import struct
import sys
import zlib
from typing import List, Tuple


def decode(path: str) -> Tuple[int, int, int, List[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB/RGBA/grey PNG, not interlaced."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, width, height, bpp = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or interlace != 0 or colour not in (0, 2, 4, 6):
                raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour {colour})")
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: List[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("png")
    parser.add_argument("--min-ink", type=float, default=0.02)
    parser.add_argument("--min-colours", type=int, default=8)
    args = parser.parse_args()
    width, height, bpp, rows = decode(args.png)
    background = rows[0][:bpp]
    ink = 0
    colours = set()
    step = max(1, height // 400)  # every few rows: fast enough in pure Python
    sampled = 0
    for y in range(0, height, step):
        row = rows[y]
        for x in range(0, width * bpp, bpp * 2):
            px = row[x:x + bpp]
            sampled += 1
            if px != background:
                ink += 1
                if len(colours) < 10000:
                    colours.add(px)
    fraction = ink / max(sampled, 1)
    print(f"{args.png}: {width}x{height}, {100 * fraction:.1f}% non-background pixels, "
          f"{len(colours)} colours")
    if fraction < args.min_ink:
        print(f"{args.png}: blank: only {100 * fraction:.2f}% of the pixels differ from the "
              f"background", file=sys.stderr)
        return 1
    if len(colours) < args.min_colours:
        print(f"{args.png}: only {len(colours)} colours", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
