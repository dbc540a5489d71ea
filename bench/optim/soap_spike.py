"""SOAP's steps after one gradient spike, with and without Adam's bound on the
rotated direction (docs/optimizers.md, "Two departures"), in double with NumPy:

    python3 bench/optim/soap_spike.py [--spike 1e4] [--max-dim 32]

One 64x32 matrix, unit-normal gradients, the gradient of step 8 times --spike,
40 steps, SOAP's defaults (betas 0.95, shampoo beta 0.95, eps 1e-8, lr 3e-3,
weight decay 0.01, refresh every 10 updates); a side longer than --max-dim is
not preconditioned. Prints, per variant, the largest step before and after the
spike and the largest entry at the end.
"""
import argparse

import numpy as np

B1 = B2 = SB = 0.95
EPS, LR, WD, FREQUENCY, ROWS, COLS, SPIKE_STEP, STEPS = 1e-8, 3e-3, 0.01, 10, 64, 32, 8, 40


def adam_bound(t):
    r = B1 / np.sqrt(B2)
    return (1 - B1) / np.sqrt(1 - B2) * (1 - r ** t) / (1 - r)


def refreshed(statistics, basis, v, columns):
    """One power iteration, columns by estimated eigenvalue (V's with them), QR."""
    power = statistics @ basis
    order = np.argsort(-np.sum(basis * power, axis=0), kind="stable")
    q, r = np.linalg.qr(power[:, order])
    return q * np.sign(np.diag(r)), (v[:, order] if columns else v[order, :])


def soap(w, grads, max_dim, bounded):
    left, right = ROWS <= max_dim, COLS <= max_dim
    m, v = np.zeros_like(w), np.zeros_like(w)
    sl, sr, ql, qr = np.zeros((ROWS, ROWS)), np.zeros((COLS, COLS)), np.eye(ROWS), np.eye(COLS)
    out = [w.copy()]
    for step, g in enumerate(grads):
        sl = SB * sl + (1 - SB) * g @ g.T if left else sl
        sr = SB * sr + (1 - SB) * g.T @ g if right else sr
        if step == 0:  # statistics and their eigenvectors only
            ql = np.linalg.eigh(sl)[1][:, ::-1] if left else ql
            qr = np.linalg.eigh(sr)[1][:, ::-1] if right else qr
            continue
        t = step
        rotated = ql.T @ g @ qr
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * rotated ** 2
        direction = (ql.T @ m @ qr) / (np.sqrt(v) + EPS)
        if bounded:
            direction = np.clip(direction, -adam_bound(t), adam_bound(t))
        size = LR * np.sqrt(1 - B2 ** t) / (1 - B1 ** t)
        w = (w - size * (ql @ direction @ qr.T)) * (1 - LR * WD)
        if t % FREQUENCY == 0:
            if left:
                ql, v = refreshed(sl, ql, v, False)
            if right:
                qr, v = refreshed(sr, qr, v, True)
        out.append(w.copy())
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spike", type=float, default=1e4)
    parser.add_argument("--max-dim", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((ROWS, COLS)) * 0.02
    grads = [rng.standard_normal((ROWS, COLS)) * (args.spike if s == SPIKE_STEP else 1)
             for s in range(STEPS)]
    for name, bounded in (("paper", False), ("Adam's bound", True)):
        ws = soap(w, grads, args.max_dim, bounded)
        steps = [np.linalg.norm(b - a) for a, b in zip(ws, ws[1:])]
        print(f"{name:>12}: largest step before the spike {max(steps[1:SPIKE_STEP - 1]):.3g}, "
              f"after {max(steps[SPIKE_STEP:]):.3g}; largest entry at the end "
              f"{np.abs(ws[-1]).max():.3g}")


if __name__ == "__main__":
    main()
