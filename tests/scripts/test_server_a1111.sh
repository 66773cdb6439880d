#!/usr/bin/env bash
# `ernie-image serve`'s AUTOMATIC1111 API (/sdapi/v1/*) over a real socket, tiny model, CPU:
# tests/server/a1111_test.py.
# usage: test_server_a1111.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/a1111_test.py" "$1" "$2"
