#!/usr/bin/env python3
"""Scaling benchmark of dmuonc's passes (docs/benchmarks.md, "Compiler scaling").

Generates synthetic TOML manifests and times every pass with
`dmuonc --time-passes` (wall seconds) over params (one Muon matrix per layer,
shapes varied so the partition has work to do) on a fixed mesh, and over
ranks (a 12-param model with one tensor-parallel matrix) on growing meshes.
Prints one markdown table per sweep. Not a test: it takes minutes.

  bench/dmuonc/scaling.py --dmuonc build/bin/dmuonc [--params 10000,100000,1000000]
                          [--ranks 8,4096,65536,1048576] [--mesh-for-params 8]
                          [--clock wall|user|cpu|instructions] [--repeat N]

--clock instructions runs dmuonc under valgrind's callgrind and counts each
pass's instructions (billions, inclusive of what the pass calls): the work
itself, apart from the caches and the page faults that time adds as the
working set grows. A machine without hardware counters (a VM) has no other
way to count them. It is about 50x slower; max RSS is then valgrind's.

With --repeat N every input runs N times, in rounds over all the inputs of
a sweep, and each pass keeps its fastest time. After each table, the growth
of every pass from one row to the next and from the first row to the last,
beside n log n's.
"""
import argparse
import math
import os
import re
import shutil
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
CLOCKS = {"user": 0, "cpu": 2, "wall": 3, "instructions": None}

