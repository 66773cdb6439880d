#!/usr/bin/env bash
# The official OpenAI SDK (npm `openai`, tests/browser/package.json) against `ernie-image serve` on the tiny
# model: images.edit (multipart, with and without a mask), images.generate, a 400 and a 401
# (tests/browser/openai_sdk_test.mjs). Needs node and npm: labelled `browser` with the web page test.
# usage: test_openai_sdk.sh <ernie-image binary> <tests/data>
set -euo pipefail
bin="$1"; data="$2"
here="$(cd "$(dirname "$0")/.." && pwd)"
. "$here/scripts/serve_tiny.sh"
npm_ready openai
start_tiny_server "$bin" "$data" --api-key sdk-test-key
node "$here/browser/openai_sdk_test.mjs" "${url%/}" sdk-test-key "$data" || { tail -20 "$log.err"; exit 1; }
stop_tiny_server
