"""dmuon-gpt in Python: the GPT of examples/gpt (GptModel.h) with the same
shapes, initialization and data (FortuneData.h), trained through dmuon.torch
over MPI or torchrun, on the CPU or on CUDA, or in one process with
dmuon.torch.reference.

    mpirun -n 4 python3 gpt_train.py --mesh 2x2 --steps 300 --out runs/py-2x2
    python3 gpt_train.py --backend reference --steps 300 --out runs/py-ref
    torchrun --nproc_per_node=8 gpt_train.py --device cuda --steps 300

At the same seed and flags it computes what the C++ trainer (dmuon-gpt)
computes: the same manifest and so the same plan, the same init (seeded after
the modules are built, as makeGpt does), the same global batches, and the
same per-rank slices. Its loss.csv has the C++ run's format, and
--compare-to checks every step's losses against another run's within --tol.
"""

import argparse
import csv
import math
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    if "RANK" not in os.environ:  # an mpirun launch (torchrun sets RANK): launch() needs it
        import mpi4py  # noqa: F401
except ImportError as e:  # ctest's skip
    print(f"gpt_train.py: skipped: {e}")
    sys.exit(77)

FORTUNES = "/usr/share/games/fortunes"
MASK64 = (1 << 64) - 1


# ----------------------------------------------------------------- model

class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        if d_model % heads:
            raise ValueError("d_model must be a multiple of the number of heads")
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d_model, d_model, bias=False)
                                          for _ in range(4))

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads

        def split(t):
            return t.view(B, T, self.heads, hd).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        # As GptModel.cpp (libtorch 1.13 has no scaled_dot_product_attention).
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = torch.softmax(att.masked_fill(future, -math.inf), -1)
        return self.o(torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C))