# The function each timed region of dmuonc runs (DmuoncMain.cpp, Pipeline.cpp).
PASS_FUNCTIONS = {
    "parse": "dmuon::loadModel(",
    "select": "dmuon::runSelect(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "validate": "dmuon::runValidate(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "check": "dmuon::runCheckPlacements(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "group": "dmuon::runGroup(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "partition": "dmuon::runPartition(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "hooks": "dmuon::runHooks(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "layout": "dmuon::runLayout(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "figures": "dmuon::runRankFigures(dmuon::PlanModel&, dmuon::Diagnostics&)",
    "write": "dmuon::writePlan(dmuon::PlanModel const&)",
    "verify": "dmuon::verifyWrittenPlan",
    "total": "main",
}


def inclusive_instructions(callgrind_out):
    """Instructions per function, its callees' included, from a callgrind
    output file: each fn= block's own cost lines plus, after each calls=
    line, the inclusive cost of that call."""
    names, total, current = {}, {}, None

    def name(token):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", token)
        if not m:
            return token
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names[m.group(1)]

    with open(callgrind_out, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                current = name(line[3:].rstrip("\n"))
            elif line.startswith("cfn="):
                name(line[4:].rstrip("\n"))
            elif current is not None and line[:1] in "0123456789+-*":
                cols = line.split()
                if len(cols) >= 2:
                    total[current] = total.get(current, 0) + int(cols[1])
    return total


def pass_instructions(callgrind_out):
    total = inclusive_instructions(callgrind_out)
    out = {}
    for key, fn in PASS_FUNCTIONS.items():
        exact = [v for n, v in total.items() if n == fn]
        count = exact[0] if exact else sum(v for n, v in total.items()
                                           if n.startswith(fn) and "::{lambda" not in n
                                           and "::~" not in n)
        out[key] = count / 1e9
    return out


def run(dmuonc, path, mesh, clock="wall"):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.bin")
        counted = os.path.join(d, "callgrind.out")
        tool = (["valgrind", "--tool=callgrind", "--callgrind-out-file=" + counted]
                if clock == "instructions" else [])
        p = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M"] + tool +
                           [dmuonc, path, "--mesh", mesh, "--time-passes", "-o", out],
                           capture_output=True, text=True)
        size = os.path.getsize(out) if os.path.exists(out) else 0
        if p.returncode == 0 and clock == "instructions":
            times = pass_instructions(counted)
    if p.returncode != 0:
        last = [l for l in p.stderr.splitlines() if "error:" in l]
        return {"error": last[0] if last else "exit %d" % p.returncode}
    m = re.search(r"TIME ([0-9.]+) ([0-9.]+) ([0-9.]+) ([0-9]+)", p.stderr)
    if clock != "instructions":
        times = {}
        for line in p.stderr.splitlines():
            cols = re.findall(r"([0-9.]+) \(\s*[0-9.]+%\)", line)
            name = line.split(")")[-1].strip()
            if len(cols) == 4 and name in PASS_NAMES:
                times[PASS_NAMES[name]] = float(cols[CLOCKS[clock]])
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
    for label, _, t in rows:
        if "error" in t:
            print("| %s | %s |" % (label, t["error"]))
            continue
        print("| %s | %s | %d MB | %.1f MB |" % (
            label, " | ".join("%.3f" % t.get(c, 0.0) for c in cols), t["rss_mb"], t["plan_mb"]))
    sys.stdout.flush()


# Below this many seconds a pass's time is mostly the timer and the
# scheduler, so its growth is not printed (instructions: below 5 million).
MIN_GROWTH_SECONDS = 0.005


def growth(key, rows):
    """Each pass's growth between rows, beside n log n's for the same n."""
    cols = list(PASS_NAMES.values()) + ["total"]
    ok = [(label, n, t) for label, n, t in rows if "error" not in t]
    pairs = list(zip(ok, ok[1:]))
    if len(ok) > 2:
        pairs.append((ok[0], ok[-1]))
    if not pairs:
        return
    print("\nGrowth (x; '-' where the smaller figure is under %g)\n" % MIN_GROWTH_SECONDS)
    print("| %s | n log n | %s |" % (key, " | ".join(cols)))
    print("|" + "---|" * (len(cols) + 2))
    for (la, na, ta), (lb, nb, tb) in pairs:
        nlogn = nb * math.log(nb) / (na * math.log(na)) if na > 1 else float(nb)
        cells = []
        for c in cols:
            a, b = ta.get(c, 0.0), tb.get(c, 0.0)
            cells.append("%.1f" % (b / a) if min(a, b) >= MIN_GROWTH_SECONDS else "-")
        print("| %s -> %s | %.1f | %s |" % (la.split()[0], lb.split()[0], nlogn, " | ".join(cells)))
    sys.stdout.flush()


def best_of(runs):
    for r in runs:
        if "error" in r:
            return r
    best = dict(runs[0])
    for r in runs[1:]:
        for k, v in r.items():
            best[k] = max(best[k], v) if k == "rss_mb" else min(best.get(k, v), v)
    return best


def sweep(dmuonc, inputs, clock, repeat):
    """Rows (label, n, fastest times) for inputs [(label, n, manifest, mesh)].

    Each manifest is written once; the N runs go in rounds over all inputs,
    so every size sees the same machine as it drifts (on a shared VM a run
    can take 1.5x the one a minute before)."""
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, (_, _, manifest, _) in enumerate(inputs):
            paths.append(os.path.join(d, "m%d.toml" % i))
            with open(paths[-1], "w") as f:
                f.write(manifest)
        runs = [[] for _ in inputs]
        for _ in range(max(1, repeat)):
            for i, (_, _, _, mesh) in enumerate(inputs):
                runs[i].append(run(dmuonc, paths[i], mesh, clock))
    return [(label, n, best_of(r)) for (label, n, _, _), r in zip(inputs, runs)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dmuonc", default="build/bin/dmuonc")
    ap.add_argument("--params", default="10000,100000,1000000")
    ap.add_argument("--ranks", default="8,4096,65536,1048576")
    ap.add_argument("--mesh-for-params", default="8")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="which --time-passes column per pass: wall, user, or cpu "
                         "(user+system); on a VM whose fresh pages fault slowly, user "
                         "time shows the passes' own work; instructions: billions of "
                         "instructions per pass, counted by valgrind's callgrind")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per input, in rounds over the sweep's inputs; each "
                         "pass keeps its fastest time")
    a = ap.parse_args()
    if a.clock == "instructions" and not shutil.which("valgrind"):
        sys.exit("scaling.py: error: --clock instructions needs valgrind "
                 "(apt-get install valgrind)")
    if not os.access(a.dmuonc, os.X_OK):
        sys.exit("scaling.py: error: '%s' is not an executable dmuonc (build it first)" % a.dmuonc)
    rows = sweep(a.dmuonc, [("%d" % n, n, params_manifest(n), a.mesh_for_params)
                            for n in [int(x) for x in a.params.split(",") if x]],
                 a.clock, a.repeat)
    unit = ("billions of instructions" if a.clock == "instructions"
            else "%s seconds" % a.clock)
    table("Params on --mesh %s (%s per pass)" % (a.mesh_for_params, unit), "params",
          rows)
    growth("params", rows)
    inputs = []
    for w in [int(x) for x in a.ranks.split(",") if x]:
        mesh = "dp_shard=%d,tp=2" % (w // 2) if w >= 2 else "1"
        inputs.append(("%d (%s)" % (w, mesh), w, ranks_manifest(), mesh))
    rows = sweep(a.dmuonc, inputs, a.clock, a.repeat)
    table("12 params on growing meshes (%s per pass)" % unit, "ranks", rows)
    growth("ranks", rows)


if __name__ == "__main__":
    main()
