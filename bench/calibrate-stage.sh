#!/usr/bin/env bash
# bench/calibrate-stage.sh ERNIE_IMAGE DIR: device-run.sh's `calibrate` stage. Writes a model folder of the
# released sizes with random bf16 weights under DIR, converts it to fp8 twice -- with dynamic per-token
# activation scales, and with static ones from `--calibrate` (two prompts, CALIBRATE_STEPS steps at 1024²
# on the GPU; timed) -- then generates one 1024² image from the folder (bf16) and from each file and
# compares the fp8 images with the bf16 one (bench/compare_png.py), and times `bench` on each file.
# Random weights: the images are noise, and the comparison is only a proxy for the released weights.
set -u
B=$1
D=$2
. "$(dirname "$0")/stage_util.sh"
random_model "$B" "$D" || exit 1
printf '# calibration prompts\na red fox in the snow, photograph\na lighthouse at dusk, oil painting\n' > "$D/prompts.txt"
# 2 prompts x CALIBRATE_STEPS steps at 1024² on the GPU, then the convert.
convert_fp8 "$B" "$D" static.safetensors --device cuda --calibrate "$D/prompts.txt" \
  --calibrate-steps "${CALIBRATE_STEPS:-8}" || exit 1
convert_fp8 "$B" "$D" dynamic.safetensors || exit 1
for m in model dynamic.safetensors static.safetensors; do
  "$B" generate --model "$D/$m" -p "a cat sitting on a red sofa" --steps 8 --cfg 1 --seed 7 --device cuda \
    -o "$D/$m.png" -q || echo "error: generate $m"
done
python3 "$(dirname "$0")/compare_png.py" "$D/model.png" "$D/dynamic.safetensors.png" "$D/static.safetensors.png"
for m in dynamic static; do
  echo "## bench --model $m.safetensors --steps 8 --cfg 1 --repeat 3"
  "$B" bench --model "$D/$m.safetensors" --steps 8 --cfg 1 --repeat 3 --json 2>&1 |
    grep -E '"(step_s|total_s|peak_gib|denoise_s)"|error'
done
rm -rf "$D"
