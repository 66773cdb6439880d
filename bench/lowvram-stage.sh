#!/usr/bin/env bash
# bench/lowvram-stage.sh ERNIE_IMAGE DIR: device-run.sh's `lowvram` stage. Writes a model folder of the
# released sizes with random bf16 weights under DIR (no prompt enhancer), converts it to fp8, then on the
# fp8 file: `doctor` (the memory each low-VRAM mode needs), `bench` at the Turbo shape (8 steps, cfg 1)
# resident, with --offload blocks and under --max-vram 8 and 6, and one image generated resident and with
# --offload blocks (streaming changes nothing: compare_png.py should report identical images). The bf16
# folder under --max-vram 8 for comparison. DIR is removed at the end.
set -u
. "$(dirname "$0")/stage_util.sh"
B=$1
D=$2
random_model "$B" "$D" || exit 1
convert_fp8 "$B" "$D" fp8.safetensors || exit 1
echo "## doctor --model fp8.safetensors"
"$B" doctor --model "$D/fp8.safetensors" 2>&1 | grep -iE "memory|fits|needs|gib|too small"
bench() {  # bench <label> <model> <args...>
  local label=$1 model=$2
  shift 2
  echo "## bench $label --steps 8 --cfg 1 --repeat 2 $*"
  "$B" bench --model "$model" --steps 8 --cfg 1 --repeat 2 "$@" --json 2>&1 |
    grep -E '"(offload|estimated_peak_gib|peak_gib|te_device_gib|dit_device_gib|upload_gbps|step_s|total_s)"|rror'
}
bench fp8.safetensors "$D/fp8.safetensors" --offload none
bench fp8.safetensors "$D/fp8.safetensors" --offload blocks
bench fp8.safetensors "$D/fp8.safetensors" --max-vram 8
bench fp8.safetensors "$D/fp8.safetensors" --max-vram 6
bench "folder (bf16)" "$D/model" --max-vram 8
for mode in none blocks; do
  "$B" generate --model "$D/fp8.safetensors" -p "a cat sitting on a red sofa" --steps 8 --cfg 1 --seed 7 \
    --device cuda --offload "$mode" -o "$D/$mode.png" -q || echo "error: generate --offload $mode"
done
python3 "$(dirname "$0")/compare_png.py" "$D/none.png" "$D/blocks.png"
rm -rf "$D"
