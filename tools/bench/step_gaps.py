#!/usr/bin/env python3
"""Where a decode step's wall time goes between kernels, from an Nsight Systems trace.

Reads the CSV of `nsys stats -r cuda_gpu_trace --format csv` (a run with
`--cuda-graph-trace=node`, so graph replays list their kernels) and splits the GPU's work into
steps at idle gaps longer than --step-gap-us. For each step it prints the span (first start to
last end), the time some kernel or copy ran (the union of their intervals), the idle time inside
the step, the idle time before it (host work between steps), and its count of kernels; then the
kernels' total time by name over the last --last steps. With --api (the host's CUDA runtime
calls, tools/gpu/cupti_trace.sh), the calls that overlap the idle time before each of those
steps, by function.

    nsys profile -t cuda --cuda-graph-trace=node -o prof cuda_hybrid_bench ...
    nsys stats -r cuda_gpu_trace --format csv -o trace prof.nsys-rep
    python3 tools/bench/step_gaps.py trace_cuda_gpu_trace.csv --last 4
"""
import argparse
import collections
import csv


def kernel_group(name):
    """The kind of work a kernel (or copy) of a decode step does, from its name."""
    kinds = [("attention", ("paged_attention", "MergeSplits")),
             ("GKA recurrence", ("gka_recurrence", "GkaRecurrence")),
             ("products (cuBLAS and few-rows)", ("nvjet", "cublas", "splitKreduce", "gemm",
                                                 "Gemm", "sm90_xmma", "cutlass")),
             ("token sampling", ("TokenSampling", "ArgmaxRows")),
             ("copies", ("memcpy", "memset"))]
    for kind, needles in kinds:
        if any(n in name for n in needles):
            return kind
    return "row kernels (norms, RoPE, convolution, SwiGLU, embeddings)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--step-gap-us", type=float, default=200.0)
    parser.add_argument("--last", type=int, default=4)
    parser.add_argument("--min-kernels", type=int, default=50)
    parser.add_argument("--api", help="CSV of the host's CUDA runtime calls")
    args = parser.parse_args()
    rows = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            start = int(r["Start (ns)"])
            rows.append((start, start + int(r["Duration (ns)"]), r["Name"]))
    rows.sort()
    steps, current, end = [], [], None
    for row in rows:
        if current and row[0] - end > args.step_gap_us * 1e3:
            steps.append(current)
            current, end = [], None
        current.append(row)
        end = row[1] if end is None else max(end, row[1])
    if current:
        steps.append(current)
    steps = [s for s in steps if len(s) >= args.min_kernels]
    previous_end = None
    chosen = steps[-args.last:]
    windows = []  # the idle time before each chosen step
    print("step  span_ms  busy_ms  idle_in_ms  idle_before_ms  kernels  gaps>5us  gaps>20us")
    names = collections.Counter()
    calls = collections.Counter()
    for s in steps:
        span_start = s[0][0]
        span_end = max(r[1] for r in s)
        busy, cover_end, gaps = 0, span_start, []
        for start, stop, _ in s:
            if start > cover_end:
                gaps.append(start - cover_end)
            busy += max(0, stop - max(start, cover_end))
            cover_end = max(cover_end, stop)
        idle_before = (span_start - previous_end) / 1e6 if previous_end else float("nan")
        if s in chosen and previous_end:
            windows.append((previous_end, span_start))
        previous_end = span_end
        if s in chosen:
            for start, stop, name in s:
                names[name[:90]] += stop - start
                calls[name[:90]] += 1
            print(f"{steps.index(s):4d}  {(span_end - span_start) / 1e6:7.2f}  {busy / 1e6:7.2f}  "
                  f"{(span_end - span_start - busy) / 1e6:10.3f}  {idle_before:14.3f}  {len(s):7d}  "
                  f"{sum(g > 5e3 for g in gaps):8d}  {sum(g > 2e4 for g in gaps):9d}")
    total = sum(names.values())
    print(f"\nkernels by total time over the last {len(chosen)} steps ({total / 1e6:.2f} ms):")
    for name, ns in names.most_common(25):
        print(f"  {ns / 1e6 / len(chosen):8.3f} ms/step  {calls[name] / len(chosen):5.0f} calls/step  "
              f"{ns / 1e3 / calls[name]:8.1f} us/call  {name}")
    groups = collections.Counter()
    for name, ns in names.items():
        groups[kernel_group(name)] += ns
    print("\nby kind:")
    for group, ns in groups.most_common():
        print(f"  {ns / 1e6 / len(chosen):8.3f} ms/step  {group}")
    if args.api and windows:
        calls = collections.Counter()
        counts = collections.Counter()
        with open(args.api) as f:
            for r in csv.DictReader(f):
                start = int(r["Start (ns)"])
                stop = start + int(r["Duration (ns)"])
                for begin, end in windows:
                    overlap = min(stop, end) - max(start, begin)
                    if overlap > 0:
                        calls[r["Name"]] += overlap
                        counts[r["Name"]] += 1
        idle = sum(end - begin for begin, end in windows)
        print(f"\nhost CUDA calls inside the idle time before those steps "
              f"({idle / 1e6 / len(windows):.3f} ms a step; the rest is host code):")
        for name, ns in calls.most_common(15):
            print(f"  {ns / 1e6 / len(windows):8.3f} ms/step  {counts[name] / len(windows):6.1f} "
                  f"calls/step  {name}")


if __name__ == "__main__":
    main()
