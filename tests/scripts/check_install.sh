#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the installed library as a user sees it: the files, the
# SONAME, only the C API exported (nm -D against the header), no CUDA libraries in a CPU-only build, and a C
# program (tests/install/consumer.c) built both with `pkg-config --cflags --libs ernie-image` and with
# find_package(ernie-image), each loading the tiny model and writing an image.
# usage: check_install.sh BUILD_DIR SOURCE_DIR MODEL_DIR VERSION HAVE_CUDA(ON|OFF)
set -euo pipefail
build=$1 src=$2 model=$3 version=$4 cuda=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }

so=$(ls "$prefix"/lib*/libernie-image.so."$version" 2>/dev/null | head -n 1)
[ -n "$so" ] || fail "no libernie-image.so.$version under $prefix/lib*"
libdir=$(dirname "$so")
major=${version%%.*}
for f in "$prefix/bin/ernie-image" "$prefix/include/ernie_image.h" "$libdir/libernie-image.so" \
         "$libdir/libernie-image.so.$major" "$libdir/pkgconfig/ernie-image.pc" \
         "$libdir/cmake/ernie-image/ernie-imageConfig.cmake" "$libdir/cmake/ernie-image/ernie-imageConfigVersion.cmake" \
         "$libdir/cmake/ernie-image/ernie-imageTargets.cmake" "$prefix/share/doc/ernie-image/library.md"; do
  [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
[ "$(readlink "$libdir/libernie-image.so")" = "libernie-image.so.$major" ] ||
  fail "libernie-image.so is not a link to .so.$major"
[ "$(readlink "$libdir/libernie-image.so.$major")" = "libernie-image.so.$version" ] || fail "bad .so.$major link"
[ -z "$(find "$prefix" -name '*.service' -o -name 'serve.env')" ] || fail "a plain install wrote the service files"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libernie-image.so.$major" ] || fail "SONAME '$soname', expected libernie-image.so.$major"
grep -q "^prefix=$prefix\$" "$libdir/pkgconfig/ernie-image.pc" ||
  fail "ernie-image.pc has the wrong prefix: $(head -n 1 "$libdir/pkgconfig/ernie-image.pc")"

# Exported: exactly the header's functions.
nm -D --defined-only "$so" | awk '$2 ~ /^[TtWBDRV]$/ {print $3}' | sed 's/@.*//' | sort -u >"$tmp/exported"
grep -oE '\bernie_[a-z0-9_]+\(' "$prefix/include/ernie_image.h" | tr -d '(' | sort -u >"$tmp/declared"
diff "$tmp/declared" "$tmp/exported" >"$tmp/symdiff" ||
  { cat "$tmp/symdiff"; fail "exported symbols differ from the header's functions (< header, > library)"; }
echo "exports the $(wc -l <"$tmp/declared") C API functions and nothing else"
needed=$(readelf -d "$so" | grep NEEDED)
if [ "$cuda" != ON ] && grep -qiE 'cuda|cublas|cudnn' <<<"$needed"; then
  fail "the CPU-only library needs CUDA: $(tr '\n' ' ' <<<"$needed")"
fi

cc=${CC:-cc}
command -v "$cc" >/dev/null || cc=gcc
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion ernie-image)" = "$version" ] ||
  fail "pkg-config --modversion: $(pkg-config --modversion ernie-image)"
# shellcheck disable=SC2046
"$cc" -std=c99 -Wall -Wextra -Werror "$src/tests/install/consumer.c" -o "$tmp/consumer_pc" \
  $(pkg-config --cflags --libs ernie-image)
LD_LIBRARY_PATH=$libdir "$tmp/consumer_pc" "$model" "$tmp/pc.ppm" "$version"
LD_LIBRARY_PATH=$libdir ldd "$tmp/consumer_pc" >"$tmp/ldd.txt"  # to a file: grep -q would cut the pipe (pipefail)
grep -q "libernie-image.so.$major => $libdir/" "$tmp/ldd.txt" || fail "consumer_pc does not load the installed library"

cmake -S "$src/tests/install" -B "$tmp/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "find_package(ernie-image)"; }
cmake --build "$tmp/cmake-build" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "building with find_package"; }
"$tmp/cmake-build/consumer" "$model" "$tmp/cmake.ppm" "$version"   # the installed library through its RPATH
cmp "$tmp/pc.ppm" "$tmp/cmake.ppm" || fail "the two consumers wrote different images"
[ "$(head -c 2 "$tmp/pc.ppm")" = P6 ] && [ "$(stat -c %s "$tmp/pc.ppm")" -eq $((13 + 16 * 16 * 3)) ] ||
  fail "bad image"
echo "check_install: ok"
