#!/usr/bin/env python3
"""Plain-PyTorch reference for Gated KalmaNet Qwen3 hybrids (`"model_type": "hybrid_qwen3"`).

Written from /work/shared/specs/gka-hybrid-qwen3.md for clarity, not speed: the model runs
one token at a time (a recurrent loop: attention layers keep a KV cache, GKA layers keep
their conv tails and the Hs / Ss states), in a chosen dtype (float64 for goldens, float32
to see how much an fp32 engine may drift). Every weight is read from the checkpoint in its
stored dtype (F32, BF16, F16) and upcast exactly to the compute dtype.

    python3 tools/reference/gka_hybrid_reference.py CHECKPOINT_DIR [--dtype float64] \
        [--ids 1,5,7,...] [--compare logits.f32]

Only torch, numpy and safetensors are needed; no transformers, no GPU.

Facts checked against awslabs/hybrid-model-factory's own layer code (not copied):
  * k is expanded with Hx // Hk and v with Hx // Hv ("interleaved" repeat: expanded head j
    reads source head j // group), q with Hx // Hq.
  * Checkpoint names: gka.{q,k,v}_conv1d.weight [C, 1, W] (FLA ShortConvolution, no bias),
    gka.b_proj.bias / gka.alpha_proj.bias (vLLM renames these to b_bias / alpha_bias
    internally only), gka.A_log, gka.dt_bias.
  * SWA layers of the HF training code hold their attention module as `swa`, so a
    checkpoint saved by that code names them `model.layers.i.swa.*`; converted Qwen3
    checkpoints name them `self_attn.*` (the vLLM plugin accepts both). This loader accepts
    both prefixes for SWA layers; full-attention (`*`) layers always use `self_attn`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------

# gka_config defaults (spec section 1). head_dim / num_*_heads fall back to the Qwen3 fields.
GKA_DEFAULTS = {
    "num_iter": 30,
    "ridge_strength": 0.02,
    "use_alpha_connection": True,
    "use_v_conv": True,
    "use_beta_gate": True,
    "use_forgetting_gate": True,
    "use_forgetting_gate_kk": True,
    "gla_rescale": True,
    "use_gate": True,
    "conv_size": 4,
    "norm_eps": 1e-6,
    "solver_type": "chebyshev",
    "chunk_size": 64,
    "kv_proj_rank": None,
    "kv_learnable_residual": False,
}

# Layer symbols of hybrid_override_pattern. Only the first three are implemented.
SUPPORTED_SYMBOLS = {"*", "SWA", "GKA"}
KNOWN_UNSUPPORTED_SYMBOLS = {"GDN": "Gated DeltaNet", "M2": "Mamba2", "BMF": "B'MOJO-F"}
# `layer_types` (used only when there is no hybrid_override_pattern) may use HF's names.
LAYER_TYPE_ALIASES = {"full_attention": "*", "sliding_attention": "SWA"}


@dataclass
class RopeConfig:
    rope_type: str = "default"          # "default" or "yarn"
    theta: float = 10000.0
    # yarn only (names as in transformers' rope_parameters)
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    beta_fast: float | None = None      # None -> 32
    beta_slow: float | None = None      # None -> 1
    truncate: bool = True
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None


@dataclass
class GKAConfig:
    head_dim: int
    num_q_heads: int
    num_k_heads: int
    num_v_heads: int
    num_iter: int
    ridge_strength: float
    use_alpha_connection: bool
    use_v_conv: bool
    use_beta_gate: bool
    use_forgetting_gate: bool
    use_forgetting_gate_kk: bool
    gla_rescale: bool
    use_gate: bool
    conv_size: int
    norm_eps: float
    solver_type: str

    @property
    def num_expanded_heads(self) -> int:
        return max(self.num_q_heads, self.num_k_heads, self.num_v_heads)


@dataclass
class ModelConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    layer_types: list[str]              # one of "*", "SWA", "GKA" per layer
    rope: RopeConfig
    window_size: int | None             # swa_config.window_size (needed when a SWA layer exists)
    gka: GKAConfig | None               # needed when a GKA layer exists
    extra: dict = field(default_factory=dict)


def parse_layer_types(cfg: dict) -> list[str]:
    """Reads hybrid_override_pattern ("GKA-*-SWA"), else layer_types. Never assumes alternation."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:
        symbols = [s.strip() for s in pattern.split("-")]
    elif cfg.get("layer_types") is not None:
        symbols = [LAYER_TYPE_ALIASES.get(s, s) for s in cfg["layer_types"]]
    else:
        symbols = ["*"] * cfg["num_hidden_layers"]
    for i, s in enumerate(symbols):
        if s in KNOWN_UNSUPPORTED_SYMBOLS:
            raise ValueError(f"layer {i}: mixer {s!r} ({KNOWN_UNSUPPORTED_SYMBOLS[s]}) is not supported")
        if s not in SUPPORTED_SYMBOLS:
            raise ValueError(f"layer {i}: unknown layer symbol {s!r} in {pattern or cfg.get('layer_types')!r}")
    if len(symbols) != cfg["num_hidden_layers"]:
        raise ValueError(f"pattern has {len(symbols)} layers, num_hidden_layers is {cfg['num_hidden_layers']}")
    return symbols


