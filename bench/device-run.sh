#!/usr/bin/env bash
# One call on the GPU machine: build (deps from .deps/, see scripts/fetch-device-deps.sh), then the stages
# named as arguments: tests (GPU tests), doctor, fullsize (CUDA vs CPU at full size), perf (kernel timings),
# bench (ernie-image bench runs), quant (8-bit weights vs bf16 at full size), convert (a full-size random
# folder converted to fp8 and bf16 files, and their load speed from the page cache; bench/convert-stage.sh),
# profile (per-kernel GPU time from ncu; bench/profile-stage.sh), pe (bench-pe: prompt-enhancer speed),
# calibrate (fp8 with static activation scales from convert --calibrate against dynamic ones;
# bench/calibrate-stage.sh), lowvram (an fp8 file under --offload blocks and --max-vram; bench/lowvram-stage.sh),
# policy (fp8 by the default policy against the MLP's gate/up kept bf16; bench/policy-stage.sh), gguf (Q8_0 and
# Q4_K GGUF DiTs from convert against bf16; bench/gguf-stage.sh), lora (a
# rank-32 LoRA: step time with and without it, bf16 and fp8, and the switch time; bench/lora-stage.sh), ptx-tests /
# ptx-bench / all (a compute_80-only build: GPU tests, speed against the Hopper build; the release build's time,
# size and machine code; bench/arch-stage.sh), cards (--max-vram 8/12/16/24 recipes; bench/cards-stage.sh),
# parallel (--parallel cfg: local ranks on one GPU, NCCL with 2+; bench/parallel-stage.sh).
# Logs go to $OUT (at most 8 files come back): build.log, tests.log, doctor.txt, perf.log, bench.log,
# quant.log, convert.log, profile.log, pe.log, calibrate.log, lowvram.log, policy.log, gguf.log, lora.log, power.csv. NO_BUILD=1 skips the build (an existing build/ is used, e.g. to try a stage on the CPU). The GPU machine builds without the Redis queue (-DERNIE_REDIS=OFF): its tests need a redis-server it lacks.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ernie-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=./build/ernie-image
T0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,driver_version --format=csv; } \
  > "$OUT/build.log" 2>&1
if [ -z "${NO_BUILD:-}" ]; then
  cmake -S . -B build -G Ninja -DERNIE_DEPS_PREFIX="$PWD/.deps" -DERNIE_REDIS=OFF >> "$OUT/build.log" 2>&1 &&
    ninja -C build -j16 ernie-image ernie_gpu_tests >> "$OUT/build.log" 2>&1 ||
    { tail -60 "$OUT/build.log"; exit 1; }
  echo "build done in $(( $(date +%s) - T0 )) s"
