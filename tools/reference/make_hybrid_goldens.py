#!/usr/bin/env python3
"""Build small random Gated KalmaNet Qwen3 hybrid checkpoints (`hybrid_qwen3`) and record the
float64 logits of the plain-PyTorch reference (gka_hybrid_reference.py) as goldens for
ridgeserve's C++ tests. CPU only: torch, numpy, safetensors; transformers for the cross-checks.

    python3 tools/reference/make_hybrid_goldens.py                # (re)write tests/data/hybrid_qwen3
    python3 tools/reference/make_hybrid_goldens.py --check        # fp32 reference vs stored goldens

For every case it writes, under OUT/<case>/:
    config.json, generation_config.json, model.safetensors
    logits.f32                 [T, vocab] float32 LE row-major: the float64 reference, every position
    logits_transformers.f32    (all_attn only) transformers' Qwen3ForCausalLM on the same weights
    golden.json                ids, decode_from, versions, seeds, fp32-vs-float64 spread, sensitivities

The reference is recurrent, so its logits do not depend on how an engine splits the prompt:
the same file serves prefill (rows < decode_from in one call) and decode (one token per call).

The self-check (both modes) also compares the reference with transformers' Qwen3 on a tiny
all-attention YaRN + sliding-window model, and the YaRN inverse frequencies with
transformers' _compute_yarn_parameters for several parameter sets, and asserts agreement.

See tests/data/hybrid_qwen3/README.md and /work/shared/specs/gka-hybrid-qwen3.md.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import tempfile
import time
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gka_hybrid_reference as ref  # noqa: E402

GKA_CONFIG_BASE = {          # every field of spec section 1, at its default unless a case says otherwise
    "num_iter": 30, "ridge_strength": 0.02, "use_alpha_connection": True, "use_v_conv": True,
    "use_beta_gate": True, "use_forgetting_gate": True, "use_forgetting_gate_kk": True,
    "gla_rescale": True, "use_gate": True, "conv_size": 4, "norm_eps": 1e-6,
    "solver_type": "chebyshev", "chunk_size": 64, "kv_proj_rank": None, "kv_learnable_residual": False,
    "bp_lambda": True,       # training-only field that the HF code writes too; ignored at inference
}

CASES = {
    # Two GKA layers with GQA-like head expansion (4 q, 2 k, 2 v heads), full attention and a
    # sliding-window layer whose tensors are named `swa.` as the HF training code saves them.
    "gka_swa_mix": dict(
        pattern="GKA-*-GKA-SWA", hidden=64, intermediate=64, heads=4, kv_heads=2, head_dim=16, vocab=256,
        window=24, gka=dict(head_dim=16, num_q_heads=4, num_k_heads=2, num_v_heads=2, num_iter=30),
        gka_overrides=None, tie=False, dtype=torch.float32, rope={"rope_theta": 1000000.0},
        eos=[2, 3], swa_prefix="swa", T=136, decode_from=60, weight_seed=3101, prompt_seed=4101),
    # Only GKA layers, bf16 checkpoint (A_log, dt_bias too), tied embeddings, head_dim 32, and a
    # top-level gka_overrides that changes num_iter from 30 (gka_config) to 10.
    "all_gka_bf16": dict(
        pattern="GKA-GKA-GKA", hidden=64, intermediate=64, heads=2, kv_heads=2, head_dim=32, vocab=256,
        window=None, gka=dict(head_dim=32, num_q_heads=2, num_k_heads=2, num_v_heads=2, num_iter=30),
        gka_overrides={"num_iter": 10}, tie=True, dtype=torch.bfloat16, rope={"rope_theta": 1000000.0},
        eos=2, swa_prefix=None, T=136, decode_from=60, weight_seed=3102, prompt_seed=4102),
    # Plain Qwen3 (GQA 4/2), also run through transformers' own Qwen3ForCausalLM. RoPE given in
    # the newer rope_parameters form.
    "all_attn": dict(
        pattern="*-*-*", hidden=64, intermediate=64, heads=4, kv_heads=2, head_dim=16, vocab=256,
        window=None, gka=None, gka_overrides=None, tie=True, dtype=torch.float32,
        rope={"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
        eos=2, swa_prefix=None, T=136, decode_from=60, weight_seed=3103, prompt_seed=4103),
    # YaRN (factor 4 over 32 original positions, rope_parameters form), SWA named `self_attn.`,
    # an intermediate_size that is not a power of two, and T within max_position_embeddings.
    "yarn_swa": dict(
        pattern="SWA-GKA-*", hidden=64, intermediate=80, heads=4, kv_heads=2, head_dim=16, vocab=256,
        window=20, gka=dict(head_dim=16, num_q_heads=4, num_k_heads=2, num_v_heads=2, num_iter=30),
        gka_overrides=None, tie=False, dtype=torch.float32,
        rope={"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                  "original_max_position_embeddings": 32}},
        max_pos=128, eos=2, swa_prefix="self_attn", T=120, decode_from=60, weight_seed=3104, prompt_seed=4104),
}

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


# --------------------------------------------------------------------------------------
# Config and weights
# --------------------------------------------------------------------------------------

def make_config(c: dict) -> dict:
    """A config.json as a hybrid_qwen3 checkpoint would carry it."""
    layers = c["pattern"].split("-")
    cfg = {
        "architectures": ["HybridQwen3ForCausalLM"],
        "model_type": "hybrid_qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": c["eos"],
        "head_dim": c["head_dim"],
        "hidden_act": "silu",
        "hidden_size": c["hidden"],
        "hybrid_override_pattern": c["pattern"],
        "initializer_range": 0.02,
        "intermediate_size": c["intermediate"],
        "layer_types": layers,
        "max_position_embeddings": c.get("max_pos", 4096),
        "max_window_layers": len(layers),
        "num_attention_heads": c["heads"],
        "num_hidden_layers": len(layers),
        "num_key_value_heads": c["kv_heads"],
        "rms_norm_eps": 1e-6,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": c["tie"],
        "dtype": DTYPE_NAMES[c["dtype"]],
        "transformers_version": _version("transformers"),
        "use_cache": True,
        "vocab_size": c["vocab"],
    }
    cfg.update(c["rope"])
    if c["window"] is not None:
        cfg["swa_config"] = {"window_size": c["window"]}
    if c["gka"] is not None:
        g = dict(GKA_CONFIG_BASE)
        g.update(c["gka"])
        g["hidden_size"] = c["hidden"]
        cfg["gka_config"] = dict(sorted(g.items()))
    if c["gka_overrides"] is not None:
        cfg["gka_overrides"] = c["gka_overrides"]
    return dict(sorted(cfg.items()))


def tensor_shapes(c: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Checkpoint tensor names (spec section 1) and shapes, in a fixed order."""
    C, I, V, D = c["hidden"], c["intermediate"], c["vocab"], c["head_dim"]
    Hq, Hkv = c["heads"], c["kv_heads"]
    out = [("model.embed_tokens.weight", (V, C))]
    for i, kind in enumerate(c["pattern"].split("-")):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (C,)), (p + "post_attention_layernorm.weight", (C,))]
        if kind == "GKA":
            g = c["gka"]
            gd, gq, gk, gv = g["head_dim"], g["num_q_heads"], g["num_k_heads"], g["num_v_heads"]
            hx, W = max(gq, gk, gv), GKA_CONFIG_BASE["conv_size"]
            a = p + "gka."
            out += [(a + "q_proj.weight", (gq * gd, C)), (a + "k_proj.weight", (gk * gd, C)),
                    (a + "v_proj.weight", (gv * gd, C)), (a + "a_proj.weight", (hx, C)),
                    (a + "A_log", (hx,)), (a + "dt_bias", (hx,)),
                    (a + "b_proj.weight", (hx, C)), (a + "b_proj.bias", (hx,)),
                    (a + "alpha_proj.weight", (hx, C)), (a + "alpha_proj.bias", (hx,)),
                    (a + "q_conv1d.weight", (gq * gd, 1, W)), (a + "k_conv1d.weight", (gk * gd, 1, W)),
                    (a + "v_conv1d.weight", (gv * gd, 1, W)), (a + "g_proj.weight", (hx * gd, C)),
                    (a + "o_norm.weight", (gd,)), (a + "o_proj.weight", (C, hx * gd))]
        else:
            a = p + (c["swa_prefix"] + "." if kind == "SWA" else "self_attn.")
            out += [(a + "q_proj.weight", (Hq * D, C)), (a + "k_proj.weight", (Hkv * D, C)),
                    (a + "v_proj.weight", (Hkv * D, C)), (a + "o_proj.weight", (C, Hq * D)),
                    (a + "q_norm.weight", (D,)), (a + "k_norm.weight", (D,))]
        out += [(p + "mlp.gate_proj.weight", (I, C)), (p + "mlp.up_proj.weight", (I, C)),
                (p + "mlp.down_proj.weight", (C, I))]
    out.append(("model.norm.weight", (C,)))
    if not c["tie"]:
        out.append(("lm_head.weight", (V, C)))
    return out


