#!/usr/bin/env bash
# Checkpoint scenarios (issue: reliability): resume under the same plan is
# bit-identical, resume under another mesh matches within 1e-4, a rank killed
# half-way through a save leaves the previous checkpoint loadable, and
# truncated, corrupt or unrelated checkpoints are refused.
# Usage: checkpoint.sh <checkpoint_test> <plan dir> <other-model plan> <work dir>
set -euo pipefail
bin=$1 plans=$2 other=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
run() { local n=$1; shift; mpirun --oversubscribe -n "$n" "$bin" "$@"; }

run 4 --mode reference --plan "$plans/tiny-2x2.plan" --steps 10 --out "$work/ref.txt"
run 4 --mode save --plan "$plans/tiny-2x2.plan" --steps 5 --ckpt "$work/ckpt"

echo "== same plan: bit-identical"
run 4 --mode resume --plan "$plans/tiny-2x2.plan" --ckpt "$work/ckpt" --steps 10 \
  --compare "$work/ref.txt" --exact
echo "== saved under 2x2, resumed under 8 (1-D) and 2x4"
run 8 --mode resume --plan "$plans/tiny-2x4.plan" --ckpt "$work/ckpt" --steps 10 \
  --compare "$work/ref.txt" --tol 1e-4
run 4 --mode resume --plan "$plans/tiny-4.plan" --ckpt "$work/ckpt" --steps 10 \
  --compare "$work/ref.txt" --tol 1e-4
run 1 --mode resume --plan "$plans/tiny-1.plan" --ckpt "$work/ckpt" --steps 10 \
  --compare "$work/ref.txt" --tol 1e-4

echo "== rank 1 dies half-way through saving step 7"
if DMUON_FAULT_INJECT=save_crash_rank:1 run 4 --mode save --plan "$plans/tiny-2x2.plan" \
     --steps 7 --ckpt "$work/ckpt" > "$work/crash.log" 2>&1; then
  echo "FAIL: the save with an injected crash succeeded"; exit 1
fi
run 4 --mode resume --plan "$plans/tiny-2x2.plan" --ckpt "$work/ckpt" --steps 10 \
  --compare "$work/ref.txt" --exact | tee "$work/after-crash.log"
grep -q "resumed at step 5" "$work/after-crash.log"

echo "== refused checkpoints"
cp -r "$work/ckpt" "$work/trunc"
# The shards the manifest names (a crashed save may have left others behind).
shard_of() { echo "$1/$(awk -v r="r0000$2.dmck" '$1 == "shard" && index($2, r) { print $2 }' "$1/checkpoint")"; }
shard=$(shard_of "$work/trunc" 1)
head -c 100 "$shard" > "$shard.cut" && mv "$shard.cut" "$shard"
run 4 --mode load-error --plan "$plans/tiny-2x2.plan" --ckpt "$work/trunc" --expect "is corrupt"
cp -r "$work/ckpt" "$work/flip"
shard=$(shard_of "$work/flip" 0)
printf '\xff' | dd of="$shard" bs=1 seek=200 conv=notrunc status=none
run 4 --mode load-error --plan "$plans/tiny-2x2.plan" --ckpt "$work/flip" --expect "checksum mismatch"
cp -r "$work/ckpt" "$work/manifest"
sed -i 's/^step 5$/step 6/' "$work/manifest/checkpoint"
run 4 --mode load-error --plan "$plans/tiny-2x2.plan" --ckpt "$work/manifest" --expect "manifest checksum mismatch"
run 4 --mode load-error --plan "$other" --ckpt "$work/ckpt" --expect "different model"
run 4 --mode load-error --plan "$plans/tiny-2x2.plan" --ckpt "$work/none" --expect "cannot open checkpoint manifest"
echo "checkpoint scenarios: all passed"
