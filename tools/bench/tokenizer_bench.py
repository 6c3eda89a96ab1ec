#!/usr/bin/env python3
"""Compares single-thread encode speed: ridge's tokenizer_bench vs Hugging Face `tokenizers`.

Both encode the same documents (the test corpus, invalid UTF-8 replaced) one call per document,
without special tokens, after one untimed warm-up pass; the median of PASSES timed passes is
reported in MB/s of UTF-8 input.

Usage (repository root, after building the tokenizer_bench target):
  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false taskset -c 0 \
      python3 tools/bench/tokenizer_bench.py build/tools/bench/tokenizer_bench [PASSES]
"""
import lzma
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

DATA = pathlib.Path("tests/data/tokenizer")
DOCS_FILE = pathlib.Path("/tmp/ridge_tokenizer_bench_docs.bin")
NAMES = ["gpt2", "mistral_v1", "qwen_style"]


def load_docs():
    data = lzma.decompress((DATA / "corpus.bin.xz").read_bytes())
    (n,) = struct.unpack_from("<I", data, 4)
    pos, docs = 8, []
    for _ in range(n):
        (size,) = struct.unpack_from("<I", data, pos)
        docs.append(data[pos + 4:pos + 4 + size].decode("utf-8", errors="replace"))
        pos += 4 + size
    return docs


def main():
    bench = sys.argv[1]
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    docs = load_docs()
    encoded = [d.encode("utf-8") for d in docs]
    total = sum(len(e) for e in encoded)
    out = bytearray(b"RTKC" + struct.pack("<I", len(encoded)))
    for e in encoded:
        out += struct.pack("<I", len(e)) + e
    DOCS_FILE.write_bytes(bytes(out))
    for name in NAMES:
        tok = Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
        rates = []
        for p in range(passes + 1):
            start = time.perf_counter()
            for d in docs:
                tok.encode(d, add_special_tokens=False)
            seconds = time.perf_counter() - start
            if p > 0:
                rates.append(total / seconds / 1e6)
        print(f"tokenizers {name}: {len(docs)} docs, {total / 1e6:.2f} MB, "
              f"median {statistics.median(rates):.2f} MB/s, best {max(rates):.2f} MB/s",
              flush=True)
        subprocess.run([bench, str(DATA / name), str(DOCS_FILE), str(passes)], check=True)


if __name__ == "__main__":
    main()
