#!/usr/bin/env python3
"""Fp32 simulation of three CG forms on the decode kernel's systems, against float64.

The decode kernel solves (Hs + diag(lambda)) x = q for each (sequence, head) with CG from the
Jacobi start, 30 iterations at tolerance 0. Its iteration has two block barriers: one for the
partial sums of the product and the inner products, one to publish r for the next product. A
pipelined CG (Ghysels and Vanroose 2014) takes its two inner products from vectors known before
the product, so they can travel with the vector the next product needs: one barrier an
iteration, if the product's partial sums are also reduced without shared memory. Pipelined CG
is known to lose accuracy to rounding faster than the textbook form; this script measures how
much, in fp32, on systems like the decode kernel's:
  cg     the textbook form,
  cgcg   the Chronopoulos-Gear form the kernel runs (one product and one reduction an
         iteration; its restart guard included),
  pipe   Ghysels-Vanroose pipelined CG (the same guard, restarting from the residual),
  pipe16 the same with the residual replaced once, at iteration 16 (r = q - A x, w = A r: two
         more products, and a restart of the recurrences),
each in fp32 (vectors, products and inner products), against float64 textbook CG ("CG64") and
the exact solution. Systems: Hs accumulated over 2000 decayed rank-1 updates of unit keys
(random, or near an 8-dimensional subspace for a worse condition), lambda = 0.25 + softplus, 64
unit right-hand sides a seed.

    python3 tools/sim/decode_cg_forms.py [--keys random|lowrank] [--seeds 3] [--iterations 30]
"""
import argparse

import numpy as np

from cg_precision import D, make_problem

F32 = np.float32


def dot(a, b):
    return np.sum(a * b, axis=1, dtype=F32)


def jacobi_start(a, b):
    x = (b / np.diag(a)[None, :]).astype(b.dtype)
    return x, (b - x @ a).astype(b.dtype)


def cg64(a, b, iterations):
    x, r = jacobi_start(a, b)
    p, d = r.copy(), np.sum(r * r, 1)
    for _ in range(iterations):
        ap = p @ a
        alpha = d / np.sum(p * ap, 1)
        x, r = x + alpha[:, None] * p, r - alpha[:, None] * ap
        d_new = np.sum(r * r, 1)
        p, d = r + (d_new / d)[:, None] * p, d_new
    return x


def cg32(a, b, iterations, tolerance):
    a, b = a.astype(F32), b.astype(F32)
    x, r = jacobi_start(a, b)
    p, d = r.copy(), dot(r, r)
    stop = (tolerance**2 * d).astype(F32)
    used = np.full(len(b), iterations)
    for it in range(iterations):
        live = d > stop
        used[~live & (used == iterations)] = it
        ap = p @ a
        pap = dot(p, ap)
        alpha = np.where(live & (pap > 0), d / np.where(pap > 0, pap, 1), 0).astype(F32)
        x, r = x + alpha[:, None] * p, r - alpha[:, None] * ap
        d_new = dot(r, r)
        beta = np.where(live, d_new / np.where(d > 0, d, 1), 0).astype(F32)
        p, d = np.where(live[:, None], r + beta[:, None] * p, p), np.where(live, d_new, d)
    return x, used


def cgcg32(a, b, iterations, tolerance, lambda_min):
    """The kernel's loop (kernels/cuda/mesa_recurrence.cu), vectorised over right-hand sides."""
    a, b = a.astype(F32), b.astype(F32)
    x, r = jacobi_start(a, b)
    p, s = np.zeros_like(r), np.zeros_like(r)
    r_sq_prev, curvature_prev = np.ones(len(b), F32), np.zeros(len(b), F32)
    stop = (tolerance**2 * dot(r, r)).astype(F32)
    live = np.ones(len(b), bool)
    used = np.full(len(b), iterations)
    for it in range(iterations):
        w = r @ a
        rar, r_sq = dot(r, w), dot(r, r)
        done = live & (r_sq <= stop) if tolerance > 0 else live & (r_sq == 0)
        used[done] = it
        live &= ~done
        p_ap = (rar - r_sq * r_sq * curvature_prev).astype(F32)
        beta = np.where(it == 0, 0, r_sq / r_sq_prev).astype(F32)
        restart = ~(p_ap > 0.5 * lambda_min * r_sq)
        p_ap, beta = np.where(restart, rar, p_ap), np.where(restart, 0, beta).astype(F32)
        live &= p_ap > 0
        alpha = np.where(live, r_sq / np.where(p_ap > 0, p_ap, 1), 0).astype(F32)
        p = np.where(live[:, None], beta[:, None] * p + r, p)
        s = np.where(live[:, None], beta[:, None] * s + w, s)
        x, r = x + alpha[:, None] * p, r - alpha[:, None] * s
        curvature_prev = np.where(live, p_ap / r_sq / r_sq, curvature_prev).astype(F32)
        r_sq_prev = np.where(live, r_sq, r_sq_prev)
    return x, used


