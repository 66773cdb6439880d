#!/usr/bin/env bash
# `ernie-image serve` under load on loopback, tiny model, CPU: tests/server/load_test.py
# (200 requests from 20 clients, a third malformed; memory back near idle; SIGTERM -> exit 0).
# usage: test_server_load.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/load_test.py" "$1" "$2"
