#!/usr/bin/env bash
# Checks a GPU bundle (scripts/gpu-bundle) on the CPU machine, before it
# travels to a GPU machine that has only a driver, python3 with the pip
# nvidia-* libraries, and the C/C++ runtime:
#   * the bundle is at most 48 MiB;
#   * every ELF in it needs (readelf -d NEEDED) only
#     (a) libraries that resolve to files in the bundle (ldd, without
#         LD_LIBRARY_PATH: through the ELF's own run path),
#     (b) the C/C++ runtime (libc, libm, libstdc++, libgcc_s, ld-linux,
#         libpthread, libdl, librt), or
#     (c) the device libraries the GPU machine provides (libcuda, libcublas*,
#         libnccl, libcusolver*, libcusparse, libnvJitLink);
#     anything else is a FAIL naming the ELF and the library;
#   * every symbol of every ELF resolves (ldd -r), the device libraries taken
#     from /usr/local/cuda/lib64, so that the bundle's OpenBLAS subset has
#     all that is called;
#   * BUNDLE/run --dry-run exits 0 and lists steps whose budgets add up to at
#     most 420 s;
#   * no script in the bundle calls apt, pip install or mpirun: the shell
#     files by the words themselves, the Python files by their code
#     (test/gpu/bundle-python-calls.py), since their messages may name mpirun
#     to the user; the GPT's data (share/gpt-data) is text that is never run;
#   * the torch steps' files: dmuon's package (python/dmuon, its torch
#     layers), the Python GPT and the GPT-2 check, their plans for every GPU
#     count of bundle.env's TORCH_MESHES, the GPT's data and CPU loss lines;
#     with Debian's python3 (torch on the CPU) dmuon, dmuon.torch and both
#     scripts import, the package loads the bundle's own libdmuon, and the
#     GPT-2 plans have the param count of the check's stand-in model;
#   * where the bundle carries an OpenBLAS subset (lib/libopenblas.so.0) and
#     gcc is here: a probe linked against it alone computes cblas_sgemm and
#     cblas_ssyrk on 256x256 matrices on its threads, against a plain loop
#     in double (the subset loads, initializes and picks its CPU kernels),
#     and, where the subset has LAPACK's ssyevd_, the eigenvalues of a 64x64
#     second-difference matrix against their closed form (its Fortran
#     runtime loads from the bundle).
# Prints what each ELF needs and the newest glibc/libstdc++ symbol versions
# it requires (for the GPU machine's OS). Exit status 0 when every check
# passed.
#
#   test/gpu/check-bundle.sh BUNDLE
set -euo pipefail

readonly MAX_BUNDLE_BYTES=$((48 * 1024 * 1024))
readonly RUN_LIMIT_S=420
readonly RUNTIME_LIBS='^(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so\.[0-9]+$|^ld-linux(-x86-64|-aarch64)?\.so\.[0-9]+$'
readonly DEVICE_LIBS='^(libcuda|libcublas|libcublasLt|libnccl|libcusolver|libcusolverMg|libcusparse|libnvJitLink)\.so(\.[0-9]+)*$'
# Commands a bundle script must not run: package installs and MPI launchers.
readonly FORBIDDEN='(^|[^[:alnum:]_./-])(apt|apt-get|aptitude|mpirun|mpiexec)([^[:alnum:]_-]|$)|pip3?[[:space:]]+install|-m[[:space:]]+pip[[:space:]]'

