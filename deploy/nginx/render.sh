#!/usr/bin/env bash
# Writes OUT_DIR/nginx.conf: nginx on LISTEN_PORT (loopback) in front of the api nodes HOST:PORT..., with
# ernie-image.conf's locations, and every path (pid, logs, temp files) inside OUT_DIR, so that it runs without
# root: nginx -p OUT_DIR -e OUT_DIR/error.log -c OUT_DIR/nginx.conf -g 'daemon off;'
# usage: render.sh OUT_DIR LISTEN_PORT HOST:PORT [HOST:PORT...]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 OUT_DIR LISTEN_PORT HOST:PORT [HOST:PORT...]" >&2; exit 2; }
out="$1" port="$2"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out/tmp"
out="$(cd "$out" && pwd)"  # absolute: nginx reads relative paths from its prefix, not from here
{
  echo "worker_processes 1;"
  # as root, nginx would run its worker as nobody, who cannot write the temp files inside a private OUT_DIR
  if [ "$(id -u)" = 0 ]; then echo "user root;"; fi
  echo "pid $out/nginx.pid;"
  echo "error_log $out/error.log warn;"
  echo "events { worker_connections 1024; }"
  echo "http {"
  echo "    access_log $out/access.log;"
  for t in client_body proxy fastcgi uwsgi scgi; do echo "    ${t}_temp_path $out/tmp/$t;"; done
  echo "    upstream ernie_api {"
  for u in "$@"; do echo "        server $u max_fails=2 fail_timeout=5s;"; done
  echo "        keepalive 16;"
  echo "    }"
  echo "    server {"
  echo "        listen 127.0.0.1:$port;"
  echo "        include $here/ernie-image.conf;"
  echo "    }"
  echo "}"
} >"$out/nginx.conf"
