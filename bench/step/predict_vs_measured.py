#!/usr/bin/env python3
"""The simulator's predicted step against dmuon_step_bench's measured one.

For each rank count: runs the step-time bench (`--runs` times; the run with
the lowest muon/dmuon total is kept, best-of-N), simulates the plan the
bench compiled (`dmuon-plan --simulate`) on a calibrated cluster
description, and prints predicted against measured optimizer step and total
step of dmuon Muon (docs/benchmarks.md, "Predicted against measured").

The description's [workload] is a flops model; its tokens_per_rank is set
for each rank count to the bench's global batch split over the ranks, so
forward and backward per hook group come from the description.

  bench/step/predict_vs_measured.py --build build \
      --cluster examples/clusters/cpu-mpi-2core.toml --ranks 1,2,4 --runs 3
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROW = re.compile(r"^muon/dmuon\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)")
FASTEST = re.compile(r"^fastest muon/dmuon\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)")


def run_bench(args, n, work):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # Past the cores, --oversubscribe (Open MPI's waits then yield the
    # processor); up to them, the default binding and busy waits: a yielding
    # wait on a machine others load gives the core away for a time slice.
    over = ["--oversubscribe"] if n > os.cpu_count() else []
    cmd = [args.mpirun, "-n", str(n)] + over + [
           os.path.join(args.build, "bench", "dmuon_step_bench"), "--work", work,
           "--batch", str(args.batch), "--context", str(args.context),
           "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--rounds", str(args.rounds)] + args.bench_arg
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        for key, pattern in (("mean", ROW), ("fastest", FASTEST)):
            m = pattern.match(line)
            if m:
                fwd, comm, step, total = (float(x) for x in m.groups()[:4])
                rows[key] = {"fwd": fwd, "comm": comm, "step": step, "total": total}
    if len(rows) != 2:
        sys.exit("no muon/dmuon rows in the bench's output:\n" + out)
    rows["load"] = load
    return rows


def cluster_for(profile, tokens, mfu, path):
    text = open(profile).read()
    text, count = re.subn(r"(?m)^tokens_per_rank\s*=.*$", "tokens_per_rank = %d" % tokens, text)
    if count != 1:
        sys.exit("%s: expected one tokens_per_rank in its [workload]" % profile)
    if mfu is not None:
        text = re.sub(r"(?m)^mfu\s*=.*$", "mfu = %.4g" % mfu, text)
    # The cost table stays next to the profile.
    text = re.sub(r'(?m)^(ns_cost_table\s*=\s*")([^"/][^"]*)"',
                  lambda m: m.group(1) + os.path.join(os.path.dirname(os.path.abspath(profile)),
                                                      m.group(2)) + '"', text)
    with open(path, "w") as f:
        f.write(text)


def simulate(args, plan, cluster):
    out = subprocess.run([os.path.join(args.build, "bin", "dmuon-plan"), plan,
                          "--simulate=" + cluster, "--emit=json"],
                         check=True, capture_output=True, text=True).stdout
    d = json.loads(out)["dmuon"]
    return {"compute": d["compute_s"] * 1e3, "comm": d["exposed_comm_s"] * 1e3,
            "step": d["optimizer_step_s"] * 1e3, "total": d["step_s"] * 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--cluster", default="examples/clusters/cpu-mpi-2core.toml")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--runs", type=int, default=3, help="bench runs per rank count (best kept)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--measure", choices=["fastest", "mean"], default="fastest",
                    help="compare with each rank's fastest timed step (default; the least "
                         "interference from other jobs) or the mean over the timed steps")
    ap.add_argument("--calibrate-mfu", action="store_true",
                    help="set [workload] mfu from the first rank count's measured fwd+bwd "
                         "(run it with --ranks 1,...), then predict every rank count with it")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--work", help="plans and descriptions (default: a temporary directory)")
    ap.add_argument("--bench-arg", action="append", default=[],
                    help="passed to dmuon_step_bench (repeat for each word)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="predict-vs-measured-")
    os.makedirs(work, exist_ok=True)

    rows, ok, mfu = [], True, None
    for n in (int(x) for x in args.ranks.split(",")):
        runs = [run_bench(args, n, work) for _ in range(args.runs)]
        best = min((r[args.measure] for r in runs), key=lambda r: r["total"])
        plans = glob.glob(os.path.join(work, "*-muon-%d.plan" % n))
        if len(plans) != 1:
            sys.exit("expected one plan for mesh %d in %s, found %s" % (n, work, plans))
        cluster = os.path.join(work, "cluster-%d.toml" % n)
        cluster_for(args.cluster, args.batch * args.context // n, mfu, cluster)
        pred = simulate(args, plans[0], cluster)
        if args.calibrate_mfu and mfu is None:
            # The flops model's time is inversely proportional to mfu.
            given = float(re.search(r"(?m)^mfu\s*=\s*([\d.eE+-]+)",
                                    open(args.cluster).read()).group(1))
            # A host faster than the profile's matrix peak would fit mfu > 1,
            # which a cluster description refuses: the peak is then the rate.
            mfu = min(1.0, given * pred["compute"] / best["fwd"])
            cluster_for(args.cluster, args.batch * args.context // n, mfu, cluster)
            pred = simulate(args, plans[0], cluster)
        err_step = pred["step"] / best["step"] - 1
        err_total = pred["total"] / best["total"] - 1
        ok &= abs(err_step) <= args.tolerance and abs(err_total) <= args.tolerance
        rows.append((n, best, pred, err_step, err_total,
                     [r[args.measure]["total"] for r in runs], [r["load"] for r in runs]))

    print("dmuon Muon, ms per step: predicted (dmuon-plan --simulate=%s%s) against measured "
          "(dmuon_step_bench, %s step, best of %d runs)" %
          (args.cluster, "" if mfu is None else ", mfu %.4g from %d rank(s)" % (mfu, rows[0][0]),
           args.measure, args.runs))
    print("| ranks | fwd+bwd pred / meas | hooks pred / meas | opt step pred / meas (err) "
          "| total pred / meas (err) | totals of the runs | load average at start |")
    print("|---:|---:|---:|---:|---:|---|---|")
    for n, m, p, es, et, totals, loads in rows:
        print("| %d | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f (%+.0f%%) | %.2f / %.2f (%+.0f%%) "
              "| %s | %s |" % (n, p["compute"], m["fwd"], p["comm"], m["comm"], p["step"],
                               m["step"], 100 * es, p["total"], m["total"], 100 * et,
                               ", ".join("%.1f" % t for t in totals),
                               ", ".join("%.1f" % l for l in loads)))
    print("within %.0f%%: %s" % (100 * args.tolerance, "yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
