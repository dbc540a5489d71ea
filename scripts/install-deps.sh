#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. Idempotent:
# does nothing when all are present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git
  llvm-14-dev llvm-14-tools
  libonnx-dev libprotobuf-dev protobuf-compiler python3 python3-onnx
  libtomlplusplus-dev
  libflatbuffers-dev flatbuffers-compiler
  libopenmpi-dev openmpi-bin
  libopenblas-dev liblapacke-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: clang with libFuzzer
  libtorch-dev fortunes        # examples/gpt: PyTorch 1.13's C++ API (CPU), its training text
  python3-torch python3-torchvision  # test/zoo: models exported with torch.onnx.export
  python3-numpy python3-mpi4py       # test/python: the Python package and dmuon.torch under MPI
  gnuplot-nox                  # scripts/gpt-loss-curves.sh: the loss picture
  patchelf                     # scripts/gpu-bundle: run paths of the carried Fortran runtime
)

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
