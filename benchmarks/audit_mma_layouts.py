"""List the compiled Triton kernels whose MMA layout has warps repeating other warps' work.

Why: the fused WINOGRAD forward gave wrong bfloat16 results on an H100 (2026-12-06) with a
32x32 tile at 8 warps, which Triton 3.6 laid out as warpsPerCTA [8, 1] over 32 rows: four
warps computed each row. Configs like that waste tensor-core time at best. This reads every
TTGIR file in a Triton cache (say, after a GPU fuzz or a test run on the GPU) and prints, per
kernel and dot, the tile, the MMA layout and the replication: warps over the warps that hold
distinct accumulator tiles.

    python3 benchmarks/audit_mma_layouts.py $TRITON_CACHE_DIR [--min 2]
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

MMA = re.compile(r"^(#[\w]+) = #ttg\.nvidia_mma<\{versionMajor = (\d+), versionMinor = \d+, "
                 r"warpsPerCTA = \[([\d, ]+)\].*?instrShape = \[([\d, ]+)\]", re.M)
DOT = re.compile(r"= (?:tt\.dot|ttng\.warp_group_dot) .*?-> tensor<([\dx]+)x\w+, (#[\w]+)>")
NAME = re.compile(r"tt\.func public @(\w+)")
WARPS = re.compile(r'"ttg\.num-warps" = (\d+)')


def replication(tile, warps_per_cta, instr):
    """Warps over the warps holding distinct tiles: each dim holds at most tile // instr."""
    distinct = math.prod(min(w, max(1, size // step)) for size, w, step in zip(tile, warps_per_cta, instr))
    return math.prod(warps_per_cta) // distinct


def audit(text: str):
    """(kernel, num_warps, [(tile, version, warpsPerCTA, instrShape, replication)]) of one TTGIR."""
    layouts = {m.group(1): (int(m.group(2)), [int(v) for v in m.group(3).split(",")],
                            [int(v) for v in m.group(4).split(",")]) for m in MMA.finditer(text)}
    name, warps = NAME.search(text), WARPS.search(text)
    dots = set()
    for m in DOT.finditer(text):
        if m.group(2) in layouts:
            tile = tuple(int(v) for v in m.group(1).split("x"))
            version, wpc, instr = layouts[m.group(2)]
            dots.add((tile, version, tuple(wpc), tuple(instr), replication(tile[-2:], wpc[-2:], instr[:2])))
    return (name.group(1) if name else "?"), (int(warps.group(1)) if warps else 0), sorted(dots)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", type=Path, help="a Triton cache directory (TRITON_CACHE_DIR)")
    ap.add_argument("--min", type=int, default=2, help="list dots whose replication is at least this")
    args = ap.parse_args(argv)
    rows, seen = [], 0
    for path in sorted(args.cache.rglob("*.ttgir")):
        seen += 1
        name, warps, dots = audit(path.read_text())
        rows += [(r, name, warps, tile, v, wpc, instr, path.parent.name[:12])
                 for tile, v, wpc, instr, r in dots if r >= args.min]
    rows.sort(key=lambda r: (-r[0], r[1]))
    for r, name, warps, tile, v, wpc, instr, where in rows:
        print(f"x{r:<3d} {name:40s} warps {warps:2d} tile {'x'.join(map(str, tile)):10s} "
              f"mma v{v} warpsPerCTA {list(wpc)} instr {list(instr)}  ({where})")
    print(f"{len(rows)} dot layouts replicated {args.min}x or more in {seen} compiled kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
