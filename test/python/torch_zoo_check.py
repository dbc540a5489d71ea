"""Models users bring, trained through dmuon.torch with default options
against a single-process reference written here from torch ops.

    mpirun -n 4 python3 torch_zoo_check.py --mesh 2x2 --work DIR [--models a,b]

Every model of zoo_models.ZOO (torchvision's ResNet-18, ViT, ConvNeXt,
EfficientNet-B0, MobileNetV3, Swin; GPT-2, BERT and T5 stacks with their
module names, tied embeddings, root params, a partly frozen model) is
wrapped with dmuon.torch.wrap(model) and trained 3 steps in train mode on
one global batch split over the ranks. The reference runs the same chunks in
one process (the same dropout and stochastic-depth seeds), sums their gradients / world size, and steps Muon
(Nesterov momentum, Newton-Schulz 5 on each matrix: a conv weight as
[out, in*k*k], a fused QKV as its three blocks, each scaled by
sqrt(max(1, rows/cols)), decoupled weight decay) on the params the plan
gives a matrix rule and torch.optim.AdamW on the rest. Checked: every param
after step 1 within 1e-5 relative, every loss within 1e-4, frozen params
unchanged, both names of a tied param equal.

BatchNorm layers normalize with their running statistics (eval mode) while
the rest trains: over the 2-4 samples a rank holds, batch statistics are
nearly singular, and a 1e-7 difference in step 1 grows to 1e-2 in the loss
by step 3 in ResNet-18 (measured), which would test BatchNorm's conditioning,
not dmuon. Its affine params still train. Exits 77 without torch,
torchvision or mpi4py.
"""

import argparse
import math
import sys
import time

try:
    import torch
    import torchvision  # noqa: F401
    from mpi4py import MPI
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon
import dmuon.torch

from muon_reference import newton_schulz5
from zoo_models import ZOO

GLOBAL_BATCH, STEPS = 8, 3
LR, MOMENTUM, WD, ADAMW_LR, ADAMW_WD = 0.02, 0.95, 0.01, 1e-3, 0.01


# ---------------------------------------------------------------- reference

def orthogonalized(name, u, conv):
    """Muon's update direction of a param's momentum-mixed gradient u, each
    matrix (or block) scaled by sqrt(max(1, rows/cols))."""
    m = u.reshape(u.size(0), -1) if conv else u
    if m.dim() > 2:  # a stack of matrices
        return torch.stack([orthogonalized(name, x, False) for x in m])
    rows, cols = m.shape
    if (name.endswith("in_proj_weight") or name.endswith(".qkv.weight")) and rows == 3 * cols:
        return torch.cat([orthogonalized("", b, False) for b in m.chunk(3, 0)], 0)
    if name.endswith("c_attn.weight") and cols == 3 * rows:
        return torch.cat([orthogonalized("", b, False) for b in m.chunk(3, 1)], 1)
    return (newton_schulz5(m) * math.sqrt(max(1.0, rows / cols))).reshape(u.shape)


class ReferenceMuonAdamW:
    def __init__(self, model, matrix_names):
        convs = {f"{n}.weight" for n, mod in model.named_modules()
                 if isinstance(mod, torch.nn.modules.conv._ConvNd)}
        self.muon = [(n, p, n in convs) for n, p in model.named_parameters()
                     if n in matrix_names and p.requires_grad]
        self.buffers = {n: torch.zeros_like(p) for n, p, _ in self.muon}
        others = [p for n, p in model.named_parameters()
                  if n not in matrix_names and p.requires_grad]
        self.adamw = torch.optim.AdamW(others, lr=ADAMW_LR, weight_decay=ADAMW_WD)

    @torch.no_grad()
    def step(self):
        for name, p, conv in self.muon:
            buf = self.buffers[name].mul_(MOMENTUM).add_(p.grad)
            u = p.grad + MOMENTUM * buf
            p.mul_(1 - LR * WD).sub_(LR * orthogonalized(name, u, conv))
            p.grad = None
        self.adamw.step()
        self.adamw.zero_grad()


def training_mode(model):
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.eval()
    return model


