#!/usr/bin/env bash
# deploy/: nginx from deploy/nginx (render.sh, `nginx -t`, also the production nginx.conf) runs unprivileged on
# loopback in front of stand-in api nodes (sse_upstream.py) and must: stream server-sent events unbuffered,
# pass Last-Event-ID and Authorization, skip a dead node, pass a 503 on without marking its node down, and never send a
# POST to a second node. Then check_deploy.py parses deploy/k8s and checks its structure (never applied to a
# cluster here). Skips when nginx or python3-yaml is missing. About 6 s (12 s on a busy machine).
# usage: test_deploy_files.sh <ernie-image binary> <tests/data>
set -uo pipefail  # not -e: each check reports its own failure
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=nginx_loopback.sh
. "$here/nginx_loopback.sh"
nginx_require
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml not installed"; exit 0; }

tmp="$(mktemp -d)"
upstreams=()
cleanup() {
  nginx_stop_all
  local p
  for p in "${upstreams[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
check() {  # check CONDITION_STATUS WHAT
  if [ "$1" = 0 ]; then echo "ok: $2"; else echo "FAIL: $2"; fails=$((fails + 1)); fi
}

start_upstream() {  # start_upstream NAME ok|sick: sets port
  port="$(free_port)"
  python3 "$here/sse_upstream.py" "$port" "$1" "$2" >>"$tmp/upstream.log" 2>"$tmp/$1.err" &
  upstreams+=($!)
  wait_port "$port" || { cat "$tmp/$1.err"; echo "FAIL: upstream $1 did not start"; exit 1; }
}
start_upstream a ok
a=$port
start_upstream b sick
b=$port
dead="$(free_port)"  # nothing listens there

# The production nginx.conf with its upstream names pointed at loopback: it must pass `nginx -t` too.
mkdir -p "$tmp/prod/tmp"
sed -e "s#/etc/nginx/ernie-image.conf#$root/deploy/nginx/ernie-image.conf#" \
    -e "s#api-[0-9]*\.internal:8080#127.0.0.1:$a#" -e "s#listen 80;#listen 127.0.0.1:$dead;#" \
    -e "s#^http {#http { access_log $tmp/prod/access.log; client_body_temp_path $tmp/prod/tmp/b; proxy_temp_path $tmp/prod/tmp/p; \
fastcgi_temp_path $tmp/prod/tmp/f; uwsgi_temp_path $tmp/prod/tmp/u; scgi_temp_path $tmp/prod/tmp/s;#" \
    "$root/deploy/nginx/nginx.conf" >"$tmp/prod/nginx.conf"
nginx -t -q -p "$tmp/prod" -e "$tmp/prod/error.log" -c "$tmp/prod/nginx.conf" -g "pid $tmp/prod/nginx.pid;" \
  2>"$tmp/prod/t.log"
check $? "deploy/nginx/nginx.conf passes nginx -t $(cat "$tmp/prod/t.log")"
grep -q "include $root/deploy/nginx/ernie-image.conf;" <(bash "$root/deploy/nginx/render.sh" "$tmp/r" 1 x:1 && cat "$tmp/r/nginx.conf")
check $? "render.sh includes ernie-image.conf, the production locations"

front="$(free_port)"
nginx_start "$tmp/nginx" "$front" "127.0.0.1:$a" "127.0.0.1:$b" "127.0.0.1:$dead" || exit 1
url="http://127.0.0.1:$front"

# stream PATH [curl args...]: the data lines of an event stream through nginx, each after its arrival time (s).
stream() {
  local path="$1"
  shift
  timeout 10 curl -sN "$@" "$url$path" | while IFS= read -r line; do
    case "$line" in data:*) echo "$EPOCHREALTIME ${line#data: }" ;; esac
  done
}
# spread FILE: seconds between the first and the last event's arrival
spread() { awk 'NR == 1 {t = $1} END {printf "%.2f", $1 - t}' "$1"; }

