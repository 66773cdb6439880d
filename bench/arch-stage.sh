#!/usr/bin/env bash
# bench/arch-stage.sh MODE: device-run.sh's architecture stages (issue: every GPU since Ampere).
#   ptx-tests  a build with only compute_80 PTX (build-ptx/, JIT-compiled to the H200 at load), then the whole
#              GPU test suite on it: the portable kernels (mma.sync attention, register GEMV, no programmatic
#              dependent launch) must pass everything the Hopper build passes.
#   ptx-bench  bench of the Turbo and the 50-step workloads (bf16, random full-size weights) with the Hopper
#              build (build/) and the compute_80 build (build-ptx/): the cost of the portable kernels.
#   all        the release build (-DERNIE_CUDA_ARCHS=all) of the CLI: its build time on this machine, its size,
#              and the machine code it holds per architecture (cuobjdump --list-elf).
set -u
MODE=$1
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
build() {  # build DIR ARCHS TARGETS...
  local dir=$1 archs=$2 t0
  shift 2
  t0=$(date +%s)
  cmake -S . -B "$dir" -G Ninja -DERNIE_DEPS_PREFIX="$PWD/.deps" -DERNIE_CUDA_ARCHS="$archs" -DERNIE_REDIS=OFF > "$dir.log" 2>&1 &&
    ninja -C "$dir" -j16 "$@" >> "$dir.log" 2>&1 || { tail -40 "$dir.log"; return 1; }
  echo "build $dir (ERNIE_CUDA_ARCHS=$archs, $*): $(( $(date +%s) - t0 )) s"
}
case "$MODE" in
  ptx-tests)
    build build-ptx 80-virtual ernie-image ernie_gpu_tests || exit 1
    ./build-ptx/ernie-image doctor 2>&1 | sed -n '/^GPU/,/^  device selection/p'
    t0=$(date +%s)
    ./build-ptx/tests/ernie_gpu_tests 2>&1 | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests ran"
    echo "compute_80 GPU tests: $(( $(date +%s) - t0 )) s" ;;
  ptx-bench)
    [ -x build-ptx/ernie-image ] || build build-ptx 80-virtual ernie-image || exit 1
    for b in build build-ptx; do
      for args in "--steps 8 --cfg 1 --repeat 2" "--steps 50 --cfg 4 --repeat 1"; do
        echo "## $b/ernie-image bench --random $args --json"
        ./$b/ernie-image bench --random $args --json 2>&1 | grep -E '"(step_s|total_s|denoise_s|peak_gib)"|rror'
      done
    done ;;
  all)
    build build-all all ernie-image || exit 1
    ls -l build-all/ernie-image | awk '{ printf "binary: %.1f MiB\n", $5 / 2^20 }'
    echo "machine code per architecture (cuobjdump --list-elf, kernels' ELF files):"
    cuobjdump --list-elf build-all/ernie-image | grep -oE "sm_[0-9]+a?" | sort | uniq -c
    echo "PTX:"; cuobjdump --list-ptx build-all/ernie-image | grep -oE "sm_[0-9]+a?" | sort | uniq -c ;;
esac
