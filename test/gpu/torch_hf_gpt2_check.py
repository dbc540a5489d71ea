"""A model nobody here wrote, through dmuon.torch on CUDA: Hugging Face
transformers' GPT2LMHeadModel from a small config with random weights, trained
20 steps on one fixed batch under torch.autocast(bf16): the loss must fall
and every param must stay finite. The GPU bundle's torch-hf-gpt2 step
(scripts/gpu-bundle-run); docs/gpu.md.

    torchrun --standalone --nproc_per_node=N torch_hf_gpt2_check.py --plan hf-gpt2-N.plan
    python3 torch_hf_gpt2_check.py --write-manifest hf-gpt2.toml    # where the bundle is built

The GPU machine has no dmuonc, so the plan is compiled where the bundle is
built, from a manifest this script writes without transformers: a stand-in
module with GPT2LMHeadModel's param names, shapes and order for CONFIG (the
tied lm_head.weight is wte's, listed once, as named_parameters() does). On the
GPU the real model's param list is checked against the stand-in's first, so a
transformers whose GPT-2 differs is named as such, not as a dmuon failure.
The last line is "torch-hf-gpt2: PASS ..." or "torch-hf-gpt2: FAIL ...".
"""

import argparse
import math
import os
import sys

import torch

CONFIG = dict(vocab_size=512, n_positions=64, n_embd=128, n_layer=2, n_head=4,
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
STEPS, BATCH, SEQ = 20, 8, 64
LR, ADAMW_LR = 0.02, 3e-3


class _Params(torch.nn.Module):
    """A module holding named params of the given shapes (weight, bias)."""

    def __init__(self, **shapes):
        super().__init__()
        for name, shape in shapes.items():
            setattr(self, name, torch.nn.Parameter(torch.zeros(shape)))


def stand_in(config=CONFIG):
    """GPT2LMHeadModel's module tree and params for `config`, in its
    registration (forward) order: transformer.wte, .wpe, .h.N (ln_1,
    attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; Conv1D weights are
    [in, out]), .ln_f; lm_head shares wte's weight."""
    e, v, p = config["n_embd"], config["vocab_size"], config["n_positions"]
    root, t = torch.nn.Module(), torch.nn.Module()
    t.wte, t.wpe = _Params(weight=(v, e)), _Params(weight=(p, e))
    blocks = torch.nn.ModuleList()
    for _ in range(config["n_layer"]):
        b = torch.nn.Module()
        b.ln_1 = _Params(weight=(e,), bias=(e,))
        b.attn = torch.nn.Module()
        b.attn.c_attn = _Params(weight=(e, 3 * e), bias=(3 * e,))
        b.attn.c_proj = _Params(weight=(e, e), bias=(e,))
        b.ln_2 = _Params(weight=(e,), bias=(e,))
        b.mlp = torch.nn.Module()
        b.mlp.c_fc = _Params(weight=(e, 4 * e), bias=(4 * e,))
        b.mlp.c_proj = _Params(weight=(4 * e, e), bias=(e,))
        blocks.append(b)
    t.h = blocks
    t.ln_f = _Params(weight=(e,), bias=(e,))
    root.transformer = t
    root.lm_head = torch.nn.Module()
    root.lm_head.weight = t.wte.weight  # tied
    return root


def param_list(model):
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()]


def write_manifest(path):
    import dmuon.torch
    with open(path, "w") as f:
        f.write(dmuon.torch.manifest_toml(stand_in(), "hf-gpt2"))
    print(f"wrote {path}: {len(param_list(stand_in()))} params of GPT2LMHeadModel({CONFIG})")


def fail(message):
    print(f"torch-hf-gpt2: FAIL {message}", flush=True)
    return 1


def train(plan):
    import torch.distributed as dist
    import dmuon.torch
    import transformers
    if "RANK" not in os.environ:
        return fail("run it under torchrun (torch.distributed.run), one rank per GPU")
    if not torch.cuda.is_available():
        return fail("torch sees no CUDA device")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    if param_list(model) != param_list(stand_in()):
        return fail(f"transformers {transformers.__version__}'s GPT2LMHeadModel has other params "
                    "than the stand-in the bundle's plan was written from: "
                    f"{param_list(model)[:4]}... against {param_list(stand_in())[:4]}...")
    model = model.cuda().train()
    opt = dmuon.torch.wrap(model, plan=plan, lr=LR, adamw_lr=ADAMW_LR)  # the torchrun group
    rank, world = opt.group.rank, opt.group.world_size
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, CONFIG["vocab_size"], (BATCH * world, SEQ), generator=g)
    mine = tokens.chunk(world)[rank].cuda()
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=mine, labels=mine).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if rank == 0:
            print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)
    memory = opt.runtime.memory()
    values = opt.model_state_dict()
    opt.close()
    bad = [n for n, v in values.items() if not torch.isfinite(v).all()]
    if bad:
        return fail(f"non-finite params after {STEPS} steps: {bad[:5]}")
    if not all(math.isfinite(x) for x in losses) or not losses[-1] < 0.9 * losses[0]:
        return fail(f"the loss did not fall by 10%: {losses[0]:.4f} -> {losses[-1]:.4f}")
    peak = sum(m.peak for m in memory.values())
    print(f"torch-hf-gpt2: PASS {world} rank(s), transformers {transformers.__version__}: loss "
          f"{losses[0]:.4f} -> {losses[-1]:.4f} in {STEPS} steps, {len(values)} params finite, "
          f"runtime peak {peak / 2**20:.1f} MiB", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", help="the plan compiled from --write-manifest's manifest")
    ap.add_argument("--write-manifest", metavar="PATH")
    args = ap.parse_args()
    if args.write_manifest:
        write_manifest(args.write_manifest)
        return 0
    if not args.plan:
        ap.error("--plan or --write-manifest")
    try:
        return train(args.plan)
    except Exception as e:  # the verdict line, whatever failed
        import traceback
        traceback.print_exc()
        return fail(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    sys.exit(main())
