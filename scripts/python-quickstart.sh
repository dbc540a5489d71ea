#!/usr/bin/env bash
# From a fresh clone: installs what Python needs (scripts/install-deps.sh
# --python), builds only dmuonc, libdmuon and the Python package into
# ${BUILD_DIR:-build-python} (no tests, benchmarks or libtorch), and trains
# examples/python/quickstart.py through dmuon.torch on 2 MPI ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --python
export BUILD_DIR=${BUILD_DIR:-build-python}
CMAKE_ARGS="-DDMUON_BUILD_TESTS=OFF -DDMUON_BUILD_BENCHMARKS=OFF ${CMAKE_ARGS:-}" \
  scripts/build.sh dmuonc dmuon dmuon_python
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1
# Debian's interpreter: python3-torch and python3-mpi4py are its packages.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONPATH="$PWD/$BUILD_DIR/python" mpirun -n 2 --oversubscribe -wdir "$work" \
  "$python" "$PWD/examples/python/quickstart.py"
