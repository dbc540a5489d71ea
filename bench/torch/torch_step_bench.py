"""dmuon.torch against what a PyTorch user would run instead: torch DDP
(gloo) with Muon distributed as Keller Jordan's Muon does it (each rank runs
Newton-Schulz on every world-th matrix of a shape, then all_gather of the
updates), AdamW for the rest, on the same model, tokens and ranks.

    mpirun -n 2 --oversubscribe python3 bench/torch/torch_step_bench.py \
        --model gpt --batch 16 --steps 10

Prints per variant the median step time (forward + backward + optimizer),
and for dmuon the Python hook overhead per step (time in the bridge's hook
callbacks minus the runtime calls inside them), then the ratio dmuon / peer.
docs/benchmarks.md has the table and the commands.
"""

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from mpi4py import MPI

import dmuon.torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "gpt", "python"))
from gpt_train import Gpt  # noqa: E402  (the Python GPT of examples/gpt)

NS = (3.4445, -4.7750, 2.0315)


def newton_schulz5(g):
    a, b, c = NS
    x = g / (g.norm() + 1e-7)
    transposed = g.size(0) > g.size(1)
    if transposed:
        x = x.t()
    for _ in range(5):
        A = x @ x.t()
        x = a * x + (b * A + c * A @ A) @ x
    return x.t() if transposed else x


class KellerMuon:
    """Muon over DDP-averaged gradients, NS round-robin over the ranks: the
    matrices of one shape are taken `world` at a time, rank r orthogonalizes
    the r-th, and all_gather hands every rank every update."""

    def __init__(self, params, lr=0.02, momentum=0.95):
        self.lr, self.momentum = lr, momentum
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        by_shape = {}
        for p in params:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        self.groups = list(by_shape.values())
        self.buffers = {}

    @torch.no_grad()
    def step(self):
        for group in self.groups:
            for base in range(0, len(group), self.world):
                chunk = group[base:base + self.world]
                mine = torch.zeros_like(group[0])
                if self.rank < len(chunk):
                    p = chunk[self.rank]
                    buf = self.buffers.setdefault(p, torch.zeros_like(p))
                    buf.mul_(self.momentum).add_(p.grad)
                    u = (p.grad + self.momentum * buf).reshape(p.size(0), -1)  # conv: [out, in*k*k]
                    mine = (newton_schulz5(u) * math.sqrt(max(1.0, u.size(0) / u.size(1)))
                            ).view_as(p)
                updates = [torch.empty_like(mine) for _ in range(self.world)]
                dist.all_gather(updates, mine)
                for p, update in zip(chunk, updates):
                    p.sub_(update, alpha=self.lr)

    def zero_grad(self):
        for group in self.groups:
            for p in group:
                p.grad = None


def make_model(name):
    torch.manual_seed(0)
    if name == "gpt":
        return Gpt(context=64, d_model=128, layers=4, heads=4)
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=4, num_layers=4, num_heads=4,
                             hidden_dim=128, mlp_dim=512, num_classes=10)


def batches(name, global_batch, rank, world, steps):
    g = torch.Generator().manual_seed(7)
    local = global_batch // world
    out = []
    for _ in range(steps):
        if name == "gpt":
            w = torch.randint(0, 256, (global_batch, 65), generator=g)[rank * local:][:local]
            out.append((w[:, :-1], w[:, 1:]))
        else:
            x = torch.randn(global_batch, 3, 32, 32, generator=g)[rank * local:][:local]
            y = torch.randint(0, 10, (global_batch,), generator=g)[rank * local:][:local]
            out.append((x, y))
    return out


def loss_of(model, batch):
    logits = model(batch[0])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[1].reshape(-1))


def timed_steps(step_fn, data, comm):
    times = []
    for batch in data:
        comm.Barrier()
        start = time.perf_counter()
        step_fn(batch)
        times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    return times


def run_dmuon(args, comm, data):
    model = make_model(args.model)
    opt = dmuon.torch.wrap(model, communicator=comm, work_dir=args.work,
                           model_name=f"bench-{args.model}")

    def step(batch):
        opt.zero_grad()
        loss_of(model, batch).backward()
        opt.step()

    step(data[0])  # warm-up
    hook0, rt0 = opt.bridge.hook_seconds, opt.bridge.runtime_seconds
    times = timed_steps(step, data[1:], comm)
    n = len(data) - 1
    overhead = ((opt.bridge.hook_seconds - hook0) - (opt.bridge.runtime_seconds - rt0)) / n
    matrices = [p.tensor for p in opt.bridge.params
                if opt.plan.param(p.index).role == dmuon.ROLE_MUON]
    names = {id(t): n for n, t in model.named_parameters()}
    matrix_names = {names[id(t)] for t in matrices}
    opt.close()
    return times, overhead, matrix_names


def run_peer(args, comm, data, matrix_names):
    model = make_model(args.model)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    matrices = [p for n, p in model.named_parameters() if n in matrix_names]
    others = [p for n, p in model.named_parameters() if n not in matrix_names]
    muon = KellerMuon(matrices)
    adamw = torch.optim.AdamW(others, lr=1e-3)

    def step(batch):
        muon.zero_grad()
        adamw.zero_grad()
        loss_of(ddp, batch).backward()
        muon.step()
        adamw.step()

    step(data[0])
    return timed_steps(step, data[1:], comm)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("gpt", "vit"), default="gpt")
    ap.add_argument("--batch", type=int, default=16, help="global sequences/images per step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both")
    ap.add_argument("--work", default="dmuon-bench-work")
    ap.add_argument("--port", type=int, default=29571)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    data = batches(args.model, args.batch, rank, world, args.steps + 1)
    dm_times, peer_times, overheads = [], [], []
    for _ in range(args.rounds):
        t, overhead, matrix_names = run_dmuon(args, comm, data)
        dm_times += t
        overheads.append(overhead)
        peer_times += run_peer(args, comm, data, matrix_names)
    if rank == 0:
        dm, peer = statistics.median(dm_times), statistics.median(peer_times)
        print(f"model {args.model}, {world} ranks, global batch {args.batch}, "
              f"{len(dm_times)} steps each")
        print(f"dmuon.torch      step {dm * 1e3:8.2f} ms   python hook overhead "
              f"{statistics.median(overheads) * 1e3:.2f} ms/step")
        print(f"DDP + Keller Muon step {peer * 1e3:8.2f} ms")
        print(f"dmuon / peer {dm / peer:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
