#!/usr/bin/env bash
# `cpack -G DEB` from the build folder, then the package as dpkg sees it: its control fields (Depends from
# dpkg-shlibdeps), its files, the conffile, the maintainer scripts (the service stays disabled), the packaged
# CLI running `doctor` on the tiny model, and the unit file through `systemd-analyze verify` where present.
# Nothing is installed on this machine.
# usage: check_deb.sh BUILD_DIR MODEL_DIR VERSION
set -euo pipefail
build=$1 model=$2 version=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v $tool >/dev/null || fail "$tool is missing (scripts/setup.sh --tests installs dpkg-dev)"
done
t0=$(date +%s)
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
deb=$(ls "$tmp"/out/ernie-image_"$version"_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { cat "$tmp/cpack.log"; fail "no ernie-image_${version}_*.deb"; }
echo "built $(basename "$deb") ($(($(stat -c %s "$deb") / 1024 / 1024)) MiB) in $(($(date +%s) - t0)) s"

dpkg-deb -I "$deb" >"$tmp/info"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = ernie-image ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version)"
depends=$(field Depends)
echo "Depends: $depends"
sed -e 's/ ([^)]*)//g' -e 's/ *| */\n/g' -e 's/, */\n/g' <<<"$depends" >"$tmp/depends"   # one package name a line
for dep in libc6 libstdc++6 libpng16-16 libpcre2-8-0 libssl3 libgomp1 libopenblas0; do
  grep -qxF "$dep" "$tmp/depends" || fail "Depends lacks $dep"
done

dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/files"
for f in ./usr/bin/ernie-image "./usr/lib/libernie-image.so.$version" "./usr/lib/libernie-image.so.${version%%.*}" \
         ./usr/lib/libernie-image.so ./usr/include/ernie_image.h ./usr/lib/pkgconfig/ernie-image.pc \
         ./usr/lib/cmake/ernie-image/ernie-imageConfig.cmake ./usr/lib/cmake/ernie-image/ernie-imageConfigVersion.cmake \
         ./usr/lib/cmake/ernie-image/ernie-imageTargets.cmake ./lib/systemd/system/ernie-image.service \
         ./etc/ernie-image/serve.env ./usr/share/doc/ernie-image/README.md ./usr/share/doc/ernie-image/library.md; do
  grep -qxF "$f" "$tmp/files" || fail "the package lacks $f"
done

mkdir "$tmp/control" "$tmp/root"
dpkg-deb -e "$deb" "$tmp/control"
grep -qxF /etc/ernie-image/serve.env "$tmp/control/conffiles" || fail "serve.env is not a conffile"
grep -q "libernie-image ${version%%.*} ernie-image" "$tmp/control/shlibs" ||
  fail "no shlibs entry for libernie-image.so.${version%%.*}"
for s in postinst prerm postrm; do
  [ -x "$tmp/control/$s" ] || fail "no executable $s"
  sh -n "$tmp/control/$s" || fail "$s: syntax"
  ! grep -qE 'systemctl[^#]* (enable|start)' "$tmp/control/$s" || fail "$s enables or starts the service"
done

dpkg-deb -x "$deb" "$tmp/root"
pc=$tmp/root/usr/lib/pkgconfig/ernie-image.pc
grep -q '^prefix=/usr$' "$pc" || fail "ernie-image.pc: $(head -n 1 "$pc")"
unit=$tmp/root/lib/systemd/system/ernie-image.service
grep -qx 'ExecStart=/usr/bin/ernie-image serve .*' "$unit" || fail "the unit does not run /usr/bin/ernie-image serve"
grep -qx 'EnvironmentFile=/etc/ernie-image/serve.env' "$unit" || fail "the unit does not read /etc/ernie-image/serve.env"
grep -qx 'DynamicUser=yes' "$unit" || fail "the unit runs as root"
# The packaged (stripped) CLI runs; the env file's defaults are the server's.
"$tmp/root/usr/bin/ernie-image" doctor --model "$model" >"$tmp/doctor.log" 2>&1 ||
  { cat "$tmp/doctor.log"; fail "ernie-image doctor"; }
grep -qx 'ERNIE_PORT=8080' "$tmp/root/etc/ernie-image/serve.env" || fail "serve.env: no ERNIE_PORT=8080"
# Every flag of the unit's command line is one `serve` has, and every variable it uses is set in serve.env.
"$tmp/root/usr/bin/ernie-image" serve --help >"$tmp/serve-help.txt" 2>&1 || fail "ernie-image serve --help"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
for flag in $(grep -oE -- '--[a-z-]+' <<<"$exec_start"); do
  grep -qE -- "(^|[ ,])$flag([ ,=]|$)" "$tmp/serve-help.txt" || fail "the unit passes $flag, which serve does not take"
done
for var in $(grep -oE '\$\{?ERNIE_[A-Z_]+' <<<"$exec_start" | tr -d '${'); do
  grep -q "^$var=" "$tmp/root/etc/ernie-image/serve.env" || fail "the unit uses \$$var, which serve.env does not set"
done

if command -v systemd-analyze >/dev/null; then
  # The unit as installed, with its two absolute paths pointed into the unpacked package.
  mkdir "$tmp/units"
  sed -e "s|^ExecStart=/usr/bin/|ExecStart=$tmp/root/usr/bin/|" \
    -e "s|^EnvironmentFile=/etc/|EnvironmentFile=$tmp/root/etc/|" "$unit" >"$tmp/units/ernie-image.service"
  if ! SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$tmp/units/ernie-image.service" >"$tmp/verify.log" 2>&1 \
     || grep -q "ernie-image.service" "$tmp/verify.log"; then
    cat "$tmp/verify.log"
    fail "systemd-analyze verify ernie-image.service"
  fi
  echo "systemd-analyze verify: ok"
else
  echo "systemd-analyze not found: skipping the unit file check"
fi
echo "check_deb: ok ($(($(date +%s) - t0)) s)"