class Mlp(torch.nn.Module):
    def __init__(self, d_model, mult):
        super().__init__()
        self.up = torch.nn.Linear(d_model, mult * d_model, bias=False)
        self.down = torch.nn.Linear(mult * d_model, d_model, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(torch.nn.Module):
    def __init__(self, d_model, heads, mult):
        super().__init__()
        # Registration order is forward order: it becomes the manifest's order.
        self.norm1 = RMSNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.norm2 = RMSNorm(d_model)
        self.mlp = Mlp(d_model, mult)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Gpt(torch.nn.Module):
    def __init__(self, vocab=256, context=64, d_model=128, layers=4, heads=4, mlp_mult=4):
        super().__init__()
        self.vocab, self.context, self.n_layers = vocab, context, layers
        self.tok_embed = torch.nn.Embedding(vocab, d_model)
        self.pos_embed = torch.nn.Embedding(context, d_model)
        self.layers = torch.nn.ModuleList(Block(d_model, heads, mlp_mult) for _ in range(layers))
        self.norm = RMSNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        T = tokens.size(1)
        if T > self.context:
            raise ValueError("sequence longer than the context")
        x = self.tok_embed(tokens) + self.pos_embed(torch.arange(T, device=tokens.device))
        for block in self.layers:
            x = block(x)
        return self.head(self.norm(x))


def window_loss(model, window):
    T = window.size(1) - 1
    logits = model(window[:, :T])
    return F.cross_entropy(logits.reshape(-1, model.vocab), window[:, 1:].reshape(-1))


def make_gpt(args):
    """GPT-2's initialization as makeGpt: seeded after the modules are built,
    then N(0, 0.02), N(0, 0.02/sqrt(2*layers)) for attn.o and mlp.down, ones
    for the norms, in named_parameters() order."""
    model = Gpt(context=args.context, d_model=args.d_model, layers=args.layers, heads=args.heads)
    torch.manual_seed(args.seed)
    residual_std = 0.02 / math.sqrt(2.0 * args.layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            elif name.endswith("attn.o.weight") or name.endswith("mlp.down.weight"):
                p.normal_(0.0, residual_std)
            else:
                p.normal_(0.0, 0.02)
    return model


# ------------------------------------------------------------------ data

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class FortuneData:
    """FortuneData.cpp's splits: the plain databases in name order, the first
    90% of each to training and the rest to validation."""

    def __init__(self, directory=FORTUNES):
        entries = sorted((e for e in os.scandir(os.fsencode(directory))
                          if e.is_file() and not e.is_symlink()
                          and os.path.splitext(e.name)[1] not in (b".dat", b".u8")),
                         key=lambda e: e.name)
        if not entries:
            raise RuntimeError(f"no fortune databases in '{directory}' "
                               "(install Debian's fortunes package)")
        train, val = [], []
        for e in entries:
            with open(e.path, "rb") as f:
                data = f.read()
            cut = len(data) * 9 // 10
            train.append(data[:cut])
            val.append(data[cut:])
        self.files = len(entries)
        self.train = np.frombuffer(b"".join(train), dtype=np.uint8)
        self.val = np.frombuffer(b"".join(val), dtype=np.uint8)

    @staticmethod
    def _windows(text, offsets, length):
        rows = np.stack([text[o:o + length] for o in offsets]).astype(np.int64)
        return torch.from_numpy(rows)

    def train_batch(self, seed, step, first, count, length):
        span = len(self.train) - length + 1
        offsets = [splitmix64(splitmix64(splitmix64(seed) ^ step) ^ row) % span
                   for row in range(first, first + count)]
        return self._windows(self.train, offsets, length)

    def validation_batch(self, total, first, count, length):
        span = len(self.val) - length + 1
        return self._windows(self.val, [row * span // total for row in range(first, first + count)],
                             length)


# ------------------------------------------------------------ run record

def write_loss_csv(path, rows):
    def cell(v):
        return "" if v is None else "%.17g" % v
    with open(path, "w") as f:
        f.write("step,train_loss,val_loss,seconds\n")
        for r in rows:
            f.write(f"{r['step']},{cell(r['train'])},{cell(r['val'])},{cell(r['seconds'])}\n")


def read_loss_csv(path):
    with open(path) as f:
        return [{"step": int(r["step"]),
                 "train": float(r["train_loss"]) if r["train_loss"] else None,
                 "val": float(r["val_loss"]) if r["val_loss"] else None}
                for r in csv.DictReader(f)]


def compare_with_run(path, rows, tol):
    """Every step's train and validation loss within `tol` (absolute) of the
    run in `path`; prints the table and the largest difference."""
    ref = read_loss_csv(path)
    if len(ref) != len(rows):
        print(f"compare: {len(rows)} loss rows here, {len(ref)} in {path}")
        return False
    worst, ok = 0.0, True
    print(f"{'step':>4}  {'train (here)':>12}  {'train (there)':>13}  {'|diff|':>9}")
    for a, b in zip(rows, ref):
        for key in ("train", "val"):
            if (a[key] is None) != (b[key] is None):
                print(f"compare: step {a['step']} {key} is not measured in both runs")
                ok = False
            elif a[key] is not None:
                d = abs(a[key] - b[key])
                worst = max(worst, d if math.isfinite(d) else math.inf)
        if a["train"] is not None and b["train"] is not None:
            print(f"{a['step']:>4}  {a['train']:>12.7f}  {b['train']:>13.7f}  "
                  f"{abs(a['train'] - b['train']):>9.2e}")
    print(f"compare with {path}: largest loss difference {worst:.3g}; tolerance {tol:g}")
    return ok and worst <= tol


# ------------------------------------------------------------------ loop

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("dmuon", "reference"), default="dmuon")
    ap.add_argument("--mesh", default="", help="dmuonc --mesh (default: the world size)")
    ap.add_argument("--plan", default="", help="a compiled plan (no dmuonc run)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: the params on this rank's GPU (LOCAL_RANK's under torchrun), "
                         "the NCCL backend")
    ap.add_argument("--mode", choices=("z2", "z3"), default="z3")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16, help="global windows per step")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.95)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--adamw-lr", type=float, default=1e-3)
    ap.add_argument("--adamw-weight-decay", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default=FORTUNES)
    ap.add_argument("--work", default="gpt-work")
    ap.add_argument("--out", default="")
    ap.add_argument("--compare-to", default="")
    ap.add_argument("--tol", type=float, default=1e-5, help="absolute, for --compare-to")
    ap.add_argument("--expect-val-drop", action="store_true")
    return ap.parse_args(argv)


def lr_at(step, args):
    warm = (step + 1) / args.warmup if step < args.warmup else 1.0
    return args.lr * warm, args.adamw_lr * warm


class DmuonBackend:
    def __init__(self, args, model, group):
        import dmuon.torch
        self.dm = dmuon.torch.wrap(
            model, communicator=group, plan=args.plan or None,
            mesh=None if args.plan else args.mesh or str(group.world_size), work_dir=args.work,
            model_name="gpt", dmuonc_args=["--small-param-threshold=0"], mode=args.mode,
            # Every hyper-parameter explicit, as the C++ trainer sets them.
            lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay, nesterov=1,
            ns_steps=5, adamw_lr=args.adamw_lr, adamw_beta1=0.9, adamw_beta2=0.999,
            adamw_eps=1e-8, adamw_weight_decay=args.adamw_weight_decay)
        self.plan = self.dm.plan
        self.current = (args.lr, args.adamw_lr)
        self.replica = Gpt(context=args.context, d_model=args.d_model, layers=args.layers,
                           heads=args.heads).to(next(model.parameters()).device)

    def begin_step(self, lrs):
        if lrs != self.current:  # collective: every rank passes the same
            self.dm.set_hyper_params(lr=lrs[0], adamw_lr=lrs[1])
            self.current = lrs

    def step(self):
        self.dm.step()

    def eval_model(self):
        return self.dm.gather_into(self.replica)  # collective


