#!/usr/bin/env python3
"""Float64 simulation of one chunk's CG in the chunked prefill under several product precisions.

Each of a chunk's 64 tokens solves (exp(G_t) Hs_c + sum_{s<=t} W[t][s] k_s k_s^T + diag(lambda))
x_t = q_t by 30 CG iterations from x = 0 (spec section 5). The products are taken
  f64   in float64 (the reference, "CG64"),
  f32   with fp32 operands and accumulation (what 3xTF32 gives),
  p16   with p rounded to f16 (scaled per token by a power of two into [1, 2)) and every other
        operand fp32; x and r then move along that rounded direction, whose product was taken
        (the same 11 significant bits as p rounded to TF32, which the prefill's 3xTF32 phase
        does),
  f16   with every operand rounded to f16 (scaled likewise), fp32 accumulation (FLA's kernels).
It prints each scheme's largest relative error in x over the chunk's tokens, against CG64 and
against the exact solution. --keys lowrank draws keys near an 8-dimensional subspace, which makes
the systems worse conditioned (about 30 to 90) than random keys do (about 4 to 10).

    python3 tools/sim/cg_precision.py [--keys random|lowrank] [--seeds 3]
"""
import argparse

import numpy as np

D, L = 128, 64


def unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def to_f16(x):
    """x rounded to f16 after a per-row power-of-two scale into [1, 2), then unscaled."""
    m = np.max(np.abs(x), axis=-1, keepdims=True)
    s = np.where(m > 0, 2.0 ** -np.floor(np.log2(np.where(m > 0, m, 1))), 1.0)
    return (x * s).astype(np.float16).astype(np.float64) / s


def make_problem(seed, keys_kind):
    r = np.random.default_rng(seed)
    if keys_kind == "lowrank":
        hist, gam_range, lam_shift = 2000, (0.99, 0.9995), -3.0
        basis = r.standard_normal((D, 8))
        draw = lambda n: unit(r.standard_normal((n, 8)) @ basis.T + 0.05 * r.standard_normal((n, D)))
    else:
        hist, gam_range, lam_shift = 2000, (0.95, 0.999), 0.0
        draw = lambda n: unit(r.standard_normal((n, D)))
    keys_hist = draw(hist)
    gam, beta = r.uniform(*gam_range, hist), r.uniform(0.2, 1.0, hist)
    hs = np.zeros((D, D))
    for t in range(hist):
        hs = gam[t] * hs + beta[t] * np.outer(keys_hist[t], keys_hist[t])
    keys = draw(L)
    g = np.cumsum(np.log(r.uniform(*gam_range, L)))
    b = r.uniform(0.2, 1.0, L)
    w = np.where(np.arange(L)[None, :] <= np.arange(L)[:, None],
                 b[None, :] * np.exp(np.minimum(g[:, None] - g[None, :], 0)), 0.0)
    lam = 0.25 + np.log1p(np.exp(r.standard_normal(D) + lam_shift))
    q = unit(r.standard_normal((L, D)))
    return hs, keys, g, w, lam, q


def product(p, prob, mode):
    """A_t p_t for every token t (rows of p)."""
    hs, keys, g, w, lam, _ = prob
    if mode == "f64":
        y = np.exp(g)[:, None] * (p @ hs) + ((p @ keys.T) * w) @ keys
        return y + lam * p
    f32 = np.float32
    pm = (to_f16(p) if mode in ("p16", "f16") else p).astype(f32)
    hm = (to_f16(hs.reshape(1, -1)).reshape(D, D) if mode == "f16" else hs).astype(f32)
    km = (keys.astype(np.float16) if mode == "f16" else keys).astype(f32)
    s = (pm @ km.T) * w.astype(f32)
    if mode == "f16":
        s = to_f16(s).astype(f32)
    y = np.exp(g).astype(f32)[:, None] * (pm @ hm) + s @ km
    return y.astype(np.float64) + lam * p


def cg(prob, modes, switch=1e-2, iterations=30):
    """CG from x = 0 taking modes[0]'s products until every token's residual is below `switch`
    of its start, then modes[1]'s; p is rounded to f16 where the products take it so."""
    q = prob[-1]
    x, r = np.zeros_like(q), q.copy()
    p, d = r.copy(), np.sum(r * r, 1)
    d0, phase = d.copy(), 0
    for _ in range(iterations):
        if phase == 0 and np.all(np.sqrt(d) <= switch * np.sqrt(d0)):
            phase = 1
        mode = modes[phase]
        if mode in ("p16", "f16"):
            p = to_f16(p)
        ap = product(p, prob, mode)
        pap = np.sum(p * ap, 1)
        alpha = np.where(pap > 0, d / np.where(pap > 0, pap, 1), 0)
        x, r = x + alpha[:, None] * p, r - alpha[:, None] * ap
        d_new = np.sum(r * r, 1)
        p, d = r + (d_new / d)[:, None] * p, d_new
    return x


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", choices=("random", "lowrank"), default="random")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    schemes = [("fp32 throughout (3xTF32)", ("f32", "f32")),
               ("fp32, then f16 from 1e-2", ("f32", "f16")),
               ("TF32 p, then f16 from 1e-2 (the build)", ("p16", "f16")),
               ("f16 p, fp32 operands, throughout", ("p16", "p16")),
               ("f16 throughout (FLA)", ("f16", "f16"))]
    for seed in range(args.seeds):
        prob = make_problem(seed, args.keys)
        hs, keys, g, w, lam, q = prob
        systems = [np.exp(g[t]) * hs + (keys.T * w[t]) @ keys + np.diag(lam) for t in range(L)]
        exact = np.stack([np.linalg.solve(systems[t], q[t]) for t in range(L)])
        cg64 = cg(prob, ("f64", "f64"))

        def err(x, base):
            return np.max(np.linalg.norm(x - base, axis=1) / np.linalg.norm(base, axis=1))

        cond = max(np.linalg.cond(systems[t]) for t in (0, L - 1))
        print(f"seed {seed} ({args.keys} keys, condition {cond:.0f}): "
              f"CG64 against exact {err(cg64, exact):.1e}")
        for name, modes in schemes:
            x = cg(prob, modes)
            print(f"  {name:40s} against CG64 {err(x, cg64):.1e}, exact {err(x, exact):.1e}")


if __name__ == "__main__":
    main()
