"""Reads a plan's JSON (any stage) on stdin and prints the number of params
and the total number of elements: 'params N elements E'."""
import json
import sys

plan = json.load(sys.stdin)
total = 0
for p in plan["params"]:
    n = 1
    for d in p["shape"]:
        n *= d
    total += n
print(f"params {len(plan['params'])} elements {total}")
