#!/usr/bin/env python3
"""Build small random MesaNet checkpoints with flash-linear-attention (FLA) and record
FLA's logits as golden references for ridgeserve's C++ tests.

Needs a CUDA GPU (FLA's Triton kernels), torch, transformers 5.x and
flash-linear-attention==0.6.0 + fla-core==0.6.0.

    python3 tools/reference/make_mesanet_goldens.py --out tests/data/mesanet

For every case it writes, under OUT/<case>/:
    config.json, generation_config.json, model.safetensors   (save_pretrained, FLA names)
    logits_prefill.f32   [T, vocab] float32 LE row-major: the whole prompt in one forward
    logits_decode.f32    [T, vocab]: prefill ids[:N] with use_cache, then one token at a
                         time with the returned cache (FLA's decoding_one_step kernel)
    golden.json          ids, decode_from, versions, dtypes, FLA's own bf16-vs-fp32 spread

See tests/data/mesanet/README.md and /work/shared/specs/mesanet.md (section 7).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch

T_PROMPT = 136          # > 64: crosses two chunk boundaries (64, 128)
DECODE_FROM = 70        # prefill 70 tokens (one boundary inside), decode the other 66

CASES = {
    # name: (config kwargs, model dtype, weight seed, prompt seed)
    "d64_untied": (dict(hidden_size=128, num_heads=2, head_dim=64, num_hidden_layers=2, vocab_size=512,
                        use_output_gate=False, tie_word_embeddings=False), torch.float32, 1001, 2001),
    # intermediate_size given explicitly (256) to keep the file small and to exercise that config path
    "d64_tied_gate": (dict(hidden_size=128, num_heads=2, head_dim=64, num_hidden_layers=3, vocab_size=512,
                           use_output_gate=True, tie_word_embeddings=True, intermediate_size=256),
                      torch.float32, 1002, 2002),
    "d128_bf16": (dict(hidden_size=256, num_heads=2, head_dim=128, num_hidden_layers=2, vocab_size=512,
                       use_output_gate=False, tie_word_embeddings=False), torch.bfloat16, 1003, 2003),
}


def fla_classes():
    from fla.models import MesaNetConfig, MesaNetForCausalLM
    # transformers 5.x: FLA's list-valued _tied_weights_keys breaks post_init/save_pretrained
    MesaNetForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
    return MesaNetConfig, MesaNetForCausalLM


def make_config(kw):
    MesaNetConfig, _ = fla_classes()
    cfg = MesaNetConfig(bos_token_id=1, eos_token_id=2, max_cg_step_training=30, max_cg_step_decoding=30, **kw)
    cfg.architectures = ["MesaNetForCausalLM"]
    return cfg


def build_model(cfg, dtype):
    """Model with FLA's natural per-parameter dtypes for `dtype` (lambda_params and the
    ungated o_norm.weight stay fp32 because FLA creates them explicitly in fp32)."""
    _, MesaNetForCausalLM = fla_classes()
    return MesaNetForCausalLM._from_config(cfg, dtype=dtype)


@torch.no_grad()
def randomise(model, cfg, seed):
    """Deterministic (CPU generator) weights that give peaked, non-uniform logits."""
    g = torch.Generator().manual_seed(seed)
    C = cfg.hidden_size

    def randn(shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    def rand(shape):
        return torch.rand(*shape, generator=g, dtype=torch.float32)

    done = set()
    for name, p in model.named_parameters():   # tied lm_head is listed once (as embeddings)
        shape = tuple(p.shape)
        leaf = name.split(".")[-2] + "." + name.split(".")[-1] if "." in name else name
        if name == "model.embeddings.weight":
            std = 3.0 / math.sqrt(C) if cfg.tie_word_embeddings else 1.0
            val = randn(shape) * std
        elif name == "lm_head.weight":
            val = randn(shape) * (3.0 / math.sqrt(C))
        elif name.endswith("norm.weight"):                      # attn_norm, mlp_norm, norm, o_norm
            val = 1.0 + 0.3 * randn(shape)
        elif name.endswith("lambda_params"):
            val = randn(shape)                                   # softplus(.) + 0.25 in ~[0.4, 2.5]
        elif leaf in ("q_conv1d.weight", "k_conv1d.weight"):
            val = 0.5 * randn(shape)
        elif leaf == "a_proj.weight":
            val = randn(shape) * (0.5 / math.sqrt(C))
        elif leaf == "a_proj.bias":
            val = 0.5 + 3.5 * rand(shape)                        # decay sigmoid(a) ~ 0.6 .. 0.98
        elif leaf == "b_proj.weight":
            val = randn(shape) / math.sqrt(C)
        elif leaf == "b_proj.bias":
            val = randn(shape)
        elif name.endswith(".weight") and p.dim() == 2:          # all other linears
            val = randn(shape) / math.sqrt(shape[1])
        else:
            raise RuntimeError(f"unhandled parameter {name} {shape}")
        p.copy_(val.to(p.dtype))
        done.add(name)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embeddings.weight.data_ptr(), "lm_head not tied"
    return done


@torch.no_grad()
def run_fla(model, ids, decode_from):
    """Returns (prefill logits [T,V], decode logits [T,V]) as float32 numpy."""
    dev = next(model.parameters()).device
    x = torch.tensor(ids, dtype=torch.long, device=dev)[None]
    pre = model(input_ids=x, use_cache=False).logits[0].float().cpu().numpy()
    out = model(input_ids=x[:, :decode_from], use_cache=True)
    rows = [out.logits[0].float().cpu().numpy()]
    pkv = out.past_key_values
    for t in range(decode_from, x.shape[1]):
        out = model(input_ids=x[:, t:t + 1], past_key_values=pkv, use_cache=True)
        pkv = out.past_key_values
        rows.append(out.logits[0].float().cpu().numpy())
    dec = np.concatenate(rows, 0)
    assert pre.shape == dec.shape == (len(ids), model.config.vocab_size)
    return np.ascontiguousarray(pre, np.float32), np.ascontiguousarray(dec, np.float32)


def compare(a, b):
    """relative RMS of (a - b) w.r.t. b, and top-1 agreement."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    rel = float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2)))
    top1 = float(np.mean(a.argmax(-1) == b.argmax(-1)))
    return {"rel_rms": rel, "top1_agree": top1}


