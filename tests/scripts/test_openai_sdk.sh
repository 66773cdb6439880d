#!/usr/bin/env bash
# The official OpenAI SDK (npm `openai`, tests/browser/package.json) against `ernie-image serve` on the tiny
# model: images.edit (multipart, with and without a mask), images.generate, a 400 and a 401
# (tests/browser/openai_sdk_test.mjs). Needs node and npm: labelled `browser` with the web page test.
# usage: test_openai_sdk.sh <ernie-image binary> <tests/data>
set -euo pipefail
bin="$1"; data="$2"
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$here/browser/node_modules/openai/package.json" ]; then
  (cd "$here/browser" && npm ci --no-audit --no-fund --loglevel=error)
fi
log="$(mktemp)"
"$bin" serve --model "$data/tiny-ernie-image/model" --port 0 --threads 1 --api-key sdk-test-key >"$log" 2>"$log.err" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -f "$log" "$log.err"' EXIT
for _ in $(seq 1 600); do
  grep -q "listening on" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log.err"; echo "FAIL: server exited"; exit 1; }
  sleep 0.1
done
url="$(grep -o 'http://[^ ]*' "$log" | head -n1)"
[ -n "$url" ] || { echo "FAIL: server did not start"; exit 1; }
node "$here/browser/openai_sdk_test.mjs" "${url%/}" sdk-test-key "$data" || { tail -20 "$log.err"; exit 1; }
kill -TERM $pid
wait $pid
echo "server exited with 0 after SIGTERM"
