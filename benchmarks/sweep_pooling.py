"""Issue 5 pooling sweep: every pooling layer of ResNet (max and average 3x3/2 pad 1
forward and backward, adaptive average to 1x1 forward and backward) on 64x256x56x56
bfloat16, NCHW and NHWC, each design and tile setting of cuda/pooling.py (module
switches flipped for the call) against PyTorch, in one process on one H200 (< 90 s).

TB/s counts minimal bytes: forward x read and y written once; max backward dy and x
read and dx written once (y is not read: the taps are recomputed from x; note that
bench_gpu_layers.py counts y too, 1.111x these figures); average backward dy and dx.
A copy of x is timed first: ``%copy`` is each row's share of that bandwidth (issue 5
asks for >= 85%). Every variant's result is compared with PyTorch's (``err``: max
|tridnn - torch| / max(1, max |torch|)) before it is timed. Times are CUDA-graph
replays timed with triton.testing.do_bench (median), the timers of bench_gpu_layers.

    PYTHONPATH=src python benchmarks/sweep_pooling.py [--out DIR] [--only SUBSTRING] [--more]
    PYTHONPATH=src python benchmarks/sweep_pooling.py --dry-run   # CPU, interpreter, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import os
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
# VARIANTS fit the 90 s budget (30 rows, ~2 s of compiling each); --more adds MORE (tile settings of lower odds).
PHASES, SHIFT = [("CL_FUSED_MAX_BWD", "phases")], [("CL_FUSED_MAX_BWD", "shift")]
GAP = [("GLOBAL_AVG_KERNEL", True)]
NCHW_ALL = [("NCHW_ROW_KERNELS", frozenset({0, 1, 2, 3}))]
VARIANTS = {
    # channels-last row kernels: 4 output rows a program make 1792 programs, 3.4 waves of
    # 4 an SM (54 registers); 7 rows 1024 (5 an SM, 48 registers), 14 rows 512 (one wave)
    ("max fwd", "NHWC"): [("default", []), ("cl 7 rows", [("CL_ROWS", 7)]), ("cl 14 rows", [("CL_ROWS", 14)])],
    ("max bwd", "NHWC"): [("default (taps + gather)", []), ("cl 14 rows (taps + gather)", [("CL_ROWS", 14)]),
                          ("fused phases 2x16x64 mr128", PHASES),
                          ("fused phases 4x8x64 8w", PHASES + [("CL_FUSED_PHASES", 4), ("CL_FUSED_BLOCK_M", 8),
                                                               ("CL_FUSED_MAXNREG", None)]),
                          ("fused phases 7x4x64 4w", PHASES + [("CL_FUSED_PHASES", 7), ("CL_FUSED_BLOCK_M", 4),
                                                               ("CL_FUSED_WARPS", 4), ("CL_FUSED_MAXNREG", None)]),
                          ("fused shift 32x64 mr128", SHIFT)],
    ("avg fwd", "NHWC"): [("default", []), ("cl 7 rows", [("CL_ROWS", 7)]), ("cl 14 rows", [("CL_ROWS", 14)])],
    ("avg bwd", "NHWC"): [("default", []), ("cl 14 rows", [("CL_ROWS", 14)])],
    ("adaptive avg 1x1 fwd", "NHWC"): [("default (tensor_ops)", []), ("gap 32ch x 256", GAP),
                                       ("gap 64ch x 128", GAP + [("GLOBAL_AVG_NHWC", (64, 128, 8))])],
    ("adaptive avg 1x1 bwd", "NHWC"): [("default", [])],
    ("max fwd", "NCHW"): [("default", []), ("nchw 256 groups 8 warps", [("NCHW_GROUPS", 256), ("NCHW_WARPS", 8)])],
    ("max bwd", "NCHW"): [("default", []), ("nchw 256 groups 8 warps", [("NCHW_GROUPS", 256), ("NCHW_WARPS", 8)])],
    ("avg fwd", "NCHW"): [("default (row kernels)", []), ("nchw rows", NCHW_ALL)],
    ("avg bwd", "NCHW"): [("default (row kernels)", []), ("nchw rows", NCHW_ALL)],
    ("adaptive avg 1x1 fwd", "NCHW"): [("default (tensor_ops)", []), ("gap 4 planes x 1024", GAP),
                                       ("gap 8 planes x 512", GAP + [("GLOBAL_AVG_NCHW", (8, 512, 4))])],
    ("adaptive avg 1x1 bwd", "NCHW"): [("default", [])],
}
MORE = {
    ("max fwd", "NHWC"): [("cl 2 rows", [("CL_ROWS", 2)]), ("cl 4 warps", [("CL_WARPS", 4)]),
                          ("cl 16 cols 4 warps", [("CL_BLOCK_W", 16), ("CL_WARPS", 4)]),
                          ("cl packed max", [("CL_PACKED_MAX", True)])],
    ("max bwd", "NHWC"): [("cl 7 rows (taps + gather)", [("CL_ROWS", 7)]),
                          ("fused phases 2x16x64 8w", PHASES + [("CL_FUSED_MAXNREG", None)]),
                          ("fused phases 4x8x64 mr128", PHASES + [("CL_FUSED_PHASES", 4), ("CL_FUSED_BLOCK_M", 8)]),
                          ("fused phases 14 steps", PHASES + [("CL_FUSED_STEPS", 14)]),
                          ("fused phases 4 steps", PHASES + [("CL_FUSED_STEPS", 4)]),
                          ("fused phases 2x16x32 4w", PHASES + [("CL_FUSED_BLOCK_C", 32), ("CL_FUSED_WARPS", 4)]),
                          ("fused phases 2x16x64 mr96", PHASES + [("CL_FUSED_MAXNREG", 96)]),
                          ("fused shift 32x64 8w", SHIFT + [("CL_FUSED_MAXNREG", None)]),
                          ("fused shift 16x64 4w", SHIFT + [("CL_FUSED_BLOCK_J", 16), ("CL_FUSED_WARPS", 4),
                                                            ("CL_FUSED_MAXNREG", None)])],
    ("avg fwd", "NHWC"): [("cl 2 rows", [("CL_ROWS", 2)]), ("cl 4 warps", [("CL_WARPS", 4)])],
    ("avg bwd", "NHWC"): [("cl 2 rows", [("CL_ROWS", 2)]), ("cl 8 rows", [("CL_ROWS", 8)]),
                          ("cl 4 warps", [("CL_WARPS", 4)])],
    ("adaptive avg 1x1 fwd", "NHWC"): [("gap 16ch x 256 4 warps", GAP + [("GLOBAL_AVG_NHWC", (16, 256, 4))]),
                                       ("gap 32ch x 128 4 warps", GAP + [("GLOBAL_AVG_NHWC", (32, 128, 4))]),
                                       ("gap 64ch x 64 4 warps", GAP + [("GLOBAL_AVG_NHWC", (64, 64, 4))])],
    ("max fwd", "NCHW"): [("nchw 64 groups", [("NCHW_GROUPS", 64)]), ("nchw 8 steps", [("NCHW_STEPS", 8)])],
    ("max bwd", "NCHW"): [("nchw 64 groups", [("NCHW_GROUPS", 64)]), ("nchw 8 steps", [("NCHW_STEPS", 8)])],
    ("avg fwd", "NCHW"): [("row tile 2048", [("ROW_TILE", 2048)])],
    ("avg bwd", "NCHW"): [("row tile 2048", [("ROW_TILE", 2048)])],
    ("adaptive avg 1x1 fwd", "NCHW"): [("gap 1 plane x 4096 8 warps", GAP + [("GLOBAL_AVG_NCHW", (1, 4096, 8))]),
                                       ("gap 2 planes x 2048 8 warps", GAP + [("GLOBAL_AVG_NCHW", (2, 2048, 8))]),
                                       ("gap 4 planes x 512", GAP + [("GLOBAL_AVG_NCHW", (4, 512, 4))])],
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes: only checks it runs")
    ap.add_argument("--out", help="directory for sweep_pooling.json")
    ap.add_argument("--only", default="", help="rows whose 'layer layout variant' contains this")
    ap.add_argument("--more", action="store_true", help="also the MORE tile settings (past the 90 s budget)")
    args = ap.parse_args()
    timer = bgl.wall_time if DRY_RUN else bgl.graph_time
    t_start = time.time()
    copy = float("nan") if DRY_RUN else bgl.copy_bandwidth()
    print(f"copy {copy:.3f} TB/s (85%: {0.85 * copy:.3f}); {bgl.SPATIAL} {bgl.DT} on {bgl.DEVICE}", flush=True)
    rows = []
    for layout in ("NHWC", "NCHW"):
        for layer, tri, ref, moved, res in problems(layout):
            variants = VARIANTS[(layer, layout)] + (MORE.get((layer, layout), []) if args.more else [])
            variants = [(lab, s) for lab, s in variants if args.only in f"{layer} {layout} {lab}"]
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
                    row["err"] = bgl.rel_err(res, want)
                    row["ms"] = timer(fn, label)
                except Exception as exc:  # noqa: BLE001 - a broken variant is reported, not fatal
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    print(f"{layer:22s} {layout} {label:28s} FAILED {row['error']}", flush=True)
                    rows.append(row)
                    continue
                row["tbs"] = moved / row["ms"] / 1e9
                row["copy_share"] = row["tbs"] / copy
                row["torch_ms"] = ref_ms
                row["torch_tbs"] = moved / ref_ms / 1e9
                print(f"{layer:22s} {layout} {label:28s} {row['ms'] * 1e3:8.1f} us {row['tbs']:6.3f} TB/s "
                      f"err {row['err']:.2e}  ({time.time() - t_start:.0f} s)", flush=True)
                rows.append(row)
    # the table, last
    print(f"\ncopy {copy:.3f} TB/s, 85% line {0.85 * copy:.3f} TB/s; minimal bytes; torch on the same tensors")
    print(f"{'layer':22s} {'layout':6s} {'variant':28s} {'us':>8s} {'TB/s':>6s} {'%copy':>6s} "
          f"{'torch us':>9s} {'torch TB/s':>10s} {'err':>9s}")
    for r in rows:
        if "error" in r:
            print(f"{r['layer']:22s} {r['layout']:6s} {r['variant']:28s} FAILED {r['error']}")
            continue
        print(f"{r['layer']:22s} {r['layout']:6s} {r['variant']:28s} {r['ms'] * 1e3:8.1f} {r['tbs']:6.3f} "
              f"{100 * r['copy_share']:5.1f}% {r['torch_ms'] * 1e3:9.1f} {r['torch_tbs']:10.3f} {r['err']:9.2e}")
    print(f"({time.time() - t_start:.0f} s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep_pooling.json"), "w") as f:
            json.dump(dict(copy_tbs=copy, shape=list(bgl.SPATIAL), dtype=str(bgl.DT), device=bgl.DEVICE,
                           torch=torch.__version__, rows=rows), f, indent=1, default=str)


if __name__ == "__main__":
    main()