def parse_rope(cfg: dict) -> RopeConfig:
    """Accepts the newer `rope_parameters` dict or `rope_theta` + optional `rope_scaling`."""
    params = cfg.get("rope_parameters")
    if params:
        if any(isinstance(v, dict) for v in params.values()):
            raise ValueError("per-layer-type rope_parameters are not supported")
        merged = dict(params)
        merged.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    else:
        merged = {"rope_theta": cfg.get("rope_theta", 10000.0)}
        if cfg.get("rope_scaling"):
            merged.update(cfg["rope_scaling"])
    rope_type = merged.get("rope_type", merged.get("type", "default")) or "default"
    rope = RopeConfig(rope_type=rope_type, theta=float(merged["rope_theta"]))
    if rope_type == "default":
        return rope
    if rope_type != "yarn":
        raise ValueError(f"rope type {rope_type!r} is not supported (only 'default' and 'yarn')")
    rope.original_max_position_embeddings = merged.get("original_max_position_embeddings",
                                                       cfg.get("original_max_position_embeddings"))
    if rope.original_max_position_embeddings is None:
        # transformers' standardisation does the same
        rope.original_max_position_embeddings = cfg["max_position_embeddings"]
    rope.factor = merged.get("factor")
    if rope.factor is None:
        rope.factor = cfg["max_position_embeddings"] / rope.original_max_position_embeddings
    rope.beta_fast = merged.get("beta_fast")
    rope.beta_slow = merged.get("beta_slow")
    rope.truncate = merged.get("truncate", True)
    rope.attention_factor = merged.get("attention_factor")
    rope.mscale = merged.get("mscale")
    rope.mscale_all_dim = merged.get("mscale_all_dim")
    return rope


