#!/usr/bin/env bash
# `ernie-image serve` against issue 45's attacks on the guard (bodies promised and never sent, a greedy client,
# 256 event streams, a 10,000-part body), over loopback: tests/server/guard_test.py.
# usage: test_server_guard.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/guard_test.py" "$1" "$2"
