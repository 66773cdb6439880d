# shellcheck shell=bash
# Sourced by the tests that put nginx (deploy/nginx) in front of loopback servers; runs nginx unprivileged.
#   nginx_require                      exits 0 with "SKIP: nginx not installed" when there is no nginx
#   free_port                          prints a TCP port that is free on 127.0.0.1 now
#   wait_port PORT [TRIES]             waits (TRIES x 0.05 s, default 200) until 127.0.0.1:PORT accepts
#   nginx_start DIR PORT HOST:PORT...  renders DIR/nginx.conf (deploy/nginx/render.sh), runs `nginx -t`, starts
#                                      nginx in the foreground of a background job and waits for PORT
#   nginx_stop DIR                     stops that nginx (QUIT, then KILL after 5 s); 0 when it was running
#   nginx_stop_all                     stops every nginx started here: the EXIT trap that nginx_start sets when
#                                      the caller has none (a caller with its own EXIT trap calls it there)
# Call nginx_start directly, not in $(...): the background job must belong to the test's shell.

_nginx_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_nginx_dirs=()

nginx_require() {
  command -v nginx >/dev/null 2>&1 || { echo "SKIP: nginx not installed (scripts/setup.sh --tests)"; exit 0; }
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local p
  for _ in $(seq 1 100); do  # no python3: a random high port that refuses connections
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "free_port: no free port found" >&2
  return 1
}

wait_port() {
  local port="$1" tries="${2:-200}"
  for _ in $(seq 1 "$tries"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  return 1
}

_nginx_args() { echo "-p $1 -e $1/error.log -c $1/nginx.conf"; }

nginx_start() {
  local dir="$1" port="$2"
  shift 2
  bash "$_nginx_root/deploy/nginx/render.sh" "$dir" "$port" "$@"
  dir="$(cd "$dir" && pwd)"
  # shellcheck disable=SC2046  # the arguments are paths without spaces (mktemp -d)
  if ! nginx -t -q $(_nginx_args "$dir") 2>"$dir/nginx-t.log"; then
    cat "$dir/nginx-t.log" >&2
    echo "FAIL: nginx -t rejected $dir/nginx.conf" >&2
    return 1
  fi
  # shellcheck disable=SC2046
  nginx $(_nginx_args "$dir") -g 'daemon off;' >"$dir/nginx.out" 2>&1 &
  echo $! >"$dir/nginx.job"
  _nginx_dirs+=("$dir")
  [ -n "$(trap -p EXIT)" ] || trap nginx_stop_all EXIT
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$(cat "$dir/nginx.job")" 2>/dev/null || break
    sleep 0.05
  done
  cat "$dir/nginx.out" "$dir/error.log" >&2 2>/dev/null || true
  echo "FAIL: nginx did not start on 127.0.0.1:$port" >&2
  return 1
}

nginx_stop() {
  local dir pid
  dir="$(cd "$1" && pwd)"
  [ -f "$dir/nginx.job" ] || return 1
  pid="$(cat "$dir/nginx.job")"
  rm -f "$dir/nginx.job"
  kill -QUIT "$pid" 2>/dev/null || return 1  # graceful: open streams are closed when nginx exits
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

nginx_stop_all() {
  local d
  for d in "${_nginx_dirs[@]}"; do
    [ -f "$d/nginx.job" ] && nginx_stop "$d"
  done
  _nginx_dirs=()
  return 0
}
