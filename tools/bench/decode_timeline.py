#!/usr/bin/env python3
"""Summarises the Mesa decode kernel's per-block phase timeline.

Reads the files `mesa_kernel_bench --timeline DIR` writes (a build configured with
-DRIDGE_DECODE_TIMELINE=ON; see kernels/cuda/decode_timeline.h) and prints, for each, the span of
the launch and the minimum, median and maximum over blocks of every phase in microseconds. Each
block's SM clock is taken from its own clock64() and %globaltimer readings at entry and exit.
A phase whose end was not recorded (CG iterations 8 and 16 under a smaller budget) is merged
into the next one.

    python3 tools/bench/decode_timeline.py DIR/decode_timeline_b64.txt [...]
"""
import statistics
import sys

PHASES = ["entry", "hs_loaded", "inputs", "solve_start", "iteration8", "iteration16",
          "solve_end", "readout", "output", "exit"]
NAMES = {"hs_loaded": "Hs in registers", "inputs": "conv, SiLU, norms",
         "solve_start": "Hs update, first residual", "iteration8": "CG iterations 0-7",
         "iteration16": "CG iterations 8-15", "solve_end": "CG iterations to the end",
         "readout": "readout Gs^T x", "output": "output norm and store", "exit": "conv tails"}


def summarise(path):
    with open(path) as f:
        header = f.readline().split()
        missing = [k for k in PHASES + ["sm", "entry_ns", "exit_ns"] if k not in header]
        if missing:
            raise ValueError(f"header lacks {missing}")
        blocks = [dict(zip(header, map(int, line.split()))) for line in f if line.strip()]
    if not blocks:
        print(f"{path}: no blocks")
        return
    first_entry = min(b["entry_ns"] for b in blocks)
    last_exit = max(b["exit_ns"] for b in blocks)
    sms = len({b["sm"] for b in blocks})
    print(f"{path}: {len(blocks)} blocks on {sms} SMs, first entry to last exit "
          f"{(last_exit - first_entry) / 1e3:.2f} us")
    spans = {}
    for b in blocks:
        ghz = (b["exit"] - b["entry"]) / max(1, b["exit_ns"] - b["entry_ns"])
        present = [p for p in PHASES if p == "entry" or b[p] != 0]
        for start, end in zip(present, present[1:]):
            label = NAMES[end] if PHASES.index(end) == PHASES.index(start) + 1 else \
                f"{NAMES[PHASES[PHASES.index(start) + 1]]} .. {NAMES[end]}"
            spans.setdefault(label, []).append((b[end] - b[start]) / ghz / 1e3)
        spans.setdefault("whole block", []).append((b["exit"] - b["entry"]) / ghz / 1e3)
    print(f"  {'phase (us)':45s} {'min':>8s} {'median':>8s} {'max':>8s}")
    for label, values in spans.items():
        print(f"  {label:45s} {min(values):8.2f} {statistics.median(values):8.2f} "
              f"{max(values):8.2f}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for path in sys.argv[1:]:
        try:
            summarise(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"{path}: not a decode timeline file of mesa_kernel_bench --timeline ({e!r})",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
