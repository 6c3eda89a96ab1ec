"""PyTorch SDPA's decode attention on the shapes attention_kernel_bench times: one query row per
sequence (32 query heads, 8 kv heads of 128 by default), contiguous bf16 K and V of `context`
positions, GQA through enable_gqa. Prints median microseconds and K/V bytes read per second, the
anchor for the paged kernel's bytes/s (BENCHMARKS.md quotes about 4.6 TB/s for SDPA there).

    python3 tools/bench/sdpa_anchor.py [--batches 1,32,90] [--contexts 4096,16384,32768]
        [--prefill 2048,16384]
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,32,90")
    parser.add_argument("--contexts", default="4096,16384,32768")
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--prefill", default="", help="whole causal prompts of these lengths")
    args = parser.parse_args()
    d = args.head_dim
    print(f"torch {torch.__version__} SDPA decode, {args.q_heads} query / {args.kv_heads} kv heads x {d}, bf16")
    for length in [int(x) for x in args.prefill.split(",") if x]:
        q = torch.randn(1, args.q_heads, length, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, args.kv_heads, length, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        run()
        times = []
        for _ in range(5):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e3)
        us = sorted(times)[len(times) // 2]
        flops = 4.0 * d * args.q_heads * length * (length + 1) / 2
        print(f"prefill {length:6d} rows (causal)  median {us:9.1f} us  {flops / (us * 1e-6) / 1e12:.1f} TFLOP/s")
        del q, k, v
    for context in map(int, args.contexts.split(",")):
        for batch in map(int, args.batches.split(",")):
            try:
                q = torch.randn(batch, args.q_heads, 1, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(batch, args.kv_heads, context, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)
            except torch.OutOfMemoryError:
                print(f"context {context:6d} batch {batch:3d}: does not fit")
                continue
            run = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            run()
            times = []
            for _ in range(args.repeats):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) * 1e3)
            us = sorted(times)[len(times) // 2]
            kv_bytes = 2 * k.numel() * 2
            print(f"context {context:6d} batch {batch:3d}  median {us:8.1f} us  KV {kv_bytes / 1e6:7.1f} MB  "
                  f"{kv_bytes / (us * 1e-6) / 1e12:.2f} TB/s")
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