fi
for stage in "$@"; do
  case "$stage" in
    tests)
      ./build/tests/ernie_gpu_tests > "$OUT/tests.log" 2>&1
      echo "gpu tests exit $?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |dit.out|Failure|rel_l2" "$OUT/tests.log" | head -40 ;;
    doctor)
      { $B doctor --model tests/data/tiny-ernie-image/model; echo "exit $?"; echo; \
        $B doctor --model tests/data/tiny-ernie-image/model --json; echo "exit $?"; } > "$OUT/doctor.txt" 2>&1
      head -30 "$OUT/doctor.txt" ;;
    fullsize)  # CUDA bf16 vs CPU f32 at full size, random weights (minutes)
      ./build/tests/ernie_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='CudaFullSize.*' > "$OUT/fullsize.log" 2>&1
      echo "fullsize exit $?"; grep -E "full-size|FAILED|PASSED" "$OUT/fullsize.log" ;;
    perf)
      ./build/tests/ernie_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='CudaPerf.*' > "$OUT/perf.log" 2>&1
      grep -vE "^\[|^Running|^$" "$OUT/perf.log" ;;
    quant)  # fp8 / int8 weights vs bf16 at full size (DiT at 1024², text encoder; random weights), per-block table
      ./build/tests/ernie_gpu_tests --gtest_also_run_disabled_tests \
        --gtest_filter='CudaFullSize.DISABLED_DitQuantized1024:CudaFullSize.DISABLED_TextEncoderQuantized:CudaFullSize.DISABLED_DitFp8ErrorSources' \
        > "$OUT/quant.log" 2>&1
      echo "quant exit $?"; grep -E "full-size|block|FAILED|PASSED" "$OUT/quant.log" ;;
    bench)  # BENCH_SETS: ";"-separated argument sets (default: the bf16 Turbo and 50-step workloads), each may
      # start with NAME=value words for its environment (e.g. XDG_CACHE_HOME=/tmp/c: a fresh tuning cache)
      # The GPU's power draw, SM clock and throttle reasons every 200 ms while each set runs (power.csv).
      IFS=';' read -ra sets <<< "${BENCH_SETS:---steps 8 --cfg 1 --repeat 2;--steps 50 --cfg 4 --repeat 1}"
      for args in "${sets[@]}"; do
        echo "## ernie-image bench --random $args --json" >> "$OUT/bench.log"
        echo "## $args" >> "$OUT/power.csv"
        nvidia-smi --query-gpu=timestamp,power.draw,power.limit,clocks.sm,temperature.gpu,clocks_event_reasons.active \
          --format=csv,noheader -lms 200 >> "$OUT/power.csv" 2>&1 & SMI=$!
        read -ra words <<< "$args"; envs=()  # leading NAME=value words set the environment of that run
        while [ ${#words[@]} -gt 0 ] && [[ ${words[0]} =~ ^[A-Z_][A-Z0-9_]*= ]]; do envs+=("${words[0]}"); words=("${words[@]:1}"); done
        env "${envs[@]}" $B bench --random "${words[@]}" --json >> "$OUT/bench.log" 2>&1
        kill $SMI 2> /dev/null; wait $SMI 2> /dev/null
      done
      grep -E "##|_s\"|peak|tflops|fraction|error|exit|gib" "$OUT/bench.log"
      python3 bench/power_summary.py "$OUT/power.csv" ;;
    profile)  # per-kernel GPU time (ncu) of a bf16 and an fp8 DiT step and of prompt-enhancer decoding
      bench/profile-stage.sh "$B" /tmp/ernie-profile > "$OUT/profile.log" 2>&1
      echo "profile exit $?"; cat "$OUT/profile.log" | head -150 ;;
    pe)  # prompt-enhancer prefill and decode speed, full-size random weights (PE_ARGS replaces the defaults)
      $B bench-pe --random --size full --device cuda ${PE_ARGS:---prompt-tokens 1000 --new-tokens 128 --repeats 3} \
        >> "$OUT/pe.log" 2>&1
      echo "bench-pe exit $?"; tail -20 "$OUT/pe.log" ;;
    calibrate)  # random folder -> fp8 files with dynamic and calibrated static scales: accuracy and speed
      bench/calibrate-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-calibrate}" > "$OUT/calibrate.log" 2>&1
      echo "calibrate exit $?"; cat "$OUT/calibrate.log" | tail -20 ;;
    gguf)  # random folder -> Q8_0 and Q4_K GGUF DiTs: read back by gguf-py, step time and memory against bf16
      bench/gguf-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-gguf}" > "$OUT/gguf.log" 2>&1
      echo "gguf exit $?"; tail -20 "$OUT/gguf.log" ;;
    lora)  # random folder + rank-32 LoRA: bf16 and fp8 step time with and without it, merge and switch time
      bench/lora-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-lora}" > "$OUT/lora.log" 2>&1
      echo "lora exit $?"; tail -20 "$OUT/lora.log" ;;
    policy)  # random folder -> fp8 files by the default policy and with the MLP's gate/up kept bf16
      bench/policy-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-policy}" > "$OUT/policy.log" 2>&1
      echo "policy exit $?"; cat "$OUT/policy.log" | tail -40 ;;
    lowvram)  # random folder -> fp8 file: doctor, bench resident / --offload blocks / --max-vram 8 and 6
      bench/lowvram-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-lowvram}" > "$OUT/lowvram.log" 2>&1
      echo "lowvram exit $?"; cat "$OUT/lowvram.log" | tail -60 ;;
    ptx-tests|ptx-bench|all)  # compute_80-only build: GPU tests / bench against the Hopper build; the release build
      bench/arch-stage.sh "$stage" > "$OUT/$stage.log" 2>&1
      echo "$stage exit $?"; tail -40 "$OUT/$stage.log" ;;
    cards)  # --max-vram 8/12/16/24: bf16 folder and fp8 file, Turbo and cfg 4 (bench/cards-stage.sh)
      bench/cards-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-cards}" > "$OUT/cards.log" 2>&1
      echo "cards exit $?"; cat "$OUT/cards.log" | tail -80 ;;
    parallel)  # issue 28: doctor's topology, the split's GPU tests, generate plain vs --parallel cfg (local ranks on
      # one GPU; with 2+ GPUs also --gpus 0,1: bench and images); bench/parallel-stage.sh
      bench/parallel-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-parallel}" > "$OUT/parallel.log" 2>&1
      echo "parallel exit $?"; cat "$OUT/parallel.log" | tail -60 ;;
    convert)  # ~23 GB random bf16 folder -> convert fp8, bf16 (disk allowing) -> load each from the page cache
      bench/convert-stage.sh "$B" "${CONVERT_DIR:-/tmp/ernie-convert}" > "$OUT/convert.log" 2>&1
      echo "convert exit $?"; grep -E "^(##|random|wrote|convert|sync|cat|load|disk|skip|error)" "$OUT/convert.log" ;;
  esac
  echo "[$stage done at $(( $(date +%s) - T0 )) s]"
done
