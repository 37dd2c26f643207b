"""Where the fused WINOGRAD forward goes wrong on fuzz seed 1's grouped bf16 problem (GPU).

Why: tests/test_cuda_winograd_grouped.py says which factor fails; this prints the error's
pattern (which output channels, tiles, images, and which of a tile's 4 outputs) for each
GPU config, and saves each config's TTGIR under --out so the failing and passing
compilations can be compared. Integer data: the right answer is exact.

    PYTHONPATH=src python3 benchmarks/diag_winograd_grouped.py --out $OUT/diag
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]  # the library, and the GPU test's launch

from tridnn.cuda import conv_winograd  # noqa: E402
from test_cuda_winograd_grouped import launch_once  # noqa: E402


def run(dtype, groups, mode, cfg, bk, raw=False, **problem):
    """y - reference (raw: y itself) of one direct launch (the GPU test's launch_once)."""
    got, want = launch_once("cuda", dtype, groups, mode, cfg, block_k=bk, **problem)
    return got if raw else got - want


def pattern(err):
    bad = np.abs(err) > 0
    if not bad.any():
        return "exact"
    n, k, h, w = np.nonzero(bad)
    return (f"{int(bad.sum())}/{bad.size} wrong, max {np.abs(err).max():.3g}; "
            f"n {sorted(set(n.tolist()))}; k {sorted(set(k.tolist()))}; "
            f"(h%2,w%2) {sorted(set(zip((h % 2).tolist(), (w % 2).tolist())))}; "
            f"tiles(h//2,w//2) {len(set(zip((h // 2).tolist(), (w // 2).tolist())))}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--probe", action="store_true",
                    help="only: is the failure deterministic, and do the configs agree bit for bit on Gaussian data")
    args = ap.parse_args()
    if args.probe:
        return probe()
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    cfgs = [(32, 32, 8, 2), (32, 32, 4, 2), (32, 32, 8, 1), (64, 32, 8, 2), (32, 64, 8, 2), (16, 64, 4, 2),
            (16, 16, 4, 1), (32, 32, 1, 1)]
    for dtype in ("bfloat16", "float16"):
        for groups, mode in ((4, "convolution"), (4, "cross_correlation"), (1, "convolution")):
            c, k = (8, 12) if groups == 4 else (2, 3)
            for bk in (32, 16):
                for cfg in cfgs:
                    for hw in ((7, 7), (7, 5)):
                        try:
                            msg = pattern(run(dtype, groups, mode, cfg, bk, c=c, k=k, hw=hw))
                        except Exception as e:  # a config may not compile: say so, go on
                            msg = f"error {type(e).__name__}: {str(e)[:100]}"
                        print(f"{dtype:8s} g{groups} {mode[:5]} bk{bk} {'x'.join(map(str, cfg)):10s} "
                              f"{hw[0]}x{hw[1]}: {msg}", flush=True)
    if out:  # every compiled specialization's TTGIR and PTX, for a diff of failing against passing
        cache = conv_winograd.winograd_fused_kernel.device_caches[torch.cuda.current_device()][0]
        for i, (key, kern) in enumerate(cache.items()):
            (out / f"k{i}.key.txt").write_text(str(key))
            for ir in ("ttgir", "ptx"):
                if ir in kern.asm:
                    (out / f"k{i}.{ir}").write_text(kern.asm[ir])


def probe():
    """Race or miscompile? The failing launch 20 times (do the results vary?), and every config
    on Gaussian data against the 4-warp 32x32 result: one tile's accumulation order is the same
    in every config, so correct configs agree bit for bit."""
    bad = (32, 32, 8, 2)
    runs = [run("bfloat16", 1, "convolution", bad, 32, c=2, k=3, raw=True) for _ in range(20)]
    print(f"failing launch x20: {len({r.tobytes() for r in runs})} distinct results; "
          f"now {pattern(run('bfloat16', 1, 'convolution', bad, 32, c=2, k=3))}", flush=True)
    for dtype in ("bfloat16", "float16"):
        for groups, mode in ((4, "convolution"), (4, "cross_correlation"), (1, "cross_correlation")):
            c, k = (8, 12) if groups == 4 else (2, 3)
            for seed in (1, 2):
                base = run(dtype, groups, mode, (32, 32, 4, 2), 32, c=c, k=k, seed=seed, raw=True, normal=True)
                diffs = []
                for cfg in ((32, 32, 8, 2), (32, 32, 8, 1), (64, 32, 8, 2), (32, 64, 8, 2), (16, 64, 4, 2)):
                    got = run(dtype, groups, mode, cfg, 32, c=c, k=k, seed=seed, raw=True, normal=True)
                    diffs.append(f"{cfg[0]}x{cfg[1]}x{cfg[2]}x{cfg[3]}:{np.abs(got - base).max():.2g}")
                print(f"{dtype:8s} g{groups} {mode[:5]} seed {seed} vs 32x32x4x2: {' '.join(diffs)}", flush=True)


if __name__ == "__main__":
    main()
