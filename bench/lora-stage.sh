#!/usr/bin/env bash
# bench/lora-stage.sh ERNIE_IMAGE DIR: device-run.sh's `lora` stage (runs alone too). Writes a folder of the
# released sizes with random bf16 weights and a rank-32 LoRA on every block projection (bench/make_random_lora.py,
# written by the reference safetensors library), then `bench --model` at 1024², 8 steps: bf16 without and with
# the LoRA (twice each, to see the noise), and fp8 and int8 (--quantize) without it and with it, both ways
# (--lora-apply-mode immediately: merged, then quantized; at_runtime: the 8-bit base plus a side GEMM).
# With the LoRA, --lora-switch also times freeing the DiT and loading it again with the adapter (what a server
# does for another LoRA set; the loads read through the pinned base-weight cache): lora_switch_s. The folder is read once first (page cache). DIR is removed
# at the end.
set -u
B=$1
D=$2
. "$(dirname "$0")/stage_util.sh"
random_model "$B" "$D" || exit 1
python3 "$(dirname "$0")/make_random_lora.py" "$D/lora.safetensors" --rank 32 || exit 1
cat "$D"/model/*/*.safetensors "$D/lora.safetensors" > /dev/null
run() {  # run NAME ARGS...: one bench, its numbers on one line
  local name=$1
  shift
  "$B" bench --model "$D/model" --json "$@" > "$D/b.json" 2> "$D/b.err" ||
    { echo "error: $name: $(tail -3 "$D/b.err")"; return 1; }
  echo "$name: $(grep -oE '"(step_s|dit_load_s|lora_switch_s|pinned_base_gib|peak_gib|dit_device_gib|loras)": [-0-9.e+]+' "$D/b.json" |
    tr -d '"' | tr '\n' ' ')"
}
L="--lora $D/lora.safetensors:0.8 --lora-switch"
run "bf16 base" --offload none
# shellcheck disable=SC2086
run "bf16 lora" --offload none $L
run "bf16 base again" --offload none
# shellcheck disable=SC2086
run "bf16 lora again" --offload none $L
run "fp8 base" --offload none --quantize fp8
# shellcheck disable=SC2086
run "fp8 lora (merged, then quantized)" --offload none --quantize fp8 $L
# shellcheck disable=SC2086
run "fp8 lora (at runtime: side GEMM)" --offload none --quantize fp8 --lora-apply-mode at_runtime $L
run "int8 base" --offload none --quantize int8
# shellcheck disable=SC2086
run "int8 lora (merged, then quantized)" --offload none --quantize int8 $L
# shellcheck disable=SC2086
run "int8 lora (at runtime: side GEMM)" --offload none --quantize int8 --lora-apply-mode at_runtime $L
rm -rf "$D"
