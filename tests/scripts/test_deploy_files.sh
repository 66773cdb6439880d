#!/usr/bin/env bash
# deploy/ (nginx, Kubernetes, KEDA): rendered, `nginx -t`, parsed and checked; tests/scripts/check_deploy.py.
# usage: test_deploy_files.sh <ernie-image binary> <tests/data>
set -euo pipefail
exec python3 "$(dirname "$0")/check_deploy.py" "$1"
