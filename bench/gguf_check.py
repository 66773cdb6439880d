"""Reads GGUF files written by `ernie-image convert -o x.gguf` with gguf-py (llama.cpp's own reader, the one
ComfyUI-GGUF uses) when it is installed: the header, every tensor's name, shape and type, and the values of a
few quantized tensors de-quantized by gguf-py's numpy code (statistics printed, for comparison with the
engine's own decoder, which the GPU tests check bit for bit against ComfyUI-GGUF's values)."""
import sys

try:
    import gguf
    from gguf.quants import dequantize
except ImportError as e:
    print(f"gguf_check: gguf-py is not installed here ({e}); skipped")
    sys.exit(0)

for path in sys.argv[1:]:
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    types = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    print(f"{path}: gguf-py reads {len(r.tensors)} tensors, architecture {arch}, types {types}")
    shown = 0
    for t in r.tensors:
        if t.tensor_type.name in ("F32", "BF16", "F16") or shown >= 2:
            continue
        v = dequantize(t.data, t.tensor_type)
        print(f"  {t.name} {t.tensor_type.name} shape {list(reversed([int(x) for x in t.shape]))}: "
              f"mean {v.mean():.6g} std {v.std():.6g} absmax {abs(v).max():.6g}")
        shown += 1
