#!/usr/bin/env bash
# `ernie-image serve`'s history (repeated fetches, eviction by count and bytes), response_format url with
# /v1/files/, and live preview events, over a real socket, tiny model, CPU: tests/server/history_test.py.
# usage: test_server_history.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$here/server/history_test.py" "$1" "$2"