def pipe32(a, b, iterations, tolerance, lambda_min, replace_every=0):
    """Pipelined CG; with replace_every > 0, every replace_every iterations r is recomputed as
    b - A x and w as A r (two more products), and the recurrences restart from them."""
    a, b = a.astype(F32), b.astype(F32)
    x, r = jacobi_start(a, b)
    w = r @ a
    z, s, p = (np.zeros_like(r) for _ in range(3))
    gamma_prev, alpha_prev = np.ones(len(b), F32), np.ones(len(b), F32)
    stop = (tolerance**2 * dot(r, r)).astype(F32)
    live = np.ones(len(b), bool)
    used = np.full(len(b), iterations)
    for it in range(iterations):
        fresh = replace_every > 0 and it > 0 and it % replace_every == 0
        if fresh:
            r = np.where(live[:, None], b - x @ a, r).astype(F32)
            w = np.where(live[:, None], r @ a, w).astype(F32)
        gamma, delta = dot(r, r), dot(w, r)  # (r, r) and (r, A r), with the published w
        done = live & (gamma <= stop) if tolerance > 0 else live & (gamma == 0)
        used[done] = it
        live &= ~done
        q = w @ a
        beta = np.where(it == 0 or fresh, 0, gamma / gamma_prev).astype(F32)
        denominator = (delta - beta * gamma / alpha_prev).astype(F32)  # (p, A p)
        restart = ~(denominator > 0.5 * lambda_min * gamma)
        denominator = np.where(restart, delta, denominator)
        beta = np.where(restart, 0, beta).astype(F32)
        live &= denominator > 0
        alpha = np.where(live, gamma / np.where(denominator > 0, denominator, 1), 0).astype(F32)
        keep = live[:, None]
        z = np.where(keep, q + beta[:, None] * z, z)
        s = np.where(keep, w + beta[:, None] * s, s)
        p = np.where(keep, r + beta[:, None] * p, p)
        x = x + alpha[:, None] * p
        r = np.where(keep, r - alpha[:, None] * s, r)
        w = np.where(keep, w - alpha[:, None] * z, w)
        gamma_prev = np.where(live, gamma, gamma_prev)
        alpha_prev = np.where(live, alpha, alpha_prev)
    return x, used


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", choices=("random", "lowrank"), default="random")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    for seed in range(args.seeds):
        hs, _, _, _, lam, q = make_problem(seed, args.keys)
        a = hs + np.diag(lam)
        exact = np.linalg.solve(a, q.T).T
        ref = cg64(a, q, args.iterations)

        def err(x, base):
            return np.max(np.linalg.norm(x - base, axis=1) / np.linalg.norm(base, axis=1))

        def true_residual(x):
            return np.max(np.linalg.norm(q - x @ a, axis=1) / np.linalg.norm(q, axis=1))

        print(f"seed {seed} ({args.keys} keys, condition {np.linalg.cond(a):.0f}, D {D}): "
              f"CG64 against exact {err(ref, exact):.1e}")
        lambda_min = F32(np.min(lam))
        for tolerance in (0.0, 1e-3, 1e-6):
            for name, solve in (("cg", lambda: cg32(a, q, args.iterations, tolerance)),
                                ("cgcg", lambda: cgcg32(a, q, args.iterations, tolerance,
                                                        lambda_min)),
                                ("pipe", lambda: pipe32(a, q, args.iterations, tolerance,
                                                        lambda_min)),
                                ("pipe16", lambda: pipe32(a, q, args.iterations, tolerance,
                                                          lambda_min, 16))):
                x, used = solve()
                x = x.astype(np.float64)
                print(f"  tol {tolerance:<6g} {name:6s} iterations {used.mean():5.2f}  "
                      f"against CG64 {err(x, ref):.1e}, exact {err(x, exact):.1e}, "
                      f"true residual {true_residual(x):.1e}")


if __name__ == "__main__":
    main()
