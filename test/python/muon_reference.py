"""Muon's orthogonalization as the tests' references write it from torch ops
(Keller Jordan's Newton-Schulz quintic, not dmuon's code): shared by the
checks in this folder, each of which writes the rest of its reference."""

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
