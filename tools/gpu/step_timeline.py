#!/usr/bin/env python3
"""One decode step's kernels from an nsys trace: start offset, duration and the idle gap before
each, then totals per kernel name. Standard library only.

    nsys profile --cuda-graph-trace=node -o /tmp/step cuda_bench --config ... --batches 64 \
        --tolerances 0 --decode-steps 16 --prefill-batch 0
    nsys stats --report cuda_gpu_trace --format csv -o /tmp/step /tmp/step.nsys-rep
    python3 tools/gpu/step_timeline.py /tmp/step_cuda_gpu_trace.csv [--marker EmbedRows]

A step starts at a kernel whose name contains --marker; the last complete step is shown.
"""
import argparse
import csv
import collections


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace_csv")
    parser.add_argument("--marker", default="EmbedRows")
    args = parser.parse_args()
    rows = []
    with open(args.trace_csv, newline="") as f:
        for row in csv.DictReader(f):
            name = row.get("Name", "")
            if name.startswith("[CUDA"):  # memcpy / memset rows
                continue
            rows.append((int(row["Start (ns)"]), int(row["Duration (ns)"]), name))
    rows.sort()
    starts = [i for i, r in enumerate(rows) if args.marker in r[2]]
    if len(starts) < 2:
        raise SystemExit(f"fewer than two kernels named like {args.marker!r}")
    step = rows[starts[-2]:starts[-1]]
    t0 = step[0][0]
    end_prev = t0
    totals = collections.defaultdict(lambda: [0, 0, 0])
    print(f"{'start_us':>9} {'dur_us':>7} {'gap_us':>7}  kernel")
    for start, dur, name in step:
        gap = start - end_prev
        short = name.split("(")[0][:90]
        print(f"{(start - t0) / 1e3:9.2f} {dur / 1e3:7.2f} {gap / 1e3:7.2f}  {short}")
        t = totals[short]
        t[0] += 1
        t[1] += dur
        t[2] += max(gap, 0)
        end_prev = max(end_prev, start + dur)
    span = end_prev - t0
    print(f"\nstep span {span / 1e3:.1f} us, next step starts {(rows[starts[-1]][0] - t0) / 1e3:.1f} us")
    print(f"{'count':>5} {'busy_us':>8} {'gaps_us':>8}  kernel")
    for name, (n, busy, gaps) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:5d} {busy / 1e3:8.1f} {gaps / 1e3:8.1f}  {name}")


if __name__ == "__main__":
    main()
