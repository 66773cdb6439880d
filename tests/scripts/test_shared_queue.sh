#!/usr/bin/env bash
# The Redis-backed shared queue end to end: redis-server, nginx, 2 api nodes, 3 workers on the tiny model (CPU):
# tests/server/shared_queue_test.py. Skips when redis-server or nginx is missing.
# usage: test_shared_queue.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if ! "$1" --version | grep -q "Redis queue"; then echo "SKIP: built without Redis (-DERNIE_REDIS=OFF)"; exit 0; fi
exec timeout 600 python3 "$here/server/shared_queue_test.py" "$1" "$2"
