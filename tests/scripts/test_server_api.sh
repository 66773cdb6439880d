#!/usr/bin/env bash
# `ernie-image serve` API over a real socket, tiny model, CPU: tests/server/api_test.py.
# usage: test_server_api.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/api_test.py" "$1" "$2"
