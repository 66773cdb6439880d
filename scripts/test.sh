#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the CPU + CUDA build (GPU tests skip without a device), the same
# tests under AddressSanitizer, and a short libFuzzer smoke run. Prints each stage's time at the end, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
# Idle OpenMP threads sleep instead of spinning: ctest runs tests side by side on few cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

STAGES=()
T_ALL=$(date +%s)
stage() {  # stage NAME COMMAND...: runs it, records its time, fails the script when it fails
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  STAGES+=("$name $(( $(date +%s) - t0 )) $([ $rc -eq 0 ] && echo ok || echo FAILED)")
  return $rc
}
report() {
  echo "stage times (s):"
  for s in "${STAGES[@]}"; do printf '  %-14s %6s  %s\n' $s; done
  printf '  %-14s %6s\n' total $(( $(date +%s) - T_ALL ))
}
trap report EXIT

stage setup scripts/setup.sh --tests

# The release build, warnings as errors (users build without -Werror).
stage configure cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DERNIE_TESTS=ON -DERNIE_BENCH=ON \
  -DERNIE_WERROR=ON >/dev/null
stage build cmake --build build -j "$JOBS"
stage tests ctest --test-dir build --output-on-failure -j "$JOBS"

# AddressSanitizer + UBSan, CPU only, with clang: bad inputs, the server under load, the golden tests; the
# libFuzzer targets build in the same tree from the same objects (one sanitized build of the library, not two).
# -O1 with line tables only compiles 2.5x faster than -O2 -g and still gives symbolized stacks.
stage asan-build bash -c 'CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DERNIE_CUDA=OFF -DERNIE_SANITIZE=ON -DERNIE_FUZZ=ON -DERNIE_WERROR=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" >/dev/null && cmake --build build-asan -j '"$JOBS"
stage asan-tests env ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$JOBS" \
  -LE 'gpu|browser'

# libFuzzer smoke run of every fuzz target, FUZZ_SECONDS each.
fuzz_all() {
  local f name corpus
  for f in build-asan/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus="tests/fuzz/corpus/${name#fuzz_}"
    mkdir -p "build-asan/corpus-$name"
    echo "fuzz smoke: $name"
    "$f" -max_total_time="${FUZZ_SECONDS:-10}" -max_len=1048576 -rss_limit_mb=2048 "build-asan/corpus-$name" \
      $( [ -d "$corpus" ] && echo "$corpus" ) 2>&1 | tail -n 3
    [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
  done
}
stage fuzz fuzz_all
echo "all tests passed"
