#!/usr/bin/env bash
# bench runs Engine::generate (issue 40) and its JSON keeps every field it had as a second engine, plus the
# engine's phase and cold-start times. The tiny model on the CPU. Args: <ernie-image binary> <tests/data>
set -euo pipefail
bin=$1
model=$2/tiny-ernie-image/model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$model" --device cpu -W 64 -H 64 --prompt-tokens 7 --repeat 2 --json)

"$bin" bench "${common[@]}" --steps 3 > "$tmp/t2i.json"
"$bin" bench "${common[@]}" --steps 4 --cfg 4 --strength 0.5 > "$tmp/i2i.json"
"$bin" bench "${common[@]}" --load-only > "$tmp/load.json"

python3 - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
# The fields bench had before it ran through the engine (CPU, --model), and those the engine's hooks add.
old = """device dtype quantize attention width height steps cfg prompt_tokens weights parallel estimated_peak_gib offload
te_load_s te_device_gib loras dit_load_s dit_device_gib vae_load_s load_s load_gib load_gbps""".split()
old_run = """encode_s denoise_enqueue_s denoise_s denoise_runs_s step_s decode_s total_s dit_gemm_tflop
dit_attention_tflop dit_tflops_per_s fraction_of_789_tflops""".split()
new = "cuda_init_s".split()
new_run = "postprocess_s generate_s".split()
img2img = "strength img2img_steps vae_encode_s".split()
def load(n):
    return json.load(open(f"{d}/{n}.json"))
def want(name, j, fields):
    missing = sorted(set(fields) - set(j))
    extra = sorted(set(j) - set(fields))
    if missing or extra:
        sys.exit(f"FAIL {name}: missing {missing}, unexpected {extra}")
t2i, i2i, lo = load("t2i"), load("i2i"), load("load")
want("t2i", t2i, old + old_run + new + new_run)
want("img2img", i2i, old + old_run + new + new_run + img2img)
want("load-only", lo, old + new)
def close(a, b, what):
    if abs(a - b) > 1e-9 + 1e-6 * abs(b):
        sys.exit(f"FAIL {what}: {a} != {b}")
for name, j in (("t2i", t2i), ("img2img", i2i)):
    runs = j["steps"] - (j["steps"] - j["img2img_steps"] if "img2img_steps" in j else 0)
    close(j["step_s"] * runs, j["denoise_s"], name + " step_s * steps")
    close(j["load_s"], j["te_load_s"] + j["dit_load_s"] + j["vae_load_s"], name + " load_s")
    close(j["total_s"], j["encode_s"] + j.get("vae_encode_s", 0) + j["denoise_s"] + j["decode_s"], name + " total_s")
    if len(j["denoise_runs_s"]) != 2:
        sys.exit(f"FAIL {name}: {len(j['denoise_runs_s'])} timed runs, want --repeat 2")
    if not (0 < j["denoise_s"] and 0 < j["decode_s"] and 0 < j["encode_s"] and j["generate_s"] > 0):
        sys.exit(f"FAIL {name}: phase times {j}")
    if not (j["load_gib"] > 0 and j["te_device_gib"] > 0 and j["dit_device_gib"] > 0 and j["load_s"] > 0):
        sys.exit(f"FAIL {name}: load fields {j}")
if i2i["img2img_steps"] != 2 or not i2i["vae_encode_s"] > 0:
    sys.exit(f"FAIL img2img: {i2i['img2img_steps']} steps, vae_encode_s {i2i['vae_encode_s']}")
if t2i["device"] != "cpu" or not t2i["weights"].endswith("tiny-ernie-image/model"):
    sys.exit(f"FAIL t2i: device {t2i['device']}, weights {t2i['weights']}")
EOF

# Bad input: a clear error, no crash.
if out=$("$bin" bench --random --model "$model" --device cpu 2>&1); then echo "FAIL: --random with --model accepted"; exit 1; fi
case "$out" in *"exactly one of"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
if out=$("$bin" bench "${common[@]}" --lora-switch 2>&1); then echo "FAIL: --lora-switch without --lora accepted"; exit 1; fi
case "$out" in *"--lora-switch needs --lora"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
echo "bench fields: ok"
