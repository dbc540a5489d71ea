#!/usr/bin/env bash
# The runtime without the compiler (-DDMUON_BUILD_COMPILER=OFF) into
# ${BUILD_DIR:-build-runtime}, in two steps:
#  1. configured with that option alone, as docs/runtime.md documents it
#     (whatever else is installed, libtorch and CUDA included), and built
#     whole; fails if the configure found LLVM, ONNX or toml++, or if any
#     target compiles or links with them or protobuf;
#  2. given the normal build's dmuonc (DMUON_DMUONC), as a packaged runtime is
#     tested against packaged tools, for the plans of the C ABI tests, which
#     it then builds and runs with one MPI run of the example trainer. The
#     rest of the runtime's tests (the MPI suite, the loopback tests) run on
#     the same object code in the normal build.
#
#   scripts/runtime-only.sh    after scripts/build.sh (it needs build/bin/dmuonc)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ctest-tally.sh
trap tally_finish EXIT
build_dir=${BUILD_DIR:-build-runtime}
dmuonc=$PWD/build/bin/dmuonc
[[ -x $dmuonc ]] || { echo "runtime-only.sh: $dmuonc not built; run scripts/build.sh" >&2; exit 1; }

cmake -S . -B "$build_dir" -G Ninja -DDMUON_BUILD_COMPILER=OFF >/dev/null
# Only the compiler looks for LLVM, ONNX and toml++. protobuf may be found
# all the same, by libtorch's CMake package: that no target links it is
# checked on the link lines below.
if grep -E '^(LLVM_DIR|ONNX_DIR|tomlplusplus_DIR):[A-Z]+=/' "$build_dir/CMakeCache.txt"; then
  echo "runtime-only.sh: the runtime-only configure found a compiler dependency (above)" >&2
  exit 1
fi
if ninja -C "$build_dir" -t commands | grep -E -o '[^ ]*(LLVM|onnx|protobuf|tomlplusplus)[^ ]*' |
  sort -u | grep .; then
  echo "runtime-only.sh: a runtime-only target builds with a compiler dependency (above)" >&2
  exit 1
fi
cmake --build "$build_dir" -j "$(nproc)"

# libtorch off: the GPT example it would now configure is the normal build's.
cmake -S . -B "$build_dir" -DDMUON_DMUONC="$dmuonc" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON \
  >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target runtime_api_tests dmuon-trainer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tally_ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --no-tests=error \
  -R '^(runtime_api_tests|runtime_exports|trainer_mpi_2x2)$'
