#!/usr/bin/env bash
# Sets up (only what building and running need), builds the CLI, and generates an image with the bundled
# tiny model (random weights: the image is noise by design).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DERNIE_TESTS=OFF -DERNIE_BENCH=OFF >/dev/null
cmake --build build -j "$(nproc)" --target ernie-image
./build/ernie-image doctor --model tests/data/tiny-ernie-image/model
mkdir -p out
./build/ernie-image generate --model tests/data/tiny-ernie-image/model -p "a cat" -W 64 -H 64 --steps 4 -o out/tiny.png
