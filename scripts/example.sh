#!/usr/bin/env bash
# Installs dependencies, builds, and compiles a bundled real model (Llama 3.1
# 8B) for an HSDP 2x4 mesh into build/llama-3.1-8b.plan, printing its summary;
# then trains the example trainer's tiny model on 4 MPI ranks (HSDP 2x2) with
# libdmuon for ${STEPS:-50} steps.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Only what this job runs: the tools, the trainer and its plans (the tests,
# benchmarks and the libtorch example are scripts/test.sh's).
scripts/build.sh dmuonc dmuon-plan dmuon-trainer dmuon_tiny_plans
model=${MODEL:-examples/models/llama-3.1-8b.toml}
mesh=${MESH:-2x4}
plan=build/$(basename "$model" .toml).plan
build/bin/dmuonc "$model" --mesh "$mesh" -o "$plan"
build/bin/dmuon-plan "$plan" --emit=summary

# The example trainer (examples/trainer): 4 ranks, HSDP 2x2, loss per step,
# then per-rank NS work and bytes moved. Open MPI refuses root without these.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# One BLAS thread per rank: the ranks already fill the cores.
export OPENBLAS_NUM_THREADS=1
echo
mpirun -n 4 --oversubscribe build/bin/dmuon-trainer \
  --plan build/hosts/tiny/tiny-2x2.plan --steps "${STEPS:-50}"
