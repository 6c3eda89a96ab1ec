#!/usr/bin/env python3
"""Independent float64 numpy implementation of the MesaNet model math in
shared/specs/mesanet.md (sections 2-3), written from the spec, not from FLA.

    python3 tools/reference/mesanet_numpy.py DIR [DIR ...]

DIR holds config.json, model.safetensors and the golden files written by
make_mesanet_goldens.py (golden.json, logits_prefill.f32, logits_decode.f32).
For each DIR it runs the prompt token by token twice:
  prefill mode: every token solved with CG from x0 = 0 (FLA's chunk kernel),
  decode mode : tokens < decode_from as in prefill, later tokens from
                x0 = q / (diag(Hs) + lam + 1e-5) (FLA's decoding_one_step kernel),
and prints relative RMS of the logits and top-1 agreement against FLA's.
Needs only numpy and safetensors (bf16 tensors are decoded by hand).
"""

import json
import os
import struct
import sys

import numpy as np

CG_EPS = 1e-5   # added to both CG denominators and to the decode x0 denominator
L2_EPS = 1e-6   # added to sum(x^2) in the q/k L2 norm


# ----------------------------------------------------------------------------- loading
def load_safetensors(path):
    """name -> float64 array. F32/F16/F64 via the safetensors numpy API, BF16 by hand."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
    out = {}
    plain = [k for k, v in header.items() if k != "__metadata__" and v["dtype"] != "BF16"]
    if plain:
        from safetensors import safe_open
        with safe_open(path, framework="numpy") as f:
            for k in plain:
                out[k] = f.get_tensor(k).astype(np.float64)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] != "BF16":
            continue
        b, e = v["data_offsets"]
        u16 = np.frombuffer(raw[base + b: base + e].tobytes(), dtype="<u2")
        out[k] = (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(v["shape"])
    return out


def load_model(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    if os.path.exists(os.path.join(d, "model.safetensors")):
        w = load_safetensors(os.path.join(d, "model.safetensors"))
    else:
        idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        w = {}
        for shard in sorted(set(idx["weight_map"].values())):
            w.update(load_safetensors(os.path.join(d, shard)))
    if cfg.get("attn") or cfg.get("attnres_block_size"):
        raise NotImplementedError("hybrid attention / attnres layers are not implemented here")
    return cfg, w


# ----------------------------------------------------------------------------- math
def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def cg(A, q, x0, iters):
    """Fixed-iteration CG on A x = q, batched over heads. A [H,D,D], q,x0 [H,D]."""
    x = x0.copy()
    r = q - np.einsum("hij,hj->hi", A, x)
    p = r.copy()
    d_old = np.sum(r * r, -1)
    for _ in range(iters):
        Ap = np.einsum("hij,hj->hi", A, p)
        alpha = d_old / (np.sum(p * Ap, -1) + CG_EPS)
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * Ap
        d_new = np.sum(r * r, -1)
        p = r + (d_new / (d_old + CG_EPS))[:, None] * p
        d_old = d_new
    return x


class MesaNetNumpy:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.C = cfg["hidden_size"]
        self.H = cfg["num_heads"]
        self.D = cfg["head_dim"]
        self.W = cfg.get("conv_size", 4)
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg.get("norm_eps", 1e-6)
        self.gate = cfg.get("use_output_gate", cfg.get("use_gate", False))
        self.iters_train = cfg.get("max_cg_step_training", 30)
        self.iters_dec = cfg.get("max_cg_step_decoding", 30)
        self.lb = cfg.get("lambda_lower_bound", 0.25)
        self.emb = w["model.embeddings.weight"]
        self.head = w.get("lm_head.weight", self.emb) if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
        self.lam = [softplus(w[f"model.layers.{i}.attn.lambda_params"]).reshape(self.H, self.D) + self.lb
                    for i in range(self.L)]
        self.reset()

    def reset(self):
        H, D, W, HD = self.H, self.D, self.W, self.H * self.D
        self.Hs = [np.zeros((H, D, D)) for _ in range(self.L)]
        self.Gs = [np.zeros((H, D, D)) for _ in range(self.L)]
        self.tq = [np.zeros((W - 1, HD)) for _ in range(self.L)]   # raw q_proj outputs, oldest first
        self.tk = [np.zeros((W - 1, HD)) for _ in range(self.L)]

    def conv(self, tail, cur, wconv):
        # wconv [HD,1,W]; w[c,0,W-1] multiplies the current token
        hist = np.concatenate([tail, cur[None]], 0)                 # [W, HD]
        return np.sum(wconv[:, 0, :].T * hist, 0), hist[1:]

    def mesa(self, i, x, decode):
        w, H, D = self.w, self.H, self.D
        P = f"model.layers.{i}.attn."
        xq, xk, v = w[P + "q_proj.weight"] @ x, w[P + "k_proj.weight"] @ x, w[P + "v_proj.weight"] @ x
        q, self.tq[i] = self.conv(self.tq[i], xq, w[P + "q_conv1d.weight"])
        k, self.tk[i] = self.conv(self.tk[i], xk, w[P + "k_conv1d.weight"])
        q, k, v = silu(q).reshape(H, D), silu(k).reshape(H, D), v.reshape(H, D)
        q = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + L2_EPS)
        k = k / np.sqrt(np.sum(k * k, -1, keepdims=True) + L2_EPS)
        beta = sigmoid(w[P + "b_proj.weight"] @ x + w[P + "b_proj.bias"])      # [H]
        gamma = sigmoid(w[P + "a_proj.weight"] @ x + w[P + "a_proj.bias"])     # [H]
        lam = self.lam[i]
        Hs = gamma[:, None, None] * self.Hs[i] + beta[:, None, None] * k[:, :, None] * k[:, None, :]
        Gs = gamma[:, None, None] * self.Gs[i] + beta[:, None, None] * k[:, :, None] * v[:, None, :]
        self.Hs[i], self.Gs[i] = Hs, Gs
        A = Hs + lam[:, :, None] * np.eye(D)[None]
        if decode:
            x0 = q / (np.diagonal(Hs, axis1=1, axis2=2) + lam + CG_EPS)
            xs = cg(A, q, x0, self.iters_dec)
        else:
            xs = cg(A, q, np.zeros_like(q), self.iters_train)
        o = np.einsum("hi,hij->hj", xs, Gs)                                   # Gs^T xs
        o = rmsnorm(o, w[P + "o_norm.weight"], self.eps)
        if self.gate:
            o = o * silu((w[P + "g_proj.weight"] @ x).reshape(H, D))
        return w[P + "o_proj.weight"] @ o.reshape(-1)

    def step(self, tok, decode=False):
        w = self.w
        h = self.emb[tok].copy()
        for i in range(self.L):
            P = f"model.layers.{i}."
            h = h + self.mesa(i, rmsnorm(h, w[P + "attn_norm.weight"], self.eps), decode)
            y = rmsnorm(h, w[P + "mlp_norm.weight"], self.eps)
            h = h + w[P + "mlp.down_proj.weight"] @ (silu(w[P + "mlp.gate_proj.weight"] @ y)
                                                     * (w[P + "mlp.up_proj.weight"] @ y))
        return self.head @ rmsnorm(h, w["model.norm.weight"], self.eps)

    def run(self, ids, decode_from=None):
        """decode_from None: prefill mode for all tokens; else decode mode from that index."""
        self.reset()
        return np.stack([self.step(t, decode_from is not None and j >= decode_from) for j, t in enumerate(ids)])


# ----------------------------------------------------------------------------- CLI
def compare(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2))),
            float(np.mean(a.argmax(-1) == b.argmax(-1))))


def check_dir(d):
    cfg, w = load_model(d)
    gj = json.load(open(os.path.join(d, "golden.json")))
    ids, n = gj["ids"], gj["decode_from"]
    V = cfg["vocab_size"]
    m = MesaNetNumpy(cfg, w)
    ours = {"prefill": m.run(ids), "decode": m.run(ids, n)}
    res = {}
    for mode, suffix in (("prefill", ""), ("decode", ""), ("prefill", "_fp32"), ("decode", "_fp32")):
        f = os.path.join(d, f"logits_{mode}{suffix}.f32")
        if not os.path.exists(f):
            continue
        ref = np.fromfile(f, dtype="<f4").reshape(len(ids), V)
        rel, top1 = compare(ours[mode], ref)
        res[mode + suffix] = (rel, top1)
        print(f"{os.path.basename(os.path.normpath(d)):14s} {mode + suffix:13s} ref={gj['reference_dtype'] if not suffix else 'float32':8s}"
              f" rel_rms={rel:.3e} top1={top1 * 100:.1f}%")
    rel, top1 = compare(ours["decode"], ours["prefill"])
    print(f"{os.path.basename(os.path.normpath(d)):14s} own decode-vs-prefill rel_rms={rel:.3e} top1={top1 * 100:.1f}%")
    return res


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    for d in sys.argv[1:]:
        check_dir(d)


if __name__ == "__main__":
    main()
