#!/usr/bin/env bash
# bench/convert-stage.sh ERNIE_IMAGE DIR: device-run.sh's `convert` stage (runs alone too). Writes a model
# folder of the released sizes with random bf16 weights under DIR (no prompt enhancer), times
# `convert --dtype fp8` and `--dtype bf16` (the latter only when the disk has room; each file is deleted
# after use), and each one's load from the page cache (`cat` first, then `bench --load-only`). `sync` is
# timed separately: the convert times are to the page cache. DIR is removed at the end.
# CONVERT_ARGS: extra random-model options (e.g. "--dit-layers 4 --text-encoder-layers 2" for a smaller
# model); BENCH_DEVICE_ARGS: extra bench options (e.g. "--device cpu --dtype f32" without a GPU).
set -u
B=$1
D=$2
. "$(dirname "$0")/stage_util.sh"
avail() { df -B1 --output=avail "$D" | tail -1 | tr -d ' '; }

rm -rf "$D" && mkdir -p "$D" || exit 1
echo "## disk $D: $(df -h --output=fstype,size,avail "$D" | tail -1 | tr -s ' ')," \
  "memory: $(free -g | awk '/Mem/ { print $2 " GiB, " $7 " GiB available" }'), cores: $(nproc)"

# Warms the page cache with the files of $1 (a file or a folder), then times the engine's load.
load() {
  local t files
  if [ -d "$1" ]; then files=$(find "$1" -name '*.safetensors' | sort); else files=$1; fi
  t=$(now)
  # shellcheck disable=SC2086
  cat $files > /dev/null
  echo "cat $2: $(gib "$(du -cb $files | tail -1 | cut -f1)") GiB in $(since "$t") s"
  # shellcheck disable=SC2086
  "$B" bench --model "$1" --load-only --json ${BENCH_DEVICE_ARGS:-} > "$D/load.json" 2> "$D/load.err" ||
    { echo "error: bench --load-only $2:"; tail -5 "$D/load.err"; return 1; }
  echo "load $2: $(grep -oE '"(load_s|load_gib|load_gbps|load_device_gib|te_load_s|dit_load_s|vae_load_s)": [-0-9.e+]+' \
    "$D/load.json" | tr -d '":' | awk '{ printf "%s %.3f  ", $1, $2 }')"
}

t=$(now)
# shellcheck disable=SC2086
"$B" random-model -o "$D/model" -q ${CONVERT_ARGS:-} || exit 1
t=$(now)
sync
echo "sync after random-model: $(since "$t") s"
folder=$(du -sb "$D/model" | cut -f1)
load "$D/model" folder

for dt in fp8 bf16; do
  # fp8 keeps ~53% of the bytes (the kept bf16 layers, the embeddings, the VAE); leave 2 GiB spare.
  need=$(awk -v f="$folder" -v dt="$dt" 'BEGIN { printf "%.0f", (dt == "fp8" ? 0.6 : 1.01) * f + 2 * 2^30 }')
  if [ "$(avail)" -lt "$need" ]; then
    echo "skip $dt: $(gib "$(avail)") GiB free on $D, $(gib "$need") GiB needed"
    continue
  fi
  f="$D/model-$dt.safetensors"
  echo "## convert --dtype $dt"
  "$B" convert -m "$D/model" -o "$f" --dtype "$dt" -q || { echo "error: convert $dt failed"; continue; }
  t=$(now)
  sync
  echo "sync after convert $dt: $(since "$t") s"
  load "$f" "$dt"
  rm -f "$f"
done
rm -rf "$D"
