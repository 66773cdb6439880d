#!/usr/bin/env bash
# Fetches the Debian packages the device machine (Ubuntu 24.04, no network) lacks -- PCRE2, hiredis,
# cpp-httplib, libjpeg-turbo and libwebp -- and unpacks them into .deps/ (git-ignored). Run it here, carry .deps
# with the device call, and configure there with -DERNIE_DEPS_PREFIX=$PWD/.deps; run programs with
# LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu. Everything else those libraries need (libssl3,
# libbrotli1, zlib, libstdc++) is already on Ubuntu 24.04.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libcpp-httplib-dev libcpp-httplib0.11
      libhiredis-dev libhiredis0.14 libjpeg62-turbo-dev libjpeg62-turbo libwebp-dev libwebp7 libwebpmux3 libwebpdemux2)
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
(cd "$dl" && chmod 777 . && apt-get download "${PKGS[@]}" >/dev/null 2>&1) ||
  { echo "fetch-device-deps: apt-get download failed (run apt-get update first?)" >&2; exit 1; }
rm -rf .deps
mkdir -p .deps
for f in "$dl"/*.deb; do dpkg -x "$f" .deps; done
# The -dev packages' .so links are absolute or relative to /usr/lib; make sure they resolve inside .deps.
libdir=.deps/usr/lib/x86_64-linux-gnu
for l in "$libdir"/*.so; do
  [ -L "$l" ] || continue
  t=$(readlink "$l")
  case "$t" in /*) ln -sf "$(basename "$t")" "$l" ;; esac
done
# pkg-config files name /usr: make them point inside .deps, wherever the tree is copied to.
sed -Ei 's@^(prefix|exec_prefix|libdir|includedir)=/usr@\1=${pcfiledir}/../../..@' "$libdir"/pkgconfig/*.pc
rm -rf .deps/usr/share/doc .deps/usr/share/man
du -sh .deps
