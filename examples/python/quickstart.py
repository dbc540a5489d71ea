"""dmuon.torch's quick start: a small convolutional classifier trained with
Muon through libdmuon on every MPI rank, in a plain torch training loop.

    mpirun -n 2 python3 examples/python/quickstart.py     (scripts/python-quickstart.sh)

Each rank feeds its own half of the global batch; the runtime averages the
gradients, owns each matrix on one rank (conv weights as [out, in*k*k]
matrices), runs Newton-Schulz there only and AdamW for the rest. The data is
16 noisy 8x8 images per class around a colour of the class's own, so the loss
must fall well below log(4) = 1.386 within the run; the script exits 1 unless
it halves.
"""

import sys

import torch
from mpi4py import MPI

import dmuon.torch

CLASSES, STEPS, GLOBAL_BATCH = 4, 40, 32


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.GELU())
            for _ in range(2))
        self.head = torch.nn.Linear(16, CLASSES)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.stem(x))
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=(2, 3)))


def main():
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(0)  # the same initial model on every rank
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    labels = torch.arange(CLASSES).repeat_interleave(16)
    colours = torch.randn(CLASSES, 3, 1, 1, generator=g)
    images = colours[labels] + 0.5 * torch.randn(len(labels), 3, 8, 8, generator=g)

    model = SmallCnn()
    opt = dmuon.torch.wrap(model, communicator=comm, mesh=str(world), work_dir="dmuon-work",
                           model_name="quickstart", lr=0.02, adamw_lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
    losses = []
    for step in range(STEPS):
        pick = torch.randperm(len(labels), generator=torch.Generator().manual_seed(step))
        mine = pick[:GLOBAL_BATCH].chunk(world)[rank]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images[mine]), labels[mine])
        loss.backward()
        opt.step()
        sched.step()
        losses.append(comm.allreduce(loss.item()) / world)
        if rank == 0 and (step % 5 == 0 or step == STEPS - 1):
            print(f"step {step:2d}  loss {losses[-1]:.4f}  lr {opt.param_groups[0]['lr']:.5f}",
                  flush=True)
    opt.close()  # the module holds its trained values again
    with torch.no_grad():
        accuracy = (model(images).argmax(1) == labels).float().mean().item()
    if rank == 0:
        print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; accuracy on the data {accuracy:.2f}")
    if losses[-1] > 0.5 * losses[0]:
        print("the loss did not halve", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
