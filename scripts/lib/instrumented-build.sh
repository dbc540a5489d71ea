# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one instrumented
# build both use, so that CI compiles the code under the sanitizers once.
#
#   configure_instrumented DIR   clang-14, ASan + UBSan over every target
#                                and libFuzzer's coverage instrumentation
#                                (DMUON_BUILD_FUZZERS), RelWithDebInfo; no
#                                CUDA (nvcc's code is not instrumented), no
#                                benchmarks, no libtorch example
configure_instrumented() {
  local dir=$1
  # CC/CXX matter only when the build directory is first configured.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDMUON_BUILD_FUZZERS=ON -DDMUON_ENABLE_CUDA=OFF -DDMUON_BUILD_BENCHMARKS=OFF >/dev/null
  grep -q '^DMUON_FUZZING_ACTIVE:INTERNAL=ON' "$dir/CMakeCache.txt" || {
    echo "$(basename "$0"): $dir is not a clang sanitizer and fuzzing build; remove it and rerun" >&2
    exit 1
  }
}
