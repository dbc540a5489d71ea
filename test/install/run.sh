#!/usr/bin/env bash
# Installs the dmuon build into a temporary prefix and builds and runs an
# out-of-tree consumer against it, via find_package(dmuon) and via pkg-config
# (both through CMake and with a bare `cc $(pkg-config ...)`). Each consumer
# loads a plan and prints its fingerprint, which must equal the one
# `dmuon-plan --verify-only` reports. The installed dmuonc and dmuon-plan
# must run from the prefix and agree with the build's, and the installed
# Python package must load the prefix's libdmuon (python3 -m dmuon --version).
#
# usage: run.sh BUILD_DIR PLAN DMUON_PLAN_TOOL DMUONC_TOOL
set -euo pipefail

build_dir=$1
plan=$2
dmuon_plan=$3
dmuonc=$4
here=$(cd "$(dirname "$0")" && pwd)
test_name=install_consumer
# shellcheck source=install-prefix.sh
. "$here/install-prefix.sh"

# What must be there.
for f in include/dmuon/dmuon.h include/dmuon/dmuon.hpp include/dmuon/plan.fbs; do
  [ -f "$prefix/$f" ] || fail "missing $f"
done
for t in dmuonc dmuon-plan; do
  [ -x "$prefix/bin/$t" ] || fail "missing bin/$t"
done
lib=$(find "$prefix" -name 'libdmuon.so' | head -n1)
[ -n "$lib" ] || fail "no libdmuon.so under $prefix"
libdir=$(dirname "$lib")
config=$(find "$prefix" -name dmuonConfig.cmake | head -n1)
[ -n "$config" ] || fail "no dmuonConfig.cmake under $prefix"
[ -f "$(dirname "$config")/dmuonConfigVersion.cmake" ] || fail "no dmuonConfigVersion.cmake"
pc=$(find "$prefix" -name dmuon.pc | head -n1)
[ -n "$pc" ] || fail "no dmuon.pc under $prefix"
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

# The soname carries the major, and for a 0.x release the minor too: minors
# may break the ABI then.
version=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --modversion dmuon)
case $version in
  0.*) want_soname=libdmuon.so.${version%.*} ;;
  *) want_soname=libdmuon.so.${version%%.*} ;;
esac
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "$want_soname" ] ||
  fail "libdmuon.so has soname '$soname', expected $want_soname (version $version)"
[ -e "$libdir/$soname" ] || fail "no $soname beside libdmuon.so"
echo "soname: $soname"

# The library exports only dmuon_* (plus the linker's own markers).
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v -E '^(dmuon_|_init$|_fini$|_edata$|_end$|__bss_start$)' | grep -v '^DMUON' || true)
[ -z "$others" ] || fail "libdmuon.so exports symbols other than dmuon_*: $(echo "$others" | head -5 | tr '\n' ' ')"

# The fingerprint the consumers must print.
want=$("$dmuon_plan" "$plan" --verify-only | sed -n 's/.*fingerprint \(0x[0-9a-f]*\).*/\1/p')
[ -n "$want" ] || fail "dmuon-plan --verify-only printed no fingerprint"
echo "expected fingerprint: $want"

echo "== the installed tools"
env -u LD_LIBRARY_PATH "$prefix/bin/dmuonc" --version >"$work/version.txt" || fail "installed dmuonc --version failed"
cmp -s "$work/version.txt" <("$dmuonc" --version) ||
  fail "installed dmuonc --version differs from the build's: $(cat "$work/version.txt")"
cat "$work/version.txt"
got=$(env -u LD_LIBRARY_PATH "$prefix/bin/dmuon-plan" "$plan" --verify-only |
  sed -n 's/.*fingerprint \(0x[0-9a-f]*\).*/\1/p')
[ "$got" = "$want" ] || fail "installed dmuon-plan --verify-only printed '$got', expected $want"
echo "installed dmuon-plan: fingerprint $got"

echo "== the installed Python package"
pyinit=$(find "$prefix" -path '*/dmuon/__init__.py' | head -n1)
[ -n "$pyinit" ] || fail "no dmuon/__init__.py under $prefix"
pysite=$(dirname "$(dirname "$pyinit")")
python=/usr/bin/python3
[ -x "$python" ] || python=python3
pyversion=$(cd "$work" && env -u LD_LIBRARY_PATH -u DMUON_LIBRARY PYTHONPATH="$pysite" \
  "$python" -m dmuon --version) || fail "python3 -m dmuon --version failed from $pysite"
echo "$pyversion"
case "$pyversion" in
  "dmuon $version (libdmuon $prefix/"*"), plan format "*) ;;
  *) fail "python3 -m dmuon --version printed '$pyversion', expected dmuon $version loaded from $prefix" ;;
esac
if (cd "$work" && "$python" -c 'import torch' 2>/dev/null); then
  (cd "$work" && env -u LD_LIBRARY_PATH -u DMUON_LIBRARY PYTHONPATH="$pysite" \
    "$python" -c 'import dmuon, dmuon.torch; print("dmuonc:", dmuon.torch.find_dmuonc())') |
    grep -q "dmuonc: $prefix/" || fail "import dmuon.torch from $pysite did not find the installed dmuonc"
fi

check_output() { # name, output
  echo "$1: $2"
  case "$2" in
    *"fingerprint $want"*) ;;
    *) fail "$1 printed '$2', expected fingerprint $want" ;;
  esac
}

check_links_prefix() { # binary
  local resolved
  resolved=$(ldd "$1" | awk '/libdmuon\.so/ {print $3}')
  case "$resolved" in
    "$prefix"/*) ;;
    *) fail "$1 resolves libdmuon.so to '$resolved', not into the install prefix" ;;
  esac
}

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "== consumer via find_package(dmuon) and CMake's pkg-config module"
export PKG_CONFIG_PATH=$(dirname "$pc")
cmake -S "$here/consumer" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 || {
  cat "$work/configure.log" >&2
  fail "configuring the consumer failed"
}
cmake --build "$work/build" >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  fail "building the consumer failed"
}
# Both find libdmuon through the RUNPATH CMake gives them: no LD_LIBRARY_PATH.
for exe in consumer_cpp consumer_c; do
  check_links_prefix "$work/build/$exe"
  check_output $exe "$(env -u LD_LIBRARY_PATH "$work/build/$exe" "$plan")"
done

echo "== consumer via a bare cc \$(pkg-config --cflags --libs dmuon)"
echo "pkg-config: dmuon $version: $(pkg-config --cflags --libs dmuon)"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror "$here/consumer/consumer.c" -o "$work/consumer_pc" $(pkg-config --cflags --libs dmuon)
LD_LIBRARY_PATH=$libdir check_links_prefix "$work/consumer_pc"
check_output consumer_pc "$(LD_LIBRARY_PATH=$libdir "$work/consumer_pc" "$plan")"

echo "install_consumer: OK"