def random_weights(c: dict) -> dict[str, torch.Tensor]:
    """Deterministic (CPU generator) weights with realistic scales, stored in the case dtype."""
    gen = torch.Generator().manual_seed(c["weight_seed"])

    def normal(shape, std):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float64)

    out = {}
    for name, shape in tensor_shapes(c):
        leaf = name.split(".", 3)[-1] if name.startswith("model.layers.") else name
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            val = normal(shape, 0.3)                 # logit std ~ 0.3 * sqrt(C): peaked, not flat
        elif name.endswith("norm.weight"):           # input/post/final/q/k/o norms
            val = 1.0 + 0.1 * normal(shape, 1.0)
        elif name.endswith("conv1d.weight"):
            val = uniform(shape, -0.5, 0.5)
        elif name.endswith(".A_log"):
            val = torch.log(uniform(shape, 1.0, 16.0))
        elif name.endswith(".dt_bias"):
            # softplus(dt_bias) = dt, log-uniform in [1e-3, 1e-1] (the HF layer's own init), so
            # per-token decays exp(-A dt) lie between ~0.2 and ~0.999, most of them above 0.9
            dt = torch.exp(uniform(shape, math.log(1e-3), math.log(1e-1)))
            val = dt + torch.log(-torch.expm1(-dt))
        elif name.endswith("a_proj.weight"):
            val = normal(shape, 0.05)
        elif name.endswith(("b_proj.bias", "alpha_proj.bias")):
            val = normal(shape, 1.0)                 # sigmoid spread over ~0.2 .. 0.8
        elif len(shape) == 2:                        # all other linears
            val = normal(shape, 0.1)
        else:
            raise RuntimeError(f"unhandled tensor {leaf} {shape}")
        out[name] = val.to(c["dtype"]).contiguous()
    return out


