#!/usr/bin/env python3
"""Writes a random-weight MesaNet checkpoint with flash-linear-attention (the reference
implementation) from a config, for serving benchmarks of sizes the repository does not ship:
config.json + model.safetensors (bf16) as FLA saves them, plus the default model's tokenizer
files (its 4096 ids fit any larger vocabulary).

  python3 tools/gpu/make_fla_checkpoint.py --config tools/bench/configs/mesanet-140m.json \
      --out /tmp/mesanet-140m
"""
import argparse
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from fla_anchor import build  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokenizer-dir",
                        default=os.path.join(os.path.dirname(__file__), "..", "..", "assets",
                                             "default-model"))
    args = parser.parse_args()
    _, model = build(args.config)
    model.save_pretrained(args.out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer_dir, name), os.path.join(args.out, name))
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: {params} parameters, files {sorted(os.listdir(args.out))}")
    del model
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
