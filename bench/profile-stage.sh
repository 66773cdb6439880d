#!/usr/bin/env bash
# Per-kernel GPU time of a DiT step (bf16 and fp8) and of prompt-enhancer decoding, from Nsight Compute
# (`ncu --clock-control none`, one metric: gpu__time_duration.sum). Called by bench/device-run.sh `profile`.
# Usage: bench/profile-stage.sh ERNIE_IMAGE_BINARY WORK_DIR (the raw ncu logs stay there)
set -u
B=$1; OUT=$2
mkdir -p "$OUT"
NCU=${NCU:-ncu}
export ERNIE_CACHE_DIR=${ERNIE_CACHE_DIR:-$OUT/cache}
run() {  # name, command...: kernels of the command summed by name
  local name=$1; shift
  $NCU --clock-control none --metrics gpu__time_duration.sum --csv --page raw "$@" > "$OUT/ncu-$name.csv" 2> "$OUT/ncu-$name.err"
  echo "## $name: $*"
  python3 "$(dirname "$0")/ncu_summary.py" "$OUT/ncu-$name.csv" || tail -5 "$OUT/ncu-$name.err"
}
for q in "" "--quantize fp8"; do  # fill the tuning cache first, so ncu sees only the real work
  $B bench --random --steps 1 --cfg 1 --repeat 1 $q --json > /dev/null 2>&1
done
run dit-bf16 $B bench --random --steps 1 --cfg 1 --repeat 1 --json
run dit-fp8 $B bench --random --steps 1 --cfg 1 --repeat 1 --quantize fp8 --json
run pe-decode $B bench-pe --random --size full --prompt-tokens 100 --new-tokens 16 --repeats 1 --device cuda
