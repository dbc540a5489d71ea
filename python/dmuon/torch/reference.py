"""The single-process reference a dmuon run equals: Muon as libdmuon's CPU
kernels compute it (examples/gpt/ReferenceMuon.h, with the same roundings
where they are observable) for the plan's Muon params, torch.optim.AdamW for
the rest. For tests and for checking a new model's run.

    buf <- mu*buf + g;  u = nesterov ? g + mu*buf : buf
    X = u / (||u||_F + 1e-7)   (the norm in double, the scale rounded to f32)
    X = X^T if rows > cols;  steps x: A = X X^T; B = bA + cA^2; X = aX + BX
    p <- p*(1 - lr*wd) - lr*sqrt(max(1, rows/cols)) * NS(u)
"""

import math
import struct

import torch

from .. import _capi

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def newton_schulz5(g, steps=5):
    a, b, c = NS_COEFFICIENTS
    norm = g.double().norm().item()
    x = g * _f32(1.0 / (norm + 1e-7))
    transposed = g.size(0) > g.size(1)
    if transposed:
        x = x.t().contiguous()
    for _ in range(steps):
        A = x.mm(x.t())
        # B = bA + cA^2 and X = aX + BX as single GEMMs with beta, as the
        # kernel calls them: the same BLAS then rounds the same way.
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        x = torch.addmm(x, B, x, beta=a, alpha=1.0)
    return x.t().contiguous() if transposed else x


class ReferenceMuon:
    def __init__(self, params, lr=0.02, momentum=0.95, weight_decay=0.0, nesterov=True,
                 ns_steps=5):
        self.params = list(params)
        for p in self.params:
            if p.dim() != 2:
                raise ValueError(f"ReferenceMuon takes 2-D params, not {tuple(p.shape)}")
        self.buffers = [torch.zeros_like(p) for p in self.params]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.nesterov, self.ns_steps = nesterov, ns_steps

    @torch.no_grad()
    def step(self):
        for p, buf in zip(self.params, self.buffers):
            if p.grad is None:
                continue
            g = p.grad
            buf.mul_(self.momentum).add_(g)
            u = g + self.momentum * buf if self.nesterov else buf
            ortho = newton_schulz5(u, self.ns_steps)
            scale = math.sqrt(max(1.0, p.size(0) / p.size(1)))
            # Two roundings, p*decay and step*ortho, then the difference:
            # add_ with alpha may fuse into an FMA, the kernel does not.
            p.mul_(1.0 - self.lr * self.weight_decay).sub_(ortho * (self.lr * scale))

    def zero_grad(self):
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()


class ReferenceOptimizer:
    """ReferenceMuon on the params the plan gives Muon, torch.optim.AdamW on
    the others, with libdmuon's defaults for what is not given."""

    def __init__(self, model, plan, lr=0.02, momentum=0.95, weight_decay=0.0, adamw_lr=1e-3,
                 adamw_betas=(0.9, 0.999), adamw_eps=1e-8, adamw_weight_decay=0.0):
        muon, adamw = [], []
        for name, p in model.named_parameters():
            (muon if plan.param(name).role == _capi.ROLE_MUON else adamw).append(p)
        self.muon = ReferenceMuon(muon, lr, momentum, weight_decay)
        self.adamw = torch.optim.AdamW(adamw, lr=adamw_lr, betas=adamw_betas, eps=adamw_eps,
                                       weight_decay=adamw_weight_decay) if adamw else None

    def set_lr(self, lr, adamw_lr):
        self.muon.lr = lr
        if self.adamw:
            for group in self.adamw.param_groups:
                group["lr"] = adamw_lr

    def step(self):
        self.muon.step()
        self.muon.zero_grad()
        if self.adamw:
            self.adamw.step()
            self.adamw.zero_grad(set_to_none=False)
