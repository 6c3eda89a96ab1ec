#!/usr/bin/env python3
"""Compares the Mesa decode kernel's CG loop in two builds, SASS instruction by instruction.

ptxas reschedules that loop when code around it changes, and a reordered loop has run 8-28%
slower an iteration on an H200 with the same instructions (tools/bench/RESULTS.md, eighteenth
session). So before spending a GPU call on a change outside the loop, see whether the loop
moved:

    python3 tools/gpu/compare_cg_loops.py OLD_BINARY NEW_BINARY

The binaries are anything cuobjdump reads (e.g. build/tools/bench/mesa_kernel_bench). For every
instantiation of MesaRecurrenceKernel the script finds the innermost loop with two block
barriers and at least 16 FFMAs (the CG iteration) and prints whether it is identical, identical
but for register names, or how many instructions differ. cuobjdump is not in Debian's CUDA
packages; `pip install nvidia-cuda-cuobjdump` provides it (found on PATH, with --cuobjdump, or
in that wheel).
"""
import argparse
import difflib
import glob
import re
import shutil
import site
import subprocess
import sys

KERNEL = "MesaRecurrenceKernel"


def find_cuobjdump(given):
    if given:
        return given
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    for base in site.getsitepackages() + [site.getusersitepackages()]:
        hits = glob.glob(f"{base}/nvidia/*/bin/cuobjdump")
        if hits:
            return hits[0]
    sys.exit("compare_cg_loops: no cuobjdump (pip install nvidia-cuda-cuobjdump, or --cuobjdump)")


def kernels(cuobjdump, binary):
    """Instantiation (template arguments) -> list of (address, instruction) of its SASS."""
    try:
        out = subprocess.run([cuobjdump, "-sass", binary], capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"compare_cg_loops: cannot run {cuobjdump}: {e}")
    if out.returncode != 0:
        sys.exit(f"compare_cg_loops: cuobjdump failed on {binary}: {out.stderr.strip()}")
    result, current = {}, None
    for line in out.stdout.splitlines():
        name = re.search(r"Function : (\S+)", line)
        if name:
            args = re.search(KERNEL + r"(I.*)", name.group(1))
            current = args.group(1) if args else None
            if current:
                result[current] = []
            continue
        ins = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if current and ins:
            result[current].append((int(ins.group(1), 16), ins.group(2).strip()))
    return result


def cg_loop(code):
    """The innermost backward-branch body with two BAR.SYNC and at least 16 FFMA, or None."""
    addresses = [a for a, _ in code]
    best = None
    for i, (_, ins) in enumerate(code):
        target = re.search(r"BRA (?:\S+ )?0x([0-9a-f]+)", ins)
        if not target or int(target.group(1), 16) not in addresses:
            continue
        j = addresses.index(int(target.group(1), 16))
        if j >= i:
            continue
        body = [x for _, x in code[j:i + 1]]
        if sum("BAR.SYNC" in x for x in body) == 2 and sum(x.startswith("FFMA") for x in body) >= 16:
            if best is None or len(body) < len(best):
                best = body
    if best is None:
        return None
    return [re.sub(r"0x[0-9a-f]{3,}", "ADDR", x) for x in best]  # branch targets move


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--cuobjdump")
    args = parser.parse_args()
    tool = find_cuobjdump(args.cuobjdump)
    old, new = kernels(tool, args.old), kernels(tool, args.new)
    if not old or not new:
        sys.exit(f"compare_cg_loops: no {KERNEL} in {args.old if not old else args.new}")
    moved = False
    for name in sorted(set(old) | set(new)):
        a = cg_loop(old[name]) if name in old else None
        b = cg_loop(new[name]) if name in new else None
        if a is None or b is None:
            print(f"{name}: loop not found in {'old' if a is None else 'new'}")
            moved = True
            continue
        if a == b:
            verdict = "identical"
        else:
            moved = True
            strip = lambda body: [re.sub(r"\bR\d+\b", "R", x) for x in body]
            if strip(a) == strip(b):
                verdict = "identical but for register names"
            else:
                ops = difflib.SequenceMatcher(None, strip(a), strip(b), autojunk=False).get_opcodes()
                changed = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")
                verdict = f"{changed} instructions moved or changed (ignoring register names)"
        print(f"{name}: {len(a)} -> {len(b)} instructions, {verdict}")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
