"""dmuon.torch launched as torch users launch it, on the CPU, without mpi4py.

    python3 torch_launch_check.py --work DIR
        in one process: the launch errors (no process group, torchrun's
        variables without init_process_group, a plan for another world size,
        CPU tensors on several torchrun ranks, two ranks on one CUDA device
        found over a real store), then torch.distributed initialized by
        env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) on gloo at world
        size 1, a small model trained 5 steps through wrap() against a
        Muon + AdamW reference written here from torch ops.
    python3 -m torch.distributed.run --standalone --nproc_per_node=N \\
        torch_launch_check.py --work DIR --launched
        as torchrun starts it: N=1 trains as above; N=2 (CPU tensors on two
        torchrun ranks) must be refused on every rank, saying to use mpirun,
        and the two-ranks-on-one-device check runs over torchrun's store.

mpi4py cannot be imported here (an import hook refuses it): the torch path
must not need it. Exits 77 without torch.
"""

import argparse
import importlib.abc
import math
import os
import socket
import subprocess
import sys


class _NoMpi4py(importlib.abc.MetaPathFinder):
    """Makes `import mpi4py` fail, as on a machine without it."""

    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py" or name.startswith("mpi4py."):
            raise ImportError(f"torch_launch_check: {name} is blocked (the torch launch "
                              "path must not import it)")
        return None


sys.meta_path.insert(0, _NoMpi4py())

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon
import dmuon.torch
from dmuon.torch import _launch
from dmuon.torch._device import CpuDevice, model_device
from muon_reference import newton_schulz5

STEPS = 5
LR, MOMENTUM, WD, ADAMW_LR, ADAMW_WD = 0.02, 0.95, 0.01, 1e-3, 0.01
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def raises(kind, needle, fn):
    """(whether fn() raised `kind` with `needle` in its message, the message)."""
    try:
        fn()
    except kind as e:
        return needle in str(e), str(e)
    except Exception as e:  # the wrong kind is a failure, shown
        return False, f"{type(e).__name__}: {e}"
    return False, "(nothing raised)"


# ------------------------------------------------------------------ model

class Net(torch.nn.Module):
    """stem, two repeated blocks and a head: four hook groups, three
    matrices on Muon, biases and the head on AdamW (dmuonc's choice)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(2)])
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        x = torch.tanh(self.stem(x))
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


TEACHER = torch.randn(8, 4, generator=torch.Generator().manual_seed(7))


def batch(step):
    """Inputs of the step, and a fixed linear teacher's targets: a loss the
    steps can lower."""
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(100 + step))
    return x, x @ TEACHER


def fresh_model():
    torch.manual_seed(0)
    return Net()


# -------------------------------------------------------------- reference

def run_reference(matrix_names):
    """Muon (Nesterov, NS5, scaled by sqrt(max(1, rows/cols)), decoupled
    weight decay) on the plan's matrices, torch.optim.AdamW on the rest."""
    model = fresh_model()
    muon = [(n, p) for n, p in model.named_parameters() if n in matrix_names]
    buffers = {n: torch.zeros_like(p) for n, p in muon}
    adamw = torch.optim.AdamW([p for n, p in model.named_parameters() if n not in matrix_names],
                              lr=ADAMW_LR, weight_decay=ADAMW_WD)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for n, p in muon:
                buf = buffers[n].mul_(MOMENTUM).add_(p.grad)
                u = p.grad + MOMENTUM * buf
                rows, cols = p.shape
                p.mul_(1 - LR * WD).sub_(LR * newton_schulz5(u) * math.sqrt(max(1.0, rows / cols)))
                p.grad = None
        adamw.step()
        adamw.zero_grad()
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


# ------------------------------------------------------------------ checks

def check_launch_errors_before_init():
    """A process on its own is one rank; torchrun's variables without
    init_process_group, or only some of them, are refused."""
    group = _launch.launch_group(environ={})
    check(group.kind == "single" and group.world_size == 1 and group.store is not None,
          "a process launched on its own trains alone (world size 1, an in-process store)")
    ok, text = raises(_launch.LaunchError, "no process group and no MPI launch (only MASTER_ADDR",
                      lambda: _launch.launch_group(environ={"MASTER_ADDR": "127.0.0.1"}))
    check(ok and "torchrun" in text and "mpirun" in text,
          f"a half-made torchrun launch: says how to launch ({text})")
    torchrun_env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    ok, text = raises(_launch.LaunchError, "call torch.distributed.init_process_group()",
                      lambda: _launch.launch_group(environ=torchrun_env))
    check(ok and "WORLD_SIZE=2" in text,
          f"torchrun's variables without init_process_group ({text})")


class _FakeGroup:
    """A rank of a torch launch as check_one_rank_per_device sees it."""
    kind = "torch"

    def __init__(self, rank, world_size, store):
        self.rank, self.world_size, self.store = rank, world_size, store


