"""bf16 params through dmuon.torch: forward and backward in bf16, fp32
masters and optimizer state in the runtime, against a single-process
reference that keeps fp32 masters itself.

    mpirun -n 4 python3 torch_bf16_check.py --mesh 2x2 --work DIR

Models of the zoo (zoo_models.py) are cast to bf16 and wrapped with default
options; the reference runs the same bf16 model on the same chunks, adds each
chunk's bf16 gradient into fp32 and averages, steps Muon + AdamW
(torch_zoo_check.ReferenceMuonAdamW) on an fp32 copy and casts it back for
the next forward, as the runtime does on pack. Checked after 3 steps: the
fp32 masters within 1e-2 relative as a whole (bf16's precision is 2^-8 =
3.9e-3) and every loss within 1e-2. Param by param is no measure here: a
param whose gradient is rounding noise (attention's key bias, whose exact
gradient is 0) moves by AdamW's +-lr either way, and a bf16 rounding that
flips between the runs flips its steps (the worst such param is printed).
Exits 77 without torch or mpi4py.
"""

import argparse
import copy
import sys

try:
    import torch
    from mpi4py import MPI
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon
import dmuon.torch

from torch_zoo_check import (ADAMW_LR, ADAMW_WD, LR, MOMENTUM, STEPS, WD, ReferenceMuonAdamW,
                             batch_chunks, training_mode, worst_relative)
from zoo_models import ZOO

MODELS = ("gpt2_tied", "timm_vit_root_params", "convnext")


def forward_loss(model, loss_fn, chunk, step, k):
    """torch_zoo_check's, with images in bf16 like the model."""
    torch.manual_seed(10_000 * step + k)
    inputs = chunk[0].bfloat16() if chunk[0].is_floating_point() else chunk[0]
    return loss_fn(model(inputs), chunk[1])


def run_dmuon(name, comm, mesh, work):
    build, batch_fn, loss_fn = ZOO[name]
    torch.manual_seed(0)
    model = training_mode(build()).bfloat16()
    opt = dmuon.torch.wrap(model, communicator=comm, mesh=mesh, work_dir=f"{work}/{name}",
                           model_name=name, lr=LR, momentum=MOMENTUM, weight_decay=WD,
                           adamw_lr=ADAMW_LR, adamw_weight_decay=ADAMW_WD)
    matrix_names = {p.name for p in opt.bridge.params
                    if opt.plan.param(p.index).role == dmuon.ROLE_MUON}
    rank, world = comm.Get_rank(), comm.Get_size()
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = forward_loss(model, loss_fn, batch_chunks(batch_fn, step, world)[rank], step, rank)
        loss.backward()
        opt.step()
        losses.append(comm.allreduce(loss.float().item()) / world)
    masters = opt.model_state_dict()
    opt.close()
    if any(p.dtype != torch.bfloat16 for p in model.parameters()):
        raise AssertionError(f"{name}: close() changed a param's dtype")
    return losses, masters, matrix_names


def run_reference(name, matrix_names, world):
    build, batch_fn, loss_fn = ZOO[name]
    torch.manual_seed(0)
    model = training_mode(build()).bfloat16()
    master = copy.deepcopy(model).float()  # the runtime's masters start from the bf16 values
    opt = ReferenceMuonAdamW(master, matrix_names)
    pairs = list(zip(master.parameters(), model.parameters()))
    losses = []
    for step in range(STEPS):
        grads = [torch.zeros_like(p32) for p32, _ in pairs]
        total = 0.0
        for k, chunk in enumerate(batch_chunks(batch_fn, step, world)):
            loss = forward_loss(model, loss_fn, chunk, step, k)
            loss.backward()
            total += loss.float().item() / world
            for g, (_, p16) in zip(grads, pairs):
                if p16.grad is not None:
                    g.add_(p16.grad.float())
                    p16.grad = None
        for g, (p32, _) in zip(grads, pairs):
            p32.grad = g / world
        opt.step()
        with torch.no_grad():
            for p32, p16 in pairs:
                p16.copy_(p32)
        losses.append(total)
    return losses, {n: p.detach().clone() for n, p in master.named_parameters()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    failures = []
    for name in MODELS:
        losses, masters, matrix_names = run_dmuon(name, comm, args.mesh, args.work)
        if comm.Get_rank() != 0:
            continue
        ref_losses, ref_masters = run_reference(name, matrix_names, comm.Get_size())
        worst, where = worst_relative(masters, ref_masters)
        master_err = (sum((masters[n] - r).pow(2).sum() for n, r in ref_masters.items()) /
                      sum(r.pow(2).sum() for r in ref_masters.values())).sqrt().item()
        loss_err = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        print(f"{name} bf16 {args.mesh}: losses {[round(x, 5) for x in losses]} reference "
              f"{[round(x, 5) for x in ref_losses]}; masters after {STEPS} steps "
              f"{master_err:.2e} (worst param {worst:.1e}, {where}), losses {loss_err:.1e}",
              flush=True)
        if not (master_err <= 1e-2 and loss_err <= 1e-2):
            failures.append(name)
    if comm.Get_rank() == 0:
        if failures:
            raise AssertionError("beyond the bf16 tolerance: " + ", ".join(failures))
        print(f"torch_bf16_check {args.mesh}: OK")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(1)
