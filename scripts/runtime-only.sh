#!/usr/bin/env bash
# The runtime without the compiler (DMUON_BUILD_COMPILER=OFF) into
# ${BUILD_DIR:-build-runtime}: libdmuon, the tiny example trainer and the
# runtime's tests (the C ABI, the MPI tests), with the test plans compiled by
# the dmuonc of the normal build (DMUON_DMUONC), as a packaged runtime is
# tested against packaged tools. No CUDA, no libtorch example, no benchmarks.
# Fails if the configure found LLVM, ONNX, protobuf or toml++.
#
#   scripts/runtime-only.sh    after scripts/build.sh (it needs build/bin/dmuonc)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-runtime}
dmuonc=$PWD/build/bin/dmuonc
[[ -x $dmuonc ]] || { echo "runtime-only.sh: $dmuonc not built; run scripts/build.sh" >&2; exit 1; }
cmake -S . -B "$build_dir" -G Ninja -DDMUON_BUILD_COMPILER=OFF -DDMUON_ENABLE_CUDA=OFF \
  -DDMUON_BUILD_BENCHMARKS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON \
  -DDMUON_DMUONC="$dmuonc" >/dev/null
if grep -E '^(LLVM_DIR|ONNX_DIR|Protobuf_LIBRARY_RELEASE|tomlplusplus_DIR):[A-Z]+=/' \
  "$build_dir/CMakeCache.txt"; then
  echo "runtime-only.sh: the runtime-only configure found a compiler dependency (above)" >&2
  exit 1
fi
cmake --build "$build_dir" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --no-tests=error
