#!/usr/bin/env bash
# bench/gguf-stage.sh ERNIE_IMAGE DIR: device-run.sh's `gguf` stage (runs alone too). Writes a folder of the
# released sizes with random bf16 weights, converts its DiT to Q8_0 and Q4_K GGUFs (`convert -o x.gguf`, timed),
# reads them back with the reference reader when one is installed (gguf-py: names, shapes, types, de-quantized
# values against the engine's), then `bench` at 1024², 8 steps, cfg 1: the folder (bf16) and each GGUF DiT
# (`--diffusion-model`), resident (`--offload none`), and the Q4_K one as generate runs it by default (text
# encoder freed first): step_s, dit_device_gib, peak_gib. DIR is removed at the end.
set -u
B=$1
D=$2
. "$(dirname "$0")/stage_util.sh"
random_model "$B" "$D" || exit 1
for t in q8_0 q4_k; do
  s=$(now)
  "$B" convert -m "$D/model" -o "$D/dit-$t.gguf" --dtype "$t" -q || { echo "error: convert --dtype $t"; exit 1; }
  echo "convert --dtype $t: $(since "$s") s, $(gib "$(stat -c %s "$D/dit-$t.gguf")") GiB"
done
python3 "$(dirname "$0")/gguf_check.py" "$D/dit-q4_k.gguf" "$D/dit-q8_0.gguf" || echo "gguf_check exit $?"
cat "$D"/model/*/*.safetensors "$D"/*.gguf > /dev/null
run() {  # run NAME ARGS...: one bench, its numbers on one line
  local name=$1
  shift
  "$B" bench --model "$D/model" --steps 8 --cfg 1 --repeat 2 --json "$@" > "$D/b.json" 2> "$D/b.err" ||
    { echo "error: $name: $(tail -3 "$D/b.err")"; return 1; }
  echo "$name: $(grep -oE '"(step_s|total_s|dit_load_s|peak_gib|dit_device_gib)": [-0-9.e+]+' "$D/b.json" |
    tr -d '"' | tr '\n' ' ')"
}
run "bf16 folder" --offload none
run "Q8_0 gguf" --offload none --diffusion-model "$D/dit-q8_0.gguf"
run "Q4_K gguf" --offload none --diffusion-model "$D/dit-q4_k.gguf"
run "bf16 folder again" --offload none
run "Q4_K gguf, default offload (text encoder freed first)" --diffusion-model "$D/dit-q4_k.gguf"
run "Q4_K gguf, --offload blocks" --offload blocks --diffusion-model "$D/dit-q4_k.gguf"
rm -rf "$D"