def _version(pkg: str) -> str:
    try:
        return __import__(pkg).__version__
    except Exception:
        return "not installed"


def versions() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "safetensors": _version("safetensors"), "transformers": _version("transformers")}


def logit_stats(logits: np.ndarray) -> dict:
    l = logits.astype(np.float64)
    p = np.exp(l - l.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return {"logit_std": float(l.std()), "mean_max_prob": float(p.max(-1).mean())}


def safetensors_dtypes(path: str) -> list[str]:
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"})


# --------------------------------------------------------------------------------------
# transformers cross-check (attention-only models)
# --------------------------------------------------------------------------------------

@contextlib.contextmanager
def transformers_in_float64():
    """transformers' Qwen3 code computes RMSNorm, RoPE (inv_freq, cos/sin) and the eager
    softmax in float32 even in a float64 model (~1e-7 relative error). Inside this context
    the `torch` seen by modeling_qwen3 and modeling_rope_utils is a proxy whose `float32` and
    `float` mean float64, so transformers' own code runs unchanged but entirely in float64.
    Build the model inside the context: the inverse frequencies are computed at init."""
    import transformers.modeling_rope_utils as rope_utils
    import transformers.models.qwen3.modeling_qwen3 as qwen3

    class TorchProxy(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    proxy = TorchProxy("torch")
    proxy.float32 = torch.float64
    proxy.float = torch.float64
    saved = qwen3.torch, rope_utils.torch
    qwen3.torch = rope_utils.torch = proxy
    try:
        yield
    finally:
        qwen3.torch, rope_utils.torch = saved


def qwen3_config_for(cfg: dict):
    """transformers.Qwen3Config with the fields of an attention-only hybrid_qwen3 config."""
    from transformers import Qwen3Config
    layers = ref.parse_layer_types(cfg)
    if "GKA" in layers:
        raise ValueError("transformers' Qwen3 has no GKA layers")
    if "rope_parameters" in cfg:
        rope = dict(cfg["rope_parameters"])
    else:
        rope = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 10000.0)}
        rope.update(cfg.get("rope_scaling") or {})
    has_swa = "SWA" in layers
    return Qwen3Config(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"], rms_norm_eps=cfg["rms_norm_eps"],
        tie_word_embeddings=cfg["tie_word_embeddings"], max_position_embeddings=cfg["max_position_embeddings"],
        rope_parameters=rope, attention_bias=False, hidden_act="silu",
        use_sliding_window=has_swa, sliding_window=cfg["swa_config"]["window_size"] if has_swa else None,
        layer_types=["sliding_attention" if s == "SWA" else "full_attention" for s in layers],
        bos_token_id=cfg.get("bos_token_id"), eos_token_id=cfg.get("eos_token_id"),
        attn_implementation="eager")


