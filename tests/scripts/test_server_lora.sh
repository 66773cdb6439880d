#!/usr/bin/env bash
# `ernie-image serve --lora-dir` over a real socket, tiny model, CPU: tests/server/lora_test.py.
# usage: test_server_lora.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/lora_test.py" "$1" "$2"