def logit_stats(l):
    l = l.astype(np.float64)
    p = np.exp(l - l.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return {"logit_std": float(l.std()), "mean_max_prob": float(p.max(-1).mean())}


def safetensors_dtypes(path):
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in h.items() if k != "__metadata__"}


def probe_fp32(case_dir, out_npz):
    """Child process: load a checkpoint in fp32 and run it (may hang at head_dim 128)."""
    _, MesaNetForCausalLM = fla_classes()
    model = MesaNetForCausalLM.from_pretrained(case_dir, dtype=torch.float32).cuda().eval()
    gj = json.load(open(os.path.join(case_dir, "golden.json")))
    pre, dec = run_fla(model, gj["ids"], gj["decode_from"])
    np.savez(out_npz, pre=pre, dec=dec)


def make_case(name, out_root, probe_timeout):
    kw, dtype, wseed, pseed = CASES[name]
    t0 = time.time()
    torch.manual_seed(wseed)
    cfg = make_config(kw)
    model = build_model(cfg, dtype)
    randomise(model, cfg, wseed)
    model.eval()

    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    # round trip: the saved tensors are exactly the model's
    from safetensors.torch import load_file
    sd = load_file(os.path.join(d, "model.safetensors"))
    msd = model.state_dict()
    for k, v in sd.items():
        assert torch.equal(v, msd[k]), k
    expect = set(msd) - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    assert set(sd) == expect, (set(sd) ^ expect)

    rng = np.random.RandomState(pseed)
    ids = [1] + [int(i) for i in rng.randint(3, cfg.vocab_size, size=T_PROMPT - 1)]

    model = model.cuda()
    pre, dec = run_fla(model, ids, DECODE_FROM)
    pre.tofile(os.path.join(d, "logits_prefill.f32"))
    dec.tofile(os.path.join(d, "logits_decode.f32"))

    import fla
    import transformers
    gj = {
        "ids": ids,
        "decode_from": DECODE_FROM,
        "T": len(ids),
        "vocab_size": cfg.vocab_size,
        "fla_version": getattr(fla, "__version__", "0.6.0"),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "triton_version": __import__("triton").__version__,
        "gpu": torch.cuda.get_device_name(0),
        "reference_dtype": "float32" if dtype == torch.float32 else "bfloat16",
        "weight_seed": wseed,
        "prompt_seed": pseed,
        "checkpoint_dtypes": sorted(set(safetensors_dtypes(os.path.join(d, "model.safetensors")).values())),
        "prefill_vs_decode": compare(dec, pre),
        "prefill_stats": logit_stats(pre),
        "files": {"logits_prefill.f32": "float32 LE [T, vocab] row-major, one forward over ids",
                  "logits_decode.f32": "float32 LE [T, vocab]; rows < decode_from from one use_cache "
                                       "prefill of ids[:decode_from], the rest one token per call"},
    }
    if dtype == torch.float32:
        # FLA's own spread: the same checkpoint run in bf16 (FLA's natural bf16 dtypes)
        mb = build_model(cfg, torch.bfloat16)
        mb.load_state_dict(model.state_dict())
        mb = mb.cuda().eval()
        bpre, bdec = run_fla(mb, ids, DECODE_FROM)
        gj["fla_bf16_vs_fp32"] = {"prefill": compare(bpre, pre), "decode": compare(bdec, dec)}
        del mb
    json.dump(gj, open(os.path.join(d, "golden.json"), "w"), indent=1)
    print(f"[{name}] {time.time() - t0:.1f}s prefill_vs_decode={gj['prefill_vs_decode']} "
          f"stats={gj['prefill_stats']} bf16_spread={gj.get('fla_bf16_vs_fp32')}", flush=True)

    if dtype != torch.float32 and probe_timeout > 0:
        # try FLA fp32 on this checkpoint (known to possibly hang at head_dim 128)
        npz = f"/tmp/probe_{name}.npz"
        t1 = time.time()
        try:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", d, npz],
                               timeout=probe_timeout, capture_output=True, text=True)
            if r.returncode == 0:
                z = np.load(npz)
                gj["fla_fp32_probe"] = {"status": "ok", "seconds": round(time.time() - t1, 1),
                                        "bf16_vs_fp32_prefill": compare(pre, z["pre"]),
                                        "bf16_vs_fp32_decode": compare(dec, z["dec"])}
                # keep FLA's fp32 logits of this checkpoint too (an extra, tighter reference)
                z["pre"].astype(np.float32).tofile(os.path.join(d, "logits_prefill_fp32.f32"))
                z["dec"].astype(np.float32).tofile(os.path.join(d, "logits_decode_fp32.f32"))
            else:
                gj["fla_fp32_probe"] = {"status": "failed", "stderr_tail": r.stderr[-800:]}
        except subprocess.TimeoutExpired:
            gj["fla_fp32_probe"] = {"status": f"timed out after {probe_timeout}s (hang)"}
        json.dump(gj, open(os.path.join(d, "golden.json"), "w"), indent=1)
        print(f"[{name}] fp32 probe: {gj['fla_fp32_probe']}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/mesanet")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--probe-timeout", type=int, default=120)
    ap.add_argument("--probe", nargs=2, metavar=("DIR", "NPZ"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.probe:
        probe_fp32(*a.probe)
        return
    failed = []
    for name in a.cases.split(","):
        try:
            make_case(name, a.out, a.probe_timeout)
        except Exception:
            import traceback
            traceback.print_exc()
            failed.append(name)
    if failed:
        sys.exit(f"failed cases: {failed}")


if __name__ == "__main__":
    main()
