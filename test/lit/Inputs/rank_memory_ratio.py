"""Prints, for each per-rank memory figure, the ratio of its largest value
over the ranks of plan A (JSON) to that of plan B: how many times less
memory the busiest rank of B needs."""
import json
import sys

FIGURES = ["master_bytes", "momentum_bytes", "grad_bytes", "memory_bytes"]


def largest(path):
    with open(path) as f:
        ranks = json.load(f)["stats"]["ranks"]
    return {k: max(r[k] for r in ranks) for k in FIGURES}


a, b = largest(sys.argv[1]), largest(sys.argv[2])
for k in FIGURES:
    print(f"{k} {a[k] / b[k]:.2f} {a[k]} {b[k]}")
