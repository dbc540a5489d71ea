#!/usr/bin/env bash
# ctest gpu_bundle_verdicts: the GPU bundle's checks, on any machine with gcc
# (no GPU, no bundle build needed):
#   1. test/gpu/check-bundle.sh passes a small well-formed bundle (made here
#      with gcc around the real run script) and fails, naming the culprit,
#      an ELF that needs a library from outside the bundle, one whose run
#      path does not reach the bundle's lib/, an unresolved symbol, an
#      OpenBLAS subset without cblas_ssyrk, a script that installs or
#      launches MPI, Python that runs pip or downloads (and not a message
#      naming mpirun), missing torch-step files or reference lines, a
#      bundle over 48 MiB and budgets over 420 s;
#   2. the verdicts of scripts/gpu-verdicts.sh on made-up logs (loss lines
#      against the reference, the trainer, the NCCL runtime test, the torch
#      steps);
#   3. scripts/gpu-bundle-run itself: its dry run, a run without a GPU (FAIL
#      at once, every later step "not run", summary.json written), and a run
#      on a stand-in machine (fake nvidia-smi, python3 and device libraries,
#      binaries and a torchrun that print what passing ones print): every
#      step PASS, the Llama step given the prediction recorded in bundle.env.
#   gpu-bundle-test.sh <repo>
set -uo pipefail
repo=$1
check=$repo/test/gpu/check-bundle.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# A bundle's share/: the real verdicts and a bundle.env.
share() {
  mkdir -p "$1/share/plans" "$1/share/reference"
  cp "$repo/scripts/gpu-verdicts.sh" "$1/share/"
  printf 'BUNDLE_CUDA=13.0\nBUNDLE_COMMIT=test\nLOSS_STEP0_TOL=1e-4\nLOSS_TOL=2e-2\nLLAMA_PREDICTED_MS=400.548\n' \
    >"$1/share/bundle.env"
  printf 'TORCH_MESHES="1 2"\nTORCH_GPT_ARGS="--steps 20 --eval-every 20"\n' >>"$1/share/bundle.env"
}

# torch_files DIR: the torch steps' files as scripts/gpu-bundle lays them
# out (the real package and scripts; stand-in plans, data and reference).
torch_files() {
  mkdir -p "$1/python" "$1/share/gpt-data" "$1/share/plans" "$1/share/reference"
  (cd "$repo/python" && find dmuon -name '*.py' -print0 | xargs -0 cp --parents -t "$1/python")
  cp "$repo/examples/gpt/python/gpt_train.py" "$repo/test/gpu/torch_hf_gpt2_check.py" "$1/python/"
  echo "Q: a fortune" >"$1/share/gpt-data/fortunes"
  for n in 1 2; do echo plan >"$1/share/plans/gpt-$n.plan"; echo plan >"$1/share/plans/hf-gpt2-$n.plan"; done
  awk 'BEGIN { for (s = 0; s < 20; s++) printf "step %4d  loss %.6f  (0.10 s)\n", s, 5.5 / (1 + 0.05 * s) }' \
    >"$1/share/reference/python-gpt-cpu.log"
}

# good DIR: bin/hello needs lib/libok.so.1 through $ORIGIN/../lib, and the
# real run script.
good() {
  mkdir -p "$1/bin" "$1/lib"
  echo 'int ok(void) { return 0; }' >"$tmp/ok.c"
  gcc -shared -fPIC -o "$1/lib/libok.so.1" -Wl,-soname,libok.so.1 "$tmp/ok.c"
  echo 'int ok(void); int main(void) { return ok(); }' >"$tmp/hello.c"
  gcc -o "$1/bin/hello" "$tmp/hello.c" "$1/lib/libok.so.1" '-Wl,-rpath,$ORIGIN/../lib'
  cp "$repo/scripts/gpu-bundle-run" "$1/run"
  share "$1"
  torch_files "$1"
}

# ------------------------------------------------------- 1. check-bundle.sh
good "$tmp/good"
out=$("$check" "$tmp/good" 2>&1) || fail "a well-formed bundle failed the check:"$'\n'"$out"
expect_in "$out" "check-bundle: PASS" "good bundle"
expect_in "$out" "libok.so.1(bundle)" "good bundle"
expect_in "$out" "libc.so.6(runtime)" "good bundle"

