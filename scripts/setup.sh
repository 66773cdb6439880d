#!/usr/bin/env bash
# Installs the Debian packages ernie-image needs: to build and run it (no arguments), and with --tests also
# what the test suite needs (GoogleTest, clang for the fuzzers, Chromium and playwright-core for the web
# page's browser test, dpkg-dev and file for the Debian package's test, redis-server and nginx for the
# shared-queue tests). Idempotent; quiet when done.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git python3
  libpcre2-dev nlohmann-json3-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libcpp-httplib-dev libcli11-dev
  libopenblas-dev libomp-dev libssl-dev libhiredis-dev
)
TEST_PKGS=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang lld libclang-rt-dev
  chromium
  dpkg-dev file
  python3-numpy python3-pil python3-setuptools
  redis-server nginx
)
tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1; PKGS+=("${TEST_PKGS[@]}") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$tests" -eq 1 ] || exit 0
# The web page's browser test (tests/scripts/test_browser_server.sh): playwright-core from npm drives
# Debian's chromium; node_modules stays out of git.
browser_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
if command -v npm >/dev/null && [ ! -f "$browser_dir/node_modules/playwright-core/package.json" ]; then
  (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