def device_check_rank(spec):
    """One rank of check_device_sharing: RANK:WORLD:DEVICE:STORE_FILE."""
    rank, world, device, path = spec.split(":", 3)
    store = dist.FileStore(path, int(world))
    try:
        _launch.check_one_rank_per_device(_FakeGroup(int(rank), int(world), store), int(device))
        print("outcome: passed", flush=True)
    except _launch.LaunchError as e:
        print(f"outcome: {e}", flush=True)


def check_device_sharing(work):
    """Two ranks on one CUDA device: the gathered (host, device) list finds
    them; over a real store (a FileStore, one process per rank) every rank
    raises; distinct devices pass."""
    here = socket.gethostname()
    check(_launch.shared_devices([(here, 0), (here, 0), (here, 1)]) == {(here, 0): [0, 1]},
          "shared_devices: ranks 0 and 1 on one device are found")
    check(_launch.shared_devices([(here, 0), (here, 1), ("other", 0), ("x", None), ("x", None)])
          == {}, "shared_devices: distinct devices, other hosts and CPU ranks share nothing")

    def run_ranks(devices, work):
        """One process per rank (a store's get holds the GIL: threads would
        wait on each other), over a FileStore."""
        store = os.path.join(work, f"store-{'-'.join(map(str, devices))}")
        if os.path.exists(store):
            os.remove(store)
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--work", work,
                                   "--device-check", f"{r}:{len(devices)}:{d}:{store}"],
                                  stdout=subprocess.PIPE, text=True)
                 for r, d in enumerate(devices)]
        outcome = []
        for p in procs:
            out, _ = p.communicate(timeout=60)
            lines = [line for line in out.splitlines() if line.startswith("outcome: ")]
            outcome.append(lines[-1][len("outcome: "):] if lines else f"(exit {p.returncode})")
        return outcome

    out = run_ranks([0, 0], work)
    check(all(o and "ranks [0, 1] all have their params on cuda:0" in o and "LOCAL_RANK" in o
              for o in out), f"two ranks on cuda:0: both raise ({out[0]})")
    out = run_ranks([0, 1], work)
    check(out == ["passed", "passed"], f"ranks on cuda:0 and cuda:1 pass ({out})")


def check_cpu_on_many_torchrun_ranks():
    ok, text = raises(_launch.LaunchError, "launch with mpirun -n 2",
                      lambda: CpuDevice().check_launch(_FakeGroup(0, 2, None)))
    check(ok and "model.cuda()" in text, f"CPU tensors on 2 torchrun ranks: refused ({text})")


def check_device_errors():
    """Params on two devices, and on a device dmuon has no backend for."""
    model = fresh_model()
    model.head.to("meta")
    ok, text = raises(ValueError, "is on cpu but 'head.weight' is on meta",
                      lambda: model_device(model))
    check(ok, f"params on two devices are refused ({text})")
    ok, text = raises(ValueError, "CPU tensors (the MPI backend) or CUDA tensors",
                      lambda: dmuon.torch.wrap(fresh_model().to("meta"), work_dir="unused"))
    check(ok, f"a model on the meta device is refused ({text})")


def check_cuda_layer_without_a_gpu(work):
    """The CUDA half's wiring up to the GPU: over the torch group's store
    the NCCL unique id is made and exchanged, and the communicator is then
    refused with the NCCL plugin's clear error (no GPU here), or
    ERROR_UNSUPPORTED in a build without the plugin; and the buffer torch
    wraps for a CUDA view describes the runtime's memory as the CUDA Array
    Interface asks (bf16 as int16, which torch then views as bf16)."""
    from dmuon import _cuda_view
    from dmuon.torch._device import CudaDevice
    plan = dmuon.Plan(dmuon.torch.compile_plan(fresh_model(), "1", work, None, "cuda"))
    device = CudaDevice(0)
    try:
        device.runtime(plan, _launch.TorchGroup())
        check(False, "CudaDevice made a runtime on a machine without a GPU")
    except dmuon.Error as e:
        check(e.status in (dmuon.ERROR_BACKEND, dmuon.ERROR_UNSUPPORTED)
              and ("no usable CUDA device" in e.message or "not available" in e.message),
              f"CudaDevice without a GPU: the NCCL communicator's clear refusal ({e})")
    check(device.communicator is None, "nothing is left to close after the refusal")
    buffer = _cuda_view._DeviceBuffer(0x7F00, (3, 4), _cuda_view._TYPESTRS[dmuon.DTYPE_BF16],
                                      keeper=None)
    check(buffer.__cuda_array_interface__ == {"shape": (3, 4), "typestr": "<i2",
                                              "data": (0x7F00, False), "strides": None,
                                              "version": 2},
          f"a bf16 view's CUDA Array Interface ({buffer.__cuda_array_interface__})")


def check_wrong_world_size(work):
    ok, text = raises(_launch.LaunchError, "is for 2 rank(s) but the launch (torch) has 1",
                      lambda: dmuon.torch.wrap(fresh_model(), mesh="2", work_dir=work,
                                               model_name="mesh2"))
    check(ok, f"mesh 2 at world size 1: refused before any collective ({text})")


