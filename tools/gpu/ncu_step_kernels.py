#!/usr/bin/env python3
"""Kernel times of one decode step, from ncu's CSV: count and total per kernel name, for the last
step (from the last kernel whose name contains --marker to the end). Standard library only.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv cuda_bench \
        --config tools/bench/configs/mesanet-140m.json --batches 64 --tolerances 0 \
        --decode-steps 2 --prefill-batch 0 --no-graphs > /tmp/b64.csv
    python3 tools/gpu/ncu_step_kernels.py /tmp/b64.csv

ncu runs kernels one at a time and flushes caches before each, so small kernels read slower than
inside a graph, and the gaps between kernels are not seen.
"""
import argparse
import collections
import csv
import io


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ncu_csv")
    parser.add_argument("--marker", default="EmbedRows", help="the first kernel of a step")
    args = parser.parse_args()
    lines = open(args.ncu_csv).read().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        raise SystemExit("no ncu CSV header (a line starting with \"ID\") in " + args.ncu_csv)
    kernels = [(row["Kernel Name"], float(row["Metric Value"].replace(",", "")))
               for row in csv.DictReader(io.StringIO("\n".join(lines[header:])))
               if row.get("Metric Name") == "gpu__time_duration.sum"]
    starts = [i for i, (name, _) in enumerate(kernels) if args.marker in name]
    if not starts:
        raise SystemExit(f"no kernel named like {args.marker!r}")
    step = kernels[starts[-1]:]
    totals = collections.defaultdict(lambda: [0, 0.0])
    for name, ns in step:
        entry = totals[name.split("(")[0][:80]]
        entry[0] += 1
        entry[1] += ns
    print(f"last step: {len(step)} kernels, {sum(ns for _, ns in step) / 1e3:.1f} us")
    print(" count   total_us  kernel")
    for name, (count, ns) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{count:6d} {ns / 1e3:10.1f}  {name}")


if __name__ == "__main__":
    main()
