#!/usr/bin/env bash
# libdmuon must export only its C ABI and depend on neither LLVM nor protobuf.
set -euo pipefail
lib=$1
extra=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^dmuon_' || true)
if [ -n "$extra" ]; then
  echo "FAIL: $lib exports symbols outside dmuon_*:"; echo "$extra" | head -20; exit 1
fi
count=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -c '^dmuon_')
[ "$count" -ge 20 ] || { echo "FAIL: only $count dmuon_* symbols exported"; exit 1; }
needed=$(readelf -d "$lib" | grep NEEDED || true)
if echo "$needed" | grep -Ei 'llvm|protobuf|onnx'; then
  echo "FAIL: $lib links LLVM or protobuf"; exit 1
fi
echo "ok: $count dmuon_* symbols, dependencies:"; echo "$needed"
