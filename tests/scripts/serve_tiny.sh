# Sourced by the npm-driven script tests: `start_tiny_server BIN DATA [serve flags...]` runs `BIN serve` on the
# tiny model on a free loopback port and sets `url` and `pid` (killed on exit); `stop_tiny_server` sends
# SIGTERM and fails unless it exits 0. `npm_ready PACKAGE` installs tests/browser's packages when missing.
npm_ready() {
  if [ ! -f "$here/browser/node_modules/$1/package.json" ]; then
    (cd "$here/browser" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

start_tiny_server() {
  local bin="$1" data="$2"
  shift 2
  log="$(mktemp)"
  "$bin" serve --model "$data/tiny-ernie-image/model" --port 0 --threads 1 "$@" >"$log" 2>"$log.err" &
  pid=$!
  trap 'kill -9 $pid 2>/dev/null || true; rm -f "$log" "$log.err"' EXIT
  for _ in $(seq 1 600); do
    grep -q "listening on" "$log" && break
    kill -0 $pid 2>/dev/null || { cat "$log.err"; echo "FAIL: server exited"; exit 1; }
    sleep 0.1
  done
  url="$(grep -o 'http://[^ ]*' "$log" | head -n1)"
  [ -n "$url" ] || { echo "FAIL: server did not start"; exit 1; }
}

stop_tiny_server() {
  kill -TERM $pid
  wait $pid
  echo "server exited with 0 after SIGTERM"
}
