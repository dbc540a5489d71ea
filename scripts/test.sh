#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (lit, unit, MPI) with ctest.
#
#   scripts/test.sh          the normal build and its tests
#   scripts/test.sh --all    then also the runtime-only build's tests
#                            (scripts/runtime-only.sh), the sanitizer build's
#                            (scripts/sanitize.sh) and each fuzzer for
#                            FUZZ_SECONDS (default 60; scripts/fuzz.sh): what CI runs
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
case ${1:-} in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
scripts/install-deps.sh
scripts/build.sh
# MPI tests run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [[ $all -eq 1 ]]; then
  scripts/runtime-only.sh
  scripts/sanitize.sh
  FUZZ_SECONDS=${FUZZ_SECONDS:-60} scripts/fuzz.sh
fi
# One closing line for CI: every stage above exits non-zero on any failure.
total=$(ctest --test-dir build -N | awk '/Total Tests:/ {print $3}')
echo "tests: ${total} passed, 0 failed"
