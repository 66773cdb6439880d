#!/usr/bin/env bash
# Issue 45 item 7: every catchable terminating signal (HUP INT QUIT TERM USR1 USR2 PIPE ALRM) that reaches the
# real binary while it writes an output removes its temp file (core/atomic_file.h), for convert's safetensors
# and GGUF writers. The write is held open deterministically: convert's stderr is a FIFO that this script has
# filled, so its first progress line (written after the temp file is made) blocks until the signal comes.
# Args: <ernie-image binary> <tests/data>
set -euo pipefail
set -m  # job control: background jobs keep INT and QUIT at their default (without it bash makes them ignored)
bin=$1
model=$2/tiny-ernie-image/model
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
shopt -s nullglob
mkfifo "$tmp/stderr"

# Waits until a thread of $1 blocks writing to a pipe (its stderr: wchan pipe_write, anon_pipe_write on newer
# kernels); where wchan is hidden ("0"), until 2 s have passed.
wait_blocked() {
  local i w c
  for i in $(seq 600); do
    for w in /proc/"$1"/task/*/wchan; do
      c=
      read -r c < "$w" 2>/dev/null || true
      case "$c" in *pipe_write*) return 0 ;; 0) [ "$i" -ge 40 ] && return 0 ;; esac
    done
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

n=0
for out in out.safetensors out.gguf; do
  dtype=bf16
  [ "$out" = out.gguf ] && dtype=q8_0
  for sig in HUP INT QUIT TERM USR1 USR2 PIPE ALRM; do
    exec 3<>"$tmp/stderr"        # the FIFO held open for reading (never read until the end)
    head -c 65536 /dev/zero >&3  # a full pipe: the writer's first line to stderr blocks
    "$bin" convert --model "$model" --dtype "$dtype" --no-pe --threads 1 -o "$tmp/$out" 2>"$tmp/stderr" &
    pid=$!
    wait_blocked "$pid" || { echo "FAIL: convert -o $out never blocked on its progress line"; exit 1; }
    temps=("$tmp/$out".tmp.*)
    [ ${#temps[@]} -eq 1 ] || { echo "FAIL: $out: expected one temp file while writing, found ${#temps[@]}"; exit 1; }
    kill -s "$sig" "$pid"
    rc=0
    wait "$pid" || rc=$?
    pid=
    exec 3<&-
    want=$((128 + $(kill -l "$sig")))
    [ "$rc" -eq "$want" ] || { echo "FAIL: SIG$sig: convert -o $out exited $rc, expected $want (killed by it)"; exit 1; }
    temps=("$tmp/$out".tmp.*)
    [ ${#temps[@]} -eq 0 ] || { echo "FAIL: SIG$sig left ${temps[*]}"; exit 1; }
    [ ! -e "$tmp/$out" ] || { echo "FAIL: SIG$sig: a partial $out was renamed into place"; exit 1; }
    n=$((n + 1))
  done
done
echo "writer signals: $n of 16 left no temp file"
