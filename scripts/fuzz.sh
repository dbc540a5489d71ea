#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz in the instrumented build that
# scripts/sanitize.sh tests (clang-14, ASan+UBSan over the whole build;
# ${BUILD_DIR:-build-asan}) and runs each for FUZZ_SECONDS (default 30) from
# its seed corpus (test/fuzz/make-corpus.sh) and past findings
# (test/fuzz/regressions/).
# Exits non-zero on any crash, leak, sanitizer report, timeout (-timeout=10 s
# per input) or out-of-memory (-rss_limit_mb=2048): the input that caused it is
# saved as test/fuzz/regressions/<target>/<kind>-<sha1>, and from then on
# every build's ctest fuzz_regress_<target> replays it.
#
# Environment: FUZZ_SECONDS, FUZZ_TARGETS (default: all five),
# FUZZ_PARALLEL (targets run at once; default: the number of cores),
# BUILD_DIR. Extra args go to every fuzzer (e.g. -seed=1).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/instrumented-build.sh
scripts/install-deps.sh

build_dir=${BUILD_DIR:-build-asan}
seconds=${FUZZ_SECONDS:-30}
read -r -a targets <<<"${FUZZ_TARGETS:-fuzz_plan fuzz_checkpoint fuzz_toml fuzz_onnx fuzz_mesh}"
parallel=${FUZZ_PARALLEL:-$(nproc)}

configure_instrumented "$build_dir"
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}" dmuon_fuzz_corpus

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
logs=$build_dir/fuzz/logs
mkdir -p "$logs"

run_one() {
  local t=$1
  shift
  local work=$build_dir/fuzz/work/$t regress=test/fuzz/regressions/$t dict=()
  mkdir -p "$work" "$regress"
  case $t in
    fuzz_toml) dict=(-dict=test/fuzz/toml.dict) ;;
    fuzz_mesh) dict=(-dict=test/fuzz/mesh.dict) ;;
  esac
  # The first directory takes new inputs; seeds and past findings are read.
  "$build_dir/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$regress/" -print_final_stats=1 "${dict[@]}" "$@" \
    "$work" "$build_dir/test/fuzz/corpus/$t" "$regress" >"$logs/$t.log" 2>&1
}

status=0
for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $parallel ]]; do wait -n || true; done
  echo "fuzz.sh: $t for ${seconds}s (log: $logs/$t.log)"
  rm -f "$logs/$t.rc"
  (rc=0; run_one "$t" "$@" || rc=$?; echo $rc >"$logs/$t.rc") &
done
wait
for t in "${targets[@]}"; do
  if [[ $(cat "$logs/$t.rc" 2>/dev/null) == 0 ]]; then
    echo "fuzz.sh: $t: no findings ($(grep -o 'stat::number_of_executed_units: [0-9]*' \
      "$logs/$t.log" | awk '{print $2}') runs)"
  else
    status=1
    echo "fuzz.sh: $t: FOUND A PROBLEM; the end of its log:" >&2
    tail -n 60 "$logs/$t.log" >&2
  fi
done
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: findings were saved under test/fuzz/regressions/<target>/;" \
       "fix them and keep the inputs as regression tests" >&2
fi
exit $status
