#!/usr/bin/env bash
# Builds dmuon with AddressSanitizer + UndefinedBehaviorSanitizer (clang-14,
# RelWithDebInfo; the build scripts/fuzz.sh fuzzes in, scripts/lib/
# instrumented-build.sh) into ${BUILD_DIR:-build-asan} and runs the unit
# tests, the lit suite, the fuzz regression replays and the runtime's MPI
# tests of one HSDP mesh under the sanitizers. Any report (memory error,
# leak, undefined behaviour) fails its test.
#
# Environment: BUILD_DIR. Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/lib/ctest-tally.sh
source scripts/lib/instrumented-build.sh
trap tally_finish EXIT
scripts/install-deps.sh

build_dir=${BUILD_DIR:-build-asan}
configure_instrumented "$build_dir"
cmake --build "$build_dir" -j "$(nproc)"

# abort_on_error: a report kills the process with SIGABRT, so that lit's
# `not <cmd>` (which expects a plain failure) cannot mistake it for one.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:disable_coredump=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1
lsan=suppressions=$root/test/sanitize/lsan.supp:print_suppressions=0
export LSAN_OPTIONS=$lsan
# MPI tests run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1
ulimit -c 0

# Everything but the tests that start MPI (the MPI tests, the trainer, the step
# bench, the calibration tool; Open MPI leaks at exit), the install consumer,
# the GPU tests and the Python hosts (python3 is not instrumented, so it cannot
# load an instrumented libdmuon: the sanitizer runtimes are linked into
# programs only).
mpi='^(mpi_|train_loop_|qk_clip_|runtime_api_|runtime_self_|trainer_|install_|nccl_|step_bench_|calibrate_|cuda\.|python_)'
tally_ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" --no-tests=error -E "$mpi" "$@"
# The runtime's tests on one rank (runtime_self_mpi: MPI initialized by the
# runtime itself) and the MPI tests on 4 ranks (HSDP 2x2) of
# the hooks, the four AdamW routes, the training loop and QK-Clip. Open
# MPI is built without frame pointers, so its leaks are only recognised (and
# suppressed) with the slow, full unwinder on every allocation.
LSAN_OPTIONS=$lsan:fast_unwind_on_malloc=0 \
  tally_ctest --test-dir "$build_dir" --output-on-failure --no-tests=error \
  -R '^(runtime_api_tests|runtime_exports|runtime_self_mpi|mpi_hsdp2x2|mpi_routes_mixed_2x2|train_loop_2x2|qk_clip_2x2)$' "$@"
