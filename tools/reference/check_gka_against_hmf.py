#!/usr/bin/env python3
"""Optional GPU cross-check: the reference's GKA layer (gka_hybrid_reference.GKALayer, float64)
against awslabs/hybrid-model-factory's own GatedKalmaNet layer, on the same weights and inputs.

Not needed for the goldens; it backs the claim in tests/data/hybrid_qwen3/README.md that the
reference matches the real layer. Needs a CUDA GPU, torch + triton, einops,
flash-linear-attention==0.4.1 + fla-core==0.4.1 (>= 0.5 gives wrong decays, see the spec) and a
checkout of hybrid-model-factory; its code is imported from there at run time, not copied:

    python3 tools/reference/check_gka_against_hmf.py \
        --hmf-layers /path/to/hybrid-model-factory/training/src/hmf/model/hybrid_zoo/layers

For each configuration it builds a random checkpoint exactly as make_hybrid_goldens.py does,
feeds the first GKA layer the normalised embeddings of a 136-token prompt and reports the
relative RMS of the layer output of HMF's three paths against the float64 reference:
chunked prefill (bf16-internal Triton kernels), pure decode from token 0 (fp32 kernels), and
a 60-token chunked prefill followed by decode.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gka_hybrid_reference as ref  # noqa: E402
import make_hybrid_goldens as mk  # noqa: E402


class OneLayerCache:
    """The two methods of HMF's cache that its GKA layer uses, for a single layer."""

    def __init__(self, state=None):
        self.state = state

    def __getitem__(self, layer_idx):
        return self.state

    def update(self, recurrent_state, conv_state, layer_idx, offset):
        self.state = {"recurrent_state": recurrent_state, "conv_state": conv_state}


def rel_rms(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


@torch.no_grad()
def check(GatedKalmaNet, case: dict, T=136, split=60) -> dict:
    with tempfile.TemporaryDirectory() as d:
        mk.write_checkpoint(case, d)
        cfg = ref.parse_config(json.load(open(os.path.join(d, "config.json"))))
        tensors = ref.load_safetensors_folder(d)
    g = cfg.gka
    prefix = f"model.layers.{cfg.layer_types.index('GKA')}."
    ids = [1] + [int(i) for i in np.random.RandomState(7).randint(4, cfg.vocab_size, size=T - 1)]

    # float64 reference, token by token
    w = ref.WeightStore(tensors, torch.float64)
    emb = w.get("model.embed_tokens.weight", (cfg.vocab_size, cfg.hidden_size))
    x64 = ref.rms_norm(emb[ids], w.get(prefix + "input_layernorm.weight", (cfg.hidden_size,)), cfg.rms_norm_eps)
    mine = ref.GKALayer(cfg, w, prefix + "gka.")
    expect = torch.stack([mine.step(x64[t]) for t in range(T)])

    # HMF's layer in fp32 on the GPU, weights loaded strictly by their checkpoint names
    layer = GatedKalmaNet(hidden_size=cfg.hidden_size, head_dim=g.head_dim, num_q_heads=g.num_q_heads,
                          num_k_heads=g.num_k_heads, num_v_heads=g.num_v_heads, num_iter=g.num_iter,
                          ridge_strength=g.ridge_strength, conv_size=g.conv_size, norm_eps=g.norm_eps, layer_idx=0)
    state = {k[len(prefix + "gka."):]: v.float() for k, v in tensors.items() if k.startswith(prefix + "gka.")}
    layer.load_state_dict(state, strict=True)
    layer = layer.cuda().float().eval()
    x = x64.float().cuda()[None]
    out = {}
    out["chunked_prefill"] = rel_rms(layer(x)[0][0], expect)

    Hx, D, W = layer.expanded_num_heads, g.head_dim, g.conv_size
    zeros_conv = [torch.zeros(1, n, W, device="cuda") for n in (layer.query_dim, layer.key_dim, layer.value_dim)]
    zeros_state = [torch.zeros(1, Hx, D, D, device="cuda") for _ in range(2)]
    cache = OneLayerCache({"conv_state": tuple(zeros_conv), "recurrent_state": tuple(zeros_state)})
    rows = [layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)[0][0] for t in range(T)]
    out["decode_from_token_0"] = rel_rms(torch.cat(rows), expect)

    cache = OneLayerCache(None)
    rows = [layer(x[:, :split], past_key_values=cache, use_cache=True)[0][0]]
    rows += [layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)[0][0] for t in range(split, T)]
    out[f"prefill_{split}_then_decode"] = rel_rms(torch.cat(rows), expect)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hmf-layers", required=True,
                    help="hybrid-model-factory's training/src/hmf/model/hybrid_zoo/layers folder")
    ap.add_argument("--out", help="write the results here as JSON")
    a = ap.parse_args()
    # import that folder as a package named hmf_layers (its modules use relative imports)
    pkg_root = tempfile.mkdtemp()
    os.symlink(os.path.abspath(a.hmf_layers), os.path.join(pkg_root, "hmf_layers"))
    sys.path.insert(0, pkg_root)
    from hmf_layers.gated_kalmanet.gka import GatedKalmaNet
    import fla
    print("torch", torch.__version__, torch.cuda.get_device_name(0), "fla", fla.__version__)

    configs = {}
    for name in ("gka_swa_mix", "all_gka_bf16", "yarn_swa"):
        c = dict(mk.CASES[name])
        c["gka"] = {**c["gka"], **(c["gka_overrides"] or {})}   # the layer takes num_iter directly
        configs[name] = c
    # head expansions where q, k and v head counts all differ
    for hq, hk, hv in ((4, 2, 1), (1, 2, 4), (2, 4, 1)):
        configs[f"heads_{hq}_{hk}_{hv}"] = dict(mk.CASES["gka_swa_mix"], pattern="GKA",
                                                gka=dict(head_dim=16, num_q_heads=hq, num_k_heads=hk,
                                                         num_v_heads=hv, num_iter=30))
    configs["num_iter_0"] = dict(mk.CASES["gka_swa_mix"], pattern="GKA",
                                 gka={**mk.CASES["gka_swa_mix"]["gka"], "num_iter": 0})
    results = {}
    for name, c in configs.items():
        results[name] = check(GatedKalmaNet, c)
        print(name, json.dumps(results[name]), flush=True)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