# The same bundle in a folder whose path has spaces (ldd's lines are not split
# on them).
good "$tmp/with space/a  b"
out=$("$check" "$tmp/with space/a  b" 2>&1) || fail "a well-formed bundle under a path with spaces failed the check:"$'\n'"$out"
expect_in "$out" "check-bundle: PASS" "path with spaces"
expect_in "$out" "libok.so.1(bundle)" "path with spaces"

# An ELF that needs libfoo.so from outside the bundle.
cp -r "$tmp/good" "$tmp/foo"
mkdir -p "$tmp/outside"
echo 'int foo(void) { return 0; }' >"$tmp/foo.c"
gcc -shared -fPIC -o "$tmp/outside/libfoo.so" -Wl,-soname,libfoo.so "$tmp/foo.c"
echo 'int foo(void); int main(void) { return foo(); }' >"$tmp/needs-foo.c"
gcc -o "$tmp/foo/bin/needs-foo" "$tmp/needs-foo.c" "$tmp/outside/libfoo.so" "-Wl,-rpath,$tmp/outside"
out=$("$check" "$tmp/foo" 2>&1) && fail "a bundle needing libfoo.so from outside passed:"$'\n'"$out"
expect_in "$out" "bin/needs-foo needs libfoo.so, which resolves to $tmp/outside/libfoo.so" "libfoo"
expect_in "$out" "check-bundle: FAIL" "libfoo"

# The bundle's own library, but no run path to it.
cp -r "$tmp/good" "$tmp/norpath"
gcc -o "$tmp/norpath/bin/hello" "$tmp/hello.c" "$tmp/norpath/lib/libok.so.1"
out=$("$check" "$tmp/norpath" 2>&1) && fail "an ELF without a run path to lib/ passed"
expect_in "$out" "bin/hello needs libok.so.1, which is not found through its run path" "no run path"

# A library in the bundle that lacks a symbol an ELF calls (as an OpenBLAS
# subset without one of the functions used would).
cp -r "$tmp/good" "$tmp/nosym"
echo 'int ok(void); int ok2(void); int main(void) { return ok() + ok2(); }' >"$tmp/hello2.c"
echo 'int ok(void) { return 0; } int ok2(void) { return 0; }' >"$tmp/ok2.c"
gcc -shared -fPIC -o "$tmp/libok.so.1" -Wl,-soname,libok.so.1 "$tmp/ok2.c"
gcc -o "$tmp/nosym/bin/hello2" "$tmp/hello2.c" "$tmp/libok.so.1" '-Wl,-rpath,$ORIGIN/../lib'
out=$("$check" "$tmp/nosym" 2>&1) && fail "an ELF with an unresolved symbol passed"
expect_in "$out" "bin/hello2 has unresolved symbols" "unresolved symbol"
expect_in "$out" "undefined symbol: ok2" "unresolved symbol"

# An OpenBLAS subset that lacks cblas_ssyrk (linked from cblas_sgemm alone
# it would still load): the probe does not link.
cp -r "$tmp/good" "$tmp/blas"
echo 'void cblas_sgemm(void) {}' >"$tmp/sgemm.c"
gcc -shared -fPIC -o "$tmp/blas/lib/libopenblas.so.0" -Wl,-soname,libopenblas.so.0 "$tmp/sgemm.c"
out=$("$check" "$tmp/blas" 2>&1) && fail "an OpenBLAS subset without cblas_ssyrk passed"
expect_in "$out" "lib/libopenblas.so.0: a probe calling cblas_sgemm and cblas_ssyrk does not link" "blas subset"
echo 'void cblas_sgemm(void) {} void cblas_ssyrk(void) {}' >"$tmp/noop.c"
gcc -shared -fPIC -o "$tmp/blas/lib/libopenblas.so.0" -Wl,-soname,libopenblas.so.0 "$tmp/noop.c"
out=$("$check" "$tmp/blas" 2>&1) && fail "an OpenBLAS that computes nothing passed"
expect_in "$out" "lib/libopenblas.so.0 does not compute: sgemm and ssyrk 256x256: worst absolute error" "blas no-op"

