#!/usr/bin/env bash
# `ernie-image serve` img2img, inpainting and OpenAI's /v1/images/edits over a real socket, tiny model, CPU:
# tests/server/img2img_test.py.
# usage: test_server_img2img.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/img2img_test.py" "$1" "$2"
