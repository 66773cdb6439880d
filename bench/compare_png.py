#!/usr/bin/env python3
"""compare_png.py REF.png OTHER.png...: per image against REF, max abs difference, PSNR and cosine of the
centred pixels (8-bit RGB PNGs as ernie-image writes them). Uses Pillow when present, else a small decoder."""
import struct
import sys
import zlib

import numpy as np


def decode(path):
    try:
        from PIL import Image
        return np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)
    except ImportError:
        pass
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path + ": not a PNG"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color == 2, path + ": only 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, bpp, stride = zlib.decompress(idat), 3, 3 * w
    out = np.zeros((h, stride), dtype=np.int64)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(h):
        f = raw[y * (stride + 1)]
        row = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int64)
        if f == 1:  # Sub: a running sum per channel
            row = np.cumsum(row.reshape(-1, bpp), axis=0).reshape(-1) % 256
        elif f == 2:
            row = (row + prev) % 256
        elif f in (3, 4):
            r = row.tolist()
            p = prev.tolist()
            for i in range(stride):
                a = r[i - bpp] if i >= bpp else 0
                b = p[i]
                if f == 3:
                    r[i] = (r[i] + (a + b) // 2) % 256
                else:
                    c = p[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    r[i] = (r[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) % 256
            row = np.array(r, dtype=np.int64)
        out[y] = row
        prev = row
    return out.reshape(h, w, 3).astype(np.float64)


ref = decode(sys.argv[1])
for path in sys.argv[2:]:
    img = decode(path)
    d = img - ref
    mse = float(np.mean(d * d))
    a, b = (img - 127.5).ravel(), (ref - 127.5).ravel()
    cos = float(a @ b / np.sqrt((a @ a) * (b @ b)))
    psnr = float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
    print(f"{path}: max abs {np.max(np.abs(d)):.0f}, PSNR {psnr:.2f} dB, cosine {cos:.6f} (against {sys.argv[1]})")
