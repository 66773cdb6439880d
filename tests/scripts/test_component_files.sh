#!/usr/bin/env bash
# Component files on the command line: generate and encode with --diffusion-model, --text-encoder, --vae and
# --tokenizer and no --model; the same text encoder output as the folder; a clear error when one is missing.
# Args: <ernie-image binary> <tests/data>
set -euo pipefail
bin=$1
model=$2/tiny-ernie-image/model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=(--diffusion-model "$model/transformer/diffusion_pytorch_model.safetensors"
       --text-encoder "$model/text_encoder/model.safetensors"
       --vae "$model/vae/diffusion_pytorch_model.safetensors"
       --tokenizer "$model/tokenizer/tokenizer.json")

"$bin" generate "${files[@]}" --device cpu -p "a cat" -W 64 -H 64 --steps 2 --seed 7 -o "$tmp/files.png" -q
"$bin" generate --model "$model" --device cpu -p "a cat" -W 64 -H 64 --steps 2 --seed 7 -o "$tmp/folder.png" -q
[ -s "$tmp/files.png" ] || { echo "FAIL: generate with component files wrote no image"; exit 1; }
# The pixels agree: the PNGs differ only in their metadata (the model path), so compare their IDAT data.
idat() { python3 -c 'import sys,struct
d=open(sys.argv[1],"rb").read()[8:];o=b""
while d:
  n,t=struct.unpack(">I4s",d[:8]);o+=d[8:8+n] if t==b"IDAT" else b"";d=d[12+n:]
sys.stdout.write(o.hex())' "$1"; }
if command -v python3 >/dev/null; then
  [ "$(idat "$tmp/files.png")" = "$(idat "$tmp/folder.png")" ] || { echo "FAIL: images differ"; exit 1; }
fi

"$bin" encode "${files[@]}" --device cpu -p "a cat" -o "$tmp/files.safetensors" -q
"$bin" encode --model "$model" --device cpu -p "a cat" -o "$tmp/folder.safetensors" -q
cmp -s "$tmp/files.safetensors" "$tmp/folder.safetensors" || { echo "FAIL: encode outputs differ"; exit 1; }

if out=$("$bin" generate --diffusion-model "$model/transformer/diffusion_pytorch_model.safetensors" \
         --vae "$model/vae/diffusion_pytorch_model.safetensors" --device cpu -p x -o "$tmp/x.png" 2>&1); then
  echo "FAIL: incomplete component files accepted"; exit 1
fi
case "$out" in *"missing: --text-encoder, --tokenizer"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
if out=$("$bin" generate --model "$model" --vae "$model/transformer/diffusion_pytorch_model.safetensors" \
         --device cpu -p x -o "$tmp/x.png" 2>&1); then
  echo "FAIL: a DiT accepted as --vae"; exit 1
fi
case "$out" in *"looks like an ERNIE-Image DiT"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
"$bin" doctor "${files[@]}" > "$tmp/doctor.txt" || true
grep -q "from $model/vae/diffusion_pytorch_model.safetensors" "$tmp/doctor.txt" ||
  { echo "FAIL: doctor does not name the component files"; cat "$tmp/doctor.txt"; exit 1; }
echo "component files CLI: ok"