def batch_chunks(batch_fn, step, world):
    g = torch.Generator().manual_seed(100 + step)
    inputs, targets = batch_fn(g, GLOBAL_BATCH)
    return list(zip(inputs.chunk(world), targets.chunk(world)))


def forward_loss(model, loss_fn, chunk, step, k):
    torch.manual_seed(10_000 * step + k)  # the same dropout masks on the rank and here
    return loss_fn(model(chunk[0]), chunk[1])


def run_reference(name, matrix_names, world):
    build, batch_fn, loss_fn = ZOO[name]
    torch.manual_seed(0)
    model = training_mode(build())
    opt = ReferenceMuonAdamW(model, matrix_names)
    losses, after_first = [], None
    for step in range(STEPS):
        total = 0.0
        for k, chunk in enumerate(batch_chunks(batch_fn, step, world)):
            loss = forward_loss(model, loss_fn, chunk, step, k) / world
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
        if step == 0:
            after_first = {n: p.detach().clone() for n, p in model.named_parameters()}
    return losses, after_first


# -------------------------------------------------------------------- dmuon

def run_dmuon(name, comm, mesh, work):
    build, batch_fn, loss_fn = ZOO[name]
    torch.manual_seed(0)
    model = training_mode(build())
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    opt = dmuon.torch.wrap(model, communicator=comm, mesh=mesh, work_dir=f"{work}/{name}",
                           model_name=name, lr=LR, momentum=MOMENTUM, weight_decay=WD,
                           adamw_lr=ADAMW_LR, adamw_weight_decay=ADAMW_WD)
    matrix_names = {p.name for p in opt.bridge.params
                    if opt.plan.param(p.index).role == dmuon.ROLE_MUON}
    rank, world = comm.Get_rank(), comm.Get_size()
    losses, after_first = [], None
    for step in range(STEPS):
        opt.zero_grad()
        chunk = batch_chunks(batch_fn, step, world)[rank]
        loss = forward_loss(model, loss_fn, chunk, step, rank)
        loss.backward()
        opt.step()
        losses.append(comm.allreduce(loss.item()) / world)
        if step == 0:
            after_first = opt.model_state_dict()
    final = opt.model_state_dict()
    facts = {"params": sum(1 for _ in model.parameters()), "groups": opt.plan.num_hook_groups,
             "matrices": len(matrix_names)}
    opt.close()
    for n, before in frozen.items():
        if not torch.equal(final[n], before):
            raise AssertionError(f"{name}: frozen param '{n}' changed")
    for n, p in model.named_parameters():  # close() gave the module its values back
        if not torch.equal(p.detach(), final[n]):
            raise AssertionError(f"{name}: after close() '{n}' is not its trained value")
    return losses, after_first, matrix_names, facts


def worst_relative(got, want):
    return max(((got[n] - w).norm().item() / max(w.norm().item(), 1e-30), n)
               for n, w in want.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default=",".join(ZOO))
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    failures = []
    rows = []
    for name in args.models.split(","):
        started = time.time()
        losses, first, matrix_names, facts = run_dmuon(name, comm, args.mesh, args.work)
        if comm.Get_rank() != 0:
            continue
        ref_losses, ref_first = run_reference(name, matrix_names, comm.Get_size())
        param_err, where = worst_relative(first, ref_first)
        loss_err = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        ok = param_err <= 1e-5 and loss_err <= 1e-4
        rows.append(f"| {name} | {args.mesh} | {facts['params']} ({facts['matrices']} matrices) "
                    f"| {facts['groups']} | {param_err:.2e} | {losses[-1]:.6f} | "
                    f"{ref_losses[-1]:.6f} | {loss_err:.1e} |")
        print(f"{name}: losses {[round(x, 6) for x in losses]} reference "
              f"{[round(x, 6) for x in ref_losses]}; step-1 params {param_err:.2e} ({where}); "
              f"{time.time() - started:.1f} s", flush=True)
        if not ok:
            failures.append(name)
    if comm.Get_rank() == 0:
        print("| model | mesh | params | hook groups | step-1 param error | loss at step 3 "
              "| reference | loss error |\n|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        if failures:
            raise AssertionError("beyond tolerance: " + ", ".join(failures))
        print(f"torch_zoo_check {args.mesh}: OK")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(1)
