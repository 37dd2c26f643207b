"""Issue 5 pooling sweep: the pooling layers of ResNet (max and average 3x3/2 pad 1
forward and backward, adaptive average to 1x1) on 64x256x56x56 bfloat16, NCHW and NHWC,
the default design of cuda/pooling.py against its issue 5 candidates (module switches
flipped for the call) and against PyTorch, in one process on one H200 (< 90 s).

NCHW (session 6): every forward takes NCHW_LANE_KERNELS (a lane per (plane, output row):
every load of a program before its one store; rows combined down before the taps across;
64 lanes x 8 groups); since session 35 every backward gather takes the row kernel. Also
other lane and row tiles. (The NCHW block kernels, 4 or 7 rows unrolled, the NCHW row
kernels, a runtime row loop, and the lane backward kernel measured slower and were
removed.) Max backward runs the taps pass (a forward) and the gather, so a lane tile
switches its taps pass.

TB/s counts minimal bytes: forward x read and y written once; max backward dy and x
read and dx written once (y is not read: the taps are recomputed from x; note that
bench_gpu_layers.py counts y too, 1.111x these figures); average backward dy and dx.
A copy of x is timed first: ``%copy`` is each row's share of that bandwidth (issue 5
asks for >= 85%). Every variant's result is compared with PyTorch's (``err``: max
|tridnn - torch| / max(1, max |torch|)) before it is timed. Times are CUDA-graph
replays timed with triton.testing.do_bench (median), the timers of bench_gpu_layers.
Compilation runs first in parallel processes (--jobs; they fill Triton's disk cache),
so the timed process loads every kernel from the cache.

    PYTHONPATH=src python benchmarks/sweep_pooling.py [--out DIR] [--only SUBSTRING] [--more] [--jobs N]
    PYTHONPATH=src python benchmarks/sweep_pooling.py --dry-run   # CPU, interpreter, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

DRY_RUN = "--dry-run" in sys.argv
if DRY_RUN:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench_gpu_layers as bgl  # noqa: E402  (graph timer, switches, copy bandwidth)
from tridnn.cuda import pooling  # noqa: E402

MAX, AVG = 0, 1
WIN, PAD, STRIDE = (3, 3), (1, 1), (2, 2)

# (label, [(pooling switch, value), ...]) per layer and layout; the first row is the default.
# VARIANTS fit the 90 s budget; --more adds MORE (designs measured slower before, other tiles).
PHASES, SHIFT = [("CL_FUSED_MAX_BWD", "phases")], [("CL_FUSED_MAX_BWD", "shift")]
GAP = [("GLOBAL_AVG_KERNEL", True)]


def lanes(modes, tile, warps=4):
    """The NCHW lane forward for modes (max's backward taps pass too), tile lanes x 8-column
    groups (56 columns: 8 groups)."""
    return [("NCHW_LANE_KERNELS", frozenset(modes)), ("NCHW_LANE_TILE", tile), ("NCHW_LANE_WARPS", warps)]


NO_LANES = [("NCHW_LANE_KERNELS", frozenset())]


def _skipped(*args, **kwargs):
    """A pass left out of a max backward, to time the other one alone."""


# (session 35) the max backward's two passes timed alone: where do its ~195 us (H100, NCHW)
# go? Rows labelled "... only" leave the other pass out, so their results are not checked.
TAPS_ONLY = [("_rows_backward", _skipped), ("_cl_backward", _skipped)]
GATHER_ONLY = [("_forward", _skipped)]
PASSES = [("taps pass only", TAPS_ONLY), ("gather pass only", GATHER_ONLY)]
# (H100, 2026-12-07: NCHW taps 57.3 us, gather 141.2 of the whole's 194.9; NHWC 65.9 and 54.7
# of 117.7. 2026-12-08, with the row kernel's gather (session 35's change): NCHW whole 152.3,
# gather 99.0; row tile 2048: whole 140.2. Its "taps pass only" row (152.4) still ran the row
# gather; _rows_backward is now left out. "lane gather only": 140.0 (the lane backward kernel,
# removed in session 36; with the lane taps pass the whole took 194.9.)
# A one-launch NCHW design that recomputed the taps from x in the lane backward ran
# 330.8 us (307.7 at 32 x 8 lanes), as its sm_90 SASS predicted (64 thread instructions a dx
# element, 198 registers, against 16.5 + 13.8): removed, docs/performance.md session 35.)
# (session 35) the row kernel's tiles for the NCHW backward gathers (default 2048 x 4 warps
# since session 36: 64 input rows x 32 column pairs for 56-wide rows; it was 1024, and H100
# 2026-12-08 gave max 140.2 against 152.3 us, average 57.2 against 60.1)
ROW_TILES = [("row tile 512 4w", [("ROW_TILE_BACKWARD", 512)]), ("row tile 1024 4w", [("ROW_TILE_BACKWARD", 1024)]),
             ("row tile 2048 8w", [("ROW_WARPS", 8)]),
             ("row tile 4096 8w", [("ROW_TILE_BACKWARD", 4096), ("ROW_WARPS", 8)])]

# (session 36) the NHWC taps pass alone at other tiles. Its sm_90 SASS (bf16 3x3/2, 4 rows x
# 32 columns x 64 channels, 8 warps) is 73.8 thread instructions an output and 80 registers,
# against the forward's 35.5 and 54 at the same tile: the running (value, tap) fold in float32
# costs twice the forward's work, and the pass ran at 1.75 TB/s (65.9 us) where the forward
# runs near copy. Other tiles (SASS): 16 columns 86.5 / 60 registers, 2 rows 84.5 / 79,
# 4 warps 72.6 / 142. The gather (CL_BLOCK_W too) is left out of these rows. H100 2026-12-08:
# default 65.8 us, 16 columns 70.2, 2 rows 69.7, 4 warps 78.7: the default tile stays.
TAPS_TILES = [("cl 16 cols, taps only", TAPS_ONLY + [("CL_BLOCK_W", 16)]),
              ("cl 2 rows, taps only", TAPS_ONLY + [("CL_ROWS", 2)]),
              ("cl 4 warps, taps only", TAPS_ONLY + [("CL_WARPS", 4)])]

# sm_90 SASS, bf16 3x3/2 (warp instructions x 32 per output element forward, per dx element
# backward): max fwd NCHW rows 46.5 (runtime row loop, removed), lanes 64x8 36.0 / 128x8
# 32.9; max taps pass 91.4 -> lanes 74.3; max gather 15.3 -> lanes 15.7; avg fwd 102.9 (row
# kernels) -> lanes 41.7; avg bwd 33.7 -> lanes 7.6 (64x8; fewer instructions, yet ~1 TB/s:
# the lane backward was removed in session 36). The lane forward at 64 x 8 is the default
# since session 6; "row kernels" is the design it replaced.
NCHW_MAX = [("row kernels", NO_LANES), ("lanes 32x8 4w", lanes({0, 3}, 256)),
            ("lanes 128x8 8w", lanes({0, 3}, 1024, 8))]
NCHW_AVG = [("row kernels (previous default)", NO_LANES),
            ("lanes 32x8 4w", lanes({1, 2}, 256)), ("lanes 128x8 8w", lanes({1, 2}, 1024, 8))]
VARIANTS = {
    ("max fwd", "NHWC"): [("default", [])],
    ("max bwd", "NHWC"): [("default (taps + gather)", [])] + PASSES,
    ("avg fwd", "NHWC"): [("default", [])],
    ("avg bwd", "NHWC"): [("default", [])],
    ("adaptive avg 1x1 fwd", "NHWC"): [("default (tensor_ops)", []), ("gap 32ch x 256", GAP)],
    ("max fwd", "NCHW"): [("default (lanes 64x8)", [])] + NCHW_MAX,
    ("max bwd", "NCHW"): ([("default (lane taps, row gather)", [])] + PASSES
                          + NCHW_MAX),
    ("avg fwd", "NCHW"): [("default (lanes 64x8)", [])] + NCHW_AVG,
    ("avg bwd", "NCHW"): [("default (row kernels)", [])],
    ("adaptive avg 1x1 fwd", "NCHW"): [("default (tensor_ops)", []), ("gap 4 planes x 1024", GAP)],
}
MORE = {
    ("max fwd", "NHWC"): [("cl 7 rows", [("CL_ROWS", 7)]), ("cl 14 rows", [("CL_ROWS", 14)]),
                          ("cl packed max", [("CL_PACKED_MAX", True)])],
    ("max bwd", "NHWC"): [("cl 14 rows (taps + gather)", [("CL_ROWS", 14)]),
                          ("fused phases 2x16x64 mr128", PHASES), ("fused shift 32x64 mr128", SHIFT)] + TAPS_TILES,
    ("avg fwd", "NHWC"): [("cl 7 rows", [("CL_ROWS", 7)]), ("cl 14 rows", [("CL_ROWS", 14)])],
    ("avg bwd", "NHWC"): [("cl 14 rows", [("CL_ROWS", 14)])],
    ("adaptive avg 1x1 fwd", "NHWC"): [("gap 64ch x 128", GAP + [("GLOBAL_AVG_NHWC", (64, 128, 8))])],
    ("adaptive avg 1x1 bwd", "NHWC"): [("default", [])],
    ("max bwd", "NCHW"): ROW_TILES,
    ("avg fwd", "NCHW"): [("lanes 256x8 8w", lanes({1, 2}, 2048, 8))],
    ("avg bwd", "NCHW"): ROW_TILES,
    ("adaptive avg 1x1 fwd", "NCHW"): [("gap 8 planes x 512", GAP + [("GLOBAL_AVG_NCHW", (8, 512, 4))])],
    ("adaptive avg 1x1 bwd", "NCHW"): [("default", [])],
}


def problems(layout):
    """(layer, tridnn call, torch call, minimal bytes, tridnn output) for one layout."""
    shape, dt, dev = bgl.SPATIAL, bgl.DT, bgl.DEVICE
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    g = torch.Generator(device=dev).manual_seed(0)

    def new(s):
        return torch.randn(s, device=dev, generator=g).to(dt).contiguous(memory_format=fmt)
    N, C, H, W = shape
    oshape = (N, C, (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1)
    x, dy = new(shape), new(oshape)
    y, dx = torch.empty(oshape, device=dev, dtype=dt).contiguous(memory_format=fmt), torch.empty_like(x)
    ay = torch.empty((N, C, 1, 1), device=dev, dtype=dt).contiguous(memory_format=fmt)
    ady = new((N, C, 1, 1))
    _, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    n = bgl.nbytes
    return [
        ("max fwd", lambda: pooling.pooling_forward(x, y, MAX, WIN, PAD, STRIDE, False, 1.0, 0.0),
         lambda: F.max_pool2d(x, 3, 2, 1), n(x, y), y),
        ("max bwd", lambda: pooling.pooling_backward(y, dy, x, dx, MAX, WIN, PAD, STRIDE, False, 1.0, 0.0),
         lambda: torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [3, 3], [2, 2], [1, 1], [1, 1], False, idx),
         n(x, dy, dx), dx),
        ("avg fwd", lambda: pooling.pooling_forward(x, y, AVG, WIN, PAD, STRIDE, False, 1.0, 0.0),
         lambda: F.avg_pool2d(x, 3, 2, 1), n(x, y), y),
        # torch 2.11's channels-last avg_pool2d backward with padding is wrong (pytorch#188344):
        # it is timed as is, its result compared on NCHW copies
        ("avg bwd", lambda: pooling.pooling_backward(y, dy, x, dx, AVG, WIN, PAD, STRIDE, False, 1.0, 0.0),
         (lambda: torch.ops.aten.avg_pool2d_backward(dy, x, [3, 3], [2, 2], [1, 1], False, True, None),
          lambda: torch.ops.aten.avg_pool2d_backward(dy.contiguous(), x.contiguous(), [3, 3], [2, 2], [1, 1], False,
                                                     True, None)), n(dy, dx), dx),
        ("adaptive avg 1x1 fwd", lambda: pooling.adaptive_pooling_forward(x, ay, AVG, 1.0, 0.0),
         lambda: F.adaptive_avg_pool2d(x, 1), n(x, ay), ay),
        ("adaptive avg 1x1 bwd", lambda: pooling.adaptive_pooling_backward(x, ady, dx, AVG, 1.0, 0.0),
         lambda: torch.ops.aten._adaptive_avg_pool2d_backward(ady, x), n(ady, dx), dx)]


def selected(args):
    """[(layout, layer, label, settings)] in run order."""
    out = []
    for layout in ("NHWC", "NCHW"):
        for layer in LAYERS:
            variants = VARIANTS.get((layer, layout), []) + (MORE.get((layer, layout), []) if args.more else [])
            out += [(layout, layer, lab, st) for lab, st in variants if args.only in f"{layer} {layout} {lab}"]
    return out


LAYERS = ("max fwd", "max bwd", "avg fwd", "avg bwd", "adaptive avg 1x1 fwd", "adaptive avg 1x1 bwd")


def warm(args, rows):
    """Compile every selected variant in --jobs parallel processes (each runs its share
    once, untimed), so that this process finds the kernels in Triton's disk cache."""
    if args.jobs <= 1 or not rows:
        return
    t0 = time.time()
    cmd = [sys.executable, os.path.abspath(__file__), "--compile-only", "--only", args.only]
    cmd += (["--more"] if args.more else []) + (["--dry-run"] if DRY_RUN else [])
    jobs = min(args.jobs, len(rows))
    procs = [subprocess.Popen(cmd + ["--shard", f"{i}/{jobs}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for i in range(jobs)]
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:  # the timed run reports the variant's error itself
            print(f"  (compile worker failed, rc {p.returncode}: {out.strip().splitlines()[-1:]})", flush=True)
    print(f"compiled {len(rows)} variants in {jobs} processes: {time.time() - t0:.0f} s", flush=True)


def compile_only(args):
    """One shard of the warm-up: run each of its variants once."""
    i, n = (int(v) for v in args.shard.split("/"))
    rows = selected(args)[i::n]
    calls = {}
    for layout in sorted({r[0] for r in rows}):
        calls[layout] = {layer: tri for layer, tri, *_ in problems(layout)}
    for layout, layer, label, settings in rows:
        try:
            bgl.switched_all(pooling, settings, calls[layout][layer])()
        except Exception as exc:  # noqa: BLE001 - reported by the timed run
            print(f"{layer} {layout} {label}: {type(exc).__name__}", flush=True)
    if not DRY_RUN:
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes: only checks it runs")
    ap.add_argument("--out", help="directory for sweep_pooling.json")
    ap.add_argument("--only", default="", help="rows whose 'layer layout variant' contains this")
    ap.add_argument("--more", action="store_true", help="also the MORE variants (past the 90 s budget)")
    ap.add_argument("--jobs", type=int, default=2 if DRY_RUN else 12, help="parallel compile processes (1: none)")
    ap.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compile_only:
        compile_only(args)
        return
    timer = bgl.wall_time if DRY_RUN else bgl.graph_time
    t_start = time.time()
    chosen = selected(args)
    warm(args, chosen)
    copy = float("nan") if DRY_RUN else bgl.copy_bandwidth()
    print(f"copy {copy:.3f} TB/s (85%: {0.85 * copy:.3f}); {bgl.SPATIAL} {bgl.DT} on {bgl.DEVICE}", flush=True)
    rows = []
    for layout in ("NHWC", "NCHW"):
        for layer, tri, ref, moved, res in problems(layout):
            variants = [(lab, st) for lo, la, lab, st in chosen if lo == layout and la == layer]
            if not variants:
                continue
            ref_time, ref_check = ref if isinstance(ref, tuple) else (ref, ref)
            want = ref_check().clone()
            try:
                ref_ms = timer(ref_time, "torch")
            except Exception as exc:  # noqa: BLE001 - the rows still run
                print(f"  torch {layer} {layout} failed: {exc}", flush=True)
                ref_ms = float("nan")
            for label, settings in variants:
                fn = bgl.switched_all(pooling, settings, tri)
                row = dict(layer=layer, layout=layout, variant=label, settings=[list(map(str, s)) for s in settings],
                           bytes=moved)
                try:
                    res.fill_(float("nan"))
                    fn()
                    row["err"] = float("nan") if label.endswith(" only") else bgl.rel_err(res, want)
                    row["ms"] = timer(fn, label)
                except Exception as exc:  # noqa: BLE001 - a broken variant is reported, not fatal
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    print(f"{layer:22s} {layout} {label:30s} FAILED {row['error']}", flush=True)
                    rows.append(row)
                    continue
                row["tbs"] = moved / row["ms"] / 1e9
                row["copy_share"] = row["tbs"] / copy
                row["torch_ms"] = ref_ms
                row["torch_tbs"] = moved / ref_ms / 1e9
                print(f"{layer:22s} {layout} {label:30s} {row['ms'] * 1e3:8.1f} us {row['tbs']:6.3f} TB/s "
                      f"err {row['err']:.2e}  ({time.time() - t_start:.0f} s)", flush=True)
                rows.append(row)
    # the table, last
    print(f"\ncopy {copy:.3f} TB/s, 85% line {0.85 * copy:.3f} TB/s; minimal bytes; torch on the same tensors")
    print(f"{'layer':22s} {'layout':6s} {'variant':30s} {'us':>8s} {'TB/s':>6s} {'%copy':>6s} "
          f"{'torch us':>9s} {'torch TB/s':>10s} {'/torch':>6s} {'err':>9s}")
    for r in rows:
        if "error" in r:
            print(f"{r['layer']:22s} {r['layout']:6s} {r['variant']:30s} FAILED {r['error']}")
            continue
        print(f"{r['layer']:22s} {r['layout']:6s} {r['variant']:30s} {r['ms'] * 1e3:8.1f} {r['tbs']:6.3f} "
              f"{100 * r['copy_share']:5.1f}% {r['torch_ms'] * 1e3:9.1f} {r['torch_tbs']:10.3f} "
              f"{r['ms'] / r['torch_ms']:6.2f} {r['err']:9.2e}")
    print(f"({time.time() - t_start:.0f} s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep_pooling.json"), "w") as f:
            json.dump(dict(copy_tbs=copy, shape=list(bgl.SPATIAL), dtype=str(bgl.DT), device=bgl.DEVICE,
                           torch=torch.__version__, rows=rows), f, indent=1, default=str)


if __name__ == "__main__":
    main()
