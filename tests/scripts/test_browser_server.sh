#!/usr/bin/env bash
# The `ernie-image serve` web page in headless Chromium (Debian's /usr/bin/chromium, driven by
# playwright-core from npm): prompt, custom size, Generate, progress bar, live previews, image, download link,
# the header back to idle, img2img, a batch with a LoRA, the gallery rebuilt after a reload, Reuse parameters,
# a dropped PNG filling the form (tests/browser/ui_test.mjs); the screenshot goes to <build dir>/server-ui.png.
# Labelled `browser`.
# usage: test_browser_server.sh <ernie-image binary> <tests/data>
set -euo pipefail
bin="$1"; data="$2"
here="$(cd "$(dirname "$0")/.." && pwd)"
[ -x /usr/bin/chromium ] || { echo "FAIL: /usr/bin/chromium is missing; run scripts/setup.sh --tests"; exit 1; }
. "$here/scripts/serve_tiny.sh"
npm_ready playwright-core
start_tiny_server "$bin" "$data" --lora-dir "$data/samplers-lora/lora"
node "$here/browser/ui_test.mjs" "$url" "$(dirname "$bin")/server-ui.png" "$data"
stop_tiny_server