# A script that installs, one that launches MPI.
cp -r "$tmp/good" "$tmp/pip"
printf '#!/bin/sh\npip install numpy\n' >"$tmp/pip/share/setup.sh"
out=$("$check" "$tmp/pip" 2>&1) && fail "a bundle running pip install passed"
expect_in "$out" "share/setup.sh calls what the GPU machine must not run" "pip install"
cp -r "$tmp/good" "$tmp/mpi"
printf '#!/bin/sh\nexec mpirun -n 1 bin/hello\n' >"$tmp/mpi/share/launch.sh"
out=$("$check" "$tmp/mpi" 2>&1) && fail "a bundle running mpirun passed"
expect_in "$out" "share/launch.sh calls what the GPU machine must not run" "mpirun"

# Python files are read by their code: a message naming mpirun passes (the
# good bundle's package has them), a call of pip or a download does not.
grep -q 'mpirun -n' "$tmp/good/python/dmuon/torch/_launch.py" ||
  fail "the package's launch messages no longer name mpirun: this case tests nothing"
cp -r "$tmp/good" "$tmp/pypip"
printf 'import subprocess\nsubprocess.run(["pip", "install", "transformers"])\n' >"$tmp/pypip/python/setup_deps.py"
printf 'from urllib.request import urlopen\n' >"$tmp/pypip/python/fetch.py"
out=$("$check" "$tmp/pypip" 2>&1) && fail "a bundle whose Python runs pip install passed"
expect_in "$out" "Python files call what the GPU machine must not run" "python pip"
expect_in "$out" "setup_deps.py:2: \"pip\"" "python pip"
expect_in "$out" "fetch.py:1: from urllib.request import urlopen" "python download"

# The torch steps' files: each missing one is named.
cp -r "$tmp/good" "$tmp/notorch"
rm "$tmp/notorch/python/dmuon/torch/_device.py" "$tmp/notorch/share/plans/hf-gpt2-2.plan"
out=$("$check" "$tmp/notorch" 2>&1) && fail "a bundle without the torch device layer passed"
expect_in "$out" "the torch steps' files are missing: python/dmuon/torch/_device.py share/plans/hf-gpt2-2.plan" "torch files"
cp -r "$tmp/good" "$tmp/noref"
head -n 5 "$tmp/good/share/reference/python-gpt-cpu.log" >"$tmp/noref/share/reference/python-gpt-cpu.log"
out=$("$check" "$tmp/noref" 2>&1) && fail "a bundle with 5 reference loss lines passed"
expect_in "$out" "python-gpt-cpu.log has no 20 loss lines" "torch reference"

# Over 48 MiB (a sparse file counts with its full size).
cp -r "$tmp/good" "$tmp/big"
truncate -s 49M "$tmp/big/share/padding"
out=$("$check" "$tmp/big" 2>&1) && fail "a 49 MiB bundle passed"
expect_in "$out" "over the 48 MiB" "size"

# Budgets over 420 s.
cp -r "$tmp/good" "$tmp/slow"
cat >"$tmp/slow/run" <<'EOF'
#!/bin/sh
printf 'steps:\n  one             300s  first\n  two             200s  second\ntotal budget 500s\n'
EOF
out=$("$check" "$tmp/slow" 2>&1) && fail "budgets of 500 s passed"
expect_in "$out" "the step budgets add up to 500s, over 420s" "budgets"

