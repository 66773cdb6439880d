#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the CPU + CUDA build (GPU tests skip without a
# device), the same tests under AddressSanitizer, and a short libFuzzer smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
JOBS=${JOBS:-$(nproc)}
# Idle OpenMP threads sleep instead of spinning: ctest runs tests side by side on few cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DERNIE_TESTS=ON -DERNIE_BENCH=ON >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"

# AddressSanitizer + UBSan, CPU only: bad inputs, the server under load, the golden tests. -O1 with line
# tables only compiles 2.5x faster than -O2 -g and still gives symbolized stacks.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DERNIE_CUDA=OFF -DERNIE_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE 'gpu|browser'

# libFuzzer smoke run of every fuzz target (clang).
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DERNIE_CUDA=OFF \
  -DERNIE_TESTS=OFF -DERNIE_FUZZ=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" >/dev/null
cmake --build build-fuzz -j "$JOBS" --target fuzz_all
for f in build-fuzz/tests/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="tests/fuzz/corpus/${name#fuzz_}"
  mkdir -p "build-fuzz/corpus-$name"
  echo "fuzz smoke: $name"
  "$f" -max_total_time="${FUZZ_SECONDS:-15}" -max_len=1048576 -rss_limit_mb=2048 "build-fuzz/corpus-$name" \
    $( [ -d "$corpus" ] && echo "$corpus" ) 2>&1 | tail -n 3
done
echo "all tests passed"
