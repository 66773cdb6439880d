"""Writes a random LoRA for the released DiT with the reference `safetensors` library (torch), in diffusers/PEFT
key names: rank R on every block projection (to_q, to_k, to_v, to_out.0, gate_proj, up_proj, linear_fc2 of all
36 layers), bf16, no alpha (so alpha = rank), A ~ N(0, 1/in), B ~ N(0, 0.01). For speed runs: the values do not
matter, the shapes and the count do.

usage: make_random_lora.py OUT.safetensors [--rank 32] [--layers 36] [--hidden 4096] [--ffn 12288]"""
import argparse

import torch
from safetensors.torch import save_file


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=12288)
    a = p.parse_args()
    g = torch.Generator().manual_seed(0)
    h, f, r = a.hidden, a.ffn, a.rank
    shapes = {"self_attention.to_q": (h, h), "self_attention.to_k": (h, h), "self_attention.to_v": (h, h),
              "self_attention.to_out.0": (h, h), "mlp.gate_proj": (f, h), "mlp.up_proj": (f, h),
              "mlp.linear_fc2": (h, f)}
    t = {}
    for i in range(a.layers):
        for m, (out, inp) in shapes.items():
            k = f"transformer.layers.{i}.{m}"
            t[k + ".lora_A.weight"] = (torch.randn(r, inp, generator=g) / inp ** 0.5).to(torch.bfloat16)
            t[k + ".lora_B.weight"] = (torch.randn(out, r, generator=g) * 0.01).to(torch.bfloat16)
    save_file(t, a.out, metadata={"format": "pt"})
    print(f"{a.out}: {len(t)} tensors, rank {r}, {sum(x.numel() for x in t.values()) * 2 / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
