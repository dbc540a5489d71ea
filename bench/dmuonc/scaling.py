#!/usr/bin/env python3
"""Scaling benchmark of dmuonc's passes (docs/benchmarks.md, "Compiler scaling").

Generates synthetic TOML manifests and times every pass with
`dmuonc --time-passes` (wall seconds) over params (one Muon matrix per layer,
shapes varied so the partition has work to do) on a fixed mesh, and over
ranks (a 12-param model with one tensor-parallel matrix) on growing meshes.
Prints one markdown table per sweep. Not a test: it takes minutes.

  bench/dmuonc/scaling.py --dmuonc build/bin/dmuonc [--params 10000,100000,1000000]
                          [--ranks 8,4096,65536,1048576] [--mesh-for-params 8]
                          [--clock wall|user|cpu]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

PASS_NAMES = {
    "Parse the input model": "parse",
    "Select Muon/AdamW roles": "select",
    "Validate shapes and placements": "validate",
    "Check supported placements": "check",
    "Group params by sharding": "group",
    "Partition units over owner slots": "partition",
    "Choose hook boundaries": "hooks",
    "Lay out packed buffers": "layout",
    "Compute per-rank figures": "figures",
    "Write the plan": "write",
    "Verify the plan": "verify",
}


def params_manifest(n):
    out = ['[model]\nname = "synthetic-%d"\n' % n]
    for i in range(n):
        out.append('[[param]]\nname = "layers.%d.w"\nshape = [%d, %d]\n'
                   % (i, 32 + i % 61, 48 + (i * 7) % 89))
    return "".join(out)


def ranks_manifest():
    out = ['[model]\nname = "synthetic-12"\n']
    for i in range(11):
        out.append('[[param]]\nname = "layers.%d.w"\nshape = [64, 64]\n' % i)
    out.append('[[param]]\nname = "layers.11.tp"\nshape = [64, 64]\n'
               'placements = { tp = "Shard(0)" }\n')
    return "".join(out)


# --time-passes columns: user, system, user+system, wall.
CLOCKS = {"user": 0, "cpu": 2, "wall": 3}


def run(dmuonc, manifest, mesh, clock="wall"):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.toml")
        with open(path, "w") as f:
            f.write(manifest)
        out = os.path.join(d, "plan.bin")
        p = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", dmuonc, path, "--mesh", mesh,
                            "--time-passes", "-o", out],
                           capture_output=True, text=True)
        size = os.path.getsize(out) if os.path.exists(out) else 0
    if p.returncode != 0:
        last = [l for l in p.stderr.splitlines() if "error:" in l]
        return {"error": last[0] if last else "exit %d" % p.returncode}
    times = {}
    for line in p.stderr.splitlines():
        cols = re.findall(r"([0-9.]+) \(\s*[0-9.]+%\)", line)
        name = line.split(")")[-1].strip()
        if len(cols) == 4 and name in PASS_NAMES:
            times[PASS_NAMES[name]] = float(cols[CLOCKS[clock]])
    m = re.search(r"TIME ([0-9.]+) ([0-9.]+) ([0-9.]+) ([0-9]+)", p.stderr)
    wall, user, system = float(m.group(1)), float(m.group(2)), float(m.group(3))
    times["total"] = {"wall": wall, "user": user, "cpu": user + system}[clock]
    times["rss_mb"] = int(m.group(4)) // 1024
    times["plan_mb"] = size / 2**20
    return times


def table(title, key, rows):
    cols = list(PASS_NAMES.values()) + ["total"]
    print("\n%s\n" % title)
    print("| %s | %s | max RSS | plan |" % (key, " | ".join(cols)))
    print("|" + "---|" * (len(cols) + 3))
    for label, t in rows:
        if "error" in t:
            print("| %s | %s |" % (label, t["error"]))
            continue
        print("| %s | %s | %d MB | %.1f MB |" % (
            label, " | ".join("%.2f" % t.get(c, 0.0) for c in cols), t["rss_mb"], t["plan_mb"]))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dmuonc", default="build/bin/dmuonc")
    ap.add_argument("--params", default="10000,100000,1000000")
    ap.add_argument("--ranks", default="8,4096,65536,1048576")
    ap.add_argument("--mesh-for-params", default="8")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="which --time-passes column per pass: wall, user, or cpu "
                         "(user+system); on a VM whose fresh pages fault slowly, user "
                         "time shows the passes' own work")
    a = ap.parse_args()
    rows = []
    for n in [int(x) for x in a.params.split(",") if x]:
        rows.append(("%d" % n, run(a.dmuonc, params_manifest(n), a.mesh_for_params, a.clock)))
    table("Params on --mesh %s (%s seconds per pass)" % (a.mesh_for_params, a.clock), "params",
          rows)
    rows = []
    for w in [int(x) for x in a.ranks.split(",") if x]:
        mesh = "dp_shard=%d,tp=2" % (w // 2) if w >= 2 else "1"
        rows.append(("%d (%s)" % (w, mesh), run(a.dmuonc, ranks_manifest(), mesh, a.clock)))
    table("12 params on growing meshes (%s seconds per pass)" % a.clock, "ranks", rows)


if __name__ == "__main__":
    main()
