# The verdicts of the GPU checks: from a step's exit status and log, one line
# "PASS|FAIL detail". Sourced by scripts/gpu-check (which builds on the GPU
# machine) and by the GPU bundle's run script (scripts/gpu-bundle-run, which
# runs what scripts/gpu-bundle built elsewhere); no side effects.
# test/gpu/gpu-check-test.sh and test/gpu/gpu-bundle-test.sh run them on
# made-up logs.

# driver_verdict DRIVER_CUDA TOOLKIT_CUDA: the driver runs what the toolkit
# builds when it supports the toolkit's major version (CUDA's minor-version
# compatibility; the build makes machine code for the GPU, so no newer PTX
# needs JIT). Prints "PASS|FAIL detail".
driver_verdict() {
  local driver=$1 toolkit=$2
  if [ -z "$toolkit" ]; then
    echo "FAIL no CUDA toolkit (nvcc) found: nothing can be built for the GPU"
  elif [ -z "$driver" ]; then
    echo "FAIL nvidia-smi does not say which CUDA version the driver supports"
  elif ((${driver%%.*} < ${toolkit%%.*})); then
    echo "FAIL the driver supports CUDA $driver but the toolkit is CUDA $toolkit: every CUDA call would report no device; install a driver for CUDA ${toolkit%%.*} (CUDA 13 needs 580 or newer)"
  else
    echo "PASS driver supports CUDA $driver, toolkit CUDA $toolkit"
  fi
}

# kernel_tests_verdict RC LOG: the kernel tests' result from their exit
# status and gtest output. Prints "PASS|FAIL detail".
kernel_tests_verdict() {
  local rc=$1 log=$2 passed failed worst_ns worst_muon figures
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  worst_ns=$(sed -n 's/.*rel Frobenius error \([0-9.e+-]*\).*/\1/p' "$log" | sort -g | tail -n 1)
  worst_muon=$(sed -n 's/.*update rel error \([0-9.e+-]*\).*/\1/p' "$log" | sort -g | tail -n 1)
  figures="${passed:-0} passed, ${failed:-0} failed; worst NS rel error ${worst_ns:-n/a}, Muon update ${worst_muon:-n/a} (tolerance 2e-2)"
  if grep -q 'no CUDA device visible' "$log"; then
    echo "FAIL tests skipped: no CUDA device visible to the process (driver?)"
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL timed out"
  elif [ "$rc" -ne 0 ]; then
    echo "FAIL exit status $rc; $figures"
  elif [ -z "$passed" ]; then
    echo "FAIL no test ran"
  else
    echo "PASS $figures; AdamW/casts bit-exact"
  fi
}

# precond_tests_verdict RC LOG: the SOAP/Shampoo kernel tests'
# (cuda_preconditioner_tests) result from their exit status and gtest
# output, with the worst CUDA-vs-CPU step error. Prints "PASS|FAIL detail".
precond_tests_verdict() {
  local rc=$1 log=$2 passed failed worst figures
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  worst=$(sed -n 's/.*steps on CUDA vs CPU: update rel error \([0-9.e+-]*\).*/\1/p' "$log" |
    sort -g | tail -n 1)
  figures="${passed:-0} passed, ${failed:-0} failed; worst SOAP/Shampoo step error vs CPU ${worst:-n/a} (tolerance 1e-3)"
  if grep -q 'no CUDA device visible' "$log"; then
    echo "FAIL tests skipped: no CUDA device visible to the process (driver?)"
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL timed out"
  elif [ "$rc" -ne 0 ]; then
    echo "FAIL exit status $rc; $figures"
  elif [ -z "$passed" ] || [ -z "$worst" ]; then
    echo "FAIL no step comparison ran"
  else
    echo "PASS $figures"
  fi
}

# bench_verdict RC LOG: the benchmark's result from its "target:" line.
bench_verdict() {
  local rc=$1 log=$2 target
  target=$(grep '^target:' "$log" | tail -n 1)
  if [ "$rc" -eq 124 ]; then
    echo "FAIL timed out"
  elif [ "$rc" -ne 0 ]; then
    echo "FAIL exit status $rc"
  elif [[ $target == *": PASS" ]]; then
    echo "PASS ${target#target: }"
  else
    echo "FAIL ${target:-no target line}"
  fi
}

# nccl_runtime_verdict RC LOG: the single-rank NCCL runtime test's result.
nccl_runtime_verdict() {
  local rc=$1 log=$2
  if grep -q '^\[  SKIPPED \]' "$log"; then
    echo "FAIL its test skipped itself (no GPU visible?)"
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL timed out"
  elif [ "$rc" -ne 0 ]; then
    echo "FAIL exit status $rc; see $(basename "$log")"
  elif ! grep -q '^\[  PASSED  \] 1 test' "$log"; then
    echo "FAIL exit status 0 but no passing test in the log"
  else
    echo "PASS 3 steps through the NCCL backend match the CPU kernels (world size 1); I1, I2, I4 and the plan's byte counts after each"
  fi
}

