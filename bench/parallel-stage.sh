#!/usr/bin/env bash
# bench/parallel-stage.sh B DIR: device-run.sh's `parallel` stage (issue 28, several GPUs in one host).
#  1. doctor's GPU topology section (peer access, links, NCCL's version).
#  2. the GPU tests of the split (tests/gpu/test_cuda_parallel.cpp), the full-size one included: local ranks on one
#     GPU through device memory; NCCL's only with 2+ GPUs.
#  3. the CLI on the tiny model: generate with --parallel cfg --parallel-local 2 against a plain run (same seed):
#     the PNGs must match (compare_png.py: PSNR).
#  4. full size (random weights, DIR/model): the same comparison at 512², 8 steps, cfg 4, bf16.
#  5. with 2+ GPUs only: bench of 50 steps at cfg 4, 1024², one GPU against --gpus 0,1 --parallel cfg (the target of
#     issue 28: <= 6.6 s bf16), and generate's images of both compared.
set -u
B=$1
DIR=$2
. "$(dirname "$0")/stage_util.sh"
NGPU=$(nvidia-smi -L 2> /dev/null | wc -l)
echo "## GPUs: $NGPU"
echo "## doctor (topology)"
$B doctor 2>&1 | awk '/^GPU topology/ { p = 1; print; next } p && /^  / { print; next } { p = 0 }'
echo "## GPU tests: CudaParallel.*"
./build/tests/ernie_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='CudaParallel.*' 2>&1 |
  grep -E "^\[  (FAILED|PASSED|SKIPPED|     OK) |Failure|full-size|NCCL|rel_l2|Skipped" | head -40
TINY=tests/data/tiny-ernie-image/model
rm -rf "$DIR" && mkdir -p "$DIR"
common=(--prompt "a lighthouse at dusk" --seed 5 --steps 6 -W 64 -H 64 -q)
echo "## tiny: generate plain vs --parallel cfg --parallel-local 2 (cuda)"
$B generate -m $TINY "${common[@]}" --cfg 4 -o "$DIR/tiny-one.png" || echo "error: tiny plain"
$B generate -m $TINY "${common[@]}" --cfg 4 --parallel cfg --parallel-local 2 -o "$DIR/tiny-split.png" || echo "error: tiny split"
python3 bench/compare_png.py "$DIR/tiny-one.png" "$DIR/tiny-split.png"
$B generate -m $TINY "${common[@]}" --cfg 1 -o "$DIR/tiny-one-cfg1.png" || echo "error: tiny plain cfg 1"
$B generate -m $TINY "${common[@]}" --cfg 1 --parallel ulysses --parallel-local 2 -o "$DIR/tiny-ulysses.png" ||
  echo "error: tiny ulysses"
python3 bench/compare_png.py "$DIR/tiny-one-cfg1.png" "$DIR/tiny-ulysses.png"
echo "## full size (random weights): 512², 8 steps, cfg 4, bf16: plain vs --parallel-local 2"
t=$(now)
random_model "$B" "$DIR" || { echo "error: random-model"; exit 1; }
echo "random-model: $(since "$t") s"
full=(-m "$DIR/model" --prompt "a lighthouse at dusk" --seed 5 --steps 8 --cfg 4 -W 512 -H 512 -q --offload none)
t=$(now); $B generate "${full[@]}" -o "$DIR/full-one.png" || echo "error: full plain"; echo "plain: $(since "$t") s"
t=$(now); $B generate "${full[@]}" --parallel cfg --parallel-local 2 -o "$DIR/full-split.png" || echo "error: full split"
echo "split (local): $(since "$t") s"
python3 bench/compare_png.py "$DIR/full-one.png" "$DIR/full-split.png"
t=$(now); $B generate "${full[@]}" --parallel ulysses --parallel-local 2 -o "$DIR/full-ulysses.png" ||
  echo "error: full ulysses"
echo "ulysses (local): $(since "$t") s"
python3 bench/compare_png.py "$DIR/full-one.png" "$DIR/full-ulysses.png"
if [ "$NGPU" -ge 2 ]; then
  echo "## 2 GPUs: bench 50 steps cfg 4 1024², one GPU vs --gpus 0,1 --parallel cfg"
  for p in "" "--gpus 0,1 --parallel cfg"; do
    echo "# bench --random --steps 50 --cfg 4 $p"
    $B bench --random --steps 50 --cfg 4 --repeat 1 $p --json 2>&1 | grep -E '"(step_s|denoise_s|parallel|total_s)"|rror'
  done
  for p in "" "--gpus 0,1 --parallel ulysses"; do
    echo "# bench --random --steps 8 --cfg 1 --quantize fp8 $p (Turbo; target <= 0.45 s)"
    $B bench --random --steps 8 --cfg 1 --quantize fp8 --repeat 2 $p --json 2>&1 |
      grep -E '"(step_s|denoise_s|parallel|total_s)"|rror'
  done
  big=(-m "$DIR/model" --prompt "a lighthouse at dusk" --seed 5 --steps 50 --cfg 4 --offload none --progress json)
  $B generate "${big[@]}" -o "$DIR/big-one.png" 2>&1 | tail -1
  $B generate "${big[@]}" --gpus 0,1 --parallel cfg -o "$DIR/big-cfg.png" 2>&1 | tail -1
  python3 bench/compare_png.py "$DIR/big-one.png" "$DIR/big-cfg.png"
  echo "## 2 GPUs, --parallel data: serve's throughput is for the lead's load test (serve --gpus 0,1 --parallel data)"
else
  echo "## skipped: the 2-GPU runs (bench and images with --gpus 0,1 --parallel cfg): $NGPU GPU(s) here"
fi
