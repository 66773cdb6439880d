#!/usr/bin/env bash
# Cold start (issue 42): runs `ernie-image generate` as a fresh process N times and prints the wall time from
# process start to the PNG written (min / median / max), and the last run's `--progress json` breakdown
# (cuda_init_s, load_s per component, encode_s, denoise_s, decode_s).
# Usage: bench/cold-start.sh N BINARY GENERATE-ARGS...   e.g.
#   bench/cold-start.sh 5 ./build/ernie-image --model /tmp/rand-turbo -p "a cat" -o /tmp/cold.png
# The model's files should be in the page cache (run it once before, or `cat` them to /dev/null).
set -euo pipefail
n=$1 bin=$2
shift 2
times=()
last=""
for ((i = 0; i < n; ++i)); do
  t0=$(date +%s%N)
  last=$("$bin" generate "$@" --progress json | tail -1)
  t1=$(date +%s%N)
  times+=("$(( (t1 - t0) / 1000000 ))")  # ms
done
printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  printf "cold start, %d runs: min %.3f s, median %.3f s, max %.3f s\n", NR, v[1] / 1e3, v[int((NR + 1) / 2)] / 1e3, v[NR] / 1e3 }'
echo "last run: $last"
