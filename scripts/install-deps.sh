#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. Idempotent:
# does nothing when all are present.
#
#   scripts/install-deps.sh           everything (the build and every test)
#   scripts/install-deps.sh --python  what dmuonc, libdmuon and dmuon.torch need
#                                     (scripts/python-quickstart.sh)
set -euo pipefail

python_packages=(
  build-essential cmake ninja-build git
  llvm-14-dev llvm-14-tools
  libonnx-dev libprotobuf-dev protobuf-compiler python3 python3-onnx
  libtomlplusplus-dev
  libflatbuffers-dev flatbuffers-compiler
  libopenmpi-dev openmpi-bin
  libopenblas-dev liblapacke-dev
  python3-torch python3-numpy python3-mpi4py  # python/dmuon and dmuon.torch under MPI
)
packages=(
  "${python_packages[@]}"
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: clang with libFuzzer
  libtorch-dev fortunes        # examples/gpt: PyTorch 1.13's C++ API (CPU), its training text
  python3-torchvision          # test/zoo, test/python: torchvision's models
  gnuplot-nox                  # scripts/gpt-loss-curves.sh: the loss picture
  patchelf                     # scripts/gpu-bundle: run paths of the carried Fortran runtime
)

case ${1:-} in
  --python) packages=("${python_packages[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--python]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "Installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
