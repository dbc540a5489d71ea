#!/usr/bin/env bash
# Installs dependencies, builds, and compiles a bundled real model (Llama 3.1
# 8B) for an HSDP 2x4 mesh into build/llama-3.1-8b.plan, printing its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
model=${MODEL:-examples/models/llama-3.1-8b.toml}
mesh=${MESH:-2x4}
plan=build/$(basename "$model" .toml).plan
build/bin/dmuonc "$model" --mesh "$mesh" -o "$plan"
build/bin/dmuon-plan "$plan" --emit=summary
