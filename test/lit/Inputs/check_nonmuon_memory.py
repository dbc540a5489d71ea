#!/usr/bin/env python3
"""Checks a complete plan (dmuonc --emit=json) against the non-Muon memory goal of docs/dmuonc.md#routes:
no rank holds a full replica of a non-Muon param or its moments (none is
replicated), and every rank's non-Muon state (fp32 values, both AdamW
moments, gradients: 16 bytes an element, wherever the route keeps them) is
within 5% of the model's total non-Muon state / G. Recomputed from the
params' routes, independently of the plan's figures. Prints the ratio of the
largest rank's state to total / G, then `ok`, or what failed and exits 1.

  check_nonmuon_memory.py < plan.json
"""
import json
import sys


def main():
    plan = json.load(sys.stdin)
    mesh = plan["mesh"]
    G, R = mesh["shards"], mesh["replicas"]
    total, everywhere, per_slot, replicated = 0, 0, {}, []
    for p in plan["params"]:
        if p["role"] == "muon":
            continue
        n = 1
        for d in p["local_shape"]:
            n *= d
        total += 16 * n
        if p["route"] == "sharded":
            everywhere += 16 * p["shard_elements"]
        elif p["route"] == "owner":
            s, r = p["owner_slot"]["shard"], p["owner_slot"]["replicate"]
            for rr in range(R):  # the master on the owner's shard column (I2)
                per_slot[(s, rr)] = per_slot.get((s, rr), 0) + 4 * n
            per_slot[(s, r)] += 12 * n  # moments and gradient on the owner
        elif p["route"] == "replicated":
            replicated.append(p["name"])
            everywhere += 16 * n
    worst = max(everywhere + per_slot.get((s, r), 0) for s in range(G) for r in range(R))
    ratio = worst / (total / G)
    print("largest non-Muon state / (total / G) = %.4f" % ratio)
    errors = []
    if replicated:
        errors.append("replicated non-Muon params: " + ", ".join(replicated[:5]))
    if ratio > 1.05:
        errors.append("a rank holds %.4f x total / G" % ratio)
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
