#!/usr/bin/env python3
"""Writes a manifest of N one-matrix layers (layers.0.w ... layers.{N-1}.w,
each [8, 8]), and with ITEMS, a dmuonc response file holding a
--pipeline-split of ITEMS equal ranges of them, for the lit tests of what
pipeline stages cost.

Usage: many_layers.py N OUT.toml [ITEMS OUT.rsp]
"""
import sys

n = int(sys.argv[1])
with open(sys.argv[2], "w") as f:
    f.write('[[param]]\nrepeat = %d\nprefix = "layers.{i}."\n'
            '  [[param.param]]\n  name = "w"\n  shape = [8, 8]\n' % n)
if len(sys.argv) > 3:
    items = int(sys.argv[3])
    per = n // items
    ranges = ["layers.%d-%d" % (k * per, n - 1 if k == items - 1 else (k + 1) * per - 1)
              for k in range(items)]
    with open(sys.argv[4], "w") as f:
        f.write("--pipeline-split=" + ",".join(ranges) + "\n")