[ $# -eq 1 ] || { echo "usage: $0 BUNDLE" >&2; exit 2; }
[ -d "$1" ] || { echo "check-bundle: $1 is not a folder" >&2; exit 2; }
bundle=$(cd "$1" && pwd -P)
failures=0
fail() {
  echo "check-bundle: FAIL: $*"
  failures=$((failures + 1))
}

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# needed_class NAME: runtime, device or other.
needed_class() {
  if [[ $1 =~ $RUNTIME_LIBS ]]; then echo runtime
  elif [[ $1 =~ $DEVICE_LIBS ]]; then echo device
  else echo other; fi
}

# The newest GLIBC_ and GLIBCXX_ versions an ELF's symbols require.
newest_versions() {
  objdump -T "$1" 2>/dev/null | grep -oE '\((GLIBC|GLIBCXX)_[0-9.]+\)' | tr -d '()' |
    sort -t_ -k1,1 -k2,2V | awk -F_ '{ v[$1] = $2 } END { for (k in v) printf "%s_%s ", k, v[k] }'
}

# 1. Size.
bytes=$(du -sb "$bundle" | cut -f1)
if ((bytes > MAX_BUNDLE_BYTES)); then
  fail "$bundle is $bytes bytes, over the 48 MiB ($MAX_BUNDLE_BYTES) limit"
else
  echo "check-bundle: size $((bytes / 1024)) KiB (limit $((MAX_BUNDLE_BYTES / 1024)) KiB)"
fi

# 2. Shared libraries and symbols of every ELF.
elves=()
while IFS= read -r -d '' f; do
  is_elf "$f" && elves+=("$f")
done < <(find "$bundle" -type f -print0 | sort -z)
[ ${#elves[@]} -gt 0 ] || fail "no ELF in $bundle"
device_path=
[ -d /usr/local/cuda/lib64 ] && device_path=/usr/local/cuda/lib64
for elf in "${elves[@]}"; do
  rel=${elf#"$bundle"/}
  mapfile -t needed < <(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  resolved=$(env -u LD_LIBRARY_PATH ldd "$elf" 2>&1 || true)
  summary=()
  for lib in "${needed[@]}"; do
    class=$(needed_class "$lib")
    if [ "$class" = other ]; then
      # "\tNAME => PATH (0xADDRESS)", where PATH may have spaces.
      path=$(awk -v l="$lib" '$1 == l && $2 == "=>" {
          sub(/^[ \t]*[^ \t]+ => /, ""); sub(/ \(0x[0-9a-f]+\)$/, ""); print; exit
        }' <<<"$resolved")
      if [ -z "$path" ] || [ "$path" = "not found" ]; then
        fail "$rel needs $lib, which is not found through its run path (not in the bundle, not the C/C++ runtime, not a device library)"
        class=MISSING
      else
        real=$(readlink -f "$path")
        if [[ $real == "$bundle"/* ]]; then
          class=bundle
        else
          fail "$rel needs $lib, which resolves to $real: not in the bundle, not the C/C++ runtime, not a device library"
          class=OUTSIDE
        fi
      fi
    fi
    summary+=("$lib($class)")
  done
  # Unresolved symbols, with the device libraries where CUDA puts them here.
  undefined=$(LD_LIBRARY_PATH=$device_path ldd -r "$elf" 2>&1 | grep -E '^undefined symbol' |
    grep -vE '\((/usr/local/cuda|.*libcuda)' || true)
  if [ -n "$undefined" ]; then
    fail "$rel has unresolved symbols:"$'\n'"$(head -n 5 <<<"$undefined")"
  fi
  printf 'check-bundle: %-40s %8s KiB  needs %s\n' "$rel" "$(($(stat -c %s "$elf") / 1024))" \
    "${summary[*]:-nothing}"
  printf 'check-bundle: %-40s requires %s\n' "" "$(newest_versions "$elf")"
done

# 3. The run script's dry run.
if [ ! -x "$bundle/run" ]; then
  fail "$bundle/run is missing or not executable"
else
  set +e
  dry=$("$bundle/run" --dry-run 2>&1)
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    fail "run --dry-run exited $rc:"$'\n'"$dry"
  else
    steps=0 sum=0
    while read -r budget; do
      steps=$((steps + 1))
      sum=$((sum + budget))
    done < <(sed -n 's/^  [a-z][a-z0-9-]*  *\([0-9][0-9]*\)s  .*/\1/p' <<<"$dry")
    total=$(sed -n 's/^total budget \([0-9]*\)s.*/\1/p' <<<"$dry")
    if [ "$steps" -eq 0 ]; then
      fail "run --dry-run lists no steps with budgets:"$'\n'"$dry"
    elif [ "$sum" != "$total" ]; then
      fail "run --dry-run: the step budgets add up to ${sum}s, its total line says ${total:-nothing}"
    elif ((sum > RUN_LIMIT_S)); then
      fail "run --dry-run: the step budgets add up to ${sum}s, over ${RUN_LIMIT_S}s"
    else
      echo "check-bundle: run --dry-run: $steps steps, ${sum}s of budget (limit ${RUN_LIMIT_S}s)"
    fi
  fi
fi

# 4. No installs, no MPI launcher, in any script (every file that is not an
# ELF, the GPT's data and the Python files, which are read by their code).
while IFS= read -r -d '' f; do
  is_elf "$f" && continue
  case ${f#"$bundle"/} in share/gpt-data/* | *.py) continue ;; esac
  if hits=$(grep -nIE "$FORBIDDEN" "$f"); then
    fail "${f#"$bundle"/} calls what the GPU machine must not run (apt, pip install, mpirun):"$'\n'"$hits"
  fi
done < <(find "$bundle" -type f -print0)
python_files=()
[ -d "$bundle/python" ] && mapfile -t python_files < <(find "$bundle/python" -name '*.py' | sort)
if [ ${#python_files[@]} -gt 0 ] && command -v python3 >/dev/null 2>&1; then
  # Their code, not their words: a string literal that starts with a command
  # (["pip", "install", ...], "apt-get install ...", "mpirun -n 2 ...") or an
  # import of an installer or a downloader.
  if ! hits=$(python3 "$(dirname "${BASH_SOURCE[0]}")/bundle-python-calls.py" "${python_files[@]}" 2>&1); then
    fail "cannot read the bundle's Python files: $hits"
  elif [ -n "$hits" ]; then
    fail "Python files call what the GPU machine must not run (apt, pip install, mpirun, a download):"$'\n'"$hits"
  fi
fi

# 5. The torch steps' files, and their imports on the CPU.
torch_files=(python/dmuon/__init__.py python/dmuon/_paths.py python/dmuon/_cuda_view.py
  python/dmuon/nccl.py python/dmuon/torch/__init__.py python/dmuon/torch/_launch.py
  python/dmuon/torch/_device.py python/dmuon/torch/_bridge.py python/gpt_train.py
  python/torch_hf_gpt2_check.py share/reference/python-gpt-cpu.log)
torch_meshes=$(. "$bundle/share/bundle.env" 2>/dev/null && echo "${TORCH_MESHES:-}") || true
[ -n "$torch_meshes" ] || fail "share/bundle.env names no TORCH_MESHES (the torch steps' GPU counts)"
for n in $torch_meshes; do torch_files+=("share/plans/gpt-$n.plan" "share/plans/hf-gpt2-$n.plan"); done
missing=()
for f in "${torch_files[@]}"; do [ -s "$bundle/$f" ] || missing+=("$f"); done
[ ${#missing[@]} -eq 0 ] || fail "the torch steps' files are missing: ${missing[*]}"
[ -n "$(ls -A "$bundle/share/gpt-data" 2>/dev/null)" ] ||
  fail "share/gpt-data (the GPT's data) is empty or missing"
if [ -s "$bundle/share/reference/python-gpt-cpu.log" ] &&
  [ "$(grep -c '^step .* loss ' "$bundle/share/reference/python-gpt-cpu.log")" -ne 20 ]; then
  fail "share/reference/python-gpt-cpu.log has no 20 loss lines"
fi
torch_python=/usr/bin/python3
[ -x "$torch_python" ] || torch_python=python3
if [ ${#missing[@]} -eq 0 ] && ! compgen -G "$bundle/lib/libdmuon.so*" >/dev/null; then
  echo "check-bundle: python: the files are there; no lib/libdmuon.so* to import them with"
elif [ ${#missing[@]} -eq 0 ] && "$torch_python" -c 'import torch' 2>/dev/null; then
  # RANK set: gpt_train.py leaves mpi4py alone, as under torchrun.
  set +e
  imported=$(cd "$bundle/python" && env -u DMUON_LIBRARY PYTHONPATH="$bundle/python" \
    LD_LIBRARY_PATH="$device_path" RANK=0 "$torch_python" - "$bundle" 2>&1 <<'PY'
import os, sys
bundle = sys.argv[1]
# torch first, as a torch script does: Debian's torch loads Debian's OpenBLAS
# (libopenblas.so.0), which the bundle's subset of the same soname would
# stand in for if libdmuon came first (the GPU machine's pip torch has its own).
import torch  # noqa: F401
import dmuon, dmuon.torch, dmuon._cuda_view, dmuon.torch._device, dmuon.torch._launch  # noqa
import gpt_train, torch_hf_gpt2_check
lib = os.path.realpath(dmuon.library_path)
if not lib.startswith(os.path.realpath(bundle) + os.sep):
    sys.exit(f"dmuon loaded {lib}, not the bundle's libdmuon")
want = len(list(torch_hf_gpt2_check.stand_in().parameters()))
for name in sorted(os.listdir(os.path.join(bundle, "share/plans"))):
    if name.startswith("hf-gpt2-"):
        got = dmuon.Plan(os.path.join(bundle, "share/plans", name)).num_params
        if got != want:
            sys.exit(f"{name} has {got} params, the GPT-2 stand-in {want}")
print(f"dmuon {dmuon.__version__} from {lib}; dmuon.torch and both scripts import; "
      f"the GPT-2 plans have the stand-in's {want} params")
PY
  )
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    echo "check-bundle: python: $imported"
  else
    fail "the bundle's Python files do not import on the CPU:"$'\n'"$(tail -n 5 <<<"$imported")"
  fi
elif [ ${#missing[@]} -eq 0 ]; then
  echo "check-bundle: python: the files are there; no torch here to import them with"
fi

# 6. The OpenBLAS subset computes (ldd -r shows it resolves; this shows it
# runs: OpenBLAS picks its kernels for the CPU at load time).
if [ -f "$bundle/lib/libopenblas.so.0" ] && command -v gcc >/dev/null 2>&1; then
  probe=$(mktemp -d)
  cat >"$probe/probe.c" <<'EOF'
#include <math.h>
#include <stdio.h>
/* cblas.h's values: CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112, CblasUpper 121. */
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);
void cblas_ssyrk(int, int, int, int, int, float, const float *, int, float, float *, int);
void ssyevd_(const char *, const char *, const int *, float *, const int *, float *, float *,
             const int *, int *, const int *, int *);
enum { N = 256 };
static float a[N * N], b[N * N], c[N * N], d[N * N];
int main(void) {
  unsigned x = 1;
  for (int i = 0; i < N * N; ++i) {
    x = x * 1664525u + 1013904223u;
    a[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
    x = x * 1664525u + 1013904223u;
    b[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
  }
  cblas_sgemm(101, 111, 111, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
  cblas_ssyrk(101, 121, 111, N, N, 1.0f, a, N, 0.0f, d, N);
  double worst = 0;
  for (int i = 0; i < N; ++i)
    for (int j = i; j < N; ++j) {
      double s = 0, t = 0;
      for (int k = 0; k < N; ++k) {
        s += (double)a[i * N + k] * b[k * N + j];
        t += (double)a[i * N + k] * a[j * N + k];
      }
      worst = fmax(worst, fmax(fabs(s - c[i * N + j]), fabs(t - d[i * N + j])));
    }
  printf("sgemm and ssyrk 256x256: worst absolute error %.2e", worst);
  int ok = worst < 1e-3;
#ifdef PROBE_LAPACK
  /* The second-difference matrix's eigenvalues are 2 - 2 cos(k pi / (M + 1)). */
  enum { M = 64 };
  static float t[M * M], w[M], work[2 * M * M + 6 * M + 1];
  static int iwork[5 * M + 3];
  for (int i = 0; i < M; ++i) {
    t[i * M + i] = 2.0f;
    if (i + 1 < M) t[i * M + i + 1] = t[(i + 1) * M + i] = -1.0f;
  }
  int m = M, lwork = 2 * M * M + 6 * M + 1, liwork = 5 * M + 3, info = 0;
  ssyevd_("V", "U", &m, t, &m, w, work, &lwork, iwork, &liwork, &info);
  double eig = 0;
  for (int k = 1; k <= M; ++k)
    eig = fmax(eig, fabs(w[k - 1] - (2.0 - 2.0 * cos(k * 3.14159265358979 / (M + 1)))));
  printf(", ssyevd 64x64: info %d, worst eigenvalue error %.2e", info, eig);
  ok = ok && info == 0 && eig < 1e-4;
#endif
  printf("\n");
  return ok ? 0 : 1;
}
EOF
  lapack=()
  [[ $(nm -D --defined-only "$bundle/lib/libopenblas.so.0") =~ [[:space:]]ssyevd_ ]] && lapack=(-DPROBE_LAPACK)
  if ! gcc -O1 "${lapack[@]}" -o "$probe/probe" "$probe/probe.c" "$bundle/lib/libopenblas.so.0" \
    "-Wl,-rpath,$bundle/lib" -lm 2>"$probe/gcc.log"; then
    fail "lib/libopenblas.so.0: a probe calling cblas_sgemm and cblas_ssyrk does not link:"$'\n'"$(head -n 5 "$probe/gcc.log")"
  elif result=$(env -u LD_LIBRARY_PATH OPENBLAS_NUM_THREADS=2 "$probe/probe" 2>&1); then
    echo "check-bundle: lib/libopenblas.so.0: $result"
  else
    fail "lib/libopenblas.so.0 does not compute: $result"
  fi
  rm -rf "$probe"
fi

if [ "$failures" -eq 0 ]; then
  echo "check-bundle: PASS ($bundle)"
else
  echo "check-bundle: FAIL ($failures problems in $bundle)"
  exit 1
fi
