"""dmuon.torch as a torch.optim.Optimizer in a torch training loop, and the
misuses a torch user makes, each refused with a message in Python's terms.

    mpirun -n 4 python3 torch_loop_check.py --work DIR

- torch.optim.lr_scheduler's LambdaLR, CosineAnnealingLR and OneCycleLR
  drive param_groups, and each step's rates reach the runtime (its
  hyper_params() after the step are the groups' values).
- optimizer="soap" (and the other rules) puts only the matrices on the rule.
- torch.autocast (bf16 compute over f32 params) trains.
- abandon_step() after an exception in forward (after a completed micro-batch
  of the step), two forwards without backward, or step() without backward:
  the run goes on bit-identical to a clean one; close() mid-step keeps values.
- state_dict() on mesh 4 after 2 steps, load_state_dict() into a fresh
  wrap on mesh 2x2, 2 more steps: bit-identical to 4 uninterrupted steps on
  2x2 (every rank feeds the same batch, so the gradient average is exact
  whatever the mesh); a run that skips the load is not.
- Misuses: a second forward before backward, step() without backward, an
  f64 model, a NaN rate, a fixed row changed, an unknown optimizer, a torch
  state dict given to load_state_dict; a param read between steps is NaN.
Exits 77 without torch or mpi4py.
"""

import argparse
import math
import sys

try:
    import torch
    from mpi4py import MPI
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import dmuon.torch

VOCAB, WIDTH = 32, 16


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.bad_batch = False  # raise inside the forward, as a bad batch or OOM would

    def forward(self, tokens):
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            if self.bad_batch and i == 1:
                raise ValueError("bad batch")
            x = x + torch.tanh(layer(x))
        return self.head(x)


def batch(step):
    g = torch.Generator().manual_seed(50 + step)
    return torch.randint(0, VOCAB, (4, 9), generator=g)


def loss_of(model, window):
    logits = model(window[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))


def train(opt, model, steps, first=0, sched=None, check_rates=False):
    for step in range(first, first + steps):
        opt.zero_grad()
        loss_of(model, batch(step)).backward()
        opt.step()
        if check_rates:
            got = opt.hyper_params()
            for group in opt.param_groups:
                row = "lr" if group["name"] == "muon" else "adamw_lr"
                if not math.isclose(got[row], group["lr"], rel_tol=1e-6):  # the runtime keeps f32
                    raise AssertionError(f"step {step}: group {group['name']} lr {group['lr']} "
                                         f"but the runtime stepped with {got[row]}")
        if sched is not None:
            sched.step()


def wrap(comm, mesh, work, **kw):
    model = Net()
    return model, dmuon.torch.wrap(model, communicator=comm, mesh=mesh, work_dir=work,
                                   model_name=f"net-{mesh}", **kw)


def check_schedulers(comm, work):
    makers = {
        "LambdaLR": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1 / (s + 1)),
        "CosineAnnealingLR": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
        "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, max_lr=[0.03, 2e-3], total_steps=5),
    }
    for name, make in makers.items():
        model, opt = wrap(comm, str(comm.Get_size()), work)
        sched = make(opt)
        lrs = []
        for _ in range(4):
            train(opt, model, 1, sched=sched, check_rates=True)
            lrs.append(opt.hyper_params()["lr"])
        if len(set(lrs)) < 3:
            raise AssertionError(f"{name}: the runtime's lr did not follow the schedule: {lrs}")
        if name == "OneCycleLR" and opt.hyper_params()["momentum"] == 0.95:
            raise AssertionError("OneCycleLR: the momentum it cycles did not reach the runtime")
        opt.close()
        say(comm, f"{name}: the runtime stepped with the scheduled rates {[f'{x:.5f}' for x in lrs]}")


def check_rule_selection(comm, work):
    """optimizer= picks the matrices' rule; norms, biases and the embedding
    stay on AdamW (the old manifest put every param on the rule)."""
    for rule in ("soap", "normuon", "shampoo"):
        model, opt = wrap(comm, str(comm.Get_size()), work, optimizer=rule)
        names = [g["name"] for g in opt.param_groups]
        if names != [rule, "adamw"]:
            raise AssertionError(f"optimizer={rule!r}: param groups {names}")
        matrices = {n for n, _ in model.named_parameters()} - \
            {n for n, p in model.named_parameters() if any(p is q for q in opt.param_groups[1]["params"])}
        if matrices != {"layers.0.weight", "layers.1.weight"}:
            raise AssertionError(f"optimizer={rule!r}: the rule has {sorted(matrices)}")
        train(opt, model, 2)
        if not all(torch.isfinite(v).all() for v in opt.model_state_dict().values()):
            raise AssertionError(f"optimizer={rule!r}: non-finite params")
        opt.close()
        say(comm, f"optimizer={rule!r}: the two matrices on {rule}, the rest on AdamW; 2 steps")


def check_autocast(comm, work):
    """torch.autocast's bf16 compute over the f32 params' views (Z3: its
    casts are copies, the saved aliases the bridge rebuilds stay f32)."""
    model, opt = wrap(comm, str(comm.Get_size()), work, mode="z3")
    losses = []
    for step in range(4):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of(model, batch(0))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    opt.close()
    if not (all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]):
        raise AssertionError(f"autocast: losses {losses}")
    say(comm, f"torch.autocast(bf16): losses {[round(x, 4) for x in losses]}")


