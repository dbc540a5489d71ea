#!/usr/bin/env bash
# Configures and builds into ${BUILD_DIR:-build}: every target, or only the
# targets named (scripts/build.sh dmuonc dmuon-trainer). CMAKE_ARGS (split
# on spaces) go to the configure.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
read -r -a cmake_args <<<"${CMAKE_ARGS:-}"
cmake -S . -B "$build_dir" -G Ninja "${cmake_args[@]}" >/dev/null
targets=()
[[ $# -gt 0 ]] && targets=(--target "$@")
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
