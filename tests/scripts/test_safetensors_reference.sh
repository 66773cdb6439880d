#!/usr/bin/env bash
# The files ernie-image writes load with the reference safetensors library (Python): convert outputs of the
# tiny fixture in each weight format, the fixture itself, and a random-model folder of the released widths
# (one DiT block, two text-encoder layers; headers and layout only, its tensors are large). Skipped (exit 77) where python3 or its
# safetensors package is missing. Args: <ernie-image binary> <tests/data>
set -euo pipefail
bin=$1
model=$2/tiny-ernie-image/model
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v python3 >/dev/null || ! python3 -c "import safetensors" 2>/dev/null; then
  echo "skipped: python3 with the safetensors package is not installed"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for dt in bf16 fp8 int8; do
  "$bin" convert --model "$model" -o "$out/tiny-$dt.safetensors" --dtype "$dt" -q
done
python3 "$here/check_safetensors_reference.py" "$out" "$model"
"$bin" random-model -o "$out/random" --template "$model" --dit-layers 1 --text-encoder-layers 2 >/dev/null
python3 "$here/check_safetensors_reference.py" --header-only "$out/random"
