#!/usr/bin/env python3
"""The performance anchor of ../shared/BENCHMARKS.md, measured in the same session as
cuda_bench: flash-linear-attention (0.6.0) + Hugging Face `generate`, greedy, random bf16
weights from the same config.json, warm.

    python3 tools/bench/fla_anchor.py --config tools/bench/configs/mesanet-140m.json \
        --batches 1,16,64,256 --prompt 512 --new-tokens 64 --prefill-batch 8 --prefill-len 2048

Decode step time = (time of generate(new_tokens) - time of generate(1)) / (new_tokens - 1), so
the prompt's prefill is not counted. Prefill = one forward over [prefill_batch, prefill_len]
(FLA's chunk kernels), use_cache=False. Prints one line per measurement.
"""

import argparse
import json
import time

import torch


def fla_classes():
    from fla.models import MesaNetConfig, MesaNetForCausalLM
    # transformers 5.x: FLA's list-valued _tied_weights_keys breaks post_init
    MesaNetForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
    return MesaNetConfig, MesaNetForCausalLM


def build(config_path):
    MesaNetConfig, MesaNetForCausalLM = fla_classes()
    kw = json.load(open(config_path))
    for k in ("model_type", "architectures"):
        kw.pop(k, None)
    cfg = MesaNetConfig(**kw)
    torch.manual_seed(0)
    model = MesaNetForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    return cfg, model


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t, out


@torch.no_grad()
def bench_decode(model, cfg, batch, prompt, new_tokens):
    g = torch.Generator(device="cuda").manual_seed(batch)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda", generator=g)
    mask = torch.ones_like(ids)

    def gen(n):
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                              min_new_tokens=n, do_sample=False, use_cache=True,
                              pad_token_id=0)

    gen(2)  # warm: compiles / autotunes for this shape
    t1, _ = timed(lambda: gen(1))
    tn, out = timed(lambda: gen(new_tokens))
    assert out.shape[1] == prompt + new_tokens, out.shape
    step = (tn - t1) / (new_tokens - 1)
    print(f"anchor decode batch {batch:<4d} step_ms {1e3 * step:8.2f} tok/s {batch / step:10.0f}",
          flush=True)


@torch.no_grad()
def bench_prefill(model, cfg, batch, length):
    ids = torch.randint(0, cfg.vocab_size, (batch, length), device="cuda")
    model(input_ids=ids, use_cache=False)
    best = min(timed(lambda: model(input_ids=ids, use_cache=False))[0] for _ in range(3))
    print(f"anchor prefill batch {batch} x {length} seconds {best:.4f} "
          f"tok/s {batch * length / best:10.0f}", flush=True)


@torch.no_grad()
def profile_prefill(model, cfg, batch, length, rows=40):
    """One prefill forward under torch.profiler: the CUDA kernels by total time, per layer."""
    from torch.profiler import ProfilerActivity, profile
    ids = torch.randint(0, cfg.vocab_size, (batch, length), device="cuda")
    model(input_ids=ids, use_cache=False)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model(input_ids=ids, use_cache=False)
        torch.cuda.synchronize()
    layers = cfg.num_hidden_layers
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    events.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in events)
    print(f"anchor profile {batch} x {length}: kernels {total / 1e3:.2f} ms, "
          f"{total / layers / 1e3:.3f} ms a layer; us a layer, calls, kernel", flush=True)
    for e in events[:rows]:
        print(f"  {e.self_device_time_total / layers:9.1f} {e.count:6d}  {e.key[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prefill-batch", type=int, default=8)
    ap.add_argument("--prefill-len", type=int, default=2048)
    ap.add_argument("--profile", action="store_true",
                    help="also print the prefill's CUDA kernels by time (torch.profiler)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cfg, model = build(args.config)
    import fla
    import transformers
    print(f"anchor {args.config}: fla {fla.__version__} transformers {transformers.__version__} "
          f"torch {torch.__version__}, {sum(p.numel() for p in model.parameters())} parameters",
          flush=True)
    if args.prefill_batch > 0:
        bench_prefill(model, cfg, args.prefill_batch, args.prefill_len)
        if args.profile:
            profile_prefill(model, cfg, args.prefill_batch, args.prefill_len)
    for b in [int(x) for x in args.batches.split(",") if x]:
        bench_decode(model, cfg, b, args.prompt, args.new_tokens)
    print(f"anchor total {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
