#!/usr/bin/env bash
# bench/cards-stage.sh ERNIE_IMAGE DIR: device-run.sh's `cards` stage, the recipes by card size. A folder of
# the released sizes with random bf16 weights and its fp8 file, then `bench` under --max-vram 8, 12, 16 and 24
# (the allocator capped to stand in for a smaller card; --max-vram picks the least offloading that fits) at
# 1024²: Turbo (8 steps, cfg 1) and the 50-step model's cfg 4 (4 steps: its seconds per step). MODELS picks
# from "model fp8.safetensors q4_k" (q4_k: the folder with its DiT converted to a Q4_K GGUF, every block
# quantized); CAPS the caps. DIR is removed.
set -u
. "$(dirname "$0")/stage_util.sh"
B=$1
D=$2
random_model "$B" "$D" || exit 1
MODELS=${MODELS:-model fp8.safetensors}
case " $MODELS " in *" fp8.safetensors "*) convert_fp8 "$B" "$D" fp8.safetensors || exit 1 ;; esac
case " $MODELS " in *" q4_k "*)
  "$B" convert -m "$D/model" -o "$D/dit-q4_k.gguf" --dtype q4_k --quantize-all-blocks -q || exit 1 ;; esac
for cap in ${CAPS:-8 12 16 24}; do
  for model in $MODELS; do
    args=(--model "$D/$model")
    [ "$model" = q4_k ] && args=(--model "$D/model" --diffusion-model "$D/dit-q4_k.gguf")
    for run in "8 1" "4 4"; do
      read -r steps cfg <<< "$run"
      echo "## bench --model $model --max-vram $cap --steps $steps --cfg $cfg"
      "$B" bench "${args[@]}" --max-vram "$cap" --steps "$steps" --cfg "$cfg" --repeat 1 --json 2>&1 |
        grep -E '"(offload|vae_tiling|peak_gib|step_s|total_s)"|rror'
    done
  done
done
rm -rf "$D"
