#!/usr/bin/env bash
# Collects the fuzzers' seed corpora from the test inputs:
#
#   test/fuzz/make-corpus.sh <dmuonc> <out-dir>
#
# writes <out-dir>/{fuzz_toml,fuzz_onnx,fuzz_plan,fuzz_mesh,fuzz_checkpoint}/: every TOML
# manifest of the lit tests and examples; the ONNX models that
# test/lit/Inputs/make_onnx.py generates; small plans that <dmuonc> compiles
# from a few manifests for several meshes and --stop-after stages; and mesh
# strings (valid and not) from the tests and docs; checkpoint manifests and
# shard files of both formats (docs/checkpoint-format.md). Run from anywhere.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 <dmuonc> <out-dir>" >&2
  exit 2
fi
dmuonc=$(realpath "$1")
out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
python=/usr/bin/python3
[[ -x $python ]] || python=python3

rm -rf "$out"
mkdir -p "$out"/{fuzz_toml,fuzz_onnx,fuzz_plan,fuzz_mesh,fuzz_checkpoint}

# TOML: every manifest in the tests and examples, by content hash (the names
# repeat across directories).
while IFS= read -r -d '' f; do
  cp "$f" "$out/fuzz_toml/$(sha1sum "$f" | cut -c1-16).toml"
done < <(find "$root/test" "$root/examples" -name '*.toml' -not -path '*/fuzz/*' -print0)

# ONNX: the generated test models (the external-data one refers to a file
# that is gone, as in the lit test).
for kind in folded external unused corrupt empty; do
  tmp=$(mktemp -d)
  (cd "$tmp" && "$python" "$root/test/lit/Inputs/make_onnx.py" "$kind" "$tmp/m.onnx" >/dev/null)
  cp "$tmp/m.onnx" "$out/fuzz_onnx/$kind.onnx"
  rm -rf "$tmp"
done

# Plans: small manifests on 1-D, HSDP and 3-D meshes.
plan_inputs=("$root/test/lit/Inputs/tiny.toml" "$root/hosts/tiny/tiny.toml"
             "$root/test/distributed/tiny-tp.toml")
i=0
for m in "${plan_inputs[@]}"; do
  for mesh in 1 8 2x4 dp_replicate=2,dp_shard=2,tp=2; do
    "$dmuonc" "$m" --mesh "$mesh" -o "$out/fuzz_plan/plan$i.bin" 2>/dev/null || true
    i=$((i + 1))
  done
done
# Stopped after each pass (the verifier checks each stage's fields; dmuonc
# writes only complete binary plans, so the stage is patched and restamped as
# in the lit tests).
base=$out/fuzz_plan/plan2.bin
if [[ -s $base ]]; then
  for stage in 0 1 2 3 4 5 6; do
    cp "$base" "$out/fuzz_plan/stage$stage.bin"
    "$python" "$root/test/lit/plan/Inputs/patch_plan.py" "$out/fuzz_plan/stage$stage.bin" \
      stage $stage --restamp >/dev/null
  done
fi
# Keep only what dmuonc wrote (some meshes do not suit some models).
find "$out/fuzz_plan" -size 0 -delete

# Meshes: the forms the docs and tests use, and some near misses.
meshes=(1 8 64 2x4 2X4 16x256 1x1 dp=8 dp_shard=8 dp_replicate=2,dp_shard=4
        dp_replicate=2,dp_shard=2,tp=2 dp=2,cp=2,tp=2 ep=4,dp_shard=2 tp=2,dp_shard=4
        pp=2,dp_replicate=2,dp_shard=2,tp=2 0 2x0 2x4x8 dp=0 dp=2,dp=2 x4 2x
        "dp_shard=8," "=8" 99999999999 4096x4096 dp_shard=16777216)
i=0
for m in "${meshes[@]}"; do
  printf '%s' "$m" >"$out/fuzz_mesh/mesh$i"
  i=$((i + 1))
done

# Checkpoints: manifests as a save writes them (the fuzzer restamps the end
# line's checksum, so the seeds need none) and shard files of format 1 (whole
# params) and 2 (slices), with their index checksums.
ck=$out/fuzz_checkpoint
cat >"$ck/manifest-hyper" <<'EOF'
dmuon-checkpoint 1
step 5
adamw_step 5
plan_fingerprint 0x0123456789abcdef
model_fingerprint 0xfedcba9876543210
world_size 2
steps_applied 5
steps_skipped 0
hyper_lr 0x1.47ae147ae147bp-6
hyper_momentum 0x1.e666666666666p-1
hyper_weight_decay 0x0p+0
hyper_adamw_lr 0x1.47ae147ae147bp-7
hyper_adamw_weight_decay 0x0p+0
shard shard-0123456789abcdef-5-00000000deadbeef-r00000.dmck
shard shard-0123456789abcdef-5-00000000deadbeef-r00001.dmck
end 0x0000000000000000
EOF
cat >"$ck/manifest-old" <<'EOF'
dmuon-checkpoint 1
step 3
adamw_step 3
plan_fingerprint 0x0123456789abcdef
model_fingerprint 0xfedcba9876543210
world_size 1
shard shard-0123456789abcdef-3-r00000.dmck
end 0x0000000000000000
EOF
"$python" - "$ck" <<'EOF'
import struct, sys
def fnv(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h
def shard(version, entries):  # (name, kind, [(offset, extent)], values)
    data, index = b"", b""
    for name, kind, dims, n in entries:
        payload = struct.pack("<%df" % n, *range(n))
        index += struct.pack("<H", len(name)) + name + struct.pack(
            "<BQQQ", kind, 24 + len(data), len(payload), fnv(payload))
        if version >= 2:
            index += struct.pack("<B", len(dims))
            index += b"".join(struct.pack("<qq", o, e) for o, e in dims)
        data += payload
    index += struct.pack("<Q", fnv(index))
    head = b"DMCKSHRD" + struct.pack("<IIQ", version, len(entries), 24 + len(data))
    return head + data + index
out = sys.argv[1]
open(out + "/shard-v1.dmck", "wb").write(shard(1, [(b"w", 0, [], 8), (b"w", 1, [], 8)]))
open(out + "/shard-v2.dmck", "wb").write(shard(2, [
    (b"layers.0.up.weight", 0, [(0, 2), (0, 4)], 8),
    (b"layers.0.up.weight", 1, [(2, 2), (0, 4)], 8),
    (b"moe.experts.w", 2, [(1, 1), (0, 2), (0, 4)], 8),
    (b"norm.weight", 3, [(0, 8)], 8)]))
EOF

for d in "$out"/*/; do
  echo "$(basename "$d"): $(find "$d" -type f | wc -l) seeds"
done