for i in 1 2 3; do  # three times: round robin reaches every node (the dead one is skipped)
  stream /v1/jobs/job_abc/events -H "Last-Event-ID: 41-0" -H "Authorization: Bearer k3y" >"$tmp/events"
  n="$(wc -l <"$tmp/events")"
  check "$([ "$n" = 3 ] && echo 0 || echo 1)" "stream $i: 3 events through nginx (got $n)"
  s="$(spread "$tmp/events")"
  check "$(awk -v s="$s" 'BEGIN {exit !(s >= 0.4)}'; echo $?)" \
    "stream $i: events arrive as they are sent, not buffered (first to last ${s} s, sent over 0.8 s)"
  grep -q '"last_event_id": "41-0"' "$tmp/events"
  check $? "stream $i: Last-Event-ID reaches the api node"
  grep -q '"authorization": "Bearer k3y"' "$tmp/events"
  check $? "stream $i: Authorization reaches the api node"
done
# Outside the events location nginx buffers: a stream is held back until it ends (the control, which shows
# that the check above can fail), unless the node sends X-Accel-Buffering: no, as serve does for its streams.
stream /plain/events >"$tmp/plain"
s="$(spread "$tmp/plain")"
check "$(awk -v s="$s" 'BEGIN {exit !(s < 0.2)}'; echo $?)" "control: a stream outside the events location is buffered (${s} s)"
stream /accel/events >"$tmp/accel"
s="$(spread "$tmp/accel")"
check "$(awk -v s="$s" 'BEGIN {exit !(s >= 0.4)}'; echo $?)" "X-Accel-Buffering: no is obeyed there (${s} s)"

# GETs: the dead node (refused) is skipped; the sick one's 503 (e.g. its Redis away) is passed on, and does not
# mark it down: it keeps getting its share, so nginx never runs out of nodes after a Redis outage.
codes=""
for i in 1 2 3 4 5 6; do codes+="$(curl -s -m 10 -o "$tmp/body" -w '%{http_code}' "$url/v1/info")/$(cat "$tmp/body") "; done
others="$(echo "$codes" | tr ' ' '\n' | grep -v -e '^$' -e '^200/a$' -e '^503/b$' || true)"
sick="$(echo "$codes" | tr ' ' '\n' | grep -c '^503/b$' || true)"
check "$([ -z "$others" ] && [ "$sick" -ge 2 ] && echo 0 || echo 1)" \
  "GET skips a dead node and passes a 503 on without marking its node down: $codes"

# POSTs: a node that answered (here 503) is never followed by a second one: one POST per request reaches a node.
# A separate nginx, so that the GETs' failure marks above do not steer it; the dead node is first in line.
front2="$(free_port)"
nginx_start "$tmp/nginx2" "$front2" "127.0.0.1:$dead" "127.0.0.1:$a" "127.0.0.1:$b" || exit 1
before="$(grep -c ' POST ' "$tmp/upstream.log" || true)"
codes=""
for i in 1 2; do
  codes+="$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": "a cat"}' "http://127.0.0.1:$front2/v1/images/generations") "
done
after="$(grep -c ' POST ' "$tmp/upstream.log" || true)"
check "$([ "$codes" = "503 503 " ] && [ $((after - before)) = 2 ] && echo 0 || echo 1)" \
  "a POST is not sent again after a node answered 503: answers $codes, $((after - before)) POSTs for 2 requests"
nginx_stop "$tmp/nginx2"
check $? "nginx_stop stops nginx"

# The Kubernetes manifests: parsed and checked for structure.
python3 "$here/check_deploy.py" "$1"
check $? "deploy/k8s: check_deploy.py"

if [ "$fails" != 0 ]; then
  echo "deploy files: $fails checks failed; nginx error log:"
  tail -n 20 "$tmp/nginx/error.log" || true
  exit 1
fi
echo "deploy files: all checks passed"
