#!/usr/bin/env bash
# bench/cards-stage.sh ERNIE_IMAGE DIR: device-run.sh's `cards` stage, the recipes by card size. A folder of
# the released sizes with random bf16 weights and its fp8 file, then `bench` under --max-vram 8, 12, 16 and 24
# (the allocator capped to stand in for a smaller card; --max-vram picks the least offloading that fits) at
# 1024²: Turbo (8 steps, cfg 1) and the 50-step model's cfg 4 (4 steps: its seconds per step). DIR is removed.
set -u
. "$(dirname "$0")/stage_util.sh"
B=$1
D=$2
random_model "$B" "$D" || exit 1
convert_fp8 "$B" "$D" fp8.safetensors || exit 1
for cap in ${CAPS:-8 12 16 24}; do
  for model in model fp8.safetensors; do
    for run in "8 1" "4 4"; do
      read -r steps cfg <<< "$run"
      echo "## bench --model $model --max-vram $cap --steps $steps --cfg $cfg"
      "$B" bench --model "$D/$model" --max-vram "$cap" --steps "$steps" --cfg "$cfg" --repeat 1 --json 2>&1 |
        grep -E '"(offload|vae_tiling|peak_gib|step_s|total_s)"|rror'
    done
  done
done
rm -rf "$D"
