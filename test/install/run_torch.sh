#!/usr/bin/env bash
# Installs the dmuon build into a temporary prefix and builds an out-of-tree
# libtorch host against the installed dmuon::torch component
# (find_package(dmuon COMPONENTS torch)), then trains its small MLP for a few
# steps on 2 MPI ranks over the installed libdmuon, with a plan the installed
# dmuonc compiles; the consumer fails unless the loss falls by half. Then the
# package's component handling: the torch component found where installed; an
# unknown component, and the torch component of a prefix installed without
# it, each fail configuring with a message that says so; asked as optional,
# the missing one leaves the package found without dmuon::torch.
#
# usage: run_torch.sh BUILD_DIR MPIEXEC
set -euo pipefail

build_dir=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
test_name=install_torch_consumer
# shellcheck source=install-prefix.sh
. "$here/install-prefix.sh"
[ -f "$prefix/include/dmuon/torch/DmuonTorch.h" ] || fail "missing include/dmuon/torch/DmuonTorch.h"
archive=$(find "$prefix" -name 'libdmuon_torch.a' | head -n1)
[ -n "$archive" ] || fail "no libdmuon_torch.a under $prefix"
config=$(find "$prefix" -name dmuonConfig.cmake | head -n1)
[ -n "$config" ] || fail "no dmuonConfig.cmake under $prefix"
cmakedir=$(dirname "$config")
[ -f "$cmakedir/dmuonTorchTargets.cmake" ] || fail "no dmuonTorchTargets.cmake beside $config"
echo "installed: ${archive#"$prefix"/}, ${cmakedir#"$prefix"/}/dmuonTorchTargets.cmake"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "== consumer via find_package(dmuon COMPONENTS torch)"
cmake -S "$here/torch_consumer" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 || {
  cat "$work/configure.log" >&2
  fail "configuring the torch consumer failed"
}
cmake --build "$work/build" >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  fail "building the torch consumer failed"
}
resolved=$(ldd "$work/build/torch_consumer" | awk '/libdmuon\.so/ {print $3}')
case "$resolved" in
  "$prefix"/*) ;;
  *) fail "torch_consumer resolves libdmuon.so to '$resolved', not into the install prefix" ;;
esac

echo "== 2 ranks, 20 steps, the installed dmuonc"
env -u LD_LIBRARY_PATH "$mpiexec" --oversubscribe -n 2 "$work/build/torch_consumer" \
  "$prefix/bin/dmuonc" "$work/run" 20 | tee "$work/run.log" ||
  fail "torch_consumer failed"
grep -q "torch_consumer: OK, the loss fell" "$work/run.log" || fail "torch_consumer did not say OK"

probe() { # log, cmake -D arguments...
  local log=$1
  shift
  cmake -S "$here/components" -B "$work/probe" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$log" 2>&1
}

# CMake wraps the package's reason over lines: match with the spacing undone.
said() { # text, log
  tr -s ' \n' '  ' <"$2" | grep -qF "$1"
}

echo "== components"
rm -rf "$work/probe"
if probe "$work/unknown.log" -DREQUIRED_COMPONENTS=nosuch; then
  fail "find_package(dmuon COMPONENTS nosuch) succeeded"
fi
said "dmuon has no component 'nosuch'" "$work/unknown.log" || {
  cat "$work/unknown.log" >&2
  fail "find_package(dmuon COMPONENTS nosuch) failed without naming the component"
}
echo "unknown component: refused, naming it"
rm -rf "$work/probe"
probe "$work/found.log" -DREQUIRED_COMPONENTS=torch || {
  cat "$work/found.log" >&2
  fail "find_package(dmuon COMPONENTS torch) failed on a prefix with the component"
}
grep -q "dmuon component torch: found" "$work/found.log" &&
  grep -q "target dmuon::torch: defined" "$work/found.log" ||
  fail "find_package(dmuon COMPONENTS torch) did not define dmuon::torch"
echo "torch component installed, required: found, dmuon::torch defined"

# The prefix as a build without libtorch installs it: no torch export.
rm -f "$cmakedir"/dmuonTorchTargets*.cmake
rm -rf "$work/probe"
if probe "$work/missing.log" -DREQUIRED_COMPONENTS=torch; then
  fail "find_package(dmuon COMPONENTS torch) succeeded on a prefix without the component"
fi
said "installed without its torch component" "$work/missing.log" || {
  cat "$work/missing.log" >&2
  fail "find_package(dmuon COMPONENTS torch) on a prefix without it did not say why"
}
echo "torch component not installed, required: refused, saying so"
rm -rf "$work/probe"
probe "$work/optional.log" -DOPTIONAL_COMPONENTS=torch || {
  cat "$work/optional.log" >&2
  fail "find_package(dmuon OPTIONAL_COMPONENTS torch) failed on a prefix without the component"
}
grep -q "dmuon component torch: not found" "$work/optional.log" &&
  grep -q "target dmuon::torch: not defined" "$work/optional.log" || {
  cat "$work/optional.log" >&2
  fail "find_package(dmuon OPTIONAL_COMPONENTS torch) reported the missing component as found"
}
echo "torch component not installed, optional: dmuon found without dmuon::torch"

echo "install_torch_consumer: OK"
