"""dmuon.torch under MPI against the single-process reference.

    mpirun -n 4 python3 torch_mpi_check.py --mesh 2x2 --work DIR

A tiny model (embedding, three hook-group blocks, head) trained for a few
steps through dmuon.torch, on every rank its own slice of one global batch:
  - Z2 and Z3 give bit-identical losses and params;
  - both equal dmuon.torch.reference in one process on the whole batch
    (every step's loss and every final param within --rtol);
  - a run with two micro-batches per step, a learning-rate schedule and
    clipping of every param (CLIP_ALL) equals the reference that clips with
    torch.nn.utils.clip_grad_norm_ and sets the same learning rates.
Exits 77 (ctest's skip) without torch or mpi4py.
"""

import argparse
import sys

try:
    import torch
    from mpi4py import MPI
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon
import dmuon.torch
from dmuon.torch.reference import ReferenceOptimizer

GLOBAL_BATCH, CONTEXT, VOCAB, WIDTH, BLOCKS = 8, 8, 32, 16, 3
LR, ADAMW_LR = 0.02, 1e-2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.fc1 = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.fc2 = torch.nn.Linear(2 * WIDTH, WIDTH, bias=False)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class TinyModel(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.head(x)


def loss_of(model, window):
    logits = model(window[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))


def global_batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, VOCAB, (GLOBAL_BATCH, CONTEXT + 1), generator=g)


def lr_at(step, schedule):
    return (LR, ADAMW_LR) if not schedule else (LR / (step + 1), ADAMW_LR / (step + 1))


def run_dmuon(comm, plan, mode, steps, micro_batches=1, schedule=False, max_grad_norm=0.0):
    rank, world = comm.Get_rank(), comm.Get_size()
    model = TinyModel(seed=7)
    dm = dmuon.torch.wrap(model, communicator=comm, plan=plan, mode=mode, lr=LR,
                          adamw_lr=ADAMW_LR, max_grad_norm=max_grad_norm,
                          clip_policy=dmuon.CLIP_ALL)
    local = GLOBAL_BATCH // world
    losses = []
    for step in range(steps):
        if schedule:
            lr, adamw_lr = lr_at(step, schedule)
            dm.set_hyper_params(lr=lr, adamw_lr=adamw_lr)
        mine = global_batch(step)[rank * local:(rank + 1) * local]
        total = 0.0
        for k, part in enumerate(mine.chunk(micro_batches)):
            dm.begin_micro_batch(k == micro_batches - 1)
            loss = loss_of(model, part) / micro_batches
            loss.backward()
            total += loss.item()
        dm.step()
        losses.append(comm.allreduce(total) / world)
    params = {k: v.clone() for k, v in dm.model_state_dict().items()}
    dm.close()
    return losses, params


def run_reference(plan, steps, schedule=False, max_grad_norm=0.0):
    model = TinyModel(seed=7)
    opt = ReferenceOptimizer(model, plan, lr=LR, adamw_lr=ADAMW_LR)
    losses = []
    for step in range(steps):
        opt.set_lr(*lr_at(step, schedule))
        loss = loss_of(model, global_batch(step))
        loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def compare(what, got, want, rtol):
    """The largest relative deviation of losses and params; raises past rtol."""
    (gl, gp), (wl, wp) = got, want
    worst_loss = max(abs(a - b) / abs(b) for a, b in zip(gl, wl))
    worst_param, worst_name = max(((gp[k] - wp[k]).norm().item() / wp[k].norm().item(), k)
                                  for k in wp)
    print(f"{what}: loss {worst_loss:.3g}, param {worst_param:.3g} ({worst_name}); "
          f"tolerance {rtol:g}")
    if not (worst_loss <= rtol and worst_param <= rtol):
        raise AssertionError(f"{what}: differs beyond {rtol:g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    plan_path = dmuon.torch.compile_plan(TinyModel(seed=7), args.mesh, args.work, comm,
                                         model_name="tiny",
                                         dmuonc_args=["--small-param-threshold=0"])
    plan = dmuon.Plan(plan_path)
    z2 = run_dmuon(comm, plan, "z2", args.steps)
    z3 = run_dmuon(comm, plan, "z3", args.steps)
    mixed = run_dmuon(comm, plan, "z3", args.steps, micro_batches=2, schedule=True,
                      max_grad_norm=0.5)
    if comm.Get_rank() == 0:
        if z2[0] != z3[0] or any(not torch.equal(z2[1][k], z3[1][k]) for k in z2[1]):
            raise AssertionError("Z2 and Z3 differ")
        print(f"z2 = z3: {args.steps} losses and {len(z2[1])} params bit-identical")
        compare("z3 vs reference", z3, run_reference(plan, args.steps), args.rtol)
        compare("2 micro-batches, schedule, clip vs reference", mixed,
                run_reference(plan, args.steps, schedule=True, max_grad_norm=0.5), args.rtol)
        print(f"torch_mpi_check {args.mesh}: OK")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(1)
