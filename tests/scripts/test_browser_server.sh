#!/usr/bin/env bash
# The `ernie-image serve` web page in headless Chromium (Debian's /usr/bin/chromium, driven by
# playwright-core from npm): prompt, Generate, progress bar, image, download link; the screenshot goes
# to <build dir>/server-ui.png. Labelled `browser`.
# usage: test_browser_server.sh <ernie-image binary> <tests/data>
set -euo pipefail
bin="$1"; data="$2"
here="$(cd "$(dirname "$0")/.." && pwd)"
[ -x /usr/bin/chromium ] || { echo "FAIL: /usr/bin/chromium is missing; run scripts/setup.sh --tests"; exit 1; }
if [ ! -f "$here/browser/node_modules/playwright-core/package.json" ]; then
  (cd "$here/browser" && npm ci --no-audit --no-fund --loglevel=error)
fi
log="$(mktemp)"
"$bin" serve --model "$data/tiny-ernie-image/model" --port 0 --threads 1 >"$log" 2>"$log.err" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -f "$log" "$log.err"' EXIT
for _ in $(seq 1 600); do
  grep -q "listening on" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log.err"; echo "FAIL: server exited"; exit 1; }
  sleep 0.1
done
url="$(grep -o 'http://[^ ]*' "$log" | head -n1)"
[ -n "$url" ] || { echo "FAIL: server did not start"; exit 1; }
node "$here/browser/ui_test.mjs" "$url" "$(dirname "$bin")/server-ui.png" "$data"
kill -TERM $pid
wait $pid
echo "server exited with 0 after SIGTERM"