@torch.no_grad()
def transformers_logits(folder: str, ids: list[int], float64_everywhere: bool) -> tuple[np.ndarray, object]:
    """Logits [T, vocab] of transformers' Qwen3ForCausalLM (eager, float64) on a checkpoint folder.
    float64_everywhere: also promote its internal float32 casts (see transformers_in_float64)."""
    from transformers import Qwen3ForCausalLM
    cfg = json.load(open(os.path.join(folder, "config.json")))
    tensors = ref.load_safetensors_folder(folder)
    state = {k.replace(".swa.", ".self_attn."): v.to(torch.float64) for k, v in tensors.items()}
    ctx = transformers_in_float64() if float64_everywhere else contextlib.nullcontext()
    with ctx:
        qcfg = qwen3_config_for(cfg)
        model = Qwen3ForCausalLM(qcfg).to(torch.float64).eval()
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected, unexpected
        assert set(missing) <= ({"lm_head.weight"} if qcfg.tie_word_embeddings else set()), missing
        if qcfg.tie_word_embeddings:
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
        if float64_everywhere:
            assert model.model.rotary_emb.inv_freq.dtype == torch.float64
        logits = model(input_ids=torch.tensor([ids])).logits[0].double().numpy()
    return logits, model


def check_yarn_against_transformers() -> dict:
    """Asserts that the reference's YaRN (and sliding window) agree with transformers."""
    import transformers.modeling_rope_utils as rope_utils
    results = {}
    # 1. inverse frequencies and attention factor for several YaRN parameter sets
    param_sets = [
        {"factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0},
        {"factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0},
        {"factor": 8.0, "original_max_position_embeddings": 4096, "rope_theta": 500000.0,
         "beta_fast": 16, "beta_slow": 2, "truncate": False},
        {"factor": 2.5, "original_max_position_embeddings": 2048, "rope_theta": 10000.0,
         "mscale": 0.8, "mscale_all_dim": 0.5},
        {"factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0, "attention_factor": 1.3},
    ]
    worst = 0.0
    for dim in (16, 32, 128):
        for ps in param_sets:
            hcfg = {"max_position_embeddings": int(ps["factor"] * ps["original_max_position_embeddings"]),
                    "rope_parameters": {"rope_type": "yarn", **ps}}
            mine, mine_scale = ref.rope_inv_freq(ref.parse_rope(hcfg), dim)
            qc = qwen3_config_for({"vocab_size": 8, "hidden_size": 2 * dim, "intermediate_size": 8,
                                   "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                                   "head_dim": dim, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                                   "hybrid_override_pattern": "*", **hcfg})
            with transformers_in_float64():
                theirs, their_scale = rope_utils.ROPE_INIT_FUNCTIONS["yarn"](qc)
            assert theirs.dtype == torch.float64
            err = float((mine - theirs).abs().max() / theirs.abs().max())
            assert err < 1e-13 and abs(mine_scale - their_scale) < 1e-14, (dim, ps, err, mine_scale, their_scale)
            worst = max(worst, err)
    results["yarn_inv_freq_max_rel_err"] = worst
    # 2. a tiny all-attention model: sliding-window layer + full layer, YaRN, GQA, untied
    c = dict(pattern="SWA-*", hidden=64, intermediate=96, heads=4, kv_heads=2, head_dim=16, vocab=128,
             window=12, gka=None, gka_overrides=None, tie=False, dtype=torch.float32,
             rope={"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                       "original_max_position_embeddings": 32}},
             max_pos=128, eos=2, swa_prefix="swa", weight_seed=3901, prompt_seed=4901)
    ids = [1] + [int(i) for i in np.random.RandomState(c["prompt_seed"]).randint(4, c["vocab"], size=99)]
    with tempfile.TemporaryDirectory() as d:
        write_checkpoint(c, d)
        mine = ref.run_reference(d, ids, torch.float64)
        promoted, _ = transformers_logits(d, ids, float64_everywhere=True)
        stock, _ = transformers_logits(d, ids, float64_everywhere=False)
    results["yarn_swa_attention_model_vs_transformers_float64"] = ref.compare(mine, promoted)
    results["yarn_swa_attention_model_vs_transformers_stock"] = ref.compare(mine, stock)
    assert results["yarn_swa_attention_model_vs_transformers_float64"]["rel_rms"] < 1e-12, results
    assert results["yarn_swa_attention_model_vs_transformers_stock"]["rel_rms"] < 1e-5, results
    return results


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

def write_checkpoint(c: dict, d: str) -> dict:
    from safetensors.torch import save_file
    os.makedirs(d, exist_ok=True)
    cfg = make_config(c)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    gen_cfg = {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": c["eos"],
               "transformers_version": cfg["transformers_version"], "use_cache": True}
    json.dump(gen_cfg, open(os.path.join(d, "generation_config.json"), "w"), indent=2)
    path = os.path.join(d, "model.safetensors")
    save_file(random_weights(c), path, metadata={"format": "pt"})
    os.chmod(path, 0o644)   # save_file creates it 0600
    return cfg


def sensitivities(c: dict, d: str, ids: list[int], golden: np.ndarray) -> dict:
    """How far plausible engine mistakes move the logits (all float64), to size tolerances."""
    out = {}
    cfg = json.load(open(os.path.join(d, "config.json")))

    def effect(overrides):
        return ref.compare(ref.run_reference(d, ids, torch.float64, overrides), golden)

    layers = c["pattern"].split("-")
    if "GKA" in layers:
        n = ref.parse_gka(cfg).num_iter
        merged = dict(cfg.get("gka_overrides") or {})
        out["gka_no_solve_num_iter_0"] = effect({"gka_overrides": {**merged, "num_iter": 0}})
        out[f"gka_num_iter_{n - 1}_instead_of_{n}"] = effect({"gka_overrides": {**merged, "num_iter": n - 1}})
        out[f"gka_num_iter_{n + 20}_instead_of_{n}"] = effect({"gka_overrides": {**merged, "num_iter": n + 20}})
        if c["gka_overrides"]:
            out["ignoring_gka_overrides"] = effect({"gka_overrides": None})
    if "SWA" in layers:
        out["swa_window_plus_1"] = effect({"swa_config": {"window_size": c["window"] + 1}})
        out["swa_as_full_attention"] = effect({"swa_config": {"window_size": 10 ** 9}})
    rp = cfg.get("rope_parameters") or {}
    if rp.get("rope_type") == "yarn":
        out["yarn_ignored_default_rope"] = effect({"rope_parameters": {"rope_type": "default",
                                                                      "rope_theta": rp["rope_theta"]}})
    return out


def make_case(name: str, out_root: str):
    c = CASES[name]
    t0 = time.time()
    d = os.path.join(out_root, name)
    cfg = write_checkpoint(c, d)
    ids = [1] + [int(i) for i in np.random.RandomState(c["prompt_seed"]).randint(4, c["vocab"], size=c["T"] - 1)]

    logits64 = ref.run_reference(d, ids, torch.float64)
    logits32 = ref.run_reference(d, ids, torch.float32)
    logits64.astype("<f4").tofile(os.path.join(d, "logits.f32"))

    files = {
        "config.json": "hybrid_qwen3 config (HF format)",
        "generation_config.json": "bos/eos ids",
        "model.safetensors": "random weights, tensor names of spec section 1",
        "logits.f32": "float32 LE [T, vocab] row-major: float64 reference logits of every position of ids",
        "golden.json": "this file",
    }
    gj = {
        "ids": ids,
        "decode_from": c["decode_from"],
        "decode_from_note": "suggested split for engine tests: prefill ids[:decode_from] in one call, then "
                            "one token per call; logits.f32 holds the expected logits for every row either way",
        "T": len(ids),
        "vocab_size": c["vocab"],
        "layer_types": c["pattern"].split("-"),
        "reference": "tools/reference/gka_hybrid_reference.py (token-by-token recurrence; prefill == decode)",
        "reference_dtype": "float64",
        "checkpoint_dtypes": safetensors_dtypes(os.path.join(d, "model.safetensors")),
        "versions": versions(),
        "weight_seed": c["weight_seed"],
        "prompt_seed": c["prompt_seed"],
        "effective_gka_config": (ref.parse_gka(cfg).__dict__ if c["gka"] else None),
        "fp32_reference_vs_float64": ref.compare(logits32, logits64),
        "logit_stats": logit_stats(logits64),
        "sensitivity_vs_golden": sensitivities(c, d, ids, logits64),
        "files": files,
    }
    if name == "all_attn":
        promoted, _ = transformers_logits(d, ids, float64_everywhere=True)
        stock, _ = transformers_logits(d, ids, float64_everywhere=False)
        promoted.astype("<f4").tofile(os.path.join(d, "logits_transformers.f32"))
        files["logits_transformers.f32"] = (
            "float32 LE [T, vocab]: transformers Qwen3ForCausalLM (eager, float64, its float32 casts "
            "promoted to float64) on the same weights and ids")
        gj["transformers"] = {
            "class": "Qwen3ForCausalLM", "attn_implementation": "eager", "dtype": "float64",
            "version": _version("transformers"),
            "reference_vs_transformers_float64": ref.compare(logits64, promoted),
            "reference_vs_transformers_stock": ref.compare(logits64, stock),
            "note": "stock transformers computes RMSNorm, RoPE and softmax in float32 even for a "
                    "float64 model; 'float64' runs its unchanged code with those casts promoted",
        }
        assert gj["transformers"]["reference_vs_transformers_float64"]["rel_rms"] < 1e-12, gj["transformers"]
    json.dump(gj, open(os.path.join(d, "golden.json"), "w"), indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"[{name}] {time.time() - t0:.1f}s {size / 1024:.0f} KiB  fp32-vs-f64 {gj['fp32_reference_vs_float64']}"
          f"  stats {gj['logit_stats']}", flush=True)
    for k, v in gj["sensitivity_vs_golden"].items():
        print(f"    {k}: {v}")
    if "transformers" in gj:
        print(f"    transformers: f64 {gj['transformers']['reference_vs_transformers_float64']}"
              f"  stock {gj['transformers']['reference_vs_transformers_stock']}")


def check_case(name: str, root: str) -> bool:
    """Re-runs the reference in float32 and compares with the stored float64 logits."""
    d = os.path.join(root, name)
    gj = json.load(open(os.path.join(d, "golden.json")))
    ids = gj["ids"]
    golden = np.fromfile(os.path.join(d, "logits.f32"), dtype="<f4").reshape(len(ids), gj["vocab_size"])
    got = ref.run_reference(d, ids, torch.float32)
    r = ref.compare(got, golden)
    ok = r["rel_rms"] < 1e-4 and r["top1_agree"] >= 0.99
    print(f"[{name}] fp32 reference vs logits.f32: rel_rms {r['rel_rms']:.3e} top1 {r['top1_agree']:.4f}"
          f"  (recorded at generation: {gj['fp32_reference_vs_float64']['rel_rms']:.3e})  {'ok' if ok else 'FAIL'}")
    tf = os.path.join(d, "logits_transformers.f32")
    if os.path.exists(tf):
        other = np.fromfile(tf, dtype="<f4").reshape(len(ids), gj["vocab_size"])
        r2 = ref.compare(other, golden)
        print(f"[{name}] logits_transformers.f32 vs logits.f32: rel_rms {r2['rel_rms']:.3e} "
              f"top1 {r2['top1_agree']:.4f} (both rounded to float32)")
        ok = ok and r2["rel_rms"] < 1e-6
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/hybrid_qwen3")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--check", action="store_true", help="only compare a float32 reference run with the stored goldens")
    a = ap.parse_args()
    torch.set_num_threads(1)   # small tensors: threads only add overhead (and nondeterminism)
    print("versions:", versions())
    yarn = check_yarn_against_transformers()
    print("transformers cross-check (asserted):", json.dumps(yarn))
    if a.check:
        ok = all([check_case(n, a.out) for n in a.cases.split(",")])
        sys.exit(0 if ok else 1)
    for name in a.cases.split(","):
        make_case(name, a.out)


if __name__ == "__main__":
    main()