class ReferenceBackend:
    def __init__(self, args, model, plan):
        from dmuon.torch.reference import ReferenceOptimizer
        self.model, self.plan = model, plan
        self.opt = ReferenceOptimizer(model, plan, lr=args.lr, momentum=args.momentum,
                                      weight_decay=args.weight_decay, adamw_lr=args.adamw_lr,
                                      adamw_weight_decay=args.adamw_weight_decay)

    def begin_step(self, lrs):
        self.opt.set_lr(*lrs)

    def step(self):
        self.opt.step()

    def eval_model(self):
        return self.model


def make_backend(args, model, group):
    if args.backend == "dmuon":
        return DmuonBackend(args, model, group)
    import dmuon
    import dmuon.torch
    if group.world_size != 1:
        raise ValueError("--backend reference runs in one process")
    # The reference takes each param's optimizer from the plan, as the C++ one.
    return ReferenceBackend(args, model, dmuon.Plan(args.plan or dmuon.torch.compile_plan(
        model, "1", args.work, group, "gpt", dmuonc_args=["--small-param-threshold=0"])))


def launch(args):
    """The ranks: torchrun's (RANK set: init_process_group here, NCCL for CUDA
    and gloo for the CPU, each rank on its LOCAL_RANK's GPU) or mpirun's."""
    import dmuon.torch
    if "RANK" in os.environ:
        import torch.distributed as dist
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        return dmuon.torch.launch_group()
    from mpi4py import MPI
    return dmuon.torch.launch_group(MPI.COMM_WORLD)


def run(args, group):
    torch.set_num_threads(args.threads)
    rank, world = group.rank, group.world_size
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" \
        else torch.device("cpu")
    if args.batch % world or args.val_windows % world:
        raise ValueError("--batch and --val-windows must split evenly over the ranks")
    local, local_val, window = args.batch // world, args.val_windows // world, args.context + 1
    data = FortuneData(args.data)
    model = make_gpt(args).to(device)  # initialized on the CPU: the same values on any device
    backend = make_backend(args, model, group)

    def mean_over_ranks(mine):
        if group.kind == "mpi":
            total = np.zeros(1)
            group.communicator.Allreduce(np.array([mine], dtype=np.float64), total)  # as C++
            return float(total[0]) / world
        return math.fsum(group.all_gather_object(mine)) / world

    def validation_loss():
        m = backend.eval_model()
        with torch.no_grad():
            w = data.validation_batch(args.val_windows, rank * local_val, local_val,
                                      window).to(device)
            return mean_over_ranks(window_loss(m, w).item())

    if rank == 0:
        print(f"gpt_train.py: {args.backend} backend on {device} ({group.kind} launch), "
              f"mesh {args.mesh or world}, {world} ranks, "
              f"plan {backend.plan.fingerprint:#x} ({backend.plan.num_params} params, "
              f"{backend.plan.num_hook_groups} hook groups), {data.files} fortune files, "
              f"{args.steps} steps", flush=True)
    rows = []
    for step in range(args.steps + 1):
        row = {"step": step, "train": None, "val": None, "seconds": None}
        if step % args.eval_every == 0 or step == args.steps:
            row["val"] = validation_loss()
        if step < args.steps:
            t0 = time.perf_counter()
            backend.begin_step(lr_at(step, args))
            x = data.train_batch(args.seed, step, rank * local, local, window).to(device)
            loss = window_loss(model, x)
            loss.backward()
            backend.step()
            row["train"] = mean_over_ranks(loss.item())
            row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        if rank == 0:
            line = f"step {step:4d}"
            if row["train"] is not None:
                line += f"  loss {row['train']:.6f}  ({row['seconds']:.2f} s)"
            if row["val"] is not None:
                line += f"  val {row['val']:.6f}"
            print(line, flush=True)
    backend.eval_model()  # collective for dmuon, as the C++ trainer's last gather
    rc = 0
    if rank == 0:
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            write_loss_csv(os.path.join(args.out, "loss.csv"), rows)
        if args.compare_to and not compare_with_run(os.path.join(args.compare_to, "loss.csv"),
                                                    rows, args.tol):
            print(f"gpt_train.py: error: the run differs from {args.compare_to}", file=sys.stderr)
            rc = 1
        first, last = rows[0]["val"], rows[-1]["val"]
        print(f"validation loss: {first:.6f} -> {last:.6f}")
        if args.expect_val_drop and not last < first:
            print("gpt_train.py: error: the validation loss did not fall", file=sys.stderr)
            rc = 1
    return group.broadcast_object(rc, root=0)


def main(argv=None):
    args = parse_args(argv)
    group = launch(args)
    try:
        return run(args, group)
    except Exception as e:
        # One rank's failure would leave the others waiting in a collective:
        # mpirun's are aborted; torchrun stops the others when one exits.
        print(f"gpt_train.py: rank {group.rank}: error: {e}", file=sys.stderr, flush=True)
        if group.kind == "mpi":
            group.communicator.Abort(1)
        return 1


if __name__ == "__main__":
    sys.exit(main())