def check_abandon(comm, work):
    """A script that catches an exception and calls abandon_step() goes on
    as if the failed attempt never ran: bit-identical to a clean run."""
    model, opt = wrap(comm, "2x2", work)
    train(opt, model, 4)
    want = opt.model_state_dict()
    opt.close()

    model, opt = wrap(comm, "2x2", work)
    train(opt, model, 1)
    attempts = []
    # An exception inside the forward, after a completed micro-batch of the
    # same step (its gradients must go too).
    opt.begin_micro_batch(False)
    loss_of(model, batch(99)).backward()
    model.bad_batch = True
    try:
        loss_of(model, batch(1)).backward()
    except ValueError as e:
        attempts.append(str(e))
        opt.abandon_step()
    model.bad_batch = False
    train(opt, model, 1, first=1)
    # Two forwards without a backward; step() without a backward.
    loss_of(model, batch(2))
    try:
        loss_of(model, batch(2))
    except RuntimeError as e:
        attempts.append(str(e).split(":")[1].strip())
        opt.abandon_step()
    train(opt, model, 1, first=2)
    loss_of(model, batch(3))
    try:
        opt.step()
    except RuntimeError as e:
        attempts.append(str(e).split("(")[0])
        opt.abandon_step()
    train(opt, model, 1, first=3)
    loss_of(model, batch(4))  # a step left half done at close()
    opt.close()
    got = {n: p.detach() for n, p in model.named_parameters()}
    differing = [n for n in want if not torch.equal(want[n], got[n])]
    if differing:
        raise AssertionError(f"after abandon_step the run differs from a clean one: {differing}")
    say(comm, f"abandon_step after {len(attempts)} failures ({'; '.join(attempts)}): "
              f"{len(want)} params bit-identical to a clean run")


def check_resume_on_another_mesh(comm, work):
    model, opt = wrap(comm, "2x2", work)
    train(opt, model, 4)
    want = opt.model_state_dict()
    opt.close()

    model, opt = wrap(comm, "4", work)
    train(opt, model, 2)
    state = opt.state_dict()
    opt.close()
    model, opt = wrap(comm, "2x2", work)
    opt.load_state_dict(state)
    train(opt, model, 2, first=2)
    got = opt.model_state_dict()
    opt.close()
    differing = [n for n in want if not torch.equal(want[n], got[n])]
    if differing:
        raise AssertionError(f"resumed on 2x2 differs from the uninterrupted run: {differing}")

    model, opt = wrap(comm, "2x2", work)  # the negative control: no load
    train(opt, model, 2, first=2)
    skipped = opt.model_state_dict()
    opt.close()
    if all(torch.equal(want[n], skipped[n]) for n in want):
        raise AssertionError("a run that skipped load_state_dict ends where the resumed one does")
    say(comm, f"state_dict on mesh 4, load_state_dict on 2x2: {len(want)} params bit-identical "
              "to 4 uninterrupted steps on 2x2")


def expect_error(what, kind, needle, action):
    try:
        action()
    except kind as e:
        if needle not in str(e):
            raise AssertionError(f"{what}: message lacks {needle!r}: {e}")
        return str(e)
    raise AssertionError(f"{what}: no {kind.__name__}")


def check_misuses(comm, work):
    mesh = str(comm.Get_size())
    said = []

    model, opt = wrap(comm, mesh, work)
    w = model.layers[0].weight
    if not math.isnan(w.sum().item()):
        raise AssertionError("a param read between steps is not NaN")
    loss_of(model, batch(0))
    said.append(expect_error("a second forward before backward", RuntimeError,
                             "called again before loss.backward()",
                             lambda: loss_of(model, batch(0))))
    opt.bridge.close()
    opt.runtime.close()

    model, opt = wrap(comm, mesh, work)
    loss_of(model, batch(0))
    said.append(expect_error("step() without backward", RuntimeError,
                             "step() after a forward with no loss.backward()", opt.step))
    opt.bridge.close()
    opt.runtime.close()

    said.append(expect_error("an f64 model", TypeError, "call model.float()",
                             lambda: dmuon.torch.wrap(Net().double(), communicator=comm,
                                                      work_dir=work)))
    said.append(expect_error("a NaN lr", ValueError, "lr is NaN",
                             lambda: dmuon.torch.wrap(Net(), communicator=comm, work_dir=work,
                                                      lr=float("nan"))))
    said.append(expect_error("an unknown optimizer", ValueError, "optimizer='lion'",
                             lambda: dmuon.torch.wrap(Net(), communicator=comm, work_dir=work,
                                                      optimizer="lion")))
    model, opt = wrap(comm, mesh, work)
    said.append(expect_error("set_hyper_params(lr=nan)", ValueError, "lr is NaN",
                             lambda: opt.set_hyper_params(lr=float("nan"))))
    opt.param_groups[-1]["betas"] = (0.8, 0.999)
    loss_of(model, batch(0)).backward()
    said.append(expect_error("a fixed row changed", ValueError, "is fixed for the run", opt.step))
    opt.param_groups[-1]["betas"] = (0.9, 0.999)
    opt.step()
    plain = torch.optim.SGD(Net().parameters(), lr=0.1).state_dict()
    said.append(expect_error("a torch state dict", ValueError, "not a dmuon.torch state_dict",
                             lambda: opt.load_state_dict(plain)))
    opt.close()
    for line in said:
        say(comm, "refused: " + line.splitlines()[0])


def say(comm, text):
    if comm.Get_rank() == 0:
        print(text, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    check_schedulers(comm, args.work)
    check_rule_selection(comm, args.work)
    check_autocast(comm, args.work)
    check_abandon(comm, args.work)
    check_resume_on_another_mesh(comm, args.work)
    check_misuses(comm, args.work)
    say(comm, "torch_loop_check: OK")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(1)
