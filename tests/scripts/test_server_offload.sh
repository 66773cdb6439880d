#!/usr/bin/env bash
# `ernie-image serve --offload text-encoder` over a real socket, tiny model, CPU: tests/server/offload_test.py.
# usage: test_server_offload.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/offload_test.py" "$1" "$2"