def parse_gka(cfg: dict) -> GKAConfig:
    """gka_config with spec defaults, then the top-level gka_overrides merged on top."""
    g = dict(GKA_DEFAULTS)
    g.update(cfg.get("gka_config") or {})
    g.update(cfg.get("gka_overrides") or {})
    # Missing head fields: derive from the Qwen3 fields, as the HF training code does.
    g.setdefault("head_dim", cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    g.setdefault("num_q_heads", cfg["num_attention_heads"])
    g.setdefault("num_k_heads", cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    g.setdefault("num_v_heads", g["num_k_heads"])
    # Configurations the spec does not cover: refuse rather than guess.
    if g["kv_proj_rank"] is not None:
        raise ValueError("gka_config.kv_proj_rank (low-rank k/v head expansion) is not supported")
    if not g["use_forgetting_gate"] or not g["use_forgetting_gate_kk"]:
        raise ValueError("GKA without forgetting gates (use_forgetting_gate[_kk] = false) is not supported")
    if g["solver_type"] != "chebyshev":
        raise ValueError(f"GKA solver_type {g['solver_type']!r} is not supported")
    if int(g["num_iter"]) < 0:
        raise ValueError("gka num_iter must be >= 0")
    out = GKAConfig(**{k: g[k] for k in GKAConfig.__dataclass_fields__})
    hx = out.num_expanded_heads
    for name in ("num_q_heads", "num_k_heads", "num_v_heads"):
        if hx % getattr(out, name):
            raise ValueError(f"gka {name}={getattr(out, name)} does not divide the expanded head count {hx}")
    return out


def parse_config(cfg: dict) -> ModelConfig:
    if cfg.get("model_type") not in (None, "hybrid_qwen3", "qwen3"):
        raise ValueError(f"model_type {cfg.get('model_type')!r} is not hybrid_qwen3")
    layer_types = parse_layer_types(cfg)
    window = None
    if "SWA" in layer_types:
        window = (cfg.get("swa_config") or {}).get("window_size")
        if window is None:
            raise ValueError("SWA layers need swa_config.window_size")
    n_heads = cfg["num_attention_heads"]
    return ModelConfig(
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=n_heads,
        num_key_value_heads=cfg.get("num_key_value_heads") or n_heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // n_heads,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        vocab_size=cfg["vocab_size"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=cfg.get("max_position_embeddings", 32768),
        layer_types=layer_types,
        rope=parse_rope(cfg),
        window_size=window,
        gka=parse_gka(cfg) if "GKA" in layer_types else None,
    )


# --------------------------------------------------------------------------------------
# Checkpoint
# --------------------------------------------------------------------------------------

def load_safetensors_folder(folder: str) -> dict[str, torch.Tensor]:
    """All tensors of model.safetensors, or of the shards listed in model.safetensors.index.json."""
    from safetensors.torch import load_file
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(os.path.join(folder, f)))
    return tensors


class WeightStore:
    """Hands out weights upcast to the compute dtype, checks shapes, and records which names
    were used so that unused (misnamed) tensors are reported."""

    def __init__(self, tensors: dict[str, torch.Tensor], dtype: torch.dtype):
        self.tensors = tensors
        self.dtype = dtype
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in self.tensors:
            raise KeyError(f"missing tensor {name}")
        t = self.tensors[name]
        if not t.is_floating_point():
            raise TypeError(f"{name}: expected a float tensor, got {t.dtype}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {tuple(shape)}")
        self.used.add(name)
        return t.to(self.dtype)  # bf16/f16/f32 -> f32/f64 is exact

    def check_all_used(self):
        unused = sorted(set(self.tensors) - self.used)
        if unused:
            raise ValueError(f"unused tensors in checkpoint: {unused}")


# --------------------------------------------------------------------------------------
# Basic pieces
# --------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = W x (+ b), W stored [out, in] as in PyTorch."""
    y = weight @ x
    return y + bias if bias is not None else y


def mlp(x, gate_w, up_w, down_w):
    """Qwen3 SwiGLU MLP: down(silu(gate(x)) * up(x))."""
    return linear(F.silu(linear(x, gate_w)) * linear(x, up_w), down_w)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / (||x||_2 + eps): the eps is added to the norm, not inside the sqrt."""
    return x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) + eps)


# --------------------------------------------------------------------------------------
# RoPE
# --------------------------------------------------------------------------------------

def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inv_freq(rope: RopeConfig, dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [dim/2] (float64) and the cos/sin scaling factor.

    default: inv_freq_i = theta^(-2i/dim), scaling 1.
    yarn:    transformers' _compute_yarn_parameters: a linear ramp between the
             extrapolated (original) and the interpolated (/factor) frequencies over the
             dimension range found from beta_fast / beta_slow rotations within
             original_max_position_embeddings; scaling = 0.1 ln(factor) + 1 (or the
             mscale / mscale_all_dim ratio, or an explicit attention_factor).
    """
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    inv_freq_extrapolation = 1.0 / (rope.theta ** exponents)
    if rope.rope_type == "default":
        return inv_freq_extrapolation, 1.0

    factor = float(rope.factor)
    orig = rope.original_max_position_embeddings
    if rope.attention_factor is not None:
        scaling = float(rope.attention_factor)
    elif rope.mscale and rope.mscale_all_dim:
        scaling = yarn_get_mscale(factor, rope.mscale) / yarn_get_mscale(factor, rope.mscale_all_dim)
    else:
        scaling = yarn_get_mscale(factor)
    beta_fast = rope.beta_fast or 32
    beta_slow = rope.beta_slow or 1

    def correction_dim(num_rotations):
        # the dimension whose wavelength fits num_rotations times into `orig` positions
        return dim * math.log(orig / (num_rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1 - ramp          # 1: keep the original frequency; 0: divide by factor
    inv_freq_interpolation = inv_freq_extrapolation / factor
    inv_freq = inv_freq_interpolation * (1 - extrapolation_weight) + inv_freq_extrapolation * extrapolation_weight
    return inv_freq, scaling


def rope_cos_sin(pos: int, inv_freq: torch.Tensor, scaling: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [D] for one position, halves tiled twice, times the attention scaling."""
    angle = pos * inv_freq                       # float64
    emb = torch.cat([angle, angle])
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """rotate_half convention: x * cos + rotate_half(x) * sin (x [heads, D])."""
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------------------
# Attention layer (Qwen3; full or sliding window)
# --------------------------------------------------------------------------------------

class AttentionLayer:
    """Qwen3 attention: per-head q/k RMSNorm, RoPE, GQA, causal softmax; with `window` set,
    a query at position t sees keys at positions in (t - window, t]."""

    def __init__(self, cfg: ModelConfig, w: WeightStore, prefix: str, window: int | None):
        C, D, Hq, Hkv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        if Hq % Hkv:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        self.D, self.Hq, self.Hkv, self.eps, self.window = D, Hq, Hkv, cfg.rms_norm_eps, window
        self.q_proj = w.get(prefix + "q_proj.weight", (Hq * D, C))
        self.k_proj = w.get(prefix + "k_proj.weight", (Hkv * D, C))
        self.v_proj = w.get(prefix + "v_proj.weight", (Hkv * D, C))
        self.o_proj = w.get(prefix + "o_proj.weight", (C, Hq * D))
        self.q_norm = w.get(prefix + "q_norm.weight", (D,))
        self.k_norm = w.get(prefix + "k_norm.weight", (D,))
        self.keys: list[torch.Tensor] = []       # per position: [Hkv, D] after k_norm and RoPE
        self.values: list[torch.Tensor] = []     # per position: [Hkv, D]

    def step(self, x: torch.Tensor, pos: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        D, Hq, Hkv = self.D, self.Hq, self.Hkv
        q = rms_norm(linear(x, self.q_proj).view(Hq, D), self.q_norm, self.eps)
        k = rms_norm(linear(x, self.k_proj).view(Hkv, D), self.k_norm, self.eps)
        v = linear(x, self.v_proj).view(Hkv, D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        self.keys.append(k)
        self.values.append(v)
        assert len(self.keys) == pos + 1

        first = 0 if self.window is None else max(0, pos - self.window + 1)
        K = torch.stack(self.keys[first:pos + 1])      # [n, Hkv, D]
        V = torch.stack(self.values[first:pos + 1])
        group = Hq // Hkv
        out = []
        for j in range(Hq):
            kv = j // group                              # GQA: query head j reads kv head j // group
            scores = (K[:, kv, :] @ q[j]) / math.sqrt(D)   # [n]
            p = torch.softmax(scores, dim=0)
            out.append(p @ V[:, kv, :])
        return linear(torch.cat(out), self.o_proj)


# --------------------------------------------------------------------------------------
# GKA layer
# --------------------------------------------------------------------------------------

def causal_conv_step(tail: torch.Tensor, x: torch.Tensor, weight: torch.Tensor):
    """Depthwise causal conv for one new token.

    tail [W-1, C]: the previous W-1 raw inputs (oldest first, zeros before the sequence).
    weight [C, 1, W]: weight[c, 0, W-1] multiplies the current token, weight[c, 0, 0] the
    oldest. Returns (output [C], new tail)."""
    window = torch.cat([tail, x[None, :]], dim=0)        # [W, C]
    y = (window.T * weight[:, 0, :]).sum(-1)
    return y, window[1:]


def chebyshev_solve(Hs: torch.Tensor, q: torch.Tensor, ridge_strength: float, num_iter: int):
    """Spec section 4, batched over heads: approximately solve (Hs + lam I) x = q with
    lam = ridge_strength * ||Hs||_F, using bounds mu = lam, L = F + lam.

    Hs [H, D, D], q [H, D] -> x [H, D]."""
    fro = torch.linalg.matrix_norm(Hs, ord="fro")[:, None]      # [H, 1]
    lam = ridge_strength * fro
    step = 2.0 / (2.0 * lam + fro)
    r4 = (fro / (2.0 * lam + fro) / 2.0) ** 2
    x_prev = torch.zeros_like(q)
    x = step * q
    w = torch.full_like(fro, 2.0)
    for _ in range(num_iter):
        w = 1.0 / (1.0 - r4 * w)
        res = torch.einsum("hij,hj->hi", Hs, x) + lam * x - q    # A x - q
        upd = step * w * res + (w - 1.0) * x_prev
        x_prev, x = x, w * x - upd
    return x


class GKALayer:
    """Gated KalmaNet mixer, spec section 3, one token at a time.

    State: conv tails of the raw q/k/v projections [W-1, .] and, per expanded head,
    Hs (key-key, "h_kk") and Ss (key-value, "h_kv", row = key index), both [Hx, D, D]."""

    def __init__(self, cfg: ModelConfig, w: WeightStore, prefix: str):
        g = cfg.gka
        C, D, W = cfg.hidden_size, g.head_dim, g.conv_size
        Hq, Hk, Hv, Hx = g.num_q_heads, g.num_k_heads, g.num_v_heads, g.num_expanded_heads
        self.g, self.D, self.Hq, self.Hk, self.Hv, self.Hx = g, D, Hq, Hk, Hv, Hx
        self.q_proj = w.get(prefix + "q_proj.weight", (Hq * D, C))
        self.k_proj = w.get(prefix + "k_proj.weight", (Hk * D, C))
        self.v_proj = w.get(prefix + "v_proj.weight", (Hv * D, C))
        self.q_conv = w.get(prefix + "q_conv1d.weight", (Hq * D, 1, W))
        self.k_conv = w.get(prefix + "k_conv1d.weight", (Hk * D, 1, W))
        self.v_conv = w.get(prefix + "v_conv1d.weight", (Hv * D, 1, W)) if g.use_v_conv else None
        self.a_proj = w.get(prefix + "a_proj.weight", (Hx, C))
        self.A_log = w.get(prefix + "A_log", (Hx,))
        self.dt_bias = w.get(prefix + "dt_bias", (Hx,))
        if g.use_beta_gate:
            self.b_proj = w.get(prefix + "b_proj.weight", (Hx, C))
            self.b_bias = w.get(prefix + "b_proj.bias", (Hx,))
        if g.use_alpha_connection:
            self.alpha_proj = w.get(prefix + "alpha_proj.weight", (Hx, C))
            self.alpha_bias = w.get(prefix + "alpha_proj.bias", (Hx,))
        if g.use_gate:
            self.g_proj = w.get(prefix + "g_proj.weight", (Hx * D, C))
        self.o_norm = w.get(prefix + "o_norm.weight", (D,))
        self.o_proj = w.get(prefix + "o_proj.weight", (C, Hx * D))
        dt = self.q_proj.dtype
        self.q_tail = torch.zeros(W - 1, Hq * D, dtype=dt)
        self.k_tail = torch.zeros(W - 1, Hk * D, dtype=dt)
        self.v_tail = torch.zeros(W - 1, Hv * D, dtype=dt)
        self.Hs = torch.zeros(Hx, D, D, dtype=dt)
        self.Ss = torch.zeros(Hx, D, D, dtype=dt)
        self.scale = D ** -0.5 if g.gla_rescale else 1.0

    def expand(self, heads: torch.Tensor, n: int) -> torch.Tensor:
        """[n, D] -> [Hx, D]: expanded head j uses source head j // (Hx / n)."""
        return heads.repeat_interleave(self.Hx // n, dim=0)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        g, D = self.g, self.D
        # 1. projections, causal depthwise conv over time, SiLU
        q, self.q_tail = causal_conv_step(self.q_tail, linear(x, self.q_proj), self.q_conv)
        k, self.k_tail = causal_conv_step(self.k_tail, linear(x, self.k_proj), self.k_conv)
        v = linear(x, self.v_proj)
        if self.v_conv is not None:
            v, self.v_tail = causal_conv_step(self.v_tail, v, self.v_conv)
            v = F.silu(v)
        q, k = F.silu(q), F.silu(k)
        # 2. heads, expanded to Hx, L2-normalised q and k
        q = l2_normalize(self.expand(q.view(self.Hq, D), self.Hq))
        k = l2_normalize(self.expand(k.view(self.Hk, D), self.Hk))
        v = self.expand(v.view(self.Hv, D), self.Hv)
        # 3. per-head gates
        if g.use_beta_gate:
            beta = torch.sigmoid(linear(x, self.b_proj, self.b_bias)) + 1e-6
            k, v = beta[:, None] * k, beta[:, None] * v                  # k~, v~
        log_decay = -torch.exp(self.A_log) * F.softplus(linear(x, self.a_proj) + self.dt_bias)
        decay = torch.exp(log_decay)[:, None, None]
        # 4. state update
        self.Hs = decay * self.Hs + k[:, :, None] * k[:, None, :]        # k~ k~^T
        self.Ss = decay * self.Ss + k[:, :, None] * v[:, None, :]        # k~ v~^T
        # 5. ridge solve and alpha connection (num_iter = 0: no solve, no alpha)
        if g.num_iter > 0:
            x_solve = chebyshev_solve(self.Hs, q, g.ridge_strength, g.num_iter)
            if g.use_alpha_connection:
                alpha = torch.sigmoid(linear(x, self.alpha_proj, self.alpha_bias))[:, None]
                q = q + alpha * (x_solve - q)
            else:
                q = x_solve
        # 6. readout Ss^T q~, gated RMSNorm over D, output projection
        o = self.scale * torch.einsum("hkv,hk->hv", self.Ss, q)          # [Hx, D]
        o = rms_norm(o, self.o_norm, g.norm_eps)
        if g.use_gate:
            o = o * F.silu(linear(x, self.g_proj).view(self.Hx, D))
        return linear(o.reshape(-1), self.o_proj)


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------

class HybridModel:
    """The whole decoder; `step(token, pos)` returns that position's logits."""

    def __init__(self, cfg: ModelConfig, tensors: dict[str, torch.Tensor], dtype=torch.float64):
        self.cfg, self.dtype = cfg, dtype
        w = WeightStore(tensors, dtype)
        C, I = cfg.hidden_size, cfg.intermediate_size
        self.embed = w.get("model.embed_tokens.weight", (cfg.vocab_size, C))
        self.final_norm = w.get("model.norm.weight", (C,))
        if cfg.tie_word_embeddings:
            if w.has("lm_head.weight"):
                raise ValueError("tie_word_embeddings is true but lm_head.weight is present")
            self.lm_head = self.embed
        else:
            self.lm_head = w.get("lm_head.weight", (cfg.vocab_size, C))
        self.layers = []
        for i, kind in enumerate(cfg.layer_types):
            p = f"model.layers.{i}."
            layer = {
                "kind": kind,
                "in_norm": w.get(p + "input_layernorm.weight", (C,)),
                "post_norm": w.get(p + "post_attention_layernorm.weight", (C,)),
                "gate": w.get(p + "mlp.gate_proj.weight", (I, C)),
                "up": w.get(p + "mlp.up_proj.weight", (I, C)),
                "down": w.get(p + "mlp.down_proj.weight", (C, I)),
            }
            if kind == "GKA":
                layer["mixer"] = GKALayer(cfg, w, p + "gka.")
            else:
                prefix = p + "self_attn."
                if kind == "SWA" and w.has(p + "swa.q_proj.weight"):
                    prefix = p + "swa."   # HF training code's module name for SWA layers
                layer["mixer"] = AttentionLayer(cfg, w, prefix, cfg.window_size if kind == "SWA" else None)
            self.layers.append(layer)
        w.check_all_used()
        self.inv_freq, self.rope_scaling = rope_inv_freq(cfg.rope, cfg.head_dim)

    @classmethod
    def from_folder(cls, folder: str, dtype=torch.float64, config_overrides: dict | None = None):
        """config_overrides: top-level keys replaced in config.json (e.g. {"gka_overrides": {...}})."""
        cfg = json.load(open(os.path.join(folder, "config.json")))
        cfg.update(config_overrides or {})
        return cls(parse_config(cfg), load_safetensors_folder(folder), dtype)

    def step(self, token: int, pos: int) -> torch.Tensor:
        eps = self.cfg.rms_norm_eps
        cos, sin = rope_cos_sin(pos, self.inv_freq, self.rope_scaling, self.dtype)
        h = self.embed[token]
        for L in self.layers:
            y = rms_norm(h, L["in_norm"], eps)
            if L["kind"] == "GKA":
                h = h + L["mixer"].step(y)
            else:
                h = h + L["mixer"].step(y, pos, cos, sin)
            h = h + mlp(rms_norm(h, L["post_norm"], eps), L["gate"], L["up"], L["down"])
        return linear(rms_norm(h, self.final_norm, eps), self.lm_head)


@torch.no_grad()
def run_reference(folder: str, ids: list[int], dtype=torch.float64, config_overrides: dict | None = None) -> np.ndarray:
    """Logits [T, vocab] (float64 numpy) of every position, one token at a time from position 0."""
    model = HybridModel.from_folder(folder, dtype, config_overrides)
    return np.stack([model.step(int(t), p).double().numpy() for p, t in enumerate(ids)])


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    """Relative RMS ||a - b||_2 / ||b||_2 over the whole array, and the top-1 agreement."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return {"rel_rms": float(np.linalg.norm(a - b) / np.linalg.norm(b)),
            "top1_agree": float(np.mean(a.argmax(-1) == b.argmax(-1)))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--ids", help="comma-separated ids (default: golden.json's ids)")
    ap.add_argument("--compare", help="float32 [T, vocab] file to compare with (default: logits.f32 if present)")
    ap.add_argument("--out", help="write the logits here as float32 [T, vocab]")
    a = ap.parse_args()
    if a.ids:
        ids = [int(s) for s in a.ids.split(",")]
    else:
        ids = json.load(open(os.path.join(a.folder, "golden.json")))["ids"]
    logits = run_reference(a.folder, ids, getattr(torch, a.dtype))
    if a.out:
        logits.astype("<f4").tofile(a.out)
    ref = a.compare or os.path.join(a.folder, "logits.f32")
    if os.path.exists(ref):
        other = np.fromfile(ref, dtype="<f4").reshape(len(ids), -1)
        print(f"{a.dtype} reference vs {ref}: {compare(logits, other)}")
    else:
        print(f"logits {logits.shape}, argmax of the last row {int(logits[-1].argmax())}")


if __name__ == "__main__":
    main()
