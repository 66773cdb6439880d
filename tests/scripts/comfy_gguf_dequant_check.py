#!/usr/bin/env python3
"""De-quantizes every tensor of GGUF files ernie-image wrote with ComfyUI-GGUF's own de-quantizer (its
dequant.py, run with torch) and compares each with ernie-image's de-quantization of the same file
(`ernie-image convert --model X.gguf -o X.safetensors --dtype f32`).

Run on a machine with torch (the GPU machine; ComfyUI-GGUF is not installed there and is never committed here):

  python3 comfy_gguf_dequant_check.py COMFYUI_GGUF_DIR OUT.json X.gguf X.safetensors [Y.gguf Y.safetensors ...]

COMFYUI_GGUF_DIR holds dequant.py from city96/ComfyUI-GGUF (checked at 795e45156ece99afbc3efef911e63fcb46e6a20d).
dequant.py imports llama.cpp's `gguf` package only for the GGML type ids and block sizes (and for a numpy
fallback this check never reaches); a stand-in with those numbers (ggml.h) is installed under that name when
the package is absent. The GGUF header is parsed here (format: ggml docs/gguf.md)."""
import enum
import json
import struct
import sys
import types

import numpy as np
import torch
from safetensors.numpy import load_file

GGML_TYPES = {  # name: (id, block elements, block bytes), as ggml.h and ggml-common.h define them
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
    "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
    "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292),
    "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136), "BF16": (30, 1, 2),
}


def install_gguf_stand_in():
    try:
        import gguf  # noqa: F401
        return "gguf package"
    except ImportError:
        pass
    m = types.ModuleType("gguf")
    m.GGMLQuantizationType = enum.IntEnum("GGMLQuantizationType", {k: v[0] for k, v in GGML_TYPES.items()})
    m.GGML_QUANT_SIZES = {m.GGMLQuantizationType[k]: (v[1], v[2]) for k, v in GGML_TYPES.items()}
    m.quants = types.SimpleNamespace(dequantize=None)
    sys.modules["gguf"] = m
    try:
        import tqdm  # noqa: F401
    except ImportError:
        sys.modules["tqdm"] = types.SimpleNamespace(tqdm=types.SimpleNamespace(write=print))
    return "stand-in"


def read_gguf(path):
    b = open(path, "rb").read()
    at = 0

    def take(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, b, at)
        at += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal at
        n = take("Q")
        s = b[at:at + n].decode()
        at += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert b[:4] == b"GGUF", path
    at = 4
    assert take("I") == 3
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take("Q") for _ in range(take("I"))]
        infos.append((name, ne, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    data = (at + align - 1) // align * align
    return meta, infos, b, data


def main():
    comfy_dir, out = sys.argv[1], sys.argv[2]
    pairs = list(zip(sys.argv[3::2], sys.argv[4::2]))
    stand_in = install_gguf_stand_in()
    sys.path.insert(0, comfy_dir)
    import dequant  # ComfyUI-GGUF's
    import gguf

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    by_id = {v[0]: (k, v[1], v[2]) for k, v in GGML_TYPES.items()}
    report = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
              "gguf": stand_in, "files": []}
    ok = True
    for gguf_path, ours_path in pairs:
        meta, infos, raw, data = read_gguf(gguf_path)
        ours = load_file(ours_path)
        f = {"file": gguf_path, "architecture": meta.get("general.architecture"), "tensors": 0, "by_type": {},
             "max_abs_diff": 0.0, "worst": None}
        for name, ne, tid, off in infos:
            tname, block, bb = by_id[tid]
            shape = tuple(reversed(ne))
            n = int(np.prod(ne))
            nbytes = n // block * bb
            buf = np.frombuffer(raw, dtype=np.uint8, count=nbytes, offset=data + off)
            if tname in ("F32", "F16"):
                theirs = torch.from_numpy(buf.copy()).view(torch.float32 if tname == "F32" else torch.float16)
                theirs = theirs.reshape(shape).float()
            else:
                rows = torch.from_numpy(buf.copy()).to(dev).reshape(-1, ne[0] // block * bb)
                theirs = dequant.dequantize(rows, gguf.GGMLQuantizationType(tid), torch.Size(shape),
                                            dtype=torch.float32).float().cpu()
            mine = torch.from_numpy(ours[name]).float()
            assert tuple(mine.shape) == shape, (name, mine.shape, shape)
            d = float((theirs - mine).abs().max()) if n else 0.0
            f["tensors"] += 1
            t = f["by_type"].setdefault(tname, {"tensors": 0, "max_abs_diff": 0.0})
            t["tensors"] += 1
            t["max_abs_diff"] = max(t["max_abs_diff"], d)
            if d >= f["max_abs_diff"]:
                f["max_abs_diff"], f["worst"] = d, name
            ok = ok and d <= 1e-6 * max(1.0, float(mine.abs().max()))
        report["files"].append(f)
    report["all_equal_within_1e-6"] = ok
    json.dump(report, open(out, "w"), indent=1)
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
