#!/usr/bin/env bash
# ctest gpu_check_verdicts: scripts/gpu-check's verdicts, on any machine (no
# GPU needed). Fake nvidia-smi and nvcc on PATH stand for a machine without a
# GPU, one whose driver is too old for the toolkit and a ready one; the
# verdict functions run on made-up logs; and the whole check runs on a
# stand-in machine (fake cmake, ninja, mpirun and binaries).
#   gpu-check-test.sh <repo>/scripts/gpu-check   (SHOW=1: print the full
#   check's output on the passing stand-in machine)
set -uo pipefail
script=$1
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# fake DIR CUDA_VERSION|"" : nvidia-smi that lists an H200 (or, with no
# version, fails as with no driver) and nvcc 13.0.
fake() {
  mkdir -p "$1"
  if [ -n "$2" ]; then
    cat >"$1/nvidia-smi" <<EOF
#!/bin/sh
case "\$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *name*) echo "NVIDIA H200" ;;
  *driver_version*) echo "550.54.15" ;;
  *) echo "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: $2 |" ;;
esac
EOF
  else
    printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' >"$1/nvidia-smi"
  fi
  printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n' >"$1/nvcc"
  chmod +x "$1/nvidia-smi" "$1/nvcc"
}

# 1. No GPU: the dry run lists every step with a budget, the budgets add up
#    to less than 8 minutes, and the verdict is a clear FAIL.
fake "$tmp/none" ""
out=$(PATH="$tmp/none:$PATH" NVCC="$tmp/none/nvcc" "$script" --dry-run 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "dry run without a GPU exited $rc, not 1"
sum=0
for step in gpu deps configure build kernel-tests precond-tests nccl-runtime trainer-cuda \
  trainer-check gpu-bench; do
  budget=$(sed -n "s/^  $step  *\([0-9]*\)s .*/\1/p" <<<"$out")
  [ -n "$budget" ] || fail "dry run lists no budget for $step"
  sum=$((sum + ${budget:-0}))
done
total=$(sed -n 's/^total budget \([0-9]*\)s .*/\1/p' <<<"$out")
[ "$sum" = "$total" ] || fail "step budgets add up to $sum, the total line says ${total:-nothing}"
[ "$sum" -lt 480 ] || fail "budgets add up to ${sum}s, not under 8 minutes"
expect_in "$out" "no NVIDIA GPU visible" "dry run without a GPU"
expect_in "$out" "FAIL: the check cannot pass on this machine" "dry run without a GPU"
expect_not_in "$out" "gpu-check: PASS" "dry run without a GPU"

# 2. The real check stops at the GPU step, at once, without configuring.
start=$(date +%s)
out=$(PATH="$tmp/none:$PATH" NVCC="$tmp/none/nvcc" BUILD_DIR="$tmp/build" "$script" 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "check without a GPU exited $rc, not 1"
expect_in "$out" "gpu-check: FAIL" "check without a GPU"
expect_not_in "$out" "gpu-check: PASS" "check without a GPU"
[ ! -e "$tmp/build" ] || fail "check without a GPU created its build directory"
(($(date +%s) - start < 30)) || fail "check without a GPU took more than 30 s to fail"

# 3. A driver for CUDA 12 with a CUDA 13 toolkit: named, and a FAIL.
fake "$tmp/old" "12.4"
out=$(PATH="$tmp/old:$PATH" NVCC="$tmp/old/nvcc" "$script" --dry-run 2>&1)
[ $? -eq 1 ] || fail "dry run with an old driver did not fail"
expect_in "$out" "the driver supports CUDA 12.4 but the toolkit is CUDA 13.0" "old driver"

# 4. A driver for the toolkit's major version: ready.
fake "$tmp/ok" "13.0"
out=$(PATH="$tmp/ok:$PATH" NVCC="$tmp/ok/nvcc" "$script" --dry-run 2>&1)
[ $? -eq 0 ] || fail "dry run with a ready machine failed:"$'\n'"$out"
expect_in "$out" "gpu            PASS  NVIDIA H200, driver 550.54.15: driver supports CUDA 13.0" "ready machine"

# 5. The verdicts on made-up output.
# shellcheck source=/dev/null
source "$script"
log=$tmp/log
printf '[  PASSED  ] 24 tests.\nNS rel Frobenius error 1.3e-02\n' >"$log"
v=$(kernel_tests_verdict 0 "$log")
expect_in "$v" "PASS 24 passed, 0 failed; worst NS rel error 1.3e-02" "kernel tests passed"
expect_in "$v" "bit-exact" "kernel tests passed"
printf '[  PASSED  ] 23 tests.\n[  FAILED  ] 1 test, listed below:\n' >"$log"
v=$(kernel_tests_verdict 1 "$log")
expect_in "$v" "FAIL exit status 1; 23 passed, 1 failed" "kernel tests failed"
expect_not_in "$v" "bit-exact" "kernel tests failed"
printf '[  SKIPPED ] no CUDA device visible\n[  PASSED  ] 2 tests.\n' >"$log"
v=$(kernel_tests_verdict 0 "$log")
expect_in "$v" "FAIL tests skipped: no CUDA device visible" "kernel tests skipped"
: >"$log"
expect_in "$(kernel_tests_verdict 0 "$log")" "FAIL no test ran" "kernel tests empty"
expect_in "$(kernel_tests_verdict 124 "$log")" "FAIL timed out" "kernel tests timed out"
echo "target: NS/GEMM at 4096x4096 = 0.85 (>= 0.60): PASS" >"$log"
expect_in "$(bench_verdict 0 "$log")" "PASS NS/GEMM at 4096x4096 = 0.85" "bench passed"
echo "target: NS/GEMM at 4096x4096 = 0.41 (>= 0.60): FAIL" >"$log"
expect_in "$(bench_verdict 0 "$log")" "FAIL target: NS/GEMM at 4096x4096 = 0.41" "bench below target"
echo "target: 4096x4096 not measured" >"$log"
expect_in "$(bench_verdict 0 "$log")" "FAIL" "bench without the target shape"
expect_in "$(driver_verdict 13.0 13.0)" "PASS" "driver 13.0, toolkit 13.0"
expect_in "$(driver_verdict 13.1 13.0)" "PASS" "driver 13.1, toolkit 13.0"
expect_in "$(driver_verdict 12.9 13.0)" "FAIL" "driver 12.9, toolkit 13.0"
expect_in "$(driver_verdict 12.4 "")" "FAIL no CUDA toolkit" "no toolkit"
# Only PASS and WARN keep the check passing; "not built" is a FAIL.
overall=0
record deps WARN "offline" >/dev/null
[ "$overall" -eq 0 ] || fail "a WARN failed the check"
record nccl-runtime FAIL "not built" >/dev/null
[ "$overall" -eq 1 ] || fail "a FAIL did not fail the check"

# 7. The whole check on a stand-in machine: fake nvidia-smi, nvcc, cmake,
#    ninja, mpirun and dependency installer on PATH, and fake binaries that
#    print what the real ones print when they pass.
fake "$tmp/run" "13.0"
bin=$tmp/run
printf '#!/bin/sh\ncase "$*" in\n  *--build*) exit 0 ;;\n  *) echo "-- dmuon: CUDA kernels enabled (nvcc 13.0.88, architectures 90)" ;;\nesac\n' >"$bin/cmake"
printf '#!/bin/sh\nfor t in $FAKE_TARGETS; do echo "$t: phony"; done\n' >"$bin/ninja"
printf '#!/bin/sh\nshift 2\nexec "$@"\n' >"$bin/mpirun"
printf '#!/bin/sh\necho nothing to install\n' >"$bin/install-deps"
chmod +x "$bin/cmake" "$bin/ninja" "$bin/mpirun" "$bin/install-deps"
build=$tmp/build-run
mkdir -p "$build/test/unit" "$build/bin" "$build/bench" "$build/hosts/tiny"
touch "$build/hosts/tiny/tiny-1.plan"
printf '#!/bin/sh\necho "NS 1x256x256: rel Frobenius error 1.3e-02"\necho "Muon 1x128x192: update rel error 1.1e-02"\necho "[  PASSED  ] 25 tests."\n' \
  >"$build/test/unit/cuda_kernels_unit_tests"
printf '#!/bin/sh\necho "soap 1x24x16, 12 steps on CUDA vs CPU: update rel error 3.10e-05 (tolerance 1e-03)"\necho "[  PASSED  ] 9 tests."\n' \
  >"$build/bin/cuda_preconditioner_tests"
printf '#!/bin/sh\necho "[  PASSED  ] 1 test."\n' >"$build/bin/nccl_runtime_single_rank"
printf '#!/bin/sh\ncase "$*" in\n  *--check-against-cpu*) echo "check-against-cpu: step 0, rank 0: loss gpu 1.55 cpu 1.55: PASS" ;;\n  *) echo "loss: 1.551235 -> 0.122880 (12.6x lower) over 20 steps" ;;\nesac\n' \
  >"$build/bin/dmuon-trainer-cuda"
printf '#!/bin/sh\necho "shape               NS ms"\necho "4096x4096           1.000"\necho "target: NS/GEMM at 4096x4096 = 0.85 (>= 0.60): PASS"\n' \
  >"$build/bench/dmuon-gpu-bench"
chmod +x "$build/test/unit/cuda_kernels_unit_tests" "$build/bin/"* "$build/bench/dmuon-gpu-bench"
run_check() {
  PATH="$bin:$PATH" NVCC="$bin/nvcc" INSTALL_DEPS="$bin/install-deps" BUILD_DIR="$build" \
    FAKE_TARGETS="$1" "$script" 2>&1
}
out=$(run_check "cuda_kernels_unit_tests cuda_preconditioner_tests dmuon-gpu-bench nccl_runtime_single_rank dmuon-trainer-cuda")
rc=$?
if [ -n "${SHOW:-}" ]; then echo "$out"; fi
[ "$rc" -eq 0 ] || fail "the check on a passing stand-in exited $rc:"$'\n'"$out"
for step in gpu deps configure build kernel-tests precond-tests nccl-runtime trainer-cuda \
  trainer-check gpu-bench; do
  grep -q "^gpu-check: $step  *PASS" <<<"$out" || fail "no PASS line for $step as it finished"
  grep -q "^  $step  *PASS" <<<"$out" || fail "no PASS line for $step in the summary"
done
expect_in "$out" "25 passed, 0 failed; worst NS rel error 1.3e-02, Muon update 1.1e-02" "passing check"
expect_in "$out" "NS/GEMM at 4096x4096 = 0.85 (>= 0.60): PASS" "passing check"
expect_in "$out" "9 passed, 0 failed; worst SOAP/Shampoo step error vs CPU 3.10e-05" "passing check"
expect_in "$out" "gpu-check: PASS" "passing check"
# Without the NCCL targets (no NCCL at configure): FAILs, not skips.
rm "$build/bin/nccl_runtime_single_rank"
out=$(run_check "cuda_kernels_unit_tests cuda_preconditioner_tests dmuon-gpu-bench dmuon-trainer-cuda")
[ $? -eq 1 ] || fail "the check without the NCCL test did not fail"
expect_in "$out" "build          FAIL  not part of this build: nccl_runtime_single_rank" "no NCCL"
expect_in "$out" "nccl-runtime   FAIL  not built" "no NCCL"
expect_in "$out" "kernel-tests   PASS" "no NCCL"
expect_in "$out" "precond-tests  PASS" "no NCCL"
expect_in "$out" "gpu-check: FAIL" "no NCCL"
expect_not_in "$out" "gpu-check: PASS" "no NCCL"

# 6. This machine, as it is: the dry run passes only where a GPU answers.
out=$("$script" --dry-run 2>&1)
rc=$?
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "this machine has a GPU; its dry run exited $rc"
else
  [ "$rc" -eq 1 ] || fail "dry run on this machine (no GPU) exited $rc, not 1"
  expect_not_in "$out" "gpu-check: PASS" "dry run on this machine"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "gpu-check verdicts: all checks passed"
