#!/usr/bin/env bash
# `ernie-image serve` against hostile clients over loopback (slowloris, header flood, framing, auth, an
# abandoned synchronous request): tests/server/hostile_test.py.
# usage: test_server_hostile.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/hostile_test.py" "$1" "$2"
