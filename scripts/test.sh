#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (lit, unit, MPI) with
# ctest; ends in one line that counts what ran: "tests: P passed, F failed,
# S skipped".
#
#   scripts/test.sh          the normal build and its tests
#   scripts/test.sh --all    then also what CI runs (docs/testing.md): the
#                            runtime-only build's configure guard and C ABI
#                            tests (scripts/runtime-only.sh), the GPU bundle
#                            and its check (scripts/gpu-bundle), the sanitizer
#                            build's tests (scripts/sanitize.sh) and each
#                            fuzzer for FUZZ_SECONDS (default 30;
#                            scripts/fuzz.sh) in that same build
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
case ${1:-} in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
source scripts/lib/ctest-tally.sh
trap tally_finish EXIT

stage() { printf '\n==== test.sh: %s (%s) ====\n' "$1" "$(date -u +%H:%M:%S)"; }

stage "dependencies"
scripts/install-deps.sh
stage "build"
scripts/build.sh
stage "tests"
# MPI tests run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tally_ctest --test-dir build --output-on-failure -j "$(nproc)"
if [[ $all -eq 1 ]]; then
  stage "runtime-only build"
  scripts/runtime-only.sh
  stage "GPU bundle"
  # Built and checked here (size, what each ELF resolves to, the run's
  # steps and budgets); run only on a GPU machine (docs/gpu.md).
  scripts/gpu-bundle build-bundle
  stage "sanitizer build"
  scripts/sanitize.sh
  stage "fuzzers"
  scripts/fuzz.sh
fi
stage "done"
