#!/usr/bin/env bash
# The same behaviour from `serve` and `serve --queue redis://…` (issue 40): tests/server/both_servers_test.py.
# usage: test_server_both.sh <ernie-image binary> <tests/data>
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec timeout 600 python3 "$here/server/both_servers_test.py" "$1" "$2"