# ------------------------------------------------------- 2. the verdicts
# shellcheck source=../../scripts/gpu-verdicts.sh
source "$repo/scripts/gpu-verdicts.sh"
lines() { # lines FILE LOSS0 FACTOR: 20 loss lines, loss(s) = LOSS0 / (1 + s) * FACTOR^s
  awk -v l0="$2" -v f="$3" 'BEGIN { for (s = 0; s < 20; s++) printf "step %4d  loss %.6f  grad-norm 1.0\n", s, l0 / (1 + s) * f ^ s }' >"$1"
}
lines "$tmp/ref.log" 1.551235 1
lines "$tmp/same.log" 1.551235 1
lines "$tmp/drift.log" 1.551235 1.001 # 1.9% off by step 19
lines "$tmp/far.log" 1.551235 1.003   # 5.9% off by step 19
lines "$tmp/start.log" 1.56 1
v=$(loss_lines_verdict "$tmp/same.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "PASS 20 loss lines match the CPU trainer" "identical losses"
v=$(loss_lines_verdict "$tmp/drift.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "PASS" "drift within tolerance"
v=$(loss_lines_verdict "$tmp/far.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL step" "drift beyond tolerance"
v=$(loss_lines_verdict "$tmp/start.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL step 0" "step 0 off"
# A loss that is not a finite number fails, in the run or the reference,
# at any step, however the trainer's printf spells it.
for bad in nan -nan NaN inf -inf 1e999; do
  for step in 0 7; do
    sed "s/^step \( *$step\)  loss [^ ]*/step \1  loss $bad/" "$tmp/same.log" >"$tmp/bad.log"
    v=$(loss_lines_verdict "$tmp/bad.log" "$tmp/ref.log" 1e-4 2e-2)
    expect_in "$v" "FAIL step $step: loss $bad in the run is not a finite number" "loss $bad at step $step"
    v=$(loss_lines_verdict "$tmp/same.log" "$tmp/bad.log" 1e-4 2e-2)
    expect_in "$v" "FAIL step $step: loss $bad in the reference is not a finite number" "reference $bad at step $step"
  done
done
head -n 10 "$tmp/same.log" >"$tmp/short.log"
v=$(loss_lines_verdict "$tmp/short.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL no loss line for step" "missing steps"
{
  cat "$tmp/same.log"
  echo "check-against-cpu: step 0, rank 0: loss gpu 1.551235 cpu 1.551235; worst: ...: PASS"
  echo "loss: 1.551235 -> 0.077562 (20.0x lower) over 20 steps"
} >"$tmp/trainer.log"
v=$(trainer_verdict 0 "$tmp/trainer.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "PASS 1.551235 -> 0.077562" "trainer passes"
v=$(trainer_verdict 77 "$tmp/trainer.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL skipped itself" "trainer skipped"
sed 's/: PASS$/: FAIL/' "$tmp/trainer.log" >"$tmp/trainer-bad.log"
v=$(trainer_verdict 0 "$tmp/trainer-bad.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL no passing check-against-cpu line" "trainer check failed"
printf '[ RUN      ] NcclRuntime.SingleRankStepsMatchTheCpuKernels\n[  SKIPPED ] 1 test\n' >"$tmp/nccl.log"
v=$(nccl_runtime_verdict 0 "$tmp/nccl.log")
expect_in "$v" "FAIL its test skipped itself" "nccl skipped"
printf 'no CUDA device visible\n[  PASSED  ] 4 tests.\n' >"$tmp/precond.log"
v=$(precond_tests_verdict 0 "$tmp/precond.log")
expect_in "$v" "FAIL tests skipped" "precond skipped"
printf 'SOAP, 12 steps on CUDA vs CPU: update rel error 2.1e-05 (tolerance 1e-03)\n[  FAILED  ] 1 test, listed below:\n' >"$tmp/precond.log"
v=$(precond_tests_verdict 1 "$tmp/precond.log")
expect_in "$v" "FAIL exit status 1" "precond fails"
printf 'Shampoo, 12 steps on CUDA vs CPU: update rel error 4.0e-06 (tolerance 1e-03)\nSOAP, 12 steps on CUDA vs CPU: update rel error 2.1e-05 (tolerance 1e-03)\n[  PASSED  ] 11 tests.\n' >"$tmp/precond.log"
v=$(precond_tests_verdict 0 "$tmp/precond.log")
expect_in "$v" "PASS 11 passed, 0 failed; worst SOAP/Shampoo step error vs CPU 2.1e-05" "precond passes"
printf '[       OK ] NcclRuntime.SingleRankStepsMatchTheCpuKernels\n[  PASSED  ] 1 test.\n' >"$tmp/nccl.log"
v=$(nccl_runtime_verdict 0 "$tmp/nccl.log")
expect_in "$v" "PASS 3 steps" "nccl passes"
# The torch steps: the Python GPT's loss lines (with its last, loss-less
# "step 20  val" line) against its CPU run's, and a check's verdict line.
{ cat "$tmp/same.log"; echo "step   20  val 0.912"; } >"$tmp/torch-gpt.log"
v=$(torch_gpt_verdict 0 "$tmp/torch-gpt.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "PASS 20 loss lines match" "torch gpt passes"
v=$(torch_gpt_verdict 0 "$tmp/far.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL step" "torch gpt drifts"
printf 'gpt_train.py: rank 0: error: the NCCL backend is not available\n' >"$tmp/torch-err.log"
v=$(torch_gpt_verdict 1 "$tmp/torch-err.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL exit status 1: gpt_train.py: rank 0: error: the NCCL backend is not available" "torch gpt error"
v=$(torch_gpt_verdict 124 "$tmp/torch-gpt.log" "$tmp/ref.log" 1e-4 2e-2)
expect_in "$v" "FAIL timed out" "torch gpt timeout"
printf 'step 0 loss 6.3\ntorch-hf-gpt2: PASS 1 rank(s): loss 6.3 -> 2.1\n' >"$tmp/hf.log"
v=$(torch_check_verdict 0 "$tmp/hf.log" torch-hf-gpt2)
expect_in "$v" "PASS 1 rank(s): loss 6.3 -> 2.1" "hf check passes"
printf 'torch-hf-gpt2: FAIL the loss did not fall by 10%%: 6.3 -> 6.2\n' >"$tmp/hf-bad.log"
v=$(torch_check_verdict 1 "$tmp/hf-bad.log" torch-hf-gpt2)
expect_in "$v" "FAIL exit status 1; the loss did not fall by 10%: 6.3 -> 6.2" "hf check fails"
printf 'Traceback (most recent call last):\n' >"$tmp/hf-none.log"
v=$(torch_check_verdict 0 "$tmp/hf-none.log" torch-hf-gpt2)
expect_in "$v" "FAIL no 'torch-hf-gpt2: PASS' line" "hf check silent"

# ------------------------------------------------------- 3. the run script
run=$tmp/good/run
out=$("$run" --dry-run 2>&1) || fail "run --dry-run failed:"$'\n'"$out"
expect_in "$out" "total budget" "dry run"
for step in gpu libs kernel-tests precond-tests nccl-runtime trainer-cuda torch-gpt torch-hf-gpt2 gpu-bench \
  llama-step; do
  grep -qE "^  $step +[0-9]+s  " <<<"$out" || fail "dry run lists no budget for $step"
done

# No GPU: FAIL at the first step, the rest not run, a summary written.
mkdir -p "$tmp/nogpu-bin"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' \
  >"$tmp/nogpu-bin/nvidia-smi"
chmod +x "$tmp/nogpu-bin/nvidia-smi"
out=$(PATH="$tmp/nogpu-bin:$PATH" "$run" "$tmp/nogpu-out" 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "run without a GPU exited $rc, not 1"
expect_in "$out" "gpu-bundle: gpu            FAIL" "run without a GPU"
expect_in "$out" "not run: an earlier step failed" "run without a GPU"
expect_in "$out" "gpu-bundle: FAIL" "run without a GPU"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["status"] == "FAIL" and len(s["steps"]) == 10, s' \
  "$tmp/nogpu-out/summary.json" || fail "summary.json without a GPU is not the expected JSON"

# A detail with control characters (nvidia-smi's first line, with a carriage
# return and a terminal's colour codes): summary.json is still JSON, and
# holds them as they were.
mkdir -p "$tmp/ctl-bin"
printf '#!/bin/sh\nprintf "NVIDIA-SMI \\033[31mfailed\\033[0m\\r\\001\\t\\\\ \\"x\\"\\n"\nexit 9\n' \
  >"$tmp/ctl-bin/nvidia-smi"
chmod +x "$tmp/ctl-bin/nvidia-smi"
(cd "$tmp/good" && PATH="$tmp/ctl-bin:$PATH" ./run "$tmp/ctl-out" >/dev/null 2>&1)
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); d = s["steps"][0]["detail"]; assert d.endswith("nvidia-smi failed: NVIDIA-SMI \x1b[31mfailed\x1b[0m\r\x01\t\\ \"x\""), d' \
  "$tmp/ctl-out/summary.json" || fail "summary.json with control characters in a detail is not the expected JSON:"$'\n'"$(cat "$tmp/ctl-out/summary.json")"

# A stand-in GPU machine: nvidia-smi of an H200 with driver 580, python3
# whose nvidia package has the device libraries, binaries that pass.
sm=$tmp/standin
cp -r "$tmp/good" "$sm"
rm "$sm/bin/hello"
mkdir -p "$tmp/sm-bin" "$tmp/site/nvidia/cublas/lib" "$tmp/site/nvidia/nccl/lib" "$tmp/driver"
cat >"$tmp/sm-bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *name*) echo "NVIDIA H200" ;;
  *driver_version*) echo "580.65.06" ;;
  *) echo "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |" ;;
esac
EOF
touch "$tmp/site/nvidia/cublas/lib/libcublas.so.13" "$tmp/site/nvidia/cublas/lib/libcublasLt.so.13" \
  "$tmp/site/nvidia/nccl/lib/libnccl.so.2" "$tmp/site/nvidia/cublas/lib/libcuda.so.1"
mkdir -p "$tmp/site/nvidia/cusolver/lib"
touch "$tmp/site/nvidia/cusolver/lib/libcusolver.so.12" "$tmp/site/nvidia/cusolver/lib/libcusparse.so.12" \
  "$tmp/site/nvidia/cusolver/lib/libnvJitLink.so.13"
real_python=$(command -v python3)
printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$tmp/site" "$real_python" \
  >"$tmp/sm-bin/python3"
lines "$sm/share/reference/cpu-trainer.log" 1.551235 1
cat >"$sm/bin/cuda_kernels_unit_tests" <<'EOF'
#!/bin/sh
echo "NS 1024x1024 rel Frobenius error 1.2e-02"
echo "Muon update rel error 1.1e-02"
echo "[  PASSED  ] 24 tests."
EOF
cat >"$sm/bin/cuda_preconditioner_tests" <<'EOF'
#!/bin/sh
[ -f "$DMUON_TINY_PLAN_DIR/tiny-1.plan" ] || { echo "no plan in $DMUON_TINY_PLAN_DIR"; exit 1; }
echo "SOAP, 12 steps on CUDA vs CPU: update rel error 2.1e-05 (tolerance 1e-03)"
echo "Shampoo, 12 steps on CUDA vs CPU: update rel error 4.0e-06 (tolerance 1e-03)"
echo "[  PASSED  ] 11 tests."
EOF
cat >"$sm/bin/nccl_runtime_single_rank" <<'EOF'
#!/bin/sh
[ -f "$DMUON_TINY_PLAN_DIR/tiny-1.plan" ] || { echo "no plan in $DMUON_TINY_PLAN_DIR"; exit 1; }
echo "[  PASSED  ] 1 test."
EOF
{
  echo '#!/bin/sh'
  echo "cat '$tmp/trainer.log'"
} >"$sm/bin/dmuon-trainer-cuda"
cat >"$sm/bin/dmuon-gpu-bench" <<'EOF'
#!/bin/sh
echo "shape  NS ms"
echo "4096x4096  1.0"
echo "target: NS/GEMM at 4096x4096 = 0.85 (>= 0.60): PASS"
EOF
cat >"$sm/bin/dmuon-gpu-step" <<'EOF'
#!/bin/sh
case "$*" in *"--predicted-ms 400.548"*) ;; *) echo "no prediction passed: $*"; exit 1 ;; esac
echo "optimizer step: median 512.000 ms over 3 steps"
echo "target: optimizer step 512.000 ms, predicted 400.548 ms (ratio 1.28, within 0.5..2): PASS"
EOF
# The stand-in python3's torchrun: checks what the run passes (a rank per GPU
# nvidia-smi lists, the bundle's package on PYTHONPATH, plans that exist) and
# prints what passing runs print: the Python GPT's reference loss lines, the
# GPT-2 check's PASS line.
mkdir -p "$tmp/site/torch/distributed"
touch "$tmp/site/torch/__init__.py" "$tmp/site/torch/distributed/__init__.py"
cat >"$tmp/site/torch/distributed/run.py" <<'EOF'
import os, sys
args = sys.argv[1:]
script = next(a for a in args if a.endswith(".py"))
rest = args[args.index(script) + 1:]
if "--nproc_per_node=1" not in args or "--standalone" not in args:
    sys.exit(f"torchrun got {args}")
bundle = os.path.dirname(os.path.dirname(script))
if os.path.join(bundle, "python") not in os.environ.get("PYTHONPATH", "").split(":"):
    sys.exit("the bundle's package is not on PYTHONPATH")
plan = rest[rest.index("--plan") + 1]
if not os.path.isfile(plan):
    sys.exit(f"no plan {plan}")
if script.endswith("gpt_train.py"):
    if "--device" not in rest or rest[rest.index("--device") + 1] != "cuda":
        sys.exit("gpt_train.py without --device cuda")
    print(open(os.path.join(bundle, "share/reference/python-gpt-cpu.log")).read(), end="")
    print("step   20  val 4.1")
else:
    print("torch-hf-gpt2: PASS 1 rank(s), transformers 4.57.6: loss 6.3 -> 2.1 in 20 steps")
EOF
chmod +x "$tmp/sm-bin"/* "$sm/bin"/*
touch "$sm/share/plans/tiny-1.plan"
out=$(PATH="$tmp/sm-bin:$PATH" "$sm/run" "$tmp/sm-out" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "run on the stand-in machine exited $rc:"$'\n'"$out"
for step in gpu libs kernel-tests precond-tests nccl-runtime trainer-cuda torch-gpt torch-hf-gpt2 gpu-bench \
  llama-step; do
  grep -qE "^gpu-bundle: $step +PASS" <<<"$out" || fail "stand-in run: $step did not PASS:"$'\n'"$out"
done
expect_in "$out" "libcublas.so.13 in $tmp/site/nvidia/cublas/lib" "stand-in libraries"
expect_in "$out" "gpu-bundle: PASS" "stand-in run"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["status"] == "PASS" and [t["status"] for t in s["steps"]] == ["PASS"] * 10, s' \
  "$tmp/sm-out/summary.json" || fail "summary.json of the stand-in run is not all PASS"
for step in gpu libs kernel-tests precond-tests nccl-runtime trainer-cuda torch-gpt torch-hf-gpt2 gpu-bench \
  llama-step; do
  [ -s "$tmp/sm-out/$step.log" ] || fail "stand-in run wrote no $step.log"
done
[ -n "${SHOW:-}" ] && echo "$out"

# LD_LIBRARY_PATH set with empty and relative entries, and no device library
# folder found (a python3 without the nvidia package): the search path the
# run sets keeps only the absolute entries, so the libok.so.1 planted in the
# working folder is not the one the bundle's bin/hello loads.
mkdir -p "$tmp/bare-bin" "$tmp/planted-cwd"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bare-bin/python3"
chmod +x "$tmp/bare-bin/python3"
gcc -shared -fPIC -o "$tmp/planted-cwd/libok.so.1" -Wl,-soname,libok.so.1 "$tmp/ok.c"
for inherited in ":$tmp/elsewhere" "$tmp/elsewhere:" "$tmp/elsewhere::lib" ".:$tmp/elsewhere"; do
  (cd "$tmp/planted-cwd" && PATH="$tmp/bare-bin:$tmp/sm-bin:$PATH" LD_LIBRARY_PATH=$inherited \
    "$tmp/good/run" "$tmp/planted-out" >/dev/null 2>&1)
  log=$(cat "$tmp/planted-out/libs.log")
  cuda=
  [ -d /usr/local/cuda/lib64 ] && cuda=/usr/local/cuda/lib64:
  grep -qxF "LD_LIBRARY_PATH=$cuda$tmp/elsewhere" <<<"$log" ||
    fail "inherited '$inherited': no line 'LD_LIBRARY_PATH=$cuda$tmp/elsewhere' in:"$'\n'"$log"
  expect_in "$log" "libok.so.1 => $tmp/good/bin/../lib/libok.so.1" "inherited '$inherited'"
done
(cd "$tmp/planted-cwd" && PATH="$tmp/bare-bin:$tmp/sm-bin:$PATH" LD_LIBRARY_PATH= \
  "$tmp/good/run" "$tmp/planted-out" >/dev/null 2>&1)
grep -qxF "LD_LIBRARY_PATH=${cuda%:}" "$tmp/planted-out/libs.log" ||
  fail "empty LD_LIBRARY_PATH: no line 'LD_LIBRARY_PATH=${cuda%:}' in:"$'\n'"$(cat "$tmp/planted-out/libs.log")"

# The same machine without the driver's libcuda anywhere: the libs step
# names it, and nothing after it runs.
rm "$tmp/site/nvidia/cublas/lib/libcuda.so.1"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  out=$(PATH="$tmp/sm-bin:$PATH" "$sm/run" "$tmp/sm-nolib" 2>&1)
  [ $? -eq 1 ] || fail "run without libcuda did not fail"
  expect_in "$out" "gpu-bundle: libs           FAIL  not found: libcuda.so.1" "no libcuda"
  expect_in "$out" "gpu-bundle: kernel-tests   FAIL  not run: an earlier step failed" "no libcuda"
fi

if [ "$failures" -eq 0 ]; then
  echo "gpu-bundle verdicts: all checks passed"
else
  echo "gpu-bundle verdicts: $failures failures"
  exit 1
fi