# loss_lines_verdict LOG REFERENCE STEP0_TOL TOL: the trainer's per-step loss
# lines ("step N  loss X ...") against the reference run's (the CPU
# trainer's, same plan, seed and data): the same steps, step 0 within
# STEP0_TOL relative (no optimizer step has run yet: only the forward's
# summation order differs) and every later step within TOL (the GPU's NS
# runs in bf16, so the trajectories drift apart by about its error per
# step). A loss that is not a finite number (nan, inf, 1e999) in either log
# fails: no comparison with it can. Prints "PASS|FAIL detail".
loss_lines_verdict() {
  awk -v step0_tol="$3" -v tol="$4" '
    function finite(x) {
      return x ~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/ && x + 0 <= 1e308 && x + 0 >= -1e308
    }
    FNR == 1 { file++ }
    $1 == "step" && $3 == "loss" {
      if (!finite($4) && !bad) bad = sprintf("FAIL step %d: loss %s in %s is not a finite number", $2, $4, file == 1 ? "the run" : "the reference")
      if (file == 1) got[$2 + 0] = $4; else { want[$2 + 0] = $4; n++ }
    }
    END {
      if (bad) { print bad; exit }
      if (n == 0) { print "FAIL no loss lines in the reference"; exit }
      worst = -1
      for (s in want) {
        if (!(s in got)) { printf "FAIL no loss line for step %d\n", s; exit }
        d = got[s] - want[s]; if (d < 0) d = -d
        a = want[s] < 0 ? -want[s] : want[s]
        r = d / (a > 1e-30 ? a : 1e-30)
        limit = (s == 0) ? step0_tol : tol
        if (r > limit) { printf "FAIL step %d: loss %s, CPU %s: relative difference %.2e > %g\n", s, got[s], want[s], r, limit; exit }
        if (s > 0 && r > worst) { worst = r; at = s }
      }
      for (s in got) if (!(s in want)) { printf "FAIL step %d has no reference line\n", s; exit }
      printf "PASS %d loss lines match the CPU trainer: step 0 within %g, worst later %.2e at step %d (tolerance %g)\n", n, step0_tol, worst, at, tol
    }' "$1" "$2"
}

# trainer_verdict RC LOG REFERENCE STEP0_TOL TOL: the CUDA trainer's run
# (--steps 20 --min-loss-drop 3 --check-against-cpu): its exit status, its
# check-against-cpu line, and its loss lines against the reference.
trainer_verdict() {
  local rc=$1 log=$2 ref=$3 loss check
  loss=$(grep '^loss: ' "$log" | tail -n 1)
  check=$(grep '^check-against-cpu: ' "$log" | tail -n 1 | sed 's/^.*: \(PASS\|FAIL\)$/\1/')
  case $rc in
  0) ;;
  77) echo "FAIL skipped itself: no CUDA device visible"; return ;;
  124) echo "FAIL timed out"; return ;;
  *) echo "FAIL exit status $rc${loss:+; ${loss#loss: }}${check:+; check-against-cpu $check}"; return ;;
  esac
  if [ "$check" != PASS ]; then
    echo "FAIL no passing check-against-cpu line"
    return
  fi
  local lines
  lines=$(loss_lines_verdict "$log" "$ref" "$4" "$5")
  if [ "${lines%% *}" != PASS ]; then
    echo "$lines"
    return
  fi
  echo "PASS ${loss#loss: }; step 0 against the CPU model: PASS; ${lines#PASS }"
}

# torch_gpt_verdict RC LOG REFERENCE STEP0_TOL TOL: the Python GPT through
# dmuon.torch on CUDA (torchrun, NCCL): exit status 0, and its loss lines
# against its CPU run's (same plan, seed, data and flags; recorded when the
# bundle was built) within the CUDA trainer's tolerances.
torch_gpt_verdict() {
  local rc=$1 log=$2 error
  error=$(grep -m 1 -E 'error:|Error:' "$log" 2>/dev/null | cut -c1-200)
  case $rc in
  0) ;;
  124) echo "FAIL timed out"; return ;;
  *) echo "FAIL exit status $rc${error:+: $error}"; return ;;
  esac
  loss_lines_verdict "$log" "$3" "$4" "$5"
}

# torch_check_verdict RC LOG NAME: a torch check script's run, whose last
# verdict line is "NAME: PASS detail" or "NAME: FAIL detail".
torch_check_verdict() {
  local rc=$1 log=$2 line
  line=$(grep "^$3: \(PASS\|FAIL\) " "$log" 2>/dev/null | tail -n 1)
  case $rc in
  0) ;;
  124) echo "FAIL timed out${line:+; ${line#"$3": }}"; return ;;
  *) echo "FAIL exit status $rc${line:+; ${line#"$3": FAIL }}"; return ;;
  esac
  case $line in
  "$3: PASS "*) echo "PASS ${line#"$3": PASS }" ;;
  "") echo "FAIL no '$3: PASS' line" ;;
  *) echo "FAIL ${line#"$3": FAIL }" ;;
  esac
}