def check_training(work, kind="torch"):
    """wrap() over the torch group at world size 1 (or, kind="single", in a
    process launched on its own): the runtime on this process alone (no
    mpi4py), 5 steps against the reference."""
    model = fresh_model()
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = dmuon.torch.wrap(model, work_dir=work, model_name="launch", lr=LR, momentum=MOMENTUM,
                           weight_decay=WD, adamw_lr=ADAMW_LR, adamw_weight_decay=ADAMW_WD)
    check(opt.group.kind == kind and opt.communicator is None,
          f"wrap() chose the {kind} group ({opt.group.kind})")
    matrix_names = {p.name for p in opt.bridge.params
                    if opt.plan.param(p.index).role == dmuon.ROLE_MUON}
    check(matrix_names == {"stem.weight", "layers.0.weight", "layers.1.weight"},
          f"the plan puts the three inner matrices on Muon ({sorted(matrix_names)})")
    losses, applied = [], []
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        applied.append(opt.step())
        losses.append(loss.item())
    check(applied == [True] * STEPS, f"step() returned True each step ({applied})")
    counts = opt.runtime.step_counts()
    memory, planned = opt.runtime.memory(), opt.runtime.planned_memory()
    over = {k: (m.peak, planned[k].peak) for k, m in memory.items() if m.peak > planned[k].peak}
    check(not over, f"every memory category's peak within the plan's ({over or 'all'})")
    final = opt.model_state_dict()
    state = opt.state_dict()  # the gather path with a one-rank torch group
    opt.close()
    check(counts == (STEPS, 0), f"the runtime applied {STEPS} steps ({counts})")
    check(set(state["dmuon"]["checkpoint"]) >= {"checkpoint"}, "state_dict() holds the checkpoint")
    ref_losses, ref_params = run_reference(matrix_names)
    loss_err = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    param_err, where = max(((final[n] - w).norm().item() / w.norm().item(), n)
                           for n, w in ref_params.items())
    moved = min((final[n] - initial[n]).norm().item() / initial[n].norm().item() for n in initial)
    print(f"     losses {[round(v, 6) for v in losses]}\n"
          f"     reference {[round(v, 6) for v in ref_losses]}")
    check(loss_err <= 1e-5, f"every loss within 1e-5 of the reference ({loss_err:.2e})")
    check(param_err <= 1e-5, f"every param after {STEPS} steps within 1e-5 relative "
          f"({param_err:.2e}, {where})")
    check(moved > 1e-3, f"every param moved (least: {moved:.2e} relative)")
    check(losses[-1] < losses[0], f"the loss fell ({losses[0]:.4f} -> {losses[-1]:.4f})")
    check(all(torch.equal(p.detach(), final[n]) for n, p in model.named_parameters()),
          "after close() the module holds its trained values")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--launched", action="store_true",
                    help="started by torchrun: RANK, WORLD_SIZE, ... are set")
    ap.add_argument("--device-check", metavar="RANK:WORLD:DEVICE:STORE",
                    help="one rank of the two-ranks-on-one-device check")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.device_check:
        device_check_rank(args.device_check)
        return
    torch.set_num_threads(1)
    if args.launched:
        dist.init_process_group("gloo")  # env://, as torchrun set it
        rank, world = dist.get_rank(), dist.get_world_size()
        if world == 1:
            check_training(os.path.join(args.work, "torchrun-1"))
        else:
            ok, text = raises(_launch.LaunchError, f"CPU tensors on {world} torchrun ranks",
                              lambda: dmuon.torch.wrap(fresh_model(), work_dir=args.work))
            check(ok and f"mpirun -n {world}" in text,
                  f"rank {rank}: CPU tensors on {world} torchrun ranks refused ({text[:90]}...)")
            # The device check over torchrun's own store (TCPStore): every
            # rank "on cuda:0" is refused on every rank; one device each passes.
            group = dmuon.torch.launch_group()
            ok, text = raises(_launch.LaunchError, f"ranks {list(range(world))} all have their "
                              "params on cuda:0", lambda: _launch.check_one_rank_per_device(group, 0))
            check(ok and group.store is not None,
                  f"rank {rank}: all ranks on cuda:0, found over the default store ({text[:70]}...)")
            ok, text = raises(_launch.LaunchError, "", lambda: _launch.check_one_rank_per_device(
                group, rank))
            check(text == "(nothing raised)", f"rank {rank}: a device per rank passes ({text})")
    else:
        for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(v, None)
        check_launch_errors_before_init()
        check_device_sharing(args.work)
        check_cpu_on_many_torchrun_ranks()
        check_device_errors()
        check_training(os.path.join(args.work, "on-its-own"), kind="single")
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
        dist.init_process_group("gloo", init_method="env://")
        check_wrong_world_size(os.path.join(args.work, "in-process"))
        check_cuda_layer_without_a_gpu(os.path.join(args.work, "in-process"))
        check_training(os.path.join(args.work, "in-process"))
    check("mpi4py" not in sys.modules, "mpi4py was never imported")
    dist.destroy_process_group()
    if failures:
        print(f"torch_launch_check: {len(failures)} failure(s)", flush=True)
        sys.exit(1)
    print("torch_launch_check: OK", flush=True)


if __name__ == "__main__":
    main()
