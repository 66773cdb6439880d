#!/usr/bin/env bash
# bench/policy-stage.sh ERNIE_IMAGE DIR: device-run.sh's `policy` stage, fp8's accuracy against its speed
# under the keep policy. Writes a model folder of the released sizes with random bf16 weights under DIR (no
# prompt enhancer) and converts it to fp8 twice: by the default policy, and with the MLP's gate and up
# projections kept bf16 (`--keep mlp.gate_proj. --keep mlp.up_proj.`, which brings one full-size DiT forward
# within the issue's fp8 bounds: CudaFullSize.DISABLED_DitFp8ErrorSources). Generates one 1024² image from
# the folder (bf16) and from each file, compares them (compare_png.py), and times `bench` on each file at
# the Turbo shape (8 steps, cfg 1) and at 50 steps, cfg 4. Random weights: a proxy only. DIR is removed.
set -u
. "$(dirname "$0")/stage_util.sh"
B=$1
D=$2
random_model "$B" "$D" || exit 1
convert_fp8 "$B" "$D" default.safetensors || exit 1
convert_fp8 "$B" "$D" mlp-in-bf16.safetensors --keep mlp.gate_proj. --keep mlp.up_proj. || exit 1
for m in model default.safetensors mlp-in-bf16.safetensors; do
  "$B" generate --model "$D/$m" -p "a cat sitting on a red sofa" --steps 8 --cfg 1 --seed 7 --device cuda \
    -o "$D/$m.png" -q || echo "error: generate $m"
done
python3 "$(dirname "$0")/compare_png.py" "$D/model.png" "$D/default.safetensors.png" "$D/mlp-in-bf16.safetensors.png"
for m in default mlp-in-bf16; do
  for args in "--steps 8 --cfg 1 --repeat 2" "--steps 50 --cfg 4 --repeat 1"; do
    echo "## bench --model $m.safetensors $args"
    # shellcheck disable=SC2086
    "$B" bench --model "$D/$m.safetensors" $args --json 2>&1 | grep -E '"(step_s|total_s|peak_gib|dit_device_gib)"|rror'
  done
done
rm -rf "$D"
